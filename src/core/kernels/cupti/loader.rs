//! Finding, opening and calling CUPTI.
//!
//! The library is chosen here and opened RTLD_NOW, and every function the door calls is
//! resolved from that very object into a table (`Functions`). Nothing goes through a
//! loader that searches by name on its own: cudarc's does ("libcupti.so" first), and on
//! a machine with a CUDA toolkit beside PyTorch's wheels it found the toolkit's CUPTI
//! while the process already ran the wheel's, so the door stayed shut (seen on an H100
//! node, 2026-11-26). cudarc supplies only the types.

use std::ffi::{c_void, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::null_mut;

use cudarc::cupti::sys::{self as cupti, CUptiResult, CUpti_Activity, CUpti_ActivityKind, CUpti_CallbackDomain};
use cudarc::driver::sys::CUcontext;

/// Where a libcupti may be, in the order tried: `SF_CUPTI_PATH` alone when set; else a
/// libcupti the process already loaded; else the CUPTI directories that belong to CUDA
/// libraries already loaded (a toolkit's `extras/CUPTI/lib64`, a conda `lib`, a Python
/// environment's `nvidia/cuda_cupti/lib` or `nvidia/cu13/lib`), then the usual toolkit
/// locations; last, the bare SONAMEs through the dynamic loader's own search path.
pub fn candidates(
    explicit: Option<&Path>,
    loaded: &[PathBuf],
    list_dir: impl Fn(&Path) -> Vec<String>,
) -> Vec<PathBuf> {
    if let Some(path) = explicit {
        return vec![path.to_path_buf()];
    }
    let file_name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut found: Vec<PathBuf> = loaded.iter().filter(|p| file_name(p).starts_with("libcupti.so")).cloned().collect();
    let mut dirs: Vec<PathBuf> = Vec::new();
    for object in loaded {
        let Some(dir) = object.parent() else { continue };
        if file_name(object).starts_with("libcudart.so") {
            dirs.push(dir.to_path_buf());
            dirs.extend(dir.parent().map(|toolkit| toolkit.join("extras/CUPTI/lib64")));
        }
        let text = object.to_string_lossy();
        if let Some(end) =
            ["/site-packages/", "/dist-packages/"].iter().find_map(|m| text.find(m).map(|at| at + m.len()))
        {
            let site = Path::new(&text[..end]);
            dirs.extend(["nvidia/cuda_cupti/lib", "nvidia/cu13/lib"].map(|wheel| site.join(wheel)));
        }
    }
    dirs.extend(["/usr/local/cuda/extras/CUPTI/lib64", "/usr/local/cuda/lib64"].map(PathBuf::from));
    for dir in dirs {
        if let Some(name) = best_cupti_file(list_dir(&dir)) {
            let path = dir.join(name);
            if !found.contains(&path) {
                found.push(path);
            }
        }
    }
    found.extend(["libcupti.so.13", "libcupti.so.12", "libcupti.so"].map(PathBuf::from));
    found
}

/// Of a directory's file names, the libcupti to open: a `libcupti.so.<major>` SONAME
/// first, then the development link `libcupti.so`, then any other `libcupti.so.*`.
fn best_cupti_file(mut names: Vec<String>) -> Option<String> {
    names.retain(|n| n.starts_with("libcupti.so"));
    names.sort();
    let rank = |n: &String| match n.strip_prefix("libcupti.so") {
        Some(rest) if rest.len() > 1 && rest[1..].bytes().all(|b| b.is_ascii_digit()) => 0,
        Some("") => 1,
        _ => 2,
    };
    names.into_iter().min_by_key(rank)
}

/// The names of the entries of `dir`, none if it cannot be read.
pub fn list_dir(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// Why CUPTI cannot be used.
#[derive(Debug, PartialEq, Eq)]
pub enum OpenError {
    /// No candidate loaded.
    NotFound,
    /// One loaded but is not usable; says why.
    Unusable(String),
}

/// The CUPTI functions the door calls, resolved from the one object it opened.
struct Functions {
    get_version: unsafe extern "C" fn(*mut u32) -> CUptiResult,
    subscribe:
        unsafe extern "C" fn(*mut cupti::CUpti_SubscriberHandle, cupti::CUpti_CallbackFunc, *mut c_void) -> CUptiResult,
    register_callbacks: unsafe extern "C" fn(
        cupti::CUpti_BuffersCallbackRequestFunc,
        cupti::CUpti_BuffersCallbackCompleteFunc,
    ) -> CUptiResult,
    enable: unsafe extern "C" fn(CUpti_ActivityKind) -> CUptiResult,
    disable: unsafe extern "C" fn(CUpti_ActivityKind) -> CUptiResult,
    flush_all: unsafe extern "C" fn(u32) -> CUptiResult,
    next_record: unsafe extern "C" fn(*mut u8, usize, *mut *mut CUpti_Activity) -> CUptiResult,
    dropped_records: unsafe extern "C" fn(CUcontext, u32, *mut usize) -> CUptiResult,
    timestamp: unsafe extern "C" fn(*mut u64) -> CUptiResult,
    /// `cuptiEnableCallback`; absent from a CUPTI (or a fake) without the callback API, which
    /// then records activity only.
    enable_callback: Option<
        unsafe extern "C" fn(u32, cupti::CUpti_SubscriberHandle, cupti::CUpti_CallbackDomain, u32) -> CUptiResult,
    >,
}

/// An opened CUPTI and its functions. Never closed.
pub struct Cupti {
    pub path: PathBuf,
    functions: Functions,
    /// The subscription's handle (an address), 0 before `subscribe`.
    subscriber: usize,
}

pub type Callbacks = (cupti::CUpti_BuffersCallbackRequestFunc, cupti::CUpti_BuffersCallbackCompleteFunc);

/// Resolves `name` in `handle` as a function of type `F`, or names what is missing.
///
/// # Safety
/// `F` is an `extern "C" fn` type with the C signature of `name` in CUPTI's headers.
unsafe fn function<F: Copy>(handle: *mut c_void, name: &str, shown: &Path) -> Result<F, OpenError> {
    let c_name = CString::new(name).expect("no NUL in symbol names");
    // SAFETY: dlsym on a live handle with a NUL-terminated name only reads loader tables.
    let address = unsafe { libc::dlsym(handle, c_name.as_ptr()) };
    if address.is_null() {
        return Err(OpenError::Unusable(format!(
            "{} has no {name}; it is not a CUPTI this library can use",
            shown.display()
        )));
    }
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    // SAFETY: a non-null function address of the signature `F` names (caller's contract).
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&address) })
}

