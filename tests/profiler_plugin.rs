//! The NCCL profiler-plugin door on real multi-process jobs: sf-trainer-sim over fakenccl,
//! whose profiler driver acts as NCCL towards NCCL_PROFILER_PLUGIN=libstagefrontier.so with
//! the ABI version FAKENCCL_PROFILER_VERSION selects. SF_NET_RAW=1 keeps one record per
//! work request, checked against the per-QP aggregates (tests/net.rs covers the default).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use stagefrontier::core::comms::nccl_op::NcclOp;
use stagefrontier::core::log::records::{NcclCall, ProfNet, ProfOp, ProfProxy, QpWindow, RecordBody};

const RANKS: u32 = 2;
const STEPS: u32 = 3;
/// Proxy steps fakenccl drives per proxy operation (its default).
const PROXY_STEPS: i32 = 2;

/// The trainer under the profiler plugin (and, with `preload`, also under LD_PRELOAD).
fn profiled(root: &Path, job: &str, version: u32, preload: bool) -> Command {
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

fn plain_checksum() -> String {
    let out =
        run_ok(Command::new(trainer_sim()).args(trainer_args(RANKS, STEPS)).arg("--p2p").env_remove("LD_PRELOAD"));
    checksum(&out)
}

#[derive(Default)]
struct View {
    ops: Vec<ProfOp>,
    proxies: Vec<ProfProxy>,
    nets: Vec<ProfNet>,
    calls: Vec<NcclCall>,
    qp_windows: Vec<QpWindow>,
}

fn view(path: &Path) -> View {
    let mut v = View::default();
    for body in bodies(path) {
        match body {
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

fn op_func(op: NcclOp) -> u8 {
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

/// Checks one rank's profiler records against what fakenccl drove for ABI `version`.
fn check_rank(v: &View, rank: i32, version: u8) {
    let colls: Vec<&ProfOp> = v.ops.iter().filter(|p| !p.p2p).collect();
    let p2ps: Vec<&ProfOp> = v.ops.iter().filter(|p| p.p2p).collect();
    assert!(colls.len() >= (4 * STEPS) as usize, "{} collectives", colls.len());
    assert_eq!(p2ps.len(), 2 * STEPS as usize, "one send and one recv per step");
    let seqs: Vec<u64> = colls.iter().map(|p| p.seq).collect();
    assert_eq!(seqs, (0..colls.len() as u64).collect::<Vec<_>>(), "NCCL seqNumbers, contiguous from 0");
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
    for p in &p2ps {
        assert_eq!(p.func, if p.seq % 2 == 0 { 6 } else { 7 }, "send then recv: {p:?}");
        assert_eq!(p.peer, 1 - rank);
    }

    // Two proxy operations (send, recv) per collective and one per point-to-point task,
    // PROXY_STEPS steps each; IB QP work requests on send steps from v3 on.
    let ops: Vec<&ProfProxy> = v.proxies.iter().filter(|p| p.unit == ProfProxy::OP).collect();
    let steps: Vec<&ProfProxy> = v.proxies.iter().filter(|p| p.unit == ProfProxy::STEP).collect();
    assert_eq!(ops.len(), 2 * colls.len() + p2ps.len());
    assert_eq!(steps.len(), PROXY_STEPS as usize * ops.len());
    let sends = ops.iter().filter(|p| p.is_send).count();
    let want_nets = if version >= 3 { sends * PROXY_STEPS as usize } else { 0 };
    assert_eq!(v.nets.len(), want_nets);
    for (seq, n) in colls.iter().map(|c| (c.seq, 2)) {
        let under = ops.iter().filter(|p| p.seq == seq && p.comm_hash == hash).count();
        // p2p ordinals share numbers with collective seqs; only collectives are counted here
        assert!(under >= n, "collective {seq} has {under} proxy operations");
    }
    for op in &ops {
        assert_eq!((op.n_steps, op.channel, op.step_no), (PROXY_STEPS, 0, -1), "{op:?}");
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
        if version >= 4 {
            assert!(s.trans_size > 0, "{s:?}");
        }
    }
    let mut wr_ids: Vec<u64> = v.nets.iter().map(|n| n.wr_id).collect();
    wr_ids.sort();
    assert_eq!(wr_ids, (1..=v.nets.len() as u64).collect::<Vec<_>>());
    for n in &v.nets {
        assert!(n.qp, "{n:?}");
        assert_eq!((n.plugin_id, n.device, n.qp_num, n.opcode), (1 << 16 | 1, 0, 0x100 + rank, 1), "{n:?}");
        assert!(n.length > 0);
        assert_eq!(n.updates, if version >= 4 { 1 } else { 0 });
        assert_eq!(n.comm_hash, hash);
    }
    // The per-QP aggregates count the same work requests: v1 and v2 have no network-plugin
    // events, so no QP either.
    match v.qp_windows.last() {
        None => assert_eq!((version < 3, v.nets.len()), (true, 0), "v{version} drove work requests"),
        Some(w) => {
            assert!(version >= 3);
            let bytes: u64 = v.nets.iter().map(|n| n.length).sum();
            let n = v.nets.len() as u64;
            assert_eq!((w.qp_num, w.device), (0x100 + rank as u32, 0), "{w:?}");
            assert_eq!(
                (w.posted, w.completed, w.in_flight, w.bytes_posted, w.bytes_completed),
                (n, n, 0, bytes, bytes)
            );
            let timed: u64 = v.qp_windows.iter().map(|w| w.latency_n as u64).sum();
            assert_eq!(timed, n, "every completion timed from its event's start");
        }
    }
}

fn logs_by_rank(root: &Path, job: &str) -> Vec<PathBuf> {
    let logs = rank_logs(root, job);
    assert_eq!(logs.len(), RANKS as usize, "{logs:?}");
    logs
}

#[test]
fn every_version_records_what_nccl_drove_and_results_are_unchanged() {
    let plain = plain_checksum();
    for version in [1u32, 2, 3, 4, 5, 6, 7] {
        let root = log_root(&format!("v{version}"));
        let out = run_ok(&mut profiled(&root, "job", version, false));
        assert_eq!(checksum(&out), plain, "v{version} changed the job's results");
        for (rank, path) in logs_by_rank(&root, "job").iter().enumerate() {
            let v = view(path);
            assert!(v.calls.is_empty(), "profiler door only: no LD_PRELOAD records");
            check_rank(&v, rank as i32, version as u8);
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}

#[test]
fn with_both_doors_each_collective_is_one_call_linked_by_sequence_number() {
    let root = log_root("both");
    let out = run_ok(&mut profiled(&root, "job", 5, true));
    assert_eq!(checksum(&out), plain_checksum());
    for (rank, path) in logs_by_rank(&root, "job").iter().enumerate() {
        let v = view(path);
        check_rank(&v, rank as i32, 5);
        // The LD_PRELOAD door keeps recording each call once; the profiler's task record is
        // its second view, linked by comm and sequence: NCCL's seqNumber + 1 == comm_seq.
        let calls: Vec<&NcclCall> = v.calls.iter().filter(|c| c.op.is_collective()).collect();
        let colls: Vec<&ProfOp> = v.ops.iter().filter(|p| !p.p2p).collect();
        assert_eq!(calls.len(), colls.len());
        for (call, prof) in calls.iter().zip(&colls) {
            assert_eq!(prof.seq + 1, call.seq, "{call:?} {prof:?}");
            assert_eq!((prof.func, prof.count, prof.dtype as i32), (op_func(call.op), call.count, call.dtype));
            assert!(call.t_enter_ns <= prof.t_start_ns && prof.t_stop_ns <= call.t_exit_ns, "nested in the call");
        }
        let p2p_calls: Vec<&NcclCall> = v.calls.iter().filter(|c| c.op.is_p2p()).collect();
        let p2ps: Vec<&ProfOp> = v.ops.iter().filter(|p| p.p2p).collect();
        assert_eq!(p2p_calls.len(), p2ps.len());
        for (call, prof) in p2p_calls.iter().zip(&p2ps) {
            assert_eq!((prof.func, prof.count, prof.peer), (op_func(call.op), call.count, call.peer));
        }
    }
}

fn compile_chain_plugin(dir: &Path) -> PathBuf {
    let out = dir.join("libchain-profiler.so");
    compile_c(&c_source("chain_profiler.c"), &out, &["-O2", "-shared", "-fPIC"]);
    out
}

fn chain_counts(base: &Path) -> Vec<BTreeMap<String, i64>> {
    let dir = base.parent().unwrap();
    let prefix = format!("{}.", base.file_name().unwrap().to_string_lossy());
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&prefix))
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .split_whitespace()
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap();
                    (k.to_string(), v.parse().unwrap())
                })
                .collect()
        })
        .collect()
}

fn run_chained(version: u32, chain_mask: &str) -> (Vec<View>, Vec<BTreeMap<String, i64>>, Output) {
    let root = log_root(&format!("chain-v{version}-{chain_mask}"));
    let plugin = compile_chain_plugin(&root);
    let counts = root.join("counts");
    let out = run_ok(
        profiled(&root, "job", version, false)
            .env("SF_CHAIN_PROFILER", &plugin)
            .env("CHAIN_MASK", chain_mask)
            .env("CHAIN_COUNT_FILE", &counts),
    );
    let views = logs_by_rank(&root, "job").iter().map(|p| view(p)).collect();
    (views, chain_counts(&counts), out)
}

/// NCCL_PROFILER_PLUGIN=STATIC_PLUGIN: NCCL looks for the tables among the process's own
/// symbols, which is where LD_PRELOAD puts them; no second copy of the library is loaded.
#[test]
fn static_plugin_finds_the_preloaded_tables() {
    let root = log_root("static");
    let out = run_ok(profiled(&root, "job", 7, true).env("NCCL_PROFILER_PLUGIN", "STATIC_PLUGIN"));
    assert_eq!(checksum(&out), plain_checksum());
    for (rank, path) in logs_by_rank(&root, "job").iter().enumerate() {
        check_rank(&view(path), rank as i32, 7);
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_chained_plugin_receives_every_call_with_its_own_handles() {
    let plain = plain_checksum();
    for version in [1u32, 4, 5] {
        let (views, counts, out) = run_chained(version, "0xff");
        assert_eq!(checksum(&out), plain, "v{version}: chaining changed the job's results");
        assert_eq!(counts.len(), RANKS as usize, "one count file per rank process: {counts:?}");
        for (rank, (v, c)) in views.iter().zip(&counts).enumerate() {
            check_rank(v, rank as i32, version as u8);
            // Every event this door recorded, plus one group per task, which only the
            // chained plugin asked for.
            let events = v.ops.len() + v.proxies.len() + v.nets.len();
            let groups = v.ops.len() as i64;
            let states: i64 = v.proxies.iter().map(|p| p.transitions as i64).sum::<i64>()
                + v.nets.iter().map(|n| n.updates as i64).sum::<i64>();
            assert_eq!(c["init"], 1, "v{version} rank {rank}: {c:?}");
            assert_eq!(c["finalize"], 1, "{c:?}");
            assert_eq!(c["start"], events as i64 + groups, "{c:?}");
            assert_eq!(c["stop"], c["start"], "{c:?}");
            assert_eq!(c["record"], states, "{c:?}");
            assert_eq!(c["type0"], groups, "{c:?}");
            assert_eq!(c["type1"], v.ops.iter().filter(|p| !p.p2p).count() as i64);
            assert_eq!(c["type7"], v.nets.len() as i64);
            assert_eq!((c["bad_parent"], c["bad_handle"], c["bad_ctx"]), (0, 0, 0), "{c:?}");
        }
    }
}

#[test]
fn a_chained_plugin_sees_only_the_types_it_asked_for() {
    // Collectives only: this door still records everything it asked for.
    let (views, counts, _) = run_chained(5, "0x2");
    for (v, c) in views.iter().zip(&counts) {
        let colls = v.ops.iter().filter(|p| !p.p2p).count() as i64;
        assert_eq!((c["start"], c["stop"], c["record"]), (colls, colls, 0), "{c:?}");
        assert_eq!(c["bad_parent"], 0);
        assert!(!v.proxies.is_empty() && !v.nets.is_empty());
    }
}
