//! stagefrontier: an always-on recorder for distributed training jobs.
//!
//! Loaded into an unmodified job (LD_PRELOAD, or as the CUDA, NVTX or NCCL-profiler
//! injection library), it records every NCCL call into a crash-consistent per-rank log
//! that the `sf` CLI reads live or after the job.
//!
//! The crate keeps four parts apart, and its arrows point one way (`tests/layering.rs`
//! holds them there):
//! - [`doors`]: FFI entry points; all `unsafe` of the recording path lives there.
//! - [`core`]: events, the lock-free ring, the log format, the collector thread.
//! - [`analysis`]: pure, deterministic functions over records.
//! - [`report`]: the questions `sf` answers, read from logs through `core` and answered
//!   by `analysis`; the `sf` binary only parses arguments, prints and runs processes.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod analysis;
pub mod core;
pub mod doors;
pub mod report;

/// and NCCL's entry points.
pub use doors::comms::nccl::{
    ncclAllGather, ncclAllReduce, ncclAlltoAll, ncclBcast, ncclBroadcast, ncclCommAbort, ncclCommCount,
    ncclCommCuDevice, ncclCommDestroy, ncclCommInitAll, ncclCommInitRank, ncclCommInitRankConfig, ncclCommSplit,
    ncclCommUserRank, ncclGetUniqueId, ncclGetVersion, ncclGroupEnd, ncclGroupStart, ncclRecv, ncclReduce,
    ncclReduceScatter, ncclSend,
};
/// The whole exported C ABI of libstagefrontier.so: CUDA's injection entry point
/// (CUDA_INJECTION64_PATH),
pub use doors::kernels::cuda::InitializeInjection;
/// and the NCCL profiler plugin tables (NCCL_PROFILER_PLUGIN).
pub use doors::net::profiler::{
    ncclProfiler_v1, ncclProfiler_v2, ncclProfiler_v3, ncclProfiler_v4, ncclProfiler_v5, ncclProfiler_v6,
    ncclProfiler_v7,
};
/// glibc's `dlvsym`, through which the libibverbs fallback door (SF_VERBS=1) counts verbs,
#[cfg(target_arch = "x86_64")]
pub use doors::net::verbs::dlvsym;
/// and the verbs it counts for programs linked against libibverbs (forwarders when off).
#[cfg(target_arch = "x86_64")]
pub use doors::net::verbs::{ibv_close_device, ibv_create_qp, ibv_open_device};
/// `_exit` and `_Exit`, whose status the preload door records (`process_end`),
pub use doors::process_exit::{_Exit, _exit};
/// the Python door's calls around collectives issued from Python on a gloo process group,
pub use doors::python_collectives::{
    sf_py_call_begin, sf_py_call_detach, sf_py_call_end, sf_py_group, sf_py_group_desc, sf_py_wait_begin,
    sf_py_wait_end,
};
/// the C API of c_headers/stagefrontier.h,
pub use doors::steps::markers::{
    sf_declare_rank, sf_nvtx_steps, sf_recording, sf_stage_begin, sf_stage_end, sf_step_begin, sf_step_end, sf_value,
};
/// NVTX's injection entry point (NVTX_INJECTION64_PATH),
pub use doors::steps::nvtx::InitializeInjectionNvtx2;
