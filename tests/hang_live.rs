//! `sf hang` on real jobs, read while they are hung: a culprit injected with SF_INJECT is
//! named within two steps, a rank killed with kill -9 is dead, and a healthy job sampled
//! again and again never looks hung.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::RecordBody;
use stagefrontier::core::record::clock::monotonic_ns;

fn sf_hang(dir: &std::path::Path) -> (Option<i32>, serde_json::Value) {
    let out = Command::new(artifact("sf")).arg("hang").arg(dir).arg("--json").output().unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code(), report)
}

fn ranks_in(report: &serde_json::Value, comm_field: &str) -> Vec<u64> {
    let mut ranks: Vec<u64> = report["communicators"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c[comm_field].as_array().into_iter().flatten().filter_map(|r| r.as_u64()))
        .collect();
    ranks.sort_unstable();
    ranks.dedup();
    ranks
}

fn state_of(report: &serde_json::Value, rank: u64) -> String {
    report["ranks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["rank"] == rank)
        .map_or(String::new(), |r| r["state"].as_str().unwrap_or_default().to_string())
}

fn median_step_ns(log: &RankLog) -> u64 {
    let mut walls: Vec<u64> = log
        .records()
        .0
        .iter()
        .filter_map(|r| match r.body {
            RecordBody::StepVector(v) if v.part == 0 => Some(v.wall_ns),
            _ => None,
        })
        .collect();
    walls.sort_unstable();
    walls[walls.len() / 2]
}

#[test]
fn the_culprit_of_an_injected_hang_is_named_within_two_steps_while_the_job_is_hung() {
    let _serial = one_at_a_time();
    let root = log_root("hang-live");
    // #40 is an allreduce of step 7: a broadcast, then 4 allreduces and an allgather per step.
    let _job =
        start_sim(&root, 8, "data=40,fwd=40,bwd=80,callbacks=5,optim=20", Some("hang:rank=3,op=allreduce,seq=40"));
    let dir = root.join("job");
    let deadline = Instant::now() + Duration::from_secs(60);
    let hang_started_ns = loop {
        let logs = rank_logs(&root, "job");
        let fired = logs.get(3).and_then(|path| RankLog::open(path).ok()).and_then(|log| {
            log.records().0.iter().find_map(|r| match r.body {
                RecordBody::Injection(i) => Some(i.t_ns),
                _ => None,
            })
        });
        if let Some(t) = fired {
            break t;
        }
        assert!(Instant::now() < deadline, "the hang never fired");
        std::thread::sleep(Duration::from_millis(5));
    };
    let step_ns = median_step_ns(&RankLog::open(&rank_logs(&root, "job")[0]).unwrap());

    let (code, report) = loop {
        let (code, report) = sf_hang(&dir);
        if code == Some(3) {
            break (code, report);
        }
        assert!(Instant::now() < deadline, "never diagnosed: {report}");
        std::thread::sleep(Duration::from_millis(10));
    };
    let detected_ns = monotonic_ns();
    // The job stops making progress once the culprit has stopped and the last of the other
    // ranks has entered #40 and can go no further: the hang is observable from then on.
    let last_waiter_ns = rank_logs(&root, "job")
        .iter()
        .filter_map(|path| RankLog::open(path).ok())
        .filter_map(|log| log.comms().first().and_then(|c| c.inflight.as_ref()).map(|f| f.since_mono_ns))
        .max()
        .expect("the waiters are in flight");
    let stopped_ns = last_waiter_ns.max(hang_started_ns);
    assert!(
        detected_ns - stopped_ns <= 2 * step_ns,
        "diagnosed {} ms after the job stopped ({} ms after the culprit did); 2 steps are {} ms",
        (detected_ns - stopped_ns) / 1_000_000,
        (detected_ns - hang_started_ns) / 1_000_000,
        2 * step_ns / 1_000_000
    );
    assert_eq!(code, Some(3));
    assert_eq!(ranks_in(&report, "missing_ranks"), [3], "{report}");
    assert_eq!(ranks_in(&report, "waiting_ranks"), [0, 1, 2, 4, 5, 6, 7], "{report}");
    let stuck: Vec<u64> =
        report["communicators"].as_array().unwrap().iter().filter_map(|c| c["stuck_seq"].as_u64()).collect();
    assert_eq!(stuck, [40], "{report}");
    assert_eq!(state_of(&report, 3), "missing");
    let culprit = report["ranks"].as_array().unwrap().iter().find(|r| r["rank"] == 3).unwrap();
    assert_eq!(culprit["stage"], "model.backward_cpu_wall", "{culprit}");
}

#[test]
fn a_rank_killed_with_kill_9_is_reported_dead() {
    let _serial = one_at_a_time();
    let root = log_root("hang-dead");
    let job = start_sim(&root, 4, "data=5,fwd=5,bwd=10,callbacks=1,optim=2", None);
    let deadline = Instant::now() + Duration::from_secs(30);
    let victim = loop {
        let logs = rank_logs(&root, "job");
        if let Some(log) = logs.get(2).and_then(|p| RankLog::open(p).ok()).filter(|l| l.live().committed > 100) {
            break log;
        }
        assert!(Instant::now() < deadline, "job never got going");
        std::thread::sleep(Duration::from_millis(10));
    };
    // Stop the launcher first, as a wedged launcher would be, so the other ranks stay up
    // and wait for the dead one instead of being torn down.
    let launcher = job.0.id() as i32;
    // SAFETY: kill(2) on pids this test started; no memory is involved.
    unsafe {
        assert_eq!(libc::kill(launcher, libc::SIGSTOP), 0);
        assert_eq!(libc::kill(victim.header.pid as i32, libc::SIGKILL), 0);
    }
    std::thread::sleep(Duration::from_millis(1500)); // past the heartbeat's staleness
    let (code, report) = sf_hang(&root.join("job"));
    assert_eq!(code, Some(3), "{report}");
    assert_eq!(state_of(&report, 2), "dead", "{report}");
    assert_eq!(ranks_in(&report, "dead_ranks"), [2], "{report}");
    // SAFETY: as above; the launcher must run again to be killed and reaped by Drop.
    unsafe { libc::kill(launcher, libc::SIGCONT) };
}

#[test]
fn a_healthy_job_sampled_again_and_again_is_never_hung() {
    let _serial = one_at_a_time();
    let root = log_root("hang-healthy");
    let mut job = preloaded(&trainer_sim(), &root, "job")
        .args(["--launch", "blocking"])
        .args([
            "--ranks",
            "4",
            "--steps",
            "200",
            "--stage-ms",
            "data=2,fwd=2,bwd=4,callbacks=1,optim=1",
            "--jitter-ms",
            "3",
        ])
        // A watchdog threshold a healthy run must never reach, but low enough to matter.
        .env("SF_HANG_MIN_S", "0.5")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut samples = 0;
    while job.try_wait().unwrap().is_none() {
        if rank_logs(&root, "job").len() == 4 {
            let (code, report) = sf_hang(&root.join("job"));
            assert_eq!(code, Some(0), "sample {samples}: {report}");
            samples += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(job.wait().unwrap().success());
    assert!(samples >= 10, "only {samples} samples");
    let (code, report) = sf_hang(&root.join("job"));
    assert_eq!(code, Some(0), "{report}");
    for path in rank_logs(&root, "job") {
        assert!(!bodies(&path).iter().any(|b| matches!(b, RecordBody::HangEvidence(_))));
    }
}

/// The async twin of the healthy job, beside a CPU hog on both cores, with the default
/// 0.25 s floor: sampled live again and again and once it ended, never hung. (A device
/// state read before its kernels' completions were flushed, or a collector that missed
/// its last round at exit, read as hangs here.)
#[test]
fn a_healthy_async_job_beside_a_cpu_hog_sampled_again_and_again_is_never_hung() {
    let _serial = one_at_a_time();
    let root = log_root("hang-healthy-async");
    let _hogs: Vec<Killed> =
        (0..2).map(|_| Killed(Command::new("bash").args(["-c", "while :; do :; done"]).spawn().unwrap())).collect();
    let mut job = preloaded(&trainer_sim(), &root, "job")
        .args(["--ranks", "4", "--steps", "200", "--stage-ms", "data=2,fwd=4,bwd=8,callbacks=1,optim=2"])
        .args(["--launch", "async", "--jitter-ms", "3"])
        .env("CUDA_INJECTION64_PATH", library())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut samples = 0;
    while job.try_wait().unwrap().is_none() {
        if rank_logs(&root, "job").len() == 4 {
            let (code, report) = sf_hang(&root.join("job"));
            assert_eq!(code, Some(0), "sample {samples}: {report}");
            samples += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(job.wait().unwrap().success());
    assert!(samples >= 10, "only {samples} samples");
    let (code, report) = sf_hang(&root.join("job"));
    assert_eq!((code, &report["waits_from"]), (Some(0), &"device".into()), "{report}");
}

#[test]
fn a_count_mismatch_on_one_rank_is_flagged() {
    let _serial = one_at_a_time();
    let root = log_root("hang-mismatch");
    let out = preloaded(&trainer_sim(), &root, "job")
        .args(["--ranks", "4", "--steps", "6", "--stage-ms", "data=1,fwd=1,bwd=1,callbacks=0,optim=0"])
        .args(["--count-mismatch", "2@3", "--launch", "blocking"])
        .output()
        .unwrap();
    assert!(out.status.success(), "a silent desynchronization: the job itself notices nothing");
    let (_, report) = sf_hang(&root.join("job"));
    let mismatches: Vec<&serde_json::Value> =
        report["communicators"].as_array().unwrap().iter().flat_map(|c| c["mismatches"].as_array().unwrap()).collect();
    let count =
        mismatches.iter().find(|m| m["field"] == "count").unwrap_or_else(|| panic!("no count mismatch: {report}"));
    // Step 3's allgather is #21: a broadcast, then 4 allreduces and an allgather per step.
    assert_eq!(count["comm_seq"], 21, "{count}");
    let values = count["values"].to_string();
    assert!(values.contains('1') && values.contains('2'), "counts 1 (rank 2) and 2 (the others): {values}");
}

/// `sf hang DIR --json ARGS` until it says hung (or 30 s pass).
fn until_hung(dir: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new(artifact("sf")).arg("hang").arg(dir).arg("--json").args(args).output().unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        if report["hung"] == true {
            return report;
        }
        assert!(Instant::now() < deadline, "never hung: {report}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// torchrun tears a job down once a rank times out: afterwards every rank is dead, and
/// `sf hang` must still say what the logs saw, the rank that never entered, as a
/// post-mortem, not only "ranks 0-3 are dead".
#[test]
fn a_job_torn_down_while_hung_is_reported_post_mortem_with_the_rank_that_never_entered() {
    let _serial = one_at_a_time();
    let root = log_root("hang-post-mortem");
    let job = start_sim(&root, 4, "data=4,fwd=4,bwd=8,callbacks=1,optim=2", Some("hang:rank=3,op=allreduce,seq=40"));
    let live = until_hung(&root.join("job"), &[]);
    assert_eq!(ranks_in(&live, "missing_ranks"), [3], "{live}");
    assert!(live["post_mortem"].is_null(), "the job still runs: {live}");
    drop(job); // the launcher dies, and its ranks with it
    std::thread::sleep(Duration::from_millis(1500)); // past the heartbeat's staleness
    let (code, report) = sf_hang(&root.join("job"));
    assert_eq!(code, Some(3), "{report}");
    assert!((0..4).all(|r| state_of(&report, r) == "dead"), "{report}");
    let pm = &report["post_mortem"];
    assert_eq!((&pm["culprit_ranks"], &pm["waiting_ranks"]), (&serde_json::json!([3]), &serde_json::json!([0, 1, 2])));
    assert_eq!((&pm["op"], &pm["comm_seq"]), (&"allreduce".into(), &40.into()), "{pm}");
    let human = Command::new(artifact("sf")).arg("hang").arg(root.join("job")).output().unwrap();
    let first = String::from_utf8_lossy(&human.stdout).lines().next().unwrap_or_default().to_string();
    assert!(
        first.starts_with(
            "HUNG (post-mortem: all 4 ranks are gone; from their last live tables): rank 3 held up allreduce #40"
        ),
        "{first}"
    );
}

/// A QP whose work request never completes leaves every rank inside a collective that all
/// of them entered: without the QP evidence each is "wedged"; with it, the rank and QP
/// holding it up are named and the other rank waits for it.
#[test]
fn a_stuck_qp_is_named_with_its_rank_instead_of_every_rank_wedged() {
    let _serial = one_at_a_time();
    let root = log_root("hang-stuck-qp");
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(["--ranks", "2", "--steps", "100000", "--stage-ms", "data=2,fwd=2,bwd=4,callbacks=1,optim=1"])
        .args(["--launch", "blocking"])
        .env("NCCL_PROFILER_PLUGIN", library())
        .env("FAKENCCL_PROFILER_VERSION", "7")
        .env("FAKENCCL_NET_PROFILER", "1")
        .env("SF_WR_TIMEOUT_MS", "200")
        .env("FAKENCCL_QP_STALL_AFTER", "10")
        .env("FAKENCCL_QP_STALL_MS", "600000")
        .env("FAKENCCL_QP_RANK", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _job = Killed(cmd.spawn().unwrap());
    // The stall comes before the job has steps enough to time one: a short fallback.
    let report = until_hung(&root.join("job"), &["--fallback-stuck-s", "1"]);
    assert_eq!(state_of(&report, 1), "stuck_qp", "{report}");
    assert_eq!(state_of(&report, 0), "waiting", "{report}");
    assert!(ranks_in(&report, "wedged_ranks").is_empty(), "{report}");
    let comm =
        report["communicators"].as_array().unwrap().iter().find(|c| !c["stuck_qps"].as_array().unwrap().is_empty());
    let qp = &comm.expect("a communicator held up by a QP")["stuck_qps"][0];
    assert_eq!((&qp["rank"], &qp["qp_num"], &qp["source"]), (&1.into(), &0x101.into(), &"profiler".into()), "{qp}");
    assert_eq!(report["ranks"][0]["waiting_for"], serde_json::json!([1]));
    let human =
        Command::new(artifact("sf")).args(["hang", "--fallback-stuck-s", "1"]).arg(root.join("job")).output().unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.lines().next().unwrap_or_default().starts_with("HUNG: rank 1 QP 0x101 (profiler door, device 0)"),
        "{text}"
    );
}

/// sf-trainer-sim --launch async with `--hang-kernel 1:2` under the library with the CUDA
/// door open, 3 ranks, long enough to hang: rank 1's first backward kernel of step 2 never
/// completes, so every host launches the same collectives.
fn start_async_hang(root: &std::path::Path) -> Killed {
    let mut cmd = preloaded(&trainer_sim(), root, "job");
    cmd.args(["--ranks", "3", "--steps", "100000", "--stage-ms", "data=4,fwd=4,bwd=8,callbacks=1,optim=2"])
        .args(["--launch", "async", "--hang-kernel", "1:2"])
        .env("CUDA_INJECTION64_PATH", library())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Killed(cmd.spawn().expect("start sf-trainer-sim"))
}

/// The async twin of the live hang test: sf hang, polled from the job's start, names rank 1
/// (exit 3) no later than twice its own threshold after the stuck kernel was launched.
#[test]
fn a_hung_kernel_in_an_async_job_is_named_live_within_twice_the_threshold() {
    let _serial = one_at_a_time();
    let root = log_root("hang-live-async");
    let _job = start_async_hang(&root);
    let dir = root.join("job");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (report, detected_ns) = loop {
        let (code, report) = sf_hang(&dir);
        let detected_ns = monotonic_ns();
        if code == Some(3) {
            break (report, detected_ns);
        }
        assert!(Instant::now() < deadline, "never diagnosed: {report}");
        std::thread::sleep(Duration::from_millis(10));
    };
    let stall = &report["device_stall"];
    assert_eq!(stall["rank"], 1, "{report}");
    assert_eq!(report["waits_from"], "device", "{report}");
    assert_eq!(report["hang_evidence"], "device", "{report}");
    // The table says it too: the culprit stuck behind its kernel, the others waiting for it.
    assert_eq!((state_of(&report, 1).as_str(), state_of(&report, 0).as_str()), ("stuck_kernel", "waiting"), "{report}");
    assert_eq!(report["ranks"][2]["waiting_for"], serde_json::json!([1]), "{report}");
    let launched_ns = stall["t_launch_ns"].as_u64().expect("the stuck kernel's launch time");
    // A device stall is judged by the threshold raised to how far the device evidence
    // trails the device: two of CUPTI's buffer reads (SF_CUPTI_FLUSH_MS, 500 ms), the
    // delay after which the collector forces the flush that hands over unfinished records.
    let threshold_ns = (report["threshold"]["device_threshold_s"].as_f64().expect("a threshold") * 1e9) as u64;
    assert!(
        detected_ns - launched_ns <= 2 * threshold_ns,
        "named {} ms after the stuck kernel was launched; 2x the threshold is {} ms: {report}",
        (detected_ns - launched_ns) / 1_000_000,
        2 * threshold_ns / 1_000_000
    );
    let human = Command::new(artifact("sf")).arg("hang").arg(&dir).output().unwrap();
    let first = String::from_utf8_lossy(&human.stdout).lines().next().unwrap_or_default().to_string();
    assert!(first.contains("rank 1 "), "{first}");
}

/// The async twin of the post-mortem test: SIGTERM to the job 1 s after the hang is
/// visible; once every rank is gone, sf hang on the logs still names rank 1.
#[test]
fn an_async_job_torn_down_1_s_after_a_kernel_hung_is_reported_post_mortem_with_the_rank() {
    let _serial = one_at_a_time();
    let root = log_root("hang-post-mortem-async");
    let mut job = start_async_hang(&root);
    let dir = root.join("job");
    let live = until_hung(&dir, &[]);
    assert_eq!(live["device_stall"]["rank"], 1, "{live}");
    std::thread::sleep(Duration::from_secs(1));
    let pid = libc::pid_t::try_from(job.0.id()).expect("a pid");
    // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while job.0.try_wait().expect("try_wait").is_none() {
        assert!(Instant::now() < deadline, "the job outlived SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let report = loop {
        let (code, report) = sf_hang(&dir);
        if (0..3).all(|r| state_of(&report, r) == "dead") {
            assert_eq!(code, Some(3), "{report}");
            break report;
        }
        assert!(Instant::now() < deadline, "the ranks never read as dead: {report}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let human = Command::new(artifact("sf")).arg("hang").arg(&dir).output().unwrap();
    let first = String::from_utf8_lossy(&human.stdout).lines().next().unwrap_or_default().to_string();
    assert!(first.contains("rank 1 "), "{first}\n{report}");
}

/// One rank whose kernel never completes: no peer waits for it in a collective, so nothing
/// names a culprit (not hung, exit 0), but sf hang says what the device shows: the host has
/// waited in its synchronization, behind that kernel (seen on an H200 with a spin kernel).
#[test]
fn a_lone_rank_waiting_on_a_stuck_kernel_is_said_not_blamed() {
    let _serial = one_at_a_time();
    let root = log_root("hang-live-lone");
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(["--ranks", "1", "--steps", "100000", "--stage-ms", "data=4,fwd=4,bwd=8,callbacks=1,optim=2"])
        .args(["--launch", "async", "--hang-kernel", "0:2"])
        .env("CUDA_INJECTION64_PATH", library())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _job = Killed(cmd.spawn().expect("start sf-trainer-sim"));
    let dir = root.join("job");
    let deadline = Instant::now() + Duration::from_secs(30);
    let report = loop {
        let (code, report) = sf_hang(&dir);
        assert_ne!(code, Some(3), "one rank blames nobody: {report}");
        if report["device_waits"].as_array().is_some_and(|w| w.first().is_some_and(|w| !w["kernel"].is_null())) {
            break report;
        }
        assert!(Instant::now() < deadline, "the wait was never seen: {report}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let wait = &report["device_waits"][0];
    assert_eq!((wait["rank"].as_i64(), wait["kernel"].as_str()), (Some(0), Some("sim_bwd_0")), "{report}");
    let human = Command::new(artifact("sf")).arg("hang").arg(&dir).output().unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("rank 0's host has waited") && text.contains("behind kernel sim_bwd_0"),
        "the note says where the host waits:\n{text}"
    );
}
