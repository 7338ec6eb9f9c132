//! The window's blame table and the ranks in it that are findings.

use std::collections::BTreeMap;

use super::attribute::Attribution;
use super::chance;
use super::stage_seconds::StageSeconds;

/// Seconds of other ranks' waiting one (rank, stage) caused.
#[derive(Clone, Debug, PartialEq)]
pub struct BlameCell {
    pub rank: u32,
    pub stage: usize,
    pub caused_s: f64,
}

/// Blame over a range of steps, largest cell first.
pub struct BlameTable<'a> {
    pub cells: Vec<BlameCell>,
    /// All waiting inside collectives in these steps, over every rank.
    pub wait_s: f64,
    /// The caused waits summed, by (rank, step, stage), and the steps the table covers:
    /// what [`culprits`] counts a cell's steps in, for the few cells it asks about.
    caused: &'a StageSeconds,
    first: u64,
    last: u64,
}

impl BlameTable<'_> {
    /// Seconds of waiting each rank caused, over all its stages.
    pub fn by_rank(&self) -> BTreeMap<u32, f64> {
        let mut ranks = BTreeMap::new();
        for c in &self.cells {
            *ranks.entry(c.rank).or_default() += c.caused_s;
        }
        ranks
    }

    /// The steps in which `rank`'s `stage` caused waiting that `counts`.
    fn steps_where(&self, rank: u32, stage: usize, counts: impl Fn(f64) -> bool) -> usize {
        let steps = self.caused.of_rank(rank, self.first, self.last);
        steps.iter().filter(|&&((_, _, s), caused)| s == stage && counts(caused)).count()
    }

    /// The steps in which any rank's `stage` caused waiting that `counts`.
    fn steps_where_any(&self, stage: usize, counts: impl Fn(f64) -> bool) -> usize {
        let mut steps: Vec<u64> = (self.caused.iter())
            .filter(|&(&(_, step, s), &caused)| {
                s == stage && (self.first..=self.last).contains(&step) && counts(caused)
            })
            .map(|(&(_, step, _), _)| step)
            .collect();
        steps.sort_unstable();
        steps.dedup();
        steps.len()
    }
}

/// The blame table of steps `first..=last`.
pub fn blame_table(a: &Attribution, first: u64, last: u64) -> BlameTable<'_> {
    let mut cells: Vec<BlameCell> = Vec::new();
    // The caused waits come in rank order: one rank's stages are summed (each over its
    // steps in order), then the next rank's, without a map of every (rank, stage).
    let mut sums: Vec<Option<f64>> = Vec::new();
    let mut rank = None;
    let mut flush = |rank: Option<u32>, sums: &mut Vec<Option<f64>>| {
        for (stage, sum) in sums.iter_mut().enumerate() {
            if let (Some(rank), Some(caused_s)) = (rank, sum.take()) {
                cells.push(BlameCell { rank, stage, caused_s });
            }
        }
    };
    for (&(r, step, stage), &caused) in &a.caused {
        if !(first..=last).contains(&step) {
            continue;
        }
        if rank != Some(r) {
            flush(rank, &mut sums);
            rank = Some(r);
        }
        if sums.len() <= stage {
            sums.resize(stage + 1, None);
        }
        *sums[stage].get_or_insert(0.0) += caused;
    }
    flush(rank, &mut sums);
    cells.sort_by(|a, b| b.caused_s.total_cmp(&a.caused_s).then(a.rank.cmp(&b.rank)).then(a.stage.cmp(&b.stage)));
    let wait_s = a.waits.iter().filter(|((_, step, _), _)| (first..=last).contains(step)).map(|(_, w)| w).sum();
    BlameTable { cells, wait_s, caused: &a.caused, first, last }
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
    /// culprit (the L1 detectors report spikes)...
    pub min_step_fraction: f64,
    /// ...and those steps must be more than luck gives a rank: on a busy host every rank is
    /// descheduled now and then, and with few steps or few ranks one of them is late in most
    /// steps by chance (one of two ranks holds the others up in 3 of 4 steps with odds of
    /// 5 in 16). Of the steps where any rank held its peers up by the floor in the stage,
    /// the culprit's share must have at most this chance were each such step's late rank
    /// drawn evenly from all the ranks.
    pub max_chance: f64,
}

