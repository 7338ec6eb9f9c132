//! `SF_CHAIN_PROFILER`: another NCCL profiler plugin this door loads and forwards to.
//!
//! The library is opened once (the first `init`), never closed; for each ABI version the
//! chained plugin's `ncclProfiler_vN` table is looked up once. A plugin that lacks the
//! version NCCL runs is chained through its newest older version from v4 on, else its
//! oldest newer one up to v7, with descriptors converted (`convert`); with none to convert
//! to (NCCL at v1–v3, or a plugin with only v1–v3 behind v4+), one stderr line says so.
//! A path naming this library itself (same device and inode, or a table that is this
//! door's own) is refused with one line: chaining to itself would recurse until the stack
//! overflows.
//!
//! The activation mask: NCCL passes every communicator's `init` the address of one global
//! int (`ncclProfilerEventMask`, src/plugin/profiler.cc at v2.30.7-1) and re-reads it on
//! every API call. NVIDIA's example plugin keeps that pointer and writes through it later.
//! So the chained plugin gets the address of a static here that lives as long as the
//! library, and its later writes are folded into NCCL's mask as soon as the chained
//! plugin's callback returns, before NCCL reads the mask again.

use std::ffi::{c_int, c_void, CString};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use super::abi::ForeignPlugin;
use crate::core::record::notice::{echo, say};
use crate::core::record::once::LeakedOnce;
use crate::core::regular_file::check_shared_object;
use crate::core::runtime::config::Config;

/// Settings the door reads once, whether or not the runtime records.
pub struct Settings {
    pub chain: Option<std::path::PathBuf>,
    pub kernel_ch: bool,
}

/// Read on the first profiler `init`, without a lock (see `core::record::once`).
pub fn settings() -> &'static Settings {
    static SETTINGS: LeakedOnce<Settings> = LeakedOnce::new();
    SETTINGS.get_or_init(|| {
        let (config, _warnings) = Config::from_env(); // the runtime reports the warnings
        Settings { chain: config.chain_profiler, kernel_ch: config.profiler_kernel_ch }
    })
}

const ABSENT: usize = 1;
/// The chained plugin's dlopen handle (never closed), or ABSENT; 0 before the first try.
static LIBRARY: AtomicUsize = AtomicUsize::new(0);
/// Per version NCCL runs (index 1..=7): 0 not looked up, ABSENT, or the address of the
/// chained plugin's table used for it.
static TABLES: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];
/// Per version NCCL runs: the version of the chained plugin's table used for it.
static VERSIONS: [AtomicU8; 8] = [const { AtomicU8::new(0) }; 8];

/// The ABI version of the chained plugin's table for NCCL's `abi` (set by `lookup`).
#[inline]
pub fn version(abi: u8) -> u8 {
    VERSIONS[abi as usize].load(Ordering::Acquire)
}

/// The chained plugin's `ncclProfiler_v{version}`, if it exports one (not a copy of this door).
fn symbol(handle: usize, version: u8) -> Option<usize> {
    let name = CString::new(format!("ncclProfiler_v{version}")).expect("no NUL");
    // SAFETY: `handle` came from dlopen and stays open; the name is NUL-terminated.
    match unsafe { libc::dlsym(handle as *mut c_void, name.as_ptr()) } as usize {
        0 => None,
        // Another copy of this library (a copied file): its tables are its own door.
        found if is_own_table(found) => {
            static SAID: AtomicBool = AtomicBool::new(false);
            say_once(&SAID, "SF_CHAIN_PROFILER names a copy of libstagefrontier; not chaining");
            None
        }
        found => Some(found),
    }
}

/// Says `line` unless a thread of this process already said it.
fn say_once(said: &AtomicBool, line: &str) {
    if !said.swap(true, Ordering::Relaxed) {
        say(line);
    }
}

/// Loaded without a lock: threads racing here each dlopen, which only counts one more
/// reference to the same never-closed library. The file is checked first (a regular file,
/// a whole ELF shared object): a FIFO would block `dlopen`, a truncated object crash it.
fn library() -> usize {
    let known = LIBRARY.load(Ordering::Acquire);
    if known != 0 {
        return if known == ABSENT { 0 } else { known };
    }
    static SAID: AtomicBool = AtomicBool::new(false);
    let handle = match settings().chain.as_ref() {
        None => 0,
        Some(path) => {
            let shown = echo(path.as_os_str().as_bytes());
            if is_this_library(path) {
                say_once(
                    &SAID,
                    &format!("SF_CHAIN_PROFILER={shown} is libstagefrontier itself; not chaining (unset it)"),
                );
                LIBRARY.store(ABSENT, Ordering::Release);
                return 0;
            }
            if let Err(why) = check_shared_object(path) {
                say_once(&SAID, &format!("SF_CHAIN_PROFILER={shown} {why}; not chaining"));
                LIBRARY.store(ABSENT, Ordering::Release);
                return 0;
            }
            let c_path = CString::new(path.as_os_str().as_bytes()).ok();
            // SAFETY: dlopen with a NUL-terminated path; the handle is never closed.
            let handle = c_path.map_or(std::ptr::null_mut(), |c| unsafe {
                libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL)
            });
            if handle.is_null() {
                say_once(&SAID, &format!("SF_CHAIN_PROFILER={shown}: cannot load it; not chaining"));
            }
            handle as usize
        }
    };
    LIBRARY.store(if handle == 0 { ABSENT } else { handle }, Ordering::Release);
    handle
}

