//! Step and stage markers from a real job (sf-trainer-sim's C-API markers under the
//! preloaded library) become one stage vector per step, and SF_INJECT stage rules lengthen
//! the selected stage on the selected rank and steps.

mod common;

use common::*;
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::{InjectAction, RecordBody, StepVector};

/// Per step: (stage name, ms) in order.
fn step_vectors(log: &RankLog) -> Vec<(u64, Vec<(String, f64)>)> {
    let names = log.stage_names();
    let vectors: Vec<StepVector> = log
        .records()
        .0
        .into_iter()
        .filter_map(|r| match r.body {
            RecordBody::StepVector(v) => Some(v),
            _ => None,
        })
        .collect();
    vectors
        .iter()
        .map(|v| {
            let stages =
                v.stages().map(|(id, ns)| (names[id as usize].clone().unwrap_or_default(), ns as f64 / 1e6)).collect();
            (v.step, stages)
        })
        .collect()
}

#[test]
fn every_step_becomes_an_ordered_stage_vector() {
    let root = log_root("stages");
    run_ok(preloaded(&trainer_sim(), &root, "job").args([
        "--ranks",
        "2",
        "--steps",
        "8",
        "--stage-ms",
        "data=6,fwd=3,bwd=8,callbacks=1,optim=2",
        // Every stage all host time, as the lower bounds below assume.
        "--launch",
        "blocking",
    ]));
    for path in rank_logs(&root, "job") {
        let log = RankLog::open(&path).unwrap();
        let steps = step_vectors(&log);
        assert_eq!(steps.iter().map(|s| s.0).collect::<Vec<_>>(), (0..8).collect::<Vec<_>>());
        for (step, stages) in &steps {
            let names: Vec<&str> = stages.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, TRAINER_STAGES, "step {step}");
            for ((name, ms), at_least) in stages.iter().zip([6.0, 3.0, 8.0, 1.0, 2.0, 0.0]) {
                assert!(*ms >= at_least && *ms < at_least + 200.0, "step {step} {name}: {ms} ms");
            }
        }
        assert_eq!(log.position().0, Some(7), "the last step stays the rank's position");
    }
}

#[test]
fn a_stage_rule_lengthens_that_stage_on_that_rank_in_those_steps() {
    let root = log_root("stage-inject");
    run_ok(
        preloaded(&trainer_sim(), &root, "job")
            .args(["--ranks", "3", "--steps", "8", "--stage-ms", "data=1,fwd=1,bwd=2,callbacks=0,optim=0"])
            .env("SF_INJECT", "delay:rank=1,stage=data.next_wait,ms=120,step=3-5"),
    );
    let logs = rank_logs(&root, "job");
    for (rank, path) in logs.iter().enumerate() {
        let log = RankLog::open(path).unwrap();
        for (step, stages) in step_vectors(&log) {
            let data_ms = stages[0].1;
            let delayed = rank == 1 && (3..=5).contains(&step);
            assert_eq!(data_ms >= 120.0, delayed, "rank {rank} step {step}: data.next_wait {data_ms} ms");
        }
        let fired: Vec<_> = log
            .records()
            .0
            .into_iter()
            .filter_map(|r| match r.body {
                RecordBody::Injection(i) => Some(i),
                _ => None,
            })
            .collect();
        if rank != 1 {
            assert!(fired.is_empty());
            continue;
        }
        let names = log.stage_names();
        assert_eq!(fired.iter().map(|i| i.step).collect::<Vec<_>>(), [Some(3), Some(4), Some(5)]);
        for i in fired {
            assert_eq!((i.action, i.op, i.delay_ns), (InjectAction::Delay, None, 120_000_000));
            assert_eq!(i.stage.and_then(|id| names[id as usize].clone()).as_deref(), Some("data.next_wait"));
        }
    }
}
