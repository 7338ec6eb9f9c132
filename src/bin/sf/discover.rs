//! Which files a job directory holds for `sf` to read.

use std::io;
use std::path::{Path, PathBuf};

/// A rank log by name: `rank-NNNNN.sflog` or `pid-N.sflog`. The `.sflog.prev` kept from an
/// earlier attempt of the job ends otherwise and is left out.
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
}
