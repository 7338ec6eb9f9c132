//! `sf run` end to end: real commands started through the built `sf`, their environment,
//! exit status and signals, the library's discovery, and sf-trainer-sim recorded with no
//! marker call in its code (NVTX ranges through the door sf run opens).

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// `sf run ARGS` with the caller's SF_* and launcher variables cleared, so the test
/// decides every setting.
fn sf_run(sf: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(sf);
    for (key, _) in std::env::vars() {
        let launcher = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PYTHONPATH"];
        if key.starts_with("SF_")
            || key.ends_with("_INJECTION64_PATH")
            || key.starts_with("NCCL_")
            || launcher.contains(&key.as_str())
        {
            cmd.env_remove(key);
        }
    }
    cmd.env_remove("LD_PRELOAD").arg("run").args(args);
    cmd
}

fn sf() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_sf"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The value a `NAME=value` line of the job's output gives.
fn printed<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    out.lines().find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
}

const PRINT_ENV: &str = "for v in LD_PRELOAD NCCL_PROFILER_PLUGIN SF_CHAIN_PROFILER NVTX_INJECTION64_PATH \
                         CUDA_INJECTION64_PATH PYTHONPATH SF_JOB_ID SF_LOG_DIR; do eval \"echo $v=\\${$v-unset}\"; done";

#[test]
fn every_door_opens_existing_values_survive_and_the_status_comes_back() {
    let root = log_root("run-env");
    let library = library().canonicalize().unwrap();
    let lib = library.to_str().unwrap();
    let out = sf_run(&sf(), &["--log-dir", root.to_str().unwrap(), "--job-id", "envjob", "--", "sh", "-c"])
        .arg(format!("{PRINT_ENV}; exit 7"))
        .env("LD_PRELOAD", "/nonexistent/libother.so")
        .env("NCCL_PROFILER_PLUGIN", "/opt/other/libprof.so")
        .env("CUDA_INJECTION64_PATH", "/opt/nsight/libinject.so")
        .env("PYTHONPATH", "/srv/code")
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(7), "the job's status, unchanged\n{stderr}");
    assert_eq!(printed(&stdout, "LD_PRELOAD"), Some(format!("{lib}:/nonexistent/libother.so").as_str()), "prepended");
    assert_eq!(printed(&stdout, "NCCL_PROFILER_PLUGIN"), Some(lib));
    assert_eq!(printed(&stdout, "SF_CHAIN_PROFILER"), Some("/opt/other/libprof.so"), "moved, not lost");
    assert_eq!(printed(&stdout, "NVTX_INJECTION64_PATH"), Some(lib));
    assert_eq!(printed(&stdout, "CUDA_INJECTION64_PATH"), Some("/opt/nsight/libinject.so"), "another tool's, kept");
    let pythonpath = printed(&stdout, "PYTHONPATH").unwrap();
    assert!(pythonpath.ends_with("/python/stagefrontier_boot:/srv/code"), "{pythonpath}");
    assert!(Path::new(pythonpath.split(':').next().unwrap()).join("sitecustomize.py").is_file());
    assert_eq!(printed(&stdout, "SF_JOB_ID"), Some("envjob"));
    assert_eq!(printed(&stdout, "SF_LOG_DIR"), root.to_str());
    let ours: Vec<&str> = stderr.lines().filter(|l| l.starts_with("sf run:")).collect();
    assert_eq!(
        ours,
        [
            "sf run: NCCL_PROFILER_PLUGIN=\"/opt/other/libprof.so\" moves to SF_CHAIN_PROFILER: the profiler door \
             forwards every call to it",
            "sf run: CUDA_INJECTION64_PATH is already set (\"/opt/nsight/libinject.so\"): another tool holds it, so \
             the cuda door stays shut",
            &format!(
                "sf run: recording rank logs in {}/envjob (doors: preload, profiler, nvtx, python)",
                root.display()
            ),
            &format!(
                "sf run: no rank log was written in {}/envjob: no process declared a rank (no RANK/WORLD_SIZE, \
                 OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID in its environment; no init_process_group seen by \
                 the Python door; no ncclCommInitRank seen), or none could create its log (its own stderr says \
                 why); SF_FORCE=1 records every process as pid-N",
                root.display()
            ),
        ],
        "one line per skipped or moved door, one before the job starts, and (a shell declares no rank) one after"
    );
}

