//! doors: the library's entry points from foreign code. FFI and `unsafe` live here and
//! nowhere else in the recording path; every door turns its arguments into plain values
//! and hands them to `core`.

pub mod cuda;
pub mod markers;
pub mod nccl;
mod nccl_abi;
pub mod nvtx;
pub mod profiler;
mod real_symbol;
mod traced;
/// x86-64 only: its `dlvsym` is an assembly trampoline (see verbs/dlvsym.rs).
#[cfg(target_arch = "x86_64")]
pub mod verbs;
