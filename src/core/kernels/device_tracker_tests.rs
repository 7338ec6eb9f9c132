//! The tracker on synthetic callback events and completion records, in the orders the
//! collector can see them.

use super::*;
use crate::core::kernels::kernel_activity::KernelNames;
use crate::core::record::clock::ClockSource;

/// Ticks are nanoseconds: the monotonic clock source with a zero base.
fn identity() -> Calibration {
    Calibration::new(ClockSource::Monotonic, 0, 0, 0, 1e9)
}

fn launch(correlation: u32, ticks: u64, name: &str, nccl: NcclLink) -> DeviceEvent {
    let mut bytes = [0u8; Launch::NAME_BYTES];
    bytes[..name.len()].copy_from_slice(name.as_bytes());
    DeviceEvent::Launch(Launch {
        ticks,
        correlation,
        stream_handle: 0,
        nccl,
        name_len: name.len() as u8,
        name_cut: false,
        name: bytes,
        // Every launch of these tests comes from the stage with id 1.
        stage: 2,
    })
}

fn kernel(correlation: u32, start_ns: u64, end_ns: u64) -> Activity {
    Activity {
        kind: ActivityKind::Kernel,
        name_id: KernelNames::NONE,
        device: 0,
        context: 1,
        stream: 13,
        correlation,
        start_ns,
        end_ns,
    }
}

fn sync(tid: u32, correlation: u32, ticks: u64, kind: SyncKind, exit: bool) -> DeviceEvent {
    DeviceEvent::Sync(SyncCall { ticks, correlation, tid, sync: kind, exit })
}

const ALLREDUCE_7: NcclLink = NcclLink { comm_id: 0xc0, seq: 7, op: NcclOp::AllReduce as u16 };

/// Runs a round and returns what it wrote, interning names into `names`.
fn round(tracker: &mut DeviceTracker, names: &mut KernelNames, at_exit: bool) -> Vec<RecordBody> {
    let mut out = Vec::new();
    tracker.round(1_000_000, at_exit, &mut |name| names.intern(name), &mut |r| out.push(*r));
    out
}

