//! `sf run -- COMMAND`: starts an unmodified job with the library's doors open (the
//! environment comes from `run_env`) in a process group of its own (`job_control`),
//! forwards signals to it, returns its exit status unchanged, and with --report prints
//! the analysis commands' headlines after it.

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use stagefrontier::core::record::notice::echo;
use stagefrontier::core::regular_file::check_shared_object;
use stagefrontier::report::run_env::{plan, Door, Places, Plan, RunOptions};
use stagefrontier::report::wall::rfc3339_ms;
use stagefrontier::report::Failure;

use crate::job_control;
use crate::output::terminal::note_line;

const LIBRARY: &str = "libstagefrontier.so";

/// Runs the job; returns its exit status, or ends this process by the signal that ended it.
pub fn run(options: &RunOptions) -> Result<ExitCode, Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure::Message(format!("cannot find the sf binary: {e}")))?;
    let library = find_library(&exe, std::env::var_os("SF_LIBRARY")).map_err(Failure::Message)?;
    let python_boot = find_python_boot(&exe, &library);
    let cwd =
        std::env::current_dir().map_err(|e| Failure::Message(format!("cannot read the working directory: {e}")))?;
    let utc_now = utc_stamp();
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let places = Places {
        library: &library,
        python_boot: python_boot.as_deref(),
        cwd: &cwd,
        uid,
        pid: std::process::id(),
        utc_now: &utc_now,
    };
    let plan = plan(options, |name| std::env::var_os(name), &places).map_err(Failure::Message)?;

    for note in &plan.notes {
        note_line(note);
    }
    let doors: Vec<&str> = plan.opened.iter().map(|d| d.name()).collect();
    let doors = if doors.is_empty() { "none".to_string() } else { doors.join(", ") };
    note_line(&format!("sf run: recording rank logs in {} (doors: {doors})", plan.job_dir().display()));

    let mut command = Command::new(&options.command[0]);
    command.args(&options.command[1..]);
    for (name, value) in &plan.set {
        command.env(name, value);
    }
    let started = std::time::SystemTime::now();
    let mut job = job_control::spawn(&mut command)
        .map_err(|e| Failure::Message(format!("cannot start {}: {e}", Path::new(&options.command[0]).display())))?;
    let status = job.wait().map_err(|e| Failure::Message(format!("cannot wait for the job: {e}")))?;

    if let Some(why) = no_rank_log(&plan, started) {
        note_line(&format!("sf run: no rank log was written in {}: {why}", plan.job_dir().display()));
    }
    if options.report {
        report(&exe, &plan);
    }
    if let Some(code) = status.code() {
        return Ok(ExitCode::from(code as u8));
    }
    let signal = status.signal().unwrap_or(libc::SIGKILL);
    die_by(signal);
    Ok(ExitCode::from(128u8.wrapping_add(signal as u8)))
}

/// SF_LIBRARY when set (it must exist); else next to the sf binary; else in ../lib/. The
/// choice must be a whole ELF shared object: the dynamic loader blocks on a FIFO and a
/// truncated object crashes every process of the job.
fn find_library(exe: &Path, from_env: Option<OsString>) -> Result<PathBuf, String> {
    if let Some(path) = from_env.filter(|p| !p.is_empty()) {
        let shown = echo(path.as_encoded_bytes());
        return std::fs::canonicalize(&path)
            .map_err(|e| e.to_string())
            .and_then(|found| check_shared_object(&found).map(|()| found))
            .map_err(|why| format!("SF_LIBRARY={shown}: {why}; point it at libstagefrontier.so"));
    }
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [dir.join(LIBRARY), dir.join("../lib").join(LIBRARY)];
    let found = candidates.iter().find_map(|path| std::fs::canonicalize(path).ok()).ok_or_else(|| {
        format!(
            "cannot find {LIBRARY}: looked in {} and {}; copy it next to sf (after `cargo install`, from \
             target/release/) or set SF_LIBRARY to its path",
            candidates[0].display(),
            candidates[1].display()
        )
    })?;
    check_shared_object(&found)
        .map_err(|why| format!("{}: {why}; reinstall {LIBRARY}", echo(found.as_os_str().as_encoded_bytes())))?;
    Ok(found)
}

/// The directory whose sitecustomize the Python door puts on PYTHONPATH, found from where
/// sf and the library are, never from a path compiled in: a copied or installed sf must
/// not open a door from a build tree that happens to exist. In order: next to the library
/// (python/); one directory up from sf (the wheel: sf and the library inside the
/// stagefrontier package, stagefrontier_boot beside it in site-packages); a release
/// tarball's share/; and a source checkout's python/, two up from target/<profile>/sf.
fn find_python_boot(exe: &Path, library: &Path) -> Option<PathBuf> {
    let exe_dir = exe.parent()?;
    let candidates = [
        library.parent()?.join("python"),
        exe_dir.join(".."),
        exe_dir.join("../share/stagefrontier/python"),
        exe_dir.join("../../python"),
    ];
    candidates
        .iter()
        .map(|dir| dir.join("stagefrontier_boot"))
        .find(|boot| boot.join("sitecustomize.py").is_file())
        .and_then(|boot| std::fs::canonicalize(boot).ok())
}

