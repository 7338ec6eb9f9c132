//! Reads rank logs: after the job, or live while the writer runs, or after it was killed.
//!
//! The file is mapped read-only and every field the writer may change is read with a
//! volatile load; a record is accepted only if its commit word is the same before and
//! after the copy and its CRC matches, so a concurrent or interrupted write yields a
//! counted gap, never a torn record.

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::format::{self, bytes, comm, header, live, WriterState};
use super::records::{hex_u64, RecordBody};
use crate::core::capture::clock::{ticks_to_mono_ns, ClockSource};
use crate::core::capture::doors::Doors;
use crate::core::comms::nccl_op::NcclOp;

#[derive(Debug)]
pub enum ReadError {
    Unreadable { path: PathBuf, error: std::io::Error },
    NotALog { path: PathBuf },
    Truncated { path: PathBuf, expected: u64, actual: u64 },
    UnsupportedVersion { path: PathBuf, found: u32 },
    ForeignEndian { path: PathBuf },
    CorruptHeader { path: PathBuf },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Unreadable { path, error } => {
                write!(f, "{}: cannot read: {error}; check the path and its permissions", path.display())
            }
            ReadError::NotALog { path } => write!(
                f,
                "{}: not a stagefrontier rank log (no SFRKLOG magic); pass a rank-*.sflog file or the job directory holding them",
                path.display()
            ),
            ReadError::Truncated { path, expected, actual } => write!(
                f,
                "{}: truncated: {actual} of {expected} bytes; the file was cut short in copying, copy it again whole",
                path.display()
            ),
            ReadError::UnsupportedVersion { path, found } => write!(
                f,
                "{}: log format version {found}, but this sf reads version {}; use the sf built with the library that wrote it",
                path.display(),
                format::FORMAT_VERSION
            ),
            ReadError::ForeignEndian { path } => write!(
                f,
                "{}: written on a machine of the other byte order; read it on a machine like the one that wrote it",
                path.display()
            ),
            ReadError::CorruptHeader { path } => write!(
                f,
                "{}: header checksum does not match; the file is damaged and cannot be trusted",
                path.display()
            ),
        }
    }
}

impl std::error::Error for ReadError {}

/// The static header: who wrote the log and how to read its clock.
#[derive(Clone, Debug, Serialize)]
pub struct LogHeader {
    pub format_version: u32,
    pub schema: u32,
    pub pid: u32,
    pub global_rank: i32,
    pub world_size: i32,
    pub local_rank: i32,
    pub job_id: String,
    pub host: String,
    pub identity_source: String,
    pub clock_source: &'static str,
    pub base_ticks: u64,
    pub base_mono_ns: u64,
    pub base_wall_ns: u64,
    pub slot_count: u32,
    pub ring_capacity: u32,
}

/// The header fields the writer keeps updating.
#[derive(Clone, Debug, Serialize)]
pub struct LiveState {
    pub committed: u64,
    pub heartbeat_mono_ns: u64,
    pub heartbeat_wall_ns: u64,
    pub dropped_events: u64,
    pub writer_state: Option<WriterState>,
    pub ticks_per_sec: f64,
    pub nccl_version: u64,
    pub comm_table_overflow: u64,
    /// Doors open and injection variables set; `None` for a log of an older library.
    pub doors: Option<Doors>,
}

/// A communicator's live state from the log's table.
#[derive(Clone, Debug, Serialize)]
pub struct CommLive {
    #[serde(serialize_with = "hex_u64")]
    pub comm_id: u64,
    pub rank: i32,
    pub nranks: i32,
    pub coll_entered: u64,
    pub coll_returned: u64,
    pub p2p_entered: u64,
    pub p2p_returned: u64,
    pub inflight: Option<InFlight>,
}

