//! Which rank went first, when a job ended badly. Heartbeats (every 50 ms) cannot order a
//! teardown a launcher does within milliseconds; each rank's own end record can
//! (`records_end`): its exit status or the signal that ended it, with the time. A rank
//! with none died of a signal nothing could see (SIGKILL), at or after its last heartbeat.
//!
//! The rule: only when every rank is gone and the job did not simply finish (some rank
//! ended with a nonzero status, by a signal, or with no end at all). Ranks ended by a
//! teardown signal (SIGTERM, SIGINT, SIGHUP) are the launcher's victims, not candidates;
//! of the others, the one that ended earliest went first. A rank with no end counts from
//! its last heartbeat; it goes first only if every other rank recorded its end, after
//! that heartbeat (two ranks with no end cannot be ordered: nothing is said). When every rank was torn down by a signal, nobody went first (the job
//! was stopped from outside) and nothing is said.

use serde::Serialize;

use crate::analysis::log::liveness::Liveness;
use crate::core::log::records::{EndHow, ProcessEnd};

/// The others count as a teardown when the last of them ended within this of the first.
pub const TEARDOWN_WITHIN_NS: u64 = 5_000_000_000;

/// One rank's end, as its log tells it.
#[derive(Clone, Debug, PartialEq)]
pub struct RankEnd {
    pub rank: i32,
    /// The writer is gone (exited, dead, disabled and gone); a live rank stops the rule.
    pub gone: bool,
    pub end: Option<ProcessEnd>,
    /// Wall-clock ns of the last heartbeat (else the log's start): when it was last heard.
    pub last_heard_wall_ns: u64,
}

