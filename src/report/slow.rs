//! `sf slow`: L1 jitter and regression per rank, L2 stragglers per group and stage, and
//! VenusTrace's expected-time tracking, over a job directory's step vectors.

use crate::analysis::blame::waits_from::WaitsFrom;
use crate::analysis::slow::change_point::ChangePointParams;
use crate::analysis::slow::expected_time::ExpectedTimeParams;
use crate::analysis::slow::jitter::JitterParams;
use crate::analysis::slow::job::{analyze_job, JobSlow, RankSeries, SlowParams, Straggler};
use crate::analysis::slow::l1::L1Class;
use crate::analysis::slow::stragglers::{Imbalance, StragglerParams};
use serde::Serialize;

use super::call_window::CallWindow;
use super::inferred::{self, InferredSummary};
use super::path::{self, SlowdownView};
use super::slow_waits::{self, Blamed, CulpritReport, WaitAttribution};
use super::step_vectors::{self, JobSteps, RankSteps, StageNames};
use super::{waits, Failure};
use crate::report::discover::Dirs;

/// Which ranks play the same role, and so are compared with each other: `--group-by` of
/// `sf slow` and `sf kernels` (whose older `--role-by all` still parses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupBy {
    /// Every rank of the job: data parallelism, where all ranks do the same work.
    #[value(alias = "all")]
    Job,
    /// Ranks with the same local rank (the same GPU index on every node): pipeline or
    /// tensor roles laid out by local rank.
    LocalRank,
    /// Ranks on the same host.
    Host,
}

impl GroupBy {
    pub fn name(self) -> &'static str {
        match self {
            GroupBy::Job => "job",
            GroupBy::LocalRank => "local_rank",
            GroupBy::Host => "host",
        }
    }

    /// The group a rank belongs to, as reports name it: `job`, `local_rank N` or the host.
    pub fn group_of(self, local_rank: i32, host: &str) -> String {
        match self {
            GroupBy::Job => "job".to_string(),
            GroupBy::LocalRank => format!("local_rank {local_rank}"),
            GroupBy::Host => host.to_string(),
        }
    }
}

/// Detector settings of `sf slow`; defaults are the papers' where they give one.
#[derive(Clone, Debug, PartialEq)]
pub struct SlowOptions {
    pub skip_steps: usize,
    pub group_by: GroupBy,
    pub jitter_window: usize,
    pub jitter_ratio: f64,
    pub min_regression: f64,
    pub max_cv: f64,
    pub z: f64,
    pub alpha: f64,
    pub beta: f64,
    pub min_effect: f64,
    pub min_effect_ms: f64,
    pub min_slow_steps: usize,
}

/// The parser admits only finite, non-negative numbers, for which `==` is an equivalence.
impl Eq for SlowOptions {}

/// The `--json` object; the field names docs/ lists are a contract.
#[derive(Debug, Serialize)]
pub struct SlowReport {
    pub dir: String,
    /// Where the waits were read from: `device` (NCCL kernels), `host_calls` (NCCL calls
    /// that block until every peer arrives) or `none`; `waits_from_reason` says why.
    pub waits_from: WaitsFrom,
    pub waits_from_reason: &'static str,
    /// Where the stages came from: `markers` (the logs' step vectors) or `inferred` (the
    /// NCCL schedule, for a job with no markers).
    pub source: &'static str,
    /// What the inference found, when `source` is `inferred`.
    pub inferred: Option<InferredSummary>,
    pub world: usize,
    /// Ranks with steps left after `skip_steps`.
    pub ranks: usize,
    pub ranks_without_steps: Vec<u32>,
    pub stages: Vec<String>,
    pub skip_steps: usize,
    /// The first step the logs still hold when older steps wrapped out of some rank's
    /// step history (the analysis starts after the job did); null when nothing wrapped.
    pub history_starts_at_step: Option<u64>,
    /// The first step whose waits are known when older calls wrapped away (the earlier
    /// steps keep their waits in their stage times); null when every step's are known.
    pub waits_start_at_step: Option<u64>,
    /// When the NCCL call budget (`SF_CALL_BUDGET`) left older calls unread: the first step
    /// the calls read cover, where the analysis starts, and the budget; null when every
    /// call the logs hold was read.
    pub call_window: Option<CallWindow>,
    pub group_by: &'static str,
    pub median_step_s: f64,
    pub params: Params,
    /// The effect floor every finding passed: seconds per step.
    pub floor_s: f64,
    /// Groups of one rank, compared together as the group `merged`.
    pub merged_groups: Vec<String>,
    /// Groups too small to compare, left out of L2 and expected time.
    pub skipped_groups: Vec<SkippedGroup>,
    pub found: bool,
    /// A pipelined job's slow pass on the critical path (`sf path`'s finding): its first
    /// answer, as a stage's ranks differ from another stage's by role; null when none, or
    /// no pipeline.
    pub path_finding: Option<SlowdownView>,
    /// A regression most ranks share, once, with the rank that caused it when the
    /// frontier names one.
    pub job_regression: Option<JobRegressionReport>,
    /// Culprits of the others' waiting first, then the detectors' findings by the
    /// waiting they caused; a waiter is never listed for the wait it suffered.
    pub slow_ranks: Vec<SlowRankReport>,
    /// When the waits could not be seen (`waits_from` none in an asynchronous job): the
    /// ranks the detectors single out, as leads, not findings.
    pub leads: Vec<SlowRankReport>,
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
    pub min_effect_ms: f64,
    pub min_slow_steps: usize,
}

