//! Which files a job directory holds for `sf` to read.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use crate::core::log::reader::RankLog;

/// A rank log by name: `rank-NNNNN.sflog` or `pid-N.sflog` (or `rank-NNNNN.p<pid>.sflog`
/// where something else had the name). A `.sflog.prev` left by older versions of the
/// library ends otherwise and is left out.
fn is_log_name(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "sflog")
}

/// The log files directly in `dir`, sorted by name. Symbolic links are followed;
/// subdirectories are not searched.
pub fn logs_in(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if is_log_name(&path) && path.is_file() {
            logs.push(path);
        }
    }
    logs.sort();
    Ok(logs)
}

/// An earlier attempt of a job, kept by the library as `<job dir>/attempt-N/`.
#[derive(Debug, serde::Serialize)]
pub struct Attempt {
    pub attempt: u32,
    pub dir: String,
    pub logs: usize,
}

/// The earlier attempts kept in the job directory `dir`, oldest first. The logs directly
/// in `dir` are the latest attempt, which every command reads unless given `attempt-N/`.
pub fn attempts_in(dir: &Path) -> Vec<Attempt> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut attempts: Vec<Attempt> = entries
        .filter_map(|e| {
            let path = e.ok()?.path();
            let attempt = path.file_name()?.to_str()?.strip_prefix("attempt-")?.parse().ok()?;
            let logs = logs_in(&path).ok()?.len();
            (logs > 0).then(|| Attempt { attempt, dir: path.display().to_string(), logs })
        })
        .collect();
    attempts.sort_by_key(|a| a.attempt);
    attempts
}

/// How deep below a directory given on the command line logs are looked for: a snapshot
/// is `DEST/<host>/<job id>/`, a log root `<root>/<job id>/`, with room for one more level
/// (`DEST/<date>/<host>/<job id>/`).
const MAX_DEPTH: usize = 4;

/// The directories given to a command, as one value so a report can name them all, and
/// which job to read when searching them finds the logs of several.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dirs(pub Vec<PathBuf>, pub Pick);

/// Which job a command reads when searching its directories finds the logs of several.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pick {
    /// None: the command names the jobs and asks for one (`sf ls` lists them).
    #[default]
    Only,
    /// The newest, the job that started last (`--latest`).
    Latest,
}

impl Dirs {
    /// Directories of one job, or searched for one.
    pub fn new(dirs: Vec<PathBuf>) -> Dirs {
        Dirs(dirs, Pick::Only)
    }

    /// One directory.
    pub fn one(dir: impl Into<PathBuf>) -> Dirs {
        Dirs::new(vec![dir.into()])
    }

    /// The directories as the reports' `dir` field names them: space-separated.
    pub fn display(&self) -> String {
        self.0.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(" ")
    }
}

/// A rank log found for a command, with the moment it is to be judged at when it is a
/// snapshot's copy.
#[derive(Clone, Debug)]
pub struct LogFile {
    pub path: PathBuf,
    pub taken: Option<crate::report::moment::Taken>,
}

/// The rank logs of one job for `sf <command>`, from the directories `dirs`: each either a
/// job directory (its logs are read, earlier attempts in `attempt-N/` are not), or a
/// directory searched for job directories up to `MAX_DEPTH` levels down (a snapshot
/// `DEST/` with one subdirectory per node, a log root). The logs found are grouped by the
/// job id their headers name; logs of more than one job found by searching are an error
/// that lists the jobs, unless `dirs` picks the newest (`--latest`). A rank found twice
/// (two snapshots of a node) is read from the copy taken last. Missing ranks, the hosts
/// and the job picked are notes (`report::observer`), once per run.
pub fn job_logs(dirs: &Dirs, command: &str) -> Result<Vec<LogFile>, String> {
    let (found, searched) = find(dirs, command)?;
    let chosen = one_job(found, searched, dirs, command)?;
    // Gathered from several places, the notes say what the gathering missed. One job
    // directory is one node's view: said too, but for the commands whose own report names
    // the missing ranks (ls, hang) or that read one node by design (snapshot).
    if searched || !matches!(command, "ls" | "hang" | "snapshot") {
        super::observer::say_once(&chosen.notes);
    }
    Ok(chosen.files)
}

