//! The rank logs' `step_vector` records (and the CUDA door's `stage_device` records of the
//! same steps), per rank for `sf slow` and as a stage-duration table for `sf frontier`.

use std::collections::{BTreeMap, HashMap};

use crate::analysis::blame::device::DeviceKernel;
use crate::analysis::blame::waits_from::{blocks_a_host, call_share, timing};
use crate::analysis::blame::CallTiming;
use crate::analysis::comms::grow;
use crate::analysis::frontier::csv::{self, StageTable};
use crate::analysis::frontier::DeviceTime;
use crate::analysis::log::clocks::RankClock;
use crate::core::log::format::Region;
use crate::core::log::reader::RankLog;
use crate::core::log::records::{CommCreated, RecordBody, StepVector};
use crate::core::record::doors::{no_markers_note, Doors};

use super::call_window::{CallWindow, HeldCalls};
use super::steps::seconds;
use super::waits::{clock_of, collective_key};
use super::Failure;
use crate::report::discover;
use crate::report::discover::Dirs;
use crate::report::parallel;
use crate::report::read_budget;
use crate::report::wall::WallClock;

/// The job's stage names, each held once: a step's stages carry an index into it, not a
/// name of their own (a 4096-rank job of 1,000 steps holds millions of stage values).
#[derive(Default)]
pub struct StageNames {
    names: Vec<String>,
    ids: HashMap<String, u32>,
}

impl StageNames {
    /// The id of `name`, a new one the first time it is seen.
    pub fn id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), self.names.len() as u32 - 1);
        self.names.len() as u32 - 1
    }

    pub fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    /// Every name, by id.
    pub fn all(&self) -> &[String] {
        &self.names
    }
}

/// One complete step of one rank: wall and overlap time, and its stages by name id.
pub struct RankStep {
    pub step: u64,
    /// `CLOCK_MONOTONIC` of the rank's host when the step began.
    pub t_begin_ns: u64,
    pub wall_ns: u64,
    pub overlap_ns: u64,
    /// (stage name id, ns), in the vector's order.
    pub stages: Vec<(u32, u64)>,
    /// (stage name id, device ns, spill ns) when the CUDA door sampled the step; else empty.
    pub device: Vec<(u32, u64, u64)>,
}

/// One rank log's identity and complete steps, in step order.
pub struct RankSteps {
    pub rank: u32,
    pub local_rank: i32,
    pub host: String,
    pub clock: WallClock,
    /// Which doors were open (`None`: a log of an older library).
    pub doors: Option<Doors>,
    pub steps: Vec<RankStep>,
    /// Records the log's step history lost to wraparound: its steps begin after the job's.
    pub history_wrapped: u64,
    /// Its newest completed NCCL calls within the budget, in enter order, for the wait
    /// attribution (`waits::timelines` takes them), and what the budget left of them.
    pub calls: Vec<CallTiming>,
    pub held: HeldCalls,
    /// The share of its time inside the calls that block a host-blocking job, among the
    /// same records (`analysis::blame::waits_from::call_share`).
    pub call_share: f64,
    /// Its completed NCCL kernels linked to their calls, and its completed host
    /// synchronizations (enter, exit), among the same records: the device's waits.
    pub kernels: Vec<DeviceKernel>,
    pub syncs: Vec<(u64, u64)>,
    /// Its grown-communicator aliases (`analysis::comms::grow`), a second log's of the
    /// same rank's too (they name, not time).
    pub aliases: Vec<CommCreated>,
    /// Its clock readings, to put several hosts' times on one timeline.
    pub readings: RankClock,
}

/// Every ranked log in `dir` (ascending rank), the world size the headers record, the
/// stage names the steps' ids index, and the window of steps the calls cover when the call
/// budget (`call_window`) left some unread (its steps not yet dropped: the attribution
/// reads the ones just before it). A step is complete when all its parts are held (a
/// wrapped-away part drops the step for that rank). Unranked logs and a second log
/// claiming a rank are skipped (sf ls warns). `command` names the sf command in the hint
/// when `dir` holds job directories instead. Each log is read once, on every core.
pub fn read_ranks(dir: &Dirs, command: &str) -> Result<JobSteps, Failure> {
    let logs = discover::job_log_paths(dir, command).map_err(Failure::Message)?;
    let budget = read_budget::CALLS.total()?;
    let keep = read_budget::CALLS.per_log(budget, logs.len());
    let mut world = 0;
    let mut ranks: Vec<RankSteps> = Vec::new();
    let mut names = StageNames::default();
    let read = parallel::read_all(&logs, |path| {
        let log = RankLog::open(path).map_err(|e| Failure::Message(e.to_string()))?;
        Ok::<_, Failure>(rank_steps(&log, keep))
    });
    for read in read {
        let Some((mut steps, header_world, log_names)) = read? else { continue };
        if let Some(first) = ranks.iter_mut().find(|r| r.rank == steps.rank) {
            first.aliases.append(&mut steps.aliases);
            continue;
        }
        // The log's own ids (its stage-name table) become the job's.
        let mut job_id: HashMap<u32, u32> = HashMap::new();
        let mut to_job = |id: &mut u32| {
            *id = *job_id.entry(*id).or_insert_with(|| {
                let name = log_names.get(*id as usize).cloned().flatten();
                names.id(&name.unwrap_or_else(|| format!("stage#{id}")))
            })
        };
        for s in &mut steps.steps {
            s.stages.iter_mut().for_each(|(id, _)| to_job(id));
            s.device.iter_mut().for_each(|(id, ..)| to_job(id));
        }
        world = world.max(header_world);
        ranks.push(steps);
    }
    ranks.sort_by_key(|r| r.rank);
    let window = CallWindow::of(&ranks, budget, logs.len())?;
    let waits_start_at = window.is_none().then(|| super::call_window::waits_start_at(&ranks)).flatten();
    Ok(JobSteps { ranks, world: world as usize, names, window, waits_start_at })
}

