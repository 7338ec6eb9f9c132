//! The host process against its own surroundings (issue 24): a rank whose log is
//! truncated under it survives, a host's own SIGBUS goes where it went without the
//! library, and what the ring costs in memory is what docs/configuration.md says.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;
use stagefrontier::core::live::event::Event;
use stagefrontier::core::record::ring::Ring;

fn host_sigbus() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile_against_fakenccl("host_sigbus.c", "sf-host-sigbus"))
}

fn stdout_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until `job` in `root` has `ranks` logs.
fn wait_for_logs(root: &Path, ranks: usize) -> Vec<PathBuf> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let logs = rank_logs(root, "job");
        if logs.len() >= ranks {
            return logs;
        }
        assert!(Instant::now() < deadline, "the logs never appeared");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_log_truncated_under_a_running_job_stops_recording_and_the_job_finishes() {
    let root = log_root("truncated-live");
    let args: Vec<String> = ["--ranks", "2", "--steps", "150", "--stage-ms", "data=2,fwd=1,bwd=0,callbacks=0,optim=0"]
        .map(String::from)
        .to_vec();
    let job = preloaded(&trainer_sim(), &root, "job")
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sf-trainer-sim");
    let logs = wait_for_logs(&root, 2);
    std::thread::sleep(Duration::from_millis(100));
    for log in &logs {
        // Another process (this test) shrinks each live log to nothing.
        std::fs::OpenOptions::new().write(true).open(log).unwrap().set_len(0).unwrap();
    }
    let out = job.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the job died: {:?} (signal {:?})\nstderr:\n{}",
        out.status,
        out.status.signal(),
        String::from_utf8_lossy(&out.stderr)
    );
    let plain = run_ok(Command::new(trainer_sim()).args(&args).env_remove("LD_PRELOAD"));
    assert_eq!(checksum(&out), checksum(&plain), "the job's results are unchanged");
    let lines = library_lines(&out);
    assert_eq!(lines.len(), 2, "one line per rank: {lines:?}");
    for log in &logs {
        let said = lines.iter().filter(|l| l.contains(&log.display().to_string())).count();
        assert_eq!(said, 1, "one line names {}: {lines:?}", log.display());
    }
    for line in &lines {
        for needle in ["was truncated by another process", "recording stopped", "the job continues"] {
            assert!(line.contains(needle), "{needle:?} missing from {line}");
        }
    }
}

/// What ended a run: its exit code, or the signal that killed it.
#[derive(Debug, PartialEq)]
enum End {
    Code(i32),
    Signal(i32),
}

fn end(out: &Output) -> End {
    match (out.status.code(), out.status.signal()) {
        (Some(code), _) => End::Code(code),
        (None, Some(signal)) => End::Signal(signal),
        _ => unreachable!("a process ends with a code or a signal"),
    }
}

#[test]
fn a_hosts_own_sigbus_goes_where_it_would_without_the_library() {
    let dir = TempDir::new("own-sigbus");
    let cases: &[(&str, &str, End, &str)] = &[
        ("default", "mmap", End::Signal(libc::SIGBUS), ""),
        ("default", "raise", End::Signal(libc::SIGBUS), ""),
        ("ignore", "mmap", End::Signal(libc::SIGBUS), ""),
        ("ignore", "raise", End::Code(0), "survived raise"),
        ("siginfo", "mmap", End::Code(42), "own siginfo handler: si_addr is the store's"),
        ("siginfo", "raise", End::Code(42), "own siginfo handler: raised"),
        ("plain", "mmap", End::Code(43), "own plain handler: SIGBUS"),
        ("plain", "raise", End::Code(43), "own plain handler: SIGBUS"),
    ];
    for (disposition, kind, expected, said) in cases {
        let run = |library: bool| {
            let mut cmd = if library {
                preloaded(host_sigbus(), &dir.join("logs"), "job")
            } else {
                let mut cmd = Command::new(host_sigbus());
                cmd.env_remove("LD_PRELOAD");
                cmd
            };
            cmd.env("SF_FORCE", "1").args(["fault", disposition, kind]).arg(&dir.0).output().expect("spawn")
        };
        let (without, with) = (run(false), run(true));
        let what = format!("{disposition} {kind}");
        assert_eq!(end(&without), *expected, "{what} without the library");
        assert_eq!(
            end(&with),
            *expected,
            "{what} with the library\nstderr:\n{}",
            String::from_utf8_lossy(&with.stderr)
        );
        assert!(stdout_of(&without).contains("library handler installed: no"), "{what}: {}", stdout_of(&without));
        assert!(stdout_of(&with).contains("library handler installed: yes"), "{what}: the guard is in place");
        assert!(stdout_of(&with).contains(said), "{what}: {said:?} missing from {}", stdout_of(&with));
        assert_eq!(
            stdout_of(&with).lines().skip(1).collect::<Vec<_>>(),
            stdout_of(&without).lines().skip(1).collect::<Vec<_>>(),
            "{what}: the program says the same"
        );
        assert!(library_lines(&with).is_empty(), "{what}: the library says nothing: {:?}", library_lines(&with));
    }
}

