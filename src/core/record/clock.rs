//! The hot path's clock: raw ticks now, nanoseconds later.
//!
//! Hooks read raw ticks only (the invariant TSC where the CPU has one, else
//! `CLOCK_MONOTONIC` through the vDSO); the collector and the reader convert ticks to
//! `CLOCK_MONOTONIC` nanoseconds with the calibration recorded in the log header, so no
//! conversion arithmetic runs inside an intercepted call.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Which counter `now_ticks` reads. Recorded in the log header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ClockSource {
    /// x86-64 time-stamp counter, used only when the CPU reports it constant and non-stop.
    Tsc = 1,
    /// `clock_gettime(CLOCK_MONOTONIC)`: ticks are nanoseconds.
    Monotonic = 2,
}

impl ClockSource {
    pub fn from_u32(raw: u32) -> Option<ClockSource> {
        match raw {
            1 => Some(ClockSource::Tsc),
            2 => Some(ClockSource::Monotonic),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ClockSource::Tsc => "tsc",
            ClockSource::Monotonic => "monotonic",
        }
    }
}

static SOURCE: AtomicU8 = AtomicU8::new(ClockSource::Monotonic as u8);

/// Raw ticks of the selected source. The only clock read allowed on the hot path.
#[inline(always)]
pub fn now_ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if SOURCE.load(Ordering::Relaxed) == ClockSource::Tsc as u8 {
        // SAFETY: rdtsc has no preconditions; `select` enables this branch only on CPUs
        // whose /proc/cpuinfo lists constant_tsc and nonstop_tsc.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    monotonic_ns()
}

pub fn monotonic_ns() -> u64 {
    read_clock(libc::CLOCK_MONOTONIC)
}

pub fn wall_ns() -> u64 {
    read_clock(libc::CLOCK_REALTIME)
}

fn read_clock(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// Maps raw ticks to `CLOCK_MONOTONIC` nanoseconds. Built once at init from a base pair and
/// a measured frequency; the collector refines the frequency as the base recedes.
#[derive(Debug)]
pub struct Calibration {
    pub source: ClockSource,
    pub base_ticks: u64,
    pub base_mono_ns: u64,
    pub base_wall_ns: u64,
    ticks_per_sec_bits: AtomicU64,
}

impl Calibration {
    pub fn new(source: ClockSource, base_ticks: u64, base_mono_ns: u64, base_wall_ns: u64, ticks_per_sec: f64) -> Self {
        Calibration {
            source,
            base_ticks,
            base_mono_ns,
            base_wall_ns,
            ticks_per_sec_bits: AtomicU64::new(ticks_per_sec.to_bits()),
        }
    }

    pub fn ticks_per_sec(&self) -> f64 {
        f64::from_bits(self.ticks_per_sec_bits.load(Ordering::Relaxed))
    }

    /// Re-measures the frequency over the whole span since the base pair: the longer the
    /// span, the smaller the error. Only meaningful for the TSC. It starts as soon as the
    /// span is 10x the start-up calibration's: the 1 ms figure is off by up to ~1e-3, which
    /// would put ticks converted in the job's first second tens to hundreds of µs away from
    /// `CLOCK_MONOTONIC`, where other sources' times (the CUDA door's) are placed.
    pub fn refine(&self) {
        if self.source != ClockSource::Tsc {
            return;
        }
        let (ticks, mono) = paired_reading();
        let span_ns = mono.saturating_sub(self.base_mono_ns);
        if span_ns >= 10_000_000 {
            let freq = ticks.saturating_sub(self.base_ticks) as f64 * 1e9 / span_ns as f64;
            self.ticks_per_sec_bits.store(freq.to_bits(), Ordering::Relaxed);
        }
    }

    pub fn to_mono_ns(&self, ticks: u64) -> u64 {
        ticks_to_mono_ns(ticks, self.base_ticks, self.base_mono_ns, self.ticks_per_sec())
    }
}

/// The conversion both the collector and the reader use.
pub fn ticks_to_mono_ns(ticks: u64, base_ticks: u64, base_mono_ns: u64, ticks_per_sec: f64) -> u64 {
    let delta = ticks as i128 - base_ticks as i128;
    // Saturating throughout: the reader feeds this ticks and a rate read from a file.
    let delta_ns = (delta as f64 * 1e9 / ticks_per_sec) as i128;
    (base_mono_ns as i128).saturating_add(delta_ns).clamp(0, u64::MAX as i128) as u64
}

/// Chooses the source for this process and measures it. Called once at init; the TSC
/// calibration spins for about 1 ms, well under what an NCCL init costs; the collector
/// refines it as the job runs.
pub fn select(prefer_tsc: bool) -> Calibration {
    let source = if prefer_tsc && tsc_is_invariant() { ClockSource::Tsc } else { ClockSource::Monotonic };
    SOURCE.store(source as u8, Ordering::Relaxed);
    let (base_ticks, base_mono_ns) = paired_reading();
    let base_wall_ns = wall_ns();
    let ticks_per_sec = match source {
        ClockSource::Monotonic => 1e9,
        ClockSource::Tsc => {
            let mut end = paired_reading();
            while end.1 - base_mono_ns < 1_000_000 {
                end = paired_reading();
            }
            (end.0 - base_ticks) as f64 * 1e9 / (end.1 - base_mono_ns) as f64
        }
    };
    Calibration::new(source, base_ticks, base_mono_ns, base_wall_ns, ticks_per_sec)
}

/// Ticks and `CLOCK_MONOTONIC` read as one instant: the monotonic read is bracketed by two
/// tick reads, and a bracket that a preemption or interrupt widened is read again. An
/// unbracketed pair is off by however long the thread was away between the two reads,
/// which on a loaded machine can be milliseconds and would skew every duration after.
fn paired_reading() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..64 {
        let before = now_ticks();
        let mono = monotonic_ns();
        let after = now_ticks();
        let width = after.wrapping_sub(before);
        if width < best.0 {
            best = (width, before + width / 2, mono);
        }
        if width < 2_000 {
            break;
        }
    }
    (best.1, best.2)
}

