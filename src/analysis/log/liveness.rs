//! Is a rank's writer still alive? Decided from the log alone plus the reader's clock.

use serde::Serialize;

use crate::core::log::format::WriterState;
use crate::core::log::process_stamp::ProcessCheck;

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
/// `process`: what the reader could tell about the writer's process. A writer known gone
/// is dead at once, however fresh its last heartbeat; a pid that is merely absent (no
/// stamp to prove it names the writer, e.g. another pid namespace under the same host
/// name) only confirms a stale heartbeat.
pub fn classify(state: Option<WriterState>, heartbeat_age_ns: u64, process: ProcessCheck) -> Liveness {
    match state {
        Some(WriterState::Exited) => Liveness::Exited,
        Some(WriterState::Disabled | WriterState::CollectorPanicked) => Liveness::Disabled,
        _ if process == ProcessCheck::WriterGone => Liveness::Dead,
        _ if heartbeat_age_ns <= STALE_AFTER_NS => Liveness::Live,
        _ if process == ProcessCheck::PidExists => Liveness::Stalled,
        _ => Liveness::Dead,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states() {
        use ProcessCheck::*;
        let running = Some(WriterState::Running);
        assert_eq!(classify(running, 50_000_000, PidExists), Liveness::Live);
        assert_eq!(classify(running, 50_000_000, PidGone), Liveness::Live, "a bare pid may be another namespace's");
        assert_eq!(classify(running, 50_000_000, WriterGone), Liveness::Dead, "known gone: no waiting");
        assert_eq!(classify(running, 5_000_000_000, PidGone), Liveness::Dead);
        assert_eq!(classify(running, 5_000_000_000, Unknown), Liveness::Dead);
        assert_eq!(classify(running, 5_000_000_000, PidExists), Liveness::Stalled);
        assert_eq!(classify(Some(WriterState::Exited), u64::MAX, Unknown), Liveness::Exited);
        assert_eq!(classify(Some(WriterState::Exited), 0, WriterGone), Liveness::Exited);
        assert_eq!(classify(Some(WriterState::Disabled), 0, PidExists), Liveness::Disabled);
    }
}
