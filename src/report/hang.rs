//! `sf hang`: which rank holds a job up, in which collective, since when, from the rank
//! logs alone: while every rank is wedged, or after they died.
//!
//! A thin adapter around `analysis::hang`. It reads every log's records first; then the
//! clock, once; then every log's heartbeat and live table. Everything a log says after the
//! clock was read can only make a wait or a silence look shorter than it is, so a reader
//! descheduled halfway (a loaded host) may miss a hang for a moment but never invents one.
//! The report keeps the verdict's words and adds what an operator wants next to it:
//! heartbeats, steps and stages, injections, watchdog evidence.

use crate::analysis::blame::waits_from::{waits_from, Evidence, WaitsFrom};
use crate::analysis::hang::device::{
    device_stall, device_threshold_ns, device_waits, DeviceStall, DeviceView, DeviceWait, Unfinished,
};
use crate::analysis::hang::device_chain::{device_chain, DeviceChain};
use crate::analysis::hang::kernel_ch::{kernel_ch_stall, KernelChStall, KernelChView};
use crate::analysis::hang::progress::RankProgress;
use crate::analysis::hang::{
    self, CommVerdict, Diagnosis, Member, Mismatch, PostMortem, RankInput, RankVerdict, Settings, State, StuckQp,
};
use crate::analysis::log::ends::{first_end, FirstEnd, RankEnd};
use crate::analysis::log::heartbeat::heartbeat_age_ns;
use crate::analysis::log::liveness::{classify, with_end, Liveness};
use crate::core::log::host as local_host;
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::reader::RankLog;
use crate::core::log::records::{hex_u64, CommOrigin, DeviceState, HangEvidence, Injection, ProcessEnd, StepVector};
use crate::core::net::profiler::func_name;
use crate::core::record::clock::monotonic_ns;
use serde::{Serialize, Serializer};

use super::hang_profiler::{self, ProfilerCallReport};
use super::ls::FileError;
use super::stacks::RankStacks;
use super::Failure;
use crate::report::discover::{self, Dirs};
use crate::report::moment::{self, Judged};
use crate::report::parallel;
use crate::report::read_budget::RECORDS;

mod comms;
mod device;
mod evidence;
mod extra;
mod microbatch;
mod stacks;
use comms::comm_report;
use device::{
    device_stall_report, device_view, kernel_ch_view, overruling_chain, place_members, profiler_stall, unsettled_names,
    DeviceParts,
};
pub use device::{DeviceChainReport, DeviceStallReport, DeviceWaitReport, ProfilerStallReport};
use evidence::{mark_culprits, progress_verdict};
pub use evidence::{HangEvidenceUsed, ProgressStallReport};
pub use microbatch::TransferPass;
use microbatch::{pipeline_history, PipelineHistory};
pub use stacks::{HangStacks, StackAnswer, StackGroup};

/// How `sf hang` decides a wait is stuck: `max(min_stuck_s, factor x step time)`, or
/// `max(min_stuck_s, fallback_stuck_s)` while the logs hold too few steps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HangOptions {
    pub factor: f64,
    pub min_stuck_s: f64,
    pub fallback_stuck_s: f64,
}

/// The parser admits only finite, non-negative numbers, for which `==` is an equivalence.
impl Eq for HangOptions {}

/// `sf hang`'s defaults (its flags' defaults, checked by a test), for `sf exporter`.
pub const DEFAULT_HANG: HangOptions = HangOptions { factor: 1.5, min_stuck_s: 0.25, fallback_stuck_s: 30.0 };

pub(crate) use super::hang_history::{hang_reads, History, CALLS_KEPT};

/// How far a converted tick time may stray from `CLOCK_MONOTONIC` as the collector refines
/// the tick frequency.
const PLAUSIBLE_CLOCK_ERROR_NS: u64 = 1_000_000_000;

