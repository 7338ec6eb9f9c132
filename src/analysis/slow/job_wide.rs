//! A regression every rank shares. In a synchronous job one rank's slowdown slows every
//! rank's steps from the same step on, so L1 finds the same regression on each: it is one
//! event of the job, reported once. Which rank caused it is the frontier's to say: the
//! stage whose frontier advance (StageFrontier eq. 1) grew the most from that step on, and
//! the rank that led that stage's frontier in most steps since. Every rank slowing alike
//! with no rank behind it is what a host's load or a shared input does: a finding only
//! when it costs at least twice the effect floor.

use super::job::{RankL1, RankSeries};
use crate::analysis::frontier::{advances_of, prefixes_into};

/// How far apart the ranks' change points may be and still be one event, in steps.
const SAME_STEP: u64 = 3;

#[derive(Clone, Debug, PartialEq)]
pub struct JobRegression {
    /// The median first step of the slower segment over the ranks that share it.
    pub step: u64,
    pub ranks: Vec<u32>,
    /// Medians over those ranks.
    pub mean_before_s: f64,
    pub mean_after_s: f64,
    pub ratio: f64,
    pub cause: Option<Cause>,
    /// A cause named, or a cost of at least twice the effect floor per step.
    pub finding: bool,
}

/// The frontier's answer: the stage whose advance grew, and the rank that led it.
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    pub rank: u32,
    pub stage: usize,
    /// Mean frontier advance of the stage after the step minus before, seconds.
    pub growth_s: f64,
    /// Steps from `step` on in which `rank` was alone furthest behind at the stage's end,
    /// of `steps` steps every rank has.
    pub led_steps: usize,
    pub steps: usize,
}

/// The regression more than half of the ranks (two or more) share, within `SAME_STEP`
/// steps of their median change point; `None` when no such event. `floor_s` is the effect
/// floor the ranks' regressions passed.
pub fn shared_regression(ranks: &[RankSeries], l1: &[RankL1], stages: usize, floor_s: f64) -> Option<JobRegression> {
    let mut at: Vec<u64> = l1.iter().filter_map(|r| r.regression.as_ref().map(|g| g.step)).collect();
    if at.len() < 2 || 2 * at.len() <= l1.len() {
        return None;
    }
    at.sort_unstable();
    let step = at[at.len() / 2];
    let sharing: Vec<&RankL1> =
        l1.iter().filter(|r| r.regression.as_ref().is_some_and(|g| g.step.abs_diff(step) <= SAME_STEP)).collect();
    if sharing.len() < 2 || 2 * sharing.len() <= l1.len() {
        return None;
    }
    let median = |f: &dyn Fn(&RankL1) -> f64| {
        let mut v: Vec<f64> = sharing.iter().map(|r| f(r)).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let before = median(&|r| r.regression.as_ref().map_or(0.0, |g| g.mean_before_s));
    let after = median(&|r| r.regression.as_ref().map_or(0.0, |g| g.mean_after_s));
    let cause = frontier_cause(ranks, stages, step);
    Some(JobRegression {
        step,
        ranks: sharing.iter().map(|r| r.rank).collect(),
        mean_before_s: before,
        mean_after_s: after,
        ratio: if before > 0.0 { after / before } else { 0.0 },
        finding: cause.is_some() || after - before >= 2.0 * floor_s,
        cause,
    })
}

/// The stage whose mean frontier advance grew the most from `step` on, over the steps
/// every rank has, and the rank alone furthest behind at its end in more than half of the
/// steps since; `None` when no stage grew or no rank leads that often.
fn frontier_cause(ranks: &[RankSeries], stages: usize, step: u64) -> Option<Cause> {
    let first = ranks.first()?;
    let common: Vec<u64> =
        first.steps.iter().copied().filter(|s| ranks.iter().all(|r| r.steps.binary_search(s).is_ok())).collect();
    let (mut sum_before, mut sum_after) = (vec![0.0; stages], vec![0.0; stages]);
    let (mut n_before, mut n_after) = (0usize, 0usize);
    let mut leaders: Vec<Vec<Option<u32>>> = Vec::new();
    let (mut durations, mut prefixes) = (Vec::new(), Vec::new());
    for &s in &common {
        durations.clear();
        for r in ranks {
            let i = r.steps.binary_search(&s).expect("a common step");
            durations.extend_from_slice(&r.durations[i]);
        }
        prefixes.resize(durations.len(), 0.0);
        prefixes_into(&durations, stages, &mut prefixes);
        let frontier: Vec<f64> =
            (0..stages).map(|j| prefixes.chunks_exact(stages).map(|p| p[j]).fold(0.0, f64::max)).collect();
        let advances = advances_of(&frontier);
        if s < step {
            sum_before.iter_mut().zip(&advances).for_each(|(sum, a)| *sum += a);
            n_before += 1;
            continue;
        }
        sum_after.iter_mut().zip(&advances).for_each(|(sum, a)| *sum += a);
        n_after += 1;
        leaders.push(
            (0..stages)
                .map(|j| {
                    let at_max: Vec<u32> = ranks
                        .iter()
                        .zip(prefixes.chunks_exact(stages))
                        .filter(|(_, p)| p[j] >= frontier[j])
                        .map(|(r, _)| r.rank)
                        .collect();
                    (at_max.len() == 1).then(|| at_max[0])
                })
                .collect(),
        );
    }
    if n_before == 0 || n_after == 0 {
        return None;
    }
    let (stage, growth_s) = (0..stages)
        .map(|j| (j, sum_after[j] / n_after as f64 - sum_before[j] / n_before as f64))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    if growth_s <= 0.0 {
        return None;
    }
    let mut counts: Vec<(u32, usize)> = Vec::new();
    for leader in leaders.iter().filter_map(|l| l[stage]) {
        match counts.iter_mut().find(|(r, _)| *r == leader) {
            Some((_, n)) => *n += 1,
            None => counts.push((leader, 1)),
        }
    }
    let (rank, led_steps) = counts.into_iter().max_by_key(|&(r, n)| (n, std::cmp::Reverse(r)))?;
    (2 * led_steps > n_after).then_some(Cause { rank, stage, growth_s, led_steps, steps: n_after })
}
