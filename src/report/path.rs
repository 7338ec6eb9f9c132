//! `sf path`: the pipeline's critical path per step (`analysis::path`), from the pipelines
//! `sf roles` finds and each stage's passes in its step vectors: the ordered-stage
//! contract's forward and backward stages, one per microbatch (`model.fwd_loss_cpu_wall@M`,
//! `model.backward_cpu_wall@M`, M the microbatch), timed on the device where the CUDA door
//! sampled them, else on the host. A rank's step without those stages (a job that marks
//! steps only) has its passes from its sends and receives on the pipeline's communicators
//! (`analysis::path::passes`), timed on the device where the CUDA door linked each
//! exchange to its kernels, else on the host. A slow pass is named only when it
//! lengthened its step.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::frontier_waits::{self, Waits};
use super::ls::FileError;
use super::path_calls::{self, PipelineComms};
use super::roles::{self, RankRoles};
use super::step_vectors::{self, RankSteps, StageNames};
use super::waits;
use super::Failure;
use crate::analysis::comms::grow::Aliases;
use crate::analysis::frontier::DEFAULT_FORWARD_STAGE;
use crate::analysis::path::passes;
use crate::analysis::path::{slowdowns, Pass, Phase, Slowdown, StepPasses, EXCESS_SHARE, STEP_SHARE};
use crate::analysis::roles::Role;
use crate::core::log::reader::RankLog;
use crate::report::discover::{self, Dirs};
use crate::report::parallel;
use crate::report::read_budget::RECORDS;

/// The ordered-stage contract's backward stage; the forward one is `DEFAULT_FORWARD_STAGE`.
pub const BACKWARD_STAGE: &str = "model.backward_cpu_wall";

/// The `--json` object.
#[derive(Debug, Serialize)]
pub struct PathReport {
    pub dir: String,
    /// Each pipeline's ranks in stage order, as `sf roles` finds them.
    pub pipelines: Vec<Vec<u32>>,
    /// Steps every pipeline's ranks completed with passes in them, the first (a warm-up)
    /// left out, that were judged (0 when `note` says why none was).
    pub steps_judged: usize,
    /// What timed the passes: "device" (the CUDA door's stage samples), "host" (the stage
    /// markers: in a job that launches asynchronously, launch time only, which says nothing
    /// of the device work) or "mixed".
    pub timed_on: &'static str,
    /// Where the judged steps' pass boundaries came from: "markers" (the stages above),
    /// "send_recv" (the ranks' pipeline sends and receives, for ranks whose steps have no
    /// pass markers) or "mixed"; null when no step was judged.
    pub passes_from: Option<&'static str>,
    pub excess_share: f64,
    pub step_share: f64,
    /// The slowdown that added most to a step, when it added at least `step_share` of it.
    pub finding: Option<SlowdownView>,
    /// Every slowdown: findings first, then the largest addition (absorbed ones have
    /// `added_ns` 0).
    pub slow: Vec<SlowdownView>,
    /// Why there is nothing to judge, when there is not; or which passes were left
    /// unjudged because their boundaries from send/recv are bounds, not measurements.
    pub note: Option<String>,
    pub errors: Vec<FileError>,
}

/// A slowdown, named in the job's terms.
#[derive(Clone, Debug, Serialize)]
pub struct SlowdownView {
    /// The step number (the markers').
    pub step: u64,
    /// The rank that ran the pass, and its pipeline's ranks in stage order.
    pub rank: u32,
    pub pipeline: Vec<u32>,
    /// The rank of the pass's pipeline stage (its tensor- and data-parallel peers) whose
    /// late arrival at the stage's collectives held the pass up, by the waits it caused
    /// in the step's passes of that phase (and microbatch; without pass markers, in the
    /// whole step): twice any peer's at least. Null when no peer stands out (the whole
    /// stage was slow, or it has one rank).
    pub held_by: Option<u32>,
    #[serde(flatten)]
    pub judged: Slowdown,
}

impl PathReport {
    pub fn found(&self) -> bool {
        self.finding.is_some()
    }
}

