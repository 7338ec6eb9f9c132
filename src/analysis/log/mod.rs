//! The log reader's view of a rank: heartbeat cadence and whether the writer still lives.

pub mod clocks;
pub mod ends;
pub mod heartbeat;
pub mod liveness;
