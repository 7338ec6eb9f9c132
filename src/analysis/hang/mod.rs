//! Hang localization from one snapshot of a job's rank logs: which rank, which collective,
//! since when. Pure and deterministic: the caller reads the logs and the clocks, this
//! module only reasons over what it is handed.
//!
//! The model, in the words `sf hang --help` uses:
//!
//! - Every rank is either inside an NCCL call (a *wait*: the call in flight in the live
//!   communicator table, or a `ncclGroupEnd` inferred from a group its records leave open)
//!   or outside one, *silent* since its last call returned.
//! - A wait in collective #k waits for the members of its communicator that never entered
//!   #k; a grouped send/recv waits for its peers that have not posted their half (a peer
//!   blocked in an exchange with other ranks only, such as a pipeline stage's receive from
//!   the stage before it, has not: the blame passes along the chain of receives to the
//!   rank that never posted). A rank outside any call but ahead of others on a
//!   communicator waits for those furthest behind (real NCCL returns before the GPU work is
//!   done, so real jobs block outside NCCL).
//! - Such a dependency is *stuck* when the wait is older than the threshold, when the rank
//!   waited for has been silent longer than the threshold, or when that rank is gone (dead,
//!   stopped, exited) while the waiter still runs. Younger ones are the skew of a healthy
//!   job, which always has some ranks inside collective #k and others not there yet.
//! - The threshold is `max(min_stuck, factor x step time)`, the step time estimated from
//!   the job's own collective cadence (see `cadence`).

pub mod cadence;
mod classify;
#[cfg(test)]
mod classify_tests;
pub mod device;
pub mod device_chain;
mod facts;
pub mod kernel_ch;
mod mismatch;
mod post_mortem;
pub mod progress;
mod qp;
#[cfg(test)]
mod testkit;

use serde::Serialize;

pub use cadence::{Cadence, Threshold};
pub use mismatch::{FieldValue, Findings, Gather, Mismatch, MismatchField, Said, Say, Tally};
pub use post_mortem::PostMortem;
pub use qp::StuckQp;

use std::collections::BTreeMap;

use crate::analysis::comms::grow::Aliases;
use crate::analysis::comms::members;
use crate::analysis::log::liveness::Liveness;
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::reader::CommLive;
use crate::core::log::records::{CommCreated, CommOrigin, NcclCall};

/// Stuck means older than `factor` steps: the longest a healthy rank waits in a collective
/// is the skew between ranks, and the longest it goes without an NCCL call is its longest
/// compute phase, both less than one step; 1.5 leaves half a step for steps slower than
/// the median and still reports a hang within 2 steps of its start.
pub const DEFAULT_FACTOR: f64 = 1.5;
/// Floor of the threshold: below it, scheduling noise on a loaded host looks like a hang (a
/// healthy rank on a busy 2-core CI machine was seen silent for 73 ms in a 43 ms step).
pub const DEFAULT_MIN_STUCK_NS: u64 = 250_000_000;
/// The threshold while the logs hold too few steps to estimate the cadence: the first
/// collectives of a job (connection set-up, warm-up) may legitimately take this long.
pub const DEFAULT_FALLBACK_STUCK_NS: u64 = 30_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    pub factor: f64,
    pub min_stuck_ns: u64,
    pub fallback_stuck_ns: u64,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            factor: DEFAULT_FACTOR,
            min_stuck_ns: DEFAULT_MIN_STUCK_NS,
            fallback_stuck_ns: DEFAULT_FALLBACK_STUCK_NS,
        }
    }
}

