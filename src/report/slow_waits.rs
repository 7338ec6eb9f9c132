//! `sf slow` with wait attribution (`analysis::blame`): the detectors read own time, and
//! the answer is ordered by the waiting each (rank, stage) caused, culprits first.

use crate::analysis::blame::{blame_table, culprits, Attribution, CulpritParams};
use crate::analysis::slow::blamed::{by_caused_wait, own_time, Finding};
use crate::analysis::slow::job::{JobSlow, RankSeries, SlowRank};
use serde::Serialize;

use super::slow::{ExpectedEvidence, L2Evidence, SlowRankReport};

/// What the matched collectives say: who made the others wait, and in which stage.
#[derive(Debug, Serialize)]
pub struct WaitAttribution {
    /// Collectives matched across ranks by communicator and sequence number.
    pub collectives: usize,
    /// Seconds all ranks waited inside collectives in the judged steps (taken out of the
    /// stage times the detectors read).
    pub wait_s: f64,
    /// Seconds of the job's caused waiting (every step, the skipped ones included)
    /// charged to no stage of the late rank: it carried the lateness in from leaving its
    /// previous blocking call late (that collective's exit skew, or a wait in another
    /// communicator, charged there), or it was outside every step.
    pub carried_in_s: f64,
    pub unstaged_s: f64,
    /// Median step wall time the culprit floor is a share of.
    pub median_step_s: f64,
    pub params: CulpritParamsReport,
    /// The blame table: (rank, stage) -> seconds of other ranks' waiting caused, largest
    /// first, at most `BLAME_CELLS` cells.
    pub blame: Vec<BlameCellReport>,
}

#[derive(Debug, Serialize)]
pub struct CulpritParamsReport {
    pub min_delay_s: f64,
    pub min_step_share: f64,
    pub dominance: f64,
    pub min_step_fraction: f64,
    pub max_chance: f64,
}

#[derive(Debug, Serialize)]
pub struct BlameCellReport {
    pub rank: u32,
    pub stage: String,
    pub caused_s: f64,
}

/// Cells of the blame table in the report.
const BLAME_CELLS: usize = 16;

/// Wait attribution's evidence for a slow rank that made the others wait.
#[derive(Debug, Serialize)]
pub struct CulpritReport {
    /// Seconds of other ranks' waiting it caused over all its stages.
    pub caused_s: f64,
    /// How much later each peer finished each step because of it.
    pub delay_per_step_s: f64,
    /// Its part of all the waiting.
    pub wait_share: f64,
}

/// The job's waits, taken out of the series.
pub struct Waits {
    attribution: Attribution,
    /// Of the step wall times before the waits were taken out.
    median_step_s: f64,
}

/// Takes the job's waits (`attribution`, stages indexed as the series') out of `series`,
/// leaving each rank's own time for the detectors.
pub fn take_out_waits(attribution: Attribution, series: &mut [RankSeries]) -> Waits {
    let mut walls: Vec<f64> = series.iter().flat_map(|r| r.wall_s.iter().copied()).collect();
    walls.sort_by(f64::total_cmp);
    let median_step_s = walls.get(walls.len() / 2).copied().unwrap_or(0.0);
    own_time(series, &attribution);
    Waits { attribution, median_step_s }
}

/// The blame table over the judged steps, its culprits, and the detectors' findings of
/// `job` ordered by the waiting they caused.
pub fn blamed(w: Waits, series: &[RankSeries], stages: &[String], job: &JobSlow) -> Blamed {
    let (attribution, median_step_s) = (w.attribution, w.median_step_s);
    let first = series.iter().filter_map(|r| r.steps.first()).min().copied().unwrap_or(0);
    let last = series.iter().filter_map(|r| r.steps.last()).max().copied().unwrap_or(0);
    let table = blame_table(&attribution, first, last);
    let culprit_params = CulpritParams::default();
    let steps = series.iter().map(|r| r.steps.len()).max().unwrap_or(0);
    let found = culprits(&table, series.len(), steps, median_step_s, &culprit_params);
    let findings = by_caused_wait(&job.slow_ranks, &table, &found);
    let waits = WaitAttribution {
        collectives: attribution.collectives,
        wait_s: table.wait_s,
        carried_in_s: attribution.carried_in_s,
        unstaged_s: attribution.unstaged_s,
        median_step_s,
        params: CulpritParamsReport {
            min_delay_s: culprit_params.min_delay_s,
            min_step_share: culprit_params.min_step_share,
            dominance: culprit_params.dominance,
            min_step_fraction: culprit_params.min_step_fraction,
            max_chance: culprit_params.max_chance,
        },
        blame: table
            .cells
            .iter()
            .take(BLAME_CELLS)
            .map(|c| BlameCellReport { rank: c.rank, stage: stages[c.stage].clone(), caused_s: c.caused_s })
            .collect(),
    };
    Blamed {
        slow_ranks: findings.iter().map(|f| slow_rank_report(f, series, stages)).collect(),
        culprits: !found.is_empty(),
        median_step_s,
        waits,
    }
}

/// Wait attribution's part of the report.
pub struct Blamed {
    pub slow_ranks: Vec<SlowRankReport>,
    /// Whether it found a culprit of its own.
    pub culprits: bool,
    /// Of the step wall times before the waits are taken out.
    pub median_step_s: f64,
    pub waits: WaitAttribution,
}

fn slow_rank_report(f: &Finding, series: &[RankSeries], stages: &[String]) -> SlowRankReport {
    let group = series.iter().find(|r| r.rank == f.rank).map_or_else(String::new, |r| r.group.clone());
    let d = f.detected.as_ref();
    SlowRankReport {
        rank: f.rank,
        stage: stages[f.stage].clone(),
        group,
        caused_wait_s: f.caused_wait_s,
        culprit: f.culprit.as_ref().map(|c| CulpritReport {
            caused_s: c.caused_s,
            delay_per_step_s: c.delay_per_step_s,
            wait_share: c.wait_share,
        }),
        detectors: d.map_or(0, SlowRank::detectors),
        l2: d.and_then(|s| s.l2).map(|(z, cv)| L2Evidence { z, cv }),
        expected_time: d
            .and_then(|s| s.expected)
            .map(|(slow_steps, observed_steps)| ExpectedEvidence { slow_steps, observed_steps }),
        l1_regression: d.is_some_and(|s| s.l1_regression),
        l1_jitter: d.is_some_and(|s| s.l1_jitter),
    }
}
