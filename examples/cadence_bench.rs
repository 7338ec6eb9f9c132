//! Cost of the hang cadence estimate (`analysis::hang::cadence::estimate`), which `sf hang`
//! runs once and the exporter on every scrape whose calls changed: RANKS ranks holding
//! CALLS calls each (default 8 × 4,096, what the exporter's first scrape keeps), PER_STEP
//! allreduces of one size per step, 1 ms apart after 200 ms of forward pass, with a little
//! jitter: with 70 (the default) every period repeats and none up to 64 agrees, so every
//! candidate is timed (the costliest case, as in `examples/synth_logs`' jobs).
//!
//!     cargo run --release --example cadence_bench [-- RANKS CALLS PER_STEP]
//!
//! Prints the best and median of 21 estimates, wall time.

use std::time::Instant;

use stagefrontier::analysis::hang::cadence::estimate;
use stagefrontier::core::log::records::NcclCall;
use stagefrontier::core::log::synth::allreduce;

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("RANKS CALLS PER_STEP")).collect();
    let arg = |i: usize, default: usize| args.get(i).copied().unwrap_or(default);
    let (ranks, calls, per_step) = (arg(0, 8), arg(1, 4096), arg(2, 70).max(1));
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let logs: Vec<Vec<NcclCall>> = (0..ranks)
        .map(|_| {
            let mut t = 10_000_000u64;
            (1..=calls as u64)
                .map(|seq| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    t += if seq as usize % per_step == 1 { 200_000_000 } else { 1_000_000 } + rng % 100_000;
                    allreduce(0xc0ffee, seq, t, t + 1_000_000)
                })
                .collect()
        })
        .collect();
    let views: Vec<&[NcclCall]> = logs.iter().map(Vec::as_slice).collect();
    let mut times: Vec<f64> = (0..21)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(estimate(std::hint::black_box(&views)));
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let cadence = estimate(&views);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{ranks} ranks x {calls} calls, {per_step} per step: best {:.2} ms, median {:.2} ms (load average {}); {cadence:?}",
        times[0],
        times[times.len() / 2],
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
}
