//! Where a rank's log goes and how big it is: a private directory tree (`private_dir`),
//! a size that fits the filesystem and the file-size limit, every earlier attempt of the
//! job kept up to `SF_KEEP_ATTEMPTS`, finished jobs' logs kept within half the filesystem
//! (`retention`), and nothing of another user's ever touched.
//!
//! ```text
//! <root>/<job id>/rank-00003.sflog            the latest attempt (what sf reads)
//! <root>/<job id>/attempt-2/rank-00003.sflog  the attempts before it, oldest removed first
//! ```
//!
//! When neither `SF_LOG_DIR` nor `SF_LOG_RECORDS` is set, the library makes the default
//! fit: `(local ranks × log size) × 2` must fit both the filesystem's size and its free
//! space (the logs of this job already there count as room, so every local rank reaches
//! the same answer whichever starts first); if it does not, each rank keeps fewer
//! records (a power of two, never below 1024), and if even that does not fit, the logs go
//! to a per-user directory under `$XDG_RUNTIME_DIR` or `/tmp`.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::core::log::format::{self, bytes, header, live, WriterState};
use crate::core::log::host;
use crate::core::log::private_dir::{DirError, Entry, PrivateDir};
use crate::core::log::process_stamp::ProcessStamp;
use crate::core::log::writer::{HeaderInfo, LogWriter};
use crate::core::runtime::config::Config;
use crate::core::runtime::retention;

/// The smallest log the library makes on its own.
pub const MIN_RECORDS: u32 = 1024;

/// A created log and what to say about it.
pub struct Placed {
    pub writer: LogWriter,
    pub path: PathBuf,
    /// The job directory the log is in.
    pub dir: PathBuf,
    pub records: u32,
    /// Lines to print: the size or place chosen (local rank 0 only), a name that was taken.
    pub notes: Vec<String>,
}

/// Who is asking: the settings, this rank's header, the job directory name, how many
/// ranks share the node, and whether this rank speaks for the node.
pub struct Request<'a> {
    pub config: &'a Config,
    pub info: HeaderInfo<'a>,
    pub job_id: &'a str,
    pub file_name: String,
    pub local_ranks: u32,
    pub speaks_for_node: bool,
    /// `$XDG_RUNTIME_DIR`, for the fallback.
    pub runtime_dir: Option<PathBuf>,
}

/// Why a log was not created: one line to say, and whether the reason is only that
/// another live process writes the log of that name (a rank it may yet give up).
#[derive(Debug)]
pub struct Refused {
    pub message: String,
    pub held_by_live: bool,
}

impl From<String> for Refused {
    fn from(message: String) -> Refused {
        Refused { message, held_by_live: false }
    }
}

/// Creates the rank's log, or says in one line why it cannot (the rank then records
/// nothing and runs on).
pub fn create(req: &Request) -> Result<Placed, Refused> {
    let mode = req.config.log_mode;
    let mut roots = vec![req.config.log_root.clone()];
    if !req.config.log_root_chosen {
        roots.extend(fallback_roots(req.runtime_dir.as_deref()));
    }
    let fsize = fsize_limit();
    let mut passed_over: Vec<String> = Vec::new();
    for root_path in &roots {
        let opened = PrivateDir::open_root(root_path, mode.dir_mode())
            .and_then(|root| Ok((root.subdir(req.job_id, mode.dir_mode())?, root)));
        let (job, root) = match opened {
            Ok(both) => both,
            Err(DirError::Refused(why)) => {
                return Err(
                    format!("{why}; refusing to write logs there (set SF_LOG_DIR to a directory of yours)").into()
                )
            }
            Err(DirError::Unavailable(why)) => {
                passed_over.push(why);
                continue;
            }
        };
        let need = (format::file_len(req.config.log_records) as u64).saturating_mul(req.local_ranks.max(1) as u64);
        let retired = retention::make_room(&root, req.job_id, need);
        let records = if req.config.log_records_chosen {
            check_fsize(req.config.log_records, fsize)?
        } else {
            let (total, free) = job.space().unwrap_or((u64::MAX, u64::MAX));
            let fit = |room| fitting_records(req.config.log_records, req.local_ranks, total, room, fsize);
            // The logs already there are counted only when the free space alone falls
            // short (on a shared filesystem with thousands of ranks it never does).
            let fitted = match fit(free) {
                Some(records) if records == req.config.log_records => Some(records),
                _ => fit(free.saturating_add(job_logs_bytes(&job, req.local_ranks))),
            };
            match fitted {
                Some(records) => records,
                None => {
                    check_fsize(MIN_RECORDS, fsize)?;
                    passed_over.push(format!(
                        "{} has room for less than {} local ranks x {} x 2 ({} of {} free)",
                        root_path.display(),
                        req.local_ranks,
                        mib(format::file_len(MIN_RECORDS) as u64),
                        mib(free),
                        mib(total)
                    ));
                    drop(job);
                    root.remove_empty_dir(req.job_id);
                    continue;
                }
            }
        };
        let mut placed = create_in_job(req, &job, records)?;
        if req.speaks_for_node {
            if let Some(note) = fit_note(req, root_path, &passed_over, records, fsize) {
                placed.notes.insert(0, note);
            }
            placed.notes.extend(retired);
        }
        return Ok(placed);
    }
    Err(format!(
        "no place for the logs: {}; set SF_LOG_DIR to a writable filesystem with room, or lower SF_LOG_RECORDS",
        passed_over.join("; ")
    )
    .into())
}

