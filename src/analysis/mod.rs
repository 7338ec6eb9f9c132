//! analysis: pure, safe, deterministic functions over what the logs hold.

#![forbid(unsafe_code)]

pub mod blame;
pub mod comms;
pub mod frontier;
pub mod hang;
pub mod inferred;
pub mod kernels;
pub mod log;
pub mod net;
pub mod slow;
