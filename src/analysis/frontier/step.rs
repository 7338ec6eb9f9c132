//! One aligned step as the analyzer takes it: a plain R×S duration matrix, whoever
//! produced it (a CSV today, the rank logs' stage vectors later).

use std::fmt;
use std::sync::Arc;

use super::schema::Schema;

/// Steps are aligned by `index` across ranks; each rank's durations are differences of its
/// own clock, so no clock agreement between ranks is needed.
#[derive(Clone, Copy, Debug)]
pub struct Step<'a> {
    pub index: u64,
    pub schema: &'a Arc<Schema>,
    /// Ranks the job has: `ranks.len() + missing.len()`.
    pub world: usize,
    /// Ranks present, ascending; row r of `durations` is `ranks[r]`.
    pub ranks: &'a [u32],
    /// Ranks of the world with no complete stage vector at this step, ascending: the
    /// world's ranks not in `ranks`, so steps of one world with the same `ranks` miss the
    /// same ranks.
    pub missing: &'a [u32],
    /// `ranks.len() × schema.len()` seconds, row-major, each finite and non-negative.
    pub durations: &'a [f64],
    /// Per present rank, seconds by which its explicit stages exceeded its step's wall time
    /// (nested or double-counted stages); empty when the source cannot tell (a CSV).
    pub overlap_s: &'a [f64],
    /// Per present rank and stage (R×S, row-major like `durations`), the device time the
    /// stage's kernels took, when the rank's CUDA door sampled this step; empty when the
    /// source has no device evidence. Side evidence only: it never enters the prefixes.
    pub device: &'a [Option<DeviceTime>],
}

/// One rank's stage in one step as the GPU saw it (`stage_device` records).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DeviceTime {
    /// GPU busy time of the kernels the stage launched (union over streams), seconds.
    pub device_s: f64,
    /// The part of `device_s` that ran after the stage's host-side end.
    pub spill_s: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StepError {
    NoRanks { index: u64 },
    Shape { index: u64, expected: usize, got: usize },
    World { index: u64, world: usize, accounted: usize },
    Duration { index: u64, rank: u32, stage: String, value: f64 },
    Device { index: u64, rank: u32, stage: String },
    OutOfOrder { index: u64, previous: u64 },
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepError::NoRanks { index } => write!(f, "step {index} has no rank with a complete stage vector"),
            StepError::Shape { index, expected, got } => {
                write!(f, "step {index} has {got} durations where its ranks and stages make {expected}")
            }
            StepError::World { index, world, accounted } => {
                write!(f, "step {index}: present and missing ranks make {accounted}, not the world of {world}")
            }
            StepError::Duration { index, rank, stage, value } => write!(
                f,
                "step {index}, rank {rank}, stage {stage}: duration {value} is not a finite non-negative number of seconds"
            ),
            StepError::Device { index, rank, stage } => write!(
                f,
                "step {index}, rank {rank}, stage {stage}: device or spill time is not a finite non-negative number \
                 of seconds, or the spill exceeds the device time"
            ),
            StepError::OutOfOrder { index, previous } => {
                write!(f, "step {index} comes after step {previous}: steps must arrive in increasing order")
            }
        }
    }
}

impl std::error::Error for StepError {}

impl Step<'_> {
    pub fn validate(&self) -> Result<(), StepError> {
        let index = self.index;
        let stages = self.schema.len();
        if self.ranks.is_empty() {
            return Err(StepError::NoRanks { index });
        }
        let expected = self.ranks.len() * stages;
        if self.durations.len() != expected {
            return Err(StepError::Shape { index, expected, got: self.durations.len() });
        }
        if !self.overlap_s.is_empty() && self.overlap_s.len() != self.ranks.len() {
            return Err(StepError::Shape { index, expected: self.ranks.len(), got: self.overlap_s.len() });
        }
        if !self.device.is_empty() && self.device.len() != expected {
            return Err(StepError::Shape { index, expected, got: self.device.len() });
        }
        let sane = |d: &DeviceTime| d.device_s.is_finite() && d.spill_s >= 0.0 && d.spill_s <= d.device_s;
        if let Some(i) = self.device.iter().position(|d| d.is_some_and(|d| !sane(&d))) {
            let (rank, stage) = (self.ranks[i / stages], self.schema.name(i % stages).to_string());
            return Err(StepError::Device { index, rank, stage });
        }
        let accounted = self.ranks.len() + self.missing.len();
        if accounted != self.world {
            return Err(StepError::World { index, world: self.world, accounted });
        }
        // Fast path: the bit patterns of finite non-negative floats are exactly those below
        // +∞'s, and an integer maximum vectorizes. -0.0 fails it but is valid: the exact
        // test below decides.
        if self.durations.iter().map(|d| d.to_bits()).max().unwrap_or(0) < f64::INFINITY.to_bits() {
            return Ok(());
        }
        let valid = |d: &f64| *d >= 0.0 && d.is_finite();
        if let Some(i) = self.durations.iter().position(|d| !valid(d)) {
            return Err(StepError::Duration {
                index,
                rank: self.ranks[i / stages],
                stage: self.schema.name(i % stages).to_string(),
                value: self.durations[i],
            });
        }
        Ok(())
    }
}