/// The pipeline's slow pass on the critical path, for `sf slow` and `sf frontier`: the
/// answer for a pipelined job, where a stage's ranks differ from another stage's by role.
/// `None` for a job without a pipeline, or with nothing slow on the path.
pub fn pipeline_finding(dirs: &Dirs) -> Result<Option<SlowdownView>, Failure> {
    Ok(build(dirs)?.finding)
}

/// (phase, microbatch) of a stage name of the contract, `@M` the microbatch (none: 0).
fn pass_of(name: &str) -> Option<(Phase, usize)> {
    let (base, microbatch) = match name.rsplit_once('@') {
        Some((base, m)) => (base, m.parse().ok()?),
        None => (name, 0),
    };
    if base == DEFAULT_FORWARD_STAGE {
        Some((Phase::Fwd, microbatch))
    } else if base == BACKWARD_STAGE {
        Some((Phase::Bwd, microbatch))
    } else {
        None
    }
}

/// One stage's passes in one step.
#[derive(Clone)]
struct StageStep {
    passes: Vec<(Pass, u64)>,
    /// Those whose durations are bounds (`StepPasses::unjudged`).
    unjudged: BTreeSet<Pass>,
    /// Spans of two passes (`StepPasses::merged`).
    merged: BTreeMap<Pass, Pass>,
    /// From the rank's sends and receives (else from its pass markers), with the ns its
    /// host spent in tensor-parallel collectives in the step.
    from_send_recv: Option<u64>,
    /// Timed on the device (the CUDA door sampled the step's stages).
    on_device: bool,
}

/// Per step number, one stage's passes.
type StagePasses = BTreeMap<u64, StageStep>;

/// Per step number, the passes of one rank at `stage` from its pass markers: device time
/// where sampled.
fn passes_by_step(rank: &RankSteps, stage: usize, names: &StageNames) -> StagePasses {
    let mut steps = BTreeMap::new();
    for step in &rank.steps {
        let device: BTreeMap<u32, u64> = step.device.iter().map(|&(id, ns, _)| (id, ns)).collect();
        let passes: Vec<(Pass, u64)> = step
            .stages
            .iter()
            .filter_map(|&(id, host_ns)| {
                let (phase, microbatch) = pass_of(names.name(id))?;
                // Asynchronous launches: the device's busy time, unless the host took
                // longer to launch the pass (a slow host starves its device: the pass
                // cannot end before its launches do).
                let ns = device.get(&id).map_or(host_ns, |&device_ns| device_ns.max(host_ns));
                Some((Pass { stage, microbatch, phase }, ns))
            })
            .collect();
        if !passes.is_empty() {
            let on_device = !step.device.is_empty();
            let step_passes = StageStep {
                passes,
                unjudged: BTreeSet::new(),
                merged: BTreeMap::new(),
                from_send_recv: None,
                on_device,
            };
            steps.insert(step.step, step_passes);
        }
    }
    steps
}

/// Where a pipeline rank's passes come from, and where its log is.
struct StageRank<'a> {
    stage: usize,
    stages: usize,
    steps: &'a RankSteps,
    file: &'a std::path::Path,
}

/// `passes_by_step`, with each step the rank marked no passes in derived from its sends
/// and receives on the `pipeline` communicators; a log that cannot be read gives its
/// markers' steps only, and its error.
fn stage_passes(
    rank: &StageRank,
    names: &StageNames,
    newest: u64,
    comms: &PipelineComms,
) -> (StagePasses, Option<FileError>) {
    let mut steps = passes_by_step(rank.steps, rank.stage, names);
    let unmarked: Vec<_> = rank.steps.steps.iter().filter(|s| !steps.contains_key(&s.step)).collect();
    if unmarked.is_empty() || comms.pipeline.is_empty() {
        return (steps, None);
    }
    let log = match RankLog::open(rank.file) {
        Ok(log) => log,
        Err(e) => return (steps, Some(FileError { file: rank.file.display().to_string(), error: e.to_string() })),
    };
    for (number, read) in path_calls::step_calls(&log, newest, &unmarked, comms) {
        if let Some((derived, on_device)) = passes::derive_timed(rank.stage, rank.stages, &read.calls) {
            let step = StageStep {
                passes: derived.passes,
                unjudged: derived.unjudged,
                merged: derived.merged,
                from_send_recv: Some(read.tensor_wait_ns),
                on_device,
            };
            steps.insert(number, step);
        }
    }
    (steps, None)
}

