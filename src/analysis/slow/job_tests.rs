//! `analyze_job` over synthetic synchronous jobs: the late rank's peers wait for it in the
//! last stage, as DDP ranks wait in the backward allreduce, so every rank's iterations slow
//! down and only the frontier-aware detectors can name the late one.

use super::job::{analyze_job, RankSeries, RegressionFinding, SlowParams};
use super::l1::L1Class;
use crate::core::rng::SplitMix64;

/// Stages data, fwd, bwd of 20, 30, 40 ms with 1% noise, `ranks` ranks, `steps` steps.
/// `delay(step, rank) -> (stage, seconds)` makes a rank late; every other rank then waits
/// the largest delay of that step in bwd.
fn job(ranks: u32, steps: u64, delay: impl Fn(u64, u32) -> Option<(usize, f64)>) -> Vec<RankSeries> {
    let mut rng = SplitMix64::new(11);
    let base = [0.020, 0.030, 0.040];
    (0..ranks)
        .map(|rank| {
            let mut series =
                RankSeries { rank, group: "job".into(), steps: Vec::new(), wall_s: Vec::new(), durations: Vec::new() };
            for step in 0..steps {
                let mut d: Vec<f64> = base.iter().map(|b| b * (1.0 + 0.01 * rng.normal())).collect();
                let late = (0..ranks).filter_map(|r| delay(step, r).map(|x| x.1)).fold(0.0, f64::max);
                match delay(step, rank) {
                    Some((stage, s)) => {
                        d[stage] += s;
                        d[2] += late - s;
                    }
                    None => d[2] += late,
                }
                series.steps.push(step);
                series.wall_s.push(d.iter().sum());
                series.durations.push(d);
            }
            series
        })
        .collect()
}

#[test]
fn a_healthy_job_reports_nothing() {
    let report = analyze_job(&job(8, 60, |_, _| None), 3, &SlowParams::default());
    assert!(!report.found(), "{report:#?}");
    assert!(report.l1.iter().all(|r| r.class == L1Class::Stable));
    assert_eq!(report.l2.len(), 3);
    assert!((report.median_step_s - 0.09).abs() < 0.005);
}

#[test]
fn a_regression_on_one_rank_names_it_and_its_stage_by_all_three_levels() {
    let report = analyze_job(
        &job(8, 60, |step, rank| (rank == 3 && step >= 30).then_some((0, 0.03))),
        3,
        &SlowParams::default(),
    );
    // L1: every rank slows down from step 30; the late rank's growth is in data, the
    // others' in bwd, where they wait.
    for r in &report.l1 {
        let g = r.regression.as_ref().unwrap_or_else(|| panic!("rank {}: {r:?}", r.rank));
        assert!(g.step.abs_diff(30) <= 1 && (g.ratio - 4.0 / 3.0).abs() < 0.03, "{g:?}");
        assert_eq!(g.stage.unwrap().stage, if r.rank == 3 { 0 } else { 2 }, "rank {}", r.rank);
    }
    let top = &report.slow_ranks[0];
    assert_eq!((top.rank, top.stage, top.detectors()), (3, 0, 3), "{:#?}", report.slow_ranks);
    assert!(top.l1_regression && top.l2.unwrap().0 > 2.0);
    // Slow from step 30 on, every step, against T_expect ~ 20 ms.
    assert_eq!(top.expected, Some((30, 60)));
    let e = report.expected.iter().find(|e| e.rank == 3).unwrap();
    assert_eq!(e.steps.first(), Some(&30));
    assert!((e.expected_s - 0.020).abs() < 0.001 && e.worst_ratio > 2.3);
    // The waiting ranks are not named in bwd: their bwd is the same everywhere.
    assert!(report.slow_ranks.iter().all(|s| s.rank == 3), "{:#?}", report.slow_ranks);
}

#[test]
fn a_short_spike_is_jitter_with_its_width_rank_and_stage() {
    let report = analyze_job(
        &job(4, 60, |step, rank| (rank == 2 && (40..43).contains(&step)).then_some((1, 0.15))),
        3,
        &SlowParams::default(),
    );
    for r in &report.l1 {
        assert_eq!(r.class, L1Class::Jitter, "rank {}: {r:?}", r.rank);
        let j = &r.jitter[0];
        assert_eq!((j.effective, j.effective_width), (Some((40, 42)), 3));
        assert_eq!(j.stage.unwrap().stage, if r.rank == 2 { 1 } else { 2 });
    }
    // Expected time sees the three slow steps at fwd, on rank 2.
    let top = &report.slow_ranks[0];
    assert_eq!((top.rank, top.stage), (2, 1), "{:#?}", report.slow_ranks);
    assert_eq!(top.expected, Some((3, 60)));
    assert!(top.l1_jitter);
    assert!(report.slow_ranks.iter().all(|s| s.rank == 2), "{:#?}", report.slow_ranks);
}

