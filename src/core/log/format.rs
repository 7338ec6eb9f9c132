//! The on-disk layout of a rank log, shared by the writer and the reader.
//!
//! ```text
//! 0            header: static part (CRC-protected) then live atomics
//! HEADER_SIZE  communicator table: COMM_SLOTS slots of COMM_SLOT_SIZE bytes, live state
//! records_off  event ring: slot_count slots of SLOT_SIZE bytes, record seq s in slot (s-1) % n
//! history_off  history ring: history_slots(slot_count) slots, its own seq s in slot (s-1) % m
//! ```
//!
//! The two rings are regions of one file with their own sequence numbers and commit
//! counters: high-rate evidence (NCCL calls, profiler tasks, kernel and QP windows) wraps
//! in the event ring, while step vectors and the other low-rate evidence (communicator
//! creations, hang evidence, injections, names) keep their own, larger history
//! (`Region::of`). Format 1 logs have the event ring only; the reader still reads them.
//!
//! All integers are little-endian (the header records an endianness marker so a reader on
//! another machine can refuse a foreign log). A record slot is
//! `commit_seq u64 | kind u16 | len u16 | crc32 u32 | payload[112]`; the writer clears
//! `commit_seq`, writes the rest, then stores `commit_seq` last with release ordering, so a
//! reader whose two copies of a slot agree, with a non-zero `commit_seq` and a matching CRC,
//! has a whole record, even while the writer runs or after it was killed.

/// First 8 bytes of every rank log.
pub const MAGIC: [u8; 8] = *b"SFRKLOG\0";
/// Bumped on any incompatible change of the layout below.
pub const FORMAT_VERSION: u32 = 2;
/// The oldest layout the reader still reads: format 1, the event ring without a history
/// region (every record in one ring).
pub const OLDEST_READABLE_FORMAT: u32 = 1;
/// Version of the record kinds and payload layouts.
pub const SCHEMA_VERSION: u32 = 3;
/// Written as a native u32; reads back as this value only on a machine of the same order.
pub const ENDIAN_MARKER: u32 = 0x0A0B_0C0D;

pub const HEADER_SIZE: usize = 4096;
/// Bytes of the header covered by `STATIC_CRC_OFFSET`'s checksum.
pub const STATIC_HEADER_LEN: usize = 508;
pub const STATIC_CRC_OFFSET: usize = 508;

pub const SLOT_SIZE: usize = 128;
pub const SLOT_HEADER_SIZE: usize = 16;
pub const PAYLOAD_CAPACITY: usize = SLOT_SIZE - SLOT_HEADER_SIZE;

pub const COMM_SLOT_SIZE: usize = 128;
pub const COMM_SLOTS: usize = 256;

pub const JOB_ID_LEN: usize = 64;
pub const HOST_LEN: usize = 64;
pub const SOURCE_LEN: usize = 16;

/// Byte offsets of the static header fields.
pub mod header {
    pub const MAGIC: usize = 0;
    pub const FORMAT_VERSION: usize = 8;
    pub const ENDIAN: usize = 12;
    pub const HEADER_SIZE: usize = 16;
    pub const SCHEMA: usize = 20;
    pub const SLOT_SIZE: usize = 24;
    pub const SLOT_COUNT: usize = 28;
    pub const COMM_TABLE_OFFSET: usize = 32;
    pub const COMM_SLOTS: usize = 40;
    pub const COMM_SLOT_SIZE: usize = 44;
    pub const RECORDS_OFFSET: usize = 48;
    pub const PID: usize = 56;
    pub const GLOBAL_RANK: usize = 60;
    pub const WORLD_SIZE: usize = 64;
    pub const LOCAL_RANK: usize = 68;
    pub const CLOCK_SOURCE: usize = 72;
    pub const RING_CAPACITY: usize = 76;
    pub const BASE_TICKS: usize = 80;
    pub const BASE_MONO_NS: usize = 88;
    pub const BASE_WALL_NS: usize = 96;
    pub const JOB_ID: usize = 128;
    pub const HOST: usize = 192;
    pub const IDENTITY_SOURCE: usize = 256;
    /// `/proc/sys/kernel/random/boot_id` of the writer's host, 16 bytes (zero: unknown).
    pub const BOOT_ID: usize = 272;
    /// Inode of the writer's pid namespace: with the boot id, says whether `PID` names a
    /// process the reader can look up.
    pub const PID_NAMESPACE: usize = 288;
    /// The writer's start time in clock ticks since boot (`/proc/<pid>/stat` field 22), so
    /// a later process reusing the pid is not taken for the writer.
    pub const PROCESS_START: usize = 296;
    /// Format 2: slots of the history ring (u32) and its byte offset (u64).
    pub const HISTORY_SLOT_COUNT: usize = 304;
    pub const HISTORY_OFFSET: usize = 312;
}

