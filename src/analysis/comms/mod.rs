//! NCCL facts read from the logs: which NCCL version each rank ran, which profiler record
//! is which preload call, one name for a communicator grown with `ncclCommGrow`, and who
//! is in each communicator at which rank.

pub mod grow;
pub mod link;
pub mod members;
pub mod nccl_version;
