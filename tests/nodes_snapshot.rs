//! Many nodes on one machine: `sf-trainer-sim --nodes 2` writes each node's logs apart,
//! under SF_HOST=node<i>; `sf snapshot` copies each node's logs a few seconds apart; one
//! `sf hang` / `sf frontier` over both snapshot directories gives the answer a
//! single-directory run gives, however much later it runs and after the job is gone.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const STAGES: &str = "data=10,fwd=10,bwd=20,callbacks=2,optim=5";
/// Rank 5 stops before its 40th collective (step 7: a broadcast, then 4 allreduces and an
/// allgather per step).
const HANG: &str = "hang:rank=5,op=allreduce,seq=40";

fn start(root: &Path, nodes: u32, inject: Option<&str>) -> Killed {
    let mut cmd = preloaded(&trainer_sim(), root, "job");
    cmd.args(["--ranks", "8", "--nodes", &nodes.to_string(), "--steps", "100000", "--stage-ms", STAGES])
        .args(["--launch", "blocking"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(rule) = inject {
        cmd.env("SF_INJECT", rule);
    }
    Killed(cmd.spawn().unwrap())
}

fn sf(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(artifact("sf")).args(args).output().unwrap()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    })
}

fn hang(dirs: &[PathBuf]) -> (Option<i32>, Value) {
    let mut args: Vec<&std::ffi::OsStr> = vec!["hang".as_ref(), "--json".as_ref()];
    args.extend(dirs.iter().map(|d| d.as_os_str()));
    let out = sf(&args);
    (out.status.code(), json(&out))
}

