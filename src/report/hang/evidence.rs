//! Which evidence `sf hang`'s verdict came from, and the verdicts beyond the host's
//! calls: the stall of step and stage progress, tried last, and the parts the ranks play
//! in a hang that progress or the devices show.

use super::*;
use crate::analysis::hang::cadence::Threshold;
use crate::analysis::hang::progress::{self, ProgressStall, ProgressThreshold};

/// Which evidence `sf hang`'s verdict came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HangEvidenceUsed {
    HostCalls,
    Device,
    /// NCCL's profiler alone (the CUDA door shut): which collective each rank's device
    /// last began and finished (`analysis::hang::kernel_ch`).
    Profiler,
    /// Host calls too, every stuck one a collective the Python door saw issued on a gloo
    /// process group.
    PythonCollectives,
    Progress,
    None,
}

impl HangEvidenceUsed {
    /// How the headline says it.
    pub fn describe(self) -> &'static str {
        match self {
            HangEvidenceUsed::HostCalls => "host NCCL calls",
            HangEvidenceUsed::Device => "the devices' unfinished work",
            HangEvidenceUsed::Profiler => "NCCL's profiler: the kernels each device began and finished",
            HangEvidenceUsed::PythonCollectives => "collectives issued from Python (torch.distributed on gloo)",
            HangEvidenceUsed::Progress => "step and stage progress",
            HangEvidenceUsed::None => "none",
        }
    }
}

/// The ranks behind when the whole job stopped advancing.
#[derive(Debug, Serialize)]
pub struct ProgressStallReport {
    /// The ranks behind (the culprits), ascending; the first is the headline's.
    pub behind_ranks: Vec<i32>,
    pub step: Option<u64>,
    pub stage: Option<String>,
    /// How long the first rank behind has not advanced.
    pub idle_s: f64,
    /// Where most of the others stand.
    pub ahead_step: Option<u64>,
    pub ahead_stage: Option<String>,
    pub ahead_ranks: Vec<i32>,
    /// How long no rank has advanced.
    pub job_idle_s: f64,
}

impl From<ProgressStall> for ProgressStallReport {
    fn from(s: ProgressStall) -> ProgressStallReport {
        ProgressStallReport {
            behind_ranks: s.behind_ranks,
            step: s.step,
            stage: s.stage,
            idle_s: seconds(s.idle_ns),
            ahead_step: s.ahead_step,
            ahead_stage: s.ahead_stage,
            ahead_ranks: s.ahead_ranks,
            job_idle_s: seconds(s.job_idle_ns),
        }
    }
}

/// The progress threshold (when some rank marks its steps) and the stall it finds, asked
/// only when neither the calls nor the devices show a hang (`asked`): progress is the last
/// resort.
pub(super) fn progress_verdict(
    marked: &[RankProgress],
    t: &Threshold,
    asked: bool,
) -> (Option<ProgressThreshold>, Option<ProgressStall>) {
    let threshold = marked
        .iter()
        .any(|p| p.idle_ns.is_some())
        .then(|| progress::threshold(marked, t.factor, t.min_stuck_ns, t.fallback_stuck_ns));
    let stall = threshold.filter(|_| asked).and_then(|pt| progress::stall(marked, pt.threshold_ns));
    (threshold, stall)
}

/// The ranks' parts in a hang the calls do not show (seen from progress or the devices):
/// `culprits` are in state `as_culprit`, the others wait for them; each stuck for as long
/// as it has not advanced.
pub(super) fn mark_culprits(ranks: &mut [RankReport], culprits: &[i32], as_culprit: State) {
    for r in ranks.iter_mut().filter(|r| r.role == State::Ok) {
        let (part, waiting_for) =
            if culprits.contains(&r.rank) { (as_culprit, Vec::new()) } else { (State::Waiting, culprits.to_vec()) };
        r.role = part;
        if r.state == State::Ok {
            r.state = part;
        }
        r.waiting_for = waiting_for;
        r.stuck_s = r.stuck_s.or(r.idle_s);
    }
}
