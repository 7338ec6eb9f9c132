//! The NVTX door: a C program that loads and drives the library exactly as NVIDIA's
//! header-only NVTX v3 does (tests/c/nvtx_host.c), and sf-trainer-sim's NVTX markers, give
//! stage vectors from nothing but NVTX ranges; ranges that are not steps or stages, wide
//! strings and other threads' ranges leave them alone.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::*;
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::RecordBody;

const DEFAULT_STAGES: [&str; 5] = [
    "data.next_wait",
    "model.fwd_loss_cpu_wall",
    "model.backward_cpu_wall",
    "callbacks.cpu_wall",
    "optim.step_cpu_wall",
];
const RESIDUAL: &str = "step.other_cpu_wall";

/// The host, compiled once per test binary.
fn host() -> &'static Path {
    static HOST: OnceLock<PathBuf> = OnceLock::new();
    HOST.get_or_init(|| {
        let exe = std::env::temp_dir().join(format!("sf-nvtx-host-{}", std::process::id()));
        compile_c(&c_source("nvtx_host.c"), &exe, &["-Wextra", "-pthread", "-ldl"]);
        exe
    })
}

/// The host as rank 0 of 1, logging into `root/job/`, with neither LD_PRELOAD nor
/// NVTX_INJECTION64_PATH unless the test adds them. Its `fwd` ranges are the forward stage
/// and `host.extra` is one more stage.
fn host_command(root: &Path, job: &str) -> Command {
    let mut cmd = Command::new(host());
    for (key, _) in std::env::vars() {
        let launcher =
            ["LD_PRELOAD", "RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"].contains(&key.as_str());
        if key.starts_with("SF_") || key.starts_with("NVTX_") || launcher {
            cmd.env_remove(key);
        }
    }
    cmd.env("SF_LOG_DIR", root)
        .env("SF_JOB_ID", job)
        .env("SF_QUIET", "1")
        .env("RANK", "0")
        .env("WORLD_SIZE", "1")
        .env("SF_NVTX_STAGES", "host.extra,fwd=model.fwd_loss_cpu_wall");
    cmd
}

fn stdout_has(out: &Output, line: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.lines().any(|l| l == line), "no line '{line}' in:\n{stdout}");
}

/// A step's stages in order, (name, ms), its parts joined.
struct Step {
    step: u64,
    stages: Vec<(String, f64)>,
    nested_rejected: u16,
}

fn steps(path: &Path) -> Vec<Step> {
    let log = RankLog::open(path).unwrap();
    let names = log.stage_names();
    let mut steps: Vec<Step> = Vec::new();
    for body in bodies(path) {
        let RecordBody::StepVector(v) = body else { continue };
        if v.part == 0 {
            steps.push(Step { step: v.step, stages: Vec::new(), nested_rejected: v.nested_rejected });
        }
        let step = steps.last_mut().expect("part 0 comes first");
        assert_eq!(step.step, v.step);
        step.stages
            .extend(v.stages().map(|(id, ns)| (names[id as usize].clone().unwrap_or_default(), ns as f64 / 1e6)));
    }
    steps
}

fn names(step: &Step) -> Vec<&str> {
    step.stages.iter().map(|(name, _)| name.as_str()).collect()
}

/// What the host's loop must leave in its log: steps 0, 1, 5 and 6 (from `step`, `step`,
/// `step:5`, `step 6`), the five stages in order, each at least as long as the host slept
/// in it, `host.extra` only where it was pushed in ASCII, and nothing rejected as nested.
fn assert_host_log(root: &Path, job: &str) {
    let logs = rank_logs(root, job);
    assert_eq!(logs.len(), 1, "{logs:?}");
    let steps = steps(&logs[0]);
    assert_eq!(steps.iter().map(|s| s.step).collect::<Vec<_>>(), [0, 1, 5, 6]);
    for (i, step) in steps.iter().enumerate() {
        let mut expected: Vec<&str> = DEFAULT_STAGES.to_vec();
        let mut slept = vec![6.0, 3.0, 8.0, 1.0, 2.0];
        if i == 3 {
            expected.push("host.extra");
            slept.push(1.0);
        }
        expected.push(RESIDUAL);
        slept.push(0.0);
        assert_eq!(names(step), expected, "step {}", step.step);
        for ((name, ms), at_least) in step.stages.iter().zip(slept) {
            assert!(*ms >= at_least && *ms < at_least + 200.0, "step {} {name}: {ms} ms", step.step);
        }
        assert_eq!(step.nested_rejected, 0, "step {}: a stage opened inside another", step.step);
    }
}

