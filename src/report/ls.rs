//! `sf ls`: one row per rank log of a job, and what the job as a whole is missing.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::sync::Mutex;

use crate::analysis::blame::waits_from::{waits_from, Evidence, WaitsFrom};
use crate::analysis::comms::grow::{self, Aliases};
use crate::analysis::comms::nccl_version::nccl_version_string;
use crate::analysis::hang::{Mismatch, Said, Say, Tally};
use crate::analysis::log::clocks::{host_clocks, HostClock, RankClock};
use crate::analysis::log::ends::{first_end, FirstEnd, RankEnd};
use crate::analysis::log::liveness::Liveness;
use crate::core::log::format::Region;
use crate::core::log::reader::{LiveState, RankLog, ReadError, ScanStats};
use crate::core::log::records::{hex_u64, CommCreated, NcclCall, ProcessEnd, RecordBody};
use crate::core::record::doors::{no_markers_note, Doors};
use serde::Serialize;

use super::hang::CALLS_KEPT;
use super::roles::{self, RankRoles};
use super::waits::clock_of;
use super::Failure;
use crate::analysis::roles::Layout;
use crate::core::log::host as local_host;
use crate::report::discover::{self, Dirs, LogFile};
use crate::report::moment::{self, Taken};
use crate::report::parallel;
use crate::report::read_budget::RECORDS;
use crate::report::wall::rfc3339_ms;

/// The `--json` object; its field names are a contract.
#[derive(Debug, Serialize)]
pub struct LsReport {
    pub dir: String,
    pub ranks: Vec<RankRow>,
    pub missing_ranks: Vec<i32>,
    pub errors: Vec<FileError>,
    /// Earlier attempts of the job kept in `attempt-N/` (the rows above are the latest).
    pub attempts: Vec<discover::Attempt>,
    /// Collectives whose ranks disagree on op, count, type, root or reduction, per
    /// communicator, from the records (`sf hang` reads the same; `sf ls` exits 5).
    pub mismatches: Vec<CommMismatches>,
    /// Per host, how well its ranks' monotonic times map onto the common wall-clock
    /// timeline cross-host timing is compared on (`analysis::log::clocks`).
    pub clocks: Vec<HostClock>,
    /// The newest event records read and checked of each log: its share of the job-wide
    /// `SF_READ_BUDGET` (every record of up to 512 default logs).
    pub records_read_per_log: u64,
    /// The budget that would read every record the logs hold, when some went unread.
    pub budget_for_all: Option<u64>,
    /// Every rank is gone and the job ended badly: the rank that went first
    /// (`analysis::log::ends`).
    pub first_end: Option<FirstEnd>,
    /// Where `sf frontier`, `sf slow` and `sf hang` can read the job's waits from:
    /// `device` (NCCL kernels), `host_calls` (NCCL calls that block until every peer
    /// arrives) or `none`, over the records read; `waits_from_reason` says why.
    pub waits_from: WaitsFrom,
    pub waits_from_reason: &'static str,
    /// The job's parallel layout as `sf roles` finds it; null when no log holds a
    /// communicator.
    pub layout: Option<Layout>,
    /// The layout is data parallelism on the world communicator alone.
    #[serde(skip)]
    pub layout_flat: bool,
    #[serde(skip)]
    pub summary: Summary,
}

#[derive(Debug, Serialize)]
pub struct CommMismatches {
    #[serde(serialize_with = "hex_u64")]
    pub comm_id: u64,
    pub mismatches: Vec<Mismatch>,
    pub mismatches_total: usize,
}

impl LsReport {
    pub fn mismatched(&self) -> bool {
        !self.mismatches.is_empty()
    }
}

