//! The records a log committed after a given one, read from their slots alone: what a
//! long-running reader (`sf exporter`) needs on each pass, at a cost proportional to the
//! records new since the last pass rather than to the log's size.
//!
//! Each ring of the log (history and events) numbers its own records, and record `s` of a
//! ring sits in its slot `(s - 1) % slot_count`, so the new records are one or two runs
//! of slots. Each slot is read twice and taken only when both reads agree, it holds the
//! sequence number expected there and its CRC matches: a slot already overwritten by a
//! newer lap counts as lost, one still being written ends the pass (the next pass reads it).

use std::fs::File;
use std::io;

use super::format::{self, bytes};
use super::pread::read_zeroed;
use super::reader::{Record, RingSpan};
use super::records::RecordBody;

/// Slots read per `pread`.
const CHUNK_SLOTS: u64 = 512;

/// What a pass read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TailStats {
    /// The newest sequence number read or passed over: the next pass starts after it.
    pub last_seq: u64,
    /// Records committed since the previous pass that were overwritten before this one
    /// could read them (the log wrapped past them), or torn.
    pub lost: u64,
}

/// Hands `visit` every whole record of `ring` with a sequence number in
/// `(after_seq, committed]` and a kind `wanted` takes, oldest first, from the log open as
/// `file`. `committed` is the ring's live count, read by the caller just before. A record
/// of a kind not wanted is passed over unchecked and undecoded (most of a busy job's
/// events are of kinds a reader such as the exporter does not use). A `settled` log
/// (`RankLog::settled`: its writer can no longer change it) is read once, not twice.
pub fn read_after(
    file: &File,
    ring: &RingSpan,
    after_seq: u64,
    committed: u64,
    settled: bool,
    wanted: impl Fn(u16) -> bool,
    mut visit: impl FnMut(Record),
) -> io::Result<TailStats> {
    let n = u64::from(ring.slot_count.max(1));
    let mut stats = TailStats { last_seq: after_seq, lost: 0 };
    if committed <= after_seq {
        return Ok(stats);
    }
    // Only the newest `n` records can still be in the ring.
    let first = (after_seq + 1).max(committed.saturating_sub(n) + 1);
    stats.lost += first - (after_seq + 1);
    let mut a = vec![0u8; (CHUNK_SLOTS as usize) * format::SLOT_SIZE];
    let mut b = if settled { Vec::new() } else { vec![0u8; a.len()] };
    let mut seq = first;
    while seq <= committed {
        let slot = (seq - 1) % n;
        // A run of slots up to the end of the ring, the chunk or the newest record.
        let run = CHUNK_SLOTS.min(n - slot).min(committed - seq + 1);
        let len = run as usize * format::SLOT_SIZE;
        let at = (ring.offset + slot as usize * format::SLOT_SIZE) as u64;
        read_zeroed(file, at, &mut a[..len])?;
        let second = if settled {
            &a[..len]
        } else {
            read_zeroed(file, at, &mut b[..len])?;
            &b[..len]
        };
        for (i, (x, y)) in
            a[..len].chunks_exact(format::SLOT_SIZE).zip(second.chunks_exact(format::SLOT_SIZE)).enumerate()
        {
            let expected = seq + i as u64;
            let held = bytes::get_u64(x, 0);
            if held < expected || (!settled && x != y) {
                // Not yet written (a writer killed between counting and committing, or
                // one mid-write): the next pass reads it.
                return Ok(stats);
            }
            stats.last_seq = expected;
            if held != expected {
                // Overwritten by a newer lap: whatever its kind was, it is gone.
                stats.lost += 1;
                continue;
            }
            let kind = bytes::get_u16(x, 8);
            if !wanted(kind) {
                continue;
            }
            let plen = (bytes::get_u16(x, 10) as usize).min(format::PAYLOAD_CAPACITY);
            let payload = &x[format::SLOT_HEADER_SIZE..format::SLOT_HEADER_SIZE + plen];
            let whole = bytes::get_u32(x, 12) == format::record_crc(held, kind, payload);
            match RecordBody::decode(kind, payload).filter(|_| whole) {
                Some(body) => visit(Record { seq: expected, body }),
                // Torn, or a kind this reader does not know.
                None => stats.lost += 1,
            }
        }
        seq += run;
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::log::format::Region;
    use crate::core::log::reader::RankLog;
    use crate::core::log::records::{kind, CommCreated, CommOrigin, Drops};

    #[test]
    fn reads_only_what_is_new_and_counts_what_wrapped_away() {
        let dir = std::env::temp_dir().join(format!("sf-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rank-00000.sflog");
        let mut writer = crate::core::log::roundtrip_tests::small_writer(&path, 0);
        let drop_record =
            |t| RecordBody::Drops(Drops { t_ns: t, dropped_total: t, ring_capacity: 16, profiler_dropped: 0 });
        for t in 1..=10 {
            writer.append(&drop_record(t));
        }
        let file = File::open(&path).unwrap();
        let rings = RankLog::open(&path).unwrap().rings();
        let events = rings.iter().find(|r| r.region == Region::Events).unwrap();
        let mut seen = Vec::new();
        let stats = read_after(&file, events, 0, 10, false, |_| true, |r| seen.push(r.seq)).unwrap();
        assert_eq!((seen.len(), stats), (10, TailStats { last_seq: 10, lost: 0 }));
        for t in 11..=1500 {
            writer.append(&drop_record(t));
        }
        seen.clear();
        let stats = read_after(&file, events, 10, 1500, false, |_| true, |r| seen.push(r.seq)).unwrap();
        assert_eq!(seen.first(), Some(&477), "the oldest record the ring still holds");
        assert_eq!((seen.len(), stats), (1024, TailStats { last_seq: 1500, lost: 466 }));
        // Kinds not wanted are passed over: the pass still ends at the newest.
        let stats = read_after(&file, events, 10, 1500, true, |k| k != kind::DROPS, |_| panic!("not wanted")).unwrap();
        assert_eq!(stats, TailStats { last_seq: 1500, lost: 466 });
        // Counted but not yet committed: the pass stops before it.
        let stats = read_after(&file, events, 1500, 1501, false, |_| true, |_| panic!("nothing whole")).unwrap();
        assert_eq!(stats, TailStats { last_seq: 1500, lost: 0 });
        // A count read before the ring lapped again: the slots of records 477 and 478 now
        // hold 1501 and 1502, lost whatever kind the pass wants.
        writer.append(&drop_record(1501));
        writer.append(&drop_record(1502));
        let stats = read_after(&file, events, 476, 1500, true, |k| k != kind::DROPS, |_| panic!("not wanted")).unwrap();
        assert_eq!(stats, TailStats { last_seq: 1500, lost: 2 });
        // A communicator creation goes to the history ring, numbered on its own.
        writer.append(&RecordBody::CommCreated(CommCreated {
            t_ns: 1,
            comm_id: 9,
            parent_id: 0,
            rank: 0,
            nranks: 1,
            global_rank: 0,
            color: 0,
            key: 0,
            origin: CommOrigin::InitRank,
        }));
        let history = rings.iter().find(|r| r.region == Region::History).unwrap();
        let mut kinds = Vec::new();
        let stats = read_after(&file, history, 0, 1, true, |_| true, |r| kinds.push((r.seq, r.body.kind()))).unwrap();
        assert_eq!(kinds, [(1, kind::COMM_CREATED)]);
        assert_eq!(stats, TailStats { last_seq: 1, lost: 0 });
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