/// The lines the host prints when the library attached to both of its NVTX modules.
fn assert_attached(out: &Output) {
    stdout_has(out, "attached=1,1");
    // Range start/end and push/pop, A, W and Ex; the domain variants, registered strings
    // and domains. Marks and naming calls stay no-ops.
    stdout_has(out, "core_slots=4,5,6,7,8,9,10,11");
    stdout_has(out, "core2_slots=2,3,4,5,10,11,12,13");
    stdout_has(out, "same_callbacks=1");
    stdout_has(out, "stagefrontier_objects=1");
    stdout_has(out, "levels=0,1,2,2,1");
    stdout_has(out, "unmatched_pop=-1");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("stagefrontier:"), "the library spoke:\n{stderr}");
}

#[test]
fn nvtx_ranges_become_stage_vectors() {
    let root = log_root("nvtx-host");
    let out = run_ok(host_command(&root, "job").env("NVTX_INJECTION64_PATH", library()));
    assert_attached(&out);
    assert_host_log(&root, "job");
}

#[test]
fn preload_and_injection_share_one_library() {
    let root = log_root("nvtx-both");
    let out = run_ok(host_command(&root, "job").env("LD_PRELOAD", library()).env("NVTX_INJECTION64_PATH", library()));
    assert_attached(&out);
    assert_host_log(&root, "job");
}

#[test]
fn without_the_injection_variable_nothing_is_recorded() {
    let root = log_root("nvtx-none");
    let plain = run_ok(&mut host_command(&root, "plain"));
    let preloaded = run_ok(host_command(&root, "preloaded").env("LD_PRELOAD", library()));
    let disabled =
        run_ok(host_command(&root, "disabled").env("NVTX_INJECTION64_PATH", library()).env("SF_DISABLE", "1"));
    for out in [&plain, &preloaded, &disabled] {
        stdout_has(out, "attached=0,0");
        stdout_has(out, "levels=-2,-2,-2,-2,-2");
        stdout_has(out, "done");
    }
    stdout_has(&plain, "stagefrontier_objects=0");
    stdout_has(&preloaded, "stagefrontier_objects=1");
    for job in ["plain", "preloaded", "disabled"] {
        assert_eq!(rank_logs(&root, job), Vec::<PathBuf>::new(), "{job}");
    }
}

#[test]
fn trainer_sim_nvtx_markers_give_the_c_markers_vectors() {
    let root = log_root("nvtx-sim");
    // Every stage all host time, as the lower bounds below assume.
    let args = [
        "--ranks",
        "2",
        "--steps",
        "5",
        "--stage-ms",
        "data=4,fwd=2,bwd=6,callbacks=1,optim=2",
        "--launch",
        "blocking",
    ];
    run_ok(preloaded(&trainer_sim(), &root, "c").args(args).args(["--markers", "c"]));
    run_ok(
        preloaded(&trainer_sim(), &root, "nvtx")
            .args(args)
            .args(["--markers", "nvtx"])
            .env("NVTX_INJECTION64_PATH", library()),
    );
    // Without a tool to load, NVTX ranges are no-ops: NCCL calls are recorded, steps not.
    run_ok(preloaded(&trainer_sim(), &root, "no-tool").args(args).args(["--markers", "nvtx"]));

    let (c_logs, nvtx_logs) = (rank_logs(&root, "c"), rank_logs(&root, "nvtx"));
    assert_eq!((c_logs.len(), nvtx_logs.len()), (2, 2));
    for (c_log, nvtx_log) in c_logs.iter().zip(&nvtx_logs) {
        let (c, nvtx) = (steps(c_log), steps(nvtx_log));
        assert_eq!(c.len(), 5);
        assert_eq!(c.iter().map(|s| s.step).collect::<Vec<_>>(), nvtx.iter().map(|s| s.step).collect::<Vec<_>>());
        for (c_step, nvtx_step) in c.iter().zip(&nvtx) {
            assert_eq!(names(c_step), names(nvtx_step), "step {}", c_step.step);
            for ((name, ms), at_least) in nvtx_step.stages.iter().zip([4.0, 2.0, 6.0, 1.0, 2.0, 0.0]) {
                assert!(*ms >= at_least && *ms < at_least + 200.0, "step {} {name}: {ms} ms", nvtx_step.step);
            }
        }
    }
    let untooled = rank_logs(&root, "no-tool");
    assert_eq!(untooled.len(), 2);
    for log in untooled {
        let bodies = bodies(&log);
        assert!(!nccl_calls(&bodies).is_empty());
        assert!(steps(&log).is_empty(), "{}", log.display());
    }
}
