//! `sf frontier` and `sf slow` on a job with NCCL calls but no step vectors: steps and
//! phases inferred from the NCCL schedule (`analysis::inferred`), with the same wait
//! attribution as marked stages.

use crate::analysis::blame::{attribute, Attribution, RankTimeline, StageSpan};
use crate::analysis::comms::grow::Aliases;
use crate::analysis::inferred::{infer, Call, RankCalls, Signature, PHASES};
use crate::core::log::nccl_op::dtype_name;
use crate::core::log::reader::RankLog;
use crate::core::log::records::RecordBody;
use crate::core::record::doors::no_markers_note;
use serde::Serialize;

use super::step_vectors::{RankStep, RankSteps, StageNames};
use super::waits::{align_hosts, calls_and_aliases, clock_of, collective_key, rename_grown, Timelines};
use super::Failure;
use crate::report::discover::{self, Dirs};

/// Where a report's stages came from: `"markers"` (the job's own stages) or
/// `"inferred"` (the NCCL schedule).
pub type Source = &'static str;
pub const MARKERS: Source = "markers";
pub const INFERRED: Source = "inferred";

/// The source of a stage list read back (a CSV that `sf steps --csv` wrote): inferred when
/// every stage is an inferred phase, so a round trip keeps the answer's source.
pub fn source_of_stages(stages: &[String]) -> Source {
    if !stages.is_empty() && stages.iter().all(|s| PHASES.contains(&s.as_str())) {
        INFERRED
    } else {
        MARKERS
    }
}

/// What the inference found, for the report.
#[derive(Debug, Serialize)]
pub struct InferredSummary {
    /// Collectives per step.
    pub collectives_per_step: usize,
    /// The step's collectives in order, as `op count dtype @comm`, runs of one folded into
    /// `xN` (at most [`PATTERN_SHOWN`] entries).
    pub pattern: Vec<String>,
    pub communicators: usize,
    /// The rank whose calls gave the period.
    pub reference_rank: u32,
    /// Median time outside collectives where the step turns, seconds.
    pub step_gap_s: f64,
    /// Ranks whose collectives do not follow the pattern: no steps inferred.
    pub ranks_off_pattern: Vec<u32>,
    /// Why markers the job may emit were not seen (NVTX ranges with no
    /// NVTX_INJECTION64_PATH), when the logs can tell.
    pub markers_note: Option<&'static str>,
}

/// Pattern entries shown in a report.
const PATTERN_SHOWN: usize = 8;

impl InferredSummary {
    /// The human line that says the stages are inferred.
    pub fn line(&self) -> String {
        let mut line = format!(
            "stages inferred from the NCCL schedule (no step markers in the logs): {} collectives per step ({}) on {} \
             communicator{}, step turns after a {:.1} ms gap",
            self.collectives_per_step,
            self.pattern.join(", "),
            self.communicators,
            if self.communicators == 1 { "" } else { "s" },
            self.step_gap_s * 1e3
        );
        if !self.ranks_off_pattern.is_empty() {
            let ranks: Vec<String> = self.ranks_off_pattern.iter().map(|r| r.to_string()).collect();
            line += &format!("; ranks {} do not follow it", ranks.join(","));
        }
        if let Some(note) = self.markers_note {
            line += &format!("; {note}");
        }
        line
    }
}

/// Inferred stages and their waits.
pub struct Inferred {
    pub summary: InferredSummary,
    /// Waits and caused waits from the host's calls, stages indexed as [`PHASES`].
    pub attribution: Attribution,
    /// Each rank's inferred phases on its own clock, for waits read from the device.
    spans: Vec<(u32, Vec<StageSpan>)>,
}

/// The job's wait attribution: the inferred phases' when `inferred` (from the device when
/// `timelines` read the waits there: asynchronous launches return before any wait, so the
/// host's calls hold none), else the marked stages' (`marked`); and the inference's summary.
pub fn attribution(
    inferred: Option<Inferred>,
    timelines: Timelines,
    marked: impl FnOnce(Timelines) -> Attribution,
) -> (Attribution, Option<InferredSummary>) {
    match inferred {
        Some(i) => (timelines.device_attribution_over(&i.spans).unwrap_or(i.attribution), Some(i.summary)),
        None => (marked(timelines), None),
    }
}

