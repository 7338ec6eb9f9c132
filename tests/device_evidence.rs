//! Device evidence for the frontier's forward labels, end to end on real processes: a
//! 4-rank job (tests/c/device_job.c) marks its steps and stages with the C API, meets in
//! backward through fakenccl's allreduce, and launches forward kernels through fakecupti's
//! asynchronous GPU, with the library as LD_PRELOAD and CUDA_INJECTION64_PATH. The CUDA
//! door turns the kernels (and, with SF_CUPTI_CORRELATION=1, their launching runtime
//! calls) into `stage_device` records; `sf frontier --json` reads them into
//! `forward_device` and the forward_* labels of the paper's Table 12. Rank 2's forward
//! stands out (60 ms against 10 ms) but in the spillover job, where every rank's forward
//! kernels run on into backward.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;
use serde_json::Value;
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::{CuptiStatus, RecordBody, StageDevice};

const STEPS: usize = 12;
const SLOW_RANK: u32 = 2;
const FORWARD: &str = "model.fwd_loss_cpu_wall";
const BACKWARD: &str = "model.backward_cpu_wall";
const MS: u64 = 1_000_000;

/// The job, compiled once per test binary against fakenccl.
fn device_job() -> &'static Path {
    static JOB: OnceLock<PathBuf> = OnceLock::new();
    JOB.get_or_init(|| compile_against_fakenccl("device_job.c", "sf-device-job"))
}

#[derive(Clone, Copy, PartialEq)]
enum Cuda {
    /// No CUDA_INJECTION64_PATH: nothing loads CUPTI.
    Off,
    /// The CUDA door, kernels attributed by their GPU start.
    ByTime,
    /// The CUDA door with SF_CUPTI_CORRELATION=1: by the launching runtime call.
    ByCorrelation,
}