/// The logs in the directories `dirs`, or found below them, and whether any directory was
/// searched (or several given): then the logs may be of several jobs.
fn find(dirs: &Dirs, command: &str) -> Result<(Vec<Candidate>, bool), String> {
    let mut found = Vec::new();
    let mut searched = dirs.0.len() > 1;
    for dir in &dirs.0 {
        let fail = |message: String| format!("{}: {message}", dir.display());
        if !dir.is_dir() {
            let what = match std::fs::metadata(dir) {
                Err(e) => format!("cannot read: {e}"),
                Ok(_) if is_log_name(dir) => "one rank log, not a directory".to_string(),
                Ok(_) => "not a directory".to_string(),
            };
            return Err(fail(format!(
                "{what}; sf {command} reads every rank log of a job: pass the job directory, \
                 $SF_LOG_DIR/<job id>/, or the directories holding it (sf snapshot's DEST)"
            )));
        }
        let logs = logs_in(dir).map_err(|e| fail(format!("cannot list: {e}")))?;
        let before = found.len();
        if logs.is_empty() {
            searched = true;
            for job_dir in job_dirs_below(dir) {
                add_job_dir(&job_dir, logs_in(&job_dir).unwrap_or_default(), &mut found)?;
            }
        } else {
            add_job_dir(dir, logs, &mut found)?;
        }
        if found.len() == before {
            return Err(no_logs_in(dir));
        }
    }
    Ok((found, searched))
}

/// One job whose logs were found, for `sf ls`'s list of jobs.
#[derive(Debug)]
pub struct FoundJob {
    pub job_id: String,
    pub logs: Vec<LogFile>,
}

/// The jobs found by `sf ls`, newest first, and the logs whose header names no job (it
/// cannot be read).
#[derive(Debug)]
pub struct FoundJobs {
    pub jobs: Vec<FoundJob>,
    pub unreadable: Vec<LogFile>,
}

/// The jobs whose logs are in or below `dirs`, newest first (as `--latest` picks), when
/// searching them found more than one and `dirs` picks none: `sf ls` lists them instead of
/// one job's ranks. `None` for the logs of one job, or with `--latest`.
pub fn jobs_found(dirs: &Dirs) -> Result<Option<FoundJobs>, String> {
    if dirs.1 == Pick::Latest {
        return Ok(None);
    }
    let (found, searched) = find(dirs, "ls")?;
    let jobs = by_job(&found);
    if !searched || jobs.len() < 2 {
        return Ok(None);
    }
    let files = |logs: &[&Candidate]| logs.iter().map(|c| c.file.clone()).collect();
    Ok(Some(FoundJobs {
        jobs: jobs.iter().map(|(job_id, logs)| FoundJob { job_id: job_id.to_string(), logs: files(logs) }).collect(),
        unreadable: files(&found.iter().filter(|c| c.who.is_none()).collect::<Vec<_>>()),
    }))
}

/// Every log in or below `dirs`, of any job (earlier attempts left out), sorted: what a
/// node's `sf exporter` watches.
pub fn logs_below(dirs: &Dirs) -> Vec<PathBuf> {
    let mut logs = Vec::new();
    for dir in &dirs.0 {
        logs.extend(logs_in(dir).unwrap_or_default());
        for job_dir in job_dirs_below(dir) {
            logs.extend(logs_in(&job_dir).unwrap_or_default());
        }
    }
    logs.sort();
    logs.dedup();
    logs
}

/// The paths of `job_logs`, for commands that judge no log against a moment.
pub fn job_log_paths(dirs: &Dirs, command: &str) -> Result<Vec<PathBuf>, String> {
    Ok(job_logs(dirs, command)?.into_iter().map(|f| f.path).collect())
}

/// The error for a directory with no log in or below it: where logs are written.
pub fn no_logs_in(dir: &Path) -> String {
    let root = crate::core::runtime::config::Config::from_env().0.log_root;
    format!(
        "no rank logs (*.sflog) in {} or up to {MAX_DEPTH} directories below it; logs are written to \
         $SF_LOG_DIR/<job id>/, default /dev/shm/stagefrontier-<uid>/<job id>/ (here: {}/<job id>/)",
        dir.display(),
        root.display()
    )
}

/// A log found, with what its header says about whose it is.
struct Candidate {
    file: LogFile,
    /// `None`: the header cannot be read; the command says why when it opens the file.
    who: Option<Who>,
}

struct Who {
    job_id: String,
    rank: i32,
    world_size: i32,
    host: String,
    /// The wall-clock moment the copy shows: taken, else its last heartbeat.
    as_of_wall_ns: u64,
    /// When the rank's library started (0: no calibration).
    started_wall_ns: u64,
}

