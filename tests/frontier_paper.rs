//! The paper's own numbers and fixtures, through the library: Figures 1 and 2, the
//! two-rank co-critical case of Sec. 4, the four downgrade fixtures of Sec. 6.1, and the
//! labels' other triggers and windowing rules.

mod common;

use std::sync::Arc;

use stagefrontier::analysis::frontier::{
    analyze, step_frontier, Close, Context, LabelKind, Schema, Step, StepError, Window,
};

fn schema(stages: &[&str]) -> Arc<Schema> {
    Arc::new(Schema::new(stages.iter().map(|s| s.to_string()).collect()).unwrap())
}

/// One window over `steps`, each an R×S row-major matrix, every rank present.
fn window(stages: &[&str], ranks: usize, steps: &[Vec<f64>], context: Context) -> Window {
    common::single_window(&schema(stages), ranks, steps, context)
}

fn kinds(w: &Window) -> Vec<LabelKind> {
    w.labels.iter().map(|l| l.kind).collect()
}

fn reason(w: &Window, kind: LabelKind) -> &str {
    &w.labels.iter().find(|l| l.kind == kind).unwrap_or_else(|| panic!("no {kind:?} in {:?}", w.labels)).reason
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
}

const FIGURE_1: [f64; 9] = [6.0, 1.0, 1.2, 1.0, 1.0, 6.2, 1.1, 1.0, 6.0];

#[test]
fn figure_1_advances_exposed_time_and_per_stage_max() {
    let w = window(&["data", "fwd", "bwd"], 3, &[FIGURE_1.to_vec()], Context::default());
    assert!(close(&w.advances_s, &[6.0, 1.0, 1.2]), "{:?}", w.advances_s);
    assert!((w.exposed_s - 8.2).abs() < 1e-12);
    assert!((w.baselines.per_stage_max_s.iter().sum::<f64>() - 13.2).abs() < 1e-12);
    assert_eq!(w.routing.as_ref().unwrap().top1, 0);
    assert_eq!(w.leaders[0].ranks, [0]);
    // The per-stage max sends you to backward, where ranks 1 and 2 only waited.
    assert_eq!(stagefrontier::analysis::frontier::ranked(&w.baselines.per_stage_max_s)[0], 2);
}

#[test]
fn figure_2_a_different_rank_bounds_each_boundary() {
    // r0 reaches data last, r1 forward, r2 backward: advances 4.0 + 2.0 + 2.5 = 8.5.
    let d = vec![4.0, 1.0, 1.0, 3.0, 3.0, 1.0, 2.0, 2.0, 4.5];
    let f = step_frontier(&d, 3);
    assert!(close(&f.advances, &[4.0, 2.0, 2.5]));
    assert_eq!(f.exposed(), 8.5);
    let w = window(&["data", "fwd", "bwd"], 3, &[d], Context::default());
    let leaders: Vec<Vec<u32>> = w.leaders.iter().map(|l| l.ranks.clone()).collect();
    assert_eq!(leaders, [vec![0], vec![1], vec![2]]);
}

#[test]
fn two_rank_case_is_co_critical_between_data_and_backward() {
    let w = window(&["data", "backward"], 2, &[vec![10.0, 0.0, 0.0, 10.0]], Context::default());
    assert_eq!(w.advances_s, [10.0, 0.0]);
    assert_eq!(kinds(&w), [LabelKind::FrontierAccounting, LabelKind::CoCritical]);
    assert_eq!(w.co_critical_stages, [0, 1]);
}

/// Sec. 6.1 downgrade fixture: ranks in two roles (forward-heavy, backward-heavy).
#[test]
fn downgrade_fixture_role_heterogeneous() {
    let step: Vec<f64> = (0..8).flat_map(|r| if r < 4 { [1.0, 2.0, 5.0] } else { [1.0, 5.0, 2.0] }).collect();
    let w = window(&["data", "fwd", "bwd"], 8, &vec![step; 10], Context::default());
    assert_eq!(kinds(&w), [LabelKind::FrontierAccounting, LabelKind::RoleAwareNeeded]);
    assert!(reason(&w, LabelKind::RoleAwareNeeded).contains("8 of 8 ranks"));
}

/// Sec. 6.1 downgrade fixture: the residual stage holds 10% of the time.
#[test]
fn downgrade_fixture_telemetry_limited() {
    let stages = ["data", "fwd", "bwd", "step.other_cpu_wall"];
    let step: Vec<f64> = (0..4).flat_map(|r| [5.0 + r as f64, 1.0, 3.0, 1.0]).collect();
    let w = window(&stages, 4, std::slice::from_ref(&step), Context::default());
    assert_eq!(kinds(&w), [LabelKind::FrontierAccounting, LabelKind::TelemetryLimited]);
    assert!(reason(&w, LabelKind::TelemetryLimited).contains("residual stage holds 0.0"));
    // Within the 0.05 gate it is fine (and naming no residual stage disables the check).
    let closed: Vec<f64> = step.iter().enumerate().map(|(i, v)| if i % 4 == 3 { 0.1 } else { *v }).collect();
    let w = window(&stages, 4, &[closed], Context::default());
    assert!(!kinds(&w).contains(&LabelKind::TelemetryLimited));
    let w = window(&stages, 4, &[step], Context { residual_stage: None, ..Context::default() });
    assert!(!kinds(&w).contains(&LabelKind::TelemetryLimited));
}

