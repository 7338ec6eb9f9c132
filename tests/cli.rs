//! `sf` end to end: real rank logs written with the library's own writer, read by the
//! built binary.

mod common;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{dead_pid, TempDir};
use serde_json::Value;
use stagefrontier::core::log::comm_table::{CommTable, Registration};
use stagefrontier::core::log::format::{self, live, WriterState};
use stagefrontier::core::log::identity::Identity;
use stagefrontier::core::log::nccl_op::NcclOp;
use stagefrontier::core::log::records::{CommCreated, CommOrigin, NcclCall, RecordBody};
use stagefrontier::core::log::writer::{HeaderInfo, LogWriter};
use stagefrontier::core::record::clock::{monotonic_ns, select, wall_ns};

const COMM_ID: u64 = 0x5eed_0000_0000_0001;
const HOUR_NS: u64 = 3_600_000_000_000;

struct Spec<'a> {
    rank: i32,
    world_size: i32,
    pid: u32,
    host: &'a str,
    slot_count: u32,
    /// Records after the first, `comm_created`, one.
    calls: u64,
}

impl Spec<'_> {
    fn rank(rank: i32, world_size: i32, host: &str) -> Spec<'_> {
        Spec { rank, world_size, pid: std::process::id(), host, slot_count: 1024, calls: 20 }
    }
}

/// Writes a log the way the collector does: a communicator, then `calls` allreduces. The
/// heartbeat is left to the test.
fn write_log(path: &Path, spec: &Spec) -> LogWriter {
    let identity = Identity {
        global_rank: spec.rank,
        world_size: spec.world_size,
        local_rank: spec.rank.max(0) % 8,
        job_id: "job-42".to_string(),
        source: "torchrun",
    };
    let calibration = select(false);
    let info = HeaderInfo {
        identity: &identity,
        pid: spec.pid,
        host: spec.host,
        calibration: &calibration,
        slot_count: spec.slot_count,
        ring_capacity: 1024,
    };
    let mut writer = LogWriter::create(path, &info).expect("create log");
    let t0 = calibration.base_mono_ns;
    writer.append(&RecordBody::CommCreated(CommCreated {
        t_ns: t0 + 1_000,
        comm_id: COMM_ID,
        parent_id: 0,
        rank: spec.rank,
        nranks: spec.world_size,
        global_rank: spec.rank,
        color: -1,
        key: 0,
        origin: CommOrigin::InitRank,
    }));
    for seq in 1..=spec.calls {
        let t_enter_ns = t0 + seq * 1_000_000;
        writer.append(&RecordBody::NcclCall(NcclCall {
            op: NcclOp::AllReduce,
            t_enter_ns,
            t_exit_ns: t_enter_ns + 25_000,
            comm_id: COMM_ID,
            seq,
            count: 1 << 20,
            bytes: 4 << 20,
            stream: 0x7f00_0000_1000,
            tid: 4242,
            peer: -1,
            dtype: 7,
            redop: 0,
            result: 0,
            group_depth: 0,
        }));
    }
    writer
}

fn beat_now(writer: &LogWriter) {
    writer.heartbeat(monotonic_ns(), wall_ns(), 1e9);
}

fn beat_an_hour_ago(writer: &LogWriter) {
    writer.heartbeat(monotonic_ns().saturating_sub(HOUR_NS), wall_ns() - HOUR_NS, 1e9);
}

/// Overwrites one payload byte of record `seq`, as a kill in mid-write would leave it.
fn tear_record(path: &Path, slot_count: u32, seq: u64) {
    let mut file = std::fs::OpenOptions::new().read(true).write(true).open(path).expect("open log");
    let at = format::records_offset() + ((seq - 1) % slot_count as u64) as usize * format::SLOT_SIZE + 20;
    file.seek(SeekFrom::Start(at as u64)).unwrap();
    file.write_all(&[0xa5]).unwrap();
}

/// Each JSON line's record sequence number, read from the line's first key: the flattened
/// body of an NCCL call carries its own `seq` (the call's number in its communicator)
/// after it, and a JSON parser keeps only the last of two equal keys.
fn record_seqs(json_lines: &str) -> Vec<u64> {
    json_lines
        .lines()
        .map(|line| {
            let rest = line.strip_prefix(r#"{"seq":"#).expect("seq comes first");
            rest[..rest.find(',').unwrap()].parse().unwrap()
        })
        .collect()
}

fn sf<S: AsRef<OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sf")).args(args).output().expect("run sf")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("utf-8 output")
}

