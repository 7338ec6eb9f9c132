//! The job-wide budget of NCCL calls the wait attribution holds, and the steps those calls
//! cover.
//!
//! The attribution (`analysis::blame`) matches every held call of every rank, so it holds
//! them all at once: 32 bytes a call, and a default log's event ring holds 65,536. That is
//! 512 MiB for 256 ranks but 8 GiB for 4,096, and reading and checking every slot of 4,096
//! rings (32 GiB) takes minutes on a small machine. So the calls are budgeted: each log
//! gives its newest `budget / logs` records of the event ring (`RankLog::scan_newest`, which
//! reads those slots and no others), and `sf` says where the steps those calls cover begin.
//!
//! The trade-off: a large job's waits are known over its recent steps only, and `frontier`
//! and `slow` then analyse only those steps (never a table whose old steps carry their
//! waits and whose recent ones do not: own time and wait-including time do not compare).
//! The default budget, 2^24 calls (512 MiB of calls), holds every record of 256 default
//! logs, so jobs up to that size read exactly what they did before; a 4,096-rank job gets
//! 4,096 calls per rank, some 60 steps of a job making 70 calls a step. `SF_CALL_BUDGET`
//! raises or lowers it (memory grows by 32 bytes a call, time with the calls read).
//!
//! The window is exact: every call a rank makes in a window step is held (the rank's held
//! calls are its newest, so all it made after the oldest held call ended), and so is the
//! call before the step's first (the oldest held one ended before the step began), whose
//! exit starts the segment the caused wait is charged over. A record the collector commits
//! out of call order (calls overlapping on several threads) could blur the first step.

use serde::Serialize;

use super::step_vectors::RankSteps;
use super::Failure;
use crate::report::read_budget::CALLS;

/// What one rank's log gave of its calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeldCalls {
    /// Records of the event ring the budget left unread (older than those read).
    pub not_read: u64,
    /// Records read (the budget's share, or all the ring held).
    pub read: u64,
    /// When the oldest call read ended, on the rank's clock, if older calls are gone (not
    /// read, or wrapped out of the ring): the rank's waits are known from then on.
    pub from_ns: Option<u64>,
}

/// The steps whose waits every rank's held calls cover, when the budget left calls unread:
/// the reports' `call_window`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CallWindow {
    /// The first step of the analysis.
    pub starts_at_step: u64,
    /// The job-wide budget, and each log's share of it.
    pub budget: u64,
    pub per_rank: u64,
    /// Ranks whose older calls were not read, and how many records that left unread.
    pub ranks_cut: usize,
    pub calls_not_read: u64,
    /// The logs that shared the budget.
    pub logs: usize,
    /// The budget that would read every record the logs hold.
    pub budget_for_all: u64,
}

impl CallWindow {
    /// The window of `ranks` (read with `per_rank` of `budget` calls each, over `logs`
    /// logs), `None` when every rank's calls were read whole: then nothing changes, the
    /// event ring's own wraparound included. An error when the calls read cover no step.
    pub fn of(ranks: &[RankSteps], budget: u64, logs: usize) -> Result<Option<CallWindow>, Failure> {
        let per_rank = CALLS.per_log(budget, logs);
        let cut = ranks.iter().filter(|r| r.held.not_read > 0).count();
        // No step anywhere: the steps are inferred from the calls (`inferred`), which read
        // their own.
        if cut == 0 || ranks.iter().all(|r| r.steps.is_empty()) {
            return Ok(None);
        }
        // Each rank's first step that began after its oldest held call ended; the window
        // starts at the latest of them. A rank that held no call limits nothing.
        let mut starts_at_step = 0;
        for r in ranks {
            let Some(from) = r.held.from_ns else { continue };
            match r.steps.iter().find(|s| s.t_begin_ns >= from) {
                Some(s) => starts_at_step = starts_at_step.max(s.step),
                None => {
                    return Err(Failure::Message(format!(
                        "rank {}: its newest {per_rank} NCCL calls ({var}={budget} shared by {logs} logs) \
                         cover no whole step; raise {var} (each call costs 32 bytes of memory)",
                        r.rank,
                        var = CALLS.var
                    )))
                }
            }
        }
        let most_held = ranks.iter().map(|r| r.held.read + r.held.not_read).max().unwrap_or(0);
        Ok(Some(CallWindow {
            starts_at_step,
            budget,
            per_rank,
            ranks_cut: cut,
            calls_not_read: ranks.iter().map(|r| r.held.not_read).sum(),
            logs,
            budget_for_all: most_held.saturating_mul(logs as u64),
        }))
    }

    /// Drops the steps before the window from `ranks`.
    pub fn trim(&self, ranks: &mut [RankSteps]) {
        for r in ranks {
            r.steps.retain(|s| s.step >= self.starts_at_step);
        }
    }

    /// The human note.
    pub fn note(&self) -> String {
        format!(
            "note: the analysis starts at step {}: the wait attribution read each rank's newest {} NCCL calls \
             ({var}={} shared by the ranks; {} of {} ranks hold older calls, {} unread), and those cover the \
             steps from there on; {var}={} reads every call held (32 bytes each)",
            self.starts_at_step,
            self.per_rank,
            self.budget,
            self.ranks_cut,
            self.logs,
            self.calls_not_read,
            self.budget_for_all,
            var = CALLS.var
        )
    }
}

/// The first step whose waits every rank's held calls cover, when the event ring wrapped
/// and some steps held are older (no budget cut: `CallWindow` covers that case by starting
/// the analysis there). Those older steps stay in the analysis, their waits unknown: it
/// says so. `None` when every step held has its waits.
pub fn waits_start_at(ranks: &[RankSteps]) -> Option<u64> {
    let first_held = ranks.iter().filter_map(|r| r.steps.first()).map(|s| s.step).min()?;
    let last_held = ranks.iter().filter_map(|r| r.steps.last()).map(|s| s.step).max()?;
    let covered = ranks.iter().filter(|r| !r.steps.is_empty()).filter_map(|r| {
        let from = r.held.from_ns?;
        // A rank none of whose steps began after its oldest call: no step held has its
        // waits, so they start after the last one.
        Some(r.steps.iter().find(|s| s.t_begin_ns >= from).map_or(last_held + 1, |s| s.step))
    });
    covered.max().filter(|&step| step > first_held)
}

/// The note for steps whose waits are unknown.
pub fn waits_note(step: u64) -> String {
    format!(
        "note: the wait attribution covers steps from {step} on: older NCCL calls wrapped out of the event \
         ring; earlier steps are analysed with their waits still in their stage times (set SF_LOG_RECORDS \
         higher to keep more calls)"
    )
}
