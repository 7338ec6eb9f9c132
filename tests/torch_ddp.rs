//! The real-PyTorch tier: gloo DDP jobs on CPU with the PyPI torch wheel, in the cached
//! virtual environment scripts/torch-venv builds outside the repository. The job
//! (tests/torch/ddp_job.py) holds no marker: its stages come from the Python door that
//! `sf run` opens. scripts/test installs the environment and sets SF_REQUIRE_TORCH=1, so
//! in CI a missing torch fails; a plain `cargo test` without it skips this tier, saying so.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;
use stagefrontier::core::log::nccl_op::NcclOp;
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::RecordBody;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// A command whose PATH starts with the environment's bin/ (torchrun, python), with the
/// caller's SF_* and launcher variables cleared.
fn in_venv(program: &Path, python: &Path) -> Command {
    let mut cmd = Command::new(program);
    for (key, _) in std::env::vars() {
        let launcher = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "PYTHONPATH", "LD_PRELOAD"];
        if key.starts_with("SF_") || key.ends_with("_INJECTION64_PATH") || launcher.contains(&key.as_str()) {
            cmd.env_remove(key);
        }
    }
    let bin = python.parent().unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    cmd.env("PATH", format!("{}:{path}", bin.display())).env("OMP_NUM_THREADS", "1").env("SF_QUIET", "1");
    cmd
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `sf run` on `ranks`-rank `torchrun` of the tier's `script` as job `job` in `root`; the
/// script's own arguments go after.
fn sf_run_torchrun(python: &Path, root: &Path, job: &str, ranks: u32, script: &str) -> Command {
    let mut cmd = in_venv(Path::new(env!("CARGO_BIN_EXE_sf")), python);
    cmd.args(["run", "--log-dir", root.to_str().unwrap(), "--job-id", job, "--"]);
    cmd.args(["torchrun", "--nproc-per-node", &ranks.to_string(), "--master-port", &free_port().to_string()]);
    cmd.arg(repo(script));
    cmd
}

/// Per rank log: the stage names of each step vector, in order.
fn step_stages(log: &Path) -> Vec<Vec<String>> {
    let reader = RankLog::open(log).unwrap();
    let names = reader.stage_names();
    let mut steps: Vec<Vec<String>> = Vec::new();
    for record in records(log) {
        if let RecordBody::StepVector(v) = record.body {
            // A step of more than six stages continues in further parts.
            if v.part == 0 {
                steps.push(Vec::new());
            }
            let step = steps.last_mut().expect("part 0 first");
            step.extend(v.stages().map(|(id, _)| names[id as usize].clone().unwrap_or_default()));
        }
    }
    steps
}

/// The stages ddp_job.py's two micro-batches give a step, expanded as the library does.
const ACCUMULATED: [&str; 6] = [
    "data.next_wait@0",
    "model.fwd_loss_cpu_wall@0",
    "model.backward_cpu_wall@0",
    "data.next_wait@1",
    "model.fwd_loss_cpu_wall@1",
    "model.backward_cpu_wall@1",
];

