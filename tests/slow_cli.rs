//! `sf slow DIR` on the logs of real jobs: sf-trainer-sim under the library, with a fault
//! injected on one rank (SF_INJECT) or none. Steps are about 0.2 s so that a 60-100 ms
//! scheduling stall of the 2-core CI machine stays under L1's 1.5 max/min gate.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;
use serde_json::{json, Value};

const STAGES: &str = "data=30,fwd=60,bwd=80,callbacks=5,optim=20";

/// 4 ranks x 40 steps, `inject` as SF_INJECT (empty: none), logs in `root/job`.
fn job(test: &str, inject: &str) -> std::path::PathBuf {
    job_of(test, 4, "2", inject)
}

/// `ranks` ranks x 40 steps with `jitter` ms of stage jitter.
fn job_of(test: &str, ranks: u32, jitter: &str, inject: &str) -> std::path::PathBuf {
    let root = log_root(test);
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    let ranks = ranks.to_string();
    cmd.args(["--ranks", &ranks, "--steps", "40", "--stage-ms", STAGES, "--jitter-ms", jitter, "--seed", "3"]);
    // Host-blocking NCCL: waits are read from the calls' durations.
    cmd.args(["--launch", "blocking"]);
    if !inject.is_empty() {
        cmd.env("SF_INJECT", inject);
    }
    run_ok(&mut cmd);
    root.join("job")
}

fn sf_slow(dir: &Path, extra: &[&str]) -> Output {
    Command::new(artifact("sf")).arg("slow").arg(dir).args(extra).output().expect("run sf slow")
}

fn slow_json(dir: &Path) -> (Option<i32>, Value) {
    let out = sf_slow(dir, &["--json"]);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("sf slow --json prints one JSON object ({e}): {}", String::from_utf8_lossy(&out.stderr))
    });
    (out.status.code(), report)
}

fn l1_of(report: &Value, rank: u64) -> &Value {
    report["l1"].as_array().unwrap().iter().find(|r| r["rank"] == rank).expect("an L1 row per rank")
}

