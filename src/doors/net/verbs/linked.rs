//! The verbs the library exports for programs *linked* against libibverbs (a DT_NEEDED on
//! libibverbs.so.1, calls through the PLT: NCCL built against rdma-core, perftest, UCX,
//! network plugins), which never pass through `dlvsym`.
//!
//! Preloaded, this library comes before libibverbs in the global scope, so a reference to
//! `ibv_open_device@IBVERBS_1.1` binds to the unversioned export here (glibc accepts an
//! unversioned definition for a versioned reference; tests/verbs.rs checks it on a real
//! link). Each export forwards to the definition the reference would have bound to without
//! this library, resolved on first use and kept; with SF_VERBS=1 it goes through the
//! door's counting code (`open_device_through`, ... in verbs.rs, the same the `dlvsym`
//! wrappers run), with SF_VERBS off it only forwards.
//!
//! In rdma-core's header `ibv_open_device`, `ibv_close_device` and `ibv_create_qp` are real
//! functions; `ibv_create_qp_ex` is a static inline that calls `ibv_create_qp` when only a
//! PD is given and otherwise the provider's `create_qp_ex` directly (not seen here: such a
//! QP's sends are counted as on a QP without `sq_sig_all`).

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::abi::{IbvContext, IbvDevice, IbvQp, IbvQpInitAttr};
use super::dlvsym::real_dlvsym;
use super::{close_device_through, create_qp_through, enabled, open_device_through};
use super::{CloseDeviceFn, CreateQpFn, OpenDeviceFn};

/// rdma-core's SONAME, and the version node of the verbs the door wraps.
const SONAME: &CStr = c"libibverbs.so.1";
const VERSION: &CStr = c"IBVERBS_1.1";

static OPEN_DEVICE: AtomicUsize = AtomicUsize::new(0);
static CLOSE_DEVICE: AtomicUsize = AtomicUsize::new(0);
static CREATE_QP: AtomicUsize = AtomicUsize::new(0);

/// Whether `address` is one of the exports (a lookup through a handle whose scope holds
/// this library finds them; the door must not wrap its own code).
pub(super) fn is_export(address: *mut c_void) -> bool {
    [ibv_open_device as *mut c_void, ibv_close_device as *mut c_void, ibv_create_qp as *mut c_void].contains(&address)
}

