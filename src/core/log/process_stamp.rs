//! What tells the process that wrote a log apart from every other: the boot, the pid
//! namespace and the start time beside the pid. With it, `sf` can call a killed rank dead
//! the moment its pid is gone, without waiting for its heartbeat to go stale, and a later
//! process that reuses the pid is not taken for the rank.

use std::os::unix::fs::MetadataExt;

use super::format::{bytes, header};
use super::host::process_exists;

/// The writer's identity beyond its pid, as the log header records it; all zero when the
/// writer could not read it (or an older library wrote the log).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessStamp {
    pub boot_id: [u8; 16],
    pub pid_namespace: u64,
    /// Clock ticks after boot at which the process started (`/proc/<pid>/stat` field 22).
    pub start_ticks: u64,
}

/// What the reader can tell about the process a log names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessCheck {
    /// Another host or pid namespace: the pid means nothing here.
    Unknown,
    /// A live process has the log's pid (for a log without a stamp, maybe a later one).
    PidExists,
    /// No live process has the log's pid (a zombie counts as gone).
    PidGone,
    /// The very process that wrote the log is gone: its pid is free, a zombie, or another
    /// process's (a different start time). Certain, so no heartbeat outweighs it.
    WriterGone,
}

impl ProcessStamp {
    /// This process's stamp, `None` where `/proc` does not tell.
    pub fn of_self() -> Option<ProcessStamp> {
        let stamp = ProcessStamp {
            boot_id: boot_id()?,
            pid_namespace: std::fs::metadata("/proc/self/ns/pid").ok()?.ino(),
            start_ticks: start_ticks(std::process::id())?,
        };
        stamp.is_known().then_some(stamp)
    }

    /// The stamp a log header records (`head` holds at least the header's fixed fields).
    pub fn from_header(head: &[u8]) -> ProcessStamp {
        ProcessStamp {
            boot_id: head[header::BOOT_ID..header::BOOT_ID + 16].try_into().expect("16 bytes"),
            pid_namespace: bytes::get_u64(head, header::PID_NAMESPACE),
            start_ticks: bytes::get_u64(head, header::PROCESS_START),
        }
    }

    /// Whether the log this stamp and `pid` head can no longer change: its writer exited
    /// through `exit()` (`exited`), or the very process that wrote it is gone (certain
    /// only where the stamp is comparable). A writer that cannot be told gone counts as
    /// live. The one rule `sf` (a settled log) and retention (a finished job) share.
    pub fn writer_settled(&self, pid: u32, exited: bool) -> bool {
        exited || self.check(pid, false) == ProcessCheck::WriterGone
    }

    pub fn is_known(&self) -> bool {
        self.start_ticks != 0 && self.pid_namespace != 0 && self.boot_id != [0; 16]
    }

    /// Whether the process `pid` with this stamp, written on a host named like the
    /// reader's when `same_host`, still runs. A stamp from this boot and pid namespace
    /// decides for certain; without one the pid alone is all there is, and only on the
    /// same host.
    pub fn check(&self, pid: u32, same_host: bool) -> ProcessCheck {
        let here = ProcessStamp::of_self();
        let comparable =
            self.is_known() && here.is_some_and(|h| (h.boot_id, h.pid_namespace) == (self.boot_id, self.pid_namespace));
        if comparable {
            if !process_exists(pid) {
                return ProcessCheck::WriterGone;
            }
            // A process we may not inspect (hidepid) exists; only a start time we can
            // read and that differs proves the pid was reused.
            return match start_ticks(pid) {
                Some(ticks) if ticks != self.start_ticks => ProcessCheck::WriterGone,
                _ => ProcessCheck::PidExists,
            };
        }
        match (same_host, process_exists(pid)) {
            (false, _) => ProcessCheck::Unknown,
            (true, true) => ProcessCheck::PidExists,
            (true, false) => ProcessCheck::PidGone,
        }
    }
}

/// The host's boot id: 32 hex digits, dashed.
fn boot_id() -> Option<[u8; 16]> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let digits: Vec<u8> = text.trim().bytes().filter(|&b| b != b'-').collect();
    if digits.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (byte, pair) in id.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(id)
}

/// `/proc/<pid>/stat`'s start time: the 20th field after the parenthesised command name,
/// which may itself hold spaces and parentheses.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_stamp_checks_as_alive_and_a_reused_pid_as_gone() {
        let me = ProcessStamp::of_self().expect("/proc tells this process's stamp");
        assert_eq!(me.check(std::process::id(), true), ProcessCheck::PidExists);
        assert_eq!(me.check(std::process::id(), false), ProcessCheck::PidExists, "the stamp decides, not the name");
        let later = ProcessStamp { start_ticks: me.start_ticks + 1, ..me };
        assert_eq!(later.check(std::process::id(), true), ProcessCheck::WriterGone, "pid reused");
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        child.wait().expect("wait");
        assert_eq!(me.check(pid, true), ProcessCheck::WriterGone);
    }

    #[test]
    fn without_a_comparable_stamp_the_pid_and_host_decide() {
        let me = ProcessStamp::of_self().expect("stamp");
        let other_ns = ProcessStamp { pid_namespace: me.pid_namespace ^ 1, ..me };
        assert_eq!(other_ns.check(std::process::id(), false), ProcessCheck::Unknown);
        assert_eq!(other_ns.check(std::process::id(), true), ProcessCheck::PidExists);
        assert_eq!(ProcessStamp::default().check(u32::MAX, true), ProcessCheck::PidGone);
        assert_eq!(ProcessStamp::default().check(u32::MAX, false), ProcessCheck::Unknown);
    }
}
