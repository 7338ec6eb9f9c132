//! The window's blame table and the ranks in it that are findings.

use std::collections::BTreeMap;

use super::attribute::Attribution;

/// Seconds of other ranks' waiting one (rank, stage) caused.
#[derive(Clone, Debug, PartialEq)]
pub struct BlameCell {
    pub rank: u32,
    pub stage: usize,
    pub caused_s: f64,
}

/// Blame over a range of steps, largest cell first.
#[derive(Clone, Debug, PartialEq)]
pub struct BlameTable {
    pub cells: Vec<BlameCell>,
    /// All waiting inside collectives in these steps, over every rank.
    pub wait_s: f64,
    /// Seconds of waiting caused per (rank, stage, step).
    pub by_step: BTreeMap<(u32, usize, u64), f64>,
}

impl BlameTable {
    /// Seconds of waiting each rank caused, over all its stages.
    pub fn by_rank(&self) -> BTreeMap<u32, f64> {
        let mut ranks = BTreeMap::new();
        for c in &self.cells {
            *ranks.entry(c.rank).or_default() += c.caused_s;
        }
        ranks
    }
}

/// The blame table of steps `first..=last`.
pub fn blame_table(a: &Attribution, first: u64, last: u64) -> BlameTable {
    let mut cells: BTreeMap<(u32, usize), f64> = BTreeMap::new();
    let mut by_step: BTreeMap<(u32, usize, u64), f64> = BTreeMap::new();
    for (&(rank, step, stage), &caused) in &a.caused {
        if (first..=last).contains(&step) {
            *cells.entry((rank, stage)).or_default() += caused;
            *by_step.entry((rank, stage, step)).or_default() += caused;
        }
    }
    let mut cells: Vec<BlameCell> =
        cells.into_iter().map(|((rank, stage), caused_s)| BlameCell { rank, stage, caused_s }).collect();
    cells.sort_by(|a, b| b.caused_s.total_cmp(&a.caused_s).then(a.rank.cmp(&b.rank)).then(a.stage.cmp(&b.stage)));
    let wait_s = a.waits.iter().filter(|((_, step, _), _)| (first..=last).contains(step)).map(|(_, w)| w).sum();
    BlameTable { cells, wait_s, by_step }
}

/// When caused wait is a finding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CulpritParams {
    /// The delay a culprit imposes on each peer, per step, must reach this many seconds...
    pub min_delay_s: f64,
    /// ...and this fraction of the median step time.
    pub min_step_share: f64,
    /// ...and its caused wait in the stage this multiple of the median rank's in the same
    /// stage: in a healthy job every rank is last now and then, and blame spreads evenly...
    pub dominance: f64,
    /// ...and it must hold its peers up by the floor in at least this fraction of the
    /// steps (and in 3 or more): one descheduled step on a busy host is jitter, not a
    /// culprit (the L1 detectors report spikes).
    pub min_step_fraction: f64,
}

/// Fewest steps in which a culprit must hold its peers up.
const MIN_CULPRIT_STEPS: usize = 3;

impl Default for CulpritParams {
    fn default() -> CulpritParams {
        CulpritParams { min_delay_s: 1e-3, min_step_share: 0.02, dominance: 3.0, min_step_fraction: 0.2 }
    }
}

/// A rank that made the others wait, and the stage it did it in.
#[derive(Clone, Debug, PartialEq)]
pub struct Culprit {
    pub rank: u32,
    /// Its stage with the most caused wait.
    pub stage: usize,
    /// Seconds of other ranks' waiting it caused, over all its stages, and in `stage`.
    pub caused_s: f64,
    pub stage_caused_s: f64,
    /// Its caused wait in `stage` per step and per peer: how much later each peer
    /// finished a step.
    pub delay_per_step_s: f64,
    /// Its part of all the waiting in the window.
    pub wait_share: f64,
}

