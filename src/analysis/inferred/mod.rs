//! Steps and stages inferred from the NCCL schedule, for jobs with no markers.
//!
//! A training job issues the same collectives in the same order every step: the same
//! gradient buckets (operation, count, datatype) on the same communicators. That repeating
//! pattern is a step clock that needs no configuration and no marker:
//!
//! - [`pattern`]: the period of one rank's collectives (the shortest that repeats their
//!   signatures about as well as any longer one; a multiple of it when several buckets
//!   look alike and the gaps between the calls say where the step turns).
//! - [`phases`]: where the step turns (after the pattern's longest gap outside
//!   collectives, the median over ranks, so one slow rank cannot move it); the reference
//!   rank's steps, resuming after calls outside the pattern (an evaluation pass); and on
//!   every rank the same calls (matched by communicator and sequence number) make the same
//!   step, so a step boundary sits at the same point of the pattern everywhere. Each step
//!   is cut into the inferred phases by the calls' enter and exit times.
//!
//! The step begins when the collective before the step gap returns (a moment all ranks
//! share: a collective returns everywhere together) and ends when the next one does. So:
//!
//! | phase | what it holds (DDP-like job) |
//! |---|---|
//! | `inferred.before_first_collective` | optimizer step of the previous step's tail when no collective follows it, data loading, forward, the head of backward |
//! | `inferred.in_collectives` | time inside the step's collectives (waits for late peers included; `sf frontier` takes them out) |
//! | `inferred.between_collectives` | backward between bucket allreduces, and any host work between two collectives of one step (an optimizer step before a metrics allgather) |
//!
//! A phase after the step's last collective does not exist under this boundary: that time
//! is the next step's `before_first_collective`, since without markers nothing tells an
//! optimizer step from the data loading that follows it.
//!
//! Everything here is pure and bounded: the period search reads at most
//! [`pattern::SEARCH_CALLS`] calls and tries periods up to [`pattern::MAX_PERIOD`].

pub mod pattern;
pub mod phases;
#[cfg(test)]
mod testkit;

pub use pattern::{find_period, Period};
pub use phases::{infer, Inference, InferredStep, RankInference};

use crate::core::log::nccl_op::NcclOp;

/// The inferred phases, in the stage order the frontier reads them.
pub const PHASES: [&str; 3] =
    ["inferred.before_first_collective", "inferred.in_collectives", "inferred.between_collectives"];
/// Index of each phase in [`PHASES`].
pub const BEFORE_FIRST: usize = 0;
pub const IN_COLLECTIVES: usize = 1;
pub const BETWEEN: usize = 2;

/// What makes two collectives the same call of the pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Signature {
    pub comm_id: u64,
    pub op: NcclOp,
    pub count: u64,
    pub dtype: i32,
}

/// One completed collective of one rank, on that rank's clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Call {
    pub signature: Signature,
    /// (communicator, sequence number): the same collective on every rank.
    pub key: (u64, u64),
    pub enter_ns: u64,
    pub exit_ns: u64,
}

/// One rank's collectives, in enter order.
#[derive(Clone, Debug, PartialEq)]
pub struct RankCalls {
    pub rank: u32,
    pub calls: Vec<Call>,
}
