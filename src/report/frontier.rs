//! `sf frontier`: frontier accounting over per-rank stage durations, from a job's rank logs
//! or from a CSV.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use crate::analysis::blame::waits_from::WaitsFrom;
use crate::analysis::frontier::csv::{self, StageTable};
use crate::analysis::frontier::{ranked, Analyzer, Context, Window, DEFAULT_FORWARD_STAGE};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde::Serialize as DeriveSerialize;

use super::call_window::CallWindow;
use super::discover::Dirs;
use super::frontier_groups;
use super::frontier_waits::{self, BlameEntry, CulpritEntry, SyncWaitReport};
use super::inferred::{self, InferredSummary};
use super::path::{self, SlowdownView};
use super::Failure;

/// What `sf frontier` analyzes and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrontierOptions {
    pub source: FrontierSource,
    /// Stage order; `None`: first appearance in the file.
    pub stages: Option<Vec<String>>,
    /// Steps per window; `None`: a window runs until the input changes.
    pub window: Option<usize>,
    pub residual: Option<String>,
    /// Stages with the model-fit indicator W_s = 1.
    pub sync_wait: Vec<String>,
    pub accumulation: Option<u32>,
}

/// Where `sf frontier` reads stage durations from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrontierSource {
    /// Job directories: the rank logs' step vectors.
    Logs(Dirs),
    /// A long-format CSV.
    Csv(PathBuf),
}

/// The `--json` object; the field names docs/ lists are a contract.
#[derive(Debug, DeriveSerialize)]
pub struct FrontierReport {
    pub file: String,
    /// Where the waits were read from: `device` (NCCL kernels), `host_calls` (NCCL calls
    /// that block until every peer arrives) or `none`; null for a CSV (its wait columns
    /// say what they say). `waits_from_reason` says why.
    pub waits_from: Option<WaitsFrom>,
    pub waits_from_reason: Option<&'static str>,
    /// Where the stages came from: `markers` (the job's own stages: the logs' step
    /// vectors, or a CSV of them) or `inferred` (the NCCL schedule, for a job with no
    /// markers, or a CSV of only `inferred.*` stages).
    pub source: &'static str,
    /// What the inference found, when `source` is `inferred`.
    pub inferred: Option<InferredSummary>,
    pub stages: Vec<String>,
    /// Every rank the file names.
    pub world: usize,
    /// True when the stage times analyzed are the ranks' own time: the logs' stage
    /// durations less the time each rank waited inside collectives, or a CSV's `seconds`
    /// less its `wait_seconds` (a CSV without that column cannot tell).
    pub own_time: bool,
    pub sync_wait: SyncWaitReport,
    /// The first step the logs still hold when older steps wrapped out of some rank's
    /// step history (the analysis starts after the job did); null when nothing wrapped,
    /// and for a CSV.
    pub history_starts_at_step: Option<u64>,
    /// When the NCCL call budget (`SF_CALL_BUDGET`) left older calls unread: the first step
    /// the calls read cover, where the analysis starts, and the budget; null when every
    /// call the logs hold was read, and for a CSV.
    pub call_window: Option<CallWindow>,
    /// When the event ring wrapped past the calls of older steps the analysis holds: the
    /// first step whose waits are known (the earlier ones keep theirs in their stage
    /// times); null when every step's waits are known, and for a CSV.
    pub waits_start_at_step: Option<u64>,
    /// Which ranks are compared: `job` (all: data parallelism, every rank does the same
    /// work) or `pipeline_stage` (a pipelined job, as `sf roles` finds it: each pipeline
    /// stage's ranks among themselves, one set of windows per stage).
    pub compared_by: &'static str,
    /// The job's parallel layout when `sf roles` finds more than data parallelism
    /// (`tp=2 pp=2 dp=2`); null otherwise, and for a CSV.
    pub layout: Option<String>,
    /// A pipelined job's slow pass on the critical path (`sf path`'s finding); null when
    /// none, or no pipeline.
    pub path_finding: Option<SlowdownView>,
    pub windows: Vec<WindowReport>,
}

impl FrontierReport {
    /// Whether some window names a culprit: a finding (exit 4), not only accounting.
    pub fn found_culprit(&self) -> bool {
        self.path_finding.is_some() || self.windows.iter().any(|w| !w.culprits.is_empty())
    }
}