/// When no rank of `ranks` (read from `dir` by `step_vectors::read_ranks`) has a step,
/// infers them from the logs' collectives and fills them in. `None` (and `ranks`
/// untouched) when some rank has steps, or the collectives show no repeating pattern.
pub fn fill(
    dir: &Dirs,
    command: &str,
    ranks: &mut [RankSteps],
    names: &mut StageNames,
) -> Result<Option<Inferred>, Failure> {
    if ranks.iter().any(|r| !r.steps.is_empty()) {
        return Ok(None);
    }
    let logs = discover::job_log_paths(dir, command).map_err(Failure::Message)?;
    let mut collectives: Vec<RankCalls> = Vec::new();
    let mut timelines: Vec<RankTimeline> = Vec::new();
    let mut clocks = Vec::new();
    let mut aliases = Vec::new();
    for path in &logs {
        let log = RankLog::open(path).map_err(|e| Failure::Message(e.to_string()))?;
        let rank = log.header.global_rank;
        // As read_ranks: unranked logs and a second log of one rank are skipped.
        if rank < 0 || collectives.iter().any(|r| r.rank == rank as u32) {
            continue;
        }
        collectives.push(RankCalls { rank: rank as u32, calls: collectives_of(&log) });
        let calls = calls_and_aliases(&log, &mut aliases);
        timelines.push(RankTimeline { rank: rank as u32, calls, spans: Vec::new(), waits: Vec::new() });
        clocks.push(clock_of(&log));
    }
    // A grown communicator is one communicator on all its members (`analysis::comms::grow`).
    let aliases = Aliases::of(&aliases);
    rename_grown(&mut timelines, &aliases);
    for c in collectives.iter_mut().flat_map(|r| &mut r.calls) {
        c.signature.comm_id = aliases.canonical(c.signature.comm_id);
        c.key.0 = aliases.canonical(c.key.0);
    }
    let Some(inference) = infer(&collectives) else { return Ok(None) };
    let mut off_pattern = Vec::new();
    let phases: Vec<u32> = PHASES.iter().map(|name| names.id(name)).collect();
    for (r, timeline) in inference.ranks.iter().zip(&mut timelines) {
        timeline.spans = r.spans.clone();
        let Some(steps) = ranks.iter_mut().find(|s| s.rank == r.rank) else { continue };
        if r.steps.is_empty() {
            off_pattern.push(r.rank);
        }
        steps.steps = r
            .steps
            .iter()
            .map(|s| RankStep {
                step: s.step,
                t_begin_ns: s.begin_ns,
                wall_ns: s.end_ns - s.begin_ns,
                overlap_ns: 0,
                // Every phase, zeros included, so the stage list is PHASES in order.
                stages: phases.iter().copied().zip(s.phases_ns).collect(),
                device: Vec::new(),
            })
            .collect();
    }
    let mut communicators: Vec<u64> = inference.pattern.iter().map(|s| s.comm_id).collect();
    communicators.sort_unstable();
    communicators.dedup();
    let summary = InferredSummary {
        collectives_per_step: inference.pattern.len(),
        pattern: folded(&inference.pattern),
        communicators: communicators.len(),
        reference_rank: inference.reference_rank,
        step_gap_s: inference.step_gap_ns as f64 / 1e9,
        ranks_off_pattern: off_pattern,
        markers_note: no_markers_note(ranks.iter().filter_map(|r| r.doors.as_ref())),
    };
    align_hosts(&mut timelines, &clocks);
    let spans = inference.ranks.iter().map(|r| (r.rank, r.spans.clone())).collect();
    Ok(Some(Inferred { summary, attribution: attribute(&timelines), spans }))
}

/// The log's completed collectives with a communicator and sequence, in enter order.
fn collectives_of(log: &RankLog) -> Vec<Call> {
    let mut calls = Vec::new();
    for record in log.records().0 {
        if let RecordBody::NcclCall(c) = record.body {
            let Some(key) = collective_key(&c).filter(|_| c.t_exit_ns >= c.t_enter_ns) else { continue };
            let signature = Signature { comm_id: c.comm_id, op: c.op, count: c.count, dtype: c.dtype };
            calls.push(Call { signature, key, enter_ns: c.t_enter_ns, exit_ns: c.t_exit_ns });
        }
    }
    calls.sort_by_key(|c| c.enter_ns);
    calls
}

/// `allreduce 4096 float32 x4, allgather 2 float32`, communicators named by their order of
/// appearance when there are several.
fn folded(pattern: &[Signature]) -> Vec<String> {
    let mut comms: Vec<u64> = Vec::new();
    let mut out: Vec<(String, usize)> = Vec::new();
    for s in pattern {
        if !comms.contains(&s.comm_id) {
            comms.push(s.comm_id);
        }
        let mut text = format!("{} {} {}", s.op.name(), s.count, dtype_name(s.dtype));
        if pattern.iter().any(|o| o.comm_id != s.comm_id) {
            text += &format!(" @comm{}", comms.iter().position(|&c| c == s.comm_id).unwrap_or(0));
        }
        match out.last_mut() {
            Some((last, n)) if *last == text => *n += 1,
            _ => out.push((text, 1)),
        }
    }
    let mut shown: Vec<String> =
        out.iter().take(PATTERN_SHOWN).map(|(t, n)| if *n > 1 { format!("{t} x{n}") } else { t.clone() }).collect();
    if out.len() > PATTERN_SHOWN {
        shown.push(format!("... {} more", out.len() - PATTERN_SHOWN));
    }
    shown
}

#[cfg(test)]
mod tests {
    use crate::core::log::nccl_op::NcclOp;

    use super::*;

    fn sig(comm_id: u64, op: NcclOp, count: u64) -> Signature {
        Signature { comm_id, op, count, dtype: 7 }
    }

    #[test]
    fn the_pattern_folds_runs_and_names_communicators_only_when_several() {
        let ar = sig(9, NcclOp::AllReduce, 4096);
        let one = [ar, ar, ar, sig(9, NcclOp::AllGather, 2)];
        assert_eq!(folded(&one), ["allreduce 4096 float32 x3", "allgather 2 float32"]);
        let two = [ar, sig(5, NcclOp::AllReduce, 4096), ar];
        assert_eq!(
            folded(&two),
            ["allreduce 4096 float32 @comm0", "allreduce 4096 float32 @comm1", "allreduce 4096 float32 @comm0"]
        );
        let long: Vec<Signature> = (0..20).map(|i| sig(9, NcclOp::AllReduce, 100 + i)).collect();
        let shown = folded(&long);
        assert_eq!(shown.len(), PATTERN_SHOWN + 1);
        assert_eq!(shown[PATTERN_SHOWN], "... 12 more");
    }

    #[test]
    fn a_csv_of_inferred_phases_reads_back_as_inferred() {
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(source_of_stages(&names(&PHASES)), INFERRED);
        assert_eq!(source_of_stages(&names(&["data.next_wait", PHASES[0]])), MARKERS);
        assert_eq!(source_of_stages(&[]), MARKERS);
    }
}