/// When `path` is a snapshot's copy, the moment it was taken (its directory's manifest).
fn taken_of(manifest: Option<&crate::report::moment::Manifest>, path: &Path) -> Option<crate::report::moment::Taken> {
    let name = path.file_name()?.to_string_lossy();
    manifest?.logs.iter().find(|t| t.file == name).cloned()
}

/// One log file given by itself, with its snapshot moment when its directory has one.
pub fn log_file(path: &Path) -> Result<LogFile, String> {
    let manifest = match path.parent() {
        Some(dir) => crate::report::moment::manifest_in(dir)?,
        None => None,
    };
    Ok(LogFile { path: path.to_path_buf(), taken: taken_of(manifest.as_ref(), path) })
}

fn add_job_dir(dir: &Path, logs: Vec<PathBuf>, found: &mut Vec<Candidate>) -> Result<(), String> {
    let manifest = crate::report::moment::manifest_in(dir)?;
    for path in logs {
        let taken = taken_of(manifest.as_ref(), &path);
        let who = RankLog::open(&path).ok().map(|log| {
            let h = &log.header;
            Who {
                job_id: h.job_id.clone(),
                rank: h.global_rank,
                world_size: h.world_size,
                host: h.host.clone(),
                as_of_wall_ns: taken.as_ref().map_or_else(|| log.live().heartbeat_wall_ns, |t| t.wall_ns),
                started_wall_ns: h.base_wall_ns,
            }
        });
        found.push(Candidate { file: LogFile { path, taken }, who });
    }
    Ok(())
}

/// Directories below `dir` (not `dir` itself) that hold logs, sorted, down to `MAX_DEPTH`.
/// Symbolic links to directories are not followed (no loops), and earlier attempts
/// (`attempt-N/`) are left out as they are for a job directory.
fn job_dirs_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut level = vec![dir.to_path_buf()];
    for _ in 0..MAX_DEPTH {
        let mut next = Vec::new();
        for d in &level {
            let Ok(entries) = std::fs::read_dir(d) else { continue };
            for entry in entries.flatten() {
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                let attempt = entry.file_name().to_string_lossy().starts_with("attempt-");
                if !is_dir || attempt {
                    continue;
                }
                let path = entry.path();
                if logs_in(&path).is_ok_and(|logs| !logs.is_empty()) {
                    out.push(path);
                } else {
                    next.push(path);
                }
            }
        }
        level = next;
    }
    out.sort();
    out
}

struct Chosen {
    files: Vec<LogFile>,
    notes: Vec<String>,
}

/// The logs `found` grouped by the job their headers name, the newest job first: the one
/// whose first rank started last (ties by job id). A log whose header cannot be read is in
/// no group.
fn by_job(found: &[Candidate]) -> Vec<(&str, Vec<&Candidate>)> {
    let mut jobs: BTreeMap<&str, Vec<&Candidate>> = BTreeMap::new();
    for c in found {
        if let Some(who) = &c.who {
            jobs.entry(who.job_id.as_str()).or_default().push(c);
        }
    }
    let mut jobs: Vec<(&str, Vec<&Candidate>)> = jobs.into_iter().collect();
    // Stable: equal starts keep the job ids' order.
    jobs.sort_by_key(|(_, logs)| Reverse(started_wall_ns(logs)));
    jobs
}

/// When a job started: its first rank's start (0 when no log has a calibration).
fn started_wall_ns(logs: &[&Candidate]) -> u64 {
    logs.iter().filter_map(|c| c.who.as_ref()).map(|w| w.started_wall_ns).filter(|&ns| ns != 0).min().unwrap_or(0)
}

