//! Steps at the same point of the pattern on every rank, and each step's inferred phases.

use std::collections::HashMap;

use super::pattern::{find_period, gap_after, Period, MIN_REPEATS, SEARCH_CALLS};
use super::{Call, RankCalls, Signature, BEFORE_FIRST, BETWEEN, IN_COLLECTIVES, PHASES};
use crate::analysis::blame::StageSpan;

/// One inferred step of one rank, on its clock.
#[derive(Clone, Debug, PartialEq)]
pub struct InferredStep {
    pub step: u64,
    /// When the collective before the step gap returned.
    pub begin_ns: u64,
    /// When the step's last collective returned.
    pub end_ns: u64,
    /// Nanoseconds per phase, indexed as [`PHASES`]; they sum to `end_ns - begin_ns`.
    pub phases_ns: [u64; PHASES.len()],
}

/// One rank's inferred steps, and their phases as spans (for wait attribution).
#[derive(Clone, Debug, PartialEq)]
pub struct RankInference {
    pub rank: u32,
    pub steps: Vec<InferredStep>,
    /// In time order, not overlapping; `stage` indexes [`PHASES`].
    pub spans: Vec<StageSpan>,
}

/// The job's step pattern and every rank's steps.
#[derive(Clone, Debug, PartialEq)]
pub struct Inference {
    /// The step's collectives in step order (the first follows the step gap).
    pub pattern: Vec<Signature>,
    /// The rank whose calls gave the period.
    pub reference_rank: u32,
    /// Median over ranks of the median step gap, ns.
    pub step_gap_ns: u64,
    /// Ranks in the order given; a rank that does not follow the pattern has no steps.
    pub ranks: Vec<RankInference>,
}

/// Infers the steps of every rank from its collectives. `None` when the reference rank
/// (the one with the most calls) shows no pattern repeating [`MIN_REPEATS`] times.
pub fn infer(ranks: &[RankCalls]) -> Option<Inference> {
    let reference = ranks.iter().max_by_key(|r| (r.calls.len(), std::cmp::Reverse(r.rank)))?;
    let period = find_period(&reference.calls)?;
    let q = period.length;
    let pattern: Vec<Signature> = reference.calls[period.start..period.start + q].iter().map(|c| c.signature).collect();
    // Each rank's calls by key: the same collective on every rank.
    let indices: Vec<HashMap<(u64, u64), usize>> =
        ranks.iter().map(|r| r.calls.iter().enumerate().map(|(i, c)| (c.key, i)).collect()).collect();
    let (turn, step_gap_ns, typical) = step_turn(ranks, &indices, reference, &period)?;
    let step_order: Vec<Signature> = (0..q).map(|j| pattern[(turn + 1 + j) % q]).collect();
    // The steps are cut on a rank whose own step gap is the median one: the rank with the
    // most calls may be a slow one whose gap sits elsewhere (a slow forward on a rank
    // whose peers wait at their synchronization, with asynchronous launches).
    let reference = &ranks[typical];
    let blocks = reference_blocks(&reference.calls, &step_order, step_gap_ns);
    let out: Vec<RankInference> =
        ranks.iter().zip(&indices).map(|(r, index)| steps_of(r, index, reference, &blocks, q)).collect();
    if out.iter().all(|r| r.steps.len() < MIN_REPEATS) {
        return None;
    }
    Some(Inference { pattern: step_order, reference_rank: reference.rank, step_gap_ns, ranks: out })
}

/// The pattern position whose following gap is the step gap: per rank the median gap
/// after each position over the reference's unbroken run (the same collectives on every
/// rank, by key), then the median over ranks, so one slow rank cannot move it. Returns it,
/// that median gap, and a rank (its index) whose own gap there is the median's or nearest it.
fn step_turn(
    ranks: &[RankCalls],
    indices: &[HashMap<(u64, u64), usize>],
    reference: &RankCalls,
    period: &Period,
) -> Option<(usize, u64, usize)> {
    let q = period.length;
    let run = &reference.calls[period.start..period.end.min(period.start + SEARCH_CALLS)];
    let mut per_position: Vec<Vec<(u64, usize)>> = vec![Vec::new(); q];
    for (at_rank, (r, index)) in ranks.iter().zip(indices).enumerate() {
        let mut columns: Vec<Vec<u64>> = vec![Vec::new(); q];
        for (i, call) in run.iter().enumerate() {
            if let Some(&at) = index.get(&call.key) {
                columns[i % q].extend(gap_after(&r.calls, at));
            }
        }
        for (j, column) in columns.iter_mut().enumerate() {
            if !column.is_empty() {
                per_position[j].push((median(column), at_rank));
            }
        }
    }
    let medians: Vec<(u64, usize)> = per_position
        .iter_mut()
        .map(|c| {
            c.sort_unstable();
            c.get(c.len() / 2).copied().unwrap_or((0, 0))
        })
        .collect();
    let turn = (0..q).max_by_key(|&j| (medians[j].0, std::cmp::Reverse(j)))?;
    let gap = medians[turn].0;
    // Of the ranks holding as many calls as the reference (the steps are numbered on one
    // that lost none), the one whose gap there is nearest the median.
    let typical = per_position[turn]
        .iter()
        .filter(|&&(_, at)| ranks[at].calls.len() == reference.calls.len())
        .min_by_key(|&&(own, at)| (own.abs_diff(gap), at))
        .map_or(medians[turn].1, |&(_, at)| at);
    Some((turn, gap, typical))
}

