//! The `dlvsym` the library exports: how the verbs door gets between NCCL and libibverbs.
//!
//! NCCL (< 2.26 has no profiler network events) loads libibverbs privately with `dlopen`
//! and looks each verb up with `dlvsym(handle, "ibv_open_device", "IBVERBS_1.1")`. With
//! SF_VERBS=1 a lookup through such a handle of a verb in `verbs::wrapper_for` gets the
//! door's counting wrapper; every other call gets exactly what glibc's `dlvsym` gives.
//!
//! glibc resolves `RTLD_NEXT` and `RTLD_DEFAULT` relative to the *calling* object (its
//! return address), so forwarding those from Rust would search from this library instead
//! of the caller. The export is therefore a naked trampoline: with SF_VERBS off, or for
//! those two pseudo-handles, it jumps to the real `dlvsym` with the caller's return address
//! untouched; only lookups through an explicit handle, where glibc ignores the caller,
//! reach Rust. `dlopen` and `dlsym` are not interposed at all (see the door's README
//! section: nothing needs to know when libibverbs is loaded, and NCCL never uses dlsym for
//! verbs).

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::core::runtime::config;

type DlvsymFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;

/// glibc's `dlvsym`; 0 until resolved (at load, or by the first call).
static REAL_DLVSYM: AtomicUsize = AtomicUsize::new(0);
/// SF_VERBS, read when the real `dlvsym` is resolved. One byte: the trampoline tests it.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether SF_VERBS=1 was set when the library was loaded.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// # Safety
/// Called as glibc's `dlvsym` (dlfcn.h): `symbol` and `version` are NUL-terminated strings.
#[unsafe(naked)]
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dlvsym(handle: *mut c_void, symbol: *const c_char, version: *const c_char) -> *mut c_void {
    // System V x86-64: handle in rdi, symbol in rsi, version in rdx, result in rax.
    core::arch::naked_asm!(
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 3f",
        "2:",
        "cmp byte ptr [rip + {enabled}], 0",
        "je 4f",
        "cmp rdi, -1", // RTLD_NEXT
        "je 4f",
        "test rdi, rdi", // RTLD_DEFAULT
        "jz 4f",
        "mov rcx, rax",
        "jmp {explicit}",
        "4:",
        "jmp rax",
        // Not resolved yet (a call before this library's constructor ran): resolve, keeping
        // the arguments; three pushes after the return address leave the stack 16-aligned.
        "3:",
        "push rdi",
        "push rsi",
        "push rdx",
        "call {resolve}",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jnz 2b",
        "ret",
        real = sym REAL_DLVSYM,
        enabled = sym ENABLED,
        explicit = sym through_handle,
        resolve = sym resolve,
    )
}

/// A lookup through an explicit handle with SF_VERBS=1: the real answer, or the door's
/// wrapper when it is one of the verbs the door counts.
unsafe extern "C" fn through_handle(
    handle: *mut c_void,
    symbol: *const c_char,
    version: *const c_char,
    real: usize,
) -> *mut c_void {
    // SAFETY: `real` is glibc's dlvsym (see `resolve`); the arguments are the caller's.
    let found = unsafe { std::mem::transmute::<usize, DlvsymFn>(real)(handle, symbol, version) };
    if found.is_null() || symbol.is_null() {
        return found;
    }
    // SAFETY: dlvsym found `symbol`, so it is a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    super::wrapper_for(name, found).unwrap_or(found)
}

/// glibc's own `dlvsym`, for the door's lookups (a call of `libc::dlvsym` would bind to the
/// export above and get the door's wrappers back). Glibc resolves `RTLD_NEXT` relative to
/// this library, the caller. None when glibc's could not be found.
///
/// # Safety
/// As glibc's `dlvsym`: `symbol` and `version` are NUL-terminated strings.
pub(super) unsafe fn real_dlvsym(handle: *mut c_void, symbol: &CStr, version: &CStr) -> Option<*mut c_void> {
    let real = match resolve() {
        0 => return None,
        real => real,
    };
    // SAFETY: `real` is glibc's dlvsym; the caller's contract covers the arguments.
    let found = unsafe { std::mem::transmute::<usize, DlvsymFn>(real)(handle, symbol.as_ptr(), version.as_ptr()) };
    (!found.is_null()).then_some(found)
}

/// Finds glibc's `dlvsym` (the next definition after this library: this library does not
/// define `dlsym`, so its own call reaches glibc's) and reads SF_VERBS without allocating:
/// allocators resolve symbols while they initialise, so nothing here may call malloc.
extern "C" fn resolve() -> usize {
    let known = REAL_DLVSYM.load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    // SAFETY: a plain lookup with a NUL-terminated name.
    let real = unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlvsym".as_ptr()) } as usize;
    if real == 0 || real == dlvsym as *const () as usize {
        return 0;
    }
    // SAFETY: getenv with a NUL-terminated name; the value is read before anything can
    // change the environment of this thread.
    let value = unsafe { libc::getenv(c"SF_VERBS".as_ptr()) };
    let on = !value.is_null()
        // SAFETY: getenv returned a NUL-terminated string.
        && std::str::from_utf8(unsafe { CStr::from_ptr(value) }.to_bytes())
            .ok()
            .and_then(config::flag)
            .unwrap_or(false);
    ENABLED.store(on, Ordering::Relaxed);
    REAL_DLVSYM.store(real, Ordering::Release);
    real
}

extern "C" fn resolve_at_load() {
    resolve();
}

#[used]
#[link_section = ".init_array"]
static RESOLVE_AT_LOAD: extern "C" fn() = resolve_at_load;
