//! The NCCL profiler-plugin door on real multi-process jobs: sf-trainer-sim over fakenccl,
//! whose profiler driver acts as NCCL towards NCCL_PROFILER_PLUGIN=libstagefrontier.so with
//! the ABI version FAKENCCL_PROFILER_VERSION selects. SF_NET_RAW=1 keeps one record per
//! work request, checked against the per-QP aggregates (tests/net.rs covers the default).

mod common;
mod profiler_common;

use std::collections::BTreeMap;

use common::*;
use profiler_common::*;
use stagefrontier::analysis::comms::link::link;
use stagefrontier::core::log::nccl_op::NcclOp;
use stagefrontier::core::log::records::{CommCreated, NcclCall, ProfOp, RecordBody};

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
            check_rank(&v, rank as i32, version as u8, false);
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}

/// An NCCL built with NET_PROFILER stops every QP event twice (once per polled completion,
/// once at request completion): each work request is still one completion, none is left
/// in flight, and a second stop never re-emits a record.
#[test]
fn qp_events_stopped_twice_count_once() {
    for version in [3u32, 4, 7] {
        let root = log_root(&format!("netprof-v{version}"));
        run_ok(profiled(&root, "job", version, false).env("FAKENCCL_NET_PROFILER", "1"));
        for (rank, path) in logs_by_rank(&root, "job").iter().enumerate() {
            check_rank(&view(path), rank as i32, version as u8, true);
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}

#[test]
fn with_both_doors_each_collective_is_one_call_linked_by_function_ordinal() {
    let root = log_root("both");
    let out = run_ok(&mut profiled(&root, "job", 5, true));
    assert_eq!(checksum(&out), plain_checksum());
    for (rank, path) in logs_by_rank(&root, "job").iter().enumerate() {
        let v = view(path);
        check_rank(&v, rank as i32, 5, false);
        // The LD_PRELOAD door keeps recording each call once; the profiler's task record is
        // its second view, linked by (communicator, function, per-function ordinal): NCCL's
        // seqNumber counts per function, the preload door's comm_seq across functions.
        let calls: Vec<&NcclCall> = v.calls.iter().filter(|c| c.op.is_collective()).collect();
        let colls: Vec<&ProfOp> = v.ops.iter().filter(|p| !p.p2p).collect();
        assert_eq!(calls.len(), colls.len());
        let mut ordinal: BTreeMap<u8, u64> = BTreeMap::new();
        for (call, prof) in calls.iter().zip(&colls) {
            let func = op_func(call.op);
            let k = ordinal.entry(func).or_default();
            assert_eq!((prof.func, prof.seq), (func, *k), "{call:?} {prof:?}");
            *k += 1;
            assert_eq!((prof.count, prof.dtype as i32), (call.count, call.dtype));
            assert!(call.t_enter_ns <= prof.t_start_ns && prof.t_stop_ns <= call.t_exit_ns, "nested in the call");
        }
        assert!(
            calls.iter().zip(&colls).any(|(call, prof)| prof.seq + 1 != call.seq),
            "several functions: the per-communicator comm_seq is not NCCL's seqNumber + 1"
        );
        let p2p_calls: Vec<&NcclCall> = v.calls.iter().filter(|c| c.op.is_p2p()).collect();
        let p2ps: Vec<&ProfOp> = v.ops.iter().filter(|p| p.p2p).collect();
        assert_eq!(p2p_calls.len(), p2ps.len());
        for (call, prof) in p2p_calls.iter().zip(&p2ps) {
            assert_eq!((prof.func, prof.count, prof.peer), (op_func(call.op), call.count, call.peer));
        }
    }
}

/// NCCL turns some calls into other tasks: an AlltoAll into a Send and a Recv per rank
/// (each its own P2pApi and P2p event, named Send or Recv), and from 2.29.2 (v6) a
/// Broadcast into an AllGatherV task with no task event. Every call the application made
/// still has its records, found by the link on (communicator, function, per-function
/// ordinal) (`analysis::comms::link`), and its later Sends are not taken for the
/// AlltoAll's.
#[test]
fn calls_nccl_turns_into_other_tasks_are_linked_to_the_call_made() {
    const ROUNDS: usize = 2;
    let root = log_root("split");
    let job = compile_against_fakenccl("split_job.c", "sf-split-job");
    for version in [4u8, 5, 6, 7] {
        let name = format!("v{version}");
        run_ok(
            preloaded(&job, &root, &name)
                .arg(ROUNDS.to_string())
                .env("NCCL_PROFILER_PLUGIN", library())
                .env("FAKENCCL_PROFILER_VERSION", version.to_string()),
        );
        for (rank, path) in logs_by_rank(&root, &name).iter().enumerate() {
            let bodies = bodies(path);
            let calls = nccl_calls(&bodies);
            let comms: Vec<CommCreated> = bodies
                .iter()
                .filter_map(|b| if let RecordBody::CommCreated(c) = b { Some(*c) } else { None })
                .collect();
            let ops: Vec<ProfOp> =
                bodies.iter().filter_map(|b| if let RecordBody::ProfOp(p) = b { Some(*p) } else { None }).collect();
            let links = link(&calls, &comms, &ops);
            let mut linked_calls = 0;
            for (i, call) in calls.iter().enumerate().filter(|(_, c)| c.op.is_collective() || c.op.is_p2p()) {
                let linked: Vec<&ProfOp> = links.iter().filter(|l| l.call == i).map(|l| &ops[l.prof]).collect();
                let want = if call.op == NcclOp::AlltoAll { 2 * RANKS as usize } else { 1 };
                assert_eq!(linked.len(), want, "v{version} rank {rank}: {call:?} -> {linked:?}");
                linked_calls += 1;
                for p in &linked {
                    assert_eq!((p.api, p.count, p.dtype as i32), (version >= 5, call.count, call.dtype), "{p:?}");
                    assert!(call.t_enter_ns <= p.t_start_ns && p.t_stop_ns <= call.t_exit_ns, "within the call");
                }
                let funcs: Vec<u8> = linked.iter().map(|p| p.func).collect();
                if call.op == NcclOp::AlltoAll {
                    assert_eq!(funcs, [6, 6, 7, 7], "a Send to and a Recv from every rank");
                    if version < 5 {
                        let peers: Vec<i32> = linked.iter().map(|p| p.peer).collect();
                        assert_eq!(peers, [0, 1, 0, 1]);
                    }
                } else {
                    assert_eq!(funcs, [op_func(call.op)]);
                }
            }
            assert_eq!(linked_calls, 4 * ROUNDS + ROUNDS, "AlltoAll, Broadcast, AllReduce, Send, Recv per round");
            // The application's first Send is the profiler's Send number RANKS: the AlltoAll's
            // Sends came first.
            let first_send = calls.iter().position(|c| c.op == NcclOp::Send).expect("a Send");
            let l = links.iter().find(|l| l.call == first_send).expect("linked");
            assert_eq!(ops[l.prof].seq, RANKS as u64, "{:?}", ops[l.prof]);
            // From v6 the Broadcast has no task record, only the call's.
            let bcast_tasks = ops.iter().filter(|p| !p.api && p.func == 0).count();
            assert_eq!(bcast_tasks, if version >= 6 { 0 } else { ROUNDS }, "v{version}");
        }
    }
    let _ = std::fs::remove_file(&job);
    let _ = std::fs::remove_dir_all(&root);
}

/// Copy-engine collectives (v6+; FAKENCCL_CE_COLL=1: every buffer a symmetric window under
/// NCCL_CTA_POLICY_ZERO): each recorded from its CeColl event with NCCL's ceSeqNum, under its
/// API call, with no task record; 2.28 (v5) reports none (profiler_copy_engine.rs: defaults).
#[test]
fn copy_engine_collectives_are_recorded() {
    let root = log_root("ce");
    for version in [5u32, 6, 7] {
        let job = format!("v{version}");
        run_ok(profiled(&root, &job, version, false).env("FAKENCCL_CE_COLL", "1"));
        for path in logs_by_rank(&root, &job) {
            let v = view(&path);
            let gathers = v.apis.iter().filter(|a| !a.p2p && a.func == 2).count();
            let tasks = v.ops.iter().filter(|p| !p.p2p && p.func == 2).count();
            if version < 6 {
                assert_eq!((v.ces.len(), tasks, gathers), (0, 0, 0), "v5: no event of a copy-engine collective");
                continue;
            }
            assert!(gathers > 0, "the job all-gathers");
            assert_eq!((v.ces.len(), tasks), (gathers, 0), "v{version}");
            for (k, c) in v.ces.iter().enumerate() {
                assert_eq!(
                    (c.func, c.seq, c.abi, c.p2p, c.api),
                    (2, 2 * k as u64, version as u8, false, false),
                    "{c:?}"
                );
                assert!(c.count > 0 && c.dtype >= 0, "{c:?}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}
