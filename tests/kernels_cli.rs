//! `sf kernels` on real rank logs: each rank's kernel activity goes through the
//! collector's KernelWindows into a LogWriter-backed log, as the CUDA door's drain feeds
//! it, then the real `sf` binary reads the job directory.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use stagefrontier::core::kernels::kernel_activity::{Activity, ActivityKind, KernelNames};
use stagefrontier::core::kernels::kernel_windows::{KernelWindows, WindowSettings};
use stagefrontier::core::log::identity::Identity;
use stagefrontier::core::log::writer::{HeaderInfo, LogWriter};
use stagefrontier::core::record::clock::select;

const MS: u64 = 1_000_000;

/// xorshift64* with Box-Muller: enough randomness for launch durations.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform().max(1e-300), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// Three windows of a data-parallel step loop on `rank`: a two-shape GEMM, a softmax and
/// an NCCL allreduce per step; `slow_gemm` stretches every GEMM launch.
fn write_rank(dir: &Path, rank: i32, slow_gemm: f64) {
    write_rank_waiting(dir, rank, slow_gemm, 1.0)
}

/// A rank whose NCCL kernels last `nccl_wait` times as long: it waited longer for its peers.
fn write_rank_waiting(dir: &Path, rank: i32, slow_gemm: f64, nccl_wait: f64) {
    let identity =
        Identity { global_rank: rank, world_size: 8, local_rank: rank % 8, job_id: "job".into(), source: "torchrun" };
    let calibration = select(false);
    let info = HeaderInfo {
        identity: &identity,
        pid: 1000 + rank as u32,
        host: "node",
        calibration: &calibration,
        slot_count: 4096,
        ring_capacity: 1024,
    };
    let mut writer = LogWriter::create(&dir.join(identity.file_name(0)), &info).expect("create log");
    let mut windows = KernelWindows::new(WindowSettings::new(1000, 500, 0));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((rank as u64 + 1) * 0x1000_0001));
    let mut launch = |w: &mut KernelWindows, name: &str, stream: u32, start_ns: u64, median_ns: f64| {
        let duration = (median_ns * (0.05 * rng.normal()).exp()) as u64;
        let activity = Activity {
            kind: ActivityKind::Kernel,
            name_id: KernelNames::NONE,
            device: 0,
            context: 1,
            stream,
            correlation: 0,
            start_ns,
            end_ns: start_ns + duration,
        };
        w.feed(&activity, Some(name.as_bytes()));
        duration
    };
    for step in 0..30u64 {
        let mut t = 10 * MS + step * 100 * MS;
        for i in 0..40 {
            let median = if i % 4 == 0 { 200_000.0 } else { 50_000.0 };
            t += launch(&mut windows, "gemm_bf16_128x256", 7, t, slow_gemm * median) + 2_000;
            t += launch(&mut windows, "softmax_warp_forward", 7, t, 12_000.0) + 2_000;
        }
        launch(&mut windows, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 13, t, nccl_wait * 3_000_000.0);
    }
    windows.finish(&mut writer);
}

fn kernels_json(dir: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value) {
    let out = Command::new(artifact("sf")).arg("kernels").arg(dir).arg("--json").args(extra).output().unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    (out.status.code(), report)
}

