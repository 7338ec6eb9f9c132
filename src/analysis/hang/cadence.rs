//! How long a step of this job takes, from its own collective cadence: no stage markers
//! needed.
//!
//! A training job issues the same collectives every step. On its busiest communicator the
//! sequence of (op, count, dtype) repeats with a period of P collectives, and
//! `t_enter[s + P] - t_enter[s]` is one step whichever collective s it starts from. The
//! period is the smallest P for which
//!
//! 1. the pattern repeats, allowing 2% (then, failing that, 20%) of irregular collectives
//!    (evaluation, checkpoints, a first step that differs), and
//! 2. the steps it measures agree: their 1st and 99th percentiles are within a factor of
//!    two of their median, leaving out at least the P shortest and P longest (one late
//!    step shifts the P measurements that span it).
//!
//! (2) is what makes it robust. A job whose gradient buckets are all the same size repeats
//! (op, count) with period 1, but the time between two of them alternates between a short
//! backward slice and the long forward pass: period 1 would measure a bucket, not a step,
//! and set a threshold that healthy skew crosses. The step is then the median of the
//! measured steps over the newest collectives of every sampled rank, so one slow step or
//! one straggling rank does not move it.
//!
//! A median says nothing of the tail, and the tail is what a healthy snapshot shows at
//! its worst: a crowded host deschedules a rank for longer than a fast job's step, a
//! checkpoint holds one rank up every few hundred steps. So the same window also yields
//! the longest call (how long a healthy rank waited inside NCCL) and the longest gap
//! between two calls of a thread (how long a healthy rank went without NCCL), leaving out
//! the first two steps it holds, which may be the job's warm-up. A hang is a wait or a
//! silence longer than the job has ever shown, so the threshold scales the largest of the
//! three.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Settings;
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::records::NcclCall;

/// Newest collectives per rank the estimate looks at: a few hundred steps of any job.
const WINDOW: usize = 8192;
/// Longest period searched: collectives per step on the busiest communicator.
const MAX_PERIOD: usize = 2048;
/// Ranks sampled, the first in input order: more add time, not accuracy.
const MAX_RANKS: usize = 64;
/// Newest steps measured per rank and period.
const STEPS_PER_RANK: usize = 1024;
/// Irregular collectives tolerated, strict first.
const TOLERANCES: [f64; 2] = [0.02, 0.2];
/// Periods whose steps are timed per tolerance before giving up.
const MAX_TIMED_PERIODS: usize = 64;
/// Largest ratio of the 99th percentile of the measured steps to their median, and of
/// their median to the 1st percentile.
const MAX_SPREAD: u64 = 2;

/// The job's cadence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Cadence {
    /// The communicator it was measured on: the one with the most collectives.
    pub comm_id: u64,
    /// Collectives per step on it.
    pub period: usize,
    /// Median step time.
    pub step_ns: u64,
    /// Steps measured.
    pub samples: usize,
    /// The longest any call took, in the sampled ranks' recent history.
    pub longest_call_ns: u64,
    /// The longest any thread went between two calls, in the same history.
    pub longest_gap_ns: u64,
}

impl Cadence {
    /// What the threshold scales: a healthy job has waited and gone silent this long.
    pub fn pace_ns(&self) -> u64 {
        self.step_ns.max(self.longest_call_ns).max(self.longest_gap_ns)
    }
}

/// When a wait or a silence counts as stuck.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Threshold {
    /// `None`: too few steps in the logs to estimate one.
    pub cadence: Option<Cadence>,
    pub factor: f64,
    pub min_stuck_ns: u64,
    pub fallback_stuck_ns: u64,
    /// `max(min_stuck_ns, factor x max(step, longest call, longest gap))`, or
    /// `max(min_stuck_ns, fallback_stuck_ns)` without a cadence.
    pub threshold_ns: u64,
}

impl Threshold {
    pub fn new(cadence: Option<Cadence>, settings: &Settings) -> Threshold {
        let scaled = match cadence {
            Some(c) => (c.pace_ns() as f64 * settings.factor).min(u64::MAX as f64) as u64,
            None => settings.fallback_stuck_ns,
        };
        Threshold {
            cadence,
            factor: settings.factor,
            min_stuck_ns: settings.min_stuck_ns,
            fallback_stuck_ns: settings.fallback_stuck_ns,
            threshold_ns: scaled.max(settings.min_stuck_ns),
        }
    }
}

type Key = (NcclOp, u64, i32);

