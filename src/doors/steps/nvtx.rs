//! The NVTX door (NVTX_INJECTION64_PATH). NVTX v3 is header-only: every module that uses it
//! (libtorch, NCCL, the application) carries its own copy, and on its first NVTX call
//! each copy loads the library named by NVTX_INJECTION64_PATH and calls our exported
//! `InitializeInjectionNvtx2` with its own export-table accessor. We fill that module's
//! function slots with the range callbacks below; slots we leave alone become no-ops, so
//! markers, naming calls and resource calls cost the job nothing.
//!
//! The ABI is NVIDIA's nvtx3 headers' (nvToolsExt.h, nvtxDetail/nvtxTypes.h, nvtxImpl.h,
//! nvtxInit.h); the declarations here are our own minimal subset of it.

// The exported name is the one NVTX looks up.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::ptr::{addr_of, null_mut};

use crate::core::record::doors;
use crate::core::runtime::config::Config;
use crate::core::steps::nvtx_ranges::{self, Message, NO_TRACKING};
use crate::doors::traced::shielded;

/// `NvtxGetExportTableFunc_t`.
type GetExportTable = unsafe extern "C" fn(export_table_id: u32) -> *const c_void;

/// `NvtxFunctionTable`: an array of pointers, each to one function-pointer slot of the
/// module, indexed by callback id. Entry 0 and any we may not write are null.
type FunctionTable = *mut *mut *mut c_void;

/// `GetModuleFunctionTable`: 1 and the table with its entry count for a known module.
type GetModuleFunctionTable =
    unsafe extern "C" fn(module: c_int, table: *mut FunctionTable, size: *mut c_uint) -> c_int;

/// `NVTX_ETID_CALLBACKS`.
const EXPORT_TABLE_CALLBACKS: u32 = 1;

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: Option<GetModuleFunctionTable>,
}

/// `NvtxCallbackModule`.
const MODULE_CORE: c_int = 1;
const MODULE_CORE2: c_int = 5;

/// `NvtxCallbackIdCore`: the thread and process range callbacks.
mod core_id {
    pub const RANGE_START_EX: usize = 4;
    pub const RANGE_START_A: usize = 5;
    pub const RANGE_START_W: usize = 6;
    pub const RANGE_END: usize = 7;
    pub const RANGE_PUSH_EX: usize = 8;
    pub const RANGE_PUSH_A: usize = 9;
    pub const RANGE_PUSH_W: usize = 10;
    pub const RANGE_POP: usize = 11;
}

/// `NvtxCallbackIdCore2`: the domain variants, and what makes domains and registered
/// strings work.
mod core2_id {
    pub const DOMAIN_RANGE_START_EX: usize = 2;
    pub const DOMAIN_RANGE_END: usize = 3;
    pub const DOMAIN_RANGE_PUSH_EX: usize = 4;
    pub const DOMAIN_RANGE_POP: usize = 5;
    pub const DOMAIN_REGISTER_STRING_A: usize = 10;
    pub const DOMAIN_REGISTER_STRING_W: usize = 11;
    pub const DOMAIN_CREATE_A: usize = 12;
    pub const DOMAIN_CREATE_W: usize = 13;
}

/// `nvtxEventAttributes_t` (version 2, 48 bytes). The payload and message are unions of
/// 8-byte members; we only read the message as a pointer.
// Every field is declared so the layout is NVTX's; only size and the message are read.
#[allow(dead_code)]
#[repr(C)]
struct EventAttributes {
    version: u16,
    size: u16,
    category: u32,
    color_type: i32,
    color: u32,
    payload_type: i32,
    reserved0: i32,
    payload: u64,
    message_type: i32,
    message: *const c_void,
}

const _: () = assert!(size_of::<EventAttributes>() == 48 && std::mem::offset_of!(EventAttributes, message) == 40);

/// `nvtxMessageType_t`. UNICODE (2) is never a step or stage.
const MESSAGE_ASCII: i32 = 1;
const MESSAGE_REGISTERED: i32 = 3;

type Domain = *mut c_void;
type WideChar = libc::wchar_t;

/// # Safety
/// `text` is NULL or a NUL-terminated string valid for the call.
unsafe fn ascii<'a>(text: *const c_char) -> Message<'a> {
    if text.is_null() {
        return Message::Ignored;
    }
    // SAFETY: per this function's contract.
    Message::Ascii(unsafe { CStr::from_ptr(text) }.to_bytes())
}

/// # Safety
/// `attributes` is NULL or points to an event-attributes structure of at least the size
/// its `size` field states, whose message is valid for its type (NVTX's contract).
unsafe fn message<'a>(attributes: *const EventAttributes) -> Message<'a> {
    if attributes.is_null() {
        return Message::Ignored;
    }
    // SAFETY: every version of the structure starts with version and size.
    let size = unsafe { addr_of!((*attributes).size).read() };
    // A smaller structure is one we do not know; reading on would go past its end.
    if (size as usize) < size_of::<EventAttributes>() {
        return Message::Ignored;
    }
    // SAFETY: the caller says it is at least as large as ours; checked just above.
    let attributes = unsafe { &*attributes };
    match attributes.message_type {
        // SAFETY: an ASCII message is a NUL-terminated string (or NULL).
        MESSAGE_ASCII => unsafe { ascii(attributes.message.cast()) },
        MESSAGE_REGISTERED => Message::Registered(attributes.message as usize),
        _ => Message::Ignored,
    }
}

