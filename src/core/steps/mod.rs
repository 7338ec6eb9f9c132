//! Steps and stages: markers and NVTX ranges turned into per-step stage vectors. Owns the
//! ordered-stage contract; imports live, log, record, comms (stage-bound faults) and kernels
//! (device time per step); only runtime imports it. Never judges a step (that is
//! `analysis`).

pub mod markers;
pub mod nvtx_ranges;
pub mod nvtx_stages;
pub mod step_assembly;