/// A failed run that explains itself in exactly one line and does not panic.
fn assert_one_error_line(out: &Output, fragment: &str) {
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "should fail: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.starts_with("sf: "), "{stderr}");
    assert!(stderr.contains(fragment), "{fragment:?} not in {stderr:?}");
}

/// Ranks 0, 1 and 2 of a world of 4: 0 beats now; 1 beat an hour ago, its process is gone
/// and its ring dropped events; 2 beat an hour ago, its process (this test) still runs,
/// and one of its records was torn. Returns the writers, to beat again just before `sf`.
fn three_of_four(dir: &TempDir) -> Vec<LogWriter> {
    let host = stagefrontier::core::log::host::hostname();
    let rank0 = write_log(&dir.join("rank-00000.sflog"), &Spec::rank(0, 4, &host));
    rank0.set(live::NCCL_VERSION, 22703);
    match CommTable::in_map(rank0.map()).register(0x1000, COMM_ID) {
        Registration::New(slot) => slot.set_rank(0, 4),
        _ => panic!("empty table refused a communicator"),
    }
    let rank1 = write_log(&dir.join("rank-00001.sflog"), &Spec { pid: dead_pid(), ..Spec::rank(1, 4, &host) });
    rank1.set(live::DROPPED_EVENTS, 17);
    beat_an_hour_ago(&rank1);
    let rank2 = write_log(&dir.join("rank-00002.sflog"), &Spec::rank(2, 4, &host));
    beat_an_hour_ago(&rank2);
    tear_record(&dir.join("rank-00002.sflog"), 1024, 5);
    // Neither is a rank log: an earlier attempt's log and a stray file.
    std::fs::write(dir.join("rank-00003.sflog.prev"), b"earlier attempt").unwrap();
    std::fs::write(dir.join("notes.txt"), b"hello").unwrap();
    beat_now(&rank0);
    vec![rank0, rank1, rank2]
}