/// Fixed caps on what a header may claim, checked before anything is sized from it: a log
/// that claims more is damaged or crafted, and `sf` refuses it with the field's name.
pub mod caps {
    /// The most record slots a log may hold (`SF_LOG_RECORDS`' upper bound).
    pub const SLOT_COUNT: u32 = 1 << 26;
    /// The most ranks a job (or communicator) may have: over twice the largest jobs run
    /// today, and low enough that analyses dense in the world (`sf frontier` lists the
    /// ranks a step misses) stay within seconds over a whole log of steps.
    pub const WORLD_SIZE: i32 = 1 << 18;
    /// The most events a hot-path ring may hold (`SF_RING_EVENTS` allows 1 << 22).
    pub const RING_CAPACITY: u32 = 1 << 24;
    /// The most history slots a log may hold (`history_slots` of the largest ring).
    pub const HISTORY_SLOT_COUNT: u32 = SLOT_COUNT * super::HISTORY_PER_EVENT_SLOT;
}

/// History slots per event slot: 65,536 event slots (the default) come with 131,072
/// history slots, 100,000 steps and more of up to six stages (one `step_vector` each)
/// with room for the other low-rate records. One ratio keeps one knob (`SF_LOG_RECORDS`)
/// and lets the placement logic size both rings as one file.
pub const HISTORY_PER_EVENT_SLOT: u32 = 2;

/// History ring slots of a log whose event ring has `slot_count` slots.
pub fn history_slots(slot_count: u32) -> u32 {
    slot_count.saturating_mul(HISTORY_PER_EVENT_SLOT)
}

/// Which ring of the log a record kind goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Region {
    /// NCCL calls and everything else that comes at call rate or window rate.
    Events,
    /// Step vectors and rare evidence that must outlive many steps' worth of calls.
    History,
}

impl Region {
    pub const ALL: [Region; 2] = [Region::History, Region::Events];

    /// The ring a record kind is written to (format 2 and later).
    pub fn of(kind: u16) -> Region {
        use crate::core::log::records::kind::*;
        match kind {
            STEP_VECTOR | SIDE_VALUE | STAGE_DEVICE | COMM_CREATED | INJECTION | HANG_EVIDENCE | KERNEL_NAME
            | CUPTI_STATUS | QP_STUCK | QP_DEGRADED | PORT_COUNTER_NAME | VERBS_DEVICE | STACK_FRAME | STACK_THREAD
            | STACK_SAMPLE | GROUP_DESC => Region::History,
            _ => Region::Events,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Region::Events => "events",
            Region::History => "history",
        }
    }
}