#[derive(Debug, Serialize)]
pub struct RankRow {
    pub file: String,
    /// -1 for a log without rank identity (`pid-N.sflog`).
    pub rank: i32,
    pub world_size: i32,
    pub local_rank: i32,
    pub host: String,
    pub pid: u32,
    pub job_id: String,
    pub liveness: Liveness,
    /// `None` when the writer never beat.
    pub heartbeat_age_s: Option<f64>,
    /// Records committed to both rings (events and history).
    pub committed: u64,
    pub held: u64,
    /// Event records held older than the newest this read checked (`SF_READ_BUDGET`):
    /// neither counted in `held` nor checked.
    pub not_read: u64,
    pub lost_to_wrap: u64,
    pub missing: u64,
    pub invalid_slots: u64,
    pub dropped: u64,
    /// Stage and value markers lost because the stage-name table was full.
    pub markers_unnamed: u64,
    pub comms: usize,
    pub schema: u32,
    pub format_version: u32,
    /// `major.minor.patch`, `None` until the library learned it.
    pub nccl_version: Option<String>,
    pub clock_source: &'static str,
    /// The last heartbeat in UTC (RFC 3339); `None` when the writer never beat.
    pub heartbeat_wall: Option<String>,
    /// Doors open and injection variables set; `None` for a log of an older library.
    pub doors: Option<Doors>,
    /// For a snapshot's copy, when `sf snapshot` took it (RFC 3339 UTC): liveness and the
    /// heartbeat age are judged at that moment. `None` for a log read where it is written.
    pub snapshot_wall: Option<String>,
    /// What the records read show was recorded, in `EVIDENCE` order: `host_calls` (NCCL
    /// calls), `device` (NCCL kernels linked to their calls, the device's unfinished work),
    /// `host_sync`, `kernels` (kernel summaries), `profiler`, `steps`, `net`.
    pub evidence: Vec<&'static str>,
    /// How the process ended, if it recorded its end.
    pub end: Option<ProcessEnd>,
    #[serde(skip)]
    last_heard_wall_ns: u64,
}

/// Evidence names, in the order `sf ls` lists them.
pub const EVIDENCE: [&str; 7] = ["host_calls", "device", "host_sync", "kernels", "profiler", "steps", "net"];

/// The evidence a record is (a bit of `EVIDENCE`), none for bookkeeping records.
fn evidence_bit(body: &RecordBody) -> u8 {
    let index = match body {
        RecordBody::NcclCall(_) => 0,
        RecordBody::DeviceColl(_) | RecordBody::DeviceState(_) => 1,
        RecordBody::HostSync(_) => 2,
        RecordBody::KernelCluster(_) | RecordBody::NcclKernels(_) | RecordBody::StreamBusy(_) => 3,
        RecordBody::StageDevice(_) => 3,
        RecordBody::ProfOp(_) | RecordBody::ProfProxy(_) | RecordBody::ProfNet(_) => 4,
        RecordBody::StepVector(_) => 5,
        RecordBody::QpWindow(_) | RecordBody::QpStuck(_) | RecordBody::QpDegraded(_) | RecordBody::PortCounters(_) => 6,
        _ => return 0,
    };
    1 << index
}

fn evidence_names(bits: u8) -> Vec<&'static str> {
    EVIDENCE.iter().enumerate().filter(|(i, _)| bits & (1 << i) != 0).map(|(_, name)| *name).collect()
}

#[derive(Debug, Serialize)]
pub struct FileError {
    pub file: String,
    pub error: String,
}

/// Totals for the human summary lines.
#[derive(Debug, Default)]
pub struct Summary {
    /// The largest world size the logs name; `None` when no log has a rank identity.
    pub world_size: Option<i32>,
    /// Every world size named when the logs disagree (they come from different runs).
    pub conflicting_world_sizes: Vec<i32>,
    /// Distinct ranks with a readable log.
    pub ranks_found: usize,
    /// Ranks claimed by more than one log, with how many claim each: copies, or runs mixed.
    pub duplicated_ranks: Vec<(i32, usize)>,
    /// Logs without rank identity.
    pub unranked: usize,
    pub dropped_total: u64,
    /// Logs whose history has holes, as (rank or file, events dropped, records missing).
    pub gaps: Vec<Gap>,
    /// Logs that lost stage or value markers to a full stage-name table, with how many.
    pub unnamed: Vec<(String, u64)>,
    /// Why no rank can have step vectors from NVTX ranges, when none used the C API
    /// markers either: the variable that was not set.
    pub nvtx_note: Option<&'static str>,
}

#[derive(Debug)]
pub struct Gap {
    pub who: String,
    pub dropped: u64,
    pub missing: u64,
}

