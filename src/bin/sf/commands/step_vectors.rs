//! The rank logs' `step_vector` records as a stage-duration table for frontier accounting.

use std::collections::BTreeMap;
use std::path::Path;

use stagefrontier::analysis::frontier::csv::{self, StageTable};
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::{RecordBody, StepVector};

use super::Failure;
use crate::discover;

/// Every complete step of every rank log in `dir`. A step is complete when all its parts
/// are held (a wrapped-away part drops the step for that rank, which then counts as
/// missing at that step). The world is the largest world size the headers record.
pub fn table(dir: &Path) -> Result<StageTable, Failure> {
    let fail = |message: String| Failure::Message(format!("{}: {message}", dir.display()));
    let logs = discover::logs_in(dir).map_err(|e| fail(format!("cannot list: {e}")))?;
    if logs.is_empty() {
        return Err(fail("no rank logs (*.sflog); pass a job directory, or --csv FILE".into()));
    }
    let mut world = 0;
    let mut durations = Vec::new();
    let mut overlaps = Vec::new();
    let mut seen_ranks = Vec::new();
    for path in &logs {
        let log = RankLog::open(path).map_err(|e| Failure::Message(e.to_string()))?;
        let rank = log.header.global_rank;
        if rank < 0 || seen_ranks.contains(&rank) {
            continue; // a process without a rank, or a second log claiming one (sf ls warns)
        }
        seen_ranks.push(rank);
        world = world.max(log.header.world_size.max(rank + 1));
        let names = log.stage_names();
        let name = |id: u16| names.get(id as usize).cloned().flatten().unwrap_or_else(|| format!("stage#{id}"));
        for (step, parts) in complete_steps(&log) {
            overlaps.push((step, rank as u32, parts[0].overlap_ns as f64 / 1e9));
            for (id, ns) in parts.iter().flat_map(|p| p.stages()) {
                durations.push((step, rank as u32, name(id), ns as f64 / 1e9));
            }
        }
    }
    if durations.is_empty() {
        return Err(fail(
            "the logs hold no step vectors; the job needs step and stage markers (C API, NVTX ranges or python/stagefrontier.py)"
                .into(),
        ));
    }
    durations.sort_by_key(|d| (d.0, d.1));
    csv::from_durations((0..world as u32).collect(), durations, overlaps).map_err(|e| fail(e.to_string()))
}

/// Steps whose parts are all held, parts in order.
fn complete_steps(log: &RankLog) -> BTreeMap<u64, Vec<StepVector>> {
    let mut steps: BTreeMap<u64, Vec<StepVector>> = BTreeMap::new();
    for record in log.records().0 {
        if let RecordBody::StepVector(v) = record.body {
            steps.entry(v.step).or_default().push(v);
        }
    }
    steps.retain(|_, parts| {
        parts.sort_by_key(|p| p.part);
        let held: usize = parts.iter().map(|p| p.count as usize).sum();
        parts.iter().enumerate().all(|(i, p)| p.part as usize == i) && held == parts[0].stages_total as usize
    });
    steps
}
