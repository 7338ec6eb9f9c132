//! The rank logs' `step_vector` records (and the CUDA door's `stage_device` records of the
//! same steps), per rank for `sf slow` and as a stage-duration table for `sf frontier`.

use std::collections::{BTreeMap, HashMap};

use stagefrontier::analysis::frontier::csv::{self, StageTable};
use stagefrontier::analysis::frontier::DeviceTime;
use stagefrontier::core::capture::doors::{no_markers_note, Doors};
use stagefrontier::core::log::format::Region;
use stagefrontier::core::log::reader::RankLog;
use stagefrontier::core::log::records::{RecordBody, StepVector};

use super::steps::seconds;
use super::Failure;
use crate::discover;
use crate::discover::Dirs;
use crate::parallel;
use crate::wall::WallClock;

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
}

/// Every ranked log in `dir` (ascending rank), the world size the headers record and the
/// stage names the steps' ids index. A step is complete when all its parts are held (a
/// wrapped-away part drops the step for that rank). Unranked logs and a second log
/// claiming a rank are skipped (sf ls warns). `command` names the sf command in the hint
/// when `dir` holds job directories instead.
pub fn read_ranks(dir: &Dirs, command: &str) -> Result<(Vec<RankSteps>, usize, StageNames), Failure> {
    let logs = discover::job_log_paths(dir, command).map_err(Failure::Message)?;
    let mut world = 0;
    let mut ranks: Vec<RankSteps> = Vec::new();
    let mut names = StageNames::default();
    let read = parallel::read_all(&logs, |path| {
        let log = RankLog::open(path).map_err(|e| Failure::Message(e.to_string()))?;
        Ok::<_, Failure>(rank_steps(&log))
    });
    for read in read {
        let Some((mut steps, header_world, log_names)) = read? else { continue };
        if ranks.iter().any(|r| r.rank == steps.rank) {
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
    Ok((ranks, world as usize, names))
}

/// One log's identity and complete steps (stage ids of the log's own table), the world
/// its header records and its stage-name table; `None` for an unranked log.
fn rank_steps(log: &RankLog) -> Option<(RankSteps, i32, Vec<Option<String>>)> {
    let rank = log.header.global_rank;
    if rank < 0 {
        return None;
    }
    let world = log.header.world_size.max(rank + 1);
    let (vectors, mut device, history_wrapped) = complete_steps(log);
    let steps = vectors
        .into_iter()
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
    };
    Some((steps, world, log.stage_names()))
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
        "the logs hold no step vectors; the job needs step and stage markers (C API, NVTX ranges or python/stagefrontier.py)"
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

/// Steps whose parts are all held, parts in order; the device time of the steps the
/// CUDA door sampled (a lost `stage_device` part loses only its stages); and how many
/// records of the step history wrapped away.
pub(super) fn complete_steps(log: &RankLog) -> (BTreeMap<u64, Vec<StepVector>>, DeviceByStep, u64) {
    let mut steps: BTreeMap<u64, Vec<StepVector>> = BTreeMap::new();
    let mut device: DeviceByStep = BTreeMap::new();
    // Both kinds live in the history ring: the event ring's calls are not read at all.
    let stats = log.scan_region(Region::History, |record| match record.body {
        RecordBody::StepVector(v) => steps.entry(v.step).or_default().push(v),
        RecordBody::StageDevice(d) => device.entry(d.step).or_default().extend(d.stages()),
        _ => {}
    });
    steps.retain(|_, parts| is_complete_step(parts));
    (steps, device, stats.lost_to_wrap)
}

/// Whether a step's parts are all held; sorts them in part order.
pub(super) fn is_complete_step(parts: &mut [StepVector]) -> bool {
    parts.sort_by_key(|p| p.part);
    let held: usize = parts.iter().map(|p| p.count as usize).sum();
    !parts.is_empty()
        && parts.iter().enumerate().all(|(i, p)| p.part as usize == i)
        && held == parts[0].stages_total as usize
}
