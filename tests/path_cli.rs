//! `sf path` on real pipelined jobs: sf-trainer-sim's 1F1B pipeline (`--pp 4 --dp 2`) with
//! one pass planted slow by `--slow-stage`, on the critical path or inside a bubble.
//! With f = 20 ms and b = 30 ms per pass, 4 stages and 8 microbatches, a step's critical
//! path is (8 + 4 - 1) x 50 = 550 ms; stage 0's forward of microbatch 3 has 3b = 90 ms of
//! slack, the last stage's passes in the steady state none. Passes this long keep a loaded
//! 2-core machine's scheduling hiccups under the 5% (27 ms) a finding needs.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

fn pipeline_job(test: &str, slow_stage: Option<&str>) -> std::path::PathBuf {
    pipeline_job_with(test, slow_stage, &[])
}

/// `pipeline_job` with `extra` flags for the simulator.
fn pipeline_job_with(test: &str, slow_stage: Option<&str>, extra: &[&str]) -> std::path::PathBuf {
    let _serial = one_at_a_time();
    let root = log_root(test);
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args([
        "--ranks",
        "8",
        "--steps",
        "6",
        "--stage-ms",
        "data=1,fwd=20,bwd=30,callbacks=1,optim=1",
        "--launch",
        "blocking",
    ]);
    cmd.args(["--bucket-elems", "64", "--tp", "1", "--pp", "4", "--dp", "2"]);
    if let Some(rule) = slow_stage {
        cmd.args(["--slow-stage", rule]);
    }
    cmd.args(extra);
    run_ok(&mut cmd);
    root.join("job")
}

