//! The collector's view of RDMA work requests (docs/network.md "RDMA work requests"): each round it
//! reads `core::work_requests`' table and writes, per queue pair,
//!
//! - `qp_stuck` when the oldest work request in flight is older than `SF_WR_TIMEOUT_MS`
//!   (VenusTrace's 500 ms WR timeout), with one stderr line, once per episode: the episode
//!   ends when the QP completes past that request or drains;
//! - `qp_degraded` when the sliding-window bandwidth (last `SF_WR_WINDOW` completions,
//!   bytes over busy time, see `work_requests`) is more than `SF_WR_DEGRADED` below the
//!   QP's baseline in `DEGRADED_WINDOWS` consecutive evaluations, once per episode: the
//!   episode ends at the first evaluation back above the threshold. An evaluation happens
//!   in a round where at least a whole window of new completions arrived since the last
//!   one, so consecutive evaluations never share a completion; the baseline is the median
//!   of the QP's first `BASELINE_WINDOWS` evaluations;
//! - `qp_window` every `SF_NET_SAMPLE_MS`, and at exit, for each QP with activity since the
//!   last sample or work in flight.
//!
//! Memory is fixed: one small watch per table slot, allocated when the first QP appears.

use crate::core::live::runtime::Runtime;
use crate::core::log::records::{QpDegraded, QpStuck, QpWindow, RecordBody};
use crate::core::log::records_net::WrSource;
use crate::core::log::writer::LogWriter;
use crate::core::net::proxy_progress::{self, ProxyLink};
use crate::core::net::work_requests::{self, QpCounters, QpEntry, QpKey, WrTable, QP_CAPACITY};
use crate::core::record::clock::now_ticks;
use crate::core::record::notice::say;

/// Evaluations whose median is the baseline.
pub const BASELINE_WINDOWS: usize = 5;
/// Consecutive evaluations below the threshold that open a degraded episode: one slow
/// window (a descheduled proxy thread) is not a degraded link.
pub const DEGRADED_WINDOWS: u16 = 2;

/// The baseline: the median of a QP's first `BASELINE_WINDOWS` window bandwidths.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Baseline {
    samples: [f64; BASELINE_WINDOWS],
    n: usize,
}

impl Baseline {
    /// Offers one evaluated window; returns false once the baseline is complete (the
    /// window is then for comparison, not for the baseline).
    pub fn offer(&mut self, bps: f64) -> bool {
        if self.n == BASELINE_WINDOWS {
            return false;
        }
        self.samples[self.n] = bps;
        self.n += 1;
        true
    }

    pub fn value(&self) -> Option<f64> {
        (self.n == BASELINE_WINDOWS).then(|| {
            let mut s = self.samples;
            s.sort_unstable_by(f64::total_cmp);
            s[BASELINE_WINDOWS / 2]
        })
    }
}

/// The degraded-episode state machine of one QP, over evaluated windows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Degradation {
    pub baseline: Baseline,
    /// Consecutive evaluations below the threshold.
    pub below: u16,
    pub open: bool,
}

impl Degradation {
    /// One evaluated window's bandwidth; true when it opens a degraded episode.
    pub fn evaluate(&mut self, bps: f64, fraction: f64) -> bool {
        if self.baseline.offer(bps) {
            return false;
        }
        let Some(baseline) = self.baseline.value() else { return false };
        if bps < (1.0 - fraction) * baseline {
            self.below = self.below.saturating_add(1);
            if self.below >= DEGRADED_WINDOWS && !self.open {
                self.open = true;
                return true;
            }
        } else {
            self.below = 0;
            self.open = false;
        }
        false
    }
}

/// The stuck-episode state machine of one QP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stuck {
    /// The completion count when the open episode began.
    pub at_completed: Option<u64>,
}