/// The real `name`, kept in `cache` once found. First the next definition after this
/// library in the global scope (what the caller would have bound to without it); then
/// libibverbs.so.1 loaded anywhere else in the process (RTLD_LOCAL, as a dependency of a
/// library dlopened privately, whose references still bind to these exports first). The
/// library found is pinned by a reference that is never dropped, so the kept address
/// stays valid. None while libibverbs is not loaded at all: not kept, so a library
/// loaded later is found on the next call.
fn real(cache: &AtomicUsize, name: &CStr) -> Option<usize> {
    match cache.load(Ordering::Acquire) {
        0 => {}
        known => return Some(known),
    }
    // SAFETY: NUL-terminated names; RTLD_NEXT is resolved relative to this library.
    let next = unsafe { real_dlvsym(libc::RTLD_NEXT, name, VERSION) };
    let found = next.or_else(|| {
        // SAFETY: a load that loads nothing (RTLD_NOLOAD); its reference pins the library.
        let handle = unsafe { libc::dlopen(SONAME.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        // SAFETY: a live handle and NUL-terminated names.
        (!handle.is_null()).then(|| unsafe { real_dlvsym(handle, name, VERSION) }).flatten()
    })?;
    if is_export(found) {
        return None;
    }
    if next.is_some() {
        pin(found);
    }
    cache.store(found as usize, Ordering::Release);
    Some(found as usize)
}

/// Takes a reference on the object that holds `address` (a library dlopened RTLD_GLOBAL
/// could otherwise be unloaded under the kept address; one loaded at start never is).
fn pin(address: *mut c_void) {
    // SAFETY: Dl_info is plain data; dladdr only reads the loader's tables.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above; dli_fname is the loaded object's name, which RTLD_NOLOAD matches
    // against what is loaded without loading anything.
    unsafe {
        if libc::dladdr(address, &mut info) != 0 && !info.dli_fname.is_null() {
            libc::dlopen(info.dli_fname, libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        }
    }
}

/// What a caller gets when libibverbs is not loaded: the verbs' failure value with errno
/// ENOSYS (the function is not there to do the work).
fn missing<T>(failure: T) -> T {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    failure
}

/// `ibv_open_device` (verbs.h); NULL with errno ENOSYS when libibverbs is not loaded.
///
/// # Safety
/// As libibverbs' `ibv_open_device`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ibv_open_device(device: *mut IbvDevice) -> *mut IbvContext {
    let Some(real) = real(&OPEN_DEVICE, c"ibv_open_device") else { return missing(std::ptr::null_mut()) };
    // SAFETY: the real ibv_open_device found above.
    let real = unsafe { std::mem::transmute::<usize, OpenDeviceFn>(real) };
    if !enabled() {
        // SAFETY: forwarding the caller's argument unchanged.
        return unsafe { real(device) };
    }
    // SAFETY: the real verb and the caller's argument.
    unsafe { open_device_through(real, device) }
}

/// `ibv_close_device` (verbs.h); -1 with errno ENOSYS when libibverbs is not loaded.
///
/// # Safety
/// As libibverbs' `ibv_close_device`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ibv_close_device(context: *mut IbvContext) -> c_int {
    let Some(real) = real(&CLOSE_DEVICE, c"ibv_close_device") else { return missing(-1) };
    // SAFETY: the real ibv_close_device found above.
    let real = unsafe { std::mem::transmute::<usize, CloseDeviceFn>(real) };
    if !enabled() {
        // SAFETY: forwarding the caller's argument unchanged.
        return unsafe { real(context) };
    }
    // SAFETY: the real verb and the caller's argument.
    unsafe { close_device_through(real, context) }
}

/// `ibv_create_qp` (verbs.h); NULL with errno ENOSYS when libibverbs is not loaded.
///
/// # Safety
/// As libibverbs' `ibv_create_qp`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ibv_create_qp(pd: *mut c_void, attr: *mut IbvQpInitAttr) -> *mut IbvQp {
    let Some(real) = real(&CREATE_QP, c"ibv_create_qp") else { return missing(std::ptr::null_mut()) };
    // SAFETY: the real ibv_create_qp found above.
    let real = unsafe { std::mem::transmute::<usize, CreateQpFn>(real) };
    if !enabled() {
        // SAFETY: forwarding the caller's arguments unchanged.
        return unsafe { real(pd, attr) };
    }
    // SAFETY: the real verb and the caller's arguments.
    unsafe { create_qp_through(real, pd, attr) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_libibverbs_the_verbs_fail_with_enosys() {
        // The unit-test process never loads libibverbs (the crate does not link it).
        // SAFETY: a lookup that loads nothing; the exports return before touching their
        // arguments when libibverbs is missing.
        unsafe {
            assert!(libc::dlopen(SONAME.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY).is_null());
            assert!(ibv_open_device(std::ptr::null_mut()).is_null());
            assert_eq!(*libc::__errno_location(), libc::ENOSYS);
            *libc::__errno_location() = 0;
            assert_eq!(ibv_close_device(std::ptr::null_mut()), -1);
            assert_eq!(*libc::__errno_location(), libc::ENOSYS);
            *libc::__errno_location() = 0;
            assert!(ibv_create_qp(std::ptr::null_mut(), std::ptr::null_mut()).is_null());
            assert_eq!(*libc::__errno_location(), libc::ENOSYS);
        }
        assert_eq!(OPEN_DEVICE.load(Ordering::Relaxed), 0, "a missing library is not kept");
    }
}