fn median(values: &mut [u64]) -> u64 {
    values.sort_unstable();
    values[values.len() / 2]
}

/// Where the reference rank's steps start: at the first block of calls that follows the
/// pattern in step order after a gap at least half the step gap, then one pattern length
/// at a time while the calls follow the pattern. A call outside it (an evaluation pass, a metrics allreduce every N steps)
/// breaks the stride; the steps resume at the next block that follows the pattern and,
/// as a step's first call does, comes after a gap at least half the step gap, so a
/// pattern of look-alike buckets resumes at its true turn. Bounded work: a few times the
/// calls, whatever the log holds.
fn reference_blocks(calls: &[Call], step_order: &[Signature], step_gap_ns: u64) -> Vec<usize> {
    let q = step_order.len();
    let mut budget = 8 * calls.len() + 65_536;
    // From the second call (a step begins when the call before it returns), not yet in
    // step: the first block must come after a step gap too.
    let (mut blocks, mut aligned, mut i) = (Vec::new(), false, 1);
    while i + q <= calls.len() && budget > 0 {
        let matched = calls[i..i + q].iter().zip(step_order).take_while(|(c, s)| c.signature == **s).count();
        budget = budget.saturating_sub(matched + 1);
        let turns_here = aligned || gap_after(calls, i - 1).is_some_and(|gap| gap.saturating_mul(2) >= step_gap_ns);
        if matched == q && turns_here {
            blocks.push(i);
            i += q;
            aligned = true;
        } else {
            i += 1;
            aligned = false;
        }
    }
    blocks
}

