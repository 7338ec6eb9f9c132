//! The CUDA injection door end to end. A C program acting as the CUDA driver
//! (tests/c/cuda_host.c) loads the library through CUDA_INJECTION64_PATH, calls its
//! InitializeInjection, and runs "kernels" through fakecupti, a CPU CUPTI with CUPTI's
//! ABI (tests/fixtures/fakecupti); kernel activity reaches the rank log as kernel-summary
//! records and `cupti_status` counts. Another CUPTI subscriber, an exhausted buffer pool,
//! a forked child and a machine without CUPTI are each handled as docs/kernels.md says.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::*;
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::{CuptiState, CuptiStatus, RecordBody};

const NCCL_KERNEL: &str = "ncclDevKernel_AllReduce_Sum_f32_RING_LL";
/// Every fake kernel runs this long (cuda_host.c).
const KERNEL_NS: u32 = 20_000;

/// The host, compiled once per test binary against fakenccl.
fn host() -> &'static Path {
    static HOST: OnceLock<PathBuf> = OnceLock::new();
    HOST.get_or_init(|| compile_against_fakenccl("cuda_host.c", "sf-cuda-host"))
}

/// The host as rank 0 of 1 with the library as its CUDA injection (no LD_PRELOAD unless
/// the test adds it) and fakecupti as its CUPTI; nothing else from the caller's setting.
fn host_command(root: &Path, job: &str, args: &[&str]) -> Command {
    let mut cmd = preloaded(host(), root, job);
    cmd.env_remove("LD_PRELOAD");
    without_callers_cuda(&mut cmd);
    cmd.args(args).env("RANK", "0").env("WORLD_SIZE", "1");
    cuda_injected(&mut cmd);
    cmd
}

/// The library's stderr lines.
fn notices(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr).lines().filter(|l| l.starts_with("stagefrontier:")).map(String::from).collect()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The rank's records, from its one log.
fn rank_bodies(root: &Path, job: &str) -> Vec<RecordBody> {
    let logs = rank_logs(root, job);
    assert_eq!(logs.len(), 1, "{logs:?}");
    bodies(&logs[0])
}

fn statuses(bodies: &[RecordBody]) -> Vec<CuptiStatus> {
    bodies
        .iter()
        .filter_map(|b| match b {
            RecordBody::CuptiStatus(s) => Some(*s),
            _ => None,
        })
        .collect()
}

fn allreduces(bodies: &[RecordBody]) -> usize {
    nccl_calls(bodies).iter().filter(|c| c.op.name() == "allreduce").count()
}

fn wall_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
}

#[test]
fn kernel_activity_reaches_the_log_in_both_record_layouts_with_or_without_preload() {
    for (preload, layout) in [(false, "13"), (true, "12")] {
        let root = log_root(&format!("cuda-kernels-{layout}"));
        let mut cmd = host_command(&root, "job", &["--kernels", "300", "--name", NCCL_KERNEL, "--copy-bytes", "4096"]);
        cmd.args(["--nccl", "3"]).env("FAKECUPTI_RECORDS", layout);
        if preload {
            cmd.env("LD_PRELOAD", library());
        }
        let started = wall_ns();
        let out = run_ok(&mut cmd);
        let ended = wall_ns();
        let text = stdout(&out);
        assert_eq!(text.matches("InitializeInjection -> 1\n").count(), 2, "{text}");
        assert!(text.contains("fakecupti loaded, 600 records written"), "{text}");
        assert_eq!(notices(&out), Vec::<String>::new());

        let bodies = rank_bodies(&root, "job");
        let statuses = statuses(&bodies);
        assert_eq!(statuses[0].state, CuptiState::Enabled, "{statuses:?}");
        let last = statuses.last().unwrap();
        assert_eq!((last.records, last.skipped, last.dropped_by_cupti, last.pool_refusals), (600, 0, 0, 0), "{last:?}");
        assert_eq!((last.cupti_version, last.pool_buffers, last.buffer_bytes), (130_100, 16, 1 << 20));
        assert!(last.buffers >= 1 && !last.correlation, "{last:?}");

        let named = bodies.iter().any(|b| matches!(b, RecordBody::KernelName(n) if n.name() == NCCL_KERNEL));
        assert!(named, "the kernel's name is in the log");
        // Each NCCL kernel's start, from CUPTI's clock through CLOCK_MONOTONIC to the
        // window's wall-clock start, lies within the run.
        let mut kernels = 0;
        for body in &bodies {
            let RecordBody::NcclKernels(k) = body else { continue };
            for &(offset, duration) in k.pairs() {
                let start = k.window * k.window_ms as u64 * 1_000_000 + offset as u64;
                assert!((started..ended).contains(&start), "start {start} outside [{started}, {ended})");
                assert_eq!(duration, KERNEL_NS);
                kernels += 1;
            }
        }
        assert_eq!(kernels, 300);
        assert_eq!(allreduces(&bodies), if preload { 3 } else { 0 }, "NCCL is recorded only under LD_PRELOAD");
    }
}

