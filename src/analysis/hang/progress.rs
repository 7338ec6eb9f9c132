//! Hangs seen from step and stage progress alone, whatever the backend: a gloo job's
//! collectives run in C++ where no door sees them, and a rank asleep in Python leaves no
//! NCCL call behind. Each rank's step and stage markers say where it is and when it last
//! advanced (its live header). When no rank has advanced for longer than the job has ever
//! taken for a step, the job is stuck; the rank behind the others (an earlier step, or at
//! the same step the few in another stage than the rest) holds it up: the others, a step
//! ahead or further into it, wait for it in a collective.
//!
//! When every rank stands at the same place, nobody is behind: a long phase without
//! markers (evaluation, a checkpoint every rank writes) looks the same as a hang every rank
//! shares, and this says neither.

use serde::Serialize;

/// Newest steps per rank whose wall times pace the threshold.
pub const STEPS_PACED: usize = 64;
/// The job's first steps hold the warm-up, left out as the cadence leaves them out.
const WARM_UP_STEPS: u64 = 2;
/// Steps measured, over all ranks, before the threshold follows them.
const MIN_PACED: usize = 3;

/// Where one rank stands.
#[derive(Clone, Debug, PartialEq)]
pub struct RankProgress {
    pub rank: i32,
    /// The step it is in (its newest step marker); `None` before the first.
    pub step: Option<u64>,
    /// The stage it is in; `None` between stages.
    pub stage: Option<String>,
    /// How long it had gone without a step or stage marker, as of the reader's now for a
    /// live rank and of its last heartbeat for one gone. `None` when it never marked one.
    pub idle_ns: Option<u64>,
    /// Its newest complete steps (at most `STEPS_PACED`): (step, wall time).
    pub recent_steps: Vec<(u64, u64)>,
}

/// How long without progress counts as stuck: `max(min_stuck, factor x the longest step
/// the ranks' recent history shows)`, or the fallback while too few steps were measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ProgressThreshold {
    /// The longest recent step, warm-up left out; `None`: too few steps measured.
    pub longest_step_ns: Option<u64>,
    pub steps_measured: usize,
    pub threshold_ns: u64,
}

/// A job stuck by its progress, and the ranks behind.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProgressStall {
    /// The ranks behind, ascending: the culprits. The first is the headline's.
    pub behind_ranks: Vec<i32>,
    pub step: Option<u64>,
    pub stage: Option<String>,
    /// How long the first rank behind has not advanced.
    pub idle_ns: u64,
    /// Where the others stand: the most common (step, stage) among them.
    pub ahead_step: Option<u64>,
    pub ahead_stage: Option<String>,
    pub ahead_ranks: Vec<i32>,
    /// How long the job as a whole has not advanced: the shortest idle time of any rank.
    pub job_idle_ns: u64,
}

/// The threshold from the ranks' own step times.
pub fn threshold(ranks: &[RankProgress], factor: f64, min_stuck_ns: u64, fallback_ns: u64) -> ProgressThreshold {
    let walls: Vec<u64> = ranks
        .iter()
        .flat_map(|r| r.recent_steps.iter().filter(|&&(step, _)| step >= WARM_UP_STEPS).map(|&(_, wall)| wall))
        .collect();
    let longest_step_ns = (walls.len() >= MIN_PACED).then(|| walls.iter().copied().max().unwrap_or(0));
    let scaled = match longest_step_ns {
        Some(step) => (step as f64 * factor).min(u64::MAX as f64) as u64,
        None => fallback_ns,
    };
    ProgressThreshold { longest_step_ns, steps_measured: walls.len(), threshold_ns: scaled.max(min_stuck_ns) }
}

/// The job's stall by progress, if every rank with markers has gone `threshold_ns`
/// without advancing and some are behind the others; `None` otherwise.
pub fn stall(ranks: &[RankProgress], threshold_ns: u64) -> Option<ProgressStall> {
    let marked: Vec<(&RankProgress, u64)> = ranks.iter().filter_map(|r| Some((r, r.idle_ns?))).collect();
    if marked.len() < 2 {
        return None;
    }
    let job_idle_ns = marked.iter().map(|&(_, idle)| idle).min()?;
    if job_idle_ns < threshold_ns {
        return None;
    }
    // Behind by step first: a rank of a synchronous job a step ahead waits for it.
    let first_step = marked.iter().map(|(r, _)| r.step).min()?;
    let last_step = marked.iter().map(|(r, _)| r.step).max()?;
    let behind: Vec<&RankProgress> = if first_step != last_step {
        marked.iter().filter(|(r, _)| r.step == first_step).map(|&(r, _)| r).collect()
    } else {
        // One step: the few in another stage than the rest.
        let majority = most_common(marked.iter().map(|(r, _)| &r.stage))?;
        let odd: Vec<&RankProgress> = marked.iter().filter(|(r, _)| &r.stage != majority.0).map(|&(r, _)| r).collect();
        if odd.is_empty() || odd.len() >= majority.1 {
            return None;
        }
        odd
    };
    let ahead: Vec<&RankProgress> =
        marked.iter().filter(|(r, _)| !behind.iter().any(|b| b.rank == r.rank)).map(|&(r, _)| r).collect();
    let (ahead_step, ahead_stage) = most_common(ahead.iter().map(|r| (r.step, r.stage.as_deref())))?.0;
    let first = behind.iter().min_by_key(|r| r.rank)?;
    let mut behind_ranks: Vec<i32> = behind.iter().map(|r| r.rank).collect();
    behind_ranks.sort_unstable();
    let mut ahead_ranks: Vec<i32> = ahead.iter().map(|r| r.rank).collect();
    ahead_ranks.sort_unstable();
    Some(ProgressStall {
        behind_ranks,
        step: first.step,
        stage: first.stage.clone(),
        idle_ns: first.idle_ns?,
        ahead_step,
        ahead_stage: ahead_stage.map(str::to_string),
        ahead_ranks,
        job_idle_ns,
    })
}

