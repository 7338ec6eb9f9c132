//! `sf frontier DIR` on the logs of a real job: a 120 ms delay injected into one stage on
//! one hidden rank puts that stage in the top-2 and names that rank as its leader.

mod common;

use std::process::Command;

use common::*;

fn hidden_rank_delay(test: &str, rank: u32, stage: &str) {
    let root = log_root(test);
    let inject = format!("delay:rank={rank},stage={stage},ms=120,step=2-11");
    run_ok(
        preloaded(&trainer_sim(), &root, "job")
            .args(["--ranks", "8", "--steps", "12", "--stage-ms", "data=20,fwd=30,bwd=40,callbacks=2,optim=10"])
            .args(["--jitter-ms", "2", "--seed", "7"])
            // Host-blocking NCCL: the stall's waits are read from the calls' durations.
            .args(["--launch", "blocking"])
            .env("SF_INJECT", inject),
    );
    let report = frontier_json(&root.join("job"));
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

/// A 20 ms data stall on rank 4 (a fifth of a step): the seven others wait for it inside
/// backward's first allreduce. On raw stage times clipping the stall gains nothing (the
/// peers' wait stays in their backward); on own time it gains, and wait attribution names
/// rank 4's data wait as the culprit, first.
#[test]
fn a_small_data_stall_is_the_culprit_and_its_gain_is_measured_on_own_time() {
    let root = log_root("frontier-culprit");
    run_ok(
        preloaded(&trainer_sim(), &root, "job")
            .args(["--ranks", "8", "--steps", "12", "--stage-ms", "data=20,fwd=30,bwd=40,callbacks=2,optim=10"])
            .args(["--jitter-ms", "2", "--seed", "4", "--launch", "blocking"])
            .env("SF_INJECT", "delay:rank=4,stage=data.next_wait,ms=20,step=2-11"),
    );
    let report = frontier_json(&root.join("job"));
    assert_eq!(report["own_time"], true);
    let window = &report["windows"][0];
    let culprit = &window["culprits"][0];
    assert_eq!((&culprit["rank"], &culprit["stage"]), (&4.into(), &"data.next_wait".into()), "{window}");
    assert_eq!(window["culprits"].as_array().unwrap().len(), 1, "{window}");
    // 20 ms a step for each of 7 peers over 10 of 12 steps: 1.4 s, less what jitter hides.
    assert!(culprit["stage_caused_s"].as_f64().unwrap() > 1.0, "{culprit}");
    let delay = culprit["delay_per_step_s"].as_f64().unwrap();
    assert!((0.010..0.030).contains(&delay), "{culprit}");
    // On raw stage times the peers' wait stays in their backward and clipping the stall
    // gains nothing (<= 0.001); on own time it gains its part of the step back.
    assert!(window["gains"]["data.next_wait"].as_f64().unwrap() > 0.01, "{window}");
    // The waiting sits in the peers' backward, and the measured W_s says so.
    let waits = &window["wait_s"];
    assert!(waits["model.backward_cpu_wall"].as_f64() > waits["data.next_wait"].as_f64(), "{waits}");
    let measured = report["sync_wait"]["measured"].as_array().unwrap();
    assert!(measured.iter().any(|s| s == "step.other_cpu_wall"), "the loss allgather waits: {report}");
    let human = Command::new(artifact("sf")).arg("frontier").arg(root.join("job")).output().unwrap();
    assert_eq!(human.status.code(), Some(4), "a culprit is a finding");
    let text = String::from_utf8_lossy(&human.stdout);
    let culprit_line = text.lines().position(|l| l.starts_with("CULPRIT rank 4 in data.next_wait: "));
    let routing_line = text.lines().position(|l| l.starts_with("routing set "));
    assert!(culprit_line.is_some() && culprit_line < routing_line, "{text}");
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
            .args(["--jitter-ms", "5", "--seed", "11", "--launch", "blocking"]),
    );
    let report = frontier_json(&root.join("job"));
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