/// The line local rank 0 prints when the library chose a smaller log or another place.
fn fit_note(req: &Request, root: &Path, passed_over: &[String], records: u32, fsize: Option<u64>) -> Option<String> {
    let default = req.config.log_records;
    let size = format!(
        "each rank keeps {records} records ({}){}",
        mib(format::file_len(records) as u64),
        if records < default { format!(" instead of {default}") } else { String::new() }
    );
    if !passed_over.is_empty() {
        Some(format!(
            "{}; logging to {} instead, {size}; set SF_LOG_DIR to choose",
            passed_over.join("; "),
            root.display()
        ))
    } else if records < default && fsize.is_some_and(|limit| format::file_len(default) as u64 > limit) {
        Some(format!(
            "the file-size limit (ulimit -f) of {} is below a log of {default} records ({}); {size}; set SF_LOG_RECORDS to choose",
            mib(fsize.unwrap_or(0)),
            mib(format::file_len(default) as u64)
        ))
    } else if records < default {
        Some(format!(
            "{} is too small for {} local ranks x {} x 2; {size}; set SF_LOG_RECORDS or SF_LOG_DIR to choose",
            root.display(),
            req.local_ranks,
            mib(format::file_len(default) as u64)
        ))
    } else {
        None
    }
}

/// The per-user directories tried when the default root has no room.
fn fallback_roots(runtime_dir: Option<&Path>) -> Vec<PathBuf> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let mut roots = Vec::new();
    if let Some(dir) = runtime_dir.filter(|d| d.is_absolute()) {
        roots.push(dir.join("stagefrontier"));
    }
    roots.push(PathBuf::from(format!("/tmp/stagefrontier-{uid}")));
    roots
}

/// Records per rank that fit: `default` if `(local ranks × log size) × 2` fits in both
/// `total` and `room` and one log fits under the file-size limit, else the largest power
/// of two from `MIN_RECORDS` that does; None when not even that fits.
pub fn fitting_records(default: u32, local_ranks: u32, total: u64, room: u64, fsize: Option<u64>) -> Option<u32> {
    let fits = |records: u32| {
        let len = format::file_len(records) as u64;
        let need = len.saturating_mul(local_ranks.max(1) as u64).saturating_mul(2);
        need <= total && need <= room && fsize.is_none_or(|limit| len <= limit)
    };
    if fits(default) {
        return Some(default);
    }
    let mut records = default.checked_next_power_of_two().map_or(1 << 31, |p| p / 2).max(MIN_RECORDS);
    while records >= MIN_RECORDS {
        if records < default && fits(records) {
            return Some(records);
        }
        records /= 2;
    }
    None
}

/// The soft `RLIMIT_FSIZE` (`ulimit -f`) in bytes, if there is one. A log beyond it would
/// raise SIGXFSZ while it is being sized, which kills the process: the size is checked
/// against it first, so the library's sizing never exceeds it and needs no signal mask.
pub fn fsize_limit() -> Option<u64> {
    // SAFETY: an all-zero rlimit is a valid value to be overwritten.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: getrlimit writes one rlimit through a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit) } != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(limit.rlim_cur)
}