/// What `read_ranks` read of a job.
pub struct JobSteps {
    pub ranks: Vec<RankSteps>,
    pub world: usize,
    pub names: StageNames,
    pub window: Option<CallWindow>,
    /// The first step whose waits are known, when the event ring wrapped past older steps
    /// held (`call_window::waits_start_at`).
    pub waits_start_at: Option<u64>,
}

/// One log's identity, complete steps (stage ids of the log's own table) and newest `keep`
/// event records' calls, the world its header records and its stage-name table; `None`
/// for an unranked log.
fn rank_steps(log: &RankLog, keep: u64) -> Option<(RankSteps, i32, Vec<Option<String>>)> {
    let rank = log.header.global_rank;
    if rank < 0 {
        return None;
    }
    let world = log.header.world_size.max(rank + 1);
    let History { steps: vectors, mut device, wrapped: history_wrapped, aliases } = complete_steps(log);
    let Newest { calls, held, call_share, kernels, syncs } = newest_calls(log, keep);
    let steps = vectors
        .into_iter()
        // Budgeted: a step over before the oldest call read ended is no window's, nor the
        // lead-in of one (`call_window`).
        .filter(|(_, parts)| held.not_read == 0 || held.from_ns.is_none_or(|t| step_end(parts) > t))
        .map(|(step, parts)| RankStep {
            step,
            t_begin_ns: parts[0].t_begin_ns,
            wall_ns: parts[0].wall_ns,
            overlap_ns: parts[0].overlap_ns,
            stages: parts.iter().flat_map(|p| p.stages()).map(|(id, ns)| (u32::from(id), ns)).collect(),
            device: device
                .remove(&step)
                .unwrap_or_default()
                .into_iter()
                .map(|(id, d, s)| (u32::from(id), d, s))
                .collect(),
        })
        .collect();
    let header = &log.header;
    let steps = RankSteps {
        rank: rank as u32,
        local_rank: header.local_rank,
        host: header.host.clone(),
        clock: WallClock::of(header),
        doors: log.live().doors,
        steps,
        history_wrapped,
        calls,
        held,
        call_share,
        kernels,
        syncs,
        aliases,
        readings: clock_of(log),
    };
    Some((steps, world, log.stage_names()))
}

/// When a step's stages end: its begin plus its stages, as the spans lay them out.
fn step_end(parts: &[StepVector]) -> u64 {
    parts.iter().flat_map(|p| p.stages()).fold(parts[0].t_begin_ns, |t, (_, ns)| t.saturating_add(ns))
}

/// What the newest records of a log's event ring hold for the wait attribution.
struct Newest {
    calls: Vec<CallTiming>,
    held: HeldCalls,
    call_share: f64,
    kernels: Vec<DeviceKernel>,
    syncs: Vec<(u64, u64)>,
}

/// The completed NCCL calls among the newest `keep` records of the log's event ring, in
/// enter order (collectives with their (communicator, sequence) key), and what was left;
/// with the NCCL kernels and host synchronizations among them.
fn newest_calls(log: &RankLog, keep: u64) -> Newest {
    let mut calls = Vec::new();
    let mut blocking = Vec::new();
    let mut kernels = Vec::new();
    let mut syncs = Vec::new();
    let mut oldest_exit = None;
    let stats = log.scan_newest(Region::Events, keep, |record| match record.body {
        RecordBody::NcclCall(c) if c.t_exit_ns >= c.t_enter_ns => {
            // Records come oldest first: the first call is the oldest held.
            oldest_exit.get_or_insert(c.t_exit_ns);
            calls.push(CallTiming::new(collective_key(&c), c.t_enter_ns, c.t_exit_ns));
            if blocks_a_host(&c) {
                blocking.push(timing(&c));
            }
        }
        // A kernel only the profiler saw has no launch: it cannot say whose host was late.
        RecordBody::DeviceColl(k) if k.t_launch_ns > 0 && k.seq > 0 && k.t_end_ns >= k.t_start_ns => {
            kernels.push(DeviceKernel {
                key: (k.comm_id, k.seq),
                launch_ns: k.t_launch_ns,
                start_ns: k.t_start_ns,
                end_ns: k.t_end_ns,
            })
        }
        RecordBody::HostSync(h) if h.t_exit_ns >= h.t_enter_ns => syncs.push((h.t_enter_ns, h.t_exit_ns)),
        _ => {}
    });
    calls.sort_by_key(|c| c.enter_ns);
    // Held until every rank's are in: no room to spare.
    calls.shrink_to_fit();
    let gone = stats.not_read > 0 || stats.lost_to_wrap > 0;
    let held = HeldCalls { not_read: stats.not_read, read: stats.valid, from_ns: oldest_exit.filter(|_| gone) };
    Newest { calls, held, call_share: call_share(&blocking), kernels, syncs }
}

