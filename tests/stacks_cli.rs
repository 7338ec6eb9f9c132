//! Python stacks read in process (core/stacks) through the real library and `sf`: a live
//! Python rank answers `sf hang --stacks` with its frames, `sf dump` and `sf trace` show
//! the sample, and a process that is no Python interpreter answers with the reason.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{log_root, preloaded, rank_logs, start_sim};
use serde_json::Value;

/// The test tier's Python (the PyTorch venv's, else `python3` on PATH).
fn python() -> PathBuf {
    let venv = std::env::var_os("HOME")
        .map(|home| PathBuf::from(home).join(".cache/stagefrontier/torch-venv/bin/python"))
        .filter(|p| p.exists());
    venv.unwrap_or_else(|| PathBuf::from("python3"))
}

/// A Python rank that makes 20 marked steps and then stands in `deep` three calls down,
/// asleep, with a second thread named `poller` asleep too.
const JOB: &str = r#"
import ctypes, threading, time
lib = ctypes.CDLL(None)
def poll():
    while True:
        time.sleep(0.5)
threading.Thread(target=poll, name="poller", daemon=True).start()
for step in range(20):
    lib.sf_step_begin(ctypes.c_int64(step))
    time.sleep(0.01)
    lib.sf_step_end()
def deep(n):
    if n == 0:
        time.sleep(120)  # STANDS HERE
    deep(n - 1)
deep(2)
"#;

fn line_of(marker: &str) -> i64 {
    1 + JOB.lines().position(|l| l.contains(marker)).unwrap() as i64
}

