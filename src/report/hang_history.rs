//! What `sf hang` reads of a log's records: the history ring whole (communicator
//! creations, injections, hang evidence, stuck queue pairs: low-rate, and needed from the
//! job's start), and of the event ring only its newest records, however many it holds.

use std::collections::VecDeque;

use crate::analysis::hang::progress::STEPS_PACED;
use crate::core::log::format::Region;
use crate::core::log::reader::{CommLive, RankLog, ScanStats};
use crate::core::log::records::{
    CommCreated, DeviceState, HangEvidence, Injection, NcclCall, QpStuck, QpWindow, RecordBody, StepVector,
};

use super::hang_profiler::{CallView, Collector};
use super::stacks::StackCollector;

/// Newest `nccl_call` records kept per rank: enough for the analysis (up to 8192
/// collectives for the cadence, 4096 per communicator for mismatches), and a bound on
/// memory for big jobs (80 bytes a call, 640 KiB a rank).
pub const CALLS_KEPT: usize = 8_192;

/// Newest event-ring records read of a ring that wrapped. Calls are most of that ring (a
/// record each; QP and kernel windows, drops and profiler records share it), so four
/// times `CALLS_KEPT` slots hold the newest `CALLS_KEPT` calls unless other kinds were
/// three quarters of the recent records (a log that recorded less is read whole), for
/// half of the reading of a default 65,536-slot ring.
const EVENTS_READ: u64 = 4 * CALLS_KEPT as u64;

/// What a log's records say.
pub(crate) struct History {
    /// The heartbeat read just before the records: every call returned before it is in them.
    pub(super) drained_ns: u64,
    pub(super) calls: Vec<NcclCall>,
    pub(super) created: Vec<CommCreated>,
    pub(super) injections: Vec<Injection>,
    pub(super) hang_evidence: Vec<HangEvidence>,
    /// `qp_stuck` records no later `qp_window` of the same QP shows completions after.
    pub(super) stuck_qps: Vec<QpStuck>,
    pub(super) complete: bool,
    pub(super) newest_drop_ns: Option<u64>,
    /// The newest record the scan saw: more committed later means the rank moved on.
    pub(super) newest_seq: u64,
    /// The profiler's view of each call in flight as the scan began.
    pub(super) profiler: Vec<CallView>,
    /// The newest `device_state` record: the device's oldest unfinished work.
    pub(super) device_state: Option<DeviceState>,
    /// `device_coll` and `device_state` records read: the CUDA door saw the device.
    pub(super) device_records: u64,
    /// The longest a completed NCCL kernel (`device_coll`) waited for the next
    /// `device_state`, which counts it: how far the device evidence trails the device.
    pub(super) evidence_lag_ns: u64,
    /// How often the CUDA door reads CUPTI's buffers (`cupti_status`); 0 when unknown.
    pub(super) flush_ms: u32,
    /// The earliest end of the NCCL kernels read since the last `device_state`.
    pub(super) uncounted_end_ns: Option<u64>,
    /// Kernel names by id (`kernel_name`), to name the unfinished kernel.
    pub(super) kernel_names: Vec<(u32, String)>,
    /// The newest complete step's parts, to place the unfinished kernel in a stage.
    pub(super) newest_step: Vec<StepVector>,
    /// The newest complete steps' (step, wall time), at most `progress::STEPS_PACED`.
    pub(super) recent_steps: VecDeque<(u64, u64)>,
    /// The newest Python stack sample.
    pub(super) stacks: StackCollector,
}

impl History {
    /// How far the device evidence may trail the device: the longest lag seen, and never
    /// less than two of the door's buffer reads. Early in a job few kernels were counted
    /// yet, and the lag seen may be far below what the next read brings (a kernel that
    /// completed just after a read waits a whole period, and the collector's round that
    /// writes the state may come one more late on a loaded host; the kernel windows
    /// allow the same two periods).
    ///
    /// A state complete as of a forced flush (`complete_ns`) trails the device by that
    /// flush's delay alone: the collector forces it two buffer reads into a host's wait.
    pub(super) fn evidence_lag_ns(&self) -> u64 {
        let two_reads_ns = 2 * u64::from(self.flush_ms) * 1_000_000;
        match self.device_state.and_then(|s| s.complete_ns) {
            Some(_) => two_reads_ns,
            None => self.evidence_lag_ns.max(two_reads_ns),
        }
    }