/// The chained plugin's table for `abi`, looked up on first use (from `init`): its own
/// `ncclProfiler_v{abi}`, else its newest older one that descriptors convert to.
pub fn lookup(abi: u8) -> Option<&'static ForeignPlugin> {
    let slot = &TABLES[abi as usize];
    if slot.load(Ordering::Acquire) == 0 {
        let (address, version) = match library() {
            0 => (ABSENT, 0),
            handle => {
                // Its own version, else the nearest older one, else the nearest newer one.
                let older = (1..abi).rev().filter(|&v| super::convert::convertible(abi, v));
                let newer = (abi + 1..=7).filter(|&v| super::convert::convertible(abi, v));
                let mut candidates = std::iter::once(abi).chain(older).chain(newer);
                match candidates.find_map(|v| symbol(handle, v).map(|a| (a, v))) {
                    Some(found) => found,
                    None => {
                        let exported: Vec<String> =
                            (1..=7).filter(|&v| symbol(handle, v).is_some()).map(|v| format!("v{v}")).collect();
                        static SAID: AtomicBool = AtomicBool::new(false);
                        if !exported.is_empty() {
                            say_once(
                                &SAID,
                                &format!(
                                    "SF_CHAIN_PROFILER: the plugin exports ncclProfiler_{} and NCCL runs v{abi}; \
                                 no conversion to it, not chaining",
                                    exported.join("/")
                                ),
                            );
                        }
                        (ABSENT, 0)
                    }
                }
            }
        };
        VERSIONS[abi as usize].store(version, Ordering::Release);
        slot.store(address, Ordering::Release);
    }
    table(abi)
}

/// The table for `abi` if `lookup` found one; one load, for the hot callbacks.
#[inline]
pub fn table(abi: u8) -> Option<&'static ForeignPlugin> {
    match TABLES[abi as usize].load(Ordering::Acquire) {
        0 | ABSENT => None,
        // SAFETY: a non-sentinel value is the address dlsym gave for `ncclProfiler_vN`, a
        // static table in a library that is never unloaded.
        address => Some(unsafe { &*(address as *const ForeignPlugin) }),
    }
}

/// Whether `path` is the file this library was loaded from (same device and inode).
fn is_this_library(path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(own) = own_path() else { return false };
    match (std::fs::metadata(path), std::fs::metadata(own)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// The path the dynamic loader opened this library from.
fn own_path() -> Option<std::path::PathBuf> {
    // SAFETY: Dl_info is plain data; dladdr fills it for an address inside a loaded object.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let here = own_path as fn() -> Option<std::path::PathBuf> as *const c_void;
    // SAFETY: `here` is this function's address; `info` is valid for writes.
    if unsafe { libc::dladdr(here, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr's file name is a NUL-terminated string owned by the loader.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    Some(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())))
}

/// Whether the table at `address` names itself as this door does: this library under
/// another path, or a copy of it, whose door would chain to itself in turn.
fn is_own_table(address: usize) -> bool {
    // SAFETY: `address` is a dlsym result for `ncclProfiler_vN`: a table whose first word is
    // its name, a NUL-terminated static string (or null).
    let table = unsafe { &*(address as *const ForeignPlugin) };
    // SAFETY: as above.
    !table.name.is_null() && unsafe { std::ffi::CStr::from_ptr(table.name) } == super::NAME_STR
}

/// The chained plugin's activation mask: its `init` gets this address, for good.
static CHAIN_MASK: AtomicI32 = AtomicI32::new(0);
/// NCCL's activation mask (a global in NCCL), from the latest `init`.
static NCCL_MASK: AtomicPtr<c_int> = AtomicPtr::new(std::ptr::null_mut());
/// The mask this door asks for itself, and the chained mask last folded into NCCL's.
static OWN_MASK: AtomicU64 = AtomicU64::new(0);
static FOLDED: AtomicI32 = AtomicI32::new(0);

/// Where the chained plugin's `init` writes its mask, and may write it again later.
pub fn chain_mask_slot() -> *mut c_int {
    CHAIN_MASK.as_ptr()
}

/// The chained plugin's current mask.
pub fn chain_mask() -> u64 {
    CHAIN_MASK.load(Ordering::Relaxed) as u32 as u64
}

/// After an `init`: the mask NCCL should see is this door's own and the chained one.
pub fn set_masks(nccl: *mut c_int, own: u64) -> c_int {
    let chained = CHAIN_MASK.load(Ordering::Relaxed);
    NCCL_MASK.store(nccl, Ordering::Release);
    OWN_MASK.store(own, Ordering::Relaxed);
    FOLDED.store(chained, Ordering::Relaxed);
    own as c_int | chained
}

/// After each call into the chained plugin: a mask it changed since reaches NCCL.
pub fn fold_mask() {
    let chained = CHAIN_MASK.load(Ordering::Relaxed);
    if chained == FOLDED.load(Ordering::Relaxed) || FOLDED.swap(chained, Ordering::Relaxed) == chained {
        return;
    }
    let nccl = NCCL_MASK.load(Ordering::Acquire);
    if !nccl.is_null() {
        let mask = OWN_MASK.load(Ordering::Relaxed) as c_int | chained;
        // SAFETY: NCCL's activation mask is a global int of libnccl that outlives every
        // communicator (see the module comment); NCCL reads it with relaxed atomic loads.
        unsafe { AtomicI32::from_ptr(nccl) }.store(mask, Ordering::Relaxed);
    }
}
