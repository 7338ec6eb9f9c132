//! The three slow-rank detectors over one job's per-rank step series, and the answer they
//! give together: which rank, which stage, and how many detectors agree.
//!
//! - L1 (ARGUS §6.1) per rank, over its iteration (step wall) times: jitter windows and a
//!   step regression, each attributed to the stage of the rank's own vector that grew.
//! - L2 (ARGUS App. B) per stage within each group of same-role ranks: CV grade and z-score
//!   stragglers over the run's per-rank mean stage durations.
//! - Expected time (VenusTrace Alg. 2) per stage of each group. A node is one stage of one
//!   step; its duration T_v is the stage's frontier advance (StageFrontier eq. 1: how much
//!   the group's slowest cumulative time moved during the stage), which is the stage's part
//!   of the critical path and, unlike the per-stage maximum, does not charge a wait for a
//!   late peer to the stage where the others wait. The rank named is r_max over the ranks'
//!   cumulative times at the stage's end: the rank the group was waiting for.
//!
//! Gates of ours keep small effects from being findings (`effect`): every finding must add
//! at least the effect floor (`min_effect` of the job's median step time, and at least
//! `min_effect_s`) per step: an L2 straggler over its group's mean, a slow node over its
//! expectation (and its slow steps together, over the run), an L1 regression over the
//! steps before it, a jitter spike over the run; a (stage, rank) needs `min_slow_steps`
//! slow steps, so one descheduled step on a crowded host is not a slow rank; and ranks are
//! compared only in groups of `effect::MIN_GROUP_RANKS` or more. A regression most ranks
//! share is one event of the job (`job_wide`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::attribution::{largest_shift, Center, StageShift};
use super::change_point::ChangePointParams;
use super::effect::{comparable_groups, floor_s, spike_effect_s};
use super::expected_time::{ExpectedTimeParams, NodeTiming, SlowNodeDetector};
use super::jitter::JitterParams;
use super::job_wide::{shared_regression, JobRegression};
use super::l1::{level1, L1Class};
use super::stragglers::{assess_group, GroupAssessment, StragglerParams};
use crate::analysis::frontier::{advances_of, prefixes_into};
use crate::core::quantile::select_quantile;

