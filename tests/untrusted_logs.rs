//! `sf` trusts no file (issue 11, points 13-15), tried through the real `sf` binary on
//! logs a real job wrote: crafted header fields are refused by name in bounded time and
//! memory by every command; a crafted sparse file costs no more than its data; reading a
//! sparse log allocates none of its holes; a log truncated while read never kills `sf`;
//! and a rank killed with kill -9 is dead the moment `sf` looks.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use stagefrontier::core::log::format::{self, bytes, header, live};
use stagefrontier::core::log::reader::RankLog;

/// Wall-clock bound for one `sf` run on a crafted file: generous for a loaded 2-core box
/// (a clean run takes milliseconds), far below what a loop over a claimed size would take.
const TIME_BOUND: Duration = Duration::from_secs(5);
/// Peak RSS bound for one `sf` run: a few MiB are normal; a size taken from a crafted
/// header would allocate gigabytes.
const RSS_BOUND_KIB: u64 = 128 * 1024;

/// A finished two-rank job's logs (each with its communicators, steps and records).
fn real_job(test: &str) -> (PathBuf, Vec<PathBuf>) {
    let root = log_root(test);
    run_ok(preloaded(&trainer_sim(), &root, "job").args(trainer_args(2, 4)).env("SF_LOG_RECORDS", "1024"));
    let logs = rank_logs(&root, "job");
    assert_eq!(logs.len(), 2);
    (root, logs)
}

fn copy_job(logs: &[PathBuf], to: &Path) -> Vec<PathBuf> {
    std::fs::create_dir_all(to).unwrap();
    logs.iter()
        .map(|log| {
            let copy = to.join(log.file_name().unwrap());
            std::fs::copy(log, &copy).unwrap();
            copy
        })
        .collect()
}

fn sf(args: &[&str], path: &Path) -> Command {
    let mut cmd = Command::new(artifact("sf"));
    cmd.args(args).arg(path);
    cmd
}

/// Every command that reads logs, as `(name, arguments, reads the file itself)`.
const COMMANDS: [(&str, &[&str], bool); 7] = [
    ("ls", &["ls"], false),
    ("dump", &["dump"], true),
    ("hang", &["hang"], false),
    ("frontier", &["frontier"], false),
    ("slow", &["slow"], false),
    ("net", &["net"], false),
    ("kernels", &["kernels"], false),
];

#[test]
fn crafted_header_fields_are_refused_by_name_in_bounded_time_and_memory() {
    let (root, logs) = real_job("crafted-fields");
    // (field, offset, little-endian bytes): each far outside what a log can hold, with the
    // header's CRC made to match, as a crafted file would be.
    let fields: [(&str, usize, Vec<u8>); 12] = [
        ("world_size", header::WORLD_SIZE, i32::MAX.to_le_bytes().to_vec()),
        ("global_rank", header::GLOBAL_RANK, (i32::MAX - 1).to_le_bytes().to_vec()),
        ("local_rank", header::LOCAL_RANK, i32::MAX.to_le_bytes().to_vec()),
        ("slot_count", header::SLOT_COUNT, u32::MAX.to_le_bytes().to_vec()),
        ("ring_capacity", header::RING_CAPACITY, u32::MAX.to_le_bytes().to_vec()),
        ("comm_slots", header::COMM_SLOTS, u32::MAX.to_le_bytes().to_vec()),
        ("comm_slot_size", header::COMM_SLOT_SIZE, (1u32 << 31).to_le_bytes().to_vec()),
        ("comm_table_offset", header::COMM_TABLE_OFFSET, u64::MAX.to_le_bytes().to_vec()),
        ("records_offset", header::RECORDS_OFFSET, (1u64 << 40).to_le_bytes().to_vec()),
        ("header_size", header::HEADER_SIZE, u32::MAX.to_le_bytes().to_vec()),
        ("slot_size", header::SLOT_SIZE, 1u32.to_le_bytes().to_vec()),
        ("pid", header::PID, u32::MAX.to_le_bytes().to_vec()),
    ];
    let mut runs = 0;
    for (field, offset, value) in &fields {
        let dir = root.join(format!("crafted-{field}"));
        let copies = copy_job(&logs, &dir);
        let mut log = std::fs::read(&copies[0]).unwrap();
        log[*offset..*offset + value.len()].copy_from_slice(value);
        reseal_header(&mut log);
        std::fs::write(&copies[0], &log).unwrap();
        for (command, args, on_file) in COMMANDS {
            let target = if on_file { &copies[0] } else { &dir };
            let m = run_measured(&mut sf(args, target), &root);
            let what = format!("sf {command} with {field} crafted: {}\n{}", m.status, m.stderr);
            // One scheme for every command: a log sf refuses is an error, status 1.
            assert_eq!(m.status.code(), Some(1), "{what}");
            let named = format!("{}: header field {field} is ", copies[0].display());
            assert!(m.stderr.contains(&named), "{what}\nexpected: {named}");
            assert!(m.elapsed < TIME_BOUND, "{what}\ntook {:?}", m.elapsed);
            assert!(m.max_rss_kib < RSS_BOUND_KIB, "{what}\npeak RSS {} KiB", m.max_rss_kib);
            runs += 1;
        }
    }
    assert_eq!(runs, 84);
    let _ = std::fs::remove_dir_all(&root);
}