/// The `--json` object; its field names are a contract.
#[derive(Debug, Serialize)]
pub struct HangReport {
    pub dir: String,
    /// What the report was built from: `logs`, or `prometheus` (`--prometheus`: the
    /// exporters' metrics, so a rank without them is one no exporter reported).
    pub source: &'static str,
    /// The reader's `CLOCK_MONOTONIC` when it read the live tables.
    pub now_mono_ns: u64,
    pub hung: bool,
    pub threshold: ThresholdReport,
    /// Every live rank has been outside NCCL this long (more than the threshold).
    pub quiet_s: Option<f64>,
    pub communicators: Vec<CommReport>,
    pub ranks: Vec<RankReport>,
    pub errors: Vec<FileError>,
    /// Every rank is gone and the logs' last word was a hang: who held it up.
    pub post_mortem: Option<PostMortemReport>,
    /// Every rank is gone and the job ended badly: the rank that went first, from the
    /// ranks' own end records (`analysis::log::ends`).
    pub first_end: Option<FirstEnd>,
    /// Where the waits were read from: `device` (the devices' unfinished work), `host_calls`
    /// (NCCL calls that block until every peer arrives) or `none`; `waits_from_reason`
    /// says why.
    pub waits_from: WaitsFrom,
    pub waits_from_reason: &'static str,
    /// A rank whose device is stuck behind other work while its peers' devices wait for
    /// it in a collective every host launched (`analysis::hang::device`).
    pub device_stall: Option<DeviceStallReport>,
    /// The host at the head of a chain of device waits, where the host counts named a
    /// waiter (`analysis::hang::device_chain`): a pipeline's missing send on a GPU.
    pub device_chain: Option<DeviceChainReport>,
    /// The ranks the host counts named while every one of them waited on its device: no
    /// verdict until the device evidence says whom they wait for (empty otherwise).
    pub device_pending: Vec<i32>,
    /// With the CUDA door shut: the rank whose device never began the collective its
    /// peers' devices began and wait in, from NCCL's profiler (`hang_evidence: profiler`).
    pub profiler_stall: Option<ProfilerStallReport>,
    /// With no stall named: ranks whose hosts have waited on their devices for longer than
    /// the device threshold, longest first (what is seen, not a verdict: a one-rank job, a
    /// long kernel, a wait no peer's collective explains).
    pub device_waits: Vec<DeviceWaitReport>,
    /// No rank advanced (step or stage marker) for longer than the progress threshold,
    /// and some are behind the others (`analysis::hang::progress`): the hang of a job
    /// whose collectives no door saw, or a rank stuck outside any call.
    pub progress_stall: Option<ProgressStallReport>,
    /// The evidence the verdict came from, tried in this order: `host_calls` (NCCL calls
    /// and their live tables), `device` (the devices' unfinished work),
    /// `python_collectives` (host calls all issued from Python on gloo process groups),
    /// `progress` (step and stage markers); `none` when the job is not hung.
    pub hang_evidence: HangEvidenceUsed,
    /// The ranks' Python stacks (`stacks`, `stack_groups`, `stacks_asked`).
    #[serde(flatten)]
    pub stacks: HangStacks,
}

#[derive(Debug, Serialize)]
pub struct PostMortemReport {
    pub gone_ranks: Vec<i32>,
    pub culprit_ranks: Vec<i32>,
    #[serde(serialize_with = "opt_hex")]
    pub comm_id: Option<u64>,
    pub comm_seq: Option<u64>,
    pub op: Option<NcclOp>,
    pub waiting_ranks: Vec<i32>,
    /// What named the culprit: `hang` (a wait past the threshold in the last live
    /// tables) or `first_end` (the rank that ended first while the others still waited in
    /// a call: a teardown too quick for any wait to pass the threshold).
    pub named_by: &'static str,
}

/// A queue pair whose work request never completed, in a collective that cannot.
#[derive(Debug, Serialize)]
pub struct StuckQpReport {
    pub rank: i32,
    pub source: &'static str,
    pub device: i32,
    pub qp_num: u32,
    pub in_flight: u32,
    pub stuck_s: f64,
}