fn tsc_is_invariant() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    let Ok(cpuinfo) = std::fs::read_to_string("/proc/cpuinfo") else {
        return false;
    };
    let flags = cpuinfo.lines().find(|l| l.starts_with("flags")).unwrap_or("");
    let has = |flag: &str| flags.split_whitespace().any(|f| f == flag);
    has("constant_tsc") && has("nonstop_tsc")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversion_is_linear_around_the_base() {
        assert_eq!(ticks_to_mono_ns(3_000, 1_000, 500, 2e9), 500 + 1_000);
        assert_eq!(ticks_to_mono_ns(0, 1_000, 5_000, 1e9), 4_000);
        assert_eq!(ticks_to_mono_ns(0, 10_000, 5, 1e9), 0, "clamps before the epoch");
    }

    #[test]
    fn selected_clock_tracks_monotonic_time() {
        let cal = select(true);
        let t0 = now_ticks();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let elapsed = cal.to_mono_ns(now_ticks()) as i64 - cal.to_mono_ns(t0) as i64;
        assert!((15_000_000..200_000_000).contains(&elapsed), "elapsed {elapsed} ns");
    }

    #[test]
    fn refining_early_brings_converted_ticks_back_to_monotonic_time() {
        let selected = select(true);
        if selected.source != ClockSource::Tsc {
            return; // no invariant TSC: ticks are CLOCK_MONOTONIC already
        }
        // A start-up figure 1% off: 300 µs off after 30 ms.
        let (base_ticks, base_mono) = (selected.base_ticks, selected.base_mono_ns);
        let cal = Calibration::new(ClockSource::Tsc, base_ticks, base_mono, 0, selected.ticks_per_sec() * 1.01);
        std::thread::sleep(std::time::Duration::from_millis(30));
        cal.refine();
        let (ticks, mono) = paired_reading();
        let error_ns = cal.to_mono_ns(ticks) as i64 - mono as i64;
        assert!(error_ns.abs() < 50_000, "{error_ns} ns from CLOCK_MONOTONIC after refining");
    }
}