/// Why the job left no log in its directory, when it left none (an earlier job's under
/// the same id do not count: a log is created, or moved into place, after `started`). A
/// process records only once it knows its rank (the order is in `core::runtime::identity`).
fn no_rank_log(plan: &Plan, started: std::time::SystemTime) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let since = started.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let logs = stagefrontier::report::discover::logs_in(&plan.job_dir()).unwrap_or_default();
    if logs.iter().any(|log| std::fs::metadata(log).is_ok_and(|m| m.ctime() >= since)) {
        return None;
    }
    let python = if plan.opened.contains(&Door::Python) {
        "no init_process_group seen by the Python door"
    } else {
        "the Python door, which sees init_process_group, was not opened"
    };
    let preload = if plan.opened.contains(&Door::Preload) {
        "no ncclCommInitRank seen"
    } else {
        "the preload door, which sees ncclCommInitRank, was not opened"
    };
    Some(format!(
        "no process declared a rank (no RANK/WORLD_SIZE, OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID in its \
         environment; {python}; {preload}), or none could create its log (its own stderr says why); SF_FORCE=1 \
         records every process as pid-N"
    ))
}

/// Ends sf run by `signal`, as the job ended, so that the caller's wait status is the
/// job's; returns only if the signal does not kill by default.
fn die_by(signal: libc::c_int) {
    let _ = io::stdout().flush();
    // SAFETY: restoring the default action and raising a signal on ourselves; the core
    // dump limit is lowered so that SIGQUIT/SIGABRT do not dump sf's own core.
    unsafe {
        let limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::setrlimit(libc::RLIMIT_CORE, &limit);
        libc::signal(signal, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(signal);
    }
}

/// The headline of sf frontier, slow, hang and net over the job's logs, each run as its
/// own `sf` so that one's failure does not stop the others: their first finding line, else
/// their first line, and for sf frontier (whose first line only counts stages and ranks)
/// the answer of its longest window, read from its --json.
fn report(exe: &Path, plan: &Plan) {
    let dir = plan.job_dir();
    note_line(&format!("sf run: report on {}", dir.display()));
    for command in ["frontier", "slow", "hang", "net"] {
        let line = match Command::new(exe).arg(command).arg(&dir).stdin(Stdio::null()).output() {
            Ok(out) => {
                let first = |bytes: &[u8]| {
                    let text = String::from_utf8_lossy(bytes);
                    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
                    let finding = lines.clone().find(|l| FINDINGS.iter().any(|f| l.starts_with(f)));
                    finding.or_else(|| lines.next()).map(str::to_string)
                };
                let mut line = first(&out.stdout).or_else(|| first(&out.stderr)).unwrap_or_default();
                if command == "frontier" && out.status.code().is_some_and(|c| c == 0 || c == 4) {
                    if let Some(answer) = frontier_answer(exe, &dir) {
                        line = format!("{line}; {answer}");
                    }
                }
                let status = out.status.code().map_or("killed".to_string(), |c| c.to_string());
                format!("{} [exit {status}]", line.strip_prefix("sf: ").unwrap_or(&line))
            }
            Err(e) => format!("cannot run: {e}"),
        };
        note_line(&format!("  sf {command:<8} {line}"));
    }
}

/// How the commands' finding lines start: the headline when there is one.
const FINDINGS: [&str; 5] = ["SLOW", "HUNG", "STUCK", "DEGRADED", "CULPRIT"];

/// `top-1 STAGE (share S) led by rank R` of sf frontier's longest window.
fn frontier_answer(exe: &Path, dir: &Path) -> Option<String> {
    let out = Command::new(exe).arg("frontier").arg(dir).arg("--json").stdin(Stdio::null()).output().ok()?;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let windows = report.get("windows")?.as_array()?;
    let window = windows.iter().max_by_key(|w| w.get("steps").and_then(|s| s.as_u64()).unwrap_or(0))?;
    let top1 = window.get("top1")?.as_str()?;
    let share = window.get("shares").and_then(|s| s.get(top1)).and_then(|s| s.as_f64()).unwrap_or(0.0);
    let leaders = window.get("leader_ranks").and_then(|l| l.get(top1)).and_then(|l| l.as_array());
    let leaders: Vec<String> =
        leaders.into_iter().flatten().filter_map(|r| r.as_u64()).map(|r| r.to_string()).collect();
    let steps = window.get("steps").and_then(|s| s.as_u64()).unwrap_or(0);
    Some(format!("top-1 {top1} (share {share:.2} over {steps} steps), led by rank {}", leaders.join(",")))
}

/// Now in UTC as `YYYYMMDDTHHMMSSZ`, for derived job ids.
fn utc_stamp() -> String {
    let ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    // 2026-11-23T11:33:36.123Z -> 20261123T113336Z
    let text = rfc3339_ms(ns);
    let digits: String = text[..19].chars().filter(|c| c.is_ascii_digit() || *c == 'T').collect();
    format!("{digits}Z")
}