fn check_fsize(records: u32, fsize: Option<u64>) -> Result<u32, String> {
    let len = format::file_len(records) as u64;
    match fsize {
        Some(limit) if len > limit => Err(format!(
            "the file-size limit (ulimit -f) is {} bytes, below the {} a log of {records} records needs; raise the limit or lower SF_LOG_RECORDS",
            limit, len
        )),
        _ => Ok(records),
    }
}

/// Bytes allocated to this job's rank logs directly in `job` (regular files of ours), at
/// most a few per local rank. A log another local rank is creating right now counts too:
/// its blocks are reserved under the staging name `<log>.<pid>.tmp` and then linked to
/// the log's name, so each file is counted once (by inode) under whichever name it has
/// when it is looked at. Without this, a rank sizing its log while its neighbours are
/// between reserving and linking theirs sees less room than the ranks before it did and
/// picks a smaller log than they did.
fn job_logs_bytes(job: &PrivateDir, local_ranks: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    job.names()
        .iter()
        .filter_map(|n| log_name_of(n).map(|log| (n, log)))
        .take(4 * local_ranks as usize + 16)
        .filter_map(|(name, log)| match job.entry(name) {
            Entry::OurFile(file) => Some(file),
            // A staging name is removed once linked: the file is now at the log's name.
            Entry::Missing if name.as_str() != log => match job.entry(log) {
                Entry::OurFile(file) => Some(file),
                _ => None,
            },
            _ => None,
        })
        .filter_map(|file| file.metadata().ok())
        .filter(|meta| seen.insert((meta.dev(), meta.ino())))
        .map(|meta| meta.blocks() * 512)
        .sum()
}

/// The log a directory entry is or is being staged for: `x.sflog` for `x.sflog` and
/// for `x.sflog.<pid>.tmp`.
fn log_name_of(name: &str) -> Option<&str> {
    if name.ends_with(".sflog") {
        return Some(name);
    }
    let (log, pid) = name.strip_suffix(".tmp")?.rsplit_once('.')?;
    (log.ends_with(".sflog") && !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())).then_some(log)
}

pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// In the job directory: moves an earlier attempt's log aside, steps around anything at
/// the name that is not a log of ours, and creates the log.
fn create_in_job(req: &Request, job: &PrivateDir, records: u32) -> Result<Placed, Refused> {
    let info = HeaderInfo { slot_count: records, ..req.info };
    let file_mode = req.config.log_mode.file_mode();
    remove_stale_staging(job, &req.file_name);
    archive_stepped_around(req, job)?;
    let mut notes = Vec::new();
    let mut name = req.file_name.clone();
    for _attempt in 0..3 {
        match job.entry(&name) {
            Entry::Missing => {}
            Entry::OurFile(file) => match probe(&file) {
                Some(old) if old.is_live_elsewhere(req.info.host) => {
                    return Err(Refused {
                        message: format!(
                            "{} is being written by live process {}",
                            job.path().join(&name).display(),
                            old.pid
                        ),
                        held_by_live: true,
                    })
                }
                Some(_) => {
                    archive(job, &req.file_name, &name, req.config.keep_attempts, req.config.log_mode.dir_mode())?
                }
                None => {
                    name = step_around(
                        job,
                        &req.file_name,
                        req.info.pid,
                        "a file that is not a stagefrontier log",
                        &mut notes,
                    )
                }
            },
            Entry::Foreign(what) => name = step_around(job, &req.file_name, req.info.pid, &what, &mut notes),
        }
        match LogWriter::create_in(job, &name, &info, file_mode) {
            Ok(writer) => {
                return Ok(Placed {
                    writer,
                    path: job.path().join(&name),
                    dir: job.path().to_path_buf(),
                    records,
                    notes,
                })
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(creation_error(job, &name, &info, &e).into()),
        }
    }
    Err(format!("cannot create {}: it keeps reappearing", job.path().join(&name).display()).into())
}

/// Renames this process's live log `from` to `to` in the job directory `dir` (the job
/// declared another rank than its launcher's variables gave): an earlier attempt's log at
/// `to` goes to `attempt-N/` first; a log another live process writes there, or anything
/// not a log of ours, stays, and the log keeps its name.
pub fn rename_live_log(dir: &Path, from: &str, to: &str, config: &Config, host: &str) -> Result<(), String> {
    let mode = config.log_mode.dir_mode();
    let job = PrivateDir::open_root(dir, mode).map_err(|e| e.message().to_string())?;
    for _attempt in 0..3 {
        match job.entry(to) {
            Entry::Missing => {}
            Entry::OurFile(file) => match probe(&file) {
                Some(old) if old.is_live_elsewhere(host) => {
                    return Err(format!("{} is being written by live process {}", dir.join(to).display(), old.pid))
                }
                Some(_) => archive(&job, to, to, config.keep_attempts, mode)?,
                None => return Err(format!("{} is not a stagefrontier log", dir.join(to).display())),
            },
            Entry::Foreign(what) => return Err(format!("{} is {what}", dir.join(to).display())),
        }
        match job.move_to(from, &job, to) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
            Err(e) => return Err(format!("cannot rename {} to {to}: {e}", dir.join(from).display())),
        }
    }
    Err(format!("cannot rename {}: {to} keeps reappearing", dir.join(from).display()))
}