#[test]
fn torchrun_under_sf_run_names_the_slow_data_stage_and_rank_with_no_marker_in_the_job() {
    let Some(python) = torch_python() else { return };
    let root = log_root("torch-slow");
    let started = std::time::Instant::now();
    let mut cmd = in_venv(Path::new(env!("CARGO_BIN_EXE_sf")), &python);
    cmd.args(["run", "--report", "--log-dir", root.to_str().unwrap(), "--job-id", "ddp", "--"]);
    cmd.args(["torchrun", "--nproc-per-node", "3", "--master-port", &free_port().to_string()]);
    cmd.arg(repo("tests/torch/ddp_job.py"));
    // Rank 2's samples load slowly in its two DataLoader workers: 80 ms a batch.
    cmd.args(["--steps", "24", "--eval-every", "8", "--slow-rank", "2", "--slow-stage", "data", "--slow-ms", "80"]);
    let out = run_ok(&mut cmd);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("3-rank DDP job under sf run: {:.1} s", started.elapsed().as_secs_f64());
    assert!(stdout.contains("ddp_job: ok ranks=3 steps=24"), "{stdout}\n{stderr}");

    let logs = rank_logs(&root, "ddp");
    assert_eq!(logs.len(), 3, "one log per rank, none from the launcher or the DataLoader workers");
    for log in &logs {
        let steps = step_stages(log);
        // 3 evaluation passes ran between the steps; they are not steps.
        assert_eq!(steps.len(), 24, "{}: {steps:?}", log.display());
        let expected: Vec<&str> =
            ACCUMULATED.iter().copied().chain(["optim.step_cpu_wall", "step.other_cpu_wall"]).collect();
        assert!(steps.iter().all(|s| s == &expected), "gradient accumulation 2, every step: {:?}", steps[1]);
    }

    let frontier = Command::new(env!("CARGO_BIN_EXE_sf")).arg("frontier").arg(root.join("ddp")).arg("--json").output();
    let frontier: Value = serde_json::from_slice(&frontier.unwrap().stdout).unwrap();
    let windows = frontier["windows"].as_array().unwrap();
    let window = windows.iter().max_by_key(|w| w["steps"].as_u64().unwrap()).unwrap();
    let top1 = window["top1"].as_str().unwrap();
    assert!(top1.starts_with("data.next_wait"), "{top1}: {window}");
    assert_eq!(window["leader_ranks"][top1], serde_json::json!([2]), "{window}");
    assert!(stderr.contains("led by rank 2"), "--report's frontier headline: {stderr}");
    // The other ranks wait for rank 2 inside their backward (gloo's allreduce, unseen):
    // no command's first verdict line may name another rank, and none is a finding.
    for command in ["slow", "frontier", "hang"] {
        let (code, verdict) = first_verdict(command, &root.join("ddp"));
        assert_eq!(code, Some(0), "sf {command}: {verdict:?}");
        if let Some(line) = verdict {
            assert!(line.contains("rank 2 "), "sf {command}: {line}");
        }
    }
}

/// `sf COMMAND DIR`'s exit status and its first verdict line (SLOW, LEAD, CULPRIT, HUNG).
fn first_verdict(command: &str, dir: &Path) -> (Option<i32>, Option<String>) {
    let out = Command::new(env!("CARGO_BIN_EXE_sf")).arg(command).arg(dir).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let verdict = text.lines().find(|l| ["SLOW ", "LEAD ", "CULPRIT ", "HUNG"].iter().any(|v| l.starts_with(v)));
    (out.status.code(), verdict.map(str::to_string))
}

/// A healthy 3-rank gloo DDP job on a 2-core machine (9 processes with the DataLoader
/// workers): no command finds anything.
#[test]
fn a_healthy_gloo_job_gives_no_finding_from_any_command() {
    let Some(python) = torch_python() else { return };
    let root = log_root("torch-healthy");
    let mut cmd = sf_run_torchrun(&python, &root, "healthy", 3, "tests/torch/ddp_job.py");
    cmd.args(["--steps", "24", "--eval-every", "8"]);
    run_ok(&mut cmd);
    for command in ["ls", "slow", "frontier", "hang"] {
        let (code, verdict) = first_verdict(command, &root.join("healthy"));
        assert_eq!(code, Some(0), "sf {command}: {verdict:?}");
        assert!(verdict.as_ref().is_none_or(|l| l.starts_with("LEAD ")), "sf {command}: {verdict:?}");
    }
}

