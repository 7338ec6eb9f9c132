//! `sf hang` end to end: rank logs written with the library's own writer, live state set
//! through the library's own communicator table, read by the built binary.

mod common;

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::Ordering;

use common::{dead_pid, TempDir};
use serde_json::Value;
use stagefrontier::core::log::comm_table::{CommSlot, CommTable, Registration};
use stagefrontier::core::log::identity::Identity;
use stagefrontier::core::log::nccl_op::NcclOp;
use stagefrontier::core::log::records::{
    CommCreated, CommOrigin, HangEvidence, InjectAction, Injection, NcclCall, RecordBody,
};
use stagefrontier::core::log::writer::{HeaderInfo, LogWriter};
use stagefrontier::core::record::clock::{monotonic_ns, wall_ns, Calibration, ClockSource};

const WORLD: u64 = 0x5eed_0000_0000_0001;
const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;
/// One allreduce per 1 s step, each taking 10 ms: the threshold is 1.5 s, far above how
/// late a loaded test machine may start sf after a test wrote its logs.
const STEP: u64 = SEC;
const DONE: u64 = 20;
/// The job started this long before the tests' now: its library calibrated its clock
/// then, before every call it recorded.
const JOB_AGE: u64 = 80 * SEC;
const COUNT: u64 = 1 << 20;

/// One rank's log and its live communicator slot.
struct Rank {
    writer: LogWriter,
    slot: &'static CommSlot,
}

impl Rank {
    /// A log as the collector writes it: the world communicator, then allreduces 1..=DONE,
    /// one per step, the last entered `ago` before `now`; the table agrees; a fresh heartbeat.
    fn new(dir: &Path, rank: i32, world: i32, now: u64, ago: u64) -> Rank {
        Rank::of_pid(dir, rank, world, now, ago, std::process::id())
    }

    fn of_pid(dir: &Path, rank: i32, world: i32, now: u64, ago: u64, pid: u32) -> Rank {
        let identity = Identity {
            global_rank: rank,
            world_size: world,
            local_rank: rank % 8,
            job_id: "job-42".to_string(),
            source: "torchrun",
        };
        // Ticks are CLOCK_MONOTONIC nanoseconds; the job started JOB_AGE ago.
        let start = now.checked_sub(JOB_AGE).expect("the machine has been up longer than JOB_AGE");
        let calibration = Calibration::new(ClockSource::Monotonic, start, start, wall_ns() - (now - start), 1e9);
        let host = stagefrontier::core::log::host::hostname();
        let info = HeaderInfo {
            identity: &identity,
            pid,
            host: &host,
            calibration: &calibration,
            slot_count: 1024,
            ring_capacity: 1024,
        };
        let path = dir.join(format!("rank-{rank:05}.sflog"));
        let mut writer = LogWriter::create(&path, &info).expect("create log");
        let first = now - ago - (DONE - 1) * STEP;
        writer.append(&RecordBody::CommCreated(CommCreated {
            t_ns: first - MS,
            comm_id: WORLD,
            parent_id: 0,
            rank,
            nranks: world,
            global_rank: rank,
            color: -1,
            key: -1,
            origin: CommOrigin::InitRank,
        }));
        for seq in 1..=DONE {
            writer.append(&RecordBody::NcclCall(allreduce(seq, first + (seq - 1) * STEP)));
        }
        let slot = match CommTable::in_map(writer.map()).register(0x7f00_0000_1000, WORLD) {
            Registration::New(slot) => slot,
            _ => panic!("an empty table refused a communicator"),
        };
        slot.set_rank(rank, world);
        slot.coll_entered.store(DONE, Ordering::Relaxed);
        slot.coll_returned.store(DONE, Ordering::Relaxed);
        writer.heartbeat(now, wall_ns(), 1e9);
        Rank { writer, slot }
    }

    /// Inside allreduce DONE + 1 since `since`, as the hook leaves the slot.
    fn enter_next(&self, since: u64) {
        self.slot.inflight_op.store(NcclOp::AllReduce as u64, Ordering::Relaxed);
        self.slot.inflight_ticks.store(since, Ordering::Relaxed);
        self.slot.coll_entered.store(DONE + 1, Ordering::Relaxed);
    }

