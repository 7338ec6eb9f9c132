//! The CUDA injection door (CUDA_INJECTION64_PATH). The CUDA driver, in `cuInit`, dlopens
//! the library that variable names and calls its `int InitializeInjection(void)`; from
//! there the door opens CUPTI's activity API (core::cupti). When the library is also
//! LD_PRELOADed, the driver's dlopen finds the object already loaded: one library, one
//! runtime.
//!
//! The CUPTI callbacks below are the door's hot path: they never call CUPTI, never
//! allocate, lock or wait. One takes a free buffer from the pool (or none, counted); one
//! hands a filled buffer to the collector, which parses it; the API callback pushes one
//! event per launch and per synchronization ENTER and EXIT into the ring.

// The exported name is the one the CUDA driver looks up.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_void, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::cupti::sys::{
    cuLaunchKernelEx_params, cuLaunchKernel_params, cudaLaunchKernel_v7000_params, CUpti_ApiCallbackSite,
    CUpti_CallbackData, CUpti_CallbackDomain, CUpti_CallbackId,
};
use cudarc::driver::sys::CUcontext;

use crate::core::kernels::cupti::callbacks::{self, ApiCall, Traced};
use crate::core::kernels::cupti::{self, DoorCallbacks};
use crate::core::live::event::Launch;
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

/// Opens CUPTI for a recording process: not for one without rank identity (inert), not
/// under SF_DISABLE or in a forked child (no runtime), not with SF_CUPTI=0.
fn open() {
    // Starts the runtime if this is the first call; its config exists once it is active.
    let Some(config) = runtime::active().and_then(|_| start::config()) else { return };
    if !config.cupti.enabled {
        return;
    }
    let loaded: Vec<PathBuf> =
        loaded_objects().into_iter().map(|path| PathBuf::from(OsStr::from_bytes(path.as_bytes()))).collect();
    // SAFETY: the same C signature as CUpti_CallbackFunc; `api_callback` takes the domain
    // as the u32 C passes, so a domain Rust's enum lacks is no invalid value.
    let subscriber = unsafe {
        std::mem::transmute::<unsafe extern "C" fn(*mut c_void, u32, CUpti_CallbackId, *const c_void), ApiCallback>(
            api_callback,
        )
    };
    let callbacks =
        DoorCallbacks { buffers: (Some(buffer_requested), Some(buffer_completed)), subscriber: Some(subscriber) };
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

type ApiCallback = unsafe extern "C" fn(*mut c_void, CUpti_CallbackDomain, CUpti_CallbackId, *const c_void);

/// `CUpti_CallbackFunc` of the subscription: the launches and host synchronizations
/// `callbacks::enabled` turned on, one ring push each (core::kernels::cupti::callbacks).
/// Reads only the callback data CUPTI passes for the call: the site, the correlation id,
/// the kernel's name (a bounded prefix) and the stream from the launch's parameters.
/// Public for examples/cupti_callback_bench, which times it.
///
/// # Safety
/// Called by CUPTI with its callback arguments: `data` null or a `CUpti_CallbackData` valid
/// for the call, for the API domains.
pub unsafe extern "C" fn api_callback(_: *mut c_void, domain: u32, cbid: CUpti_CallbackId, data: *const c_void) {
    let Some(what) = callbacks::traced(domain, cbid) else { return };
    if data.is_null() {
        return;
    }
    shielded(|| {
        // SAFETY: for API domains CUPTI passes a CUpti_CallbackData valid during the call.
        let data = unsafe { &*(data as *const CUpti_CallbackData) };
        let exit = data.callbackSite == CUpti_ApiCallbackSite::CUPTI_API_EXIT;
        let mut name = [0u8; Launch::NAME_BYTES + 1];
        let (symbol, stream_handle) = match what {
            // SAFETY: a launch callback's symbolName is null or a NUL-terminated name, and
            // its functionParams null or the parameters of the cbid's function.
            Traced::Launch if !exit => unsafe {
                (symbol(data.symbolName, &mut name), launch_stream(domain, cbid, data))
            },
            _ => (&name[..0], 0),
        };
        callbacks::on_api(what, &ApiCall { exit, correlation: data.correlationId, symbol, stream_handle });
    });
}

/// The first `Launch::NAME_BYTES + 1` bytes of the name at `pointer` (one more than a launch
/// keeps, so a longer name shows as cut), copied into `out`.
///
/// # Safety
/// `pointer` is null or a NUL-terminated string.
unsafe fn symbol(pointer: *const c_char, out: &mut [u8; Launch::NAME_BYTES + 1]) -> &[u8] {
    if pointer.is_null() {
        return &out[..0];
    }
    let mut len = 0;
    // SAFETY: reading stops at the NUL or at the buffer's size, whichever comes first.
    while len < out.len() && unsafe { *pointer.add(len) } != 0 {
        out[len] = unsafe { *pointer.add(len) } as u8;
        len += 1;
    }
    &out[..len]
}

/// The stream a launch goes to, from its parameters (0 when CUPTI passed none).
///
/// # Safety
/// `data.functionParams` is null or the parameter block of `cbid`'s function.
unsafe fn launch_stream(domain: u32, cbid: CUpti_CallbackId, data: &CUpti_CallbackData) -> u64 {
    let params = data.functionParams;
    if params.is_null() {
        return 0;
    }
    use cudarc::cupti::sys::CUpti_driver_api_trace_cbid as Driver;
    // SAFETY: per this function's contract, `params` has the layout cudarc binds for cbid.
    unsafe {
        if domain == callbacks::RUNTIME_DOMAIN {
            // cudaLaunchKernel and its _ptsz twin share one parameter layout.
            return (*(params as *const cudaLaunchKernel_v7000_params)).stream as u64;
        }
        if cbid == Driver::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx as u32
            || cbid == Driver::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz as u32
        {
            let config = (*(params as *const cuLaunchKernelEx_params)).config;
            return if config.is_null() { 0 } else { (*config).hStream as u64 };
        }
        (*(params as *const cuLaunchKernel_params)).hStream as u64
    }
}
