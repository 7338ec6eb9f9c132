//! The profiler door's records linked to the calls the application made
//! (`analysis::comms::link`) on real multi-process jobs over fakenccl, for the calls NCCL
//! turns into other tasks by the caller's rank (Gather, Scatter) and for graph-captured
//! calls (FAKENCCL_GRAPH_CAPTURE), which NCCL's seqNumber does not count.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use stagefrontier::analysis::comms::link::link;
use stagefrontier::core::log::nccl_op::NcclOp;
use stagefrontier::core::log::records::{CommCreated, NcclCall, ProfOp, RecordBody};

/// tests/c/rooted_job.c's size and root.
const RANKS: usize = 3;
const ROOT: i32 = 1;
const SEND: u8 = 6;
const RECV: u8 = 7;

struct RankView {
    rank: i32,
    calls: Vec<NcclCall>,
    comms: Vec<CommCreated>,
    ops: Vec<ProfOp>,
}

fn rank_views(root: &Path, job: &str) -> Vec<RankView> {
    let logs = rank_logs(root, job);
    assert_eq!(logs.len(), RANKS, "{logs:?}");
    let mut views: Vec<RankView> = logs
        .iter()
        .map(|path| {
            let bodies = bodies(path);
            let comms = comms_created(&bodies);
            let ops =
                bodies.iter().filter_map(|b| if let RecordBody::ProfOp(p) = b { Some(*p) } else { None }).collect();
            RankView { rank: comms.first().expect("a communicator").rank, calls: nccl_calls(&bodies), comms, ops }
        })
        .collect();
    views.sort_by_key(|v| v.rank);
    views
}

fn rooted_job(root: &Path, job: &Path, name: &str, version: u8, rounds: usize) -> Command {
    let mut cmd = preloaded(job, root, name);
    cmd.arg(rounds.to_string())
        .env("NCCL_PROFILER_PLUGIN", library())
        .env("FAKENCCL_PROFILER_VERSION", version.to_string());
    cmd
}

fn linked<'a>(v: &'a RankView, links: &[stagefrontier::analysis::comms::link::Link], call: usize) -> Vec<&'a ProfOp> {
    links.iter().filter(|l| l.call == call).map(|l| &v.ops[l.prof]).collect()
}

/// NCCL (src/enqueue.cc taskAppend at v2.28.3-1 and v2.30.7-1) makes a Gather a Send to the
/// root on every rank and, at the root, a Recv from every rank in rank order; a Scatter, at
/// the root, a Send to every rank, then a Recv from the root on every rank. Each task is a
/// P2pApi (v5+) and a P2p event named Send or Recv, and the point-to-point ordinals count
/// them, so the application's own Send after them is linked past them.
#[test]
fn gather_and_scatter_link_to_the_tasks_each_rank_made_of_them() {
    const ROUNDS: usize = 2;
    let root = log_root("rooted");
    let job = compile_against_fakenccl("rooted_job.c", "sf-rooted-job");
    for version in [4u8, 5, 6, 7] {
        let name = format!("v{version}");
        run_ok(&mut rooted_job(&root, &job, &name, version, ROUNDS));
        for v in rank_views(&root, &name) {
            let links = link(&v.calls, &v.comms, &v.ops);
            let at_root = v.rank == ROOT;
            let mut seen = [0usize; 2];
            for (i, call) in v.calls.iter().enumerate() {
                let got = linked(&v, &links, i);
                let funcs: Vec<u8> = got.iter().map(|p| p.func).collect();
                let peers: Vec<i32> = got.iter().map(|p| p.peer).collect();
                let ctx = format!("v{version} rank {}: {call:?} -> {got:?}", v.rank);
                match call.op {
                    NcclOp::Gather => {
                        seen[0] += 1;
                        let want: &[u8] = if at_root { &[SEND, RECV, RECV, RECV] } else { &[SEND] };
                        assert_eq!(funcs, want, "{ctx}");
                        if version < 5 {
                            let want: &[i32] = if at_root { &[ROOT, 0, 1, 2] } else { &[ROOT] };
                            assert_eq!(peers, want, "task peers in NCCL's order: {ctx}");
                        }
                    }
                    NcclOp::Scatter => {
                        seen[1] += 1;
                        let want: &[u8] = if at_root { &[SEND, SEND, SEND, RECV] } else { &[RECV] };
                        assert_eq!(funcs, want, "{ctx}");
                        if version < 5 {
                            let want: &[i32] = if at_root { &[0, 1, 2, ROOT] } else { &[ROOT] };
                            assert_eq!(peers, want, "{ctx}");
                        }
                    }
                    NcclOp::AllReduce => assert_eq!(funcs, [4], "{ctx}"),
                    NcclOp::Send | NcclOp::Recv => assert_eq!(got.len(), 1, "{ctx}"),
                    _ => {}
                }
                for p in &got {
                    assert_eq!((p.api, p.count, p.dtype as i32), (version >= 5, call.count, call.dtype), "{ctx}");
                }
            }
            assert_eq!(seen, [ROUNDS, ROUNDS]);
            // The application's first Send comes after the first round's Gather (one Send)
            // and Scatter (three Sends at the root).
            let first_send = v.calls.iter().position(|c| c.op == NcclOp::Send).expect("a Send");
            let p = linked(&v, &links, first_send)[0];
            assert_eq!((p.func, p.seq), (SEND, if at_root { 4 } else { 1 }), "v{version} rank {}", v.rank);
        }
    }
    let _ = std::fs::remove_file(&job);
    let _ = std::fs::remove_dir_all(&root);
}