/// One rank log, as the adapter read it. Times are the rank's own `CLOCK_MONOTONIC`.
#[derive(Clone, Debug)]
pub struct RankInput {
    /// Global rank from the header, -1 for a log without rank identity.
    pub rank: i32,
    pub liveness: Liveness,
    /// The reader's now on this rank's clock: on the rank's host the reader's
    /// `CLOCK_MONOTONIC`, elsewhere the last heartbeat plus its age by the wall clock.
    /// `None` when neither is known.
    pub now_ns: Option<u64>,
    /// Reader's now minus the last heartbeat (`analysis::heartbeat`); `None` if it never beat.
    pub heartbeat_age_ns: Option<u64>,
    /// The last heartbeat: the instant a log that stopped beating describes.
    pub heartbeat_mono_ns: u64,
    /// A heartbeat read before `calls` was: the collector drains the ring just before each
    /// heartbeat, so every call that returned before it is in `calls`.
    pub drained_ns: u64,
    /// The live communicator table.
    pub comms: Vec<CommLive>,
    pub created: Vec<CommCreated>,
    /// `nccl_call` records held, oldest first.
    pub calls: Vec<NcclCall>,
    /// No record missing from `calls`' span (none torn, none overwritten while read).
    pub history_complete: bool,
    /// The log committed records after `calls` was read: the rank has moved on since.
    pub records_stale: bool,
    /// When the collector last found events dropped (its newest `drops` record).
    pub newest_drop_ns: Option<u64>,
    /// The stage the rank is in. The hook for stage markers: the library does not record
    /// them yet, so the adapter passes `None`.
    pub stage: Option<String>,
    /// Its queue pairs with a work request in flight past the timeout and no completion
    /// since (`qp_stuck` evidence).
    pub stuck_qps: Vec<StuckQp>,
}

/// A rank's part in a hang, and its state in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Not involved in anything stuck.
    Ok,
    /// Others are stuck waiting for it, but it is still making NCCL calls.
    Slow,
    /// Blocked in (or, outside NCCL, behind) a call that waits for other ranks.
    Waiting,
    /// Never entered the call others are stuck in, and has made no progress since: the culprit.
    Missing,
    /// Stuck in a call though every rank it needs is there (or it waits for nobody known).
    Wedged,
    /// Heartbeat stale, process gone.
    Dead,
    /// Heartbeat stale, process still there: stopped, or frozen as a whole.
    Stalled,
    /// Exited through `exit()`.
    Exited,
    /// Inside a collective every rank entered, with an RDMA queue pair whose work request
    /// never completed: the culprit of a collective that cannot complete.
    StuckQp,
    /// Recording stopped after an internal error: its log says nothing after that.
    Disabled,
    /// Behind the others when no rank has advanced for the progress threshold (step and
    /// stage markers, `progress`): the culprit of a hang no call shows.
    Behind,
    /// Its device is stuck behind other work (a kernel that never ends) while its peers'
    /// devices wait for it in a collective every host launched (`device`): the culprit.
    StuckKernel,
}

impl State {
    pub fn of_liveness(liveness: Liveness) -> State {
        match liveness {
            Liveness::Live => State::Ok,
            Liveness::Dead => State::Dead,
            Liveness::Stalled => State::Stalled,
            Liveness::Exited => State::Exited,
            Liveness::Disabled => State::Disabled,
        }
    }
}

/// Where a rank is: the call it is in, or the collective it has not entered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Position {
    pub comm_id: u64,
    /// The collective's sequence number, or the send/recv sequence (which is not comparable
    /// across ranks) for point-to-point calls.
    pub comm_seq: Option<u64>,
    pub op: Option<NcclOp>,
    /// Inside the call (false: the call it has not entered, or, outside NCCL, its last).
    pub in_flight: bool,
    /// Inside `ncclGroupEnd` of a group holding this call.
    pub grouped: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankVerdict {
    pub rank: i32,
    pub state: State,
    /// Its part in a hang as of its log's last word (for a live rank, the same as `state`;
    /// for a dead one, what it was doing when it died).
    pub role: State,
    pub stage: Option<String>,
    /// How long it has been stuck: in its call (waiting, wedged) or since its last call
    /// returned (missing, dead, stalled).
    pub stuck_ns: Option<u64>,
    pub at: Option<Position>,
    /// Global ranks it waits for (-1: a communicator rank without a log).
    pub waiting_for: Vec<i32>,
    /// Since its last NCCL call returned or entered, as of its log's last word.
    pub silent_ns: Option<u64>,
}

