//! KernelWindows and stage-device attribution, driven with synthetic activity and a clock
//! the tests move by hand.

use crate::core::kernels::kernel_activity::{Activity, ActivityKind, KernelNames};
use crate::core::kernels::kernel_windows::{KernelWindows, WindowSettings};
use crate::core::kernels::stage_device::{union_and_spill, StepWindows};
use crate::core::log::format::SLOT_SIZE;
use crate::core::log::records::RecordBody;
use crate::core::rng::SplitMix64;

const MS: u64 = 1_000_000;
/// Window 1000 ms, lateness 2 x 500 ms, windows aligned to monotonic 0; the CUDA door
/// taken as recording kernels (no CUPTI runs in unit tests).
fn windows() -> KernelWindows {
    let mut w = KernelWindows::new(WindowSettings::new(1000, 500, 0));
    w.kernels_recorded = || true;
    w
}

fn kernel(stream: u32, start_ns: u64, duration_ns: u64) -> Activity {
    Activity {
        kind: ActivityKind::Kernel,
        name_id: KernelNames::NONE,
        device: 0,
        context: 1,
        stream,
        correlation: 0,
        start_ns,
        end_ns: start_ns + duration_ns,
    }
}

fn drain(w: &mut KernelWindows, now_ns: u64) -> Vec<RecordBody> {
    let mut out = Vec::new();
    w.write_due(now_ns, &mut |r| out.push(*r));
    out
}

/// (name id, [(count, p50 ns)]) per series found in `records`, for one stream.
fn clusters_of(records: &[RecordBody], name_id: u16) -> Vec<(u32, f64)> {
    records
        .iter()
        .filter_map(|r| match r {
            RecordBody::KernelCluster(c) => Some(c.entries().to_vec()),
            _ => None,
        })
        .flatten()
        .filter(|e| e.name_id == name_id)
        .map(|e| (e.launches, e.p50_ns()))
        .collect()
}

fn lognormal(rng: &mut SplitMix64, median: f64, sd: f64) -> u64 {
    (median * (sd * rng.normal()).exp()) as u64
}

#[test]
fn bimodal_and_trimodal_series_give_two_and_three_clusters() {
    let mut w = windows();
    let mut rng = SplitMix64::new(3);
    let mut t = 10 * MS;
    for i in 0..1200u64 {
        let d = lognormal(&mut rng, if i % 5 < 3 { 20_000.0 } else { 80_000.0 }, 0.05);
        w.feed(&kernel(7, t, d), Some(b"gemm_bimodal"));
        t += 100_000;
        let d = lognormal(&mut rng, [10_000.0, 40_000.0, 160_000.0][i as usize % 3], 0.05);
        w.feed(&kernel(7, t, d), Some(b"conv_trimodal"));
        t += 200_000;
    }
    assert!(t < 1000 * MS, "all in window 0");
    assert!(drain(&mut w, 1999 * MS).iter().all(|r| matches!(r, RecordBody::KernelName(_))), "not due yet");
    let out = drain(&mut w, 2000 * MS);
    let two = clusters_of(&out, 0);
    assert_eq!(two.len(), 2, "{two:?}");
    // Reservoir-sampled (256 of 1200), so shares are close, totals exact.
    assert_eq!(two.iter().map(|c| c.0).sum::<u32>(), 1200);
    assert!((two[0].0 as f64 / 720.0 - 1.0).abs() < 0.1, "{two:?}");
    assert!((two[0].1 / 20_000.0 - 1.0).abs() < 0.03 && (two[1].1 / 80_000.0 - 1.0).abs() < 0.03, "{two:?}");
    let three = clusters_of(&out, 1);
    assert_eq!(three.len(), 3, "{three:?}");
    assert_eq!(three.iter().map(|c| c.0).sum::<u32>(), 1200);
    for (c, median) in three.iter().zip([10_000.0, 40_000.0, 160_000.0]) {
        assert!((c.1 / median - 1.0).abs() < 0.03 && (c.0 as f64 / 400.0 - 1.0).abs() < 0.15, "{three:?}");
    }
}

