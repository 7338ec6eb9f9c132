//! `sf slow`: L1 jitter and regression per rank, L2 stragglers per group and stage, and
//! VenusTrace's expected-time tracking, over a job directory's step vectors.

use std::path::Path;

use serde::Serialize;
use stagefrontier::analysis::blame::{blame_table, culprits, CulpritParams};
use stagefrontier::analysis::slow::blamed::{by_caused_wait, own_time, Finding};
use stagefrontier::analysis::slow::change_point::ChangePointParams;
use stagefrontier::analysis::slow::expected_time::ExpectedTimeParams;
use stagefrontier::analysis::slow::jitter::JitterParams;
use stagefrontier::analysis::slow::job::{analyze_job, JobSlow, RankSeries, SlowParams, SlowRank, Straggler};
use stagefrontier::analysis::slow::l1::L1Class;
use stagefrontier::analysis::slow::stragglers::{Imbalance, StragglerParams};

use super::step_vectors::{self, RankSteps, NO_STEP_VECTORS};
use super::{waits, Failure};
use crate::cli::{GroupBy, SlowOptions};

/// The `--json` object; the field names the README lists are a contract.
#[derive(Debug, Serialize)]
pub struct SlowReport {
    pub dir: String,
    pub world: usize,
    /// Ranks with steps left after `skip_steps`.
    pub ranks: usize,
    pub ranks_without_steps: Vec<u32>,
    pub stages: Vec<String>,
    pub skip_steps: usize,
    pub group_by: &'static str,
    pub median_step_s: f64,
    pub params: Params,
    pub found: bool,
    /// Culprits of the others' waiting first, then the detectors' findings by the
    /// waiting they caused; a waiter is never listed for the wait it suffered.
    pub slow_ranks: Vec<SlowRankReport>,
    pub wait_attribution: WaitAttribution,
    pub l1: Vec<L1Report>,
    pub l2: Vec<L2Report>,
    pub expected_time: Vec<ExpectedReport>,
}

#[derive(Debug, Serialize)]
pub struct Params {
    pub jitter_window: usize,
    pub jitter_ratio: f64,
    pub exceed_ratio: f64,
    pub min_segment: usize,
    pub min_regression: f64,
    pub max_cv: f64,
    pub z_threshold: f64,
    pub mild_cv: f64,
    pub severe_cv: f64,
    pub alpha: f64,
    pub beta: f64,
    pub min_effect: f64,
    pub min_slow_steps: usize,
}

/// What the matched collectives say: who made the others wait, and in which stage.
#[derive(Debug, Serialize)]
pub struct WaitAttribution {
    /// Collectives matched across ranks by communicator and sequence number.
    pub collectives: usize,
    /// Seconds all ranks waited inside collectives in the judged steps (taken out of the
    /// stage times the detectors read).
    pub wait_s: f64,
    /// Median step wall time the culprit floor is a share of.
    pub median_step_s: f64,
    pub params: CulpritParamsReport,
    /// The blame table: (rank, stage) -> seconds of other ranks' waiting caused, largest
    /// first, at most `BLAME_CELLS` cells.
    pub blame: Vec<BlameCellReport>,
}

#[derive(Debug, Serialize)]
pub struct CulpritParamsReport {
    pub min_delay_s: f64,
    pub min_step_share: f64,
    pub dominance: f64,
}

#[derive(Debug, Serialize)]
pub struct BlameCellReport {
    pub rank: u32,
    pub stage: String,
    pub caused_s: f64,
}

/// Cells of the blame table in the report.
const BLAME_CELLS: usize = 16;

/// Wait attribution's evidence for a slow rank that made the others wait.
#[derive(Debug, Serialize)]
pub struct CulpritReport {
    /// Seconds of other ranks' waiting it caused over all its stages.
    pub caused_s: f64,
    /// How much later each peer finished each step because of it.
    pub delay_per_step_s: f64,
    /// Its part of all the waiting.
    pub wait_share: f64,
}

