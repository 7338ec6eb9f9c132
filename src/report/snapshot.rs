//! `sf snapshot DIR... --to DEST`: a consistent copy of a job's rank logs on this node into
//! `DEST/<host>/<job id>/`, with `snapshot.json` saying when each log was copied, so that
//! the copies, gathered from every node into one place, are judged at that moment.
//!
//! Each log is copied by `core::log::copy` (header and live tables, then the whole records:
//! never a torn record), which reads and never waits on the writer, so a wedged rank is
//! copied like a running one.
//!
//! It may run as root (a Slurm epilog) into a shared DEST whose host and job names the
//! job's owner knows in advance, and from a DIR that owner controls, so (`core::log::
//! safe_path`): DEST is walked by descriptor and refused where someone else could redirect
//! it, every file is created new under a random name and renamed into place, only regular
//! files of the job's user are copied (never through a link), and a DEST that is or holds
//! the logs being copied is refused before anything is written there.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::analysis::log::heartbeat::same_host;
use crate::core::log::copy::copy_log;
use crate::core::log::host as local_host;
use crate::core::log::private_dir::{DirError, Entry, PrivateDir};
use crate::core::log::reader::RankLog;
use crate::core::log::safe_path;
use crate::core::record::clock::{monotonic_ns, wall_ns};
use serde::Serialize;

use super::ls::FileError;
use super::Failure;
use crate::report::discover::{self, Dirs};
use crate::report::moment::{self, Manifest, Taken, MANIFEST, MANIFEST_VERSION};
use crate::report::wall::rfc3339_ms;

/// The `--json` object; its field names are a contract.
#[derive(Debug, Serialize)]
pub struct SnapshotReport {
    /// Where the copies went, one directory per host and job.
    pub dirs: Vec<SnapshotDir>,
    pub logs: usize,
    pub records: u64,
    pub torn_slots: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub errors: Vec<FileError>,
}

#[derive(Debug, Serialize)]
pub struct SnapshotDir {
    pub dir: String,
    pub host: String,
    pub job_id: String,
    pub logs: usize,
    pub taken_wall: String,
}

/// One destination directory's manifest as it fills.
struct Dest {
    dir: PrivateDir,
    job_id: String,
    manifest: Manifest,
}

