//! Each device label on a window built for it, and its negative next to it. Four ranks,
//! stages data, forward, backward; rank 2 is the one the scenarios make late. Its peers
//! wait for it in backward, as DDP ranks do in the gradient allreduce.

use std::sync::Arc;

use crate::analysis::frontier::{analyze, Context, DeviceTime, Schema, Step, Window};

const FWD: &str = "model.fwd_loss_cpu_wall";

/// Rank 2's (data, forward, backward) CPU-wall seconds and its forward (device, spill); the
/// other ranks run (0.02, 0.03, 0.04) with their forward kernels busy 0.025 s and wait in
/// backward until rank 2's step ends. `sampled(step)`: whether the CUDA door sampled it.
struct Scenario {
    late: [f64; 3],
    late_forward_device: (f64, f64),
    steps: u64,
    sampled: fn(u64) -> bool,
    missing_rank: bool,
}

impl Scenario {
    fn new(late: [f64; 3], late_forward_device: (f64, f64)) -> Scenario {
        Scenario { late, late_forward_device, steps: 10, sampled: |_| true, missing_rank: false }
    }

    fn window(&self) -> Window {
        let schema = Arc::new(Schema::new(vec!["data".into(), FWD.into(), "backward".into()]).unwrap());
        let ranks: Vec<u32> = if self.missing_rank { vec![0, 1, 2] } else { vec![0, 1, 2, 3] };
        let missing: Vec<u32> = if self.missing_rank { vec![3] } else { vec![] };
        let late_total: f64 = self.late.iter().sum();
        let mut durations = Vec::new();
        let mut device = Vec::new();
        for &rank in &ranks {
            let (row, fwd) = if rank == 2 {
                (self.late, self.late_forward_device)
            } else {
                ([0.02, 0.03, 0.04 + (late_total - 0.09).max(0.0)], (0.025, 0.0))
            };
            durations.extend(row);
            let kernels = |device_s| Some(DeviceTime { device_s, spill_s: 0.0 });
            device.extend([kernels(0.0), Some(DeviceTime { device_s: fwd.0, spill_s: fwd.1 }), kernels(0.03)]);
        }
        let all_none = vec![None; device.len()];
        let steps: Vec<Step> = (0..self.steps)
            .map(|index| Step {
                index,
                schema: &schema,
                world: 4,
                ranks: &ranks,
                missing: &missing,
                durations: &durations,
                overlap_s: &[],
                device: if (self.sampled)(index) { &device } else { &all_none },
            })
            .collect();
        let mut windows = analyze(steps, Context::default(), None).unwrap();
        assert_eq!(windows.len(), 1);
        windows.remove(0)
    }
}

fn labels(w: &Window) -> Vec<&'static str> {
    w.labels.iter().map(|l| l.kind.name()).filter(|n| n.starts_with("forward_")).collect()
}

#[test]
fn forward_device_supported_when_the_late_forward_is_device_time() {
    // Rank 2's forward takes 0.15 s of CPU wall, its kernels 0.14 s of it.
    let w = Scenario::new([0.02, 0.15, 0.04], (0.14, 0.0)).window();
    assert_eq!(w.routing.as_ref().unwrap().top1, 1);
    assert_eq!(labels(&w), ["forward_device_supported"], "{:?}", w.labels);
    let reason = &w.labels.iter().find(|l| l.kind.name() == "forward_device_supported").unwrap().reason;
    assert!(reason.contains("0.93 x its CPU-wall time") && reason.contains("10 sampled"), "{reason}");
    // Negative: kernels busy 0.06 s of 0.15 s (0.4) is neither high nor low.
    let w = Scenario::new([0.02, 0.15, 0.04], (0.06, 0.0)).window();
    assert!(labels(&w).is_empty(), "{:?}", w.labels);
}

#[test]
fn forward_host_overhead_suspected_when_the_gpu_idles_through_it() {
    let w = Scenario::new([0.02, 0.15, 0.04], (0.01, 0.0)).window();
    assert_eq!(labels(&w), ["forward_host_overhead_suspected"], "{:?}", w.labels);
    // Negative: the same device time on a forward that is not in the top-2 says nothing.
    let w = Scenario::new([0.15, 0.03, 0.04], (0.001, 0.0)).window();
    assert!(!w.routing.as_ref().unwrap().top2.contains(&1), "{:?}", w.routing);
    assert!(labels(&w).is_empty(), "{:?}", w.labels);
}

#[test]
fn forward_spillover_suspected_when_forward_kernels_surface_in_backward() {
    // Rank 2's forward launches 0.15 s of kernels in 0.03 s of CPU wall, 0.13 s of them
    // after forward ends; its host blocks in backward until they finish.
    let w = Scenario::new([0.02, 0.03, 0.16], (0.15, 0.13)).window();
    let routing = w.routing.as_ref().unwrap();
    assert_eq!(routing.top1, 2);
    // Every rank's backward ends together (the peers wait there), so all lead it and the
    // forward device time is judged over all ranks: 0.225 s of kernels in 0.12 s of CPU wall.
    assert_eq!(w.leaders[2].ranks, [0, 1, 2, 3]);
    // Forward stays in the top-2 with high device time: supported too, as in the paper's
    // E5 rows where backward is top-1 and the event channel still supports forward.
    assert_eq!(labels(&w), ["forward_device_supported", "forward_spillover_suspected"], "{:?}", w.labels);
    // Negative: the same kernels finishing inside forward (no spill) are not spillover.
    let w = Scenario::new([0.02, 0.03, 0.16], (0.15, 0.0)).window();
    assert!(!labels(&w).contains(&"forward_spillover_suspected"), "{:?}", w.labels);
}

#[test]
fn no_device_evidence_no_device_label() {
    let mut scenario = Scenario::new([0.02, 0.15, 0.04], (0.01, 0.0));
    scenario.sampled = |_| false;
    let w = scenario.window();
    assert!(labels(&w).is_empty(), "{:?}", w.labels);
    assert!(w.labels.iter().any(|l| l.kind.name() == "co_critical"), "the stage labels still come: {:?}", w.labels);
}

#[test]
fn too_few_ready_samples_is_scope_limited_and_too_few_samples_is_nothing() {
    // Half the steps sampled: under the 0.8 ready ratio.
    let mut scenario = Scenario::new([0.02, 0.15, 0.04], (0.14, 0.0));
    scenario.sampled = |step| step % 2 == 0;
    assert_eq!(labels(&scenario.window()), ["forward_event_scope_limited"]);
    // Four steps, all sampled: fewer than 5 samples of the leading rank's forward.
    let mut short = Scenario::new([0.02, 0.15, 0.04], (0.14, 0.0));
    short.steps = 4;
    assert!(labels(&short.window()).is_empty());
    short.steps = 5;
    assert_eq!(labels(&short.window()), ["forward_device_supported"]);
}

#[test]
fn a_telemetry_limited_window_gets_no_device_label() {
    let mut scenario = Scenario::new([0.02, 0.15, 0.04], (0.14, 0.0));
    scenario.missing_rank = true;
    let w = scenario.window();
    assert!(w.labels.iter().any(|l| l.kind.name() == "telemetry_limited"));
    assert!(labels(&w).is_empty(), "{:?}", w.labels);
}