pub fn build(dirs: &Dirs) -> Result<PathReport, Failure> {
    let files = discover::job_log_paths(dirs, "path").map_err(Failure::Message)?;
    let newest = RECORDS.per_log(RECORDS.total()?, files.len());
    let mut errors = Vec::new();
    let mut read = Vec::new();
    let mut file_of = BTreeMap::new();
    for (file, result) in
        files.iter().zip(parallel::read_all(&files, |f| RankLog::open(f).map(|l| RankRoles::read(&l, newest))))
    {
        match result {
            Ok(rank) => {
                if let Ok(global) = u32::try_from(rank.global_rank) {
                    file_of.insert(global, file.as_path());
                }
                read.push(rank);
            }
            Err(e) => errors.push(FileError { file: file.display().to_string(), error: e.to_string() }),
        }
    }
    let roles = roles::infer(&read);
    let aliases = Aliases::of(read.iter().flat_map(|r| &r.created));
    let of_role = |role| roles.communicators.iter().filter(|c| c.role == role).map(|c| c.comm_id).collect();
    let (pipeline_comms, tensor_comms): (BTreeSet<u64>, BTreeSet<u64>) = (of_role(Role::Pp), of_role(Role::Tp));
    let comms = PipelineComms { pipeline: &pipeline_comms, tensor: &tensor_comms, aliases: &aliases };
    let pipelines = roles.pipelines.clone();
    let mut report = PathReport {
        dir: dirs.display(),
        pipelines: pipelines.clone(),
        steps_judged: 0,
        timed_on: "host",
        passes_from: None,
        excess_share: EXCESS_SHARE,
        step_share: STEP_SHARE,
        finding: None,
        slow: Vec::new(),
        note: None,
        errors,
    };
    if pipelines.is_empty() {
        report.note = Some("no pipeline: no send/recv chain between ranks (sf roles tells the layout)".to_string());
        return Ok(report);
    }
    let job = step_vectors::read_ranks(dirs, "path")?;
    let by_rank: BTreeMap<u32, &RankSteps> = job.ranks.iter().map(|r| (r.rank, r)).collect();
    // Per pipeline, per stage, the passes per step number.
    let stage_ranks: Vec<Vec<Option<StageRank>>> = pipelines
        .iter()
        .map(|pipeline| {
            let stages = pipeline.len();
            let at = |(stage, rank): (usize, &u32)| {
                Some(StageRank { stage, stages, steps: by_rank.get(rank)?, file: file_of.get(rank)? })
            };
            pipeline.iter().enumerate().map(at).collect()
        })
        .collect();
    let flat: Vec<&Option<StageRank>> = stage_ranks.iter().flatten().collect();
    let mut read_stages = parallel::read_all(&flat, |rank| match rank {
        Some(rank) => stage_passes(rank, &job.names, newest, &comms),
        None => (StagePasses::new(), None),
    })
    .into_iter();
    let mut per_pipeline: Vec<Vec<StagePasses>> = Vec::new();
    for pipeline in &stage_ranks {
        let stages = read_stages.by_ref().take(pipeline.len()).map(|(passes, error)| {
            report.errors.extend(error);
            passes
        });
        per_pipeline.push(stages.collect());
    }
    // The steps every stage of every pipeline has.
    let mut common: Option<BTreeSet<u64>> = None;
    for stage in per_pipeline.iter().flatten() {
        let have: BTreeSet<u64> = stage.keys().copied().collect();
        common = Some(match common {
            None => have,
            Some(c) => c.intersection(&have).copied().collect(),
        });
    }
    // The first step warms up (communicators connect, caches fill): it is no baseline.
    // A step whose stages disagree on the microbatches (a stage's calls lost) is no graph.
    let same_microbatches = |n: &u64| {
        per_pipeline.iter().all(|stages| stages.windows(2).all(|w| w[0][n].passes.len() == w[1][n].passes.len()))
    };
    let step_numbers: Vec<u64> = common.unwrap_or_default().into_iter().skip(1).filter(same_microbatches).collect();
    if step_numbers.is_empty() {
        report.note = Some(format!(
            "no step in which every pipeline stage recorded its passes: the critical path needs the stages \
             {DEFAULT_FORWARD_STAGE}@M and {BACKWARD_STAGE}@M (M the microbatch) on every rank, or step markers \
             around 1F1B sends and receives on the pipeline's communicators"
        ));
        return Ok(report);
    }
    let judged: Vec<Vec<Vec<&StageStep>>> = step_numbers
        .iter()
        .map(|n| per_pipeline.iter().map(|stages| stages.iter().map(|s| &s[n]).collect()).collect())
        .collect();
    let steps: Vec<Vec<StepPasses>> = judged
        .iter()
        .map(|pipelines| {
            pipelines
                .iter()
                .map(|stages| StepPasses {
                    stages: stages.iter().map(|s| s.passes.clone()).collect(),
                    unjudged: stages.iter().flat_map(|s| s.unjudged.iter().copied()).collect(),
                    merged: stages.iter().flat_map(|s| s.merged.iter().map(|(a, b)| (*a, *b))).collect(),
                })
                .collect()
        })
        .collect();
    let all: Vec<&StageStep> = judged.iter().flatten().flatten().copied().collect();
    let share = |of: fn(&StageStep) -> bool, yes, no| match all.iter().filter(|s| of(s)).count() {
        0 => no,
        n if n == all.len() => yes,
        _ => "mixed",
    };
    report.timed_on = share(|s| s.on_device, "device", "host");
    report.passes_from = Some(share(|s| s.from_send_recv.is_some(), "send_recv", "markers"));
    // Host times of passes whose work the device does later say nothing of the device:
    // an asynchronous job without device evidence is not judged.
    let (_, why) = waits::waits_from_of(&job.ranks);
    if report.timed_on == "host" && why.waits_unseen(job.world) {
        report.note = Some(format!(
            "passes not judged: waits from {}; the host's pass times are only launch times (the CUDA door gives \
             device time)",
            why.describe()
        ));
        return Ok(report);
    }
    report.steps_judged = steps.len();
    let unjudged: BTreeSet<Pass> = all.iter().flat_map(|s| s.unjudged.iter().copied()).collect();
    if !unjudged.is_empty() {
        report.note = Some(format!(
            "{} passes have boundaries from send/recv that are bounds, not measurements, and are not judged alone: \
             the last stage's forward and backward of a microbatch, and the first stage's backward and next \
             forward, have no exchange between them (each pair is judged as one span, named as both); the first \
             stage's first forward runs from the step's start and its last backward to its next other call",
            unjudged.len()
        ));
    }
    report.slow = slowdowns(&steps)
        .into_iter()
        .map(|judged| SlowdownView {
            step: step_numbers[judged.step],
            rank: pipelines[judged.pipeline][judged.stage],
            pipeline: pipelines[judged.pipeline].clone(),
            held_by: None,
            judged,
        })
        .collect();
    // Inside a stage, a pass waits for its slowest tensor-parallel peer: the waits tell
    // (with pass markers, by the passes'; without, by the time in tensor-parallel calls).
    let marked =
        report.slow.iter().any(|s| judged[s.judged.step][s.judged.pipeline][s.judged.stage].from_send_recv.is_none());
    if marked && roles.ranks.iter().any(|r| r.tp.is_some_and(|tp| tp > 0) || r.dp.is_some_and(|dp| dp > 0)) {
        let waits = frontier_waits::own_time_table(dirs)?.waits;
        for s in &mut report.slow {
            let peers: Vec<u32> = roles.ranks.iter().filter(|r| r.pp == Some(s.judged.stage)).map(|r| r.rank).collect();
            s.held_by = held_by(&s.judged, s.step, &peers, &waits);
        }
    }
    for s in report.slow.iter_mut().filter(|s| s.held_by.is_none()) {
        let group = roles.communicators.iter().find(|c| c.role == Role::Tp && c.members.contains(&s.rank));
        let step = &judged[s.judged.step];
        let tensor_wait = |rank: u32| {
            let (pipeline, stage) = position(&pipelines, rank)?;
            step.get(pipeline)?.get(stage)?.from_send_recv
        };
        let waited: Option<Vec<(u64, u32)>> =
            group.map_or(Some(Vec::new()), |g| g.members.iter().map(|&r| Some((tensor_wait(r)?, r))).collect());
        s.held_by = waited.and_then(|w| held_by_tensor_waits(&s.judged, w));
    }
    report.finding = report.slow.iter().find(|s| s.judged.finding).cloned();
    Ok(report)
}

