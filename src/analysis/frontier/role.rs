//! Whether the ranks do the same work (Table 1's homogeneity assumption), judged from the
//! durations alone: each rank's window stage profile against the cohort's median profile.
//! A straggler deviates alone (its upstream stall and the others' downstream wait both
//! centre on the cohort); ranks playing different roles deviate as groups.

use super::median::column_medians;
use super::step_view::StepView;

pub(super) struct RoleAcc {
    stages: usize,
    /// R×S: Σ_t d_{t,r,s}.
    sums: Vec<f64>,
}

impl RoleAcc {
    pub fn new(ranks: usize, stages: usize) -> RoleAcc {
        RoleAcc { stages, sums: vec![0.0; ranks * stages] }
    }

    pub fn add(&mut self, v: &StepView) {
        for (sum, d) in self.sums.iter_mut().zip(v.durations) {
            *sum += d;
        }
    }

    /// Ranks whose profile is farther (L1) from the median profile than `deviation` times
    /// the median rank's total.
    pub fn deviating(&self, rank_ids: &[u32], deviation: f64) -> Vec<u32> {
        let n = self.stages;
        let (mut centre, mut typical_total, mut scratch) = (Vec::new(), Vec::new(), Vec::new());
        column_medians(&self.sums, n, &mut centre, &mut scratch);
        let totals: Vec<f64> = self.sums.chunks_exact(n).map(|row| row.iter().sum()).collect();
        column_medians(&totals, 1, &mut typical_total, &mut scratch);
        let typical_total = typical_total[0];
        self.sums
            .chunks_exact(n)
            .zip(rank_ids)
            .filter(|(row, _)| {
                let distance: f64 = row.iter().zip(&centre).map(|(m, c)| (m - c).abs()).sum();
                distance > deviation * typical_total
            })
            .map(|(_, &rank)| rank)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::step_view::StepScratch;
    use super::*;

    fn deviating(d: &[f64], stages: usize) -> Vec<u32> {
        let ranks = d.len() / stages;
        let mut acc = RoleAcc::new(ranks, stages);
        acc.add(&StepScratch::default().view(d, stages));
        acc.deviating(&(0..ranks as u32).collect::<Vec<_>>(), 0.25)
    }

    #[test]
    fn a_straggler_stands_alone_and_roles_split_the_cohort() {
        // Rank 2 stalls 4 s in data; the others wait those 4 s in backward.
        let straggler = [1.0, 1.0, 6.0, 1.0, 1.0, 6.0, 5.0, 1.0, 2.0, 1.0, 1.0, 6.0];
        assert_eq!(deviating(&straggler, 3), [2]);
        // Two pipeline roles: forward-heavy and backward-heavy ranks.
        let roles = [1.0, 2.0, 5.0, 1.0, 2.0, 5.0, 1.0, 5.0, 2.0, 1.0, 5.0, 2.0];
        assert_eq!(deviating(&roles, 3), [0, 1, 2, 3]);
    }
}
