//! The NCCL preload door: NCCL's public entry points, forwarded to the real library with
//! the exact return value, each call recorded on the way.

pub mod nccl;
pub(super) mod nccl_abi;
mod nccl_symbols;
