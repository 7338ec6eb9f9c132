//! The library under LD_PRELOAD on real multi-process jobs (sf-trainer-sim over fakenccl).

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use stagefrontier::core::comms::nccl_op::NcclOp;
use stagefrontier::core::log::format::{Region, WriterState};
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::{CommOrigin, RecordBody};

/// (seq, op, count) of each collective on the world communicator, as one rank saw them.
fn collective_trace(bodies: &[RecordBody], world: u64) -> Vec<(u64, NcclOp, u64)> {
    nccl_calls(bodies)
        .iter()
        .filter(|c| c.comm_id == world && c.op.is_collective())
        .map(|c| (c.seq, c.op, c.count))
        .collect()
}

#[test]
fn every_collective_of_every_rank_is_recorded_and_results_are_unchanged() {
    let root = log_root("four-ranks");
    let args = trainer_args(4, 20);
    let with = run_ok(preloaded(&trainer_sim(), &root, "job").args(&args).args(["--p2p"]));
    let without =
        run_ok(std::process::Command::new(trainer_sim()).args(&args).args(["--p2p"]).env_remove("LD_PRELOAD"));
    assert_eq!(checksum(&with), checksum(&without), "the library changed the job's results");

    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 4, "one log per rank and none for the launcher: {logs:?}");
    let mut traces = BTreeMap::new();
    for (rank, path) in logs.iter().enumerate() {
        let log = RankLog::open(path).unwrap();
        assert_eq!((log.header.global_rank, log.header.world_size), (rank as i32, 4));
        assert_eq!(log.live().writer_state, Some(WriterState::Exited), "clean exit flushes");
        let bodies = bodies(path);
        let created = comms_created(&bodies);
        assert_eq!(created.len(), 1, "{created:?}");
        let world = created[0];
        assert_eq!(
            (world.rank, world.nranks, world.global_rank, world.origin),
            (rank as i32, 4, rank as i32, CommOrigin::InitRank)
        );

        let trace = collective_trace(&bodies, world.comm_id);
        let seqs: Vec<u64> = trace.iter().map(|t| t.0).collect();
        assert_eq!(seqs, (1..=trace.len() as u64).collect::<Vec<_>>(), "contiguous per-comm sequence");
        let allreduces = trace.iter().filter(|t| t.1 == NcclOp::AllReduce).count();
        assert!(allreduces >= 20 * 4, "{allreduces} allreduces for 20 steps x 4 buckets");
        assert!(trace.iter().any(|t| t.1 == NcclOp::Broadcast));
        assert!(trace.iter().filter(|t| t.1 == NcclOp::AllGather).count() >= 20);

        let p2p: Vec<_> = nccl_calls(&bodies).into_iter().filter(|c| c.op.is_p2p()).collect();
        assert_eq!(p2p.len(), 2 * 20, "one send and one recv per step");
        assert!(p2p.iter().all(|c| c.group_depth == 1 && c.comm_id == world.comm_id));
        assert!(bodies.iter().all(|b| !matches!(b, RecordBody::NcclCall(c) if c.result != 0)));
        traces.insert(rank, (world.comm_id, trace));
    }
    let (id0, trace0) = &traces[&0];
    for (rank, (id, trace)) in &traces {
        assert_eq!(id, id0, "rank {rank} names the world communicator differently");
        assert_eq!(trace, trace0, "rank {rank} saw another collective sequence");
    }
}

