//! The shipped artifacts tested as an operator uses them: the wheel installed with pip into
//! a fresh virtual environment outside the repository, and into the cached PyTorch
//! environment, and the release tarball unpacked; `sf run` records a job from there with
//! the checkout out of sight (working directory elsewhere, a clean environment, no path of
//! the repository but the fixture binary the job runs).
//!
//! scripts/test builds the artifacts once (scripts/release) and sets SF_WHEEL, SF_TARBALL
//! and SF_REQUIRE_WHEEL=1; a plain `cargo test` without them skips this tier, saying so.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

/// The artifact SF_WHEEL or SF_TARBALL names, or None (skip, said) when unset and not required.
fn artifact_from(variable: &str) -> Option<PathBuf> {
    match std::env::var_os(variable) {
        Some(path) => {
            let path = PathBuf::from(path);
            assert!(path.is_file(), "{variable}={} does not exist: scripts/release builds it", path.display());
            Some(path)
        }
        None => {
            assert!(
                std::env::var_os("SF_REQUIRE_WHEEL").is_none_or(|v| v != "1"),
                "SF_REQUIRE_WHEEL=1 but {variable} is unset: scripts/release builds the artifacts"
            );
            eprintln!("skipped: {variable} is unset (scripts/release builds the artifacts; scripts/test sets it)");
            None
        }
    }
}

/// `program` run in `cwd` with nothing of the caller's environment but a system PATH behind
/// `bin` (the environment's or the tarball's), and HOME and TMPDIR in `cwd`.
fn outside(program: &Path, cwd: &Path, bin: &Path) -> Command {
    let mut cmd = Command::new(program);
    let home = cwd.join("home");
    std::fs::create_dir_all(&home).unwrap();
    cmd.env_clear().current_dir(cwd);
    cmd.env("PATH", format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()));
    cmd.env("HOME", &home).env("TMPDIR", std::env::temp_dir()).env("LANG", "C.UTF-8").env("OMP_NUM_THREADS", "1");
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The value a `NAME=value` line of the job's output gives.
fn printed(out: &Output, name: &str) -> String {
    let stdout = text(&out.stdout);
    let line = stdout.lines().find_map(|l| l.strip_prefix(&format!("{name}=")).map(str::to_string));
    line.unwrap_or_else(|| panic!("no {name}= in {stdout}"))
}

const PRINT_DOORS: [&str; 3] = ["sh", "-c", "echo LD_PRELOAD=$LD_PRELOAD; echo PYTHONPATH=$PYTHONPATH"];

/// Every path of `sf run`'s doors lies under `prefix`: the library in LD_PRELOAD and the
/// Python door on PYTHONPATH come from the installed artifact, not the checkout.
fn assert_doors_under(sf: &Path, cwd: &Path, bin: &Path, prefix: &Path) {
    let mut cmd = outside(sf, cwd, bin);
    let out = run_ok(cmd.args(["run", "--log-dir", "doors", "--"]).args(PRINT_DOORS));
    let prefix = prefix.canonicalize().unwrap();
    let (library, door) = (printed(&out, "LD_PRELOAD"), printed(&out, "PYTHONPATH"));
    assert!(Path::new(&library).starts_with(&prefix), "LD_PRELOAD={library}, not under {}", prefix.display());
    assert!(library.ends_with("/libstagefrontier.so"), "{library}");
    assert!(Path::new(&door).starts_with(&prefix), "PYTHONPATH={door}, not under {}", prefix.display());
    assert!(Path::new(&door).join("sitecustomize.py").is_file(), "{door}");
}

