//! Shared helpers of the integration tests: where the built artifacts are, and how to run
//! a job under the library into a private log directory.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stagefrontier::analysis::frontier::{analyze, Context, Schema, Step, Window};
use stagefrontier::core::log::reader::{RankLog, Record};
use stagefrontier::core::log::records::{CommCreated, NcclCall, RecordBody};

/// `target/<profile>/`, where cargo put the library and the fixture binaries.
pub fn artifact_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

pub fn artifact(name: &str) -> PathBuf {
    let path = artifact_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace first (`cargo build --workspace`; scripts/test does it)",
        path.display()
    );
    path
}

pub fn library() -> PathBuf {
    artifact("libstagefrontier.so")
}

pub fn trainer_sim() -> PathBuf {
    artifact("sf-trainer-sim")
}

pub fn hookbench() -> PathBuf {
    artifact("sf-hookbench")
}

/// `relative` inside the fixtures' build-script output (fakenccl, fakecupti, ...), from
/// the newest build of them.
pub fn fixture_output(relative: &str) -> PathBuf {
    let build = artifact_dir().join("build");
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(&build)
        .expect("target/<profile>/build")
        .filter_map(|e| e.ok().map(|e| e.path().join("out").join(relative)))
        .filter(|path| path.exists())
        .collect();
    candidates.sort_by_key(|path| std::fs::metadata(path).and_then(|m| m.modified()).ok());
    candidates.pop().unwrap_or_else(|| panic!("no {relative}: build the workspace first (`cargo build --workspace`)"))
}

