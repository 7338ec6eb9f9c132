//! The evidence leaves `sf` whole: `sf dump` prints every record's fields once each with
//! its ids' names, its header and name tables, filtered and streamed; `sf steps` exports
//! the stage vectors in the CSV `sf frontier --csv` reads back to the same answer; human
//! outputs give times in UTC; the log knows its doors. Jobs are sf-trainer-sim runs over
//! fakenccl under LD_PRELOAD (and the NCCL profiler plugin door).

mod common;

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::*;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

const RANKS: u32 = 4;
const STEPS: u32 = 12;

/// One job for the whole file: 4 ranks × 12 steps with C-API markers, under LD_PRELOAD and
/// the profiler plugin (so prof_op, prof_proxy and prof_net records are there too).
fn job() -> &'static Path {
    static JOB: OnceLock<PathBuf> = OnceLock::new();
    JOB.get_or_init(|| {
        let root = log_root("data-cli");
        run_ok(
            preloaded(&trainer_sim(), &root, "job")
                .args(["--ranks", &RANKS.to_string(), "--steps", &STEPS.to_string(), "--p2p"])
                .args(["--stage-ms", "data=2,fwd=1,bwd=3,callbacks=0,optim=1", "--launch", "blocking"])
                .env("NCCL_PROFILER_PLUGIN", library())
                .env("FAKENCCL_PROFILER_VERSION", "5")
                .env("SF_NET_RAW", "1"),
        );
        root.join("job")
    })
}

fn sf<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sf")).args(args).output().expect("run sf")
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "sf failed: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn rank_log(rank: u32) -> PathBuf {
    job().join(format!("rank-{rank:05}.sflog"))
}

fn dump_json(rank: u32, filters: &[&str]) -> Vec<Value> {
    let path = rank_log(rank);
    let mut args = vec!["dump", path.to_str().unwrap(), "--json"];
    args.extend_from_slice(filters);
    ok(sf(&args)).lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect()
}

/// A JSON value that refuses any object with a key written twice (serde_json's `Value`
/// keeps the last one silently).
struct Strict;

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Strict, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Strict;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_str<E>(self, _: &str) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_unit<E>(self) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
        while seq.next_element::<Strict>()?.is_some() {}
        Ok(Strict)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
        let mut keys = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !keys.insert(key.clone()) {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            map.next_value::<Strict>()?;
        }
        Ok(Strict)
    }
}

