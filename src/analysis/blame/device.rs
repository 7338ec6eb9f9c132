//! Waits read from the device, for jobs whose NCCL calls return as soon as the collective
//! is enqueued: the host never waits inside the call, the NCCL kernel does, spinning until
//! its peers' kernels arrive, and the host waits later, wherever it synchronizes with
//! the device.
//!
//! - A rank's device wait in a collective is its NCCL kernel's duration less the shortest
//!   rank's (rank-local differences, as [`attribute`](super::attribute) reads host calls),
//!   and the last kernel to start caused it: [`attribute_split`] matches the kernels and
//!   shares the waiting over the arrival stretches as it does for host calls, each kernel
//!   standing at its launch on the host's timeline with the device's duration. Within a
//!   step, a wait counts only by what it adds to the rank's wait in its previous
//!   collective on the communicator ([`new_lateness`]): the device computes on while an
//!   NCCL kernel spins, so how far a rank stands behind is not the sum of its spins.
//! - The late rank's caused wait goes to the stage that made it late. Its device ran over
//!   when its kernel sat in the stream after its launch longer than its peers' did (the
//!   device was still busy with earlier work): that share goes to the stages whose device
//!   time (`stage_device`) in the step ran over every other participant's by a part of
//!   that extra queueing, or, with none, to the stage that launched the kernel. The rest
//!   its host made, launching late, and is charged as host calls are, with the lateness
//!   it carried from its earlier launches ([`carry`](super::carry)).
//! - The host's own waiting is its synchronization with the device (`host_sync`): each is
//!   a wait in the stages it overlapped, taken out of own time as in-call waits are. The
//!   device waits are not: the host did not spend them, and its synchronizations hold the
//!   part of them it saw. Where a late rank lost its time is read with its own stage's
//!   device work left in its synchronizations ([`waits_less_own_device`]).

use std::collections::HashMap;

use super::attribute::{attribute_split, Attribution, DeviceCharge, RankTimeline, Since, StageSpan};
use super::collective::CallTiming;
use super::stage_seconds::StageSeconds;

/// One completed NCCL kernel of a rank, with the collective that launched it: host
/// `CLOCK_MONOTONIC` nanoseconds (the device's times converted by the collector).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceKernel {
    /// (communicator, sequence) of the launching call.
    pub key: (u64, u64),
    pub launch_ns: u64,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Device time of one stage of one step (`stage_device`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StageDeviceTime {
    pub step: u64,
    /// Index in the job's stage list, as the spans'.
    pub stage: usize,
    pub device_s: f64,
}

/// What one rank's logs hold for device waits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceRank {
    pub rank: u32,
    pub kernels: Vec<DeviceKernel>,
    /// Its steps' stages on the host, in time order.
    pub spans: Vec<StageSpan>,
    pub device: Vec<StageDeviceTime>,
    /// Completed host synchronizations, (enter, exit).
    pub syncs: Vec<(u64, u64)>,
}

/// The job's waits from the device: `waits` the host synchronizations per stage, `caused`
/// the device waits charged to the late ranks' stages.
pub fn attribute_device(ranks: &[DeviceRank]) -> Attribution {
    // Each rank's kernels in the order of its timeline's calls.
    let kernels: Vec<Vec<DeviceKernel>> = ranks.iter().map(launch_ordered).collect();
    let lasted = new_lateness(ranks, &kernels);
    let timelines: Vec<RankTimeline> =
        ranks.iter().zip(&kernels).zip(&lasted).map(|((r, k), lasted)| timeline(r, k, lasted)).collect();
    let mut a = attribute_split(&timelines, Since::PreviousEnter, |c, late| {
        let kernel = |i: usize| {
            let p = &c.participants[i];
            kernels[p.rank][p.call]
        };
        let queued = |i: usize| kernel(i).start_ns.saturating_sub(kernel(i).launch_ns) as f64 / 1e9;
        // From launch to end: the kernels end together, so the shortest was launched last.
        let launch_to_end = |i: usize| kernel(i).end_ns.saturating_sub(kernel(i).launch_ns) as f64 / 1e9;
        let at = c.participants.iter().position(|p| p.rank == late.rank && p.call == late.call)?;
        let longest_wait = c.participants.iter().map(|p| p.wait_s).fold(0.0, f64::max);
        if c.participants.len() < 2 || longest_wait <= 0.0 {
            return None;
        }
        // Queued longer than its peers: the device was busy when the launch came.
        let excess_s = queued(at) - median_of_others(c.participants.len(), at, queued);
        let share = (excess_s / longest_wait).clamp(0.0, 1.0);
        let host_late_s = median_of_others(c.participants.len(), at, launch_to_end) - launch_to_end(at);
        let launch = kernels[late.rank][late.call].launch_ns;
        let step = step_at(&timelines[late.rank].spans, launch)?;
        let participants = c.participants.iter().map(|p| p.rank);
        let mut spans = device_overrun(ranks, &timelines, participants, late.rank, step, excess_s);
        if spans.is_empty() {
            // No stage's device time explains the queueing (a log whose kernels were
            // placed in stages by when they ran puts backward's in callbacks on every
            // rank): the device was busy with the work launched before this kernel, in
            // the stage that launched it.
            let since = late.call.checked_sub(1).map_or(0, |i| kernels[late.rank][i].launch_ns);
            spans.extend(launched_in(&timelines[late.rank].spans, since, launch).map(|i| (i, 1.0)));
        }
        Some(DeviceCharge { share, spans, host_late_s })
    });
    a.waits = sync_waits(ranks);
    a
}