    /// Streams the log's records (never all of them at once): the newest `CALLS_KEPT`
    /// calls, every low-rate record, and the newest window of each QP; and what NCCL's
    /// profiler saw of the calls in flight. At most `budget` event records are read (the
    /// log's share of `SF_READ_BUDGET`): past 512 default logs a job's calls are kept
    /// in proportion, a quarter of that budget a rank.
    pub(super) fn of(log: &RankLog, budget: u64) -> History {
        let live = log.live();
        let drained_ns = live.heartbeat_mono_ns;
        let in_flight = log.comms();
        let events_read = EVENTS_READ.min(budget);
        let calls_kept = CALLS_KEPT.min((budget / 4) as usize).max(1);
        let two_rings = log.header.history_slot_count > 0;
        // A ring that has not wrapped is read whole (at most its slot count): the
        // profiler's view counts each function's calls from the first.
        let wrapped = live.committed > u64::from(log.header.slot_count);
        let read_events = |keep: u64| {
            let mut kept = Kept::new(drained_ns, !wrapped, calls_kept);
            let stats = if two_rings {
                log.scan_newest(Region::Events, keep, |record| kept.push(record.body))
            } else {
                // A format 1 log keeps every kind in its one ring: read whole.
                log.scan(|record| kept.push(record.body))
            };
            (kept, stats)
        };
        let (mut kept, mut stats) = read_events(if wrapped { events_read } else { budget });
        if kept.calls_read < events_read / 4 && stats.not_read > 0 && budget > events_read {
            // Other kinds crowded the calls out of the newest records: read what the
            // budget allows (all of them up to 512 default logs).
            (kept, stats) = read_events(budget);
        }
        if two_rings {
            let history = log.scan_region(Region::History, |record| kept.push(record.body));
            stats = ScanStats::of_both(stats, history);
        }
        if stats.not_read > 0 && kept.history.stuck_qps.iter().any(|q| !kept.dismissed(q)) {
            // A QP that completed work after it was reported stuck shows it in its newest
            // window; one with no window among the records read (gone quiet since) may
            // have shown it before them.
            log.scan_region(Region::Events, |record| {
                if let RecordBody::QpWindow(w) = record.body {
                    kept.window(w);
                }
            });
        }
        // A ring that wrapped lost the oldest calls: per-function ordinals cannot be counted.
        let whole = stats.missing == 0 && stats.lost_to_wrap == 0 && stats.not_read == 0;
        kept.finish(stats.missing == 0, stats.last_seq, whole.then_some(&in_flight[..]))
    }

    /// From the records of a log (`sf exporter` keeps the ones this reads between its
    /// passes): its newest calls, oldest first, and its other records; `drained_ns` is
    /// the heartbeat read before them, `complete` whether none is missing between the
    /// oldest and `newest_seq`. The calls are taken as they are, not copied again.
    pub(crate) fn from_records(
        drained_ns: u64,
        calls: Vec<NcclCall>,
        others: impl IntoIterator<Item = RecordBody>,
        complete: bool,
        newest_seq: u64,
    ) -> History {
        let mut kept = Kept::new(drained_ns, false, CALLS_KEPT);
        others.into_iter().for_each(|body| kept.push(body));
        kept.calls = calls.into();
        kept.finish(complete, newest_seq, None)
    }
}

/// A `History` being gathered record by record, in bounded memory.
struct Kept {
    history: History,
    /// The newest `calls_kept` calls, and how many were read.
    calls: VecDeque<NcclCall>,
    calls_kept: usize,
    calls_read: u64,
    /// The newest window of each QP: counters are cumulative, so it says what all the
    /// later ones would.
    windows: Vec<QpWindow>,
    /// The profiler's records and every call, for the view of the calls in flight: as
    /// many as the log holds while it has not wrapped (the only case the view is made).
    profiler: Option<Collector>,
}

impl Kept {
    fn new(drained_ns: u64, profiler: bool, calls_kept: usize) -> Kept {
        let history = History {
            drained_ns,
            calls: Vec::new(),
            created: Vec::new(),
            injections: Vec::new(),
            hang_evidence: Vec::new(),
            stuck_qps: Vec::new(),
            complete: true,
            newest_drop_ns: None,
            newest_seq: 0,
            profiler: Vec::new(),
            device_state: None,
            device_records: 0,
            evidence_lag_ns: 0,
            flush_ms: 0,
            uncounted_end_ns: None,
            kernel_names: Vec::new(),
            newest_step: Vec::new(),
            recent_steps: VecDeque::new(),
            stacks: StackCollector::default(),
        };
        Kept {
            history,
            calls: VecDeque::new(),
            calls_kept,
            calls_read: 0,
            windows: Vec::new(),
            profiler: profiler.then(Collector::default),
        }
    }

