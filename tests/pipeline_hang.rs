//! Pipeline hangs: a rank of an 8-rank TP 2 × PP 2 × DP 2 job (sf-trainer-sim, NCCL calls
//! blocking the host) stops before posting its half of a send/recv between pipeline stages.
//! Its peer waits in the matching call; the rest of the job piles up behind the two. With
//! communicators made by `ncclCommSplit` (which records no rank) or from unique ids, and
//! send/recv batched on the pipeline communicator or on a 2-rank one per pair, `sf hang`
//! names the rank that never posted, the peer waiting for it, and the call it waits in.
//! With four pipeline stages (TP 1 × PP 4 × DP 2) the stages after the culprit wait in
//! their own receives, a chain the blame passes along: the headline names the culprit.
//! The call waited in is placed in its microbatch and pass by the 1F1B schedule, with the
//! host blocking and (on the devices' chain) launching asynchronously.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn sf_hang(dir: &Path) -> (Option<i32>, Value) {
    let out = Command::new(artifact("sf")).arg("hang").arg(dir).arg("--json").output().expect("run sf hang");
    (out.status.code(), serde_json::from_slice(&out.stdout).unwrap_or(Value::Null))
}

fn rank_field<'a>(report: &'a Value, rank: u64, field: &str) -> &'a Value {
    let ranks = report["ranks"].as_array().expect("ranks");
    &ranks.iter().find(|r| r["rank"] == rank).expect("the rank")[field]
}

