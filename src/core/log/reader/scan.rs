//! A ring's records in sequence order: the slots that hold data, read in chunks, each
//! record accepted only whole (two reads that agree, or one for a log that can no longer
//! change, and its CRC).

use std::os::fd::AsRawFd;

use super::{RankLog, Record, RingSpan, ScanStats};
use crate::core::log::format::{self, bytes, WriterState};
use crate::core::log::records::RecordBody;

/// Slots read per `pread`: big enough that a scan is a few dozen calls, small enough that
/// the two buffers stay at half a megabyte whatever the header claims.
const SCAN_CHUNK_SLOTS: usize = 2048;
/// Slots past the published count that a scan still reads: a writer killed between
/// committing a record and publishing the count, or one writing while the scan runs.
const SCAN_SLACK_SLOTS: u64 = SCAN_CHUNK_SLOTS as u64;

impl RankLog {
    /// One ring's scan, of its newest `keep` records (`u64::MAX`: all it holds). A first
    /// pass over the slots finds the newest whole record; the second reads the ring from
    /// the slot after it, which is sequence order. Records committed after the first pass
    /// are left to the next scan (they would come out of order); a record they overwrote
    /// counts as missing. A scan of the newest records reads only their slots: what it
    /// costs follows `keep`, not the ring's size.
    pub(super) fn scan_ring(
        &self,
        ring: RingSpan,
        keep: u64,
        chunks: &mut SlotChunks,
        visit: &mut impl FnMut(Record),
    ) -> ScanStats {
        let slot_count = ring.slot_count as usize;
        let mut word = [0u8; 8];
        self.read_stable(ring.committed_at, &mut word);
        let committed_at_start = u64::from_le_bytes(word);
        // Until the ring wraps, seq s sits in slot s - 1: slots past the count are empty.
        let end = if committed_at_start < slot_count as u64 {
            (committed_at_start + SCAN_SLACK_SLOTS).min(slot_count as u64) as usize
        } else {
            slot_count
        };
        let runs =
            within(&self.data_slots(ring.offset, end), newest_slots(committed_at_start, keep, slot_count as u64));
        let mut stats = ScanStats::default();
        // A log whose writer is gone cannot change under the scan: one read of each chunk
        // is as good as two, and the newest record is found without a CRC per slot (the
        // newest slot that claims a place in the ring, checked whole on its own; the
        // full check only when that one is damaged). Every record handed on below is
        // still CRC-checked: that is what catches a damaged file, not the second read.
        let settled = self.settled();
        stats.last_seq = match settled.then(|| self.newest_published(ring, committed_at_start)).flatten() {
            Some(seq) => seq,
            None => {
                let mut last = 0;
                self.each_slot(ring.offset, &runs, settled, chunks, |i, a, b| {
                    if let Some(Ok((seq, ..))) = whole_slot(i, slot_count, a, b) {
                        last = last.max(seq);
                    }
                });
                last
            }
        };
        let oldest_held = stats.last_seq.saturating_sub(slot_count as u64) + 1;
        // The oldest record this scan hands on: older ones are held, only not read.
        let oldest_kept = oldest_held.max(stats.last_seq.saturating_sub(keep.saturating_sub(1)));
        // A dead writer may have committed a record without publishing the count: the
        // count can trail what the scan saw, never lead it.
        let window_end = committed_at_start.min(stats.last_seq);
        let mut held_in_window = 0;
        // Whether slot `i` is one of the kept records' (every slot, when they fill the ring
        // or there are none to place a window by).
        let (n, kept) = (slot_count as u64, (stats.last_seq + 1).saturating_sub(oldest_kept));
        let first_kept = (oldest_kept - 1) % n;
        let kept_slot = |i: usize| kept == 0 || kept >= n || (i as u64 + n - first_kept) % n < kept;
        let start = (stats.last_seq % slot_count as u64) as usize;
        self.each_slot(ring.offset, &ring_order(&runs, start), settled, chunks, |i, a, b| {
            let (seq, kind, payload) = match whole_slot(i, slot_count, a, b) {
                None => return,
                // Damaged where a record this scan hands on would sit.
                Some(Err(())) => {
                    stats.invalid_slots += u64::from(kept_slot(i));
                    return;
                }
                Some(Ok(whole)) => whole,
            };
            // Newer than the first pass saw, or older than the ring holds (or than kept).
            if seq > stats.last_seq || seq < oldest_kept {
                return;
            }
            held_in_window += u64::from(seq <= window_end);
            match RecordBody::decode(kind, payload) {
                Some(body) => {
                    if stats.valid == 0 {
                        stats.first_seq = seq;
                    }
                    stats.valid += 1;
                    visit(Record { seq, body });
                }
                None => stats.unknown_kind += 1,
            }
        });
        stats.lost_to_wrap = oldest_held.saturating_sub(1);
        stats.not_read = oldest_kept - oldest_held;
        let window = window_end.saturating_add(1).saturating_sub(oldest_kept);
        stats.missing = window.saturating_sub(held_in_window);
        stats
    }