    fn beat(&self, mono_ns: u64, wall: u64) {
        self.writer.heartbeat(mono_ns, wall, 1e9);
    }
}

fn allreduce(seq: u64, t_enter_ns: u64) -> NcclCall {
    NcclCall {
        op: NcclOp::AllReduce,
        t_enter_ns,
        t_exit_ns: t_enter_ns + 10 * MS,
        comm_id: WORLD,
        seq,
        count: COUNT,
        bytes: 4 * COUNT,
        stream: 0x7f00_0000_2000,
        tid: 4242,
        peer: -1,
        dtype: 7,
        redop: 0,
        result: 0,
        group_depth: 0,
    }
}

fn sf<S: AsRef<OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sf")).args(args).output().expect("run sf")
}

fn hang_json(dir: &TempDir) -> (Value, i32) {
    let out = sf(&[OsStr::new("hang"), dir.0.as_os_str(), OsStr::new("--json")]);
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let json = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    (json, out.status.code().expect("exit status"))
}

fn hang_human(dir: &TempDir) -> (String, i32) {
    let out = sf(&[OsStr::new("hang"), dir.0.as_os_str()]);
    (String::from_utf8(out.stdout).expect("utf-8"), out.status.code().expect("exit status"))
}

fn ranks(list: &Value) -> Vec<i64> {
    list.as_array().expect("a list of ranks").iter().map(|r| r.as_i64().expect("a rank")).collect()
}

fn world(json: &Value) -> &Value {
    let comms = json["communicators"].as_array().unwrap();
    comms.iter().find(|c| c["comm_id"] == "0x5eed000000000001").expect("the world communicator")
}

/// Eight ranks; all but rank 5 have been inside allreduce #21 for `waited`.
fn rank_5_never_entered(dir: &TempDir, waited: u64) -> Vec<Rank> {
    let now = monotonic_ns();
    let job: Vec<Rank> = (0..8).map(|r| Rank::new(&dir.0, r, 8, now, waited + 500 * MS)).collect();
    for rank in job.iter().filter(|r| r.slot.rank().0 != 5) {
        rank.enter_next(now - waited);
    }
    job
}

