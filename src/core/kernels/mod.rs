//! GPU kernel evidence: CUPTI activity buffers, kernel records and per-window kernel
//! summaries (KDE clusters, sampled by a reservoir). CUPTI callbacks only queue buffers;
//! parsing and summarising happen in the collector, never on an application thread.

pub mod cupti;
pub mod kde;
pub mod kernel_activity;
pub mod kernel_windows;
pub mod reservoir;