#[test]
fn busy_time_is_the_union_per_stream_clipped_to_the_window() {
    let mut w = windows();
    w.feed(&kernel(1, 100 * MS, 10 * MS), Some(b"a"));
    w.feed(&kernel(1, 105 * MS, 10 * MS), Some(b"b")); // overlaps the first by 5 ms
    w.feed(&kernel(1, 200 * MS, 5 * MS), Some(b"a"));
    w.feed(&kernel(2, 990 * MS, 30 * MS), Some(b"a")); // 10 ms here, 20 ms in window 1
    let out = drain(&mut w, u64::MAX);
    let busy: Vec<(u64, u32, u32, u32)> = out
        .iter()
        .filter_map(|r| match r {
            RecordBody::StreamBusy(b) => {
                Some(b.entries().iter().map(|e| (b.window, e.stream, e.busy_ns, e.kernels)).collect::<Vec<_>>())
            }
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(busy, [(0, 1, 20 * MS as u32, 3), (0, 2, 10 * MS as u32, 1), (1, 2, 20 * MS as u32, 0)]);
}

#[test]
fn nccl_kernels_are_packed_eleven_to_a_record_with_offsets_from_the_window_start() {
    let mut w = windows();
    for i in 0..30u64 {
        w.feed(&kernel(9, 3000 * MS + i * 20 * MS, 1000 + i), Some(b"ncclDevKernel_AllReduce_Sum_f32_RING_LL"));
        w.feed(&kernel(7, 3000 * MS + i * 20 * MS, 5000), Some(b"elementwise"));
    }
    let out = drain(&mut w, u64::MAX);
    let nccl: Vec<_> = out
        .iter()
        .filter_map(|r| match r {
            RecordBody::NcclKernels(n) => Some(*n),
            _ => None,
        })
        .collect();
    assert_eq!(nccl.iter().map(|n| n.count).collect::<Vec<_>>(), [11, 11, 8]);
    assert!(nccl.iter().all(|n| n.window == 3 && n.stream == 9 && n.name_id == 0));
    let pairs: Vec<(u32, u32)> = nccl.iter().flat_map(|n| n.pairs().to_vec()).collect();
    assert_eq!(pairs[0], (0, 1000));
    assert_eq!(pairs[29], (29 * 20 * MS as u32, 1029));
    assert!(matches!(out[0], RecordBody::KernelName(ref n) if n.name().starts_with("ncclDevKernel_AllReduce")));
}

#[test]
fn a_window_waits_out_the_lateness_and_later_activity_is_counted_late() {
    let mut w = windows();
    w.feed(&kernel(1, 500 * MS, MS), Some(b"k"));
    let names = drain(&mut w, 1500 * MS);
    assert_eq!(names.len(), 1, "only the name: window 0 ends at 1 s and may still get activity");
    let out = drain(&mut w, 2000 * MS);
    assert!(out.iter().any(|r| matches!(r, RecordBody::StreamBusy(b) if b.window == 0 && b.late == 0)));
    // Window 0 is written: a kernel of it now is late, reported with the next window.
    w.feed(&kernel(1, 900 * MS, MS), Some(b"k"));
    w.feed(&kernel(1, 2100 * MS, MS), Some(b"k"));
    let out = drain(&mut w, u64::MAX);
    let busy: Vec<_> = out
        .iter()
        .filter_map(|r| match r {
            RecordBody::StreamBusy(b) => Some((b.window, b.late, b.entries()[0].kernels)),
            _ => None,
        })
        .collect();
    assert_eq!(busy, [(2, 1, 1)]);
}

/// 200 distinct kernels on a compute stream, a few launches each per step, 10 steps of
/// 100 ms per window, two NCCL kernels per step on a communication stream.
fn realistic_window(w: &mut KernelWindows, kernels: usize, seed: u64) {
    let mut rng = SplitMix64::new(seed);
    let names: Vec<String> = (0..kernels).map(|k| format!("void at::native::kernel_{k}<float, 128>(...)")).collect();
    for step in 0..10u64 {
        let mut t = step * 100 * MS;
        for (k, name) in names.iter().enumerate() {
            for launch in 0..3 {
                // A fifth of the kernels run at two shapes.
                let median = 2_000.0 * (1 + k % 7) as f64 * if k % 5 == 0 && launch == 2 { 4.0 } else { 1.0 };
                let d = lognormal(&mut rng, median, 0.05);
                w.feed(&kernel(7, t, d), Some(name.as_bytes()));
                t += d + 1_000;
            }
        }
        for op in 0..2u64 {
            let start = step * 100 * MS + op * 40 * MS;
            w.feed(&kernel(13, start, 3 * MS), Some(b"ncclDevKernel_AllReduce_Sum_bf16_RING_LL"));
        }
    }
}

#[test]
fn a_realistic_window_fits_in_four_kib_and_a_huge_one_is_capped_and_counted() {
    let mut w = windows();
    realistic_window(&mut w, 200, 1);
    let names = drain(&mut w, 0).len();
    assert_eq!(names, 201, "each name once");
    let out = drain(&mut w, u64::MAX);
    let bytes = out.len() * SLOT_SIZE;
    assert!(bytes <= 4096, "{} records, {bytes} bytes", out.len());
    let RecordBody::StreamBusy(b) = out[0] else { panic!("busy first: {:?}", out[0]) };
    assert_eq!((b.truncated_clusters, b.truncated_nccl, b.untracked), (0, 0, 0));
    let entries: usize =
        out.iter().map(|r| if let RecordBody::KernelCluster(c) = r { c.count as usize } else { 0 }).sum();
    assert_eq!(entries, 241, "160 one-mode kernels, 40 two-mode ones and the NCCL kernel");
    println!("realistic window: {} records, {bytes} bytes, {entries} cluster entries", out.len());

    let mut huge = windows();
    realistic_window(&mut huge, 600, 2);
    drain(&mut huge, 0);
    let out = drain(&mut huge, u64::MAX);
    assert_eq!(out.len(), KernelWindows::MAX_RECORDS);
    let RecordBody::StreamBusy(b) = out[0] else { panic!() };
    let written: u32 = out.iter().map(|r| if let RecordBody::KernelCluster(c) = r { c.count as u32 } else { 0 }).sum();
    // 600 kernels and the NCCL one are 601 series: the first 512 (kernels 0-511, 103 of
    // them two-mode) are summarized, the launches of the other 89 are counted untracked.
    assert_eq!(written + b.truncated_clusters, 615, "every cluster is written or counted");
    assert!(b.truncated_clusters > 0);
    assert_eq!(b.untracked, 88 * 30 + 20);
    assert_eq!(b.truncated_nccl, 0, "NCCL kernels keep their share");
}

#[test]
fn union_and_spill_merge_overlaps_and_measure_past_the_host_end() {
    let sorted = [(0, 10), (5, 15), (20, 30), (28, 40)];
    assert_eq!(union_and_spill(sorted.into_iter(), 25), (35, 15));
    assert_eq!(union_and_spill(std::iter::empty(), 0), (0, 0));
}

fn step_windows() -> StepWindows {
    // Step 4 from 0 to 100 ms: fwd 0-40, bwd 40-90, residual the rest.
    let mut s = StepWindows::new(4, 0, 100 * MS);
    s.push(10, 0, 40 * MS);
    s.push(11, 40 * MS, 90 * MS);
    s.set_residual(12);
    s
}

fn stage_device(out: &[RecordBody]) -> Vec<(u16, u64, u64)> {
    out.iter()
        .filter_map(|r| match r {
            RecordBody::StageDevice(d) => Some(d.stages().collect::<Vec<_>>()),
            _ => None,
        })
        .flatten()
        .collect()
}

#[test]
fn stage_device_by_time_with_spill_and_lateness() {
    let mut w = windows();
    // fwd: two overlapping kernels on two streams (union 30 ms), one running past 40 ms.
    w.feed(&kernel(1, 5 * MS, 20 * MS), Some(b"f"));
    w.feed(&kernel(2, 15 * MS, 20 * MS), Some(b"f2"));
    w.feed(&kernel(1, 38 * MS, 10 * MS), Some(b"f")); // starts in fwd, spills 8 ms
    w.feed(&kernel(1, 60 * MS, 5 * MS), Some(b"b"));
    w.feed(&kernel(1, 95 * MS, 2 * MS), Some(b"r")); // after bwd: residual
    w.feed(&kernel(1, 150 * MS, 2 * MS), Some(b"n")); // after the step: nobody's
    w.step_closed(step_windows(), &mut |_| {});
    // Due 2 flush periods and one step's wall time after the step's end: 100 + 1000 + 100 ms.
    assert!(drain(&mut w, 1200 * MS - 1).iter().all(|r| !matches!(r, RecordBody::StageDevice(_))), "too early");
    let out = drain(&mut w, 1200 * MS);
    let RecordBody::StageDevice(d) = out.iter().find(|r| matches!(r, RecordBody::StageDevice(_))).unwrap() else {
        unreachable!()
    };
    assert_eq!((d.step, d.kernels, d.correlated), (4, 5, 0));
    assert_eq!(stage_device(&out), [(10, 40 * MS, 8 * MS), (11, 5 * MS, 0), (12, 2 * MS, 0)]);
}

#[test]
fn stage_device_by_correlation_charges_the_launching_stage() {
    let mut w = windows();
    let runtime = |correlation: u32, start_ns: u64| Activity {
        kind: ActivityKind::Runtime { cbid: 211 },
        correlation,
        start_ns,
        end_ns: start_ns + 10_000,
        ..kernel(0, 0, 0)
    };
    // Launched in fwd at 30 ms, run on the GPU at 50-70 ms (in bwd's host window).
    w.feed(&runtime(77, 30 * MS), None);
    w.feed(&Activity { correlation: 77, ..kernel(1, 50 * MS, 20 * MS) }, Some(b"late_fwd"));
    // No runtime record for this one: attributed by its start, to bwd.
    w.feed(&Activity { correlation: 78, ..kernel(1, 75 * MS, 5 * MS) }, Some(b"bwd"));
    w.step_closed(step_windows(), &mut |_| {});
    let out = drain(&mut w, u64::MAX);
    let RecordBody::StageDevice(d) = out.iter().find(|r| matches!(r, RecordBody::StageDevice(_))).unwrap() else {
        unreachable!()
    };
    assert_eq!((d.kernels, d.correlated), (2, 1));
    assert_eq!(stage_device(&out), [(10, 20 * MS, 20 * MS), (11, 5 * MS, 0), (12, 0, 0)]);
}

#[test]
fn steps_closed_while_the_cuda_door_records_no_kernels_are_no_device_evidence() {
    // As in a job without CUDA_INJECTION64_PATH: the door never opened.
    let mut w = KernelWindows::new(WindowSettings::new(1000, 500, 0));
    w.step_closed(step_windows(), &mut |_| {});
    assert!(drain(&mut w, u64::MAX).iter().all(|r| !matches!(r, RecordBody::StageDevice(_))));
    // The door opens: the next step is sampled, even with no kernel in it.
    w.kernels_recorded = || true;
    w.step_closed(step_windows(), &mut |_| {});
    assert_eq!(stage_device(&drain(&mut w, u64::MAX)), [(10, 0, 0), (11, 0, 0), (12, 0, 0)]);
}

#[test]
fn many_stages_continue_in_parts() {
    let mut w = windows();
    let mut s = StepWindows::new(1, 0, 30 * MS);
    for i in 0..12 {
        s.push(i, i as u64 * MS, (i as u64 + 1) * MS);
    }
    s.set_residual(99);
    w.feed(&kernel(1, 3 * MS, MS / 2), Some(b"k"));
    w.step_closed(s, &mut |_| {});
    let out = drain(&mut w, u64::MAX);
    let parts: Vec<(u8, u8)> = out
        .iter()
        .filter_map(|r| if let RecordBody::StageDevice(d) = r { Some((d.part, d.count)) } else { None })
        .collect();
    assert_eq!(parts, [(0, 9), (1, 4)]);
    assert_eq!(stage_device(&out)[3], (3, MS / 2, 0));
}
