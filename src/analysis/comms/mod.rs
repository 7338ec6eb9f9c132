//! NCCL facts read from the logs: which NCCL version each rank ran, which profiler record
//! is which preload call, and one name for a communicator grown with `ncclCommGrow`.

pub mod grow;
pub mod link;
pub mod nccl_version;
