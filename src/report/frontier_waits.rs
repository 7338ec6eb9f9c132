//! `sf frontier` on logs (or on a CSV that carries their wait attribution, as
//! `sf steps --csv` writes it): stage times split into own time and in-collective wait
//! (`analysis::blame`), the measured model-fit indicator W_s, and each window's blame table
//! and culprits.

use crate::analysis::blame::waits_from::{WaitsFrom, Why};
use crate::analysis::blame::{blame_table, culprits, measured_sync_wait, Attribution, CulpritParams, SYNC_WAIT_SHARE};
use crate::analysis::frontier::csv::StageTable;
use crate::analysis::frontier::Window;
use serde::Serialize as DeriveSerialize;

use super::call_window::CallWindow;
use super::frontier::{StageMap, WindowReport};
use super::inferred::{self, InferredSummary};
use super::step_vectors::JobSteps;
use super::{step_vectors, waits, Failure};
use crate::report::discover::Dirs;

/// The frontier table of a job's logs on own time, and what it came from.
pub struct OwnTimeTable {
    pub table: StageTable,
    /// The waits taken out.
    pub waits: Waits,
    /// What the inference found, when the logs hold no step vectors.
    pub inferred: Option<InferredSummary>,
    /// The first step the step history holds when it wrapped.
    pub history_starts_at: Option<u64>,
    /// The steps the calls cover when the call budget left some unread: the table's.
    pub call_window: Option<CallWindow>,
    /// The first step whose waits are known, when older calls wrapped away.
    pub waits_start_at: Option<u64>,
    /// Where the waits came from, and why.
    pub waits_from: (WaitsFrom, Why),
}

/// The frontier table of the job in `dir` on own time (each rank's stage durations less
/// its in-collective waits), and the waits taken out. With no step vectors in the logs,
/// the stages are inferred from the NCCL schedule, and their summary comes back too.
pub fn own_time_table(dir: &Dirs) -> Result<OwnTimeTable, Failure> {
    let JobSteps { mut ranks, world, mut names, window, waits_start_at } = step_vectors::read_ranks(dir, "frontier")?;
    let history_starts_at = step_vectors::history_starts_at(&ranks);
    let timelines = waits::timelines(&mut ranks);
    if let Some(w) = &window {
        w.trim(&mut ranks);
    }
    let inferred = inferred::fill(dir, "frontier", &mut ranks, &mut names)?;
    let mut table = step_vectors::table_of(dir, &ranks, world, &names)?;
    drop(ranks);
    let stages = table.schema().stages().to_vec();
    let waits_from = timelines.waits_from();
    let (attribution, inferred) =
        inferred::attribution(inferred, timelines, |t| waits::attribution(t, &names, &stages, window.as_ref()));
    let waits = Waits::take_out(&mut table, waits::seen(attribution, waits_from.0));
    Ok(OwnTimeTable { table, waits, inferred, history_starts_at, call_window: window, waits_start_at, waits_from })
}

/// The model-fit indicator W_s: stages exposed through synchronization waits.
#[derive(Debug, DeriveSerialize)]
pub struct SyncWaitReport {
    /// Stages with W_s = 1: `measured` and `asked` together.
    pub stages: Vec<String>,
    /// Measured from the waits (logs, or a CSV's wait columns): ranks spent at least
    /// `min_share` of the stage waiting.
    pub measured: Vec<String>,
    /// Given with --sync-wait.
    pub asked: Vec<String>,
    pub min_share: f64,
    /// Share of each stage's time (waits included) spent waiting in collectives; empty
    /// for a CSV without the wait columns.
    pub wait_share: StageMap<f64>,
}

/// A rank that made the others wait (wait attribution over the window's collectives).
#[derive(Debug, DeriveSerialize)]
pub struct CulpritEntry {
    pub rank: u32,
    /// Its stage with the most caused wait.
    pub stage: String,
    /// Seconds of other ranks' waiting it caused over all its stages, and in `stage`.
    pub caused_s: f64,
    pub stage_caused_s: f64,
    /// How much later each peer finished each step because of it.
    pub delay_per_step_s: f64,
    /// Its part of all the window's waiting.
    pub wait_share: f64,
}

#[derive(Debug, DeriveSerialize)]
pub struct BlameEntry {
    pub rank: u32,
    pub stage: String,
    pub caused_s: f64,
}

/// Cells of a window's blame table in the report.
pub const BLAME_CELLS: usize = 8;

/// The waits of the logs (or of a CSV with the wait columns), by the table's stage list.
pub struct Waits {
    stages: Vec<String>,
    attribution: Attribution,
    /// Every rank's time in each stage over the job, waits included.
    stage_time_s: Vec<f64>,
    /// The stages W_s measures (indexes into `stages`).
    measured: Vec<usize>,
}

