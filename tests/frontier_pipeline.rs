//! `sf frontier` on a pipelined job compares ranks that do the same work: sf-trainer-sim's
//! 1F1B pipeline (`--tp 2 --pp 2 --dp 2`), its second pipeline stage's backward planted
//! 25 ms slower on every rank of that stage (`--slow-stage 1:bwd:25`). Compared as one
//! cohort, every rank deviated and the frontier stopped at `role_aware_needed`; compared
//! per pipeline stage (as `sf roles` finds them), each stage's ranks get their own windows.

mod common;

use std::process::Command;

use common::*;
use serde_json::Value;

fn frontier_json(dir: &std::path::Path) -> Value {
    let out = Command::new(artifact("sf")).arg("frontier").arg(dir).arg("--json").output().expect("spawn sf");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("one JSON object ({e}): {}", String::from_utf8_lossy(&out.stderr)))
}

fn labels(w: &Value) -> Vec<String> {
    w["labels"].as_array().unwrap().iter().map(|l| l["label"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_pipelined_job_is_compared_per_pipeline_stage_not_as_one_cohort() {
    let _serial = one_at_a_time();
    let root = log_root("frontier-pipeline");
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(trainer_args(8, 12))
        .args(["--stage-ms", "data=1,fwd=10,bwd=15,callbacks=1,optim=1", "--bucket-elems", "64"])
        .args(["--tp", "2", "--pp", "2", "--dp", "2", "--slow-stage", "1:bwd:25"]);
    run_ok(&mut cmd);
    let report = frontier_json(&root.join("job"));
    assert_eq!(report["compared_by"], "pipeline_stage", "{report}");
    assert_eq!(report["layout"], "tp=2 pp=2 dp=2", "{report}");
    let windows = report["windows"].as_array().unwrap();
    // rank = tp + 2 dp + 4 pp: stage 0 holds ranks 0-3, stage 1 ranks 4-7.
    for (stage, group) in [(0, [0, 1, 2, 3]), (1, [4, 5, 6, 7])] {
        let mine: Vec<&Value> = windows.iter().filter(|w| w["pp_stage"] == stage).collect();
        assert!(!mine.is_empty(), "no window for pipeline stage {stage}: {report}");
        for w in mine {
            assert_eq!(w["ranks"], 4, "{w}");
            assert!(!labels(w).contains(&"role_aware_needed".to_string()), "{w}");
            let leaders = w["leader_ranks"].as_object().unwrap().values().flat_map(|r| r.as_array().unwrap().clone());
            let named = leaders.chain(w["culprits"].as_array().unwrap().iter().map(|c| c["rank"].clone()));
            for rank in named {
                assert!(group.contains(&rank.as_u64().unwrap()), "rank {rank} outside stage {stage}: {w}");
            }
        }
    }
    assert_eq!(report["world"], 8);
    // Every step's stage 1 is slow alike: nothing on the path stands out from its own
    // expected duration, so no path finding.
    assert!(report["path_finding"].is_null(), "{report}");

    let human = Command::new(artifact("sf")).arg("frontier").arg(root.join("job")).output().unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("layout tp=2 pp=2 dp=2: each pipeline stage's ranks are compared among themselves"),
        "{text}"
    );
    assert!(text.contains("pipeline stage 0:") && text.contains("pipeline stage 1:"), "{text}");
}

#[test]
fn a_flat_job_is_compared_as_one_cohort() {
    let _serial = one_at_a_time();
    let root = log_root("frontier-flat");
    run_ok(preloaded(&trainer_sim(), &root, "job").args(trainer_args(4, 4)));
    let report = frontier_json(&root.join("job"));
    assert_eq!(report["compared_by"], "job", "{report}");
    assert!(report["layout"].is_null(), "{report}");
    assert!(report["windows"].as_array().unwrap().iter().all(|w| w["pp_stage"].is_null()), "{report}");
}