/// Byte offsets of the live header fields, each an aligned u64 updated atomically.
pub mod live {
    /// Records committed so far; the newest record's sequence number.
    pub const COMMITTED: usize = 512;
    pub const HEARTBEAT_MONO_NS: usize = 520;
    pub const HEARTBEAT_WALL_NS: usize = 528;
    /// Cumulative events the hot path dropped because its ring was full.
    pub const DROPPED_EVENTS: usize = 536;
    /// One of `WriterState`.
    pub const WRITER_STATE: usize = 544;
    /// `f64` bits of the refined tick frequency.
    pub const TICKS_PER_SEC: usize = 552;
    /// NCCL_VERSION_CODE once known, else 0.
    pub const NCCL_VERSION: usize = 560;
    /// Communicators that found the table full and are recorded without live state.
    pub const COMM_TABLE_OVERFLOW: usize = 568;
    /// Logical step the rank is in (from step markers) plus one; 0 before the first.
    pub const CURRENT_STEP: usize = 576;
    /// Stage-name slot of the stage the rank is in, plus one; 0 when outside any stage.
    pub const CURRENT_STAGE: usize = 584;
    /// Which doors were open and which injection variables were set
    /// (`core::record::doors`); 0 in logs of libraries that did not record them.
    pub const DOORS: usize = 592;
    /// Format 2: records committed to the history ring so far.
    pub const HISTORY_COMMITTED: usize = 600;
    /// `ncclCommGetAsyncError` polls that found no error (or `ncclInProgress`): counted
    /// here, not recorded (0 in logs of libraries that recorded every poll).
    pub const NCCL_POLLS: usize = 608;
    /// Stage and value markers lost because their name found the stage-name table full
    /// (`stage_names::SLOTS` names): counted here, since nothing else can say so.
    pub const MARKERS_UNNAMED: usize = 616;
    /// How the process ended (`records_end`): `CLOCK_MONOTONIC` and `CLOCK_REALTIME` ns,
    /// then `ProcessEnd::how_word`, stored last; 0 while it has not ended.
    pub const END_MONO_NS: usize = 624;
    pub const END_WALL_NS: usize = 632;
    pub const END_HOW: usize = 640;
    /// Raw ticks of the newest step or stage marker: when the rank last advanced, which
    /// `sf hang` compares across ranks when no collective says who holds the job up; 0
    /// before the first marker.
    pub const PROGRESS_TICKS: usize = 648;
    /// The profiler door's newest KernelCh start and stop: the collective whose kernel the
    /// device last began a channel of, and last finished one of (`kernel_ch::word`; 0:
    /// none yet, and in logs of older libraries), and the start's raw ticks. NCCL reports
    /// a KernelCh event to the plugin only as it stops, so a kernel that never starts, or
    /// never ends, shows here alone.
    pub const KERNEL_CH_STARTED: usize = 656;
    pub const KERNEL_CH_STARTED_TICKS: usize = 664;
    pub const KERNEL_CH_STOPPED: usize = 672;
    /// `sf hang --stacks` asks for the rank's Python stacks by storing a new non-zero word
    /// here (the only word `sf` ever writes into a log); the collector answers by writing
    /// a stack sample and then storing the same word in `STACK_ANSWERED`.
    pub const STACK_REQUEST: usize = 680;
    pub const STACK_ANSWERED: usize = 688;
}

/// The stage-name table, inside the header page: hooks intern a stage name once, and
/// readers resolve the ids in step vectors and `CURRENT_STAGE` through it, even after the
/// records that used a name have wrapped away.
pub mod stage_names {
    pub const OFFSET: usize = 1024;
    pub const SLOTS: usize = 64;
    pub const SLOT_SIZE: usize = 48;
    /// Each slot: a u64 tag (0 empty, 1 being written, else the name's hash with the top
    /// bit set) and the name, NUL-padded.
    pub const NAME_OFFSET: usize = 8;
    pub const NAME_CAPACITY: usize = SLOT_SIZE - NAME_OFFSET;
    pub const EMPTY: u64 = 0;
    pub const WRITING: u64 = 1;
}

const _: () = assert!(stage_names::OFFSET + stage_names::SLOTS * stage_names::SLOT_SIZE <= HEADER_SIZE);

/// Byte offsets within a communicator slot, each an aligned u64 or i64.
pub mod comm {
    /// Process-local `ncclComm_t` value, or one of the markers below.
    pub const KEY: usize = 0;
    pub const COMM_ID: usize = 8;
    /// `rank_in_comm << 32 | nranks`, as u32 halves (-1 when unknown).
    pub const RANK_NRANKS: usize = 16;
    pub const COLL_ENTERED: usize = 24;
    pub const COLL_RETURNED: usize = 32;
    pub const P2P_ENTERED: usize = 40;
    pub const P2P_RETURNED: usize = 48;
    /// Raw ticks at which the call now in flight entered, 0 when none.
    pub const INFLIGHT_TICKS: usize = 56;
    /// `NcclOp` of the call in flight.
    pub const INFLIGHT_OP: usize = 64;
    /// How many `ncclCommSplit` calls used this communicator as parent.
    pub const SPLITS: usize = 72;