/// Opens the first candidate that loads and resolves every function from it.
pub fn open(candidates: &[PathBuf]) -> Result<Cupti, OpenError> {
    let (path, handle) = candidates
        .iter()
        .find_map(|path| {
            let name = CString::new(path.as_os_str().as_bytes()).ok()?;
            // Global, as the H100 run had it: the process may look CUPTI up by name (our
            // fixtures do), though every function here comes from this handle.
            // SAFETY: loading a shared library runs its constructors; libcupti's are
            // designed to run in any CUDA process, which is what this is.
            let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            (!handle.is_null()).then(|| (path.clone(), handle))
        })
        .ok_or(OpenError::NotFound)?;
    // SAFETY: each type below is the signature CUPTI's headers (cudarc's bindings of
    // them) give the function named beside it.
    let functions = unsafe {
        Functions {
            subscribe: function(handle, "cuptiSubscribe", &path)?,
            register_callbacks: function(handle, "cuptiActivityRegisterCallbacks", &path)?,
            enable: function(handle, "cuptiActivityEnable", &path)?,
            disable: function(handle, "cuptiActivityDisable", &path)?,
            flush_all: function(handle, "cuptiActivityFlushAll", &path)?,
            next_record: function(handle, "cuptiActivityGetNextRecord", &path)?,
            dropped_records: function(handle, "cuptiActivityGetNumDroppedRecords", &path)?,
            timestamp: function(handle, "cuptiGetTimestamp", &path)?,
            get_version: function(handle, "cuptiGetVersion", &path)?,
            enable_callback: function(handle, "cuptiEnableCallback", &path).ok(),
        }
    };
    Ok(Cupti { path, functions, subscriber: 0 })
}

