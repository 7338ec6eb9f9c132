//! Copy-engine collectives as NCCL chooses them by default (no fakenccl knob): an
//! AllGather, AlltoAll, Gather or Scatter whose buffers are NCCL_WIN_COLL_SYMMETRIC windows
//! on a communicator with NCCL_CTA_POLICY_ZERO (tests/c/ce_job.c), recorded by the profiler
//! door and linked to the call the application made.

mod common;

use std::path::Path;

use common::*;
use stagefrontier::analysis::comms::link::link;
use stagefrontier::core::log::nccl_op::NcclOp;
use stagefrontier::core::log::records::{ProfOp, RecordBody};

const ROUNDS: usize = 2;

/// Per rank: (calls with their linked records' functions, CeColl functions, task functions).
type Seen = Vec<(Vec<(NcclOp, Vec<u8>)>, Vec<u8>, Vec<u8>)>;

fn run(root: &Path, job: &Path, name: &str, version: u8, env: &[(&str, &str)]) -> Seen {
    let mut cmd = preloaded(job, root, name);
    cmd.arg(ROUNDS.to_string())
        .env("NCCL_PROFILER_PLUGIN", library())
        .env("FAKENCCL_PROFILER_VERSION", version.to_string())
        .env_remove("NCCL_CTA_POLICY")
        .env_remove("FAKENCCL_CE_COLL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_ok(&mut cmd);
    let logs = rank_logs(root, name);
    assert_eq!(logs.len(), 2);
    logs.iter()
        .map(|path| {
            let bodies = bodies(path);
            let calls = nccl_calls(&bodies);
            let comms = comms_created(&bodies);
            let ops: Vec<ProfOp> =
                bodies.iter().filter_map(|b| if let RecordBody::ProfOp(p) = b { Some(*p) } else { None }).collect();
            let links = link(&calls, &comms, &ops);
            let linked = calls
                .iter()
                .enumerate()
                .filter(|(_, c)| c.op.is_collective())
                .map(|(i, c)| (c.op, links.iter().filter(|l| l.call == i).map(|l| ops[l.prof].func).collect()))
                .collect();
            let ces = ops.iter().filter(|p| p.ce).map(|p| p.func).collect();
            let tasks = ops.iter().filter(|p| !p.api && !p.ce).map(|p| p.func).collect();
            (linked, ces, tasks)
        })
        .collect()
}

fn one_round<T: Clone>(round: &[T]) -> Vec<T> {
    round.iter().cycle().take(round.len() * ROUNDS).cloned().collect()
}

#[test]
fn copy_engine_collectives_follow_windows_and_cta_policy_per_version() {
    use NcclOp::*;
    let root = log_root("ce-default");
    let job = compile_against_fakenccl("ce_job.c", "sf-ce-job");
    let order = [AllGather, AllGather, AlltoAll, Gather, AllReduce, Scatter];
    // 2.29+ (v6, v7): the windowed AllGather, AlltoAll, Gather and the Scatter into a window
    // run on the copy engines: one CollApi record named for the call, one CeColl, no task.
    for (version, env) in [(7u8, vec![]), (6, vec![]), (7, vec![("CE_JOB_PLAIN", "1"), ("NCCL_CTA_POLICY", "ZERO")])] {
        for (rank, (linked, ces, tasks)) in
            run(&root, &job, &format!("v{version}-{}", env.len()), version, &env).into_iter().enumerate()
        {
            let ctx = format!("v{version} {env:?} rank {rank}");
            let want: Vec<(NcclOp, Vec<u8>)> =
                order.iter().zip([2u8, 2, 8, 9, 4, 10]).map(|(&op, f)| (op, vec![f])).collect();
            assert_eq!(linked, one_round(&want), "{ctx}");
            assert_eq!(ces, one_round(&[2, 8, 9, 10]), "{ctx}");
            assert_eq!(tasks, one_round(&[2, 4]), "only the plain AllGather and the AllReduce have tasks: {ctx}");
        }
    }
    // 2.28 (v5): both buffers must be windows (the Scatter's send buffer is not) and the
    // copy-engine collectives report nothing; the other calls still link.
    for (rank, (linked, ces, tasks)) in run(&root, &job, "v5", 5, &[]).into_iter().enumerate() {
        let scatter: Vec<u8> = if rank == 1 { vec![6, 6, 7] } else { vec![7] };
        let want = [
            (AllGather, vec![]),
            (AllGather, vec![2]),
            (AlltoAll, vec![]),
            (Gather, vec![]),
            (AllReduce, vec![4]),
            (Scatter, scatter.clone()),
        ];
        assert_eq!(linked, one_round(&want), "v5 rank {rank}");
        assert!(ces.is_empty(), "v5 has no CeColl events");
        let mut round = vec![2u8, 4];
        round.extend(&scatter);
        assert_eq!(tasks, one_round(&round), "v5 rank {rank}: the Scatter runs as point-to-point tasks");
    }
    // A communicator without NCCL_CTA_POLICY_ZERO, or NCCL <= 2.27 (v4): no copy engines.
    for (version, env) in [(7u8, vec![("CE_JOB_PLAIN", "1")]), (4, vec![])] {
        for (rank, (linked, ces, _)) in
            run(&root, &job, &format!("none-v{version}"), version, &env).into_iter().enumerate()
        {
            assert!(ces.is_empty(), "v{version} rank {rank}");
            let alltoall = &linked[2].1;
            assert_eq!(alltoall, &vec![6, 6, 7, 7], "v{version} rank {rank}: Send/Recv tasks");
        }
    }
    let _ = std::fs::remove_file(&job);
    let _ = std::fs::remove_dir_all(&root);
}