#[derive(Debug, Serialize)]
pub struct ThresholdReport {
    pub threshold_s: f64,
    /// What a device stall is judged by: `threshold_s`, raised to how far the logs'
    /// device evidence trails the device (CUPTI's buffers are read every
    /// `SF_CUPTI_FLUSH_MS`); absent without device states.
    pub device_threshold_s: Option<f64>,
    /// `cadence` (factor x step time), `fallback` (too few steps in the logs) or, with
    /// `--prometheus`, `exporters` (the largest threshold the exporters computed).
    pub source: &'static str,
    pub step_s: Option<f64>,
    /// The longest call and the longest gap between calls in the recent history.
    pub longest_call_s: Option<f64>,
    pub longest_gap_s: Option<f64>,
    /// Collectives per step on the communicator the cadence was measured on.
    pub period: Option<usize>,
    #[serde(serialize_with = "opt_hex")]
    pub cadence_comm_id: Option<u64>,
    /// Step durations measured, one per starting collective of each sampled rank.
    pub step_samples: Option<usize>,
    pub factor: f64,
    pub min_stuck_s: f64,
    pub fallback_stuck_s: f64,
    /// What a stall of progress is judged by: `max(min_stuck_s, factor x the longest
    /// recent step)` from the ranks' step markers, or the fallback with fewer than 3 steps
    /// measured (the first two of the job left out); absent without markers.
    pub progress_threshold_s: Option<f64>,
    pub progress_longest_step_s: Option<f64>,
    pub progress_steps_measured: Option<usize>,
}

#[derive(Debug, Serialize)]
pub struct CommReport {
    #[serde(serialize_with = "hex_u64")]
    pub comm_id: u64,
    pub nranks: i32,
    pub stuck_seq: Option<u64>,
    pub stuck_op: Option<NcclOp>,
    pub stuck_p2p: bool,
    pub stuck_s: Option<f64>,
    pub missing_ranks: Vec<i32>,
    pub waiting_ranks: Vec<i32>,
    pub dead_ranks: Vec<i32>,
    pub wedged_ranks: Vec<i32>,
    pub slow_ranks: Vec<i32>,
    pub stalled_ranks: Vec<i32>,
    pub exited_ranks: Vec<i32>,
    pub disabled_ranks: Vec<i32>,
    pub no_log_comm_ranks: Vec<i32>,
    pub mismatches: Vec<Mismatch>,
    pub mismatches_total: usize,
    /// Members whose RDMA queue pair holds the collective up (`stuck_qp` ranks).
    pub stuck_qps: Vec<StuckQpReport>,
    pub members: Vec<MemberReport>,
}

#[derive(Debug, Serialize)]
pub struct MemberReport {
    pub rank: i32,
    pub comm_rank: i32,
    pub coll_entered: u64,
    pub coll_returned: u64,
    pub p2p_entered: u64,
    pub p2p_returned: u64,
    pub in_flight: Option<MemberCallReport>,
}

#[derive(Debug, Serialize)]
pub struct MemberCallReport {
    pub op: Option<NcclOp>,
    pub comm_seq: u64,
    pub age_s: f64,
    pub grouped: bool,
}

#[derive(Debug, Serialize)]
pub struct RankReport {
    pub rank: i32,
    pub state: State,
    pub role: State,
    pub stage: Option<String>,
    pub step: Option<u64>,
    pub stuck_s: Option<f64>,
    #[serde(serialize_with = "opt_hex")]
    pub comm_id: Option<u64>,
    pub comm_seq: Option<u64>,
    pub op: Option<NcclOp>,
    pub in_flight: bool,
    pub grouped: bool,
    /// The send/recv it waits in: its pipeline pass (`microbatch`, `phase`).
    #[serde(flatten)]
    pub transfer: TransferPass,
    pub waiting_for: Vec<i32>,
    pub liveness: Liveness,
    pub heartbeat_age_s: Option<f64>,
    pub silent_s: Option<f64>,
    /// Since its newest step or stage marker (as of its last heartbeat when gone); null
    /// without markers.
    pub idle_s: Option<f64>,
    pub host: String,
    pub pid: u32,
    pub file: String,
    pub injections: Vec<InjectionReport>,
    pub hang_evidence: Vec<HangEvidence>,
    /// For a snapshot's copy, when `sf snapshot` took it (RFC 3339 UTC): its liveness,
    /// heartbeat age and stuck times are judged at that moment.
    pub snapshot_wall: Option<String>,
    /// What NCCL's profiler saw of the call the rank is inside (`hang_profiler`); None
    /// without profiler records or outside a call.
    pub profiler: Option<ProfilerCallReport>,
}

/// An `injection` record, with its stage named.
#[derive(Debug, Serialize)]
pub struct InjectionReport {
    #[serde(flatten)]
    pub record: Injection,
    pub stage_name: Option<String>,
}

impl HangReport {
    /// Some collective's ranks disagree on what it is (`sf hang` exits 5).
    pub fn mismatched(&self) -> bool {
        self.communicators.iter().any(|c| c.mismatches_total > 0)
    }
}