fn domain_key(domain: Domain) -> usize {
    // The default domain is NULL, which NVTX defines as the same as nvtxRangePush's.
    domain as usize
}

unsafe extern "C" fn range_push_a(text: *const c_char) -> c_int {
    // SAFETY: NVTX passes the caller's NUL-terminated message.
    let text = unsafe { ascii(text) };
    shielded(|| nvtx_ranges::push(0, text)).unwrap_or(NO_TRACKING)
}

unsafe extern "C" fn range_push_w(_text: *const WideChar) -> c_int {
    // Still pushed, so that its pop does not end one of ours.
    shielded(|| nvtx_ranges::push(0, Message::Ignored)).unwrap_or(NO_TRACKING)
}

unsafe extern "C" fn range_push_ex(attributes: *const EventAttributes) -> c_int {
    // SAFETY: NVTX passes the caller's attributes under its contract.
    let message = unsafe { message(attributes) };
    shielded(|| nvtx_ranges::push(0, message)).unwrap_or(NO_TRACKING)
}

unsafe extern "C" fn range_pop() -> c_int {
    shielded(|| nvtx_ranges::pop(0)).unwrap_or(NO_TRACKING)
}

unsafe extern "C" fn range_start_a(text: *const c_char) -> u64 {
    // SAFETY: as in `range_push_a`.
    let text = unsafe { ascii(text) };
    shielded(|| nvtx_ranges::start(text)).unwrap_or(0)
}

unsafe extern "C" fn range_start_w(_text: *const WideChar) -> u64 {
    shielded(|| nvtx_ranges::start(Message::Ignored)).unwrap_or(0)
}

unsafe extern "C" fn range_start_ex(attributes: *const EventAttributes) -> u64 {
    // SAFETY: as in `range_push_ex`.
    let message = unsafe { message(attributes) };
    shielded(|| nvtx_ranges::start(message)).unwrap_or(0)
}

unsafe extern "C" fn range_end(id: u64) {
    shielded(|| nvtx_ranges::end(id));
}

unsafe extern "C" fn domain_range_push_ex(domain: Domain, attributes: *const EventAttributes) -> c_int {
    // SAFETY: as in `range_push_ex`.
    let message = unsafe { message(attributes) };
    shielded(|| nvtx_ranges::push(domain_key(domain), message)).unwrap_or(NO_TRACKING)
}

unsafe extern "C" fn domain_range_pop(domain: Domain) -> c_int {
    shielded(|| nvtx_ranges::pop(domain_key(domain))).unwrap_or(NO_TRACKING)
}

unsafe extern "C" fn domain_range_start_ex(_domain: Domain, attributes: *const EventAttributes) -> u64 {
    // SAFETY: as in `range_push_ex`.
    let message = unsafe { message(attributes) };
    shielded(|| nvtx_ranges::start(message)).unwrap_or(0)
}

unsafe extern "C" fn domain_range_end(_domain: Domain, id: u64) {
    shielded(|| nvtx_ranges::end(id));
}

unsafe extern "C" fn domain_register_string_a(_domain: Domain, text: *const c_char) -> *mut c_void {
    // SAFETY: as in `range_push_a`.
    let text = match unsafe { ascii(text) } {
        Message::Ascii(text) => text,
        _ => b"",
    };
    shielded(|| nvtx_ranges::register_string(text)).unwrap_or(0) as *mut c_void
}

unsafe extern "C" fn domain_register_string_w(_domain: Domain, _text: *const WideChar) -> *mut c_void {
    // Wide strings are never steps or stages, but the handle must still be one of ours.
    shielded(|| nvtx_ranges::register_string(b"")).unwrap_or(0) as *mut c_void
}

unsafe extern "C" fn domain_create_a(name: *const c_char) -> Domain {
    // SAFETY: NVTX passes the caller's NUL-terminated domain name (or NULL).
    let name = if name.is_null() { &[][..] } else { unsafe { CStr::from_ptr(name) }.to_bytes() };
    shielded(|| nvtx_ranges::domain_handle(name)).unwrap_or(0) as Domain
}

unsafe extern "C" fn domain_create_w(name: *const WideChar) -> Domain {
    let mut units = 0;
    // SAFETY: NVTX passes the caller's NUL-terminated wide domain name.
    while !name.is_null() && unsafe { *name.add(units) } != 0 {
        units += 1;
    }
    let bytes = match units {
        0 => &[][..],
        // SAFETY: the `units` wide characters just read, seen as bytes.
        _ => unsafe { std::slice::from_raw_parts(name.cast::<u8>(), units * size_of::<WideChar>()) },
    };
    shielded(|| nvtx_ranges::domain_handle(bytes)).unwrap_or(0) as Domain
}

