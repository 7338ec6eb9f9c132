use super::sample::{Frame, Sample, ThreadStack};
use super::sampler::{Ask, Taken};
use super::*;

fn stacks(line: i32) -> Sample {
    let frames = vec![
        Frame { function: "train".into(), file: "/job/train.py".into(), line },
        Frame { function: "<module>".into(), file: "/job/train.py".into(), line: 200 },
    ];
    Sample::bounded(vec![ThreadStack {
        os_tid: 7,
        name: "MainThread".into(),
        main: true,
        active: false,
        owns_gil: false,
        frames,
    }])
}

fn taken(reason: StackReason, request: u64, outcome: Result<Sample, String>) -> Taken {
    Taken { ask: Ask { reason, request }, t_ns: 5, wall_ns: 6, read_ns: 7_000, outcome }
}

fn headers(records: &[RecordBody]) -> Vec<StackSample> {
    records
        .iter()
        .filter_map(|r| match r {
            RecordBody::StackSample(s) => Some(*s),
            _ => None,
        })
        .collect()
}

#[test]
fn a_sample_is_written_whole_once_then_as_unchanged_and_its_header_comes_last() {
    let mut watch = StackWatch::default();
    let mut out = Vec::new();
    watch.write(taken(StackReason::Stall, 0, Ok(stacks(139))), &mut |r| out.push(*r));
    assert_eq!(out.len(), 2 + 1 + 1, "two frames, the thread, the header");
    assert!(matches!(out.last(), Some(RecordBody::StackSample(s)) if s.status == StackStatus::Taken && s.threads == 1));
    watch.write(taken(StackReason::Request, 9, Ok(stacks(139))), &mut |r| out.push(*r));
    watch.write(taken(StackReason::Stall, 0, Ok(stacks(140))), &mut |r| out.push(*r));
    let h = headers(&out);
    assert_eq!((h[1].status, h[1].same_as, h[1].request), (StackStatus::Unchanged, 1, 9));
    assert_eq!((h[2].status, h[2].same_as), (StackStatus::Taken, 3), "a moved line is a new stack");
    assert_eq!(out.len(), 4 + 1 + 4);
}

#[test]
fn past_the_budget_a_stall_sample_is_counted_and_a_request_is_still_answered() {
    let mut watch = StackWatch { records_written: RECORD_BUDGET - 2, ..StackWatch::default() };
    let mut out = Vec::new();
    watch.write(taken(StackReason::Stall, 0, Ok(stacks(1))), &mut |r| out.push(*r));
    assert!(out.is_empty());
    watch.write(taken(StackReason::Request, 4, Ok(stacks(1))), &mut |r| out.push(*r));
    let h = headers(&out);
    assert_eq!(out.len(), 1);
    assert_eq!((h[0].status, h[0].dropped, h[0].request), (StackStatus::Failed, 1, 4));
    assert!(h[0].note.to_string_lossy().contains("budget"));
}

fn seen(now_ns: u64, progress: u64, request: u64) -> Seen {
    Seen { now_ns, progress, step_ns: Some(100_000_000), request }
}

/// Rounds until the sampler answers (this test process is no Python interpreter: the
/// read fails, as it does in any process py-spy cannot read).
fn until_answered(watch: &mut StackWatch, at: &Seen, out: &mut Vec<RecordBody>) -> Option<u64> {
    for _ in 0..2_000 {
        let answered = watch.round(at, &mut |r| out.push(*r));
        if !watch.in_flight {
            return answered;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    panic!("the sampler never answered");
}

#[test]
fn a_rank_is_sampled_once_it_stops_advancing_and_when_asked() {
    let mut watch = StackWatch::default();
    let mut out = Vec::new();
    let s = 1_000_000_000;
    // Never advanced: no stall, however long.
    for now in [1, 2, 50] {
        watch.round(&seen(now * s, 0, 0), &mut |r| out.push(*r));
    }
    assert!(!watch.in_flight && out.is_empty());
    watch.round(&seen(51 * s, 3, 0), &mut |r| out.push(*r));
    watch.round(&seen(52 * s, 4, 0), &mut |r| out.push(*r));
    watch.round(&seen(52 * s + s / 2, 4, 0), &mut |r| out.push(*r));
    assert!(!watch.in_flight, "half a second still is below the floor (3 steps of 0.1 s, 1 s)");
    watch.round(&seen(53 * s, 4, 0), &mut |r| out.push(*r));
    assert!(watch.in_flight, "a second still: sampled");
    assert_eq!(until_answered(&mut watch, &seen(53 * s, 4, 0), &mut out), None);
    let h = headers(&out);
    assert_eq!((h[0].reason, h[0].status), (StackReason::Stall, StackStatus::Failed));
    assert!(!h[0].note.as_bytes().is_empty());
    // A failed stall sample is not tried again; a request still is, and answered.
    watch.round(&seen(60 * s, 4, 0), &mut |r| out.push(*r));
    assert!(!watch.in_flight);
    watch.round(&seen(61 * s, 4, 77), &mut |r| out.push(*r));
    assert!(watch.in_flight);
    assert_eq!(until_answered(&mut watch, &seen(61 * s, 4, 77), &mut out), Some(77));
    watch.round(&seen(62 * s, 4, 77), &mut |r| out.push(*r));
    assert!(!watch.in_flight, "an answered request is not asked again");
}