/// An application that installs its own SIGBUS handler after the library replaces the
/// library's; a handler that passes what it does not handle on to the action it replaced
/// (with the siginfo) keeps the guard working.
#[test]
fn a_handler_installed_later_that_passes_sigbus_on_keeps_the_guard() {
    let dir = TempDir::new("later-handler");
    let root = dir.join("logs");
    let out = preloaded(host_sigbus(), &root, "job")
        .env("SF_FORCE", "1")
        .arg("later")
        .arg(root.join("job"))
        .output()
        .expect("spawn");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?} (signal {:?})\nstderr:\n{stderr}", out.status, out.status.signal());
    assert!(stdout_of(&out).contains("app handler: passing SIGBUS on"), "{}", stdout_of(&out));
    assert!(stdout_of(&out).contains("survived"));
    let lines = library_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("was truncated by another process"), "{lines:?}");
}

/// Prints what a process's resident memory grows by when its ring grows from 16 events to
/// 1048576 (read by the process itself right after the library started), and holds it to
/// docs/configuration.md's `SF_RING_EVENTS × 192 bytes` (`Ring::SLOT_BYTES`).
#[test]
fn the_ring_costs_what_the_readme_says() {
    let dir = TempDir::new("ring-memory");
    let resident_kib = |events: usize| {
        let out = preloaded(host_sigbus(), &dir.join("logs"), &format!("job{events}"))
            .env("SF_FORCE", "1")
            .env("SF_LOG_RECORDS", "1024")
            .env("SF_RING_EVENTS", events.to_string())
            .arg("start")
            .output()
            .expect("spawn");
        assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
        let stdout = stdout_of(&out);
        let kib = stdout.split_whitespace().nth(1).and_then(|n| n.parse::<u64>().ok());
        kib.unwrap_or_else(|| panic!("no VmRSS in {stdout:?}"))
    };
    let events = 1 << 20;
    let (small, large) = (resident_kib(16), resident_kib(events));
    let expected_kib = (events * Ring::<Event>::SLOT_BYTES / 1024) as u64;
    let grown = large.saturating_sub(small);
    eprintln!(
        "ring memory: resident {small} KiB at SF_RING_EVENTS=16, {large} KiB at {events}: +{grown} KiB, \
         {:.1} bytes an event; docs/configuration.md says {} ({} KiB)",
        grown as f64 * 1024.0 / events as f64,
        Ring::<Event>::SLOT_BYTES,
        expected_kib
    );
    assert!(
        grown >= expected_kib * 95 / 100 && grown <= expected_kib * 105 / 100,
        "the ring grew the process by {grown} KiB ({small} KiB to {large} KiB), docs/configuration.md says {expected_kib} KiB"
    );
}