/// `sf frontier DIR --json`'s longest window; the command exits 4 when it names a culprit.
fn longest_window(sf: &Path, cwd: &Path, bin: &Path, job: &str) -> Value {
    let out = outside(sf, cwd, bin).args(["frontier", job, "--json"]).output().unwrap();
    assert!(matches!(out.status.code(), Some(0 | 4)), "sf frontier: {}\n{}", out.status, text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let windows = report["windows"].as_array().unwrap().clone();
    windows.into_iter().max_by_key(|w| w["steps"].as_u64().unwrap()).expect("a window")
}

/// sf-trainer-sim (fakenccl through its rpath) under `sf run` from the installed `sf`,
/// with one stage planted slow on rank 1: three rank logs, and `sf frontier` names it.
fn trainer_job_answers(sf: &Path, cwd: &Path, bin: &Path) {
    let mut cmd = outside(sf, cwd, bin);
    cmd.args(["run", "--log-dir", "logs", "--job-id", "sim", "--report", "--"]).arg(trainer_sim());
    cmd.args(["--ranks", "3", "--steps", "24", "--markers", "nvtx", "--buckets", "2"]);
    cmd.args(["--stage-ms", "data=4,fwd=4,bwd=6,callbacks=1,optim=2", "--slow", "1:data:40", "--launch", "blocking"]);
    let out = run_ok(&mut cmd);
    let stderr = text(&out.stderr);
    let job = cwd.join("logs/sim");
    assert!(stderr.contains(&format!("recording rank logs in {}", job.display())), "{stderr}");
    assert!(!stderr.contains("stays shut"), "every door opens: {stderr}");
    assert_eq!(rank_logs(&cwd.join("logs"), "sim").len(), 3, "{stderr}");
    let window = longest_window(sf, cwd, bin, "logs/sim");
    assert_eq!(window["top1"], "data.next_wait", "{window}");
    assert_eq!(window["leader_ranks"]["data.next_wait"], serde_json::json!([1]), "{window}");
    assert!(stderr.contains("led by rank 1"), "--report answers too: {stderr}");
}

fn new_venv(python: &str, dir: &Path) -> PathBuf {
    let venv = dir.join("venv");
    run_ok(Command::new(python).current_dir(dir).args(["-m", "venv"]).arg(&venv));
    venv
}

fn pip(venv: &Path, cwd: &Path, args: &[&str]) -> Output {
    let mut cmd = outside(&venv.join("bin/python"), cwd, &venv.join("bin"));
    run_ok(cmd.args(["-m", "pip", "--disable-pip-version-check", "--no-input", "--quiet"]).args(args))
}

#[test]
fn the_wheel_in_a_fresh_venv_runs_a_fakenccl_job_with_the_checkout_out_of_sight() {
    let Some(wheel) = artifact_from("SF_WHEEL") else { return };
    let dir = TempDir::new("wheel-venv");
    let venv = new_venv("python3", &dir.0);
    let bin = venv.join("bin");
    pip(&venv, &dir.0, &["install", "--no-index", "--no-deps", wheel.to_str().unwrap()]);

    // The parts, inside the package; `sf` on PATH.
    let out = run_ok(outside(&bin.join("python"), &dir.0, &bin).args(["-m", "stagefrontier", "--lib"]));
    let library = PathBuf::from(text(&out.stdout).trim());
    assert!(library.starts_with(&venv) && library.ends_with("site-packages/stagefrontier/libstagefrontier.so"));
    assert!(library.is_file(), "{}", library.display());
    let out = run_ok(outside(Path::new("sh"), &dir.0, &bin).args(["-c", "command -v sf"]));
    assert_eq!(text(&out.stdout).trim(), bin.join("sf").to_str().unwrap(), "sf on the environment's PATH");
    let probe = "import stagefrontier, stagefrontier_torch; print(stagefrontier.library_path()); \
                 print(stagefrontier.recording())";
    let out = run_ok(outside(&bin.join("python"), &dir.0, &bin).args(["-c", probe]));
    assert_eq!(text(&out.stdout), format!("{}\nFalse\n", library.display()), "the helper imports; no-op unloaded");

    let sf = Path::new("sf");
    assert_doors_under(sf, &dir.0, &bin, &venv);
    trainer_job_answers(sf, &dir.0, &bin);
}

/// Uninstalls the wheel from the shared PyTorch environment however the test ends, so the
/// rest of the torch tier (which uses the checkout's python/) never imports it.
struct Uninstall<'a>(&'a Path, &'a Path);

impl Drop for Uninstall<'_> {
    fn drop(&mut self) {
        let _ = outside(&self.0.join("bin/python"), self.1, &self.0.join("bin"))
            .args(["-m", "pip", "uninstall", "--yes", "--quiet", "stagefrontier"])
            .output();
    }
}