/// The call a communicator is inside right now.
#[derive(Clone, Debug, Serialize)]
pub struct InFlight {
    pub op: Option<NcclOp>,
    /// `CLOCK_MONOTONIC` of the writer's host when the call entered.
    pub since_mono_ns: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Record {
    pub seq: u64,
    #[serde(flatten)]
    pub body: RecordBody,
}

/// What a scan of the record ring found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ScanStats {
    /// Records read whole.
    pub valid: u64,
    /// Oldest sequence number still held.
    pub first_seq: u64,
    /// Newest sequence number seen.
    pub last_seq: u64,
    /// Records older than the ring holds: overwritten by wraparound.
    pub lost_to_wrap: u64,
    /// Sequence numbers the log had committed when this scan began, still within what the
    /// ring holds, with no whole record: a write torn by a kill, or overwritten while this
    /// scan ran. Records committed during the scan are read where the scan still finds
    /// them, and never counted as missing: the scan passed their slots before they existed.
    pub missing: u64,
    /// Slots whose content failed the commit or CRC check.
    pub invalid_slots: u64,
    /// Slots with a valid CRC but a kind this reader does not know.
    pub unknown_kind: u64,
}

pub struct RankLog {
    path: PathBuf,
    map: memmap2::Mmap,
    pub header: LogHeader,
}