#[test]
fn correlation_adds_the_runtime_calls() {
    let root = log_root("cuda-correlation");
    let mut cmd = host_command(&root, "job", &["--kernels", "40"]);
    let out = run_ok(cmd.env("SF_CUPTI_CORRELATION", "1"));
    assert!(stdout(&out).contains("fakecupti loaded, 80 records written"), "{}", stdout(&out));
    let statuses = statuses(&rank_bodies(&root, "job"));
    let last = statuses.last().unwrap();
    assert_eq!((last.records, last.correlation), (80, true), "{last:?}");
}

#[test]
fn another_subscriber_gives_no_kernel_mode_one_line_and_nccl_recording_continues() {
    let root = log_root("cuda-subscriber");
    let trace = TempDir::new("cuda-subscriber");
    let mut cmd = host_command(&root, "job", &["--kernels", "50", "--nccl", "5"]);
    cmd.env("LD_PRELOAD", library()).env("FAKECUPTI_OTHER_SUBSCRIBER", "1");
    let out = run_ok(cmd.env("FAKECUPTI_TRACE", trace.join("calls")));
    assert!(stdout(&out).contains("fakecupti loaded, 0 records written"), "{}", stdout(&out));
    let lines = notices(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("no-kernel mode"), "{lines:?}");

    let bodies = rank_bodies(&root, "job");
    let statuses = statuses(&bodies);
    assert_eq!(statuses.len(), 1, "{statuses:?}");
    let only = statuses[0];
    assert_eq!((only.state, only.cupti_result, only.cupti_version), (CuptiState::NoKernelMode, 39, 130_100));
    assert_eq!((only.pool_buffers, only.buffer_bytes), (0, 0), "no buffers allocated for nothing");
    assert_eq!(allreduces(&bodies), 5);
    let calls = std::fs::read_to_string(trace.join("calls")).unwrap();
    assert_eq!(calls.matches(" cuptiSubscribe\n").count(), 1, "{calls}");
    assert!(!calls.contains("cuptiActivityEnable") && !calls.contains("RegisterCallbacks"), "{calls}");
}

