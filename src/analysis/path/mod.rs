//! The pipeline's critical path (VenusTrace's approach): one step of a pipeline as a graph
//! of passes, a forward and a backward per (pipeline stage, microbatch), with the
//! dependencies a pipeline has: each stage runs its passes in its schedule's order, a
//! forward needs the previous stage's forward of the same microbatch (its activations), a
//! backward the next stage's backward (its gradients). The step takes as long as the
//! longest path through the graph; a pass off that path has slack, and a slowdown no
//! larger than its slack is absorbed by a bubble and costs nothing.
//!
//! Pure: durations in, path and slack out. Where the durations come from (host call
//! times, device evidence) is the report's business.

mod judge;
pub mod passes;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

pub use judge::{slowdowns, Merged, Slowdown, EXCESS_SHARE, STEP_SHARE};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Fwd,
    Bwd,
}

/// One pass: pipeline stage (0-based), microbatch, forward or backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Pass {
    pub stage: usize,
    pub microbatch: usize,
    pub phase: Phase,
}

/// One step of one pipeline: per stage, its passes in the order it ran them, with their
/// durations in ns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepPasses {
    pub stages: Vec<Vec<(Pass, u64)>>,
    /// Passes whose duration is a bound, not a measurement (`passes::derive`): they time
    /// the graph but are never named slow, since their excess may be another pass's.
    pub unjudged: BTreeSet<Pass>,
    /// A pass that carries a measured span of two (`passes::derive`) → the other pass in
    /// it: judged as the span, named as both.
    pub merged: BTreeMap<Pass, Pass>,
}

/// The longest path through a step's graph and every pass's slack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CriticalPath {
    /// The step's length along the path, ns.
    pub length_ns: u64,
    /// The passes on the path, first to last.
    pub passes: Vec<Pass>,
    /// How much longer each pass could have taken without lengthening the step, ns.
    pub slack_ns: BTreeMap<Pass, u64>,
}

impl StepPasses {
    fn duration(&self) -> BTreeMap<Pass, u64> {
        self.stages.iter().flatten().copied().collect()
    }

    /// Each pass's predecessors: the pass before it on its stage, the neighbour stage's
    /// pass it needs data from and, for a backward, its own forward (when those ran).
    fn predecessors(&self, durations: &BTreeMap<Pass, u64>) -> BTreeMap<Pass, Vec<Pass>> {
        let last_stage = self.stages.len().saturating_sub(1);
        let mut preds: BTreeMap<Pass, Vec<Pass>> = BTreeMap::new();
        for passes in &self.stages {
            for (i, (pass, _)) in passes.iter().enumerate() {
                let entry = preds.entry(*pass).or_default();
                if i > 0 {
                    entry.push(passes[i - 1].0);
                }
                let feeder = match pass.phase {
                    Phase::Fwd if pass.stage > 0 => Some(Pass { stage: pass.stage - 1, ..*pass }),
                    Phase::Bwd if pass.stage < last_stage => Some(Pass { stage: pass.stage + 1, ..*pass }),
                    _ => None,
                };
                // A backward also needs its own forward (the activations it differentiates).
                let own_forward = (pass.phase == Phase::Bwd).then_some(Pass { phase: Phase::Fwd, ..*pass });
                entry.extend(feeder.into_iter().chain(own_forward).filter(|f| durations.contains_key(f)));
            }
        }
        preds
    }

    /// The critical path, or None when the dependencies have a cycle (passes recorded in
    /// an order no pipeline runs).
    pub fn critical_path(&self) -> Option<CriticalPath> {
        let durations = self.duration();
        let preds = self.predecessors(&durations);
        // Earliest finish of every pass, in a topological order (Kahn's algorithm).
        let mut succs: BTreeMap<Pass, Vec<Pass>> = BTreeMap::new();
        let mut waiting: BTreeMap<Pass, usize> = BTreeMap::new();
        for (pass, before) in &preds {
            waiting.insert(*pass, before.len());
            for b in before {
                succs.entry(*b).or_default().push(*pass);
            }
        }
        let mut ready: Vec<Pass> = waiting.iter().filter(|(_, &n)| n == 0).map(|(p, _)| *p).collect();
        let mut order = Vec::with_capacity(durations.len());
        while let Some(pass) = ready.pop() {
            order.push(pass);
            for next in succs.get(&pass).into_iter().flatten() {
                let n = waiting.get_mut(next)?;
                *n -= 1;
                if *n == 0 {
                    ready.push(*next);
                }
            }
        }
        if order.len() != durations.len() {
            return None;
        }
        let mut finish: BTreeMap<Pass, u64> = BTreeMap::new();
        for pass in &order {
            let start = preds[pass].iter().map(|p| finish[p]).max().unwrap_or(0);
            finish.insert(*pass, start + durations[pass]);
        }
        let length_ns = finish.values().copied().max().unwrap_or(0);
        // Latest finish that keeps the step's length, backwards.
        let mut latest: BTreeMap<Pass, u64> = BTreeMap::new();
        for pass in order.iter().rev() {
            let by = succs.get(pass).into_iter().flatten().map(|s| latest[s] - durations[s]).min().unwrap_or(length_ns);
            latest.insert(*pass, by);
        }
        let slack_ns: BTreeMap<Pass, u64> = order.iter().map(|p| (*p, latest[p] - finish[p])).collect();
        // The path: from the pass that ends last, back through predecessors with no slack
        // whose finish is this pass's start.
        let mut passes = Vec::new();
        let mut at = finish.iter().filter(|(_, &f)| f == length_ns).map(|(p, _)| *p).next();
        while let Some(pass) = at {
            passes.push(pass);
            let start = finish[&pass] - durations[&pass];
            at = preds[&pass].iter().copied().find(|p| finish[p] == start && slack_ns[p] == 0);
        }
        passes.reverse();
        Some(CriticalPath { length_ns, passes, slack_ns })
    }

    /// The same step with `pass` taking `duration_ns` instead.
    pub fn with_duration(&self, pass: Pass, duration_ns: u64) -> StepPasses {
        let mut changed = self.clone();
        for entry in changed.stages.iter_mut().flatten() {
            if entry.0 == pass {
                entry.1 = duration_ns;
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests;
