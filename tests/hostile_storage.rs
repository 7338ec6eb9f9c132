//! The job survives its log storage (issue 11, points 1-4): a tmpfs too small for the
//! logs, one that fills up after the logs were created, a file-size limit below the log
//! size, and no temporary file left behind. Tmpfs mounts need root; where the machine does
//! not allow them the test says SKIP on stderr.

mod common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use stagefrontier::core::log::format;
use stagefrontier::core::log::reader::RankLog;

fn plain_checksum(args: &[String]) -> String {
    checksum(&run_ok(Command::new(trainer_sim()).args(args).env_remove("LD_PRELOAD")))
}

fn no_temporary_files(dir: &Path) {
    let left: Vec<_> = walk(dir).into_iter().filter(|p| p.to_string_lossy().ends_with(".tmp")).collect();
    assert!(left.is_empty(), "temporary files left behind: {left:?}");
}

#[test]
fn a_log_that_cannot_be_reserved_leaves_the_job_untouched_and_says_why_once_per_rank() {
    let fs = match Tmpfs::mount("full", "1m") {
        Ok(fs) => fs,
        Err(why) => return skip("a_log_that_cannot_be_reserved...", &why),
    };
    let args = trainer_args(2, 10);
    let out = run_ok(preloaded(&trainer_sim(), &fs.join("root"), "job").args(&args).env("SF_LOG_RECORDS", "65536"));
    assert_eq!(checksum(&out), plain_checksum(&args), "the job's results are unchanged");
    let lines = library_lines(&out);
    assert_eq!(lines.len(), 2, "one line per rank: {lines:?}");
    for line in &lines {
        for needle in ["cannot reserve 24.", "free of", "SF_LOG_DIR", "SF_LOG_RECORDS", "not recording"] {
            assert!(line.contains(needle), "{needle:?} missing from {line}");
        }
        assert!(line.contains(&fs.join("root/job").display().to_string()), "names the directory: {line}");
    }
    assert!(rank_logs(&fs.join("root"), "job").is_empty());
    no_temporary_files(&fs.0);
}

#[test]
fn a_temporary_file_left_by_a_killed_creation_is_removed() {
    let root = log_root("stale-tmp");
    let job = root.join("job");
    std::fs::create_dir_all(&job).unwrap();
    let stale = job.join(format!("rank-00000.sflog.{}.tmp", dead_pid()));
    std::fs::write(&stale, b"half-made log").unwrap();
    run_ok(preloaded(&trainer_sim(), &root, "job").args(trainer_args(2, 2)));
    assert!(!stale.exists(), "the dead process's temporary file is gone");
    assert_eq!(rank_logs(&root, "job").len(), 2);
    no_temporary_files(&root);
}

#[test]
fn a_tmpfs_that_fills_up_after_creation_never_faults_the_job() {
    let fs = match Tmpfs::mount("fills", "8m") {
        Ok(fs) => fs,
        Err(why) => return skip("a_tmpfs_that_fills_up_after_creation_never_faults_the_job", &why),
    };
    let root = fs.join("root");
    let args: Vec<String> = ["--ranks", "2", "--steps", "150", "--stage-ms", "data=4,fwd=0,bwd=0,callbacks=0,optim=0"]
        .map(String::from)
        .to_vec();
    let job = preloaded(&trainer_sim(), &root, "job")
        .args(&args)
        .env("SF_LOG_RECORDS", "8192")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while rank_logs(&root, "job").len() < 2 {
        assert!(Instant::now() < deadline, "the logs never appeared");
        std::thread::sleep(Duration::from_millis(10));
    }
    let committed_at_fill: Vec<u64> =
        rank_logs(&root, "job").iter().map(|p| RankLog::open(p).unwrap().live().committed).collect();
    // Another writer fills the filesystem to the last block.
    let mut filler = std::fs::File::create(fs.join("filler")).unwrap();
    let chunk = vec![0xa5u8; 64 * 1024];
    while std::io::Write::write_all(&mut filler, &chunk).is_ok() {}
    drop(filler);
    let out = job.wait_with_output().unwrap();
    assert!(out.status.success(), "{}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert_eq!(checksum(&out), plain_checksum(&args), "the job's results are unchanged");
    for (path, before) in rank_logs(&root, "job").iter().zip(committed_at_fill) {
        let log = RankLog::open(path).unwrap();
        let after = log.live().committed;
        // 32 records a page: the collector wrote into pages it had never touched.
        assert!(after > before + 64, "{}: {before} -> {after} records", path.display());
        let len = std::fs::metadata(path).unwrap().len();
        use std::os::unix::fs::MetadataExt;
        assert!(std::fs::metadata(path).unwrap().blocks() * 512 >= len, "the whole file is allocated");
    }
}

#[test]
fn the_default_size_shrinks_to_fit_a_small_filesystem_and_local_rank_0_says_so() {
    let fs = match Tmpfs::mount("small", "16m") {
        Ok(fs) => fs,
        Err(why) => return skip("the_default_size_shrinks_to_fit_a_small_filesystem...", &why),
    };
    let root = fs.join("root");
    let args = trainer_args(4, 5);
    let out = run_ok(preloaded(&trainer_sim(), &root, "job").args(&args));
    assert_eq!(checksum(&out), plain_checksum(&args));
    // 4 ranks x 24 MiB x 2 does not fit 16 MiB; 4 x 1.6 MiB (4096 records and 8192 of
    // history) x 2 does.
    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 4);
    for path in &logs {
        assert_eq!(RankLog::open(path).unwrap().header.slot_count, 4096, "{}", path.display());
    }
    let lines: Vec<_> = library_lines(&out).into_iter().filter(|l| l.contains("records")).collect();
    assert_eq!(lines.len(), 1, "one line per node: {lines:?}");
    assert!(lines[0].contains("each rank keeps 4096 records") && lines[0].contains("instead of 65536"), "{}", lines[0]);
    no_temporary_files(&fs.0);
}

