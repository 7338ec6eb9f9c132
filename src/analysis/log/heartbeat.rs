//! How old a rank's heartbeat is, seen from the reader's clocks.
//!
//! A log carries its last heartbeat on two clocks. `CLOCK_MONOTONIC` never steps, but it
//! only means something on the host (and boot) that wrote it; `CLOCK_REALTIME` compares
//! across hosts as well as their clocks are synchronised.

use crate::core::log::format::HOST_LEN;

/// The reader's clocks, read right after a log's live state so the age is not inflated
/// by the time spent reading other logs.
#[derive(Clone, Copy, Debug)]
pub struct ReaderClock {
    pub mono_ns: u64,
    pub wall_ns: u64,
}

/// Whether a log was written on the reader's host. The header keeps at most
/// `HOST_LEN - 1` bytes of the name, so a longer name matches on that prefix.
pub fn same_host(log_host: &str, reader_host: &str) -> bool {
    if log_host.is_empty() {
        return false;
    }
    log_host == reader_host || (log_host.len() == HOST_LEN - 1 && reader_host.starts_with(log_host))
}

/// Reader's now minus the last heartbeat, in nanoseconds; `None` if the writer never beat.
/// On the writer's host the monotonic clock decides, unless the heartbeat is ahead of the
/// reader's: then it came from an earlier boot and only the wall clock relates the two.
/// A heartbeat ahead of the reader's wall clock (a remote clock running fast) counts as 0.
pub fn heartbeat_age_ns(
    same_host: bool,
    heartbeat_mono_ns: u64,
    heartbeat_wall_ns: u64,
    now: ReaderClock,
) -> Option<u64> {
    if same_host && heartbeat_mono_ns != 0 && heartbeat_mono_ns <= now.mono_ns {
        return Some(now.mono_ns - heartbeat_mono_ns);
    }
    (heartbeat_wall_ns != 0).then(|| now.wall_ns.saturating_sub(heartbeat_wall_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: ReaderClock = ReaderClock { mono_ns: 5_000, wall_ns: 1_000_000 };

    #[test]
    fn host_names_match_whole_or_on_the_stored_prefix() {
        assert!(same_host("node7", "node7"));
        assert!(!same_host("node7", "node70"));
        assert!(!same_host("", ""), "an empty name says nothing");
        let long = "n".repeat(80);
        assert!(same_host(&long[..HOST_LEN - 1], &long));
        assert!(!same_host(&long[..HOST_LEN - 2], &long));
    }

    #[test]
    fn same_host_uses_the_monotonic_clock() {
        assert_eq!(heartbeat_age_ns(true, 4_000, 1, NOW), Some(1_000));
    }

    #[test]
    fn other_hosts_and_earlier_boots_use_the_wall_clock() {
        assert_eq!(heartbeat_age_ns(false, 4_000, 999_000, NOW), Some(1_000));
        assert_eq!(heartbeat_age_ns(true, 9_000, 400_000, NOW), Some(600_000), "monotonic ahead: earlier boot");
        assert_eq!(heartbeat_age_ns(false, 0, 2_000_000, NOW), Some(0), "remote clock ahead");
    }

    #[test]
    fn never_beat() {
        assert_eq!(heartbeat_age_ns(true, 0, 0, NOW), None);
        assert_eq!(heartbeat_age_ns(false, 4_000, 0, NOW), None);
    }
}
