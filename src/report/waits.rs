//! The rank logs' NCCL calls and stage spans, for wait attribution (`analysis::blame`):
//! which rank made the others wait, and how much of each stage was waiting. The calls come
//! with the steps (`step_vectors::read_ranks`, one read of each log, within the call
//! budget of `call_window`); a job without step markers reads its whole logs
//! (`calls_and_aliases`) to infer them.

use crate::analysis::blame::device::{attribute_device, DeviceRank, StageDeviceTime};
use crate::analysis::blame::waits_from::{waits_from, Evidence, WaitsFrom, Why};
use crate::analysis::blame::{attribute, Attribution, CallTiming, RankTimeline, StageSeconds, StageSpan};
use crate::analysis::comms::grow::{self, Aliases};
use crate::analysis::log::clocks::RankClock;
use crate::core::log::reader::RankLog;
use crate::core::log::records::{CommCreated, NcclCall, RecordBody};

use super::call_window::CallWindow;
use super::step_vectors::{RankSteps, StageNames};

/// What the attribution reads of every rank: its calls and its steps' stage spans (stages
/// by the job's name ids), on one timeline, grown communicators under one name; its NCCL
/// kernels, host synchronizations and device time per stage, on its own clock (the device
/// waits are rank-local differences); and where the waits can be read from.
pub struct Timelines {
    host: Vec<RankTimeline>,
    device: Vec<DeviceRank>,
    evidence: Evidence,
}

impl Timelines {
    /// Where the job's waits come from (`analysis::blame::waits_from`), and why.
    pub fn waits_from(&self) -> (WaitsFrom, Why) {
        waits_from(&self.evidence)
    }

    /// The device's waits over other stage spans than the logs' (each rank's inferred
    /// phases, on its own clock), when the waits come from the device.
    pub fn device_attribution_over(mut self, spans: &[(u32, Vec<StageSpan>)]) -> Option<Attribution> {
        if self.waits_from().0 != WaitsFrom::Device {
            return None;
        }
        for d in &mut self.device {
            d.spans = spans.iter().find(|(rank, _)| *rank == d.rank).map(|(_, s)| s.clone()).unwrap_or_default();
            // Device time per marked stage means nothing for other stages.
            d.device.clear();
        }
        Some(attribute_device(&self.device))
    }
}

/// Takes the calls out of `ranks` (read by `step_vectors::read_ranks`) and lays their
/// steps out as stage spans: call before dropping the steps before a call window, whose
/// first step's caused wait is charged over a segment that starts in the step before.
pub fn timelines(ranks: &mut [RankSteps]) -> Timelines {
    let aliases: Vec<CommCreated> = ranks.iter_mut().flat_map(|r| std::mem::take(&mut r.aliases)).collect();
    let aliases = Aliases::of(&aliases);
    let evidence = evidence(ranks);
    let mut host: Vec<RankTimeline> = ranks.iter_mut().map(timeline).collect();
    let device: Vec<DeviceRank> = if evidence.device_kernels > 0 {
        ranks.iter_mut().zip(&host).map(|(r, t)| device_rank(r, t, &aliases)).collect()
    } else {
        Vec::new()
    };
    let clocks: Vec<RankClock> = ranks.iter().map(|r| r.readings.clone()).collect();
    rename_grown(&mut host, &aliases);
    align_hosts(&mut host, &clocks);
    Timelines { host, device, evidence }
}

/// What the ranks' records show of the job's collectives.
/// Where the waits of the job `ranks` hold (as read by `step_vectors::read_ranks`) come
/// from, and why, without taking anything out of them.
pub fn waits_from_of(ranks: &[RankSteps]) -> (WaitsFrom, Why) {
    waits_from(&evidence(ranks))
}

fn evidence(ranks: &[RankSteps]) -> Evidence {
    let each: Vec<Evidence> = ranks
        .iter()
        .map(|r| {
            let keyed: Vec<(u64, u64, u64)> =
                r.calls.iter().filter_map(|c| Some((c.key?.0, c.enter_ns, c.exit_ns))).collect();
            let (steps, steps_with_calls) = steps_with_calls(r, &keyed);
            // The share counts the send/recv and group ends the records showed too.
            let call_share = r.call_share;
            Evidence { steps, steps_with_calls, call_share, ..Evidence::of_rank(r.kernels.len() as u64, &keyed) }
        })
        .collect();
    Evidence::of_job(each.iter())
}

