//! The wait attribution against a table's rows: the attribution is keyed by rank, then
//! step, then stage (as `analysis::blame` builds it), the rows are sorted by step, then
//! rank, then stage. Looking each row up in the map costs a tree search per row; this
//! lays the waits out in the rows' order (a counting pass by step) and walks both.

use super::Row;
use crate::analysis::blame::StageSeconds;

/// Calls `apply(row, seconds)` for every wait whose (rank, step, stage) is a row's,
/// each row at most once; waits of no row are skipped. `rows` are sorted by
/// (step, rank, stage) and unique.
pub(super) fn for_each_wait(rows: &mut [Row], waits: &StageSeconds, mut apply: impl FnMut(&mut Row, f64)) {
    if waits.is_empty() {
        return;
    }
    // Each step's first row; one entry per run of rows, so bounded by the rows.
    let mut starts: Vec<(u64, usize)> = Vec::new();
    let mut at = 0;
    for run in rows.chunk_by(|a, b| a.step == b.step) {
        starts.push((run[0].step, at));
        at += run.len();
    }
    starts.push((u64::MAX, rows.len()));
    let steps = &starts[..starts.len() - 1];
    // The step (index into `steps`) of each wait that can be a row's; one rank's waits
    // come in step order, so the step after the previous one is tried first.
    let mut counts = vec![0usize; steps.len() + 1];
    let mut placed: Vec<(usize, u32, u32, f64)> = Vec::with_capacity(waits.len());
    let mut hint = 0;
    for (&(rank, step, stage), &seconds) in waits {
        let Ok(stage) = u32::try_from(stage) else { continue };
        let found = [hint, hint + 1]
            .into_iter()
            .find(|&k| steps.get(k).is_some_and(|s| s.0 == step))
            .or_else(|| steps.binary_search_by_key(&step, |s| s.0).ok());
        let Some(k) = found else { continue };
        hint = k;
        counts[k + 1] += 1;
        placed.push((k, rank, stage, seconds));
    }
    // Counting sort by step: stable, so each step's waits stay in (rank, stage) order.
    for k in 1..counts.len() {
        counts[k] += counts[k - 1];
    }
    let mut by_step = vec![(0u32, 0u32, 0.0f64); placed.len()];
    for &(k, rank, stage, seconds) in &placed {
        let slot = &mut counts[k];
        by_step[*slot] = (rank, stage, seconds);
        *slot += 1;
    }
    drop(placed);
    // `counts[k]` is now where step k + 1's waits start.
    let mut from = 0;
    for (k, &(_, first_row)) in steps.iter().enumerate() {
        let (until, last_row) = (counts[k], starts[k + 1].1);
        let mut i = first_row;
        for &(rank, stage, seconds) in &by_step[from..until] {
            while i < last_row && (rows[i].rank, rows[i].stage) < (rank, stage) {
                i += 1;
            }
            if i < last_row && (rows[i].rank, rows[i].stage) == (rank, stage) {
                apply(&mut rows[i], seconds);
            }
        }
        from = until;
    }
}
