//! The library's own C API (c_headers/stagefrontier.h): logical steps, ordered stages and
//! side-channel values. Cheap, thread-safe, and no-ops when the library is not recording.

// The exported names are the C API's.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, CStr};

use crate::core::live::runtime;
use crate::core::record::doors;
use crate::core::runtime::declared::{Declaration, DeclaredBy};
use crate::core::runtime::start;
use crate::core::steps::{markers, nvtx_ranges};
use crate::doors::traced::shielded;

/// The bytes of a C string, or None for NULL.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string valid for the duration of the call.
unsafe fn name_bytes<'a>(name: *const c_char) -> Option<&'a [u8]> {
    // SAFETY: per this function's contract.
    (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) }.to_bytes())
}

/// Opens logical step `step` (negative: the step after the last one).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sf_step_begin(step: i64) {
    doors::opened(doors::MARKERS);
    shielded(|| markers::step_begin(step));
}

#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sf_step_end() {
    shielded(markers::step_end);
}

/// # Safety
/// `name` is NULL (ignored) or a NUL-terminated string.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sf_stage_begin(name: *const c_char) {
    // SAFETY: the caller's contract.
    if let Some(name) = unsafe { name_bytes(name) } {
        shielded(|| markers::stage_begin(name));
    }
}

/// # Safety
/// `name` is NULL (ignored) or a NUL-terminated string.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sf_stage_end(name: *const c_char) {
    // SAFETY: the caller's contract.
    if let Some(name) = unsafe { name_bytes(name) } {
        shielded(|| markers::stage_end(name));
    }
}

/// # Safety
/// `name` is NULL (ignored) or a NUL-terminated string.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sf_value(name: *const c_char, value: f64) {
    // SAFETY: the caller's contract.
    if let Some(name) = unsafe { name_bytes(name) } {
        shielded(|| markers::value(name, value));
    }
}

/// 1 when this process records (starting the library if it has not started yet), else 0.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sf_recording() -> c_int {
    shielded(|| runtime::active().is_some() as c_int).unwrap_or(0)
}

/// The job's own word on this process's rank: `torch.distributed.init_process_group`'s
/// rank and world size (the Python door calls this once it returns). Beats the launcher's
/// variables (`runtime::identity` gives the order); a process waiting for its rank starts
/// recording now. Returns what `sf_recording` then returns. A rank outside its world is
/// ignored.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sf_declare_rank(rank: c_int, world_size: c_int) -> c_int {
    shielded(|| {
        if let Some(declaration) = Declaration::new(DeclaredBy::ProcessGroup, rank, world_size) {
            start::declare(declaration);
        }
        runtime::active().is_some() as c_int
    })
    .unwrap_or(0)
}

/// 1 once the program's NVTX ranges (NVTX_INJECTION64_PATH) have opened a step in this
/// process, else 0: the Python door then leaves the steps to them.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sf_nvtx_steps() -> c_int {
    nvtx_ranges::marks_steps() as c_int
}