/// The most common item and its count (the first seen on a tie).
fn most_common<T: PartialEq + Copy>(items: impl Iterator<Item = T>) -> Option<(T, usize)> {
    let mut counts: Vec<(T, usize)> = Vec::new();
    for item in items {
        match counts.iter_mut().find(|(k, _)| *k == item) {
            Some((_, n)) => *n += 1,
            None => counts.push((item, 1)),
        }
    }
    counts.into_iter().fold(None, |best, (k, n)| match best {
        Some((_, m)) if m >= n => best,
        _ => Some((k, n)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const BWD: &str = "model.backward_cpu_wall";

    fn at(rank: i32, step: u64, stage: Option<&str>, idle_ms: u64) -> RankProgress {
        RankProgress {
            rank,
            step: Some(step),
            stage: stage.map(str::to_string),
            idle_ns: Some(idle_ms * MS),
            recent_steps: (10..30).map(|step| (step, 100 * MS)).collect(),
        }
    }

    #[test]
    fn a_rank_a_step_behind_the_stuck_others_is_named() {
        // Rank 2 sleeps before its optimizer step at step 29; the others wait for it in
        // step 30's backward allreduce.
        let ranks =
            [at(0, 30, Some(BWD), 900), at(1, 30, Some(BWD), 880), at(2, 29, None, 1_000), at(3, 30, Some(BWD), 910)];
        let t = threshold(&ranks, 1.5, 250 * MS, 30_000 * MS);
        assert_eq!((t.longest_step_ns, t.threshold_ns), (Some(100 * MS), 250 * MS), "the floor");
        let s = stall(&ranks, t.threshold_ns).expect("stuck");
        assert_eq!((s.behind_ranks.as_slice(), s.step, s.stage.as_deref()), ([2].as_slice(), Some(29), None));
        assert_eq!(
            (s.ahead_step, s.ahead_stage.as_deref(), s.ahead_ranks.as_slice()),
            (Some(30), Some(BWD), [0, 1, 3].as_slice())
        );
        assert_eq!((s.idle_ns, s.job_idle_ns), (1_000 * MS, 880 * MS));
    }

    #[test]
    fn at_one_step_the_rank_in_another_stage_is_behind() {
        let ranks = [at(0, 7, Some(BWD), 900), at(1, 7, Some("data.next_wait"), 1_000), at(2, 7, Some(BWD), 950)];
        let s = stall(&ranks, 300 * MS).expect("stuck");
        assert_eq!((s.behind_ranks.as_slice(), s.stage.as_deref()), ([1].as_slice(), Some("data.next_wait")));
    }

    #[test]
    fn a_rank_still_advancing_means_no_stall() {
        let ranks = [at(0, 30, Some(BWD), 900), at(1, 31, Some("data.next_wait"), 20), at(2, 29, None, 1_000)];
        assert_eq!(stall(&ranks, 300 * MS), None);
    }

    #[test]
    fn every_rank_at_the_same_place_is_a_long_phase_or_a_shared_hang_and_names_nobody() {
        let ranks = [at(0, 10, None, 5_000), at(1, 10, None, 5_000), at(2, 10, None, 5_000)];
        assert_eq!(stall(&ranks, 300 * MS), None);
        // Two against two: no rank is behind the rest.
        let split = [at(0, 10, Some(BWD), 900), at(1, 10, Some(BWD), 900), at(2, 10, None, 900), at(3, 10, None, 900)];
        assert_eq!(stall(&split, 300 * MS), None);
    }

    #[test]
    fn too_few_steps_fall_back_and_the_warm_up_is_left_out() {
        let mut young = at(0, 2, None, 0);
        young.recent_steps = vec![(0, 5_000 * MS), (1, 100 * MS)];
        let t = threshold(&[young.clone()], 1.5, 250 * MS, 30_000 * MS);
        assert_eq!((t.longest_step_ns, t.steps_measured, t.threshold_ns), (None, 0, 30_000 * MS));
        young.recent_steps.extend([(2, 120 * MS), (3, 110 * MS), (4, 100 * MS)]);
        let t = threshold(&[young], 1.5, 250 * MS, 30_000 * MS);
        assert_eq!((t.longest_step_ns, t.steps_measured, t.threshold_ns), (Some(120 * MS), 3, 250 * MS));
    }

    #[test]
    fn ranks_without_markers_are_not_compared() {
        let mut unmarked = at(1, 0, None, 0);
        (unmarked.step, unmarked.idle_ns) = (None, None);
        assert_eq!(stall(&[at(0, 3, None, 5_000), unmarked], 300 * MS), None);
    }
}
