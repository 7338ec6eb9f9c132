//! Which files a job directory holds for `sf` to read.

use std::io;
use std::path::{Path, PathBuf};

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

/// Subdirectories of `dir` that hold logs: when `dir` itself holds none, it is probably
/// the log root and these are its jobs.
pub fn job_dirs_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut jobs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir() && logs_in(p).is_ok_and(|logs| !logs.is_empty()))
        .collect();
    jobs.sort();
    jobs
}

/// The rank logs of the job directory `dir` for `sf <command>`, or the one line that says
/// what is wrong and what to pass instead (naming a job directory inside `dir` when `dir`
/// is the log root).
pub fn job_logs(dir: &Path, command: &str) -> Result<Vec<PathBuf>, String> {
    let fail = |message: String| format!("{}: {message}", dir.display());
    if !dir.is_dir() {
        return Err(fail(format!(
            "not a directory; sf {command} reads every rank log of a job: pass the job directory, $SF_LOG_DIR/<job id>/"
        )));
    }
    let logs = logs_in(dir).map_err(|e| fail(format!("cannot list: {e}")))?;
    if logs.is_empty() {
        let hint = match job_dirs_in(dir).first() {
            Some(job) => format!("it holds job directories: pass one, e.g. sf {command} {}", job.display()),
            None => "pass a job directory, $SF_LOG_DIR/<job id>/".to_string(),
        };
        return Err(fail(format!("no rank logs (*.sflog); {hint}")));
    }
    Ok(logs)
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
    }

    #[test]
    fn job_logs_says_what_to_pass_instead() {
        let root = std::env::temp_dir().join(format!("sf-discover-{}", std::process::id()));
        let job = root.join("job-7");
        std::fs::create_dir_all(&job).unwrap();
        let at_root = job_logs(&root, "net").unwrap_err();
        assert!(at_root.ends_with("no rank logs (*.sflog); pass a job directory, $SF_LOG_DIR/<job id>/"), "{at_root}");
        std::fs::write(job.join("rank-00000.sflog"), b"").unwrap();
        let at_root = job_logs(&root, "net").unwrap_err();
        assert!(at_root.ends_with(&format!("e.g. sf net {}", job.display())), "{at_root}");
        assert_eq!(job_logs(&job, "net").unwrap(), [job.join("rank-00000.sflog")]);
        let file = job_logs(&job.join("rank-00000.sflog"), "kernels").unwrap_err();
        assert!(file.contains("not a directory; sf kernels reads every rank log"), "{file}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