/// The name used instead of one taken by something that is not our log (never renamed,
/// reused or removed: it may be another user's trap, or another tool's file).
fn step_around(job: &PrivateDir, name: &str, pid: u32, what: &str, notes: &mut Vec<String>) -> String {
    let stem = name.strip_suffix(".sflog").unwrap_or(name);
    let other = format!("{stem}.p{pid}.sflog");
    notes.push(format!(
        "{} is {what}, not a log of this user: left alone; logging to {} instead",
        job.path().join(name).display(),
        job.path().join(&other).display()
    ));
    other
}

fn creation_error(job: &PrivateDir, name: &str, info: &HeaderInfo, e: &io::Error) -> String {
    let path = job.path().join(name);
    let len = format::file_len(info.slot_count) as u64;
    match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG) => {
            let (total, free) = job.space().unwrap_or((0, 0));
            format!(
                "cannot reserve {} for {}: {e}; {} has {} free of {}; set SF_LOG_DIR to a larger filesystem or lower SF_LOG_RECORDS (now {})",
                mib(len),
                path.display(),
                job.path().display(),
                mib(free),
                mib(total),
                info.slot_count
            )
        }
        _ => format!("cannot create {}: {e}", path.display()),
    }
}

/// `<name>.<pid>.tmp` files a creation left behind when its process died before removing
/// them (kill -9 between the two steps); a live process's are its own business.
fn remove_stale_staging(job: &PrivateDir, name: &str) {
    let prefix = format!("{name}.");
    for entry in job.names() {
        let pid = entry.strip_prefix(&prefix).and_then(|rest| rest.strip_suffix(".tmp")).and_then(|p| p.parse().ok());
        if pid.is_some_and(|pid| !host::process_exists(pid)) {
            job.remove(&entry);
        }
    }
}