#[test]
fn plain_torchrun_with_run_id_none_gets_a_job_id_every_rank_shares() {
    let Some(python) = torch_python() else { return };
    let root = log_root("torch-none");
    let port = free_port();
    // By hand, without sf run: LD_PRELOAD and the Python door's PYTHONPATH entry. A static
    // rendezvous (--master-port) without --rdzv-id gives TORCHELASTIC_RUN_ID=none.
    let mut cmd = in_venv(&python.parent().unwrap().join("torchrun"), &python);
    cmd.env("LD_PRELOAD", library()).env("SF_LOG_DIR", &root);
    cmd.env("PYTHONPATH", repo("python/stagefrontier_boot"));
    cmd.args(["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", &port.to_string()]);
    cmd.arg(repo("tests/torch/ddp_job.py")).args(["--steps", "6", "--eval-every", "3"]);
    let out = run_ok(&mut cmd);
    assert!(String::from_utf8_lossy(&out.stdout).contains("ddp_job: ok ranks=2 steps=6"));
    let job = format!("torchrun-127.0.0.1-{port}");
    assert!(!root.join("none").exists(), "`none` is no job id");
    let logs = rank_logs(&root, &job);
    assert_eq!(logs.len(), 2, "both ranks in {job}");
    for log in &logs {
        assert_eq!(step_stages(log).len(), 6, "{}", log.display());
    }
}

/// The door in one process: the global module hooks are gone after the first backward,
/// only the training model keeps one; without the library nothing is installed at all.
const DOOR_PROBE: &str = r#"
import sys, torch
import stagefrontier_torch as door
import torch.nn.modules.module as hooks
model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(3)])
loss_fn = torch.nn.MSELoss()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    loss_fn(model(torch.ones(2, 4)), torch.zeros(2, 4)).backward()
    opt.step(); opt.zero_grad()
d = door._door
if d is None:
    print("no door", len(hooks._global_forward_pre_hooks))
else:
    print("door", d.model is model, len(hooks._global_forward_pre_hooks), len(hooks._global_forward_hooks),
          len(model._forward_pre_hooks), len(model[0]._forward_pre_hooks))
"#;

