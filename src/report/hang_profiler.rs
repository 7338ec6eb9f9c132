//! `sf hang`'s view through NCCL's profiler: for the call a rank is inside, what NCCL told
//! the profiler door about that same call: its API or task records, and per channel, peer
//! and direction its proxy operations and steps done, the steps the link still has in
//! flight, and when the call last made network progress.
//!
//! The preload door records a call when it returns, so the call a rank is stuck in is only
//! in the live table (its communicator, function and entry time). `analysis::comms::link`
//! links every returned call to its profiler records by (communicator, function,
//! per-function ordinal); the call in flight takes the units after them. Inside
//! `ncclGroupEnd` the calls of the group have returned: their records are the view.
//!
//! A task's proxy operations and steps carry its `nccl_seq` (the door hands them the
//! task's through the parent): from v5 the tasks of a call are the task records of its
//! communicator and functions that started after its API records. A proxy step is recorded when NCCL stops
//! it, so a step in flight has no record yet: the link's newest `qp_window` (source
//! `proxy`) counts it, posted and not completed.

use std::collections::{BTreeMap, HashMap};

use crate::analysis::comms::grow::Aliases;
use crate::analysis::comms::link::{link, link_with_next};
use crate::analysis::hang::{Position, RankInput};
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::reader::CommLive;
use crate::core::log::records::{hex_u64, CommCreated, NcclCall, ProfOp, ProfProxy, QpWindow, RecordBody};
use crate::core::log::records_net::WrSource;
use crate::core::net::profiler::func_name;
use crate::core::net::proxy_progress::ProxyLink;
use serde::Serialize;

const SEND: u8 = 6;

/// The `profiler` object of a rank in `sf hang --json`; its field names are a contract.
#[derive(Clone, Debug, Serialize)]
pub struct ProfilerCallReport {
    #[serde(serialize_with = "hex_u64")]
    pub comm_id: u64,
    /// The call in flight (`group_end` when the rank is inside `ncclGroupEnd`).
    pub op: Option<NcclOp>,
    /// The `ncclProfiler_vN` NCCL used; 0 when no record was linked.
    pub abi: u8,
    /// NCCL's own hash of the communicator (`comm_hash` of `prof_op` records).
    #[serde(serialize_with = "hex_u64")]
    pub comm_hash: u64,
    /// The profiler's records of the call: its API calls (v5+) or tasks (v1-v4).
    pub records: Vec<ProfRecordReport>,
    /// One row per channel, direction and peer the call's proxy ran or has in flight.
    pub proxies: Vec<ProxyReport>,
    /// Since the call last made network progress (a proxy step done); None: none yet.
    pub last_progress_s: Option<f64>,
    /// Why no record is shown although the rank has profiler records.
    pub note: Option<&'static str>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProfRecordReport {
    /// NCCL's function name (Send and Recv for the tasks of an AlltoAll, Gather, Scatter).
    pub func: &'static str,
    pub api: bool,
    pub nccl_seq: u64,
    /// Root of a collective, peer of a point-to-point task.
    pub peer: i32,
    pub count: u64,
    /// Since NCCL started the event.
    pub age_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProxyReport {
    pub channel: u8,
    /// `send` or `recv`.
    pub direction: &'static str,
    pub peer: i32,
    /// The call's proxy operations and steps NCCL stopped (done).
    pub ops_done: u32,
    pub steps_done: u32,
    pub bytes_done: u64,
    /// Steps per proxy operation, from a proxy operation done.
    pub n_steps: Option<i32>,
    /// The link's counters at its newest `qp_window` (cumulative over the job).
    pub posted: Option<u64>,
    pub completed: Option<u64>,
    pub in_flight: Option<u32>,
    pub stuck: bool,
    /// Since the call's newest step done on this link.
    pub last_done_s: Option<f64>,
}

/// The records the view needs, gathered while the hang adapter scans a log.
#[derive(Default)]
pub(crate) struct Collector {
    /// Every call of the log, oldest first: the links count per-function ordinals from
    /// the first.
    calls: Vec<NcclCall>,
    ops: Vec<ProfOp>,
    proxies: Vec<ProfProxy>,
    /// Newest `qp_window` of each proxy link.
    windows: HashMap<(i32, u32), QpWindow>,
}

/// What the profiler saw of one call in flight, before it is judged against a clock.
#[derive(Clone, Debug)]
pub(crate) struct CallView {
    comm_id: u64,
    op: Option<NcclOp>,
    records: Vec<ProfOp>,
    proxies: Vec<ProfProxy>,
    windows: Vec<QpWindow>,
    note: Option<&'static str>,
}

impl Collector {
    pub(crate) fn see(&mut self, body: &RecordBody) {
        match body {
            RecordBody::NcclCall(c) => self.calls.push(*c),
            RecordBody::ProfOp(p) => self.ops.push(*p),
            RecordBody::ProfProxy(p) if p.unit != ProfProxy::KERNEL_CH => self.proxies.push(*p),
            RecordBody::QpWindow(w) if w.source == WrSource::Proxy => {
                let newest = self.windows.entry((w.device, w.qp_num)).or_insert(*w);
                if w.t_ns >= newest.t_ns {
                    *newest = *w;
                }
            }
            _ => {}
        }
    }