/// The rank's steps its held calls cover (all of them, or those after the budget's cut),
/// and how many of them a collective call (`keyed`, in enter order) entered in.
fn steps_with_calls(r: &RankSteps, keyed: &[(u64, u64, u64)]) -> (u64, u64) {
    let from = r.held.from_ns.unwrap_or(0);
    let covered = r.steps.iter().filter(|s| s.t_begin_ns >= from);
    covered.fold((0, 0), |(steps, with), s| {
        let first = keyed.partition_point(|&(_, enter, _)| enter < s.t_begin_ns);
        let inside = keyed.get(first).is_some_and(|&(_, enter, _)| enter <= s.t_begin_ns.saturating_add(s.wall_ns));
        (steps + 1, with + u64::from(inside))
    })
}

/// A rank's device evidence (taken), over the spans of its host timeline.
fn device_rank(r: &mut RankSteps, host: &RankTimeline, aliases: &Aliases) -> DeviceRank {
    let mut kernels = std::mem::take(&mut r.kernels);
    for k in &mut kernels {
        k.key.0 = aliases.canonical(k.key.0);
    }
    let device = r
        .steps
        .iter()
        .flat_map(|s| {
            s.device.iter().map(|&(id, device_ns, _)| StageDeviceTime {
                step: s.step,
                stage: id as usize,
                device_s: device_ns as f64 / 1e9,
            })
        })
        .collect();
    DeviceRank { rank: r.rank, kernels, spans: host.spans.clone(), device, syncs: std::mem::take(&mut r.syncs) }
}

/// Attributes the waits of `timelines`, stages indexed as in `stages` (by name: a stage not
/// in it has no entry), keeping the steps of the call window (every step without one):
/// from the device when its kernels were seen, from the host's calls when they block,
/// none otherwise.
pub fn attribution(
    timelines: Timelines,
    names: &StageNames,
    stages: &[String],
    window: Option<&CallWindow>,
) -> Attribution {
    let mut a = match timelines.waits_from().0 {
        WaitsFrom::Device => attribute_device(&timelines.device),
        WaitsFrom::HostCalls => attribute(&timelines.host),
        WaitsFrom::None => Attribution::default(),
    };
    drop(timelines);
    let index: Vec<Option<usize>> = names.all().iter().map(|n| stages.iter().position(|s| s == n)).collect();
    let first = window.map_or(0, |w| w.starts_at_step);
    // Names are unique, so keys stay unique: the table is only put back in key order.
    let keyed = |table: StageSeconds| {
        table
            .into_iter()
            .filter(|&((_, step, _), _)| step >= first)
            .filter_map(|((rank, step, id), s)| Some(((rank, step, index.get(id).copied().flatten()?), s)))
            .collect()
    };
    a.waits = keyed(std::mem::take(&mut a.waits));
    a.caused = keyed(std::mem::take(&mut a.caused));
    a
}

/// The attribution a report may use: none when the waits could not be seen (the inferred
/// stages' attribution reads host calls that did not carry them).
pub fn seen(a: Attribution, from: WaitsFrom) -> Attribution {
    if from == WaitsFrom::None {
        return Attribution::default();
    }
    a
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

/// Every completed NCCL call of the log (all it holds: the steps inferred from them need
/// the whole schedule), in enter order; collectives carry their
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

/// A rank's calls (taken) and spans: a step's stages run in vector order from its begin;
/// the residual (last) fills the rest of the step's wall time.
fn timeline(r: &mut RankSteps) -> RankTimeline {
    let mut spans = Vec::new();
    for s in &r.steps {
        let mut t = s.t_begin_ns;
        for &(id, ns) in &s.stages {
            spans.push(StageSpan { step: s.step, stage: id as usize, begin_ns: t, end_ns: t.saturating_add(ns) });
            t = t.saturating_add(ns);
        }
    }
    spans.sort_by_key(|s| s.begin_ns);
    RankTimeline { rank: r.rank, calls: std::mem::take(&mut r.calls), spans, waits: Vec::new() }
}