#[derive(Debug, Serialize)]
pub struct SkippedGroup {
    pub group: String,
    pub ranks: usize,
}

#[derive(Debug, Serialize)]
pub struct JobRegressionReport {
    pub step: u64,
    pub ranks: Vec<u32>,
    pub mean_before_s: f64,
    pub mean_after_s: f64,
    pub ratio: f64,
    pub cause: Option<CauseReport>,
    /// A cause named, or a cost of at least twice the effect floor: no rank behind it, a
    /// smaller one is what a host's load does.
    pub finding: bool,
}

#[derive(Debug, Serialize)]
pub struct CauseReport {
    pub rank: u32,
    pub stage: String,
    /// How much the stage's mean frontier advance grew from the step on, seconds.
    pub growth_s: f64,
    /// Steps since in which the rank alone was furthest behind at the stage's end.
    pub led_steps: usize,
    pub steps: usize,
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
    /// Part of `job_regression`.
    pub job_wide: bool,
    /// A finding of its own: not job-wide, and at least twice the effect floor.
    pub finding: bool,
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
    /// Σ (T_v − T_expect) over the slow steps per observed step: what it cost the job.
    pub excess_s: f64,
}

pub fn build(dir: &Dirs, options: &SlowOptions) -> Result<SlowReport, Failure> {
    let JobSteps { ranks: mut logs, world, mut names, window, waits_start_at } = step_vectors::read_ranks(dir, "slow")?;
    let history_starts_at_step = step_vectors::history_starts_at(&logs);
    let timelines = waits::timelines(&mut logs);
    // The steps the calls read cover, when the call budget left older ones unread.
    if let Some(w) = &window {
        w.trim(&mut logs);
    }
    // No step vectors anywhere: the stages inferred from the NCCL schedule, if it repeats.
    let inferred = inferred::fill(dir, "slow", &mut logs, &mut names)?;
    let (stages, mut series, ranks_without_steps) = series_of(&logs, &names, options);
    if series.is_empty() {
        let why = if logs.iter().any(|r| !r.steps.is_empty()) {
            format!(
                "no rank has more than --skip-steps {} complete steps; lower it or let the job run longer",
                options.skip_steps
            )
        } else {
            step_vectors::no_step_vectors(&logs)
        };
        return Err(Failure::Message(format!("{}: {why}", dir.display())));
    }
    let params = params_of(options);
    let waits_from = timelines.waits_from();
    let (attribution, summary) =
        inferred::attribution(inferred, timelines, |t| waits::attribution(t, &names, &stages, window.as_ref()));
    let waits = slow_waits::take_out_waits(waits::seen(attribution, waits_from.0), &mut series);
    let job = analyze_job(&series, stages.len(), &params);
    let blamed = slow_waits::blamed(waits, &series, &stages, &job);
    let mut report = report(dir, world, stages, &series, ranks_without_steps, options, &params, &job, blamed);
    if summary.is_some() {
        report.source = inferred::INFERRED;
    }
    report.inferred = summary;
    report.history_starts_at_step = history_starts_at_step;
    report.call_window = window;
    report.waits_start_at_step = waits_start_at;
    report.waits_from = waits_from.0;
    report.waits_from_reason = waits_from.1.describe();
    if waits_from.1.waits_unseen(report.world.max(report.ranks)) {
        unseen_waits(&mut report);
    } else {
        // Passes timed by launches alone say nothing of the device: no finding then.
        report.path_finding = path::pipeline_finding(dir)?;
        report.found |= report.path_finding.is_some();
    }
    Ok(report)
}

