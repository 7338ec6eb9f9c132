//! The NCCL call budget (`SF_CALL_BUDGET`): with fewer calls than the logs hold, `sf
//! frontier`, `slow` and `steps` analyse only the steps the calls read cover, say where
//! that window starts and why, and give those steps the very answers a run that read every
//! call gives. Logs written through the real writer (`core::log::synth`).

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;
use serde_json::Value;
use stagefrontier::core::log::synth::SynthJob;

const RANKS: u32 = 8;

/// 8 ranks, 200 steps of 20 allreduces (4,000 calls a rank, all held), rank 3 stalling in
/// data from step 100.
fn job() -> SynthJob {
    SynthJob {
        job_id: "budget".into(),
        world: RANKS,
        ranks_per_host: 8,
        steps: 200,
        calls_per_step: 20,
        slot_count: 8192,
        slow_rank: Some(3),
        stall_us: 20_000,
    }
}

fn sf(budget: Option<&str>, args: &[&str], dir: &Path) -> Output {
    let mut cmd = Command::new(artifact("sf"));
    cmd.args(&args[..1]).arg(dir).args(&args[1..]).env_remove("SF_CALL_BUDGET");
    if let Some(budget) = budget {
        cmd.env("SF_CALL_BUDGET", budget);
    }
    cmd.output().expect("spawn sf")
}

fn json(budget: Option<&str>, args: &[&str], dir: &Path) -> Value {
    let out = sf(budget, args, dir);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("sf {args:?} --json: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn a_budgeted_run_names_where_its_window_starts_and_agrees_step_by_step_with_a_whole_one() {
    let root = log_root("call-budget");
    let dir = root.join("job");
    job().write(&dir, 0..RANKS).unwrap();

    // Within the budget (the default holds every call): no window, nothing said.
    let whole = json(None, &["frontier", "--window", "1", "--json"], &dir);
    assert!(whole["call_window"].is_null(), "{}", whole["call_window"]);
    let whole_steps = json(None, &["steps", "--json"], &dir);
    assert!(whole_steps["call_window"].is_null());
    let text = String::from_utf8_lossy(&sf(None, &["frontier"], &dir).stdout).to_string();
    assert!(!text.contains("SF_CALL_BUDGET"), "{text}");

    // 400 calls a rank: the newest 20 steps' worth.
    let budget = Some("3200");
    let cut = json(budget, &["frontier", "--window", "1", "--json"], &dir);
    let window = &cut["call_window"];
    let start = window["starts_at_step"].as_u64().expect("the window is named");
    assert!((178..=182).contains(&start), "400 calls of 20 a step reach back 20 steps: {window}");
    assert_eq!(window["per_rank"], 400);
    assert_eq!(window["ranks_cut"], RANKS);
    assert_eq!(window["budget_for_all"].as_u64(), Some(4_000 * RANKS as u64), "{window}");
    // The analysis covers the window's steps, each with the answer of the whole run.
    let windows = cut["windows"].as_array().unwrap();
    assert_eq!(windows.len() as u64, 200 - start, "{window}");
    assert_eq!(windows[0]["first_step"].as_u64(), Some(start));
    let whole_windows = whole["windows"].as_array().unwrap();
    for w in windows {
        let same = whole_windows.iter().find(|o| o["first_step"] == w["first_step"]).expect("the step is in both");
        assert_eq!(w, same, "step {}", w["first_step"]);
    }
    // One window over the steps held still names the rank that stalls.
    let one = json(budget, &["frontier", "--json"], &dir);
    assert_eq!(one["windows"][0]["first_step"].as_u64(), Some(start));
    assert_eq!(one["windows"][0]["culprits"][0]["rank"], 3, "{}", one["windows"][0]["culprits"]);
    // Per step and rank, waits and caused waits included.
    let cut_steps = json(budget, &["steps", "--json"], &dir);
    assert_eq!(cut_steps["call_window"], *window);
    for (a, b) in whole_steps["ranks"].as_array().unwrap().iter().zip(cut_steps["ranks"].as_array().unwrap()) {
        let held: Vec<&Value> =
            a["steps"].as_array().unwrap().iter().filter(|s| s["step"].as_u64() >= Some(start)).collect();
        let listed: Vec<&Value> = b["steps"].as_array().unwrap().iter().collect();
        assert_eq!(held, listed, "rank {}", a["rank"]);
        assert!(listed.iter().any(|s| s["wait_s"].as_object().is_some_and(|w| !w.is_empty())) || a["rank"] == 3);
    }

    // The human reports say where and why, and how to widen it.
    for command in ["frontier", "slow", "steps"] {
        let out = sf(budget, &[command], &dir);
        let text = String::from_utf8_lossy(&out.stdout);
        let said = format!("the analysis starts at step {start}: the wait attribution read each rank's newest 400");
        assert!(text.contains(&said), "sf {command}: {text}");
        assert!(text.contains("SF_CALL_BUDGET=32000 reads every call held"), "sf {command}: {text}");
    }
    let slow = json(budget, &["slow", "--json"], &dir);
    assert_eq!(slow["call_window"], *window);
    assert!(slow["l1"].as_array().unwrap().iter().all(|r| r["steps"].as_u64() <= Some(200 - start)), "{slow}");
    assert_eq!(slow["slow_ranks"][0]["rank"], 3, "{}", slow["slow_ranks"]);

    // A budget too small for one step, or not a number: an error naming the fix.
    for (bad, says) in [("8", "cover no whole step; raise SF_CALL_BUDGET"), ("many", "SF_CALL_BUDGET=\"many\"")] {
        let out = sf(Some(bad), &["frontier", "--json"], &dir);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(says), "{err}");
    }
    let _ = std::fs::remove_dir_all(&root);
}
