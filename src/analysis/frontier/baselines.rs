//! The cheap summaries StageFrontier is compared with (Sec. 6.2), over the same window
//! matrix so that only the scoring rule differs: per-stage max and average, raw rank
//! spread, the slowest rank's breakdown and one rank's local view.

use super::step_view::StepView;

/// Window totals per stage, in seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Baselines {
    /// Σ_t max_r d_{t,r,s}; its sum over stages is M (Proposition 1), which can count the
    /// same exposed second up to min(R, S) times.
    pub per_stage_max_s: Vec<f64>,
    /// Σ_t mean_r d_{t,r,s}; its sum is M̄ (Proposition 2), as low as F/R.
    pub per_stage_avg_s: Vec<f64>,
    /// Σ_t (max_r d_{t,r,s} − median_r d_{t,r,s}): a dispersion heuristic.
    pub rank_spread_s: Vec<f64>,
    /// Σ_t d_{t,r*,s} for each step's slowest rank r* (largest step total).
    pub slowest_rank_s: Vec<f64>,
    /// The rank that was slowest in the most steps (the lowest such rank on a tie).
    pub slowest_rank: u32,
    /// The lowest rank present (rank 0 in a complete world) ...
    pub local_rank: u32,
    /// ... and its own stage totals, blind to every other rank.
    pub local_rank_s: Vec<f64>,
}

pub(super) struct BaselineAcc {
    max: Vec<f64>,
    sum: Vec<f64>,
    spread: Vec<f64>,
    slowest: Vec<f64>,
    local: Vec<f64>,
    slowest_count: Vec<u64>,
}

impl BaselineAcc {
    pub fn new(ranks: usize, stages: usize) -> BaselineAcc {
        let zeros = vec![0.0; stages];
        BaselineAcc {
            max: zeros.clone(),
            sum: zeros.clone(),
            spread: zeros.clone(),
            slowest: zeros.clone(),
            local: zeros,
            slowest_count: vec![0; ranks],
        }
    }

    pub fn add(&mut self, v: &StepView) {
        let n = v.stages;
        let slowest_row = &v.durations[v.slowest * n..(v.slowest + 1) * n];
        let first_row = &v.durations[..n];
        let per_stage = v.stage_max.iter().zip(v.stage_sum).zip(v.median_durations).zip(slowest_row).zip(first_row);
        for (s, ((((max, sum), median), slowest), first)) in per_stage.enumerate() {
            self.max[s] += max;
            self.sum[s] += sum;
            self.spread[s] += max - median;
            self.slowest[s] += slowest;
            self.local[s] += first;
        }
        self.slowest_count[v.slowest] += 1;
    }

    /// Σ_{t,r} d_{t,r,s}: all rank time per stage, for the closure-residual share.
    pub fn rank_time(&self) -> &[f64] {
        &self.sum
    }

    pub fn finish(&self, rank_ids: &[u32]) -> Baselines {
        let ranks = rank_ids.len() as f64;
        let most = self.slowest_count.iter().copied().max().unwrap_or(0);
        let slowest_row = self.slowest_count.iter().position(|&c| c == most).unwrap_or(0);
        Baselines {
            per_stage_max_s: self.max.clone(),
            per_stage_avg_s: self.sum.iter().map(|s| s / ranks).collect(),
            rank_spread_s: self.spread.clone(),
            slowest_rank_s: self.slowest.clone(),
            slowest_rank: rank_ids[slowest_row],
            local_rank: rank_ids[0],
            local_rank_s: self.local.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::step_view::StepScratch;
    use super::*;

    #[test]
    fn figure_1_per_stage_max_counts_the_wait_twice() {
        let d = [6.0, 1.0, 1.2, 1.0, 1.0, 6.2, 1.1, 1.0, 6.0];
        let mut acc = BaselineAcc::new(3, 3);
        acc.add(&StepScratch::default().view(&d, 3));
        let b = acc.finish(&[0, 1, 2]);
        assert_eq!(b.per_stage_max_s, [6.0, 1.0, 6.2]);
        assert!((b.per_stage_max_s.iter().sum::<f64>() - 13.2).abs() < 1e-12);
        assert!((b.per_stage_avg_s[0] - 8.1 / 3.0).abs() < 1e-12);
        assert!((b.rank_spread_s[0] - 4.9).abs() < 1e-12);
        assert_eq!(b.local_rank_s, [6.0, 1.0, 1.2]);
        assert_eq!(b.local_rank, 0);
    }
}
