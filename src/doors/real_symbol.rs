//! Finds the real NCCL entry points behind the hooks, all of them in one pass.
//!
//! `dlsym(RTLD_NEXT)` finds them when NCCL is in the global scope (linked by the program,
//! or dlopen'ed RTLD_GLOBAL). Python loads extension modules RTLD_LOCAL, so libnccl.so.2
//! pulled in by torch's libraries is invisible to RTLD_NEXT; then the loaded libnccl is
//! found by name among the process's objects and asked directly. NCCL exports every
//! function also as `pncclX`, the name profilers use; it is the fallback at each step.
//!
//! Looking up walks the loader's tables under its lock (`dlsym`, `dladdr`,
//! `dl_iterate_phdr`) and allocates. A `fork` from another thread meanwhile gives the child
//! a copy of the loader lock that nobody will ever release, and the child hangs in its
//! first lookup (PyTorch's DataLoader workers fork while the NCCL watchdog thread polls).
//! So every entry point is resolved in one pass, at load when NCCL is already there, else
//! by the first hook, while holding `FORK_MUTEX`, which a `pthread_atfork` prepare handler
//! also takes: no fork starts while the pass holds the loader lock. After the pass a hook
//! reads one atomic per call and never looks anything up again.

use std::cell::UnsafeCell;
use std::ffi::{c_void, CStr, CString};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// Not looked up yet (the pass has not found NCCL).
const UNRESOLVED: usize = 0;
/// The loaded NCCL has no such symbol.
const MISSING: usize = 1;

/// A symbol's name and its alias (NCCL's `pncclX` for `ncclX`).
pub type Names = (&'static CStr, &'static CStr);

/// The real addresses of a library's entry points, `names[i]` at `addresses[i]`.
pub struct RealSymbols<const N: usize> {
    names: &'static [Names; N],
    addresses: [AtomicUsize; N],
}

impl<const N: usize> RealSymbols<N> {
    pub const fn new(names: &'static [Names; N]) -> RealSymbols<N> {
        RealSymbols { names, addresses: [const { AtomicUsize::new(UNRESOLVED) }; N] }
    }

    /// The real function's address, one load once the pass has run.
    #[inline]
    pub fn get(&self, index: usize) -> Option<*mut c_void> {
        match self.addresses[index].load(Ordering::Acquire) {
            UNRESOLVED => self.resolve_all(index),
            MISSING => None,
            address => Some(address as *mut c_void),
        }
    }

    /// Resolves every entry point if NCCL is loaded (its `ncclGetVersion` is found), else
    /// leaves them all unresolved for a later call to try again. Returns entry `index`.
    #[cold]
    pub fn resolve_all(&self, index: usize) -> Option<*mut c_void> {
        let _held = ForkGuard::hold();
        if self.addresses[index].load(Ordering::Acquire) == UNRESOLVED {
            lookup((c"ncclGetVersion", c"pncclGetVersion"))?;
            // Published one by one: a hook reads its entry resolved, or still unresolved
            // and then waits for the guard here, never anything else.
            for (slot, &names) in self.addresses.iter().zip(self.names) {
                slot.store(lookup(names).map_or(MISSING, |address| address as usize), Ordering::Release);
            }
        }
        match self.addresses[index].load(Ordering::Acquire) {
            UNRESOLVED | MISSING => None,
            address => Some(address as *mut c_void),
        }
    }
}

/// The real definition of `names` (a name, then its alias): through RTLD_NEXT, else in the
/// loaded libnccl. Called with `FORK_MUTEX` held.
fn lookup((name, alias): Names) -> Option<*mut c_void> {
    let names = [name, alias];
    names
        .iter()
        // SAFETY: RTLD_NEXT lookup with NUL-terminated names.
        .map(|name| unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) })
        .chain(std::iter::once_with(loaded_nccl).flatten().flat_map(|handle| {
            // SAFETY: `handle` came from dlopen and is never closed.
            names.iter().map(move |name| unsafe { libc::dlsym(handle, name.as_ptr()) })
        }))
        .find(|&address| !address.is_null() && !is_ours(address))
}

/// A process-wide lock that `fork` takes too (its prepare handler), so that no fork
/// happens while one of our threads holds the loader's lock. A plain pthread mutex: the
/// handlers lock it in the forking thread and unlock it in both parent and child.
struct ForkMutex(UnsafeCell<libc::pthread_mutex_t>);

// SAFETY: the mutex is only used through pthread calls, which synchronise themselves.
unsafe impl Sync for ForkMutex {}

static FORK_MUTEX: ForkMutex = ForkMutex(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));

/// `FORK_MUTEX` held, for as long as this lives.
struct ForkGuard;

impl ForkGuard {
    fn hold() -> ForkGuard {
        lock_fork_mutex();
        ForkGuard
    }
}

impl Drop for ForkGuard {
    fn drop(&mut self) {
        unlock_fork_mutex();
    }
}

extern "C" fn lock_fork_mutex() {
    // SAFETY: a statically initialised mutex, never destroyed.
    unsafe { libc::pthread_mutex_lock(FORK_MUTEX.0.get()) };
}

extern "C" fn unlock_fork_mutex() {
    // SAFETY: as above; every unlock follows this thread's own lock (a ForkGuard, or the
    // prepare handler in the thread that forked, which is the child's only thread).
    unsafe { libc::pthread_mutex_unlock(FORK_MUTEX.0.get()) };
}

/// Registers `FORK_MUTEX`'s fork handlers when the library is loaded: from then on a fork
/// waits for a lookup in progress, whichever door looks up.
extern "C" fn guard_forks() {
    // SAFETY: registering plain extern "C" fns; pthread_atfork copies the pointers.
    unsafe { libc::pthread_atfork(Some(lock_fork_mutex), Some(unlock_fork_mutex), Some(unlock_fork_mutex)) };
}

#[used]
#[link_section = ".init_array"]
static GUARD_FORKS_AT_LOAD: extern "C" fn() = guard_forks;

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
    let _held = ForkGuard::hold();
    let by_name = walk_objects().into_iter().find(|path| is_libnccl(path));
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

/// A handle on the libnccl already loaded in this process, if any. Called with
/// `FORK_MUTEX` held.
fn loaded_nccl() -> Option<*mut c_void> {
    let cached = NCCL_HANDLE.load(Ordering::Acquire);
    if !cached.is_null() {
        return Some(cached);
    }
    let path = walk_objects().into_iter().find(|path| is_libnccl(path))?;
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
    let _held = ForkGuard::hold();
    walk_objects()
}

/// `loaded_objects`, for callers that already hold `FORK_MUTEX`.
fn walk_objects() -> Vec<CString> {
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
