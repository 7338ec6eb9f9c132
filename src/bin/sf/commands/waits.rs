//! The rank logs' NCCL calls and stage spans, for wait attribution (`analysis::blame`):
//! which rank made the others wait, and how much of each stage was waiting.

use stagefrontier::analysis::blame::{attribute, Attribution, CallTiming, RankTimeline, StageSpan};
use stagefrontier::analysis::comms::grow::{self, Aliases};
use stagefrontier::analysis::log::clocks::RankClock;
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::{CommCreated, NcclCall, RecordBody};

use super::step_vectors::complete_steps;
use super::Failure;
use crate::discover;
use crate::discover::Dirs;

/// Attributes the waits of the job in `dir`, stages indexed as in `stages` (a stage not
/// in it has no span). `command` names the sf command in a hint, as `read_ranks` does.
pub fn attribution(dir: &Dirs, command: &str, stages: &[String]) -> Result<Attribution, Failure> {
    let logs = discover::job_log_paths(dir, command).map_err(Failure::Message)?;
    let mut ranks: Vec<RankTimeline> = Vec::new();
    let mut clocks: Vec<RankClock> = Vec::new();
    let mut aliases: Vec<CommCreated> = Vec::new();
    let read = crate::parallel::read_all(&logs, |path| {
        let log = RankLog::open(path).map_err(|e| Failure::Message(e.to_string()))?;
        let rank = log.header.global_rank;
        let mut its_aliases = Vec::new();
        let read = (rank >= 0).then(|| (timeline(&log, rank as u32, stages, &mut its_aliases), clock_of(&log)));
        Ok::<_, Failure>(read.map(|read| (read, its_aliases)))
    });
    for read in read {
        let Some(((timeline, clock), its_aliases)) = read? else { continue };
        // Every log's aliases count, a second log of one rank's too (they name, not time).
        aliases.extend(its_aliases);
        if !ranks.iter().any(|r| r.rank == timeline.rank) {
            ranks.push(timeline);
            clocks.push(clock);
        }
    }
    rename_grown(&mut ranks, &Aliases::of(&aliases));
    align_hosts(&mut ranks, &clocks);
    Ok(attribute(&ranks))
}

/// Ranks of several hosts: each one's monotonic times mean nothing to the others', so
/// every time goes onto the wall-clock timeline through its header's calibration before
/// one rank's calls are compared with another's (`sf ls` shows how well the calibrations
/// hold). `clocks[i]` is `ranks[i]`'s; ranks of one host are left on their own clock.
pub(super) fn align_hosts(ranks: &mut [RankTimeline], clocks: &[RankClock]) {
    if !clocks.iter().any(|c| c.host != clocks[0].host) {
        return;
    }
    for (rank, clock) in ranks.iter_mut().zip(clocks) {
        let wall = |t: u64| clock.to_wall(t).clamp(0, u64::MAX as i128) as u64;
        for c in &mut rank.calls {
            (c.enter_ns, c.exit_ns) = (wall(c.enter_ns), wall(c.exit_ns));
        }
        for s in &mut rank.spans {
            (s.begin_ns, s.end_ns) = (wall(s.begin_ns), wall(s.end_ns));
        }
    }
}

/// A log's clock readings, for `analysis::log::clocks`.
pub fn clock_of(log: &RankLog) -> RankClock {
    let live = log.live();
    RankClock {
        host: log.header.host.clone(),
        base_mono_ns: log.header.base_mono_ns,
        base_wall_ns: log.header.base_wall_ns,
        heartbeat_mono_ns: live.heartbeat_mono_ns,
        heartbeat_wall_ns: live.heartbeat_wall_ns,
    }
}

/// A grown communicator's collectives match across its existing and new members: every
/// key names it as `analysis::comms::grow` does.
pub(super) fn rename_grown(ranks: &mut [RankTimeline], aliases: &Aliases) {
    for c in ranks.iter_mut().flat_map(|r| &mut r.calls) {
        c.key = c.key.map(|(comm, seq)| (aliases.canonical(comm), seq));
    }
}

/// Every completed NCCL call of the log, in enter order; collectives carry their
/// (communicator, sequence) key. The log's grown-communicator aliases
/// (`analysis::comms::grow`) are added to `aliases`.
pub(super) fn calls_and_aliases(log: &RankLog, aliases: &mut Vec<CommCreated>) -> Vec<CallTiming> {
    let mut calls = Vec::new();
    // Scanned, not collected, so no record is held beyond its call: the calls from the
    // event ring, the aliases from the history ring.
    log.scan(|record| match record.body {
        RecordBody::NcclCall(c) if c.t_exit_ns >= c.t_enter_ns => {
            calls.push(CallTiming::new(collective_key(&c), c.t_enter_ns, c.t_exit_ns))
        }
        RecordBody::CommCreated(c) if grow::is_alias(&c) => aliases.push(c),
        _ => {}
    });
    calls.sort_by_key(|c| c.enter_ns);
    // Held until every rank's are in: no room to spare.
    calls.shrink_to_fit();
    calls
}

/// A collective's (communicator, sequence): the same collective on every rank. `None` for
/// other calls.
pub(super) fn collective_key(c: &NcclCall) -> Option<(u64, u64)> {
    (c.op.is_collective() && c.seq > 0 && c.comm_id != 0).then_some((c.comm_id, c.seq))
}

fn timeline(log: &RankLog, rank: u32, stages: &[String], aliases: &mut Vec<CommCreated>) -> RankTimeline {
    let calls = calls_and_aliases(log, aliases);
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