#[test]
fn the_rank_that_never_entered_is_named_and_the_status_is_3() {
    let dir = TempDir::new("missing");
    let job = rank_5_never_entered(&dir, 5 * SEC);
    let now = monotonic_ns();
    // The ground truth and the watchdog's evidence travel with the diagnosis.
    let mut writers: Vec<LogWriter> = job.into_iter().map(|r| r.writer).collect();
    writers[5].append(&RecordBody::Injection(Injection {
        t_ns: now - 5 * SEC,
        action: InjectAction::Hang,
        rule: 0,
        op: Some(NcclOp::AllReduce),
        comm_id: WORLD,
        comm_seq: DONE + 1,
        step: None,
        stage: None,
        delay_ns: 0,
        result: 0,
    }));
    writers[0].append(&RecordBody::HangEvidence(HangEvidence {
        t_ns: now - 4 * SEC,
        since_ns: now - 5 * SEC,
        comm_id: WORLD,
        comm_seq: DONE + 1,
        op: NcclOp::AllReduce,
        threshold_ns: SEC,
    }));

    let (json, status) = hang_json(&dir);
    assert_eq!(status, 3, "{json}");
    assert_eq!(json["hung"], true);
    let w = world(&json);
    assert_eq!((w["stuck_seq"].as_u64(), w["stuck_op"].as_str()), (Some(DONE + 1), Some("allreduce")));
    assert_eq!(ranks(&w["missing_ranks"]), [5]);
    assert_eq!(ranks(&w["waiting_ranks"]), [0, 1, 2, 3, 4, 6, 7]);
    for list in ["dead_ranks", "wedged_ranks", "slow_ranks"] {
        assert_eq!(ranks(&w[list]), Vec::<i64>::new(), "{list}");
    }
    assert_eq!(w["mismatches"], Value::Array(Vec::new()));
    assert!((5.0..10.0).contains(&w["stuck_s"].as_f64().unwrap()), "{w}");

    let five = &json["ranks"][5];
    assert_eq!((five["rank"].as_i64(), five["state"].as_str()), (Some(5), Some("missing")));
    assert_eq!((five["comm_id"].as_str(), five["comm_seq"].as_u64()), (Some("0x5eed000000000001"), Some(DONE + 1)));
    assert_eq!((five["op"].as_str(), five["in_flight"].as_bool()), (Some("allreduce"), Some(false)));
    assert!(five["stuck_s"].as_f64().unwrap() >= 5.0, "{five}");
    assert_eq!(five["stage"], Value::Null);
    let injection = &five["injections"][0];
    assert_eq!((injection["action"].as_str(), injection["comm_seq"].as_u64()), (Some("hang"), Some(DONE + 1)));

    let zero = &json["ranks"][0];
    assert_eq!((zero["state"].as_str(), zero["in_flight"].as_bool()), (Some("waiting"), Some(true)));
    assert_eq!(ranks(&zero["waiting_for"]), [5]);
    assert!(zero["heartbeat_age_s"].as_f64().unwrap() < 1.0);
    assert_eq!(zero["hang_evidence"][0]["comm_seq"].as_u64(), Some(DONE + 1));

    let threshold = &json["threshold"];
    assert_eq!((threshold["source"].as_str(), threshold["threshold_s"].as_f64()), (Some("cadence"), Some(1.5)));
    assert_eq!(threshold["step_s"].as_f64(), Some(1.0));

    let (human, status) = hang_human(&dir);
    assert_eq!(status, 3);
    let first = human.lines().next().unwrap();
    assert!(first.starts_with("HUNG: rank 5 never entered allreduce #21 on 0x5eed000000000001; 7 ranks"), "{human}");
    assert!(human.contains("before allreduce #21"), "{human}");
    assert!(human.contains("injected on rank 5: hang (rule 0) before allreduce #21"), "{human}");
    assert!(human.contains("watchdog: allreduce #21 on 0x5eed000000000001 in flight over 1.0s on rank 0"), "{human}");
    drop(writers);
}

#[test]
fn the_json_has_the_contract_fields() {
    let dir = TempDir::new("contract");
    let _job = rank_5_never_entered(&dir, 5 * SEC);
    let (json, _) = hang_json(&dir);
    for key in ["dir", "now_mono_ns", "hung", "communicators", "ranks", "errors"] {
        assert!(json.get(key).is_some(), "top level lacks {key}: {json}");
    }
    for key in [
        "comm_id",
        "nranks",
        "stuck_seq",
        "stuck_op",
        "missing_ranks",
        "waiting_ranks",
        "dead_ranks",
        "wedged_ranks",
        "slow_ranks",
        "mismatches",
    ] {
        assert!(world(&json).get(key).is_some(), "communicator lacks {key}");
    }
    for key in [
        "rank",
        "state",
        "stage",
        "stuck_s",
        "comm_id",
        "comm_seq",
        "op",
        "heartbeat_age_s",
        "injections",
        "hang_evidence",
    ] {
        assert!(json["ranks"][0].get(key).is_some(), "rank lacks {key}");
    }
    assert_eq!(json["ranks"].as_array().unwrap().len(), 8);
    assert_eq!(world(&json)["nranks"], 8);
}

