//! `sf roles` on real 3-D jobs: sf-trainer-sim's `--tp/--pp/--dp` under the library, its
//! communicators made by ncclCommSplit or from fresh unique ids, its pipeline exchanges
//! batched on the pipeline communicator or on 2-rank ones; and a flat job.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::{json, Value};

/// A few steps of an 8-rank job of `layout` (tp, pp, dp) with `extra` arguments, then
/// `sf roles --json` on its logs.
fn roles_of(test: &str, layout: (u32, u32, u32), extra: &[&str]) -> Value {
    // One job at a time: 8 ranks each on a shared 2-core machine are plenty.
    let _serial = one_at_a_time();
    let root = log_root(test);
    let (tp, pp, dp) = layout;
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(trainer_args(tp * pp * dp, 2)).args(["--bucket-elems", "64", "--buckets", "2"]);
    cmd.args(["--tp", &tp.to_string(), "--pp", &pp.to_string(), "--dp", &dp.to_string()]).args(extra);
    run_ok(&mut cmd);
    sf_roles(&root.join("job"))
}

fn sf_roles(dir: &Path) -> Value {
    let out = Command::new(artifact("sf")).arg("roles").arg(dir).arg("--json").output().expect("spawn sf");
    assert_eq!(out.status.code(), Some(0), "sf roles: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("one JSON object ({e})"))
}

/// The layout and every rank's coordinates are Megatron's: rank = tp + T*dp + T*D*pp.
fn assert_megatron(report: &Value, (tp, pp, dp): (u32, u32, u32), what: &str) {
    assert_eq!(report["layout"], json!({"tp": tp, "pp": pp, "dp": dp}), "{what}: {report:#}");
    assert_eq!(report["notes"], json!([]), "{what}");
    let ranks = report["ranks"].as_array().expect("ranks");
    assert_eq!(ranks.len() as u32, tp * pp * dp, "{what}");
    for (rank, coords) in ranks.iter().enumerate() {
        let rank = rank as u32;
        let expected = json!({"rank": rank, "tp": rank % tp, "pp": rank / (tp * dp), "dp": rank / tp % dp});
        assert_eq!(coords, &expected, "{what}");
    }
}

const LAYOUTS: [(u32, u32, u32); 3] = [(2, 2, 2), (2, 4, 1), (1, 2, 4)];

#[test]
fn split_communicators_read_as_their_layout() {
    for layout in LAYOUTS {
        let report = roles_of("roles-split", layout, &["--comm-create", "split"]);
        assert_megatron(&report, layout, &format!("split {layout:?}"));
    }
}

#[test]
fn communicators_from_fresh_ids_read_as_their_layout() {
    for layout in LAYOUTS {
        let report = roles_of("roles-new", layout, &["--comm-create", "new"]);
        assert_megatron(&report, layout, &format!("new {layout:?}"));
    }
}

#[test]
fn pipelines_on_pair_communicators_read_as_their_layout() {
    for (layout, create) in [((2, 4, 1), "split"), ((1, 2, 4), "new")] {
        let report = roles_of("roles-pairs", layout, &["--comm-create", create, "--p2p", "pairs"]);
        assert_megatron(&report, layout, &format!("pairs {create} {layout:?}"));
        // split makes the pipeline groups too; they carry nothing and are named by their members.
        let roles: Vec<&str> =
            report["communicators"].as_array().unwrap().iter().map(|c| c["role"].as_str().unwrap()).collect();
        assert!(!roles.contains(&"other"), "{roles:?}");
    }
}

#[test]
fn a_flat_job_reads_as_data_parallel_only() {
    let _serial = one_at_a_time();
    let root = log_root("roles-flat");
    run_ok(preloaded(&trainer_sim(), &root, "job").args(trainer_args(4, 2)).arg("--p2p"));
    let report = sf_roles(&root.join("job"));
    assert_eq!(report["layout"], json!({"tp": 1, "pp": 1, "dp": 4}), "{report:#}");
    assert_eq!(report["flat"], json!(true));
    for (rank, coords) in report["ranks"].as_array().unwrap().iter().enumerate() {
        assert_eq!(coords, &json!({"rank": rank, "tp": 0, "pp": 0, "dp": rank}));
    }
}

#[test]
fn sf_ls_shows_the_layout_in_one_line() {
    let _serial = one_at_a_time();
    let root = log_root("roles-ls");
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    run_ok(cmd.args(trainer_args(8, 2)).args(["--bucket-elems", "64", "--tp", "2", "--pp", "4"]));
    let out = Command::new(artifact("sf")).arg("ls").arg(root.join("job")).output().expect("spawn sf");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("layout: ")).collect();
    assert_eq!(lines, ["layout: tp=2 pp=4 dp=1 (sf roles tells how)"], "{stdout}");
    let out = Command::new(artifact("sf")).arg("ls").arg(root.join("job")).arg("--json").output().expect("spawn sf");
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["layout"], json!({"tp": 2, "pp": 4, "dp": 1}));
}

#[test]
fn a_log_that_lost_its_oldest_calls_reads_the_flow_from_the_step_markers() {
    // A small log wraps within a few dozen steps, so its oldest call held falls mid-step.
    let _serial = one_at_a_time();
    let root = log_root("roles-wrapped");
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.env("SF_LOG_RECORDS", "1024").args(trainer_args(8, 43)).args(["--bucket-elems", "64"]);
    run_ok(cmd.args(["--tp", "1", "--pp", "4", "--dp", "2"]));
    let ls = Command::new(artifact("sf")).arg("ls").arg(root.join("job")).arg("--json").output().expect("spawn sf");
    let ls: Value = serde_json::from_slice(&ls.stdout).expect("one JSON object");
    assert!(ls["ranks"].as_array().unwrap().iter().all(|r| r["lost_to_wrap"].as_u64() > Some(0)), "{ls:#}");
    assert_megatron(&sf_roles(&root.join("job")), (1, 4, 2), "wrapped");
}

#[test]
fn an_async_job_reads_as_its_layout() {
    let report = roles_of("roles-async", (2, 2, 2), &["--launch", "async", "--comm-create", "new"]);
    assert_megatron(&report, (2, 2, 2), "async");
}
