//! `sf hang` joined to NCCL's profiler: for the call a rank is stuck in, what the profiler
//! door saw of that same call (`commands::hang_profiler`), on real jobs hung by a proxy
//! send step that never completes on a stock (no NET_PROFILER) fakenccl.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// A two-rank job whose rank 1 stalls its 11th network send (profiler ABI `version`).
fn stalled(root: &std::path::Path, job: &str, version: u32, capture: Option<&str>) -> Killed {
    stalled_after(root, job, version, capture, 10, false)
}

/// The same, stalling the send after `after` others, with `--p2p` a Send/Recv ring per step.
fn stalled_after(
    root: &std::path::Path,
    job: &str,
    version: u32,
    capture: Option<&str>,
    after: u32,
    p2p: bool,
) -> Killed {
    let mut cmd = preloaded(&trainer_sim(), root, job);
    cmd.args(["--ranks", "2", "--steps", "100000", "--stage-ms", "data=2,fwd=2,bwd=4,callbacks=1,optim=1"])
        .args(p2p.then_some("--p2p"))
        // Host-blocking NCCL: the stuck call is one the host is inside.
        .args(["--launch", "blocking"])
        .env("NCCL_PROFILER_PLUGIN", library())
        .env("FAKENCCL_PROFILER_VERSION", version.to_string())
        .env("SF_WR_TIMEOUT_MS", "200")
        .env("FAKENCCL_QP_STALL_AFTER", after.to_string())
        .env("FAKENCCL_QP_STALL_MS", "600000")
        .env("FAKENCCL_QP_RANK", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(range) = capture {
        cmd.env("FAKENCCL_GRAPH_CAPTURE", range);
    }
    Killed(cmd.spawn().unwrap())
}

fn hang_json(dir: &std::path::Path) -> Value {
    let out =
        Command::new(artifact("sf")).args(["hang", "--json", "--fallback-stuck-s", "1"]).arg(dir).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

fn profiler_of(report: &Value, rank: u64) -> &Value {
    static NONE: Value = Value::Null;
    let ranks = report["ranks"].as_array().into_iter().flatten();
    ranks.into_iter().find(|r| r["rank"] == rank).map_or(&NONE, |r| &r["profiler"])
}

/// Polls until the job is hung and rank 1's link shows the send step in flight.
fn until_seen(dir: &std::path::Path, linked: bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let report = hang_json(dir);
        let p = profiler_of(&report, 1);
        let in_flight = p["proxies"].as_array().into_iter().flatten().any(|x| x["in_flight"].as_u64() > Some(0));
        if report["hung"] == true && (in_flight || (!linked && p.is_object())) {
            return report;
        }
        assert!(Instant::now() < deadline, "never seen: {report}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// At v4 and v7; and with the job's second and third calls graph-captured (a replayed
/// plan's Coll event repeats a seqNumber): at v7 the call still links through the API
/// ordinal, at v4 the view says the call cannot be linked instead of naming another's.
#[test]
fn the_stuck_call_shows_what_nccls_profiler_saw_of_it() {
    let _serial = one_at_a_time();
    let root = log_root("hang-profiler");
    for (version, capture) in [(4u32, None), (7, None), (7, Some("1-2")), (4, Some("1-2"))] {
        let name = format!("v{version}-{}", capture.unwrap_or("none"));
        let _job = stalled(&root, &name, version, capture);
        let dir = root.join(&name);
        let linked = version >= 5 || capture.is_none();
        let report = until_seen(&dir, linked);
        for rank in [0u64, 1] {
            let p = profiler_of(&report, rank);
            let ctx = format!("{name} rank {rank}: {p}");
            if !linked {
                assert_eq!(p["records"], serde_json::json!([]), "{ctx}");
                assert!(p["note"].as_str().unwrap().contains("graph capture"), "{ctx}");
                continue;
            }
            assert_eq!(p["op"], "allreduce", "{ctx}");
            assert_eq!(p["abi"], version, "{ctx}");
            let records = p["records"].as_array().expect("records");
            assert_eq!(records.len(), 1, "{ctx}");
            assert_eq!(
                (&records[0]["func"], &records[0]["api"]),
                (&"AllReduce".into(), &(version >= 5).into()),
                "{ctx}"
            );
            let rank_seq = report["ranks"][rank as usize]["comm_seq"].as_u64().expect("comm_seq");
            assert!(records[0]["nccl_seq"].as_u64().unwrap() < rank_seq, "NCCL counts per function: {ctx}");
            let proxies = p["proxies"].as_array().expect("proxies");
            let done: u64 = proxies.iter().map(|x| x["steps_done"].as_u64().unwrap()).sum();
            assert!(done > 0, "the call's proxy steps done: {ctx}");
            let in_flight: u64 = proxies.iter().map(|x| x["in_flight"].as_u64().unwrap_or(0)).sum();
            if rank == 1 {
                let stuck = proxies.iter().find(|x| x["in_flight"].as_u64() > Some(0)).expect("a link in flight");
                assert_eq!((&stuck["direction"], &stuck["peer"]), (&"send".into(), &0.into()), "{ctx}");
                assert!(p["last_progress_s"].as_f64().unwrap() > 0.0, "{ctx}");
            } else {
                assert_eq!(in_flight, 0, "rank 0's network part is done; it waits for rank 1: {ctx}");
            }
        }
        if !linked {
            continue;
        }
        let human = Command::new(artifact("sf")).args(["hang", "--fallback-stuck-s", "1"]).arg(&dir).output().unwrap();
        let text = String::from_utf8_lossy(&human.stdout);
        let first = text.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("HUNG: rank 1 channel ") && first.contains(" send to peer 0 (proxy steps, comm 0x"),
            "a link of proxy steps is named by channel, direction and peer, not as a QP: {first}"
        );
        let kind = if version >= 5 { "API" } else { "task" };
        let head = "profiler, rank 1: allreduce is NCCL's AllReduce #";
        let line = text.lines().find(|l| l.starts_with(head)).unwrap_or_else(|| panic!("{text}"));
        assert!(line.contains(&format!("(v{version} {kind},")), "{line}");
        assert!(text.lines().any(|l| l.starts_with("  channel ") && l.contains("in flight on the link")), "{text}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// A rank inside ncclGroupEnd (its grouped Send and Recv returned; rank 1 stalls the Send
/// of the step's point-to-point ring): its view is the group's records, a Send and a Recv.
#[test]
fn a_rank_inside_group_end_shows_its_groups_records() {
    let _serial = one_at_a_time();
    let root = log_root("hang-profiler-group");
    let _job = stalled_after(&root, "job", 7, None, 1, true);
    let dir = root.join("job");
    let report = until_seen(&dir, true);
    let rank0 = &report["ranks"][0];
    assert_eq!((&rank0["grouped"], &rank0["in_flight"]), (&true.into(), &true.into()), "{report}");
    let p = profiler_of(&report, 0);
    assert!(p["op"].is_null(), "a group, no one call: {p}");
    let mut funcs: Vec<&str> = p["records"].as_array().unwrap().iter().map(|r| r["func"].as_str().unwrap()).collect();
    funcs.sort_unstable();
    assert_eq!(funcs, ["Recv", "Send"], "{p}");
    let human = Command::new(artifact("sf")).args(["hang", "--fallback-stuck-s", "1"]).arg(&dir).output().unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.lines().any(|l| l.starts_with("profiler, rank 0: its group (ncclGroupEnd) is NCCL's ")), "{text}");
    let _ = std::fs::remove_dir_all(&root);
}