    /// Whether the log can no longer change: its writer exited through `exit()` (the
    /// collector flushed and stopped), or the very process that wrote it is gone (the
    /// header's process stamp, compared only where it is certain). A copy whose writer
    /// still runs elsewhere is read as live: slower, never wrong.
    pub fn settled(&self) -> bool {
        self.header.stamp.writer_settled(self.header.pid, self.live().writer_state == Some(WriterState::Exited))
    }

    /// In a settled log, the sequence number of the ring's newest record, found without
    /// reading the ring: the record the published count names, whole in its slot, and any
    /// the writer committed after it without publishing (a kill between the two), each
    /// whole and next in sequence. `None` when the count names no such record (damaged,
    /// or a count that leads the records): the caller then checks every slot.
    fn newest_published(&self, ring: RingSpan, committed: u64) -> Option<u64> {
        let slot_count = ring.slot_count as u64;
        let mut slot = [0u8; format::SLOT_SIZE];
        let mut whole_at = |seq: u64| {
            let i = ((seq - 1) % slot_count) as usize;
            self.read_zeroed(ring.offset + i * format::SLOT_SIZE, &mut slot);
            matches!(whole_slot(i, slot_count as usize, &slot, &slot), Some(Ok((s, ..))) if s == seq)
        };
        if committed > 0 && !whole_at(committed) {
            return None;
        }
        let mut newest = committed;
        while newest - committed < SCAN_SLACK_SLOTS && whole_at(newest + 1) {
            newest += 1;
        }
        Some(newest)
    }

    /// Reads the slots of `runs` (`[from, to)` slot indexes of the ring at `base`) in
    /// chunks, each chunk twice (once when the log is `settled`), and hands `visit` every
    /// slot's index and its two copies (the one copy twice).
    fn each_slot(
        &self,
        base: usize,
        runs: &[(usize, usize)],
        settled: bool,
        chunks: &mut SlotChunks,
        mut visit: impl FnMut(usize, &[u8], &[u8]),
    ) {
        for &(from, to) in runs {
            for chunk_start in (from..to).step_by(SCAN_CHUNK_SLOTS) {
                let n = SCAN_CHUNK_SLOTS.min(to - chunk_start);
                let at = base + chunk_start * format::SLOT_SIZE;
                let len = n * format::SLOT_SIZE;
                self.read_zeroed(at, &mut chunks.first[..len]);
                let second = if settled {
                    &chunks.first[..len]
                } else {
                    self.read_zeroed(at, &mut chunks.second[..len]);
                    &chunks.second[..len]
                };
                let slots =
                    chunks.first[..len].chunks_exact(format::SLOT_SIZE).zip(second.chunks_exact(format::SLOT_SIZE));
                for (i, (a, b)) in slots.enumerate() {
                    visit(chunk_start + i, a, b);
                }
            }
        }
    }

    /// The runs of slots below `end` of the ring at `base` that hold data, as `[from, to)`
    /// slot indexes: the holes of a sparse file are skipped without reading them. Where
    /// the filesystem cannot tell (`lseek` refuses `SEEK_DATA`), everything counts as data.
    fn data_slots(&self, base: usize, end: usize) -> Vec<(usize, usize)> {
        let base = base as i64;
        let limit = base + (end * format::SLOT_SIZE) as i64;
        let fd = self.file.as_raw_fd();
        let mut runs = Vec::new();
        let mut pos = base;
        while pos < limit {
            // SAFETY: lseek on a descriptor this log owns; reads use pread, which ignores
            // the file offset lseek moves.
            let data = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
            if data < 0 {
                if std::io::Error::last_os_error().raw_os_error() != Some(libc::ENXIO) && runs.is_empty() {
                    runs.push((0, end)); // no SEEK_DATA here: scan it all
                }
                break;
            }
            // SAFETY: as above.
            let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
            let hole = if hole < data { limit } else { hole.min(limit) };
            let slot_of = |offset: i64| ((offset.max(base) - base) as usize) / format::SLOT_SIZE;
            let (from, to) = (slot_of(data), slot_of(hole + format::SLOT_SIZE as i64 - 1).min(end));
            if from < to {
                match runs.last_mut() {
                    Some((_, last_to)) if *last_to >= from => *last_to = (*last_to).max(to),
                    _ => runs.push((from, to)),
                }
            }
            pos = hole.max(pos + 1);
        }
        runs
    }
}

