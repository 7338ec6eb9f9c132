//! A log root holding several real jobs (sf-trainer-sim under the library, run one after
//! the other): `sf ls ROOT` lists the jobs newest first, `--latest` reads the newest, and a
//! command given the root without it names `--latest` in its error.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::{log_root, preloaded, run_ok, trainer_args, trainer_sim};
use serde_json::Value;

/// Started first, then `NEWER`; the ids sort the other way round from their age's order
/// reversed, so a list sorted by id would put the older first.
const OLDER: &str = "job-1";
const NEWER: &str = "job-2";
/// The newer job runs one step more, so an answer tells which job it read.
const OLDER_STEPS: u32 = 3;
const NEWER_STEPS: u32 = 4;

/// One root for every test here (they only read it): two 2-rank jobs.
fn root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let root = log_root("jobs-root");
        run_ok(preloaded(&trainer_sim(), &root, OLDER).args(trainer_args(2, OLDER_STEPS)));
        run_ok(preloaded(&trainer_sim(), &root, NEWER).args(trainer_args(2, NEWER_STEPS)));
        root
    })
}

fn sf(args: &[&str]) -> Output {
    Command::new(common::artifact("sf")).args(args).output().expect("run sf")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn sf_ls_on_a_root_of_two_jobs_lists_them_newest_first() {
    let root = root().to_str().unwrap();
    let out = sf(&["ls", root]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", text(&out.stderr));
    let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with("job-")).collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    assert!(rows[0].starts_with(NEWER) && rows[1].starts_with(OLDER), "newest first:\n{stdout}");
    for (row, job) in rows.iter().zip([NEWER, OLDER]) {
        assert!(row.contains(" 2/2 ") && row.contains("2 ended"), "{row}");
        assert!(row.ends_with(&format!("{root}/{job}")), "{row}");
    }
    assert!(stdout.contains(&format!("--latest reads {NEWER}")), "{stdout}");

    let out = sf(&["ls", root, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let jobs = report["jobs"].as_array().expect("jobs");
    let ids: Vec<&str> = jobs.iter().map(|j| j["job_id"].as_str().unwrap()).collect();
    assert_eq!(ids, [NEWER, OLDER]);
    for (job, id) in jobs.iter().zip(ids) {
        assert_eq!(job["dir"], format!("{root}/{id}"));
        assert_eq!((job["ranks"].as_u64(), job["world_size"].as_i64()), (Some(2), Some(2)), "{job}");
        assert_eq!((job["live"].as_u64(), job["ended"].as_u64(), job["dead"].as_u64()), (Some(0), Some(2), Some(0)));
        let beat = job["last_beat"].as_str().expect("last_beat");
        assert!(beat.len() == 24 && beat.ends_with('Z') && beat.as_bytes()[10] == b'T', "RFC 3339: {beat}");
    }
    let beats: Vec<&str> = jobs.iter().map(|j| j["last_beat"].as_str().unwrap()).collect();
    assert!(beats[0] > beats[1], "the newer job beat last: {beats:?}");
}

#[test]
fn latest_reads_the_newest_job() {
    let root = root().to_str().unwrap();
    let out = sf(&["frontier", root, "--latest", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["windows"][0]["steps"], NEWER_STEPS, "{report}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("reading job {NEWER}, the newest of 2 jobs found")), "{stderr}");

    let out = sf(&["ls", root, "--latest", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let ranks = report["ranks"].as_array().expect("the newest job's ranks");
    assert_eq!(ranks.len(), 2);
    assert!(ranks.iter().all(|r| r["job_id"] == NEWER), "{report}");
}

#[test]
fn without_latest_the_error_lists_the_jobs_and_names_latest() {
    let root = root().to_str().unwrap();
    let out = sf(&["frontier", root]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("belong to 2 jobs, newest first"), "{stderr}");
    assert!(stderr.find(NEWER) < stderr.find(OLDER), "{stderr}");
    assert!(stderr.contains(&format!("add --latest to read the newest ({NEWER})")), "{stderr}");
    assert!(stderr.contains(&format!("sf ls {root} lists the jobs")), "{stderr}");
}