/// A rank's kernels as calls on the host's timeline: at their launch, lasting `lasted`
/// (see [`new_lateness`]); its host's waits are its synchronizations less its own
/// stages' device work ([`waits_less_own_device`]).
fn timeline(r: &DeviceRank, kernels: &[DeviceKernel], lasted: &[u64]) -> RankTimeline {
    let calls = kernels
        .iter()
        .zip(lasted)
        .map(|(k, &lasted)| CallTiming::new(Some(k.key), k.launch_ns, k.launch_ns.saturating_add(lasted)))
        .collect();
    RankTimeline { rank: r.rank, calls, spans: r.spans.clone(), waits: waits_less_own_device(r) }
}

/// A rank's host synchronizations less the part of each spent on its own stage's device
/// work, as (begin, end) in time order: what its host waited for, when where it lost time
/// is looked for. A host synchronizing in a stage waits for everything queued; the
/// kernels its stage launched come last in that queue, so up to the stage's device time
/// (`stage_device`) at the end of the stage's synchronizations is its own work: a rank
/// whose gradient-norm kernel runs 5 ms long syncs 5 ms longer and launches its next
/// collective 5 ms late, and the optimizer is where it lost the time. The rest (the
/// device catching up on earlier stages' work, or spinning in a collective) it waited.
/// (The waits shown per stage are the whole synchronizations: a host waiting for its
/// device is not running its own stage's code.)
fn waits_less_own_device(r: &DeviceRank) -> Vec<(u64, u64)> {
    let mut syncs = r.syncs.clone();
    syncs.sort_unstable();
    let mut waits = Vec::with_capacity(syncs.len());
    let mut device_of: HashMap<(u64, usize), f64> = HashMap::new();
    for d in &r.device {
        *device_of.entry((d.step, d.stage)).or_default() += d.device_s;
    }
    // Each span's device time not yet found in a synchronization, spent from the last.
    let mut own: Vec<u64> = r
        .spans
        .iter()
        .map(|s| (device_of.get(&(s.step, s.stage)).copied().unwrap_or(0.0).max(0.0) * 1e9) as u64)
        .collect();
    for &(enter, exit) in syncs.iter().rev() {
        let mut end = exit;
        // The spans it overlapped (they lie in time order), last first.
        let from = r.spans.partition_point(|s| s.end_ns <= enter);
        let overlapped = r.spans[from..].iter().take_while(|s| s.begin_ns < exit).count();
        for (i, span) in r.spans.iter().enumerate().skip(from).take(overlapped).rev() {
            let (begin, until) = (span.begin_ns.max(enter), span.end_ns.min(exit).min(end));
            let mine = own[i].min(until.saturating_sub(begin));
            own[i] -= mine;
            if until - mine > begin {
                waits.push((begin, until - mine));
            }
            end = begin;
        }
    }
    waits.sort_unstable();
    waits
}

