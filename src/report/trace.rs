//! `sf trace`: a job's timeline as a Chrome JSON trace for Perfetto. Two passes over the
//! logs, so memory stays bounded whatever the job's size: the first (every core) learns
//! each rank's host and, per collective, which rank entered first and last (the flow
//! arrows' ends); the second streams one rank at a time into the file.

use std::collections::HashMap;
use std::io;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use crate::core::kernels::kernel_activity::readable_kernel_name;
use crate::core::log::format::Region;
use crate::core::log::reader::RankLog;
use crate::core::log::records::{NcclCall, RecordBody, StackReason, StepVector};

use super::Failure;
use crate::report::discover::{self, Dirs};
use crate::report::parallel;
use crate::report::stacks::{RankStacks, StackCollector};
use crate::report::wall::WallClock;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceOptions {
    pub dirs: Dirs,
    pub output: PathBuf,
    pub steps: Option<RangeInclusive<u64>>,
    pub ranks: Option<Vec<RangeInclusive<u32>>>,
}

/// A collective's key: communicator and sequence number.
type Collective = (u64, u64);
/// (wall ns, rank) of a call: the order of entry, ties broken by rank.
type Entry = (u64, u32);
/// A collective's first and last entry, and its flow id.
type Ends = (Entry, Entry, u64);

/// What the first pass learns of one log.
struct Overview {
    path: PathBuf,
    rank: u32,
    host: String,
    start_wall_ns: u64,
    /// Every kept collective call's entry, by collective.
    entries: Vec<(Collective, Entry)>,
    steps: StepSpan,
}

/// Where the trace's events go: `sf`'s Chrome JSON writer, one call an event.
pub trait TraceSink {
    /// A rank's process: its name, its host as a label, and its place in the list.
    fn process(&mut self, pid: u32, name: &str, host: &str, sort_index: usize) -> io::Result<()>;
    /// A named track of a process.
    fn thread(&mut self, pid: u32, tid: u32, name: &str) -> io::Result<()>;
    /// A complete slice from `ts_ns` (wall clock) lasting `dur_ns`.
    fn slice(
        &mut self,
        pid: u32,
        tid: u32,
        name: &str,
        ts_ns: u64,
        dur_ns: u64,
        args: &[(&str, u64)],
    ) -> io::Result<()>;
    /// A counter's values at `ts_ns`.
    fn counter(&mut self, pid: u32, name: &str, ts_ns: u64, values: &[(&str, f64)]) -> io::Result<()>;
    /// A moment on a track, with text arguments (a stack sample).
    fn instant(&mut self, pid: u32, tid: u32, name: &str, ts_ns: u64, args: &[(&str, &str)]) -> io::Result<()>;
    /// One end (or a middle) of a collective's flow arrow.
    fn flow(&mut self, pid: u32, tid: u32, ts_ns: u64, id: u64, name: &str, phase: FlowPhase) -> io::Result<()>;
}

/// Where an event sits on a collective's flow arrow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowPhase {
    Start,
    Step,
    Finish,
}

/// What the first pass learned: the ranks to draw, in order, and the collectives' arrows.
pub struct TracePlan {
    ranks: Vec<Overview>,
    ends: HashMap<Collective, Ends>,
    /// The earliest rank start (wall ns): the trace's time origin.
    pub origin_ns: u64,
}

impl TracePlan {
    pub fn ranks(&self) -> usize {
        self.ranks.len()
    }

    /// Collectives in the trace (an arrow joins each one more than one rank entered).
    pub fn collectives(&self) -> usize {
        self.ends.len()
    }
}