/// One rank's newest collectives on a communicator, indexed by sequence number.
struct Series {
    keys: Vec<Option<Key>>,
    t_enter: Vec<Option<u64>>,
}

impl Series {
    fn new(calls: &[NcclCall], comm_id: u64) -> Series {
        let mut by_seq: Vec<&NcclCall> =
            calls.iter().filter(|c| c.comm_id == comm_id && c.seq != 0 && c.op.is_collective()).collect();
        // Calls come in sequence order, so the sort only checks it (a map cost a search
        // per call on every scrape). It is stable, and one process may hold several ranks
        // of a communicator: the first call of each sequence number is kept.
        by_seq.sort_by_key(|c| c.seq);
        by_seq.dedup_by_key(|c| c.seq);
        let newest = by_seq.last().map_or(0, |c| c.seq);
        let from = by_seq.partition_point(|c| c.seq + WINDOW as u64 <= newest);
        let first = by_seq.get(from).map_or(newest, |c| c.seq);
        let len = if by_seq.is_empty() { 0 } else { (newest - first + 1) as usize };
        let mut series = Series { keys: vec![None; len], t_enter: vec![None; len] };
        for c in &by_seq[from..] {
            let i = (c.seq - first) as usize;
            series.keys[i] = Some((c.op, c.count, c.dtype));
            series.t_enter[i] = Some(c.t_enter_ns);
        }
        series
    }

    fn held(&self) -> usize {
        self.keys.iter().filter(|k| k.is_some()).count()
    }

    /// Whether the pattern repeats with period `p` up to `tolerance`, compared over at
    /// least one whole period.
    fn repeats(&self, p: usize, tolerance: f64) -> bool {
        let allowed = tolerance * self.keys.len().saturating_sub(p) as f64;
        let (mut pairs, mut differ) = (0usize, 0usize);
        for (a, b) in self.keys.iter().zip(&self.keys[p..]) {
            if let (Some(a), Some(b)) = (a, b) {
                pairs += 1;
                if a != b {
                    differ += 1;
                    if differ as f64 > allowed {
                        return false;
                    }
                }
            }
        }
        pairs >= p && differ as f64 <= tolerance * pairs as f64
    }

    /// When the collective `skip` places into the window entered, or the window's last.
    fn entered_after(&self, skip: usize) -> Option<u64> {
        self.t_enter
            .iter()
            .skip(skip)
            .flatten()
            .next()
            .copied()
            .or_else(|| self.t_enter.iter().flatten().last().copied())
    }

    fn steps(&self, p: usize, out: &mut Vec<u64>) {
        let starts = self.t_enter.len().saturating_sub(p);
        let from = starts.saturating_sub(STEPS_PER_RANK);
        for i in from..starts {
            if let (Some(a), Some(b)) = (self.t_enter[i], self.t_enter[i + p]) {
                out.push(b.saturating_sub(a));
            }
        }
    }
}

/// The communicator with the most collective records across ranks (the lowest id on a tie).
fn busiest_comm(ranks: &[&[NcclCall]]) -> Option<u64> {
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for c in ranks.iter().flat_map(|calls| calls.iter()) {
        if c.comm_id != 0 && c.seq != 0 && c.op.is_collective() {
            *counts.entry(c.comm_id).or_default() += 1;
        }
    }
    counts.into_iter().max_by_key(|&(id, n)| (n, std::cmp::Reverse(id))).map(|(id, _)| id)
}

/// The median step if the steps measured with period `p` agree (see the module doc), with
/// how many were measured.
fn agreeing_median(mut steps: Vec<u64>, p: usize) -> Option<(u64, usize)> {
    if steps.is_empty() {
        return None;
    }
    let n = steps.len();
    // In a short history the percentiles would be the extremes: one late step must not
    // hide the cadence.
    let (at_p1, at_median, at_p99) =
        ((n / 100).max(p).min(n - 1), (n - 1) / 2, (n * 99 / 100).min(n.saturating_sub(p + 1)));
    // The median selected in linear time, and the two percentiles judged by counting
    // rather than sorted for (the exporter estimates the cadence on every scrape): the
    // value at sorted index k is at most t exactly when more than k values are, and at
    // least t exactly when at most k values are below t. So p99 <= 2 x median and
    // median <= 2 x p1, as before.
    let median = *steps.select_nth_unstable(at_median).1;
    let (high, low) = (median.saturating_mul(MAX_SPREAD), median.div_ceil(MAX_SPREAD));
    let (mut at_most_high, mut below_low) = (0usize, 0usize);
    for &v in &steps {
        at_most_high += usize::from(v <= high);
        below_low += usize::from(v < low);
    }
    let agree = at_most_high > at_p99 && below_low <= at_p1;
    (median > 0 && agree).then_some((median, n))
}

