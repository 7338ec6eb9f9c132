//! The critical path of 1F1B steps whose lengths are known in closed form.

use super::*;

const F: u64 = 3_000;
const B: u64 = 5_000;

/// Stage `stage`'s 1F1B order: min(P-s-1, M) forwards, then one forward and one backward
/// in turn, then the remaining backwards.
fn one_f_one_b(stage: usize, stages: usize, microbatches: usize) -> Vec<(Pass, u64)> {
    let pass = |microbatch, phase| (Pass { stage, microbatch, phase }, if phase == Phase::Fwd { F } else { B });
    let warmup = (stages - stage - 1).min(microbatches);
    let mut order: Vec<(Pass, u64)> = (0..warmup).map(|m| pass(m, Phase::Fwd)).collect();
    for i in 0..microbatches - warmup {
        order.push(pass(warmup + i, Phase::Fwd));
        order.push(pass(i, Phase::Bwd));
    }
    order.extend((microbatches - warmup..microbatches).map(|m| pass(m, Phase::Bwd)));
    order
}

fn step(stages: usize, microbatches: usize) -> StepPasses {
    StepPasses { stages: (0..stages).map(|s| one_f_one_b(s, stages, microbatches)).collect(), ..Default::default() }
}

#[test]
fn a_uniform_1f1b_step_takes_m_plus_p_minus_1_passes() {
    for (stages, microbatches) in [(1, 3), (2, 4), (4, 8), (4, 4), (3, 2)] {
        let path = step(stages, microbatches).critical_path().expect("no cycle");
        assert_eq!(path.length_ns, (microbatches + stages - 1) as u64 * (F + B), "P={stages} M={microbatches}");
        let along: u64 = path.passes.iter().map(|p| if p.phase == Phase::Fwd { F } else { B }).sum();
        assert_eq!(along, path.length_ns, "the path's passes add up to the step: {:?}", path.passes);
        assert!(path.passes.iter().all(|p| path.slack_ns[p] == 0));
    }
}

#[test]
fn a_slowdown_within_a_pass_slack_is_absorbed_and_beyond_it_costs_the_excess() {
    let base = step(4, 8);
    let path = base.critical_path().unwrap();
    let (&loose, &slack) = path.slack_ns.iter().filter(|(_, &s)| s > 0).max_by_key(|(_, &s)| s).expect("a bubble");
    let own = if loose.phase == Phase::Fwd { F } else { B };
    let absorbed = base.with_duration(loose, own + slack).critical_path().unwrap();
    assert_eq!(absorbed.length_ns, path.length_ns, "{loose:?} has {slack} ns of slack");
    let beyond = base.with_duration(loose, own + slack + 700).critical_path().unwrap();
    assert_eq!(beyond.length_ns, path.length_ns + 700);
    assert!(beyond.passes.contains(&loose), "a pass past its slack is on the path");
    // A pass on the path costs every ns it is late.
    let tight = path.passes[path.passes.len() / 2];
    let tight_own = if tight.phase == Phase::Fwd { F } else { B };
    assert_eq!(base.with_duration(tight, tight_own + 900).critical_path().unwrap().length_ns, path.length_ns + 900);
}

#[test]
fn an_order_no_pipeline_runs_is_refused() {
    // Stage 1 runs microbatch 0's backward before its forward, which needs stage 0's
    // backward, which needs stage 1's: a cycle.
    let p = |stage, phase| Pass { stage, microbatch: 0, phase };
    let steps = StepPasses {
        stages: vec![
            vec![(p(0, Phase::Fwd), 1), (p(0, Phase::Bwd), 1)],
            vec![(p(1, Phase::Bwd), 1), (p(1, Phase::Fwd), 1)],
        ],
        ..Default::default()
    };
    assert_eq!(steps.critical_path(), None);
}

