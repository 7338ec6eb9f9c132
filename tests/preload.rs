//! The library under LD_PRELOAD on real multi-process jobs (sf-trainer-sim over fakenccl).

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use stagefrontier::analysis::comms::grow::is_alias;
use stagefrontier::core::log::format::{Region, WriterState};
use stagefrontier::core::log::nccl_op::NcclOp;
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::{CommCreated, CommOrigin, NcclCall, RecordBody};

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
    let without = run_ok(Command::new(trainer_sim()).args(&args).args(["--p2p"]).env_remove("LD_PRELOAD"));
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
    let age = stagefrontier::core::record::clock::monotonic_ns() - log.live().heartbeat_mono_ns;
    assert!(age > 1_000_000_000, "heartbeat stopped with the process");
}

#[test]
fn a_forked_child_writes_nothing_into_its_parents_log() {
    let root = log_root("fork");
    run_ok(preloaded(&trainer_sim(), &root, "job").args(trainer_args(2, 3)).args([
        "--fork-child",
        "--launch",
        "blocking",
    ]));
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

/// A NcclCall of `op`, the `n`-th (from 0) in the log.
fn nth_call(calls: &[NcclCall], op: NcclOp, n: usize) -> NcclCall {
    *calls.iter().filter(|c| c.op == op).nth(n).unwrap_or_else(|| panic!("no {op:?} #{n}"))
}

#[test]
fn every_entry_point_since_the_classic_api_is_recorded_and_returns_what_nccl_returns() {
    let driver = compile_against_fakenccl("nccl_entry_points.c", "sf-nccl-entry-points");
    let root = log_root("entry-points");
    let plain = run_ok(Command::new(&driver).env_remove("LD_PRELOAD"));
    let traced = run_ok(preloaded(&driver, &root, "job").env("RANK", "0").env("WORLD_SIZE", "1"));
    let plain = String::from_utf8(plain.stdout).unwrap();
    assert_eq!(String::from_utf8(traced.stdout).unwrap(), plain, "the library changed a result");
    assert!(plain.contains("rank 2 scalable 0 init 0 shrink 0 grow 0") && plain.contains("new rank grow 0"), "{plain}");
    assert!(plain.contains("simulated nothing ran, estimate set"), "{plain}");

    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 1);
    let bodies = bodies(&logs[0]);
    let calls = nccl_calls(&bodies);
    // A status poll that finds no error is counted in the header, not recorded.
    let quiet_poll = |l: &&str| l.starts_with("ncclCommGetAsyncError(comm,") && l.ends_with(" -> 0");
    assert_eq!(plain.lines().filter(quiet_poll).count(), 1, "{plain}");
    assert!(plain.contains("async error 0\n"), "{plain}");
    // A nonblocking init: ncclInProgress twice (fakenccl's default), then success.
    assert!(plain.contains("nonblocking init: 3 polls, state 0\n"), "{plain}");
    assert_eq!(RankLog::open(&logs[0]).unwrap().live().nccl_polls, 1 + 3, "every quiet poll counted");
    let recorded = || plain.lines().filter(|l| l.contains(" -> ") && !quiet_poll(l));
    let shown = recorded().count();
    let main_thread = calls[0].tid;
    let main_calls: Vec<_> = calls.iter().filter(|c| c.tid == main_thread).take(shown).collect();
    let destroys = calls.iter().filter(|c| c.tid == main_thread).skip(shown);
    assert!(destroys.map(|c| c.op).eq([NcclOp::CommDestroy; 11]), "one record per call the main thread made");
    let codes: Vec<i32> = recorded().filter_map(|l| l.rsplit(" -> ").next()?.parse().ok()).collect();
    assert_eq!(
        main_calls.iter().map(|c| c.result).collect::<Vec<_>>(),
        codes,
        "recorded results are the returned ones"
    );
    let names: Vec<&str> = main_calls.iter().map(|c| c.op.name()).collect();
    for op in [
        "allreduce_config",
        "broadcast_config",
        "reduce_config",
        "allgather_config",
        "reducescatter_config",
        "alltoall_config",
        "gather_config",
        "scatter_config",
        "gather",
        "scatter",
        "group_simulate_end",
        "comm_get_async_error",
        "comm_register",
        "comm_deregister",
        "comm_window_register",
        "comm_window_deregister",
        "put_signal",
        "signal",
        "wait_signal",
        "comm_suspend",
        "comm_resume",
        "comm_revoke",
        "comm_finalize",
    ] {
        assert!(names.contains(&op), "{op} was not recorded: {names:?}");
    }
    for op in [NcclOp::CommInitRankScalable, NcclOp::CommShrink, NcclOp::CommGrow] {
        let n = if op == NcclOp::CommInitRankScalable { 3 } else { 2 + (op == NcclOp::CommGrow) as usize };
        assert_eq!(calls.iter().filter(|c| c.op == op).count(), n, "{op:?} from every rank thread");
    }
    // The *Config and Gather/Scatter collectives share the communicator's collective sequence.
    let gather = nth_call(&calls, NcclOp::Gather, 0);
    let scatter_config = nth_call(&calls, NcclOp::ScatterConfig, 0);
    assert_eq!((gather.seq, scatter_config.seq + 1), (scatter_config.seq + 1, gather.seq));
    assert_eq!((gather.peer, gather.count, gather.dtype), (0, 4, 7));

    // Job-wide ids: every member of a Scalable, Shrink or Grow communicator names it alike.
    let created = comms_created(&bodies);
    let of = |origin| created.iter().filter(move |c| c.origin == origin).collect::<Vec<_>>();
    let scalable = of(CommOrigin::InitRankScalable);
    assert_eq!(scalable.len(), 3);
    assert!(scalable.iter().all(|c| c.comm_id == scalable[0].comm_id && c.nranks == 3), "{scalable:?}");
    let mut ranks: Vec<i32> = scalable.iter().map(|c| c.rank).collect();
    ranks.sort();
    assert_eq!(ranks, [0, 1, 2]);
    let world: Vec<_> = of(CommOrigin::InitRank).into_iter().filter(|c| c.nranks == 3).collect();
    assert_eq!(world.len(), 3);
    assert_ne!(world[0].comm_id, scalable[0].comm_id);
    let shrunk = of(CommOrigin::Shrink);
    assert_eq!(shrunk.len(), 2, "ranks 0 and 1 remain");
    assert_eq!(shrunk[0].comm_id, shrunk[1].comm_id);
    assert_eq!((shrunk[0].parent_id, shrunk[1].parent_id), (world[0].comm_id, world[0].comm_id));
    let (aliases, grown): (Vec<&CommCreated>, Vec<&CommCreated>) =
        of(CommOrigin::Grow).into_iter().partition(|c| is_alias(c));
    assert_eq!(grown.len(), 3);
    let existing: Vec<_> = grown.iter().filter(|c| c.parent_id != 0).collect();
    assert_eq!(existing.len(), 2);
    assert_eq!(existing[0].comm_id, existing[1].comm_id, "existing members agree");
    let new_rank = grown.iter().find(|c| c.parent_id == 0).expect("the new rank");
    let alias = aliases.iter().map(|a| (a.comm_id, a.parent_id)).collect::<Vec<_>>();
    assert_eq!(alias, [(new_rank.comm_id, existing[0].comm_id)], "the root names the new rank's id as the grown one");
    assert_eq!(existing[0].parent_id, shrunk[0].comm_id);
    assert!(grown.iter().all(|c| c.nranks == 3));
}

