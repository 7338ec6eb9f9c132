//! Slow-rank levels over iteration and stage timings: L1 (one rank's iteration-time
//! series: jitter windows and a step regression, ARGUS §6.1 and App. B), L2 (one stage
//! across a parallel group: CV and z-score stragglers, ARGUS App. B) and VenusTrace's
//! expected-time tracking of critical-path nodes (Alg. 2). L3 lives in `kernels`.

pub mod attribution;
pub mod blamed;
pub mod change_point;
pub mod effect;
pub mod expected_time;
pub mod jitter;
pub mod job;
#[cfg(test)]
mod job_tests;
pub mod job_wide;
pub mod l1;
pub mod stragglers;