fn opt_hex<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => hex_u64(v, s),
        None => s.serialize_none(),
    }
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// What the adapter keeps of one log besides the analysis input.
pub(crate) struct Extra {
    host: String,
    pid: u32,
    file: String,
    step: Option<u64>,
    liveness: Liveness,
    heartbeat_age_ns: Option<u64>,
    injections: Vec<InjectionReport>,
    hang_evidence: Vec<HangEvidence>,
    snapshot_wall: Option<String>,
    profiler: Vec<ProfilerCallReport>,
    /// How the process ended, and when it was last heard (wall-clock ns).
    end: Option<ProcessEnd>,
    last_heard_wall_ns: u64,
    /// The device's view (`device_state`; none seen: nothing unfinished shown).
    device: Option<DeviceView>,
    /// What the profiler door says of the device (its KernelCh words).
    kernel_ch: KernelChView,
    /// What the records show of the waits (`analysis::blame::waits_from`).
    evidence: Evidence,
    /// Where its step and stage markers put it, and since when.
    progress: Option<RankProgress>,
    /// Its communicators that are `torch.distributed` process groups (the Python door's).
    process_groups: Vec<u64>,
    /// Its newest Python stacks.
    stacks: Option<RankStacks>,
    /// Its calls and previous step's sends and receives, for `microbatch`.
    pipeline: Option<PipelineHistory>,
}

pub use super::hang_prometheus::build as from_prometheus;

pub fn build(dir: &Dirs, options: &HangOptions) -> Result<HangReport, Failure> {
    let files = discover::job_logs(dir, "hang").map_err(Failure::Message)?;
    let reader_host = local_host::name();
    let mut errors = Vec::new();
    // Records first: the long part. The logs stay open for their live state below.
    parallel::allow_open_files(files.len());
    let mut logs = Vec::with_capacity(files.len());
    let budget = RECORDS.per_log(RECORDS.total()?, files.len());
    let read = parallel::read_all(&files, |file| RankLog::open(&file.path).map(|log| (History::of(&log, budget), log)));
    for (file, read) in files.into_iter().zip(read) {
        match read {
            Ok((history, log)) => logs.push((log, history, file.taken)),
            Err(e) => errors.push(FileError { file: file.path.display().to_string(), error: e.to_string() }),
        }
    }
    // By rank, as `sf ls` lists them (file names sort wrongly past 99999), unranked last.
    logs.sort_by_key(|(log, ..)| (log.header.global_rank < 0, log.header.global_rank, log.path().to_path_buf()));
    let now_mono_ns = monotonic_ns();
    let (inputs, mut extras): (Vec<RankInput>, Vec<Extra>) = logs
        .into_iter()
        .map(|(log, history, taken)| {
            // A live log is judged at the clock read once, here, after every record; a
            // snapshot's copy at the moment it was taken.
            let at = moment::judge(&log.header, taken.as_ref(), &reader_host);
            read_live(&log, history, at, taken.map(|t| crate::report::wall::rfc3339_ms(t.wall_ns)))
        })
        .unzip();
    let settings = Settings {
        factor: options.factor,
        min_stuck_ns: (options.min_stuck_s * 1e9) as u64,
        fallback_stuck_ns: (options.fallback_stuck_s * 1e9) as u64,
    };
    hang_profiler::rename(extras.iter_mut().map(|e| &mut e.profiler), &inputs);
    let diagnosis = hang::diagnose(&inputs, &settings);
    Ok(report(dir, now_mono_ns, diagnosis, extras, errors))
}