#[test]
fn the_door_hooks_only_the_training_model_and_nothing_without_the_library() {
    let Some(python) = torch_python() else { return };
    let root = log_root("torch-door");
    let probe = |preload: bool| {
        let mut cmd = in_venv(&python, &python);
        cmd.env("PYTHONPATH", repo("python/stagefrontier_boot")).env("RANK", "0").env("WORLD_SIZE", "1");
        cmd.env("SF_LOG_DIR", &root).env("SF_JOB_ID", "door");
        if preload {
            cmd.env("LD_PRELOAD", library());
        }
        let out = run_ok(cmd.arg("-c").arg(DOOR_PROBE));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(probe(false), "no door 0", "no library: no hook at all");
    assert_eq!(probe(true), "door True 0 0 1 0", "one hook, on the outermost module");
    let logs = rank_logs(&root, "door");
    assert_eq!(logs.len(), 1);
    let steps = step_stages(&logs[0]);
    assert_eq!(steps.len(), 3);
    assert_eq!(
        steps[0],
        ["model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "optim.step_cpu_wall", "step.other_cpu_wall"],
        "the first step too: the global hook opened its forward"
    );
}

/// A job that names its steps with NVTX ranges (as cuda/ddp_smoke.py does) run under
/// `sf run`, every door open: the steps are the NVTX ranges', one vector per step. On an
/// H100 the Python door marked steps too, and every step came out cut in two.
#[test]
fn nvtx_step_ranges_make_the_python_door_stand_down() {
    let Some(python) = torch_python() else { return };
    let root = log_root("torch-nvtx");
    let mut cmd = in_venv(Path::new(env!("CARGO_BIN_EXE_sf")), &python);
    cmd.args(["run", "--log-dir", root.to_str().unwrap(), "--job-id", "nvtx", "--"]);
    cmd.args(["torchrun", "--nproc-per-node", "2", "--master-port", &free_port().to_string()]);
    cmd.arg(repo("tests/torch/ddp_job.py")).args(["--steps", "6", "--eval-every", "100", "--nvtx"]);
    let out = run_ok(&mut cmd);
    assert!(String::from_utf8_lossy(&out.stdout).contains("ddp_job: ok ranks=2 steps=6"));
    let logs = rank_logs(&root, "nvtx");
    assert_eq!(logs.len(), 2);
    for log in &logs {
        let steps = step_stages(log);
        let tail = ["optim.step_cpu_wall", "callbacks.cpu_wall", "step.other_cpu_wall"];
        let expected: Vec<&str> = ACCUMULATED.iter().copied().chain(tail).collect();
        assert_eq!(steps.len(), 6, "{}: {steps:?}", log.display());
        assert!(steps.iter().all(|s| s == &expected), "{}: {steps:?}", log.display());
    }
}

/// PyTorch's own DDP tutorial (torch.multiprocessing.spawn, the rank passed to
/// init_process_group) under `sf run`: no RANK anywhere, or a stray RANK=0 every child
/// inherits (a test harness's). Each child declares its rank through the Python door once
/// init_process_group returns; each writes its own log and `sf frontier` answers. Before,
/// the first case recorded nothing and the second recorded one rank (the others: "being
/// written by live process N").
#[test]
fn mp_spawn_without_rank_or_with_a_stray_rank_writes_one_log_per_rank() {
    let Some(python) = torch_python() else { return };
    for (job, stray) in [("spawn", false), ("stray", true)] {
        let root = log_root(&format!("torch-{job}"));
        let mut cmd = in_venv(Path::new(env!("CARGO_BIN_EXE_sf")), &python);
        cmd.env_remove("SF_QUIET");
        if stray {
            cmd.env("RANK", "0").env("WORLD_SIZE", "3");
        }
        cmd.args(["run", "--log-dir", root.to_str().unwrap(), "--job-id", job, "--"]);
        cmd.arg(&python).arg(repo("tests/torch/spawn_job.py"));
        cmd.args(["--ranks", "3", "--steps", "8", "--port", &free_port().to_string()]);
        let out = run_ok(&mut cmd);
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("spawn_job: ok ranks=3 steps=8"), "{stdout}\n{stderr}");
        assert!(!stderr.contains("being written by live process"), "{stderr}");
        assert!(!stderr.contains("no rank log"), "{stderr}");
        let logs = rank_logs(&root, job);
        let names: Vec<String> = logs.iter().map(|l| l.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["rank-00000.sflog", "rank-00001.sflog", "rank-00002.sflog"], "{job}: {stderr}");
        for (rank, log) in logs.iter().enumerate() {
            let header = RankLog::open(log).unwrap().header;
            assert_eq!((header.global_rank, header.world_size), (rank as i32, 3), "{job}");
            assert_eq!(header.identity_source, "process_group", "{job}");
            assert_eq!(step_stages(log).len(), 8, "{job}: {}", log.display());
        }
        let frontier = Command::new(env!("CARGO_BIN_EXE_sf")).arg("frontier").arg(root.join(job)).output().unwrap();
        let text = String::from_utf8_lossy(&frontier.stdout);
        assert!(frontier.status.code().is_some_and(|c| c == 0 || c == 4), "{job}: {text}");
        assert!(text.contains("3 ranks"), "{job}: {text}");
    }
}

/// The same job with the Python door shut: nothing declares a rank, and `sf run` says so
/// at the end instead of leaving an empty directory to be found later.
#[test]
fn sf_run_says_when_no_rank_log_was_written_and_why() {
    let Some(python) = torch_python() else { return };
    let root = log_root("torch-none-declared");
    let mut cmd = in_venv(Path::new(env!("CARGO_BIN_EXE_sf")), &python);
    cmd.args(["run", "--doors", "preload", "--log-dir", root.to_str().unwrap(), "--job-id", "silent", "--"]);
    cmd.arg(&python).arg(repo("tests/torch/spawn_job.py"));
    cmd.args(["--ranks", "2", "--steps", "2", "--port", &free_port().to_string()]);
    let out = run_ok(&mut cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(rank_logs(&root, "silent").is_empty());
    assert!(stderr.contains("sf run: no rank log was written"), "{stderr}");
    assert!(stderr.contains("no process declared a rank"), "{stderr}");
}

/// `os._exit(1)` on one rank of an mp.spawn job: spawn terminates the others (SIGTERM)
/// at once. Each rank's own end record orders what heartbeats (50 ms apart) cannot:
/// `sf ls` and `sf hang` name rank 1 as the first to go, the rest a teardown.
#[test]
fn os_exit_1_on_one_rank_is_named_the_first_to_go() {
    let Some(python) = torch_python() else { return };
    let root = log_root("torch-exit");
    let mut cmd = in_venv(Path::new(env!("CARGO_BIN_EXE_sf")), &python);
    cmd.args(["run", "--log-dir", root.to_str().unwrap(), "--job-id", "exit", "--"]);
    cmd.arg(&python).arg(repo("tests/torch/spawn_job.py"));
    cmd.args(["--ranks", "3", "--steps", "30", "--exit-rank", "1", "--exit-step", "10"]);
    let out = cmd.args(["--port", &free_port().to_string()]).output().unwrap();
    assert!(!out.status.success(), "spawn raises when a rank fails");
    assert_eq!(rank_logs(&root, "exit").len(), 3);
    let ls = Command::new(env!("CARGO_BIN_EXE_sf")).arg("ls").arg(root.join("exit")).arg("--json").output().unwrap();
    let ls: Value = serde_json::from_slice(&ls.stdout).unwrap();
    let first = &ls["first_end"];
    assert_eq!(
        (first["rank"].as_i64(), first["verb"].as_str(), first["cause"].as_str()),
        (Some(1), Some("exited"), Some("status 1")),
        "{first}"
    );
    assert_eq!(first["rest"], serde_json::json!([0, 2]));
    assert_eq!(first["teardown_signal"], "SIGTERM", "{first}");
    let hang = Command::new(env!("CARGO_BIN_EXE_sf")).arg("hang").arg(root.join("exit")).output().unwrap();
    let text = String::from_utf8_lossy(&hang.stdout);
    assert!(text.contains("rank 1 exited first (status 1)"), "{text}");
}

/// `sf hang --json` on `dir`: its exit status and report.
fn sf_hang(dir: &Path) -> (Option<i32>, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_sf")).arg("hang").arg(dir).arg("--json").output().unwrap();
    (out.status.code(), serde_json::from_slice(&out.stdout).unwrap_or(Value::Null))
}

/// The median wall time of a rank log's steps, in seconds.
fn median_step_s(log: &Path) -> f64 {
    let mut walls: Vec<u64> = records(log)
        .into_iter()
        .filter_map(|r| match r.body {
            RecordBody::StepVector(v) if v.part == 0 => Some(v.wall_ns),
            _ => None,
        })
        .collect();
    walls.sort_unstable();
    walls[walls.len() / 2] as f64 / 1e9
}

/// A rank of a gloo DDP job falls asleep forever before its optimizer step at step 12;
/// the others go on into step 13 and wait for it in DDP's gradient allreduce, which runs
/// in C++ where no door sees it. No NCCL call, no device: step and stage progress names
/// rank 2 (exit 3) within 10 steps' time of its last marker, and again post-mortem once
/// the job is torn down. Before, every poll said "not hung".
#[test]
fn a_rank_asleep_forever_in_a_gloo_job_is_named_from_progress_live_and_post_mortem() {
    let Some(python) = torch_python() else { return };
    let root = log_root("torch-asleep");
    let mut cmd = sf_run_torchrun(&python, &root, "asleep", 3, "tests/torch/ddp_job.py");
    cmd.args([
        "--steps",
        "200",
        "--eval-every",
        "1000",
        "--compute-ms",
        "30",
        "--sleep-rank",
        "2",
        "--sleep-step",
        "12",
    ]);
    let mut job = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let dir = root.join("asleep");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    let live = loop {
        let (code, report) = sf_hang(&dir);
        if code == Some(3) {
            break report;
        }
        // Until every rank has its log (torchrun and torch take seconds to start), nothing
        // to judge; after, "not hung" until rank 2 falls asleep.
        if rank_logs(&root, "asleep").len() == 3 {
            assert_eq!(code, Some(0), "{report}");
        }
        assert!(std::time::Instant::now() < deadline, "never named: {report}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let stall = &live["progress_stall"];
    assert_eq!(live["hang_evidence"], "progress", "{live}");
    assert_eq!((&stall["behind_ranks"], &stall["step"]), (&serde_json::json!([2]), &12.into()), "{live}");
    assert_eq!(stall["ahead_step"], 13, "{live}");
    let step_s = median_step_s(&dir.join("rank-00000.sflog"));
    let idle_s = stall["idle_s"].as_f64().unwrap();
    assert!(
        idle_s <= 10.0 * step_s,
        "named {idle_s:.3} s after rank 2's last marker; 10 steps take {:.3} s",
        10.0 * step_s
    );
    let human = Command::new(env!("CARGO_BIN_EXE_sf")).arg("hang").arg(&dir).output().unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.starts_with("HUNG (from step and stage progress): rank 2 "), "{text}");
    assert!(text.contains("hang evidence: step and stage progress"), "{text}");

    // Its stack, sampled in process once it stopped advancing: the sleeping line, under
    // the headline; the others grouped apart.
    let sleeping = sleeping_line();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let sampled = loop {
        let (_, report) = sf_hang(&dir);
        if stands_at(&report, 2, sleeping) {
            break report;
        }
        assert!(std::time::Instant::now() < deadline, "rank 2's stack never showed line {sleeping}: {report}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let groups = sampled["stack_groups"].as_array().unwrap();
    assert_eq!((&groups[0]["ranks"], &groups[0]["culprit"]), (&serde_json::json!([2]), &true.into()), "{sampled}");
    let human = Command::new(env!("CARGO_BIN_EXE_sf")).arg("hang").arg(&dir).output().unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[1].starts_with("  rank 2's Python stack"), "{text}");
    assert!(lines[2].contains(&format!("ddp_job.py:{sleeping})")), "{text}");
    // Asked: every live rank answers within the 5 s.
    let asked = Command::new(env!("CARGO_BIN_EXE_sf")).args(["hang", "--stacks", "--json"]).arg(&dir).output().unwrap();
    let asked: Value = serde_json::from_slice(&asked.stdout).unwrap();
    let answers = asked["stacks_asked"].as_array().unwrap();
    assert_eq!(answers.len(), 3, "{asked}");
    assert!(answers.iter().all(|a| a["answered"] == true), "{asked}");
    assert!(asked["stacks"].as_array().unwrap().iter().all(|s| s["reason"] == "request"), "{asked}");

    let pid = libc::pid_t::try_from(job.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    job.wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let gone = loop {
        let (code, report) = sf_hang(&dir);
        let ranks = report["ranks"].as_array().map_or(0, |r| r.iter().filter(|r| r["liveness"] != "live").count());
        if ranks == 3 {
            assert_eq!(code, Some(3), "{report}");
            break report;
        }
        assert!(std::time::Instant::now() < deadline, "the ranks never read as gone: {report}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(gone["progress_stall"]["behind_ranks"], serde_json::json!([2]), "{gone}");
    assert!(stands_at(&gone, 2, sleeping), "the stack outlives the process: {gone}");
}

/// The line of tests/torch/ddp_job.py where a rank sleeps forever.
fn sleeping_line() -> i64 {
    let script = std::fs::read_to_string(repo("tests/torch/ddp_job.py")).unwrap();
    1 + script.lines().position(|l| l.contains("time.sleep(3600)")).unwrap() as i64
}

/// Whether `sf hang --json`'s current stack of `rank` has its main thread at `line` of
/// the job's script.
fn stands_at(report: &Value, rank: i64, line: i64) -> bool {
    let stacks = report["stacks"].as_array().map(Vec::as_slice).unwrap_or_default();
    stacks.iter().filter(|s| s["rank"] == rank && s["current"] == true).any(|s| {
        let main = s["threads"].as_array().and_then(|t| t.iter().find(|t| t["main"] == true));
        let top = main.and_then(|t| t["frames"].get(0));
        top.is_some_and(|f| f["line"] == line && f["file"].as_str().is_some_and(|p| p.ends_with("ddp_job.py")))
    })
}

/// FSDP-style collectives issued from Python on gloo (tests/torch/collectives_job.py: the
/// parameters gathered in forward, their gradients reduce-scattered in backward): the
/// Python door records them as NCCL's calls are recorded, so the waits are read from
/// them. Rank 1's forward runs 30 ms long: sf slow names it with the waits it caused
/// (exit 4), and sf frontier as the culprit.
#[test]
fn collectives_issued_from_python_on_gloo_carry_the_waits() {
    let Some(python) = torch_python() else { return };
    let root = log_root("torch-collectives");
    let mut cmd = sf_run_torchrun(&python, &root, "fsdp", 3, "tests/torch/collectives_job.py");
    cmd.args(["--steps", "30", "--slow-rank", "1", "--slow-ms", "30"]);
    let out = run_ok(&mut cmd);
    assert!(String::from_utf8_lossy(&out.stdout).contains("collectives_job: ok ranks=3 steps=30"));
    let dir = root.join("fsdp");
    sf_slow_names_rank_1s_forward(&dir);
    let (code, verdict) = first_verdict("frontier", &dir);
    // The whole report, read again only when an assertion fails.
    let report = || {
        String::from_utf8_lossy(
            &Command::new(env!("CARGO_BIN_EXE_sf")).arg("frontier").arg(&dir).output().unwrap().stdout,
        )
        .into_owned()
    };
    assert!(matches!(code, Some(0 | 4)), "{verdict:?}\n{}", report());
    assert!(
        verdict.as_deref().is_some_and(|l| l.starts_with("CULPRIT rank 1 in model.fwd_loss_cpu_wall")),
        "{verdict:?}\n{}",
        report()
    );
}

/// The same job with its gather issued asynchronously (async_op=True, waited for after a
/// little overlapped work, as FSDP's prefetch does): the host waits in Work.wait, not in
/// the call, so each gather's record runs from its issue to its wait's return. Rank 1's
/// forward runs 30 ms long before it issues its gather: the others' gather records hold
/// that wait, and sf slow names rank 1 from them (exit 4).
#[test]
fn an_asynchronous_collective_is_recorded_until_its_work_wait_returns() {
    let Some(python) = torch_python() else { return };
    let root = log_root("torch-collectives-async");
    let mut cmd = sf_run_torchrun(&python, &root, "fsdp", 3, "tests/torch/collectives_job.py");
    cmd.args(["--steps", "30", "--slow-rank", "1", "--slow-ms", "30", "--async-gather"]);
    let out = run_ok(&mut cmd);
    assert!(String::from_utf8_lossy(&out.stdout).contains("collectives_job: ok ranks=3 steps=30"));
    let dir = root.join("fsdp");
    let gathers = |rank: usize| -> Vec<u64> {
        let mut spans: Vec<u64> = records(&dir.join(format!("rank-{rank:05}.sflog")))
            .into_iter()
            .filter_map(|r| match r.body {
                RecordBody::NcclCall(c) if c.op == NcclOp::AllGather => Some(c.t_exit_ns - c.t_enter_ns),
                _ => None,
            })
            .collect();
        spans.sort_unstable();
        spans
    };
    let (waiter, late) = (gathers(0), gathers(1));
    assert!(waiter.len() >= 30, "every gather recorded: {}", waiter.len());
    let median = |v: &[u64]| v[v.len() / 2] as f64 / 1e6;
    assert!(median(&waiter) > 15.0, "rank 0's gathers hold its wait for rank 1: {:.1} ms", median(&waiter));
    assert!(median(&late) < median(&waiter) / 2.0, "rank 1 waits for nobody: {:.1} ms", median(&late));
    sf_slow_names_rank_1s_forward(&dir);
}

/// `sf slow` on the FSDP-style job with rank 1's forward slowed: the waits read from the
/// calls recorded, rank 1 named in its forward, exit 4.
fn sf_slow_names_rank_1s_forward(dir: &Path) {
    let slow = Command::new(env!("CARGO_BIN_EXE_sf")).arg("slow").arg(dir).arg("--json").output().unwrap();
    let report: Value = serde_json::from_slice(&slow.stdout).unwrap();
    assert_eq!(report["waits_from"], "host_calls", "{report}");
    assert_eq!(slow.status.code(), Some(4), "{report}");
    let first = &report["slow_ranks"][0];
    assert_eq!((&first["rank"], &first["stage"]), (&1.into(), &"model.fwd_loss_cpu_wall".into()), "{report}");
}

/// Rank 2 of the same job stops before its forward's gather at step 15: sf hang names it
/// from the collectives the Python door recorded (exit 3), the others waiting in the
/// allgather it never entered.
#[test]
fn a_rank_missing_a_collective_issued_from_python_is_named_by_sf_hang() {
    let Some(python) = torch_python() else { return };
    let root = log_root("torch-collectives-hang");
    let mut cmd = sf_run_torchrun(&python, &root, "stop", 3, "tests/torch/collectives_job.py");
    cmd.args(["--steps", "1000", "--hang-rank", "2", "--hang-step", "15"]);
    let mut job = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let dir = root.join("stop");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    let report = loop {
        let (code, report) = sf_hang(&dir);
        if code == Some(3) {
            break report;
        }
        assert!(std::time::Instant::now() < deadline, "never named: {report}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let pid = libc::pid_t::try_from(job.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    job.wait().unwrap();
    assert_eq!(report["hang_evidence"], "python_collectives", "{report}");
    let stuck = report["communicators"].as_array().unwrap().iter().find(|c| !c["stuck_s"].is_null()).expect("stuck");
    assert_eq!(
        (&stuck["missing_ranks"], &stuck["stuck_op"]),
        (&serde_json::json!([2]), &"allgather".into()),
        "{stuck}"
    );
    assert_eq!(stuck["waiting_ranks"], serde_json::json!([0, 1]), "{stuck}");
}

/// A Megatron-style tp=2 x dp=2 job (tests/torch/groups_job.py) whose groups are made with
/// new_group(group_desc=...), one of the tensor-parallel ones misnamed: `sf roles` infers
/// every role from the calls the Python door recorded on gloo, gives each communicator the
/// names its members' groups were given, agreeing, and for the misnamed one keeps the
/// role it inferred and notes the disagreement.
#[test]
fn sf_roles_checks_its_roles_against_the_group_names_megatron_gives() {
    use serde_json::json;

    let Some(python) = torch_python() else { return };
    let root = log_root("torch-group-names");
    let mut cmd = sf_run_torchrun(&python, &root, "named", 4, "tests/torch/groups_job.py");
    cmd.args(["--steps", "5", "--misname"]);
    let out = run_ok(&mut cmd);
    assert!(String::from_utf8_lossy(&out.stdout).contains("groups_job: ok ranks=4 steps=5"));
    let out =
        Command::new(env!("CARGO_BIN_EXE_sf")).arg("roles").arg(root.join("named")).arg("--json").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["layout"], json!({"tp": 2, "pp": 1, "dp": 2}), "{report:#}");
    let named: Vec<(String, Value, Value, Value)> = report["communicators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["role"].as_str().unwrap().to_string(),
                c["members"].clone(),
                c["names"].clone(),
                c["names_agree"].clone(),
            )
        })
        .collect();
    let expected = [
        ("world", json!([0, 1, 2, 3]), json!(["default_pg"]), json!(true)),
        ("tp", json!([0, 1]), json!(["TENSOR_MODEL_PARALLEL_GROUP"]), json!(true)),
        ("tp", json!([2, 3]), json!(["DATA_PARALLEL_GROUP"]), json!(false)),
        ("dp", json!([0, 2]), json!(["DATA_PARALLEL_GROUP"]), json!(true)),
        ("dp", json!([1, 3]), json!(["DATA_PARALLEL_GROUP"]), json!(true)),
    ];
    for (role, members, names, agree) in expected {
        let found = named.iter().find(|c| c.0 == role && c.1 == members);
        assert_eq!(found.map(|c| (&c.2, &c.3)), Some((&names, &agree)), "{role} {members}: {report:#}");
    }
    let notes = report["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().is_some_and(|n| n.contains("inferred tp") && n.contains("DATA_PARALLEL_GROUP"))),
        "{report:#}"
    );
}
