//! A consistent copy of a rank log whose writer may still be running, or be wedged: the
//! header with its live state and communicator and stage-name tables, then every record
//! slot of both rings (history and events) that holds a whole record. A slot caught mid-write (its two reads differ, its CRC
//! fails, it sits in the wrong slot) is left empty in the copy, so the copy never holds a
//! torn record; empty and torn slots are holes, so a sparse log stays sparse.
//!
//! The header is read first and the records after it, as `sf hang` reads a live log's
//! heartbeat before its records: every call that returned before the copied heartbeat is
//! in the copied records. The copy is written under a temporary name and renamed into
//! place, so a reader of the destination sees the old copy or the new one, never half.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::format::{self, bytes};
use super::pread::{read_stable, read_zeroed};
use super::private_dir::PrivateDir;
use super::reader::{RankLog, RingSpan};

/// Slots read per `pread`, as the reader's scan reads them.
const CHUNK_SLOTS: usize = 2048;

/// What a copy holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Whole records copied.
    pub records: u64,
    /// Slots that held something other than a whole record, left empty.
    pub torn_slots: u64,
    /// Bytes written (the header, the tables and the whole records).
    pub bytes: u64,
}

/// Copies `log` to `name` in `dest` (replacing it). `header_read` runs right after the
/// header and its live state were read: the moment the copy shows, for the caller to take
/// its clocks. The copy is read from the file `log` holds open (the one its opener
/// checked) and written as a new file of mode 0600 (a rank log is its job's private data)
/// that `dest.create_new` makes: never through a link planted in `dest`.
pub fn copy_log(log: &RankLog, dest: &PrivateDir, name: &str, header_read: impl FnOnce()) -> io::Result<CopyStats> {
    let src = log.file();
    let rings = log.rings();
    let mut head = vec![0u8; format::records_offset()];
    read_stable(src, 0, &mut head)?;
    header_read();
    let out = dest.create_new(name, 0o600)?;
    let stats = write_copy(src, out.file(), &head, &rings)?;
    out.commit()?;
    Ok(stats)
}

fn write_copy(src: &File, out: &File, head: &[u8], rings: &[RingSpan]) -> io::Result<CopyStats> {
    let end = rings.iter().map(|r| r.offset + r.slot_count as usize * format::SLOT_SIZE).max().unwrap_or(head.len());
    out.set_len(end as u64)?;
    out.write_all_at(head, 0)?;
    let mut stats = CopyStats { bytes: head.len() as u64, ..CopyStats::default() };
    let mut first = vec![0u8; CHUNK_SLOTS * format::SLOT_SIZE];
    let mut second = vec![0u8; CHUNK_SLOTS * format::SLOT_SIZE];
    for ring in rings {
        copy_ring(src, out, ring, (&mut first, &mut second), &mut stats)?;
    }
    Ok(stats)
}

/// Copies the whole records of one ring, chunk by chunk, each chunk read twice.
fn copy_ring(
    src: &File,
    out: &File,
    ring: &RingSpan,
    (first, second): (&mut [u8], &mut [u8]),
    stats: &mut CopyStats,
) -> io::Result<()> {
    let slot_count = ring.slot_count as usize;
    for chunk_start in (0..slot_count).step_by(CHUNK_SLOTS) {
        let n = CHUNK_SLOTS.min(slot_count - chunk_start);
        let at = (ring.offset + chunk_start * format::SLOT_SIZE) as u64;
        let len = n * format::SLOT_SIZE;
        read_zeroed(src, at, &mut first[..len])?;
        if first[..len].iter().all(|&b| b == 0) {
            continue; // a hole, or never written
        }
        read_zeroed(src, at, &mut second[..len])?;
        let slots = first[..len].chunks_exact(format::SLOT_SIZE).zip(second.chunks_exact(format::SLOT_SIZE));
        for (i, (a, b)) in slots.enumerate() {
            if a.iter().all(|&x| x == 0) {
                continue;
            }
            if is_whole(chunk_start + i, slot_count, a, b) {
                out.write_all_at(a, at + (i * format::SLOT_SIZE) as u64)?;
                stats.records += 1;
                stats.bytes += format::SLOT_SIZE as u64;
            } else {
                stats.torn_slots += 1;
            }
        }
    }
    Ok(())
}

/// Slot `i` read twice as `a` and `b` holds one whole, committed record.
fn is_whole(i: usize, slot_count: usize, a: &[u8], b: &[u8]) -> bool {
    let seq = bytes::get_u64(a, 0);
    let len = (bytes::get_u16(a, 10) as usize).min(format::PAYLOAD_CAPACITY);
    let payload = &a[format::SLOT_HEADER_SIZE..format::SLOT_HEADER_SIZE + len];
    seq != 0
        && a == b
        && (seq - 1) % slot_count as u64 == i as u64
        && bytes::get_u32(a, 12) == format::record_crc(seq, bytes::get_u16(a, 8), payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::log::records::{Drops, RecordBody};

    #[test]
    fn a_torn_slot_is_left_out_and_whole_records_are_kept() {
        let dir = std::env::temp_dir().join(format!("sf-copy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rank-00001.sflog");
        let mut writer = crate::core::log::roundtrip_tests::small_writer(&path, 1);
        for t in 1..=3 {
            writer.append(&RecordBody::Drops(Drops {
                t_ns: t,
                dropped_total: t,
                ring_capacity: 16,
                profiler_dropped: 0,
            }));
        }
        // A step vector goes to the history ring: the copy keeps that ring too.
        writer.append(&crate::core::log::roundtrip_tests::step(7));
        // Tear record 2: one payload byte changes after its CRC was computed.
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&[0xff], (format::records_offset() + format::SLOT_SIZE + 20) as u64).unwrap();
        let log = RankLog::open(&path).unwrap();
        let mut called = false;
        let dest = PrivateDir::open_root(&dir, 0o700).unwrap();
        let stats = copy_log(&log, &dest, "copy.sflog", || called = true).unwrap();
        assert!(called);
        assert_eq!((stats.records, stats.torn_slots), (3, 1));
        let copy = RankLog::open(&dir.join("copy.sflog")).unwrap();
        let (records, scan) = copy.records();
        // The history ring's record (its own seq 1) first, then the event ring's.
        assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 1, 3]);
        assert!(matches!(records[0].body, RecordBody::StepVector(ref v) if v.step == 7));
        assert_eq!(scan.invalid_slots, 0, "the copy holds no torn slot");
        assert_eq!(copy.header.global_rank, 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
