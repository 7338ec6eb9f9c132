//! A table's steps, in increasing order, as the analyzer reads them: each built from its
//! rows into reused buffers, in the caller's thread ([`StageTable::for_each_step`]) or,
//! with a second core, on another thread one step ahead of the caller
//! ([`StageTable::for_each_step_ahead`]): building a step reads every row of it, which
//! takes about as long as the analyzer takes over the step (3 million rows: 60 ms each).

use std::sync::mpsc;
use std::sync::Arc;

use super::{DeviceTime, Schema, StageTable, Step};

/// One step, in buffers kept from step to step.
struct StepBuffers {
    index: u64,
    schema: Arc<Schema>,
    ranks: Vec<u32>,
    missing: Vec<u32>,
    durations: Vec<f64>,
    overlap: Vec<f64>,
    device: Vec<Option<DeviceTime>>,
}

impl StepBuffers {
    fn new(schema: &Arc<Schema>) -> StepBuffers {
        StepBuffers {
            index: 0,
            schema: Arc::clone(schema),
            ranks: Vec::new(),
            missing: Vec::new(),
            durations: Vec::new(),
            overlap: Vec::new(),
            device: Vec::new(),
        }
    }

    fn step(&self, world: usize) -> Step<'_> {
        Step {
            index: self.index,
            schema: &self.schema,
            world,
            ranks: &self.ranks,
            missing: &self.missing,
            durations: &self.durations,
            overlap_s: &self.overlap,
            device: &self.device,
        }
    }
}

/// Where a walk over the table's steps is, and what it keeps from step to step.
struct StepCursor<'t> {
    table: &'t StageTable,
    /// The first row of the next step.
    at: usize,
    /// The first overlap not yet passed (overlaps and steps are both in order).
    overlaps_at: usize,
    /// The schema of each set of stages seen (a step lacking a stage has a shorter one).
    schemas: Vec<(Vec<bool>, Arc<Schema>)>,
    /// The ranks missing from a step with these ranks present: the world comes from log
    /// headers and may be large, so it is compared again only when the ranks change.
    missing_for: Option<(Vec<u32>, Vec<u32>)>,
}

impl<'t> StepCursor<'t> {
    fn new(table: &'t StageTable) -> StepCursor<'t> {
        let all = vec![true; table.schema.len()];
        StepCursor { table, at: 0, overlaps_at: 0, schemas: vec![(all, Arc::clone(&table.schema))], missing_for: None }
    }

    /// Fills `out` with the next step; false after the last.
    fn next(&mut self, out: &mut StepBuffers) -> bool {
        let table = self.table;
        let Some(first) = table.rows.get(self.at) else { return false };
        let step = first.step;
        let (step_at, end) = (self.at, self.at + table.rows[self.at..].partition_point(|r| r.step == step));
        self.at = end;
        let step_rows = &table.rows[step_at..end];
        let all = table.schema.len();
        let mut used = vec![false; all];
        for row in step_rows {
            used[row.stage as usize] = true;
        }
        out.schema = match self.schemas.iter().find(|(u, _)| *u == used) {
            Some((_, schema)) => Arc::clone(schema),
            None => {
                let names = (0..all).filter(|&s| used[s]).map(|s| table.schema.name(s).to_string()).collect();
                let schema = Arc::new(Schema::new(names).expect("a subset of a valid schema"));
                self.schemas.push((used, Arc::clone(&schema)));
                schema
            }
        };
        out.index = step;
        let width = out.schema.len();
        out.ranks.clear();
        out.durations.clear();
        out.device.clear();
        let mut rank_at = step_at;
        for rank_rows in step_rows.chunk_by(|a, b| a.rank == b.rank) {
            if rank_rows.len() == width {
                out.ranks.push(rank_rows[0].rank);
                out.durations.extend(rank_rows.iter().map(|r| r.seconds));
                if !table.devices.is_empty() {
                    out.device.extend_from_slice(&table.devices[rank_at..rank_at + width]);
                }
            }
            rank_at += rank_rows.len();
        }
        if self.missing_for.as_ref().is_none_or(|(ranks, _)| *ranks != out.ranks) {
            let missing = table.world.iter().copied().filter(|r| out.ranks.binary_search(r).is_err()).collect();
            self.missing_for = Some((out.ranks.clone(), missing));
        }
        out.missing.clear();
        out.missing.extend_from_slice(self.missing_for.as_ref().map_or(&[][..], |(_, missing)| missing));
        out.overlap.clear();
        if !table.overlaps.is_empty() {
            let overlaps = &table.overlaps;
            let at = &mut self.overlaps_at;
            out.overlap.extend(out.ranks.iter().map(|&rank| {
                *at += overlaps[*at..].partition_point(|(key, _)| *key < (step, rank));
                match overlaps.get(*at) {
                    Some(&(key, seconds)) if key == (step, rank) => seconds,
                    _ => 0.0,
                }
            }));
        }
        true
    }
}

impl StageTable {
    /// Hands each step, in increasing order, to `visit`, stopping at its first error.
    pub fn for_each_step<E>(&self, mut visit: impl FnMut(Step) -> Result<(), E>) -> Result<(), E> {
        let mut cursor = StepCursor::new(self);
        let mut buffers = StepBuffers::new(&self.schema);
        while cursor.next(&mut buffers) {
            visit(buffers.step(self.world.len()))?;
        }
        Ok(())
    }

    /// [`StageTable::for_each_step`], each step built on another thread while `visit`
    /// reads the one before: the same steps in the same order, in about half the time on
    /// two cores. On one core, or when no thread can be started, it is that function.
    pub fn for_each_step_ahead<E>(&self, mut visit: impl FnMut(Step) -> Result<(), E>) -> Result<(), E> {
        if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
            return self.for_each_step(visit);
        }
        // One step waits built while `visit` reads another; spent buffers come back.
        let (ready_tx, ready_rx) = mpsc::sync_channel::<StepBuffers>(1);
        let (spent_tx, spent_rx) = mpsc::channel::<StepBuffers>();
        std::thread::scope(|scope| {
            let builder = std::thread::Builder::new().spawn_scoped(scope, move || {
                let mut cursor = StepCursor::new(self);
                loop {
                    let mut buffers = spent_rx.try_recv().unwrap_or_else(|_| StepBuffers::new(&self.schema));
                    // Stops after the last step, or when the visitor stopped (its end of
                    // the channel is gone).
                    if !cursor.next(&mut buffers) || ready_tx.send(buffers).is_err() {
                        return;
                    }
                }
            });
            if builder.is_err() {
                return self.for_each_step(&mut visit);
            }
            // `ready_rx` is dropped on return, an error's included: the builder then stops
            // instead of waiting to hand over a step nobody reads.
            let mut visit_all = |ready: mpsc::Receiver<StepBuffers>| {
                for buffers in ready {
                    visit(buffers.step(self.world.len()))?;
                    let _ = spent_tx.send(buffers);
                }
                Ok(())
            };
            visit_all(ready_rx)
        })
    }
}