/// Whether `entry` names one of the logs of the rank whose log name is `name`: `name`
/// itself, or `<stem>.p<pid>.sflog` written where something else had the name.
fn is_rank_log_name(entry: &str, name: &str) -> bool {
    let pid = name
        .strip_suffix(".sflog")
        .and_then(|stem| entry.strip_prefix(stem))
        .and_then(|rest| rest.strip_prefix(".p"))
        .and_then(|rest| rest.strip_suffix(".sflog"));
    entry == name || pid.is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// Moves an earlier attempt's log `moving` (this rank's, whose log name is `name`) into
/// `attempt-N/`, N one more than the newest attempt holding a log of this rank, then
/// removes this rank's oldest attempts beyond `keep` in all (the new log counts as one).
fn archive(job: &PrivateDir, name: &str, moving: &str, keep: u32, dir_mode: u32) -> Result<(), String> {
    let holds_rank = |dir: &PrivateDir| dir.names().iter().any(|n| is_rank_log_name(n, name));
    let mut held: Vec<u32> = job
        .names()
        .iter()
        .filter_map(|n| n.strip_prefix("attempt-")?.parse().ok())
        .filter(|n: &u32| job.subdir(&format!("attempt-{n}"), dir_mode).is_ok_and(|d| holds_rank(&d)))
        .collect();
    held.sort_unstable();
    let old = job.path().join(moving);
    if keep <= 1 {
        job.remove(moving);
    } else {
        let next = held.last().map_or(1, |n| n + 1);
        let dir = job.subdir(&format!("attempt-{next}"), dir_mode).map_err(|e| e.message().to_string())?;
        job.move_to(moving, &dir, moving).map_err(|e| format!("cannot move {} aside: {e}", old.display()))?;
        held.push(next);
    }
    let excess = held.len().saturating_sub(keep.saturating_sub(1) as usize);
    for n in &held[..excess] {
        let dir_name = format!("attempt-{n}");
        if let Ok(dir) = job.subdir(&dir_name, dir_mode) {
            dir.names().iter().filter(|e| is_rank_log_name(e, name)).for_each(|e| dir.remove(e));
        }
        job.remove_empty_dir(&dir_name);
    }
    Ok(())
}

/// Logs this rank wrote under another name in earlier attempts (`<stem>.p<pid>.sflog`) go
/// to `attempt-N/` like any earlier attempt's.
fn archive_stepped_around(req: &Request, job: &PrivateDir) -> Result<(), String> {
    let (name, mode) = (&req.file_name, req.config.log_mode.dir_mode());
    for entry in job.names().iter().filter(|e| *e != name && is_rank_log_name(e, name)) {
        if let Entry::OurFile(file) = job.entry(entry) {
            if probe(&file).is_some_and(|old| !old.is_live_elsewhere(req.info.host)) {
                archive(job, name, entry, req.config.keep_attempts, mode)?;
            }
        }
    }
    Ok(())
}

/// What an existing log's header says about its writer.
pub struct OldLog {
    pub pid: u32,
    pub host: String,
    pub running: bool,
    pub exited: bool,
    pub stamp: ProcessStamp,
    /// Wall-clock ns of its last heartbeat, else of its start: when it was last written.
    pub last_written_ns: u64,
}

impl OldLog {
    /// Another live process on this host still writes it (an exec'd helper with the same
    /// identity): it must not be disturbed.
    fn is_live_elsewhere(&self, here: &str) -> bool {
        self.running && self.host == here && self.pid != std::process::id() && host::process_exists(self.pid)
    }

    /// It can no longer change: its writer exited through `exit()`, or the very process
    /// that wrote it is gone (its stamp says so for certain), as `sf` decides a log is
    /// settled. A log whose writer cannot be told gone counts as live.
    pub fn finished(&self) -> bool {
        self.stamp.writer_settled(self.pid, self.exited)
    }
}

/// Reads an existing file's header with `pread` (no mapping, nothing that can fault);
/// None when it is not a stagefrontier log.
pub fn probe(file: &File) -> Option<OldLog> {
    let mut head = [0u8; live::WRITER_STATE + 8];
    file.read_exact_at(&mut head, 0).ok()?;
    let state = WriterState::from_u64(bytes::get_u64(&head, live::WRITER_STATE));
    (head[..8] == format::MAGIC).then(|| OldLog {
        pid: bytes::get_u32(&head, header::PID),
        host: bytes::get_str(&head, header::HOST, format::HOST_LEN),
        running: state == Some(WriterState::Running),
        exited: state == Some(WriterState::Exited),
        stamp: ProcessStamp::from_header(&head),
        last_written_ns: bytes::get_u64(&head, live::HEARTBEAT_WALL_NS)
            .max(bytes::get_u64(&head, header::BASE_WALL_NS)),
    })
}

/// Ranks on this node, from the launcher (torchrun, Open MPI, Slurm); else the world size,
/// capped at 8, a typical node.
pub fn local_ranks(var: impl Fn(&str) -> Option<String>, world_size: i32) -> u32 {
    ["LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"]
        .iter()
        .find_map(|name| var(name)?.trim().parse::<u32>().ok().filter(|n| (1..=4096).contains(n)))
        .unwrap_or(world_size.clamp(1, 8) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_default_fits_or_shrinks_by_powers_of_two() {
        let default_len = format::file_len(65_536) as u64;
        assert_eq!(fitting_records(65_536, 8, 24 << 30, 24 << 30, None), Some(65_536));
        // Docker's 64 MiB /dev/shm for 8 ranks: 8 x 8.4 MiB x 2 does not fit.
        let shrunk = fitting_records(65_536, 8, 64 * MIB, 64 * MIB, None).unwrap();
        assert!(shrunk < 65_536 && shrunk.is_power_of_two() && shrunk >= MIN_RECORDS, "{shrunk}");
        assert!(format::file_len(shrunk) as u64 * 16 <= 64 * MIB);
        assert!(format::file_len(shrunk * 2) as u64 * 16 > 64 * MIB, "the largest that fits");
        assert_eq!(fitting_records(65_536, 8, 24 << 30, MIB, None), None, "not even 1024 records fit the free space");
        assert_eq!(fitting_records(65_536, 1, 24 << 30, 24 << 30, Some(default_len)), Some(65_536));
        assert_eq!(fitting_records(65_536, 1, 24 << 30, 24 << 30, Some(default_len - 1)), Some(32_768));
        assert_eq!(fitting_records(65_536, 1, 24 << 30, 24 << 30, Some(4096)), None);
    }

    #[test]
    fn logs_being_created_count_as_room_once_each() {
        assert_eq!(log_name_of("rank-00001.sflog.4242.tmp"), Some("rank-00001.sflog"));
        for no in ["rank-00001.sflog.tmp", "rank-00001.sflog.x1.tmp", "other.4242.tmp", "rank-00001.sflog.4242"] {
            assert_eq!(log_name_of(no), None, "{no}");
        }
        let base = std::env::temp_dir().join(format!("sf-place-{}-room", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let job = PrivateDir::open_root(&base, 0o700).unwrap().subdir("job", 0o700).unwrap();
        let reserve = |name: &str| {
            let file = File::create(job.path().join(name)).unwrap();
            // SAFETY: posix_fallocate on a file we just created and still hold open.
            assert_eq!(unsafe { libc::posix_fallocate(std::os::fd::AsRawFd::as_raw_fd(&file), 0, MIB as i64) }, 0);
        };
        reserve("rank-00000.sflog");
        // Rank 1 between linking its log into place and removing the staging name.
        reserve("rank-00001.sflog.4242.tmp");
        std::fs::hard_link(job.path().join("rank-00001.sflog.4242.tmp"), job.path().join("rank-00001.sflog")).unwrap();
        // Rank 2 still reserving.
        reserve("rank-00002.sflog.4343.tmp");
        reserve("unrelated.tmp");
        let counted = job_logs_bytes(&job, 4);
        // What the filesystem allocated (a compressing one may allocate less than asked).
        let blocks = |name: &str| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(job.path().join(name)).unwrap().blocks() * 512
        };
        let three = blocks("rank-00000.sflog") + blocks("rank-00001.sflog") + blocks("rank-00002.sflog.4343.tmp");
        std::fs::remove_dir_all(&base).unwrap();
        assert_eq!(counted, three, "three logs' blocks, each once");
    }

    #[test]
    fn a_ranks_log_names() {
        let name = "rank-00003.sflog";
        for yes in ["rank-00003.sflog", "rank-00003.p42.sflog"] {
            assert!(is_rank_log_name(yes, name), "{yes}");
        }
        for no in ["rank-00030.sflog", "rank-00003.p.sflog", "rank-00003.px.sflog", "rank-00003.sflog.1.tmp"] {
            assert!(!is_rank_log_name(no, name), "{no}");
        }
    }

    #[test]
    fn local_ranks_come_from_the_launcher() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(local_ranks(env(&[("LOCAL_WORLD_SIZE", "4")]), 64), 4);
        assert_eq!(local_ranks(env(&[("SLURM_NTASKS_PER_NODE", "2")]), 64), 2);
        assert_eq!(local_ranks(env(&[("LOCAL_WORLD_SIZE", "x")]), 64), 8);
        assert_eq!(local_ranks(env(&[]), 2), 2);
        assert_eq!(local_ranks(env(&[]), -1), 1);
    }
}
