//! What the profiler-plugin tests share: the trainer run under the door, the records a
//! rank's log holds by kind, and the checks every ABI version's records must pass.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;
use stagefrontier::core::log::nccl_op::NcclOp;
use stagefrontier::core::log::records::{NcclCall, ProfNet, ProfOp, ProfProxy, QpWindow, RecordBody};

pub const RANKS: u32 = 2;
pub const STEPS: u32 = 3;
/// Proxy steps fakenccl drives per proxy operation (its default).
pub const PROXY_STEPS: i32 = 2;

/// The trainer under the profiler plugin (and, with `preload`, also under LD_PRELOAD).
pub fn profiled(root: &Path, job: &str, version: u32, preload: bool) -> Command {
    let mut cmd = preloaded(&trainer_sim(), root, job);
    if !preload {
        cmd.env_remove("LD_PRELOAD");
    }
    cmd.args(trainer_args(RANKS, STEPS))
        .arg("--p2p")
        .env("NCCL_PROFILER_PLUGIN", library())
        .env("FAKENCCL_PROFILER_VERSION", version.to_string())
        .env("SF_NET_RAW", "1");
    cmd
}

pub fn plain_checksum() -> String {
    let out =
        run_ok(Command::new(trainer_sim()).args(trainer_args(RANKS, STEPS)).arg("--p2p").env_remove("LD_PRELOAD"));
    checksum(&out)
}

#[derive(Default)]
pub struct View {
    /// Task records (Coll, P2p).
    pub ops: Vec<ProfOp>,
    /// v5+: the API calls (CollApi, P2pApi); v6+: copy-engine collectives.
    pub apis: Vec<ProfOp>,
    pub ces: Vec<ProfOp>,
    pub proxies: Vec<ProfProxy>,
    pub nets: Vec<ProfNet>,
    pub calls: Vec<NcclCall>,
    pub qp_windows: Vec<QpWindow>,
}

pub fn view(path: &Path) -> View {
    let mut v = View::default();
    for body in bodies(path) {
        match body {
            RecordBody::ProfOp(p) if p.api => v.apis.push(p),
            RecordBody::ProfOp(p) if p.ce => v.ces.push(p),
            RecordBody::ProfOp(p) => v.ops.push(p),
            RecordBody::ProfProxy(p) => v.proxies.push(p),
            RecordBody::ProfNet(n) => v.nets.push(n),
            RecordBody::NcclCall(c) => v.calls.push(c),
            RecordBody::QpWindow(w) => v.qp_windows.push(w),
            _ => {}
        }
    }
    v
}

pub fn op_func(op: NcclOp) -> u8 {
    match op {
        NcclOp::Broadcast | NcclOp::Bcast => 0,
        NcclOp::Reduce => 1,
        NcclOp::AllGather => 2,
        NcclOp::ReduceScatter => 3,
        NcclOp::AllReduce => 4,
        NcclOp::Send => 6,
        NcclOp::Recv => 7,
        other => panic!("{other:?} is not driven"),
    }
}

/// Channels fakenccl's proxy runs every task on (one proxy operation per channel and peer).
pub const CHANNELS: usize = 2;

/// Checks one rank's profiler records against what fakenccl drove for ABI `version`;
/// `net_profiler`: fakenccl acted as an NCCL built with NET_PROFILER (QP events).
pub fn check_rank(v: &View, rank: i32, version: u8, net_profiler: bool) {
    check_rank_as(v, rank, version, net_profiler, version >= 6)
}