impl Stuck {
    /// True when a new episode opens: the oldest request in flight (posted at
    /// `oldest_post_ns`) is older than the timeout and no episode is open. An episode ends
    /// when the QP completes anything or drains.
    pub fn check(&mut self, now_ns: u64, oldest_post_ns: Option<u64>, completed: u64, timeout_ns: u64) -> bool {
        if self.at_completed.is_some_and(|c| completed > c) || oldest_post_ns.is_none() {
            self.at_completed = None;
        }
        let late = oldest_post_ns.is_some_and(|t| now_ns.saturating_sub(t) > timeout_ns);
        if late && self.at_completed.is_none() {
            self.at_completed = Some(completed);
            return true;
        }
        false
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct QpWatch {
    stuck: Stuck,
    degradation: Degradation,
    /// Completion count at the last evaluated window.
    evaluated_at: u64,
    /// Counters at the last `qp_window` sample.
    sampled: QpCounters,
}

#[derive(Default)]
pub struct QpMonitor {
    watches: Vec<QpWatch>,
    next_sample_ns: u64,
}

/// The monitor's settings, from the config the collector holds.
#[derive(Clone, Copy, Debug)]
pub struct QpSettings {
    /// SF_WR_TIMEOUT_MS: no completion for this long with work in flight is stuck.
    pub timeout_ms: u64,
    /// SF_WR_WINDOW: completions in the sliding window.
    pub window: usize,
    /// SF_WR_DEGRADED: window bandwidth this fraction below the QP's baseline is degraded.
    pub degraded: f64,
    /// SF_NET_SAMPLE_MS: period of the `qp_window` samples.
    pub sample_ms: u64,
}

impl QpMonitor {
    /// One collector round: stuck and degraded checks every round, a sample when due.
    pub fn round(&mut self, rt: &Runtime, settings: &QpSettings, writer: &mut LogWriter) {
        let table = work_requests::table();
        if table.qps().next().is_none() {
            return;
        }
        if self.watches.is_empty() {
            self.watches = vec![QpWatch::default(); QP_CAPACITY];
        }
        let cal = &rt.calibration;
        let now_ns = cal.to_mono_ns(now_ticks());
        let (timeout_ns, window, fraction) = (settings.timeout_ms * 1_000_000, settings.window, settings.degraded);
        for (i, key, entry) in reported(table) {
            let watch = &mut self.watches[i];
            let c = entry.counters();
            let oldest_ns = entry.oldest_in_flight().map(|t| cal.to_mono_ns(t));
            if watch.stuck.check(now_ns, oldest_ns, c.completed, timeout_ns) {
                let since_ns = oldest_ns.unwrap_or(now_ns);
                writer.append(&RecordBody::QpStuck(QpStuck {
                    t_ns: now_ns,
                    source: key.source,
                    device: key.device,
                    qp_num: key.qp_num,
                    since_ns,
                    timeout_ns,
                    posted: c.posted,
                    completed: c.completed,
                    in_flight: clamp32(c.in_flight()),
                }));
                say(&format!(
                    "rank {}: {} has had a work request in flight for {:.3} s (timeout {:.3} s, {} in flight); qp_stuck evidence is in the rank's log",
                    rt.global_rank(),
                    describe(key),
                    now_ns.saturating_sub(since_ns) as f64 / 1e9,
                    timeout_ns as f64 / 1e9,
                    c.in_flight()
                ));
            }
            if c.completed >= watch.evaluated_at + window as u64 {
                watch.evaluated_at = c.completed;
                let w = entry.window(window);
                if let (true, Some(bps)) = (w.n == window, w.bandwidth(cal.ticks_per_sec())) {
                    if watch.degradation.evaluate(bps, fraction) {
                        let baseline = watch.degradation.baseline.value().unwrap_or(0.0);
                        writer.append(&RecordBody::QpDegraded(QpDegraded {
                            t_ns: now_ns,
                            source: key.source,
                            device: key.device,
                            qp_num: key.qp_num,
                            window_bps: bps as u64,
                            baseline_bps: baseline as u64,
                            threshold: fraction,
                            window_n: w.n as u16,
                            windows: watch.degradation.below,
                            posted: c.posted,
                            completed: c.completed,
                        }));
                        // Only its own start to compare with: a loaded host looks the
                        // same. `sf net` compares it with its peers before calling the link
                        // degraded, so this line does not.
                        say(&format!(
                            "rank {}: {} is slower than its own start: {:.3} GB/s over its last {} work requests, {:.0}% below its first windows' {:.3} GB/s; qp_degraded evidence is in the rank's log, and sf net DIR says whether it is slower than its peers too (a degraded link)",
                            rt.global_rank(),
                            describe(key),
                            bps / 1e9,
                            w.n,
                            (1.0 - bps / baseline) * 100.0,
                            baseline / 1e9
                        ));
                    }
                }
            }
        }
        if now_ns >= self.next_sample_ns {
            self.sample(rt, settings, writer);
        }
    }

    /// Writes a `qp_window` for every QP with activity since its last sample or work in
    /// flight. The collector calls it at exit too, so a run's totals are in the log.
    pub fn sample(&mut self, rt: &Runtime, settings: &QpSettings, writer: &mut LogWriter) {
        let table = work_requests::table();
        if self.watches.is_empty() {
            return;
        }
        let cal = &rt.calibration;
        let tps = cal.ticks_per_sec();
        let ticks_ns = |ticks: u64| (ticks as f64 * 1e9 / tps) as u64;
        let now_ns = cal.to_mono_ns(now_ticks());
        self.next_sample_ns = now_ns + settings.sample_ms * 1_000_000;
        let dropped = clamp32(table.dropped());
        for (i, key, entry) in reported(table) {
            let watch = &mut self.watches[i];
            let c = entry.counters();
            let before = watch.sampled;
            if c == before && c.in_flight() == 0 {
                continue;
            }
            watch.sampled = c;
            let latency_n = c.latency_count - before.latency_count;
            let w = entry.window(settings.window);
            writer.append(&RecordBody::QpWindow(QpWindow {
                t_ns: now_ns,
                source: key.source,
                device: key.device,
                qp_num: key.qp_num,
                posted: c.posted,
                completed: c.completed,
                in_flight: clamp32(c.in_flight()),
                errors: clamp32(c.errors),
                bytes_posted: c.bytes_posted,
                bytes_completed: c.bytes_completed,
                latency_n: clamp32(latency_n),
                latency_mean_ns: ticks_ns((c.latency_sum - before.latency_sum).checked_div(latency_n).unwrap_or(0)),
                latency_max_ns: ticks_ns(entry.take_recent_latency_max()),
                window_bps: w.bandwidth(tps).unwrap_or(0.0) as u64,
                window_n: w.n as u16,
                baseline_bps: watch.degradation.baseline.value().unwrap_or(0.0) as u64,
                stuck: watch.stuck.at_completed.is_some(),
                degraded: watch.degradation.open,
                table_dropped: dropped,
            }));
        }
    }
}

/// The table's QPs the monitor judges: proxy links only while no QP event arrived, so a
/// NET_PROFILER build's transfers are not reported twice.
fn reported<const N: usize>(table: &WrTable<N>) -> impl Iterator<Item = (usize, QpKey, &QpEntry)> {
    let skip_proxy = proxy_progress::superseded();
    table.qps().filter(move |(_, key, _)| !(skip_proxy && key.source == WrSource::Proxy))
}

fn clamp32(v: u64) -> u32 {
    v.min(u32::MAX as u64) as u32
}

fn describe(key: QpKey) -> String {
    match ProxyLink::of(key.source, key.device, key.qp_num) {
        Some(link) => link.describe(),
        None => format!("QP {:#x} ({} door, device {})", key.qp_num, key.source.name(), key.device),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_baseline_is_the_median_of_the_first_windows() {
        let mut b = Baseline::default();
        for bps in [10.0, 50.0, 30.0, 20.0] {
            assert!(b.offer(bps));
            assert_eq!(b.value(), None, "not yet");
        }
        assert!(b.offer(40.0));
        assert_eq!(b.value(), Some(30.0), "a single outlier (50) does not move it");
        assert!(!b.offer(1.0), "complete: later windows are compared, not taken");
        assert_eq!(b.value(), Some(30.0));
    }

    #[test]
    fn degraded_opens_after_consecutive_slow_windows_once_per_episode() {
        let mut d = Degradation::default();
        for _ in 0..BASELINE_WINDOWS {
            assert!(!d.evaluate(100.0, 0.2));
        }
        assert!(!d.evaluate(85.0, 0.2), "15% below is within the threshold");
        assert!(!d.evaluate(50.0, 0.2), "one slow window is not an episode");
        assert!(!d.evaluate(90.0, 0.2), "and it resets");
        assert!(!d.evaluate(79.0, 0.2));
        assert!(d.evaluate(60.0, 0.2), "two in a row open the episode");
        assert!(!d.evaluate(40.0, 0.2), "reported once per episode");
        assert!(d.open);
        assert!(!d.evaluate(95.0, 0.2), "recovered: the episode ends");
        assert!(!d.open);
        assert!(!d.evaluate(10.0, 0.2));
        assert!(d.evaluate(10.0, 0.2), "a new episode is reported again");
    }

    #[test]
    fn stuck_once_per_episode_until_progress_or_drain() {
        let mut s = Stuck::default();
        let timeout = 500;
        assert!(!s.check(1_000, None, 0, timeout), "nothing in flight");
        assert!(!s.check(1_000, Some(600), 0, timeout), "400 old: not yet");
        assert!(s.check(1_200, Some(600), 0, timeout), "600 old");
        assert!(!s.check(5_000, Some(600), 0, timeout), "same episode");
        // Completions resume: the episode ends; the next late request is a new one.
        assert!(!s.check(5_100, Some(5_000), 3, timeout));
        assert_eq!(s.at_completed, None);
        assert!(s.check(6_000, Some(5_000), 3, timeout));
        assert!(!s.check(6_100, None, 4, timeout), "drained");
        assert_eq!(s.at_completed, None);
    }
}