#[test]
fn an_exhausted_pool_is_counted_and_every_kernel_is_parsed_or_counted_dropped() {
    let root = log_root("cuda-pool");
    let mut cmd = host_command(&root, "job", &["--kernels", "3000", "--settle-ms", "300"]);
    cmd.env("SF_CUPTI_BUFFERS", "2").env("SF_CUPTI_BUFFER_KB", "4").env("SF_HEARTBEAT_MS", "100");
    let out = run_ok(&mut cmd);
    let text = stdout(&out);
    let written: u64 = text.split("loaded, ").nth(1).and_then(|t| t.split(' ').next()).unwrap().parse().unwrap();
    assert_eq!(notices(&out), Vec::<String>::new(), "drops are counted, not announced");

    let statuses = statuses(&rank_bodies(&root, "job"));
    let last = statuses.last().unwrap();
    assert!(last.pool_refusals > 0 && last.dropped_by_cupti > 0, "{last:?}");
    assert_eq!(last.records, written, "every record CUPTI wrote was parsed: {last:?}");
    assert_eq!(last.records + last.dropped_by_cupti, 3000, "{last:?}");
    assert_eq!((statuses[0].pool_refusals, statuses[0].dropped_by_cupti), (0, 0), "at enable: {statuses:?}");
    for pair in statuses.windows(2) {
        assert!(pair[0].pool_refusals <= pair[1].pool_refusals && pair[0].dropped_by_cupti <= pair[1].dropped_by_cupti);
    }
}

#[test]
fn a_forked_child_never_touches_cupti() {
    let root = log_root("cuda-fork");
    let trace = TempDir::new("cuda-fork");
    let mut cmd = host_command(&root, "job", &["--kernels", "10", "--fork-ms", "300"]);
    cmd.env("SF_CUPTI_FLUSH_MS", "20").env("FAKECUPTI_TRACE", trace.join("calls"));
    let out = run_ok(&mut cmd);
    let text = stdout(&out);
    let child = text.lines().find_map(|l| l.strip_prefix("child ")).expect("the child ran").to_string();
    let calls = std::fs::read_to_string(trace.join("calls")).unwrap();
    let pids: Vec<&str> = calls.lines().filter_map(|l| l.split(' ').next()).collect();
    assert!(!pids.contains(&child.as_str()), "child {child} called CUPTI:\n{calls}");
    let flushes: Vec<&str> = calls.lines().filter(|l| l.contains(" cuptiActivityFlushAll")).collect();
    assert!(flushes.len() >= 3, "the parent flushed periodically: {flushes:?}");
    assert!(flushes.last().unwrap().ends_with(" forced"), "and last, forced, at exit: {flushes:?}");
    assert_eq!(calls.matches(" forced\n").count(), 1, "{calls}");
    assert_eq!(statuses(&rank_bodies(&root, "job")).last().unwrap().records, 10);
}

/// Whether this machine has a CUPTI of its own the door would find.
fn machine_has_cupti() -> bool {
    let candidates = stagefrontier::core::kernels::cupti::loader::candidates(None, &[], |dir| {
        std::fs::read_dir(dir)
            .map(|e| e.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default()
    });
    candidates.iter().any(|path| {
        let name = std::ffi::CString::new(path.to_string_lossy().as_bytes()).unwrap();
        // SAFETY: a probe load, local and lazy, of a library that is only looked at.
        !unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) }.is_null()
    })
}

#[test]
fn without_cupti_or_when_switched_off_the_door_is_inert_and_silent() {
    let root = log_root("cuda-inert");
    let trace = TempDir::new("cuda-inert");
    // No CUPTI anywhere (on a machine without CUDA): returns 1, says nothing.
    let mut cmd = host_command(&root, "none", &["--kernels", "5"]);
    let out = run_ok(cmd.env_remove("SF_CUPTI_PATH"));
    assert_eq!(stdout(&out).matches("InitializeInjection -> 1\n").count(), 2);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    if !machine_has_cupti() {
        assert!(stdout(&out).contains("fakecupti not loaded"));
        let statuses = statuses(&rank_bodies(&root, "none"));
        assert_eq!(statuses.iter().map(|s| s.state).collect::<Vec<_>>(), [CuptiState::Unavailable]);
    }
    // No rank identity (a launcher), SF_DISABLE=1, SF_CUPTI=0: CUPTI is never called.
    for (job, setting) in [("launcher", ("RANK", "")), ("disabled", ("SF_DISABLE", "1")), ("off", ("SF_CUPTI", "0"))] {
        let mut cmd = host_command(&root, job, &["--kernels", "5"]);
        cmd.env(setting.0, setting.1).env("FAKECUPTI_TRACE", trace.join(job));
        if setting.0 == "RANK" {
            cmd.env_remove("RANK").env_remove("WORLD_SIZE");
        }
        let out = run_ok(&mut cmd);
        assert_eq!(stdout(&out).matches("InitializeInjection -> 1\n").count(), 2, "{job}");
        assert!(stdout(&out).contains("fakecupti not loaded"), "{job}: {}", stdout(&out));
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{job}");
        assert!(!trace.join(job).exists(), "{job}: CUPTI was called");
        let logs = rank_logs(&root, job);
        if job == "off" {
            assert!(statuses(&bodies(&logs[0])).is_empty(), "SF_CUPTI=0: the door stays shut");
        } else {
            assert!(logs.is_empty(), "{job}: {logs:?}");
        }
    }
}