/// The steps of one rank: step t is the reference's block t, the same collectives (by
/// communicator and sequence number) on this rank; it begins when the call before them
/// returns. A block this rank does not hold whole, in order, is skipped.
fn steps_of(
    rank: &RankCalls,
    index: &HashMap<(u64, u64), usize>,
    reference: &RankCalls,
    blocks: &[usize],
    q: usize,
) -> RankInference {
    let calls = &rank.calls;
    let mut out = RankInference { rank: rank.rank, steps: Vec::new(), spans: Vec::new() };
    let mut next_free = 1;
    for (t, &b) in blocks.iter().enumerate() {
        let Some(&at) = index.get(&reference.calls[b].key) else { continue };
        if at < next_free || at + q > calls.len() {
            continue;
        }
        let block = &calls[at..at + q];
        if !block.iter().zip(&reference.calls[b..b + q]).all(|(c, r)| c.key == r.key) {
            continue;
        }
        next_free = at + q;
        let step = t as u64;
        // Never before the previous step's end: overlapping calls (or a damaged log) must
        // not make two steps' spans overlap.
        let begin_ns = calls[at - 1].exit_ns.max(out.steps.last().map_or(0, |s| s.end_ns));
        let mut cursor = begin_ns;
        let mut phases_ns = [0u64; PHASES.len()];
        let mut span = |stage: usize, end: u64, cursor: &mut u64| {
            if end > *cursor {
                phases_ns[stage] += end - *cursor;
                out.spans.push(StageSpan { step, stage, begin_ns: *cursor, end_ns: end });
                *cursor = end;
            }
        };
        for (i, call) in block.iter().enumerate() {
            span(if i == 0 { BEFORE_FIRST } else { BETWEEN }, call.enter_ns, &mut cursor);
            span(IN_COLLECTIVES, call.exit_ns, &mut cursor);
        }
        out.steps.push(InferredStep { step, begin_ns, end_ns: cursor, phases_ns });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{job, sig};
    use super::*;

    const MS: u64 = 1_000_000;

    /// The simulator's step: data+fwd+bwd/4 (60 ms) before the first bucket allreduce,
    /// bwd/4 (10 ms) between buckets, callbacks+optim (12 ms) before the loss allgather.
    fn trainer_step() -> Vec<(Signature, u64)> {
        let ar = sig(1, 4096);
        vec![(ar, 10), (ar, 10), (ar, 10), (ar, 12), (sig(1, 2), 60)]
    }

    #[test]
    fn every_rank_turns_at_the_same_call_and_phases_add_up() {
        let ranks = job(4, &[sig(1, 4096 * 4)], &trainer_step(), 10, |_, _, _| 0);
        let inf = infer(&ranks).unwrap();
        assert_eq!(inf.pattern[0], sig(1, 4096));
        assert_eq!(inf.pattern[4], sig(1, 2));
        assert_eq!(inf.step_gap_ns, 60 * MS);
        for r in &inf.ranks {
            // Step 0 begins at the set-up broadcast's return: nothing is lost.
            assert_eq!(r.steps.len(), 10, "rank {}", r.rank);
            let s = &r.steps[3];
            assert_eq!(s.phases_ns[BEFORE_FIRST], 60 * MS);
            assert_eq!(s.phases_ns[BETWEEN], 42 * MS);
            assert_eq!(s.phases_ns[IN_COLLECTIVES], 5 * MS);
            assert_eq!(s.phases_ns.iter().sum::<u64>(), s.end_ns - s.begin_ns);
            assert!(r.spans.windows(2).all(|w| w[0].end_ns <= w[1].begin_ns));
        }
        // The same step is the same collectives on every rank.
        let ends: Vec<u64> = inf.ranks.iter().map(|r| r.steps[5].end_ns).collect();
        assert!(ends.windows(2).all(|w| w[0] == w[1]), "{ends:?}");
    }

    #[test]
    fn a_slow_rank_does_not_move_the_turn_and_shows_in_its_phase() {
        // Rank 2's optimizer (before the allgather, call 4) takes 120 ms more every step.
        let ranks = job(4, &[], &trainer_step(), 10, |r, _, call| if r == 2 && call == 4 { 120 } else { 0 });
        let inf = infer(&ranks).unwrap();
        assert_eq!(inf.pattern[4], sig(1, 2), "the turn stays after the allgather");
        let slow = &inf.ranks[2].steps[4];
        let peer = &inf.ranks[0].steps[4];
        assert_eq!(slow.phases_ns[BETWEEN], peer.phases_ns[BETWEEN] + 120 * MS);
        assert_eq!(peer.phases_ns[IN_COLLECTIVES], slow.phases_ns[IN_COLLECTIVES] + 120 * MS, "peers wait inside");
    }

    /// Puts a collective of another signature on every rank after call `after` (same
    /// key everywhere, 2 ms into the gap that follows it), as an evaluation pass would.
    fn insert_extra(ranks: &mut [RankCalls], after: usize, seq: u64) {
        for r in ranks {
            let at = r.calls[after].exit_ns + 2 * MS;
            let extra = Call { signature: sig(3, 77), key: (3, seq), enter_ns: at, exit_ns: at + MS };
            r.calls.insert(after + 1, extra);
        }
    }

    #[test]
    fn steps_resume_after_a_call_outside_the_pattern() {
        let mut ranks = job(3, &[sig(1, 4096 * 4)], &trainer_step(), 16, |_, _, _| 0);
        // An evaluation allreduce in step 5's gap, and another one in the middle of step 9.
        insert_extra(&mut ranks, 5 * 5, 1);
        insert_extra(&mut ranks, 9 * 5 + 3, 2);
        let inf = infer(&ranks).unwrap();
        for r in &inf.ranks {
            let steps: Vec<u64> = r.steps.iter().map(|s| s.step).collect();
            // Job step 9 holds the extra call between its buckets: it is not the pattern,
            // and inferred steps count the 15 others.
            assert_eq!(steps, (0..15).collect::<Vec<u64>>(), "rank {}", r.rank);
            let last = r.steps.last().unwrap();
            assert_eq!((last.phases_ns[BEFORE_FIRST], last.phases_ns[BETWEEN]), (60 * MS, 42 * MS));
        }
    }

    #[test]
    fn look_alike_buckets_resume_at_the_true_turn() {
        // Four identical allreduces per step, 60 ms before the first; an extra call in the
        // middle of step 6 shifts the stride by one.
        let ar = sig(1, 4096);
        let step = [(ar, 10), (ar, 10), (ar, 10), (ar, 60)];
        let mut ranks = job(2, &[sig(1, 7)], &step, 14, |_, _, _| 0);
        insert_extra(&mut ranks, 1 + 6 * 4 + 1, 1);
        let inf = infer(&ranks).unwrap();
        let r = &inf.ranks[0];
        assert!(r.steps.len() >= 12, "{:?}", r.steps.iter().map(|s| s.step).collect::<Vec<_>>());
        for s in r.steps.iter().filter(|s| s.step != 6) {
            assert_eq!(s.phases_ns[BEFORE_FIRST], 60 * MS, "step {}", s.step);
            assert_eq!(s.phases_ns[BETWEEN], 30 * MS, "step {}", s.step);
        }
    }

    #[test]
    fn a_rank_that_lost_its_first_steps_lines_up_by_keys() {
        let mut ranks = job(3, &[], &trainer_step(), 12, |_, _, _| 0);
        ranks[1].calls.drain(..13);
        let inf = infer(&ranks).unwrap();
        let first = |r: usize| inf.ranks[r].steps[0].step;
        // With no set-up call, the job's first step has no call before it to begin at:
        // steps count from its second.
        assert_eq!(first(0), 0);
        assert_eq!(first(1), 2, "13 calls lost: the job's steps 0-2 are gone, step 3 is whole");
        assert_eq!(inf.ranks[1].steps[0].end_ns, inf.ranks[0].steps[2].end_ns);
    }

    #[test]
    fn jittered_schedules_with_lost_and_garbled_calls_keep_every_invariant() {
        use crate::core::rng::SplitMix64;
        let mut inferred = 0;
        for seed in 0..40 {
            let mut rng = SplitMix64::new(seed);
            let buckets = 1 + rng.below(6) as usize;
            let mut step: Vec<(Signature, u64)> =
                (0..buckets).map(|b| (sig(1 + rng.below(2), 4096 * (1 + (b as u64 % 2))), 5 + rng.below(10))).collect();
            step.last_mut().unwrap().1 = 40 + rng.below(40);
            let ranks = 1 + rng.below(6) as u32;
            let mut job = job(ranks, &[sig(1, 7)], &step, 4 + rng.below(12) as usize, |_, _, _| extra_ms(seed));
            // A damaged log: calls lost, times out of order.
            for r in &mut job {
                if !r.calls.is_empty() && seed % 3 == 0 {
                    r.calls.remove((seed as usize * 7) % r.calls.len());
                }
                if let Some(c) = r.calls.get_mut(3).filter(|_| seed % 5 == 0) {
                    c.exit_ns = c.enter_ns.saturating_sub(1);
                }
            }
            let Some(inf) = infer(&job) else { continue };
            inferred += 1;
            assert!(!inf.pattern.is_empty() && inf.pattern.len() <= super::super::pattern::MAX_PERIOD);
            for r in &inf.ranks {
                assert!(r.spans.windows(2).all(|w| w[0].end_ns <= w[1].begin_ns), "seed {seed}");
                assert!(r.steps.windows(2).all(|w| w[0].step < w[1].step), "seed {seed}");
                for s in &r.steps {
                    assert_eq!(s.phases_ns.iter().sum::<u64>(), s.end_ns - s.begin_ns, "seed {seed}");
                }
            }
        }
        assert!(inferred >= 20, "most schedules repeat 4 or more times: {inferred}/40 inferred");
    }

    #[test]
    fn hostile_calls_never_panic() {
        use crate::core::rng::SplitMix64;
        // Keys repeated or shared, times at the ends of u64, exits before enters, a
        // pattern that holds for a while and then breaks: whatever a damaged log decodes to.
        for seed in 0..200 {
            let mut rng = SplitMix64::new(seed);
            let ranks: Vec<RankCalls> = (0..1 + rng.below(4) as u32)
                .map(|rank| {
                    let calls = (0..rng.below(200))
                        .map(|i| {
                            let t = match rng.below(4) {
                                0 => u64::MAX - rng.below(3),
                                1 => rng.below(3),
                                _ => i * 1_000 + rng.below(2_000),
                            };
                            Call {
                                signature: sig(1 + rng.below(2), [4096, 2, 4096][(i % 3) as usize]),
                                key: (1, if rng.below(5) == 0 { 7 } else { i }),
                                enter_ns: t,
                                exit_ns: if rng.below(6) == 0 { t / 2 } else { t.saturating_add(rng.below(500)) },
                            }
                        })
                        .collect();
                    RankCalls { rank, calls }
                })
                .collect();
            if let Some(inf) = infer(&ranks) {
                for r in &inf.ranks {
                    for s in &r.steps {
                        assert_eq!(s.phases_ns.iter().sum::<u64>(), s.end_ns - s.begin_ns, "seed {seed}");
                    }
                }
            }
        }
    }

    /// A deterministic extra delay per seed, for the schedule above.
    fn extra_ms(seed: u64) -> u64 {
        seed % 4
    }

    #[test]
    fn no_repeating_pattern_infers_nothing() {
        let chaos: Vec<_> = (0..40).map(|i| (sig(1, 100 + i * 37 % 41), 5)).collect();
        assert_eq!(infer(&job(2, &[], &chaos, 1, |_, _, _| 0)), None);
        assert_eq!(infer(&[]), None);
    }
}