pub fn build(paths: &Dirs) -> Result<LsReport, Failure> {
    let files = files_to_read(paths)?;
    let host = local_host::name();
    let mut errors = Vec::new();
    // First pass: each log's live words and its history ring, where the alias records
    // are; the logs stay open for the second.
    parallel::allow_open_files(files.len());
    let mut opened = Vec::with_capacity(files.len());
    for (file, read) in files.iter().zip(parallel::read_all(&files, |file| RankLog::open(&file.path).map(Opened::of))) {
        match read {
            Ok(log) => opened.push((log, file.taken.as_ref())),
            Err(e) => errors.push(FileError { file: file.path.display().to_string(), error: e.to_string() }),
        }
    }
    // A grown communicator is one communicator on all its members (`analysis::comms::grow`).
    let aliases = Aliases::of(opened.iter().flat_map(|(o, _)| &o.aliases));
    // Second pass: each log's event ring, its newest calls folded into the mismatch tally
    // as it is read (the logs of one rank together: its first word counts), so no rank's
    // calls are held once it is read.
    let mut by_rank: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for (i, (o, _)) in opened.iter().enumerate() {
        by_rank.entry(o.log.header.global_rank).or_default().push(i);
    }
    let groups: Vec<Vec<usize>> = by_rank.into_values().collect();
    let records_read_per_log = RECORDS.per_log(RECORDS.total()?, opened.len());
    let tally = Mutex::new(Tally::default());
    let mut events: Vec<Option<(ScanStats, u64, u8)>> = (0..opened.len()).map(|_| None).collect();
    let read = parallel::read_all(&groups, |group| {
        let windows: Vec<CallWindow> =
            group.iter().map(|&i| CallWindow::read(&opened[i].0.log, records_read_per_log, &aliases)).collect();
        let said: Vec<Said> = windows.iter().map(|w| w.said()).collect();
        let say = Say::of(&said);
        tally.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).add(say);
        windows
            .into_iter()
            .map(|w| {
                let seen = Evidence::of_nccl_calls(w.device_records, w.calls.iter());
                ((w.stats, w.oldest_seq, w.evidence), seen)
            })
            .collect::<Vec<_>>()
    });
    let mut evidence = Vec::with_capacity(opened.len());
    for (group, read) in groups.iter().zip(read) {
        for (&i, (read, seen)) in group.iter().zip(read) {
            events[i] = Some(read);
            evidence.push(seen);
        }
    }
    let (waits_from, why) = waits_from(&Evidence::of_job(evidence.iter()));
    let events: Vec<(ScanStats, u64, u8)> = events.into_iter().map(|e| e.expect("every log was read")).collect();
    let findings = tally.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner()).finish();
    let mismatches = if findings.is_empty() {
        Vec::new()
    } else {
        // Every rank's values of the few collectives listed: their windows read again.
        let mut gather = findings.gather();
        let wanted =
            parallel::read_all(&opened.iter().zip(&events).collect::<Vec<_>>(), |((o, _), (stats, oldest, _))| {
                let mut w = CallWindow::reread(&o.log, stats.last_seq, *oldest, &aliases);
                w.calls.retain(|c| gather.wants(c));
                w
            });
        for w in &wanted {
            gather.add(&w.said());
        }
        gather
            .finish()
            .into_iter()
            .map(|(comm_id, (mismatches, mismatches_total))| CommMismatches { comm_id, mismatches, mismatches_total })
            .collect()
    };
    let roles = roles::infer(&parallel::read_all(&opened, |(o, _)| RankRoles::read(&o.log, records_read_per_log)));
    let layout = (!roles.communicators.is_empty()).then_some(roles.layout);
    let clocks: Vec<RankClock> = opened.iter().map(|(o, _)| o.clock.clone()).collect();
    let mut ranks: Vec<RankRow> = opened
        .iter()
        .zip(events)
        .map(|((o, taken), (stats, _, evidence))| row(o, stats, evidence, *taken, &host))
        .collect();
    // Ranked logs by rank (file names sort wrongly past 99999), then the unranked ones.
    ranks.sort_by(|a, b| (a.rank < 0, a.rank, &a.file).cmp(&(b.rank < 0, b.rank, &b.file)));
    let summary = summarize(&ranks);
    let missing_ranks = summary.world_size.map_or_else(Vec::new, |world| missing_ranks(world, &ranks));
    let attempts = paths.0.iter().flat_map(|dir| discover::attempts_in(dir)).collect();
    let clocks = host_clocks(&clocks);
    let most_held = ranks.iter().map(|r| r.held + r.not_read).max().unwrap_or(0);
    let budget_for_all = ranks.iter().any(|r| r.not_read > 0).then(|| most_held.saturating_mul(ranks.len() as u64));
    let ends: Vec<RankEnd> = ranks
        .iter()
        .filter(|r| r.rank >= 0)
        .map(|r| RankEnd::of(r.rank, r.liveness, r.end, r.last_heard_wall_ns, 0))
        .collect();
    let first_end = first_end(&ends);
    Ok(LsReport {
        dir: paths.display(),
        ranks,
        missing_ranks,
        errors,
        attempts,
        mismatches,
        clocks,
        records_read_per_log,
        budget_for_all,
        first_end,
        waits_from,
        waits_from_reason: why.describe(),
        layout,
        layout_flat: roles.flat,
        summary,
    })
}

