//! The collector's side of a rank log: the header at creation, then records into the
//! ring their kind belongs to (`Region::of`), each committed last with a release store.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{fence, Ordering};

use super::format::{self, bytes, header, live, Region, WriterState};
use super::mapping::SharedMap;
use super::private_dir::PrivateDir;
use super::records::RecordBody;
use crate::core::log::identity::Identity;
use crate::core::log::process_stamp::ProcessStamp;
use crate::core::record::clock::Calibration;

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
    events: Ring,
    history: Ring,
}

/// One ring of slots in the log: where it starts, how many slots, what it has committed,
/// and the live header word that publishes the count.
struct Ring {
    offset: usize,
    slot_count: u64,
    committed: u64,
    published_at: usize,
}

impl LogWriter {
    /// Creates the log at `path` in a directory of ours (see `create_in`), file mode 0600.
    pub fn create(path: &Path, info: &HeaderInfo) -> io::Result<LogWriter> {
        let parent = path.parent().unwrap_or(Path::new("."));
        let dir = PrivateDir::open_root(parent, 0o700).map_err(|e| io::Error::other(e.message().to_string()))?;
        let name = path.file_name().and_then(|n| n.to_str()).ok_or(io::ErrorKind::InvalidInput)?;
        LogWriter::create_in(&dir, name, info, 0o600)
    }

    /// Creates the log `name` in `dir`, which must not exist (the caller decides what to do
    /// with an old one), reserves every byte of it, and writes its header.
    ///
    /// The file is built under a temporary name and linked into place whole, so a reader
    /// never finds a log without its header, and two processes claiming the same name
    /// cannot both win (`link` fails if the name exists). The temporary name is removed
    /// whatever happens.
    ///
    /// Every block is allocated here (`posix_fallocate`), so no later store into the
    /// mapping can fault for want of space, even when the filesystem fills up afterwards
    /// (on a sparse file a full tmpfs answers a store with SIGBUS). An error with
    /// `ENOSPC`, `EDQUOT` or `EFBIG` means the room is not there.
    pub fn create_in(dir: &PrivateDir, name: &str, info: &HeaderInfo, mode: u32) -> io::Result<LogWriter> {
        let staging = format!("{name}.{}.tmp", info.pid);
        let c_staging = CString::new(staging.as_str())?;
        let c_name = CString::new(name)?;
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: openat on an open directory with a NUL-terminated name; checked below.
        let fd = unsafe { libc::openat(dir.fd(), c_staging.as_ptr(), flags, mode as libc::c_uint) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: openat returned a fresh descriptor that nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        let len = format::file_len(info.slot_count);
        let placed = reserve(&file, mode, len).and_then(|()| write_header(&file, info)).and_then(|()| {
            // SAFETY: linkat between names in one open directory, both NUL-terminated.
            match unsafe { libc::linkat(dir.fd(), c_staging.as_ptr(), dir.fd(), c_name.as_ptr(), 0) } {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            }
        });
        dir.remove(&staging);
        placed?;
        let map = SharedMap::create(&file, len, format::records_offset(), &dir.path().join(name))?;
        let events = Ring {
            offset: format::records_offset(),
            slot_count: info.slot_count as u64,
            committed: 0,
            published_at: live::COMMITTED,
        };
        let history = Ring {
            offset: format::history_offset(info.slot_count),
            slot_count: format::history_slots(info.slot_count) as u64,
            committed: 0,
            published_at: live::HISTORY_COMMITTED,
        };
        Ok(LogWriter { map, events, history })
    }

    pub fn map(&self) -> &'static SharedMap {
        self.map
    }

    /// Appends one record to its kind's ring; on wraparound it overwrites that ring's
    /// oldest.
    pub fn append(&mut self, body: &RecordBody) {
        let kind = body.kind();
        let ring = match Region::of(kind) {
            Region::Events => &mut self.events,
            Region::History => &mut self.history,
        };
        let seq = ring.committed + 1;
        let mut payload = [0u8; format::PAYLOAD_CAPACITY];
        let len = body.encode(&mut payload);
        let crc = format::record_crc(seq, kind, &payload[..len]);

        let offset = ring.offset + ((seq - 1) % ring.slot_count) as usize * format::SLOT_SIZE;
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
        ring.committed = seq;
        self.map.atomic_u64(ring.published_at).store(seq, Ordering::Release);
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

/// Gives the new file exactly `mode` (the umask may have taken bits `SF_LOG_MODE` asked
/// for) and allocates all `len` bytes of it.
fn reserve(file: &File, mode: u32, len: usize) -> io::Result<()> {
    // SAFETY: fchmod on a descriptor we own.
    if unsafe { libc::fchmod(file.as_raw_fd(), mode) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: posix_fallocate on a descriptor we own; it returns the error number itself.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) } {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// Rewrites the rank fields of a live log's static header, and its checksum: the job
/// declared another rank than its launcher's variables gave (`runtime::start::declare`).
/// A reader that reads the header in that moment finds the checksum wrong and skips the
/// log for that read.
pub fn relabel(map: &SharedMap, identity: &Identity) {
    let mut head = [0u8; format::STATIC_CRC_OFFSET + 4];
    let base = map.ptr(0, head.len());
    // SAFETY: `base` covers `head.len()` bytes of our own mapping (checked by `ptr`); only
    // this thread writes the static header after creation.
    unsafe { std::ptr::copy_nonoverlapping(base, head.as_mut_ptr(), head.len()) };
    bytes::put_i32(&mut head, header::GLOBAL_RANK, identity.global_rank);
    bytes::put_i32(&mut head, header::WORLD_SIZE, identity.world_size);
    bytes::put_i32(&mut head, header::LOCAL_RANK, identity.local_rank);
    bytes::put_str(&mut head, header::IDENTITY_SOURCE, format::SOURCE_LEN, identity.source);
    let crc = crc32fast::hash(&head[..format::STATIC_HEADER_LEN]);
    bytes::put_u32(&mut head, format::STATIC_CRC_OFFSET, crc);
    // SAFETY: as above.
    unsafe { std::ptr::copy_nonoverlapping(head.as_ptr(), base, head.len()) };
}

/// Writes the header with plain writes, before anything is mapped.
fn write_header(file: &File, info: &HeaderInfo) -> io::Result<()> {
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
    bytes::put_u32(buf, header::HISTORY_SLOT_COUNT, format::history_slots(info.slot_count));
    bytes::put_u64(buf, header::HISTORY_OFFSET, format::history_offset(info.slot_count) as u64);
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
