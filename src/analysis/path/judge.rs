//! Which passes made a step longer: each pass against its expected duration, slowdowns
//! named only when they lie on the critical path, the others reported as absorbed.
//!
//! A pass's expected duration is the median of the same pass (stage, microbatch, phase)
//! over every step and every pipeline (the DP replicas, and the TP ranks' copies of one
//! pipeline): a slowdown in fewer than half of those is measured against the rest, one in
//! more than half is the job's normal. VenusTrace flags a pass 50% over its expectation
//! (β); that alone misses a slowdown of a few percent of the step spread over every
//! microbatch of a stage. So two kinds are judged: one pass from `EXCESS_SHARE` over its
//! expectation, and a stage's passes of one phase together (every microbatch's excess
//! summed). Either is a finding by what it added to the step (the critical path recomputed
//! with those passes at their expected durations): `STEP_SHARE` of the step at least, the
//! low end of the slowdowns that matter (a busy host's scheduling hiccups reach a few
//! percent of a short step). A pass whose duration is only a bound
//! (`StepPasses::unjudged`) is neither judged nor part of its stage's group: its excess
//! may be its neighbour's. A pass carrying a span of two (`StepPasses::merged`) is judged
//! as the span, and grouped with its stage's spans of the same two phases.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Pass, Phase, StepPasses};
use crate::core::quantile::select_quantile;

/// A pass is slow from this share over its expected duration.
pub const EXCESS_SHARE: f64 = 0.2;
/// A slowdown is a finding when it lengthened its step by this share of the step it
/// would have been without it.
pub const STEP_SHARE: f64 = 0.05;

/// The other pass of a judged span of two: its phase, and its microbatch (None for a
/// stage's spans together).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Merged {
    pub phase: Phase,
    pub microbatch: Option<usize>,
}

/// A slowdown in one step of one pipeline: one pass, or (`microbatch` None) every pass of
/// one phase on one stage.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Slowdown {
    /// Index of the step in the input, and of the pipeline in that step (the caller names
    /// them in its terms).
    #[serde(skip)]
    pub step: usize,
    #[serde(skip)]
    pub pipeline: usize,
    pub stage: usize,
    pub phase: Phase,
    pub microbatch: Option<usize>,
    /// The pass timed with this one when no exchange separates them (passes from
    /// send/recv): the slowdown lies in one of the two.
    pub merged_with: Option<Merged>,
    /// The passes' time, and what it was expected to be (summed over the microbatches).
    pub duration_ns: u64,
    pub expected_ns: u64,
    /// How much longer the step was for it (0: absorbed by a bubble).
    pub added_ns: u64,
    /// A single pass's slack at its expected duration: how much it could have grown for
    /// free (0 for a whole stage's passes).
    pub slack_ns: u64,
    pub step_ns: u64,
    /// It lies on the critical path: the step was longer for it.
    pub on_path: bool,
    /// It lengthened the step by at least `STEP_SHARE` of the step without it.
    pub finding: bool,
}

/// A stage's passes judged together: (stage, phase, the phase of the other pass of each
/// one's span of two, if any).
type GroupKey = (usize, Phase, Option<Phase>);

/// Every slowdown of `steps` (per step, one `StepPasses` per pipeline): slow passes, and
/// stages whose passes of one phase together added to a step. Findings first, then the
/// largest addition.
pub fn slowdowns(steps: &[Vec<StepPasses>]) -> Vec<Slowdown> {
    let mut samples: BTreeMap<Pass, Vec<f64>> = BTreeMap::new();
    for pipeline in steps.iter().flatten() {
        for &(pass, d) in pipeline.stages.iter().flatten() {
            samples.entry(pass).or_default().push(d as f64);
        }
    }
    let expected: BTreeMap<Pass, u64> =
        samples.into_iter().map(|(pass, mut ds)| (pass, select_quantile(&mut ds, 0.5) as u64)).collect();
    let mut found = Vec::new();
    for (step, pipelines) in steps.iter().enumerate() {
        for (pipeline, passes) in pipelines.iter().enumerate() {
            let Some(path) = passes.critical_path() else { continue };
            let judge = |group: &[(Pass, u64)], microbatch: Option<usize>| -> Option<Slowdown> {
                let (first, _) = group.first()?;
                let merged_with = passes
                    .merged
                    .get(first)
                    .map(|other| Merged { phase: other.phase, microbatch: microbatch.map(|_| other.microbatch) });
                let mut relieved = passes.clone();
                let (mut duration_ns, mut expected_ns) = (0, 0);
                for &(pass, d) in group {
                    let e = expected[&pass];
                    relieved = relieved.with_duration(pass, d.min(e));
                    duration_ns += d;
                    expected_ns += e;
                }
                let without = relieved.critical_path()?;
                let added_ns = path.length_ns.saturating_sub(without.length_ns);
                Some(Slowdown {
                    step,
                    pipeline,
                    stage: first.stage,
                    phase: first.phase,
                    microbatch,
                    merged_with,
                    duration_ns,
                    expected_ns,
                    added_ns,
                    slack_ns: if microbatch.is_some() { without.slack_ns.get(first).copied().unwrap_or(0) } else { 0 },
                    step_ns: path.length_ns,
                    on_path: added_ns > 0,
                    // By the step it would have been: a 5% slowdown is 5% of the step
                    // without it (of the slowed step it is 4.8%).
                    finding: added_ns > 0 && added_ns as f64 >= STEP_SHARE * without.length_ns as f64,
                })
            };
            // Spans of two are grouped apart from lone passes of their first's phase.
            let mut by_stage_phase: BTreeMap<GroupKey, Vec<(Pass, u64)>> = BTreeMap::new();
            for &(pass, d) in passes.stages.iter().flatten().filter(|(p, _)| !passes.unjudged.contains(p)) {
                let e = expected[&pass];
                if d > e {
                    let merged = passes.merged.get(&pass).map(|other| other.phase);
                    by_stage_phase.entry((pass.stage, pass.phase, merged)).or_default().push((pass, d));
                }
                if d > e && d as f64 >= e as f64 * (1.0 + EXCESS_SHARE) {
                    found.extend(judge(&[(pass, d)], Some(pass.microbatch)));
                }
            }
            // A stage's slowdown spread over its microbatches, when no single pass of it
            // already tells the story.
            for group in by_stage_phase.values().filter(|g| g.len() > 1) {
                let Some(spread) = judge(group, None) else { continue };
                let told = found.iter().any(|s: &Slowdown| {
                    let merged = |s: &Slowdown| s.merged_with.map(|m| m.phase);
                    (s.step, s.pipeline, s.stage, s.phase, merged(s))
                        == (step, pipeline, spread.stage, spread.phase, merged(&spread))
                        && s.finding
                        && 2 * s.added_ns >= spread.added_ns
                });
                if spread.finding && !told {
                    found.push(spread);
                }
            }
        }
    }
    found.sort_by(|a, b| {
        b.finding.cmp(&a.finding).then(b.added_ns.cmp(&a.added_ns)).then(b.duration_ns.cmp(&a.duration_ns))
    });
    found
}