#[derive(Debug, DeriveSerialize)]
pub struct WindowReport {
    /// The pipeline stage (0-based) whose ranks the window compares; null when every rank
    /// is compared (`compared_by: job`).
    pub pp_stage: Option<usize>,
    pub first_step: u64,
    pub last_step: u64,
    pub steps: usize,
    pub ranks: usize,
    pub missing_ranks: Vec<u32>,
    pub closed_by: &'static str,
    pub exposed_s: f64,
    pub advances_s: StageMap<f64>,
    /// Empty when the window is under the denominator floor.
    pub shares: StageMap<f64>,
    pub routing_set: Vec<String>,
    pub top1: Option<String>,
    pub top2: Vec<String>,
    pub leader_ranks: StageMap<Vec<u32>>,
    pub labels: Vec<LabelReport>,
    pub co_critical_stages: Vec<String>,
    pub baselines: BaselineReport,
    pub gains: StageMap<f64>,
    pub clipped_top1_advances_s: StageMap<f64>,
    pub leader_tie_counts: StageMap<usize>,
    pub confident_leader_steps: StageMap<u64>,
    pub leader_switches: StageMap<u64>,
    pub lag_s: StageMap<f64>,
    pub delta_lag_s: StageMap<f64>,
    pub gap_s: StageMap<f64>,
    pub deviating_ranks: Vec<u32>,
    pub residual_share: Option<f64>,
    /// Overlap error share of all rank time, for logs (a CSV cannot tell).
    pub overlap_share: Option<f64>,
    /// Device time of the forward stage over all ranks, when the logs carry `stage_device`
    /// records (the CUDA door) or the CSV device columns; null otherwise.
    pub forward_device: Option<ForwardDevice>,
    /// Seconds all ranks waited inside collectives entered in each stage (logs, or a CSV
    /// with the wait columns).
    pub wait_s: StageMap<f64>,
    /// Ranks whose lateness made the others wait, most caused wait first: the answer when
    /// waits dominate (logs, or a CSV with the wait columns).
    pub culprits: Vec<CulpritEntry>,
    /// The window's blame table, (rank, stage) -> seconds of other ranks' waiting caused,
    /// largest first, at most `frontier_waits::BLAME_CELLS` cells.
    pub blame: Vec<BlameEntry>,
    /// When the waits could not be seen (`waits_from` none: no device evidence of an
    /// asynchronous job, or no collective recorded in a job of several ranks): the
    /// ranks that lead the top stage's comparison, a lead, not a finding.
    pub leads: Vec<LeadEntry>,
}

/// A rank that leads a stage of the frontier (is the last to finish it most often).
#[derive(Debug, DeriveSerialize)]
pub struct LeadEntry {
    pub rank: u32,
    pub stage: String,
    /// Ranks credited alike with the stage's advances (1: this one alone).
    pub tied: usize,
    /// The stage's share of the window's exposed time, when known.
    pub share: Option<f64>,
}

#[derive(Debug, DeriveSerialize)]
pub struct ForwardDevice {
    pub stage: String,
    /// Sampled (rank, step) pairs, and their share of the window's.
    pub samples: u64,
    pub ready_ratio: f64,
    pub wall_s: f64,
    pub device_s: f64,
    pub spill_s: f64,
}

#[derive(Debug, DeriveSerialize)]
pub struct LabelReport {
    pub label: &'static str,
    /// A bottleneck claim (direct_exposure, sync_wait_dependent, likely_sync_wait): the
    /// labels a healthy job must never get.
    pub strong: bool,
    pub reason: String,
}

#[derive(Debug, DeriveSerialize)]
pub struct BaselineReport {
    pub per_stage_max_s: StageMap<f64>,
    pub per_stage_avg_s: StageMap<f64>,
    pub rank_spread_s: StageMap<f64>,
    pub slowest_rank_s: StageMap<f64>,
    pub slowest_rank: u32,
    pub local_rank: u32,
    pub local_rank_s: StageMap<f64>,
    /// Σ per_stage_max_s: M of Proposition 1, ≥ exposed_s.
    pub per_stage_max_total_s: f64,
    /// Σ per_stage_avg_s: M̄ of Proposition 2, ≤ exposed_s.
    pub per_stage_avg_total_s: f64,
    /// Each baseline's leading stage, as the frontier's `top1`.
    pub top1: BaselineTops,
}

#[derive(Debug, DeriveSerialize)]
pub struct BaselineTops {
    pub per_stage_max: String,
    pub per_stage_avg: String,
    pub rank_spread: String,
    pub slowest_rank: String,
    pub local_rank: String,
}

/// Per-stage values in the window's stage order, serialized as a JSON object in that order.
#[derive(Debug)]
pub struct StageMap<T>(pub Vec<(String, T)>);

impl<T: Serialize> Serialize for StageMap<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (stage, value) in &self.0 {
            map.serialize_entry(stage, value)?;
        }
        map.end()
    }
}

fn read_csv(path: &Path, options: &FrontierOptions) -> Result<StageTable, Failure> {
    let file = path.display().to_string();
    let input = File::open(path).map_err(|e| Failure::Message(format!("{file}: cannot open: {e}")))?;
    csv::read(BufReader::new(input), options.stages.as_deref()).map_err(|e| match e.line() {
        Some(line) => Failure::Message(format!("{file}:{line}: {e}")),
        None => Failure::Message(format!("{file}: {e}")),
    })
}