#[test]
fn ls_shows_liveness_missing_ranks_and_drops() {
    let dir = TempDir::new("ls-human");
    let writers = three_of_four(&dir);
    beat_now(&writers[0]);
    let out = sf(&[OsStr::new("ls"), dir.0.as_os_str()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));

    let lines: Vec<&str> = stdout.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header.join(" "),
        "RANK WORLD HOST PID LIVENESS HEARTBEAT LAST_BEAT COMMITTED HELD WRAPPED MISSING DROPPED COMMS SCHEMA NCCL DOORS"
    );
    let rows: Vec<Vec<&str>> = lines[1..4].iter().map(|l| l.split_whitespace().collect()).collect();
    let column = |name: &str| -> Vec<&str> {
        let i = header.iter().position(|h| *h == name).unwrap();
        rows.iter().map(|r| r[i]).collect()
    };
    assert_eq!(column("RANK"), ["0", "1", "2"]);
    assert_eq!(column("LIVENESS"), ["live", "dead", "stalled"]);
    assert_eq!(column("HEARTBEAT")[1], "1h00m");
    assert_eq!(column("HELD"), ["21", "21", "20"]);
    assert_eq!(column("MISSING"), ["0", "0", "1"]);
    assert_eq!(column("DROPPED"), ["0", "17", "0"]);
    assert_eq!(column("COMMS"), ["1", "0", "0"]);
    assert_eq!(column("NCCL"), ["2.27.3", "-", "-"]);
    // Written without the library's collector: no doors recorded.
    assert_eq!(column("DOORS"), ["?", "?", "?"]);
    // The last heartbeat in UTC: rank 1's an hour ago.
    let utc_hour = |ago: &str| {
        let out = std::process::Command::new("date").args(["-u", "-d", ago, "+%Y-%m-%dT%H:"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let last_beat = column("LAST_BEAT")[1];
    assert!(
        ["1 hour ago", "62 minutes ago"].map(utc_hour).iter().any(|h| last_beat.starts_with(h.as_str())),
        "{last_beat}"
    );

    assert_eq!(lines[4], "evidence: host_calls");
    assert_eq!(lines[5], "3 of 4 ranks have a log; missing rank 3; 17 events dropped in total");
    assert!(
        lines[6].starts_with("warning: history incomplete: rank 1 dropped 17 events, rank 2 has 1 record missing"),
        "{}",
        lines[6]
    );
    assert!(lines[7].starts_with("waits from: "), "{}", lines[7]);
    assert_eq!(lines.len(), 8, "{stdout}");
}

#[test]
fn ls_json_has_the_contract_fields() {
    let dir = TempDir::new("ls-json");
    let writers = three_of_four(&dir);
    beat_now(&writers[0]);
    let out = sf(&[OsStr::new("ls"), dir.0.as_os_str(), OsStr::new("--json")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "one JSON object: {stdout}");
    let report: Value = serde_json::from_str(&stdout).expect("valid JSON");

    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<BTreeSet<String>>();
    let expect = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<String>>();
    assert_eq!(
        keys(&report),
        expect(&[
            "dir",
            "ranks",
            "missing_ranks",
            "errors",
            "attempts",
            "mismatches",
            "clocks",
            "records_read_per_log",
            "budget_for_all",
            "first_end",
            "waits_from",
            "waits_from_reason",
            "layout"
        ])
    );
    assert_eq!(report["mismatches"], serde_json::json!([]));
    assert_eq!(report["dir"], dir.0.display().to_string());
    assert_eq!(report["missing_ranks"], serde_json::json!([3]));
    assert_eq!(report["errors"], serde_json::json!([]));
    assert_eq!(report["attempts"], serde_json::json!([]), "no earlier attempt kept");
    assert_eq!(report["first_end"], Value::Null, "a rank still lives");
    let ranks = report["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 3);
    let contract = expect(&[
        "file",
        "rank",
        "world_size",
        "local_rank",
        "host",
        "pid",
        "job_id",
        "liveness",
        "heartbeat_age_s",
        "committed",
        "held",
        "not_read",
        "lost_to_wrap",
        "missing",
        "invalid_slots",
        "dropped",
        "markers_unnamed",
        "comms",
        "schema",
        "format_version",
        "nccl_version",
        "clock_source",
        "heartbeat_wall",
        "doors",
        "snapshot_wall",
        "evidence",
        "end",
    ]);
    for rank in ranks {
        assert_eq!(keys(rank), contract);
        assert_eq!(rank["world_size"], 4);
        assert_eq!(rank["host"], stagefrontier::core::log::host::hostname());
        assert_eq!(rank["job_id"], "job-42");
        assert_eq!(rank["committed"], 21);
        assert_eq!(rank["schema"], format::SCHEMA_VERSION);
        assert_eq!(rank["format_version"], format::FORMAT_VERSION);
        assert_eq!(rank["clock_source"], "monotonic");
    }
    let field = |name: &str| ranks.iter().map(|r| r[name].clone()).collect::<Vec<Value>>();
    assert_eq!(field("rank"), [0, 1, 2]);
    assert_eq!(field("liveness"), ["live", "dead", "stalled"]);
    assert_eq!(field("dropped"), [0, 17, 0]);
    assert_eq!(field("missing"), [0, 0, 1]);
    assert_eq!(field("invalid_slots"), [0, 0, 1]);
    assert_eq!(field("held"), [21, 21, 20]);
    assert_eq!(field("comms"), [1, 0, 0]);
    assert_eq!(field("nccl_version"), [Value::from("2.27.3"), Value::Null, Value::Null]);
    assert!(ranks.iter().all(|r| r["evidence"].as_array().unwrap().contains(&Value::from("host_calls"))), "{ranks:?}");
    assert_eq!(ranks[0]["file"], dir.join("rank-00000.sflog").display().to_string());
    let ages: Vec<f64> = field("heartbeat_age_s").iter().map(|a| a.as_f64().unwrap()).collect();
    assert!(ages[0] < 1.0 && (3_599.0..3_700.0).contains(&ages[1]), "{ages:?}");
}

#[test]
fn ls_judges_other_hosts_by_wall_clock_and_reports_exits() {
    let dir = TempDir::new("ls-hosts");
    // Its monotonic heartbeat would be stale here; only its wall clock says it is live.
    let remote = write_log(&dir.join("rank-00000.sflog"), &Spec::rank(0, 2, "far-away-node"));
    let exited =
        write_log(&dir.join("rank-00001.sflog"), &Spec::rank(1, 2, &stagefrontier::core::log::host::hostname()));
    exited.set(live::WRITER_STATE, WriterState::Exited as u64);
    beat_an_hour_ago(&exited);
    let unranked = write_log(
        &dir.join("pid-77.sflog"),
        &Spec { pid: 77, ..Spec::rank(-1, -1, &stagefrontier::core::log::host::hostname()) },
    );
    unranked.set(live::WRITER_STATE, WriterState::Disabled as u64);
    remote.heartbeat(1, wall_ns(), 1e9);

    let out = sf(&[OsStr::new("ls"), dir.0.as_os_str(), OsStr::new("--json")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ranks = report["ranks"].as_array().unwrap();
    let pairs: Vec<(i64, &str)> =
        ranks.iter().map(|r| (r["rank"].as_i64().unwrap(), r["liveness"].as_str().unwrap())).collect();
    assert_eq!(pairs, [(0, "live"), (1, "exited"), (-1, "disabled")]);
    assert_eq!(report["missing_ranks"], serde_json::json!([]));

    let out = sf(&[OsStr::new("ls"), dir.0.as_os_str()]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("2 of 2 ranks have a log; plus 1 log without rank identity; no events dropped"),
        "{stdout}"
    );
    let unranked_row: Vec<&str> = stdout.lines().nth(3).unwrap().split_whitespace().collect();
    assert_eq!(unranked_row[..5], ["-", "-", stagefrontier::core::log::host::hostname().as_str(), "77", "disabled"]);
}

#[test]
fn ls_of_one_file() {
    let dir = TempDir::new("ls-file");
    let writer =
        write_log(&dir.join("rank-00000.sflog"), &Spec::rank(0, 1, &stagefrontier::core::log::host::hostname()));
    beat_now(&writer);
    let out = sf(&[OsStr::new("ls"), dir.join("rank-00000.sflog").as_os_str()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("1 of 1 ranks have a log; no events dropped"), "{}", text(&out.stdout));
}

#[test]
fn dump_json_is_one_line_per_record() {
    let dir = TempDir::new("dump-json");
    let path = dir.join("rank-00003.sflog");
    write_log(&path, &Spec { calls: 50, ..Spec::rank(3, 4, &stagefrontier::core::log::host::hostname()) });
    let out = sf(&[OsStr::new("dump"), path.as_os_str(), OsStr::new("--json")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("each line is JSON")).collect();
    assert_eq!(lines.len(), 51);
    // The history ring's creation, then the event ring's calls: each ring numbers its own.
    let seqs: Vec<u64> = [1].into_iter().chain(1..=50).collect();
    assert_eq!(record_seqs(&stdout), seqs, "oldest first, ring by ring");

    let created = &lines[0];
    assert_eq!((created["seq"].as_u64(), created["kind"].as_str()), (Some(1), Some("comm_created")));
    assert_eq!(created["comm_id"], "0x5eed000000000001");
    assert_eq!(created["origin"], "init_rank");
    assert!(created.get("dtype_name").is_none(), "names belong to NCCL calls only");

    for call in &lines[1..] {
        assert_eq!(call["kind"], "nccl_call");
        assert_eq!(call["op"], "allreduce");
        assert_eq!(call["count"], 1 << 20);
        assert_eq!(call["bytes"], 4 << 20);
        assert_eq!(call["dtype"], 7);
        assert_eq!(call["dtype_name"], "float32");
        assert_eq!(call["redop_name"], "sum");
        assert_eq!(call["result_name"], "ncclSuccess");
        assert_eq!(call["t_exit_ns"].as_u64().unwrap() - call["t_enter_ns"].as_u64().unwrap(), 25_000);
    }

    let stderr = text(&out.stderr);
    assert_eq!(
        stderr.trim_end(),
        format!(
            "{}: 51 records held (seq 1..50, history seq 1..1), 0 lost to wraparound, 0 missing, 0 invalid slots",
            path.display()
        )
    );
}

#[test]
fn dump_human_is_one_aligned_line_per_record() {
    let dir = TempDir::new("dump-human");
    let path = dir.join("rank-00000.sflog");
    write_log(&path, &Spec { calls: 10, ..Spec::rank(0, 2, &stagefrontier::core::log::host::hostname()) });
    let out = sf(&[OsStr::new("dump"), path.as_os_str()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1 + 11, "header and one line per record");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header.join(" "), "SEQ TIME_S WALL KIND OP COMM COMM_SEQ COUNT DTYPE BYTES REDOP DUR_US RESULT");
    assert!(lines[1].contains("comm_created") && lines[1].contains("rank=0/2"), "{}", lines[1]);
    let mut call: Vec<&str> = lines[2].split_whitespace().collect();
    // WALL: the call's time in UTC, from the header's calibration (written just now).
    let wall = call.remove(2);
    let today = std::process::Command::new("date").args(["-u", "+%Y-%m-%dT"]).output().unwrap();
    assert!(wall.starts_with(String::from_utf8_lossy(&today.stdout).trim()) && wall.ends_with('Z'), "{wall}");
    assert_eq!(
        call[..12].join(" "),
        "1 0.001000 nccl_call allreduce 0x5eed000000000001 1 1048576 float32 4194304 sum 25.000 ncclSuccess"
    );
    let result_at = lines[0].find("RESULT").unwrap();
    assert!(lines[2..].iter().all(|l| l[result_at..].starts_with("ncclSuccess")), "aligned:\n{stdout}");
    assert!(text(&out.stderr).contains("11 records held"), "{}", text(&out.stderr));
}

#[test]
fn wraparound_keeps_the_newest_records() {
    let dir = TempDir::new("wrap");
    let path = dir.join("rank-00000.sflog");
    let writer =
        write_log(&path, &Spec { calls: 2_999, ..Spec::rank(0, 1, &stagefrontier::core::log::host::hostname()) });
    beat_now(&writer);

    let out = sf(&[OsStr::new("ls"), path.as_os_str(), OsStr::new("--json")]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rank = &report["ranks"][0];
    // The creation is held in the history ring; the event ring keeps the newest 1024 calls.
    assert_eq!((rank["committed"].as_u64(), rank["held"].as_u64()), (Some(3_000), Some(1_025)));
    assert_eq!((rank["lost_to_wrap"].as_u64(), rank["missing"].as_u64()), (Some(1_975), Some(0)));

    let out = sf(&[OsStr::new("dump"), path.as_os_str(), OsStr::new("--json")]);
    assert!(out.status.success());
    assert_eq!(record_seqs(&text(&out.stdout)), [1].into_iter().chain(1_976..=2_999).collect::<Vec<u64>>());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("1025 records held (seq 1976..2999, history seq 1..1), 1975 lost to wraparound, 0 missing"),
        "{stderr}"
    );
}

#[test]
fn a_read_budget_checks_each_logs_newest_records_and_says_so() {
    let dir = TempDir::new("budget");
    let host = stagefrontier::core::log::host::hostname();
    let writers: Vec<LogWriter> = (0..2)
        .map(|rank| {
            let path = dir.join(&format!("rank-{rank:05}.sflog"));
            write_log(&path, &Spec { slot_count: 8192, calls: 6_000, ..Spec::rank(rank, 2, &host) })
        })
        .collect();
    writers.iter().for_each(beat_now);
    let ls = |budget: &str, json: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sf"));
        cmd.arg("ls").arg(&dir.0).env("SF_READ_BUDGET", budget);
        if json {
            cmd.arg("--json");
        }
        cmd.output().expect("run sf")
    };
    // The whole rings: every record read and checked.
    let whole: Value = serde_json::from_slice(&ls("1000000", true).stdout).unwrap();
    assert_eq!((whole["ranks"][0]["held"].as_u64(), whole["ranks"][0]["not_read"].as_u64()), (Some(6_001), Some(0)));
    assert_eq!(whole["budget_for_all"], Value::Null);
    // The smallest budget: each log's newest 4,096 event records (and its history ring).
    let cut: Value = serde_json::from_slice(&ls("1", true).stdout).unwrap();
    assert_eq!(cut["records_read_per_log"].as_u64(), Some(4096), "{cut}");
    for rank in cut["ranks"].as_array().unwrap() {
        assert_eq!((rank["held"].as_u64(), rank["not_read"].as_u64()), (Some(4_097), Some(1_904)), "{rank}");
        assert_eq!((rank["committed"].as_u64(), rank["missing"].as_u64()), (Some(6_001), Some(0)), "{rank}");
    }
    assert_eq!(cut["budget_for_all"].as_u64(), Some(2 * 6_001));
    let human = text(&ls("1", false).stdout);
    assert!(
        human.contains("note: the newest 4096 event records of each log were read and checked (SF_READ_BUDGET shared by 2 logs); 2 logs hold older ones")
            && human.contains("SF_READ_BUDGET=12002 reads every record"),
        "{human}"
    );
    // A budget that is no count is refused by name.
    let out = ls("lots", false);
    assert!(!out.status.success() && text(&out.stderr).contains("SF_READ_BUDGET=\"lots\": not a number of records"));
}

#[test]
fn bad_inputs_fail_in_one_line_without_panic() {
    let dir = TempDir::new("bad");
    let good = dir.join("rank-00000.sflog");
    write_log(&good, &Spec::rank(0, 1, &stagefrontier::core::log::host::hostname()));
    let log = std::fs::read(&good).unwrap();

    let random = dir.join("random.sflog");
    let noise: Vec<u8> = (0..10_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&random, noise).unwrap();
    let tiny = dir.join("tiny.sflog");
    std::fs::write(&tiny, b"SF").unwrap();
    let truncated = dir.join("truncated.sflog");
    std::fs::write(&truncated, &log[..log.len() / 2]).unwrap();
    let wrong_version = dir.join("version.sflog");
    let mut patched = log.clone();
    patched[8..12].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(&wrong_version, patched).unwrap();
    let nonexistent = dir.join("no-such-rank.sflog");

    let cases = [
        (&random, "not a stagefrontier rank log"),
        (&tiny, "not a stagefrontier rank log"),
        (&truncated, "truncated"),
        (&wrong_version, "log format version 99, but this sf reads versions 1 to 2"),
        (&nonexistent, "cannot read: No such file or directory"),
    ];
    for (path, fragment) in cases {
        let out = sf(&[OsStr::new("dump"), path.as_os_str()]);
        assert_one_error_line(&out, fragment);
        assert!(out.stdout.is_empty(), "{path:?}");
        let out = sf(&[OsStr::new("ls"), path.as_os_str()]);
        assert_one_error_line(&out, fragment);
    }
}

#[test]
fn ls_keeps_listing_past_a_bad_log() {
    let dir = TempDir::new("ls-bad");
    let writer =
        write_log(&dir.join("rank-00000.sflog"), &Spec::rank(0, 2, &stagefrontier::core::log::host::hostname()));
    beat_now(&writer);
    let log = std::fs::read(dir.join("rank-00000.sflog")).unwrap();
    std::fs::write(dir.join("rank-00001.sflog"), &log[..log.len() / 2]).unwrap();

    let out = sf(&[OsStr::new("ls"), dir.0.as_os_str()]);
    assert_one_error_line(&out, "rank-00001.sflog: truncated");
    let stdout = text(&out.stdout);
    assert!(stdout.lines().nth(1).unwrap().trim_start().starts_with("0 "), "{stdout}");
    assert!(stdout.contains("1 of 2 ranks have a log; missing rank 1; 1 file unreadable (see stderr)"), "{stdout}");

    let out = sf(&[OsStr::new("ls"), dir.0.as_os_str(), OsStr::new("--json")]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ranks"].as_array().unwrap().len(), 1);
    assert_eq!(report["errors"][0]["file"], dir.join("rank-00001.sflog").display().to_string());
    assert!(report["errors"][0]["error"].as_str().unwrap().contains("truncated"));
}

#[test]
fn ls_without_logs_says_where_they_are_written() {
    let root = TempDir::new("empty");
    assert_one_error_line(&sf(&[OsStr::new("ls"), root.0.as_os_str()]), "no rank logs (*.sflog) in");
    let stderr = text(&sf(&[OsStr::new("ls"), root.0.as_os_str()]).stderr);
    assert!(stderr.contains("$SF_LOG_DIR/<job id>/") && stderr.contains("/dev/shm/stagefrontier-"), "{stderr}");

    // Given the log root instead of a job directory, it finds the job below it.
    std::fs::create_dir(root.join("job-7")).unwrap();
    write_log(
        &root.join("job-7").join("rank-00000.sflog"),
        &Spec::rank(0, 1, &stagefrontier::core::log::host::hostname()),
    );
    let out = sf(&[OsStr::new("ls"), root.0.as_os_str(), OsStr::new("--json")]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ranks"][0]["file"], root.join("job-7").join("rank-00000.sflog").display().to_string());
}

#[test]
fn dump_of_a_directory_asks_for_a_file() {
    let dir = TempDir::new("dump-dir");
    write_log(&dir.join("rank-00002.sflog"), &Spec::rank(2, 4, &stagefrontier::core::log::host::hostname()));
    let out = sf(&[OsStr::new("dump"), dir.0.as_os_str()]);
    assert_one_error_line(&out, "is a directory; sf dump reads one rank log: pass a file");
    assert!(text(&out.stderr).contains("rank-00002.sflog"));
}

#[test]
fn help_teaches_and_version_names_the_format() {
    for flag in ["-h", "--help"] {
        let out = sf(&[flag]);
        assert!(out.status.success());
        let help = text(&out.stdout);
        for needle in ["ls", "dump", "/dev/shm/stagefrontier-<uid>/<job id>/", "SF_LOG_DIR", "Examples:"] {
            assert!(help.contains(needle), "{needle:?} missing from sf {flag}:\n{help}");
        }
        for command in ["ls", "dump"] {
            let out = sf(&[command, flag]);
            assert!(out.status.success());
            let help = text(&out.stdout);
            for needle in ["--json", "/dev/shm/stagefrontier-", "Examples:", &format!("sf {command} ")] {
                assert!(help.contains(needle), "{needle:?} missing from sf {command} {flag}:\n{help}");
            }
        }
    }
    let out = sf(&["--version"]);
    let (format, schema) =
        (stagefrontier::core::log::format::FORMAT_VERSION, stagefrontier::core::log::format::SCHEMA_VERSION);
    let expected = format!("sf {} (log format {format}, record schema {schema})", env!("CARGO_PKG_VERSION"));
    assert_eq!(text(&out.stdout).trim(), expected);

    let out = sf::<&str>(&[]);
    assert_eq!(out.status.code(), Some(2), "no command: usage");
    assert!(text(&out.stderr).contains("Usage:"));
}

#[test]
fn a_closed_pipe_ends_dump_quietly() {
    let dir = TempDir::new("pipe");
    let path = dir.join("rank-00000.sflog");
    write_log(
        &path,
        &Spec { slot_count: 4096, calls: 4_000, ..Spec::rank(0, 1, &stagefrontier::core::log::host::hostname()) },
    );
    for format in [None, Some("--json")] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sf"))
            .arg("dump")
            .arg(&path)
            .args(format)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Far more output than a pipe buffers: sf is still writing when the reader leaves.
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        assert!(!first.is_empty());
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{format:?}: {:?} {stderr}", out.status);
        assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{stderr}");
    }
}

#[test]
fn json_errors_are_one_object_on_stdout_and_one_line_on_stderr() {
    let dir = TempDir::new("json-errors");
    let missing = dir.join("no-such-job");
    for command in ["ls", "dump", "hang", "slow", "kernels", "net", "frontier"] {
        let out = sf(&[OsStr::new(command), missing.as_os_str(), OsStr::new("--json")]);
        assert_one_error_line(&out, &missing.display().to_string());
        assert_eq!(out.status.code(), Some(1), "{command}: an error is 1 for every command");
        let stdout = text(&out.stdout);
        assert_eq!(stdout.lines().count(), 1, "{command}: one JSON object: {stdout}");
        let error: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{command}: {e}: {stdout}"));
        assert_eq!(error["file"].as_str(), Some(missing.to_str().unwrap()), "{command}: {error}");
        assert!(!error["error"].as_str().unwrap().is_empty() && error["hint"].is_string(), "{command}: {error}");
        let stderr = text(&out.stderr);
        assert_eq!(stderr.trim_end(), format!("sf: {}", error["message"].as_str().unwrap()), "{command}");
    }
    // Without --json, stdout stays empty.
    let out = sf(&[OsStr::new("slow"), missing.as_os_str()]);
    assert!(out.stdout.is_empty() && out.status.code() == Some(1));
}

/// A bad command line under `--json` is the usage error (status 2) on stderr as clap
/// words it, and one JSON error object on stdout where the script reads the answer.
#[test]
fn usage_errors_under_json_are_a_json_object_too() {
    let out = sf(&["ls", "--json", "--no-such-flag", "job"]);
    assert_eq!(out.status.code(), Some(2));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout}");
    let object: Value = serde_json::from_str(&stdout).unwrap();
    let message = object["message"].as_str().unwrap();
    assert!(message.starts_with("usage: ") && message.contains("--no-such-flag"), "{message}");
    assert_eq!(object["hint"], "see sf --help");
    assert!(text(&out.stderr).contains("--no-such-flag"));
    // Without --json, and for --help, stdout holds no error object.
    assert!(sf(&["ls", "--no-such-flag", "job"]).stdout.is_empty());
    let help = sf(&["ls", "--json", "--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(!text(&help.stdout).starts_with('{'));
}
