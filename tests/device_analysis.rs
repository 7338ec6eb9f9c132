//! The analyses on device evidence, end to end: sf-trainer-sim --launch async on the fake
//! CUDA runtime, under the library with the CUDA door open (CUDA_INJECTION64_PATH), and
//! `sf` reading the logs.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::RecordBody;

fn sf_json(command: &str, dir: &std::path::Path) -> (Option<i32>, Value) {
    let out = Command::new(artifact("sf")).arg(command).arg(dir).arg("--json").output().expect("run sf");
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("sf {command}: {e}: {out:?}"));
    (out.status.code(), json)
}

/// Rank 2's backward kernels take 15 ms longer: its host runs ahead, its device reaches
/// each allreduce late. The device names it, in backward; no waiter is named.
#[test]
fn a_rank_whose_device_runs_over_in_backward_is_named_from_the_device() {
    let _serial = one_at_a_time();
    let root = log_root("device-analysis-slow");
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(["--ranks", "4", "--steps", "16", "--stage-ms", "data=2,fwd=4,bwd=8,callbacks=1,optim=2"])
        .args(["--launch", "async", "--slow-kernel", "2:bwd:15"])
        .env("CUDA_INJECTION64_PATH", library());
    run_ok(&mut cmd);
    let dir = root.join("job");
    let (code, slow) = sf_json("slow", &dir);
    assert_eq!(slow["waits_from"], "device", "{slow}");
    assert_eq!(code, Some(4), "{slow}");
    let first = &slow["slow_ranks"][0];
    assert_eq!((first["rank"].as_u64(), first["stage"].as_str()), (Some(2), Some(TRAINER_STAGES[2])), "{slow}");
    let (_, frontier) = sf_json("frontier", &dir);
    assert_eq!(frontier["waits_from"], "device", "{frontier}");
    let culprits: Vec<u64> = frontier["windows"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["culprits"].as_array().unwrap().iter().map(|c| c["rank"].as_u64().unwrap()))
        .collect();
    assert!(!culprits.is_empty() && culprits.iter().all(|&r| r == 2), "{frontier}");
}

/// Rank 1's first backward kernel of step 2 never completes: every host launches the same
/// collectives and blocks in its synchronization; sf hang names rank 1 from the devices.
#[test]
fn a_hung_kernel_is_named_by_sf_hang_with_equal_host_counts() {
    // Alone: three jobs at once on two cores starve the fake devices' executors for longer
    // than the threshold's 0.25 s floor, which reads as a stall as it would on a host.
    let _serial = one_at_a_time();
    let root = log_root("device-analysis-hang");
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(trainer_args(3, 50))
        .args(["--launch", "async", "--hang-kernel", "1:2"])
        .env("CUDA_INJECTION64_PATH", library())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _job = Killed(cmd.spawn().expect("start sf-trainer-sim"));
    let dir = root.join("job");
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let out = Command::new(artifact("sf")).arg("hang").arg(&dir).output().expect("run sf hang");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if out.status.code() == Some(3) {
            let first = text.lines().next().unwrap_or_default();
            assert!(first.starts_with("HUNG: rank 1 "), "{text}");
            assert!(first.contains("behind kernel sim_bwd_") && first.contains("allreduce #12 "), "{text}");
            break;
        }
        assert!(Instant::now() < deadline, "never named: {text}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Rank 2's host takes 15 ms longer in backward and launches late. With the CUDA door the
/// device names it there; with the door shut the waits cannot be seen: a LEAD, exit 0.
#[test]
fn a_late_host_is_named_from_the_device_and_only_a_lead_without_it() {
    let _serial = one_at_a_time();
    for door in [true, false] {
        let root = log_root(if door { "device-analysis-host" } else { "device-analysis-blind" });
        let mut cmd = preloaded(&trainer_sim(), &root, "job");
        cmd.args(["--ranks", "4", "--steps", "16", "--stage-ms", "data=2,fwd=4,bwd=8,callbacks=1,optim=2"])
            .args(["--launch", "async", "--slow", "2:bwd:15"]);
        if door {
            cmd.env("CUDA_INJECTION64_PATH", library());
        }
        run_ok(&mut cmd);
        let dir = root.join("job");
        let (code, slow) = sf_json("slow", &dir);
        if door {
            assert_eq!((code, slow["waits_from"].as_str()), (Some(4), Some("device")), "{slow}");
            let first = &slow["slow_ranks"][0];
            assert_eq!((first["rank"].as_u64(), first["stage"].as_str()), (Some(2), Some(TRAINER_STAGES[2])), "{slow}");
            assert!(first["culprit"].is_object(), "{slow}");
        } else {
            assert_eq!((code, slow["waits_from"].as_str()), (Some(0), Some("none")), "{slow}");
            assert_eq!(slow["slow_ranks"], serde_json::json!([]), "{slow}");
            let out = Command::new(artifact("sf")).arg("slow").arg(&dir).output().expect("run sf slow");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.lines().any(|l| l.starts_with("LEAD rank 2 in ")), "{text}");
            assert!(!text.lines().any(|l| l.starts_with("SLOW") || l.starts_with("CULPRIT")), "{text}");
        }
    }
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values[values.len() / 2]
}

/// The fixture is asynchronous: under the library, the preload door's NCCL calls return
/// as soon as they are enqueued (median under 50 µs) while their kernels take milliseconds
/// on the device, waiting there for the rank whose backward runs 5 ms longer; and sf
/// frontier still answers from the device.
#[test]
fn in_an_async_job_nccl_calls_return_at_once_and_their_kernels_take_milliseconds() {
    let _serial = one_at_a_time();
    let root = log_root("device-analysis-async-fixture");
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(["--ranks", "4", "--steps", "12", "--stage-ms", "data=2,fwd=4,bwd=8,callbacks=1,optim=2"])
        .args(["--launch", "async", "--slow-kernel", "3:bwd:5"])
        .env("CUDA_INJECTION64_PATH", library());
    run_ok(&mut cmd);
    let (mut calls, mut kernels) = (Vec::new(), Vec::new());
    for path in rank_logs(&root, "job") {
        let log = RankLog::open(&path).expect("a finished log");
        for record in log.records().0 {
            match record.body {
                RecordBody::NcclCall(c) if c.op.is_collective() => calls.push(c.t_exit_ns - c.t_enter_ns),
                RecordBody::DeviceColl(k) => kernels.push(k.t_end_ns - k.t_start_ns),
                _ => {}
            }
        }
    }
    assert!(calls.len() >= 4 * 12, "{} collectives", calls.len());
    assert!(kernels.len() >= 4 * 12, "{} NCCL kernels on the device", kernels.len());
    let (call_ns, kernel_ns) = (median(calls), median(kernels));
    assert!(call_ns < 50_000, "median NCCL call {call_ns} ns on the host");
    assert!(kernel_ns >= 1_000_000, "median NCCL kernel {kernel_ns} ns on the device");
    let (code, frontier) = sf_json("frontier", &root.join("job"));
    assert!(matches!(code, Some(0 | 4)), "{frontier}");
    assert_eq!(frontier["waits_from"], "device", "{frontier}");
    assert!(!frontier["windows"].as_array().expect("windows").is_empty(), "{frontier}");
}