/// The longest call and the longest gap between two calls of a thread among `calls`
/// entered from `from_ns` on.
fn longest_call_and_gap(calls: &[NcclCall], from_ns: u64) -> (u64, u64) {
    let (mut call, mut gap) = (0, 0);
    let mut last_exit_by_thread: BTreeMap<u32, u64> = BTreeMap::new();
    for c in calls.iter().filter(|c| c.t_enter_ns >= from_ns) {
        call = call.max(c.t_exit_ns.saturating_sub(c.t_enter_ns));
        if let Some(exit) = last_exit_by_thread.insert(c.tid, c.t_exit_ns) {
            gap = gap.max(c.t_enter_ns.saturating_sub(exit));
        }
    }
    (call, gap)
}

/// A rank's calls and its series of one communicator's collectives.
type RankSeries<'a> = (&'a [NcclCall], Series);

/// The busiest communicator, and each rank's series of its collectives (ranks holding
/// none left out, at most `MAX_RANKS`).
fn rank_series<'a>(ranks: &[&'a [NcclCall]]) -> Option<(u64, Vec<RankSeries<'a>>)> {
    let comm_id = busiest_comm(ranks)?;
    let series = ranks
        .iter()
        .map(|calls| (*calls, Series::new(calls, comm_id)))
        .filter(|(_, s)| s.held() > 0)
        .take(MAX_RANKS)
        .collect();
    Some((comm_id, series))
}

/// The job's cadence from each rank's `nccl_call` records; `None` when they hold fewer than
/// two steps or no regular pattern.
pub fn estimate(ranks: &[&[NcclCall]]) -> Option<Cadence> {
    let (comm_id, series) = rank_series(ranks)?;
    // The pattern is the same on every rank: read it from the one holding the most.
    let source = &series.iter().rev().max_by_key(|(_, s)| s.held())?.1;
    // Periods timed whose steps did not agree, ascending. A period that repeats under a
    // tolerance repeats under a looser one, and its steps are the same whatever the
    // tolerance: a looser pass finds it again without comparing the pattern and skips
    // timing it (a job of identical collectives, whose every period repeats, timed the
    // same periods twice).
    let mut disagreed: Vec<usize> = Vec::new();
    for tolerance in TOLERANCES {
        // Those of the passes before (at most 64 each).
        let before = disagreed.clone();
        let periods = (1..=MAX_PERIOD.min(source.keys.len() / 2))
            .filter(|p| before.binary_search(p).is_ok() || source.repeats(*p, tolerance));
        for p in periods.take(MAX_TIMED_PERIODS) {
            if before.binary_search(&p).is_ok() {
                continue;
            }
            if let Some(cadence) = timed(comm_id, &series, p) {
                return Some(cadence);
            }
            if let Err(at) = disagreed.binary_search(&p) {
                disagreed.insert(at, p);
            }
        }
    }
    None
}