/// A fresh, private SF_LOG_DIR for one test. Logs are reserved in full (posix_fallocate),
/// so roots left by earlier test processes (a failed test's stays for inspection until the
/// next run) are removed here: without that every run kept about 2 GB in the temp dir.
pub fn log_root(test: &str) -> PathBuf {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(remove_roots_of_dead_processes);
    let root = std::env::temp_dir().join(format!("sf-it-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("create log root");
    root
}

/// Removes every `sf-it-<pid>-*` root whose process is gone (tests of several binaries run at
/// once, so a live pid's roots are left alone).
fn remove_roots_of_dead_processes() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("sf-it-")).and_then(|r| r.split('-').next()) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A command with the library preloaded and logs going to `root/<job>/`. The caller's
/// SF_* variables are cleared so the test decides every setting; SF_QUIET=1 keeps the
/// start line out of the stderr tests read (a test of that line removes it).
pub fn preloaded(program: &Path, root: &Path, job: &str) -> Command {
    let mut cmd = Command::new(program);
    for (key, _) in std::env::vars() {
        if key.starts_with("SF_") || ["RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"].contains(&key.as_str())
        {
            cmd.env_remove(key);
        }
    }
    cmd.env("LD_PRELOAD", library()).env("SF_LOG_DIR", root).env("SF_JOB_ID", job).env("SF_QUIET", "1");
    cmd
}

/// sf-trainer-sim's arguments for `ranks` ranks and `steps` steps of zero-length stages,
/// host-blocking (`--launch blocking`): its callers count the host's NCCL calls and records
/// as they were written against, with no device records beside them.
pub fn trainer_args(ranks: u32, steps: u32) -> Vec<String> {
    let zero = "data=0,fwd=0,bwd=0,callbacks=0,optim=0";
    let steps = steps.to_string();
    ["--ranks", &ranks.to_string(), "--steps", &steps, "--stage-ms", zero, "--launch", "blocking"]
        .map(String::from)
        .to_vec()
}

pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The `checksum=` the trainer prints on success.
pub fn checksum(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().find(|l| l.starts_with("sf-trainer-sim: ok")).expect("summary line");
    line.split_whitespace().find_map(|w| w.strip_prefix("checksum=")).expect("checksum").to_string()
}

/// Runs `cmd` to completion within `limit`, or kills it and fails the test.
pub fn output_within(cmd: &mut Command, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect");
            panic!("{cmd:?} still running after {limit:?}; stderr:\n{}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = start.elapsed();
    (child.wait_with_output().expect("collect"), elapsed)
}

/// Every `.sflog` in the job directory, sorted by name.
pub fn rank_logs(root: &Path, job: &str) -> Vec<PathBuf> {
    let dir = root.join(job);
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    logs.retain(|p| p.extension().is_some_and(|e| e == "sflog"));
    logs.sort();
    logs
}

pub fn records(path: &Path) -> Vec<Record> {
    let log = RankLog::open(path).unwrap_or_else(|e| panic!("{e}"));
    let (records, stats) = log.records();
    assert_eq!((stats.missing, stats.invalid_slots, stats.lost_to_wrap), (0, 0, 0), "{}", path.display());
    records
}

pub fn bodies(path: &Path) -> Vec<RecordBody> {
    records(path).into_iter().map(|r| r.body).collect()
}

pub fn nccl_calls(bodies: &[RecordBody]) -> Vec<NcclCall> {
    bodies
        .iter()
        .filter_map(|b| match b {
            RecordBody::NcclCall(c) => Some(*c),
            _ => None,
        })
        .collect()
}

pub fn comms_created(bodies: &[RecordBody]) -> Vec<CommCreated> {
    bodies
        .iter()
        .filter_map(|b| match b {
            RecordBody::CommCreated(c) => Some(*c),
            _ => None,
        })
        .collect()
}

/// A child killed and reaped when dropped, however the test ends (a job's launcher takes
/// its ranks along: PR_SET_PDEATHSIG).
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// sf-trainer-sim under the library as job `job` in `root`: `ranks` ranks, stages of
/// `stage_ms`, an SF_INJECT rule, running (100,000 steps) until the guard is dropped. NCCL
/// calls block the host (`--launch blocking`): its callers' peers wait inside the calls.
pub fn start_sim(root: &Path, ranks: u32, stage_ms: &str, inject: Option<&str>) -> Killed {
    let mut cmd = preloaded(&trainer_sim(), root, "job");
    cmd.args(["--ranks", &ranks.to_string(), "--steps", "100000", "--stage-ms", stage_ms, "--launch", "blocking"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if let Some(rule) = inject {
        cmd.env("SF_INJECT", rule);
    }
    Killed(cmd.spawn().expect("start sf-trainer-sim"))
}

/// A directory under the system temp dir, removed when the test ends.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("sf-tmp-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The pid of a process that has exited and been reaped.
pub fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().expect("wait for true");
    pid
}

/// Held by every test of a binary whose tests assert on wall-clock latency, so siblings in
/// the same binary do not compete for the machine's cores while one of them measures.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The one frontier window over `steps`, each an R×S row-major duration matrix with every
/// rank (0..R) present and no device evidence.
pub fn single_window(schema: &Arc<Schema>, ranks: usize, steps: &[Vec<f64>], context: Context) -> Window {
    let ids: Vec<u32> = (0..ranks as u32).collect();
    let steps = steps.iter().enumerate().map(|(t, d)| Step {
        index: t as u64,
        schema,
        world: ranks,
        ranks: &ids,
        missing: &[],
        durations: d,
        overlap_s: &[],
        device: &[],
    });
    let mut windows = analyze(steps, context, None).unwrap();
    assert_eq!(windows.len(), 1, "the steps make one window");
    windows.remove(0)
}

/// `tests/c/<name>`, the C programs the tests build.
pub fn c_source(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(name)
}

/// `source` compiled by `$CC` (default `cc`) into `out` with warnings as errors; `args`
/// come after the source, so libraries there resolve its references.
pub fn compile_c(source: &Path, out: &Path, args: &[&str]) {
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(out)
        .arg(source)
        .args(args)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "compiling {}", source.display());
}

/// `tests/c/<source>` compiled once into a temp executable named `<name>-<pid>`, linked
/// against the fixtures' fakenccl (found at run time through its rpath) and libdl, with
/// tests/c on the include path for the C helpers the programs share (fake_driver.h).
pub fn compile_against_fakenccl(source: &str, name: &str) -> PathBuf {
    let nccl = fixture_output("libnccl.so.2").parent().expect("fakenccl's directory").to_path_buf();
    let exe = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let source = c_source(source);
    let include = format!("-I{}", source.parent().expect("tests/c").display());
    let (search, rpath) = (format!("-L{}", nccl.display()), format!("-Wl,-rpath,{}", nccl.display()));
    compile_c(&source, &exe, &["-Wextra", &include, &search, &rpath, "-lnccl", "-ldl"]);
    exe
}

/// The fixtures' fakecupti: CUPTI's ABI over a CPU "GPU" (tests/fixtures/fakecupti).
pub fn fakecupti() -> PathBuf {
    fixture_output("fakecupti/libcupti.so.13")
}

/// Clears the caller's CUDA_* and FAKECUPTI_* variables from `cmd`, so the test alone
/// decides whether a CUDA driver loads the library and how fakecupti behaves.
pub fn without_callers_cuda(cmd: &mut Command) -> &mut Command {
    for (key, _) in std::env::vars() {
        if key.starts_with("CUDA_") || key.starts_with("FAKECUPTI_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// The library as `cmd`'s CUDA injection (CUDA_INJECTION64_PATH, which the C programs'
/// fake driver dlopens) with fakecupti as its CUPTI.
pub fn cuda_injected(cmd: &mut Command) -> &mut Command {
    cmd.env("CUDA_INJECTION64_PATH", library()).env("SF_CUPTI_PATH", fakecupti())
}

/// Recomputes the static header's CRC over `log` (a whole file's bytes, or at least its
/// header), as a crafted file would carry it.
pub fn reseal_header(log: &mut [u8]) {
    use stagefrontier::core::log::format::{bytes, STATIC_CRC_OFFSET, STATIC_HEADER_LEN};
    let crc = crc32fast::hash(&log[..STATIC_HEADER_LEN]);
    bytes::put_u32(log, STATIC_CRC_OFFSET, crc);
}

/// A finished command with what it cost: wall time and peak resident memory.
pub struct Measured {
    pub status: std::process::ExitStatus,
    pub elapsed: std::time::Duration,
    pub max_rss_kib: u64,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` to completion, reaping it with `wait4` for its peak RSS; stdout and stderr go
/// through files so a large output cannot block the child.
pub fn run_measured(cmd: &mut Command, scratch: &Path) -> Measured {
    use std::os::unix::process::ExitStatusExt;
    let (out_path, err_path) = (scratch.join("measured.stdout"), scratch.join("measured.stderr"));
    let out = std::fs::File::create(&out_path).expect("stdout file");
    let err = std::fs::File::create(&err_path).expect("stderr file");
    let started = std::time::Instant::now();
    #[expect(clippy::zombie_processes, reason = "reaped by wait4 below, which also yields its peak RSS")]
    let child = cmd.stdout(out).stderr(err).spawn().expect("spawn");
    let mut status = 0;
    // SAFETY: rusage is plain old data that wait4 fills in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, with valid pointers to the status and the usage.
    let reaped = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(reaped, child.id() as libc::pid_t, "wait4: {}", std::io::Error::last_os_error());
    Measured {
        status: std::process::ExitStatus::from_raw(status),
        elapsed: started.elapsed(),
        max_rss_kib: usage.ru_maxrss as u64,
        stdout: String::from_utf8_lossy(&std::fs::read(&out_path).unwrap_or_default()).into_owned(),
        stderr: String::from_utf8_lossy(&std::fs::read(&err_path).unwrap_or_default()).into_owned(),
    }
}

/// Says loudly, past the test harness's capture, that a test did not run and why; the test
/// then returns without asserting anything.
pub fn skip(test: &str, why: &str) {
    use std::io::Write;
    let line = format!("\nSKIP: {test}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A tmpfs of `size` (as mount's `size=` reads it) mounted on a fresh directory, unmounted
/// when dropped; None where the machine does not let this process mount (not root, or in
/// a container without the capability).
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    pub fn mount(name: &str, size: &str) -> Result<Tmpfs, String> {
        if !is_root() {
            return Err("mounting a tmpfs needs root".into());
        }
        let dir = std::env::temp_dir().join(format!("sf-tmpfs-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755"), "tmpfs"])
            .arg(&dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            let _ = std::fs::remove_dir(&dir);
            return Err(format!("mount -t tmpfs failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(Tmpfs(dir))
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Every path under `dir`, recursively (not following links).
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(walk(&path));
        }
        found.push(path);
    }
    found
}

/// The lines of `out`'s stderr that the library wrote.
pub fn library_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("stagefrontier: "))
        .map(String::from)
        .collect()
}

/// `sf frontier --json` on the job in `dir`; its status must say whether a window names a
/// culprit (4) or none (0).
pub fn frontier_json(dir: &Path) -> serde_json::Value {
    let out = Command::new(artifact("sf")).arg("frontier").arg(dir).arg("--json").output().expect("spawn sf");
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("sf frontier --json prints one JSON object");
    let windows = report["windows"].as_array().expect("windows");
    let culprit = windows.iter().any(|w| w["culprits"].as_array().is_some_and(|c| !c.is_empty()));
    assert_eq!(out.status.code(), Some(if culprit { 4 } else { 0 }), "{report}");
    report
}

/// The stages sf-trainer-sim marks each step with, in its order.
pub const TRAINER_STAGES: [&str; 6] = [
    "data.next_wait",
    "model.fwd_loss_cpu_wall",
    "model.backward_cpu_wall",
    "callbacks.cpu_wall",
    "optim.step_cpu_wall",
    "step.other_cpu_wall",
];

/// The second user of the multi-user tests: `nobody`, played through `setpriv`.
pub const NOBODY: u32 = 65534;

/// Whether a second user can be played here; the reason if not.
pub fn second_user() -> Result<(), String> {
    if !is_root() {
        return Err("needs root to act as a second user".into());
    }
    match Command::new("setpriv").arg("--version").output() {
        Ok(out) if out.status.success() => Ok(()),
        _ => Err("setpriv is not installed".into()),
    }
}

/// `sh -c script` as uid/gid 65534 with no supplementary groups.
pub fn as_nobody(script: &str) {
    let out = Command::new("setpriv")
        .args([format!("--reuid={NOBODY}"), format!("--regid={NOBODY}"), "--clear-groups".into()])
        .args(["sh", "-c", script])
        .output()
        .expect("run setpriv");
    assert!(out.status.success(), "as nobody: {script}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A directory anyone may create in, like /tmp (1777).
pub fn shared_dir(name: &str) -> TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new(name);
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o1777)).unwrap();
    dir
}

/// The python of the cached PyTorch environment (scripts/torch-venv), or None (skip, said)
/// when it is not installed and SF_REQUIRE_TORCH is not 1.
pub fn torch_python() -> Option<PathBuf> {
    let venv = std::env::var_os("SF_TORCH_VENV").map(PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(&std::env::var_os("HOME").expect("HOME")).join(".cache"));
        cache.join("stagefrontier/torch-venv")
    });
    let python = venv.join("bin/python");
    if python.is_file() {
        return Some(python);
    }
    assert!(
        std::env::var_os("SF_REQUIRE_TORCH").is_none_or(|v| v != "1"),
        "SF_REQUIRE_TORCH=1 but {} is missing: run scripts/torch-venv",
        python.display()
    );
    eprintln!("skipped: no PyTorch environment at {} (scripts/torch-venv installs it)", venv.display());
    None
}