/// Table 13's overlap-error gate: explicit stages that exceed the step's wall time by more
/// than 1% of all rank time (nested or double-counted stages) limit the telemetry.
#[test]
fn overlap_error_above_one_percent_limits_the_telemetry() {
    let stages = ["data", "fwd", "bwd"];
    let schema = schema(&stages);
    let ids = [0u32, 1, 2, 3];
    let durations: Vec<f64> = (0..4).flat_map(|r| [5.0 + r as f64, 1.0, 3.0]).collect();
    let analyze_with = |overlap: &[f64]| {
        let step = Step {
            index: 0,
            schema: &schema,
            world: 4,
            ranks: &ids,
            missing: &[],
            durations: &durations,
            overlap_s: overlap,
            device: &[],
        };
        analyze([step], Context::default(), None).unwrap().remove(0)
    };
    // Rank time is 42 s: 0.6 s of overlap is 1.4%, 0.3 s is 0.7%.
    let w = analyze_with(&[0.6, 0.0, 0.0, 0.0]);
    assert!((w.overlap_share.unwrap() - 0.6 / 42.0).abs() < 1e-12);
    assert!(kinds(&w).contains(&LabelKind::TelemetryLimited));
    assert!(reason(&w, LabelKind::TelemetryLimited).contains("nested or double-counted"));
    let w = analyze_with(&[0.3, 0.0, 0.0, 0.0]);
    assert!(!kinds(&w).contains(&LabelKind::TelemetryLimited));
    let w = analyze_with(&[]);
    assert_eq!(w.overlap_share, None, "a CSV cannot tell");
    let mismatched = Step {
        index: 0,
        schema: &schema,
        world: 4,
        ranks: &ids,
        missing: &[],
        durations: &durations,
        overlap_s: &[0.1],
        device: &[],
    };
    assert!(matches!(analyze([mismatched], Context::default(), None), Err(StepError::Shape { .. })));
}

/// Sec. 6.1 downgrade fixture: two stages tied for the lead.
#[test]
fn downgrade_fixture_two_stage_tied() {
    let step: Vec<f64> = (0..4).flat_map(|r| [4.5 + 0.01 * r as f64, 1.0, 4.4]).collect();
    let w = window(&["data", "fwd", "bwd"], 4, &[step], Context::default());
    assert_eq!(kinds(&w), [LabelKind::FrontierAccounting, LabelKind::CoCritical]);
    assert!(reason(&w, LabelKind::CoCritical).contains("data and bwd have shares within 0.05"));
    assert_eq!(w.co_critical_stages, [0, 2]);
}

#[test]
fn direct_exposure_when_clipping_the_tail_gains_it_back() {
    // Rank 3's optimizer runs 3 s over, at the end of the step: nobody waits for it.
    let step: Vec<f64> = (0..8).flat_map(|r| [1.0, 1.0, if r == 3 { 4.0 } else { 1.0 }]).collect();
    let w = window(&["data", "bwd", "optim"], 8, &vec![step; 5], Context::default());
    assert_eq!(kinds(&w), [LabelKind::FrontierAccounting, LabelKind::DirectExposure]);
    assert!((w.gains.as_ref().unwrap()[2] - 0.5).abs() < 1e-12);
    assert_eq!(w.leaders[2].ranks, [3]);
}

#[test]
fn model_fit_turns_low_gain_into_sync_wait_evidence() {
    let context = Context { model_fit: vec!["data".into()], ..Context::default() };
    let w = window(&["data", "fwd", "bwd"], 3, &[FIGURE_1.to_vec()], context);
    assert_eq!(kinds(&w), [LabelKind::FrontierAccounting, LabelKind::SyncWaitDependent, LabelKind::LikelySyncWait]);
    assert!(reason(&w, LabelKind::LikelySyncWait).contains("grows there by 0.598"), "{:?}", w.labels);
    assert!(w.co_critical_stages.is_empty());
}

#[test]
fn a_leader_rank_that_keeps_switching_is_co_critical() {
    // Each step another of four ranks stalls in data; the others wait in backward.
    let steps: Vec<Vec<f64>> = (0..8)
        .map(|t| (0..4).flat_map(|r| if r == t % 4 { [5.0, 1.0, 1.0] } else { [1.0, 1.0, 5.0] }).collect())
        .collect();
    let w = window(&["data", "fwd", "bwd"], 4, &steps, Context::default());
    assert_eq!((w.leaders[0].confident_steps, w.leaders[0].switches), (8, 7));
    assert!(reason(&w, LabelKind::CoCritical).contains("changed in 7 of 7 transitions"), "{:?}", w.labels);
}