#[test]
fn a_failed_or_simulated_group_end_closes_the_group() {
    let driver = compile_against_fakenccl("nccl_entry_points.c", "sf-nccl-group-ends");
    let root = log_root("group-ends");
    run_ok(preloaded(&driver, &root, "job").env("RANK", "0").env("WORLD_SIZE", "1"));
    let calls = nccl_calls(&bodies(&rank_logs(&root, "job")[0]));
    let failed_end = nth_call(&calls, NcclOp::GroupEnd, 0);
    assert_eq!((failed_end.result, failed_end.group_depth), (4, 1), "the group's failed allreduce fails its end");
    let after_failed = nth_call(&calls, NcclOp::AllReduce, 1);
    assert_eq!((after_failed.result, after_failed.group_depth), (0, 0), "the failed ncclGroupEnd closed the group");
    let simulated = nth_call(&calls, NcclOp::GroupSimulateEnd, 0);
    assert_eq!((simulated.result, simulated.group_depth), (0, 1));
    let after_simulated = nth_call(&calls, NcclOp::AllReduce, 3);
    assert_eq!(after_simulated.group_depth, 0, "ncclGroupSimulateEnd closed the group");
    let stray_end = nth_call(&calls, NcclOp::GroupEnd, 1);
    assert_eq!((stray_end.result, stray_end.group_depth), (5, 0), "an end outside any group is ncclInvalidUsage");
    assert_eq!(nth_call(&calls, NcclOp::AllReduceConfig, 0).group_depth, 0, "and leaves the depth at 0");
}