/// Fewest steps in which a culprit must hold its peers up.
const MIN_CULPRIT_STEPS: usize = 3;

impl Default for CulpritParams {
    fn default() -> CulpritParams {
        CulpritParams {
            min_delay_s: 1e-3,
            min_step_share: 0.02,
            dominance: 3.0,
            min_step_fraction: 0.2,
            max_chance: 0.01,
        }
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
    let holds_up = |caused: f64| caused / peers >= floor;
    let held_up = |rank: u32, stage: usize| table.steps_where(rank, stage, holds_up);
    let by_luck = |held: usize, stage: usize| {
        chance::at_least(held, table.steps_where_any(stage, holds_up), 1.0 / ranks as f64) > params.max_chance
    };
    // The caused wait in a stage of the median of the other ranks, those that caused none
    // included: with the rank itself counted, the median of two ranks is the larger, and a
    // two-rank job's culprit could never stand out against itself.
    let typical = |rank: u32, stage: usize| {
        let mut others: Vec<f64> =
            table.cells.iter().filter(|c| c.stage == stage && c.rank != rank).map(|c| c.caused_s).collect();
        others.resize((ranks - 1).max(others.len()), 0.0);
        others.sort_by(f64::total_cmp);
        others[others.len() / 2]
    };
    let mut found: Vec<Culprit> = Vec::new();
    // Cells are largest first, so a rank's first passing cell is its largest.
    for c in &table.cells {
        if found.iter().any(|f| f.rank == c.rank) {
            continue;
        }
        let delay_per_step_s = c.caused_s / steps as f64 / peers;
        if delay_per_step_s < floor || c.caused_s < params.dominance * typical(c.rank, c.stage) {
            continue;
        }
        let held = held_up(c.rank, c.stage);
        if held < min_steps || by_luck(held, c.stage) {
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
    let ranks = distinct(keys().map(|k| u64::from(k.0)));
    let steps = distinct(keys().map(|k| k.1));
    let mean_step_s = stage_time_s.iter().sum::<f64>() / (ranks * steps).max(1) as f64;
    let table = blame_table(a, 0, u64::MAX);
    if culprits(&table, ranks, steps, mean_step_s, &CulpritParams::default()).is_empty() {
        return Vec::new();
    }
    sync_wait_stages(a, stage_time_s, SYNC_WAIT_SHARE)
}

/// How many different values `values` yields: counted on a bitmap of their span when it is
/// small (ranks and steps are numbered densely), else sorted. A set of a million keys
/// was a tenth of `sf frontier --csv`.
fn distinct(values: impl Iterator<Item = u64> + Clone) -> usize {
    let Some((low, high)) = values
        .clone()
        .fold(None, |span: Option<(u64, u64)>, v| Some(span.map_or((v, v), |(low, high)| (low.min(v), high.max(v)))))
    else {
        return 0;
    };
    if high - low < 1 << 26 {
        let mut seen = vec![0u64; ((high - low) / 64 + 1) as usize];
        for v in values {
            let at = v - low;
            seen[(at / 64) as usize] |= 1 << (at % 64);
        }
        return seen.iter().map(|w| w.count_ones() as usize).sum();
    }
    let mut all: Vec<u64> = values.collect();
    all.sort_unstable();
    all.dedup();
    all.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attribution(caused: &[((u32, u64, usize), f64)]) -> Attribution {
        let mut a = Attribution::default();
        for &(key, s) in caused {
            a.caused.insert(key, s);
            a.waits.add((0, key.1, 0), s);
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
        let a = attribution(&caused);
        let t = blame_table(&a, 0, 9);
        let found = culprits(&t, 8, 10, 0.1, &CulpritParams::default());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].rank, found[0].stage), (5, 0));
        assert!((found[0].delay_per_step_s - 0.005).abs() < 1e-12);

        let even: Vec<_> = (0..8).map(|r| ((r, 0, 2), 7.0 * 0.003)).collect();
        let a = attribution(&even);
        let t = blame_table(&a, 0, 9);
        assert!(culprits(&t, 8, 10, 0.1, &CulpritParams::default()).is_empty(), "even blame is noise");
    }

    #[test]
    fn the_late_one_of_two_ranks_is_a_culprit_and_two_alike_are_not() {
        // As on an H200 with two ranks: rank 1's device reaches every allreduce 40 ms after
        // rank 0's, in steps of 86 ms. The median with itself counted was its own blame.
        let a = attribution(&(0..27).map(|step| ((1, step, 0), 0.04)).collect::<Vec<_>>());
        let t = blame_table(&a, 0, 26);
        let found = culprits(&t, 2, 27, 0.086, &CulpritParams::default());
        assert_eq!(found.iter().map(|c| (c.rank, c.stage)).collect::<Vec<_>>(), [(1, 0)], "{found:?}");
        let alike: Vec<_> = (0..27).flat_map(|step| [((0, step, 0), 0.004), ((1, step, 0), 0.005)]).collect();
        let a = attribution(&alike);
        let t = blame_table(&a, 0, 26);
        assert!(culprits(&t, 2, 27, 0.086, &CulpritParams::default()).is_empty(), "two ranks alike");
    }

    #[test]
    fn a_rank_late_by_luck_is_not_a_culprit() {
        // A busy 2-core host, two ranks, four steps of 6 ms: one rank or the other is
        // descheduled 5 ms in every step, rank 1 in three of them (5 in 16 by luck).
        let lucky = [((0, 2, 0), 0.005), ((1, 0, 0), 0.005), ((1, 1, 0), 0.005), ((1, 3, 0), 0.005)];
        let a = attribution(&lucky);
        let t = blame_table(&a, 0, 3);
        assert!(culprits(&t, 2, 4, 0.006, &CulpritParams::default()).is_empty());
        // Rank 1 late in 17 of 20 such steps is no luck (a chance of 1.3 in 1,000).
        let late: Vec<_> = (0..20).map(|step| ((u32::from(step >= 3), step, 0), 0.005)).collect();
        let a = attribution(&late);
        let t = blame_table(&a, 0, 19);
        let found = culprits(&t, 2, 20, 0.006, &CulpritParams::default());
        assert_eq!(found.iter().map(|c| (c.rank, c.stage)).collect::<Vec<_>>(), [(1, 0)], "{found:?}");
    }

    #[test]
    fn a_small_delay_is_not_a_finding() {
        // 0.5 ms a step of a 0.1 s step: under the 2% floor.
        let a = attribution(&[((5, 0, 0), 10.0 * 7.0 * 0.0005)]);
        let t = blame_table(&a, 0, 9);
        assert!(culprits(&t, 8, 10, 0.1, &CulpritParams::default()).is_empty());
    }

    #[test]
    fn distinct_counts_on_a_bitmap_or_by_sorting() {
        assert_eq!(distinct([5u64, 3, 5, 9, 3].into_iter()), 3);
        assert_eq!(distinct(std::iter::empty()), 0);
        assert_eq!(distinct([u64::MAX, 0, u64::MAX, 1 << 40].into_iter()), 3, "a span too wide for a bitmap");
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
        let a = attribution(&caused);
        let t = blame_table(&a, 0, 9);
        let found = culprits(&t, 8, 10, 0.1, &CulpritParams::default());
        assert_eq!(found.iter().map(|c| (c.rank, c.stage)).collect::<Vec<_>>(), [(4, 0)], "{found:?}");
    }

    #[test]
    fn one_long_stall_is_jitter_not_a_culprit() {
        // Rank 5 stalls 50 ms once in 10 steps: 5 ms a step on average, in one step.
        let a = attribution(&[((5, 4, 0), 7.0 * 0.050)]);
        let t = blame_table(&a, 0, 9);
        assert!(culprits(&t, 8, 10, 0.1, &CulpritParams::default()).is_empty());
    }

    #[test]
    fn two_culprits_are_both_named() {
        let caused: Vec<_> = (0..10).flat_map(|step| [((2, step, 0), 0.05), ((6, step, 1), 0.04)]).collect();
        let a = attribution(&caused);
        let t = blame_table(&a, 0, 9);
        let found = culprits(&t, 8, 10, 0.1, &CulpritParams::default());
        let named: Vec<(u32, usize)> = found.iter().map(|c| (c.rank, c.stage)).collect();
        assert_eq!(named, [(2, 0), (6, 1)]);
    }
}
