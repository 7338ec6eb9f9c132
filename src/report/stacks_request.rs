//! `sf hang --stacks`: asks every live rank of a job for its Python stacks now, by
//! storing a request word in its log's header, and waits a bounded time for the answers.
//!
//! The only thing `sf` ever writes into a log: one 8-byte `pwrite` of
//! `format::live::STACK_REQUEST`, through `O_RDWR | O_NOFOLLOW`, on a regular file owned
//! by the user `sf` runs as (a log of another user's job, or a link planted in its place,
//! is left alone and said so). The rank's collector answers by writing a stack sample and
//! then the same word to `STACK_ANSWERED`, which is read back with `pread`.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::time::{Duration, Instant};

use super::discover::{self, Dirs};
use super::hang::StackAnswer;
use super::moment;
use crate::analysis::log::liveness::Liveness;
use crate::core::log::format::live;
use crate::core::log::host as local_host;
use crate::core::log::reader::RankLog;

/// How long `sf hang --stacks` waits for the ranks' answers.
pub const ANSWER_WAIT: Duration = Duration::from_secs(5);
/// How often the answers are read back while waiting.
const POLL: Duration = Duration::from_millis(20);

/// One rank asked: its log, open for the write and the read-back.
struct Asked {
    rank: i32,
    file: File,
}

/// Asks each live rank of the job at `dirs` and waits up to `wait` for every answer.
/// Ranks that are not live are not asked (their logs already hold their last samples).
pub fn ask(dirs: &Dirs, wait: Duration) -> Result<Vec<StackAnswer>, String> {
    let files = discover::job_logs(dirs, "hang")?;
    let reader_host = local_host::name();
    let request = crate::core::record::clock::wall_ns() | 1;
    let started = Instant::now();
    let mut answers = Vec::new();
    let mut asked = Vec::new();
    for file in files.iter().filter(|f| f.taken.is_none()) {
        let Ok(log) = RankLog::open(&file.path) else { continue };
        let (liveness, _) = moment::liveness(&log.header, &log.live(), None, &reader_host);
        let rank = log.header.global_rank;
        if liveness != Liveness::Live {
            continue;
        }
        match open_for_request(&file.path) {
            Ok(f) => match f.write_at(&request.to_le_bytes(), live::STACK_REQUEST as u64) {
                Ok(8) => asked.push(Asked { rank, file: f }),
                Ok(_) => answers.push(unanswered(rank, "the request word was not written whole".into())),
                Err(e) => answers.push(unanswered(rank, format!("cannot write the request: {e}"))),
            },
            Err(why) => answers.push(unanswered(rank, why)),
        }
    }
    let mut waiting: Vec<Asked> = asked;
    while !waiting.is_empty() {
        let waited_s = started.elapsed().as_secs_f64();
        waiting.retain(|a| {
            let mut word = [0u8; 8];
            let answered = a.file.read_at(&mut word, live::STACK_ANSWERED as u64).is_ok_and(|n| n == 8)
                && u64::from_le_bytes(word) == request;
            if answered {
                answers.push(StackAnswer { rank: a.rank, answered: true, waited_s, note: None });
            }
            !answered
        });
        if started.elapsed() >= wait {
            break;
        }
        std::thread::sleep(POLL);
    }
    for a in waiting {
        let why =
            format!("no answer within {:.0} s (a library without stacks, or a process stopped)", wait.as_secs_f64());
        answers.push(unanswered(a.rank, why));
    }
    answers.sort_by_key(|a| a.rank);
    Ok(answers)
}

fn unanswered(rank: i32, note: String) -> StackAnswer {
    StackAnswer { rank, answered: false, waited_s: 0.0, note: Some(note) }
}

/// The log open for writing, if it is a regular file of this user's, reached without a
/// symbolic link at its last component.
fn open_for_request(path: &std::path::Path) -> Result<File, String> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot open {} for the request: {e}", path.display()))?;
    let meta = file.metadata().map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.file_type().is_file() {
        return Err(format!("{} is not a regular file: not written", path.display()));
    }
    if meta.uid() != me {
        return Err(format!("{} belongs to uid {}, not to this user ({me}): not written", path.display(), meta.uid()));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::open_for_request;

    #[test]
    fn only_a_regular_file_of_this_users_reached_without_a_link_is_opened_for_the_request() {
        let dir = std::env::temp_dir().join(format!("sf-stacks-request-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("rank-00000.sflog");
        std::fs::write(&log, [0u8; 4096]).unwrap();
        assert!(open_for_request(&log).is_ok());
        let link = dir.join("rank-00001.sflog");
        std::os::unix::fs::symlink(&log, &link).unwrap();
        assert!(open_for_request(&link).unwrap_err().contains("cannot open"), "a link is not followed");
        let fifo = dir.join("rank-00002.sflog");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo on a NUL-terminated path of ours.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        assert!(open_for_request(&fifo).unwrap_err().contains("not a regular file"));
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let theirs = dir.join("rank-00003.sflog");
            std::fs::write(&theirs, [0u8; 16]).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            assert!(open_for_request(&theirs).unwrap_err().contains("belongs to uid 65534"));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