/// Runs sf-trainer-sim's 2 ranks to completion as `job` in `root`, each log of `records`.
fn finished_job(root: &Path, job: &str, records: &str) -> Output {
    run_ok(
        preloaded(&trainer_sim(), root, job)
            .args(trainer_args(2, 2))
            .env("SF_LOG_RECORDS", records)
            .env_remove("SF_QUIET"),
    )
}

fn job_logs(root: &Path, job: &str) -> usize {
    walk(&root.join(job)).iter().filter(|p| p.extension().is_some_and(|e| e == "sflog")).count()
}

#[test]
fn finished_jobs_leave_room_for_a_later_shared_memory_user() {
    let fs = match Tmpfs::mount("retention", "256m") {
        Ok(fs) => fs,
        Err(why) => return skip("finished_jobs_leave_room_for_a_later_shared_memory_user", &why),
    };
    let root = fs.join("root");
    // Six jobs of two 19.5 MiB logs: 234 MiB of the 256 if nothing is removed.
    let mut said = Vec::new();
    for n in 0..6 {
        let out = finished_job(&root, &format!("job{n}"), "53248");
        said.extend(library_lines(&out).into_iter().filter(|l| l.contains("removed the logs")));
    }
    let shm = fs.join("shm-user");
    let out = Command::new(host_sigbus()).arg("shm").arg(&shm).arg("100").output().expect("spawn");
    assert!(
        out.status.success(),
        "the 100 MiB shared-memory user died: {:?} (signal {:?})",
        out.status,
        out.status.signal()
    );
    assert!(stdout_of(&out).contains("shm user: 100 MiB touched"));
    let kept: Vec<usize> = (0..6).map(|n| job_logs(&root, &format!("job{n}"))).collect();
    assert_eq!(kept, [0, 0, 0, 2, 2, 2], "the oldest jobs' logs went first, within half of 256 MiB");
    assert!(!root.join("job0").exists(), "an emptied job directory goes too");
    assert!(!said.is_empty() && said.iter().all(|l| l.contains("sf snapshot")), "says so: {said:?}");
}

#[test]
fn retention_never_touches_a_live_job_or_what_is_not_its_own() {
    let fs = match Tmpfs::mount("retention-live", "64m") {
        Ok(fs) => fs,
        Err(why) => return skip("retention_never_touches_a_live_job_or_what_is_not_its_own", &why),
    };
    let root = fs.join("root");
    let running = |job: &str| {
        let started = Killed(
            preloaded(&trainer_sim(), &root, job)
                .args(["--ranks", "2", "--steps", "100000", "--stage-ms", "data=5,fwd=0,bwd=0,callbacks=0,optim=0"])
                .env("SF_LOG_RECORDS", "16384")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start a job"),
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while job_logs(&root, job) < 2 {
            assert!(Instant::now() < deadline, "{job}'s logs never appeared");
            std::thread::sleep(Duration::from_millis(10));
        }
        started
    };
    // The oldest job still runs: two 6 MiB logs. The next was killed (its logs still say
    // running, but their writers are gone): finished.
    let live = running("live");
    drop(running("crashed"));
    finished_job(&root, "old", "16384");
    // Not ours to remove: a file of another tool, and a file at a log's name without the
    // log's magic, in the oldest finished job.
    std::fs::write(root.join("old/notes.txt"), b"keep me").unwrap();
    std::fs::write(root.join("old/rank-00009.sflog"), b"not a log").unwrap();
    for n in 0..4 {
        finished_job(&root, &format!("later{n}"), "16384");
    }
    assert_eq!(job_logs(&root, "live"), 2, "the live job keeps its logs");
    assert!(live.0.id() > 0 && Path::new(&format!("/proc/{}", live.0.id())).exists(), "and runs on");
    let mut old: Vec<String> =
        walk(&root.join("old")).iter().map(|p| p.file_name().unwrap().to_string_lossy().into()).collect();
    old.sort();
    assert_eq!(old, ["notes.txt", "rank-00009.sflog"], "only the finished job's own logs went");
    assert!(!root.join("crashed").exists(), "a killed job's logs are a finished job's");
    assert_eq!(job_logs(&root, "later3"), 2, "the newest finished job is kept");
}