#[test]
fn an_nccl_kernel_is_linked_to_its_call_whichever_arrives_first() {
    let (cal, mut names) = (identity(), KernelNames::default());
    let mut tracker = DeviceTracker::default();
    tracker.event(&launch(1, 100, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", ALLREDUCE_7), &cal, true);
    tracker.event(&launch(2, 150, "sim_fwd_0", NcclLink::NONE), &cal, true);
    tracker.activity(&kernel(1, 1_000, 9_000));
    // The completion of launch 3 is flushed before its launch leaves the ring.
    tracker.activity(&kernel(3, 2_000, 3_000));
    tracker.event(
        &launch(3, 200, "ncclDevKernel_SendRecv", NcclLink { seq: 2, op: NcclOp::Send as u16, ..ALLREDUCE_7 }),
        &cal,
        true,
    );
    tracker.activity(&kernel(2, 9_500, 9_600));
    let out = round(&mut tracker, &mut names, false);
    let colls: Vec<DeviceColl> =
        out.iter().filter_map(|r| if let RecordBody::DeviceColl(c) = r { Some(*c) } else { None }).collect();
    assert_eq!(colls.len(), 2, "the compute kernel is no collective: {out:?}");
    assert_eq!((colls[0].comm_id, colls[0].seq, colls[0].op), (0xc0, 7, NcclOp::AllReduce));
    assert_eq!((colls[0].t_launch_ns, colls[0].t_start_ns, colls[0].t_end_ns), (100, 1_000, 9_000));
    assert_eq!((colls[0].stream, colls[0].link), (13, LinkSource::Callback));
    assert_eq!((colls[1].seq, colls[1].op, colls[1].t_launch_ns), (2, NcclOp::Send, 200));
    let RecordBody::DeviceState(state) = out.last().unwrap() else { panic!("{out:?}") };
    assert_eq!((state.launched, state.completed, state.oldest), (3, 3, None));
}

#[test]
fn a_kernel_inside_an_nccl_call_but_not_named_as_nccl_is_not_linked() {
    let (cal, mut names) = (identity(), KernelNames::default());
    let mut tracker = DeviceTracker::default();
    tracker.event(&launch(1, 100, "my_pack_kernel", ALLREDUCE_7), &cal, true);
    tracker.activity(&kernel(1, 1_000, 2_000));
    assert!(!round(&mut tracker, &mut names, false).iter().any(|r| matches!(r, RecordBody::DeviceColl(_))));
}

#[test]
fn the_oldest_unfinished_launch_is_the_state_until_it_completes() {
    let (cal, mut names) = (identity(), KernelNames::default());
    let mut tracker = DeviceTracker::default();
    tracker.event(&launch(5, 500, "sim_bwd_0", NcclLink::NONE), &cal, true);
    tracker.event(&launch(6, 600, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", ALLREDUCE_7), &cal, true);
    let out = round(&mut tracker, &mut names, false);
    let [RecordBody::KernelName(name), RecordBody::DeviceState(state)] = out.as_slice() else { panic!("{out:?}") };
    assert_eq!(name.name(), "sim_bwd_0");
    let oldest = state.oldest.expect("two launches, no completion");
    assert_eq!((oldest.name_id, oldest.t_launch_ns, oldest.op, oldest.stage), (name.name_id, 500, None, 2));
    assert_eq!((state.launched, state.completed), (2, 0));
    assert!(round(&mut tracker, &mut names, false).is_empty(), "unchanged: nothing written");
    let again = round(&mut tracker, &mut names, true);
    assert!(matches!(again.as_slice(), [RecordBody::DeviceState(s)] if s == state), "at exit, always");

    tracker.activity(&kernel(5, 1_000, 2_000));
    let out = round(&mut tracker, &mut names, false);
    let [RecordBody::KernelName(nccl_name), RecordBody::DeviceState(state)] = out.as_slice() else { panic!("{out:?}") };
    let oldest = state.oldest.unwrap();
    assert_eq!(
        (oldest.name_id, oldest.comm_id, oldest.seq, oldest.op),
        (nccl_name.name_id, 0xc0, 7, Some(NcclOp::AllReduce))
    );
}

#[test]
fn host_syncs_in_progress_and_completed_never_twice() {
    let (cal, mut names) = (identity(), KernelNames::default());
    let mut tracker = DeviceTracker::default();
    tracker.event(&sync(42, 9, 1_000, SyncKind::Stream, false), &cal, true);
    let out = round(&mut tracker, &mut names, false);
    let [RecordBody::DeviceState(state)] = out.as_slice() else { panic!("{out:?}") };
    assert_eq!((state.sync_since_ns, state.sync), (1_000, Some(SyncKind::Stream)));

    tracker.event(&sync(42, 9, 5_000, SyncKind::Stream, true), &cal, true);
    let mut record = kernel(9, 1_100, 4_900);
    record.kind = ActivityKind::Synchronization { sync_type: 3 };
    tracker.activity(&record);
    let out = round(&mut tracker, &mut names, false);
    let syncs: Vec<HostSync> =
        out.iter().filter_map(|r| if let RecordBody::HostSync(s) = r { Some(*s) } else { None }).collect();
    assert_eq!(syncs.len(), 1, "from the activity record only: {out:?}");
    assert_eq!(
        (syncs[0].t_enter_ns, syncs[0].t_exit_ns, syncs[0].tid, syncs[0].sync),
        (1_100, 4_900, 42, SyncKind::Stream)
    );
    let RecordBody::DeviceState(state) = out.last().unwrap() else { panic!() };
    assert_eq!((state.sync_since_ns, state.sync), (0, None));

    // A blocking copy has no synchronization record; without sync activity nothing has.
    tracker.event(&sync(42, 10, 6_000, SyncKind::Copy, false), &cal, true);
    tracker.event(&sync(42, 10, 7_000, SyncKind::Copy, true), &cal, true);
    tracker.event(&sync(43, 11, 8_000, SyncKind::Event, false), &cal, false);
    tracker.event(&sync(43, 11, 9_000, SyncKind::Event, true), &cal, false);
    let out = round(&mut tracker, &mut names, false);
    let syncs: Vec<(SyncKind, u64, u32)> = out
        .iter()
        .filter_map(|r| {
            if let RecordBody::HostSync(s) = r {
                Some((s.sync, s.t_exit_ns - s.t_enter_ns, s.tid))
            } else {
                None
            }
        })
        .collect();
    assert_eq!(syncs, [(SyncKind::Copy, 1_000, 42), (SyncKind::Event, 1_000, 43)]);
}

#[test]
fn a_stream_wait_event_record_is_no_host_sync_and_nothing_seen_writes_nothing() {
    let (mut names, mut tracker) = (KernelNames::default(), DeviceTracker::default());
    assert!(round(&mut tracker, &mut names, true).is_empty(), "no device evidence: no state");
    let mut record = kernel(1, 10, 20);
    record.kind = ActivityKind::Synchronization { sync_type: 2 };
    tracker.activity(&record);
    assert!(round(&mut tracker, &mut names, false).is_empty());
}

#[test]
fn a_completion_retires_the_earlier_launches_of_its_stream_whose_records_were_lost() {
    let (cal, mut names) = (identity(), KernelNames::default());
    let mut tracker = DeviceTracker::default();
    let on = |event: DeviceEvent, handle: u64| match event {
        DeviceEvent::Launch(l) => DeviceEvent::Launch(Launch { stream_handle: handle, ..l }),
        other => other,
    };
    tracker.event(&on(launch(1, 100, "lost_record", NcclLink::NONE), 0xa), &cal, true);
    tracker.event(&on(launch(2, 200, "other_stream", NcclLink::NONE), 0xb), &cal, true);
    tracker.event(&on(launch(3, 300, "next_on_a", NcclLink::NONE), 0xa), &cal, true);
    tracker.activity(&kernel(3, 1_000, 2_000));
    let out = round(&mut tracker, &mut names, false);
    let RecordBody::DeviceState(state) = out.last().unwrap() else { panic!("{out:?}") };
    let oldest = state.oldest.expect("the other stream's launch is still unfinished");
    assert_eq!(oldest.t_launch_ns, 200, "launch 1 ran before launch 3 on its stream: finished");
    assert_eq!((state.launched, state.completed), (3, 1), "counts say what was seen");
    tracker.activity(&kernel(2, 1_000, 3_000));
    let out = round(&mut tracker, &mut names, false);
    let RecordBody::DeviceState(state) = out.last().unwrap() else { panic!("{out:?}") };
    assert_eq!(state.oldest, None);
    assert!(tracker.streams.is_empty(), "no queue outlives its launches");
}