    /// The view of each call in flight in `live` (the log's communicator table), linked
    /// against every returned call (all of the log's, oldest first), and of each
    /// group whose calls returned last on their communicator (a rank inside `ncclGroupEnd`;
    /// `sf hang` attaches it only when it finds the rank there). Nothing when the rank has
    /// no profiler records.
    pub(crate) fn views(self, created: &[CommCreated], live: &[CommLive]) -> Vec<CallView> {
        let calls = &self.calls[..];
        if self.ops.is_empty() {
            return Vec::new();
        }
        let mut found: Vec<(u64, Option<NcclOp>, Vec<usize>)> = Vec::new();
        for row in live {
            let Some(inflight) = &row.inflight else { continue };
            // The table was read before the records: a call that returned since is in them.
            if calls.iter().any(|c| c.comm_id == row.comm_id && c.t_enter_ns >= inflight.since_mono_ns) {
                continue;
            }
            let Some(op) = inflight.op.filter(|op| op.is_collective() || op.is_p2p()) else { continue };
            let next = NcclCall {
                op,
                t_enter_ns: inflight.since_mono_ns,
                t_exit_ns: 0,
                comm_id: row.comm_id,
                seq: 0,
                count: 1, // not known while in flight; any count moves data
                bytes: 0,
                stream: 0,
                tid: 0,
                peer: -1, // nor a rooted call's root: its units at the root are not known
                dtype: -1,
                redop: -1,
                result: 0,
                group_depth: 0,
            };
            found.push((row.comm_id, Some(op), link_with_next(calls, created, &self.ops, &next).1));
        }
        // Groups: per communicator, the grouped calls after its last ungrouped one.
        let mut comms: Vec<u64> = calls.iter().map(|c| c.comm_id).filter(|&id| id != 0).collect();
        comms.sort_unstable();
        comms.dedup();
        let open: Vec<(u64, Vec<usize>)> = comms
            .into_iter()
            .filter(|id| !found.iter().any(|f| f.0 == *id))
            .filter_map(|id| {
                let on_comm: Vec<usize> = (0..calls.len()).filter(|&i| calls[i].comm_id == id).collect();
                let n = on_comm.iter().rev().take_while(|&&i| calls[i].group_depth > 0).count();
                (n > 0).then(|| (id, on_comm[on_comm.len() - n..].to_vec()))
            })
            .collect();
        if !open.is_empty() {
            let links = link(calls, created, &self.ops);
            for (id, group) in open {
                let linked = links.iter().filter(|l| group.contains(&l.call)).map(|l| l.prof).collect();
                found.push((id, None, linked));
            }
        }
        found.into_iter().map(|(comm_id, op, linked)| self.view(comm_id, op, &linked)).collect()
    }

