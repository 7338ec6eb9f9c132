//! The CUDA door's device evidence end to end: a 2-rank job (tests/c/device_async_job.c) on
//! the fake CUDA runtime, under LD_PRELOAD and CUDA_INJECTION64_PATH, enqueues an
//! asynchronous allreduce with rank 1 late and synchronizes its stream. Its logs, read
//! through `sf dump --json`, hold the NCCL kernel linked to its call with the early rank's
//! device wait, the host synchronizations, and the device's state; a kernel that never
//! completes is the state's oldest unfinished work, by name.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::*;
use serde_json::Value;

/// How late rank 1 enqueues its allreduce (device_async_job.c).
const LATE_MS: u64 = 300;

fn job() -> &'static Path {
    static JOB: OnceLock<PathBuf> = OnceLock::new();
    JOB.get_or_init(|| {
        let runtime = fixture_output("fakecuda/libcudart.so.13").parent().expect("fakecuda's directory").to_path_buf();
        let nccl = fixture_output("libnccl.so.2").parent().expect("fakenccl's directory").to_path_buf();
        let exe = std::env::temp_dir().join(format!("sf-device-async-job-{}", std::process::id()));
        let source = c_source("device_async_job.c");
        let include = format!("-I{}", source.parent().expect("tests/c").display());
        let (cuda_dir, cuda_rpath) = (format!("-L{}", runtime.display()), format!("-Wl,-rpath,{}", runtime.display()));
        let (nccl_dir, nccl_rpath) = (format!("-L{}", nccl.display()), format!("-Wl,-rpath,{}", nccl.display()));
        let args =
            ["-Wextra", &include, &cuda_dir, "-l:libcudart.so.13", &cuda_rpath, &nccl_dir, "-lnccl", &nccl_rpath];
        compile_c(&source, &exe, &args);
        exe
    })
}

/// Runs the job in `mode` and returns each rank's records as `sf dump --json` prints them.
fn run(mode: &str) -> Vec<Vec<Value>> {
    let root = log_root(&format!("device-door-{mode}"));
    let mut cmd = preloaded(job(), &root, "job");
    without_callers_cuda(&mut cmd);
    // CUPTI is found beside the loaded libcudart, as on a GPU node: no SF_CUPTI_PATH.
    cmd.arg(mode).env("CUDA_INJECTION64_PATH", library());
    let out = run_ok(&mut cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("stagefrontier:"), "{stderr}");
    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 2, "{logs:?}");
    logs.iter().map(|log| dump(log)).collect()
}

fn dump(log: &Path) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_sf")).arg("dump").arg(log).arg("--json").output().expect("run sf");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

fn of_kind<'a>(records: &'a [Value], kind: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["kind"] == kind).collect()
}