/// The waits could not be seen (asynchronous NCCL calls with no device evidence, or no
/// collective recorded at all): a rank the detectors single out may be a waiter (its host
/// waited in its synchronizations or in collectives no door saw, which its stage times
/// hold), so no rank is a finding: each is a lead.
fn unseen_waits(report: &mut SlowReport) {
    report.leads = std::mem::take(&mut report.slow_ranks);
    report.found = false;
    if let Some(g) = &mut report.job_regression {
        g.finding = false;
    }
}

fn params_of(o: &SlowOptions) -> SlowParams {
    SlowParams {
        jitter: JitterParams { window: o.jitter_window, ratio_threshold: o.jitter_ratio, ..JitterParams::default() },
        change: ChangePointParams { min_ratio: o.min_regression, max_cv: o.max_cv, ..ChangePointParams::default() },
        stragglers: StragglerParams { z_threshold: o.z, ..StragglerParams::default() },
        expected: ExpectedTimeParams { alpha: o.alpha, beta: o.beta },
        min_effect: o.min_effect,
        min_effect_s: o.min_effect_ms / 1e3,
        min_slow_steps: o.min_slow_steps,
    }
}

/// The job's stage list (first appearance), each rank's series over it, and the ranks
/// left with no step.
fn series_of(
    logs: &[RankSteps],
    names: &StageNames,
    options: &SlowOptions,
) -> (Vec<String>, Vec<RankSeries>, Vec<u32>) {
    // The series' column of each name id, by first appearance.
    let mut column: Vec<Option<usize>> = vec![None; names.all().len()];
    let mut stages: Vec<String> = Vec::new();
    for s in logs.iter().flat_map(|r| r.steps.iter().skip(options.skip_steps)) {
        for &(id, _) in &s.stages {
            column[id as usize].get_or_insert_with(|| {
                stages.push(names.name(id).to_string());
                stages.len() - 1
            });
        }
    }
    let (mut series, mut without) = (Vec::new(), Vec::new());
    for r in logs {
        let steps = &r.steps[options.skip_steps.min(r.steps.len())..];
        if steps.is_empty() {
            without.push(r.rank);
            continue;
        }
        let group = options.group_by.group_of(r.local_rank, &r.host);
        let durations = steps
            .iter()
            .map(|s| {
                let mut row = vec![0.0; stages.len()];
                for &(id, ns) in &s.stages {
                    if let Some(i) = column[id as usize] {
                        row[i] += ns as f64 / 1e9;
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
    dir: &Dirs,
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
    let shift =
        |s: &Option<crate::analysis::slow::attribution::StageShift>| (s.map(|s| name(s.stage)), s.map(|s| s.shift));
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
                    job_wide: g.job_wide,
                    finding: job.own_regression_found(g),
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
            excess_s: e.excess_s,
        })
        .collect();
    SlowReport {
        dir: dir.display().to_string(),
        waits_from: WaitsFrom::HostCalls,
        waits_from_reason: "",
        source: inferred::MARKERS,
        inferred: None,
        world,
        ranks: series.len(),
        ranks_without_steps,
        skip_steps: options.skip_steps,
        history_starts_at_step: None,
        waits_start_at_step: None,
        call_window: None,
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
            min_effect_ms: params.min_effect_s * 1e3,
            min_slow_steps: params.min_slow_steps,
        },
        floor_s: job.floor_s,
        merged_groups: job.merged_groups.clone(),
        skipped_groups: job
            .skipped_groups
            .iter()
            .map(|(group, ranks)| SkippedGroup { group: group.clone(), ranks: *ranks })
            .collect(),
        found: job.found() || blamed.culprits,
        path_finding: None,
        job_regression: job.job_regression.as_ref().map(|g| JobRegressionReport {
            step: g.step,
            ranks: g.ranks.clone(),
            mean_before_s: g.mean_before_s,
            mean_after_s: g.mean_after_s,
            ratio: g.ratio,
            finding: g.finding,
            cause: g.cause.as_ref().map(|c| CauseReport {
                rank: c.rank,
                stage: name(c.stage),
                growth_s: c.growth_s,
                led_steps: c.led_steps,
                steps: c.steps,
            }),
        }),
        slow_ranks: blamed.slow_ranks,
        leads: Vec::new(),
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
