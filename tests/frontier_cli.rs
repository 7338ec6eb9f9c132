//! `sf frontier` end to end, through the built binary: hidden-rank routing on a simulated
//! 8-rank job (Sec. 6.2's E3 setting), the JSON contract, and malformed CSVs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const STAGES: [&str; 6] = ["data", "forward", "backward", "callbacks", "optimizer", "step.other_cpu_wall"];
/// Roughly the E3 rows' no-fault step (about 200 ms, Table 14's Delay/p50 0.58).
const BASE_S: [f64; 6] = [0.020, 0.050, 0.090, 0.004, 0.030, 0.002];
const STALL_S: f64 = 0.120;

/// A file under the system temp dir, removed when the test ends.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let path = std::env::temp_dir().join(format!("sf-frontier-{}-{name}.csv", std::process::id()));
        std::fs::write(&path, text).expect("write csv");
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn sf(args: &[&str], csv: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sf")).arg("frontier").arg("--csv").arg(csv).args(args).output().expect("run sf")
}

/// 8 ranks × 60 steps with ±10% jitter from a fixed sequence. `late` stalls 120 ms in
/// `stage`; the other ranks wait for it at the backward all-reduce, so they observe the
/// same 120 ms in backward (a stall in backward itself is its own wait).
fn hidden_rank_csv(stage: usize, late: u32) -> String {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut jitter = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        0.9 + 0.2 * (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut csv = String::from("step,rank,stage,seconds\n");
    for step in 0..60 {
        for rank in 0..8u32 {
            for (s, name) in STAGES.iter().enumerate() {
                let mut seconds = BASE_S[s] * jitter();
                if (rank == late && s == stage) || (rank != late && s == 2) {
                    seconds += STALL_S;
                }
                writeln!(csv, "{step},{rank},{name},{seconds:.6}").unwrap();
            }
        }
    }
    csv
}

#[test]
fn a_hidden_rank_stall_is_routed_top2_and_its_rank_named() {
    for (stage, late) in [(0, 5u32), (1, 2)] {
        let file = TempFile::new(&format!("hidden-{stage}"), &hidden_rank_csv(stage, late));
        let out = sf(&["--json"], &file.0);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let windows = report["windows"].as_array().unwrap();
        assert_eq!(windows.len(), 1);
        let w = &windows[0];
        let name = STAGES[stage];
        assert!(w["top2"].as_array().unwrap().iter().any(|s| s == name), "{name} not in top-2: {}", w["top2"]);
        assert_eq!(w["leader_ranks"][name], serde_json::json!([late]), "{}", w["leader_ranks"]);
        assert!(w["routing_set"].as_array().unwrap().iter().any(|s| s == name));
        // The wait the other ranks observe in backward is charged once: backward's
        // advance stays near its own work while its per-stage max carries the stall.
        let steps = 60.0;
        assert!(w["advances_s"]["backward"].as_f64().unwrap() < 1.1 * BASE_S[2] * steps);
        assert!(w["baselines"]["per_stage_max_s"]["backward"].as_f64().unwrap() > (BASE_S[2] + STALL_S) * steps);
    }
}

#[test]
fn json_has_the_contract_fields() {
    let file = TempFile::new("contract", &hidden_rank_csv(0, 5));
    let out = sf(&["--json", "--window", "25"], &file.0);
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let windows = report["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 3, "60 steps in windows of 25");
    for w in windows {
        for field in [
            "first_step",
            "last_step",
            "ranks",
            "exposed_s",
            "advances_s",
            "shares",
            "routing_set",
            "top1",
            "top2",
            "leader_ranks",
            "labels",
            "co_critical_stages",
            "baselines",
        ] {
            assert!(w.get(field).is_some(), "window lacks {field}: {w}");
        }
        assert_eq!(w["ranks"], 8);
        assert_eq!(w["advances_s"].as_object().unwrap().len(), 6);
        for baseline in ["per_stage_max_s", "per_stage_avg_s"] {
            assert_eq!(w["baselines"][baseline].as_object().unwrap().len(), 6);
        }
        let labels = w["labels"].as_array().unwrap();
        assert_eq!(labels[0]["label"], "frontier_accounting");
        assert!(labels.iter().all(|l| l["reason"].as_str().is_some_and(|r| !r.is_empty())));
        let sum: f64 = w["advances_s"].as_object().unwrap().values().map(|v| v.as_f64().unwrap()).sum();
        assert!((sum - w["exposed_s"].as_f64().unwrap()).abs() < 1e-9);
    }
    assert_eq!((windows[0]["first_step"].as_u64(), windows[0]["last_step"].as_u64()), (Some(0), Some(24)));
    // Per-stage objects keep the stage order (serde_json's Value would sort the keys).
    let text = String::from_utf8(out.stdout).unwrap();
    let advances = text.split("\"advances_s\":{").nth(1).unwrap().split('}').next().unwrap();
    let keys: Vec<&str> = advances.split(',').map(|kv| kv.split(':').next().unwrap().trim_matches('"')).collect();
    assert_eq!(keys, STAGES);
}

#[test]
fn human_output_shows_the_table_and_labels() {
    let file = TempFile::new("human", &hidden_rank_csv(0, 5));
    let out = sf(&[], &file.0);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in ["routing set", "ADVANCE_S", "LEADER_RANKS", "MAX_S", "frontier_accounting", "top-2"] {
        assert!(text.contains(needle), "no {needle} in\n{text}");
    }
}

/// Each malformed file: one stderr line naming the file and line, exit 2, nothing on stdout.
#[test]
fn malformed_csvs_give_one_clear_line_and_exit_2() {
    let cases: [(&str, &str, &[&str], &str); 5] = [
        ("columns", "step,rank,seconds\n0,0,1\n", &[], ":1: the header lacks column stage"),
        ("negative", "step,rank,stage,seconds\n0,0,data,0.5\n0,1,data,-0.25\n", &[], ":3: negative duration -0.25 s"),
        (
            "unknown",
            "step,rank,stage,seconds\n0,0,data,1\n0,0,fwd,1\n",
            &["--stages", "data"],
            ":3: stage \"fwd\" is not in",
        ),
        (
            "dup",
            "step,rank,stage,seconds\n0,0,data,1\n0,0,data,2\n",
            &[],
            ":3: step 0, rank 0, stage data again (first on line 2)",
        ),
        ("short", "step,rank,stage,seconds\n0,0,data\n", &[], ":2: 3 fields where the header needs 4"),
    ];
    for (name, text, args, expected) in cases {
        let file = TempFile::new(name, text);
        let out = sf(args, &file.0);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{name}: a bad input is an error, not a usage error: {stderr}");
        assert!(out.stdout.is_empty(), "{name}");
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        let file_name = file.0.display().to_string();
        assert!(stderr.starts_with(&format!("sf: {file_name}{expected}")), "{name}: {stderr}");
    }
    let missing = sf(&[], Path::new("/nonexistent/stages.csv"));
    assert_eq!(missing.status.code(), Some(1));
}

#[test]
fn help_teaches_exposed_time_and_advances() {
    let out = Command::new(env!("CARGO_BIN_EXE_sf")).args(["frontier", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in ["EXPOSED TIME", "ADVANCE", "13.2 s", "step,rank,stage,seconds", "sf frontier --csv"] {
        assert!(help.contains(needle), "no {needle} in --help");
    }
}