#[test]
fn a_planted_slow_kernel_on_one_rank_is_flagged_and_a_healthy_job_is_quiet() {
    let healthy = TempDir::new("kernels-healthy");
    for rank in 0..8 {
        write_rank(&healthy.0, rank, 1.0);
    }
    let (code, report) = kernels_json(&healthy.0, &[]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["kernel_records"], true);
    // The NCCL kernel is not compared: its duration is its wait for the slowest peer.
    assert_eq!(report["kernels_compared"], 2, "{report}");
    assert_eq!(report["anomalies"], serde_json::json!([]), "{report}");
    let comparisons = report["comparisons"].as_array().unwrap();
    assert_eq!(comparisons.len(), 2, "every kernel compared is listed: {report}");
    for c in comparisons {
        assert_eq!(c["ranks"], serde_json::json!([0, 1, 2, 3, 4, 5, 6, 7]));
        assert_eq!(c["scores_ns"].as_array().unwrap().len(), 8);
        assert_eq!((c["anomalous"].clone(), c["w1_ns"].clone()), (serde_json::json!([]), serde_json::Value::Null));
    }
    let rank0 = &report["ranks"][0];
    assert_eq!((rank0["windows"].as_u64(), rank0["kernel_names"].as_u64()), (Some(3), Some(3)), "{rank0}");
    assert_eq!(rank0["nccl"]["kernels"], 30);
    assert_eq!(rank0["launches"], 30 * 81);

    let slow = TempDir::new("kernels-slow");
    for rank in 0..8 {
        write_rank(&slow.0, rank, if rank == 5 { 1.3 } else { 1.0 });
    }
    let (code, report) = kernels_json(&slow.0, &["--matrix"]);
    assert_eq!(code, Some(4), "{report}");
    let gemm = report["comparisons"].as_array().unwrap().iter().find(|c| c["kernel"] == "gemm_bf16_128x256").unwrap();
    assert_eq!(gemm["anomalous"], serde_json::json!([5]));
    let w1: Vec<Vec<f64>> = serde_json::from_value(gemm["w1_ns"].clone()).unwrap();
    assert_eq!((w1.len(), w1[0].len()), (8, 8));
    assert!((0..8).all(|i| w1[i][i] == 0.0 && (0..8).all(|j| (w1[i][j] - w1[j][i]).abs() < 1e-6)), "{w1:?}");
    let rank5_row: f64 = w1[5].iter().sum::<f64>() / 7.0;
    assert!((rank5_row - gemm["scores_ns"][5].as_f64().unwrap()).abs() < 1e-6, "a score is its row's mean");
    let anomalies = report["anomalies"].as_array().unwrap();
    assert_eq!(anomalies.len(), 1, "{report}");
    assert_eq!(anomalies[0]["rank"], 5);
    assert_eq!(anomalies[0]["kernel"], "gemm_bf16_128x256");
    assert!(anomalies[0]["past_fence_ns"].as_f64().unwrap() > 0.0);

    let human = run_ok(Command::new(artifact("sf")).arg("kernels").arg(&healthy.0));
    assert!(String::from_utf8_lossy(&human.stdout).contains("no anomalous kernel"));

    // One word with sf slow: --group-by job|local-rank|host; --role-by all is the old spelling.
    assert_eq!((report["group_by"].as_str(), report["comparisons"][0]["group"].as_str()), (Some("job"), Some("job")));
    let (_, old) = kernels_json(&slow.0, &["--role-by", "all"]);
    assert_eq!(
        (old["group_by"].clone(), old["anomalies"].clone()),
        (report["group_by"].clone(), report["anomalies"].clone())
    );
    let (_, by_local) = kernels_json(&slow.0, &["--group-by", "local-rank"]);
    assert_eq!(by_local["group_by"], "local_rank");
    assert!(by_local["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["group"].as_str().unwrap().starts_with("local_rank ")));

    // The example --help shows has the real output's headline and columns.
    let help = run_ok(Command::new(artifact("sf")).args(["kernels", "--help"]));
    let help = String::from_utf8_lossy(&help.stdout);
    let out = Command::new(artifact("sf")).arg("kernels").arg(&slow.0).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let headline = "kernels compared (grouped by job, IQR k 1.5): ANOMALOUS: rank 5 in";
    assert!(help.contains(headline) && text.lines().next().unwrap().contains(headline), "{text}");
    let columns = |t: &str| {
        t.lines()
            .map(str::trim)
            .find(|l| l.starts_with("RANK "))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
    };
    assert_eq!(columns(&help), columns(&text), "sf kernels --help's example table against the real one");
}

#[test]
fn logs_without_kernel_records_say_how_to_get_them() {
    let dir = TempDir::new("kernels-none");
    let identity = Identity { global_rank: 0, world_size: 1, local_rank: 0, job_id: "job".into(), source: "torchrun" };
    let calibration = select(false);
    let info = HeaderInfo {
        identity: &identity,
        pid: 1,
        host: "node",
        calibration: &calibration,
        slot_count: 1024,
        ring_capacity: 1024,
    };
    LogWriter::create(&dir.join(&identity.file_name(0)), &info).expect("create log");
    let out = Command::new(artifact("sf")).arg("kernels").arg(&dir.0).output().unwrap();
    // Nothing of that kind to judge: said in one line, and no error (0).
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("no kernel records") && stdout.contains("CUDA_INJECTION64_PATH"), "{stdout}");
    let missing = Command::new(artifact("sf")).arg("kernels").arg(dir.join("nope")).output().unwrap();
    assert_eq!(missing.status.code(), Some(1));
    let said = String::from_utf8_lossy(&missing.stderr);
    assert!(said.contains("nope: cannot read: No such file or directory"), "{said}");
}

#[test]
fn a_rank_whose_nccl_kernels_wait_longer_is_no_kernel_anomaly() {
    // Asynchronous NCCL: a rank that arrives early at each allreduce spends the difference
    // inside its NCCL kernel. That is a wait (sf frontier and sf slow charge it to whoever
    // arrived late), not a slow kernel of its own.
    let dir = TempDir::new("kernels-nccl-wait");
    for rank in 0..8 {
        write_rank_waiting(&dir.0, rank, 1.0, if rank == 2 { 3.0 } else { 1.0 });
    }
    let (code, report) = kernels_json(&dir.0, &[]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["anomalies"], serde_json::json!([]), "{report}");
    assert!(report["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| !c["kernel"].as_str().unwrap().starts_with("nccl")));
}