/// A member's counters on a communicator, as the live table (or, for a destroyed or
/// untracked communicator, the records) say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Member {
    pub rank: i32,
    pub comm_rank: i32,
    pub coll_entered: u64,
    pub coll_returned: u64,
    pub p2p_entered: u64,
    pub p2p_returned: u64,
    pub in_flight: Option<MemberCall>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MemberCall {
    pub op: Option<NcclOp>,
    pub comm_seq: u64,
    pub age_ns: u64,
    pub grouped: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CommVerdict {
    pub comm_id: u64,
    /// -1 when no member knows it.
    pub nranks: i32,
    /// The first collective that waits have been stuck on, `None` when none is stuck.
    pub stuck_seq: Option<u64>,
    pub stuck_op: Option<NcclOp>,
    /// Sends/receives are stuck on it.
    pub stuck_p2p: bool,
    pub stuck_ns: Option<u64>,
    pub missing_ranks: Vec<i32>,
    pub waiting_ranks: Vec<i32>,
    pub dead_ranks: Vec<i32>,
    pub wedged_ranks: Vec<i32>,
    pub slow_ranks: Vec<i32>,
    pub stalled_ranks: Vec<i32>,
    pub exited_ranks: Vec<i32>,
    pub disabled_ranks: Vec<i32>,
    /// Communicator ranks that no log claims, yet others wait for.
    pub no_log_comm_ranks: Vec<i32>,
    pub members: Vec<Member>,
    pub mismatches: Vec<Mismatch>,
    /// Mismatches found; `mismatches` holds the first `mismatch::LIST_AT_MOST`.
    pub mismatches_total: usize,
    /// Stuck queue pairs of members otherwise wedged in the stuck collective: the reason it
    /// cannot complete.
    pub stuck_qps: Vec<StuckQp>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Diagnosis {
    /// A culprit holds up a stuck wait: some rank is missing, wedged, dead, stalled or
    /// exited, or a communicator rank without a log is waited for.
    pub hung: bool,
    pub threshold: Threshold,
    pub communicators: Vec<CommVerdict>,
    /// In input order.
    pub ranks: Vec<RankVerdict>,
    /// Every live rank has been outside NCCL for this long, more than the threshold: the
    /// job is stuck outside NCCL or in a long phase without collectives, which one the
    /// logs cannot tell. `None` otherwise.
    pub quiet_ns: Option<u64>,
    /// Every rank is gone (the job was torn down) and the logs' last word was a hang.
    pub post_mortem: Option<PostMortem>,
}

pub fn diagnose(ranks: &[RankInput], settings: &Settings) -> Diagnosis {
    diagnose_named(ranks, settings, None)
}

/// [`diagnose`] with the job's cadence given: [`cadence::estimate`] over these ranks'
/// calls, which a caller that sees the same calls again (the exporter) keeps.
pub fn diagnose_paced(ranks: &[RankInput], settings: &Settings, cadence: Option<Cadence>) -> Diagnosis {
    diagnose_named(ranks, settings, Some(cadence))
}

/// Judges the ranks with every communicator named and numbered as the reports name them
/// (a grown communicator is one on every member, whatever it called it; a split's ranks
/// filled in), paced by `cadence`, else by the cadence of their calls.
fn diagnose_named(ranks: &[RankInput], settings: &Settings, cadence: Option<Option<Cadence>>) -> Diagnosis {
    let aliases = Aliases::of(ranks.iter().flat_map(|r| &r.created));
    let split = split_ranks(ranks);
    let prepared: Option<Vec<RankInput>> = (!aliases.is_empty() || !split.is_empty())
        .then(|| ranks.iter().map(|r| renamed(with_split_ranks(r.clone(), &split), &aliases)).collect());
    let ranks = prepared.as_deref().unwrap_or(ranks);
    let cadence = cadence.unwrap_or_else(|| {
        let calls: Vec<&[NcclCall]> = ranks.iter().map(|r| r.calls.as_slice()).collect();
        cadence::estimate(&calls)
    });
    judge(ranks, settings, cadence)
}

/// Global rank → communicator rank of every communicator `ncclCommSplit` made whose ranks
/// no log recorded (NCCL reports them only when asked) but follow from its members' keys
/// (`members::complete_ranks`): without them a send/recv's peer, a communicator rank,
/// names nobody, and a rank that never posted its half of an exchange goes unnamed.
fn split_ranks(ranks: &[RankInput]) -> BTreeMap<u64, BTreeMap<u32, i32>> {
    if !ranks.iter().flat_map(|r| &r.created).any(|c| c.rank < 0 && c.origin == CommOrigin::Split) {
        return BTreeMap::new();
    }
    let logs = ranks.iter().filter_map(|r| Some((u32::try_from(r.rank).ok()?, r.created.as_slice())));
    let mut known = members::complete_ranks(&members::collect(logs));
    known.retain(|id, _| ranks.iter().flat_map(|r| &r.created).any(|c| c.comm_id == *id && c.rank < 0));
    known
}

/// A rank's input with the communicator ranks `split_ranks` found filled in.
fn with_split_ranks(mut r: RankInput, split: &BTreeMap<u64, BTreeMap<u32, i32>>) -> RankInput {
    let Ok(global) = u32::try_from(r.rank) else { return r };
    let place = |comm_id: u64| {
        let members = split.get(&comm_id)?;
        Some((*members.get(&global)?, i32::try_from(members.len()).ok()?))
    };
    for c in r.created.iter_mut().filter(|c| c.rank < 0) {
        if let Some((rank, nranks)) = place(c.comm_id) {
            (c.rank, c.nranks) = (rank, nranks);
        }
    }
    for row in r.comms.iter_mut().filter(|row| row.rank < 0) {
        if let Some((rank, nranks)) = place(row.comm_id) {
            (row.rank, row.nranks) = (rank, nranks);
        }
    }
    r
}

/// A rank's input with every communicator named as the reports name it.
fn renamed(mut r: RankInput, aliases: &Aliases) -> RankInput {
    if aliases.is_empty() {
        return r;
    }
    r.created = aliases.memberships(&r.created);
    for c in &mut r.calls {
        c.comm_id = aliases.canonical(c.comm_id);
    }
    for row in &mut r.comms {
        row.comm_id = aliases.canonical(row.comm_id);
    }
    r
}

fn judge(ranks: &[RankInput], settings: &Settings, cadence: Option<Cadence>) -> Diagnosis {
    let threshold = Threshold::new(cadence, settings);
    let facts: Vec<facts::Facts> = ranks.iter().map(facts::Facts::of).collect();
    let mut verdict = classify::classify(ranks, &facts, threshold.threshold_ns);
    let mut mismatches = mismatch::find(ranks, &facts);
    for comm in &mut verdict.communicators {
        (comm.mismatches, comm.mismatches_total) = mismatches.remove(&comm.comm_id).unwrap_or_default();
    }
    let mut d = Diagnosis {
        hung: verdict.hung,
        threshold,
        quiet_ns: facts::quiet_ns(ranks, &facts, threshold.threshold_ns),
        communicators: verdict.communicators,
        ranks: verdict.ranks,
        post_mortem: None,
    };
    let stuck: Vec<StuckQp> = ranks.iter().flat_map(|r| r.stuck_qps.iter().copied()).collect();
    qp::blame_stuck_qps(&mut d, &stuck);
    d.post_mortem = post_mortem::of(&d);
    d
}