#[test]
fn one_slow_step_and_small_effects_are_not_slow_ranks() {
    // One descheduled step: jitter, but not a slow rank by expected time (2 steps needed).
    let once =
        analyze_job(&job(4, 60, |step, rank| (rank == 1 && step == 20).then_some((0, 0.1))), 3, &SlowParams::default());
    assert!(once.expected.is_empty(), "{:#?}", once.expected);
    // ...and 100 ms once in 60 steps costs 1.7 ms a step, under the effect floor (5% of
    // 90 ms): L1 sees the spike, but it is not a finding.
    assert!(!once.found(), "{:#?}", once.l1);
    assert!((once.floor_s - 0.0045).abs() < 0.0003, "{}", once.floor_s);
    let strict = SlowParams { min_effect: 0.0, min_effect_s: 0.0, ..SlowParams::default() };
    let spike = analyze_job(&job(4, 60, |step, rank| (rank == 1 && step == 20).then_some((0, 0.1))), 3, &strict);
    assert!(spike.l1.iter().any(|r| r.jitter.iter().any(|j| j.effective.is_some())), "without the floor L1 keeps it");
    // A 3 ms persistent excess on a 90 ms step is below the floor too.
    let small = analyze_job(&job(4, 60, |_, rank| (rank == 1).then_some((0, 0.003))), 3, &SlowParams::default());
    assert!(small.slow_ranks.is_empty() && !small.found(), "{:#?}", small.slow_ranks);
    let named = analyze_job(&job(4, 60, |_, rank| (rank == 1).then_some((0, 0.003))), 3, &strict);
    assert!(named.slow_ranks.iter().any(|s| (s.rank, s.stage) == (1, 0) && s.l2.is_some()), "{:#?}", named.slow_ranks);
}

#[test]
fn groups_are_compared_apart() {
    // Two roles: ranks 0-3 have twice the data time of ranks 4-7. As one group, data is
    // severely imbalanced; split by role, both groups are balanced.
    use super::stragglers::Imbalance;
    let mut ranks = job(8, 40, |_, rank| (rank < 4).then_some((0, 0.02)));
    let merged = analyze_job(&ranks, 3, &SlowParams::default());
    assert_eq!(merged.l2[0].assessment.imbalance, Imbalance::Severe);
    for r in &mut ranks {
        r.group = if r.rank < 4 { "a".into() } else { "b".into() };
    }
    let split = analyze_job(&ranks, 3, &SlowParams::default());
    assert!(split.l2.iter().all(|g| g.stragglers.is_empty()), "{:#?}", split.l2);
    assert!(split.l2.iter().filter(|g| g.stage == 0).all(|g| g.assessment.imbalance == Imbalance::Balanced));
    assert_eq!(split.l2.len(), 6);
}

#[test]
fn a_regression_every_rank_shares_is_one_event_naming_the_rank_that_caused_it() {
    let report = analyze_job(
        &job(8, 60, |step, rank| (rank == 3 && step >= 30).then_some((0, 0.03))),
        3,
        &SlowParams::default(),
    );
    let shared = report.job_regression.as_ref().expect("one job-wide regression");
    assert_eq!(shared.ranks, (0..8).collect::<Vec<u32>>());
    assert!(shared.step.abs_diff(30) <= 1 && (shared.ratio - 4.0 / 3.0).abs() < 0.03, "{shared:?}");
    let cause = shared.cause.as_ref().expect("the frontier names the cause");
    assert_eq!((cause.rank, cause.stage), (3, 0), "{cause:?}");
    assert!((cause.growth_s - 0.03).abs() < 0.003 && cause.led_steps == cause.steps, "{cause:?}");
    assert!(report.l1.iter().all(|r| r.regression.as_ref().is_some_and(|g| g.job_wide)));
    // Every rank slowing down alike, as a shared input would: one event, no single cause.
    let all = analyze_job(&job(8, 60, |step, _| (step >= 30).then_some((0, 0.03))), 3, &SlowParams::default());
    let shared = all.job_regression.as_ref().expect("one job-wide regression");
    assert_eq!((shared.ranks.len(), &shared.cause), (8, &None), "{shared:?}");
    assert!(shared.finding && all.found(), "a third slower is a finding, cause or not");
    // Every rank 7% slower alike, no rank behind it: what a host's load does. Shown, but
    // under twice the floor (2 x 4.5 ms) it is no finding.
    let host = analyze_job(&job(8, 60, |step, _| (step >= 30).then_some((0, 0.006))), 3, &SlowParams::default());
    let shared = host.job_regression.as_ref().expect("one job-wide regression");
    assert!(shared.cause.is_none() && !shared.finding && !host.found(), "{shared:?}");
}