/// Reads, checks and analyzes the input. Every failure is about the input: the caller
/// exits 2.
pub fn build(options: &FrontierOptions) -> Result<FrontierReport, Failure> {
    let (file, table, waits, inferred, history_starts_at_step, call_window, waits_start_at_step, waits_from) =
        match &options.source {
            FrontierSource::Csv(path) => {
                let mut table = read_csv(path, options)?;
                let waits = table.take_attribution().map(|a| frontier_waits::Waits::take_out(&mut table, a));
                (path.display().to_string(), table, waits, None, None, None, None, None)
            }
            FrontierSource::Logs(dir) => {
                let t = frontier_waits::own_time_table(dir)?;
                let (history, window, start) = (t.history_starts_at, t.call_window, t.waits_start_at);
                (dir.display(), t.table, Some(t.waits), t.inferred, history, window, start, Some(t.waits_from))
            }
        };
    let source = match inferred {
        Some(_) => inferred::INFERRED,
        None => inferred::source_of_stages(table.schema().stages()),
    };
    let fail = |message: String| Failure::Message(format!("{file}: {message}"));
    let known = table.schema().stages().to_vec();
    let named = options.residual.iter().chain(&options.sync_wait);
    if let Some(unknown) = named.into_iter().find(|name| !known.contains(name)) {
        return Err(fail(format!(
            "stage {unknown:?} given to --residual or --sync-wait is not in the file's stages ({})",
            known.join(",")
        )));
    }
    let sync_wait = frontier_waits::sync_wait(waits.as_ref(), &options.sync_wait);
    let pipeline = match &options.source {
        FrontierSource::Logs(dir) => frontier_groups::pipeline_stages(dir)?,
        FrontierSource::Csv(_) => None,
    };

    // Each group of ranks doing the same work, compared among themselves.
    let groups: Vec<(Option<usize>, StageTable)> = match &pipeline {
        Some(p) => p.stages.iter().map(|(stage, ranks)| (Some(*stage), table.only_ranks(ranks))).collect(),
        None => vec![(None, table)],
    };
    let mut windows = Vec::new();
    for (pp_stage, group) in &groups {
        let analyzed = analyze(group, options, &sync_wait.stages).map_err(|e| fail(e.to_string()))?;
        windows.extend(analyzed.into_iter().map(|w| (*pp_stage, w)));
    }
    let world = groups.iter().map(|(_, g)| g.world().len()).sum::<usize>();
    let unseen = waits_from.is_some_and(|(_, why)| why.waits_unseen(world));
    // Passes timed by launches alone say nothing of the device: no finding then.
    let path_finding = match (&options.source, &pipeline) {
        (FrontierSource::Logs(dir), Some(_)) if !unseen => path::pipeline_finding(dir)?,
        _ => None,
    };
    Ok(FrontierReport {
        file,
        waits_from: waits_from.map(|(from, _)| from),
        waits_from_reason: waits_from.map(|(_, why)| why.describe()),
        source,
        inferred,
        stages: known,
        world,
        // Waits that could not be seen were not taken out: the times are as recorded.
        own_time: waits.is_some() && waits_from.is_none_or(|(from, _)| from != WaitsFrom::None),
        sync_wait,
        history_starts_at_step,
        call_window,
        waits_start_at_step,
        compared_by: if pipeline.is_some() { "pipeline_stage" } else { "job" },
        layout: pipeline.as_ref().map(|p| p.layout.clone()),
        path_finding,
        windows: windows
            .iter()
            .map(|(pp_stage, w)| {
                let mut report = window_report(w, Some(DEFAULT_FORWARD_STAGE));
                report.pp_stage = *pp_stage;
                if let Some(waits) = &waits {
                    // A pipeline stage's window reads its own ranks' waits.
                    let group = pp_stage.zip(pipeline.as_ref()).map(|(stage, p)| p.ranks_of(stage));
                    frontier_waits::blame_window(&mut report, w, waits, group);
                }
                if unseen {
                    report.leads = leads(&report);
                }
                report
            })
            .collect(),
    })
}

/// The ranks leading the window's top stage, when one leads it alone or with one other.
fn leads(w: &WindowReport) -> Vec<LeadEntry> {
    let Some(top1) = &w.top1 else { return Vec::new() };
    let Some(i) = w.leader_ranks.0.iter().position(|(stage, _)| stage == top1) else { return Vec::new() };
    let tied = w.leader_tie_counts.0[i].1;
    if tied > 2 {
        return Vec::new();
    }
    let share = w.shares.0.get(i).map(|(_, share)| *share);
    w.leader_ranks.0[i].1.iter().map(|&rank| LeadEntry { rank, stage: top1.clone(), tied, share }).collect()
}

