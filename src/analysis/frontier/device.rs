//! A window's device evidence: per rank and stage, how many steps the CUDA door sampled,
//! and over those steps the CPU-wall time, the device time and its spill. Sums over R×S
//! cells, whatever the window length. Side evidence: the frontier never reads it.

use super::step::DeviceTime;

/// Sums over the sampled (rank, stage, step) cells of one window. Vectors are R×S,
/// row-major, rows in the window's rank order.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceSummary {
    pub ranks: Vec<u32>,
    pub stages: usize,
    /// Steps of the window: each rank could have sampled this many per stage.
    pub steps: usize,
    pub samples: Vec<u64>,
    /// CPU-wall seconds of the sampled cells, the host side of the same steps.
    pub wall_s: Vec<f64>,
    pub device_s: Vec<f64>,
    pub spill_s: Vec<f64>,
}

/// The totals of one stage over a set of ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DeviceTotals {
    pub samples: u64,
    /// `samples` over the rank-steps the ranks had: the paper's event-ready ratio.
    pub ready_ratio: f64,
    pub wall_s: f64,
    pub device_s: f64,
    pub spill_s: f64,
}

impl DeviceSummary {
    /// Stage `stage` summed over `ranks` (every rank of the window when empty or when
    /// none of them is in it).
    pub fn stage(&self, stage: usize, ranks: &[u32]) -> DeviceTotals {
        let mut rows: Vec<usize> = ranks.iter().filter_map(|r| self.ranks.iter().position(|x| x == r)).collect();
        if rows.is_empty() {
            rows = (0..self.ranks.len()).collect();
        }
        let mut total = DeviceTotals::default();
        for row in &rows {
            let i = row * self.stages + stage;
            total.samples += self.samples[i];
            total.wall_s += self.wall_s[i];
            total.device_s += self.device_s[i];
            total.spill_s += self.spill_s[i];
        }
        let possible = (rows.len() * self.steps) as f64;
        total.ready_ratio = if possible > 0.0 { total.samples as f64 / possible } else { 0.0 };
        total
    }
}

pub(super) struct DeviceAcc {
    stages: usize,
    steps: usize,
    /// `None` until a step brings device evidence.
    sums: Option<Sums>,
}

struct Sums {
    samples: Vec<u64>,
    wall: Vec<f64>,
    device: Vec<f64>,
    spill: Vec<f64>,
}

impl DeviceAcc {
    pub fn new(stages: usize) -> DeviceAcc {
        DeviceAcc { stages, steps: 0, sums: None }
    }

    /// One step: `durations` and `device` are R×S in the window's rank order; `device` is
    /// empty when the step has no device evidence at all.
    pub fn add(&mut self, durations: &[f64], device: &[Option<DeviceTime>]) {
        self.steps += 1;
        if device.is_empty() {
            return;
        }
        let n = durations.len();
        let sums = self.sums.get_or_insert_with(|| Sums {
            samples: vec![0; n],
            wall: vec![0.0; n],
            device: vec![0.0; n],
            spill: vec![0.0; n],
        });
        for (i, d) in device.iter().enumerate() {
            if let Some(d) = d {
                sums.samples[i] += 1;
                sums.wall[i] += durations[i];
                sums.device[i] += d.device_s;
                sums.spill[i] += d.spill_s;
            }
        }
    }

    /// `None` when no step of the window brought device evidence: no device label then.
    pub fn finish(self, ranks: &[u32]) -> Option<DeviceSummary> {
        let sums = self.sums?;
        Some(DeviceSummary {
            ranks: ranks.to_vec(),
            stages: self.stages,
            steps: self.steps,
            samples: sums.samples,
            wall_s: sums.wall,
            device_s: sums.device,
            spill_s: sums.spill,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_only_sampled_cells_and_counts_readiness() {
        let mut acc = DeviceAcc::new(2);
        let sample = |device_s, spill_s| Some(DeviceTime { device_s, spill_s });
        acc.add(&[1.0, 2.0, 3.0, 4.0], &[sample(0.5, 0.1), None, sample(3.0, 0.0), sample(1.0, 1.0)]);
        acc.add(&[1.0, 2.0, 3.0, 4.0], &[]);
        let s = acc.finish(&[4, 9]).unwrap();
        let first = s.stage(0, &[]);
        assert_eq!((first.samples, first.wall_s, first.device_s, first.spill_s), (2, 4.0, 3.5, 0.1));
        assert_eq!(first.ready_ratio, 0.5);
        let rank9 = s.stage(1, &[9]);
        assert_eq!((rank9.samples, rank9.wall_s, rank9.device_s, rank9.ready_ratio), (1, 4.0, 1.0, 0.5));
        // A rank not in the window falls back to all of them.
        assert_eq!(s.stage(1, &[77]).samples, 1);
        assert_eq!(DeviceAcc::new(2).finish(&[0]), None);
    }
}