impl RankEnd {
    /// From a log: its rank, its writer's liveness, its end, and its last heartbeat (0 if
    /// it never beat) or its start.
    pub fn of(
        rank: i32,
        liveness: Liveness,
        end: Option<ProcessEnd>,
        heartbeat_wall_ns: u64,
        start_wall_ns: u64,
    ) -> RankEnd {
        RankEnd {
            rank,
            gone: matches!(liveness, Liveness::Exited | Liveness::Dead),
            end,
            last_heard_wall_ns: heartbeat_wall_ns.max(start_wall_ns),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FirstEnd {
    pub rank: i32,
    /// `exited` (a status) or `died` (a signal, or no end record).
    pub verb: &'static str,
    /// `status 1`, `SIGSEGV`, or `no end record: SIGKILL or a crash no handler saw`.
    pub cause: String,
    /// When (wall-clock ns): the end record's time, or the last heartbeat's.
    pub at_wall_ns: u64,
    /// True when `at_wall_ns` is the last heartbeat (it died at or after it).
    pub at_or_after: bool,
    /// The other ranks, which ended after it.
    pub rest: Vec<i32>,
    /// From `at_wall_ns` to the last of `rest`'s ends (0 when none have one).
    pub rest_within_s: f64,
    /// `rest` all ended within `TEARDOWN_WITHIN_NS`, every one with an end record.
    pub teardown: bool,
    /// The signal that ended the rest, when it was the same teardown signal for all.
    pub teardown_signal: Option<String>,
}

/// The rank that went first, or None (a rank still live, a job that finished, a job
/// stopped from outside, a single rank).
pub fn first_end(ranks: &[RankEnd]) -> Option<FirstEnd> {
    if ranks.len() < 2 || !ranks.iter().all(|r| r.gone) {
        return None;
    }
    let finished = |r: &RankEnd| r.end.is_some_and(|e| e.how == EndHow::Exit && e.code == 0);
    if ranks.iter().all(finished) {
        return None;
    }
    // Candidates: ranks that ended on their own, by (when, no end record last on ties).
    let when = |r: &RankEnd| r.end.map_or(r.last_heard_wall_ns, |e| e.wall_ns);
    let first = ranks
        .iter()
        .filter(|r| !r.end.is_some_and(|e| e.is_teardown()))
        .min_by_key(|r| (when(r), r.end.is_none(), r.rank))?;
    let rest: Vec<&RankEnd> = ranks.iter().filter(|r| r.rank != first.rank).collect();
    // A rank with no end died at or after its last heartbeat: first only if every other
    // rank recorded an end after that (two silent deaths cannot be ordered).
    if first.end.is_none() && rest.iter().any(|r| r.end.is_none()) {
        return None;
    }
    let at = when(first);
    // Something that went first must not end after a rank it supposedly took down.
    if rest.iter().any(|r| r.end.is_some_and(|e| e.wall_ns < at)) {
        return None;
    }
    let last_of_rest = rest.iter().filter_map(|r| r.end.map(|e| e.wall_ns)).max().unwrap_or(at);
    let within = last_of_rest.saturating_sub(at);
    let signals: Vec<Option<i32>> = rest.iter().map(|r| r.end.filter(|e| e.is_teardown()).map(|e| e.code)).collect();
    let teardown_signal = match signals.first() {
        Some(Some(sig)) if signals.iter().all(|s| *s == Some(*sig)) => {
            Some(crate::core::log::records_end::signal_name(*sig))
        }
        _ => None,
    };
    let (verb, cause) = match first.end {
        Some(e) if e.how == EndHow::Exit => ("exited", e.cause()),
        Some(e) => ("died", e.cause()),
        None => ("died", "no end record: SIGKILL or a crash no handler saw".to_string()),
    };
    Some(FirstEnd {
        rank: first.rank,
        verb,
        cause,
        at_wall_ns: at,
        at_or_after: first.end.is_none(),
        rest: rest.iter().map(|r| r.rank).collect(),
        rest_within_s: within as f64 / 1e9,
        teardown: within <= TEARDOWN_WITHIN_NS && rest.iter().all(|r| r.end.is_some()),
        teardown_signal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;
    const T0: u64 = 1_700_000_000 * S;

    fn end(how: EndHow, code: i32, wall_ns: u64) -> Option<ProcessEnd> {
        Some(ProcessEnd { t_ns: wall_ns - T0, wall_ns, how, code })
    }

    fn rank(rank: i32, end: Option<ProcessEnd>, heard: u64) -> RankEnd {
        RankEnd { rank, gone: true, end, last_heard_wall_ns: heard }
    }

    fn term(at: u64) -> Option<ProcessEnd> {
        end(EndHow::Signal, libc::SIGTERM, at)
    }

    #[test]
    fn the_rank_that_exited_1_went_first_and_the_rest_were_torn_down() {
        // Rank 2 beat last 120 ms before the others: heartbeats alone order nothing here.
        let ranks = [
            rank(0, term(T0 + 3 * MS), T0 - 10 * MS),
            rank(1, term(T0 + 120 * MS), T0 - 5 * MS),
            rank(2, end(EndHow::Exit, 1, T0), T0 - 120 * MS),
            rank(3, term(T0 + 2 * MS), T0 - MS),
        ];
        let first = first_end(&ranks).unwrap();
        assert_eq!((first.rank, first.verb, first.cause.as_str()), (2, "exited", "status 1"));
        assert_eq!((first.rest, first.at_or_after, first.teardown), (vec![0, 1, 3], false, true));
        assert!((first.rest_within_s - 0.12).abs() < 1e-9);
        assert_eq!(first.teardown_signal.as_deref(), Some("SIGTERM"));
    }

    #[test]
    fn a_rank_with_no_end_died_first_when_the_others_were_torn_down_after_its_last_beat() {
        let ranks =
            [rank(0, term(T0 + 40 * MS), T0), rank(1, None, T0 - 30 * MS), rank(2, term(T0 + 41 * MS), T0 + MS)];
        let first = first_end(&ranks).unwrap();
        assert_eq!((first.rank, first.verb, first.at_or_after, first.at_wall_ns), (1, "died", true, T0 - 30 * MS));
        assert!(first.cause.starts_with("no end record"));
        assert!(first.teardown);
        // Two silent deaths (or logs of a library that recorded no end): no order to tell.
        let silent = [rank(0, None, T0), rank(1, None, T0 - 30 * MS), rank(2, term(T0 + 41 * MS), T0)];
        assert_eq!(first_end(&silent), None);
    }

    #[test]
    fn no_first_for_a_finished_job_a_live_rank_or_a_job_stopped_from_outside() {
        let ok = |r, at| rank(r, end(EndHow::Exit, 0, at), at);
        assert_eq!(first_end(&[ok(0, T0), ok(1, T0 + S)]), None, "a job that finished");
        let mut live = [rank(0, end(EndHow::Exit, 1, T0), T0), rank(1, None, T0)];
        live[1].gone = false;
        assert_eq!(first_end(&live), None, "a rank still runs");
        assert_eq!(first_end(&[rank(0, term(T0), T0), rank(1, term(T0 + MS), T0)]), None, "all torn down");
        // A rank that exited 1 after another was already terminated did not cause it.
        let odd = [rank(0, term(T0), T0), rank(1, end(EndHow::Exit, 1, T0 + MS), T0)];
        assert_eq!(first_end(&odd), None);
    }

    #[test]
    fn a_slow_follower_is_no_teardown() {
        let ranks =
            [rank(0, end(EndHow::Signal, libc::SIGSEGV, T0), T0), rank(1, end(EndHow::Exit, 0, T0 + 60 * S), T0)];
        let first = first_end(&ranks).unwrap();
        assert_eq!((first.verb, first.cause.as_str(), first.teardown), ("died", "SIGSEGV", false));
    }
}