#[test]
fn a_count_mismatch_at_one_sequence_number_is_reported() {
    let dir = TempDir::new("mismatch");
    let now = monotonic_ns();
    let mut job: Vec<Rank> = (0..4).map(|r| Rank::new(&dir.0, r, 4, now, 500 * MS)).collect();
    // Rank 2 issued collective #21 with half the count.
    let call = NcclCall { count: COUNT / 2, bytes: 2 * COUNT, ..allreduce(DONE + 1, now - 300 * MS) };
    job[2].writer.append(&RecordBody::NcclCall(call));
    job[2].slot.coll_entered.store(DONE + 1, Ordering::Relaxed);
    job[2].slot.coll_returned.store(DONE + 1, Ordering::Relaxed);
    for r in [0, 1, 3] {
        job[r].writer.append(&RecordBody::NcclCall(allreduce(DONE + 1, now - 300 * MS)));
        job[r].slot.coll_entered.store(DONE + 1, Ordering::Relaxed);
        job[r].slot.coll_returned.store(DONE + 1, Ordering::Relaxed);
    }
    let (json, status) = hang_json(&dir);
    let w = world(&json);
    assert_eq!(w["mismatches_total"], 1, "{w}");
    let m = &w["mismatches"][0];
    assert_eq!((m["comm_seq"].as_u64(), m["field"].as_str()), (Some(DONE + 1), Some("count")));
    let values = m["values"].as_object().unwrap();
    let expected = [("0", COUNT), ("1", COUNT), ("2", COUNT / 2), ("3", COUNT)];
    assert_eq!(values.len(), 4);
    for (rank, count) in expected {
        assert_eq!(values[rank].as_u64(), Some(count), "rank {rank}: {m}");
    }
    // Every rank went on: not a hang, but a finding with its own status, first in the answer.
    assert_eq!((json["hung"].as_bool(), status), (Some(false), 5), "{json}");
    let (human, status) = hang_human(&dir);
    assert_eq!(status, 5);
    let line = "MISMATCH on 0x5eed000000000001 #21: count differs: 1048576 on ranks 0-1, 3; 524288 on rank 2";
    assert!(human.starts_with(&format!("{line}\nnot hung: ")), "{human}");
    // `sf ls` shows it too, with the same status.
    let ls = sf(&[OsStr::new("ls"), dir.0.as_os_str()]);
    let text = String::from_utf8(ls.stdout).unwrap();
    assert_eq!(ls.status.code(), Some(5), "{text}");
    assert!(text.lines().any(|l| l == line), "{text}");
    let ls = sf(&[OsStr::new("ls"), dir.0.as_os_str(), OsStr::new("--json")]);
    let json: Value = serde_json::from_slice(&ls.stdout).unwrap();
    assert_eq!(ls.status.code(), Some(5));
    let m = &json["mismatches"][0];
    assert_eq!(
        (m["comm_id"].as_str(), m["mismatches_total"].as_u64()),
        (Some("0x5eed000000000001"), Some(1)),
        "{json}"
    );
    assert_eq!(m["mismatches"][0]["values"]["2"], COUNT / 2);
}

#[test]
fn a_rank_whose_process_is_gone_is_dead() {
    let dir = TempDir::new("dead");
    let now = monotonic_ns();
    // The job hung 30 s ago: ranks 0-2 entered #21 and rank 3, which never did, died.
    // Rank 3's log names a process that no longer exists.
    let dead = dead_pid();
    let job: Vec<Rank> = (0..4)
        .map(|r| Rank::of_pid(&dir.0, r, 4, now, 30 * SEC + 100 * MS, if r == 3 { dead } else { std::process::id() }))
        .collect();
    for rank in &job[..3] {
        rank.enter_next(now - 30 * SEC);
    }
    job[3].beat(now - 30 * SEC, wall_ns() - 30 * SEC);

    let (json, status) = hang_json(&dir);
    assert_eq!(status, 3, "{json}");
    let w = world(&json);
    assert_eq!((ranks(&w["dead_ranks"]), ranks(&w["waiting_ranks"])), (vec![3], vec![0, 1, 2]));
    assert_eq!(ranks(&w["missing_ranks"]), Vec::<i64>::new());
    let three = &json["ranks"][3];
    assert_eq!((three["state"].as_str(), three["liveness"].as_str()), (Some("dead"), Some("dead")));
    assert!(three["heartbeat_age_s"].as_f64().unwrap() >= 30.0);
    // Silent from its last call (30.1 s ago) until it died (30 s ago): the time stops there.
    let stuck = three["stuck_s"].as_f64().unwrap();
    assert!((0.05..1.0).contains(&stuck), "stuck until its death, not until now: {stuck}");
    let (human, _) = hang_human(&dir);
    assert!(human.starts_with("HUNG: rank 3 is dead on 0x5eed000000000001; 3 ranks have waited 30."), "{human}");
}

