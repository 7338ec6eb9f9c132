//! doors: the library's entry points from foreign code. FFI and `unsafe` live here and
//! nowhere else in the recording path; every door turns its arguments into plain values
//! and hands them to `core`.

pub mod markers;
pub mod nccl;
mod nccl_abi;
pub mod nvtx;
pub mod profiler;
mod real_symbol;
mod traced;
