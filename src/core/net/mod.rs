//! Network progress: NCCL profiler-plugin events, per-QP work-request counters, the QP
//! monitor that judges a QP stuck or slow, the verbs fallback and the sysfs port counters.
//! Imports live, log and record; only runtime (and the doors) import it. The tables are
//! lock-free and fixed-size: a full table drops and counts.

pub mod port_counters;
pub mod profiler;
mod profiler_abi;
mod profiler_contexts;
mod profiler_names;
pub mod proxy_progress;
pub mod qp_monitor;
pub mod verbs;
pub mod work_requests;