#[derive(Debug, Serialize)]
pub struct SlowRankReport {
    pub rank: u32,
    pub stage: String,
    pub group: String,
    /// Seconds of other ranks' waiting this (rank, stage) caused.
    pub caused_wait_s: f64,
    /// Set when wait attribution names the rank as a culprit on its own.
    pub culprit: Option<CulpritReport>,
    /// How many of L1, L2 and expected time name this (rank, stage).
    pub detectors: usize,
    pub l2: Option<L2Evidence>,
    pub expected_time: Option<ExpectedEvidence>,
    pub l1_regression: bool,
    pub l1_jitter: bool,
}

#[derive(Debug, Serialize)]
pub struct L2Evidence {
    pub z: f64,
    pub cv: f64,
}

#[derive(Debug, Serialize)]
pub struct ExpectedEvidence {
    pub slow_steps: usize,
    pub observed_steps: usize,
}

#[derive(Debug, Serialize)]
pub struct L1Report {
    pub rank: u32,
    pub steps: usize,
    pub median_step_s: f64,
    /// `stable`, `jitter`, `regression` or `both`.
    pub class: &'static str,
    pub jitter: Vec<JitterReport>,
    pub regression: Option<RegressionReport>,
}

#[derive(Debug, Serialize)]
pub struct JitterReport {
    pub first_step: u64,
    pub last_step: u64,
    pub max_ratio: f64,
    pub baseline_s: f64,
    pub effective_first_step: Option<u64>,
    pub effective_last_step: Option<u64>,
    pub effective_width: usize,
    pub stage: Option<String>,
    pub stage_excess_s: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct RegressionReport {
    pub step: u64,
    pub mean_before_s: f64,
    pub mean_after_s: f64,
    pub ratio: f64,
    pub cv_before: f64,
    pub cv_after: f64,
    pub stage: Option<String>,
    pub stage_delta_s: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct L2Report {
    pub group: String,
    pub ranks: Vec<u32>,
    pub stage: String,
    pub mean_s: f64,
    pub sd_s: f64,
    pub cv: f64,
    /// `balanced`, `mild` or `severe`.
    pub imbalance: &'static str,
    pub stragglers: Vec<Straggler>,
}

#[derive(Debug, Serialize)]
pub struct ExpectedReport {
    pub group: String,
    pub stage: String,
    pub rank: u32,
    pub slow_steps: Vec<u64>,
    pub observed_steps: usize,
    pub worst_ratio: f64,
    pub expected_s: f64,
}

pub fn build(dir: &Path, options: &SlowOptions) -> Result<SlowReport, Failure> {
    let (logs, world) = step_vectors::read_ranks(dir, "slow")?;
    let (stages, mut series, ranks_without_steps) = series_of(&logs, options);
    if series.is_empty() {
        let why = if logs.iter().any(|r| !r.steps.is_empty()) {
            format!(
                "no rank has more than --skip-steps {} complete steps; lower it or let the job run longer",
                options.skip_steps
            )
        } else {
            NO_STEP_VECTORS.to_string()
        };
        return Err(Failure::Message(format!("{}: {why}", dir.display())));
    }
    let params = params_of(options);
    let attribution = waits::attribution(dir, "slow", &stages)?;
    let mut walls: Vec<f64> = series.iter().flat_map(|r| r.wall_s.iter().copied()).collect();
    walls.sort_by(f64::total_cmp);
    let median_step_s = walls[walls.len() / 2];
    own_time(&mut series, &attribution);
    let job = analyze_job(&series, stages.len(), &params);
    let first = series.iter().filter_map(|r| r.steps.first()).min().copied().unwrap_or(0);
    let last = series.iter().filter_map(|r| r.steps.last()).max().copied().unwrap_or(0);
    let table = blame_table(&attribution, first, last);
    let culprit_params = CulpritParams::default();
    let steps = series.iter().map(|r| r.steps.len()).max().unwrap_or(0);
    let found = culprits(&table, series.len(), steps, median_step_s, &culprit_params);
    let findings = by_caused_wait(&job.slow_ranks, &table, &found);
    let waits = WaitAttribution {
        collectives: attribution.collectives,
        wait_s: table.wait_s,
        median_step_s,
        params: CulpritParamsReport {
            min_delay_s: culprit_params.min_delay_s,
            min_step_share: culprit_params.min_step_share,
            dominance: culprit_params.dominance,
        },
        blame: table
            .cells
            .iter()
            .take(BLAME_CELLS)
            .map(|c| BlameCellReport { rank: c.rank, stage: stages[c.stage].clone(), caused_s: c.caused_s })
            .collect(),
    };
    let blamed = Blamed {
        slow_ranks: findings.iter().map(|f| slow_rank_report(f, &series, &stages)).collect(),
        culprits: !found.is_empty(),
        median_step_s,
        waits,
    };
    Ok(report(dir, world, stages, &series, ranks_without_steps, options, &params, &job, blamed))
}

/// Wait attribution's part of the report.
struct Blamed {
    slow_ranks: Vec<SlowRankReport>,
    /// Whether it found a culprit of its own.
    culprits: bool,
    /// Of the step wall times before the waits are taken out.
    median_step_s: f64,
    waits: WaitAttribution,
}

fn slow_rank_report(f: &Finding, series: &[RankSeries], stages: &[String]) -> SlowRankReport {
    let group = series.iter().find(|r| r.rank == f.rank).map_or_else(String::new, |r| r.group.clone());
    let d = f.detected.as_ref();
    SlowRankReport {
        rank: f.rank,
        stage: stages[f.stage].clone(),
        group,
        caused_wait_s: f.caused_wait_s,
        culprit: f.culprit.as_ref().map(|c| CulpritReport {
            caused_s: c.caused_s,
            delay_per_step_s: c.delay_per_step_s,
            wait_share: c.wait_share,
        }),
        detectors: d.map_or(0, SlowRank::detectors),
        l2: d.and_then(|s| s.l2).map(|(z, cv)| L2Evidence { z, cv }),
        expected_time: d
            .and_then(|s| s.expected)
            .map(|(slow_steps, observed_steps)| ExpectedEvidence { slow_steps, observed_steps }),
        l1_regression: d.is_some_and(|s| s.l1_regression),
        l1_jitter: d.is_some_and(|s| s.l1_jitter),
    }
}

fn params_of(o: &SlowOptions) -> SlowParams {
    SlowParams {
        jitter: JitterParams { window: o.jitter_window, ratio_threshold: o.jitter_ratio, ..JitterParams::default() },
        change: ChangePointParams { min_ratio: o.min_regression, max_cv: o.max_cv, ..ChangePointParams::default() },
        stragglers: StragglerParams { z_threshold: o.z, ..StragglerParams::default() },
        expected: ExpectedTimeParams { alpha: o.alpha, beta: o.beta },
        min_effect: o.min_effect,
        min_slow_steps: o.min_slow_steps,
    }
}

/// The job's stage list (first appearance), each rank's series over it, and the ranks
/// left with no step.
fn series_of(logs: &[RankSteps], options: &SlowOptions) -> (Vec<String>, Vec<RankSeries>, Vec<u32>) {
    let mut stages: Vec<String> = Vec::new();
    for s in logs.iter().flat_map(|r| r.steps.iter().skip(options.skip_steps)) {
        for (name, _) in &s.stages {
            if !stages.contains(name) {
                stages.push(name.clone());
            }
        }
    }
    let (mut series, mut without) = (Vec::new(), Vec::new());
    for r in logs {
        let steps = &r.steps[options.skip_steps.min(r.steps.len())..];
        if steps.is_empty() {
            without.push(r.rank);
            continue;
        }
        let group = match options.group_by {
            GroupBy::Job => "job".to_string(),
            GroupBy::LocalRank => format!("local_rank {}", r.local_rank),
            GroupBy::Host => r.host.clone(),
        };
        let durations = steps
            .iter()
            .map(|s| {
                let mut row = vec![0.0; stages.len()];
                for (name, ns) in &s.stages {
                    if let Some(i) = stages.iter().position(|n| n == name) {
                        row[i] += *ns as f64 / 1e9;
                    }
                }
                row
            })
            .collect();
        series.push(RankSeries {
            rank: r.rank,
            group,
            steps: steps.iter().map(|s| s.step).collect(),
            wall_s: steps.iter().map(|s| s.wall_ns as f64 / 1e9).collect(),
            durations,
        });
    }
    (stages, series, without)
}

#[allow(clippy::too_many_arguments)] // one call site; the report is made of all of them
fn report(
    dir: &Path,
    world: usize,
    stages: Vec<String>,
    series: &[RankSeries],
    ranks_without_steps: Vec<u32>,
    options: &SlowOptions,
    params: &SlowParams,
    job: &JobSlow,
    blamed: Blamed,
) -> SlowReport {
    let name = |s: usize| stages[s].clone();
    let shift = |s: &Option<stagefrontier::analysis::slow::attribution::StageShift>| {
        (s.map(|s| name(s.stage)), s.map(|s| s.shift))
    };
    let l1 = job
        .l1
        .iter()
        .map(|r| L1Report {
            rank: r.rank,
            steps: r.steps,
            median_step_s: r.median_step_s,
            class: class_name(r.class),
            jitter: r
                .jitter
                .iter()
                .map(|j| {
                    let (stage, stage_excess_s) = shift(&j.stage);
                    JitterReport {
                        first_step: j.first_step,
                        last_step: j.last_step,
                        max_ratio: j.max_ratio,
                        baseline_s: j.baseline_s,
                        effective_first_step: j.effective.map(|e| e.0),
                        effective_last_step: j.effective.map(|e| e.1),
                        effective_width: j.effective_width,
                        stage,
                        stage_excess_s,
                    }
                })
                .collect(),
            regression: r.regression.as_ref().map(|g| {
                let (stage, stage_delta_s) = shift(&g.stage);
                RegressionReport {
                    step: g.step,
                    mean_before_s: g.mean_before_s,
                    mean_after_s: g.mean_after_s,
                    ratio: g.ratio,
                    cv_before: g.cv_before,
                    cv_after: g.cv_after,
                    stage,
                    stage_delta_s,
                }
            }),
        })
        .collect();
    let l2 = job
        .l2
        .iter()
        .map(|g| L2Report {
            group: g.group.clone(),
            ranks: g.ranks.clone(),
            stage: name(g.stage),
            mean_s: g.assessment.mean,
            sd_s: g.assessment.sd,
            cv: g.assessment.cv,
            imbalance: match g.assessment.imbalance {
                Imbalance::Balanced => "balanced",
                Imbalance::Mild => "mild",
                Imbalance::Severe => "severe",
            },
            stragglers: g.stragglers.clone(),
        })
        .collect();
    let expected_time = job
        .expected
        .iter()
        .map(|e| ExpectedReport {
            group: e.group.clone(),
            stage: name(e.stage),
            rank: e.rank,
            slow_steps: e.steps.clone(),
            observed_steps: e.observed_steps,
            worst_ratio: e.worst_ratio,
            expected_s: e.expected_s,
        })
        .collect();
    SlowReport {
        dir: dir.display().to_string(),
        world,
        ranks: series.len(),
        ranks_without_steps,
        skip_steps: options.skip_steps,
        group_by: options.group_by.name(),
        median_step_s: blamed.median_step_s,
        params: Params {
            jitter_window: params.jitter.window,
            jitter_ratio: params.jitter.ratio_threshold,
            exceed_ratio: params.jitter.exceed_ratio,
            min_segment: params.change.min_segment,
            min_regression: params.change.min_ratio,
            max_cv: params.change.max_cv,
            z_threshold: params.stragglers.z_threshold,
            mild_cv: params.stragglers.mild_cv,
            severe_cv: params.stragglers.severe_cv,
            alpha: params.expected.alpha,
            beta: params.expected.beta,
            min_effect: params.min_effect,
            min_slow_steps: params.min_slow_steps,
        },
        found: job.found() || blamed.culprits,
        slow_ranks: blamed.slow_ranks,
        wait_attribution: blamed.waits,
        l1,
        l2,
        expected_time,
        stages,
    }
}

fn class_name(class: L1Class) -> &'static str {
    match class {
        L1Class::Stable => "stable",
        L1Class::Jitter => "jitter",
        L1Class::Regression => "regression",
        L1Class::Both => "both",
    }
}