pub(crate) fn read_live(
    log: &RankLog,
    mut history: History,
    at: Judged,
    snapshot_wall: Option<String>,
) -> (RankInput, Extra) {
    let h = &log.header;
    let live = log.live();
    let mut comms = log.comms();
    // No call enters before the library calibrated its clock: an enter time before that
    // is a tick value the reader cannot map (it would pass for a wait since boot).
    let calibrated = h.base_mono_ns.saturating_sub(PLAUSIBLE_CLOCK_ERROR_NS);
    for row in &mut comms {
        row.inflight = row.inflight.take().filter(|f| f.since_mono_ns >= calibrated);
    }
    let (step, stage) = log.position();
    let device_parts: DeviceParts = (
        history.device_state,
        std::mem::take(&mut history.kernel_names),
        std::mem::take(&mut history.newest_step),
        history.device_records,
        history.evidence_lag_ns(),
    );
    let (here, now, process) = (at.same_clock, at.clock, at.process);
    let age_ns = heartbeat_age_ns(here, live.heartbeat_mono_ns, live.heartbeat_wall_ns, now);
    let stage_names = log.stage_names();
    // Until its collector first beats, a log is as fresh as its creation: a rank starting
    // up must not pass for a stopped one.
    let since_created = || heartbeat_age_ns(here, h.base_mono_ns, h.base_wall_ns, now);
    // A rank whose exit was recorded exited, though its collector's last round missed
    // its bound: its tables may lag its last calls (`with_end`).
    let liveness = with_end(
        classify(live.writer_state, age_ns.or_else(since_created).unwrap_or(u64::MAX), process),
        live.end.map(|end| end.how),
    );
    // On this host the clock read before the table; elsewhere what the wall clock says.
    let rank_now = if here { Some(now.mono_ns) } else { age_ns.map(|age| live.heartbeat_mono_ns.saturating_add(age)) };
    let input = RankInput {
        rank: h.global_rank,
        liveness,
        now_ns: rank_now,
        heartbeat_age_ns: age_ns,
        heartbeat_mono_ns: live.heartbeat_mono_ns,
        drained_ns: history.drained_ns,
        comms,
        created: history.created,
        calls: history.calls,
        history_complete: history.complete,
        // A record committed while the scan passed its slot counts too.
        records_stale: live.committed > history.newest_seq,
        newest_drop_ns: history.newest_drop_ns,
        stage,
        stuck_qps: {
            // A rank that is gone stopped its clock at its last heartbeat.
            let now_ns = rank_now.filter(|_| liveness == Liveness::Live).unwrap_or(live.heartbeat_mono_ns);
            history
                .stuck_qps
                .iter()
                .map(|q| StuckQp {
                    rank: h.global_rank,
                    source: q.source.name(),
                    device: q.device,
                    qp_num: q.qp_num,
                    since_ns: q.since_ns,
                    in_flight: q.in_flight,
                    stuck_ns: now_ns.saturating_sub(q.since_ns),
                })
                .collect()
        },
    };
    // A rank that is gone stopped advancing at its last heartbeat at the latest.
    let as_of_ns = rank_now.filter(|_| liveness == Liveness::Live).unwrap_or(live.heartbeat_mono_ns);
    let progress = RankProgress {
        rank: h.global_rank,
        step,
        stage: input.stage.clone(),
        idle_ns: log.progress_mono_ns().filter(|&t| t >= calibrated).map(|t| as_of_ns.saturating_sub(t)),
        recent_steps: std::mem::take(&mut history.recent_steps).into(),
    };
    let process_groups =
        input.created.iter().filter(|c| c.origin == CommOrigin::ProcessGroup).map(|c| c.comm_id).collect();
    let device = device_view(&device_parts, &input, &stage_names);
    let evidence = Evidence::of_nccl_calls(device_parts.3, input.calls.iter());
    let extra = Extra {
        pipeline: Some(pipeline_history(&input, h.world_size, &device_parts.2)),
        stacks: history.stacks.newest(h.global_rank, log.progress_mono_ns()),
        device,
        kernel_ch: kernel_ch_view(log, as_of_ns, calibrated),
        evidence,
        progress: Some(progress),
        process_groups,
        host: h.host.clone(),
        pid: h.pid,
        file: log.path().display().to_string(),
        step,
        liveness,
        heartbeat_age_ns: age_ns,
        injections: history
            .injections
            .into_iter()
            .map(|record| InjectionReport {
                stage_name: record.stage.and_then(|id| stage_names.get(id as usize).cloned().flatten()),
                record,
            })
            .collect(),
        hang_evidence: history.hang_evidence,
        snapshot_wall,
        profiler: hang_profiler::reports(history.profiler, rank_now),
        end: live.end,
        last_heard_wall_ns: live.heartbeat_wall_ns.max(h.base_wall_ns),
    };
    (input, extra)
}

