//! Reading many rank logs on every core: each file is read by one worker, start to end,
//! and only what the command keeps of it (a row, a rank's steps) comes back, so memory
//! grows with the summaries, never with every record of every rank.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use crate::report::observer::Progress;

/// `read` applied to every file (a path, or a path with what sf knows of it), in file
/// order, the files shared out over the machine's cores; the file counter on stderr
/// advances as files finish.
pub fn read_all<F: Sync, T: Send>(files: &[F], read: impl Fn(&F) -> T + Sync) -> Vec<T> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(files.len()).max(1);
    let next = AtomicUsize::new(0);
    let mut results: Vec<Option<T>> = (0..files.len()).map(|_| None).collect();
    let progress = Progress::new(files.len());
    std::thread::scope(|scope| {
        let (done, finished) = mpsc::channel();
        for _ in 0..workers {
            let done = done.clone();
            let (next, read) = (&next, &read);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(file) = files.get(i) else { break };
                // The receiver lives until every result is in: a send cannot fail.
                let _ = done.send((i, read(file)));
            });
        }
        drop(done);
        for (count, (i, result)) in finished.iter().enumerate() {
            results[i] = Some(result);
            progress.done(count + 1);
        }
    });
    results.into_iter().map(|r| r.expect("every file was read")).collect()
}

/// Raises the soft limit on open files to the hard one: a command that keeps every log of
/// a big job open (`sf hang` reads live state after the records) needs one per rank.
pub fn allow_open_files(files: usize) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && (limit.rlim_cur as usize) < files + 64 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn results_come_back_in_file_order() {
        let files: Vec<PathBuf> = (0..100).map(|i| PathBuf::from(format!("f{i}"))).collect();
        let read = read_all(&files, |p| p.display().to_string());
        assert_eq!(read, files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>());
        assert!(read_all(&[] as &[PathBuf], |p| p.clone()).is_empty());
    }
}