/// One rank's complete steps, in increasing step order.
#[derive(Clone, Debug, PartialEq)]
pub struct RankSeries {
    pub rank: u32,
    /// Ranks with equal groups play the same role: L2 and expected time compare them.
    pub group: String,
    pub steps: Vec<u64>,
    /// Step wall time, seconds: the iteration time L1 reads.
    pub wall_s: Vec<f64>,
    /// `durations[i][s]`: seconds of the job's stage `s` at `steps[i]` (0 if it lacks it).
    pub durations: Vec<Vec<f64>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SlowParams {
    pub jitter: JitterParams,
    pub change: ChangePointParams,
    pub stragglers: StragglerParams,
    pub expected: ExpectedTimeParams,
    /// Smallest time per step a finding adds, as a fraction of the job's median step
    /// time. Default 0.05.
    pub min_effect: f64,
    /// ...and in seconds, whatever the step time. Default 0.001.
    pub min_effect_s: f64,
    /// Fewest slow steps that make a (stage, rank) an expected-time finding. Default 2.
    pub min_slow_steps: usize,
}

impl Default for SlowParams {
    fn default() -> SlowParams {
        SlowParams {
            jitter: JitterParams::default(),
            change: ChangePointParams::default(),
            stragglers: StragglerParams::default(),
            expected: ExpectedTimeParams::default(),
            min_effect: 0.05,
            min_effect_s: 0.001,
            min_slow_steps: 2,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct JitterFinding {
    pub first_step: u64,
    pub last_step: u64,
    pub max_ratio: f64,
    pub baseline_s: f64,
    /// The spike itself: `None` when the gate fired on a dip.
    pub effective: Option<(u64, u64)>,
    pub effective_width: usize,
    pub stage: Option<StageShift>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RegressionFinding {
    /// First step of the slower segment.
    pub step: u64,
    pub mean_before_s: f64,
    pub mean_after_s: f64,
    pub ratio: f64,
    pub cv_before: f64,
    pub cv_after: f64,
    pub stage: Option<StageShift>,
    /// Part of the job's shared regression (`JobSlow::job_regression`).
    pub job_wide: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RankL1 {
    pub rank: u32,
    pub steps: usize,
    pub median_step_s: f64,
    pub class: L1Class,
    pub jitter: Vec<JitterFinding>,
    pub regression: Option<RegressionFinding>,
}

/// Serialized as is in `sf slow --json`'s `l2[].stragglers`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Straggler {
    pub rank: u32,
    pub z: f64,
    pub mean_s: f64,
}

/// L2 for one stage in one group.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupStage {
    pub group: String,
    pub ranks: Vec<u32>,
    pub stage: usize,
    pub assessment: GroupAssessment,
    /// The assessment's stragglers whose excess passes `min_effect`.
    pub stragglers: Vec<Straggler>,
}

/// Expected-time findings of one (group, stage, rank).
#[derive(Clone, Debug, PartialEq)]
pub struct SlowSteps {
    pub group: String,
    pub stage: usize,
    pub rank: u32,
    pub steps: Vec<u64>,
    /// Steps the group's tracker saw for this stage.
    pub observed_steps: usize,
    /// The largest T_v / T_expect, and T_expect then.
    pub worst_ratio: f64,
    pub expected_s: f64,
    /// Σ (T_v − T_expect) over the slow steps, per observed step: the time it cost.
    pub excess_s: f64,
}

/// One slow (rank, stage) and the detectors that name it.
#[derive(Clone, Debug, PartialEq)]
pub struct SlowRank {
    pub rank: u32,
    pub stage: usize,
    pub group: String,
    /// (z, CV) when L2 names it.
    pub l2: Option<(f64, f64)>,
    /// (slow steps, observed steps) when expected time names it.
    pub expected: Option<(usize, usize)>,
    /// Whether the rank's own L1 regression or jitter grew in this stage.
    pub l1_regression: bool,
    pub l1_jitter: bool,
    /// Seconds per step the stage ran over its comparison (over the group's mean for L2,
    /// over T_expect for expected time): the larger, what ranks leads of equal support.
    pub excess_s: f64,
}

impl SlowRank {
    /// How many of the three levels agree: one is a lead, two or three a finding.
    pub fn detectors(&self) -> usize {
        self.l2.is_some() as usize + self.expected.is_some() as usize + (self.l1_regression || self.l1_jitter) as usize
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct JobSlow {
    pub median_step_s: f64,
    /// The effect floor every finding passed, seconds per step.
    pub floor_s: f64,
    /// Groups too small to compare, merged into `effect::MERGED`.
    pub merged_groups: Vec<String>,
    /// Groups too small to compare and left out, with their rank counts.
    pub skipped_groups: Vec<(String, usize)>,
    /// A regression most ranks share, reported once.
    pub job_regression: Option<JobRegression>,
    pub l1: Vec<RankL1>,
    pub l2: Vec<GroupStage>,
    pub expected: Vec<SlowSteps>,
    /// Named by L2 or expected time, most detectors first.
    pub slow_ranks: Vec<SlowRank>,
}

impl JobSlow {
    /// Anything to act on: a slow rank (its jitter spikes with it), or a regression. A
    /// spike no detector pins on a rank stalled the whole job for a moment, as a loaded
    /// host does: shown, but no finding.
    pub fn found(&self) -> bool {
        !self.slow_ranks.is_empty()
            || self.job_regression.as_ref().is_some_and(|g| g.finding)
            || self.l1.iter().any(|r| r.regression.as_ref().is_some_and(|g| self.own_regression_found(g)))
    }

    /// A rank's own regression, which no other rank shares, is a finding when it costs at
    /// least twice the effect floor: seen by L1 alone, a smaller one is what a host's
    /// scheduling does to one process now and then (a quiet healthy run of the matrix saw
    /// one rank's own step time rise x1.06, 1.1 floors).
    pub fn own_regression_found(&self, g: &RegressionFinding) -> bool {
        !g.job_wide && g.mean_after_s - g.mean_before_s >= 2.0 * self.floor_s
    }
}

/// All three levels over `ranks`, each rank's stages indexed alike (`stages` of them).
pub fn analyze_job(ranks: &[RankSeries], stages: usize, params: &SlowParams) -> JobSlow {
    let mut walls: Vec<f64> = ranks.iter().flat_map(|r| r.wall_s.iter().copied()).collect();
    let median_step_s = if walls.is_empty() { 0.0 } else { select_quantile(&mut walls, 0.5) };
    let min_excess = floor_s(params.min_effect, params.min_effect_s, median_step_s);
    let mut l1: Vec<RankL1> = ranks.iter().map(|r| rank_l1(r, params, min_excess)).collect();
    let mut job_regression = shared_regression(ranks, &l1, stages, min_excess);
    if let Some(shared) = &mut job_regression {
        if !shared.finding {
            // The job slowed alike, by less than a finding's cost: a host's load. A rank
            // whose own regression came some steps apart but costs no more is that same
            // load reaching it at another moment, not a finding of its own.
            for r in &l1 {
                let small = r.regression.as_ref().is_some_and(|g| g.mean_after_s - g.mean_before_s < 2.0 * min_excess);
                if small && !shared.ranks.contains(&r.rank) {
                    shared.ranks.push(r.rank);
                }
            }
            shared.ranks.sort_unstable();
        }
        for r in l1.iter_mut().filter(|r| shared.ranks.contains(&r.rank)) {
            r.regression.iter_mut().for_each(|g| g.job_wide = true);
        }
    }
    let grouping = comparable_groups(ranks);
    let groups = &grouping.groups;
    let l2: Vec<GroupStage> = groups
        .iter()
        .flat_map(|(group, members)| (0..stages).filter_map(move |s| group_l2(group, members, s, params, min_excess)))
        .collect();
    let expected: Vec<SlowSteps> =
        groups.iter().flat_map(|(group, members)| group_expected(group, members, stages, params, min_excess)).collect();
    let slow_ranks = combine(&l1, &l2, &expected);
    JobSlow {
        median_step_s,
        floor_s: min_excess,
        merged_groups: grouping.merged,
        skipped_groups: grouping.skipped,
        job_regression,
        l1,
        l2,
        expected,
        slow_ranks,
    }
}

/// L1 over one rank, keeping the events that pass the effect floor `min_excess`: a
/// regression must add it to every step after, a spike over the run.
fn rank_l1(r: &RankSeries, params: &SlowParams, min_excess: f64) -> RankL1 {
    let mut report = level1(&r.wall_s, &params.jitter, &params.change);
    report.regression = report.regression.filter(|c| c.mean_after - c.mean_before >= min_excess);
    report.jitter.retain(|j| {
        let run = j.effective_start..j.effective_start + j.effective_width;
        spike_effect_s(&r.wall_s, run, j.baseline) >= min_excess
    });
    let mut sorted = r.wall_s.clone();
    let median_step_s = if sorted.is_empty() { 0.0 } else { select_quantile(&mut sorted, 0.5) };
    let jitter = report
        .jitter
        .iter()
        .map(|j| {
            let run = j.effective_start..j.effective_start + j.effective_width;
            JitterFinding {
                first_step: r.steps[j.start],
                last_step: r.steps[j.end - 1],
                max_ratio: j.max_ratio,
                baseline_s: j.baseline,
                effective: (j.effective_width > 0).then(|| (r.steps[run.start], r.steps[run.end - 1])),
                effective_width: j.effective_width,
                stage: largest_shift(&r.durations, run, j.start..j.end, Center::Median),
            }
        })
        .collect();
    let regression = report.regression.as_ref().map(|c| RegressionFinding {
        step: r.steps[c.at],
        mean_before_s: c.mean_before,
        mean_after_s: c.mean_after,
        ratio: c.ratio,
        cv_before: c.cv_before,
        cv_after: c.cv_after,
        stage: largest_shift(&r.durations, c.at..r.steps.len(), c.at..r.steps.len(), Center::Mean),
        job_wide: false,
    });
    RankL1 { rank: r.rank, steps: r.steps.len(), median_step_s, class: report.class(), jitter, regression }
}

fn group_l2(
    group: &str,
    members: &[&RankSeries],
    stage: usize,
    params: &SlowParams,
    min_excess: f64,
) -> Option<GroupStage> {
    let means: Vec<(u32, f64)> = members
        .iter()
        .filter(|r| !r.durations.is_empty())
        .map(|r| (r.rank, r.durations.iter().map(|d| d[stage]).sum::<f64>() / r.durations.len() as f64))
        .collect();
    let assessment = assess_group(&means, &params.stragglers)?;
    let stragglers = assessment
        .stragglers
        .iter()
        .filter_map(|&(rank, z)| {
            let mean_s = means.iter().find(|m| m.0 == rank).map(|m| m.1)?;
            (mean_s - assessment.mean >= min_excess).then_some(Straggler { rank, z, mean_s })
        })
        .collect();
    Some(GroupStage {
        group: group.to_string(),
        ranks: means.iter().map(|m| m.0).collect(),
        stage,
        assessment,
        stragglers,
    })
}

/// The slow steps of one (stage, rank) so far.
#[derive(Default)]
struct Tally {
    steps: Vec<u64>,
    /// The largest T_v / T_expect, and T_expect then.
    worst_ratio: f64,
    expected_s: f64,
    /// Σ (T_v − T_expect).
    excess_s: f64,
}

/// Alg. 2 over one group's steps, in step order; a step counts the members that have it.
fn group_expected(
    group: &str,
    members: &[&RankSeries],
    stages: usize,
    params: &SlowParams,
    min_excess: f64,
) -> Vec<SlowSteps> {
    let mut all_steps: Vec<u64> = members.iter().flat_map(|r| r.steps.iter().copied()).collect();
    all_steps.sort_unstable();
    all_steps.dedup();
    let mut detector = SlowNodeDetector::new(params.expected);
    let mut slow: BTreeMap<(usize, u32), Tally> = BTreeMap::new();
    let (mut durations, mut prefixes, mut present) = (Vec::new(), Vec::new(), Vec::new());
    for &step in &all_steps {
        durations.clear();
        present.clear();
        for r in members {
            if let Ok(i) = r.steps.binary_search(&step) {
                durations.extend_from_slice(&r.durations[i]);
                present.push(r.rank);
            }
        }
        prefixes.resize(durations.len(), 0.0);
        prefixes_into(&durations, stages, &mut prefixes);
        let frontier: Vec<f64> =
            (0..stages).map(|s| prefixes.chunks_exact(stages).map(|p| p[s]).fold(0.0, f64::max)).collect();
        let nodes: Vec<NodeTiming<usize>> = advances_of(&frontier)
            .into_iter()
            .enumerate()
            .map(|(s, advance)| NodeTiming {
                node: s,
                duration: advance,
                on_critical_path: advance > 0.0,
                rank_times: present.iter().zip(prefixes.chunks_exact(stages)).map(|(&r, p)| (r, p[s])).collect(),
            })
            .collect();
        for node in detector.observe_iteration(&nodes) {
            let (Some(rank), true) = (node.slow_rank, node.duration - node.expected >= min_excess) else { continue };
            let entry =
                slow.entry((node.node, rank)).or_insert(Tally { expected_s: node.expected, ..Tally::default() });
            entry.steps.push(step);
            entry.excess_s += node.duration - node.expected;
            let ratio = node.duration / node.expected;
            if ratio > entry.worst_ratio {
                (entry.worst_ratio, entry.expected_s) = (ratio, node.expected);
            }
        }
    }
    let observed = all_steps.len().max(1) as f64;
    slow.into_iter()
        .filter(|(_, t)| t.steps.len() >= params.min_slow_steps.max(1) && t.excess_s / observed >= min_excess)
        .map(|((stage, rank), t)| SlowSteps {
            group: group.to_string(),
            stage,
            rank,
            steps: t.steps,
            observed_steps: all_steps.len(),
            worst_ratio: t.worst_ratio,
            expected_s: t.expected_s,
            excess_s: t.excess_s / observed,
        })
        .collect()
}

fn combine(l1: &[RankL1], l2: &[GroupStage], expected: &[SlowSteps]) -> Vec<SlowRank> {
    let mut found: BTreeMap<(u32, usize), SlowRank> = BTreeMap::new();
    for g in l2 {
        for s in &g.stragglers {
            let hit = slot(&mut found, &g.group, s.rank, g.stage);
            hit.l2 = Some((s.z, g.assessment.cv));
            hit.excess_s = hit.excess_s.max(s.mean_s - g.assessment.mean);
        }
    }
    for e in expected {
        let hit = slot(&mut found, &e.group, e.rank, e.stage);
        hit.expected = Some((e.steps.len(), e.observed_steps));
        hit.excess_s = hit.excess_s.max(e.excess_s);
    }
    // L1 corroborates a rank already named; alone it names every rank of a synchronous job.
    for r in l1 {
        for (key, hit) in found.iter_mut() {
            if key.0 != r.rank {
                continue;
            }
            let same = |s: &Option<StageShift>| s.is_some_and(|s| s.stage == key.1);
            hit.l1_regression |= r.regression.as_ref().is_some_and(|g| same(&g.stage));
            hit.l1_jitter |= r.jitter.iter().any(|j| same(&j.stage));
        }
    }
    let mut list: Vec<SlowRank> = found.into_values().collect();
    // Most support first; of equal support, the costliest: a lead of one detector that
    // costs a whole stage per step outranks scheduling noise on another rank.
    list.sort_by(|a, b| {
        b.detectors()
            .cmp(&a.detectors())
            .then(b.excess_s.total_cmp(&a.excess_s))
            .then(a.rank.cmp(&b.rank))
            .then(a.stage.cmp(&b.stage))
    });
    list
}

/// The finding of (rank, stage), named in `group`, the group it was compared in.
fn slot<'a>(found: &'a mut BTreeMap<(u32, usize), SlowRank>, group: &str, rank: u32, stage: usize) -> &'a mut SlowRank {
    found.entry((rank, stage)).or_insert_with(|| SlowRank {
        rank,
        stage,
        group: group.to_string(),
        l2: None,
        expected: None,
        l1_regression: false,
        l1_jitter: false,
        excess_s: 0.0,
    })
}