#[test]
fn doors_pick_a_subset_and_the_job_id_is_derived_when_no_launcher_gives_one() {
    let root = log_root("run-doors");
    let out = sf_run(&sf(), &["--doors", "nvtx,preload", "--", "sh", "-c", PRINT_ENV])
        .env("SF_LOG_DIR", &root)
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    for unset in ["NCCL_PROFILER_PLUGIN", "CUDA_INJECTION64_PATH", "PYTHONPATH"] {
        assert_eq!(printed(&stdout, unset), Some("unset"), "{unset}");
    }
    let job = printed(&stdout, "SF_JOB_ID").unwrap();
    assert!(job.starts_with("sh-") && job.ends_with(&format!("Z-{}", out_pid(&stderr, &root))), "{job}");
    assert!(stderr.contains(&format!("in {}/{job} (doors: preload, nvtx)", root.display())), "{stderr}");

    let bad = sf_run(&sf(), &["--doors", "preload,gpu", "--", "true"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2), "a usage error");
    assert!(text(&bad.stderr).contains("unknown door 'gpu'"), "{}", text(&bad.stderr));
}

/// The pid at the end of the derived job id the start line shows.
fn out_pid(stderr: &str, root: &Path) -> String {
    let line = stderr.lines().find(|l| l.starts_with("sf run: recording")).expect("start line");
    let job = line.split(&format!("{}/", root.display())).nth(1).unwrap().split(' ').next().unwrap();
    job.rsplit('-').next().unwrap().to_string()
}

#[test]
fn a_job_killed_by_a_signal_ends_sf_run_by_the_same_signal() {
    let out = sf_run(&sf(), &["--doors", "preload", "--", "sh", "-c", "kill -TERM $$"]).output().unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{:?} {}", out.status, text(&out.stderr));
}

