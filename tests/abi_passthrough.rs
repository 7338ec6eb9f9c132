//! A C program calls the NCCL API with good and bad arguments; under the library every
//! return code and every result is what fakenccl gives without it, and the log records
//! each call with that same code.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;
use stagefrontier::core::log::records::CommOrigin;
use stagefrontier::core::nccl_op::NcclOp;

/// fakenccl as the fixtures' build script produced it.
fn fakenccl_dir() -> PathBuf {
    let build = artifact_dir().join("build");
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(&build)
        .expect("target/<profile>/build")
        .filter_map(|e| e.ok().map(|e| e.path().join("out")))
        .filter(|out| out.join("libnccl.so.2").exists())
        .collect();
    candidates.sort_by_key(|out| std::fs::metadata(out.join("libnccl.so.2")).and_then(|m| m.modified()).ok());
    candidates.pop().expect("fakenccl is built with the workspace (`cargo build --workspace`)")
}

fn compile_driver() -> PathBuf {
    let nccl = fakenccl_dir();
    let exe = std::env::temp_dir().join(format!("sf-nccl-calls-{}", std::process::id()));
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/nccl_calls.c");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&source)
        .arg(format!("-L{}", nccl.display()))
        .arg(format!("-Wl,-rpath,{}", nccl.display()))
        .arg("-lnccl")
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "compiling {}", source.display());
    exe
}

#[test]
fn return_codes_and_results_are_the_real_librarys() {
    let driver = compile_driver();
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