/// (pipeline, stage) of `rank` in `pipelines`.
pub(crate) fn position(pipelines: &[Vec<u32>], rank: u32) -> Option<(usize, usize)> {
    pipelines.iter().enumerate().find_map(|(p, ranks)| Some((p, ranks.iter().position(|&r| r == rank)?)))
}

/// Without pass markers: the member of the slow pass's tensor-parallel group (`waited`:
/// each member's ns in the group's calls in the step, on the device where their kernels
/// are linked) that waited least in them, when every other member waited more than it by
/// half the slowdown's excess at least: the peers it held up spent its lateness waiting
/// for it.
fn held_by_tensor_waits(judged: &Slowdown, mut waited: Vec<(u64, u32)>) -> Option<u32> {
    let excess = judged.duration_ns.saturating_sub(judged.expected_ns);
    waited.sort_unstable();
    match waited[..] {
        [(least, rank), (next, _), ..] if next.saturating_sub(least) >= excess / 2 && excess > 0 => Some(rank),
        _ => None,
    }
}

/// The one of `peers` that caused at least twice the waiting any other did in `step`'s
/// passes of the slowdown's phase (and microbatch).
fn held_by(judged: &Slowdown, step: u64, peers: &[u32], waits: &Waits) -> Option<u32> {
    let of = |name: &str| {
        pass_of(name).is_some_and(|(phase, m)| phase == judged.phase && judged.microbatch.is_none_or(|mb| mb == m))
    };
    let mut caused: Vec<(f64, u32)> = peers.iter().map(|&r| (waits.caused_by(r, step, of), r)).collect();
    caused.sort_by(|a, b| b.0.total_cmp(&a.0));
    match caused[..] {
        [(most, rank), (next, _), ..] if most > 0.0 && most >= 2.0 * next => Some(rank),
        [(most, rank)] if most > 0.0 => Some(rank),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_stage_names_give_the_pass() {
        assert_eq!(pass_of("model.fwd_loss_cpu_wall@3"), Some((Phase::Fwd, 3)));
        assert_eq!(pass_of("model.backward_cpu_wall"), Some((Phase::Bwd, 0)));
        assert_eq!(pass_of("model.backward_cpu_wall@x"), None);
        assert_eq!(pass_of("optim.step_cpu_wall"), None);
    }

    #[test]
    fn the_tensor_peer_that_waited_least_held_the_pass_up_when_the_gap_explains_the_excess() {
        let slow = |duration_ns, expected_ns| Slowdown {
            step: 0,
            pipeline: 0,
            stage: 1,
            phase: Phase::Fwd,
            microbatch: None,
            merged_with: None,
            duration_ns,
            expected_ns,
            added_ns: 0,
            slack_ns: 0,
            step_ns: 0,
            on_path: true,
            finding: true,
        };
        // 40 ms over: rank 2 waited 41 ms in the allreduces, rank 3 1 ms.
        let ms = 1_000_000;
        assert_eq!(held_by_tensor_waits(&slow(100 * ms, 60 * ms), vec![(41 * ms, 2), (ms, 3)]), Some(3));
        // Waits alike (the whole stage slow), or a gap that explains little of the excess.
        assert_eq!(held_by_tensor_waits(&slow(100 * ms, 60 * ms), vec![(2 * ms, 2), (ms, 3)]), None);
        assert_eq!(held_by_tensor_waits(&slow(100 * ms, 60 * ms), vec![(19 * ms, 2), (ms, 3)]), None);
        // One member, or no excess.
        assert_eq!(held_by_tensor_waits(&slow(100 * ms, 60 * ms), vec![(ms, 3)]), None);
        assert_eq!(held_by_tensor_waits(&slow(60 * ms, 60 * ms), vec![(41 * ms, 2), (ms, 3)]), None);
    }
}
