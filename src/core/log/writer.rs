//! The collector's side of a rank log: the header at creation, then records into the ring
//! of slots, each committed last with a release store.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{fence, Ordering};

use super::format::{self, bytes, header, live, WriterState};
use super::mapping::SharedMap;
use super::records::RecordBody;
use crate::core::capture::clock::Calibration;
use crate::core::capture::identity::Identity;
use crate::core::capture::process_stamp::ProcessStamp;

/// Everything the static header records.
pub struct HeaderInfo<'a> {
    pub identity: &'a Identity,
    pub pid: u32,
    pub host: &'a str,
    pub calibration: &'a Calibration,
    pub slot_count: u32,
    pub ring_capacity: u32,
}

pub struct LogWriter {
    map: &'static SharedMap,
    slot_count: u64,
    committed: u64,
}

impl LogWriter {
    /// Creates the log at `path`, which must not exist (the caller decides what to do with
    /// an old one), and writes its header.
    ///
    /// The file is built under a temporary name and linked into place whole, so a reader
    /// never finds a log without its header, and two processes claiming the same name
    /// cannot both win (`link` fails if the name exists).
    pub fn create(path: &Path, info: &HeaderInfo) -> io::Result<LogWriter> {
        let mut staging = path.as_os_str().to_owned();
        staging.push(format!(".{}.tmp", info.pid));
        let staging = std::path::PathBuf::from(staging);
        let file: File = OpenOptions::new().read(true).write(true).create_new(true).mode(0o644).open(&staging)?;
        let placed = write_header(&file, info).and_then(|()| std::fs::hard_link(&staging, path));
        let _ = std::fs::remove_file(&staging);
        placed?;
        let map = SharedMap::create(&file, format::file_len(info.slot_count), format::records_offset())?;
        Ok(LogWriter { map, slot_count: info.slot_count as u64, committed: 0 })
    }

    pub fn map(&self) -> &'static SharedMap {
        self.map
    }

    /// Appends one record; on wraparound it overwrites the oldest.
    pub fn append(&mut self, body: &RecordBody) {
        let seq = self.committed + 1;
        let mut payload = [0u8; format::PAYLOAD_CAPACITY];
        let len = body.encode(&mut payload);
        let kind = body.kind();
        let crc = format::record_crc(seq, kind, &payload[..len]);

        let offset = format::records_offset() + ((seq - 1) % self.slot_count) as usize * format::SLOT_SIZE;
        let commit = self.map.atomic_u64(offset);
        // Invalidate first, so a reader never pairs this slot's old commit word with new bytes.
        commit.store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        let mut slot = [0u8; format::SLOT_SIZE - 8];
        bytes::put_u16(&mut slot, 0, kind);
        bytes::put_u16(&mut slot, 2, len as u16);
        bytes::put_u32(&mut slot, 4, crc);
        slot[8..8 + len].copy_from_slice(&payload[..len]);
        // SAFETY: the slot's body is in bounds; only this (single) writer stores to it.
        unsafe { std::ptr::copy_nonoverlapping(slot.as_ptr(), self.map.ptr(offset + 8, slot.len()), slot.len()) };
        commit.store(seq, Ordering::Release);
        self.committed = seq;
        self.map.atomic_u64(live::COMMITTED).store(seq, Ordering::Release);
    }

    pub fn heartbeat(&self, mono_ns: u64, wall_ns: u64, ticks_per_sec: f64) {
        self.set(live::TICKS_PER_SEC, ticks_per_sec.to_bits());
        self.set(live::HEARTBEAT_MONO_NS, mono_ns);
        self.set(live::HEARTBEAT_WALL_NS, wall_ns);
    }

    pub fn set(&self, field: usize, value: u64) {
        self.map.atomic_u64(field).store(value, Ordering::Release);
    }
}

/// Sizes the file and writes the header with plain writes, before anything is mapped.
fn write_header(file: &File, info: &HeaderInfo) -> io::Result<()> {
    file.set_len(format::file_len(info.slot_count) as u64)?;
    let mut head = [0u8; live::TICKS_PER_SEC + 8];
    encode_static_header(&mut head, info);
    let crc = crc32fast::hash(&head[..format::STATIC_HEADER_LEN]);
    bytes::put_u32(&mut head, format::STATIC_CRC_OFFSET, crc);
    bytes::put_u64(&mut head, live::TICKS_PER_SEC, info.calibration.ticks_per_sec().to_bits());
    bytes::put_u64(&mut head, live::WRITER_STATE, WriterState::Running as u64);
    file.write_all_at(&head, 0)
}

fn encode_static_header(buf: &mut [u8], info: &HeaderInfo) {
    buf[header::MAGIC..header::MAGIC + 8].copy_from_slice(&format::MAGIC);
    bytes::put_u32(buf, header::FORMAT_VERSION, format::FORMAT_VERSION);
    buf[header::ENDIAN..header::ENDIAN + 4].copy_from_slice(&format::ENDIAN_MARKER.to_ne_bytes());
    bytes::put_u32(buf, header::HEADER_SIZE, format::HEADER_SIZE as u32);
    bytes::put_u32(buf, header::SCHEMA, format::SCHEMA_VERSION);
    bytes::put_u32(buf, header::SLOT_SIZE, format::SLOT_SIZE as u32);
    bytes::put_u32(buf, header::SLOT_COUNT, info.slot_count);
    bytes::put_u64(buf, header::COMM_TABLE_OFFSET, format::HEADER_SIZE as u64);
    bytes::put_u32(buf, header::COMM_SLOTS, format::COMM_SLOTS as u32);
    bytes::put_u32(buf, header::COMM_SLOT_SIZE, format::COMM_SLOT_SIZE as u32);
    bytes::put_u64(buf, header::RECORDS_OFFSET, format::records_offset() as u64);
    bytes::put_u32(buf, header::PID, info.pid);
    bytes::put_i32(buf, header::GLOBAL_RANK, info.identity.global_rank);
    bytes::put_i32(buf, header::WORLD_SIZE, info.identity.world_size);
    bytes::put_i32(buf, header::LOCAL_RANK, info.identity.local_rank);
    bytes::put_u32(buf, header::CLOCK_SOURCE, info.calibration.source as u32);
    bytes::put_u32(buf, header::RING_CAPACITY, info.ring_capacity);
    bytes::put_u64(buf, header::BASE_TICKS, info.calibration.base_ticks);
    bytes::put_u64(buf, header::BASE_MONO_NS, info.calibration.base_mono_ns);
    bytes::put_u64(buf, header::BASE_WALL_NS, info.calibration.base_wall_ns);
    bytes::put_str(buf, header::JOB_ID, format::JOB_ID_LEN, &info.identity.job_id);
    bytes::put_str(buf, header::HOST, format::HOST_LEN, info.host);
    bytes::put_str(buf, header::IDENTITY_SOURCE, format::SOURCE_LEN, info.identity.source);
    // Only a header naming its own writer can carry the writer's stamp.
    if let Some(stamp) = (info.pid == std::process::id()).then(ProcessStamp::of_self).flatten() {
        buf[header::BOOT_ID..header::BOOT_ID + 16].copy_from_slice(&stamp.boot_id);
        bytes::put_u64(buf, header::PID_NAMESPACE, stamp.pid_namespace);
        bytes::put_u64(buf, header::PROCESS_START, stamp.start_ticks);
    }
}
