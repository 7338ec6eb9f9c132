//! `sf frontier DIR` on the logs of a real job: a 120 ms delay injected into one stage on
//! one hidden rank puts that stage in the top-2 and names that rank as its leader.

mod common;

use std::process::Command;

use common::*;

fn frontier_json(root: &std::path::Path) -> serde_json::Value {
    let out = run_ok(Command::new(artifact("sf")).arg("frontier").arg(root.join("job")).arg("--json"));
    serde_json::from_slice(&out.stdout).expect("sf frontier --json prints one JSON object")
}

fn hidden_rank_delay(test: &str, rank: u32, stage: &str) {
    let root = log_root(test);
    let inject = format!("delay:rank={rank},stage={stage},ms=120,step=2-11");
    run_ok(
        preloaded(&trainer_sim(), &root, "job")
            .args(["--ranks", "8", "--steps", "12", "--stage-ms", "data=20,fwd=30,bwd=40,callbacks=2,optim=10"])
            .args(["--jitter-ms", "2", "--seed", "7"])
            .env("SF_INJECT", inject),
    );
    let report = frontier_json(&root);
    let window = &report["windows"][0];
    assert_eq!(window["ranks"], 8);
    let top2: Vec<&str> = window["top2"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert!(top2.contains(&stage), "{stage} not in top-2 {top2:?}: {window}");
    assert_eq!(window["leader_ranks"][stage], serde_json::json!([rank]), "{window}");
}

#[test]
fn a_data_stall_on_a_hidden_rank_is_routed_and_its_rank_named() {
    hidden_rank_delay("frontier-data", 5, "data.next_wait");
}

#[test]
fn a_backward_stall_on_a_hidden_rank_is_routed_and_its_rank_named() {
    hidden_rank_delay("frontier-bwd", 2, "model.backward_cpu_wall");
}

#[test]
fn logs_without_stage_vectors_are_a_clear_error() {
    let root = log_root("frontier-none");
    run_ok(preloaded(&trainer_sim(), &root, "job").args(trainer_args(2, 3)).args(["--markers", "none"]));
    let out = Command::new(artifact("sf")).arg("frontier").arg(root.join("job")).output().unwrap();
    // The same status as sf slow's for the same condition: an error, 1.
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no step vectors") && stderr.lines().count() == 1, "{stderr}");
}

#[test]
fn a_healthy_job_gets_no_strong_label() {
    // 8 ranks with 5 ms of jitter in every stage and no fault: accounting, never a
    // bottleneck claim (StageFrontier Sec. 6: no strong label on 105 no-fault rows).
    let root = log_root("frontier-healthy");
    run_ok(
        preloaded(&trainer_sim(), &root, "job")
            .args(["--ranks", "8", "--steps", "30", "--stage-ms", "data=20,fwd=30,bwd=40,callbacks=2,optim=10"])
            .args(["--jitter-ms", "5", "--seed", "11"]),
    );
    let report = frontier_json(&root);
    for window in report["windows"].as_array().unwrap() {
        for label in window["labels"].as_array().unwrap() {
            assert_eq!(label["strong"], false, "a strong label on a healthy job: {window}");
        }
    }
    // The flag is the labeler's own: the bottleneck labels are the strong ones.
    use stagefrontier::analysis::frontier::LabelKind;
    assert!(LabelKind::DirectExposure.is_strong() && LabelKind::LikelySyncWait.is_strong());
    assert!(!LabelKind::CoCritical.is_strong() && !LabelKind::FrontierAccounting.is_strong());
}