    pub const EMPTY: u64 = 0;
    pub const TOMBSTONE: u64 = 1;
    /// A registration is filling the slot in.
    pub const CLAIMING: u64 = 2;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u64)]
pub enum WriterState {
    Running = 1,
    /// The process exited through `exit()` and the collector flushed everything.
    Exited = 2,
    /// The library hit an internal error and stopped recording; the job ran on.
    Disabled = 3,
    /// The collector thread panicked; recording stopped there, the job ran on.
    CollectorPanicked = 4,
}

impl WriterState {
    pub fn from_u64(raw: u64) -> Option<WriterState> {
        match raw {
            1 => Some(WriterState::Running),
            2 => Some(WriterState::Exited),
            3 => Some(WriterState::Disabled),
            4 => Some(WriterState::CollectorPanicked),
            _ => None,
        }
    }
}

/// Total file size for an event ring of `slot_count` records and its history ring.
pub fn file_len(slot_count: u32) -> usize {
    history_offset(slot_count) + history_slots(slot_count) as usize * SLOT_SIZE
}

/// Where the history ring starts: right after the event ring.
pub fn history_offset(slot_count: u32) -> usize {
    records_offset() + slot_count as usize * SLOT_SIZE
}

pub fn records_offset() -> usize {
    HEADER_SIZE + COMM_SLOTS * COMM_SLOT_SIZE
}

/// Little-endian field access on byte slices, for the static parts of the layout.
pub mod bytes {
    pub fn put_u16(buf: &mut [u8], at: usize, v: u16) {
        buf[at..at + 2].copy_from_slice(&v.to_le_bytes());
    }
    pub fn put_u32(buf: &mut [u8], at: usize, v: u32) {
        buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
    pub fn put_u64(buf: &mut [u8], at: usize, v: u64) {
        buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
    pub fn put_i32(buf: &mut [u8], at: usize, v: i32) {
        put_u32(buf, at, v as u32)
    }
    pub fn put_str(buf: &mut [u8], at: usize, len: usize, s: &str) {
        let field = &mut buf[at..at + len];
        field.fill(0);
        let n = s.len().min(len - 1);
        field[..n].copy_from_slice(&s.as_bytes()[..n]);
    }
    pub fn get_u16(buf: &[u8], at: usize) -> u16 {
        u16::from_le_bytes(buf[at..at + 2].try_into().expect("2 bytes"))
    }
    pub fn get_u32(buf: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
    }
    pub fn get_u64(buf: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
    }
    pub fn get_i32(buf: &[u8], at: usize) -> i32 {
        get_u32(buf, at) as i32
    }
    pub fn get_str(buf: &[u8], at: usize, len: usize) -> String {
        let field = &buf[at..at + len];
        let end = field.iter().position(|&b| b == 0).unwrap_or(len);
        String::from_utf8_lossy(&field[..end]).into_owned()
    }
}

/// CRC of a record: covers its sequence number, kind and payload, so a slot holding an
/// older record, a torn write or a record moved to the wrong slot all fail the check.
pub fn record_crc(seq: u64, kind: u16, payload: &[u8]) -> u32 {
    // One contiguous buffer, hashed in one call: the hasher's fast path needs long
    // inputs, and three 2- to 8-byte updates before the payload cost as much as it.
    let mut covered = [0u8; 12 + PAYLOAD_CAPACITY];
    let len = payload.len().min(PAYLOAD_CAPACITY);
    covered[..8].copy_from_slice(&seq.to_le_bytes());
    covered[8..10].copy_from_slice(&kind.to_le_bytes());
    covered[10..12].copy_from_slice(&(payload.len() as u16).to_le_bytes());
    covered[12..12 + len].copy_from_slice(&payload[..len]);
    crc32fast::hash(&covered[..12 + len])
}
