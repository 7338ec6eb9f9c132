//! A pipeline rank's steps without pass markers, as `analysis::path::passes` reads them:
//! each step's window (its step vector) and the rank's NCCL calls in it, its sends and
//! receives on the pipeline's communicators told apart from the rest; and the time its
//! rank spent inside its tensor-parallel collectives, where it waits for the slowest of
//! its tensor-parallel peers: on the device where the call's kernel is linked (an
//! asynchronous launch returns at once; its kernel spins until the peers arrive), else
//! on the host. Each
//! call carries its kernel's run on the device where the CUDA door linked one to it
//! (`DeviceColl`, keyed by communicator and the launching call's sequence).

use std::collections::{BTreeMap, BTreeSet};

use crate::analysis::comms::grow::Aliases;
use crate::analysis::path::passes::{self, CallKind, DeviceRun, HostCall, StepCalls};
use crate::core::log::format::Region;
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::reader::RankLog;
use crate::core::log::records::RecordBody;
use crate::report::step_vectors::RankStep;

/// One unmarked step of a rank.
pub struct UnmarkedStep {
    pub calls: StepCalls,
    /// ns inside calls on the tensor-parallel communicators in the step's window (their
    /// kernels' runs where linked).
    pub tensor_wait_ns: u64,
}

/// Communicator ids (as `Aliases` names them) by role.
pub struct PipelineComms<'a> {
    pub pipeline: &'a BTreeSet<u64>,
    pub tensor: &'a BTreeSet<u64>,
    pub aliases: &'a Aliases,
}

/// Per step number of `steps`, the rank's calls in its window, from the newest `keep`
/// event records of `log`.
pub fn step_calls(log: &RankLog, keep: u64, steps: &[&RankStep], comms: &PipelineComms) -> BTreeMap<u64, UnmarkedStep> {
    let PipelineComms { pipeline, tensor, aliases } = comms;
    let mut calls = Vec::new();
    // (enter, exit, kernel key) of the calls on tensor-parallel communicators.
    let mut tensor_calls = Vec::new();
    // The kernels' runs by (communicator, sequence), and the calls' keys beside `calls`.
    let mut kernels: BTreeMap<(u64, u64), DeviceRun> = BTreeMap::new();
    let mut keys = Vec::new();
    log.scan_newest(Region::Events, keep, |record| {
        let c = match record.body {
            RecordBody::NcclCall(c) if c.t_exit_ns >= c.t_enter_ns => c,
            RecordBody::DeviceColl(k) if k.seq > 0 && k.t_end_ns >= k.t_start_ns => {
                kernels.insert((aliases.canonical(k.comm_id), k.seq), (k.t_start_ns, k.t_end_ns));
                return;
            }
            _ => return,
        };
        // The communicator as the roles name it, and the key its kernel is linked by.
        let comm = (c.comm_id != 0).then(|| aliases.canonical(c.comm_id));
        let key = comm.filter(|_| c.seq > 0).map(|comm| (comm, c.seq));
        if comm.is_some_and(|comm| tensor.contains(&comm)) {
            tensor_calls.push((c.t_enter_ns, c.t_exit_ns, key));
        }
        let kind = match (c.op, comm) {
            (NcclOp::GroupStart, _) => CallKind::GroupStart,
            (op, _) if op.ends_group() => CallKind::GroupEnd,
            (_, None) => return,
            (NcclOp::Send, Some(comm)) if pipeline.contains(&comm) => CallKind::Send,
            (NcclOp::Recv, Some(comm)) if pipeline.contains(&comm) => CallKind::Recv,
            _ => CallKind::Other,
        };
        calls.push(HostCall {
            tid: c.tid,
            kind,
            enter_ns: c.t_enter_ns,
            exit_ns: c.t_exit_ns,
            group_depth: c.group_depth,
            device: None,
        });
        keys.push(key);
    });
    for (call, key) in calls.iter_mut().zip(keys) {
        call.device = key.and_then(|k| kernels.get(&k).copied());
    }
    // (host entry, ns inside): the kernel's run where linked.
    let tensor_waits: Vec<(u64, u64, u64)> = tensor_calls
        .into_iter()
        .map(|(enter, exit, key)| {
            let run = key.and_then(|key| kernels.get(&key));
            let inside = run.map_or(exit - enter, |&(start, end)| end - start);
            (enter, exit, inside)
        })
        .collect();
    // Records are written as calls return: a group's start returns before its end enters,
    // so entry order is the threads' call order.
    calls.sort_by_key(|c| c.enter_ns);
    let (exchanges, others) = passes::exchanges(&calls);
    let oldest = calls.first().map_or(u64::MAX, |c| c.enter_ns);
    steps
        .iter()
        // A step that began before the oldest call held may have lost its first exchanges.
        .filter(|s| s.t_begin_ns >= oldest)
        .map(|s| {
            let (begin_ns, end_ns) = (s.t_begin_ns, s.t_begin_ns.saturating_add(s.wall_ns));
            let inside = |t: u64| t >= begin_ns && t <= end_ns;
            let exchanges = exchanges.iter().filter(|e| inside(e.enter_ns) && e.exit_ns <= end_ns).copied().collect();
            let others = others.iter().copied().filter(|o| inside(o.enter_ns)).collect();
            let tensor_wait_ns =
                tensor_waits.iter().filter(|&&(enter, exit, _)| inside(enter) && exit <= end_ns).map(|w| w.2).sum();
            (s.step, UnmarkedStep { calls: StepCalls { begin_ns, end_ns, exchanges, others }, tensor_wait_ns })
        })
        .collect()
}
