//! Reads rank logs: after the job, or live while the writer runs, or after it was killed.
//!
//! `sf` trusts no file. Every size the header claims is checked against fixed caps and the
//! file's length before anything is sized from it, and a field out of bounds is refused by
//! name. The file is read with `pread`, never mapped: reading a hole of a sparse tmpfs log
//! allocates no page, and a file truncated while it is read yields zeros, not SIGBUS. Only
//! the ranges that hold data (`SEEK_DATA`) and the slots the writer may have committed are
//! scanned, so a crafted sparse file costs no more than its data. Fields the writer keeps
//! changing are read twice and a word is taken once two reads agree; a record is accepted
//! only if two reads of its slot agree and its CRC matches, so a concurrent or interrupted
//! write yields a counted gap, never a torn record.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::format::{self, bytes, caps, comm, header, live, Region, WriterState};
use super::kernel_ch::KernelChKey;
use super::pread;
use super::records::{hex_u64, ProcessEnd, RecordBody};
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::process_stamp::ProcessStamp;
use crate::core::record::clock::{ticks_to_mono_ns, ClockSource};
use crate::core::record::doors::Doors;

mod scan;
use scan::SlotChunks;

#[derive(Debug)]
pub enum ReadError {
    Unreadable {
        path: PathBuf,
        error: std::io::Error,
    },
    NotAFile {
        path: PathBuf,
    },
    NotALog {
        path: PathBuf,
    },
    Truncated {
        path: PathBuf,
        expected: u64,
        actual: u64,
    },
    UnsupportedVersion {
        path: PathBuf,
        found: u32,
    },
    ForeignEndian {
        path: PathBuf,
    },
    CorruptHeader {
        path: PathBuf,
    },
    /// A header field (CRC intact) outside what a log can hold.
    BadField {
        path: PathBuf,
        field: &'static str,
        value: i64,
        expected: String,
    },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Unreadable { path, error } => {
                write!(f, "{}: cannot read: {error}; check the path and its permissions", path.display())
            }
            ReadError::NotAFile { path } => write!(
                f,
                "{}: not a regular file; pass a rank-*.sflog file or the job directory holding them",
                path.display()
            ),
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
                "{}: log format version {found}, but this sf reads versions {} to {}; use the sf built with the library that wrote it",
                path.display(),
                format::OLDEST_READABLE_FORMAT,
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
            ReadError::BadField { path, field, value, expected } => write!(
                f,
                "{}: header field {field} is {value}, expected {expected}; the file is damaged or was not written \
                 by stagefrontier, and sf reads nothing from it",
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
    /// Slots of the history ring (step vectors and other low-rate evidence); 0 in a
    /// format 1 log, which keeps every record in the event ring.
    pub history_slot_count: u32,
    pub ring_capacity: u32,
    /// The writer's boot, pid namespace and start time; all zero when not recorded.
    #[serde(skip)]
    pub stamp: ProcessStamp,
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
    /// Records committed to the history ring (0 in a format 1 log).
    pub history_committed: u64,
    /// `ncclCommGetAsyncError` polls that found no error or `ncclInProgress`: counted, not
    /// recorded.
    pub nccl_polls: u64,
    /// Stage and value markers lost to a full stage-name table.
    pub markers_unnamed: u64,
    /// Raw `CURRENT_STEP` and `CURRENT_STAGE` words; `position` resolves them.
    #[serde(skip)]
    pub current_step: u64,
    #[serde(skip)]
    pub current_stage: u64,
    /// Doors open and injection variables set; `None` for a log of an older library.
    pub doors: Option<Doors>,
    /// How the process ended, if it recorded its end (`records_end`).
    pub end: Option<ProcessEnd>,
    /// Raw `PROGRESS_TICKS` word; `progress_mono_ns` converts it.
    #[serde(skip)]
    pub progress_ticks: u64,
    /// Raw KernelCh words (`kernel_ch::KernelChKey::of_word`); `kernel_ch` resolves them.
    #[serde(skip)]
    pub kernel_ch_started: u64,
    #[serde(skip)]
    pub kernel_ch_started_ticks: u64,
    #[serde(skip)]
    pub kernel_ch_stopped: u64,
}

/// The profiler door's newest KernelCh start and stop on a rank (`live::KERNEL_CH_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelChLive {
    /// The collective whose kernel the device last began a channel of, and when.
    pub started: Option<(KernelChKey, u64)>,
    /// The collective whose kernel it last finished a channel of.
    pub stopped: Option<KernelChKey>,
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

/// What a scan of the record rings found. A scan of the whole log sums the counts of
/// both rings and gives the event ring's sequence numbers (each ring numbers its own
/// records), with the history ring's own figures in `history`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ScanStats {
    /// Records read whole.
    pub valid: u64,
    /// Oldest sequence number still held (of the event ring, in a scan of both).
    pub first_seq: u64,
    /// Newest sequence number seen (of the event ring, in a scan of both).
    pub last_seq: u64,
    /// Records older than the ring holds: overwritten by wraparound.
    pub lost_to_wrap: u64,
    /// Sequence numbers the log had committed when this scan began, still within what the
    /// ring holds, with no whole record: a write torn by a kill, or overwritten while this
    /// scan ran. Records committed during the scan are read where the scan still finds
    /// them, and never counted as missing: the scan passed their slots before they existed.
    pub missing: u64,
    /// Records held older than a scan of the newest records read (0 in a whole scan).
    #[serde(skip_serializing_if = "is_zero")]
    pub not_read: u64,
    /// Slots whose content failed the commit or CRC check.
    pub invalid_slots: u64,
    /// Slots with a valid CRC but a kind this reader does not know.
    pub unknown_kind: u64,
    /// The history ring's own figures, in a scan of a format 2 log's both rings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<Box<ScanStats>>,
}