#[test]
fn a_rank_reached_later_by_the_same_host_load_is_part_of_that_event() {
    // A CPU hog slows seven ranks 7% from step 30 and the eighth from step 38: one load,
    // reaching the last rank later. No finding, and the status says so (the healthy matrix
    // under a hog saw sf slow exit 4 under a headline of no finding).
    let load = analyze_job(
        &job(8, 60, |step, rank| (step >= if rank == 7 { 38 } else { 30 }).then_some((0, 0.006))),
        3,
        &SlowParams::default(),
    );
    let shared = load.job_regression.as_ref().expect("one job-wide regression");
    assert!(!shared.finding && shared.ranks.contains(&7), "{shared:?}");
    assert!(!load.found(), "{:?}", load.l1.iter().map(|r| &r.regression).collect::<Vec<_>>());
    // The same late rank regressing by a finding's cost is its own finding.
    let own = analyze_job(
        &job(8, 60, |step, rank| match rank {
            7 => (step >= 38).then_some((0, 0.03)),
            _ => (step >= 30).then_some((0, 0.006)),
        }),
        3,
        &SlowParams::default(),
    );
    assert!(own.found(), "{:?}", own.job_regression);
}

#[test]
fn a_ranks_own_regression_under_twice_the_floor_is_no_finding() {
    // What the quiet healthy run of the matrix saw: one rank's own step time up x1.06,
    // 1.1 effect floors, L1 alone. Twice the floor is a finding.
    let report = analyze_job(&job(8, 60, |_, _| None), 3, &SlowParams::default());
    let own = |excess_s: f64| RegressionFinding {
        step: 30,
        mean_before_s: 0.09,
        mean_after_s: 0.09 + excess_s,
        ratio: (0.09 + excess_s) / 0.09,
        cv_before: 0.01,
        cv_after: 0.01,
        stage: None,
        job_wide: false,
    };
    assert!(!report.own_regression_found(&own(1.1 * report.floor_s)));
    assert!(report.own_regression_found(&own(2.0 * report.floor_s)));
    assert!(!report.own_regression_found(&RegressionFinding { job_wide: true, ..own(3.0 * report.floor_s) }));
}

#[test]
fn a_one_rank_job_has_no_stragglers() {
    // Its own slow stage from step 30 on: a regression of the job, never a straggler.
    let report = analyze_job(&job(1, 60, |step, _| (step >= 30).then_some((0, 0.03))), 3, &SlowParams::default());
    assert_eq!(report.skipped_groups, [("job".to_string(), 1)]);
    assert!(report.l2.is_empty() && report.expected.is_empty() && report.slow_ranks.is_empty(), "{report:#?}");
    assert!(report.l1[0].regression.is_some() && report.job_regression.is_none());
    // Healthy, it reports nothing at all.
    let healthy = analyze_job(&job(1, 60, |_, _| None), 3, &SlowParams::default());
    assert!(!healthy.found(), "{healthy:#?}");
}

#[test]
fn one_rank_groups_are_compared_together() {
    // --group-by local-rank on one node: a group per rank. Merged, rank 3 is still found,
    // and no rank is named for its own noise.
    let mut ranks = job(8, 60, |step, rank| (rank == 3 && step >= 30).then_some((0, 0.03)));
    for r in &mut ranks {
        r.group = format!("local_rank {}", r.rank);
    }
    let report = analyze_job(&ranks, 3, &SlowParams::default());
    assert_eq!(report.merged_groups.len(), 8);
    assert!(report.slow_ranks.iter().all(|s| s.rank == 3 && s.group == "merged"), "{:#?}", report.slow_ranks);
    assert_eq!((report.slow_ranks[0].rank, report.slow_ranks[0].stage), (3, 0));
    let mut healthy = job(8, 60, |_, _| None);
    for r in &mut healthy {
        r.group = format!("local_rank {}", r.rank);
    }
    assert!(!analyze_job(&healthy, 3, &SlowParams::default()).found());
}

#[test]
fn a_regression_under_a_millisecond_is_no_finding() {
    // 10 ms steps that grow by 0.8 ms (x1.08) from step 30 on every rank: L1 sees the
    // step, but 0.8 ms is under the 1 ms floor.
    let mut rng = SplitMix64::new(5);
    let ranks: Vec<RankSeries> = (0..4)
        .map(|rank| {
            let wall: Vec<f64> = (0..60u64)
                .map(|s| (0.010 + if s >= 30 { 0.0008 } else { 0.0 }) * (1.0 + 0.002 * rng.normal()))
                .collect();
            RankSeries {
                rank,
                group: "job".into(),
                steps: (0..60).collect(),
                durations: wall.iter().map(|&w| vec![w]).collect(),
                wall_s: wall,
            }
        })
        .collect();
    let report = analyze_job(&ranks, 1, &SlowParams::default());
    assert!(!report.found() && report.l1.iter().all(|r| r.regression.is_none()), "{report:#?}");
    let strict = SlowParams { min_effect: 0.0, min_effect_s: 0.0, ..SlowParams::default() };
    let seen = analyze_job(&ranks, 1, &strict);
    assert!(seen.job_regression.is_some(), "without the floor: {:#?}", seen.l1);
}