    fn push(&mut self, body: RecordBody) {
        if let Some(profiler) = &mut self.profiler {
            profiler.see(&body);
        }
        let history = &mut self.history;
        match body {
            RecordBody::QpStuck(q) => history.stuck_qps.push(q),
            RecordBody::QpWindow(w) => self.window(w),
            RecordBody::NcclCall(c) => {
                if self.calls.len() == self.calls_kept {
                    self.calls.pop_front();
                }
                self.calls.push_back(c);
                self.calls_read += 1;
            }
            RecordBody::CommCreated(c) => history.created.push(c),
            RecordBody::Injection(i) => history.injections.push(i),
            RecordBody::HangEvidence(h) => history.hang_evidence.push(h),
            RecordBody::Drops(d) => history.newest_drop_ns = Some(d.t_ns),
            RecordBody::CuptiStatus(s) => history.flush_ms = s.flush_ms,
            RecordBody::DeviceState(d) => {
                history.device_records += 1;
                if let Some(end_ns) = history.uncounted_end_ns.take() {
                    history.evidence_lag_ns = history.evidence_lag_ns.max(d.t_ns.saturating_sub(end_ns));
                }
                if history.device_state.is_none_or(|kept| kept.t_ns <= d.t_ns) {
                    history.device_state = Some(d);
                }
            }
            RecordBody::DeviceColl(c) => {
                history.device_records += 1;
                history.uncounted_end_ns = Some(history.uncounted_end_ns.map_or(c.t_end_ns, |t| t.min(c.t_end_ns)));
            }
            RecordBody::KernelName(k) => history.kernel_names.push((k.name_id, k.name())),
            RecordBody::StepVector(v) => {
                if v.part == 0 {
                    if history.recent_steps.len() == STEPS_PACED {
                        history.recent_steps.pop_front();
                    }
                    history.recent_steps.push_back((v.step, v.wall_ns));
                }
                match history.newest_step.first() {
                    Some(kept) if kept.step > v.step => {}
                    Some(kept) if kept.step == v.step => history.newest_step.push(v),
                    _ => history.newest_step = vec![v],
                }
            }
            RecordBody::StackFrame(_) | RecordBody::StackThread(_) | RecordBody::StackSample(_) => {
                history.stacks.see(&body)
            }
            // Kinds the hang analysis does not use.
            _ => {}
        }
    }

    /// Keeps `w` if it is its QP's newest window with completions.
    fn window(&mut self, w: QpWindow) {
        if w.completed == 0 {
            return;
        }
        let key = |x: &QpWindow| (x.source, x.device, x.qp_num);
        match self.windows.iter_mut().find(|k| key(k) == key(&w)) {
            Some(kept) if kept.t_ns < w.t_ns => *kept = w,
            Some(_) => {}
            None => self.windows.push(w),
        }
    }

    /// A later window of the same QP shows completions after it was reported stuck.
    fn dismissed(&self, q: &QpStuck) -> bool {
        let same = |w: &QpWindow| (q.source, q.device, q.qp_num) == (w.source, w.device, w.qp_num);
        self.windows.iter().any(|w| same(w) && w.t_ns > q.t_ns && w.completed > q.completed)
    }

    /// The history; with `in_flight` (the log's communicator table, for a log that has
    /// not wrapped), the profiler's view of its calls in flight.
    fn finish(self, complete: bool, newest_seq: u64, in_flight: Option<&[CommLive]>) -> History {
        let undismissed: Vec<QpStuck> = self.history.stuck_qps.iter().filter(|q| !self.dismissed(q)).copied().collect();
        let Kept { mut history, calls, profiler, .. } = self;
        history.calls = calls.into();
        history.stuck_qps = undismissed;
        history.complete = complete;
        history.newest_seq = newest_seq;
        if let (Some(profiler), Some(in_flight)) = (profiler, in_flight) {
            history.profiler = profiler.views(&history.created, in_flight);
        }
        // Kept for the whole run: not a growing deque's room.
        history.calls.shrink_to_fit();
        history
    }
}

