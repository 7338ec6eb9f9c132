//! Everything the window's accumulators read from one step, computed once per step in
//! buffers reused from step to step: O(R·S) memory whatever the window length.

use super::median::column_medians;
use super::recurrence::prefixes_into;

/// One step seen through eq. 1, plus the per-boundary order statistics the evidence needs.
/// Slices indexed by stage have S entries; `durations` and `prefixes` are R×S, row-major.
pub(super) struct StepView<'a> {
    pub stages: usize,
    pub durations: &'a [f64],
    pub prefixes: &'a [f64],
    /// F_s.
    pub frontier: &'a [f64],
    /// a_s = F_s − F_{s−1}.
    pub advances: &'a [f64],
    /// The first row attaining F_s.
    pub leader: &'a [usize],
    /// The second-largest prefix at each boundary (equal to F_s when two ranks tie there,
    /// and to F_s for a single rank, which has no runner-up).
    pub second: &'a [f64],
    /// median_r d_{r,s}: the clipped baseline of eq. 4 and the spread baseline's centre.
    pub median_durations: &'a [f64],
    /// median_r P_{r,s}: the centre of the lag L_s = F_s − median_r P_{r,s}.
    pub median_prefixes: &'a [f64],
    pub stage_max: &'a [f64],
    pub stage_sum: &'a [f64],
    /// Row of the rank with the largest step total (the first one on a tie).
    pub slowest: usize,
}

#[derive(Default)]
pub(super) struct StepScratch {
    prefixes: Vec<f64>,
    frontier: Vec<f64>,
    advances: Vec<f64>,
    second: Vec<f64>,
    leader: Vec<usize>,
    median_durations: Vec<f64>,
    median_prefixes: Vec<f64>,
    stage_max: Vec<f64>,
    stage_sum: Vec<f64>,
    bits: Vec<u64>,
}

impl StepScratch {
    /// `durations`: R×S, R ≥ 1, every value finite and non-negative (checked by the caller).
    pub fn view<'a>(&'a mut self, durations: &'a [f64], stages: usize) -> StepView<'a> {
        let ranks = durations.len() / stages;
        self.prefixes.resize(durations.len(), 0.0);
        prefixes_into(durations, stages, &mut self.prefixes);
        for buffer in [&mut self.frontier, &mut self.second, &mut self.stage_max] {
            buffer.clear();
            buffer.resize(stages, f64::NEG_INFINITY);
        }
        self.stage_sum.clear();
        self.stage_sum.resize(stages, 0.0);
        self.leader.clear();
        self.leader.resize(stages, 0);

        let mut slowest = (0, f64::NEG_INFINITY);
        let (frontier, second, leader) = (&mut self.frontier[..], &mut self.second[..], &mut self.leader[..]);
        let (stage_max, stage_sum) = (&mut self.stage_max[..], &mut self.stage_sum[..]);
        for (r, (d_row, p_row)) in durations.chunks_exact(stages).zip(self.prefixes.chunks_exact(stages)).enumerate() {
            for s in 0..stages {
                let (p, d) = (p_row[s], d_row[s]);
                if p > frontier[s] {
                    second[s] = frontier[s];
                    frontier[s] = p;
                    leader[s] = r;
                } else if p > second[s] {
                    second[s] = p;
                }
                // Plain compares: values are checked finite, and f64::max's NaN handling
                // is measurable in this loop.
                if d > stage_max[s] {
                    stage_max[s] = d;
                }
                stage_sum[s] += d;
            }
            if p_row[stages - 1] > slowest.1 {
                slowest = (r, p_row[stages - 1]);
            }
        }
        if ranks == 1 {
            self.second.copy_from_slice(&self.frontier);
        }

        self.advances.clear();
        let mut previous = 0.0;
        for &f in &self.frontier {
            self.advances.push(f - previous);
            previous = f;
        }

        column_medians(durations, stages, &mut self.median_durations, &mut self.bits);
        column_medians(&self.prefixes, stages, &mut self.median_prefixes, &mut self.bits);

        StepView {
            stages,
            durations,
            prefixes: &self.prefixes,
            frontier: &self.frontier,
            advances: &self.advances,
            leader: &self.leader,
            second: &self.second,
            median_durations: &self.median_durations,
            median_prefixes: &self.median_prefixes,
            stage_max: &self.stage_max,
            stage_sum: &self.stage_sum,
            slowest: slowest.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_statistics_of_figure_1() {
        let d = [6.0, 1.0, 1.2, 1.0, 1.0, 6.2, 1.1, 1.0, 6.0];
        let mut scratch = StepScratch::default();
        let v = scratch.view(&d, 3);
        assert_eq!(v.frontier[0], 6.0);
        assert_eq!(v.second[0], 1.1);
        assert_eq!(v.median_durations, &[1.1, 1.0, 6.0]);
        assert_eq!(v.median_prefixes[0], 1.1);
        assert_eq!(v.stage_max, &[6.0, 1.0, 6.2]);
        assert!((v.stage_sum[2] - 13.4).abs() < 1e-12);
        // r0 and r1 both total 8.2 up to round-off; r2 totals 8.1.
        assert!(v.slowest < 2);
    }
}
