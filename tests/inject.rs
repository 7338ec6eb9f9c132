//! SF_INJECT on real multi-process jobs: every fired rule is an injection record, delays
//! and failures act where they should, a hang leaves the culprit outside the collective
//! its peers are stuck in, and the watchdog writes evidence of it.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use stagefrontier::core::log::nccl_op::NcclOp;
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::{InjectAction, Injection, RecordBody};

fn injections(bodies: &[RecordBody]) -> Vec<Injection> {
    bodies
        .iter()
        .filter_map(|b| match b {
            RecordBody::Injection(i) => Some(*i),
            _ => None,
        })
        .collect()
}

#[test]
fn delays_are_recorded_with_rank_op_and_sequence() {
    let root = log_root("inject-delay");
    run_ok(
        preloaded(&trainer_sim(), &root, "job")
            .args(trainer_args(4, 10))
            .env("SF_INJECT", "delay:rank=1,op=allgather,seq=5-20,ms=30"),
    );
    let logs = rank_logs(&root, "job");
    for (rank, path) in logs.iter().enumerate() {
        let bodies = bodies(path);
        let fired = injections(&bodies);
        if rank != 1 {
            assert!(fired.is_empty(), "rank {rank}: {fired:?}");
            continue;
        }
        let calls = nccl_calls(&bodies);
        let seqs: Vec<u64> = fired.iter().map(|i| i.comm_seq).collect();
        let allgathers_in_range: Vec<u64> =
            calls.iter().filter(|c| c.op == NcclOp::AllGather && (5..=20).contains(&c.seq)).map(|c| c.seq).collect();
        assert!(allgathers_in_range.len() >= 2, "the trainer's pattern puts several allgathers in 5..=20");
        assert_eq!(seqs, allgathers_in_range, "exactly the allgathers among collectives 5..=20");
        assert!(fired
            .iter()
            .all(|i| i.action == InjectAction::Delay && i.op == Some(NcclOp::AllGather) && i.delay_ns == 30_000_000));
        for i in &fired {
            let call = calls.iter().find(|c| c.comm_id == i.comm_id && c.seq == i.comm_seq).expect("the delayed call");
            assert_eq!(call.op, NcclOp::AllGather);
            assert!(
                call.t_enter_ns >= i.t_ns + 30_000_000,
                "the delay comes before the call enters NCCL: {i:?} {call:?}"
            );
        }
    }
}

#[test]
fn a_failure_is_returned_to_the_application_and_recorded() {
    let root = log_root("inject-fail");
    let out = preloaded(&trainer_sim(), &root, "job")
        .args(trainer_args(2, 3))
        .env("SF_INJECT", "fail:rank=0,op=broadcast,result=ncclSystemError")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ncclBroadcast"), "the trainer saw the failure: {stderr}");
    let bodies = bodies(&rank_logs(&root, "job")[0]);
    let fired = injections(&bodies);
    assert_eq!(fired.len(), 1);
    assert_eq!((fired[0].action, fired[0].op, fired[0].result), (InjectAction::Fail, Some(NcclOp::Broadcast), 2));
    let failed = nccl_calls(&bodies).into_iter().find(|c| c.op == NcclOp::Broadcast).unwrap();
    assert_eq!((failed.result, failed.seq), (2, fired[0].comm_seq));
}

#[test]
fn a_malformed_rule_is_one_line_and_injects_nothing() {
    let root = log_root("inject-bad");
    let out = run_ok(
        preloaded(&trainer_sim(), &root, "job").args(trainer_args(2, 3)).env("SF_INJECT", "hang:rank=0,sequence=4"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<_> = stderr.lines().filter(|l| l.contains("SF_INJECT")).collect();
    assert_eq!(lines.len(), 2, "one line per rank: {stderr}");
    assert!(lines[0].contains("unknown key `sequence`"), "{}", lines[0]);
    for path in rank_logs(&root, "job") {
        assert!(injections(&bodies(&path)).is_empty());
    }
}

/// Polls until `probe` holds or the deadline passes.
fn wait_for(what: &str, timeout: Duration, mut probe: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !probe() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_hang_leaves_the_culprit_outside_and_the_watchdog_writes_evidence() {
    let root = log_root("inject-hang");
    let mut job = preloaded(&trainer_sim(), &root, "job")
        .args(["--ranks", "4", "--steps", "1000", "--stage-ms", "data=2,fwd=2,bwd=4,callbacks=0,optim=1"])
        .args(["--launch", "blocking"])
        .env("SF_INJECT", "hang:rank=2,op=allreduce,seq=12")
        .env("SF_HANG_MIN_S", "0.05")
        .env("SF_HANG_FACTOR", "20")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let evidence_on_all_waiters = || {
        let logs = rank_logs(&root, "job");
        logs.len() == 4
            && logs.iter().enumerate().filter(|(rank, _)| *rank != 2).all(|(_, path)| {
                RankLog::open(path)
                    .is_ok_and(|log| log.records().0.iter().any(|r| matches!(r.body, RecordBody::HangEvidence(_))))
            })
    };
    wait_for("hang evidence on ranks 0, 1, 3", Duration::from_secs(40), evidence_on_all_waiters);

    let logs = rank_logs(&root, "job");
    let culprit = RankLog::open(&logs[2]).unwrap();
    let world = culprit.comms()[0].clone();
    assert_eq!((world.coll_entered, world.coll_returned), (11, 11), "the culprit never entered #12");
    assert!(world.inflight.is_none());
    // #12 is the first bucket allreduce of step 2 (a broadcast, then 4 allreduces and an
    // allgather per step); the live header says where the culprit stopped.
    assert_eq!(culprit.position(), (Some(2), Some("model.backward_cpu_wall".to_string())));
    let fired = injections(&culprit.records().0.into_iter().map(|r| r.body).collect::<Vec<_>>());
    assert_eq!(
        fired.iter().map(|i| (i.action, i.op, i.comm_seq)).collect::<Vec<_>>(),
        [(InjectAction::Hang, Some(NcclOp::AllReduce), 12)]
    );
    for rank in [0, 1, 3] {
        let log = RankLog::open(&logs[rank]).unwrap();
        let comm = log.comms()[0].clone();
        assert_eq!((comm.coll_entered, comm.coll_returned), (12, 11), "rank {rank} waits in #12");
        assert_eq!(comm.inflight.and_then(|f| f.op), Some(NcclOp::AllReduce));
        let evidence: Vec<_> = log
            .records()
            .0
            .into_iter()
            .filter_map(|r| match r.body {
                RecordBody::HangEvidence(h) => Some(h),
                _ => None,
            })
            .collect();
        assert_eq!(evidence.len(), 1, "reported once, however long it hangs");
        assert_eq!((evidence[0].comm_seq, evidence[0].op, evidence[0].comm_id), (12, NcclOp::AllReduce, world.comm_id));
        // Steps take at least 9 ms here (2+2+4+1 ms of stages), so 20 steps' worth is
        // above the 50 ms floor: the threshold follows the job's own pace.
        let threshold = evidence[0].threshold_ns;
        assert!((180_000_000..10_000_000_000).contains(&threshold), "threshold {threshold} ns");
        assert!(evidence[0].t_ns - evidence[0].since_ns >= threshold);
    }

    job.kill().unwrap();
    let out = job.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().filter(|l| l.contains("has been in flight")).count(), 3, "{stderr}");
}