/// Whether the hang analysis reads records of this kind: what a long-running reader keeps.
pub(crate) fn hang_reads(kind: u16) -> bool {
    use crate::core::log::records::kind::*;
    matches!(
        kind,
        QP_STUCK
            | QP_WINDOW
            | NCCL_CALL
            | COMM_CREATED
            | INJECTION
            | HANG_EVIDENCE
            | DROPS
            | DEVICE_STATE
            | KERNEL_NAME
    )
}

#[cfg(test)]
mod tests {
    use crate::core::log::format::{self, header};
    use crate::core::log::records_net::WrSource;

    use super::super::test_logs::{call, new_log};
    use super::*;

    fn window(qp_num: u32, t_ns: u64, completed: u64) -> RecordBody {
        RecordBody::QpWindow(QpWindow {
            t_ns,
            source: WrSource::Verbs,
            device: 0,
            qp_num,
            posted: completed + 1,
            completed,
            in_flight: 1,
            errors: 0,
            bytes_posted: 0,
            bytes_completed: 0,
            latency_n: 0,
            latency_mean_ns: 0,
            latency_max_ns: 0,
            window_bps: 0,
            window_n: 0,
            baseline_bps: 0,
            stuck: false,
            degraded: false,
            table_dropped: 0,
        })
    }

    fn stuck(qp_num: u32, t_ns: u64, completed: u64) -> RecordBody {
        RecordBody::QpStuck(QpStuck {
            t_ns,
            source: WrSource::Verbs,
            device: 0,
            qp_num,
            since_ns: t_ns - 1_000,
            timeout_ns: 1_000,
            posted: completed + 1,
            completed,
            in_flight: 1,
        })
    }

    #[test]
    fn a_qp_that_recovered_before_the_newest_records_stays_dismissed() {
        let (path, mut writer) = new_log("recovered", 1024);
        // A thousand calls; QP 1 reported stuck, then completing again; QP 2 stuck for
        // good; 500 calls more. The ring wraps, and its newest 64 records hold no window.
        for seq in 1..=1000 {
            writer.append(&call(seq));
        }
        for record in
            [window(1, 10_000, 5), stuck(1, 20_000, 5), window(2, 10_000, 5), stuck(2, 20_000, 5), window(1, 30_000, 6)]
        {
            writer.append(&record);
        }
        for seq in 1001..=1500 {
            writer.append(&call(seq));
        }
        let log = RankLog::open(&path).unwrap();
        let history = History::of(&log, 256);
        let stuck_qps: Vec<u32> = history.stuck_qps.iter().map(|q| q.qp_num).collect();
        assert_eq!(stuck_qps, [2], "QP 1 completed after it was reported stuck");
        let seqs: Vec<u64> = history.calls.iter().map(|c| c.seq).collect();
        assert_eq!(seqs, (1437..=1500).collect::<Vec<u64>>(), "a quarter of the 256 records read: the newest 64 calls");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    /// A format 1 log has one ring for every kind: `hang` and `ls` read it once, whole.
    #[test]
    fn a_format_1_log_is_read_once() {
        let path = {
            let (path, mut writer) = new_log("v1", 1024);
            // Calls only: the writer puts other kinds in the history ring, which format 1 has not.
            for seq in 1..=10 {
                writer.append(&call(seq));
            }
            path
        };
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.truncate(format::history_offset(1024));
        bytes[header::FORMAT_VERSION..header::FORMAT_VERSION + 4].copy_from_slice(&1u32.to_le_bytes());
        bytes[header::HISTORY_SLOT_COUNT..header::HISTORY_OFFSET + 8].fill(0);
        let crc = crc32fast::hash(&bytes[..format::STATIC_HEADER_LEN]);
        bytes[format::STATIC_CRC_OFFSET..format::STATIC_CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let log = RankLog::open(&path).unwrap();
        assert_eq!(log.header.history_slot_count, 0);
        let history = History::of(&log, u64::MAX);
        assert_eq!(history.calls.len(), 10, "each call once");
        let ls = super::super::ls::build(&crate::report::discover::Dirs::new(vec![path.clone()])).unwrap();
        assert_eq!((ls.ranks[0].held, ls.ranks[0].missing, ls.ranks[0].lost_to_wrap), (10, 0, 0));
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
