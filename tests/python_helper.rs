//! python/stagefrontier.py under the preloaded library records step vectors, and without
//! the library is a silent no-op.

mod common;

use std::process::Command;

use common::*;
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::RecordBody;

const SCRIPT: &str = r#"
import sys, time
sys.path.insert(0, sys.argv[1])
import stagefrontier as sf
for _ in range(3):
    with sf.step():
        with sf.stage("data.next_wait"):
            time.sleep(0.004)
        with sf.stage("model.fwd_loss_cpu_wall"):
            time.sleep(0.002)
        sf.value("loss", 0.5)
print("recording" if sf.recording() else "not recording")
"#;

fn python(root: Option<&std::path::Path>) -> String {
    let helper = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let mut cmd = match root {
        Some(root) => {
            let mut cmd = preloaded(std::path::Path::new("python3"), root, "job");
            cmd.env("RANK", "0").env("WORLD_SIZE", "1");
            cmd
        }
        None => Command::new("python3"),
    };
    let out = run_ok(cmd.arg("-c").arg(SCRIPT).arg(helper));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn steps_and_stages_from_python_become_stage_vectors() {
    let root = log_root("python");
    assert_eq!(python(Some(&root)), "recording");
    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 1, "the markers start the library in a process without NCCL");
    let log = RankLog::open(&logs[0]).unwrap();
    let names = log.stage_names();
    let (records, _) = log.records();
    let vectors: Vec<Vec<(String, u64)>> = records
        .iter()
        .filter_map(|r| match r.body {
            RecordBody::StepVector(v) => Some(
                v.stages().map(|(id, ns)| (names[id as usize].clone().unwrap_or_default(), ns / 1_000_000)).collect(),
            ),
            _ => None,
        })
        .collect();
    assert_eq!(vectors.len(), 3);
    for stages in &vectors {
        let order: Vec<&str> = stages.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(order, ["data.next_wait", "model.fwd_loss_cpu_wall", "step.other_cpu_wall"]);
        assert!(stages[0].1 >= 4 && stages[1].1 >= 2, "{stages:?}");
    }
    let values = records.iter().filter(|r| matches!(r.body, RecordBody::SideValue(v) if v.value == 0.5)).count();
    assert_eq!(values, 3, "one side value per step, outside the vectors");
}

#[test]
fn without_the_library_the_helper_is_a_no_op() {
    assert_eq!(python(None), "not recording");
}

/// The CUDA and NVTX injections load the library with dlopen(RTLD_LOCAL): its symbols are
/// not in the global namespace, and it may come after the helper was imported.
const PRIVATE: &str = r#"
import ctypes, os, sys, time
sys.path.insert(0, sys.argv[1])
import stagefrontier as sf
before = sf.loaded()
ctypes.CDLL(sys.argv[2], mode=os.RTLD_LOCAL | os.RTLD_NOW)
assert not hasattr(ctypes.CDLL(None), "sf_step_begin"), "the library must be private for this test"
sf._looked_at -= 2  # the helper looks again at most once a second: let a second pass
for _ in range(2):
    with sf.step():
        with sf.stage("data.next_wait"):
            time.sleep(0.003)
pid = os.fork()
if pid == 0:
    # The library does not record in a forked child, and the helper says so.
    os._exit(0 if sf.loaded() and not sf.recording() else 1)
_, status = os.waitpid(pid, 0)
print(before, sf.loaded(), sf.recording(), os.waitstatus_to_exitcode(status))
"#;

#[test]
fn a_library_loaded_privately_later_is_found_and_a_fork_is_rechecked() {
    let root = log_root("python-private");
    let helper = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let mut cmd = Command::new("python3");
    for (key, _) in std::env::vars() {
        if key.starts_with("SF_") || key == "LD_PRELOAD" || key == "RANK" || key == "WORLD_SIZE" {
            cmd.env_remove(key);
        }
    }
    cmd.env("SF_LOG_DIR", &root).env("SF_JOB_ID", "job").env("SF_QUIET", "1").env("RANK", "0").env("WORLD_SIZE", "1");
    let out = run_ok(cmd.arg("-c").arg(PRIVATE).arg(helper).arg(library()));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "False True True 0");
    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 1);
    let steps = records(&logs[0]).iter().filter(|r| matches!(r.body, RecordBody::StepVector(_))).count();
    assert_eq!(steps, 2, "markers through the private handle record");
}
