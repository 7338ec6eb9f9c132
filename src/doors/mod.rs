//! doors: the library's entry points from foreign code. FFI and `unsafe` live here and
//! nowhere else in the recording path; every door turns its arguments into plain values
//! and hands them to `core`. Grouped by the evidence family each feeds, as in `core`.
//! Imported only by lib.rs's export list; imports only `core`. No logic beyond FFI: no
//! analysis, no log reading, no report.

pub mod comms;
pub mod kernels;
pub mod net;
pub mod process_exit;
pub mod python_collectives;
mod real_symbol;
pub mod steps;
mod traced;