pub(crate) fn report(
    dir: &Dirs,
    now_mono_ns: u64,
    d: Diagnosis,
    mut extras: Vec<Extra>,
    errors: Vec<FileError>,
) -> HangReport {
    let (waits_from, why) = waits_from(&Evidence::of_job(extras.iter().map(|e| &e.evidence)));
    let mut views: Vec<DeviceView> = extras.iter_mut().filter_map(|e| e.device.take()).collect();
    place_members(&mut views, &d.communicators);
    let stall = device_stall(&views, d.threshold.threshold_ns);
    let chain = stall.is_none().then(|| device_chain(&views, d.threshold.threshold_ns)).flatten();
    let waits = if stall.is_none() { device_waits(&views, d.threshold.threshold_ns) } else { Vec::new() };
    // Through NCCL's profiler, only where no device state was seen.
    let device_seen = views.iter().any(|v| v.changed_ns > 0);
    let profiler_stall = (!device_seen).then(|| profiler_stall(&extras, d.threshold.threshold_ns)).flatten();
    let device_threshold_s = device_seen.then(|| seconds(device_threshold_ns(&views, d.threshold.threshold_ns)));
    let t = &d.threshold;
    let process_groups: Vec<u64> = extras.iter().flat_map(|e| e.process_groups.iter().copied()).collect();
    let ends: Vec<RankEnd> = d
        .ranks
        .iter()
        .zip(&extras)
        .filter(|(v, _)| v.rank >= 0)
        .map(|(v, e)| RankEnd::of(v.rank, e.liveness, e.end, e.last_heard_wall_ns, 0))
        .collect();
    let first_end = first_end(&ends);
    let marked: Vec<RankProgress> = extras.iter().filter_map(|e| e.progress.clone()).collect();
    let rank_stacks: Vec<RankStacks> = extras.iter_mut().filter_map(|e| e.stacks.take()).collect();
    let pipelines: Vec<PipelineHistory> = extras.iter_mut().filter_map(|e| e.pipeline.take()).collect();
    let mut ranks: Vec<RankReport> = d.ranks.into_iter().zip(extras).map(|(v, extra)| rank_report(v, extra)).collect();
    let post_mortem = d
        .post_mortem
        .map(post_mortem_report)
        .or_else(|| first_end.as_ref().and_then(|first| torn_down_while_waiting(first, &ranks)));
    let stuck_in_python =
        d.communicators.iter().filter(|c| c.stuck_ns.is_some()).all(|c| process_groups.contains(&c.comm_id));
    let named = stacks::culprits(&ranks, post_mortem.as_ref());
    let mut device_chain = overruling_chain(chain, &mut ranks, &named);
    microbatch::place(pipelines, &mut ranks, device_chain.as_mut());
    let unsettled = device_chain.is_none() && stall.is_none() && post_mortem.is_none() && d.hung;
    let device_pending = if unsettled { unsettled_names(&mut ranks, &named, &views) } else { Vec::new() };
    let hang_evidence = if device_chain.is_some() {
        HangEvidenceUsed::Device
    } else if !device_pending.is_empty() {
        HangEvidenceUsed::None
    } else if (d.hung || post_mortem.is_some()) && stuck_in_python && !process_groups.is_empty() {
        HangEvidenceUsed::PythonCollectives
    } else if d.hung || post_mortem.is_some() {
        HangEvidenceUsed::HostCalls
    } else if stall.is_some() {
        HangEvidenceUsed::Device
    } else if profiler_stall.is_some() {
        HangEvidenceUsed::Profiler
    } else {
        HangEvidenceUsed::None
    };
    let judge_progress = hang_evidence == HangEvidenceUsed::None && device_pending.is_empty();
    let (progress_threshold, progress_stall) = progress_verdict(&marked, t, judge_progress);
    let hang_evidence = if progress_stall.is_some() { HangEvidenceUsed::Progress } else { hang_evidence };
    if let Some(s) = &progress_stall {
        mark_culprits(&mut ranks, &s.behind_ranks, State::Behind);
    }
    if let Some(s) = &stall {
        mark_culprits(&mut ranks, &[s.rank], State::StuckKernel);
    }
    let profiler_stall = profiler_stall.filter(|_| hang_evidence == HangEvidenceUsed::Profiler);
    if let Some(s) = &profiler_stall {
        mark_culprits(&mut ranks, &[s.rank], State::StuckKernel);
    }
    let culprits = stacks::culprits(&ranks, post_mortem.as_ref());
    let stack_groups = stacks::groups(&rank_stacks, &culprits);
    HangReport {
        stacks: HangStacks { stacks: rank_stacks, stack_groups, stacks_asked: None },
        waits_from,
        waits_from_reason: why.describe(),
        device_stall: stall.clone().map(device_stall_report),
        device_chain,
        device_pending,
        device_waits: waits.into_iter().map(DeviceWaitReport::from).collect(),
        profiler_stall: profiler_stall.map(ProfilerStallReport::from),
        progress_stall: progress_stall.map(ProgressStallReport::from),
        hang_evidence,
        dir: dir.display().to_string(),
        source: "logs",
        now_mono_ns,
        hung: hang_evidence != HangEvidenceUsed::None,
        threshold: ThresholdReport {
            threshold_s: seconds(t.threshold_ns),
            device_threshold_s,
            source: if t.cadence.is_some() { "cadence" } else { "fallback" },
            step_s: t.cadence.map(|c| seconds(c.step_ns)),
            longest_call_s: t.cadence.map(|c| seconds(c.longest_call_ns)),
            longest_gap_s: t.cadence.map(|c| seconds(c.longest_gap_ns)),
            period: t.cadence.map(|c| c.period),
            cadence_comm_id: t.cadence.map(|c| c.comm_id),
            step_samples: t.cadence.map(|c| c.samples),
            factor: t.factor,
            min_stuck_s: seconds(t.min_stuck_ns),
            fallback_stuck_s: seconds(t.fallback_stuck_ns),
            progress_threshold_s: progress_threshold.map(|p| seconds(p.threshold_ns)),
            progress_longest_step_s: progress_threshold.and_then(|p| p.longest_step_ns).map(seconds),
            progress_steps_measured: progress_threshold.map(|p| p.steps_measured),
        },
        quiet_s: d.quiet_ns.map(seconds),
        communicators: d.communicators.into_iter().map(comm_report).collect(),
        ranks,
        errors,
        post_mortem,
        first_end,
    }
}

