//! Wait attribution: who made the others wait, and in which stage.
//!
//! In a synchronous job a late rank is the first to leave a collective: its peers sat in
//! the call waiting for it, and their stages grew by that wait. Stage durations alone
//! therefore point at the waiters. The preload door's `nccl_call` records say more: every
//! collective, matched across ranks by communicator and sequence number, shows each rank's
//! time inside the call. All ranks leave a collective together (within the algorithm's own
//! skew), so a rank's time inside the call minus the shortest one is how long it waited,
//! and the rank with the shortest is the last to arrive. Only rank-local differences are
//! read, so no clock agreement between ranks (or hosts) is needed.
//!
//! - `collective`: matching calls into collectives, each rank's wait, and how much of the
//!   others' waiting each late rank caused (shared among the ranks still to arrive).
//! - [`attribute`]: each rank's wait placed in the stage it entered the call from, and each
//!   late rank's caused wait charged to the stage that made it late: the stage where its
//!   own time since its previous call exceeded its peers' the most; of a blocking call,
//!   only the part of its lateness that overrun explains (the rest it carried in from
//!   leaving its previous call late, and no stage of its own made it).
//! - [`culprits`]: per window, the blame table (rank, stage) → seconds of other ranks'
//!   waiting caused, and the ranks that caused enough of it to be a finding.
//!
//! - [`device`]: the same on the device, for NCCL's asynchronous launches: the wait is in
//!   the NCCL kernel, not the call, and the host's own waiting is its synchronization.
//! - [`waits_from`]: which of the two the logs can show, if either.

mod attribute;
mod carry;
mod chance;
mod collective;
mod culprits;
pub mod device;
mod stage_seconds;
pub mod waits_from;

pub use attribute::{attribute, Attribution, DeviceCharge, RankTimeline, StageSpan};
pub use collective::{caused_shares, match_collectives, CallTiming, Collective, Participant};
pub use culprits::{
    blame_table, culprits, measured_sync_wait, sync_wait_stages, BlameCell, BlameTable, Culprit, CulpritParams,
    SYNC_WAIT_SHARE,
};
pub use stage_seconds::{StageKey, StageSeconds};