/// Writes `callbacks` into the slots of one of the module's function tables. Returns
/// whether the module has that table.
///
/// # Safety
/// `get_module` is the module's `GetModuleFunctionTable`.
unsafe fn fill(get_module: GetModuleFunctionTable, module: c_int, callbacks: &[(usize, *mut c_void)]) -> bool {
    let mut table: FunctionTable = null_mut();
    let mut size: c_uint = 0;
    // SAFETY: both out-pointers are valid locals.
    if unsafe { get_module(module, &mut table, &mut size) } == 0 || table.is_null() {
        return false;
    }
    for &(id, callback) in callbacks {
        // `size` counts the table's entries, so an older NVTX without this callback has
        // no slot for it.
        if id >= size as usize {
            continue;
        }
        // SAFETY: `id` is within the table's `size` entries.
        let slot = unsafe { *table.add(id) };
        if !slot.is_null() {
            // SAFETY: a non-null entry points to the module's slot for callback `id`,
            // which takes a function of the type NVTX declares for it (ours below).
            // Writing the same pointers again is harmless, so a module initializing twice
            // is no different.
            unsafe { slot.write(callback) };
        }
    }
    true
}

/// Attaches to one NVTX module: 1 when its tables were filled, 0 (NVTX then makes every
/// call of that module a no-op) when recording is disabled or the module offers no tables.
///
/// # Safety
/// `get_export_table` is NVTX's accessor, as InitializeInjectionNvtx2 receives it.
unsafe fn attach(get_export_table: Option<GetExportTable>) -> c_int {
    // Warnings about the settings are the runtime's to print, once, in processes that record.
    let (config, _warnings) = Config::from_env();
    if config.disabled {
        return 0;
    }
    nvtx_ranges::install(&config.nvtx_step, &config.nvtx_stages);
    let Some(get_export_table) = get_export_table else { return 0 };
    // SAFETY: NVTX's accessor takes any id and returns NULL for those it lacks.
    let exports = unsafe { get_export_table(EXPORT_TABLE_CALLBACKS) }.cast::<ExportTableCallbacks>();
    if exports.is_null() {
        return 0;
    }
    // SAFETY: the callbacks table starts with its size.
    let struct_size = unsafe { addr_of!((*exports).struct_size).read() };
    if struct_size < size_of::<ExportTableCallbacks>() {
        return 0;
    }
    // SAFETY: the table is at least as large as ours, checked above.
    let Some(get_module) = (unsafe { (*exports).get_module_function_table }) else { return 0 };

    use core2_id::*;
    use core_id::*;
    let core: [(usize, *mut c_void); 8] = [
        (RANGE_START_EX, range_start_ex as *mut c_void),
        (RANGE_START_A, range_start_a as *mut c_void),
        (RANGE_START_W, range_start_w as *mut c_void),
        (RANGE_END, range_end as *mut c_void),
        (RANGE_PUSH_EX, range_push_ex as *mut c_void),
        (RANGE_PUSH_A, range_push_a as *mut c_void),
        (RANGE_PUSH_W, range_push_w as *mut c_void),
        (RANGE_POP, range_pop as *mut c_void),
    ];
    let core2: [(usize, *mut c_void); 8] = [
        (DOMAIN_RANGE_START_EX, domain_range_start_ex as *mut c_void),
        (DOMAIN_RANGE_END, domain_range_end as *mut c_void),
        (DOMAIN_RANGE_PUSH_EX, domain_range_push_ex as *mut c_void),
        (DOMAIN_RANGE_POP, domain_range_pop as *mut c_void),
        (DOMAIN_REGISTER_STRING_A, domain_register_string_a as *mut c_void),
        (DOMAIN_REGISTER_STRING_W, domain_register_string_w as *mut c_void),
        (DOMAIN_CREATE_A, domain_create_a as *mut c_void),
        (DOMAIN_CREATE_W, domain_create_w as *mut c_void),
    ];
    // SAFETY: `get_module` is this module's, from its callbacks table.
    let filled = unsafe { fill(get_module, MODULE_CORE, &core) | fill(get_module, MODULE_CORE2, &core2) };
    if filled {
        doors::opened(doors::NVTX);
    }
    filled as c_int
}

/// NVTX's entry point into an injection library, called once by each module that uses
/// NVTX (so possibly many times, from several threads at once): every call attaches that
/// module and returns 1, unless SF_DISABLE=1 leaves NVTX to itself.
///
/// # Safety
/// Called by NVTX with its export-table accessor (or NULL, refused).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn InitializeInjectionNvtx2(get_export_table: Option<GetExportTable>) -> c_int {
    // SAFETY: the caller's contract.
    shielded(|| unsafe { attach(get_export_table) }).unwrap_or(0)
}