#[test]
fn dump_json_writes_each_key_once_and_names_every_id() {
    assert!(serde_json::from_str::<Strict>(r#"{"seq":1,"x":[{"seq":2}],"seq":3}"#).is_err(), "the check works");
    assert!(serde_json::from_str::<Strict>(r#"{"seq":1,"x":[{"seq":2}]}"#).is_ok());
    let mut kinds = HashSet::new();
    for rank in 0..RANKS {
        let path = rank_log(rank);
        let text = ok(sf(&["dump", path.to_str().unwrap(), "--json"]));
        for line in text.lines() {
            if let Err(e) = serde_json::from_str::<Strict>(line) {
                panic!("rank {rank}: {e} in {line}");
            }
            let record: Value = serde_json::from_str(line).unwrap();
            let kind = record["kind"].as_str().unwrap().to_string();
            match kind.as_str() {
                "step_vector" => {
                    let stages = record["stages"].as_array().expect("a step vector carries its stages");
                    let names: Vec<&str> =
                        record["stage_names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
                    assert_eq!(names, TRAINER_STAGES, "{line}");
                    assert_eq!(stages.len(), 6);
                    let total: u64 = stages.iter().map(|s| s["duration_ns"].as_u64().unwrap()).sum();
                    let wall = record["wall_ns"].as_u64().unwrap();
                    assert!(total > 0 && total <= wall + record["overlap_ns"].as_u64().unwrap() + 1, "{line}");
                    assert!(stages.iter().all(|s| s["stage_id"].is_u64()), "{line}");
                }
                "prof_op" => {
                    assert!(record["nccl_seq"].is_u64() && record["seq"].is_u64(), "{line}");
                    for name in ["func_name", "dtype_name", "algo_name", "proto_name"] {
                        assert!(
                            record[name].as_str().is_some_and(|n| !n.is_empty() && !n.contains('#')),
                            "{name}: {line}"
                        );
                    }
                    assert!(["AllReduce", "Send", "Recv", "Broadcast", "AllGather", "ReduceScatter", "Reduce"]
                        .contains(&record["func_name"].as_str().unwrap()));
                }
                "prof_proxy" => assert!(record["nccl_seq"].is_u64() && record["unit_name"].is_string(), "{line}"),
                "prof_net" => assert!(record["nccl_seq"].is_u64(), "{line}"),
                "nccl_call" => assert!(record["dtype_name"].is_string() && record["result_name"].is_string()),
                _ => {}
            }
            kinds.insert(kind);
        }
    }
    for kind in ["nccl_call", "comm_created", "step_vector", "prof_op", "prof_proxy"] {
        assert!(kinds.contains(kind), "no {kind} in {kinds:?}");
    }
}

#[test]
fn dump_header_prints_the_header_doors_and_name_table() {
    let path = rank_log(2);
    let human = ok(sf(&["dump", path.to_str().unwrap(), "--header"]));
    for needle in ["rank       2 of world 4", "job        job", "started    20", "doors      preload,markers,profiler"]
    {
        assert!(human.contains(needle), "no {needle:?} in\n{human}");
    }
    for stage in TRAINER_STAGES {
        assert!(human.lines().any(|l| l.split_whitespace().nth(1) == Some(stage)), "{stage}:\n{human}");
    }
    let json: Value = serde_json::from_str(&ok(sf(&["dump", path.to_str().unwrap(), "--header", "--json"]))).unwrap();
    assert_eq!(json["header"]["global_rank"], 2);
    let mut names: Vec<&str> = json["names"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap()).collect();
    names.sort();
    let mut expected = TRAINER_STAGES.to_vec();
    expected.sort();
    assert_eq!(names, expected);
    assert_eq!(json["live"]["doors"]["open"], serde_json::json!(["preload", "markers", "profiler"]));
    assert_eq!(json["live"]["doors"]["nccl_profiler_plugin_set"], true);
    assert!(json["start_wall"].as_str().unwrap().ends_with('Z'));
    // The header excludes record filters.
    assert_eq!(sf(&["dump", path.to_str().unwrap(), "--header", "--last", "1"]).status.code(), Some(2));
}

#[test]
fn dump_filters_by_kind_time_and_count() {
    let all = dump_json(1, &[]);
    let last3 = dump_json(1, &["--kind", "step_vector", "--last", "3"]);
    let steps: Vec<u64> = last3.iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [STEPS as u64 - 3, STEPS as u64 - 2, STEPS as u64 - 1]);
    assert!(last3.iter().all(|r| r["kind"] == "step_vector"));

    let calls: Vec<&Value> = all.iter().filter(|r| r["kind"] == "nccl_call").collect();
    let cut = calls[calls.len() / 2]["t_enter_ns"].as_u64().unwrap();
    let since = dump_json(1, &["--kind", "nccl_call,comm_created", "--since", &cut.to_string()]);
    let expected: Vec<u64> =
        calls.iter().filter(|c| c["t_enter_ns"].as_u64().unwrap() >= cut).map(|c| c["seq"].as_u64().unwrap()).collect();
    assert_eq!(since.iter().map(|r| r["seq"].as_u64().unwrap()).collect::<Vec<_>>(), expected);

    // The same instant as an RFC 3339 wall-clock time, through the header's calibration.
    let header: Value =
        serde_json::from_str(&ok(sf(&["dump", rank_log(1).to_str().unwrap(), "--header", "--json"]))).unwrap();
    let wall_ns =
        header["header"]["base_wall_ns"].as_u64().unwrap() + cut - header["header"]["base_mono_ns"].as_u64().unwrap();
    let date = Command::new("date")
        .args([
            "-u",
            "-d",
            &format!("@{}.{:09}", wall_ns / 1_000_000_000, wall_ns % 1_000_000_000),
            "+%Y-%m-%dT%H:%M:%S.%NZ",
        ])
        .output()
        .unwrap();
    let rfc3339 = String::from_utf8(date.stdout).unwrap().trim().to_string();
    let by_wall = dump_json(1, &["--kind", "nccl_call,comm_created", "--since", &rfc3339]);
    assert_eq!(by_wall.len(), since.len(), "--since {rfc3339} against --since {cut}");

    // A duration before the last heartbeat: an hour covers the whole job, everything.
    assert_eq!(dump_json(1, &["--since", "1h"]).len(), all.len());
    let bad = sf(&["dump", rank_log(1).to_str().unwrap(), "--kind", "stepvector"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("step_vector"));
    assert_eq!(sf(&["dump", rank_log(1).to_str().unwrap(), "--since", "soon"]).status.code(), Some(2));
}

#[test]
fn steps_csv_reads_back_to_the_same_frontier_answer() {
    let dir = job().to_str().unwrap();
    let csv = ok(sf(&["steps", dir, "--csv"]));
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("step,rank,stage,seconds,overlap_seconds,wait_seconds,caused_seconds"));
    assert_eq!(lines.count(), (RANKS * STEPS) as usize * TRAINER_STAGES.len());
    let file = std::env::temp_dir().join(format!("sf-data-cli-{}-steps.csv", std::process::id()));
    std::fs::write(&file, &csv).unwrap();
    // A rank descheduled on a loaded 2-core host may make the others wait long enough for
    // a culprit (exit 4): either answer will do, as long as both sources give the same.
    let (logs, csv_run) =
        (sf(&["frontier", dir, "--json"]), sf(&["frontier", "--csv", file.to_str().unwrap(), "--json"]));
    assert_eq!(logs.status.code(), csv_run.status.code(), "{}", String::from_utf8_lossy(&logs.stderr));
    assert!(matches!(logs.status.code(), Some(0 | 4)), "{}", String::from_utf8_lossy(&logs.stderr));
    let (logs_text, csv_text) = (String::from_utf8(logs.stdout).unwrap(), String::from_utf8(csv_run.stdout).unwrap());
    let mut from_logs: Value = serde_json::from_str(&logs_text).unwrap();
    let mut from_csv: Value = serde_json::from_str(&csv_text).unwrap();
    // Where the logs' waits came from is theirs to say: a CSV carries the waits only.
    const LOGS_ONLY: [&str; 3] = ["file", "waits_from", "waits_from_reason"];
    for report in [&mut from_logs, &mut from_csv] {
        for key in LOGS_ONLY {
            report.as_object_mut().unwrap().remove(key);
        }
    }
    assert_eq!(from_logs, from_csv, "sf steps --csv | sf frontier --csv must give sf frontier DIR's answer");
    // Byte for byte, apart from the file named and where the waits came from.
    let without_file = |text: &str| {
        let v: Value = serde_json::from_str(text).unwrap();
        let mut text = text.replacen(&serde_json::to_string(&v["file"]).unwrap(), "\"\"", 1);
        for key in &LOGS_ONLY[1..] {
            text = text.replacen(&format!("\"{key}\":{},", serde_json::to_string(&v[key]).unwrap()), "", 1);
        }
        text
    };
    assert_eq!(without_file(&logs_text), without_file(&csv_text));
    assert_eq!(from_logs["stages"], serde_json::json!(TRAINER_STAGES));
    // The round trip carries the wait attribution: own time, measured W_s, waits.
    assert_eq!(from_csv["own_time"], true);
    let waited = from_csv["windows"][0]["wait_s"].as_object().unwrap();
    assert!(waited.values().any(|w| w.as_f64().unwrap() > 0.0), "{waited:?}");
    assert!(!from_csv["sync_wait"]["wait_share"].as_object().unwrap().is_empty());

    // Without the wait columns the CSV reads as recorded wall time, as before.
    let raw: String = csv.lines().map(|l| l.rsplitn(3, ',').nth(2).unwrap().to_string() + "\n").collect();
    assert!(raw.starts_with("step,rank,stage,seconds,overlap_seconds\n"), "{raw}");
    std::fs::write(&file, &raw).unwrap();
    let plain: Value = serde_json::from_str(&ok(sf(&["frontier", "--csv", file.to_str().unwrap(), "--json"]))).unwrap();
    let _ = std::fs::remove_file(&file);
    assert_eq!(plain["own_time"], false);
    assert!(plain["windows"][0]["wait_s"].as_object().unwrap().is_empty());
    assert!(plain["sync_wait"]["measured"].as_array().unwrap().is_empty());

    let json: Value = serde_json::from_str(&ok(sf(&["steps", dir, "--json"]))).unwrap();
    assert_eq!(json["stages"], serde_json::json!(TRAINER_STAGES));
    let ranks = json["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), RANKS as usize);
    for r in ranks {
        let steps = r["steps"].as_array().unwrap();
        assert_eq!(steps.len(), STEPS as usize);
        let keys: Vec<&String> = steps[0]["stages"].as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), TRAINER_STAGES.len());
        assert!(steps[0]["start"].as_str().unwrap().ends_with('Z'));
        assert!(steps.iter().all(|s| s["wait_s"].is_object() && s["caused_s"].is_object()));
    }
}

#[test]
fn frontier_csv_takes_quoted_stage_names_with_commas() {
    let file = std::env::temp_dir().join(format!("sf-data-cli-{}-quoted.csv", std::process::id()));
    let mut text = String::from("step,rank,stage,seconds\r\n");
    for step in 0..4 {
        for rank in 0..2 {
            text += &format!("{step},{rank},\"data,io\",0.{}\r\n{step},{rank},\"fwd \"\"main\"\"\",0.2\r\n", 1 + rank);
        }
    }
    std::fs::write(&file, text).unwrap();
    let out = sf(&["frontier", "--csv", file.to_str().unwrap(), "--json"]);
    let _ = std::fs::remove_file(&file);
    let report: Value = serde_json::from_str(&ok(out)).unwrap();
    assert_eq!(report["stages"], serde_json::json!(["data,io", "fwd \"main\""]));
    assert_eq!(report["windows"][0]["leader_ranks"]["data,io"], serde_json::json!([1]));
}

#[test]
fn human_outputs_give_times_in_utc() {
    let today = Command::new("date").args(["-u", "+%Y-%m-%dT"]).output().unwrap();
    let today = String::from_utf8(today.stdout).unwrap().trim().to_string();
    let utc = |cell: &str| cell.len() == 24 && cell.ends_with('Z') && cell.starts_with(&today[..4]);

    let dump = ok(sf(&["dump", rank_log(0).to_str().unwrap(), "--kind", "nccl_call", "--last", "2"]));
    let lines: Vec<&str> = dump.lines().collect();
    assert_eq!(lines.len(), 3, "{dump}");
    assert!(lines[0].split_whitespace().nth(2) == Some("WALL"), "{dump}");
    assert!(lines[1..].iter().all(|l| utc(l.split_whitespace().nth(2).unwrap())), "{dump}");

    let steps = ok(sf(&["steps", job().to_str().unwrap()]));
    let header: Vec<&str> = steps.lines().nth(1).unwrap().split_whitespace().collect();
    let start = header.iter().position(|h| *h == "START").unwrap();
    let row: Vec<&str> = steps.lines().nth(2).unwrap().split_whitespace().collect();
    assert!(utc(row[start]), "{steps}");

    let ls = ok(sf(&["ls", job().to_str().unwrap()]));
    let header: Vec<&str> = ls.lines().next().unwrap().split_whitespace().collect();
    let at = header.iter().position(|h| *h == "LAST_BEAT").unwrap();
    let row: Vec<&str> = ls.lines().nth(1).unwrap().split_whitespace().collect();
    assert!(utc(row[at]), "{ls}");
}

/// A job marking its steps with NVTX ranges only: without NVTX_INJECTION64_PATH the ranges
/// never reach the library; sf ls names the variable, and frontier and slow answer on stages
/// inferred from the NCCL schedule and name it too.
#[test]
fn nvtx_ranges_without_the_injection_variable_are_named() {
    let root = log_root("data-cli-nvtx");
    let args =
        // The data stage is the step's longest gap outside collectives: where the inferred
        // steps turn, clear of a loaded host's scheduling noise.
        ["--ranks", "2", "--steps", "6", "--markers", "nvtx", "--stage-ms", "data=10,fwd=1,bwd=1,callbacks=0,optim=1", "--launch", "blocking"];
    run_ok(preloaded(&trainer_sim(), &root, "plain").args(args).env_remove("NVTX_INJECTION64_PATH"));
    let dir = root.join("plain");
    let dir = dir.to_str().unwrap();

    let ls = ok(sf(&["ls", dir]));
    assert!(
        ls.contains("note: no step markers seen; NVTX ranges were not seen: NVTX_INJECTION64_PATH was not set"),
        "{ls}"
    );
    let json: Value = serde_json::from_str(&ok(sf(&["ls", dir, "--json"]))).unwrap();
    assert_eq!(json["ranks"][0]["doors"]["open"], serde_json::json!(["preload"]));
    assert_eq!(json["ranks"][0]["doors"]["nvtx_injection_path_set"], false);
    // The stages are inferred from the NCCL schedule instead, and the answer says why the
    // job's own ranges are missing.
    assert!(ok(sf(&["steps", dir])).contains("inferred.before_first_collective"));
    for command in ["frontier", "slow"] {
        // What is asked here is the note, not the verdict: 5 steps of a few ms on a loaded
        // host can leave one detector's lead (exit 4); the healthy matrix judges those.
        let out = sf(&[command, dir]);
        assert!(matches!(out.status.code(), Some(0 | 4)), "sf {command}: {out:?}");
        let out = String::from_utf8(out.stdout).expect("UTF-8");
        assert!(out.contains("stages inferred from the NCCL schedule"), "sf {command}: {out}");
        assert!(out.contains("NVTX_INJECTION64_PATH was not set"), "sf {command}: {out}");
    }

    run_ok(preloaded(&trainer_sim(), &root, "nvtx").args(args).env("NVTX_INJECTION64_PATH", library()));
    let dir = root.join("nvtx");
    let ls = ok(sf(&["ls", dir.to_str().unwrap()]));
    let header: Vec<&str> = ls.lines().next().unwrap().split_whitespace().collect();
    let doors = header.iter().position(|h| *h == "DOORS").unwrap();
    assert_eq!(ls.lines().nth(1).unwrap().split_whitespace().nth(doors), Some("preload,nvtx"), "{ls}");
    assert!(!ls.contains("note: no step markers"), "{ls}");
    ok(sf(&["steps", dir.to_str().unwrap(), "--csv"]));
    let _ = std::fs::remove_dir_all(&root);
}

/// The examples `sf steps --help` and `sf dump --help` show run on a real job.
#[test]
fn help_examples_of_steps_and_dump_run() {
    let dir = job().to_str().unwrap().to_string();
    let log = rank_log(0).to_str().unwrap().to_string();
    for command in ["steps", "dump"] {
        let help = ok(sf(&[command, "--help"]));
        let mut ran = 0;
        for line in help.lines().map(str::trim_start).filter(|l| l.starts_with(&format!("sf {command} "))) {
            let words: Vec<String> = line
                .split("  ")
                .next()
                .unwrap()
                .split('|')
                .next()
                .unwrap()
                .split('>')
                .next()
                .unwrap()
                .split_whitespace()
                .skip(1)
                .map(|w| {
                    if w == "JOBDIR" {
                        dir.clone()
                    } else if w.ends_with(".sflog") {
                        log.clone()
                    } else {
                        w.to_string()
                    }
                })
                .collect();
            if words.iter().any(|w| w.contains("$(") || w.contains('\'') || w.starts_with("/dev/stdin")) {
                continue;
            }
            let out = sf(&words);
            assert!(out.status.success(), "`{line}` failed: {}", String::from_utf8_lossy(&out.stderr));
            ran += 1;
        }
        assert!(ran >= 2, "sf {command} --help: only {ran} examples ran");
    }
}