/// The culprits of a table over `steps` steps of `ranks` ranks, largest first: the
/// (rank, stage) cells that pass every gate of `params`, the largest one per rank.
pub fn culprits(
    table: &BlameTable,
    ranks: usize,
    steps: usize,
    median_step_s: f64,
    params: &CulpritParams,
) -> Vec<Culprit> {
    if ranks < 2 || steps == 0 {
        return Vec::new();
    }
    let by_rank = table.by_rank();
    let floor = params.min_delay_s.max(params.min_step_share * median_step_s);
    let peers = (ranks - 1) as f64;
    let min_steps = MIN_CULPRIT_STEPS.max((params.min_step_fraction * steps as f64).ceil() as usize);
    let held_up = |rank: u32, stage: usize| {
        let cell = (rank, stage, 0)..=(rank, stage, u64::MAX);
        table.by_step.range(cell).filter(|(_, &caused)| caused / peers >= floor).count()
    };
    // The median rank's caused wait in a stage, ranks that caused none included.
    let typical = |stage: usize| {
        let mut all: Vec<f64> = table.cells.iter().filter(|c| c.stage == stage).map(|c| c.caused_s).collect();
        all.resize(ranks.max(all.len()), 0.0);
        all.sort_by(f64::total_cmp);
        all[all.len() / 2]
    };
    let mut found: Vec<Culprit> = Vec::new();
    // Cells are largest first, so a rank's first passing cell is its largest.
    for c in &table.cells {
        if found.iter().any(|f| f.rank == c.rank) {
            continue;
        }
        let delay_per_step_s = c.caused_s / steps as f64 / peers;
        if delay_per_step_s < floor
            || c.caused_s < params.dominance * typical(c.stage)
            || held_up(c.rank, c.stage) < min_steps
        {
            continue;
        }
        let caused_s = by_rank[&c.rank];
        found.push(Culprit {
            rank: c.rank,
            stage: c.stage,
            caused_s,
            stage_caused_s: c.caused_s,
            delay_per_step_s,
            wait_share: if table.wait_s > 0.0 { caused_s / table.wait_s } else { 0.0 },
        });
    }
    found
}

/// The stages a workload exposes through synchronization waits, measured: those where the
/// ranks' in-collective waiting is at least `min_share` of their time in the stage
/// (`stage_time_s[s]`, waits included, over the same ranks and steps). This is the model-fit
/// indicator W_s of StageFrontier's Appendix C, read from the logs instead of asserted.
pub fn sync_wait_stages(a: &Attribution, stage_time_s: &[f64], min_share: f64) -> Vec<usize> {
    let mut waited = vec![0.0; stage_time_s.len()];
    for (&(_, _, stage), &w) in &a.waits {
        if let Some(slot) = waited.get_mut(stage) {
            *slot += w;
        }
    }
    (0..stage_time_s.len()).filter(|&s| stage_time_s[s] > 0.0 && waited[s] >= min_share * stage_time_s[s]).collect()
}

/// Default `min_share` of [`sync_wait_stages`]: a quarter of the stage's time spent waiting.
pub const SYNC_WAIT_SHARE: f64 = 0.25;