/// The two read buffers of a scan, allocated once per scan.
pub(super) struct SlotChunks {
    first: Vec<u8>,
    second: Vec<u8>,
}

impl SlotChunks {
    pub(super) fn new() -> SlotChunks {
        SlotChunks {
            first: vec![0u8; SCAN_CHUNK_SLOTS * format::SLOT_SIZE],
            second: vec![0u8; SCAN_CHUNK_SLOTS * format::SLOT_SIZE],
        }
    }
}

/// A whole record's slot: its sequence number, kind and payload.
type WholeSlot<'a> = (u64, u16, &'a [u8]);

/// Slot `i` of `slot_count`, read twice as `a` and `b`: `None` when empty, `Err` when the
/// two copies differ, it sits in the wrong slot or its CRC fails.
fn whole_slot<'a>(i: usize, slot_count: usize, a: &'a [u8], b: &[u8]) -> Option<Result<WholeSlot<'a>, ()>> {
    let seq = bytes::get_u64(a, 0);
    if seq == 0 {
        return None;
    }
    let kind = bytes::get_u16(a, 8);
    let len = (bytes::get_u16(a, 10) as usize).min(format::PAYLOAD_CAPACITY);
    let payload = &a[format::SLOT_HEADER_SIZE..format::SLOT_HEADER_SIZE + len];
    // A settled log's one read is handed on as both copies: nothing to compare.
    let whole = (std::ptr::eq(a, b) || a == b)
        && (seq - 1) % slot_count as u64 == i as u64
        && bytes::get_u32(a, 12) == format::record_crc(seq, kind, payload);
    Some(if whole { Ok((seq, kind, payload)) } else { Err(()) })
}

/// The slots that may hold the newest `keep` records of a ring of `slot_count` slots whose
/// count said `committed`, and the slack after it, as `[from, to)` slot ranges; `None`
/// when that is every slot.
fn newest_slots(committed: u64, keep: u64, slot_count: u64) -> Option<[(usize, usize); 2]> {
    let span = keep.saturating_add(SCAN_SLACK_SLOTS);
    if span >= slot_count {
        return None;
    }
    // Seq s sits in slot (s - 1) % n: the first is the slot of seq committed - keep + 1
    // (wrapping below zero is the same slot arithmetic modulo n).
    let first = (committed + slot_count - keep % slot_count) % slot_count;
    let last = first + span;
    Some(if last <= slot_count {
        [(first as usize, last as usize), (0, 0)]
    } else {
        [(first as usize, slot_count as usize), (0, (last - slot_count) as usize)]
    })
}

/// `runs` (sorted slot ranges) cut to the ranges of `keep` (all of them when `None`),
/// still sorted.
fn within(runs: &[(usize, usize)], keep: Option<[(usize, usize); 2]>) -> Vec<(usize, usize)> {
    let Some(keep) = keep else { return runs.to_vec() };
    let mut cut: Vec<(usize, usize)> = runs
        .iter()
        .flat_map(|&(from, to)| keep.iter().map(move |&(k_from, k_to)| (from.max(k_from), to.min(k_to))))
        .filter(|(from, to)| from < to)
        .collect();
    cut.sort_unstable();
    cut
}