#[test]
fn a_regression_from_step_20_names_the_rank_and_stage_by_three_detectors() {
    let _serial = one_at_a_time();
    let dir = job("slow-regression", "delay:rank=3,stage=data.next_wait,ms=80,step=20-39");
    let (code, report) = slow_json(&dir);
    assert_eq!(code, Some(4), "{report}");
    assert_eq!(report["found"], true);
    let top = &report["slow_ranks"][0];
    assert_eq!(
        (&top["rank"], &top["stage"], &top["detectors"]),
        (&3.into(), &"data.next_wait".into(), &3.into()),
        "{report}"
    );
    assert!(top["l1_regression"] == true && top["l2"]["z"].as_f64().unwrap() > 1.0, "{top}");
    assert!(top["expected_time"]["slow_steps"].as_u64().unwrap() >= 18, "{top}");
    // Every other (rank, stage) named is at most a one-detector lead, never three.
    for s in report["slow_ranks"].as_array().unwrap().iter().skip(1) {
        assert!(s["rank"] == 3 || s["detectors"].as_u64() < Some(2), "{s}");
    }
    // L1: the late rank's own regression is at step 20 and grew in its data wait...
    let g = &l1_of(&report, 3)["regression"];
    assert!(g["step"].as_u64().unwrap().abs_diff(20) <= 1, "{g}");
    assert_eq!(g["stage"], "data.next_wait");
    assert!((g["ratio"].as_f64().unwrap() - 1.38).abs() < 0.1, "{g}");
    // ...while a peer, whose backward grew only by waiting for rank 3 inside its
    // allreduces, has no regression of its own: L1 reads each rank's own time.
    assert!(l1_of(&report, 0)["regression"].is_null(), "{report}");
    // Wait attribution names rank 3's data wait as the cause of the others' waiting.
    let culprit = &top["culprit"];
    assert!(culprit["wait_share"].as_f64().unwrap() > 0.5, "{top}");
    assert!(top["caused_wait_s"].as_f64().unwrap() > 3.0 * 0.080 * 15.0, "{top}");
    assert_eq!(report["wait_attribution"]["blame"][0]["rank"], 3);
    let e = report["expected_time"].as_array().unwrap().iter().find(|e| e["rank"] == 3).expect("rank 3 slow");
    assert_eq!(e["stage"], "data.next_wait", "{report}");
    assert!(e["slow_steps"].as_array().unwrap().iter().all(|s| s.as_u64().unwrap() >= 20), "{e}");
    assert!(e["excess_s"].as_f64().unwrap() > report["floor_s"].as_f64().unwrap(), "{e}");
    // Every rank's wall steps slowed from step 20, but on own time only rank 3's did: the
    // waiters' slowdown is its caused wait, not a regression of theirs, so no job-wide event
    // and no per-rank repeats (a job-wide regression of own time is job_tests' case).
    assert!(report["job_regression"].is_null(), "{report}");
    let regressed: Vec<u64> = report["l1"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| !l["regression"].is_null())
        .map(|l| l["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(regressed, [3], "{report}");
    let human = String::from_utf8(sf_slow(&dir, &[]).stdout).unwrap();
    assert!(human.lines().nth(1).unwrap().starts_with("SLOW rank 3 in data.next_wait: "), "{human}");
    assert_eq!(human.matches("regression from step").count(), 1, "{human}");
}

#[test]
fn a_one_rank_job_and_one_rank_groups_have_no_stragglers() {
    let _serial = one_at_a_time();
    // One rank with 5 ms of jitter in every stage: nothing to compare it with.
    let alone = job_of("slow-one-rank", 1, "5", "");
    let (code, report) = slow_json(&alone);
    assert_eq!(report["skipped_groups"], serde_json::json!([{"group": "job", "ranks": 1}]), "{report}");
    assert_eq!((&report["slow_ranks"], &report["l2"], &report["expected_time"]), (&json!([]), &json!([]), &json!([])));
    // Its jitter is no finding; only a regression of its own steps could be (a load change
    // of this shared test machine, mid-run), and then the report says so.
    let regressed = report["l1"][0]["regression"].is_object();
    assert_eq!((code, report["found"].as_bool()), (Some(if regressed { 4 } else { 0 }), Some(regressed)), "{report}");
    let human = String::from_utf8(sf_slow(&alone, &[]).stdout).unwrap();
    assert!(human.contains("note: group job has 1 rank, too few to compare: no stragglers there"), "{human}");
    // The headline and the status agree: a finding (4) is named in a SLOW line, never under
    // a line that says no rank stands out.
    assert!(!human.contains("no rank stands out"), "{human}");
    assert_eq!(human.contains("SLOW rank 0: its own step time"), regressed, "{human}");
    // Four ranks on one node by local rank: four groups of one, compared together.
    let four = job("slow-by-local-rank", "");
    let (code, report) = {
        let out = sf_slow(&four, &["--group-by", "local-rank", "--json"]);
        (out.status.code(), serde_json::from_slice::<Value>(&out.stdout).unwrap())
    };
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["merged_groups"].as_array().unwrap().len(), 4, "{report}");
    assert!(report["l2"].as_array().unwrap().iter().all(|g| g["group"] == "merged"), "{report}");
    let human = String::from_utf8(sf_slow(&four, &["--group-by", "local-rank"]).stdout).unwrap();
    assert!(human.contains("have one rank each, too few to compare: compared together as one group"), "{human}");
}

#[test]
fn a_three_step_spike_is_jitter_with_its_width_on_the_right_rank_and_stage() {
    let _serial = one_at_a_time();
    let dir = job("slow-jitter", "delay:rank=2,stage=model.fwd_loss_cpu_wall,ms=250,step=15-17");
    let (code, report) = slow_json(&dir);
    assert_eq!(code, Some(4), "{report}");
    let top = &report["slow_ranks"][0];
    assert_eq!((&top["rank"], &top["stage"]), (&2.into(), &"model.fwd_loss_cpu_wall".into()), "{report}");
    assert!(top["l1_jitter"] == true && top["detectors"].as_u64() >= Some(2), "{top}");
    assert_eq!(top["expected_time"]["slow_steps"], 3, "{top}");
    let l1 = l1_of(&report, 2);
    assert_eq!(l1["class"], "jitter", "{l1}");
    let j = &l1["jitter"][0];
    assert_eq!(
        (&j["effective_first_step"], &j["effective_last_step"], &j["effective_width"]),
        (&15.into(), &17.into(), &3.into()),
        "{j}"
    );
    assert_eq!(j["stage"], "model.fwd_loss_cpu_wall");
    assert!(j["max_ratio"].as_f64().unwrap() > 1.8, "{j}");
    assert!(report["slow_ranks"].as_array().unwrap().iter().all(|s| s["rank"] == 2), "{report}");
    // The human answer names the rank and stage first.
    let human = String::from_utf8(sf_slow(&dir, &[]).stdout).unwrap();
    assert!(human.lines().nth(1).unwrap().starts_with("SLOW rank 2 in model.fwd_loss_cpu_wall: "), "{human}");
}

/// The commonest DDP straggler: rank 6 sleeps 20 ms before each of its allreduces. Its
/// peers wait inside those allreduces, and the last to arrive is the first to leave, so
/// raw stage times show the seven waiters behind; `sf slow` must name rank 6 (in the stage
/// it was late in) and no waiter.
#[test]
fn a_rank_late_into_its_allreduces_is_named_and_no_waiter_is() {
    let _serial = one_at_a_time();
    let root = log_root("slow-late-allreduce");
    run_ok(
        preloaded(&trainer_sim(), &root, "job")
            .args(["--ranks", "8", "--steps", "12", "--stage-ms", "data=20,fwd=30,bwd=40,callbacks=2,optim=10"])
            .args(["--jitter-ms", "2", "--seed", "5", "--launch", "blocking"])
            .env("SF_INJECT", "delay:rank=6,op=allreduce,ms=20,step=2-11"),
    );
    let (code, report) = slow_json(&root.join("job"));
    assert_eq!(code, Some(4), "{report}");
    let top = &report["slow_ranks"][0];
    assert_eq!((&top["rank"], &top["stage"]), (&6.into(), &"model.backward_cpu_wall".into()), "{report}");
    // 4 allreduces x 20 ms x 7 waiters over 10 of 11 judged steps (5.6 s): the largest
    // part of all waiting, though a loaded host adds its own.
    let culprit = &top["culprit"];
    assert!(culprit["caused_s"].as_f64().unwrap() > 4.0, "{top}");
    assert!(culprit["wait_share"].as_f64().unwrap() > 0.3, "{top}");
    assert!((culprit["delay_per_step_s"].as_f64().unwrap() - 0.073).abs() < 0.02, "{top}");
    let named: Vec<&Value> = report["slow_ranks"].as_array().unwrap().iter().map(|s| &s["rank"]).collect();
    assert!(named.iter().all(|r| **r == 6), "a waiter is named: {named:?}");
    // The waiters' backward grew only by waiting: their own L1 series saw nothing.
    assert!(report["l1"].as_array().unwrap().iter().all(|r| r["rank"] == 6 || r["regression"].is_null()), "{report}");
    assert_eq!(report["wait_attribution"]["blame"][0]["rank"], 6);
    let human = String::from_utf8(sf_slow(&root.join("job"), &[]).stdout).unwrap();
    let answer = human.lines().nth(1).unwrap();
    assert!(answer.starts_with("SLOW rank 6 in model.backward_cpu_wall: made the other ranks wait "), "{human}");
}

/// The async twin of the late rank: rank 2 is 15 ms late in backward, on its host
/// (`--slow`: it launches late) or on its device (`--slow-kernel`: its kernels run over),
/// with the CUDA door open. The waits are read from the NCCL kernels, and the headlines of
/// sf slow and sf frontier name rank 2 in backward, no waiter.
#[test]
fn an_async_rank_late_on_its_host_or_its_device_is_named_from_the_device() {
    let _serial = one_at_a_time();
    for fault in ["--slow", "--slow-kernel"] {
        let root = log_root(&format!("slow-async{fault}"));
        run_ok(
            preloaded(&trainer_sim(), &root, "job")
                .args(["--ranks", "4", "--steps", "16", "--stage-ms", "data=2,fwd=4,bwd=8,callbacks=1,optim=2"])
                .args(["--launch", "async", fault, "2:bwd:15"])
                .env("CUDA_INJECTION64_PATH", library()),
        );
        let dir = root.join("job");
        let (code, report) = slow_json(&dir);
        assert_eq!((code, report["waits_from"].as_str()), (Some(4), Some("device")), "{fault}: {report}");
        let human = String::from_utf8(sf_slow(&dir, &[]).stdout).unwrap();
        let headline = human.lines().nth(1).unwrap_or_default();
        assert!(
            headline.starts_with("SLOW rank 2 in model.backward_cpu_wall: made the other ranks wait "),
            "{fault}: {human}"
        );
        assert!(human.contains("waits from: device (NCCL kernels)"), "{fault}: {human}");
        let out = Command::new(artifact("sf")).arg("frontier").arg(&dir).output().expect("run sf frontier");
        let frontier = String::from_utf8_lossy(&out.stdout).to_string();
        let culprit = frontier.lines().find(|l| l.starts_with("CULPRIT ")).unwrap_or_default();
        assert!(culprit.starts_with("CULPRIT rank 2 in model.backward_cpu_wall: "), "{fault}: {frontier}");
    }
}

#[test]
fn a_healthy_run_reports_nothing_and_exits_0() {
    let _serial = one_at_a_time();
    let dir = job("slow-healthy", "");
    let (code, report) = slow_json(&dir);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["found"], false);
    assert_eq!(report["slow_ranks"], serde_json::json!([]));
    assert_eq!(report["expected_time"], serde_json::json!([]));
    // No assertion on each rank's L1 class: it is a statistic, not a finding, and on a
    // loaded host a few-percent shift may classify as a regression while nothing is slow
    // (found false and no slow rank, above).
    assert_eq!((&report["ranks"], &report["world"], &report["skip_steps"]), (&4.into(), &4.into(), &1.into()));
    assert_eq!(report["l1"][0]["steps"], 39);
    assert_eq!(report["params"]["alpha"], 0.05);
    let human = sf_slow(&dir, &[]);
    assert!(String::from_utf8_lossy(&human.stdout).contains("nothing slow"));
}

#[test]
fn no_logs_or_no_step_vectors_is_one_error_line_and_exit_1() {
    let _serial = one_at_a_time();
    let empty = TempDir::new("slow-empty");
    let out = sf_slow(&empty.0, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("no rank logs (*.sflog)") && stderr.lines().count() == 1, "{stderr}");

    let root = log_root("slow-none");
    run_ok(preloaded(&trainer_sim(), &root, "job").args(trainer_args(2, 3)).args(["--markers", "none"]));
    let out = sf_slow(&root.join("job"), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("no step vectors") && stderr.lines().count() == 1, "{stderr}");
    // The log root instead of a job directory: the job below it is found and read.
    let out = sf_slow(&root, &[]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no step vectors"), "{out:?}");
}

#[test]
fn help_teaches_the_detectors_and_the_exit_status() {
    let _serial = one_at_a_time();
    let out = Command::new(artifact("sf")).args(["slow", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in ["L1", "L2", "EXPECTED TIME", "--alpha", "--group-by", "Exit status: 0 nothing found; 4", "Example"] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
}
