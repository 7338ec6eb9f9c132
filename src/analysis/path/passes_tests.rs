//! Pass boundaries from exchanges, on timelines built from the schedule with known pass
//! times.

use super::*;
use crate::analysis::path::StepPasses;

const F: u64 = 3_000;
const B: u64 = 5_000;
/// Time inside each exchange (the host waiting for its neighbour).
const WAIT: u64 = 700;
/// The step's start before the first pass (data loading), and after the last exchange
/// until the stage's next other call.
const LEAD: u64 = 400;

fn own(pass: Pass) -> u64 {
    if pass.phase == Phase::Fwd {
        F + 10 * pass.microbatch as u64
    } else {
        B + 10 * pass.microbatch as u64
    }
}

/// Stage `stage`'s step run with each pass taking `own`, its exchanges `WAIT` long, and a
/// gradient reduction `LEAD` after its last pass.
fn timeline(stage: usize, stages: usize, microbatches: usize) -> StepCalls {
    let begin_ns = 1_000_000;
    let mut t = begin_ns + LEAD;
    let mut exchanges = Vec::new();
    for item in schedule(stage, stages, microbatches) {
        match item {
            Item::Compute(pass) => t += own(pass),
            Item::Exchange { sends, recvs } => {
                exchanges.push(Exchange { enter_ns: t, exit_ns: t + WAIT, sends, recvs, device: None });
                t += WAIT;
            }
        }
    }
    let others = [begin_ns + 1, t + LEAD].map(|enter_ns| OtherCall { enter_ns, device_start_ns: None }).to_vec();
    StepCalls { begin_ns, end_ns: t + 10 * LEAD, exchanges, others }
}

#[test]
fn a_middle_stage_passes_are_measured_between_its_exchanges() {
    for (stage, stages, microbatches) in [(1, 4, 8), (2, 4, 8), (1, 3, 1), (1, 4, 2), (2, 4, 3)] {
        let derived = derive(stage, stages, &timeline(stage, stages, microbatches)).expect("a 1F1B schedule");
        assert_eq!(derived.microbatches, microbatches);
        assert!(derived.unjudged.is_empty(), "stage {stage} of {stages}: {:?}", derived.unjudged);
        assert_eq!(derived.passes.len(), 2 * microbatches);
        for &(pass, ns) in &derived.passes {
            assert_eq!(ns, own(pass), "{pass:?}");
        }
    }
}

#[test]
fn the_last_stage_forward_and_backward_of_a_microbatch_are_one_judged_span() {
    let derived = derive(3, 4, &timeline(3, 4, 4)).unwrap();
    assert_eq!(derived.microbatches, 4);
    for m in 0..4 {
        let fwd = Pass { stage: 3, microbatch: m, phase: Phase::Fwd };
        let bwd = Pass { phase: Phase::Bwd, ..fwd };
        let of = |p| derived.passes.iter().find(|(q, _)| *q == p).map(|&(_, ns)| ns);
        assert_eq!((of(fwd), of(bwd)), (Some(own(fwd) + own(bwd)), Some(0)), "microbatch {m}");
        // The span is judged on its first pass; the second's 0 is no measurement.
        assert_eq!(derived.merged.get(&fwd), Some(&bwd));
        assert!(!derived.unjudged.contains(&fwd) && derived.unjudged.contains(&bwd), "microbatch {m}");
    }
}

#[test]
fn the_first_stage_is_bounded_by_the_step_start_and_its_next_call() {
    let step = timeline(0, 4, 8);
    let derived = derive(0, 4, &step).unwrap();
    let of = |m, phase| {
        let pass = Pass { stage: 0, microbatch: m, phase };
        (derived.passes.iter().find(|(q, _)| *q == pass).unwrap().1, derived.unjudged.contains(&pass))
    };
    // The first forward from the step's start, data loading included.
    assert_eq!(of(0, Phase::Fwd), (LEAD + own(Pass { stage: 0, microbatch: 0, phase: Phase::Fwd }), true));
    // Warm-up forwards lie between sends.
    assert_eq!(of(1, Phase::Fwd), (F + 10, false));
    // Backward 0 then forward 4 with no exchange between: one span, judged on the backward.
    assert_eq!(of(0, Phase::Bwd), (B + F + 40, false));
    assert_eq!(of(4, Phase::Fwd), (0, true));
    assert_eq!(derived.merged[&Pass { stage: 0, microbatch: 0, phase: Phase::Bwd }].microbatch, 4);
    // The cooldown's backwards between receives; the last one until the reduction.
    assert_eq!(of(5, Phase::Bwd), (B + 50, false));
    assert_eq!(of(7, Phase::Bwd), (B + 70 + LEAD, true));
}