/// The cadence of period `p` when the steps it measures on every rank agree.
fn timed(comm_id: u64, series: &[RankSeries], p: usize) -> Option<Cadence> {
    let mut steps = Vec::new();
    for (_, s) in series {
        s.steps(p, &mut steps);
    }
    let (step_ns, samples) = agreeing_median(steps, p)?;
    let (mut longest_call_ns, mut longest_gap_ns) = (0, 0);
    for (calls, s) in series {
        let from = s.entered_after(2 * p).unwrap_or(u64::MAX);
        let (call, gap) = longest_call_and_gap(calls, from);
        (longest_call_ns, longest_gap_ns) = (longest_call_ns.max(call), longest_gap_ns.max(gap));
    }
    Some(Cadence { comm_id, period: p, step_ns, samples, longest_call_ns, longest_gap_ns })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::hang::testkit::*;

    const MS: u64 = 1_000_000;

    /// The percentiles by sorting, as the estimate first took them.
    fn agreeing_median_by_sorting(mut steps: Vec<u64>, p: usize) -> Option<(u64, usize)> {
        if steps.is_empty() {
            return None;
        }
        steps.sort_unstable();
        let n = steps.len();
        let p1 = steps[(n / 100).max(p).min(n - 1)];
        let p99 = steps[(n * 99 / 100).min(n.saturating_sub(p + 1))];
        let median = steps[(n - 1) / 2];
        let agree = p99 <= median.saturating_mul(MAX_SPREAD) && median <= p1.saturating_mul(MAX_SPREAD);
        (median > 0 && agree).then_some((median, n))
    }

    #[test]
    fn counting_the_percentiles_agrees_with_sorting() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut agreed = 0;
        for case in 0..4000 {
            let n = (next() % 300) as usize;
            let p = (next() % 8) as usize + 1;
            let base = next() % 1000;
            let steps: Vec<u64> = (0..n)
                .map(|_| match case % 4 {
                    0 => base + next() % (base / 2 + 1),
                    1 => next() % 7,
                    2 => u64::MAX - next() % 3,
                    _ => base * (1 + next() % 3),
                })
                .collect();
            let want = agreeing_median_by_sorting(steps.clone(), p);
            agreed += usize::from(want.is_some());
            assert_eq!(agreeing_median(steps.clone(), p), want, "{steps:?} p={p}");
        }
        assert!(agreed > 500, "{agreed}");
    }

    /// A DDP-like rank: a broadcast, then per step `compute_ms` of forward pass and the
    /// collectives of `pattern`, `gap_ms` apart.
    fn job(steps: u64, pattern: &[(NcclOp, u64)], compute_ms: u64, gap_ms: u64) -> Vec<NcclCall> {
        let mut calls = vec![coll(WORLD, 1, NcclOp::Broadcast, MS)];
        let mut t = 10 * MS;
        for _ in 0..steps {
            t += compute_ms * MS;
            for &(op, count) in pattern {
                calls.push(NcclCall { count, ..coll(WORLD, calls.len() as u64 + 1, op, t) });
                t += gap_ms * MS;
            }
        }
        calls
    }

    /// Four buckets of different sizes and a loss allgather: 110 ms steps.
    fn ddp(steps: u64) -> Vec<NcclCall> {
        let pattern = [1000, 1001, 1002, 1003].map(|count| (NcclOp::AllReduce, count));
        job(steps, &[&pattern[..], &[(NcclOp::AllGather, 1)]].concat(), 60, 10)
    }

    #[test]
    fn the_step_of_a_ddp_job() {
        let calls = ddp(20);
        let c = estimate(&[&calls, &calls]).unwrap();
        assert_eq!((c.comm_id, c.period, c.step_ns), (WORLD, 5, 110 * MS));
        assert!(c.samples >= 2 * 15, "{c:?}");

        // One step a second late, in a history of twenty.
        let mut late = ddp(20);
        for c in &mut late[50..] {
            (c.t_enter_ns, c.t_exit_ns) = (c.t_enter_ns + SEC, c.t_exit_ns + SEC);
        }
        assert_eq!(estimate(&[&late]).map(|c| (c.period, c.step_ns)), Some((5, 110 * MS)));
    }

    #[test]
    fn equal_buckets_do_not_pass_for_a_step() {
        // Period 1 repeats (op, count) but measures a 2 ms bucket, period 11 measures
        // 22 ms or 82 ms; the step is 20 equal buckets after 60 ms of forward pass.
        let calls = job(30, &[(NcclOp::AllReduce, 4096); 20], 60, 2);
        let c = estimate(&[&calls]).unwrap();
        assert_eq!((c.period, c.step_ns), (20, 100 * MS));
    }

    /// The estimate as it was before the loose pass skipped the periods the strict one had
    /// timed: every pass times every period that repeats under its tolerance.
    fn estimate_timing_every_pass(ranks: &[&[NcclCall]]) -> Option<Cadence> {
        let (comm_id, series) = rank_series(ranks)?;
        let source = &series.iter().rev().max_by_key(|(_, s)| s.held())?.1;
        for tolerance in TOLERANCES {
            let periods = (1..=MAX_PERIOD.min(source.keys.len() / 2)).filter(|&p| source.repeats(p, tolerance));
            for p in periods.take(MAX_TIMED_PERIODS) {
                if let Some(cadence) = timed(comm_id, &series, p) {
                    return Some(cadence);
                }
            }
        }
        None
    }

    #[test]
    fn skipping_periods_timed_before_changes_no_estimate() {
        let mut jobs = vec![
            ddp(40),
            // Identical collectives: every period repeats under both tolerances; 70 per
            // step is past the periods timed, 40 and 20 are not.
            job(120, &[(NcclOp::AllReduce, 4096); 70], 60, 2),
            job(120, &[(NcclOp::AllReduce, 4096); 40], 60, 2),
            job(30, &[(NcclOp::AllReduce, 4096); 20], 60, 2),
        ];
        // Irregular collectives past the strict tolerance: found by the loose pass only,
        // after it finds the strict pass's periods again.
        let mut loose = ddp(60);
        for step in (0..60).step_by(5) {
            loose[step * 5 + 2].count = 7 + step as u64;
        }
        jobs.push(loose);
        let mut found = 0;
        for calls in &jobs {
            let want = estimate_timing_every_pass(&[calls, calls]);
            found += usize::from(want.is_some());
            assert_eq!(estimate(&[calls, calls]), want);
        }
        assert!(found >= 3, "{found}");
    }

    #[test]
    fn irregular_collectives_and_jitter_are_tolerated() {
        let mut calls = ddp(40);
        // Jitter: every step a few ms longer or shorter, deterministically.
        for (i, c) in calls.iter_mut().enumerate() {
            c.t_enter_ns += (i as u64 * 7919 % 13) * MS;
        }
        // An evaluation allreduce of another size replaces one collective in step 17.
        calls[17 * 5 + 3].count = 7;
        let c = estimate(&[&calls]).unwrap();
        assert_eq!(c.period, 5);
        assert!((100 * MS..=120 * MS).contains(&c.step_ns), "{c:?}");
    }

    #[test]
    fn no_cadence_from_too_little_or_nothing_regular() {
        assert_eq!(estimate(&[]), None);
        let one_step = ddp(1);
        assert_eq!(estimate(&[&one_step]), None);
        // Every collective a different size, at irregular times: nothing repeats.
        let chaos: Vec<NcclCall> =
            (1..200u64).map(|s| NcclCall { count: s, ..coll(WORLD, s, NcclOp::AllReduce, s * s * MS) }).collect();
        assert_eq!(estimate(&[&chaos]), None);
    }

    #[test]
    fn the_busiest_communicator_sets_the_pace() {
        let tp = ddp(20);
        let dp: Vec<NcclCall> = (1..=3u64).map(|s| coll(0xd9, s, NcclOp::AllReduce, s * 1000 * MS)).collect();
        let calls: Vec<NcclCall> = dp.into_iter().chain(tp).collect();
        assert_eq!(estimate(&[&calls]).unwrap().comm_id, WORLD);
    }

    #[test]
    fn the_longest_wait_and_gap_after_warm_up() {
        let mut calls = ddp(200);
        // Warm-up: the first allreduce waited 5 s. Later, one rank was held up 300 ms in
        // collective #600 and went 250 ms longer than usual without a call before the first
        // bucket of step 160, after 10 ms of allgather and 60 ms of forward pass.
        calls[1].t_exit_ns += 5 * SEC;
        calls[599].t_exit_ns += 300 * MS;
        for c in &mut calls[801..] {
            (c.t_enter_ns, c.t_exit_ns) = (c.t_enter_ns + 250 * MS, c.t_exit_ns + 250 * MS);
        }
        let c = estimate(&[&calls]).unwrap();
        assert_eq!((c.step_ns, c.longest_call_ns), (110 * MS, 300 * MS + CALL_NS));
        assert_eq!(c.longest_gap_ns, 250 * MS + 70 * MS - CALL_NS);
        assert_eq!(c.pace_ns(), 320 * MS - CALL_NS);
    }

    #[test]
    fn threshold_is_factor_paces_with_a_floor_and_a_fallback() {
        let settings = Settings { min_stuck_ns: 50 * MS, ..Settings::default() };
        let cadence =
            Cadence { comm_id: 1, period: 5, step_ns: 100 * MS, samples: 10, longest_call_ns: 0, longest_gap_ns: 0 };
        assert_eq!(Threshold::new(Some(cadence), &settings).threshold_ns, 150 * MS);
        let fast = Cadence { step_ns: MS, ..cadence };
        assert_eq!(Threshold::new(Some(fast), &settings).threshold_ns, 50 * MS, "floor");
        assert_eq!(Threshold::new(Some(fast), &Settings::default()).threshold_ns, 250 * MS, "default floor");
        assert_eq!(Threshold::new(None, &settings).threshold_ns, 30 * SEC, "fallback");
        let custom = Settings { factor: 3.0, min_stuck_ns: 0, fallback_stuck_ns: SEC };
        assert_eq!(Threshold::new(Some(cadence), &custom).threshold_ns, 300 * MS);
        assert_eq!(Threshold::new(None, &custom).threshold_ns, SEC);
        let noisy = Cadence { longest_gap_ns: 200 * MS, ..cadence };
        assert_eq!(Threshold::new(Some(noisy), &settings).threshold_ns, 300 * MS, "the tail the job has shown");
    }
}