/// The logs of the directories given, or the one file given.
fn files_to_read(paths: &Dirs) -> Result<Vec<LogFile>, Failure> {
    if let [path] = paths.0.as_slice() {
        let unreadable = |error| Failure::Message(ReadError::Unreadable { path: path.clone(), error }.to_string());
        if !std::fs::metadata(path).map_err(unreadable)?.is_dir() {
            return Ok(vec![discover::log_file(path).map_err(Failure::Message)?]);
        }
    }
    discover::job_logs(paths, "ls").map_err(Failure::Message)
}

/// What the first pass keeps of a log: the log, open for the second; its live words as
/// the read began; its history ring's figures, clock and alias records.
struct Opened {
    log: RankLog,
    live: LiveState,
    history: ScanStats,
    clock: RankClock,
    aliases: Vec<CommCreated>,
    /// `evidence_bit`s of the history ring's records.
    evidence: u8,
}

impl Opened {
    fn of(log: RankLog) -> Opened {
        let live = log.live();
        let clock = clock_of(&log);
        let mut aliases = Vec::new();
        let mut evidence = 0;
        let history = log.scan_region(Region::History, |r| {
            evidence |= evidence_bit(&r.body);
            match r.body {
                RecordBody::CommCreated(c) if grow::is_alias(&c) => aliases.push(c),
                _ => {}
            }
        });
        Opened { log, live, history, clock, aliases, evidence }
    }
}

/// A log's newest `CALLS_KEPT` calls (as `sf hang` keeps them), for the mismatch check,
/// communicators named as the reports name them. Held while its log is read, not after.
struct CallWindow {
    rank: i32,
    calls: Vec<NcclCall>,
    /// The event ring's figures.
    stats: ScanStats,
    /// The sequence number of the oldest call kept: where a second read starts.
    oldest_seq: u64,
    /// `evidence_bit`s of the records read.
    evidence: u8,
    /// `device_coll` and `device_state` records among the records read.
    device_records: u64,
}

impl CallWindow {
    /// The newest `keep` records of the log's event ring, every one checked.
    fn read(log: &RankLog, keep: u64, aliases: &Aliases) -> CallWindow {
        Self::newest(log, keep, aliases)
    }

    /// The same window again: the records from `oldest_seq` to `last_seq` (of a log
    /// still written, the newest that many).
    fn reread(log: &RankLog, last_seq: u64, oldest_seq: u64, aliases: &Aliases) -> CallWindow {
        Self::newest(log, last_seq.saturating_sub(oldest_seq) + 1, aliases)
    }

    fn newest(log: &RankLog, keep: u64, aliases: &Aliases) -> CallWindow {
        let mut calls: VecDeque<(u64, NcclCall)> = VecDeque::new();
        let (mut evidence, mut device_records) = (0, 0);
        let stats = log.scan_newest(Region::Events, keep, |r| {
            evidence |= evidence_bit(&r.body);
            match r.body {
                RecordBody::NcclCall(c) => {
                    if calls.len() == CALLS_KEPT {
                        calls.pop_front();
                    }
                    calls.push_back((r.seq, c));
                }
                RecordBody::DeviceColl(_) | RecordBody::DeviceState(_) => device_records += 1,
                _ => {}
            }
        });
        let oldest_seq = calls.front().map_or(stats.last_seq, |&(seq, _)| seq);
        let calls = calls.into_iter().map(|(_, c)| NcclCall { comm_id: aliases.canonical(c.comm_id), ..c }).collect();
        CallWindow { rank: log.header.global_rank, calls, stats, oldest_seq, evidence, device_records }
    }