/// The complete steps of `ranks` (read from `dir`), as a frontier table. The world is the
/// largest world size the headers record.
pub fn table_of(dir: &Dirs, ranks: &[RankSteps], world: usize, names: &StageNames) -> Result<StageTable, Failure> {
    let fail = |message: String| Failure::Message(format!("{}: {message}", dir.display()));
    let mut durations = Vec::new();
    let mut overlaps = Vec::new();
    let mut devices = Vec::new();
    for r in ranks {
        for s in &r.steps {
            overlaps.push((s.step, r.rank, seconds(s.overlap_ns)));
            devices.extend(s.device.iter().map(|&(id, device_ns, spill_ns)| {
                let time = DeviceTime { device_s: seconds(device_ns), spill_s: seconds(spill_ns) };
                (s.step, r.rank, id, time)
            }));
            durations.extend(s.stages.iter().map(|&(id, ns)| (s.step, r.rank, id, seconds(ns))));
        }
    }
    if durations.is_empty() {
        return Err(fail(no_step_vectors(ranks)));
    }
    durations.sort_by_key(|d| (d.0, d.1));
    csv::from_stage_ids((0..world as u32).collect(), names.all(), durations, overlaps, devices)
        .map_err(|e| fail(e.to_string()))
}

/// What to say when a job's logs hold no stage vectors: what the job needs, and, when no
/// rank used the C API markers, why NVTX ranges were not seen (the variable not set).
pub fn no_step_vectors(ranks: &[RankSteps]) -> String {
    let mut message =
        "the logs hold no step vectors; the job needs step and stage markers (C API, NVTX ranges or Python's stagefrontier)"
            .to_string();
    if let Some(note) = no_markers_note(ranks.iter().filter_map(|r| r.doors.as_ref())) {
        message += &format!("; {note}");
    }
    message
}

/// The first step every rank still holds when some rank's step history wrapped: the
/// analyses' window starts there, after the job did. `None` when nothing wrapped.
pub fn history_starts_at(ranks: &[RankSteps]) -> Option<u64> {
    let wrapped = ranks.iter().filter(|r| r.history_wrapped > 0);
    wrapped.map(|r| r.steps.first().map_or(0, |s| s.step)).max()
}

/// The note for a window that starts after the job did.
pub fn history_note(first_step: u64) -> String {
    format!(
        "note: the logs' step history starts at step {first_step}: older steps wrapped out of the history ring \
         (set SF_LOG_RECORDS higher to keep more)"
    )
}

/// Per step, (stage id, device ns, spill ns) of every `stage_device` part held.
type DeviceByStep = BTreeMap<u64, Vec<(u16, u64, u64)>>;

/// What a log's history ring holds for the step analyses.
pub(super) struct History {
    /// Steps whose parts are all held, parts in order.
    pub steps: BTreeMap<u64, Vec<StepVector>>,
    /// The device time of the steps the CUDA door sampled (a lost `stage_device` part
    /// loses only its stages).
    pub device: DeviceByStep,
    /// Records of the step history that wrapped away.
    pub wrapped: u64,
    /// Grown-communicator aliases (`analysis::comms::grow`).
    pub aliases: Vec<CommCreated>,
}

/// The log's history ring, read once.
pub(super) fn complete_steps(log: &RankLog) -> History {
    let mut steps: BTreeMap<u64, Vec<StepVector>> = BTreeMap::new();
    let mut device: DeviceByStep = BTreeMap::new();
    let mut aliases = Vec::new();
    // All three kinds live in the history ring: the event ring's calls are read apart,
    // within the budget.
    let stats = log.scan_region(Region::History, |record| match record.body {
        RecordBody::StepVector(v) => steps.entry(v.step).or_default().push(v),
        RecordBody::StageDevice(d) => device.entry(d.step).or_default().extend(d.stages()),
        RecordBody::CommCreated(c) if grow::is_alias(&c) => aliases.push(c),
        _ => {}
    });
    steps.retain(|_, parts| is_complete_step(parts));
    History { steps, device, wrapped: stats.lost_to_wrap, aliases }
}

/// Whether a step's parts are all held; sorts them in part order.
pub(super) fn is_complete_step(parts: &mut [StepVector]) -> bool {
    parts.sort_by_key(|p| p.part);
    let held: usize = parts.iter().map(|p| p.count as usize).sum();
    !parts.is_empty()
        && parts.iter().enumerate().all(|(i, p)| p.part as usize == i)
        && held == parts[0].stages_total as usize
}
