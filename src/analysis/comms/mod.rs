//! NCCL facts read from the logs: which NCCL version each rank ran.

pub mod nccl_version;
