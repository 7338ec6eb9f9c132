//! A C program calls the NCCL API with good and bad arguments; under the library every
//! return code and every result is what fakenccl gives without it, and the log records
//! each call with that same code.

mod common;

use std::process::Command;

use common::*;
use stagefrontier::core::log::nccl_op::NcclOp;
use stagefrontier::core::log::records::CommOrigin;

#[test]
fn return_codes_and_results_are_the_real_librarys() {
    let driver = compile_against_fakenccl("nccl_calls.c", "sf-nccl-calls");
    let root = log_root("abi");
    let plain = run_ok(Command::new(&driver).env_remove("LD_PRELOAD"));
    let traced = run_ok(preloaded(&driver, &root, "job").env("RANK", "0").env("WORLD_SIZE", "1"));
    let plain = String::from_utf8(plain.stdout).unwrap();
    assert_eq!(String::from_utf8(traced.stdout).unwrap(), plain);
    assert!(plain.contains("-> 4"), "argument errors were exercised:\n{plain}");
    assert!(plain.contains("initall 11 22 11 22"), "{plain}");

    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 1);
    let bodies = bodies(&logs[0]);
    let calls = nccl_calls(&bodies);
    let shown = plain.lines().filter(|l| l.contains(" -> ")).count();
    assert_eq!(calls.len(), shown, "one record per call the program made");
    let codes: Vec<i32> = plain.lines().filter_map(|l| l.rsplit(" -> ").next()?.parse().ok()).collect();
    assert_eq!(calls.iter().map(|c| c.result).collect::<Vec<_>>(), codes, "recorded results are the returned ones");

    let created = comms_created(&bodies);
    let origins: Vec<_> = created.iter().map(|c| c.origin).collect();
    assert_eq!(origins, [CommOrigin::InitRank, CommOrigin::Split, CommOrigin::InitAll, CommOrigin::InitAll]);
    let world = created[0].comm_id;
    assert_eq!(created[1].parent_id, world);
    assert_eq!((created[2].comm_id, created[2].rank, created[3].rank), (created[3].comm_id, 0, 1));

    let grouped = calls.iter().filter(|c| c.op == NcclOp::AllReduce && c.group_depth == 2).count();
    assert_eq!(grouped, 1, "the allreduce inside two nested groups");
    let initall_calls: Vec<_> =
        calls.iter().filter(|c| c.op == NcclOp::AllReduce && c.comm_id == created[2].comm_id).map(|c| c.seq).collect();
    assert_eq!(initall_calls, [1, 1], "each rank of the InitAll communicator counts its own sequence");
}