fn sf_path(dir: &Path) -> (Output, Value) {
    let out = Command::new(artifact("sf")).arg("path").arg(dir).arg("--json").output().expect("spawn sf");
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("one JSON object ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    (out, report)
}

/// The first line `sf path` prints for people.
fn headline(dir: &Path) -> String {
    let human = Command::new(artifact("sf")).arg("path").arg(dir).output().expect("spawn sf");
    String::from_utf8_lossy(&human.stdout).lines().next().unwrap_or_default().to_string()
}

#[test]
fn a_slow_pass_on_the_critical_path_is_named_with_its_stage_and_microbatch() {
    let dir = pipeline_job("path-on", Some("3:bwd:100@3-3#4"));
    let (out, report) = sf_path(&dir);
    assert_eq!(out.status.code(), Some(4), "{report:#}");
    let finding = &report["finding"];
    assert_eq!((finding["stage"].as_u64(), finding["microbatch"].as_u64()), (Some(3), Some(4)), "{report:#}");
    assert_eq!((finding["phase"].as_str(), finding["step"].as_u64()), (Some("bwd"), Some(3)));
    assert_eq!(report["passes_from"], "markers", "{report:#}");
    assert!(finding["added_ns"].as_u64() > Some(80_000_000), "{finding:#}");
    let headline = headline(&dir);
    assert!(headline.contains("SLOW: pipeline stage 3, microbatch 4, bwd"), "{headline}");
}

/// Without pass markers (a job that marks its steps only), the passes come from each
/// stage's sends and receives: stage 2's forwards 40 ms slower in step 3 (`--tp 1`, its
/// passes all between exchanges) are the finding.
#[test]
fn without_pass_markers_the_passes_come_from_send_recv() {
    let dir = pipeline_job_with("path-send-recv", Some("2:fwd:40@3-3"), &["--pass-markers", "none"]);
    let (out, report) = sf_path(&dir);
    assert_eq!(out.status.code(), Some(4), "{report:#}");
    assert_eq!(report["passes_from"], "send_recv", "{report:#}");
    let finding = &report["finding"];
    assert_eq!((finding["stage"].as_u64(), finding["phase"].as_str()), (Some(2), Some("fwd")), "{report:#}");
    assert_eq!(finding["step"].as_u64(), Some(3), "{finding:#}");
    assert!(report["note"].as_str().is_some_and(|n| n.contains("not judged")), "{report:#}");

    let healthy = pipeline_job_with("path-send-recv-healthy", None, &["--pass-markers", "none"]);
    let (out, report) = sf_path(&healthy);
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert_eq!((&report["finding"], &report["passes_from"]), (&Value::Null, &Value::from("send_recv")), "{report:#}");
    assert!(report["steps_judged"].as_u64() > Some(0), "{report:#}");
}

/// Without pass markers, the last stage's forward and backward of a microbatch have no
/// exchange between them: a slow backward is found in their span, named as both.
#[test]
fn without_pass_markers_a_slow_last_stage_is_named_by_its_span() {
    let dir = pipeline_job_with("path-send-recv-last", Some("3:bwd:100@3-3#4"), &["--pass-markers", "none"]);
    let (out, report) = sf_path(&dir);
    assert_eq!(out.status.code(), Some(4), "{report:#}");
    let finding = &report["finding"];
    assert_eq!((finding["stage"].as_u64(), finding["microbatch"].as_u64()), (Some(3), Some(4)), "{report:#}");
    assert_eq!((finding["phase"].as_str(), finding["step"].as_u64()), (Some("fwd"), Some(3)), "{finding:#}");
    assert_eq!(finding["merged_with"], serde_json::json!({"phase": "bwd", "microbatch": 4}), "{finding:#}");
    assert!(finding["added_ns"].as_u64() > Some(80_000_000), "{finding:#}");
    let headline = headline(&dir);
    assert!(headline.contains("SLOW: pipeline stage 3, microbatch 4, fwd+bwd added"), "{headline}");
}

/// Asynchronous launches with the CUDA door open and no pass markers: each send/recv
/// returns once launched, so the passes are timed between the exchange kernels' runs on
/// the device; rank 7's backward kernels 10 ms longer in step 3 (tensor parallelism 2)
/// are its stage's finding, and its tensor-parallel peer's kernels, which waited for it,
/// name it.
#[test]
fn without_pass_markers_an_asynchronous_pipeline_is_timed_on_the_device() {
    let _serial = one_at_a_time();
    let root = log_root("path-send-recv-async");
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.env("CUDA_INJECTION64_PATH", artifact("libstagefrontier.so"));
    cmd.args(["--ranks", "8", "--steps", "6", "--stage-ms", "data=1,fwd=20,bwd=30,callbacks=1,optim=1"]);
    cmd.args(["--launch", "async", "--bucket-elems", "64", "--tp", "2", "--pp", "2", "--dp", "2"]);
    cmd.args(["--pass-markers", "none", "--slow-kernel", "7:bwd:10@3-3"]);
    run_ok(&mut cmd);
    let (out, report) = sf_path(&root.join("job"));
    assert_eq!(out.status.code(), Some(4), "{report:#}");
    assert_eq!((&report["timed_on"], &report["passes_from"]), (&Value::from("device"), &Value::from("send_recv")));
    let finding = &report["finding"];
    assert_eq!((finding["stage"].as_u64(), finding["step"].as_u64()), (Some(1), Some(3)), "{report:#}");
    assert!(finding["rank"] == 7 || finding["held_by"] == 7, "{finding:#}");
}

#[test]
fn a_slow_pass_inside_a_bubble_is_absorbed_not_a_finding() {
    let dir = pipeline_job("path-absorbed", Some("0:fwd:60@3-3#3"));
    let (out, report) = sf_path(&dir);
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert_eq!(report["finding"], Value::Null);
    let planted = report["slow"].as_array().unwrap().iter().find(|s| {
        (s["step"].as_u64(), s["stage"].as_u64(), s["microbatch"].as_u64(), s["phase"].as_str())
            == (Some(3), Some(0), Some(3), Some("fwd"))
    });
    let planted = planted.unwrap_or_else(|| panic!("the planted pass is slow: {report:#}"));
    assert_eq!(planted["added_ns"].as_u64(), Some(0), "{planted:#}");
}

#[test]
fn a_flat_job_has_no_pipeline() {
    let _serial = one_at_a_time();
    let root = log_root("path-flat");
    run_ok(preloaded(&trainer_sim(), &root, "job").args(trainer_args(4, 3)));
    let (out, report) = sf_path(&root.join("job"));
    assert_eq!(out.status.code(), Some(0));
    assert!(report["note"].as_str().is_some_and(|n| n.starts_with("no pipeline")), "{report:#}");
}

/// `--tp 2 --pp 2 --dp 1`: rank 3 (tp 1 of pipeline stage 1) runs its forward passes of
/// step 3 40 ms long, and its tensor-parallel peer, rank 2, waits for it in the passes'
/// allreduces, so both pipelines show the stage's forward slow. With pass markers the
/// stage's waits tell which rank held the passes up; without, the time each member spent
/// in the tensor-parallel allreduces (rank 2 waited, rank 3 did not).
#[test]
fn a_slow_tensor_parallel_rank_is_named_as_the_one_that_held_its_stage_up() {
    let _serial = one_at_a_time();
    for markers in ["each", "none"] {
        let root = log_root(&format!("path-held-by-{markers}"));
        let mut cmd = preloaded(&trainer_sim(), &root, "job");
        cmd.args(["--ranks", "4", "--steps", "6", "--stage-ms", "data=1,fwd=20,bwd=30,callbacks=1,optim=1"])
            .args(["--launch", "blocking", "--bucket-elems", "64", "--tp", "2", "--pp", "2", "--dp", "1"])
            .args(["--slow", "3:fwd:40@3-3", "--pass-markers", markers]);
        run_ok(&mut cmd);
        let (out, report) = sf_path(&root.join("job"));
        assert_eq!(out.status.code(), Some(4), "{markers}: {report:#}");
        let finding = &report["finding"];
        assert_eq!((finding["stage"].as_u64(), finding["phase"].as_str()), (Some(1), Some("fwd")), "{report:#}");
        assert_eq!(finding["held_by"], 3, "{markers}: {finding:#}");

        // sf slow and sf frontier head with the same finding, exit 4.
        for command in ["slow", "frontier"] {
            let out = Command::new(artifact("sf")).arg(command).arg(root.join("job")).arg("--json").output().unwrap();
            let report: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(out.status.code(), Some(4), "sf {command}, {markers}: {report:#}");
            let path = &report["path_finding"];
            let (stage, held_by) = (path["stage"].as_u64(), path["held_by"].as_u64());
            assert_eq!((stage, held_by), (Some(1), Some(3)), "sf {command}, {markers}: {path:#}");
            let human = Command::new(artifact("sf")).arg(command).arg(root.join("job")).output().unwrap();
            let text = String::from_utf8_lossy(&human.stdout);
            assert!(text.contains("SLOW pipeline stage 1, "), "sf {command}, {markers}: {text}");
        }
    }
}

/// The same pipeline with asynchronous launches and the CUDA door shut: a pass's host time
/// is its launches', the device's work comes later and no record shows it, so the passes
/// are not judged (exit 0, no finding), and the note says why, even with a slow stage
/// planted.
#[test]
fn an_asynchronous_pipeline_without_device_evidence_is_not_judged() {
    let _serial = one_at_a_time();
    let root = log_root("path-async-host");
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(["--ranks", "8", "--steps", "6", "--stage-ms", "data=1,fwd=20,bwd=30,callbacks=1,optim=1"]);
    cmd.args(["--launch", "async", "--bucket-elems", "64", "--tp", "1", "--pp", "4", "--dp", "2"]);
    cmd.args(["--slow-stage", "2:fwd:10"]);
    run_ok(&mut cmd);
    let (out, report) = sf_path(&root.join("job"));
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert!(report["finding"].is_null() && report["slow"] == serde_json::json!([]), "{report:#}");
    assert_eq!(report["timed_on"], "host", "{report:#}");
    assert!(report["note"].as_str().is_some_and(|n| n.starts_with("passes not judged: waits from none")), "{report:#}");
}