#[test]
fn an_explicit_path_that_does_not_load_is_said_once() {
    let root = log_root("cuda-bad-path");
    let mut cmd = host_command(&root, "job", &["--kernels", "5"]);
    let out = run_ok(cmd.env("SF_CUPTI_PATH", "/nonexistent/libcupti.so.13"));
    let lines = notices(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("SF_CUPTI_PATH=/nonexistent/libcupti.so.13"), "{lines:?}");
    assert_eq!(statuses(&rank_bodies(&root, "job"))[0].state, CuptiState::Unavailable);
}

/// As on a GPU node with a CUDA toolkit beside PyTorch's wheels: the process already runs
/// the wheel's libcupti.so.13, and another CUPTI, `libcupti.so`, is on the loader's search
/// path. The door uses the one the process runs and resolves its calls from that object
/// alone; a loader that searched by name (cudarc's, "libcupti.so" first) found the other
/// and left the door shut.
#[test]
fn the_cupti_the_process_runs_is_used_even_with_another_on_the_search_path() {
    let root = log_root("cuda-two-cuptis");
    let other = TempDir::new("cuda-two-cuptis");
    std::fs::copy(fakecupti(), other.join("libcupti.so")).unwrap();
    let mut cmd = host_command(&root, "job", &["--kernels", "50"]);
    cmd.env_remove("SF_CUPTI_PATH").env("LD_PRELOAD", fakecupti()).env("LD_LIBRARY_PATH", &other.0);
    let out = run_ok(&mut cmd);
    assert!(stdout(&out).contains("fakecupti loaded, 50 records written"), "{}", stdout(&out));
    assert_eq!(notices(&out), Vec::<String>::new());
    let statuses = statuses(&rank_bodies(&root, "job"));
    assert_eq!(statuses[0].state, CuptiState::Enabled, "{statuses:?}");
    assert_eq!(statuses.last().unwrap().records, 50, "{statuses:?}");
}

/// The driver loads the CUDA door before the process knows its rank (an mp.spawn child sets
/// its device before init_process_group): the door waits, and opens CUPTI once the first
/// communicator declares the rank, so the kernels after it are recorded. Before, such a
/// process recorded no GPU activity at all.
#[test]
fn a_cuda_door_loaded_before_the_rank_is_known_opens_once_it_is_declared() {
    let root = log_root("cuda-late-rank");
    let mut cmd = host_command(&root, "job", &["--kernels", "40", "--nccl", "3"]);
    cmd.env_remove("RANK").env_remove("WORLD_SIZE").env("LD_PRELOAD", library());
    let out = run_ok(&mut cmd);
    let text = stdout(&out);
    assert!(text.contains("fakecupti loaded, 40 records written"), "{text}");
    assert_eq!(notices(&out), Vec::<String>::new());
    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 1);
    assert_eq!(RankLog::open(&logs[0]).unwrap().header.identity_source, "nccl");
    let statuses = statuses(&bodies(&logs[0]));
    assert_eq!(statuses[0].state, CuptiState::Enabled, "{statuses:?}");
    assert_eq!(statuses.last().unwrap().records, 40, "{statuses:?}");
}