/// The first pass: which ranks and steps the trace holds, and each collective's arrow.
pub fn plan(options: &TraceOptions) -> Result<TracePlan, Failure> {
    let files = discover::job_log_paths(&options.dirs, "trace").map_err(Failure::Message)?;
    let wanted = |rank: u32| options.ranks.as_ref().is_none_or(|list| list.iter().any(|r| r.contains(&rank)));
    let read = parallel::read_all(&files, |path| overview(path, options));
    let mut ranks: Vec<Overview> = Vec::new();
    for read in read {
        if let Some(o) = read? {
            if wanted(o.rank) && !ranks.iter().any(|r| r.rank == o.rank) {
                ranks.push(o);
            }
        }
    }
    if ranks.is_empty() {
        return Err(Failure::Message(format!(
            "{}: no ranked log left to trace (check --ranks)",
            options.dirs.display()
        )));
    }
    if let Some(asked) = &options.steps {
        if ranks.iter().all(|r| r.steps.span.is_some_and(|(from, to)| from > to)) {
            let asked = match (asked.start(), asked.end()) {
                (a, b) if a == b => format!("step {a} is"),
                (a, b) => format!("steps {a}-{b} are"),
            };
            let fix = match held_steps(&ranks) {
                Some(held) => format!("which hold {held}; pick steps from those"),
                None => "which hold no step markers; drop --steps".to_string(),
            };
            return Err(Failure::Message(format!("{}: {asked} not in the logs, {fix}", options.dirs.display())));
        }
    }
    // Processes sorted by host, then rank: Perfetto lists them in that order.
    ranks.sort_by(|a, b| (&a.host, a.rank).cmp(&(&b.host, b.rank)));
    // Each collective's first and last entry, and a short id for its arrow.
    let mut ends: HashMap<Collective, Ends> = HashMap::new();
    for (key, entry) in ranks.iter().flat_map(|r| r.entries.iter()) {
        let next = ends.len() as u64 + 1;
        let e = ends.entry(*key).or_insert((*entry, *entry, next));
        e.0 = e.0.min(*entry);
        e.1 = e.1.max(*entry);
    }
    let origin_ns = ranks.iter().map(|r| r.start_wall_ns).min().unwrap_or(0);
    Ok(TracePlan { ranks, ends, origin_ns })
}

/// The second pass: every planned rank's events into `trace`, one rank at a time.
pub fn stream(plan: &TracePlan, options: &TraceOptions, trace: &mut dyn TraceSink) -> Result<(), Failure> {
    let fail = |e: std::io::Error| Failure::Message(format!("{}: cannot write: {e}", options.output.display()));
    for (sort_index, overview) in plan.ranks.iter().enumerate() {
        let log = RankLog::open(&overview.path).map_err(|e| Failure::Message(e.to_string()))?;
        rank_events(&log, overview, sort_index, options, &plan.ends, trace).map_err(fail)?;
    }
    Ok(())
}

/// What `sf trace` wrote (`--json`; its field names are a contract).
#[derive(Debug, serde::Serialize)]
pub struct TraceReport {
    pub file: String,
    pub ranks: usize,
    pub events: u64,
    pub bytes: u64,
    /// Collectives in the trace (an arrow joins each one more than one rank entered).
    pub collectives: usize,
}

/// The first pass over one log: `None` for an unranked log.
fn overview(path: &Path, options: &TraceOptions) -> Result<Option<Overview>, Failure> {
    let log = RankLog::open(path).map_err(|e| Failure::Message(e.to_string()))?;
    let header = &log.header;
    if header.global_rank < 0 {
        return Ok(None);
    }
    let rank = header.global_rank as u32;
    let clock = WallClock::of(header);
    let steps = step_span(&log, options);
    let span = steps.span;
    let mut entries = Vec::new();
    log.scan_region(Region::Events, |r| {
        if let RecordBody::NcclCall(c) = r.body {
            if let (Some(key), true) = (collective(&c), in_span(span, c.t_enter_ns)) {
                entries.push((key, (clock.wall_ns(c.t_enter_ns).unwrap_or(c.t_enter_ns), rank)));
            }
        }
    });
    let start_wall_ns = clock.wall_ns(header.base_mono_ns).unwrap_or(header.base_mono_ns);
    Ok(Some(Overview { path: path.to_path_buf(), rank, host: header.host.clone(), start_wall_ns, entries, steps }))
}

/// The steps the traced logs hold, for the message about a `--steps` outside them; `None`
/// when they hold none.
fn held_steps(ranks: &[Overview]) -> Option<String> {
    let finished = ranks.iter().filter_map(|r| r.steps.held).reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
    let open: Vec<u64> = ranks.iter().filter_map(|r| r.steps.open.map(|(step, _)| step)).collect();
    let open = match (open.iter().min(), open.iter().max()) {
        (Some(a), Some(b)) if a == b => format!(" and step {a} unfinished"),
        (Some(a), Some(b)) => format!(" and steps {a}-{b} unfinished"),
        _ => String::new(),
    };
    match finished {
        Some((a, b)) => Some(format!("steps {a}-{b}{open}")),
        None if open.is_empty() => None,
        None => Some(open.trim_start_matches(" and ").to_string()),
    }
}