fn analyze(
    table: &StageTable,
    options: &FrontierOptions,
    sync_wait: &[String],
) -> Result<Vec<Window>, crate::analysis::frontier::StepError> {
    let mut context =
        Context { model_fit: sync_wait.to_vec(), accumulation: options.accumulation, ..Context::default() };
    if options.residual.is_some() {
        context.residual_stage = options.residual.clone();
    }
    let mut analyzer = Analyzer::new(context, options.window);
    let mut windows = Vec::new();
    table.for_each_step_ahead(|step| {
        windows.extend(analyzer.push(step)?);
        Ok(())
    })?;
    windows.extend(analyzer.finish());
    Ok(windows)
}

fn forward_device(w: &Window, forward: Option<&str>) -> Option<ForwardDevice> {
    let stage = w.schema.index(forward?)?;
    let t = w.device.as_ref()?.stage(stage, &[]);
    Some(ForwardDevice {
        stage: w.schema.name(stage).to_string(),
        samples: t.samples,
        ready_ratio: t.ready_ratio,
        wall_s: t.wall_s,
        device_s: t.device_s,
        spill_s: t.spill_s,
    })
}

fn window_report(w: &Window, forward: Option<&str>) -> WindowReport {
    let names = w.schema.stages();
    let map = |values: &[f64]| StageMap(names.iter().cloned().zip(values.iter().copied()).collect());
    let some = |values: Option<&Vec<f64>>| values.map_or(StageMap(Vec::new()), |v| map(v));
    let named = |stages: &[usize]| stages.iter().map(|&s| names[s].clone()).collect::<Vec<_>>();
    let per_stage = |f: &dyn Fn(usize) -> u64| StageMap(names.iter().cloned().zip((0..names.len()).map(f)).collect());
    let routing = w.routing.as_ref();
    let b = &w.baselines;
    let top = |values: &[f64]| names[ranked(values)[0]].clone();
    WindowReport {
        pp_stage: None,
        first_step: w.first_step,
        last_step: w.last_step,
        steps: w.steps,
        ranks: w.ranks,
        missing_ranks: w.missing_ranks.clone(),
        closed_by: w.closed_by.name(),
        exposed_s: w.exposed_s,
        advances_s: map(&w.advances_s),
        shares: some(w.shares.as_ref()),
        routing_set: routing.map_or_else(Vec::new, |r| named(&r.set)),
        top1: routing.map(|r| names[r.top1].clone()),
        top2: routing.map_or_else(Vec::new, |r| named(&r.top2)),
        leader_ranks: StageMap(names.iter().cloned().zip(w.leaders.iter().map(|l| l.ranks.clone())).collect()),
        labels: w
            .labels
            .iter()
            .map(|l| LabelReport { label: l.kind.name(), strong: l.kind.is_strong(), reason: l.reason.clone() })
            .collect(),
        co_critical_stages: named(&w.co_critical_stages),
        baselines: BaselineReport {
            per_stage_max_s: map(&b.per_stage_max_s),
            per_stage_avg_s: map(&b.per_stage_avg_s),
            rank_spread_s: map(&b.rank_spread_s),
            slowest_rank_s: map(&b.slowest_rank_s),
            slowest_rank: b.slowest_rank,
            local_rank: b.local_rank,
            local_rank_s: map(&b.local_rank_s),
            per_stage_max_total_s: b.per_stage_max_s.iter().sum(),
            per_stage_avg_total_s: b.per_stage_avg_s.iter().sum(),
            top1: BaselineTops {
                per_stage_max: top(&b.per_stage_max_s),
                per_stage_avg: top(&b.per_stage_avg_s),
                rank_spread: top(&b.rank_spread_s),
                slowest_rank: top(&b.slowest_rank_s),
                local_rank: top(&b.local_rank_s),
            },
        },
        gains: some(w.gains.as_ref()),
        clipped_top1_advances_s: some(w.clipped_top1_advances_s.as_ref()),
        leader_tie_counts: StageMap(names.iter().cloned().zip(w.leaders.iter().map(|l| l.tied)).collect()),
        confident_leader_steps: per_stage(&|s| w.leaders[s].confident_steps),
        leader_switches: per_stage(&|s| w.leaders[s].switches),
        lag_s: map(&w.lag_s),
        delta_lag_s: map(&w.delta_lag_s),
        gap_s: some(w.gap_s.as_ref()),
        deviating_ranks: w.deviating_ranks.clone(),
        residual_share: w.residual_share,
        overlap_share: w.overlap_share,
        forward_device: forward_device(w, forward),
        wait_s: StageMap(Vec::new()),
        culprits: Vec::new(),
        blame: Vec::new(),
        leads: Vec::new(),
    }
}
