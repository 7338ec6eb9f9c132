//! Network-progress doors: the NCCL profiler plugin (NCCL_PROFILER_PLUGIN) and the
//! libibverbs fallback (SF_VERBS=1).

pub mod profiler;
/// x86-64 only: its `dlvsym` is an assembly trampoline (see verbs/dlvsym.rs).
#[cfg(target_arch = "x86_64")]
pub mod verbs;