/// A job torn down faster than any wait could pass the threshold, while the other ranks
/// were still inside a call the first one would never join: that is the hang it died in,
/// and the rank that went first held it up. None when no other rank was inside a call
/// (a rank died, nothing waited for it).
fn torn_down_while_waiting(first: &FirstEnd, ranks: &[RankReport]) -> Option<PostMortemReport> {
    let waiting: Vec<&RankReport> = ranks.iter().filter(|r| r.rank != first.rank && r.in_flight).collect();
    let at = waiting.first()?;
    Some(PostMortemReport {
        gone_ranks: ranks.iter().map(|r| r.rank).collect(),
        culprit_ranks: vec![first.rank],
        comm_id: at.comm_id,
        comm_seq: at.comm_seq,
        op: at.op,
        waiting_ranks: waiting.iter().map(|r| r.rank).collect(),
        named_by: "first_end",
    })
}

fn post_mortem_report(p: PostMortem) -> PostMortemReport {
    PostMortemReport {
        gone_ranks: p.gone_ranks,
        culprit_ranks: p.culprit_ranks,
        comm_id: p.at.map(|at| at.comm_id),
        comm_seq: p.at.and_then(|at| at.comm_seq),
        op: p.at.and_then(|at| at.op),
        waiting_ranks: p.waiting_ranks,
        named_by: "hang",
    }
}

fn rank_report(v: RankVerdict, extra: Extra) -> RankReport {
    RankReport {
        rank: v.rank,
        state: v.state,
        role: v.role,
        stage: v.stage,
        step: extra.step,
        stuck_s: v.stuck_ns.map(seconds),
        comm_id: v.at.map(|at| at.comm_id),
        comm_seq: v.at.and_then(|at| at.comm_seq),
        op: v.at.and_then(|at| at.op),
        in_flight: v.at.is_some_and(|at| at.in_flight),
        grouped: v.at.is_some_and(|at| at.grouped),
        transfer: TransferPass::default(),
        waiting_for: v.waiting_for,
        liveness: extra.liveness,
        heartbeat_age_s: extra.heartbeat_age_ns.map(seconds),
        silent_s: v.silent_ns.map(seconds),
        idle_s: extra.progress.as_ref().and_then(|p| p.idle_ns).map(seconds),
        host: extra.host,
        pid: extra.pid,
        file: extra.file,
        injections: extra.injections,
        hang_evidence: extra.hang_evidence,
        snapshot_wall: extra.snapshot_wall,
        profiler: hang_profiler::of_call(&extra.profiler, v.at.as_ref()),
    }
}