#[test]
fn a_dev_shm_too_small_for_any_log_falls_back_to_a_per_user_directory() {
    if !is_root() {
        return skip("a_dev_shm_too_small...", "needs root for a private mount namespace");
    }
    let probe = Command::new("unshare").args(["-m", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        return skip("a_dev_shm_too_small...", "unshare -m is not available here");
    }
    let runtime_dir = TempDir::new("xdg");
    let args = trainer_args(2, 5);
    // A private mount namespace in which /dev/shm is a 300 KiB tmpfs: fakenccl's own
    // segment fits, two 1024-record logs (x2) do not.
    let mut cmd = preloaded(Path::new("unshare"), Path::new("/unused"), "job");
    cmd.env_remove("SF_LOG_DIR")
        .env("XDG_RUNTIME_DIR", &runtime_dir.0)
        .args([
            "-m",
            "sh",
            "-c",
            "mount --make-rprivate / && mount -t tmpfs -o size=300k tmpfs /dev/shm && exec \"$@\"",
            "sh",
        ])
        .arg(trainer_sim())
        .args(&args);
    let out = run_ok(&mut cmd);
    assert_eq!(checksum(&out), plain_checksum(&args));
    let fallback = runtime_dir.join("stagefrontier");
    let logs = rank_logs(&fallback, "job");
    assert_eq!(logs.len(), 2, "logs in {}: {:?}", fallback.display(), walk(&runtime_dir.0));
    let lines = library_lines(&out);
    assert_eq!(lines.len(), 1, "one line per node: {lines:?}");
    assert!(
        lines[0].contains("/dev/shm/stagefrontier-0")
            && lines[0].contains(&format!("logging to {} instead", fallback.display())),
        "{}",
        lines[0]
    );
}

/// The job under `limit` bytes of RLIMIT_FSIZE, set between fork and exec.
fn with_fsize_limit(cmd: &mut Command, limit: u64) -> &mut Command {
    // SAFETY: setrlimit is async-signal-safe and touches only the child being started.
    unsafe {
        cmd.pre_exec(move || {
            let rl = libc::rlimit { rlim_cur: limit, rlim_max: limit };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &rl) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

#[test]
fn a_file_size_limit_below_the_log_size_never_raises_sigxfsz() {
    let root = log_root("fsize");
    let args = trainer_args(2, 5);
    let plain = plain_checksum(&args);
    // Enough for fakenccl's own shared segment, not for a default (24 MiB: 8 MiB of event
    // ring, 16 MiB of history ring) log.
    let limit = 18 << 20;

    // The default shrinks under the limit, and local rank 0 says so.
    let out = run_ok(with_fsize_limit(preloaded(&trainer_sim(), &root, "fits").args(&args), limit));
    assert_eq!(checksum(&out), plain);
    let logs = rank_logs(&root, "fits");
    assert_eq!(logs.len(), 2);
    for path in logs {
        let slots = RankLog::open(&path).unwrap().header.slot_count;
        assert_eq!(slots, 32_768, "the largest power of two under the limit");
        assert!(format::file_len(slots) as u64 <= limit);
    }
    let lines = library_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("file-size limit (ulimit -f) of 18.0 MiB") && lines[0].contains("32768 records"),
        "{lines:?}"
    );

    // An explicit size over the limit is refused with one line per rank.
    let mut cmd = preloaded(&trainer_sim(), &root, "over");
    cmd.args(&args).env("SF_LOG_RECORDS", "65536");
    let out = run_ok(with_fsize_limit(&mut cmd, limit));
    assert_eq!(checksum(&out), plain);
    let lines = library_lines(&out);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines.iter().all(|l| l.contains("file-size limit (ulimit -f)") && l.contains("SF_LOG_RECORDS")),
        "{lines:?}"
    );
    assert!(rank_logs(&root, "over").is_empty());
    no_temporary_files(&root);
}