/// Rank = tp + 2·dp + 4·pp (Megatron's order): rank 2 is pipeline stage 0 (tp 0, dp 1),
/// rank 6 the stage-1 rank it sends activations to.
fn hangs_at_the_exchange(test: &str, comm_create: &str, p2p: &str, inject: &str, culprit: u64, peer: u64) {
    let _serial = one_at_a_time();
    let root = log_root(test);
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(["--ranks", "8", "--tp", "2", "--pp", "2", "--dp", "2", "--steps", "100000"])
        .args(["--stage-ms", "data=2,fwd=2,bwd=4,callbacks=1,optim=1", "--launch", "blocking"])
        .args(["--comm-create", comm_create, "--p2p", p2p])
        .env("SF_INJECT", inject)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _job = Killed(cmd.spawn().expect("start sf-trainer-sim"));
    let dir = root.join("job");
    let deadline = Instant::now() + Duration::from_secs(60);
    let report = loop {
        let (code, report) = sf_hang(&dir);
        // Every wait of the pile-up past the threshold: the culprit's peer among them.
        if code == Some(3) && rank_field(&report, peer, "state") == "waiting" {
            break report;
        }
        assert!(Instant::now() < deadline, "{comm_create}/{p2p}: never diagnosed: {report}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let case = format!("{comm_create}/{p2p} {inject}");
    assert_eq!(rank_field(&report, culprit, "state"), "missing", "{case}: {report}");
    assert_eq!(rank_field(&report, peer, "waiting_for"), &serde_json::json!([culprit]), "{case}: {report}");
    let op = rank_field(&report, peer, "op").as_str().unwrap_or_default().to_string();
    assert!(op == "send" || op == "recv", "{case}: the peer waits in a send/recv: {report}");
    let exchange = report["communicators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["stuck_p2p"] == true && c["waiting_ranks"] == serde_json::json!([peer]))
        .unwrap_or_else(|| panic!("{case}: no stuck send/recv: {report}"));
    assert_eq!(exchange["missing_ranks"], serde_json::json!([culprit]), "{case}: {exchange}");
    assert_eq!(exchange["nranks"], 2, "{case}: the split's size follows from its members: {exchange}");

    let human = Command::new(artifact("sf")).arg("hang").arg(&dir).output().unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    let wanted = format!("rank {culprit} never entered the send/recv matching rank {peer}'s {op} #");
    let line = text.lines().take_while(|l| l.starts_with("HUNG")).find(|l| l.contains(&wanted));
    let line = line.unwrap_or_else(|| panic!("{case}:\n{text}"));
    // Step 3's first exchange carries microbatch 0's activations, both ways.
    assert!(line.contains(" (microbatch 0, forward) on 0x"), "{case}: {line}");
    assert_eq!(rank_field(&report, peer, "microbatch"), 0, "{case}: {report}");
    assert_eq!(rank_field(&report, peer, "phase"), "fwd", "{case}: {report}");
    assert!(text.lines().all(|l| !l.contains("wedged")), "{case}: nobody is wedged:\n{text}");
}

#[test]
fn a_rank_that_never_sends_its_activations_is_named_with_split_communicators() {
    hangs_at_the_exchange("pp-hang-split-batched", "split", "batched", "hang:rank=2,op=send,step=3", 2, 6);
}

#[test]
fn a_rank_that_never_sends_its_activations_is_named_with_pair_communicators() {
    hangs_at_the_exchange("pp-hang-new-pairs", "new", "pairs", "hang:rank=2,op=send,step=3", 2, 6);
}

#[test]
fn a_rank_that_never_posts_its_receive_is_named() {
    hangs_at_the_exchange("pp-hang-split-recv", "split", "batched", "hang:rank=6,op=recv,step=3", 6, 2);
}

/// Rank = dp + 2·pp: rank 1 is pipeline stage 0 of the second pipeline (1, 3, 5, 7). It
/// never sends; ranks 3, 5 and 7 block in their receives one after the other, and their
/// data-parallel peers 2, 4 and 6 in the step's reduce-scatter, waiting for them.
#[test]
fn the_headline_names_the_head_of_a_four_stage_chain_of_receives() {
    let _serial = one_at_a_time();
    let root = log_root("pp4-hang-chain");
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(["--ranks", "8", "--tp", "1", "--pp", "4", "--dp", "2", "--steps", "100000"])
        .args(["--stage-ms", "data=2,fwd=2,bwd=4,callbacks=1,optim=1", "--launch", "blocking"])
        .env("SF_INJECT", "hang:rank=1,op=send,step=3")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _job = Killed(cmd.spawn().expect("start sf-trainer-sim"));
    let dir = root.join("job");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut said_hung = false;
    let text = loop {
        let out = Command::new(artifact("sf")).arg("hang").arg(&dir).output().expect("run sf hang");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.code() == Some(3) {
            // From the first answer that says HUNG on, the headline is the culprit's.
            said_hung = true;
            assert!(text.starts_with("HUNG: rank 1 never entered "), "a waiter in the headline:\n{text}");
        }
        if said_hung && text.contains("HUNG: rank 1 never entered the send/recv matching rank 3's recv #") {
            break text;
        }
        assert!(Instant::now() < deadline, "never diagnosed:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(text.lines().all(|l| !l.contains("wedged")), "nobody is wedged:\n{text}");

    let (code, report) = sf_hang(&dir);
    assert_eq!(code, Some(3), "{report}");
    assert_eq!(rank_field(&report, 1, "state"), "missing", "{report}");
    for (rank, upstream) in [(3, 1), (5, 3), (7, 5)] {
        assert_eq!(rank_field(&report, rank, "state"), "waiting", "rank {rank}: {report}");
        assert_eq!(rank_field(&report, rank, "waiting_for"), &serde_json::json!([upstream]), "{report}");
    }
}

/// Runs the four-stage job (`launch`, the CUDA door open for `async`) with rank 1 hung by
/// `inject`, until `sf hang` says `wanted`; returns its text and its JSON.
fn four_stage_answer(test: &str, launch: &str, inject: &str, wanted: &str) -> (String, Value) {
    let _serial = one_at_a_time();
    let root = log_root(test);
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(["--ranks", "8", "--tp", "1", "--pp", "4", "--dp", "2", "--steps", "100000"])
        .args(["--stage-ms", "data=2,fwd=2,bwd=4,callbacks=1,optim=1", "--launch", launch])
        .env("SF_INJECT", inject)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if launch == "async" {
        cmd.env("CUDA_INJECTION64_PATH", library());
    }
    let _job = Killed(cmd.spawn().expect("start sf-trainer-sim"));
    let dir = root.join("job");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = Command::new(artifact("sf")).arg("hang").arg(&dir).output().expect("run sf hang");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.code() == Some(3) && text.contains(wanted) {
            let (_, report) = sf_hang(&dir);
            return (text, report);
        }
        assert!(Instant::now() < deadline, "never said '{wanted}':\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Rank 1 (stage 0 of 4, 8 microbatches) numbers its sends and receives on the pipeline
/// 16 a step: step 3 opens at #49 with three warm-up forwards' sends, then each steady
/// forward's send goes with a backward's receive, so #54 is microbatch 4's activations.
/// Rank 3 waits for them in its receive; the schedule says which microbatch that is.
#[test]
fn a_missing_send_is_placed_in_its_microbatch_by_the_schedule() {
    let wanted = "HUNG: rank 1 never entered the send/recv matching rank 3's recv #";
    let (text, report) = four_stage_answer("pp4-hang-microbatch", "blocking", "hang:rank=1,op=send,seq=54", wanted);
    let line = text.lines().find(|l| l.contains(wanted)).unwrap();
    assert!(line.contains(" (microbatch 4, forward) on 0x"), "{text}");
    assert_eq!((rank_field(&report, 3, "microbatch"), rank_field(&report, 3, "phase")), (&4.into(), &"fwd".into()));
    // Rank 1 waits in no send/recv: nothing to place.
    assert_eq!(rank_field(&report, 1, "microbatch"), &Value::Null, "{report}");
}

/// As above with asynchronous launches: rank 3's device waits in the receive (its host
/// moved on), and the device chain's line places it.
#[test]
fn a_missing_send_on_the_devices_is_placed_in_its_microbatch() {
    let wanted = "HUNG: rank 1 never launched the send rank 3's device waits for in recv #";
    let (text, report) = four_stage_answer("pp4-hang-microbatch-async", "async", "hang:rank=1,op=send,seq=54", wanted);
    let line = text.lines().find(|l| l.contains(wanted)).unwrap();
    assert!(line.contains(" (microbatch 4, forward) on 0x"), "{text}");
    let chain = &report["device_chain"];
    assert_eq!((&chain["microbatch"], &chain["phase"]), (&4.into(), &"fwd".into()), "{report}");
}
