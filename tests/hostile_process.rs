//! The process must always be able to exit, fork and clone, whatever the library is doing
//! (issue 11, points 10-12): a FIFO in the sysfs tree the collector samples, a fork while
//! another thread is inside the library's first-call initialisation, a raw clone() child
//! with no fork handlers, a panic in the collector thread.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use stagefrontier::core::log::format::WriterState;
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::RecordBody;

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

fn plain_checksum(args: &[String]) -> String {
    checksum(&run_ok(Command::new(trainer_sim()).args(args).env_remove("LD_PRELOAD")))
}

#[test]
fn a_fifo_in_the_sysfs_tree_neither_stalls_sampling_nor_holds_up_exit() {
    let tree = TempDir::new("fifo-sysfs");
    let counters = tree.join("mlx5_0/ports/1/counters");
    std::fs::create_dir_all(&counters).unwrap();
    std::fs::write(counters.join("port_xmit_data"), "1000\n").unwrap();
    mkfifo(&counters.join("port_rcv_data"));

    let root = log_root("fifo-sysfs");
    let args = trainer_args(2, 20);
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(&args).env("SF_IB_SYSFS_ROOT", &tree.0).env("SF_IB_SAMPLE_MS", "10");
    // Before the fix the collector blocked for ever opening the FIFO, and the exit handler
    // for ever on the collector: the job never ended.
    let (out, elapsed) = output_within(&mut cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(checksum(&out), plain_checksum(&args));
    assert!(elapsed < Duration::from_secs(30), "{elapsed:?}");
    for path in rank_logs(&root, "job") {
        let log = RankLog::open(&path).unwrap();
        assert_eq!(log.live().writer_state, Some(WriterState::Exited), "the collector still flushed at exit");
        let names: Vec<String> = bodies(&path)
            .iter()
            .filter_map(|b| match b {
                RecordBody::PortCounterName(n) => {
                    Some(format!("{}:{:?}", String::from_utf8_lossy(n.counter.as_bytes()), n.state))
                }
                _ => None,
            })
            .collect();
        assert!(
            names.iter().any(|n| n == "port_rcv_data:Unreadable"),
            "the FIFO is unreadable, not waited on: {names:?}"
        );
        assert!(names.iter().any(|n| n == "port_xmit_data:Present"), "{names:?}");
    }
}

#[test]
fn a_collector_blocked_for_ever_does_not_hold_up_exit() {
    let root = log_root("collector-stall");
    let args = trainer_args(2, 5);
    let plain_start = Instant::now();
    let plain = plain_checksum(&args);
    let plain_elapsed = plain_start.elapsed();
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(&args).env("SF_TEST_FAULT", "collector-stall").env("SF_HEARTBEAT_MS", "100");
    // Before: the exit handler waited on the collector's lock for ever.
    let (out, elapsed) = output_within(&mut cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(checksum(&out), plain);
    // Each rank's exit waits 200 ms; the rest is a loaded machine's noise.
    assert!(
        elapsed < plain_elapsed + Duration::from_secs(10),
        "{elapsed:?} against {plain_elapsed:?} without the library"
    );
    for path in rank_logs(&root, "job") {
        let log = RankLog::open(&path).unwrap();
        assert_eq!(log.live().writer_state, Some(WriterState::Running), "no flush happened, and none is claimed");
    }
}

#[test]
fn a_fork_while_another_thread_initialises_the_library_does_not_hang_the_child() {
    let exe = compile_against_fakenccl("fork_clone.c", "fork-clone-init");
    let root = log_root("fork-init");
    // Each settings read sleeps 800 ms (the runtime's, then the profiler door's): the fork
    // at 1200 ms lands while the first thread is inside the profiler door's.
    let mut cmd = preloaded(&exe, &root, "job");
    cmd.args(["fork-during-init", "1200"])
        .env("RANK", "0")
        .env("WORLD_SIZE", "1")
        .env("NCCL_PROFILER_PLUGIN", library())
        .env("SF_TEST_FAULT", "slow-init=800");
    let (out, _) = output_within(&mut cmd, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("fork_clone: ok"),
        "{}: {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 1, "{logs:?}");
    let calls = nccl_calls(&bodies(&logs[0]));
    assert!(calls.iter().all(|c| c.count != 16), "the child's allreduces leaked into the parent's log");
}

/// Issue 24, point 3: looking up NCCL's symbols walked the loaded objects under the
/// loader's lock (`dl_iterate_phdr`) on the application's threads; a child forked meanwhile
/// inherited the lock held and hung in its own first lookup. NCCL here is linked into
/// another library, as builds with a static NCCL have it (libtorch_cuda.so): no object is
/// named libnccl, so every lookup walked, in the parent and in the child.
#[test]
fn children_forked_while_32_threads_make_their_first_nccl_calls_never_hang() {
    let dir = TempDir::new("fork-threads");
    let fakenccl = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fakenccl");
    let torch = dir.join("libtorch_cuda.so");
    let driver = fakenccl.join("profiler_driver.c");
    let shared = ["-shared", "-fPIC", "-pthread", "-std=gnu11", "-fvisibility=hidden", "-Wl,-soname,libtorch_cuda.so"];
    compile_c(&fakenccl.join("fakenccl.c"), &torch, &[&[driver.to_str().unwrap()][..], &shared, &["-ldl"]].concat());
    let exe = dir.join("fork_threads");
    let (search, rpath) = (format!("-L{}", dir.0.display()), format!("-Wl,-rpath,{}", dir.0.display()));
    compile_c(&c_source("fork_threads.c"), &exe, &["-Wextra", &search, &rpath, "-ltorch_cuda", "-ldl", "-pthread"]);
    let root = log_root("fork-threads");
    let mut hung = Vec::new();
    for run in 0..30 {
        let mut cmd = preloaded(&exe, &root, &format!("run{run}"));
        cmd.args(["32", "4"]).env("RANK", "0").env("WORLD_SIZE", "1").env("SF_LOG_RECORDS", "4096");
        let (out, _) = output_within(&mut cmd, Duration::from_secs(120));
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !(out.status.success() && stdout.contains("fork_threads: ok")) {
            hung.push(format!("run {run}: {}: {stdout}{}", out.status, String::from_utf8_lossy(&out.stderr)));
        }
    }
    assert!(hung.is_empty(), "{} of 30 runs:\n{}", hung.len(), hung.join("\n"));
}

#[test]
fn a_raw_clone_child_writes_nothing_into_its_parents_log() {
    let exe = compile_against_fakenccl("fork_clone.c", "fork-clone-raw");
    let root = log_root("raw-clone");
    let mut cmd = preloaded(&exe, &root, "job");
    cmd.arg("raw-clone").env("RANK", "0").env("WORLD_SIZE", "1");
    let (out, _) = output_within(&mut cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 1, "{logs:?}");
    let log = RankLog::open(&logs[0]).unwrap();
    let live = log.comms();
    assert!(live.is_empty(), "the parent destroyed its communicator; the clone child's is in its live table: {live:?}");
    let bodies = bodies(&logs[0]);
    assert_eq!(comms_created(&bodies).len(), 1, "only the parent's communicator");
    let calls = nccl_calls(&bodies);
    assert!(calls.iter().all(|c| c.count != 16), "the clone child's allreduces leaked in");
    assert_eq!(calls.iter().filter(|c| c.count == 4).count(), 6, "the parent's calls before and after the clone");
    assert_eq!(log.live().writer_state, Some(WriterState::Exited));
}

#[test]
fn a_panic_in_the_collector_is_recorded_and_the_job_runs_on() {
    let root = log_root("collector-panic");
    let args: Vec<String> = ["--ranks", "2", "--steps", "20", "--stage-ms", "data=5,fwd=0,bwd=0,callbacks=0,optim=0"]
        .map(String::from)
        .to_vec();
    let out = run_ok(
        preloaded(&trainer_sim(), &root, "job")
            .args(&args)
            .env("SF_TEST_FAULT", "collector-panic")
            .env("RUST_BACKTRACE", "1"),
    );
    assert_eq!(checksum(&out), plain_checksum(&args), "the job's results are unchanged");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = "stagefrontier: recording stopped: the collector thread panicked (SF_TEST_FAULT=collector-panic); recorded in the log header; the job continues unaffected";
    assert_eq!(stderr.lines().filter(|l| *l == expected).count(), 2, "one line per rank: {stderr}");
    assert!(!stderr.contains("panicked at") && !stderr.contains("backtrace"), "only the library's line: {stderr}");
    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 2);
    for path in logs {
        let log = RankLog::open(&path).unwrap();
        assert_eq!(log.live().writer_state, Some(WriterState::CollectorPanicked), "{}", path.display());
    }
}