/// Graph capture (FAKENCCL_GRAPH_CAPTURE marks round 1's five calls as captured into a graph
/// launched once): from v3 (NCCL 2.26.2) the captured AllReduce's Coll event repeats the
/// seqNumber the next AllReduce gets, so at v3-v4 the link stops on that communicator at
/// the captured AllReduce and never links a call to another call's record; from v5 the
/// door's own API ordinal counts every call, and every call links. v2 (NCCL <= 2.25)
/// advanced seqNumber on every run of a plan: every call links.
#[test]
fn graph_captured_calls_stop_the_task_link_at_v3_v4_and_not_the_api_link() {
    const ROUNDS: usize = 3;
    const PER_ROUND: usize = 5; // Gather, Scatter, AllReduce, Send, Recv
    let root = log_root("capture");
    let job = compile_against_fakenccl("rooted_job.c", "sf-capture-job");
    let captured = format!("{}-{}", PER_ROUND, 2 * PER_ROUND - 1);
    for version in [2u8, 3, 4, 5, 7] {
        let name = format!("v{version}");
        run_ok(rooted_job(&root, &job, &name, version, ROUNDS).env("FAKENCCL_GRAPH_CAPTURE", &captured));
        for v in rank_views(&root, &name) {
            let colls: Vec<u64> = v.ops.iter().filter(|p| !p.api && !p.p2p && p.func == 4).map(|p| p.seq).collect();
            let want: &[u64] = if version >= 3 { &[0, 1, 1] } else { &[0, 1, 2] };
            assert_eq!(colls, want, "v{version}: AllReduce Coll seqNumbers");
            let links = link(&v.calls, &v.comms, &v.ops);
            let data: Vec<usize> =
                (0..v.calls.len()).filter(|&i| v.calls[i].op.is_collective() || v.calls[i].op.is_p2p()).collect();
            assert_eq!(data.len(), ROUNDS * PER_ROUND);
            let stop = if matches!(version, 3 | 4) { PER_ROUND + 2 } else { data.len() }; // round 1's AllReduce
            for (k, &i) in data.iter().enumerate() {
                let got = linked(&v, &links, i);
                let call = &v.calls[i];
                let ctx = format!("v{version} rank {} call {k} {call:?} -> {got:?}", v.rank);
                assert_eq!(got.is_empty(), k >= stop, "{ctx}");
                for p in got {
                    assert_eq!((p.count, p.dtype as i32), (call.count, call.dtype), "{ctx}");
                    assert!(call.t_enter_ns <= p.t_start_ns, "a record never precedes its call: {ctx}");
                }
            }
        }
    }
    let _ = std::fs::remove_file(&job);
    let _ = std::fs::remove_dir_all(&root);
}
