//! Other users must not be able to touch a job (issue 11, points 5-9): a log root another
//! user created first (a 0777 directory, a symbolic link to theirs), a root anyone may
//! write, things at a rank log's name that are not our log (a FIFO, a directory, another
//! format, another user's file), a relative SF_LOG_DIR, SF_INJECT delays beyond reason,
//! and environment values made to be echoed. The second user is `nobody` (65534) through
//! `setpriv`, which needs root; where that is missing the test says SKIP on stderr.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use stagefrontier::core::log::reader::RankLog;

fn plain_checksum(args: &[String]) -> String {
    checksum(&run_ok(Command::new(trainer_sim()).args(args).env_remove("LD_PRELOAD")))
}

/// Runs the job to completion within a minute (a rank stuck in `open` fails the test).
fn job_within_a_minute(cmd: &mut Command) -> Output {
    let start = Instant::now();
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the job hung: {cmd:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    out
}

fn empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().next().is_none()
}

#[test]
fn a_root_another_user_created_first_is_refused() {
    if let Err(why) = second_user() {
        return skip("a_root_another_user_created_first_is_refused", &why);
    }
    let shared = shared_dir("precreated");
    let args = trainer_args(2, 5);
    let plain = plain_checksum(&args);
    as_nobody(&format!(
        "mkdir -m 0777 {0}/root {0}/theirs && chmod 0777 {0}/root {0}/theirs && ln -s {0}/theirs {0}/link",
        shared.0.display()
    ));
    for (root, expected) in [("root", "belongs to uid 65534"), ("link", "is a symbolic link, not a directory")] {
        let out = job_within_a_minute(preloaded(&trainer_sim(), &shared.join(root), "job").args(&args));
        assert_eq!(checksum(&out), plain);
        let lines = library_lines(&out);
        assert_eq!(lines.len(), 2, "one line per rank: {lines:?}");
        assert!(
            lines.iter().all(|l| l.contains(expected) && l.contains("refusing") && l.contains("not recording")),
            "{lines:?}"
        );
    }
    assert!(
        empty(&shared.join("root")) && empty(&shared.join("theirs")),
        "nothing written where the other user can read it"
    );
}

#[test]
fn a_root_others_may_write_is_refused_and_a_new_tree_is_private() {
    let base = TempDir::new("open-root");
    let open = base.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let args = trainer_args(2, 3);
    let out = job_within_a_minute(preloaded(&trainer_sim(), &open, "job").args(&args));
    let lines = library_lines(&out);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines.iter().all(|l| l.contains("writable by its group or by others (mode 777)")), "{lines:?}");
    assert!(empty(&open));

    // A tree the library creates: directories 0700, files 0600 by default...
    let private = base.join("private");
    job_within_a_minute(preloaded(&trainer_sim(), &private, "job").args(&args));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!((mode(&private), mode(&private.join("job"))), (0o700, 0o700));
    let logs = rank_logs(&private, "job");
    assert_eq!(logs.len(), 2);
    assert!(logs.iter().all(|l| mode(l) == 0o600), "{:?}", logs.iter().map(|l| mode(l)).collect::<Vec<_>>());
    // ... and 0750/0640 with SF_LOG_MODE=group, whatever the umask.
    let group = base.join("group");
    job_within_a_minute(
        preloaded(Path::new("sh"), &group, "job")
            .env("SF_LOG_MODE", "group")
            .args(["-c", "umask 077 && exec \"$@\"", "sh"])
            .arg(trainer_sim())
            .args(&args),
    );
    assert_eq!((mode(&group), mode(&group.join("job"))), (0o750, 0o750));
    assert!(rank_logs(&group, "job").iter().all(|l| mode(l) == 0o640));

    // Sharing with an operator group: a setgid root in that group hands it down the tree.
    if !is_root() {
        return skip("a_root_others_may_write... (operator group)", "chgrp to another group needs root");
    }
    let shared = base.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::os::unix::fs::chown(&shared, None, Some(NOBODY)).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o2750)).unwrap();
    job_within_a_minute(preloaded(&trainer_sim(), &shared, "job").env("SF_LOG_MODE", "group").args(&args));
    let gid = |p: &Path| std::fs::metadata(p).unwrap().gid();
    assert_eq!((mode(&shared.join("job")), gid(&shared.join("job"))), (0o2750, NOBODY));
    let logs = rank_logs(&shared, "job");
    assert_eq!(logs.len(), 2);
    assert!(logs.iter().all(|l| mode(l) == 0o640 && gid(l) == NOBODY), "the operators' group may read every log");
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[test]
fn what_is_at_a_rank_logs_name_and_is_not_our_log_is_left_alone() {
    let root = log_root("not-ours");
    let job = root.join("job");
    std::fs::create_dir_all(&job).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&job, std::fs::Permissions::from_mode(0o700)).unwrap();
    mkfifo(&job.join("rank-00000.sflog"));
    std::fs::create_dir(job.join("rank-00001.sflog")).unwrap();
    std::fs::write(job.join("rank-00002.sflog"), b"another tool's file").unwrap();
    let foreign_owner = is_root();
    if foreign_owner {
        // A file that reads as a log but belongs to another user.
        let mut head = b"SFRKLOG\0".to_vec();
        head.resize(4096, 0);
        std::fs::write(job.join("rank-00003.sflog"), &head).unwrap();
        std::os::unix::fs::chown(job.join("rank-00003.sflog"), Some(NOBODY), Some(NOBODY)).unwrap();
    } else {
        skip("what_is_at_a_rank_logs_name... (another user's file)", "chown needs root; checking the other three");
    }
    let args = trainer_args(4, 5);
    // Before: rank 0 hung for ever in open() on the FIFO.
    let out = job_within_a_minute(preloaded(&trainer_sim(), &root, "job").args(&args));
    assert_eq!(checksum(&out), plain_checksum(&args));

    let lines = library_lines(&out);
    let stepped = if foreign_owner { 4 } else { 3 };
    assert_eq!(lines.iter().filter(|l| l.contains("left alone; logging to")).count(), stepped, "{lines:?}");
    for (rank, what) in
        [(0, "a FIFO"), (1, "a directory"), (2, "a file that is not a stagefrontier log"), (3, "a file of uid 65534")]
    {
        if rank == 3 && !foreign_owner {
            continue;
        }
        let name = format!("rank-{rank:05}.sflog");
        assert!(lines.iter().any(|l| l.contains(&format!("{name} is {what}"))), "{what}: {lines:?}");
        let moved: Vec<PathBuf> = std::fs::read_dir(&job)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("rank-{rank:05}.p")))
            .collect();
        assert_eq!(moved.len(), 1, "{moved:?}");
        let log = RankLog::open(&moved[0]).unwrap();
        assert_eq!(log.header.global_rank, rank);
    }
    assert!(std::fs::metadata(job.join("rank-00000.sflog")).unwrap().file_type().is_fifo(), "the FIFO is untouched");
    assert!(job.join("rank-00001.sflog").is_dir());
    assert_eq!(std::fs::read(job.join("rank-00002.sflog")).unwrap(), b"another tool's file");
    if foreign_owner {
        assert_eq!(std::fs::metadata(job.join("rank-00003.sflog")).unwrap().uid(), NOBODY);
    }

    // The next attempt steps around again, and keeps this one's logs as an earlier attempt.
    job_within_a_minute(preloaded(&trainer_sim(), &root, "job").args(&args));
    let stepped: Vec<PathBuf> = std::fs::read_dir(&job)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(".p"))
        .collect();
    assert_eq!(stepped.len(), lines.len(), "one log per stepped-around rank at the top: {stepped:?}");
    let archived = std::fs::read_dir(job.join("attempt-1")).unwrap().count();
    assert_eq!(archived, lines.len(), "the first attempt's logs are in attempt-1");
}