impl ScanStats {
    /// `events` with the counts of `history` added, and `history` kept whole: what `scan`
    /// returns, for a reader that scanned the two rings apart (`scan_region`).
    pub fn of_both(events: ScanStats, history: ScanStats) -> ScanStats {
        ScanStats {
            valid: events.valid + history.valid,
            lost_to_wrap: events.lost_to_wrap + history.lost_to_wrap,
            not_read: events.not_read + history.not_read,
            missing: events.missing + history.missing,
            invalid_slots: events.invalid_slots + history.invalid_slots,
            unknown_kind: events.unknown_kind + history.unknown_kind,
            history: Some(Box::new(history)),
            ..events
        }
    }

    /// The figures of the ring that holds step vectors: the history ring when the scan
    /// had one, else this (a format 1 log, or a scan of that ring alone).
    pub fn of_steps(&self) -> &ScanStats {
        self.history.as_deref().unwrap_or(self)
    }
}

/// Where one ring of slots lies in the file and the live word that counts its commits:
/// what `sf snapshot` copies and what a scan reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingSpan {
    pub region: Region,
    /// Byte offset of its first slot.
    pub offset: usize,
    pub slot_count: u32,
    /// Byte offset of the live header word counting its committed records.
    pub committed_at: usize,
}

pub struct RankLog {
    path: PathBuf,
    file: File,
    pub header: LogHeader,
}

impl RankLog {
    pub fn open(path: &Path) -> Result<RankLog, ReadError> {
        let unreadable = |error| ReadError::Unreadable { path: path.to_path_buf(), error };
        // O_NONBLOCK: a FIFO planted under a log's name must not hang the open.
        let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(unreadable)?;
        RankLog::from_file(path, file)
    }