/// A CUPTI call's result as a `Result`.
fn checked(result: CUptiResult) -> Result<(), CUptiResult> {
    match result {
        CUptiResult::CUPTI_SUCCESS => Ok(()),
        error => Err(error),
    }
}

/// The activity kinds the door enables.
pub const KERNELS: CUpti_ActivityKind = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
pub const MEMCPY: CUpti_ActivityKind = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY;
pub const RUNTIME: CUpti_ActivityKind = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_RUNTIME;
pub const SYNCHRONIZATION: CUpti_ActivityKind = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;

impl Cupti {
    pub fn version(&self) -> Option<u32> {
        let mut version = 0u32;
        // SAFETY: writes one u32 through a valid pointer.
        checked(unsafe { (self.functions.get_version)(&mut version) }).ok().map(|_| version)
    }

    /// Subscribes `callback`, which sees only the callbacks `enable_callback` turns on; the
    /// subscription is also how CUPTI says whether another tool holds it.
    pub fn subscribe(&mut self, callback: cupti::CUpti_CallbackFunc) -> Result<(), CUptiResult> {
        let mut subscriber: cupti::CUpti_SubscriberHandle = null_mut();
        // SAFETY: writes the handle through a valid pointer; the callback is a plain
        // extern "C" fn that lives as long as the library.
        checked(unsafe { (self.functions.subscribe)(&mut subscriber, callback, null_mut()) })?;
        self.subscriber = subscriber as usize;
        Ok(())
    }

    /// Turns on the subscriber's callback for one (domain, cbid); `Err(None)` when this
    /// CUPTI has no callback API.
    pub fn enable_callback(&self, domain: CUpti_CallbackDomain, cbid: u32) -> Result<(), Option<CUptiResult>> {
        let enable = self.functions.enable_callback.ok_or(None)?;
        // SAFETY: the handle `subscribe` got; plain values otherwise.
        checked(unsafe { enable(1, self.subscriber as cupti::CUpti_SubscriberHandle, domain, cbid) }).map_err(Some)
    }

    pub fn register_callbacks(&self, (requested, completed): Callbacks) -> Result<(), CUptiResult> {
        // SAFETY: both are extern "C" fns with CUPTI's signatures that live as long as
        // the process.
        checked(unsafe { (self.functions.register_callbacks)(requested, completed) })
    }

    pub fn enable(&self, kind: CUpti_ActivityKind) -> Result<(), CUptiResult> {
        // SAFETY: plain call with an enum argument.
        checked(unsafe { (self.functions.enable)(kind) })
    }

    pub fn disable(&self, kind: CUpti_ActivityKind) -> Result<(), CUptiResult> {
        // SAFETY: plain call with an enum argument.
        checked(unsafe { (self.functions.disable)(kind) })
    }

    /// Hands every buffer holding completed records to the completed callback; `forced`
    /// also those with records still in flight (at exit). Collector thread only.
    pub fn flush_all(&self, forced: bool) -> Result<(), CUptiResult> {
        // 1 is CUPTI_ACTIVITY_FLAG_FLUSH_FORCED.
        // SAFETY: plain call; CUPTI calls the completed callback before returning.
        checked(unsafe { (self.functions.flush_all)(forced as u32) })
    }

    /// Records CUPTI dropped since the last call (CUPTI resets the count on each call).
    pub fn dropped_records(&self) -> Option<u64> {
        let mut dropped = 0usize;
        // SAFETY: a null context and stream 0 name the global queue; writes one usize.
        checked(unsafe { (self.functions.dropped_records)(null_mut(), 0, &mut dropped) }).ok().map(|_| dropped as u64)
    }

    /// CUPTI's clock now, in nanoseconds.
    pub fn timestamp(&self) -> Option<u64> {
        let mut now = 0u64;
        // SAFETY: writes one u64 through a valid pointer.
        checked(unsafe { (self.functions.timestamp)(&mut now) }).ok().map(|_| now)
    }