pub fn build(dirs: &Dirs, to: &Path) -> Result<SnapshotReport, Failure> {
    let started = Instant::now();
    check_dest(dirs, to)?;
    let files = discover::job_logs(dirs, "snapshot").map_err(Failure::Message)?;
    let sources = source_dirs(dirs, &files);
    let dest_root = safe_path::output_dir(to, true).map_err(|e| refused_dest(to, &e))?;
    let here = local_host::name();
    let boot_id = moment::boot_id_here();
    let mut dests: Vec<Dest> = Vec::new();
    let mut report = SnapshotReport {
        dirs: Vec::new(),
        logs: 0,
        records: 0,
        torn_slots: 0,
        bytes: 0,
        seconds: 0.0,
        errors: Vec::new(),
    };
    for file in &files {
        let fail = |error: String| FileError { file: file.path.display().to_string(), error };
        let log = match open_source(&file.path) {
            Ok(log) => log,
            Err(e) => {
                report.errors.push(fail(e));
                continue;
            }
        };
        let h = &log.header;
        // The log's own host names the node directory (SF_HOST or the writer's host name);
        // the job directory keeps the name the library gave it.
        let host = safe_name(&h.host).unwrap_or_else(|| safe_name(&here).unwrap_or_else(|| "host".into()));
        let job_id = file
            .path
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| safe_name(&n.to_string_lossy()))
            .unwrap_or_else(|| "job".into());
        let dest_dir = dest_dir(&dest_root, &host, &job_id, &sources)?;
        let name = file.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut clocks = (0, 0);
        let copied = copy_log(&log, &dest_dir, &name, || clocks = (monotonic_ns(), wall_ns()));
        let stats = match copied {
            Ok(stats) => stats,
            Err(e) => {
                report.errors.push(fail(format!("cannot copy to {}: {e}", dest_dir.path().display())));
                continue;
            }
        };
        // A snapshot of a snapshot keeps the first moment: the copy shows that one.
        let (mono_ns, wall_ns, boot, process) = match &file.taken {
            Some(t) => (t.mono_ns, t.wall_ns, t.boot_id.clone(), t.process.clone()),
            None => {
                let check = h.stamp.check(h.pid, same_host(&h.host, &here));
                (clocks.0, clocks.1, boot_id.clone(), moment::process_name(check).to_string())
            }
        };
        let taken = Taken {
            file: name,
            mono_ns,
            wall_ns,
            boot_id: boot,
            process,
            records: stats.records,
            torn_slots: stats.torn_slots,
        };
        let source = file.path.parent().map(|p| p.display().to_string()).unwrap_or_default();
        let dest = match dests.iter_mut().position(|d| d.dir.path() == dest_dir.path()) {
            Some(i) => &mut dests[i],
            None => {
                // Logs an earlier snapshot put here keep their moments.
                let earlier = moment::manifest_in(dest_dir.path()).ok().flatten().map_or_else(Vec::new, |m| m.logs);
                dests.push(Dest {
                    dir: dest_dir,
                    job_id,
                    manifest: Manifest {
                        sf_snapshot: MANIFEST_VERSION,
                        host: here.clone(),
                        source,
                        taken_wall: rfc3339_ms(wall_ns),
                        logs: earlier,
                    },
                });
                dests.last_mut().expect("just pushed")
            }
        };
        dest.manifest.logs.retain(|t| t.file != taken.file);
        dest.manifest.logs.push(taken);
        report.logs += 1;
        report.records += stats.records;
        report.torn_slots += stats.torn_slots;
        report.bytes += stats.bytes;
    }
    for dest in &dests {
        write_manifest(&dest.dir, &dest.manifest)
            .map_err(|e| Failure::Message(format!("{}: cannot write {MANIFEST}: {e}", dest.dir.path().display())))?;
        report.dirs.push(SnapshotDir {
            dir: dest.dir.path().display().to_string(),
            host: dest
                .dir
                .path()
                .parent()
                .and_then(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            job_id: dest.job_id.clone(),
            logs: dest.manifest.logs.len(),
            taken_wall: dest.manifest.taken_wall.clone(),
        });
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// A name usable as one directory component, or `None`.
fn safe_name(name: &str) -> Option<String> {
    let ok = !name.is_empty() && !matches!(name, "." | "..") && name.chars().all(|c| c != '/' && !c.is_control());
    ok.then(|| name.to_string())
}

/// DEST must be (or become) a directory outside every DIR: a copy inside the logs it was
/// taken from would be found as one more log of the job by the next snapshot and command.
fn check_dest(dirs: &Dirs, to: &Path) -> Result<(), Failure> {
    if to.exists() && !to.is_dir() {
        return Err(Failure::Message(format!(
            "{}: not a directory; --to names the directory the copies go to (created when missing)",
            to.display()
        )));
    }
    let dest = resolved(to);
    for dir in &dirs.0 {
        if let (Some(dest), Ok(dir_real)) = (&dest, dir.canonicalize()) {
            if dest.starts_with(&dir_real) {
                return Err(Failure::Message(format!(
                    "{}: inside {}, the logs it would copy; pick a DEST outside it",
                    to.display(),
                    dir.display()
                )));
            }
        }
    }
    Ok(())
}

/// `path` with its nearest existing ancestor resolved (links, `..`) and the parts not
/// created yet appended.
fn resolved(path: &Path) -> Option<PathBuf> {
    let mut tail = Vec::new();
    let mut at = path;
    loop {
        let existing = if at.as_os_str().is_empty() { Path::new(".") } else { at };
        if let Ok(real) = existing.canonicalize() {
            // A `..` after a part that does not exist (so is no link) undoes that part.
            return Some(tail.iter().rev().fold(real, |mut p: PathBuf, part| {
                if *part == ".." {
                    p.pop();
                    p
                } else {
                    p.join(part)
                }
            }));
        }
        tail.push(at.components().next_back()?.as_os_str().to_owned());
        at = at.parent()?;
    }
}

/// The directories whose logs are copied (each DIR and each log's own directory), by
/// identity: a DEST directory that is one of them would be copied over or into.
fn source_dirs(dirs: &Dirs, files: &[discover::LogFile]) -> Vec<((u64, u64), PathBuf)> {
    use std::os::unix::fs::MetadataExt;
    let all = dirs.0.iter().cloned().chain(files.iter().filter_map(|f| f.path.parent().map(Path::to_path_buf)));
    all.filter_map(|dir| std::fs::metadata(&dir).ok().map(|m| ((m.dev(), m.ino()), dir))).collect()
}

/// DEST refused (with what sf snapshot writes into) or unusable (no space, no permission).
fn refused_dest(to: &Path, e: &DirError) -> Failure {
    let why = match e {
        DirError::Refused(_) => {
            "; sf snapshot writes only below directories that are root's or its user's and that no one else \
             can change (a shared parent must be sticky, as /tmp is)"
        }
        DirError::Unavailable(_) => "",
    };
    Failure::Message(format!("--to {}: {}{why}", to.display(), e.message()))
}

/// `DEST/<host>/<job>`: created 0700 where missing, opened without following links, ours,
/// written by no one else, and none of the directories the logs are copied from.
fn dest_dir(
    root: &PrivateDir,
    host: &str,
    job_id: &str,
    sources: &[((u64, u64), PathBuf)],
) -> Result<PrivateDir, Failure> {
    let host_dir = root.subdir(host, 0o700).map_err(|e| refused_dest(root.path(), &e))?;
    let dir = host_dir.subdir(job_id, 0o700).map_err(|e| refused_dest(root.path(), &e))?;
    for d in [root, &host_dir, &dir] {
        let identity = d.identity().map_err(|e| Failure::Message(format!("{}: {e}", d.path().display())))?;
        if let Some((_, source)) = sources.iter().find(|(s, _)| *s == identity) {
            let what = if d.path() == source { String::new() } else { format!(" (that is {})", source.display()) };
            return Err(Failure::Message(format!(
                "--to {}: {}{what} holds the logs being copied, which the copies would replace or join; pick a \
                 DEST outside them",
                root.path().display(),
                d.path().display(),
            )));
        }
    }
    Ok(dir)
}

/// A log to copy: a regular file of the job's user (the owner of its directory), opened
/// without following a link. A link in a job directory may point at another job's log or,
/// read as root, at another user's private one.
fn open_source(path: &Path) -> Result<RankLog, String> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let (dir, owner) = safe_path::job_dir(parent).map_err(|e| e.message().to_string())?;
    let name = path.file_name().and_then(|n| n.to_str()).ok_or("not a UTF-8 name")?;
    match dir.entry_of(name, owner) {
        Entry::OurFile(file) => RankLog::from_file(path, file).map_err(|e| e.to_string()),
        Entry::Missing => Err(format!("{}: gone before it could be copied", path.display())),
        Entry::Foreign(what) => Err(format!(
            "{}: {what}, not a regular file of the job's user (uid {owner}, who owns {}); not copied",
            path.display(),
            parent.display()
        )),
    }
}

/// The manifest, written under a temporary name and renamed: a reader sees a whole one.
fn write_manifest(dir: &PrivateDir, manifest: &Manifest) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(manifest).map_err(std::io::Error::other)?;
    dir.write_new(MANIFEST, 0o600, (text + "\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dest_is_a_directory_outside_the_logs() {
        let root = std::env::temp_dir().join(format!("sf-snapshot-dest-{}", std::process::id()));
        let logs = root.join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        std::fs::write(root.join("afile"), b"").unwrap();
        let dirs = Dirs::new(vec![logs.clone()]);
        let message = |to: &Path| match check_dest(&dirs, to) {
            Err(Failure::Message(m)) => m,
            _ => String::new(),
        };
        assert!(message(&root.join("afile"))
            .ends_with("afile: not a directory; --to names the directory the copies go to (created when missing)"));
        // Not created yet, and spelled through `..`: still inside.
        let inside = logs.join("x").join("..").join("snap").join("new");
        assert!(message(&inside).contains("inside"), "{}", message(&inside));
        assert!(check_dest(&dirs, &root.join("snap").join("new")).is_ok());
        assert!(check_dest(&dirs, &logs.join("..").join("snap2")).is_ok(), "beside the logs, spelled through them");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn only_single_components_are_safe_names() {
        assert_eq!(safe_name("node0").as_deref(), Some("node0"));
        for bad in ["", ".", "..", "a/b", "a\nb"] {
            assert_eq!(safe_name(bad), None, "{bad:?}");
        }
    }
}
