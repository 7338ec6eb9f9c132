//! The CUDA injection door (CUDA_INJECTION64_PATH). The CUDA driver, in `cuInit`, dlopens
//! the library that variable names and calls its `int InitializeInjection(void)`; from
//! there the door opens CUPTI's activity API (core::cupti). When the library is also
//! LD_PRELOADed, the driver's dlopen finds the object already loaded: one library, one
//! runtime.
//!
//! The CUPTI buffer callbacks below are the door's hot path: they never call CUPTI, never
//! allocate, lock or wait. One takes a free buffer from the pool (or none, counted); the
//! other hands a filled buffer to the collector, which parses it.

// The exported name is the one the CUDA driver looks up.
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::cupti::sys::{CUpti_CallbackDomain, CUpti_CallbackId};
use cudarc::driver::sys::CUcontext;

use crate::core::kernels::cupti::{self, DoorCallbacks};
use crate::core::live::runtime;
use crate::core::record::doors;
use crate::core::runtime::start;
use crate::doors::real_symbol::loaded_objects;
use crate::doors::traced::shielded;

/// Called by the CUDA driver during `cuInit`. Returns 1 (success) whatever happens to the
/// recording: the door must never make CUDA initialisation fail. Only the first call acts.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn InitializeInjection() -> c_int {
    static CALLED: AtomicBool = AtomicBool::new(false);
    if !CALLED.swap(true, Ordering::AcqRel) {
        shielded(open);
    }
    1
}

/// Opens CUPTI for a recording process: not under SF_DISABLE or in a forked child (no
/// runtime), not with SF_CUPTI=0. A process with no rank yet (mp.spawn's children set
/// their device before init_process_group) opens it once the job declares one, on the
/// declaring thread; one that never does never calls CUPTI.
fn open() {
    // Starts the runtime if this is the first call; its config exists once it is active.
    let Some(config) = runtime::active().and_then(|_| start::config()) else {
        if runtime::is_pending() {
            start::when_started(|| {
                shielded(open);
            });
        }
        return;
    };
    if !config.cupti.enabled {
        return;
    }
    let loaded: Vec<PathBuf> =
        loaded_objects().into_iter().map(|path| PathBuf::from(OsStr::from_bytes(path.as_bytes()))).collect();
    let callbacks =
        DoorCallbacks { buffers: (Some(buffer_requested), Some(buffer_completed)), subscriber: Some(ignore_callback) };
    cupti::open(&config.cupti, &loaded, callbacks);
    doors::opened(doors::CUDA);
}

/// `CUpti_BuffersCallbackRequestFunc`: a pool buffer, or none (CUPTI then drops the
/// records and counts them). `max_records` 0: as many as fit.
unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let lent = shielded(|| {
        let session = cupti::session().filter(|_| runtime::is_active())?;
        Some((session.pool.lend()?, session.pool.buffer_bytes()))
    });
    let (pointer, bytes) = lent.flatten().unwrap_or((null_mut(), 0));
    // SAFETY: CUPTI passes three valid out-pointers.
    unsafe {
        *buffer = pointer;
        *size = bytes;
        *max_records = 0;
    }
}

/// `CUpti_BuffersCallbackCompleteFunc`: hands the filled buffer to the collector and
/// returns. A buffer not from the pool (there is none) is left alone.
unsafe extern "C" fn buffer_completed(_context: CUcontext, stream: u32, buffer: *mut u8, _size: usize, valid: usize) {
    shielded(|| {
        if let Some(session) = cupti::session() {
            session.pool.hand_over(buffer, valid, stream);
        }
    });
}

/// `CUpti_CallbackFunc` of the subscription, which enables no callback domain.
unsafe extern "C" fn ignore_callback(_: *mut c_void, _: CUpti_CallbackDomain, _: CUpti_CallbackId, _: *const c_void) {}