#[test]
fn a_reader_follows_a_running_job_and_a_killed_rank_still_reads() {
    let root = log_root("kill");
    let mut job = preloaded(&trainer_sim(), &root, "job")
        .args(["--ranks", "4", "--steps", "100000", "--stage-ms", "data=1,fwd=0,bwd=0,callbacks=0,optim=0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(30);
    let victim = loop {
        let logs = rank_logs(&root, "job");
        if logs.len() == 4 {
            let log = RankLog::open(&logs[2]).unwrap();
            if log.live().committed > 200 {
                break log;
            }
        }
        assert!(Instant::now() < deadline, "job never got going");
        std::thread::sleep(Duration::from_millis(20));
    };

    // Read while the writer writes: the held records only grow, none is ever torn.
    let mut last_seen = 0;
    for _ in 0..20 {
        // The event ring's calls: each ring numbers its own records.
        let mut records = Vec::new();
        let stats = victim.scan_region(Region::Events, |r| records.push(r));
        assert_eq!(stats.invalid_slots, 0);
        assert_eq!(stats.missing, 0, "records committed during the scan are not missing: {stats:?}");
        assert!(records.windows(2).all(|w| w[0].seq < w[1].seq));
        assert!(stats.last_seq >= last_seen);
        last_seen = stats.last_seq;
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(last_seen > 200);

    // kill -9 the rank's process, found through its log header.
    // SAFETY: kill(2) on a pid; no memory is involved.
    let pid = victim.header.pid as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let status = job.wait().unwrap();
    assert!(!status.success(), "the launcher reports the lost rank");

    let log = RankLog::open(&rank_logs(&root, "job")[2]).unwrap();
    let (records, stats) = log.records();
    assert_eq!(log.live().writer_state, Some(WriterState::Running), "no exit handler ran");
    assert_eq!((stats.invalid_slots, stats.missing), (0, 0), "{stats:?}");
    assert!(records.len() as u64 >= last_seen);
    std::thread::sleep(Duration::from_millis(1100));
    let age = stagefrontier::core::capture::clock::monotonic_ns() - log.live().heartbeat_mono_ns;
    assert!(age > 1_000_000_000, "heartbeat stopped with the process");
}

#[test]
fn a_forked_child_writes_nothing_into_its_parents_log() {
    let root = log_root("fork");
    run_ok(preloaded(&trainer_sim(), &root, "job").args(trainer_args(2, 3)).arg("--fork-child"));
    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 2, "{logs:?}");
    for path in logs {
        let log = RankLog::open(&path).unwrap();
        assert!(log.comms().iter().all(|c| c.nranks != 1), "the child's communicator is in the parent's live table");
        assert_eq!(log.live().writer_state, Some(WriterState::Exited));
        let bodies = bodies(&path);
        let comms = bodies.iter().filter(|b| matches!(b, RecordBody::CommCreated(_))).count();
        assert_eq!(comms, 1, "only the world communicator, not the child's 1-rank one");
        assert!(
            !bodies.iter().any(|b| matches!(b, RecordBody::NcclCall(c) if c.count == 16)),
            "child's allreduce leaked in"
        );
        assert_eq!(
            bodies.iter().filter(|b| matches!(b, RecordBody::NcclCall(c) if c.op == NcclOp::GetUniqueId)).count(),
            0
        );
    }
}

#[test]
fn without_rank_identity_the_library_stays_inert_unless_forced() {
    let root = log_root("inert");
    run_ok(preloaded(&hookbench(), &root, "job").args(["--calls", "1000"]));
    assert!(rank_logs(&root, "job").is_empty(), "a process with no rank wrote a log");

    run_ok(preloaded(&hookbench(), &root, "job").args(["--calls", "1000"]).env("SF_FORCE", "1"));
    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 1);
    let name = logs[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("pid-"), "{name}");
    assert!(bodies(&logs[0]).iter().any(|b| matches!(b, RecordBody::NcclCall(c) if c.op == NcclOp::AllReduce)));
}

#[test]
fn an_invalid_setting_is_one_line_and_the_job_still_passes() {
    let root = log_root("bad-config");
    let out = run_ok(preloaded(&trainer_sim(), &root, "job").args(trainer_args(2, 3)).env("SF_RING_EVENTS", "banana"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<_> = stderr.lines().filter(|l| l.contains("SF_RING_EVENTS")).collect();
    assert_eq!(lines.len(), 2, "one line per rank: {stderr}");
    assert!(lines.iter().all(|l| l.starts_with("stagefrontier: SF_RING_EVENTS=\"banana\"")), "{lines:?}");
    assert_eq!(rank_logs(&root, "job").len(), 2, "recording continues with the default");
}

#[test]
fn a_tiny_ring_drops_and_counts_without_hurting_the_job() {
    let root = log_root("tiny-ring");
    run_ok(
        preloaded(&trainer_sim(), &root, "job")
            .args(trainer_args(2, 200))
            .args(["--buckets", "64", "--bucket-elems", "1"])
            .env("SF_RING_EVENTS", "16")
            .env("SF_HEARTBEAT_MS", "100"),
    );
    for path in rank_logs(&root, "job") {
        let log = RankLog::open(&path).unwrap();
        let dropped = log.live().dropped_events;
        assert!(dropped > 0, "{}: 200 x 64 calls through a 16-slot ring drained every 100 ms", path.display());
        let (records, _) = log.records();
        let last_drops = records.iter().rev().find_map(|r| match r.body {
            RecordBody::Drops(d) => Some(d),
            _ => None,
        });
        assert_eq!(
            last_drops.map(|d| (d.dropped_total, d.ring_capacity)),
            Some((dropped, 16)),
            "drops are in the data stream"
        );
    }
}
