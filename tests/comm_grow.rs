//! A communicator grown with ncclCommGrow (2.29.2) on a real three-process job over
//! fakenccl (tests/c/grow_job.c: ranks 0 and 1 grow their communicator, rank 2 joins as a
//! new rank): every member's records name it one way in every report, as one communicator
//! with all its ranks (`analysis::comms::grow`).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use stagefrontier::core::comms::comm_identity::GROW_ALIAS_COLOR;
use stagefrontier::core::log::records::{CommCreated, CommOrigin};

fn grown(created: &[CommCreated]) -> Vec<CommCreated> {
    created.iter().filter(|c| c.origin == CommOrigin::Grow).copied().collect()
}

fn sf_hang(dir: &std::path::Path) -> Value {
    let out =
        Command::new(artifact("sf")).args(["hang", "--json", "--fallback-stuck-s", "1"]).arg(dir).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// The root records the new ranks' name for the grown communicator as an alias of the
/// existing members' one; `sf hang` then shows the grown communicator once, with the
/// existing members at the ranks they kept and the new rank, on a finished job and while
/// the new rank holds the job up, and steps inferred from the schedule match on all three.
#[test]
fn a_grown_communicator_is_one_communicator_with_all_its_ranks() {
    let root = log_root("grow");
    let job = compile_against_fakenccl("grow_job.c", "sf-grow-job");
    run_ok(&mut preloaded(&job, &root, "done"));
    let logs = rank_logs(&root, "done");
    assert_eq!(logs.len(), 3);
    let created: Vec<Vec<CommCreated>> = logs.iter().map(|p| grown(&comms_created(&bodies(p)))).collect();
    let existing = created[0][0].comm_id;
    assert_eq!((created[0][0].rank, created[1][0].comm_id, created[1][0].rank), (0, existing, 1), "{created:?}");
    assert_eq!(created[1].len(), 1, "a non-root existing member knows no unique id");
    let new_name = created[2][0].comm_id;
    assert_ne!(new_name, existing, "no single value is shared by all members at the call");
    assert_eq!((created[2][0].rank, created[2][0].parent_id), (2, 0));
    let alias = created[0][1];
    assert_eq!(
        (alias.comm_id, alias.parent_id, alias.color),
        (new_name, existing, GROW_ALIAS_COLOR),
        "the root's alias"
    );

    let report = sf_hang(&root.join("done"));
    let three: Vec<&Value> =
        report["communicators"].as_array().expect("communicators").iter().filter(|c| c["nranks"] == 3).collect();
    assert_eq!(three.len(), 1, "{report}");
    assert_eq!(three[0]["comm_id"], format!("{existing:#018x}"), "{report}");
    let members: Vec<(i64, i64)> = three[0]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["rank"].as_i64().unwrap(), m["comm_rank"].as_i64().unwrap()))
        .collect();
    assert_eq!(members, [(0, 0), (1, 1), (2, 2)], "{report}");

    // Steps inferred from the NCCL schedule (no markers): the new rank follows the same
    // pattern of collectives on the same communicator as the existing members.
    run_ok(preloaded(&job, &root, "steps").arg("40"));
    let out = Command::new(artifact("sf")).args(["steps", "--json"]).arg(root.join("steps")).output().unwrap();
    let steps: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let per_rank: Vec<usize> = steps["ranks"]
        .as_array()
        .expect("ranks")
        .iter()
        .map(|r| r["steps"].as_array().map_or(0, |s| s.len()))
        .collect();
    assert!(per_rank.len() == 3 && per_rank.iter().all(|&n| n > 10 && n == per_rank[0]), "{per_rank:?}");

    // The new rank holds up the grown communicator's second AllReduce.
    let mut cmd = preloaded(&job, &root, "hung");
    cmd.arg("1000000").env("SF_INJECT", "hang:rank=2,op=allreduce,seq=2,comm=world");
    let _job = Killed(cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    let report = loop {
        let report = sf_hang(&root.join("hung"));
        if report["hung"] == true {
            break report;
        }
        assert!(Instant::now() < deadline, "never hung: {report}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let stuck: Vec<&Value> =
        report["communicators"].as_array().unwrap().iter().filter(|c| !c["stuck_seq"].is_null()).collect();
    assert_eq!(stuck.len(), 1, "{report}");
    let c = stuck[0];
    assert_eq!(
        (&c["nranks"], &c["missing_ranks"], &c["waiting_ranks"]),
        (&3.into(), &[2].into(), &[0, 1].into()),
        "{report}"
    );
    assert!(report["communicators"].as_array().unwrap().iter().all(|c| c["comm_id"] != format!("{new_name:#018x}")));
    let _ = std::fs::remove_file(&job);
    let _ = std::fs::remove_dir_all(&root);
}
