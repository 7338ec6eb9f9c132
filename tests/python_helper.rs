//! The Python marker helper (python/stagefrontier/) under the preloaded library records
//! step vectors, and without the library is a silent no-op.

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

/// A library older than the helper: it has the step marker but not the others.
const OLDER_LIBRARY: &str = "void sf_step_begin(long long step) { (void)step; }\n";

/// Imported where the Python door arms (a rank), with a `torch` that is only a package.
const IMPORT_TORCH: &str = r#"
import stagefrontier as sf, torch
with sf.step():
    pass
print("imported", sf.recording())
"#;

#[test]
fn a_library_older_than_the_helper_is_said_once_and_never_raises_into_the_program() {
    let dir = TempDir::new("python-older-lib");
    let source = dir.join("older.c");
    std::fs::write(&source, OLDER_LIBRARY).unwrap();
    let lib = dir.join("libolder.so");
    compile_c(&source, &lib, &["-shared", "-fPIC"]);
    let torch = dir.join("torch");
    std::fs::create_dir_all(&torch).unwrap();
    std::fs::write(torch.join("__init__.py"), "").unwrap();
    let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let pythonpath =
        format!("{}:{}:{}", python.join("stagefrontier_boot").display(), python.display(), dir.0.display());
    let mut cmd = Command::new("python3");
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("SF_") || k == "LD_PRELOAD") {
        cmd.env_remove(key);
    }
    cmd.env("LD_PRELOAD", &lib).env("PYTHONPATH", pythonpath).env("RANK", "0").env("WORLD_SIZE", "1");
    let out = run_ok(cmd.arg("-c").arg(IMPORT_TORCH));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.trim(), "imported False", "{stderr}");
    let said: Vec<&str> = stderr.lines().filter(|l| l.starts_with("stagefrontier:")).collect();
    assert_eq!(said.len(), 1, "one line, however often the helper looks: {stderr}");
    assert!(said[0].contains("has no sf_step_end, sf_stage_begin, sf_stage_end, sf_value, sf_recording"), "{stderr}");
}

#[test]
fn the_python_door_never_runs_itself_again_through_a_link_to_its_directory() {
    let dir = TempDir::new("python-boot-link");
    let boot = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/stagefrontier_boot");
    let link = dir.join("boot-link");
    std::os::unix::fs::symlink(&boot, &link).unwrap();
    let site = dir.join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("sitecustomize.py"), "print('site hook ran')\n").unwrap();
    // Both spellings of the door's directory come before the site's own hook.
    let pythonpath = format!("{}:{}:{}", link.display(), boot.display(), site.display());
    let mut cmd = Command::new("python3");
    cmd.env("PYTHONPATH", pythonpath).env_remove("RANK");
    let out = run_ok(cmd.arg("-c").arg("print('ok')"));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "site hook ran\nok\n", "{}", String::from_utf8_lossy(&out.stderr));
}

/// A `torch` with a DataLoader and autograd but no optimizers: the door's third hook fails.
const PARTIAL_TORCH: [(&str, &str); 5] = [
    ("torch/__init__.py", "from . import autograd\ndef is_grad_enabled():\n    return True\n"),
    ("torch/autograd.py", "def backward(*args, **kwargs):\n    pass\n"),
    ("torch/utils/__init__.py", ""),
    ("torch/utils/data/__init__.py", ""),
    ("torch/utils/data/dataloader.py", "class _BaseDataLoaderIter:\n    def __next__(self):\n        return 1\n"),
];

#[test]
fn a_door_that_could_not_hook_everything_opens_no_step() {
    let dir = TempDir::new("python-partial-torch");
    for (file, text) in PARTIAL_TORCH {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let root = log_root("python-partial-torch");
    let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let pythonpath =
        format!("{}:{}:{}", python.join("stagefrontier_boot").display(), python.display(), dir.0.display());
    let mut cmd = preloaded(std::path::Path::new("python3"), &root, "job");
    cmd.env("PYTHONPATH", pythonpath).env("RANK", "0").env("WORLD_SIZE", "1");
    // Then the program's own two steps.
    let script = "import torch, stagefrontier as sf\nfor _ in range(4):\n    torch.autograd.backward()\n\
                  for _ in range(2):\n    with sf.step():\n        pass\n";
    let out = run_ok(cmd.arg("-c").arg(script));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the PyTorch door stays shut: No module named 'torch.optim'"), "{stderr}");
    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 1, "{stderr}");
    let steps = records(&logs[0]).iter().filter(|r| matches!(r.body, RecordBody::StepVector(_))).count();
    assert_eq!(steps, 2, "the backward hook left in place passes through: it opens no step of its own");
}

#[test]
fn markers_past_the_stage_name_table_are_counted_and_shown() {
    let root = log_root("python-unnamed");
    let helper = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let mut cmd = preloaded(std::path::Path::new("python3"), &root, "job");
    cmd.env("RANK", "0").env("WORLD_SIZE", "1");
    // 70 names, one value each: the table keeps 64.
    let script = "import sys\nsys.path.insert(0, sys.argv[1])\nimport stagefrontier as sf\n\
                  for i in range(70):\n    sf.value('metric.%d' % i, 1.0)\n";
    run_ok(cmd.arg("-c").arg(script).arg(helper));
    let logs = rank_logs(&root, "job");
    assert_eq!(RankLog::open(&logs[0]).unwrap().live().markers_unnamed, 6);
    let out = run_ok(Command::new(env!("CARGO_BIN_EXE_sf")).arg("ls").arg(root.join("job")));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("warning: stage or value markers lost: rank 0 6 markers"), "{stdout}");
}