impl Waits {
    /// Seconds of other ranks' waiting `rank` caused in `step`, over the stages `of` takes.
    pub fn caused_by(&self, rank: u32, step: u64, of: impl Fn(&str) -> bool) -> f64 {
        let a = &self.attribution;
        let mine = a.caused.iter().filter(|(&(r, s, stage), _)| r == rank && s == step && of(&self.stages[stage]));
        mine.map(|(_, &seconds)| seconds).sum()
    }

    /// Turns `table` into own time with `attribution` (stages indexed as in its schema):
    /// the one path for rank logs and CSV, so both give the same numbers. W_s reads only
    /// the attribution and the stage times: it is measured on a second thread meanwhile.
    pub fn take_out(table: &mut StageTable, attribution: Attribution) -> Waits {
        let stage_time_s = table.stage_time_s();
        let measured = std::thread::scope(|scope| {
            let measuring =
                std::thread::Builder::new().spawn_scoped(scope, || measured_sync_wait(&attribution, &stage_time_s));
            table.take_out_waits(&attribution);
            match measuring {
                Ok(thread) => thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(_) => measured_sync_wait(&attribution, &stage_time_s),
            }
        });
        Waits { stages: table.schema().stages().to_vec(), attribution, stage_time_s, measured }
    }
}

/// W_s: the stages measured from the logs, and those `asked` for with --sync-wait.
pub fn sync_wait(waits: Option<&Waits>, asked: &[String]) -> SyncWaitReport {
    let (measured, wait_share) = match waits {
        Some(w) => {
            let measured: Vec<String> = w.measured.iter().map(|&s| w.stages[s].clone()).collect();
            let mut waited = vec![0.0; w.stages.len()];
            for (&(_, _, stage), &s) in &w.attribution.waits {
                waited[stage] += s;
            }
            let share = w
                .stages
                .iter()
                .zip(waited.iter().zip(&w.stage_time_s))
                .map(|(name, (waited, time))| (name.clone(), if *time > 0.0 { waited / time } else { 0.0 }))
                .collect();
            (measured, StageMap(share))
        }
        None => (Vec::new(), StageMap(Vec::new())),
    };
    let mut stages = measured.clone();
    stages.extend(asked.iter().filter(|s| !measured.contains(s)).cloned());
    SyncWaitReport { stages, measured, asked: asked.to_vec(), min_share: SYNC_WAIT_SHARE, wait_share }
}

/// Fills a window's waits, blame table and culprits from the wait attribution.
/// `group`: the ranks the window compares (a pipeline stage's), whose waits and caused
/// waits alone it reads; `None` for every rank.
pub fn blame_window(report: &mut WindowReport, w: &Window, waits: &Waits, group: Option<&[u32]>) {
    let in_group = |rank: u32| group.is_none_or(|g| g.contains(&rank));
    let a = &waits.attribution;
    let names = w.schema.stages();
    let mut wait_s = vec![0.0; names.len()];
    // Each stage's place in the window's schema, found once rather than per wait.
    let place: Vec<Option<usize>> = waits.stages.iter().map(|stage| names.iter().position(|n| n == stage)).collect();
    for (&(rank, step, stage), &s) in &a.waits {
        if !in_group(rank) {
            continue;
        }
        let at = place.get(stage).copied().flatten();
        if let (Some(at), true) = (at, (w.first_step..=w.last_step).contains(&step)) {
            wait_s[at] += s;
        }
    }
    let mut table = blame_table(a, w.first_step, w.last_step);
    table.cells.retain(|c| in_group(c.rank));
    // A step's time with its waits, as `sf slow` measures steps by their wall time: the
    // exposed own time leaves out every host synchronization of an asynchronous job.
    let waited_s: f64 = wait_s.iter().sum::<f64>() / (w.ranks * w.steps).max(1) as f64;
    let step_s = if w.steps > 0 { w.exposed_s / w.steps as f64 + waited_s } else { 0.0 };
    report.culprits = culprits(&table, w.ranks, w.steps, step_s, &CulpritParams::default())
        .into_iter()
        .map(|c| CulpritEntry {
            rank: c.rank,
            stage: waits.stages[c.stage].clone(),
            caused_s: c.caused_s,
            stage_caused_s: c.stage_caused_s,
            delay_per_step_s: c.delay_per_step_s,
            wait_share: c.wait_share,
        })
        .collect();
    report.wait_s = StageMap(names.iter().cloned().zip(wait_s).collect());
    report.blame = table
        .cells
        .iter()
        .take(BLAME_CELLS)
        .map(|c| BlameEntry { rank: c.rank, stage: waits.stages[c.stage].clone(), caused_s: c.caused_s })
        .collect();
}
