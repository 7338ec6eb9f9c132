//! `sf frontier` and `sf slow` on real jobs with no markers: sf-trainer-sim under the
//! library with `--markers none`, a stage planted slow on one rank with `--slow`; the
//! stages come from the NCCL schedule (`analysis::inferred`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

const BEFORE_FIRST: &str = "inferred.before_first_collective";
const BETWEEN: &str = "inferred.between_collectives";
const PHASES: [&str; 3] = [BEFORE_FIRST, "inferred.in_collectives", BETWEEN];

/// Stage times of about 100 ms steps, where a planted slow stage stands out.
const STAGES: &str = "data=20,fwd=30,bwd=40,callbacks=2,optim=10";
/// About 200 ms steps for a healthy run: a 60-100 ms stall of a loaded 2-core machine
/// stays under sf slow's L1 jitter gate (max/min 1.5), as in tests/slow_cli.rs.
const HEALTHY_STAGES: &str = "data=30,fwd=60,bwd=80,callbacks=5,optim=20";

/// 4 ranks x 14 steps of sf-trainer-sim with `extra` arguments (after the stage times,
/// so they may override them); logs in `root/job`; the run's output.
fn job(test: &str, extra: &[&str], inject: Option<&str>) -> (PathBuf, Output) {
    let root = log_root(test);
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    // Host-blocking NCCL: the stages are inferred from the host's NCCL schedule.
    cmd.args(["--ranks", "4", "--steps", "14", "--jitter-ms", "2", "--seed", "5", "--launch", "blocking"]);
    cmd.args(["--stage-ms", STAGES]).args(extra);
    if let Some(rule) = inject {
        cmd.env("SF_INJECT", rule);
    }
    let out = run_ok(&mut cmd);
    (root.join("job"), out)
}

fn sf(command: &str, dir: &Path, json: bool) -> Output {
    let mut cmd = Command::new(artifact("sf"));
    cmd.arg(command).arg(dir);
    if json {
        cmd.arg("--json");
    }
    cmd.output().expect("spawn sf")
}

fn slow_json(dir: &Path) -> (Option<i32>, Value) {
    let out = sf("slow", dir, true);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("sf slow --json prints one JSON object ({e}): {}", String::from_utf8_lossy(&out.stderr))
    });
    (out.status.code(), report)
}

fn first_culprit(frontier: &Value) -> (u64, String) {
    let c = &frontier["windows"][0]["culprits"][0];
    (c["rank"].as_u64().unwrap_or(u64::MAX), c["stage"].as_str().unwrap_or("none").to_string())
}

fn first_slow(slow: &Value) -> (u64, String) {
    let s = &slow["slow_ranks"][0];
    (s["rank"].as_u64().unwrap_or(u64::MAX), s["stage"].as_str().unwrap_or("none").to_string())
}

#[test]
fn a_slow_data_stage_without_markers_is_named_by_rank_and_inferred_phase() {
    let _serial = one_at_a_time();
    let (dir, _) = job("inferred-data", &["--markers", "none", "--slow", "2:data:60@2-13"], None);
    let frontier = frontier_json(&dir);
    assert_eq!(frontier["source"], "inferred", "{frontier}");
    assert_eq!(frontier["stages"], serde_json::json!(PHASES));
    let inferred = &frontier["inferred"];
    assert_eq!(inferred["collectives_per_step"], 5, "4 bucket allreduces and the loss allgather: {inferred}");
    assert_eq!(inferred["ranks_off_pattern"], serde_json::json!([]));
    assert_eq!(first_culprit(&frontier), (2, BEFORE_FIRST.to_string()), "{frontier}");
    assert_eq!(frontier["windows"][0]["top1"], BEFORE_FIRST);

    let (code, slow) = slow_json(&dir);
    assert_eq!(code, Some(4), "{slow}");
    assert_eq!(slow["source"], "inferred");
    assert_eq!(first_slow(&slow), (2, BEFORE_FIRST.to_string()), "{slow}");

    // sf steps --csv writes the inferred phases; sf frontier --csv reads back the answer.
    let out = Command::new(artifact("sf")).arg("steps").arg(&dir).arg("--csv").output().expect("spawn sf");
    assert!(out.status.success(), "{out:?}");
    let csv = out.stdout;
    let file = dir.join("steps.csv");
    std::fs::write(&file, csv).unwrap();
    let out = Command::new(artifact("sf")).args(["frontier", "--json", "--csv"]).arg(&file).output().unwrap();
    let mut from_csv: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(from_csv["source"], "inferred", "{from_csv}");
    let mut from_logs = frontier.clone();
    for report in [&mut from_logs, &mut from_csv] {
        let object = report.as_object_mut().unwrap();
        object.remove("file");
        object.remove("inferred");
        // Where the waits were read from is the logs' to say; a CSV carries the waits only.
        object.remove("waits_from");
        object.remove("waits_from_reason");
    }
    assert_eq!(from_logs, from_csv, "sf steps --csv | sf frontier --csv must give sf frontier DIR's answer");

    // The human outputs say where the stages came from.
    for command in ["frontier", "slow"] {
        let text = String::from_utf8_lossy(&sf(command, &dir, false).stdout).to_string();
        assert!(text.contains("stages inferred from the NCCL schedule (no step markers in the logs)"), "{text}");
        assert!(text.contains("rank 2 in inferred.before_first_collective"), "{text}");
    }
}

