//! Is a rank's writer still alive? Decided from the log alone plus the reader's clock.

use serde::Serialize;

use crate::core::log::format::WriterState;
use crate::core::log::process_stamp::ProcessCheck;
use crate::core::log::records::EndHow;

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

/// `liveness` corrected by the rank's end record: a rank read as dead whose exit handler
/// recorded an exit (`EndHow::Exit`) left on its own, stuck nowhere; only the collector's
/// last round missed its bound (a loaded host), so its tables may lag its last calls. For
/// the hang analysis it exited: read as dead, a healthy job's end passes for a hang.
pub fn with_end(liveness: Liveness, end: Option<EndHow>) -> Liveness {
    match (liveness, end) {
        (Liveness::Dead, Some(EndHow::Exit)) => Liveness::Exited,
        (liveness, _) => liveness,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_rank_whose_exit_was_recorded_exited() {
        assert_eq!(with_end(Liveness::Dead, Some(EndHow::Exit)), Liveness::Exited);
        assert_eq!(with_end(Liveness::Dead, Some(EndHow::Signal)), Liveness::Dead, "killed by a signal");
        assert_eq!(with_end(Liveness::Dead, None), Liveness::Dead, "SIGKILL leaves no end");
        assert_eq!(with_end(Liveness::Stalled, Some(EndHow::Exit)), Liveness::Stalled, "a process still there");
        assert_eq!(with_end(Liveness::Live, Some(EndHow::HandledSignal)), Liveness::Live);
    }

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
