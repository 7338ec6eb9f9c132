//! analysis: pure, safe, deterministic functions over what the logs hold.

#![forbid(unsafe_code)]

pub mod frontier;
pub mod hang;
pub mod heartbeat;
pub mod kernels;
pub mod liveness;
pub mod nccl_version;
pub mod ports;
pub mod slow;
