//! The collector thread: drains the hot path's ring into the rank log, converts raw ticks
//! to nanoseconds, keeps the heartbeat fresh, and writes the cumulative drop count into
//! the data stream whenever it changes.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::core::comms::early;
use crate::core::kernels::cupti::{self, CuptiDrain};
use crate::core::kernels::device_tracker::DeviceTracker;
use crate::core::kernels::kernel_windows::KernelWindows;
use crate::core::live::event::{DeviceEvent, Event};
use crate::core::live::runtime::{self, Runtime};
use crate::core::log::format::{live, WriterState, COMM_SLOTS};
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::records::{Drops, HangEvidence, RecordBody};
use crate::core::log::writer::LogWriter;
use crate::core::net::port_counters::PortSampler;
use crate::core::net::qp_monitor::{QpMonitor, QpSettings};
use crate::core::record::clock::{monotonic_ns, now_ticks, wall_ns};
use crate::core::record::notice::say;
use crate::core::runtime::config::{Config, TestFault};
use crate::core::runtime::process_end;
use crate::core::stacks::{Seen, StackWatch};
use crate::core::steps::step_assembly::StepAssembly;

pub struct Collector {
    writer: LogWriter,
    /// The settings the runtime started with; the families get their part of it.
    config: &'static Config,
    drops_written: u64,
    /// (comm id, sequence) of the last hang reported per communicator slot, so each
    /// stuck call is reported once: fixed size, like everything the collector keeps.
    hang_reported: [(u64, u64); COMM_SLOTS],
    steps: StepAssembly,
    /// Wall times of the last completed steps, for the hang threshold.
    recent_steps: StepTimes,
    /// GPU kernel summaries per window and per step (fed by the CUDA door's drain).
    pub kernels: KernelWindows,
    /// The CUDA door's buffers: parsed here, fed to `kernels` and `device`.
    cupti: CuptiDrain,
    /// Launches, synchronizations and completions: device_coll, host_sync, device_state.
    device: DeviceTracker,
    /// RDMA work requests per QP: stuck and degraded checks, periodic samples.
    qps: QpMonitor,
    /// RDMA port counters from sysfs (SF_IB_SAMPLE_MS).
    ports: PortSampler,
    /// When `device_overdue` last asked for a forced CUPTI flush.
    last_forced_flush_ns: u64,
    /// Python stacks when the rank stops advancing or `sf hang --stacks` asks.
    stacks: StackWatch,
}

impl Collector {
    pub fn new(writer: LogWriter, config: &'static Config) -> Collector {
        Collector {
            writer,
            config,
            drops_written: 0,
            hang_reported: [(0, 0); COMM_SLOTS],
            steps: StepAssembly::default(),
            recent_steps: StepTimes::default(),
            kernels: KernelWindows::default(),
            cupti: CuptiDrain::default(),
            device: DeviceTracker::default(),
            qps: QpMonitor::default(),
            ports: PortSampler::default(),
            last_forced_flush_ns: 0,
            stacks: StackWatch::default(),
        }
    }

    /// One round: everything in the ring, then the drop count and the heartbeat.
    /// Returns how many events it wrote.
    pub fn round(&mut self, rt: &Runtime) -> usize {
        let mut written = 0;
        // At most one ring's worth a round: producers that keep up with the collector must
        // not starve the heartbeat, the CUPTI drain and the hang watch below.
        while let Some(event) = (written < rt.ring.capacity()).then(|| rt.ring.pop()).flatten() {
            match event {
                Event::Record(record) => self.writer.append(&record.to_nanoseconds(&rt.calibration)),
                Event::Device(event) => {
                    if let DeviceEvent::Launch(launch) = &event {
                        self.kernels.launched(launch.correlation, rt.calibration.to_mono_ns(launch.ticks));
                    }
                    self.device.event(&event, &rt.calibration, cupti::sync_activity())
                }
                Event::Marker(marker) => {
                    let (writer, recent_steps) = (&mut self.writer, &mut self.recent_steps);
                    self.steps.feed(&marker, &rt.calibration, rt.stage_names, |record| {
                        if let RecordBody::StepVector(v) = &record {
                            if v.part == 0 {
                                recent_steps.push(v.wall_ns);
                            }
                        }
                        writer.append(&record)
                    });
                    if let Some(windows) = self.steps.take_closed() {
                        self.kernels.step_closed(windows, &mut |r| self.writer.append(r));
                    }
                }
            }
            written += 1;
        }
        let profiler_dropped = crate::core::net::profiler::dropped();
        let dropped = rt.ring.dropped() + profiler_dropped + early::dropped();
        if dropped != self.drops_written {
            self.writer.set(live::DROPPED_EVENTS, dropped);
            let drops = RecordBody::Drops(Drops {
                t_ns: now_ticks(),
                dropped_total: dropped,
                ring_capacity: rt.ring.capacity() as u64,
                profiler_dropped,
            });
            self.writer.append(&drops.to_nanoseconds(&rt.calibration));
            self.drops_written = dropped;
        }
        let force = self.device_overdue();
        let (kernels, device) = (&mut self.kernels, &mut self.device);
        let config = self.config;
        let forced = self.cupti.round(&config.cupti, &mut self.writer, force, &mut |activity, name| {
            kernels.feed(activity, name);
            device.activity(activity);
        });
        if let Some(t_ns) = forced {
            self.device.complete_at(t_ns);
        }
        self.kernels.round(rt, config.kernel_window_ms, &config.cupti, &mut self.writer);
        self.write_device(false);
        self.qps.round(rt, &self.qp_settings(), &mut self.writer);
        let writer = &mut self.writer;
        self.ports.round(config.ib_sample_ms, &config.ib_sysfs_root, &mut |record| writer.append(record));
        crate::core::net::verbs::write_notes(monotonic_ns(), &mut |record| writer.append(record));
        self.watch_for_hangs(rt);
        self.watch_stacks(rt);
        rt.calibration.refine();
        self.writer.heartbeat(monotonic_ns(), wall_ns(), rt.calibration.ticks_per_sec());
        written
    }

