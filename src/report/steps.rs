//! `sf steps`: the per-rank, per-step stage vectors of a job, for export.

use serde::Serialize;

use super::call_window::CallWindow;
use super::frontier::StageMap;
use super::step_vectors::JobSteps;
use super::Failure;
use super::{inferred, step_vectors, waits};
use crate::analysis::blame::StageSeconds;
use crate::report::discover::Dirs;

/// The `--json` object; `--csv` and the table are written from it too.
#[derive(Debug, Serialize)]
pub struct StepsReport {
    pub dir: String,
    /// World size the headers record.
    pub world: usize,
    /// Every stage, in order of first appearance (step, then rank, then the vector's order):
    /// the order `sf frontier` uses.
    pub stages: Vec<String>,
    /// The first step the logs still hold when older steps wrapped out of some rank's
    /// step history (the steps listed start after the job did); null when nothing wrapped.
    pub history_starts_at_step: Option<u64>,
    /// When the NCCL call budget (`SF_CALL_BUDGET`) left older calls unread: the first step
    /// the calls read cover, where the steps listed start; null when every call was read.
    pub call_window: Option<CallWindow>,
    /// The first step whose waits are known when older calls wrapped out of the event
    /// ring (earlier steps have no `wait_s` or `caused_s`); null when every step's are.
    pub waits_start_at_step: Option<u64>,
    pub ranks: Vec<RankReport>,
}

#[derive(Debug, Serialize)]
pub struct RankReport {
    pub rank: u32,
    pub local_rank: i32,
    pub host: String,
    pub steps: Vec<StepReport>,
}

#[derive(Debug, Serialize)]
pub struct StepReport {
    pub step: u64,
    pub t_begin_ns: u64,
    /// The step's start in UTC (RFC 3339), from the log's clock calibration.
    pub start: Option<String>,
    pub wall_s: f64,
    pub overlap_s: f64,
    /// Seconds per stage, in the rank's order.
    pub stages: StageMap<f64>,
    /// Device and spill seconds per stage, for steps the CUDA door sampled; else empty.
    pub device: StageMap<DeviceReport>,
    /// Wait attribution (`sf frontier` on logs): seconds the rank waited inside collectives
    /// it entered in each stage, for the stages it waited in.
    pub wait_s: StageMap<f64>,
    /// Seconds of other ranks' waiting the rank caused, charged to each stage, for the
    /// stages charged.
    pub caused_s: StageMap<f64>,
}

#[derive(Debug, Serialize)]
pub struct DeviceReport {
    pub device_s: f64,
    pub spill_s: f64,
}

/// Seconds of a nanosecond count: the one conversion `sf frontier` reading the logs uses
/// too, so an exported CSV reads back to the same numbers.
pub fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

pub fn build(dir: &Dirs) -> Result<StepsReport, Failure> {
    let JobSteps { mut ranks, world, mut names, window, waits_start_at } = step_vectors::read_ranks(dir, "steps")?;
    let history_starts_at_step = step_vectors::history_starts_at(&ranks);
    let timelines = waits::timelines(&mut ranks);
    // The steps the calls read cover, when the call budget left older ones unread: a
    // step's waits are known there only.
    if let Some(w) = &window {
        w.trim(&mut ranks);
    }
    // No step vectors anywhere: the stages inferred from the NCCL schedule, if it repeats.
    let inferred = inferred::fill(dir, "steps", &mut ranks, &mut names)?;
    let mut steps: Vec<(u64, u32, &str)> = Vec::new();
    for r in &ranks {
        for s in &r.steps {
            steps.extend(s.stages.iter().map(|&(id, _)| (s.step, r.rank, names.name(id))));
        }
    }
    if steps.is_empty() {
        return Err(Failure::Message(format!("{}: {}", dir.display(), step_vectors::no_step_vectors(&ranks))));
    }
    // By step, then rank (stable: each vector's own order stays).
    steps.sort_by_key(|&(step, rank, _)| (step, rank));
    let mut stages: Vec<String> = Vec::new();
    for (_, _, name) in steps {
        if !stages.iter().any(|s| s == name) {
            stages.push(name.to_string());
        }
    }
    let (attribution, _) =
        inferred::attribution(inferred, timelines, |t| waits::attribution(t, &names, &stages, window.as_ref()));
    // The attribution's entries of a rank's step, by stage name in the vector's order.
    let entries = |table: &StageSeconds, rank: u32, step: &step_vectors::RankStep| {
        let at = |name: &str| stages.iter().position(|s| s == name);
        let found = step.stages.iter().filter_map(|&(id, _)| {
            let name = names.name(id);
            Some((name.to_string(), table.get(&(rank, step.step, at(name)?))?))
        });
        StageMap(found.collect())
    };
    let ranks = ranks
        .into_iter()
        .map(|r| RankReport {
            rank: r.rank,
            local_rank: r.local_rank,
            host: r.host,
            steps: r
                .steps
                .into_iter()
                .map(|s| StepReport {
                    wait_s: entries(&attribution.waits, r.rank, &s),
                    caused_s: entries(&attribution.caused, r.rank, &s),
                    step: s.step,
                    t_begin_ns: s.t_begin_ns,
                    start: r.clock.wall_ns(s.t_begin_ns).map(crate::report::wall::rfc3339_ms),
                    wall_s: seconds(s.wall_ns),
                    overlap_s: seconds(s.overlap_ns),
                    stages: StageMap(
                        s.stages.into_iter().map(|(id, ns)| (names.name(id).to_string(), seconds(ns))).collect(),
                    ),
                    device: StageMap(
                        s.device
                            .into_iter()
                            .map(|(id, d, sp)| {
                                (
                                    names.name(id).to_string(),
                                    DeviceReport { device_s: seconds(d), spill_s: seconds(sp) },
                                )
                            })
                            .collect(),
                    ),
                })
                .collect(),
        })
        .collect();
    Ok(StepsReport {
        dir: dir.display().to_string(),
        world,
        stages,
        history_starts_at_step,
        call_window: window,
        waits_start_at_step: waits_start_at,
        ranks,
    })
}