fn collective(c: &NcclCall) -> Option<Collective> {
    (c.op.is_collective() && c.seq > 0 && c.comm_id != 0).then_some((c.comm_id, c.seq))
}

/// A rank's steps: those `--steps` selects, and what it holds.
#[derive(Clone, Copy, Default)]
struct StepSpan {
    /// The monotonic span of the selected steps (with `--steps`, empty when none is held;
    /// `None` without: everything).
    span: Option<(u64, u64)>,
    /// The first and last finished step held.
    held: Option<(u64, u64)>,
    /// The step the rank is in and has not finished, with when it began (the end of the
    /// step before it, 0 when none is held): a hung rank's last step.
    open: Option<(u64, u64)>,
    /// The last moment the rank was seen (its last heartbeat).
    as_of_ns: u64,
}

/// The steps of `log` (see [`StepSpan`]); a selected unfinished step reaches to the last
/// heartbeat.
fn step_span(log: &RankLog, options: &TraceOptions) -> StepSpan {
    let live = log.live();
    let current = live.current_step.checked_sub(1);
    let (mut from, mut to) = (u64::MAX, 0);
    let mut held: Option<(u64, u64)> = None;
    let mut open_begin = 0;
    log.scan_region(Region::History, |r| {
        if let RecordBody::StepVector(v) = r.body {
            if v.part != 0 {
                return;
            }
            let end = v.t_begin_ns.saturating_add(v.wall_ns);
            held = Some(held.map_or((v.step, v.step), |(a, b)| (a.min(v.step), b.max(v.step))));
            if current.is_some_and(|c| v.step < c) {
                open_begin = open_begin.max(end);
            }
            if options.steps.as_ref().is_some_and(|s| s.contains(&v.step)) {
                from = from.min(v.t_begin_ns);
                to = to.max(end);
            }
        }
    });
    // The step the rank is in when no vector of it exists yet.
    let open = current.filter(|&c| held.is_none_or(|(_, last)| c > last)).map(|c| (c, open_begin));
    if let (Some((step, begin)), Some(steps)) = (open, &options.steps) {
        if steps.contains(&step) {
            from = from.min(begin);
            to = to.max(live.heartbeat_mono_ns);
        }
    }
    // Empty (from after to) when no selected step is held: nothing is in it.
    let span = options.steps.as_ref().map(|_| (from, to));
    StepSpan { span, held, open, as_of_ns: live.heartbeat_mono_ns }
}

fn in_span(span: Option<(u64, u64)>, t_ns: u64) -> bool {
    span.is_none_or(|(from, to)| (from..=to).contains(&t_ns))
}

