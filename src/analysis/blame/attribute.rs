//! Waits placed in the waiters' stages, and caused waits charged to the late ranks' stages.

use std::collections::BTreeMap;

use super::collective::{match_collectives, CallTiming, Collective};

/// One stage of one step of a rank, on that rank's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageSpan {
    pub step: u64,
    /// Index in the job's stage list.
    pub stage: usize,
    pub begin_ns: u64,
    pub end_ns: u64,
}

/// What one rank's log holds for the attribution.
#[derive(Clone, Debug, PartialEq)]
pub struct RankTimeline {
    pub rank: u32,
    /// Every completed NCCL call, in call order.
    pub calls: Vec<CallTiming>,
    /// Its steps' stages, in time order, not overlapping.
    pub spans: Vec<StageSpan>,
}

/// The job's waits and who caused them, keyed by (rank, step, stage).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attribution {
    /// Seconds the rank waited inside collectives it entered during that stage.
    pub waits: BTreeMap<(u32, u64, usize), f64>,
    /// Seconds of other ranks' waiting the rank caused, charged to the stage that made it
    /// late.
    pub caused: BTreeMap<(u32, u64, usize), f64>,
    /// Collectives matched.
    pub collectives: usize,
    /// Caused wait whose late rank was outside every step (set-up, tear-down).
    pub unstaged_s: f64,
}

impl Attribution {
    /// The wait inside (rank, step, stage), 0 when none.
    pub fn wait(&self, rank: u32, step: u64, stage: usize) -> f64 {
        self.waits.get(&(rank, step, stage)).copied().unwrap_or(0.0)
    }
}

/// Matches every rank's collectives and attributes their waits.
pub fn attribute(ranks: &[RankTimeline]) -> Attribution {
    let calls: Vec<&[CallTiming]> = ranks.iter().map(|r| r.calls.as_slice()).collect();
    let collectives = match_collectives(&calls);
    let mut a = Attribution { collectives: collectives.len(), ..Attribution::default() };
    for c in &collectives {
        for p in &c.participants {
            let r = &ranks[p.rank];
            if p.wait_s > 0.0 {
                if let Some(span) = span_at(&r.spans, r.calls[p.call].enter_ns) {
                    *a.waits.entry((r.rank, span.step, span.stage)).or_default() += p.wait_s;
                }
            }
        }
        charge(ranks, c, &mut a);
    }
    a
}

/// Charges each late participant's caused wait to the stages where its own time since its
/// previous call ran over the participants' median, in proportion to the overrun; with
/// no overrun (it was late because it left its previous call late), to the stage it
/// entered the call from.
fn charge(ranks: &[RankTimeline], c: &Collective, a: &mut Attribution) {
    // Own time per (step, stage) in each participant's segment before the call.
    let segments: Vec<Vec<((u64, usize), f64)>> = c
        .participants
        .iter()
        .map(|p| {
            let r = &ranks[p.rank];
            let enter = r.calls[p.call].enter_ns;
            let start = p.call.checked_sub(1).map_or(enter, |i| r.calls[i].exit_ns.min(enter));
            own_time(&r.spans, start, enter)
        })
        .collect();
    // The participants' median own time per stage (a stage is compared by its index
    // alone: the segment rarely spans two steps' copies of one stage). Once per
    // collective, so a large job stays linear in its ranks.
    let mut per_stage: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for (i, seg) in segments.iter().enumerate() {
        for &((_, stage), t) in seg {
            let column = per_stage.entry(stage).or_insert_with(|| vec![0.0; segments.len()]);
            column[i] += t;
        }
    }
    let medians: BTreeMap<usize, f64> =
        per_stage.into_iter().map(|(stage, mut column)| (stage, median(&mut column))).collect();
    for (i, p) in c.participants.iter().enumerate() {
        if p.caused_s <= 0.0 {
            continue;
        }
        let overruns: Vec<((u64, usize), f64)> = segments[i]
            .iter()
            .map(|&(key, own)| (key, (own - medians[&key.1]).max(0.0)))
            .filter(|&(_, over)| over > 0.0)
            .collect();
        let total: f64 = overruns.iter().map(|(_, o)| o).sum();
        let rank = ranks[p.rank].rank;
        if total > 0.0 {
            for ((step, stage), over) in overruns {
                *a.caused.entry((rank, step, stage)).or_default() += p.caused_s * over / total;
            }
        } else {
            let r = &ranks[p.rank];
            match span_at(&r.spans, r.calls[p.call].enter_ns) {
                Some(span) => *a.caused.entry((rank, span.step, span.stage)).or_default() += p.caused_s,
                None => a.unstaged_s += p.caused_s,
            }
        }
    }
}