#[test]
fn a_healthy_job_is_not_hung() {
    let dir = TempDir::new("healthy");
    let now = monotonic_ns();
    // Skew: half the ranks entered #21 200 ms ago, the others are still on their way.
    let job: Vec<Rank> = (0..8).map(|r| Rank::new(&dir.0, r, 8, now, 300 * MS)).collect();
    for rank in job.iter().filter(|r| r.slot.rank().0 % 2 == 0) {
        rank.enter_next(now - 200 * MS);
    }
    let (json, status) = hang_json(&dir);
    assert_eq!((json["hung"].as_bool(), status), (Some(false), 0), "{json}");
    assert_eq!(world(&json)["stuck_seq"], Value::Null);
    let states: Vec<&str> = json["ranks"].as_array().unwrap().iter().map(|r| r["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["ok"; 8]);
    let (human, status) = hang_human(&dir);
    assert_eq!(status, 0);
    assert!(human.starts_with("not hung: no rank has been stuck for more than 1.500s"), "{human}");
    drop(job);
}

#[test]
fn a_job_killed_while_hung_still_names_the_culprit() {
    let dir = TempDir::new("post-mortem");
    let now = monotonic_ns();
    let pid = dead_pid();
    let job: Vec<Rank> = (0..4).map(|r| Rank::of_pid(&dir.0, r, 4, now, 36 * SEC, pid)).collect();
    for rank in &job[1..] {
        rank.enter_next(now - 35 * SEC);
    }
    // Everyone killed 30 s ago, when the others had waited 5 s for rank 0.
    for rank in &job {
        rank.beat(now - 30 * SEC, wall_ns() - 30 * SEC);
    }
    let (json, status) = hang_json(&dir);
    assert_eq!(status, 3, "{json}");
    let roles: Vec<(&str, &str)> = json["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["state"].as_str().unwrap(), r["role"].as_str().unwrap()))
        .collect();
    assert_eq!(roles, [("dead", "missing"), ("dead", "waiting"), ("dead", "waiting"), ("dead", "waiting")]);
    let w = world(&json);
    assert_eq!((ranks(&w["missing_ranks"]), ranks(&w["dead_ranks"])), (vec![0], vec![0, 1, 2, 3]));
    // Stuck times stop at the deaths: rank 0 was silent 6 s, the others waited 5 s.
    let stuck: Vec<f64> = json["ranks"].as_array().unwrap().iter().map(|r| r["stuck_s"].as_f64().unwrap()).collect();
    assert!((5.5..7.0).contains(&stuck[0]) && stuck[1..].iter().all(|s| (4.5..6.0).contains(s)), "{stuck:?}");
    assert!((4.5..6.0).contains(&w["stuck_s"].as_f64().unwrap()), "{w}");
    // The culprit first in the answer: every rank is gone, so the post-mortem line leads,
    // then the communicator's verdict, culprit before the waiters' fate.
    let (human, status) = hang_human(&dir);
    assert_eq!(status, 3);
    let mut lines = human.lines();
    assert!(
        lines
            .next()
            .is_some_and(|l| l.starts_with("HUNG (post-mortem: all 4 ranks are gone")
                && l.contains("rank 0 held up allreduce #21")),
        "{human}"
    );
    assert!(
        lines.next().is_some_and(|l| l.starts_with(
            "HUNG: rank 0 never entered allreduce #21 and is dead since; ranks 1-3 are dead on 0x5eed000000000001; \
             stuck for 5."
        )),
        "{human}"
    );
}

#[test]
fn no_logs_is_an_error_in_one_line() {
    let dir = TempDir::new("empty");
    let out = sf(&[OsStr::new("hang"), dir.0.as_os_str()]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("sf: no rank logs (*.sflog) in"), "{stderr}");
}

#[test]
fn help_teaches_the_states_the_threshold_and_the_exit_status() {
    let out = sf(&["hang", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for word in [
        "missing",
        "waiting",
        "wedged",
        "dead",
        "stalled",
        "slow",
        "exited",
        "THRESHOLD",
        "--factor",
        "--min-stuck-s",
        "[default: 1.5]",
        "[default: 0.25]",
        "Exit status: 0 nothing hung; 3 a hang is diagnosed; 5 a mismatch",
        "HUNG: rank 5 never entered",
    ] {
        assert!(help.contains(word), "{word:?} not in:\n{help}");
    }
}