#[test]
fn without_a_later_call_the_last_pass_ends_with_the_step() {
    let mut step = timeline(0, 2, 2);
    step.others.clear();
    let derived = derive(0, 2, &step).unwrap();
    let last = derived.passes.last().unwrap();
    assert_eq!(last.0, Pass { stage: 0, microbatch: 1, phase: Phase::Bwd });
    assert_eq!(last.1, B + 10 + 10 * LEAD);
}

#[test]
fn exchanges_no_1f1b_schedule_makes_are_not_derived() {
    let mut step = timeline(1, 4, 8);
    step.exchanges.swap(0, 1);
    assert_eq!(derive(1, 4, &step), None, "a send where 1F1B receives");
    let mut lost = timeline(2, 4, 8);
    lost.exchanges.pop();
    assert_eq!(derive(2, 4, &lost), None, "an exchange missing");
    assert_eq!(derive(0, 1, &timeline(0, 2, 2)), None, "one stage is no pipeline");
}

#[test]
fn derived_stages_give_the_critical_path_the_true_passes_give() {
    // The spans the pairs merge take as long as the pairs: the step's length is kept.
    let (stages, microbatches) = (4, 8);
    let derived: Vec<Derived> =
        (0..stages).map(|s| derive(s, stages, &timeline(s, stages, microbatches)).unwrap()).collect();
    let truth = StepPasses {
        stages: (0..stages)
            .map(|s| {
                let passes = schedule(s, stages, microbatches).into_iter().filter_map(|i| match i {
                    Item::Compute(pass) => Some((pass, own(pass))),
                    Item::Exchange { .. } => None,
                });
                passes.collect()
            })
            .collect(),
        ..StepPasses::default()
    };
    let from_exchanges = StepPasses {
        stages: derived.iter().map(|d| d.passes.clone()).collect(),
        unjudged: derived.iter().flat_map(|d| d.unjudged.iter().copied()).collect(),
        merged: derived.iter().flat_map(|d| d.merged.iter().map(|(a, b)| (*a, *b))).collect(),
    };
    let (want, got) = (truth.critical_path().unwrap(), from_exchanges.critical_path().unwrap());
    // Stage 0's first and last passes also hold the data loading and the time to the
    // reduction.
    assert_eq!(got.length_ns, want.length_ns + 2 * LEAD);
}

fn call(kind: CallKind, enter_ns: u64, exit_ns: u64, group_depth: u16) -> HostCall {
    HostCall { tid: 7, kind, enter_ns, exit_ns, group_depth, device: None }
}

#[test]
fn a_group_is_one_exchange_from_its_start_to_its_end_s_return() {
    let calls = [
        call(CallKind::GroupStart, 10, 11, 0),
        call(CallKind::Send, 12, 13, 1),
        call(CallKind::Recv, 14, 15, 1),
        call(CallKind::GroupEnd, 16, 90, 1),
        call(CallKind::Recv, 100, 180, 0),
        // A group of other calls (a bucketed reduction) and a lone collective.
        call(CallKind::GroupStart, 200, 201, 0),
        call(CallKind::Other, 202, 203, 1),
        call(CallKind::GroupEnd, 204, 300, 1),
        call(CallKind::Other, 310, 320, 0),
    ];
    let (exchanges, others) = exchanges(&calls);
    assert_eq!(
        exchanges,
        [
            Exchange { enter_ns: 10, exit_ns: 90, sends: true, recvs: true, device: None },
            Exchange { enter_ns: 100, exit_ns: 180, sends: false, recvs: true, device: None },
        ]
    );
    assert_eq!(others.iter().map(|o| o.enter_ns).collect::<Vec<_>>(), [200, 310]);
}

#[test]
fn a_nested_group_closes_with_its_outermost_end() {
    let calls = [
        call(CallKind::GroupStart, 10, 11, 0),
        call(CallKind::GroupStart, 12, 13, 1),
        call(CallKind::Send, 14, 15, 2),
        call(CallKind::GroupEnd, 16, 17, 2),
        call(CallKind::GroupEnd, 18, 60, 1),
    ];
    assert_eq!(exchanges(&calls).0, [Exchange { enter_ns: 10, exit_ns: 60, sends: true, recvs: false, device: None }]);
}

