//! What finished jobs keep on the node. Logs outlive their jobs (that is what `sf` reads
//! after a crash), but nothing else removes them, and on a node's `/dev/shm` they take
//! memory the next jobs need: a program whose shared memory finds the filesystem full dies
//! of SIGBUS. So when a job starts, the logs of finished jobs in its log root plus the
//! starting job's own take at most half of the filesystem: the oldest finished jobs' logs
//! are removed first until they fit.
//!
//! Only what is surely ours and surely finished is removed: directories of ours (the
//! `private_dir` checks), regular files of ours carrying the log magic, and only in jobs
//! whose every log is finished (`OldLog::finished`, the test `sf` uses for a settled log);
//! a job with one live writer, or a log being created, keeps everything. The starting
//! job's earlier attempts are `SF_KEEP_ATTEMPTS`'s to keep. `sf snapshot` is the way to
//! keep a job's logs for longer (docs/security.md).

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;

use super::place::{mib, probe};
use crate::core::log::private_dir::{Entry, PrivateDir};

/// One earlier job's directory in the log root, as found.
struct FinishedJob {
    name: String,
    /// When its newest log was last written (wall-clock ns).
    last_written_ns: u64,
    bytes: u64,
    /// Its logs: (`attempt-N` directory or None for the job directory, file name, inode).
    logs: Vec<(Option<String>, String, u64)>,
}

/// Before the starting job `job_id` creates logs of `need` bytes in all on this node
/// under `root`: removes finished jobs' logs, oldest first, until they and `need` fit in
/// half the filesystem. Says what it removed, if anything, in one line.
pub fn make_room(root: &PrivateDir, job_id: &str, need: u64) -> Option<String> {
    let (total, _) = root.space()?;
    let mut jobs: Vec<FinishedJob> =
        root.names().into_iter().filter(|name| name != job_id).filter_map(|name| finished_job(root, name)).collect();
    jobs.sort_by_key(|job| job.last_written_ns);
    let sizes: Vec<u64> = jobs.iter().map(|job| job.bytes).collect();
    let oldest = oldest_to_remove(&sizes, need, total / 2);
    let mut freed = 0;
    for job in &jobs[..oldest] {
        freed += remove_job(root, job);
    }
    (oldest > 0).then(|| {
        format!(
            "removed the logs of {oldest} finished job(s) ({}) from {} so that finished jobs and this one take at most half of its filesystem; `sf snapshot` keeps a job's logs elsewhere",
            mib(freed),
            root.path().display()
        )
    })
}

/// How many of the finished jobs `sizes` (oldest first) must go so that the rest and
/// `need` fit in `budget`.
fn oldest_to_remove(sizes: &[u64], need: u64, budget: u64) -> usize {
    let mut kept: u64 = sizes.iter().sum::<u64>().saturating_add(need);
    let mut removed = 0;
    while kept > budget && removed < sizes.len() {
        kept -= sizes[removed];
        removed += 1;
    }
    removed
}

/// The job directory `name` if it is ours and holds logs, every one of them finished.
fn finished_job(root: &PrivateDir, name: String) -> Option<FinishedJob> {
    let dir = root.existing_subdir(&name).ok()?;
    let mut job = FinishedJob { name, last_written_ns: 0, bytes: 0, logs: Vec::new() };
    let mut seen = HashSet::new();
    for entry in dir.names() {
        if entry.starts_with("attempt-") {
            let attempt = dir.existing_subdir(&entry).ok()?;
            for log in attempt.names() {
                add_log(&attempt, Some(&entry), log, &mut job, &mut seen)?;
            }
        } else {
            add_log(&dir, None, entry, &mut job, &mut seen)?;
        }
    }
    (!job.logs.is_empty()).then_some(job)
}

/// Counts `name` in `dir` into `job` if it is a finished log of ours; None when it shows
/// the job is not finished (a live log, or one being created).
fn add_log(
    dir: &PrivateDir,
    attempt: Option<&str>,
    name: String,
    job: &mut FinishedJob,
    seen: &mut HashSet<u64>,
) -> Option<()> {
    if name.ends_with(".tmp") {
        return None;
    }
    if !name.ends_with(".sflog") {
        return Some(());
    }
    let Entry::OurFile(file) = dir.entry(&name) else { return Some(()) };
    let Some(log) = probe(&file) else { return Some(()) };
    if !log.finished() {
        return None;
    }
    let meta = file.metadata().ok()?;
    if seen.insert(meta.ino()) {
        job.bytes += meta.blocks() * 512;
    }
    job.last_written_ns = job.last_written_ns.max(log.last_written_ns);
    job.logs.push((attempt.map(String::from), name, meta.ino()));
    Some(())
}

/// Removes a finished job's logs, each only if its name still holds the file judged
/// finished (a rerun of the job id may have put a live log there since), then the
/// directories they leave empty. Returns the bytes freed.
fn remove_job(root: &PrivateDir, job: &FinishedJob) -> u64 {
    let Ok(dir) = root.existing_subdir(&job.name) else { return 0 };
    let mut freed = 0;
    for (attempt, name, ino) in &job.logs {
        let opened;
        let holder = match attempt {
            Some(attempt) => match dir.existing_subdir(attempt) {
                Ok(attempt_dir) => {
                    opened = attempt_dir;
                    &opened
                }
                Err(_) => continue,
            },
            None => &dir,
        };
        let Entry::OurFile(file) = holder.entry(name) else { continue };
        let Ok(meta) = file.metadata() else { continue };
        if meta.ino() == *ino && probe(&file).is_some_and(|log| log.finished()) {
            holder.remove(name);
            freed += meta.blocks() * 512;
        }
        if let Some(attempt) = attempt {
            dir.remove_empty_dir(attempt);
        }
    }
    root.remove_empty_dir(&job.name);
    freed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_go_until_the_rest_and_the_new_job_fit_in_the_budget() {
        // Six finished jobs of 40 (oldest first), a new one of 40, half of 256.
        assert_eq!(oldest_to_remove(&[40; 6], 40, 128), 4, "two finished jobs and the new one: 120");
        assert_eq!(oldest_to_remove(&[40, 40], 40, 128), 0, "120 fits");
        assert_eq!(oldest_to_remove(&[100, 10, 10], 40, 128), 1, "the big old one goes first");
        assert_eq!(oldest_to_remove(&[10, 10], 200, 128), 2, "a new job beyond the budget leaves nothing");
        assert_eq!(oldest_to_remove(&[], 200, 128), 0);
    }
}
