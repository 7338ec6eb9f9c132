//! NCCL facts read from the logs: which NCCL version each rank ran, and which profiler
//! record is which preload call.

pub mod link;
pub mod nccl_version;