/// A header that claims the largest ring a log may have, over a sparse file that really
/// is that long, with the committed count, the live table and the stage table at their
/// worst: a scan must cost what the file holds, not what it claims.
#[test]
fn a_crafted_sparse_giant_costs_what_it_holds_not_what_it_claims() {
    let (root, logs) = real_job("crafted-giant");
    let dir = root.join("giant");
    let copies = copy_job(&logs, &dir);
    let mut head = std::fs::read(&copies[0]).unwrap()[..format::records_offset()].to_vec();
    bytes::put_u32(&mut head, header::SLOT_COUNT, format::caps::SLOT_COUNT);
    reseal_header(&mut head);
    bytes::put_u64(&mut head, live::COMMITTED, u64::MAX);
    bytes::put_u64(&mut head, live::CURRENT_STAGE, u64::MAX);
    bytes::put_u64(&mut head, live::TICKS_PER_SEC, f64::NAN.to_bits());
    for slot in 0..format::COMM_SLOTS {
        let at = format::HEADER_SIZE + slot * format::COMM_SLOT_SIZE;
        head[at..at + format::COMM_SLOT_SIZE].fill(0xff); // every key taken, every count at its maximum
    }
    let file = std::fs::File::create(&copies[0]).unwrap();
    file.set_len(format::file_len(format::caps::SLOT_COUNT) as u64).unwrap(); // 8 GiB, all hole
    std::os::unix::fs::FileExt::write_all_at(&file, &head, 0).unwrap();
    drop(file);
    for (command, args, on_file) in COMMANDS {
        let target = if on_file { &copies[0] } else { &dir };
        let m = run_measured(&mut sf(args, target), &root);
        let what = format!("sf {command} on an 8 GiB sparse crafted log: {}\n{}", m.status, m.stderr);
        assert!(m.status.code().is_some(), "{what}");
        assert!(m.elapsed < TIME_BOUND, "{what}\ntook {:?}", m.elapsed);
        assert!(m.max_rss_kib < RSS_BOUND_KIB, "{what}\npeak RSS {} KiB", m.max_rss_kib);
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// A rank log on tmpfs laid out sparse (only pages holding data are written), its ring
/// grown to 65536 slots: a valid log whose holes hold no pages, whatever the writer does.
fn sparse_copy(log: &Path, to: &Path) {
    let mut data = std::fs::read(log).unwrap();
    let committed = bytes::get_u64(&data, live::COMMITTED);
    let slots = bytes::get_u32(&data, header::SLOT_COUNT);
    assert!(committed < slots as u64, "the ring has not wrapped, so seq s still sits in slot s - 1");
    // The history ring moves to where a 65,536-slot event ring ends, and grows with it
    // (nor has it wrapped: its seq s still sits in its slot s - 1).
    let history = data.split_off(format::history_offset(slots));
    bytes::put_u32(&mut data, header::SLOT_COUNT, 65_536);
    bytes::put_u32(&mut data, header::HISTORY_SLOT_COUNT, format::history_slots(65_536));
    bytes::put_u64(&mut data, header::HISTORY_OFFSET, format::history_offset(65_536) as u64);
    reseal_header(&mut data);
    let file = std::fs::File::create(to).unwrap();
    file.set_len(format::file_len(65_536) as u64).unwrap();
    for (region, at) in [(&data, 0), (&history, format::history_offset(65_536))] {
        for (i, page) in region.chunks(4096).enumerate() {
            if page.iter().any(|&b| b != 0) {
                std::os::unix::fs::FileExt::write_all_at(&file, page, (at + i * 4096) as u64).unwrap();
            }
        }
    }
}

fn blocks(path: &Path) -> u64 {
    std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(path).unwrap())
}

#[test]
fn reading_a_sparse_log_on_tmpfs_allocates_none_of_its_holes() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("SKIPPED reading_a_sparse_log_on_tmpfs_allocates_none_of_its_holes: no /dev/shm on this machine");
        return;
    }
    let (root, logs) = real_job("sparse");
    let dir = TempDir(shm.join(format!("sf-it-{}-sparse", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let copies: Vec<PathBuf> = logs
        .iter()
        .map(|log| {
            let copy = dir.join(log.file_name().unwrap().to_str().unwrap());
            sparse_copy(log, &copy);
            copy
        })
        .collect();
    let before: Vec<u64> = copies.iter().map(|c| blocks(c)).collect();
    let full_blocks = format::file_len(65_536) as u64 / 512;
    assert!(before[0] < full_blocks / 4, "the copy is sparse: {} of {full_blocks} blocks", before[0]);
    let dump = run_ok(&mut sf(&["dump"], &copies[0]));
    assert!(String::from_utf8_lossy(&dump.stdout).contains("nccl_call"), "the records read back");
    for args in [&["ls"][..], &["hang"], &["ls", "--json"], &["slow"], &["kernels"], &["net"]] {
        let _ = sf(args, &dir.0).output().unwrap();
    }
    let after: Vec<u64> = copies.iter().map(|c| blocks(c)).collect();
    assert_eq!(after, before, "st_blocks grew: sf allocated tmpfs pages by reading holes");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_log_truncated_while_sf_reads_it_never_kills_sf() {
    let root = log_root("truncated");
    // A full, wrapped ring, so every read covers the whole file.
    run_ok(preloaded(&trainer_sim(), &root, "job").args(trainer_args(2, 60)).env("SF_LOG_RECORDS", "1024"));
    let logs = rank_logs(&root, "job");
    let work = root.join("work");
    let copies = copy_job(&logs, &work);
    let original = std::fs::read(&copies[0]).unwrap();
    let stop = AtomicBool::new(false);
    let (mut signals, mut runs) = (Vec::new(), 0);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let file = std::fs::OpenOptions::new().write(true).open(&copies[0]).unwrap();
            let mut cut = 0usize;
            while !stop.load(Ordering::Relaxed) {
                cut = (cut + 7919) % original.len();
                file.set_len(cut as u64).unwrap();
                std::thread::yield_now();
                std::os::unix::fs::FileExt::write_all_at(&file, &original, 0).unwrap();
            }
        });
        let deadline = Instant::now() + Duration::from_secs(4);
        while Instant::now() < deadline || runs < 40 {
            for args in [&["dump"][..], &["ls"], &["dump", "--json"]] {
                let status = sf(args, &copies[0]).stdout(Stdio::null()).stderr(Stdio::null()).status().unwrap();
                if !matches!(status.code(), Some(0 | 1)) {
                    signals.push(format!("sf {args:?}: {status}"));
                }
                runs += 1;
            }
            let status = sf(&["hang"], &work).stdout(Stdio::null()).stderr(Stdio::null()).status().unwrap();
            if status.code().is_none() {
                signals.push(format!("sf hang: {status}"));
            }
            runs += 1;
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(signals.is_empty(), "{} of {runs} runs ended abnormally: {signals:?}", signals.len());
    let _ = std::fs::remove_dir_all(&root);
}

/// Kills the launcher and, through PR_SET_PDEATHSIG, its ranks.
struct Job(Child);

impl Drop for Job {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the launcher this test started, which may be stopped.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGCONT) };
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ls_row(ls: &serde_json::Value, rank: i64) -> serde_json::Value {
    ls["ranks"].as_array().into_iter().flatten().find(|r| r["rank"] == rank).cloned().unwrap_or_default()
}

fn rank_state(ls: &serde_json::Value, rank: i64) -> String {
    ls_row(ls, rank)["liveness"].as_str().unwrap_or_default().to_string()
}

fn hang_state(report: &serde_json::Value, rank: i64) -> String {
    let row = report["ranks"].as_array().into_iter().flatten().find(|r| r["rank"] == rank);
    row.map_or(String::new(), |r| r["state"].as_str().unwrap_or_default().to_string())
}

#[test]
fn a_rank_killed_with_kill_9_is_dead_the_moment_sf_looks() {
    let _serial = one_at_a_time();
    let root = log_root("killed");
    let job = Job(preloaded(&trainer_sim(), &root, "job")
        .args(["--ranks", "3", "--steps", "100000", "--stage-ms", "data=5,fwd=5,bwd=10,callbacks=1,optim=2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap());
    let dir = root.join("job");
    let deadline = Instant::now() + Duration::from_secs(30);
    let victim = loop {
        let logs = rank_logs(&root, "job");
        let ready = logs.len() == 3 && logs.iter().all(|p| RankLog::open(p).is_ok_and(|l| l.live().committed > 50));
        if ready {
            break RankLog::open(&logs[1]).unwrap();
        }
        assert!(Instant::now() < deadline, "job never got going");
        std::thread::sleep(Duration::from_millis(10));
    };
    let ls = |dir: &Path| -> serde_json::Value {
        serde_json::from_slice(&sf(&["ls", "--json"], dir).output().unwrap().stdout).unwrap()
    };
    assert_eq!(rank_state(&ls(&dir), 1), "live", "before the kill");
    // Stop the launcher first, as a wedged launcher would be: the victim stays an unreaped
    // zombie and the other ranks stay up.
    let launcher = job.0.id() as i32;
    let pid = victim.header.pid as i32;
    // SAFETY: kill(2) on pids this test started; no memory is involved.
    unsafe {
        assert_eq!(libc::kill(launcher, libc::SIGSTOP), 0);
        assert_eq!(libc::kill(pid, libc::SIGKILL), 0);
    }
    let killed = Instant::now();
    // SIGKILL is delivered asynchronously: wait (briefly) until the kernel made it a zombie.
    while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z ")) {
        assert!(killed.elapsed() < Duration::from_secs(2), "SIGKILL never landed");
        std::thread::sleep(Duration::from_millis(1));
    }
    let listed = ls(&dir);
    let (hang_out, looked) = (sf(&["hang", "--json"], &dir).output().unwrap(), killed.elapsed());
    let hung: serde_json::Value = serde_json::from_slice(&hang_out.stdout).unwrap();
    assert_eq!(rank_state(&listed, 1), "dead", "{listed}");
    assert_eq!(hang_state(&hung, 1), "dead", "{hung}");
    assert_eq!(rank_state(&listed, 0), "live", "the others still run: {listed}");
    let age = ls_row(&listed, 1)["heartbeat_age_s"].as_f64().unwrap_or(f64::MAX);
    // Dead on the pid alone: the heartbeat (every 100 ms) was not yet stale (1 s) when sf
    // looked, which is what kept a killed rank "live" before.
    assert!(age < 1.0, "heartbeat {age} s old when sf looked ({looked:?} after the kill): not a test of the pid check");
    eprintln!("dead {looked:?} after kill -9 (heartbeat {age:.3} s old)");
}

#[test]
fn a_fifo_under_a_log_name_is_refused_not_waited_on() {
    let dir = TempDir::new("fifo-log");
    let fifo = dir.join("rank-00000.sflog");
    let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "{}", std::io::Error::last_os_error());
    let m = run_measured(&mut sf(&["dump"], &fifo), &dir.0);
    assert_eq!(m.status.code(), Some(1), "{}", m.stderr);
    assert!(m.stderr.contains(&format!("{}: not a regular file", fifo.display())), "{}", m.stderr);
    assert!(m.elapsed < TIME_BOUND, "took {:?}", m.elapsed);
}
