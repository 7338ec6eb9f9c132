//! The library says where it logs (issue 13, point 13), and keeps every attempt of a job up
//! to SF_KEEP_ATTEMPTS, which `sf ls` lists while every command reads the latest (point 14).

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use stagefrontier::core::log::reader::RankLog;

#[test]
fn local_rank_0_says_where_the_logs_go_once_unless_quiet() {
    let root = log_root("start-line");
    let out = run_ok(preloaded(&trainer_sim(), &root, "job").args(trainer_args(4, 3)).env_remove("SF_QUIET"));
    let lines: Vec<_> = library_lines(&out).into_iter().filter(|l| l.contains("recording rank logs in")).collect();
    assert_eq!(
        lines,
        [format!("stagefrontier: recording rank logs in {} (doors: LD_PRELOAD)", root.join("job").display())],
        "one line per node"
    );
    let out = run_ok(preloaded(&trainer_sim(), &root, "job").args(trainer_args(4, 3)).env("SF_QUIET", "1"));
    assert!(library_lines(&out).is_empty(), "{:?}", library_lines(&out));
}

/// (pid of rank 0's log, number of ranks) in `dir`.
fn attempt_of(dir: &Path) -> (u32, usize) {
    let logs: Vec<_> =
        ["rank-00000.sflog", "rank-00001.sflog"].iter().map(|n| dir.join(n)).filter(|p| p.exists()).collect();
    (RankLog::open(&logs[0]).unwrap().header.pid, logs.len())
}

#[test]
fn every_attempt_is_kept_up_to_the_bound_and_the_latest_is_read() {
    let root = log_root("attempts");
    let job = root.join("job");
    let mut pids = Vec::new();
    for _ in 0..6 {
        run_ok(preloaded(&trainer_sim(), &root, "job").args(trainer_args(2, 2)).env("SF_KEEP_ATTEMPTS", "3"));
        pids.push(attempt_of(&job).0);
    }
    // Six runs, three kept: the latest in the job directory, the two before it in attempt-N.
    let mut kept: Vec<String> = std::fs::read_dir(&job)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("attempt-"))
        .collect();
    kept.sort();
    assert_eq!(kept, ["attempt-4", "attempt-5"]);
    assert_eq!(attempt_of(&job.join("attempt-4")), (pids[3], 2));
    assert_eq!(attempt_of(&job.join("attempt-5")), (pids[4], 2));
    assert_eq!(attempt_of(&job), (pids[5], 2));

    let sf = |args: &[&std::ffi::OsStr]| run_ok(Command::new(artifact("sf")).args(args));
    let out = sf(&["ls".as_ref(), job.as_os_str()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("earlier attempts kept: attempt-4 (2 logs), attempt-5 (2 logs)"), "{text}");
    assert!(text.contains(&format!("{:>5}", pids[5])), "the rows are the latest attempt: {text}");
    let out = sf(&["ls".as_ref(), "--json".as_ref(), job.as_os_str()]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["attempts"].as_array().map(Vec::len), Some(2), "{json}");
    assert_eq!(json["attempts"][0]["attempt"], 4);
    assert_eq!(json["ranks"][0]["pid"], pids[5]);
    // An earlier attempt is read by naming its directory.
    let out = sf(&["ls".as_ref(), "--json".as_ref(), job.join("attempt-4").as_os_str()]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["ranks"][0]["pid"], pids[3]);
}

#[test]
fn by_default_five_attempts_are_kept() {
    let root = log_root("attempts-default");
    for _ in 0..7 {
        run_ok(preloaded(&trainer_sim(), &root, "job").args(trainer_args(1, 1)));
    }
    let mut kept: Vec<String> = std::fs::read_dir(root.join("job"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("attempt-"))
        .collect();
    kept.sort();
    assert_eq!(kept, ["attempt-3", "attempt-4", "attempt-5", "attempt-6"], "four earlier attempts and the latest");
}