    fn said(&self) -> Said<'_> {
        Said { rank: self.rank, calls: &self.calls, in_flight: Vec::new() }
    }
}

/// A log's row. A format 1 log has one ring, which the second pass read whole.
fn row(o: &Opened, events: ScanStats, evidence: u8, taken: Option<&Taken>, reader_host: &str) -> RankRow {
    let (log, live) = (&o.log, &o.live);
    let h = &log.header;
    let (liveness, age_ns) = moment::liveness(h, live, taken, reader_host);
    let stats = if h.history_slot_count > 0 { ScanStats::of_both(events, o.history.clone()) } else { events };
    RankRow {
        file: log.path().display().to_string(),
        rank: h.global_rank,
        world_size: h.world_size,
        local_rank: h.local_rank,
        host: h.host.clone(),
        pid: h.pid,
        job_id: h.job_id.clone(),
        liveness,
        heartbeat_age_s: age_ns.map(|ns| ns as f64 / 1e9),
        committed: live.committed + live.history_committed,
        held: stats.valid,
        not_read: stats.not_read,
        lost_to_wrap: stats.lost_to_wrap,
        missing: stats.missing,
        invalid_slots: stats.invalid_slots,
        dropped: live.dropped_events,
        markers_unnamed: live.markers_unnamed,
        comms: log.comms().len(),
        schema: h.schema,
        format_version: h.format_version,
        nccl_version: nccl_version_string(live.nccl_version),
        clock_source: h.clock_source,
        heartbeat_wall: (live.heartbeat_wall_ns != 0).then(|| rfc3339_ms(live.heartbeat_wall_ns)),
        doors: live.doors.clone(),
        snapshot_wall: taken.map(|t| rfc3339_ms(t.wall_ns)),
        evidence: evidence_names(evidence | o.evidence),
        end: live.end,
        last_heard_wall_ns: live.heartbeat_wall_ns.max(h.base_wall_ns),
    }
}

fn summarize(ranks: &[RankRow]) -> Summary {
    let ranked = || ranks.iter().filter(|r| r.rank >= 0);
    let world_sizes: BTreeSet<i32> = ranked().map(|r| r.world_size).collect();
    let mut logs_per_rank = BTreeMap::new();
    for r in ranked() {
        *logs_per_rank.entry(r.rank).or_insert(0) += 1;
    }
    let gaps = ranks
        .iter()
        .filter(|r| r.dropped > 0 || r.missing > 0)
        .map(|r| Gap { who: who(r), dropped: r.dropped, missing: r.missing })
        .collect();
    Summary {
        world_size: world_sizes.last().copied(),
        conflicting_world_sizes: if world_sizes.len() > 1 { world_sizes.iter().copied().collect() } else { Vec::new() },
        ranks_found: logs_per_rank.len(),
        duplicated_ranks: logs_per_rank.into_iter().filter(|&(_, logs)| logs > 1).collect(),
        unranked: ranks.len() - ranked().count(),
        dropped_total: ranks.iter().map(|r| r.dropped).sum(),
        gaps,
        unnamed: ranks.iter().filter(|r| r.markers_unnamed > 0).map(|r| (who(r), r.markers_unnamed)).collect(),
        nvtx_note: no_markers_note(ranks.iter().filter_map(|r| r.doors.as_ref())),
    }
}

/// How the summary names a log: by rank, or by file when it has none.
fn who(row: &RankRow) -> String {
    if row.rank >= 0 {
        format!("rank {}", row.rank)
    } else {
        let name = Path::new(&row.file).file_name().map_or(row.file.clone(), |n| n.to_string_lossy().into_owned());
        format!("{name} (pid {})", row.pid)
    }
}

