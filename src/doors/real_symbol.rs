//! Finds the real NCCL entry point behind each hook.
//!
//! `dlsym(RTLD_NEXT)` finds it when NCCL is in the global scope (linked by the program, or
//! dlopen'ed RTLD_GLOBAL). Python loads extension modules RTLD_LOCAL, so libnccl.so.2
//! pulled in by torch's libraries is invisible to RTLD_NEXT; then the loaded libnccl is
//! found by name among the process's objects and asked directly. NCCL exports every
//! function also as `pncclX`, the name profilers use; it is the fallback at each step.

use std::ffi::{c_void, CStr, CString};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

pub struct RealSymbol {
    name: &'static CStr,
    alias: &'static CStr,
    address: AtomicUsize,
}

impl RealSymbol {
    pub const fn new(name: &'static CStr, alias: &'static CStr) -> RealSymbol {
        RealSymbol { name, alias, address: AtomicUsize::new(0) }
    }

    /// The real function's address; resolved on first use, then one load.
    #[inline]
    pub fn get(&self) -> Option<*mut c_void> {
        match self.address.load(Ordering::Acquire) {
            0 => self.resolve(),
            address => Some(address as *mut c_void),
        }
    }

    #[cold]
    fn resolve(&self) -> Option<*mut c_void> {
        let found = [self.name, self.alias]
            .into_iter()
            // SAFETY: RTLD_NEXT lookup with NUL-terminated names.
            .map(|name| unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) })
            .chain(loaded_nccl().into_iter().flat_map(|handle| {
                // SAFETY: `handle` came from dlopen and is never closed.
                [self.name, self.alias].map(|name| unsafe { libc::dlsym(handle, name.as_ptr()) })
            }))
            .find(|&address| !address.is_null() && !is_ours(address))?;
        self.address.store(found as usize, Ordering::Release);
        Some(found)
    }
}

/// Whether `address` lies in this library (a lookup that found the hook itself).
fn is_ours(address: *mut c_void) -> bool {
    object_base(address) == object_base(is_ours as *mut c_void)
}

fn object_base(address: *mut c_void) -> *mut c_void {
    // SAFETY: Dl_info is plain data that dladdr fills; a zeroed one is valid.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables and writes `info`.
    if unsafe { libc::dladdr(address, &mut info) } == 0 {
        return std::ptr::null_mut();
    }
    info.dli_fbase
}

/// The path of the NCCL this process has loaded, if any: a libnccl object by name, or
/// the object that defines `ncclGetVersion` (NCCL linked in under another name). For
/// messages only.
pub fn loaded_nccl_path() -> Option<CString> {
    let by_name = loaded_objects().into_iter().find(|path| is_libnccl(path));
    by_name.or_else(|| {
        // SAFETY: RTLD_NEXT lookup with a NUL-terminated name.
        let address = unsafe { libc::dlsym(libc::RTLD_NEXT, c"ncclGetVersion".as_ptr()) };
        if address.is_null() || is_ours(address) {
            return None;
        }
        // SAFETY: Dl_info is plain data that dladdr fills; a zeroed one is valid.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only reads the loader's tables and writes `info`; dli_fname is a
        // NUL-terminated string owned by the loader.
        let found = unsafe { libc::dladdr(address, &mut info) } != 0 && !info.dli_fname.is_null();
        // SAFETY: see above.
        found.then(|| unsafe { CStr::from_ptr(info.dli_fname) }.to_owned())
    })
}

fn is_libnccl(path: &CStr) -> bool {
    let file = path.to_bytes().rsplit(|&b| b == b'/').next().unwrap_or_default();
    file.starts_with(b"libnccl.so")
}

static NCCL_HANDLE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// A handle on the libnccl already loaded in this process, if any.
fn loaded_nccl() -> Option<*mut c_void> {
    let cached = NCCL_HANDLE.load(Ordering::Acquire);
    if !cached.is_null() {
        return Some(cached);
    }
    let path = loaded_objects().into_iter().find(|path| is_libnccl(path))?;
    // SAFETY: RTLD_NOLOAD only returns a handle on an object already loaded; nothing runs.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if handle.is_null() {
        return None;
    }
    NCCL_HANDLE.store(handle, Ordering::Release);
    Some(handle)
}

/// The paths of every object loaded in this process, in load order (the main program,
/// which has no path, left out).
pub fn loaded_objects() -> Vec<CString> {
    let mut paths: Vec<CString> = Vec::new();
    // SAFETY: the callback only reads the entries dl_iterate_phdr passes it and writes
    // through `data`, which points at `paths` for the duration of the call.
    unsafe { libc::dl_iterate_phdr(Some(collect_path), (&mut paths as *mut Vec<CString>).cast()) };
    paths
}

unsafe extern "C" fn collect_path(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid entry and our `data` pointer (see caller).
    let (info, paths) = unsafe { (&*info, &mut *data.cast::<Vec<CString>>()) };
    if !info.dlpi_name.is_null() {
        // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
        let name = unsafe { CStr::from_ptr(info.dlpi_name) };
        if !name.is_empty() {
            paths.push(name.to_owned());
        }
    }
    0
}
