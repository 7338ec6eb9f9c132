//! `sf`'s exit statuses: one scheme for every command, the table in README "Exit statuses and JSON".
//! A finding's status is the answer even when some log could not be read; 1 is for a
//! command that could not answer at all.

/// Nothing found; also nothing of the command's kind to judge (no kernel records for
/// `sf kernels`, no work requests nor port counters for `sf net`), which it says in a line.
pub const NOTHING: u8 = 0;
/// An error: a path that is not a job, an unreadable log, logs that hold no step vectors
/// for a command that needs them.
pub const ERROR: u8 = 1;
// 2 is usage only: clap's status for a bad command line.
/// A hang: `sf hang`'s diagnosis, `sf net`'s stuck QP.
pub const HUNG: u8 = 3;
/// Slow, degraded or anomalous: `sf slow`, `sf frontier`'s culprit, `sf net`'s degraded
/// QP, `sf kernels`.
pub const SLOW: u8 = 4;
/// A collective whose ranks disagree on count, type or operation: `sf hang`, `sf ls`. It
/// wins over 3 because it is the usual cause of the hang that follows it.
pub const MISMATCH: u8 = 5;