    /// The device tracker's records, after the kernel windows' names.
    fn write_device(&mut self, at_exit: bool) {
        let (kernels, writer) = (&mut self.kernels, &mut self.writer);
        self.device.round(monotonic_ns(), at_exit, &mut |name| kernels.intern_name(name), &mut |r| writer.append(r));
    }

    fn qp_settings(&self) -> QpSettings {
        let c = self.config;
        QpSettings {
            timeout_ms: c.wr_timeout_ms,
            window: c.wr_window,
            degraded: c.wr_degraded,
            sample_ms: c.net_sample_ms,
        }
    }

    /// Whether this round's CUPTI flush must hand over unfinished records too: a host has
    /// waited on its device for longer than two steps, and at least two of the door's
    /// buffer reads (`SF_CUPTI_FLUSH_MS`: the delay `sf hang` allows the device evidence),
    /// and no forced flush came within as long. A healthy step's synchronizations end
    /// sooner, so the unfinished records a forced flush gives up (those never come again)
    /// are few; a device stuck behind a kernel shows its true oldest work a second in.
    fn device_overdue(&mut self) -> bool {
        let now = monotonic_ns();
        let two_reads_ns = 2 * self.config.cupti.flush_ms * 1_000_000;
        let after = self.recent_steps.median_ns().map_or(0, |m| 2 * m).max(two_reads_ns);
        let waited = self.device.host_waiting_since_ns().is_some_and(|since| now.saturating_sub(since) >= after);
        let due = waited && now.saturating_sub(self.last_forced_flush_ns) >= after;
        if due {
            self.last_forced_flush_ns = now;
        }
        due
    }

    /// max(SF_HANG_FACTOR x median step time, SF_HANG_MIN_S); just the minimum until steps
    /// are known.
    fn hang_threshold_ns(&self) -> u64 {
        let floor = self.config.hang_min_s * 1e9;
        let by_steps = self.recent_steps.median_ns().map_or(0.0, |m| m as f64 * self.config.hang_factor);
        floor.max(by_steps) as u64
    }

    /// Writes a `hang_evidence` record, and says so once on stderr, for every call that
    /// has been in flight longer than the threshold. The rank may never return from it,
    /// so this is the evidence that survives whatever happens next.
    fn watch_for_hangs(&mut self, rt: &Runtime) {
        let threshold_ns = self.hang_threshold_ns();
        let now_ns = rt.calibration.to_mono_ns(now_ticks());
        for (index, slot) in rt.comms.live() {
            let since_ticks = slot.inflight_ticks.load(Ordering::Acquire);
            let Some(op) = NcclOp::from_u16(slot.inflight_op.load(Ordering::Relaxed) as u16) else { continue };
            let since_ns = rt.calibration.to_mono_ns(since_ticks);
            if since_ticks == 0 || now_ns.saturating_sub(since_ns) < threshold_ns {
                continue;
            }
            let entered = if op.is_collective() { &slot.coll_entered } else { &slot.p2p_entered };
            let stuck = (slot.comm_id.load(Ordering::Relaxed), entered.load(Ordering::Acquire));
            if self.hang_reported[index] == stuck {
                continue;
            }
            self.hang_reported[index] = stuck;
            let (comm_id, comm_seq) = stuck;
            // Both times are already nanoseconds: written as is, not converted again.
            self.writer.append(&RecordBody::HangEvidence(HangEvidence {
                t_ns: now_ns,
                since_ns,
                comm_id,
                comm_seq,
                op,
                threshold_ns,
            }));
            say(&format!(
                "rank {}: {} #{comm_seq} on communicator {comm_id:#018x} has been in flight for {:.1} s (threshold {:.1} s); hang evidence is in the rank's log",
                rt.global_rank(),
                op.name(),
                (now_ns - since_ns) as f64 / 1e9,
                threshold_ns as f64 / 1e9
            ));
        }
    }

