//! sf-trainer-sim --launch async --hang-kernel under the library: a stuck kernel leaves
//! every rank blocked on the device after the same NCCL calls, so host call counts cannot
//! tell the culprit, the case device evidence exists for.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::RecordBody;

/// Collectives recorded in each rank's log so far; a log still being written reads fine.
fn nccl_call_counts(root: &std::path::Path) -> Vec<usize> {
    rank_logs(root, "job")
        .iter()
        .map(|path| {
            RankLog::open(path).map_or(0, |log| {
                log.records()
                    .0
                    .iter()
                    .filter(|r| matches!(r.body, RecordBody::NcclCall(call) if call.op.is_collective()))
                    .count()
            })
        })
        .collect()
}

#[test]
fn a_hung_kernel_leaves_every_rank_blocked_after_the_same_nccl_calls() {
    let root = log_root("sim-async-hang");
    let (ranks, buckets, hung_step) = (3, 4, 2);
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(trainer_args(ranks, 50))
        .args(["--launch", "async", "--buckets", &buckets.to_string(), "--hang-kernel", &format!("1:{hung_step}")])
        // Stages of a few milliseconds, as a job's are: time inside the returning calls is
        // then the small share that tells asynchronous launches from blocking ones.
        .args(["--stage-ms", "data=20,fwd=10,bwd=20,callbacks=2,optim=5"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut job = Killed(cmd.spawn().expect("start sf-trainer-sim"));

    // The broadcast, then per step `buckets` allreduces and the loss allgather; the hung
    // step's allreduces are launched before the host synchronizes in callbacks.
    let expected = 1 + hung_step * (buckets + 1) + buckets;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut counts = nccl_call_counts(&root);
    while counts.len() != ranks as usize || counts.iter().any(|&n| n < expected as usize) {
        assert!(Instant::now() < deadline, "the ranks never issued {expected} collectives each: {counts:?}");
        std::thread::sleep(Duration::from_millis(20));
        counts = nccl_call_counts(&root);
    }
    // Blocked: a second later, no rank made another call and the job still runs.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(nccl_call_counts(&root), vec![expected as usize; ranks as usize], "every rank, the same calls");
    assert!(job.0.try_wait().expect("try_wait").is_none(), "the job ended although a kernel never completes");

    // With the CUDA door shut no log holds the device: sf hang cannot name the stuck
    // kernel, blames nobody, and says that such a stall cannot be seen.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sf"))
        .args(["hang", "--min-stuck-s", "0.5"])
        .arg(root.join("job"))
        .output()
        .expect("run sf hang");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.starts_with("not hung"), "{text}");
    assert!(text.contains("a kernel stuck on a device looks the same"), "{text}");
}

/// The same hang with NCCL's profiler door open and the CUDA door shut: the profiler's
/// KernelCh starts show rank 0's and 2's devices inside step 2's first allreduce and rank
/// 1's never beginning it, so sf hang names rank 1 from the profiler alone, and says what
/// it is stuck behind cannot be seen.
#[test]
fn a_hung_kernel_is_named_through_the_profiler_with_the_cuda_door_shut() {
    let root = log_root("sim-async-hang-profiler");
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(trainer_args(3, 100_000))
        .args(["--launch", "async", "--hang-kernel", "1:2"])
        .args(["--stage-ms", "data=4,fwd=4,bwd=8,callbacks=1,optim=2"])
        .env("NCCL_PROFILER_PLUGIN", library())
        .env("FAKENCCL_PROFILER_VERSION", "7")
        .env("SF_PROFILER_KERNEL_CH", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _job = Killed(cmd.spawn().expect("start sf-trainer-sim"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let (text, json) = loop {
        let run = |json: bool| {
            let mut sf = std::process::Command::new(env!("CARGO_BIN_EXE_sf"));
            sf.arg("hang").arg(root.join("job")).args(json.then_some("--json"));
            sf.output().expect("run sf hang")
        };
        let out = run(false);
        if out.status.code() == Some(3) {
            let json: serde_json::Value = serde_json::from_slice(&run(true).stdout).unwrap();
            break (String::from_utf8_lossy(&out.stdout).to_string(), json);
        }
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(Instant::now() < deadline, "never named: {text}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(text.starts_with("HUNG: rank 1's device never began AllReduce #"), "{text}");
    assert!(text.contains("ranks 0, 2 began it and wait"), "{text}");
    assert!(text.contains("the CUDA door was shut"), "{text}");
    assert_eq!(json["hang_evidence"], "profiler", "{json}");
    assert_eq!(json["profiler_stall"]["rank"], 1, "{json}");
    assert_eq!(json["profiler_stall"]["waiting_ranks"], serde_json::json!([0, 2]), "{json}");
}
