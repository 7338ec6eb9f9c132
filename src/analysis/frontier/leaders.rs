//! Who attains the frontier (Sec. 4's localization evidence): the latest-rank tie set at
//! each boundary, the share of each advance a rank is credited with, and leader switches,
//! counted only between confident unique leaders so that jitter among near-tied ranks is
//! not read as a moving bottleneck.

use super::step_view::StepView;

/// A window names at most this many leader ranks per stage; `tied` says how many there were.
pub const LEADERS_LISTED: usize = 16;

/// Per stage, over a window.
#[derive(Clone, Debug, PartialEq)]
pub struct StageLeaders {
    /// Ranks credited with the most of this stage's advances (within η_A of the best),
    /// ascending, at most `LEADERS_LISTED`. Each step's advance is credited to the
    /// boundary's tie set, split evenly; a tie among more than `LEADERS_LISTED` ranks
    /// credits nobody. Empty when no rank was credited.
    pub ranks: Vec<u32>,
    /// How many ranks met that bar.
    pub tied: usize,
    /// Steps whose boundary had a confident unique leader.
    pub confident_steps: u64,
    /// Changes of that leader between consecutive confident steps.
    pub switches: u64,
}

pub(super) struct LeaderAcc {
    stages: usize,
    gap_fraction: f64,
    /// R×S: Σ_t a_{t,s} / |tie set| for each rank in the boundary's tie set.
    credit: Vec<f64>,
    /// Rows in the current boundary's tie set.
    tied: Vec<usize>,
    last: Vec<Option<usize>>,
    switches: Vec<u64>,
    confident: Vec<u64>,
}

impl LeaderAcc {
    pub fn new(ranks: usize, stages: usize, gap_fraction: f64) -> LeaderAcc {
        LeaderAcc {
            stages,
            gap_fraction,
            credit: vec![0.0; ranks * stages],
            tied: Vec::new(),
            last: vec![None; stages],
            switches: vec![0; stages],
            confident: vec![0; stages],
        }
    }

    pub fn add(&mut self, v: &StepView) {
        let stages = self.stages;
        // The bar is relative to the step's exposed time so it means the same on fast and
        // slow steps; an all-zero step ties every rank, which is the truth.
        let tolerance = self.gap_fraction * v.frontier[stages - 1];
        for s in 0..stages {
            let bar = v.frontier[s] - tolerance;
            if v.second[s] < bar {
                // The usual case with a straggler: the runner-up is below the bar, so the
                // leader is alone and no pass over the ranks is needed.
                self.credit[v.leader[s] * stages + s] += v.advances[s];
                self.confident[s] += 1;
                if self.last[s].is_some_and(|previous| previous != v.leader[s]) {
                    self.switches[s] += 1;
                }
                self.last[s] = Some(v.leader[s]);
                continue;
            }
            // A boundary tied among more ranks than a window lists has no leader: nobody is
            // credited, and the scan stops as soon as that is known.
            self.tied.clear();
            self.tied.extend(
                v.prefixes
                    .chunks_exact(stages)
                    .enumerate()
                    .filter(|(_, p)| p[s] >= bar)
                    .map(|(r, _)| r)
                    .take(LEADERS_LISTED + 1),
            );
            if self.tied.len() > LEADERS_LISTED {
                continue;
            }
            let share = v.advances[s] / self.tied.len() as f64;
            for &r in &self.tied {
                self.credit[r * stages + s] += share;
            }
        }
    }

    /// `rank_ids[row]` names each row; `tie` is η_A.
    pub fn finish(&self, rank_ids: &[u32], tie: f64) -> Vec<StageLeaders> {
        (0..self.stages)
            .map(|s| {
                let credit = |r: usize| self.credit[r * self.stages + s];
                let best = (0..rank_ids.len()).map(credit).fold(0.0, f64::max);
                let leaders: Vec<u32> = if best > 0.0 {
                    (0..rank_ids.len()).filter(|&r| credit(r) >= (1.0 - tie) * best).map(|r| rank_ids[r]).collect()
                } else {
                    Vec::new()
                };
                StageLeaders {
                    tied: leaders.len(),
                    ranks: leaders.into_iter().take(LEADERS_LISTED).collect(),
                    confident_steps: self.confident[s],
                    switches: self.switches[s],
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::step_view::StepScratch;
    use super::*;

    fn run(steps: &[&[f64]], stages: usize) -> Vec<StageLeaders> {
        let ranks = steps[0].len() / stages;
        let mut acc = LeaderAcc::new(ranks, stages, 0.05);
        let mut scratch = StepScratch::default();
        for d in steps {
            acc.add(&scratch.view(d, stages));
        }
        acc.finish(&(10..10 + ranks as u32).collect::<Vec<_>>(), 0.05)
    }

    #[test]
    fn a_different_rank_leads_each_boundary() {
        // Figure 2: r0 leads data, r1 forward, r2 backward.
        let d = [4.0, 1.0, 1.0, 3.0, 3.0, 1.0, 2.0, 2.0, 4.5];
        let leaders = run(&[&d], 3);
        let ranks: Vec<&[u32]> = leaders.iter().map(|l| l.ranks.as_slice()).collect();
        assert_eq!(ranks, [&[10][..], &[11], &[12]]);
        assert!(leaders.iter().all(|l| l.confident_steps == 1 && l.switches == 0));
    }

    #[test]
    fn switches_count_only_between_confident_leaders() {
        let r0_late = [5.0, 1.0, 1.0, 1.0];
        let tied = [5.0, 1.0, 5.0, 1.0];
        let r1_late = [1.0, 1.0, 5.0, 1.0];
        let leaders = run(&[&r0_late, &tied, &r0_late, &r1_late, &r1_late], 2);
        // The tied step neither counts nor breaks the run: one switch, r0 to r1.
        assert_eq!((leaders[0].confident_steps, leaders[0].switches), (4, 1));
        // Credits: r0 5+2.5+5 = 12.5, r1 2.5+5+5 = 12.5: both lead the window.
        assert_eq!(leaders[0].ranks, [10, 11]);
    }
}
