//! The clipped direct-exposure gain of eq. 4 and the frontier that remains once a stage is
//! clipped, for every stage at once in a single pass over the ranks.
//!
//! Replacing stage s of rank r by b_{r,s} = min(d_{r,s}, b̃_s) lowers every prefix
//! P_{r,j}, j ≥ s, by δ_{r,s} = d_{r,s} − b_{r,s} ≥ 0 and leaves earlier ones alone, so
//! F^{(s←b)}_j = F_j for j < s and max_r (P_{r,j} − δ_{r,s}) for j ≥ s: O(R·S²/2) per
//! step, no copy of the matrix. The baseline b̃_s is the step's cohort median
//! median_r d_{r,s}, the one of the paper's candidates (per-rank window median, cohort
//! median, no-stall reference) computable while streaming: it removes a rank tail, but a
//! cost every rank pays alike stays and gains nothing.

use super::step_view::StepView;

pub(super) struct CounterfactualAcc {
    stages: usize,
    /// S×S at `j * stages + s`: Σ_t F^{(s←b)}_{t,j}.
    sums: Vec<f64>,
    step: Vec<f64>,
    delta: Vec<f64>,
    floor: Vec<f64>,
}

/// Window totals of the clipped recomputations.
#[derive(Clone, Debug, PartialEq)]
pub struct Counterfactual {
    stages: usize,
    sums: Vec<f64>,
}

impl CounterfactualAcc {
    pub fn new(stages: usize) -> CounterfactualAcc {
        CounterfactualAcc {
            stages,
            sums: vec![0.0; stages * stages],
            step: vec![0.0; stages * stages],
            delta: vec![0.0; stages],
            floor: Vec::new(),
        }
    }

    pub fn add(&mut self, v: &StepView) {
        let n = self.stages;
        for j in 0..n {
            for s in 0..n {
                self.step[j * n + s] = if j < s { v.frontier[j] } else { f64::NEG_INFINITY };
            }
        }
        // floor[j] = min_{s≤j} F^{(s←b)}_j so far: a rank whose prefixes all sit at or below
        // it cannot raise any clipped frontier (δ ≥ 0 only lowers them), so it is skipped
        // with S comparisons instead of S(S+1)/2 (40% of the ranks in frontier_bench).
        self.floor.clear();
        self.floor.resize(n, f64::NEG_INFINITY);
        for (d, p) in v.durations.chunks_exact(n).zip(v.prefixes.chunks_exact(n)) {
            if p.iter().zip(&self.floor).all(|(p, floor)| p <= floor) {
                continue;
            }
            for ((delta, d), median) in self.delta.iter_mut().zip(d).zip(v.median_durations) {
                *delta = (d - median).max(0.0);
            }
            for (j, floor) in self.floor.iter_mut().enumerate() {
                let row = &mut self.step[j * n..j * n + j + 1];
                let mut lowest = f64::INFINITY;
                for (f, delta) in row.iter_mut().zip(&self.delta) {
                    // A plain compare: no NaN reaches here, and f64::max's NaN handling
                    // costs a third of this loop.
                    let clipped = p[j] - delta;
                    if clipped > *f {
                        *f = clipped;
                    }
                    if *f < lowest {
                        lowest = *f;
                    }
                }
                *floor = lowest;
            }
        }
        for (sum, f) in self.sums.iter_mut().zip(&self.step) {
            *sum += f;
        }
    }

    pub fn finish(&self) -> Counterfactual {
        Counterfactual { stages: self.stages, sums: self.sums.clone() }
    }
}

impl Counterfactual {
    /// G_s (eq. 4): the share of the window's exposed time `exposed` that clipping stage
    /// s removes. Non-negative by construction; the clamp only absorbs round-off.
    pub fn gain(&self, stage: usize, exposed: f64) -> f64 {
        let clipped = self.sums[(self.stages - 1) * self.stages + stage];
        ((exposed - clipped) / exposed).max(0.0)
    }

    /// The window's advances, Σ_t a_{t,j}, after clipping stage `stage`: where exposed
    /// time goes once that stage is brought down to the cohort.
    pub fn advances_after_clipping(&self, stage: usize) -> Vec<f64> {
        let mut previous = 0.0;
        (0..self.stages)
            .map(|j| {
                let f = self.sums[j * self.stages + stage];
                let a = f - previous;
                previous = f;
                a
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::step_view::StepScratch;
    use super::*;

    fn window(steps: &[&[f64]], stages: usize) -> (Counterfactual, f64) {
        let mut acc = CounterfactualAcc::new(stages);
        let mut scratch = StepScratch::default();
        let mut exposed = 0.0;
        for d in steps {
            let v = scratch.view(d, stages);
            exposed += v.frontier[stages - 1];
            acc.add(&v);
        }
        (acc.finish(), exposed)
    }

    #[test]
    fn two_rank_case_gains_nothing_and_hands_the_frontier_to_backward() {
        let (cf, exposed) = window(&[&[10.0, 0.0, 0.0, 10.0]], 2);
        assert_eq!(cf.gain(0, exposed), 0.0);
        assert_eq!(cf.gain(1, exposed), 0.0);
        assert_eq!(cf.advances_after_clipping(0), [5.0, 5.0]);
    }

    #[test]
    fn a_tail_with_no_downstream_wait_is_gained_back() {
        // Rank 2's optimizer runs 3 s long at the end of the step; nobody waits for it.
        let (cf, exposed) = window(&[&[1.0, 1.0, 1.0, 1.0, 1.0, 4.0]], 2);
        assert_eq!(exposed, 5.0);
        assert!((cf.gain(1, exposed) - 0.6).abs() < 1e-12);
        assert_eq!(cf.gain(0, exposed), 0.0);
        assert_eq!(cf.advances_after_clipping(1), [1.0, 1.0]);
    }

    #[test]
    fn matches_a_recomputation_from_clipped_matrices() {
        let d = [0.3, 2.0, 0.1, 1.5, 0.2, 0.4, 0.9, 0.9, 2.2, 0.1, 0.3, 0.8];
        let (cf, exposed) = window(&[&d], 3);
        for s in 0..3 {
            let mut column: Vec<f64> = (0..4).map(|r| d[r * 3 + s]).collect();
            column.sort_by(f64::total_cmp);
            let median = (column[1] + column[2]) / 2.0;
            let mut clipped = d;
            for r in 0..4 {
                clipped[r * 3 + s] = clipped[r * 3 + s].min(median);
            }
            let f = super::super::recurrence::step_frontier(&clipped, 3);
            for (a, b) in cf.advances_after_clipping(s).iter().zip(&f.advances) {
                assert!((a - b).abs() < 1e-12);
            }
            assert!((cf.gain(s, exposed) - (exposed - f.exposed()) / exposed).abs() < 1e-12);
        }
    }
}