#[test]
fn signals_sent_to_sf_run_reach_the_job() {
    let script = "trap 'echo got TERM; exit 42' TERM; echo ready; sleep 30 & wait";
    let mut child = sf_run(&sf(), &["--doors", "preload", "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let started = Instant::now();
    // SAFETY: kill on the pid of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "got TERM", "the job saw the signal");
    assert_eq!(status.code(), Some(42), "and sf run returned its status");
    assert!(started.elapsed() < Duration::from_secs(20), "forwarded at once, not after the sleep");
}

#[test]
fn the_library_is_found_next_to_sf_then_in_lib_or_through_sf_library() {
    // Hard links in target/, on the same filesystem, stand for an installed layout.
    let prefix = artifact_dir().join(format!("run-cli-layout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&prefix);
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    std::fs::create_dir_all(prefix.join("lib")).unwrap();
    let installed_sf = prefix.join("bin/sf");
    std::fs::hard_link(sf(), &installed_sf).or_else(|_| std::fs::copy(sf(), &installed_sf).map(drop)).unwrap();

    let out = sf_run(&installed_sf, &["--", "true"]).output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot find libstagefrontier.so")
            && stderr.contains("SF_LIBRARY")
            && stderr.contains("bin/libstagefrontier.so"),
        "names the places searched and the fix: {stderr}"
    );

    let out = sf_run(&installed_sf, &["--doors", "preload", "--", "sh", "-c", "echo LD_PRELOAD=$LD_PRELOAD"])
        .env("SF_LIBRARY", library())
        .output()
        .unwrap();
    assert_eq!(printed(&text(&out.stdout), "LD_PRELOAD"), library().canonicalize().unwrap().to_str());

    let out = sf_run(&installed_sf, &["--", "true"]).env("SF_LIBRARY", prefix.join("nope.so")).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("SF_LIBRARY="), "{}", text(&out.stderr));

    let in_lib = prefix.join("lib/libstagefrontier.so");
    std::fs::hard_link(library(), &in_lib).or_else(|_| std::fs::copy(library(), &in_lib).map(drop)).unwrap();
    let out = sf_run(&installed_sf, &["--doors", "preload", "--", "sh", "-c", "echo LD_PRELOAD=$LD_PRELOAD"])
        .output()
        .unwrap();
    assert_eq!(printed(&text(&out.stdout), "LD_PRELOAD"), in_lib.canonicalize().unwrap().to_str(), "bin/../lib");
    let _ = std::fs::remove_dir_all(&prefix);
}

/// Issue 24, point 10: a FIFO at SF_LIBRARY hung every process of the job in the dynamic
/// loader, and a truncated library crashed them; sf run refuses both in one line.
#[test]
fn sf_library_naming_a_fifo_or_a_truncated_library_is_refused() {
    let dir = TempDir::new("run-bad-library");
    let fifo = dir.join("libfifo.so");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let truncated = dir.join("libcut.so");
    let whole = std::fs::read(library()).unwrap();
    std::fs::write(&truncated, &whole[..whole.len() / 2]).unwrap();
    for (path, said) in [(&fifo, "is not a regular file"), (&truncated, "is truncated")] {
        let err = dir.join("stderr");
        let mut child = sf_run(&sf(), &["--doors", "preload", "--", "true"])
            .env("SF_LIBRARY", path)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                // A writer that comes and goes ends the loader's wait on the FIFO.
                let _ = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&fifo);
                let _ = child.kill();
                panic!("sf run with SF_LIBRARY={} still running after 30 s", path.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stderr = std::fs::read_to_string(&err).unwrap();
        assert_eq!(status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("SF_LIBRARY=") && stderr.contains(said), "{said}: {stderr}");
    }
}

/// Hard-links `from` to `to` (same filesystem), else copies it.
fn place(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::hard_link(from, to).or_else(|_| std::fs::copy(from, to).map(drop)).unwrap();
}

#[test]
fn the_python_door_is_found_from_where_sf_is_never_from_the_build_tree() {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let prefix = artifact_dir().join(format!("run-cli-door-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&prefix);
    let print_door = ["--doors", "python", "--", "sh", "-c", "echo PYTHONPATH=${PYTHONPATH-unset}"];

    // sf and the library copied away from the checkout: the door stays shut and says so,
    // though the source tree sf was built from still exists.
    let (alone, alone_lib) = (prefix.join("alone/sf"), prefix.join("alone/libstagefrontier.so"));
    place(&sf(), &alone);
    place(&library(), &alone_lib);
    let out = sf_run(&alone, &print_door).output().unwrap();
    assert_eq!(printed(&text(&out.stdout), "PYTHONPATH"), Some("unset"), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("the Python door (stagefrontier_boot) was not found"), "{}", text(&out.stderr));

    // The wheel's layout: sf and the library inside the package, the door beside it.
    let site = prefix.join("site-packages");
    place(&sf(), &site.join("stagefrontier/sf"));
    place(&library(), &site.join("stagefrontier/libstagefrontier.so"));
    for file in ["__init__.py", "sitecustomize.py"] {
        place(&python.join("stagefrontier_boot").join(file), &site.join("stagefrontier_boot").join(file));
    }
    let out = sf_run(&site.join("stagefrontier/sf"), &print_door).output().unwrap();
    let door = site.join("stagefrontier_boot").canonicalize().unwrap();
    assert_eq!(printed(&text(&out.stdout), "PYTHONPATH"), door.to_str(), "{}", text(&out.stderr));

    // The checkout's own target/<profile>/sf: python/ two directories up.
    let out = sf_run(&sf(), &print_door).output().unwrap();
    let door = python.join("stagefrontier_boot").canonicalize().unwrap();
    assert_eq!(printed(&text(&out.stdout), "PYTHONPATH"), door.to_str(), "{}", text(&out.stderr));
    let _ = std::fs::remove_dir_all(&prefix);
}

#[test]
fn a_command_that_cannot_start_is_an_error_naming_it() {
    let out = sf_run(&sf(), &["--", "/nonexistent/trainer"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot start /nonexistent/trainer"), "{}", text(&out.stderr));
}

fn trainer_under_sf_run(root: &Path, job: &str, extra_env: &[(&str, &str)]) -> Output {
    let mut cmd = sf_run(&sf(), &["--log-dir", root.to_str().unwrap(), "--job-id", job, "--report", "--"]);
    cmd.arg(trainer_sim()).args(["--ranks", "3", "--steps", "24", "--markers", "nvtx", "--buckets", "2"]);
    cmd.args(["--stage-ms", "data=4,fwd=4,bwd=6,callbacks=1,optim=2", "--launch", "blocking"]);
    cmd.env("SF_QUIET", "1");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn the_trainer_records_stage_vectors_with_no_marker_call_and_report_names_the_slow_rank() {
    let root = log_root("run-trainer");
    // Rank 2's data stage takes 60 ms more from step 4: a marked NVTX range lengthened by
    // the library's own fault injection, not by the trainer's code.
    let out =
        trainer_under_sf_run(&root, "nvtxjob", &[("SF_INJECT", "delay:rank=2,stage=data.next_wait,ms=60,step=4-23")]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("sf-trainer-sim: ok ranks=3 steps=24"), "{stdout}");
    assert_eq!(rank_logs(&root, "nvtxjob").len(), 3);

    let steps = Command::new(sf()).args(["steps", "--json"]).arg(root.join("nvtxjob")).output().unwrap();
    let steps: serde_json::Value = serde_json::from_slice(&steps.stdout).unwrap();
    let stages: Vec<&str> = steps["stages"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert!(stages.contains(&"data.next_wait") && stages.contains(&"model.backward_cpu_wall"), "{stages:?}");

    let report: Vec<&str> = stderr.lines().skip_while(|l| !l.starts_with("sf run: report on")).collect();
    assert_eq!(report.len(), 5, "one headline per command: {stderr}");
    assert!(report[1].starts_with("  sf frontier") && report[1].contains("top-1 data.next_wait"), "{}", report[1]);
    assert!(report[1].contains("led by rank 2"), "{}", report[1]);
    assert!(report[2].starts_with("  sf slow") && report[2].contains("rank 2"), "{}", report[2]);
    assert!(report[3].starts_with("  sf hang") && report[3].contains("[exit 0]"), "{}", report[3]);
    assert!(report[4].starts_with("  sf net"), "{}", report[4]);
}

const PYTHON_PROBE: &str = "import sys, sitecustomize; \
print('chained', getattr(sitecustomize, 'SITE_HOOK', None)); \
print('door', 'stagefrontier_torch' in sys.modules, 'torch' in sys.modules)";

#[test]
fn the_python_door_chains_an_existing_sitecustomize_and_arms_without_touching_torch() {
    let site = TempDir::new("run-site");
    std::fs::write(site.join("sitecustomize.py"), "import os\nSITE_HOOK = os.getpid()\nprint('site hook ran')\n")
        .unwrap();
    let python = |rank: Option<&str>| {
        let mut cmd = sf_run(&sf(), &["--doors", "python", "--", "python3", "-c", PYTHON_PROBE]);
        cmd.env("PYTHONPATH", &site.0);
        if let Some(rank) = rank {
            cmd.env("RANK", rank).env("WORLD_SIZE", "2");
        }
        let out = run_ok(&mut cmd);
        text(&out.stdout)
    };
    let launcher = python(None);
    assert!(launcher.starts_with("site hook ran\n"), "the site's own hook still runs: {launcher}");
    assert!(launcher.contains("chained ") && !launcher.contains("chained None"), "{launcher}");
    // Armed in every process: a job started by torch.multiprocessing.spawn declares its ranks
    // only through init_process_group, which the door must be there to see. Torch stays
    // unimported until the job imports it.
    assert!(launcher.contains("door True False"), "armed without a rank, torch untouched: {launcher}");
    let rank = python(Some("1"));
    assert!(rank.contains("site hook ran") && rank.contains("door True False"), "armed, torch untouched: {rank}");
}

/// tests/c/count_signal.c, built once per test process.
fn signal_counter() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::temp_dir().join(format!("count-signal-{}", std::process::id()));
            compile_c(&c_source("count_signal.c"), &exe, &[]);
            exe
        })
        .clone()
}

/// Issue 24, point 8: scancel and systemd signal a job's whole process group. sf run used
/// to share its group with the job, which got the signal from the sender and again from
/// sf run's forwarding (16 of 20 trials).
#[test]
fn a_sigterm_to_sf_runs_process_group_reaches_the_job_once() {
    use std::os::unix::process::CommandExt;
    let counter = signal_counter();
    let mut counts = Vec::new();
    for _ in 0..20 {
        let mut child = sf_run(&sf(), &["--doors", "preload", "--"])
            .arg(&counter)
            .arg("TERM")
            // Like a Slurm task or a systemd service: sf run leads a group of its own.
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "ready");
        // SAFETY: kill on the process group our own child leads.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) };
        let status = child.wait().unwrap();
        assert!(status.success(), "the job handles SIGTERM and exits 0: {status:?}");
        counts.push(lines.next().unwrap().unwrap());
    }
    assert!(counts.iter().all(|c| c == "TERM=1"), "every trial, one SIGTERM: {counts:?}");
}

/// Runs `cmd` as the session leader of a new pseudo-terminal (the shell's place), waits
/// for `ready` on it, types Ctrl-C, and returns what the terminal showed and how `cmd` ended.
fn ctrl_c_at_a_terminal(mut cmd: Command) -> (String, std::process::ExitStatus) {
    use std::io::{Read, Write};
    use std::os::fd::FromRawFd;
    use std::os::unix::process::CommandExt;
    // SAFETY: posix_openpt, grantpt, unlockpt and ptsname_r on the new master descriptor,
    // into a buffer of the size given; the descriptor is owned by the File from here on.
    let (master, slave_path) = unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(fd >= 0 && libc::grantpt(fd) == 0 && libc::unlockpt(fd) == 0, "a pseudo-terminal");
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(fd, name.as_mut_ptr(), name.len()), 0);
        let path = std::ffi::CStr::from_ptr(name.as_ptr()).to_str().unwrap().to_string();
        (std::fs::File::from_raw_fd(fd), path)
    };
    let slave = std::fs::OpenOptions::new().read(true).write(true).open(&slave_path).unwrap();
    cmd.stdin(slave.try_clone().unwrap()).stdout(slave.try_clone().unwrap()).stderr(slave);
    // SAFETY: setsid, ioctl and signal are async-signal-safe; stdin is the terminal by now.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // As a terminal's session starts: a runner that started the tests in the
            // background (`cmd &` without job control) left SIGINT and SIGQUIT ignored, and
            // a shell keeps a signal ignored on entry ignored.
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        })
    };
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let (seen, mut master) = (seen.clone(), master.try_clone().unwrap());
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            // Ends with EIO once the last process holding the terminal is gone.
            while let Ok(n @ 1..) = master.read(&mut buf) {
                seen.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !seen.lock().unwrap().contains("ready") {
        assert!(Instant::now() < deadline, "no ready in {:?}", seen.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
    (&master).write_all(b"\x03").unwrap();
    let status = child.wait().unwrap();
    // The job may still write its last line after sf run's caller ended.
    std::thread::sleep(Duration::from_millis(200));
    drop(master);
    reader.join().unwrap();
    let text = seen.lock().unwrap().clone();
    (text, status)
}

/// A Ctrl-C at sf run's controlling terminal reaches the job once, from the terminal: sf
/// run, the shell's foreground job, gives the job's group the terminal and neither gets nor
/// forwards the SIGINT.
#[test]
fn a_ctrl_c_at_the_terminal_reaches_the_job_once() {
    let mut cmd = sf_run(&sf(), &["--doors", "preload", "--"]);
    cmd.arg(signal_counter()).arg("INT");
    let (text, status) = ctrl_c_at_a_terminal(cmd);
    assert!(text.contains("INT=1"), "one SIGINT: {text:?}");
    assert!(status.success(), "the job handled it and exited 0, and so did sf run: {status:?} {text:?}");
}

/// In a script without job control, sf run shares the script's process group: a Ctrl-C
/// still reaches the script, which ends with its job, as it would without sf run.
#[test]
fn a_ctrl_c_ends_a_script_that_runs_sf_run() {
    let cmd = sf_run(&sf(), &[]);
    let sf_run_args: Vec<std::ffi::OsString> = cmd.get_args().map(|a| a.to_os_string()).collect();
    let mut script = Command::new("bash");
    script.arg("-c").arg("\"$@\"; echo went on").arg("bash").arg(sf());
    script.args(&sf_run_args).args(["--doors", "preload", "--", "sh", "-c", "echo ready; exec sleep 30"]);
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => script.env(key, value),
            None => script.env_remove(key),
        };
    }
    let started = Instant::now();
    let (text, status) = ctrl_c_at_a_terminal(script);
    assert!(started.elapsed() < Duration::from_secs(20), "the job ended at once: {text:?}");
    assert!(!text.contains("went on"), "the script stopped: {text:?}");
    assert_eq!(status.signal(), Some(libc::SIGINT), "bash ended by the Ctrl-C: {status:?} {text:?}");
}