/// The second pass over one log: its process, tracks and events.
fn rank_events(
    log: &RankLog,
    overview: &Overview,
    sort_index: usize,
    options: &TraceOptions,
    ends: &HashMap<Collective, Ends>,
    trace: &mut dyn TraceSink,
) -> std::io::Result<()> {
    let pid = overview.rank;
    let clock = WallClock::of(&log.header);
    let wall = |mono_ns: u64| clock.wall_ns(mono_ns).unwrap_or(mono_ns);
    trace.process(pid, &format!("{} rank {pid}", overview.host), &overview.host, sort_index)?;
    trace.thread(pid, tracks::STEPS, "steps")?;
    trace.thread(pid, tracks::STAGES, "stages")?;
    // Read again here, just before the live tables: a step that finished since the first
    // pass is drawn once, from its vector.
    let steps = step_span(log, options);
    let span = steps.span;
    let names = log.stage_names();
    let mut parts: HashMap<u64, Vec<StepVector>> = HashMap::new();
    let mut kernel_names: HashMap<u32, String> = HashMap::new();
    let mut failed = Ok(());
    let mut stacks = StackCollector::default();
    let mut stacks_named = false;
    log.scan_region(Region::History, |r| match r.body {
        RecordBody::StackFrame(_) | RecordBody::StackThread(_) => stacks.see(&r.body),
        RecordBody::StackSample(sample) => {
            stacks.see(&r.body);
            let shown = stacks.newest(pid as i32, None).filter(|s| s.sample == sample.sample);
            if let (Some(s), true) = (shown, failed.is_ok() && in_span(span, sample.t_ns)) {
                if !stacks_named {
                    stacks_named = true;
                    failed = trace.thread(pid, tracks::STACKS, "python stacks");
                }
                if failed.is_ok() {
                    failed = stack_event(trace, pid, &s, wall(sample.t_ns));
                }
            }
        }
        RecordBody::StepVector(v) if options.steps.as_ref().is_none_or(|s| s.contains(&v.step)) => {
            parts.entry(v.step).or_default().push(v);
            let list = &parts[&v.step];
            let held: usize = list.iter().map(|p| p.count as usize).sum();
            if held == v.stages_total as usize {
                let mut list = parts.remove(&v.step).unwrap_or_default();
                list.sort_by_key(|p| p.part);
                if failed.is_ok() {
                    failed = step_events(trace, pid, &list, &names, &wall);
                }
            }
        }
        RecordBody::KernelName(k) => {
            kernel_names.insert(k.name_id, readable_kernel_name(&k.name()).to_string());
        }
        _ => {}
    });
    failed?;
    if let Some((step, begin)) = steps.open.filter(|(step, _)| options.steps.as_ref().is_none_or(|s| s.contains(step)))
    {
        let begin = begin.max(log.header.base_mono_ns);
        let name = format!("step {step} (unfinished)");
        trace.slice(pid, tracks::STEPS, &name, wall(begin), steps.as_of_ns.saturating_sub(begin), &[])?;
    }
    let mut comm_tracks: HashMap<u64, u32> = HashMap::new();
    let mut gpu_tracks: HashMap<(u8, u32), u32> = HashMap::new();
    let mut failed = Ok(());
    log.scan_region(Region::Events, |r| {
        if failed.is_err() {
            return;
        }
        failed = match r.body {
            RecordBody::NcclCall(c) if in_span(span, c.t_enter_ns) => {
                call_events(trace, pid, &c, &mut comm_tracks, ends, &wall)
            }
            RecordBody::StreamBusy(b) if b.part == 0 || b.count > 0 => {
                let start_ns = b.window * b.window_ms as u64 * 1_000_000;
                let window_ns = (b.window_ms as u64 * 1_000_000).max(1);
                if in_span(span.map(|(f, t)| (wall(f), wall(t))), start_ns) {
                    b.entries().iter().try_for_each(|e| {
                        let name = format!("gpu busy dev {} stream {}", e.device, e.stream);
                        trace.counter(pid, &name, start_ns, &[("busy", e.busy_ns as f64 / window_ns as f64)])
                    })
                } else {
                    Ok(())
                }
            }
            RecordBody::NcclKernels(k) => {
                let start_ns = k.window * k.window_ms as u64 * 1_000_000;
                if in_span(span.map(|(f, t)| (wall(f), wall(t))), start_ns) {
                    let next = tracks::GPU + gpu_tracks.len() as u32;
                    let tid = *gpu_tracks.entry((k.device, k.stream)).or_insert(next);
                    let named = match tid == next {
                        true => {
                            trace.thread(pid, tid, &format!("gpu nccl kernels dev {} stream {}", k.device, k.stream))
                        }
                        false => Ok(()),
                    };
                    let name = kernel_names.get(&(k.name_id as u32)).map_or("nccl kernel", String::as_str);
                    named.and_then(|()| {
                        k.pairs().iter().try_for_each(|&(offset, duration)| {
                            trace.slice(pid, tid, name, start_ns + offset as u64, duration as u64, &[])
                        })
                    })
                } else {
                    Ok(())
                }
            }
            RecordBody::QpWindow(q) if in_span(span, q.t_ns) => {
                let name = format!("qp {:#x} dev {}", q.qp_num, q.device);
                let values = [("in_flight", q.in_flight as f64), ("window_MBps", q.window_bps as f64 / 1e6)];
                trace.counter(pid, &name, wall(q.t_ns), &values)
            }
            _ => Ok(()),
        };
    });
    failed?;
    in_flight_events(trace, pid, log, steps, &mut comm_tracks, &wall)
}

/// The calls each communicator is inside now (the live table): a slice from its entry to
/// the rank's last heartbeat. A hung collective has no record yet; this is its evidence.
fn in_flight_events(
    trace: &mut dyn TraceSink,
    pid: u32,
    log: &RankLog,
    steps: StepSpan,
    comm_tracks: &mut HashMap<u64, u32>,
    wall: &impl Fn(u64) -> u64,
) -> std::io::Result<()> {
    for comm in log.comms() {
        let Some(call) = comm.inflight.filter(|c| in_span(steps.span, c.since_mono_ns)) else { continue };
        let Some(op) = call.op else { continue };
        let tid = comm_track(trace, pid, comm.comm_id, comm_tracks)?;
        // The call after the last returned: `entered` may not count it yet (the tracer
        // marks a call in flight before it counts it).
        let seq = 1 + if op.is_collective() { comm.coll_returned } else { comm.p2p_returned };
        let name = format!("{} (in flight)", op.name());
        let lasted = steps.as_of_ns.saturating_sub(call.since_mono_ns);
        trace.slice(pid, tid, &name, wall(call.since_mono_ns), lasted, &[("seq", seq), ("in_flight", 1)])?;
    }
    Ok(())
}