impl RankLog {
    pub fn open(path: &Path) -> Result<RankLog, ReadError> {
        let unreadable = |error| ReadError::Unreadable { path: path.to_path_buf(), error };
        let file = File::open(path).map_err(unreadable)?;
        let actual = file.metadata().map_err(unreadable)?.len();
        if actual < 8 {
            return Err(ReadError::NotALog { path: path.to_path_buf() });
        }
        // SAFETY: read-only mapping; the writer may change the file underneath, which is why
        // every mutable field is read with volatile loads and validated (see the module doc).
        // A writer never shrinks a log, so mapped pages stay backed.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(unreadable)?;
        let head = &map[..map.len().min(format::STATIC_CRC_OFFSET + 4)];
        if head[..8] != format::MAGIC {
            return Err(ReadError::NotALog { path: path.to_path_buf() });
        }
        if (actual as usize) < format::HEADER_SIZE {
            let expected = format::HEADER_SIZE as u64;
            return Err(ReadError::Truncated { path: path.to_path_buf(), expected, actual });
        }
        if head[header::ENDIAN..header::ENDIAN + 4] != format::ENDIAN_MARKER.to_ne_bytes() {
            return Err(ReadError::ForeignEndian { path: path.to_path_buf() });
        }
        let version = bytes::get_u32(head, header::FORMAT_VERSION);
        if version != format::FORMAT_VERSION {
            return Err(ReadError::UnsupportedVersion { path: path.to_path_buf(), found: version });
        }
        let crc = bytes::get_u32(head, format::STATIC_CRC_OFFSET);
        if crc != crc32fast::hash(&head[..format::STATIC_HEADER_LEN]) {
            return Err(ReadError::CorruptHeader { path: path.to_path_buf() });
        }
        let header = decode_header(head);
        if header.slot_count == 0 || bytes::get_u32(head, header::SLOT_SIZE) as usize != format::SLOT_SIZE {
            return Err(ReadError::CorruptHeader { path: path.to_path_buf() });
        }
        let expected = format::file_len(header.slot_count) as u64;
        if actual < expected {
            return Err(ReadError::Truncated { path: path.to_path_buf(), expected, actual });
        }
        Ok(RankLog { path: path.to_path_buf(), map, header })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn load_u64(&self, offset: usize) -> u64 {
        assert!(offset.is_multiple_of(8) && offset + 8 <= self.map.len());
        // SAFETY: in bounds and 8-aligned (checked; the map is page aligned); volatile
        // because another process may be writing the word.
        u64::from_le(unsafe { std::ptr::read_volatile(self.map.as_ptr().add(offset).cast::<u64>()) })
    }

    fn copy_volatile(&self, offset: usize, out: &mut [u8]) {
        for (i, chunk) in out.chunks_mut(8).enumerate() {
            let word = self.load_u64(offset + 8 * i).to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }

    pub fn live(&self) -> LiveState {
        LiveState {
            committed: self.load_u64(live::COMMITTED),
            heartbeat_mono_ns: self.load_u64(live::HEARTBEAT_MONO_NS),
            heartbeat_wall_ns: self.load_u64(live::HEARTBEAT_WALL_NS),
            dropped_events: self.load_u64(live::DROPPED_EVENTS),
            writer_state: WriterState::from_u64(self.load_u64(live::WRITER_STATE)),
            ticks_per_sec: f64::from_bits(self.load_u64(live::TICKS_PER_SEC)),
            nccl_version: self.load_u64(live::NCCL_VERSION),
            comm_table_overflow: self.load_u64(live::COMM_TABLE_OVERFLOW),
            doors: Doors::decode(self.load_u64(live::DOORS)),
        }
    }

    /// The stage-name table: entry `id` names stage id `id` (None for an unused slot).
    pub fn stage_names(&self) -> Vec<Option<String>> {
        use format::stage_names::{NAME_CAPACITY, NAME_OFFSET, OFFSET, SLOTS, SLOT_SIZE, WRITING};
        (0..SLOTS)
            .map(|slot| {
                let at = OFFSET + slot * SLOT_SIZE;
                if self.load_u64(at) <= WRITING {
                    return None;
                }
                let mut name = [0u8; NAME_CAPACITY];
                self.copy_volatile(at + NAME_OFFSET, &mut name);
                Some(bytes::get_str(&name, 0, NAME_CAPACITY))
            })
            .collect()
    }

    /// The logical step and stage the rank is in now, from its step and stage markers.
    pub fn position(&self) -> (Option<u64>, Option<String>) {
        let step = self.load_u64(live::CURRENT_STEP).checked_sub(1);
        let stage = self
            .load_u64(live::CURRENT_STAGE)
            .checked_sub(1)
            .and_then(|id| self.stage_names().into_iter().nth(id as usize).flatten());
        (step, stage)
    }

    /// Communicators registered now (destroyed ones are gone from the table; their history
    /// is in the records).
    pub fn comms(&self) -> Vec<CommLive> {
        let ticks_per_sec = self.live().ticks_per_sec;
        (0..format::COMM_SLOTS)
            .map(|i| format::HEADER_SIZE + i * format::COMM_SLOT_SIZE)
            .filter(|&at| self.load_u64(at + comm::KEY) > comm::CLAIMING)
            .map(|at| {
                let rank_nranks = self.load_u64(at + comm::RANK_NRANKS);
                let inflight_ticks = self.load_u64(at + comm::INFLIGHT_TICKS);
                CommLive {
                    comm_id: self.load_u64(at + comm::COMM_ID),
                    rank: (rank_nranks >> 32) as u32 as i32,
                    nranks: rank_nranks as u32 as i32,
                    coll_entered: self.load_u64(at + comm::COLL_ENTERED),
                    coll_returned: self.load_u64(at + comm::COLL_RETURNED),
                    p2p_entered: self.load_u64(at + comm::P2P_ENTERED),
                    p2p_returned: self.load_u64(at + comm::P2P_RETURNED),
                    inflight: (inflight_ticks != 0).then(|| InFlight {
                        op: NcclOp::from_u16(self.load_u64(at + comm::INFLIGHT_OP) as u16),
                        since_mono_ns: ticks_to_mono_ns(
                            inflight_ticks,
                            self.header.base_ticks,
                            self.header.base_mono_ns,
                            ticks_per_sec,
                        ),
                    }),
                }
            })
            .collect()
    }

    /// Every whole record still in the ring, oldest first, and what could not be read.
    pub fn records(&self) -> (Vec<Record>, ScanStats) {
        let mut records = Vec::with_capacity((self.header.slot_count as usize).min(1 << 20));
        let stats = self.scan(|record| records.push(record));
        (records, stats)
    }

    /// Hands every whole record still in the ring to `visit`, oldest first, in constant
    /// memory, and says what could not be read. A first pass over the slots finds the
    /// newest whole record; the second reads the ring from the slot after it, which is
    /// sequence order. Records committed after the first pass are left to the next scan
    /// (they would come out of order); a record they overwrote counts as missing.
    pub fn scan(&self, mut visit: impl FnMut(Record)) -> ScanStats {
        let slot_count = self.header.slot_count as usize;
        let committed_at_start = self.live().committed;
        let mut stats = ScanStats::default();
        let mut slot = [0u8; format::SLOT_SIZE - 8];
        for i in 0..slot_count {
            if let Some(Ok(seq)) = self.whole_slot(i, &mut slot) {
                stats.last_seq = stats.last_seq.max(seq);
            }
        }
        let oldest_held = stats.last_seq.saturating_sub(slot_count as u64) + 1;
        // A dead writer may have committed a record without publishing the count: the
        // count can trail what the scan saw, never lead it.
        let window_end = committed_at_start.min(stats.last_seq);
        let mut held_in_window = 0;
        for k in 0..slot_count {
            let i = (stats.last_seq as usize % slot_count + k) % slot_count;
            let seq = match self.whole_slot(i, &mut slot) {
                None => continue,
                Some(Err(())) => {
                    stats.invalid_slots += 1;
                    continue;
                }
                Some(Ok(seq)) => seq,
            };
            // Newer than the first pass saw, or older than the ring holds.
            if seq > stats.last_seq || seq < oldest_held {
                continue;
            }
            held_in_window += u64::from(seq <= window_end);
            let len = (bytes::get_u16(&slot, 2) as usize).min(format::PAYLOAD_CAPACITY);
            match RecordBody::decode(bytes::get_u16(&slot, 0), &slot[8..8 + len]) {
                Some(body) => {
                    if stats.valid == 0 {
                        stats.first_seq = seq;
                    }
                    stats.valid += 1;
                    visit(Record { seq, body });
                }
                None => stats.unknown_kind += 1,
            }
        }
        stats.lost_to_wrap = oldest_held.saturating_sub(1);
        stats.missing = (window_end + 1).saturating_sub(oldest_held) - held_in_window;
        stats
    }

    /// Slot `i` copied into `slot` (everything after the commit word): `None` when empty,
    /// `Err` when its commit word changed during the copy, it sits in the wrong slot, or
    /// its CRC fails; else its sequence number.
    fn whole_slot(&self, i: usize, slot: &mut [u8; format::SLOT_SIZE - 8]) -> Option<Result<u64, ()>> {
        let slot_count = self.header.slot_count as usize;
        let at = format::records_offset() + i * format::SLOT_SIZE;
        let seq = self.load_u64(at);
        if seq == 0 {
            return None;
        }
        self.copy_volatile(at + 8, slot);
        let kind = bytes::get_u16(slot, 0);
        let len = (bytes::get_u16(slot, 2) as usize).min(format::PAYLOAD_CAPACITY);
        let whole = self.load_u64(at) == seq
            && (seq - 1) as usize % slot_count == i
            && bytes::get_u32(slot, 4) == format::record_crc(seq, kind, &slot[8..8 + len]);
        Some(if whole { Ok(seq) } else { Err(()) })
    }
}

fn decode_header(head: &[u8]) -> LogHeader {
    LogHeader {
        format_version: bytes::get_u32(head, header::FORMAT_VERSION),
        schema: bytes::get_u32(head, header::SCHEMA),
        pid: bytes::get_u32(head, header::PID),
        global_rank: bytes::get_i32(head, header::GLOBAL_RANK),
        world_size: bytes::get_i32(head, header::WORLD_SIZE),
        local_rank: bytes::get_i32(head, header::LOCAL_RANK),
        job_id: bytes::get_str(head, header::JOB_ID, format::JOB_ID_LEN),
        host: bytes::get_str(head, header::HOST, format::HOST_LEN),
        identity_source: bytes::get_str(head, header::IDENTITY_SOURCE, format::SOURCE_LEN),
        clock_source: ClockSource::from_u32(bytes::get_u32(head, header::CLOCK_SOURCE))
            .map_or("unknown", ClockSource::name),
        base_ticks: bytes::get_u64(head, header::BASE_TICKS),
        base_mono_ns: bytes::get_u64(head, header::BASE_MONO_NS),
        base_wall_ns: bytes::get_u64(head, header::BASE_WALL_NS),
        slot_count: bytes::get_u32(head, header::SLOT_COUNT),
        ring_capacity: bytes::get_u32(head, header::RING_CAPACITY),
    }
}