    /// The record after `current` (null: the first) in `valid` bytes at `buffer`, or
    /// `None` at the end.
    ///
    /// # Safety
    /// `buffer` holds `valid` bytes of records CUPTI completed, not written by anyone
    /// while this runs; `current` is null or a record this function returned for it.
    pub unsafe fn next_record(
        &self,
        buffer: *mut u8,
        valid: usize,
        current: *mut CUpti_Activity,
    ) -> Option<*mut CUpti_Activity> {
        let mut record = current;
        // SAFETY: per this function's contract; CUPTI only reads the buffer and writes
        // the record pointer.
        checked(unsafe { (self.functions.next_record)(buffer, valid, &mut record) }).ok()?;
        (!record.is_null()).then_some(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs<'a>(entries: &'a [(&'a str, &'a [&'a str])]) -> impl Fn(&Path) -> Vec<String> + 'a {
        move |dir| {
            entries
                .iter()
                .find(|(d, _)| Path::new(d) == dir)
                .map_or(Vec::new(), |(_, n)| n.iter().map(|s| s.to_string()).collect())
        }
    }

    #[test]
    fn an_explicit_path_is_the_only_candidate() {
        let loaded = [PathBuf::from("/x/libcupti.so.12")];
        let found = candidates(Some(Path::new("/opt/libcupti.so.13")), &loaded, dirs(&[]));
        assert_eq!(found, [PathBuf::from("/opt/libcupti.so.13")]);
    }

    #[test]
    fn loaded_then_next_to_loaded_cuda_then_standard_then_sonames() {
        let loaded = [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so",
            "/venv13/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13",
            "/usr/local/cuda-12.4/lib64/libcudart.so.12",
            "/preloaded/libcupti.so.12",
        ]
        .map(PathBuf::from);
        let listing: &[(&str, &[&str])] = &[
            ("/venv/lib/python3.11/site-packages/nvidia/cuda_cupti/lib", &["libcupti.so.12", "libpcsamplingutil.so"]),
            ("/usr/local/cuda-12.4/extras/CUPTI/lib64", &["libcupti.so", "libcupti.so.2024.1.0", "libcupti.so.12"]),
            ("/usr/local/cuda-12.4/lib64", &["libcudart.so.12"]),
            ("/venv13/lib/python3.12/site-packages/nvidia/cu13/lib", &["libcudart.so.13", "libcupti.so.13"]),
            ("/usr/local/cuda/lib64", &["libcupti.so"]),
        ];
        let found = candidates(None, &loaded, dirs(listing));
        let expected = [
            "/preloaded/libcupti.so.12",
            "/venv/lib/python3.11/site-packages/nvidia/cuda_cupti/lib/libcupti.so.12",
            "/venv13/lib/python3.12/site-packages/nvidia/cu13/lib/libcupti.so.13",
            "/usr/local/cuda-12.4/extras/CUPTI/lib64/libcupti.so.12",
            "/usr/local/cuda/lib64/libcupti.so",
            "libcupti.so.13",
            "libcupti.so.12",
            "libcupti.so",
        ]
        .map(PathBuf::from);
        assert_eq!(found, expected);
    }

    #[test]
    fn nothing_on_the_machine_leaves_only_the_sonames() {
        let found = candidates(None, &[], dirs(&[]));
        assert_eq!(found, ["libcupti.so.13", "libcupti.so.12", "libcupti.so"].map(PathBuf::from));
        assert_eq!(open(&[PathBuf::from("/nonexistent/libcupti.so.13")]).err(), Some(OpenError::NotFound));
    }

    #[test]
    fn a_library_without_cupti_symbols_is_refused() {
        let libc = PathBuf::from("libc.so.6");
        match open(&[libc]) {
            Err(OpenError::Unusable(why)) => assert!(why.contains("has no cuptiSubscribe"), "{why}"),
            other => panic!("{:?}", other.err()),
        }
    }
}