#[test]
fn collapsed_accumulation_is_ambiguous_and_unfolded_is_not() {
    let context = Context { accumulation: Some(2), ..Context::default() };
    let step = vec![1.0, 2.0, 1.5, 2.5];
    let w = window(&["data", "bwd"], 2, &[step], context.clone());
    assert!(kinds(&w).contains(&LabelKind::GradientAccumulationAmbiguous));
    let step = vec![0.5, 1.0, 0.5, 1.0, 0.7, 1.2, 0.8, 1.3];
    let w = window(&["data@0", "bwd@0", "data@1", "bwd@1"], 2, &[step], context);
    assert!(!kinds(&w).contains(&LabelKind::GradientAccumulationAmbiguous));
}

#[test]
fn one_rank_is_its_own_vector_with_no_cross_rank_labels() {
    let w = window(&["data", "fwd", "bwd"], 1, &[vec![6.0, 1.0, 1.2]], Context::default());
    assert_eq!(kinds(&w), [LabelKind::FrontierAccounting]);
    assert!(reason(&w, LabelKind::FrontierAccounting).contains("a single rank"));
    assert!(close(&w.advances_s, &[6.0, 1.0, 1.2]));
    assert!(w.gap_s.is_none());
}

#[test]
fn a_tiny_denominator_gives_raw_advances_only() {
    let w = window(&["data", "bwd"], 2, &[vec![0.0002, 0.0001, 0.0001, 0.0003]], Context::default());
    assert!(w.shares.is_none() && w.routing.is_none() && w.gains.is_none());
    assert!(close(&w.advances_s, &[0.0002, 0.0002]));
    assert_eq!(kinds(&w), [LabelKind::FrontierAccounting, LabelKind::TelemetryLimited]);
    assert!(reason(&w, LabelKind::TelemetryLimited).contains("raw advances only"));
}

#[test]
fn windows_close_on_length_schema_world_and_missing_ranks() {
    let (ab, abc) = (schema(&["a", "b"]), schema(&["a", "b", "c"]));
    let all: Vec<u32> = (0..4).collect();
    let three = [0u32, 1, 2];
    let d4 = [1.0; 8];
    let d3 = [1.0; 6];
    let d4c = [1.0; 12];
    let step = |index, schema, world, ranks, missing, durations| Step {
        index,
        schema,
        world,
        ranks,
        missing,
        durations,
        overlap_s: &[],
        device: &[],
    };
    let steps = vec![
        step(0, &ab, 4, &all[..], &[][..], &d4[..]),
        step(1, &ab, 4, &all[..], &[], &d4[..]),
        step(2, &ab, 4, &all[..], &[], &d4[..]),
        step(3, &ab, 4, &three[..], &[3], &d3[..]),
        step(4, &ab, 3, &three[..], &[], &d3[..]),
        step(5, &abc, 4, &all[..], &[], &d4c[..]),
    ];
    let windows = analyze(steps, Context::default(), Some(2)).unwrap();
    let shape: Vec<(u64, u64, Close)> = windows.iter().map(|w| (w.first_step, w.last_step, w.closed_by)).collect();
    assert_eq!(
        shape,
        [
            (0, 1, Close::Length),
            (2, 2, Close::RanksChange),
            (3, 3, Close::WorldChange),
            (4, 4, Close::SchemaChange),
            (5, 5, Close::End)
        ]
    );
    assert_eq!(windows[1].missing_ranks, Vec::<u32>::new());
    assert_eq!(windows[2].missing_ranks, [3]);
    assert!(reason(&windows[2], LabelKind::TelemetryLimited).contains("1 rank of a world of 4 missing"));
}

#[test]
fn malformed_steps_are_refused() {
    let s = schema(&["a", "b"]);
    let ids = [0u32, 1];
    let bad = [1.0, -0.5, 1.0, 1.0];
    let step = Step {
        index: 0,
        schema: &s,
        world: 2,
        ranks: &ids,
        missing: &[],
        durations: &bad,
        overlap_s: &[],
        device: &[],
    };
    let e = analyze([step], Context::default(), None).unwrap_err();
    assert!(matches!(e, StepError::Duration { rank: 0, ref stage, .. } if stage == "b"), "{e}");
    let ok = [1.0, -0.0, 1.0, 1.0];
    let later = Step { index: 5, durations: &ok, ..step };
    let earlier = Step { index: 4, durations: &ok, ..step };
    assert!(matches!(analyze([later, earlier], Context::default(), None), Err(StepError::OutOfOrder { .. })));
}
