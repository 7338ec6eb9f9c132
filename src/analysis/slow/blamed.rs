//! `sf slow` with wait attribution: detectors read each rank's own time (its stages less
//! the time it sat in collectives waiting for others), and the answer is ordered by the
//! waiting each (rank, stage) caused, so a waiter is never named for the wait it suffered.

use super::job::{RankSeries, SlowRank};
use crate::analysis::blame::{Attribution, BlameTable, Culprit};

/// Takes each rank's in-collective waits out of its stage durations and its step wall
/// time: what remains is the time the rank spent on its own work.
pub fn own_time(series: &mut [RankSeries], a: &Attribution) {
    for r in series {
        for ((step, durations), wall) in r.steps.iter().zip(&mut r.durations).zip(&mut r.wall_s) {
            let mut waited = 0.0;
            for (stage, d) in durations.iter_mut().enumerate() {
                let wait = a.wait(r.rank, *step, stage).min(*d);
                *d -= wait;
                waited += wait;
            }
            *wall = (*wall - waited).max(0.0);
        }
    }
}

/// One answer line of `sf slow`: a (rank, stage), the detectors that name it, and the
/// waiting it caused.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub rank: u32,
    pub stage: usize,
    /// The detectors' finding for this (rank, stage), if they made one.
    pub detected: Option<SlowRank>,
    /// Seconds of other ranks' waiting this (rank, stage) caused.
    pub caused_wait_s: f64,
    /// Set when wait attribution names the rank on its own evidence.
    pub culprit: Option<Culprit>,
}

/// Culprits first (most caused wait first, with the detectors' evidence for the same
/// stage), then the detectors' other findings by the waiting they caused, then by how many
/// detectors agree.
pub fn by_caused_wait(slow_ranks: &[SlowRank], table: &BlameTable, culprits: &[Culprit]) -> Vec<Finding> {
    let caused = |rank: u32, stage: usize| {
        table.cells.iter().find(|c| c.rank == rank && c.stage == stage).map_or(0.0, |c| c.caused_s)
    };
    let detected = |rank: u32, stage: usize| slow_ranks.iter().find(|s| s.rank == rank && s.stage == stage).cloned();
    let mut findings: Vec<Finding> = culprits
        .iter()
        .map(|c| Finding {
            rank: c.rank,
            stage: c.stage,
            detected: detected(c.rank, c.stage),
            caused_wait_s: c.stage_caused_s,
            culprit: Some(c.clone()),
        })
        .collect();
    let mut rest: Vec<Finding> = slow_ranks
        .iter()
        .filter(|s| !culprits.iter().any(|c| c.rank == s.rank && c.stage == s.stage))
        .map(|s| Finding {
            rank: s.rank,
            stage: s.stage,
            detected: Some(s.clone()),
            caused_wait_s: caused(s.rank, s.stage),
            culprit: None,
        })
        .collect();
    rest.sort_by(|a, b| {
        b.caused_wait_s.total_cmp(&a.caused_wait_s).then_with(|| {
            let detectors = |f: &Finding| f.detected.as_ref().map_or(0, SlowRank::detectors);
            detectors(b).cmp(&detectors(a))
        })
    });
    findings.extend(rest);
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::blame::{blame_table, culprits, CulpritParams};
    use crate::analysis::slow::job::{analyze_job, SlowParams};

    /// 8 ranks, stages [data, backward], 20 steps of 0.1 s. With `late_into_backward`,
    /// rank 5 spends 10 ms before each step's allreduce inside backward; otherwise its data
    /// stage runs 10 ms long. Either way the seven others wait 10 ms inside backward's
    /// allreduce every step, and rank 5, the last to arrive, is the first to leave.
    fn late_rank_job(late_into_backward: bool) -> (Vec<RankSeries>, Attribution) {
        let mut a = Attribution::default();
        let culprit_stage = if late_into_backward { 1 } else { 0 };
        let series = (0..8u32)
            .map(|rank| {
                let steps: Vec<u64> = (0..20).collect();
                let durations: Vec<Vec<f64>> = steps
                    .iter()
                    .map(|&step| {
                        let wobble = ((rank as u64 * 7 + step * 3) % 5) as f64 * 1e-4;
                        if rank == 5 {
                            a.caused.insert((5, step, culprit_stage), 7.0 * 0.010);
                            if late_into_backward {
                                vec![0.020 + wobble, 0.0797]
                            } else {
                                vec![0.030 + wobble, 0.0697]
                            }
                        } else {
                            a.waits.insert((rank, step, 1), 0.010);
                            vec![0.020 + wobble, 0.080]
                        }
                    })
                    .collect();
                RankSeries {
                    rank,
                    group: "job".into(),
                    wall_s: durations.iter().map(|d| d.iter().sum()).collect(),
                    steps,
                    durations,
                }
            })
            .collect();
        (series, a)
    }

    #[test]
    fn a_rank_late_into_its_allreduces_is_invisible_in_raw_stages_and_found_in_own_time() {
        let (mut series, a) = late_rank_job(true);
        let raw = analyze_job(&series, 2, &SlowParams::default());
        assert!(!raw.slow_ranks.iter().any(|s| s.rank == 5), "raw durations miss it: {:?}", raw.slow_ranks);
        own_time(&mut series, &a);
        let own = analyze_job(&series, 2, &SlowParams::default());
        assert!(own.slow_ranks.iter().all(|s| s.rank == 5 && s.stage == 1), "{:?}", own.slow_ranks);
        assert!(!own.slow_ranks.is_empty());
    }

    #[test]
    fn the_culprit_comes_first_with_its_caused_wait() {
        let (mut series, a) = late_rank_job(false);
        own_time(&mut series, &a);
        let job = analyze_job(&series, 2, &SlowParams::default());
        let table = blame_table(&a, 0, 19);
        let found = culprits(&table, 8, 20, 0.1, &CulpritParams::default());
        let findings = by_caused_wait(&job.slow_ranks, &table, &found);
        assert_eq!((findings[0].rank, findings[0].stage), (5, 0));
        assert!(findings[0].culprit.is_some() && findings[0].detected.is_some());
        assert!((findings[0].caused_wait_s - 20.0 * 0.070).abs() < 1e-9);
    }
}