fn sf(args: &[&str], dir: &Path) -> (Option<i32>, Vec<u8>) {
    let out = Command::new(env!("CARGO_BIN_EXE_sf")).args(args).arg(dir).output().unwrap();
    (out.status.code(), out.stdout)
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until the job's one rank log exists and its steps are done.
fn wait_for_log(root: &Path, job: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while rank_logs(root, job).is_empty() {
        assert!(Instant::now() < deadline, "no rank log");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_live_python_rank_answers_sf_hang_stacks_with_its_frames_and_dump_and_trace_show_them() {
    let root = log_root("stacks-python");
    let script = root.join("job.py");
    std::fs::write(&script, JOB).unwrap();
    let mut cmd = preloaded(&python(), &root, "py");
    cmd.arg(&script).env("RANK", "0").env("WORLD_SIZE", "1").stdout(Stdio::null()).stderr(Stdio::null());
    let _job = Killed(cmd.spawn().unwrap());
    wait_for_log(&root, "py");
    std::thread::sleep(Duration::from_millis(700));
    let dir = root.join("py");
    let (_, out) = sf(&["hang", "--stacks", "--json"], &dir);
    let report: Value = serde_json::from_slice(&out).unwrap();
    let answer = &report["stacks_asked"][0];
    assert_eq!((&answer["rank"], &answer["answered"]), (&0.into(), &true.into()), "{report}");
    assert!(answer["waited_s"].as_f64().unwrap() < 5.0);
    let stacks = &report["stacks"][0];
    assert_eq!(
        (&stacks["reason"], &stacks["status"], &stacks["current"]),
        (&"request".into(), &"taken".into(), &true.into())
    );
    let threads = stacks["threads"].as_array().unwrap();
    let main = threads.iter().find(|t| t["main"] == true).expect("the main thread");
    let frames: Vec<(String, i64)> = main["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["function"].as_str().unwrap().to_string(), f["line"].as_i64().unwrap()))
        .collect();
    let sleeping = line_of("STANDS HERE");
    let calling = line_of("deep(n - 1)");
    let expected = [("deep", sleeping), ("deep", calling), ("deep", calling), ("<module>", line_of("deep(2)"))];
    let expected: Vec<(String, i64)> = expected.iter().map(|(f, l)| (f.to_string(), *l)).collect();
    assert_eq!(frames, expected, "{report}");
    assert!(main["frames"][0]["file"].as_str().unwrap().ends_with("job.py"));
    assert!(threads.iter().any(|t| t["name"] == "poller" && t["main"] == false), "{report}");
    assert!(stacks["read_us"].as_u64().unwrap() > 0);

    // The human report lists where the rank stands; dump and trace show the sample.
    let (_, human) = sf(&["hang", "--stacks"], &dir);
    let human = String::from_utf8_lossy(&human);
    assert!(human.contains(&format!("rank 0: deep (job.py:{sleeping}) ← deep (job.py:{calling})")), "{human}");
    assert!(human.contains("asked 1 live rank for stacks: 1 answered within"), "{human}");
    let log = rank_logs(&root, "py").remove(0);
    let dump =
        Command::new(env!("CARGO_BIN_EXE_sf")).args(["dump", "--kind", "stack_frame"]).arg(&log).output().unwrap();
    assert!(String::from_utf8_lossy(&dump.stdout).contains(&format!("job.py:{sleeping})")), "{dump:?}");
    let trace = root.join("trace.json");
    let out = Command::new(env!("CARGO_BIN_EXE_sf")).arg("trace").arg(&dir).arg("-o").arg(&trace).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let trace: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let moment =
        trace["traceEvents"].as_array().unwrap().iter().find(|e| e["ph"] == "i").cloned().expect("a stack moment");
    assert!(
        moment["args"]["main thread"].as_str().unwrap().starts_with(&format!("deep (job.py:{sleeping})")),
        "{moment}"
    );
}

#[test]
fn a_rank_that_is_no_python_interpreter_answers_that_its_stack_could_not_be_read() {
    let root = log_root("stacks-not-python");
    let _job = start_sim(&root, 2, "data=1,fwd=1,bwd=1,callbacks=0,optim=1", None);
    let dir = root.join("job");
    let deadline = Instant::now() + Duration::from_secs(30);
    while rank_logs(&root, "job").len() < 2 {
        assert!(Instant::now() < deadline, "no rank logs");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let (code, out) = sf(&["hang", "--stacks", "--json"], &dir);
    let report: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(code, Some(0), "a healthy job: {report}");
    let answers = report["stacks_asked"].as_array().unwrap();
    assert_eq!(answers.len(), 2, "{report}");
    assert!(answers.iter().all(|a| a["answered"] == true), "{report}");
    for s in report["stacks"].as_array().unwrap() {
        assert_eq!(s["status"], "failed", "{s}");
        assert!(!s["note"].as_str().unwrap_or("").is_empty(), "{s}");
    }
    assert_eq!(report["stack_groups"], serde_json::json!([]), "{report}");
    let (_, human) = sf(&["hang", "--stacks"], &dir);
    let human = String::from_utf8_lossy(&human);
    assert!(human.contains("rank 0: stack not read: "), "{human}");
}

/// The interpreter's shared library with its symbol table stripped (`strip --strip-all`,
/// as distributions ship it): py-spy finds the interpreter from the dynamic symbols a
/// shared libpython must keep, and the stacks read as before. Skipped, saying so, where
/// the Python is linked statically or `strip` is missing.
#[test]
fn a_stripped_interpreter_library_still_gives_its_stacks() {
    let config = Command::new(python())
        .args(["-c", "import sysconfig as s; print(s.get_config_var('LIBDIR')); print(s.get_config_var('INSTSONAME'))"])
        .output()
        .unwrap();
    let config = String::from_utf8_lossy(&config.stdout).to_string();
    let mut lines = config.lines();
    let (Some(libdir), Some(soname)) = (lines.next(), lines.next()) else { return };
    let shared = Path::new(libdir).join(soname);
    if !soname.contains(".so") || !shared.exists() {
        eprintln!("skipped: this Python has no shared libpython ({config})");
        return;
    }
    let root = log_root("stacks-stripped");
    let stripped = root.join(soname);
    std::fs::copy(&shared, &stripped).unwrap();
    let Ok(strip) = Command::new("strip").arg("--strip-all").arg(&stripped).status() else {
        eprintln!("skipped: no strip");
        return;
    };
    assert!(strip.success());
    let script = root.join("job.py");
    std::fs::write(&script, JOB).unwrap();
    let mut cmd = preloaded(&python(), &root, "py");
    let preload = format!("{} {}", stripped.display(), common::library().display());
    cmd.arg(&script).env("LD_PRELOAD", preload).env("RANK", "0").env("WORLD_SIZE", "1");
    let _job = Killed(cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
    wait_for_log(&root, "py");
    std::thread::sleep(Duration::from_millis(700));
    let (_, out) = sf(&["hang", "--stacks", "--json"], &root.join("py"));
    let report: Value = serde_json::from_slice(&out).unwrap();
    let top = &report["stacks"][0]["threads"][0]["frames"][0];
    assert_eq!((&top["function"], &top["line"]), (&"deep".into(), &line_of("STANDS HERE").into()), "{report}");
}