/// How long each kernel (of `kernels[rank]`, launch-ordered) counts as lasting: the
/// shortest rank's duration plus the lateness it newly met, not all it waited.
///
/// A device does not stop while one of its NCCL kernels spins: a rank 20 ms ahead after
/// its data stage spins 20 ms in its first bucket's allreduce while its compute stream
/// runs the rest of backward, then spins in each later bucket's allreduce while the late
/// rank computes that bucket, as every rank's NCCL stream idles then in a healthy step.
/// Summed, those waits charge the late rank 20 ms plus most of backward for a step that
/// grew by 20 ms. So within one step a rank's wait in a collective counts only by what it
/// adds to the wait in its previous collective on the communicator (how far behind its
/// peers it stands can only grow by what a later kernel meets anew); a step's first
/// collective counts whole, as a synchronization at the step's end lines the ranks up.
fn new_lateness(ranks: &[DeviceRank], kernels: &[Vec<DeviceKernel>]) -> Vec<Vec<u64>> {
    let lasted = |k: &DeviceKernel| k.end_ns.saturating_sub(k.start_ns);
    let mut shortest: HashMap<(u64, u64), u64> = HashMap::new();
    for k in kernels.iter().flatten() {
        let d = shortest.entry(k.key).or_insert(u64::MAX);
        *d = (*d).min(lasted(k));
    }
    ranks
        .iter()
        .zip(kernels)
        .map(|(r, kernels)| {
            // Per communicator: the step of the previous collective and the wait in it.
            let mut previous: HashMap<u64, (u64, u64)> = HashMap::new();
            kernels
                .iter()
                .map(|k| {
                    let base = shortest[&k.key];
                    let wait = lasted(k) - base;
                    let Some(step) = step_at(&r.spans, k.launch_ns) else {
                        previous.remove(&k.key.0);
                        return base + wait;
                    };
                    let new = match previous.insert(k.key.0, (step, wait)) {
                        Some((before, waited)) if before == step => wait.saturating_sub(waited),
                        _ => wait,
                    };
                    base + new
                })
                .collect()
        })
        .collect()
}

fn launch_ordered(r: &DeviceRank) -> Vec<DeviceKernel> {
    let mut kernels: Vec<DeviceKernel> = r.kernels.iter().copied().filter(|k| k.end_ns >= k.start_ns).collect();
    kernels.sort_by_key(|k| k.launch_ns);
    kernels
}

/// The upper median of `f` over participants `0..n` but `at` (`n` at least 2).
fn median_of_others(n: usize, at: usize, f: impl Fn(usize) -> f64) -> f64 {
    let mut others: Vec<f64> = (0..n).filter(|&i| i != at).map(f).collect();
    others.sort_by(f64::total_cmp);
    others[others.len() / 2]
}

/// The span whose work the device was busy with when a kernel launched at `launch` (the
/// rank's previous NCCL launch at `since`) queued: the one holding the launch, unless that
/// one began under [`LAUNCH_SPAN_MIN_NS`] before it (an inferred phase that opens with the
/// NCCL call itself), then the one before it, if that one ended after `since`.
fn launched_in(spans: &[StageSpan], since: u64, launch: u64) -> Option<usize> {
    let at = spans.iter().position(|s| s.begin_ns <= launch && launch < s.end_ns)?;
    let opened_just_before = launch - spans[at].begin_ns < LAUNCH_SPAN_MIN_NS;
    match at.checked_sub(1) {
        Some(before) if opened_just_before && spans[before].end_ns > since => Some(before),
        _ => Some(at),
    }
}

/// See [`launched_in`]: from a call's enter to its kernel's launch callback inside it takes
/// microseconds; a marked stage that launched its own kernel before the collective (a
/// backward slice, then its bucket's allreduce) began longer ago than that, even when the
/// stage's host part is a fraction of a millisecond.
const LAUNCH_SPAN_MIN_NS: u64 = 200_000;

/// The step of the span holding `t` (the spans lie in time order).
fn step_at(spans: &[StageSpan], t: u64) -> Option<u64> {
    let at = spans.partition_point(|s| s.begin_ns <= t).checked_sub(1)?;
    (t < spans[at].end_ns).then_some(spans[at].step)
}

/// The least part of the late kernel's extra queueing a stage's device overrun must
/// explain to be charged with it: below that it is the ordinary spread of device times
/// between ranks, not what made this one late.
const MIN_EXPLAINED: f64 = 0.25;

/// `late`'s spans of `step` whose device time ran over every other participant's (by
/// stage) by at least [`MIN_EXPLAINED`] of `excess_s`, the extra time its kernel queued,
/// weighted by the overrun.
fn device_overrun(
    ranks: &[DeviceRank],
    timelines: &[RankTimeline],
    participants: impl Iterator<Item = usize>,
    late: usize,
    step: u64,
    excess_s: f64,
) -> Vec<(usize, f64)> {
    let device_of = |rank: usize, stage: usize| {
        ranks[rank].device.iter().filter(|d| d.step == step && d.stage == stage).map(|d| d.device_s).sum::<f64>()
    };
    let others: Vec<usize> = participants.filter(|&r| r != late).collect();
    timelines[late]
        .spans
        .iter()
        .enumerate()
        .filter(|(_, s)| s.step == step)
        .filter(|(_, s)| ranks[late].device.iter().any(|d| d.step == step && d.stage == s.stage))
        .filter_map(|(i, s)| {
            let most = others.iter().map(|&r| device_of(r, s.stage)).fold(0.0, f64::max);
            let over = device_of(late, s.stage) - most;
            (over > 0.0 && over >= MIN_EXPLAINED * excess_s).then_some((i, over))
        })
        .collect()
}