/// W_s as `sf frontier` measures it: [`sync_wait_stages`] at [`SYNC_WAIT_SHARE`], but only
/// in a job where wait attribution names a culprit over all its steps. Every synchronous
/// job waits in the stage that holds its collectives; that waiting says a stage's exposure
/// rests on other ranks waiting for it only when some rank's lateness causes it. Healthy
/// jitter spreads the causing over every rank, names no culprit, and asserts nothing, so a
/// healthy job gets no sync-wait label.
pub fn measured_sync_wait(a: &Attribution, stage_time_s: &[f64]) -> Vec<usize> {
    let keys = || a.waits.keys().chain(a.caused.keys());
    let ranks = keys().map(|k| k.0).collect::<std::collections::BTreeSet<_>>().len();
    let steps = keys().map(|k| k.1).collect::<std::collections::BTreeSet<_>>().len();
    let mean_step_s = stage_time_s.iter().sum::<f64>() / (ranks * steps).max(1) as f64;
    let table = blame_table(a, 0, u64::MAX);
    if culprits(&table, ranks, steps, mean_step_s, &CulpritParams::default()).is_empty() {
        return Vec::new();
    }
    sync_wait_stages(a, stage_time_s, SYNC_WAIT_SHARE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attribution(caused: &[((u32, u64, usize), f64)]) -> Attribution {
        let mut a = Attribution::default();
        for &(key, s) in caused {
            a.caused.insert(key, s);
            *a.waits.entry((0, key.1, 0)).or_default() += s;
        }
        a
    }

    #[test]
    fn the_table_sums_a_window_by_rank_and_stage() {
        let a = attribution(&[((3, 1, 0), 0.01), ((3, 2, 0), 0.02), ((3, 2, 1), 0.001), ((3, 9, 0), 5.0)]);
        let t = blame_table(&a, 0, 5);
        assert_eq!(t.cells.len(), 2);
        assert_eq!((t.cells[0].rank, t.cells[0].stage), (3, 0));
        assert!((t.cells[0].caused_s - 0.03).abs() < 1e-12);
        assert!((t.wait_s - 0.031).abs() < 1e-12);
    }

    #[test]
    fn a_rank_that_holds_everyone_up_is_a_culprit_and_even_blame_is_not() {
        // 8 ranks, 10 steps of 0.1 s: rank 5 makes each of 7 peers wait 5 ms a step in
        // stage 0; everyone else is last now and then for 0.2 ms.
        let mut caused: Vec<_> = (0..10).map(|step| ((5, step, 0), 7.0 * 0.005)).collect();
        caused.extend((0..8).filter(|&r| r != 5).map(|r| ((r, 0, 2), 0.0002 * 7.0)));
        let t = blame_table(&attribution(&caused), 0, 9);
        let found = culprits(&t, 8, 10, 0.1, &CulpritParams::default());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].rank, found[0].stage), (5, 0));
        assert!((found[0].delay_per_step_s - 0.005).abs() < 1e-12);

        let even: Vec<_> = (0..8).map(|r| ((r, 0, 2), 7.0 * 0.003)).collect();
        let t = blame_table(&attribution(&even), 0, 9);
        assert!(culprits(&t, 8, 10, 0.1, &CulpritParams::default()).is_empty(), "even blame is noise");
    }

    #[test]
    fn a_small_delay_is_not_a_finding() {
        // 0.5 ms a step of a 0.1 s step: under the 2% floor.
        let t = blame_table(&attribution(&[((5, 0, 0), 10.0 * 7.0 * 0.0005)]), 0, 9);
        assert!(culprits(&t, 8, 10, 0.1, &CulpritParams::default()).is_empty());
    }

    #[test]
    fn a_stage_is_sync_wait_when_its_ranks_spend_a_quarter_of_it_waiting() {
        let mut a = Attribution::default();
        a.waits.insert((0, 1, 1), 0.3);
        a.waits.insert((1, 1, 1), 0.1);
        a.waits.insert((1, 1, 0), 0.01);
        assert_eq!(sync_wait_stages(&a, &[1.0, 1.5, 0.0], SYNC_WAIT_SHARE), [1]);
        assert!(sync_wait_stages(&a, &[1.0, 1.7, 0.0], SYNC_WAIT_SHARE).is_empty());
    }

    #[test]
    fn measured_w_s_needs_a_culprit_not_only_waiting() {
        // 8 ranks, 10 steps of 0.1 s: every rank waits 40 ms a step in stage 1 (it holds the
        // collective), and the waiting is caused by each rank in turn (healthy jitter).
        let mut a = Attribution::default();
        for step in 0..10 {
            for rank in 0..8 {
                a.waits.insert((rank, step, 1), 0.04);
            }
            a.caused.insert(((step % 8) as u32, step, 1), 7.0 * 0.04);
        }
        let stage_time_s = [8.0 * 10.0 * 0.04, 8.0 * 10.0 * 0.06];
        assert!(measured_sync_wait(&a, &stage_time_s).is_empty(), "no culprit: no W_s");
        // Rank 3's stage 0 makes every other rank wait 40 ms in every step: W_s holds.
        a.caused.clear();
        for step in 0..10 {
            a.caused.insert((3, step, 0), 7.0 * 0.04);
        }
        assert_eq!(measured_sync_wait(&a, &stage_time_s), [1]);
    }

    #[test]
    fn a_culprit_stands_out_in_its_stage_over_noise_that_every_rank_causes_elsewhere() {
        // Every rank is last in backward now and then (0.07 s each over the window); rank 4's
        // data stage holds the others up 3 ms a step.
        let mut caused: Vec<_> = (0..10).map(|step| ((4, step, 0), 7.0 * 0.003)).collect();
        caused.extend((0..8).flat_map(|r| (0..10).map(move |step| ((r, step, 2), 0.007))));
        let t = blame_table(&attribution(&caused), 0, 9);
        let found = culprits(&t, 8, 10, 0.1, &CulpritParams::default());
        assert_eq!(found.iter().map(|c| (c.rank, c.stage)).collect::<Vec<_>>(), [(4, 0)], "{found:?}");
    }

    #[test]
    fn one_long_stall_is_jitter_not_a_culprit() {
        // Rank 5 stalls 50 ms once in 10 steps: 5 ms a step on average, in one step.
        let t = blame_table(&attribution(&[((5, 4, 0), 7.0 * 0.050)]), 0, 9);
        assert!(culprits(&t, 8, 10, 0.1, &CulpritParams::default()).is_empty());
    }

    #[test]
    fn two_culprits_are_both_named() {
        let caused: Vec<_> = (0..10).flat_map(|step| [((2, step, 0), 0.05), ((6, step, 1), 0.04)]).collect();
        let t = blame_table(&attribution(&caused), 0, 9);
        let found = culprits(&t, 8, 10, 0.1, &CulpritParams::default());
        let named: Vec<(u32, usize)> = found.iter().map(|c| (c.rank, c.stage)).collect();
        assert_eq!(named, [(2, 0), (6, 1)]);
    }
}
