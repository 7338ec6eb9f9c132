//! The log's two rings on a real job: step vectors (and the other low-rate evidence) keep
//! their history while NCCL calls wrap the event ring many times over, and an analysis
//! whose window starts after the job did says so.

mod common;

use std::process::Command;

use common::*;
use stagefrontier::core::log::format::Region;
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::RecordBody;

/// A 2-rank job of `steps` steps with 16 gradient buckets (about 20 NCCL calls a step) in
/// logs of 1024 event slots (and 2048 history slots).
fn small_log_job(root: &std::path::Path, job: &str, steps: u32) {
    let mut args = trainer_args(2, steps);
    args.extend(["--buckets", "16", "--bucket-elems", "16"].map(String::from));
    run_ok(preloaded(&trainer_sim(), root, job).env("SF_LOG_RECORDS", "1024").args(&args));
}

fn sf(args: &[&str]) -> std::process::Output {
    Command::new(artifact("sf")).args(args).output().expect("spawn sf")
}

#[test]
fn step_history_outlives_the_calls_and_a_late_window_is_named() {
    let root = log_root("log-regions");
    small_log_job(&root, "long", 1500);
    for path in rank_logs(&root, "long") {
        let log = RankLog::open(&path).unwrap();
        assert_eq!((log.header.slot_count, log.header.history_slot_count), (1024, 2048));
        let (_, stats) = log.records();
        assert!(stats.lost_to_wrap > 20_000, "the calls wrapped the event ring many times: {stats:?}");
        let mut steps = Vec::new();
        let mut created = 0;
        let history = log.scan_region(Region::History, |r| match r.body {
            RecordBody::StepVector(v) => steps.push(v.step),
            RecordBody::CommCreated(_) => created += 1,
            _ => {}
        });
        assert_eq!(history.lost_to_wrap, 0, "{history:?}");
        assert_eq!(steps, (0..1500).collect::<Vec<u64>>(), "every step's vector is held, in order");
        assert!(created >= 1, "the communicator's creation is still held");
    }
    let dir = root.join("long");
    let report = frontier_json(&dir);
    assert!(report["history_starts_at_step"].is_null(), "{}", report["history_starts_at_step"]);
    let first = report["windows"].as_array().unwrap().iter().map(|w| w["first_step"].as_u64().unwrap()).min();
    assert!(first.is_some_and(|s| s <= 1), "the analysis starts with the job: {first:?}");
    // The calls kept cover the last ~50 steps only: every analysis says where waits start.
    let waits_from = report["waits_start_at_step"].as_u64().expect("the steps without waits are named");
    assert!((1400..1500).contains(&waits_from), "{waits_from}");
    let note = format!("the wait attribution covers steps from {waits_from} on");
    let human = sf(&["frontier", dir.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&human.stdout).contains(&note), "{}", String::from_utf8_lossy(&human.stdout));
    for command in ["slow", "steps"] {
        let out = sf(&[command, dir.to_str().unwrap(), "--json"]);
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json");
        assert_eq!(json["waits_start_at_step"].as_u64(), Some(waits_from), "sf {command}");
    }
    let csv = sf(&["steps", dir.to_str().unwrap(), "--csv"]);
    assert!(String::from_utf8_lossy(&csv.stderr).contains(&note), "the CSV's notes are on stderr");

    // Past the history ring's 2048 slots the oldest steps go, and every analysis says so.
    small_log_job(&root, "longer", 2600);
    let dir = root.join("longer");
    let report = frontier_json(&dir);
    let starts = report["history_starts_at_step"].as_u64().expect("a window that starts late is named");
    assert!((500..=600).contains(&starts), "2600 steps in 2048 slots (less the creation): {starts}");
    let human = sf(&["frontier", dir.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains(&format!("step history starts at step {starts}")), "{text}");
    let slow = sf(&["slow", dir.to_str().unwrap(), "--json"]);
    let slow: serde_json::Value = serde_json::from_slice(&slow.stdout).expect("sf slow --json");
    assert_eq!(slow["history_starts_at_step"].as_u64(), Some(starts), "{slow}");
    let steps = sf(&["steps", dir.to_str().unwrap(), "--json"]);
    let steps: serde_json::Value = serde_json::from_slice(&steps.stdout).expect("sf steps --json");
    assert_eq!(steps["history_starts_at_step"].as_u64(), Some(starts));
    let human = sf(&["steps", dir.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&human.stdout).contains(&format!("step history starts at step {starts}")));
    let _ = std::fs::remove_dir_all(&root);
}