fn snapshot(dir: &Path, dest: &Path) -> Value {
    let out = sf(&["snapshot".as_ref(), dir.as_os_str(), "--to".as_ref(), dest.as_os_str(), "--json".as_ref()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    json(&out)
}

/// The parts of a hang report that are its answer: the stuck collective and who is
/// missing, waiting and how each rank is judged.
fn verdict(report: &Value) -> Value {
    let comms: Vec<Value> = report["communicators"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| !c["stuck_seq"].is_null())
        .map(|c| {
            serde_json::json!({
                "op": c["stuck_op"], "seq": c["stuck_seq"], "missing": c["missing_ranks"],
                "waiting": c["waiting_ranks"], "dead": c["dead_ranks"], "nranks": c["nranks"],
            })
        })
        .collect();
    let ranks: Vec<Value> = report["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| serde_json::json!([r["rank"], r["state"], r["liveness"], r["op"], r["comm_seq"]]))
        .collect();
    serde_json::json!({ "hung": report["hung"], "comms": comms, "ranks": ranks })
}

/// Waits until `sf hang` over `dirs` says hung (exit 3), and returns that report.
fn until_hung(dirs: &[PathBuf]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (code, report) = hang(dirs);
        if code == Some(3) && report["ranks"].as_array().is_some_and(|r| r.len() == 8) {
            return report;
        }
        assert!(Instant::now() < deadline, "never hung: {report}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_hung_two_node_job_snapshotted_node_by_node_gets_the_single_directory_answer() {
    let _serial = one_at_a_time();
    // The reference: the same job on one node, read live from its one directory.
    let single_root = log_root("nodes-single");
    let single = start(&single_root, 1, Some(HANG));
    let reference = verdict(&until_hung(&[single_root.join("job")]));
    drop(single);
    assert_eq!(reference["comms"][0]["missing"], serde_json::json!([5]), "{reference}");

    let root = log_root("nodes-two");
    let job = start(&root, 2, Some(HANG));
    let node_dirs = [root.join("node0").join("job"), root.join("node1").join("job")];
    // The fixture's nodes: four ranks each, their own host name and directory.
    until_hung(&node_dirs);
    for (i, dir) in node_dirs.iter().enumerate() {
        let out = sf(&["ls".as_ref(), dir.as_os_str(), "--json".as_ref()]);
        let ls = json(&out);
        let rows = ls["ranks"].as_array().unwrap();
        assert_eq!(rows.len(), 4, "{ls}");
        for (j, row) in rows.iter().enumerate() {
            assert_eq!(row["host"], format!("node{i}"));
            assert_eq!(row["local_rank"], j);
            assert_eq!(row["rank"], 4 * i + j);
        }
    }
    let dest = TempDir::new("nodes-dest");
    let started = Instant::now();
    let first = snapshot(&node_dirs[0], &dest.0);
    assert!(started.elapsed() < Duration::from_secs(5), "a snapshot of 4 ranks takes seconds at most");
    assert_eq!(first["logs"], 4);
    assert_eq!(first["torn_slots"], 0);
    assert_eq!(first["dirs"][0]["dir"], dest.join("node0").join("job").display().to_string());
    std::thread::sleep(Duration::from_secs(2));
    snapshot(&node_dirs[1], &dest.0);
    assert!(dest.join("node1").join("job").join("snapshot.json").is_file());
    // The job is gone by the time the snapshots are read, and the reading is late: the
    // snapshots still show what the job did when they were taken.
    drop(job);
    std::thread::sleep(Duration::from_millis(1500));

    let (code, report) = hang(std::slice::from_ref(&dest.0));
    assert_eq!(code, Some(3), "{report}");
    let answer = verdict(&report);
    assert_eq!(answer, reference, "snapshots of two nodes give the single-directory answer");
    let (code, by_node) = hang(&[dest.join("node0").join("job"), dest.join("node1").join("job")]);
    assert_eq!((code, verdict(&by_node)), (Some(3), reference.clone()), "the node directories, named one by one");
    for rank in report["ranks"].as_array().unwrap() {
        assert_eq!(rank["liveness"], "live", "judged when copied: {rank}");
        assert!(rank["snapshot_wall"].is_string());
    }
    let human = sf(&["hang".as_ref(), dest.0.as_os_str()]);
    let headline = String::from_utf8_lossy(&human.stdout).lines().next().unwrap_or_default().to_string();
    assert!(headline.starts_with("HUNG: rank 5 never entered allreduce #40"), "{headline}");
    let said = String::from_utf8_lossy(&human.stdout);
    assert!(said.contains("as of the snapshots taken from 20"), "read later, it says when it is judged: {said}");
    // The exporter over the snapshots judges them when copied too.
    let scrape = sf(&["exporter".as_ref(), "--once".as_ref(), dest.0.as_os_str()]);
    let text = String::from_utf8_lossy(&scrape.stdout);
    assert!(text.contains("sf_hang_hung{job_id=\"job\"} 1"), "{text}");
    let live =
        text.lines().filter(|l| l.starts_with("sf_rank_liveness{") && l.contains("liveness=\"live\"} 1")).count();
    assert_eq!(live, 8, "every copy live when taken:\n{text}");
    assert!(text.lines().any(|l| l.starts_with("sf_hang_missing_seconds{") && l.contains("rank=\"5\"")), "{text}");

    // sf frontier over both snapshots reads what one directory holding every copy reads.
    let merged = TempDir::new("nodes-merged");
    for node in ["node0", "node1"] {
        for entry in std::fs::read_dir(dest.join(node).join("job")).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, merged.join(path.file_name().unwrap().to_str().unwrap())).unwrap();
        }
    }
    let frontier = |dirs: &[&Path]| {
        let mut args: Vec<&std::ffi::OsStr> = vec!["frontier".as_ref(), "--json".as_ref()];
        args.extend(dirs.iter().map(|d| d.as_os_str()));
        let out = sf(&args);
        let mut report = json(&out);
        report.as_object_mut().unwrap().remove("file");
        (out.status.code(), report)
    };
    let (code, over_nodes) = frontier(&[&dest.join("node0"), &dest.join("node1")]);
    assert!(over_nodes["windows"].as_array().is_some_and(|w| !w.is_empty()), "{over_nodes}");
    assert_eq!(over_nodes["world"], 8);
    assert_eq!((code, over_nodes), frontier(&[&merged.0]));
}

#[test]
fn a_healthy_job_copied_a_moment_apart_is_not_hung_when_read_later() {
    let _serial = one_at_a_time();
    let root = log_root("nodes-healthy");
    let job = start(&root, 2, None);
    let node_dirs = [root.join("node0").join("job"), root.join("node1").join("job")];
    // Running: some steps done on every rank.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !node_dirs.iter().all(|d| rank_logs(d.parent().unwrap(), "job").len() == 4) {
        assert!(Instant::now() < deadline, "the job never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Each rank's environment is torchrun's for its node.
    for (node, dir) in node_dirs.iter().enumerate() {
        let ls = json(&sf(&["ls".as_ref(), dir.as_os_str(), "--json".as_ref()]));
        for row in ls["ranks"].as_array().unwrap() {
            let environ = std::fs::read(format!("/proc/{}/environ", row["pid"])).unwrap();
            let vars: Vec<String> =
                environ.split(|&b| b == 0).map(|v| String::from_utf8_lossy(v).into_owned()).collect();
            let rank = row["rank"].as_u64().unwrap();
            for expected in [
                format!("RANK={rank}"),
                format!("LOCAL_RANK={}", rank % 4),
                "WORLD_SIZE=8".to_string(),
                "LOCAL_WORLD_SIZE=4".to_string(),
                format!("GROUP_RANK={node}"),
                format!("SF_HOST=node{node}"),
                format!("SF_LOG_DIR={}", root.join(format!("node{node}")).display()),
            ] {
                assert!(vars.contains(&expected), "rank {rank} lacks {expected}: {vars:?}");
            }
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let dest = TempDir::new("nodes-healthy-dest");
    snapshot(&node_dirs[0], &dest.0);
    std::thread::sleep(Duration::from_millis(200));
    snapshot(&node_dirs[1], &dest.0);
    drop(job);
    std::thread::sleep(Duration::from_secs(2));
    let (code, report) = hang(std::slice::from_ref(&dest.0));
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["hung"], false);
    for rank in report["ranks"].as_array().unwrap() {
        assert_eq!(rank["liveness"], "live", "{rank}");
    }
    let out = sf(&["ls".as_ref(), dest.0.as_os_str(), "--json".as_ref()]);
    let ls = json(&out);
    assert_eq!(ls["missing_ranks"], serde_json::json!([]));
    // Two hosts: each one's clock mapping and how far it can be off are shown.
    let clocks = ls["clocks"].as_array().unwrap();
    assert_eq!(clocks.iter().map(|c| c["host"].clone()).collect::<Vec<_>>(), ["node0", "node1"]);
    for c in clocks {
        assert_eq!(c["ranks"], 4);
        // One machine's clocks read at four ranks' starts: microseconds apart at most,
        // far below a loaded host's scheduling noise.
        assert!(c["uncertainty_ns"].as_u64().unwrap() < 50_000_000, "{c}");
    }
    let human = sf(&["ls".as_ref(), dest.0.as_os_str()]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("clocks: 2 hosts put on one wall-clock timeline"), "{text}");
    assert!(ls["ranks"].as_array().unwrap().iter().all(|r| r["liveness"] == "live"), "{ls}");
    // Only one node's snapshot: the missing ranks are named.
    let out = sf(&["ls".as_ref(), dest.join("node0").as_os_str(), "--json".as_ref()]);
    assert_eq!(json(&out)["missing_ranks"], serde_json::json!([4, 5, 6, 7]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ranks 4-7 of the world's 8 have no log here"), "{stderr}");
    // One job directory alone is one node's view too: every analysis names what it lacks.
    let job_dir = std::fs::read_dir(dest.join("node0")).unwrap().next().unwrap().unwrap().path();
    let out = sf(&["steps".as_ref(), job_dir.as_os_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ranks 4-7 of the world's 8 have no log here"), "{stderr}");
    // One copy given alone is judged at its snapshot's moment too.
    let one = job_dir.join("rank-00000.sflog");
    let alone = json(&sf(&["ls".as_ref(), one.as_os_str(), "--json".as_ref()]));
    assert_eq!(alone["ranks"][0]["liveness"], "live", "{alone}");
    assert!(alone["ranks"][0]["snapshot_wall"].is_string(), "{alone}");
}