#[test]
fn an_entry_point_missing_from_the_loaded_nccl_is_named() {
    // An NCCL older than the application's nccl.h: only ncclGetVersion. The program asks
    // the dynamic linker for ncclCommShrink, as a feature probe does, and finds the hook.
    let dir = TempDir::new("old-nccl");
    let lib = dir.join("libnccl.so.2");
    let source = dir.join("old_nccl.c");
    std::fs::write(&source, "int ncclGetVersion(int *v) { *v = 22304; return 0; }\n").unwrap();
    compile_c(&source, &lib, &["-shared", "-fPIC", "-Wl,-soname,libnccl.so.2"]);
    let program = dir.join("probe.c");
    std::fs::write(
        &program,
        r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
typedef int (*shrink_t)(void *, int *, int, void **, void *, int);
extern int ncclGetVersion(int *version); /* links the old NCCL in */
int main(void) {
    int v = 0;
    int rc = ncclGetVersion(&v);
    shrink_t shrink = (shrink_t)dlsym(RTLD_DEFAULT, "ncclCommShrink");
    printf("version %d -> %d\n", rc, v);
    if (!shrink) { printf("no ncclCommShrink\n"); return 0; }
    void *out = 0;
    printf("shrink -> %d\n", shrink(0, 0, 0, &out, 0, 0));
    printf("shrink -> %d\n", shrink(0, 0, 0, &out, 0, 0));
    return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.join("probe");
    let rpath = format!("-Wl,-rpath,{}", dir.join("").display());
    compile_c(&program, &exe, &[lib.to_str().unwrap(), &rpath, "-ldl"]);
    let root = log_root("missing-symbol");
    // cargo's LD_LIBRARY_PATH may hold fakenccl's libnccl.so.2, which would win over the
    // program's RUNPATH: the probe must load the old NCCL above.
    let out =
        run_ok(preloaded(&exe, &root, "job").env("RANK", "0").env("WORLD_SIZE", "1").env_remove("LD_LIBRARY_PATH"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("version 0 -> 22304"), "{stdout}");
    assert_eq!(
        stdout.matches("shrink -> 3").count(),
        2,
        "ncclInternalError, the code of a failure outside the caller's arguments: {stdout}"
    );
    let lines = library_lines(&out);
    let named: Vec<_> = lines.iter().filter(|l| l.contains("ncclCommShrink")).collect();
    assert_eq!(named.len(), 1, "one line, once: {lines:?}");
    assert!(
        named[0].contains("has no symbol ncclCommShrink") && named[0].contains("libnccl.so.2"),
        "names the symbol and the library, not 'no NCCL library is loaded': {}",
        named[0]
    );
}

/// Issue 24, point 4: while one thread started the runtime, the calls racing it were
/// neither recorded nor counted (243 of 7,744 recorded), and the communicators they
/// created got per-process ids (1 of 32 agreed across ranks).
#[test]
fn the_first_calls_of_32_threads_are_recorded_or_counted_and_their_communicators_agree() {
    const THREADS: u64 = 32;
    const ALLREDUCES: u64 = 100;
    let exe = compile_against_fakenccl("first_calls.c", "sf-first-calls");
    let root = log_root("first-calls");
    let seed = std::process::id().to_string();
    let ranks: Vec<Killed> = (0..2)
        .map(|rank: u32| {
            let rank = rank.to_string();
            let mut cmd = preloaded(&exe, &root, "job");
            cmd.args([&rank, "2", &seed, &THREADS.to_string(), &ALLREDUCES.to_string()])
                .env("RANK", &rank)
                .env("WORLD_SIZE", "2")
                .env("LOCAL_RANK", &rank)
                .env("LOCAL_WORLD_SIZE", "2");
            Killed(cmd.spawn().expect("spawn first_calls"))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    for mut rank in ranks {
        let status = loop {
            if let Some(status) = rank.0.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "first_calls still running after 120 s");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "{status}");
    }

    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 2, "{logs:?}");
    let mut ids_per_rank = Vec::new();
    for path in &logs {
        let log = RankLog::open(path).unwrap();
        let bodies = bodies(path);
        let calls = nccl_calls(&bodies);
        let dropped = log.live().dropped_events;
        assert_eq!(
            calls.len() as u64 + dropped,
            THREADS * (ALLREDUCES + 2),
            "{} calls recorded and {dropped} counted as dropped: every call is one or the other",
            calls.len()
        );
        assert_eq!(dropped, 0, "the default ring and the start-up queue hold this burst");
        let created = comms_created(&bodies);
        let ids: std::collections::BTreeSet<u64> = created.iter().map(|c| c.comm_id).collect();
        assert_eq!((created.len(), ids.len()), (THREADS as usize, THREADS as usize), "{created:?}");
        assert!(created.iter().all(|c| c.origin == CommOrigin::InitRank && c.nranks == 2), "{created:?}");
        for id in &ids {
            let seqs: Vec<u64> =
                calls.iter().filter(|c| c.comm_id == *id && c.op == NcclOp::AllReduce).map(|c| c.seq).collect();
            assert_eq!(seqs, (1..=ALLREDUCES).collect::<Vec<_>>(), "communicator {id:#x}: every allreduce, numbered");
        }
        ids_per_rank.push(ids);
    }
    assert_eq!(ids_per_rank[0], ids_per_rank[1], "both ranks name their 32 communicators alike");
}
