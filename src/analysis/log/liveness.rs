//! Is a rank's writer still alive? Decided from the log alone plus the reader's clock.

use serde::Serialize;

use crate::core::log::format::WriterState;

/// How much older than its period a heartbeat may be before the writer counts as stopped:
/// the collector beats at most every 100 ms, so 1 s is ten missed beats.
pub const STALE_AFTER_NS: u64 = 1_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// Heartbeat fresh: the collector runs.
    Live,
    /// The process exited through `exit()`, everything flushed.
    Exited,
    /// Recording was turned off after an internal error (or a panic in the collector);
    /// the process may still run.
    Disabled,
    /// Heartbeat stale and the process is gone (killed, crashed).
    Dead,
    /// Heartbeat stale but the process still exists: stopped, or wedged as a whole.
    Stalled,
}

/// `heartbeat_age_ns`: reader's now minus the last heartbeat, on a common clock.
/// `process_exists`: `None` when the reader cannot tell (another host).
pub fn classify(state: Option<WriterState>, heartbeat_age_ns: u64, process_exists: Option<bool>) -> Liveness {
    match state {
        Some(WriterState::Exited) => Liveness::Exited,
        Some(WriterState::Disabled | WriterState::CollectorPanicked) => Liveness::Disabled,
        _ if heartbeat_age_ns <= STALE_AFTER_NS => Liveness::Live,
        _ if process_exists == Some(true) => Liveness::Stalled,
        _ => Liveness::Dead,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states() {
        let running = Some(WriterState::Running);
        assert_eq!(classify(running, 50_000_000, Some(true)), Liveness::Live);
        assert_eq!(classify(running, 5_000_000_000, Some(false)), Liveness::Dead);
        assert_eq!(classify(running, 5_000_000_000, None), Liveness::Dead);
        assert_eq!(classify(running, 5_000_000_000, Some(true)), Liveness::Stalled);
        assert_eq!(classify(Some(WriterState::Exited), u64::MAX, None), Liveness::Exited);
        assert_eq!(classify(Some(WriterState::Disabled), 0, Some(true)), Liveness::Disabled);
    }
}