#[test]
fn a_slow_optimizer_runs_between_collectives_before_the_loss_allgather() {
    let _serial = one_at_a_time();
    let (dir, _) = job("inferred-optim", &["--markers", "none", "--slow", "1:optim:40"], None);
    let frontier = frontier_json(&dir);
    assert_eq!(first_culprit(&frontier), (1, BETWEEN.to_string()), "{frontier}");
    let (_, slow) = slow_json(&dir);
    assert_eq!(first_slow(&slow), (1, BETWEEN.to_string()), "{slow}");
}

#[test]
fn a_healthy_unmarked_job_names_nothing() {
    let _serial = one_at_a_time();
    let (dir, _) = job("inferred-healthy", &["--markers", "none", "--stage-ms", HEALTHY_STAGES], None);
    let frontier = frontier_json(&dir);
    assert_eq!(frontier["source"], "inferred");
    for w in frontier["windows"].as_array().unwrap() {
        assert_eq!(w["culprits"], serde_json::json!([]), "{frontier}");
        assert!(w["labels"].as_array().unwrap().iter().all(|l| l["strong"] == false), "{frontier}");
    }
    let (code, slow) = slow_json(&dir);
    assert_eq!((code, &slow["found"]), (Some(0), &Value::Bool(false)), "{slow}");
}

#[test]
fn a_marked_job_keeps_its_own_stages() {
    let (dir, _) = job("inferred-marked", &["--markers", "c", "--slow", "3:fwd:5@3-4"], None);
    let frontier = frontier_json(&dir);
    assert_eq!(frontier["source"], "markers");
    assert_eq!(frontier["inferred"], Value::Null);
    assert_eq!(frontier["stages"][0], "data.next_wait", "{frontier}");
    let (_, slow) = slow_json(&dir);
    assert_eq!(slow["source"], "markers");
}

#[test]
fn too_few_steps_to_see_a_pattern_is_still_no_step_vectors() {
    let root = log_root("inferred-short");
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    run_ok(cmd.args(trainer_args(2, 2)).args(["--markers", "none"]));
    for command in ["frontier", "slow"] {
        let out = sf(command, &root.join("job"), false);
        assert_eq!(out.status.code(), Some(1), "sf {command}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("the logs hold no step vectors"), "sf {command}: {err}");
    }
}

#[test]
fn stage_rules_in_an_unmarked_job_say_once_per_rank_that_they_never_fire() {
    let rule = "delay:rank=1|2,stage=data.next_wait,ms=50;delay:rank=0,op=allreduce,seq=3,ms=1";
    let (_, out) = job("inferred-inject", &["--markers", "none"], Some(rule));
    let lines = library_lines(&out);
    let never: Vec<&String> = lines.iter().filter(|l| l.contains("never fired")).collect();
    assert_eq!(never.len(), 2, "ranks 1 and 2, once each: {lines:?}");
    for rank in [1, 2] {
        assert!(
            never.iter().any(|l| l.contains(&format!("SF_INJECT: rule 1 of rank {rank} names a stage or step"))),
            "{lines:?}"
        );
    }
    let (_, marked) = job("inferred-inject-marked", &["--markers", "c"], Some(rule));
    assert!(library_lines(&marked).iter().all(|l| !l.contains("never fired")), "{:?}", library_lines(&marked));
}

/// The async twin of the slow data stage: the NCCL calls return at once, so the host's
/// call times still give the schedule (the same 5 collectives a step, every rank on the
/// pattern), and the step turns where the hosts wait for the device (the loss `.item()`
/// after the last bucket allreduce): data runs between the allgather and the allreduces.
/// The waits are read from the device over the inferred phases: the slow rank is named
/// in `inferred.between_collectives` by both commands, and no other rank is named.
#[test]
fn an_async_unmarked_job_names_the_slow_rank_in_its_phase_from_the_device() {
    let _serial = one_at_a_time();
    let root = log_root("inferred-async");
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(["--ranks", "4", "--steps", "14", "--jitter-ms", "2", "--seed", "5", "--launch", "async"])
        .args(["--stage-ms", STAGES, "--markers", "none", "--slow", "2:data:60@2-13"])
        .env("CUDA_INJECTION64_PATH", library());
    run_ok(&mut cmd);
    let dir = root.join("job");
    let frontier = frontier_json(&dir);
    assert_eq!((&frontier["source"], &frontier["waits_from"]), (&"inferred".into(), &"device".into()), "{frontier}");
    assert_eq!(frontier["stages"], serde_json::json!(PHASES));
    let inferred = &frontier["inferred"];
    assert_eq!(inferred["collectives_per_step"], 5, "{inferred}");
    assert_eq!(inferred["ranks_off_pattern"], serde_json::json!([]), "{inferred}");
    let culprits: Vec<(u64, &str)> = frontier["windows"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["culprits"].as_array().unwrap())
        .map(|c| (c["rank"].as_u64().unwrap(), c["stage"].as_str().unwrap()))
        .collect();
    assert_eq!(culprits, [(2, "inferred.between_collectives")], "{frontier}");
    let (_, slow) = slow_json(&dir);
    assert_eq!(slow["waits_from"], "device", "{slow}");
    let first = &slow["slow_ranks"][0];
    assert_eq!((&first["rank"], &first["stage"]), (&2.into(), &"inferred.between_collectives".into()), "{slow}");
    // No other rank is charged with the waiting (a rank's own descheduled step on a loaded
    // host may still be listed after it, as its own time).
    let mut others = slow["slow_ranks"].as_array().unwrap().iter().filter(|s| s["rank"] != 2);
    assert!(others.all(|s| s["culprit"].is_null()), "{slow}");
}
