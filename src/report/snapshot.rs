//! `sf snapshot DIR... --to DEST`: a consistent copy of a job's rank logs on this node into
//! `DEST/<host>/<job id>/`, with `snapshot.json` saying when each log was copied, so that
//! the copies, gathered from every node into one place, are judged at that moment.
//!
//! Each log is copied by `core::log::copy` (header and live tables, then the whole records:
//! never a torn record), which reads and never waits on the writer, so a wedged rank is
//! copied like a running one.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::analysis::log::heartbeat::same_host;
use crate::core::log::copy::copy_log;
use crate::core::log::host as local_host;
use crate::core::log::reader::RankLog;
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
    dir: PathBuf,
    job_id: String,
    manifest: Manifest,
}

pub fn build(dirs: &Dirs, to: &Path) -> Result<SnapshotReport, Failure> {
    let started = Instant::now();
    check_dest(dirs, to)?;
    let files = discover::job_logs(dirs, "snapshot").map_err(Failure::Message)?;
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
        let log = match RankLog::open(&file.path) {
            Ok(log) => log,
            Err(e) => {
                report.errors.push(fail(e.to_string()));
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
        let dest_dir = to.join(&host).join(&job_id);
        if let Err(e) = create_private_dirs(&dest_dir) {
            return Err(Failure::Message(format!("{}: cannot create: {e}", dest_dir.display())));
        }
        let name = file.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut clocks = (0, 0);
        let copied = copy_log(&log, &dest_dir.join(&name), || clocks = (monotonic_ns(), wall_ns()));
        let stats = match copied {
            Ok(stats) => stats,
            Err(e) => {
                report.errors.push(fail(format!("cannot copy to {}: {e}", dest_dir.display())));
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
        let dest = match dests.iter_mut().position(|d| d.dir == dest_dir) {
            Some(i) => &mut dests[i],
            None => {
                // Logs an earlier snapshot put here keep their moments.
                let earlier = moment::manifest_in(&dest_dir).ok().flatten().map_or_else(Vec::new, |m| m.logs);
                dests.push(Dest {
                    dir: dest_dir.clone(),
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
            .map_err(|e| Failure::Message(format!("{}: cannot write {MANIFEST}: {e}", dest.dir.display())))?;
        report.dirs.push(SnapshotDir {
            dir: dest.dir.display().to_string(),
            host: dest
                .dir
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

/// `dir` and its missing parents, new ones 0700: the copies are the job's private data.
fn create_private_dirs(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// The manifest, written under a temporary name and renamed: a reader sees a whole one.
fn write_manifest(dir: &Path, manifest: &Manifest) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(manifest).map_err(std::io::Error::other)?;
    let tmp = dir.join(format!("{MANIFEST}.partial"));
    std::fs::write(&tmp, text + "\n")?;
    std::fs::rename(&tmp, dir.join(MANIFEST))
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
        let dirs = Dirs(vec![logs.clone()]);
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
