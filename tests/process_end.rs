//! Who went first: each rank records its own end (exit status or signal, with the time),
//! and `sf ls` / `sf hang` name the rank that ended first when a launcher tears the others
//! down within milliseconds, which heartbeats (every 50 ms) cannot order.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};

use common::*;
use serde_json::Value;
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::{EndHow, ProcessEnd};

fn end_of(log: &Path) -> Option<ProcessEnd> {
    RankLog::open(log).unwrap().live().end
}

fn sf(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sf")).args(args).arg(dir).output().unwrap()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// The library's SIGTERM handler sits in front of the application's and hands the signal
/// on: the application's handler still runs (and the end says it handled it), and with no
/// handler of its own the process still dies of SIGTERM, the end recorded first.
#[test]
fn the_applications_own_sigterm_handler_runs_and_the_default_action_still_kills() {
    let exe = std::env::temp_dir().join(format!("sf-term-handler-{}", std::process::id()));
    compile_c(&c_source("term_handler.c"), &exe, &["-ldl"]);
    let root = log_root("term-handler");
    for (mode, signal, printed, how) in
        [("handled", libc::SIGKILL, "handled=1", EndHow::HandledSignal), ("default", libc::SIGTERM, "", EndHow::Signal)]
    {
        let job = format!("term-{mode}");
        let out = preloaded(&exe, &root, &job).arg(mode).env("RANK", "0").env("WORLD_SIZE", "1").output().unwrap();
        assert_eq!(out.status.signal(), Some(signal), "{mode}: {:?}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), printed, "{mode}");
        let end = end_of(&rank_logs(&root, &job)[0]).expect("an end");
        assert_eq!((end.how, end.code), (how, libc::SIGTERM), "{mode}");
        assert!(end.wall_ns > 0 && end.t_ns > 0);
    }
}

/// sf-trainer-sim's rank `rank` ends at the start of step 5 (`how`: exit1 or kill); its
/// launcher stops the others with SIGTERM at once, as torchrun does.
fn job_where_one_rank_ends(test: &str, rank: u32, how: &str) -> std::path::PathBuf {
    let root = log_root(test);
    let mut cmd = preloaded(&trainer_sim(), &root, "job");
    cmd.args(trainer_args(4, 40)).env("SF_TRAINER_SIM_EXIT", format!("{rank}@5:{how}"));
    let out = cmd.output().unwrap();
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    root.join("job")
}

#[test]
fn a_rank_that_exits_1_goes_first_and_its_teardown_is_named_post_mortem() {
    let dir = job_where_one_rank_ends("end-exit1", 2, "exit1");
    let logs = rank_logs(dir.parent().unwrap(), "job");
    assert_eq!(logs.len(), 4);
    for (rank, log) in logs.iter().enumerate() {
        let end = end_of(log).unwrap_or_else(|| panic!("rank {rank} recorded no end"));
        let expected = if rank == 2 { (EndHow::Exit, 1) } else { (EndHow::Signal, libc::SIGTERM) };
        assert_eq!((end.how, end.code), expected, "rank {rank}");
    }

    let ls = json(&sf(&["ls", "--json"], &dir));
    let first = &ls["first_end"];
    assert_eq!((first["rank"].as_i64(), first["verb"].as_str()), (Some(2), Some("exited")), "{first}");
    assert_eq!(first["cause"], "status 1");
    assert_eq!(first["rest"], serde_json::json!([0, 1, 3]));
    assert_eq!((first["teardown"].as_bool(), first["teardown_signal"].as_str()), (Some(true), Some("SIGTERM")));
    let ls_text = String::from_utf8_lossy(&sf(&["ls"], &dir).stdout).into_owned();
    assert!(ls_text.contains("rank 2 exited first (status 1) at 20"), "{ls_text}");
    assert!(ls_text.contains("(a teardown by SIGTERM)"), "{ls_text}");

    let hang = sf(&["hang"], &dir);
    let text = String::from_utf8_lossy(&hang.stdout);
    assert_eq!(hang.status.code(), Some(3), "{text}");
    let mut lines = text.lines();
    let headline = lines.next().unwrap();
    assert!(headline.starts_with("HUNG (post-mortem"), "{text}");
    assert!(headline.contains("rank 2 held up"), "{text}");
    assert!(lines.next().unwrap().starts_with("rank 2 exited first (status 1)"), "{text}");
    let hang = json(&sf(&["hang", "--json"], &dir));
    assert_eq!(hang["post_mortem"]["culprit_ranks"], serde_json::json!([2]), "{}", hang["post_mortem"]);
    assert_eq!(hang["post_mortem"]["named_by"], "first_end");
    assert_eq!(hang["first_end"]["rank"], 2);
}

#[test]
fn a_sigkilled_rank_with_the_others_terminated_after_it_died_first() {
    let dir = job_where_one_rank_ends("end-kill", 1, "kill");
    let logs = rank_logs(dir.parent().unwrap(), "job");
    assert_eq!(end_of(&logs[1]), None, "SIGKILL leaves no end");
    let ls = json(&sf(&["ls", "--json"], &dir));
    let first = &ls["first_end"];
    assert_eq!((first["rank"].as_i64(), first["verb"].as_str()), (Some(1), Some("died")), "{first}");
    assert_eq!(first["at_or_after"], true);
    assert_eq!(first["rest"], serde_json::json!([0, 2, 3]));
    let hang = sf(&["hang"], &dir);
    let text = String::from_utf8_lossy(&hang.stdout);
    assert!(text.contains("rank 1 died first (no end record"), "{text}");
    assert!(text.lines().next().unwrap().contains("rank 1 held up"), "{text}");
}