/// Runs `device_job --case CASE` (4 ranks, 12 steps) into `root/job`, returns the job dir.
fn run_job(test: &str, case: &str, cuda: Cuda) -> PathBuf {
    let root = log_root(test);
    let mut cmd = preloaded(device_job(), &root, "job");
    without_callers_cuda(&mut cmd);
    cmd.args(["--ranks", "4", "--steps", &STEPS.to_string(), "--case", case, "--slow-rank", &SLOW_RANK.to_string()]);
    // Short flushes: a 1 s job still sees several before its exit flush.
    cmd.env("SF_CUPTI_FLUSH_MS", "50");
    if cuda != Cuda::Off {
        cuda_injected(&mut cmd);
    }
    if cuda == Cuda::ByCorrelation {
        cmd.env("SF_CUPTI_CORRELATION", "1");
    }
    let out = run_ok(&mut cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let loaded = if cuda == Cuda::Off { "not loaded" } else { "loaded" };
    assert_eq!(stdout.matches(&format!("{STEPS} steps, fakecupti {loaded}\n")).count(), 4, "{stdout}");
    root.join("job")
}

/// One step's `stage_device` record, stage ids resolved.
struct StepDevice {
    step: u64,
    kernels: u32,
    correlated: u32,
    /// (stage, device ns, spill ns)
    stages: Vec<(String, u64, u64)>,
}

/// One rank's `stage_device` and `cupti_status` records.
struct RankDevice {
    steps: Vec<StepDevice>,
    statuses: Vec<CuptiStatus>,
}

impl RankDevice {
    fn read(job: &Path, rank: u32) -> RankDevice {
        let path = job.join(format!("rank-{rank:05}.sflog"));
        let names = RankLog::open(&path).unwrap_or_else(|e| panic!("{e}")).stage_names();
        let name = |id: u16| names[id as usize].clone().unwrap_or_else(|| format!("stage#{id}"));
        let mut steps = Vec::new();
        let mut statuses = Vec::new();
        for body in bodies(&path) {
            match body {
                RecordBody::StageDevice(d @ StageDevice { part: 0, .. }) => {
                    let stages = d.stages().map(|(id, device, spill)| (name(id), device, spill)).collect();
                    steps.push(StepDevice { step: d.step, kernels: d.kernels, correlated: d.correlated, stages });
                }
                RecordBody::StageDevice(d) => panic!("five stages fit one record: {d:?}"),
                RecordBody::CuptiStatus(s) => statuses.push(s),
                _ => {}
            }
        }
        RankDevice { steps, statuses }
    }

    /// Every step, in order, each once.
    fn assert_every_step(&self) {
        let steps: Vec<u64> = self.steps.iter().map(|s| s.step).collect();
        assert_eq!(steps, (0..STEPS as u64).collect::<Vec<_>>());
        let last = self.statuses.last().expect("cupti_status records");
        assert_eq!((last.dropped_by_cupti, last.pool_refusals, last.skipped), (0, 0, 0), "{last:?}");
    }

    /// (device ns, spill ns) of `stage` per step.
    fn stage(&self, stage: &str) -> Vec<(u64, u64)> {
        let of = |stages: &[(String, u64, u64)]| {
            stages.iter().find(|s| s.0 == stage).map(|s| (s.1, s.2)).unwrap_or_else(|| panic!("no {stage}"))
        };
        self.steps.iter().map(|s| of(&s.stages)).collect()
    }

    /// (kernels, correlated) per step.
    fn counts(&self) -> Vec<(u32, u32)> {
        self.steps.iter().map(|s| (s.kernels, s.correlated)).collect()
    }
}

fn within(value: u64, expected: u64, tolerance: f64) -> bool {
    (value as f64 - expected as f64).abs() <= expected as f64 * tolerance
}

fn frontier(job: &Path) -> Value {
    let report = frontier_json(job);
    assert_eq!(report["windows"].as_array().map(Vec::len), Some(1), "{report}");
    report["windows"][0].clone()
}

fn forward_labels(window: &Value) -> Vec<String> {
    let labels = window["labels"].as_array().expect("labels");
    labels.iter().map(|l| l["label"].as_str().unwrap().to_string()).filter(|l| l.starts_with("forward_")).collect()
}

fn names(values: &Value) -> Vec<&str> {
    values.as_array().expect("a list").iter().map(|v| v.as_str().unwrap()).collect()
}

#[test]
fn a_device_busy_forward_frontier_is_supported_by_kernel_time() {
    let _alone = one_at_a_time();
    let job = run_job("device-supported", "supported", Cuda::ByTime);
    let slow = RankDevice::read(&job, SLOW_RANK);
    slow.assert_every_step();
    // 10 kernels x 5 ms back to back from 0.2 ms into a 60 ms forward: 50 ms, no spill.
    for (device, spill) in slow.stage(FORWARD) {
        assert!(within(device, 50 * MS, 0.01) && spill == 0, "forward {device} ns, spill {spill} ns");
    }
    assert!(slow.counts().iter().all(|&c| c == (10, 0)), "{:?}", slow.counts());
    let fast = RankDevice::read(&job, 0);
    fast.assert_every_step();
    assert!(fast.stage(FORWARD).iter().all(|&(d, s)| within(d, 8 * MS, 0.01) && s == 0), "{:?}", fast.stage(FORWARD));
    assert!(fast.stage(BACKWARD).iter().all(|&(d, _)| d == 0), "{:?}", fast.stage(BACKWARD));

    let window = frontier(&job);
    assert!(names(&window["top2"]).contains(&FORWARD), "{window}");
    assert_eq!(window["leader_ranks"][FORWARD], serde_json::json!([SLOW_RANK]), "{window}");
    assert_eq!(forward_labels(&window), ["forward_device_supported"], "{window}");
    let device = &window["forward_device"];
    assert_eq!((&device["samples"], &device["ready_ratio"]), (&(4 * STEPS).into(), &1.0.into()), "{device}");
    // 12 steps x (50 ms on rank 2 + 3 x 8 ms elsewhere).
    let device_s = device["device_s"].as_f64().unwrap();
    assert!((device_s - 0.888).abs() < 0.01, "{device}");
}

#[test]
fn a_host_bound_forward_frontier_is_flagged_as_host_overhead() {
    let _alone = one_at_a_time();
    let job = run_job("device-host", "host", Cuda::ByCorrelation);
    let slow = RankDevice::read(&job, SLOW_RANK);
    slow.assert_every_step();
    // 2 kernels x 2 ms in a 60 ms forward, both charged through their launch calls.
    assert!(slow.stage(FORWARD).iter().all(|&(d, s)| within(d, 4 * MS, 0.01) && s == 0), "{:?}", slow.stage(FORWARD));
    assert!(slow.counts().iter().all(|&c| c == (2, 2)), "{:?}", slow.counts());

    let window = frontier(&job);
    assert!(names(&window["top2"]).contains(&FORWARD), "{window}");
    assert_eq!(window["leader_ranks"][FORWARD], serde_json::json!([SLOW_RANK]), "{window}");
    assert_eq!(forward_labels(&window), ["forward_host_overhead_suspected"], "{window}");
}

#[test]
fn forward_kernels_running_into_backward_are_spillover_by_correlation() {
    let _alone = one_at_a_time();
    let job = run_job("device-spill", "spill", Cuda::ByCorrelation);
    for rank in 0..4 {
        let rank = RankDevice::read(&job, rank);
        rank.assert_every_step();
        // 50 ms of kernels launched in a 2 ms forward: all of it forward's, nearly all
        // spill; backward, which only waits for them, launched nothing.
        let forward = rank.stage(FORWARD);
        let (device, spill) = forward.iter().fold((0, 0), |a, s| (a.0 + s.0, a.1 + s.1));
        assert!(within(device, STEPS as u64 * 50 * MS, 0.05), "{forward:?}");
        assert!(spill as f64 >= 0.9 * device as f64, "{forward:?}");
        let backward: u64 = rank.stage(BACKWARD).iter().map(|s| s.0).sum();
        assert!(backward as f64 <= 0.05 * device as f64, "{:?}", rank.stage(BACKWARD));
        assert!(rank.counts().iter().all(|&c| c == (10, 10)), "{:?}", rank.counts());
    }

    // Backward, where the GPU time became host-visible, leads; forward is not in the top-2.
    let window = frontier(&job);
    assert_eq!(window["top1"], BACKWARD, "{window}");
    assert!(!names(&window["top2"]).contains(&FORWARD), "{window}");
    assert_eq!(forward_labels(&window), ["forward_spillover_suspected"], "{window}");
}

#[test]
fn without_correlation_kernels_queued_in_forward_count_where_they_start() {
    let _alone = one_at_a_time();
    let job = run_job("device-spill-by-time", "spill", Cuda::ByTime);
    let slow = RankDevice::read(&job, SLOW_RANK);
    slow.assert_every_step();
    // Only the first kernel starts inside the 2 ms forward (and runs 3.2 ms past it); the
    // nine queued behind it start in backward and are charged there (docs/kernels.md's limit).
    let per_step: Vec<_> = slow.stage(FORWARD).into_iter().zip(slow.stage(BACKWARD)).collect();
    for &((fwd, _), (bwd, _)) in &per_step {
        assert!(within(fwd + bwd, 50 * MS, 0.01) && fwd >= 5 * MS, "{per_step:?}");
    }
    let first_only = per_step.iter().filter(|((fwd, spill), _)| *fwd == 5 * MS && *spill > 2 * MS).count();
    assert!(first_only >= STEPS - 2, "{per_step:?}");
    assert!(slow.counts().iter().all(|&c| c == (10, 0)), "{:?}", slow.counts());
}

#[test]
fn without_the_cuda_door_no_device_evidence_and_no_forward_label() {
    let _alone = one_at_a_time();
    let job = run_job("device-none", "supported", Cuda::Off);
    for rank in 0..4 {
        let rank = RankDevice::read(&job, rank);
        assert!(rank.steps.is_empty() && rank.statuses.is_empty(), "{:?}", rank.counts());
    }
    // The same frontier as with the door (forward in the top-2, rank 2 leading it): only
    // the device evidence is missing, so no forward_* label is guessed.
    let window = frontier(&job);
    assert!(names(&window["top2"]).contains(&FORWARD), "{window}");
    assert_eq!(window["leader_ranks"][FORWARD], serde_json::json!([SLOW_RANK]), "{window}");
    assert_eq!(window["forward_device"], Value::Null, "{window}");
    assert!(forward_labels(&window).is_empty(), "{window}");
}
