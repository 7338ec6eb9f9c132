//! A writable shared mapping of the rank log that lives as long as the process.
//!
//! It is never unmapped: hooks on any thread may touch the communicator table until the
//! very end of the process, after every destructor has run, so the mapping must outlive
//! them all. The file's size is fixed at creation, which is what keeps memory constant;
//! a file shrunk by someone else is survived (`sigbus_guard`).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::AtomicU64;

pub struct SharedMap {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is shared memory accessed only through atomics (live fields) or by
// the single collector thread (static header, record slots), as the writer documents.
unsafe impl Send for SharedMap {}
// SAFETY: as above.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Sizes `file` (at `path`) to `len` bytes and maps it shared and writable, guarded
    /// from then on against the file shrinking (`sigbus_guard`: the mapping becomes
    /// anonymous memory and recording stops); the first `hot_len` bytes (what hooks touch)
    /// are faulted in now so that no hook takes a page fault. The rest is left to the
    /// collector to fault in as it writes.
    pub fn create(file: &File, len: usize, hot_len: usize, path: &Path) -> io::Result<&'static SharedMap> {
        file.set_len(len as u64)?;
        // SAFETY: a fresh shared mapping of a file we own, sized above; the kernel picks
        // the address. The result is checked against MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let map = SharedMap { base: base.cast(), len };
        super::sigbus_guard::guard(map.base, len, path);
        for page in (0..hot_len.min(len)).step_by(4096) {
            // SAFETY: in bounds, and no other thread has the mapping yet; storing back the
            // byte just read changes nothing but makes the kernel back the page now.
            unsafe {
                let byte = map.base.add(page);
                std::ptr::write_volatile(byte, std::ptr::read_volatile(byte));
            }
        }
        Ok(Box::leak(Box::new(map)))
    }

    /// The 8-byte-aligned u64 at `offset`, as an atomic.
    pub fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        assert!(offset.is_multiple_of(8) && offset + 8 <= self.len, "atomic at {offset}");
        // SAFETY: in bounds and aligned (checked; the base is page-aligned); AtomicU64 has
        // the layout of u64; the mapping lives for the rest of the process.
        unsafe { &*self.base.add(offset).cast::<AtomicU64>() }
    }

    /// Raw pointer to `offset`, for the writer's plain stores into slots it owns.
    pub fn ptr(&self, offset: usize, len: usize) -> *mut u8 {
        assert!(offset + len <= self.len, "range {offset}+{len} of {}", self.len);
        // SAFETY: in bounds (checked above).
        unsafe { self.base.add(offset) }
    }
}