/// Ranks of `0..world_size` with no readable log.
fn missing_ranks(world_size: i32, ranks: &[RankRow]) -> Vec<i32> {
    let found: BTreeSet<i32> = ranks.iter().map(|r| r.rank).collect();
    (0..world_size).filter(|r| !found.contains(r)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::log::records::NcclCall;

    fn sample_call() -> NcclCall {
        NcclCall {
            op: crate::core::log::nccl_op::NcclOp::AllReduce,
            t_enter_ns: 1,
            t_exit_ns: 2,
            comm_id: 1,
            seq: 1,
            count: 1,
            bytes: 4,
            stream: 0,
            tid: 1,
            peer: -1,
            dtype: 7,
            redop: 0,
            result: 0,
            group_depth: 0,
        }
    }

    fn row(rank: i32, world_size: i32, dropped: u64, missing: u64) -> RankRow {
        RankRow {
            file: if rank >= 0 { format!("job/rank-{rank:05}.sflog") } else { "job/pid-9.sflog".into() },
            rank,
            world_size,
            local_rank: 0,
            host: "h".into(),
            pid: 9,
            job_id: "j".into(),
            liveness: Liveness::Live,
            heartbeat_age_s: Some(0.0),
            committed: 0,
            held: 0,
            not_read: 0,
            lost_to_wrap: 0,
            missing,
            invalid_slots: 0,
            dropped,
            markers_unnamed: 0,
            comms: 0,
            schema: 1,
            format_version: 1,
            nccl_version: None,
            clock_source: "monotonic",
            heartbeat_wall: None,
            doors: None,
            snapshot_wall: None,
            evidence: Vec::new(),
            end: None,
            last_heard_wall_ns: 0,
        }
    }

    #[test]
    fn evidence_is_named_in_order_and_bookkeeping_is_none() {
        use crate::core::log::records::{DeviceState, Drops};
        let state = DeviceState {
            t_ns: 1,
            launched: 1,
            completed: 0,
            oldest: None,
            sync_since_ns: 0,
            sync: None,
            changed_ns: Some(1),
            complete_ns: Some(0),
        };
        let drops = Drops { t_ns: 1, dropped_total: 0, ring_capacity: 8, profiler_dropped: 0 };
        assert_eq!(evidence_bit(&RecordBody::Drops(drops)), 0);
        let bits = evidence_bit(&RecordBody::DeviceState(state)) | evidence_bit(&RecordBody::NcclCall(sample_call()));
        assert_eq!(evidence_names(bits), ["host_calls", "device"]);
    }

    #[test]
    fn missing_ranks_are_the_holes_in_the_world() {
        let ranks = [row(0, 4, 0, 0), row(2, 4, 0, 0), row(-1, -1, 0, 0)];
        assert_eq!(missing_ranks(4, &ranks), vec![1, 3]);
        assert_eq!(missing_ranks(1, &ranks[..1]), Vec::<i32>::new());
    }

    #[test]
    fn summary_counts_ranks_drops_and_gaps() {
        let s = summarize(&[row(0, 4, 0, 0), row(1, 4, 17, 0), row(2, 4, 0, 3), row(-1, -1, 0, 0)]);
        assert_eq!((s.world_size, s.ranks_found, s.unranked, s.dropped_total), (Some(4), 3, 1, 17));
        assert!(s.conflicting_world_sizes.is_empty() && s.duplicated_ranks.is_empty());
        let gaps: Vec<_> = s.gaps.iter().map(|g| (g.who.as_str(), g.dropped, g.missing)).collect();
        assert_eq!(gaps, [("rank 1", 17, 0), ("rank 2", 0, 3)]);
    }

    #[test]
    fn logs_of_different_runs_disagree_on_world_size() {
        let s = summarize(&[row(0, 4, 0, 0), row(5, 8, 0, 0), row(5, 8, 0, 0)]);
        assert_eq!((s.world_size, s.conflicting_world_sizes), (Some(8), vec![4, 8]));
        assert_eq!((s.ranks_found, s.duplicated_ranks), (2, vec![(5, 2)]));
    }

    #[test]
    fn unranked_logs_only() {
        let s = summarize(&[row(-1, -1, 0, 0)]);
        assert_eq!((s.world_size, s.ranks_found, s.unranked), (None, 0, 1));
        assert_eq!(who(&row(-1, -1, 0, 0)), "pid-9.sflog (pid 9)");
    }
}