/// The directory of a log, as the messages name it.
fn dir_of(c: &Candidate) -> PathBuf {
    c.file.path.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// The logs of one job, and what to tell the operator about them.
fn one_job(mut found: Vec<Candidate>, searched: bool, dirs: &Dirs, command: &str) -> Result<Chosen, String> {
    let mut notes = Vec::new();
    let jobs = by_job(&found);
    if searched && jobs.len() > 1 {
        let listed: Vec<String> = jobs
            .iter()
            .map(|(job, logs)| {
                let plural = if logs.len() == 1 { "" } else { "s" };
                format!("{job} ({} log{plural}, e.g. in {})", logs.len(), dir_of(logs[0]).display())
            })
            .collect();
        let (newest, logs) = &jobs[0];
        if dirs.1 == Pick::Only {
            let example = match command {
                "snapshot" => "sf snapshot <log root>/<job id> --to DEST".to_string(),
                _ => format!("sf {command} DEST/*/<job id>"),
            };
            return Err(format!(
                "the logs found belong to {} jobs, newest first: {}; add --latest to read the newest \
                 ({newest}), or pass one job's directories, e.g. {example} (sf ls {} lists the jobs)",
                jobs.len(),
                listed.join(", "),
                dirs.display()
            ));
        }
        let started = match started_wall_ns(logs) {
            0 => String::new(),
            ns => format!(", started {}", crate::report::wall::rfc3339_ms(ns)),
        };
        notes.push(format!(
            "reading job {newest}, the newest of {} jobs found{started}; the others: {}",
            jobs.len(),
            listed[1..].join(", ")
        ));
        // The newest job's logs, and the unreadable ones in its directories: the command
        // says what is wrong with them.
        let newest = newest.to_string();
        let its_dirs: BTreeSet<PathBuf> = logs.iter().map(|c| dir_of(c)).collect();
        found.retain(|c| match &c.who {
            Some(who) => who.job_id == newest,
            None => its_dirs.contains(&dir_of(c)),
        });
    }
    // The newest copy of each rank: two snapshots of one node may both be given.
    let mut best: BTreeMap<(String, i32), usize> = BTreeMap::new();
    let mut dropped = vec![false; found.len()];
    for (i, c) in found.iter().enumerate() {
        let Some(who) = c.who.as_ref().filter(|w| w.rank >= 0) else { continue };
        let key = (who.job_id.clone(), who.rank);
        match best.get(&key).copied() {
            None => {
                best.insert(key, i);
            }
            Some(j) => {
                let other = found[j].who.as_ref().expect("ranked");
                let (keep, drop) = if who.as_of_wall_ns > other.as_of_wall_ns { (i, j) } else { (j, i) };
                dropped[drop] = true;
                best.insert(key, keep);
                notes.push(format!(
                    "rank {} has two logs, {} and {}: reading {}, the later",
                    who.rank,
                    found[keep].file.path.display(),
                    found[drop].file.path.display(),
                    found[keep].file.path.display()
                ));
            }
        }
    }
    let kept: Vec<&Candidate> = found.iter().zip(&dropped).filter(|(_, d)| !**d).map(|(c, _)| c).collect();
    let world = kept.iter().filter_map(|c| c.who.as_ref()).map(|w| w.world_size).max().unwrap_or(-1);
    if world > 0 {
        // A log whose header cannot be read still stands for the rank its name gives: the
        // command says what is wrong with it.
        let named = kept.iter().filter(|c| c.who.is_none()).filter_map(|c| rank_in_name(&c.file.path));
        let present: BTreeSet<i32> = kept.iter().filter_map(|c| c.who.as_ref()).map(|w| w.rank).chain(named).collect();
        let missing: Vec<i32> = (0..world).filter(|r| !present.contains(r)).collect();
        if !missing.is_empty() {
            notes.push(format!(
                "ranks {} of the world's {world} have no log here: pass every node's directory \
                 (sf snapshot collects them)",
                crate::report::rank_list::ranges(&missing)
            ));
        }
    }
    let mut hosts: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for who in kept.iter().filter_map(|c| c.who.as_ref()) {
        hosts.entry(who.host.as_str()).or_default().push(who.rank);
    }
    for ranks in hosts.values_mut() {
        ranks.sort_unstable();
        ranks.dedup();
    }
    if hosts.len() > 1 {
        let listed: Vec<String> =
            hosts.iter().map(|(h, ranks)| format!("{h} (ranks {})", crate::report::rank_list::ranges(ranks))).collect();
        notes.push(format!("logs from {} hosts: {}", hosts.len(), listed.join(", ")));
    }
    let files = kept.into_iter().map(|c| c.file.clone()).collect();
    Ok(Chosen { files, notes })
}

/// The rank a log's name gives: `rank-NNNNN.sflog` or `rank-NNNNN.p<pid>.sflog`.
fn rank_in_name(path: &Path) -> Option<i32> {
    let name = path.file_name()?.to_str()?.strip_prefix("rank-")?;
    name.split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sflog_files_count() {
        assert!(is_log_name(Path::new("job/rank-00003.sflog")));
        assert!(is_log_name(Path::new("pid-77.sflog")));
        assert!(!is_log_name(Path::new("job/rank-00003.sflog.prev")));
        assert!(!is_log_name(Path::new("job/.sflog")));
        assert!(!is_log_name(Path::new("job/notes.txt")));
        assert_eq!(rank_in_name(Path::new("job/rank-00003.sflog")), Some(3));
        assert_eq!(rank_in_name(Path::new("job/rank-00012.p77.sflog")), Some(12));
        assert_eq!(rank_in_name(Path::new("job/pid-77.sflog")), None);
    }

    /// Rank 0 of job `job`, started at wall-clock `started_wall_ns`, in `root/<job>/`.
    fn log_of(root: &Path, job: &str, started_wall_ns: u64) -> PathBuf {
        use crate::core::log::identity::Identity;
        use crate::core::log::writer::{HeaderInfo, LogWriter};
        use crate::core::record::clock::{Calibration, ClockSource};
        let identity = Identity { global_rank: 0, world_size: 2, local_rank: 0, job_id: job.into(), source: "env" };
        let calibration = Calibration::new(ClockSource::Monotonic, 1, 1, started_wall_ns, 1e9);
        let info = HeaderInfo {
            identity: &identity,
            pid: 1,
            host: "h",
            calibration: &calibration,
            slot_count: 16,
            ring_capacity: 64,
        };
        std::fs::create_dir_all(root.join(job)).unwrap();
        let path = root.join(job).join("rank-00000.sflog");
        LogWriter::create(&path, &info).unwrap();
        path
    }

    #[test]
    fn latest_reads_the_job_that_started_last_with_the_unreadable_logs_beside_it() {
        let root = std::env::temp_dir().join(format!("sf-discover-jobs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // Job ids in the opposite order of their starts: the order is the starts'.
        let newer = log_of(&root, "a", 2_000_000_000_000_000_000);
        let older = log_of(&root, "b", 1_000_000_000_000_000_000);
        let (torn_newer, torn_older) =
            (root.join("a").join("rank-00001.sflog"), root.join("b").join("rank-00001.sflog"));
        std::fs::write(&torn_newer, b"").unwrap();
        std::fs::write(&torn_older, b"").unwrap();
        let only = job_logs(&Dirs::one(&root), "slow").unwrap_err();
        assert!(only.contains("belong to 2 jobs, newest first: a (1 log, e.g. in"), "{only}");
        assert!(only.contains("add --latest to read the newest (a)"), "{only}");
        let latest = Dirs(vec![root.clone()], Pick::Latest);
        let read: Vec<PathBuf> = job_logs(&latest, "slow").unwrap().into_iter().map(|f| f.path).collect();
        assert_eq!(read, [newer.clone(), torn_newer]);
        let listed = jobs_found(&Dirs::one(&root)).unwrap().expect("two jobs");
        let ids: Vec<&str> = listed.jobs.iter().map(|j| j.job_id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(listed.jobs[1].logs.iter().map(|f| f.path.clone()).collect::<Vec<_>>(), [older]);
        let unreadable: Vec<PathBuf> = listed.unreadable.iter().map(|f| f.path.clone()).collect();
        assert_eq!(unreadable.len(), 2, "{unreadable:?}");
        assert!(jobs_found(&latest).unwrap().is_none(), "--latest reads one job");
        assert!(jobs_found(&Dirs::one(root.join("a"))).unwrap().is_none(), "a job directory is one job");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn job_logs_searches_below_and_says_what_to_pass_instead() {
        let root = std::env::temp_dir().join(format!("sf-discover-{}", std::process::id()));
        let job = root.join("node0").join("job-7");
        std::fs::create_dir_all(&job).unwrap();
        let at_root = job_logs(&Dirs::one(&root), "net").unwrap_err();
        assert!(at_root.starts_with("no rank logs (*.sflog) in"), "{at_root}");
        assert!(at_root.contains("or up to 4 directories below it"), "{at_root}");
        // An unreadable log is still found: the command names what is wrong with it.
        std::fs::write(job.join("rank-00000.sflog"), b"").unwrap();
        std::fs::create_dir_all(job.join("attempt-1")).unwrap();
        std::fs::write(job.join("attempt-1").join("rank-00000.sflog"), b"").unwrap();
        let below: Vec<PathBuf> = job_logs(&Dirs::one(&root), "net").unwrap().into_iter().map(|f| f.path).collect();
        assert_eq!(below, [job.join("rank-00000.sflog")], "earlier attempts are not read");
        assert_eq!(job_log_paths(&Dirs::one(&job), "net").unwrap(), [job.join("rank-00000.sflog")]);
        let file = job_logs(&Dirs::one(job.join("rank-00000.sflog")), "kernels").unwrap_err();
        assert!(file.contains("one rank log, not a directory; sf kernels reads every rank log"), "{file}");
        let gone = job_logs(&Dirs::one(root.join("nope")), "hang").unwrap_err();
        assert!(gone.contains("nope: cannot read: No such file or directory"), "{gone}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
