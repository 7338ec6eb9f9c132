//! core: events, the ring, the log format and the collector. Safe Rust except where a
//! module maps shared memory, each such block with its SAFETY note.

pub mod clock;
pub mod collector;
pub mod comm_identity;
pub mod comm_table;
pub mod config;
pub mod cupti;
pub mod event;
pub mod fnv;
pub mod host;
pub mod identity;
pub mod inject;
pub mod kernel_activity;
pub mod kernel_windows;
pub mod log;
pub mod markers;
pub mod nccl_op;
pub mod notice;
pub mod nvtx_ranges;
pub mod nvtx_stages;
pub mod port_counters;
pub mod profiler;
pub mod qp_monitor;
pub mod ring;
pub mod runtime;
pub mod stage_device;
pub mod stage_names;
pub mod step_assembly;
pub mod thread_state;
pub mod tracer;
pub mod verbs;
pub mod work_requests;