/// A step launched asynchronously: the host's calls return at once (each exchange 1 us,
/// passes 100 ns of launching), the device runs the passes as `timeline` times them.
fn launched(stage: usize, stages: usize, microbatches: usize) -> StepCalls {
    let device = timeline(stage, stages, microbatches);
    let mut host = device.clone();
    let mut t = device.begin_ns + 10;
    for (h, d) in host.exchanges.iter_mut().zip(&device.exchanges) {
        *h = Exchange { enter_ns: t, exit_ns: t + 1_000, device: Some((d.enter_ns, d.exit_ns)), ..*h };
        t += 1_100;
    }
    for (h, d) in host.others.iter_mut().zip(&device.others) {
        *h = OtherCall { enter_ns: t.min(d.enter_ns), device_start_ns: Some(d.enter_ns) };
    }
    host
}

#[test]
fn an_asynchronous_step_is_timed_on_the_device_when_every_exchange_has_its_kernels() {
    let step = launched(1, 4, 8);
    let (derived, on_device) = derive_timed(1, 4, &step).expect("a 1F1B schedule");
    assert!(on_device);
    for &(pass, ns) in &derived.passes {
        assert_eq!(ns, own(pass), "{pass:?}: the device's time, not the launches'");
    }
    // One exchange without its kernel: the host's launch times, and no claim of device time.
    let mut unlinked = step.clone();
    unlinked.exchanges[3].device = None;
    let (derived, on_device) = derive_timed(1, 4, &unlinked).unwrap();
    assert!(!on_device);
    assert!(derived.passes.iter().all(|&(_, ns)| ns < 1_000), "{:?}", derived.passes);
}

#[test]
fn a_group_s_kernels_run_from_the_first_start_to_the_last_end() {
    let with = |kind, enter_ns, device| HostCall { device, ..call(kind, enter_ns, enter_ns + 1, 1) };
    let calls = [
        call(CallKind::GroupStart, 10, 11, 0),
        with(CallKind::Send, 12, Some((500, 700))),
        with(CallKind::Recv, 14, Some((450, 650))),
        call(CallKind::GroupEnd, 16, 17, 1),
    ];
    assert_eq!(exchanges(&calls).0[0].device, Some((450, 700)));
}

/// Stage `stage`'s transfers of one step as a rank posts them: each group's send first.
fn transfers(stage: usize, stages: usize, microbatches: usize) -> Vec<bool> {
    let mut calls = Vec::new();
    for item in schedule(stage, stages, microbatches) {
        if let Item::Exchange { sends, recvs } = item {
            calls.extend(sends.then_some(true));
            calls.extend(recvs.then_some(false));
        }
    }
    calls
}

#[test]
fn a_transfer_is_placed_in_its_pass_by_the_previous_steps_schedule() {
    let fwd = |microbatch| Pass { stage: 1, microbatch, phase: Phase::Fwd };
    let previous = transfers(1, 4, 8);
    assert_eq!(previous.len(), 32, "2 warm-up recv/send pairs, 6 steady groups, 2 drained pairs");
    // The step's first call: the receive of microbatch 0's activations.
    assert_eq!(transfer_pass(1, 4, &previous, 0, false), Some(fwd(0)));
    assert_eq!(transfer_pass(1, 4, &previous, 0, true), None, "the step opens with no send");
    assert_eq!(transfer_pass(1, 4, &previous, 1, true), Some(fwd(0)));
    // The first steady group (calls 5 and 6): microbatch 2's activations out, microbatch
    // 0's gradients in, in either order.
    for index in [5, 6] {
        assert_eq!(transfer_pass(1, 4, &previous, index, true), Some(fwd(2)));
        let gradients = Pass { stage: 1, microbatch: 0, phase: Phase::Bwd };
        assert_eq!(transfer_pass(1, 4, &previous, index, false), Some(gradients));
    }
    // The step's last call: microbatch 7's gradients to stage 0.
    let last = Pass { stage: 1, microbatch: 7, phase: Phase::Bwd };
    assert_eq!(transfer_pass(1, 4, &previous, 31, true), Some(last));
    assert_eq!(transfer_pass(1, 4, &previous, 32, true), None);
}

#[test]
fn a_previous_step_no_schedule_explains_places_nothing() {
    let mut previous = transfers(0, 4, 8);
    assert_eq!(transfer_pass(0, 4, &previous, 0, true), Some(Pass { stage: 0, microbatch: 0, phase: Phase::Fwd }));
    previous.pop();
    assert_eq!(transfer_pass(0, 4, &previous, 0, true), None, "a call lost");
    assert_eq!(transfer_pass(0, 1, &transfers(0, 4, 8), 0, true), None, "one stage is no pipeline");
    assert_eq!(
        transfer_pass(3, 4, &transfers(3, 4, 8), 0, false),
        Some(Pass { stage: 3, microbatch: 0, phase: Phase::Fwd })
    );
}