#[test]
fn a_relative_log_dir_is_refused_with_one_line() {
    let cwd = TempDir::new("relative");
    let job = format!("relative-{}", std::process::id());
    let out = job_within_a_minute(
        preloaded(&trainer_sim(), Path::new("logs"), &job).current_dir(&cwd.0).args(trainer_args(2, 3)),
    );
    let lines = library_lines(&out);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines.iter().all(|l| l.starts_with("stagefrontier: SF_LOG_DIR=\"logs\" is not an absolute path; using /")),
        "{lines:?}"
    );
    assert!(!cwd.join("logs").exists(), "nothing in the working directory");
    // SAFETY: geteuid has no preconditions.
    let default_job = PathBuf::from(format!("/dev/shm/stagefrontier-{}", unsafe { libc::geteuid() })).join(&job);
    let _ = std::fs::remove_dir_all(default_job);
}

#[test]
fn sf_inject_delays_beyond_an_hour_or_not_finite_are_rejected() {
    let root = log_root("inject-cap");
    for (rule, expected) in [
        ("delay:op=allreduce,ms=inf", "ms=inf is not a duration"),
        ("delay:op=allreduce,ms=NaN", "ms=NaN is not a duration"),
        ("delay:op=allreduce,ms=7200000", "over the cap"),
        ("delay:op=allreduce,ms=1,jitter_ms=1e300", "over the cap"),
    ] {
        let start = Instant::now();
        let out = job_within_a_minute(
            preloaded(&trainer_sim(), &root, "job").args(trainer_args(2, 3)).env("SF_INJECT", rule),
        );
        assert!(start.elapsed() < Duration::from_secs(30));
        let lines = library_lines(&out);
        assert_eq!(lines.len(), 2, "{rule}: {lines:?}");
        assert!(
            lines.iter().all(|l| l.starts_with("stagefrontier: SF_INJECT: rule 1") && l.contains(expected)),
            "{lines:?}"
        );
    }
}

#[test]
fn bad_values_are_echoed_short_and_escaped_and_non_utf8_is_reported() {
    let root = log_root("echo");
    let hostile = format!("\x1b]0;owned\x07\x1b[2J{}", "9".repeat(1000));
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(trainer_args(2, 3)).env("SF_RING_EVENTS", &hostile).env("SF_CLOCK", OsStr::from_bytes(b"mono\xfftonic"));
    let out = job_within_a_minute(&mut cmd);
    let lines = library_lines(&out);
    assert_eq!(lines.len(), 4, "{lines:?}");
    for line in &lines {
        assert!(!line.chars().any(char::is_control), "{line:?}");
        assert!(line.len() < 300, "{} chars: {line}", line.len());
    }
    let ring: Vec<_> = lines.iter().filter(|l| l.contains("SF_RING_EVENTS")).collect();
    assert_eq!(ring.len(), 2);
    assert!(ring.iter().all(|l| l.contains("\\u{1b}]0;owned\\u{7}") && l.contains("... (")), "{ring:?}");
    let clock: Vec<_> = lines.iter().filter(|l| l.contains("SF_CLOCK")).collect();
    assert_eq!(clock.len(), 2);
    assert!(clock.iter().all(|l| l.contains("SF_CLOCK=\"mono\\xfftonic\" is not valid UTF-8")), "{clock:?}");
}