/// The span holding instant `t`.
fn span_at(spans: &[StageSpan], t: u64) -> Option<&StageSpan> {
    let i = spans.partition_point(|s| s.end_ns <= t);
    spans.get(i).filter(|s| s.begin_ns <= t)
}

/// Seconds of each (step, stage) inside [start, end).
fn own_time(spans: &[StageSpan], start: u64, end: u64) -> Vec<((u64, usize), f64)> {
    let first = spans.partition_point(|s| s.end_ns <= start);
    spans[first..]
        .iter()
        .take_while(|s| s.begin_ns < end)
        // Saturating: a damaged log may hold overlapping spans, breaking the sort this assumes.
        .map(|s| ((s.step, s.stage), s.end_ns.min(end).saturating_sub(s.begin_ns.max(start)) as f64 / 1e9))
        .collect()
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A rank whose step 0 runs stages of `stage_ms`, then one allreduce (comm 1, seq 1)
    /// that ends at `exit_ms` for everyone; `delay_ms` passes before it enters the call.
    fn rank(rank: u32, stage_ms: &[u64], delay_ms: u64, exit_ms: u64) -> RankTimeline {
        let mut spans = Vec::new();
        let mut t = 0;
        for (stage, &ms) in stage_ms.iter().enumerate() {
            spans.push(StageSpan { step: 0, stage, begin_ns: t * MS, end_ns: (t + ms) * MS });
            t += ms;
        }
        // The call sits inside the last stage, like a bucket allreduce inside backward.
        let enter = t - 1 + delay_ms;
        spans.last_mut().unwrap().end_ns = (exit_ms + 1) * MS;
        let set_up = CallTiming { key: None, enter_ns: 0, exit_ns: 0 };
        RankTimeline {
            rank,
            calls: vec![set_up, CallTiming { key: Some((1, 1)), enter_ns: enter * MS, exit_ns: exit_ms * MS }],
            spans,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn a_slow_data_stage_is_charged_for_the_wait_in_the_peers_backward() {
        // Stages data, fwd, bwd; rank 2's data takes 25 ms instead of 20.
        let ranks: Vec<RankTimeline> =
            (0..4).map(|r| rank(r, &[if r == 2 { 25 } else { 20 }, 30, 40], 0, 100)).collect();
        let a = attribute(&ranks);
        assert_eq!(a.collectives, 1);
        for r in [0, 1, 3] {
            assert!(close(a.wait(r, 0, 2), 0.005), "rank {r} waits in backward: {:?}", a.waits);
        }
        assert_eq!(a.wait(2, 0, 2), 0.0);
        assert_eq!(a.caused.len(), 1, "{:?}", a.caused);
        assert!(close(a.caused[&(2, 0, 0)], 0.015), "rank 2's data stage caused 3 x 5 ms: {:?}", a.caused);
    }

    #[test]
    fn a_delay_before_the_call_is_charged_to_the_stage_it_happened_in() {
        let ranks: Vec<RankTimeline> =
            (0..4).map(|r| rank(r, &[20, 30, 40], if r == 1 { 12 } else { 0 }, 110)).collect();
        let a = attribute(&ranks);
        assert!(close(a.caused[&(1, 0, 2)], 0.036), "{:?}", a.caused);
        assert!(a.caused.keys().all(|k| k.0 == 1));
    }

    #[test]
    fn a_rank_late_with_no_stage_of_its_own_to_blame_is_charged_where_it_entered() {
        // Rank 3's previous call exited late, so its segment is short, not long.
        let mut ranks: Vec<RankTimeline> = (0..3).map(|r| rank(r, &[20, 30, 40], 0, 100)).collect();
        let mut late = rank(3, &[20, 30, 40], 5, 100);
        late.calls[0].exit_ns = 94 * MS;
        ranks.push(late);
        let a = attribute(&ranks);
        assert!(close(a.caused[&(3, 0, 2)], 0.015), "{:?}", a.caused);
    }
}
