//! Step and stage doors: the C marker API and NVTX's injection entry point.

pub mod markers;
pub mod nvtx;