#[test]
fn an_async_allreduce_leaves_its_kernel_linked_to_its_call_and_the_host_syncs() {
    let ranks = run("late");
    for (rank, records) in ranks.iter().enumerate() {
        let calls: Vec<&Value> = of_kind(records, "nccl_call").into_iter().filter(|c| c["op"] == "allreduce").collect();
        assert_eq!(calls.len(), 2, "rank {rank}");
        // The second allreduce, the one rank 1 enqueued late.
        let call = calls[1];
        let host_ms = (call["t_exit_ns"].as_u64().unwrap() - call["t_enter_ns"].as_u64().unwrap()) as f64 / 1e6;
        assert!(host_ms < 50.0, "rank {rank}: the allreduce held the host {host_ms:.1} ms: not asynchronous");

        let colls = of_kind(records, "device_coll");
        let seqs: Vec<&Value> = colls.iter().map(|c| &c["seq"]).collect();
        assert_eq!(seqs, [1, 2], "rank {rank}: {colls:?}");
        let coll = colls[1];
        assert_eq!((&coll["comm_id"], &coll["seq"]), (&call["comm_id"], &call["comm_seq"]), "rank {rank}");
        assert_eq!((coll["op"].as_str(), coll["link"].as_str()), (Some("allreduce"), Some("callback")));
        let (start, end) = (coll["t_start_ns"].as_u64().unwrap(), coll["t_end_ns"].as_u64().unwrap());
        let launch = coll["t_launch_ns"].as_u64().unwrap();
        assert!(launch >= call["t_enter_ns"].as_u64().unwrap() && launch <= call["t_exit_ns"].as_u64().unwrap());
        let device_ms = (end - start) as f64 / 1e6;
        if rank == 0 {
            assert!(device_ms >= LATE_MS as f64 * 0.75, "rank 0's kernel waited {device_ms:.1} ms on the device");
        }

        let syncs = of_kind(records, "host_sync");
        let kinds: Vec<&str> = syncs.iter().map(|s| s["sync"].as_str().unwrap()).collect();
        assert!(kinds.contains(&"stream") && kinds.contains(&"copy"), "rank {rank}: {kinds:?}");
        let stream_sync = syncs.iter().rfind(|s| s["sync"] == "stream").unwrap();
        assert_ne!(stream_sync["tid"], 0, "rank {rank}: the synchronizing thread is known");
        if rank == 0 {
            let waited = stream_sync["t_exit_ns"].as_u64().unwrap() - stream_sync["t_enter_ns"].as_u64().unwrap();
            assert!(waited as f64 / 1e6 >= LATE_MS as f64 * 0.5, "rank 0 synchronized {waited} ns");
        }

        let states = of_kind(records, "device_state");
        let last = states.last().unwrap_or_else(|| panic!("rank {rank}: no device_state"));
        assert_eq!((last["launched"].as_u64(), last["completed"].as_u64()), (Some(3), Some(3)), "rank {rank}: {last}");
        assert!(last["oldest"].is_null() && last["sync"].is_null(), "rank {rank}: {last}");
    }
}

#[test]
fn a_kernel_that_never_completes_is_the_oldest_unfinished_work() {
    let ranks = run("stuck");
    for (rank, records) in ranks.iter().enumerate() {
        let last = *of_kind(records, "device_state").last().unwrap_or_else(|| panic!("rank {rank}: no device_state"));
        assert_eq!((last["launched"].as_u64(), last["completed"].as_u64()), (Some(4), Some(3)), "rank {rank}: {last}");
        let oldest = &last["oldest"];
        assert!(oldest["op"].is_null() && oldest["comm_id"] == "0x0000000000000000", "a compute kernel: {oldest}");
        let name_id = &oldest["name_id"];
        let names = of_kind(records, "kernel_name");
        let name = names.iter().find(|n| &n["name_id"] == name_id).unwrap_or_else(|| panic!("rank {rank}: {names:?}"));
        assert_eq!(name["name"], "sim_bwd_stuck", "rank {rank}");
    }
}

#[test]
fn a_group_kernel_is_linked_to_the_groups_last_call() {
    for (rank, records) in run("group").iter().enumerate() {
        let calls = of_kind(records, "nccl_call");
        let recv = calls.iter().find(|c| c["op"] == "recv").unwrap_or_else(|| panic!("rank {rank}: no recv"));
        let colls = of_kind(records, "device_coll");
        let ops: Vec<&str> = colls.iter().map(|c| c["op"].as_str().unwrap()).collect();
        assert_eq!(ops, ["allreduce", "allreduce", "recv"], "rank {rank}: one kernel for the group");
        let group = colls[2];
        assert_eq!((&group["comm_id"], &group["seq"]), (&recv["comm_id"], &recv["comm_seq"]), "rank {rank}");
        let end = calls.iter().find(|c| c["op"] == "group_end").unwrap_or_else(|| panic!("rank {rank}: no group end"));
        let launched = group["t_launch_ns"].as_u64().unwrap();
        assert!(launched >= end["t_enter_ns"].as_u64().unwrap(), "launched by the group's end, not by the recv");
    }
}
