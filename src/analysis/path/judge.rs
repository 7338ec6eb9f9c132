//! Which pass made a step longer: each pass against its expected duration, the slow ones
//! named only when they lie on the critical path, the others reported as absorbed.
//!
//! A pass's expected duration is the median of the same pass (stage, microbatch, phase)
//! over every step and every pipeline (the DP replicas, and the TP ranks' copies of one
//! pipeline): a slowdown in fewer than half of those is measured against the rest, one in
//! more than half is the job's normal. VenusTrace flags a pass 50% over its expectation
//! (β); that alone misses a slowdown of a few percent of the step spread over every
//! microbatch of a stage, so a pass counts here from `EXCESS_SHARE` over its expectation,
//! and the finding is judged by what the slowdown added to the step (the critical path
//! recomputed with that pass at its expected duration): `STEP_SHARE` of the step at least,
//! the low end of the slowdowns that matter (a busy host's scheduling hiccups reach a few
//! percent of a short step).

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Pass, StepPasses};
use crate::core::quantile::select_quantile;

/// A pass is slow from this share over its expected duration.
pub const EXCESS_SHARE: f64 = 0.2;
/// A slow pass is a finding when it lengthened its step by this share of the step.
pub const STEP_SHARE: f64 = 0.05;

/// One slow pass of one pipeline in one step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlowPass {
    /// Index of the step in the input, and of the pipeline in that step (the caller names
    /// them in its terms).
    #[serde(skip)]
    pub step: usize,
    #[serde(skip)]
    pub pipeline: usize,
    #[serde(flatten)]
    pub pass: Pass,
    pub duration_ns: u64,
    pub expected_ns: u64,
    /// How much longer the step was for it (0: absorbed by a bubble).
    pub added_ns: u64,
    /// Its slack at its expected duration: how much it could have grown for free.
    pub slack_ns: u64,
    pub step_ns: u64,
    /// It lies on the critical path: the step was longer for it.
    pub on_path: bool,
    /// It lengthened the step by at least `STEP_SHARE` of it.
    pub finding: bool,
}

/// Every slow pass of `steps` (per step, one `StepPasses` per pipeline), the largest
/// addition to a step first.
pub fn slow_passes(steps: &[Vec<StepPasses>]) -> Vec<SlowPass> {
    let mut samples: BTreeMap<Pass, Vec<f64>> = BTreeMap::new();
    for pipeline in steps.iter().flatten() {
        for &(pass, d) in pipeline.stages.iter().flatten() {
            samples.entry(pass).or_default().push(d as f64);
        }
    }
    let expected: BTreeMap<Pass, u64> =
        samples.into_iter().map(|(pass, mut ds)| (pass, select_quantile(&mut ds, 0.5) as u64)).collect();
    let mut slow = Vec::new();
    for (step, pipelines) in steps.iter().enumerate() {
        for (pipeline, passes) in pipelines.iter().enumerate() {
            let Some(path) = passes.critical_path() else { continue };
            for &(pass, duration_ns) in passes.stages.iter().flatten() {
                let expected_ns = expected[&pass];
                if (duration_ns as f64) < expected_ns as f64 * (1.0 + EXCESS_SHARE) || duration_ns <= expected_ns {
                    continue;
                }
                let Some(without) = passes.with_duration(pass, expected_ns).critical_path() else { continue };
                let added_ns = path.length_ns.saturating_sub(without.length_ns);
                slow.push(SlowPass {
                    step,
                    pipeline,
                    pass,
                    duration_ns,
                    expected_ns,
                    added_ns,
                    slack_ns: without.slack_ns.get(&pass).copied().unwrap_or(0),
                    step_ns: path.length_ns,
                    on_path: added_ns > 0,
                    finding: added_ns > 0 && added_ns as f64 >= STEP_SHARE * path.length_ns as f64,
                });
            }
        }
    }
    slow.sort_by(|a, b| b.added_ns.cmp(&a.added_ns).then(b.duration_ns.cmp(&a.duration_ns)));
    slow
}
