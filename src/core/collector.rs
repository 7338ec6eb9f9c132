//! The collector thread: drains the hot path's ring into the rank log, converts raw ticks
//! to nanoseconds, keeps the heartbeat fresh, and writes the cumulative drop count into
//! the data stream whenever it changes.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::clock::{monotonic_ns, now_ticks, wall_ns};
use super::log::format::live;
use super::log::records::{Drops, RecordBody};
use super::log::writer::LogWriter;
use super::runtime::Runtime;

pub struct Collector {
    writer: LogWriter,
    drops_written: u64,
}

impl Collector {
    pub fn new(writer: LogWriter) -> Collector {
        Collector { writer, drops_written: 0 }
    }

    /// One round: everything in the ring, then the drop count and the heartbeat.
    /// Returns how many events it wrote.
    pub fn round(&mut self, rt: &Runtime) -> usize {
        let mut written = 0;
        while let Some(event) = rt.ring.pop() {
            self.writer.append(&event.to_nanoseconds(&rt.calibration));
            written += 1;
        }
        let dropped = rt.ring.dropped();
        if dropped != self.drops_written {
            self.writer.set(live::DROPPED_EVENTS, dropped);
            let drops = RecordBody::Drops(Drops {
                t_ns: now_ticks(),
                dropped_total: dropped,
                ring_capacity: rt.ring.capacity() as u64,
            });
            self.writer.append(&drops.to_nanoseconds(&rt.calibration));
            self.drops_written = dropped;
        }
        rt.calibration.refine();
        self.writer.heartbeat(monotonic_ns(), wall_ns(), rt.calibration.ticks_per_sec());
        written
    }

    pub fn finish(&mut self, rt: &Runtime, state: u64) {
        self.round(rt);
        self.writer.set(live::WRITER_STATE, state);
    }
}

/// Runs rounds until the runtime stops being active. A round that found the ring more
/// than a quarter full comes back at once; otherwise it waits one heartbeat period.
pub fn run(rt: &'static Runtime) {
    let period = Duration::from_millis(rt.config.heartbeat_ms);
    let busy = rt.ring.capacity() / 4;
    while super::runtime::is_active() {
        let written = match rt.collector.lock() {
            Ok(mut collector) => collector.round(rt),
            Err(_) => return,
        };
        if written < busy {
            std::thread::sleep(period);
        }
        if rt.nccl_version.load(Ordering::Relaxed) == 0 {
            rt.probe_nccl_version();
        }
    }
}