    /// The log in `file`, already open (by a caller that checked what it opened); `path`
    /// names it in messages.
    pub fn from_file(path: &Path, file: File) -> Result<RankLog, ReadError> {
        let unreadable = |error| ReadError::Unreadable { path: path.to_path_buf(), error };
        let meta = file.metadata().map_err(unreadable)?;
        if !meta.is_file() {
            return Err(ReadError::NotAFile { path: path.to_path_buf() });
        }
        let actual = meta.len();
        let mut head = [0u8; format::STATIC_CRC_OFFSET + 4];
        let got = pread::read_full(&file, 0, &mut head).map_err(unreadable)?;
        if got < 8 || head[..8] != format::MAGIC {
            return Err(ReadError::NotALog { path: path.to_path_buf() });
        }
        if actual < format::HEADER_SIZE as u64 || got < head.len() {
            let expected = format::HEADER_SIZE as u64;
            return Err(ReadError::Truncated { path: path.to_path_buf(), expected, actual });
        }
        if head[header::ENDIAN..header::ENDIAN + 4] != format::ENDIAN_MARKER.to_ne_bytes() {
            return Err(ReadError::ForeignEndian { path: path.to_path_buf() });
        }
        let version = bytes::get_u32(&head, header::FORMAT_VERSION);
        if !(format::OLDEST_READABLE_FORMAT..=format::FORMAT_VERSION).contains(&version) {
            return Err(ReadError::UnsupportedVersion { path: path.to_path_buf(), found: version });
        }
        let crc = bytes::get_u32(&head, format::STATIC_CRC_OFFSET);
        if crc != crc32fast::hash(&head[..format::STATIC_HEADER_LEN]) {
            return Err(ReadError::CorruptHeader { path: path.to_path_buf() });
        }
        check_bounds(&head).map_err(|(field, value, expected)| ReadError::BadField {
            path: path.to_path_buf(),
            field,
            value,
            expected,
        })?;
        let header = decode_header(&head);
        // The history ring (none in format 1) ends the file.
        let expected =
            (format::history_offset(header.slot_count) + header.history_slot_count as usize * format::SLOT_SIZE) as u64;
        if actual < expected {
            return Err(ReadError::Truncated { path: path.to_path_buf(), expected, actual });
        }
        Ok(RankLog { path: path.to_path_buf(), file, header })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file the log is read from.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// `buf.len()` bytes at `offset`; what lies past the end of the file (truncated while
    /// read) or cannot be read reads as zeros, which every reader treats as "nothing here".
    fn read_zeroed(&self, offset: usize, buf: &mut [u8]) {
        if pread::read_zeroed(&self.file, offset as u64, buf).is_err() {
            buf.fill(0);
        }
    }

    /// A region the writer keeps changing, read word by word until it holds still
    /// (`pread::read_stable`); zeros where it cannot be read.
    fn read_stable(&self, offset: usize, out: &mut [u8]) {
        if pread::read_stable(&self.file, offset as u64, out).is_err() {
            out.fill(0);
        }
    }

    pub fn live(&self) -> LiveState {
        let mut w = [0u8; live::KERNEL_CH_STOPPED + 8 - live::COMMITTED];
        self.read_stable(live::COMMITTED, &mut w);
        let field = |at: usize| bytes::get_u64(&w, at - live::COMMITTED);
        LiveState {
            committed: field(live::COMMITTED),
            heartbeat_mono_ns: field(live::HEARTBEAT_MONO_NS),
            heartbeat_wall_ns: field(live::HEARTBEAT_WALL_NS),
            dropped_events: field(live::DROPPED_EVENTS),
            writer_state: WriterState::from_u64(field(live::WRITER_STATE)),
            ticks_per_sec: f64::from_bits(field(live::TICKS_PER_SEC)),
            nccl_version: field(live::NCCL_VERSION),
            comm_table_overflow: field(live::COMM_TABLE_OVERFLOW),
            current_step: field(live::CURRENT_STEP),
            current_stage: field(live::CURRENT_STAGE),
            doors: Doors::decode(field(live::DOORS)),
            history_committed: field(live::HISTORY_COMMITTED),
            nccl_polls: field(live::NCCL_POLLS),
            markers_unnamed: field(live::MARKERS_UNNAMED),
            end: ProcessEnd::from_words(field(live::END_MONO_NS), field(live::END_WALL_NS), field(live::END_HOW)),
            progress_ticks: field(live::PROGRESS_TICKS),
            kernel_ch_started: field(live::KERNEL_CH_STARTED),
            kernel_ch_started_ticks: field(live::KERNEL_CH_STARTED_TICKS),
            kernel_ch_stopped: field(live::KERNEL_CH_STOPPED),
        }
    }

    /// The stage-name table: entry `id` names stage id `id` (None for an unused slot).
    pub fn stage_names(&self) -> Vec<Option<String>> {
        use format::stage_names::{NAME_CAPACITY, NAME_OFFSET, OFFSET, SLOTS, SLOT_SIZE, WRITING};
        let mut table = vec![0u8; SLOTS * SLOT_SIZE];
        self.read_stable(OFFSET, &mut table);
        table
            .chunks_exact(SLOT_SIZE)
            .map(|slot| (bytes::get_u64(slot, 0) > WRITING).then(|| bytes::get_str(slot, NAME_OFFSET, NAME_CAPACITY)))
            .collect()
    }

    /// When the rank last advanced (its newest step or stage marker), on its
    /// `CLOCK_MONOTONIC`; `None` before its first marker.
    pub fn progress_mono_ns(&self) -> Option<u64> {
        let live = self.live();
        (live.progress_ticks != 0).then(|| {
            ticks_to_mono_ns(live.progress_ticks, self.header.base_ticks, self.header.base_mono_ns, live.ticks_per_sec)
        })
    }

    /// The newest KernelCh start (with its `CLOCK_MONOTONIC` time) and stop; `None` where
    /// the profiler door saw none (or the log is older than the words).
    pub fn kernel_ch(&self) -> KernelChLive {
        let live = self.live();
        let at = |ticks| ticks_to_mono_ns(ticks, self.header.base_ticks, self.header.base_mono_ns, live.ticks_per_sec);
        KernelChLive {
            started: KernelChKey::of_word(live.kernel_ch_started).map(|k| (k, at(live.kernel_ch_started_ticks))),
            stopped: KernelChKey::of_word(live.kernel_ch_stopped),
        }
    }

    /// The logical step and stage the rank is in now, from its step and stage markers.
    pub fn position(&self) -> (Option<u64>, Option<String>) {
        let live = self.live();
        let step = live.current_step.checked_sub(1);
        let stage =
            live.current_stage.checked_sub(1).and_then(|id| self.stage_names().into_iter().nth(id as usize).flatten());
        (step, stage)
    }

    /// Communicators registered now (destroyed ones are gone from the table; their history
    /// is in the records). The table is live state without a checksum, so each field is
    /// taken as untrusted: a rank or size out of bounds reads as unknown (-1), an unknown
    /// op as none; counters are any u64 and analyses treat them with saturating arithmetic.
    pub fn comms(&self) -> Vec<CommLive> {
        let ticks_per_sec = self.live().ticks_per_sec;
        let mut table = vec![0u8; format::COMM_SLOTS * format::COMM_SLOT_SIZE];
        self.read_stable(format::HEADER_SIZE, &mut table);
        table
            .chunks_exact(format::COMM_SLOT_SIZE)
            .filter(|slot| bytes::get_u64(slot, comm::KEY) > comm::CLAIMING)
            .map(|slot| {
                let rank_nranks = bytes::get_u64(slot, comm::RANK_NRANKS);
                let (rank, nranks) = plausible_rank((rank_nranks >> 32) as u32 as i32, rank_nranks as u32 as i32);
                let inflight_ticks = bytes::get_u64(slot, comm::INFLIGHT_TICKS);
                CommLive {
                    comm_id: bytes::get_u64(slot, comm::COMM_ID),
                    rank,
                    nranks,
                    coll_entered: bytes::get_u64(slot, comm::COLL_ENTERED),
                    coll_returned: bytes::get_u64(slot, comm::COLL_RETURNED),
                    p2p_entered: bytes::get_u64(slot, comm::P2P_ENTERED),
                    p2p_returned: bytes::get_u64(slot, comm::P2P_RETURNED),
                    inflight: (inflight_ticks != 0).then(|| InFlight {
                        op: NcclOp::from_u16(bytes::get_u64(slot, comm::INFLIGHT_OP) as u16),
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

    /// Every whole record still in the log, and what could not be read: the history
    /// ring's oldest first, then the event ring's (see `scan`).
    pub fn records(&self) -> (Vec<Record>, ScanStats) {
        let mut records = Vec::new();
        let stats = self.scan(|record| records.push(record));
        (records, stats)
    }

    /// The rings this log has, history first (none in a format 1 log), then events.
    pub fn rings(&self) -> Vec<RingSpan> {
        let h = &self.header;
        let events = RingSpan {
            region: Region::Events,
            offset: format::records_offset(),
            slot_count: h.slot_count,
            committed_at: live::COMMITTED,
        };
        let history = (h.history_slot_count > 0).then(|| RingSpan {
            region: Region::History,
            offset: format::history_offset(h.slot_count),
            slot_count: h.history_slot_count,
            committed_at: live::HISTORY_COMMITTED,
        });
        history.into_iter().chain([events]).collect()
    }

    /// Hands every whole record of both rings to `visit`, in constant memory: the history
    /// ring's records (step vectors, communicator creations, hang evidence, names: the
    /// low-rate kinds of `Region::of`) oldest first, then the event ring's oldest first.
    /// Each ring is in sequence order; the two are not interleaved (each numbers its own).
    pub fn scan(&self, mut visit: impl FnMut(Record)) -> ScanStats {
        let mut chunks = SlotChunks::new();
        let rings = self.rings();
        let mut history = None;
        let mut events = ScanStats::default();
        for ring in rings {
            let stats = self.scan_ring(ring, u64::MAX, &mut chunks, &mut visit);
            match ring.region {
                Region::History => history = Some(stats),
                Region::Events => events = stats,
            }
        }
        match history {
            Some(history) => ScanStats::of_both(events, history),
            None => events,
        }
    }

    /// Hands the whole records of the ring that holds `region`'s kinds to `visit`, oldest
    /// first: reading only the history ring is how step analyses stay proportional to
    /// the steps held, not to the calls. In a format 1 log both regions are the one ring.
    pub fn scan_region(&self, region: Region, visit: impl FnMut(Record)) -> ScanStats {
        self.scan_newest(region, u64::MAX, visit)
    }

    /// `scan_region` of the newest `keep` records of that ring, oldest first: an analysis
    /// that needs only the recent past (which call each rank is in, what it said last)
    /// reads those slots and no others, whatever the ring holds. `not_read` counts the
    /// held records older than that.
    pub fn scan_newest(&self, region: Region, keep: u64, mut visit: impl FnMut(Record)) -> ScanStats {
        let rings = self.rings();
        let ring = rings.iter().find(|r| r.region == region).unwrap_or(&rings[rings.len() - 1]);
        self.scan_ring(*ring, keep.max(1), &mut SlotChunks::new(), &mut visit)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A communicator rank and size as the table holds them, or (-1, -1) when they are not
/// a rank within a size a job can have.
fn plausible_rank(rank: i32, nranks: i32) -> (i32, i32) {
    if (1..=caps::WORLD_SIZE).contains(&nranks) && (-1..nranks).contains(&rank) {
        (rank, nranks)
    } else {
        (-1, -1)
    }
}

/// The static header's sizes and identities against what a log can hold: the first field
/// out of bounds, its value and the bound, in the words of the error.
fn check_bounds(head: &[u8]) -> Result<(), (&'static str, i64, String)> {
    let u32_at = |at| bytes::get_u32(head, at) as i64;
    let i32_at = |at| bytes::get_i32(head, at) as i64;
    let u64_at = |at| bytes::get_u64(head, at).min(i64::MAX as u64) as i64;
    let exactly = |field, value: i64, want: usize| {
        if value == want as i64 {
            Ok(())
        } else {
            Err((field, value, want.to_string()))
        }
    };
    exactly("header_size", u32_at(header::HEADER_SIZE), format::HEADER_SIZE)?;
    exactly("slot_size", u32_at(header::SLOT_SIZE), format::SLOT_SIZE)?;
    exactly("comm_table_offset", u64_at(header::COMM_TABLE_OFFSET), format::HEADER_SIZE)?;
    exactly("comm_slots", u32_at(header::COMM_SLOTS), format::COMM_SLOTS)?;
    exactly("comm_slot_size", u32_at(header::COMM_SLOT_SIZE), format::COMM_SLOT_SIZE)?;
    exactly("records_offset", u64_at(header::RECORDS_OFFSET), format::records_offset())?;
    let within = |field, value: i64, low: i64, high: i64, unknown: &str| {
        if (low..=high).contains(&value) {
            Ok(())
        } else {
            Err((field, value, format!("{low}..={high}{unknown}")))
        }
    };
    let world = caps::WORLD_SIZE as i64;
    let slot_count = u32_at(header::SLOT_COUNT);
    within("slot_count", slot_count, 1, caps::SLOT_COUNT as i64, "")?;
    if u32_at(header::FORMAT_VERSION) >= 2 {
        let history = u32_at(header::HISTORY_SLOT_COUNT);
        within("history_slot_count", history, 1, caps::HISTORY_SLOT_COUNT as i64, "")?;
        exactly("history_offset", u64_at(header::HISTORY_OFFSET), format::history_offset(slot_count as u32))?;
    }
    within("ring_capacity", u32_at(header::RING_CAPACITY), 0, caps::RING_CAPACITY as i64, "")?;
    within("pid", u32_at(header::PID), 0, i32::MAX as i64, "")?;
    let world_size = i32_at(header::WORLD_SIZE);
    if world_size != -1 {
        within("world_size", world_size, 1, world, ", or -1 when unknown")?;
    }
    // A rank lies below the world size it came with, or below the cap when that is unknown.
    let top_rank = if world_size > 0 { world_size - 1 } else { world - 1 };
    within("global_rank", i32_at(header::GLOBAL_RANK), -1, top_rank, "")?;
    within("local_rank", i32_at(header::LOCAL_RANK), -1, world - 1, "")
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
        history_slot_count: match bytes::get_u32(head, header::FORMAT_VERSION) {
            1 => 0,
            _ => bytes::get_u32(head, header::HISTORY_SLOT_COUNT),
        },
        ring_capacity: bytes::get_u32(head, header::RING_CAPACITY),
        stamp: ProcessStamp::from_header(head),
    }
}