#[test]
fn the_wheel_in_the_pytorch_venv_records_a_gloo_job_through_its_python_door() {
    let Some(wheel) = artifact_from("SF_WHEEL") else { return };
    let Some(python) = torch_python() else { return };
    let venv = python.parent().and_then(Path::parent).unwrap().to_path_buf();
    let bin = venv.join("bin");
    let dir = TempDir::new("wheel-torch");
    // The job is the torch tier's own, copied out of the checkout.
    let job_file = dir.join("ddp_job.py");
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/torch/ddp_job.py"), &job_file).unwrap();

    let installed = Uninstall(&venv, &dir.0);
    pip(&venv, &dir.0, &["install", "--no-index", "--no-deps", "--force-reinstall", wheel.to_str().unwrap()]);
    let sf = bin.join("sf");
    assert_doors_under(&sf, &dir.0, &bin, &venv);

    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let mut cmd = outside(&sf, &dir.0, &bin);
    cmd.args(["run", "--log-dir", "logs", "--job-id", "ddp", "--"]);
    cmd.args(["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", &port]);
    cmd.args(["ddp_job.py", "--steps", "12", "--eval-every", "6", "--slow-rank", "1", "--slow-ms", "60"]);
    let out = run_ok(&mut cmd);
    let stderr = text(&out.stderr);
    assert!(text(&out.stdout).contains("ddp_job: ok ranks=2 steps=12"), "{stderr}");
    assert!(stderr.contains("python)") && !stderr.contains("stays shut"), "the Python door opened: {stderr}");
    assert_eq!(rank_logs(&dir.join("logs"), "ddp").len(), 2, "{stderr}");
    // Stages from the door alone (the job has no marker), and sf frontier names the slow rank.
    let window = longest_window(&sf, &dir.0, &bin, "logs/ddp");
    assert_eq!(window["steps"], 12, "{window}");
    let top1 = window["top1"].as_str().unwrap();
    assert!(top1.starts_with("data.next_wait"), "{window}");
    assert_eq!(window["leader_ranks"][top1], serde_json::json!([1]), "{window}");

    drop(installed);
    assert!(!sf.exists(), "uninstalled: no sf left in {}", bin.display());
    let out = outside(&python, &dir.0, &bin).args(["-c", "import stagefrontier"]).output().unwrap();
    assert!(!out.status.success(), "uninstalled: the package is gone from the environment");
}

#[test]
fn the_release_tarball_runs_a_job_from_its_bin_lib_and_share() {
    let Some(tarball) = artifact_from("SF_TARBALL") else { return };
    let dir = TempDir::new("tarball");
    run_ok(Command::new("tar").arg("-xzf").arg(&tarball).arg("-C").arg(&dir.0));
    let prefix = std::fs::read_dir(&dir.0).unwrap().next().unwrap().unwrap().path();
    for part in ["bin/sf", "lib/libstagefrontier.so", "share/stagefrontier/python/stagefrontier_boot/sitecustomize.py"]
    {
        assert!(prefix.join(part).is_file(), "{part} in {}", tarball.display());
    }
    let (bin, sf) = (prefix.join("bin"), Path::new("sf"));
    assert_doors_under(sf, &dir.0, &bin, &prefix);
    trainer_job_answers(sf, &dir.0, &bin);
}