/// `check_rank`; `allgatherv`: the Broadcasts ran as AllGatherV tasks (NCCL >= 2.29.2 unless
/// NCCL_ALLGATHERV_ENABLE=0).
pub fn check_rank_as(v: &View, rank: i32, version: u8, net_profiler: bool, allgatherv: bool) {
    let colls: Vec<&ProfOp> = v.ops.iter().filter(|p| !p.p2p).collect();
    let p2ps: Vec<&ProfOp> = v.ops.iter().filter(|p| p.p2p).collect();
    assert!(colls.len() >= (4 * STEPS) as usize, "{} collectives", colls.len());
    assert_eq!(p2ps.len(), 2 * STEPS as usize, "one send and one recv per step");
    // NCCL's seqNumber counts per communicator and per function (comm->seqNumber[func]).
    let mut by_func: BTreeMap<u8, Vec<u64>> = BTreeMap::new();
    for c in &colls {
        by_func.entry(c.func).or_default().push(c.seq);
    }
    for (func, seqs) in &by_func {
        assert_eq!(seqs, &(0..seqs.len() as u64).collect::<Vec<_>>(), "func {func}: contiguous from 0");
    }
    let hash = colls[0].comm_hash;
    for p in &v.ops {
        assert_eq!((p.abi, p.rank, p.comm_hash), (version, rank, hash), "{p:?}");
        assert!([5, 7].contains(&p.dtype), "float32 or uint64: {p:?}");
        assert!(p.t_stop_ns >= p.t_start_ns, "{p:?}");
    }
    for c in &colls {
        assert_eq!((c.algo, c.proto, c.n_channels, c.n_warps), (1, 2, 2, 16), "RING/SIMPLE: {c:?}");
        assert!([0, 2, 4].contains(&c.func), "{c:?}");
    }
    for (k, p) in p2ps.iter().enumerate() {
        assert_eq!(p.func, if k % 2 == 0 { 6 } else { 7 }, "send then recv: {p:?}");
        assert_eq!(p.peer, 1 - rank);
        assert_eq!(p.seq, k as u64 / 2, "point-to-point ordinals count per function: {p:?}");
    }
    check_api_records(v, version, allgatherv);

    // One proxy operation per channel and direction per collective, per channel per
    // point-to-point task, PROXY_STEPS steps each.
    let ops: Vec<&ProfProxy> = v.proxies.iter().filter(|p| p.unit == ProfProxy::OP).collect();
    let steps: Vec<&ProfProxy> = v.proxies.iter().filter(|p| p.unit == ProfProxy::STEP).collect();
    assert_eq!(ops.len(), CHANNELS * (2 * colls.len() + p2ps.len()));
    assert_eq!(steps.len(), PROXY_STEPS as usize * ops.len());
    // Stock NCCL has no QP events; with NET_PROFILER one per step, send and receive, each
    // stopped twice by NCCL's IB transport and recorded once.
    let want_nets = if version >= 3 && net_profiler { steps.len() } else { 0 };
    assert_eq!(v.nets.len(), want_nets, "v{version}");
    for c in &colls {
        let under = ops.iter().filter(|p| p.seq == c.seq && p.comm_hash == hash).count();
        assert!(under >= 2 * CHANNELS, "collective {} has {under} proxy operations", c.seq);
    }
    for op in &ops {
        assert_eq!((op.n_steps, op.step_no), (PROXY_STEPS, -1), "{op:?}");
        assert!((op.channel as usize) < CHANNELS, "{op:?}");
        assert_eq!(op.peer, 1 - rank);
        let want: u32 = match (version, op.is_send) {
            (..=3, true) => 1 << 0 | 1 << 2 | 1 << 3,
            (..=3, false) => 1 << 4 | 1 << 5 | 1 << 7,
            _ => 1 << 19,
        };
        assert_eq!(op.states, want, "{op:?}");
        if version <= 3 {
            assert_eq!(op.trans_size, op.chunk_size as u64 * PROXY_STEPS as u64, "{op:?}");
        }
    }
    for s in &steps {
        let want: u32 = match (version, s.is_send) {
            (..=3, true) => 1 << 8 | 1 << 9,
            (_, true) => 1 << 8 | 1 << 20 | 1 << 9,
            (_, false) => 1 << 10 | 1 << 11 | 1 << 12,
        };
        assert_eq!(s.states, want, "{s:?}");
        assert_eq!(s.transitions as u32, want.count_ones());
        assert!(s.t_states_ns[0] >= s.t_start_ns && s.t_states_ns[1] >= s.t_states_ns[0], "{s:?}");
        assert!((0..PROXY_STEPS).contains(&s.step_no));
        assert_eq!(s.peer, 1 - rank, "a step inherits its operation's peer: {s:?}");
        if version >= 4 {
            assert!(s.trans_size > 0, "{s:?}");
        }
    }
    let mut wr_ids: Vec<u64> = v.nets.iter().map(|n| n.wr_id).collect();
    wr_ids.sort();
    wr_ids.dedup();
    assert_eq!(wr_ids.len(), v.nets.len(), "one record per work request, though stopped twice");
    for n in &v.nets {
        assert!(n.qp, "{n:?}");
        assert_eq!((n.plugin_id, n.device), (1 << 16 | 1, 0), "{n:?}");
        let send = n.qp_num == 0x100 + rank;
        assert!(send || n.qp_num == 0x200 + rank, "{n:?}");
        assert!(send && n.opcode == 1 && n.length > 0 || !send && n.opcode == 0 && n.length == 0, "{n:?}");
        assert_eq!(n.updates, if version >= 4 { 1 } else { 0 });
        assert_eq!(n.comm_hash, hash);
    }
    // The per-QP aggregates count the same work requests, each completed once: none stays
    // in flight though NCCL stops every QP event twice.
    for qp_num in [0x100 + rank as u32, 0x200 + rank as u32] {
        let Some(w) = v.qp_windows.iter().rev().find(|w| w.qp_num == qp_num) else {
            assert_eq!(v.nets.len(), 0, "v{version} drove work requests");
            continue;
        };
        {
            assert!(version >= 3 && net_profiler);
            let nets: Vec<&ProfNet> = v.nets.iter().filter(|n| n.qp_num as u32 == qp_num).collect();
            let bytes: u64 = nets.iter().map(|n| n.length).sum();
            let n = nets.len() as u64;
            assert_eq!(w.device, 0, "{w:?}");
            assert_eq!(
                (w.posted, w.completed, w.in_flight, w.bytes_posted, w.bytes_completed),
                (n, n, 0, bytes, bytes)
            );
            let timed: u64 = v.qp_windows.iter().filter(|w| w.qp_num == qp_num).map(|w| w.latency_n as u64).sum();
            assert_eq!(timed, n, "every completion timed from its event's start");
        }
    }
}

