//! GPU kernel evidence: CUPTI activity buffers, kernel records, device time per stage and
//! per-window kernel summaries (KDE clusters, sampled by a reservoir). Imports live, log and
//! record; steps and runtime may import it. CUPTI callbacks only queue buffers; parsing and
//! summarising happen in the collector, never on an application thread.

pub mod cupti;
pub mod device_tracker;
pub mod kde;
pub mod kernel_activity;
pub mod kernel_windows;
pub mod reservoir;
pub mod stage_device;