/// Each rank's host synchronizations, in seconds per (rank, step, stage) they overlapped.
fn sync_waits(ranks: &[DeviceRank]) -> StageSeconds {
    let mut waits = Vec::new();
    for r in ranks {
        for &(enter, exit) in &r.syncs {
            for s in r.spans.iter().filter(|s| s.begin_ns < exit && enter < s.end_ns) {
                let overlap = s.end_ns.min(exit) - s.begin_ns.max(enter);
                waits.push(((r.rank, s.step, s.stage), overlap as f64 / 1e9));
            }
        }
    }
    StageSeconds::summed(waits)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    /// Stages data, fwd, bwd, callbacks, optim of every step.
    const STAGES_MS: [u64; 5] = [10, 20, 40, 10, 20];
    const BWD: usize = 2;
    const CALLBACKS: usize = 3;
    /// Steps start this far apart: the hosts idle after their step until the next.
    const STEP_MS: u64 = 200;

    /// A rank of `steps` steps of the stages' host times (backward's `host_bwd_ms`), one
    /// allreduce launched `launch_ms` into the step's backward, whose kernel starts
    /// `start_ms` after the step began and ends at `end_ms`, the device times of forward
    /// and backward, and the host's sync in callbacks until the device is done.
    struct Plan {
        host_bwd_ms: u64,
        launch_ms: u64,
        start_ms: u64,
        bwd_device_ms: u64,
    }

    fn rank(rank: u32, steps: u64, plan: &Plan, end_ms: u64) -> DeviceRank {
        let mut r = DeviceRank { rank, ..DeviceRank::default() };
        for step in 0..steps {
            let base = step * STEP_MS * MS;
            let mut t = base;
            for (stage, &ms) in STAGES_MS.iter().enumerate() {
                let ms = if stage == BWD { plan.host_bwd_ms } else { ms };
                let mut end = t + ms * MS;
                if stage == CALLBACKS {
                    // callbacks' .item(): from its start until the device is done, then
                    // its own host work.
                    let synced = t.max(base + end_ms * MS);
                    r.syncs.push((t, synced));
                    end = synced + ms * MS;
                }
                r.spans.push(StageSpan { step, stage, begin_ns: t, end_ns: end });
                t = end;
            }
            let bwd_begin = base + 30 * MS;
            r.kernels.push(DeviceKernel {
                key: (9, step + 1),
                launch_ns: bwd_begin + plan.launch_ms * MS,
                start_ns: base + plan.start_ms * MS,
                end_ns: base + end_ms * MS,
            });
            for (stage, ms) in [(1, 20), (BWD, plan.bwd_device_ms)] {
                r.device.push(StageDeviceTime { step, stage, device_s: ms as f64 / 1e3 });
            }
        }
        r
    }

    fn caused_by_stage(a: &Attribution, rank: u32) -> Vec<(usize, f64)> {
        let mut by: Vec<(usize, f64)> = Vec::new();
        for (&(r, _, stage), &s) in a.caused.iter() {
            if r == rank {
                match by.iter_mut().find(|(st, _)| *st == stage) {
                    Some((_, sum)) => *sum += s,
                    None => by.push((stage, s)),
                }
            }
        }
        by
    }

    #[test]
    fn a_rank_whose_device_runs_over_in_backward_is_charged_there_and_no_waiter_is() {
        // Ranks launch the allreduce 35 ms into backward; their device finishes backward's
        // kernels at 72 ms and the allreduce runs to 80. Rank 2's backward kernels take
        // 15 ms longer: its allreduce starts at 87, and the others' spin until 95.
        let healthy = Plan { host_bwd_ms: 40, launch_ms: 35, start_ms: 72, bwd_device_ms: 40 };
        let slow = Plan { bwd_device_ms: 55, start_ms: 87, ..healthy };
        let ranks: Vec<DeviceRank> =
            (0..4).map(|r| if r == 2 { rank(r, 5, &slow, 95) } else { rank(r, 5, &healthy, 95) }).collect();
        let a = attribute_device(&ranks);
        assert_eq!(a.collectives, 5);
        let rank2 = caused_by_stage(&a, 2);
        assert_eq!(rank2.len(), 1, "{rank2:?}");
        assert_eq!(rank2[0].0, BWD);
        assert!((rank2[0].1 - 5.0 * 3.0 * 0.015).abs() < 1e-9, "{rank2:?}");
        for waiter in [0, 1, 3] {
            assert!(caused_by_stage(&a, waiter).is_empty(), "rank {waiter}: {:?}", a.caused);
        }
        let table = super::super::blame_table(&a, 0, 4);
        let found = super::super::culprits(&table, 4, 5, 0.1, &super::super::CulpritParams::default());
        assert_eq!(found.iter().map(|c| (c.rank, c.stage)).collect::<Vec<_>>(), [(2, BWD)]);
        // The waits the hosts saw: each rank's sync in callbacks, taken out of own time there.
        assert!(a.wait(0, 0, CALLBACKS) > 0.0);
        assert_eq!(a.wait(0, 0, BWD), 0.0, "the host never waited in backward");
    }

    #[test]
    fn a_slow_backward_recorded_in_callbacks_on_every_rank_is_charged_to_backward_not_to_a_stray_stage() {
        // As the async matrix's kernel-100ms-1 row logged it: the kernels were placed in
        // stages by when they ran, so backward's device time shows in callbacks on every
        // rank (the waiters' spinning allreduces fill theirs as much), and a few ranks, the
        // slow one among them, have some spill in data (8.6, 8.2 and 7.9 ms against 0.2 ms).
        // Rank 2 must not be charged to data.
        let healthy = Plan { host_bwd_ms: 40, launch_ms: 35, start_ms: 72, bwd_device_ms: 40 };
        let slow = Plan { bwd_device_ms: 55, start_ms: 87, ..healthy };
        let mut ranks: Vec<DeviceRank> =
            (0..8).map(|r| if r == 2 { rank(r, 5, &slow, 95) } else { rank(r, 5, &healthy, 95) }).collect();
        for r in &mut ranks {
            let spill_ms = [0.2, 0.2, 8.6, 0.2, 8.2, 0.2, 7.9, 0.2][r.rank as usize];
            for d in r.device.iter_mut().filter(|d| d.stage == BWD) {
                d.stage = CALLBACKS;
                d.device_s = 0.060;
            }
            for step in 0..5 {
                r.device.push(StageDeviceTime { step, stage: 0, device_s: spill_ms / 1e3 });
            }
        }
        let a = attribute_device(&ranks);
        let rank2 = caused_by_stage(&a, 2);
        assert_eq!(rank2.iter().map(|&(s, _)| s).collect::<Vec<_>>(), [BWD], "{rank2:?}");
        for waiter in [0, 1, 3, 4, 5, 6, 7] {
            assert!(caused_by_stage(&a, waiter).is_empty(), "rank {waiter}: {:?}", a.caused);
        }
    }

    #[test]
    fn a_rank_whose_host_launches_late_is_charged_its_slow_host_stage() {
        // Rank 1's host backward takes 60 ms instead of 40: it launches 20 ms late, and
        // its kernel starts at once; its device time is its peers'.
        let healthy = Plan { host_bwd_ms: 40, launch_ms: 35, start_ms: 72, bwd_device_ms: 40 };
        let late = Plan { host_bwd_ms: 60, launch_ms: 55, start_ms: 86, ..healthy };
        let ranks: Vec<DeviceRank> =
            (0..4).map(|r| if r == 1 { rank(r, 5, &late, 95) } else { rank(r, 5, &healthy, 95) }).collect();
        let a = attribute_device(&ranks);
        let rank1 = caused_by_stage(&a, 1);
        assert_eq!(rank1.iter().map(|&(s, _)| s).collect::<Vec<_>>(), [BWD], "{rank1:?}");
        assert!((rank1[0].1 - 5.0 * 3.0 * 0.014).abs() < 1e-9, "{rank1:?}");
        for waiter in [0, 2, 3] {
            assert!(caused_by_stage(&a, waiter).is_empty(), "rank {waiter}: {:?}", a.caused);
        }
    }

    #[test]
    fn a_host_late_from_its_data_stage_is_charged_there_once_a_step_for_all_it_launches_late() {
        // Stages data, fwd, bwd, callbacks; four bucket allreduces launched 10 ms apart in
        // backward, each starting 1 ms after its launch and lasting 1 ms of work. Rank 3's
        // data takes 40 ms instead of 20: its host launches all four 20 ms late, and the
        // peers' kernels wait 20 ms in each, until the callbacks' .item() lines them up.
        // Each peer stands 20 ms behind rank 3 once per step, not four times.
        let ranks: Vec<DeviceRank> = (0..4u32)
            .map(|rank| {
                let data_ms = if rank == 3 { 40 } else { 20 };
                let mut r = DeviceRank { rank, ..DeviceRank::default() };
                // The parameters' broadcast at start-up, the same on every rank.
                r.kernels.push(DeviceKernel { key: (8, 1), launch_ns: 0, start_ns: MS, end_ns: 2 * MS });
                for step in 0..3u64 {
                    let base = (step + 1) * STEP_MS * MS;
                    let bwd = base + (data_ms + 10) * MS;
                    let late_bwd = base + 50 * MS;
                    for k in 1..=4u64 {
                        let launch = bwd + 10 * k * MS;
                        let late_end = late_bwd + (10 * k + 2) * MS;
                        let key = (9, step * 4 + k);
                        r.kernels.push(DeviceKernel {
                            key,
                            launch_ns: launch,
                            start_ns: launch + MS,
                            end_ns: late_end,
                        });
                    }
                    let done = late_bwd + 44 * MS;
                    let spans = [(0, base, base + data_ms * MS), (1, bwd - 10 * MS, bwd), (2, bwd, bwd + 40 * MS)];
                    for (stage, begin_ns, end_ns) in spans {
                        r.spans.push(StageSpan { step, stage, begin_ns, end_ns });
                    }
                    r.spans.push(StageSpan { step, stage: CALLBACKS, begin_ns: bwd + 40 * MS, end_ns: done + 2 * MS });
                    r.syncs.push((bwd + 40 * MS, done));
                    for stage in [1, 2] {
                        r.device.push(StageDeviceTime { step, stage, device_s: 0.004 });
                    }
                }
                r
            })
            .collect();
        let a = attribute_device(&ranks);
        assert_eq!(a.collectives, 13);
        let rank3 = caused_by_stage(&a, 3);
        assert_eq!(rank3.iter().map(|&(s, _)| s).collect::<Vec<_>>(), [0], "all to data: {rank3:?}");
        assert!((rank3[0].1 - 3.0 * 3.0 * 0.020).abs() < 1e-9, "{rank3:?}");
        for waiter in 0..3 {
            assert!(caused_by_stage(&a, waiter).is_empty(), "rank {waiter}: {:?}", a.caused);
        }
    }

    #[test]
    fn a_host_sync_is_a_wait_in_the_stages_it_overlapped() {
        let spans = vec![
            StageSpan { step: 3, stage: 0, begin_ns: 0, end_ns: 10 * MS },
            StageSpan { step: 3, stage: 1, begin_ns: 10 * MS, end_ns: 30 * MS },
        ];
        let r = DeviceRank { rank: 7, spans, syncs: vec![(5 * MS, 12 * MS), (20 * MS, 21 * MS)], ..Default::default() };
        let a = attribute_device(&[r]);
        assert!((a.wait(7, 3, 0) - 0.005).abs() < 1e-12 && (a.wait(7, 3, 1) - 0.003).abs() < 1e-12, "{:?}", a.waits);
        assert_eq!(a.collectives, 0);
    }

    #[test]
    fn a_stage_that_syncs_keeps_its_own_device_work_at_the_end_of_its_syncs_as_its_own_time() {
        // Optim (stage 4) syncs over 10-18 ms and 20-21 ms and launched 3 ms of device work;
        // callbacks (3) syncs over 2-9 ms and launched 1 ms.
        let span = |stage, begin_ms, end_ms| StageSpan { step: 1, stage, begin_ns: begin_ms * MS, end_ns: end_ms * MS };
        let device = |stage, ms: f64| StageDeviceTime { step: 1, stage, device_s: ms / 1e3 };
        let r = DeviceRank {
            spans: vec![span(3, 0, 10), span(4, 10, 30)],
            device: vec![device(3, 1.0), device(4, 3.0)],
            syncs: vec![(20 * MS, 21 * MS), (10 * MS, 18 * MS), (2 * MS, 9 * MS)],
            ..Default::default()
        };
        assert_eq!(waits_less_own_device(&r), [(2 * MS, 8 * MS), (10 * MS, 16 * MS)]);
    }
}