/// `runs` (sorted slot ranges) reordered to start at slot `start` and wrap around, so a
/// scan from there meets the records in sequence order.
fn ring_order(runs: &[(usize, usize)], start: usize) -> Vec<(usize, usize)> {
    let after = runs.iter().filter(|&&(_, to)| to > start).map(|&(from, to)| (from.max(start), to));
    let before = runs.iter().filter(|&&(from, _)| from < start).map(|&(from, to)| (from, to.min(start)));
    after.chain(before).collect()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;
    use std::path::Path;

    use super::*;
    use crate::core::log::format::{live, Region};
    use crate::core::log::synth::SynthJob;

    /// Every record of a scan of `path` and its counts, and whether the log read as settled.
    fn scanned(path: &Path) -> (bool, Vec<Record>, String) {
        let log = RankLog::open(path).unwrap();
        let (records, stats) = log.records();
        (log.settled(), records, format!("{stats:?}"))
    }

    #[test]
    fn a_settled_log_scans_as_a_live_one_whole_or_damaged() {
        let dir = std::env::temp_dir().join(format!("sf-scan-settled-{}", std::process::id()));
        // 40 steps of 30 calls in 1024 event slots: the ring wraps.
        let job = SynthJob {
            job_id: "settled".into(),
            world: 1,
            ranks_per_host: 1,
            steps: 40,
            calls_per_step: 30,
            slot_count: 1024,
            slow_rank: None,
            stall_us: 0,
        };
        let written = job.write(&dir, 0..1).unwrap().remove(0);
        let log = RankLog::open(&written).unwrap();
        let events = *log.rings().iter().find(|r| r.region == Region::Events).unwrap();
        let newest = log.live().committed;
        let slot_at =
            |seq: u64| events.offset + ((seq - 1) % u64::from(events.slot_count)) as usize * format::SLOT_SIZE;
        // Nothing damaged; the newest record's payload; an older one's; the newest slot's
        // sequence number made the largest of all, in its own place, with no CRC to match
        // (the settled scan's candidate, refused, and the full check runs).
        let forged = (newest + 10 * u64::from(events.slot_count)).to_le_bytes().to_vec();
        let damages = [
            None,
            Some((slot_at(newest) + format::SLOT_HEADER_SIZE, vec![0xff])),
            Some((slot_at(newest - 500) + 20, vec![0x55])),
            Some((slot_at(newest), forged)),
        ];
        for (i, damage) in damages.into_iter().enumerate() {
            let settled = dir.join(format!("settled-{i}.sflog"));
            let live = dir.join(format!("live-{i}.sflog"));
            for path in [&settled, &live] {
                std::fs::copy(&written, path).unwrap();
                let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
                if let Some((at, bytes)) = &damage {
                    file.write_all_at(bytes, *at as u64).unwrap();
                }
                if path == &live {
                    file.write_all_at(&(WriterState::Running as u64).to_le_bytes(), live::WRITER_STATE as u64).unwrap();
                }
            }
            let (settled, live) = (scanned(&settled), scanned(&live));
            assert!(settled.0 && !live.0, "damage {i}: the copy with a running writer reads as live");
            assert_eq!(settled.1, live.1, "damage {i}: the same records");
            assert_eq!(settled.2, live.2, "damage {i}: the same counts");
            assert_eq!(
                settled.2.split("history").next().unwrap().contains("invalid_slots: 0,"),
                damage.is_none(),
                "damage {i}: {}",
                settled.2
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_scan_of_the_newest_records_is_the_tail_of_the_whole_scan() {
        let dir = std::env::temp_dir().join(format!("sf-scan-newest-{}", std::process::id()));
        // 1024 event slots: 40 steps of 30 calls wrap, 10 steps of 30 do not.
        let job = |steps| SynthJob {
            job_id: format!("newest-{steps}"),
            world: 1,
            ranks_per_host: 1,
            steps,
            calls_per_step: 30,
            slot_count: 1024,
            slow_rank: None,
            stall_us: 0,
        };
        for steps in [10, 40] {
            let written = job(steps).write(&dir, 0..1).unwrap().remove(0);
            let live = dir.join(format!("live-{steps}.sflog"));
            std::fs::copy(&written, &live).unwrap();
            let file = std::fs::OpenOptions::new().write(true).open(&live).unwrap();
            file.write_all_at(&(WriterState::Running as u64).to_le_bytes(), live::WRITER_STATE as u64).unwrap();
            for path in [&written, &live] {
                let log = RankLog::open(path).unwrap();
                let mut all = Vec::new();
                let whole = log.scan_region(Region::Events, |r| all.push(r));
                assert_eq!((whole.not_read, whole.missing), (0, 0));
                for keep in [1, 5, 300, 1023, 1024, 5000, u64::MAX] {
                    let mut newest = Vec::new();
                    let stats = log.scan_newest(Region::Events, keep, |r| newest.push(r));
                    let tail = &all[all.len().saturating_sub(keep.min(all.len() as u64) as usize)..];
                    assert_eq!(newest, tail, "{steps} steps, keep {keep}");
                    assert_eq!(stats.valid, tail.len() as u64);
                    assert_eq!(
                        (stats.last_seq, stats.lost_to_wrap, stats.missing),
                        (whole.last_seq, whole.lost_to_wrap, 0)
                    );
                    assert_eq!(stats.not_read, whole.valid - stats.valid, "{steps} steps, keep {keep}");
                }
            }
        }
        // A damaged record inside the newest counts there; one older than them is not read.
        let written = job(40).write(&dir, 0..1).unwrap().remove(0);
        let log = RankLog::open(&written).unwrap();
        let events = *log.rings().iter().find(|r| r.region == Region::Events).unwrap();
        let newest = log.live().committed;
        let slot_at =
            |seq: u64| events.offset + ((seq - 1) % u64::from(events.slot_count)) as usize * format::SLOT_SIZE;
        let file = std::fs::OpenOptions::new().write(true).open(&written).unwrap();
        for seq in [newest - 3, newest - 500] {
            file.write_all_at(&[0x55], (slot_at(seq) + 20) as u64).unwrap();
        }
        let stats = log.scan_newest(Region::Events, 10, |_| {});
        assert_eq!((stats.valid, stats.missing, stats.invalid_slots, stats.not_read), (9, 1, 1, 1014));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