    /// What the profiler saw of the records `linked` (indices into `ops`) of one call or group.
    fn view(&self, comm_id: u64, op: Option<NcclOp>, linked: &[usize]) -> CallView {
        let records: Vec<ProfOp> = linked.iter().map(|&i| self.ops[i]).collect();
        let note = records.is_empty().then_some(
            "no profiler record is this call's (not linked: a graph capture, a dropped event, or a rooted \
             call at its root)",
        );
        let tasks = self.tasks_of(&records);
        let proxies: Vec<ProfProxy> = self
            .proxies
            .iter()
            .filter(|x| {
                tasks.iter().any(|t| {
                    x.comm_hash == t.comm_hash
                        && x.seq == t.seq
                        && x.t_start_ns >= t.t_start_ns
                        && (!t.p2p || (x.is_send == (t.func == SEND) && x.peer == t.peer))
                })
            })
            .copied()
            .collect();
        let hash = records.first().map(|r| r.comm_hash);
        let windows = hash
            .map(|hash| {
                let tag = ProxyLink::new(hash, 0, false, 0).comm_tag;
                self.windows
                    .values()
                    .filter(|w| ProxyLink::of(w.source, w.device, w.qp_num).is_some_and(|l| l.comm_tag == tag))
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        CallView { comm_id, op, records, proxies, windows, note }
    }

    /// The task records of a call's linked units: the units themselves (v1-v4), or from
    /// v5 the tasks of the same communicator and function that started after the call's
    /// first API record, in order (a captured plan's tasks do not share its API ordinal).
    /// None for a unit NCCL made no task event of (a Broadcast from 2.29.2).
    fn tasks_of(&self, units: &[ProfOp]) -> Vec<ProfOp> {
        let mut tasks: Vec<ProfOp> = units.iter().filter(|u| !u.api).copied().collect();
        let api: Vec<&ProfOp> = units.iter().filter(|u| u.api).collect();
        let Some(from) = api.iter().map(|u| u.t_start_ns).min() else { return tasks };
        let mut funcs: Vec<(u64, u8)> = api.iter().map(|u| (u.comm_hash, u.func)).collect();
        funcs.sort_unstable();
        funcs.dedup();
        for (hash, func) in funcs {
            let wanted = api.iter().filter(|u| (u.comm_hash, u.func) == (hash, func)).count();
            let mut after: Vec<&ProfOp> = self
                .ops
                .iter()
                .filter(|t| !t.api && !t.ce && (t.comm_hash, t.func) == (hash, func) && t.t_start_ns >= from)
                .collect();
            after.sort_by_key(|t| t.t_start_ns);
            tasks.extend(after.into_iter().take(wanted).copied());
        }
        tasks
    }
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The views judged at the rank's clock `now_ns` (None: unknown, ages are 0).
pub(crate) fn reports(views: Vec<CallView>, now_ns: Option<u64>) -> Vec<ProfilerCallReport> {
    let age = |t: u64| seconds(now_ns.map_or(0, |now| now.saturating_sub(t)));
    views
        .into_iter()
        .map(|v| {
            let mut rows: BTreeMap<(u8, bool, i32), ProxyReport> = BTreeMap::new();
            let row = |channel: u8, is_send: bool, peer: i32| ProxyReport {
                channel,
                direction: if is_send { "send" } else { "recv" },
                peer,
                ops_done: 0,
                steps_done: 0,
                bytes_done: 0,
                n_steps: None,
                posted: None,
                completed: None,
                in_flight: None,
                stuck: false,
                last_done_s: None,
            };
            let mut newest_done: Option<u64> = None;
            for x in &v.proxies {
                let r = rows.entry((x.channel, x.is_send, x.peer)).or_insert_with(|| row(x.channel, x.is_send, x.peer));
                if x.unit == ProfProxy::OP {
                    r.ops_done += 1;
                    r.n_steps = Some(x.n_steps);
                } else {
                    r.steps_done += 1;
                    r.bytes_done += x.trans_size;
                    let done = x.t_stop_ns.max(x.t_start_ns);
                    r.last_done_s = Some(r.last_done_s.map_or(age(done), |s| s.min(age(done))));
                    newest_done = Some(newest_done.map_or(done, |n| n.max(done)));
                }
            }
            for w in &v.windows {
                let Some(l) = ProxyLink::of(w.source, w.device, w.qp_num) else { continue };
                let key = (l.channel, l.is_send, l.peer as i32);
                // A link the call has not used yet is shown only while it holds steps in flight.
                if !rows.contains_key(&key) && w.in_flight == 0 {
                    continue;
                }
                let r = rows.entry(key).or_insert_with(|| row(l.channel, l.is_send, l.peer as i32));
                (r.posted, r.completed, r.in_flight, r.stuck) =
                    (Some(w.posted), Some(w.completed), Some(w.in_flight), w.stuck);
            }
            let first = v.records.first();
            ProfilerCallReport {
                comm_id: v.comm_id,
                op: v.op,
                abi: first.map_or(0, |r| r.abi),
                comm_hash: first.map_or(0, |r| r.comm_hash),
                records: v
                    .records
                    .iter()
                    .map(|r| ProfRecordReport {
                        func: func_name(r.func),
                        api: r.api,
                        nccl_seq: r.seq,
                        peer: r.peer,
                        count: r.count,
                        age_s: age(r.t_start_ns),
                    })
                    .collect(),
                proxies: rows.into_values().collect(),
                last_progress_s: newest_done.map(age),
                note: v.note,
            }
        })
        .collect()
}

/// Names the reports' communicators as `hang::diagnose` names them (a grown communicator by
/// its existing members' id, `analysis::comms::grow`).
pub(crate) fn rename<'a>(reports: impl Iterator<Item = &'a mut Vec<ProfilerCallReport>>, inputs: &[RankInput]) {
    let aliases = Aliases::of(inputs.iter().flat_map(|i| &i.created));
    for r in reports.flatten() {
        r.comm_id = aliases.canonical(r.comm_id);
    }
}

/// The report of the call the rank is inside, if the profiler saw it: on `at`'s
/// communicator, of its function (inside `ncclGroupEnd` the position names the group's
/// newest call, the view its group).
pub(crate) fn of_call(reports: &[ProfilerCallReport], at: Option<&Position>) -> Option<ProfilerCallReport> {
    let at = at.filter(|at| at.in_flight)?;
    reports.iter().find(|r| r.comm_id == at.comm_id && (at.grouped || r.op == at.op)).cloned()
}