/// The track of communicator `comm_id` on this rank, named on first use.
fn comm_track(
    trace: &mut dyn TraceSink,
    pid: u32,
    comm_id: u64,
    comm_tracks: &mut HashMap<u64, u32>,
) -> std::io::Result<u32> {
    let next = tracks::COMMS + comm_tracks.len() as u32;
    let tid = *comm_tracks.entry(comm_id).or_insert(next);
    if tid == next {
        trace.thread(pid, tid, &format!("nccl {comm_id:#018x}"))?;
    }
    Ok(tid)
}

/// Track ids within a rank's process.
mod tracks {
    pub const STEPS: u32 = 1;
    pub const STAGES: u32 = 2;
    /// Python stack samples (`core::stacks`).
    pub const STACKS: u32 = 3;
    /// Communicators' tracks from here, one each in order of first call.
    pub const COMMS: u32 = 10;
    /// GPU tracks from here.
    pub const GPU: u32 = 1000;
}

/// A stack sample as an instant on the rank's stacks track: each thread's frames,
/// innermost first, one per line, in its arguments.
fn stack_event(trace: &mut dyn TraceSink, pid: u32, s: &RankStacks, ts_ns: u64) -> std::io::Result<()> {
    let reason = match s.reason {
        StackReason::Stall => "stack (stall)",
        StackReason::Request => "stack (asked)",
    };
    let threads: Vec<(String, String)> = s
        .threads
        .iter()
        .map(|t| {
            let frames: Vec<String> = t.frames.iter().map(|f| f.short()).collect();
            let name = if t.main { "main thread".to_string() } else { format!("thread {}", t.name) };
            (name, frames.join("\n"))
        })
        .collect();
    let note = s.note.clone().unwrap_or_default();
    let mut args: Vec<(&str, &str)> = threads.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    if !note.is_empty() {
        args.push(("not read", note.as_str()));
    }
    trace.instant(pid, tracks::STACKS, reason, ts_ns, &args)
}

fn step_events(
    trace: &mut dyn TraceSink,
    pid: u32,
    parts: &[StepVector],
    names: &[Option<String>],
    wall: &impl Fn(u64) -> u64,
) -> std::io::Result<()> {
    let first = &parts[0];
    let begin = wall(first.t_begin_ns);
    trace.slice(pid, tracks::STEPS, &format!("step {}", first.step), begin, first.wall_ns, &[])?;
    // Stages run in vector order from the step's begin.
    let mut t = begin;
    for (id, ns) in parts.iter().flat_map(|p| p.stages()) {
        let name = names.get(id as usize).and_then(Option::as_deref).unwrap_or("stage");
        trace.slice(pid, tracks::STAGES, name, t, ns, &[])?;
        t = t.saturating_add(ns);
    }
    Ok(())
}

fn call_events(
    trace: &mut dyn TraceSink,
    pid: u32,
    c: &NcclCall,
    comm_tracks: &mut HashMap<u64, u32>,
    ends: &HashMap<Collective, Ends>,
    wall: &impl Fn(u64) -> u64,
) -> std::io::Result<()> {
    let tid = comm_track(trace, pid, c.comm_id, comm_tracks)?;
    let enter = wall(c.t_enter_ns);
    // The communicator names the track; the call carries its sequence number and size.
    let args = [("seq", c.seq), ("bytes", c.bytes)];
    trace.slice(pid, tid, c.op.name(), enter, c.t_exit_ns.saturating_sub(c.t_enter_ns), &args)?;
    if let Some(&(first, last, id)) = collective(c).and_then(|key| ends.get(&key)) {
        if first != last {
            let me = (enter, pid);
            let phase = if me == first {
                FlowPhase::Start
            } else if me == last {
                FlowPhase::Finish
            } else {
                FlowPhase::Step
            };
            trace.flow(pid, tid, enter, id, c.op.name(), phase)?;
        }
    }
    Ok(())
}