#[test]
fn a_slow_pass_on_the_path_is_a_finding_and_one_in_a_bubble_is_absorbed() {
    // Five steps of two replicas; in step 3, replica 1 runs one pass slow.
    let base = step(4, 8);
    let path = base.critical_path().unwrap();
    let (&loose, &slack) = path.slack_ns.iter().filter(|(_, &s)| s > 0).max_by_key(|(_, &s)| s).unwrap();
    let tight = path.passes[path.passes.len() / 2];
    let own = |p: Pass| if p.phase == Phase::Fwd { F } else { B };
    // 5% of the 88 us step is 4.4 us: 6 us on the path is a finding, 1.5 us is not.
    for (pass, extra, on_path, finding) in
        [(tight, own(tight) * 2, true, true), (tight, own(tight) / 2, true, false), (loose, slack, false, false)]
    {
        let mut steps = vec![vec![base.clone(), base.clone()]; 5];
        steps[3][1] = base.with_duration(pass, own(pass) + extra);
        let slow = slowdowns(&steps);
        assert_eq!(slow.len(), 1, "{slow:?}");
        let found = &slow[0];
        let at = (found.step, found.pipeline, found.stage, found.microbatch, found.phase);
        assert_eq!(at, (3, 1, pass.stage, Some(pass.microbatch), pass.phase));
        assert_eq!((found.on_path, found.finding), (on_path, finding));
        assert_eq!(found.added_ns, if on_path { extra } else { 0 });
        assert_eq!(found.expected_ns, own(pass));
    }
    // A pass slower in every step and replica is the job's normal, not a finding.
    let heavy = vec![vec![base.with_duration(tight, own(tight) * 2); 2]; 5];
    assert!(slowdowns(&heavy).is_empty());
}

#[test]
fn a_stage_slowed_a_little_in_every_microbatch_is_one_finding() {
    // The last stage's backwards each 10% slower in step 2: no pass reaches 20%, but
    // together they add 8 x 500 ns = 4 us to an 88 us step (4.5%)... so make it 15%.
    let base = step(4, 8);
    let mut slowed = base.clone();
    for m in 0..8 {
        slowed = slowed.with_duration(Pass { stage: 3, microbatch: m, phase: Phase::Bwd }, B + B * 15 / 100);
    }
    let mut steps = vec![vec![base.clone()]; 5];
    steps[2][0] = slowed;
    let slow = slowdowns(&steps);
    let found = &slow[0];
    assert!(found.finding, "{slow:?}");
    assert_eq!((found.step, found.stage, found.phase, found.microbatch), (2, 3, Phase::Bwd, None));
    assert_eq!(found.added_ns, 8 * B * 15 / 100);
}

#[test]
fn an_unjudged_pass_times_the_step_but_is_never_named() {
    // The tight pass slow in step 3 of replica 1: a finding when measured, nothing when its
    // time is only a bound (the step is still as long).
    let mut base = step(4, 8);
    let path = base.critical_path().unwrap();
    let tight = path.passes[path.passes.len() / 2];
    base.unjudged.insert(tight);
    let own = if tight.phase == Phase::Fwd { F } else { B };
    let mut steps = vec![vec![base.clone(), base.clone()]; 5];
    steps[3][1] = base.with_duration(tight, own * 3);
    assert_eq!(steps[3][1].critical_path().unwrap().length_ns, path.length_ns + 2 * own);
    assert!(slowdowns(&steps).is_empty(), "{:?}", slowdowns(&steps));
}

#[test]
fn a_slowdown_inside_a_span_of_two_is_named_as_the_span() {
    // The last stage as send/recv times it: each microbatch's forward carries its
    // backward's time too. Microbatch 5's backward twice as long in step 3.
    let mut base = step(4, 8);
    for m in 0..8 {
        let fwd = Pass { stage: 3, microbatch: m, phase: Phase::Fwd };
        let bwd = Pass { phase: Phase::Bwd, ..fwd };
        base = base.with_duration(fwd, F + B).with_duration(bwd, 0);
        base.merged.insert(fwd, bwd);
        base.unjudged.insert(bwd);
    }
    let mut steps = vec![vec![base.clone()]; 5];
    let slow = Pass { stage: 3, microbatch: 5, phase: Phase::Fwd };
    steps[3][0] = base.with_duration(slow, F + B + B);
    let found = &slowdowns(&steps)[0];
    assert!(found.finding, "{found:?}");
    assert_eq!((found.step, found.stage, found.phase, found.microbatch), (3, 3, Phase::Fwd, Some(5)));
    assert_eq!(found.merged_with, Some(Merged { phase: Phase::Bwd, microbatch: Some(5) }));
    assert_eq!(found.added_ns, B);
}
