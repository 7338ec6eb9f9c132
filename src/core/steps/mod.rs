//! Steps and stages: markers and NVTX ranges turned into per-step stage vectors, stage
//! names, and device time per stage. Owns the ordered-stage contract; never judges a step
//! (that is `analysis`).

pub mod markers;
pub mod nvtx_ranges;
pub mod nvtx_stages;
pub mod stage_device;
pub mod stage_names;
pub mod step_assembly;
