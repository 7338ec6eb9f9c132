//! `SF_CHAIN_PROFILER`: another NCCL profiler plugin this door loads and forwards to.
//!
//! The library is opened once (the first `init`), never closed; for each ABI version the
//! chained plugin's `ncclProfiler_vN` table is looked up once. A version the chained
//! plugin lacks is not chained (converting descriptors between versions is not attempted).

use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::abi::ForeignPlugin;
use crate::core::capture::config::Config;
use crate::core::capture::notice::say;
use crate::core::capture::once::LeakedOnce;

/// Settings the door reads once, whether or not the runtime records.
pub struct Settings {
    pub chain: Option<std::path::PathBuf>,
    pub kernel_ch: bool,
}

/// Read on the first profiler `init`, without a lock (see `core::capture::once`).
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
/// Per version (index 1..=7): 0 not looked up, ABSENT, or the table's address.
static TABLES: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];

/// Loaded without a lock: threads racing here each dlopen, which only counts one more
/// reference to the same never-closed library.
fn library() -> usize {
    let known = LIBRARY.load(Ordering::Acquire);
    if known != 0 {
        return if known == ABSENT { 0 } else { known };
    }
    let handle = match settings().chain.as_ref() {
        None => 0,
        Some(path) => {
            let c_path = CString::new(path.as_os_str().as_encoded_bytes()).ok();
            // SAFETY: dlopen with a NUL-terminated path; the handle is never closed.
            let handle = c_path.map_or(std::ptr::null_mut(), |c| unsafe {
                libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL)
            });
            if handle.is_null() && LIBRARY.load(Ordering::Acquire) == 0 {
                say(&format!("SF_CHAIN_PROFILER={}: cannot load it; not chaining", path.display()));
            }
            handle as usize
        }
    };
    LIBRARY.store(if handle == 0 { ABSENT } else { handle }, Ordering::Release);
    handle
}

/// The chained plugin's table for `abi`, looked up on first use (from `init`).
pub fn lookup(abi: u8) -> Option<&'static ForeignPlugin> {
    let slot = &TABLES[abi as usize];
    let mut address = slot.load(Ordering::Acquire);
    if address == 0 {
        let handle = library();
        let symbol = CString::new(format!("ncclProfiler_v{abi}")).expect("no NUL");
        address = match handle {
            0 => ABSENT,
            // SAFETY: `handle` came from dlopen and stays open; the name is NUL-terminated.
            h => match unsafe { libc::dlsym(h as *mut c_void, symbol.as_ptr()) } as usize {
                0 => ABSENT,
                found => found,
            },
        };
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