    /// Hands the stack watch what moved since the last round, and publishes the request
    /// it answered once the sample's records are in.
    fn watch_stacks(&mut self, rt: &Runtime) {
        let mut progress = rt.live(live::PROGRESS_TICKS).load(Ordering::Relaxed);
        progress = progress.wrapping_add(rt.live(live::KERNEL_CH_STOPPED).load(Ordering::Relaxed));
        for (_, slot) in rt.comms.live() {
            for counter in [&slot.coll_entered, &slot.coll_returned, &slot.p2p_entered, &slot.p2p_returned] {
                progress = progress.wrapping_add(counter.load(Ordering::Relaxed));
            }
        }
        let seen = Seen {
            now_ns: monotonic_ns(),
            progress,
            step_ns: self.recent_steps.median_ns(),
            request: rt.live(live::STACK_REQUEST).load(Ordering::Acquire),
        };
        let writer = &mut self.writer;
        if let Some(request) = self.stacks.round(&seen, &mut |record| writer.append(record)) {
            writer.set(live::STACK_ANSWERED, request);
        }
    }

    pub fn finish(&mut self, rt: &Runtime, state: u64) {
        self.cupti.flush_at_exit();
        self.round(rt);
        self.kernels.finish(&mut self.writer);
        self.write_device(true);
        self.qps.sample(rt, &self.qp_settings(), &mut self.writer);
        if let Some(end) = process_end::stored(rt) {
            self.writer.append(&RecordBody::ProcessEnd(end));
        }
        self.writer.set(live::WRITER_STATE, state);
    }
}

/// Runs rounds until the runtime stops being active. A round that found the ring more
/// than a quarter full comes back at once; otherwise it waits one heartbeat period. At
/// the exit handler's request it makes the last round and says it is done.
///
/// A panic in a round is caught: the header records it (`collector_panicked`), recording
/// stops, and the job runs on.
pub fn run(rt: &'static Runtime, mut collector: Collector) {
    let period = Duration::from_millis(collector.config.heartbeat_ms);
    let busy = rt.ring.capacity() / 4;
    quiet_panics_in_collector();
    let environment = crate::core::record::doors::environment();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // A process that is not the runtime's owner must not write its log (see owner()).
        while runtime::is_active() && rt.in_owner_process() {
            match collector.config.test_fault {
                Some(TestFault::CollectorPanic) => panic!("SF_TEST_FAULT=collector-panic"),
                Some(TestFault::CollectorStall) => loop {
                    std::thread::sleep(Duration::from_secs(3600));
                },
                _ => {}
            }
            rt.live(crate::core::log::format::live::DOORS)
                .store(crate::core::record::doors::published(environment), Ordering::Relaxed);
            if rt.exit.requested.load(Ordering::Acquire) {
                collector.finish(rt, WriterState::Exited as u64);
                return;
            }
            if collector.round(rt) < busy {
                // Woken early by the exit handler (spurious wake-ups only cost a round).
                std::thread::park_timeout(period);
            }
            if rt.nccl_version.load(Ordering::Relaxed) == 0 {
                rt.probe_nccl_version();
            }
        }
    }));
    if let Err(payload) = outcome {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let what = crate::core::record::notice::clip(what.as_bytes()).0;
        runtime::stop(
            WriterState::CollectorPanicked,
            &format!("the collector thread panicked ({what}); recorded in the log header"),
        );
    }
    rt.exit.done.store(true, Ordering::Release);
}

/// The library's own panics in this thread are reported by `run` in its one line, not by
/// the default hook's several. The hook is this library's copy of std's, so a Rust host
/// program's own hook is not touched; panics on other threads still reach the old hook.
fn quiet_panics_in_collector() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() != Some(THREAD_NAME) {
            previous(info);
        }
    }));
}

/// The collector thread's name, as `runtime::start` gives it.
pub const THREAD_NAME: &str = "sf-collector";

/// The wall times of the last `WINDOW` steps, in a fixed ring.
struct StepTimes {
    walls_ns: [u64; StepTimes::WINDOW],
    seen: usize,
}

impl Default for StepTimes {
    fn default() -> StepTimes {
        StepTimes { walls_ns: [0; StepTimes::WINDOW], seen: 0 }
    }
}

impl StepTimes {
    const WINDOW: usize = 64;

    fn push(&mut self, wall_ns: u64) {
        self.walls_ns[self.seen % Self::WINDOW] = wall_ns;
        self.seen += 1;
    }

    fn median_ns(&self) -> Option<u64> {
        let mut walls = self.walls_ns;
        let walls = &mut walls[..self.seen.min(Self::WINDOW)];
        if walls.is_empty() {
            return None;
        }
        walls.sort_unstable();
        Some(walls[walls.len() / 2])
    }
}

#[cfg(test)]
mod tests {
    use super::StepTimes;

    #[test]
    fn median_of_the_recent_window() {
        let mut steps = StepTimes::default();
        assert_eq!(steps.median_ns(), None);
        for wall in [5, 1, 9] {
            steps.push(wall);
        }
        assert_eq!(steps.median_ns(), Some(5));
        for _ in 0..StepTimes::WINDOW {
            steps.push(100);
        }
        assert_eq!(steps.median_ns(), Some(100), "old steps age out");
    }
}
