//! The rank logs' NCCL calls and stage spans, for wait attribution (`analysis::blame`):
//! which rank made the others wait, and how much of each stage was waiting.

use std::path::Path;

use stagefrontier::analysis::blame::{attribute, Attribution, CallTiming, RankTimeline, StageSpan};
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::RecordBody;

use super::step_vectors::complete_steps;
use super::Failure;
use crate::discover;

/// Attributes the waits of the job in `dir`, stages indexed as in `stages` (a stage not
/// in it has no span). `command` names the sf command in a hint, as `read_ranks` does.
pub fn attribution(dir: &Path, command: &str, stages: &[String]) -> Result<Attribution, Failure> {
    let logs = discover::job_logs(dir, command).map_err(Failure::Message)?;
    let mut ranks: Vec<RankTimeline> = Vec::new();
    let read = crate::parallel::read_all(&logs, |path| {
        let log = RankLog::open(path).map_err(|e| Failure::Message(e.to_string()))?;
        let rank = log.header.global_rank;
        Ok::<_, Failure>((rank >= 0).then(|| timeline(&log, rank as u32, stages)))
    });
    for read in read {
        let Some(timeline) = read? else { continue };
        if !ranks.iter().any(|r| r.rank == timeline.rank) {
            ranks.push(timeline);
        }
    }
    Ok(attribute(&ranks))
}

fn timeline(log: &RankLog, rank: u32, stages: &[String]) -> RankTimeline {
    let mut calls = Vec::new();
    for record in log.records().0 {
        if let RecordBody::NcclCall(c) = record.body {
            if c.t_exit_ns < c.t_enter_ns {
                continue;
            }
            let key = (c.op.is_collective() && c.seq > 0 && c.comm_id != 0).then_some((c.comm_id, c.seq));
            calls.push(CallTiming { key, enter_ns: c.t_enter_ns, exit_ns: c.t_exit_ns });
        }
    }
    calls.sort_by_key(|c| c.enter_ns);
    let names = log.stage_names();
    let index = |id: u16| {
        let name = names.get(id as usize).cloned().flatten()?;
        stages.iter().position(|s| *s == name)
    };
    // A step's stages run in vector order from its begin; the residual (last) fills the
    // rest of the step's wall time.
    let mut spans = Vec::new();
    for (step, parts) in complete_steps(log).0 {
        let mut t = parts[0].t_begin_ns;
        for (id, ns) in parts.iter().flat_map(|p| p.stages()) {
            if let Some(stage) = index(id) {
                spans.push(StageSpan { step, stage, begin_ns: t, end_ns: t.saturating_add(ns) });
            }
            t = t.saturating_add(ns);
        }
    }
    spans.sort_by_key(|s| s.begin_ns);
    RankTimeline { rank, calls, spans }
}