/// From v5 one record per API call the application made, under the call's function, with
/// per-function ordinals; from v6 (NCCL >= 2.29.2) a Broadcast is an AllGatherV task with
/// no task event, so its API record is its only record (and it moves nothing through the
/// proxy that a profiler sees).
pub fn check_api_records(v: &View, version: u8, allgatherv: bool) {
    let colls: Vec<&ProfOp> = v.ops.iter().filter(|p| !p.p2p).collect();
    let p2ps: Vec<&ProfOp> = v.ops.iter().filter(|p| p.p2p).collect();
    if version < 5 {
        assert!(v.apis.is_empty(), "v{version} has no API events");
        assert!(colls.iter().any(|c| c.func == 0), "v{version}: Broadcast is a task");
        return;
    }
    let coll_apis: Vec<&ProfOp> = v.apis.iter().filter(|a| !a.p2p).collect();
    let p2p_apis: Vec<&ProfOp> = v.apis.iter().filter(|a| a.p2p).collect();
    let mut by_func: BTreeMap<(bool, u8), Vec<u64>> = BTreeMap::new();
    for a in &v.apis {
        by_func.entry((a.p2p, a.func)).or_default().push(a.seq);
        assert_eq!((a.abi, a.count > 0, a.algo), (version, true, 255), "{a:?}");
    }
    for (func, seqs) in &by_func {
        assert_eq!(seqs, &(0..seqs.len() as u64).collect::<Vec<_>>(), "{func:?}: contiguous from 0");
    }
    assert_eq!(
        p2p_apis.iter().map(|a| (a.func, a.count)).collect::<Vec<_>>(),
        p2ps.iter().map(|p| (p.func, p.count)).collect::<Vec<_>>()
    );
    let broadcasts = coll_apis.iter().filter(|a| a.func == 0).count();
    assert!(broadcasts > 0, "the job broadcasts");
    let tasks: Vec<u8> = colls.iter().map(|c| c.func).collect();
    let calls: Vec<u8> = coll_apis.iter().map(|a| a.func).collect();
    if allgatherv {
        assert!(!tasks.contains(&0), "v{version}: a Broadcast has no task event");
        assert_eq!(tasks, calls.iter().copied().filter(|&f| f != 0).collect::<Vec<_>>());
    } else {
        assert_eq!(tasks, calls);
    }
}

pub fn logs_by_rank(root: &Path, job: &str) -> Vec<PathBuf> {
    let logs = rank_logs(root, job);
    assert_eq!(logs.len(), RANKS as usize, "{logs:?}");
    logs
}
