//! Finding, opening and calling CUPTI.
//!
//! The calls go through cudarc's CUPTI bindings, which load the library themselves: they
//! dlopen the first of their candidate names that loads ("libcupti.so", ...,
//! "libcupti.so.13", "libcupti.so.12", ...) and panic when none does or when a symbol is
//! missing. So the library is chosen here, opened RTLD_NOW | RTLD_GLOBAL first, its
//! symbols checked, and cudarc's load of the same SONAME then finds this very object; that
//! it did is verified by comparing one function's address both ways. Every cudarc call
//! runs under `catch_unwind`, and any mismatch or failure leaves the door closed.

use std::ffi::{c_void, CString};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::ptr::null_mut;

use cudarc::cupti::sys::{self as cupti, CUptiResult, CUpti_Activity, CUpti_ActivityKind};

/// Where a libcupti may be, in the order tried: `SF_CUPTI_PATH` alone when set; else a
/// libcupti the process already loaded; else the CUPTI directories that belong to CUDA
/// libraries already loaded (a toolkit's `extras/CUPTI/lib64`, a conda `lib`, a Python
/// environment's `nvidia/cuda_cupti/lib`), then the usual toolkit locations; last, the
/// bare SONAMEs through the dynamic loader's own search path.
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
            dirs.push(Path::new(&text[..end]).join("nvidia/cuda_cupti/lib"));
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

/// Every CUPTI function the door calls; checked before cudarc resolves any of them.
const FUNCTIONS: [&str; 8] = [
    "cuptiSubscribe",
    "cuptiActivityRegisterCallbacks",
    "cuptiActivityEnable",
    "cuptiActivityDisable",
    "cuptiActivityFlushAll",
    "cuptiActivityGetNextRecord",
    "cuptiActivityGetNumDroppedRecords",
    "cuptiGetTimestamp",
];
const VERSION_FUNCTION: &str = "cuptiGetVersion";

/// An opened CUPTI, verified to be the one cudarc calls. Never closed.
pub struct Cupti {
    pub path: PathBuf,
}

pub type Callbacks = (cupti::CUpti_BuffersCallbackRequestFunc, cupti::CUpti_BuffersCallbackCompleteFunc);

fn dlsym(handle: *mut c_void, name: &str) -> *mut c_void {
    let name = CString::new(name).expect("no NUL in symbol names");
    // SAFETY: dlsym on a live handle with a NUL-terminated name only reads loader tables.
    unsafe { libc::dlsym(handle, name.as_ptr()) }
}

/// Opens the first candidate that loads and makes sure cudarc will call into it.
pub fn open(candidates: &[PathBuf]) -> Result<Cupti, OpenError> {
    let (path, handle) = candidates
        .iter()
        .find_map(|path| {
            let name = CString::new(path.as_os_str().as_bytes()).ok()?;
            // SAFETY: loading a shared library runs its constructors; libcupti's are
            // designed to run in any CUDA process, which is what this is.
            let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            (!handle.is_null()).then(|| (path.clone(), handle))
        })
        .ok_or(OpenError::NotFound)?;
    let shown = path.display();
    if let Some(missing) = FUNCTIONS.iter().chain([&VERSION_FUNCTION]).find(|f| dlsym(handle, f).is_null()) {
        return Err(OpenError::Unusable(format!("{shown} has no {missing}; it is not a CUPTI this library can use")));
    }
    // cudarc opens the first of its names that loads: that must be this object, already
    // loaded under one of those names (its SONAME), or cudarc would panic or load another.
    let names = cudarc::get_lib_name_candidates("cupti");
    let known = names.iter().any(|name| {
        let Ok(name) = CString::new(name.as_str()) else { return false };
        // SAFETY: RTLD_NOLOAD only looks up an object already loaded; nothing runs.
        let other = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if other.is_null() {
            return false;
        }
        // SAFETY: balances the reference the RTLD_NOLOAD lookup took.
        unsafe { libc::dlclose(other) };
        other == handle
    });
    if !known {
        return Err(OpenError::Unusable(format!(
            "{shown} is loaded under a name cudarc does not look for ({names:?})"
        )));
    }
    let ours = dlsym(handle, "cuptiActivityEnable");
    let theirs = guarded(|| {
        // SAFETY: cudarc's loader dlopens its candidate names, which resolve to the object
        // opened above; looking a symbol up has no side effect.
        unsafe { cupti::culib().get::<*mut c_void>(&b"cuptiActivityEnable"[..]).map(|s| *s).unwrap_or(null_mut()) }
    });
    if theirs != Some(ours) {
        return Err(OpenError::Unusable(format!("cudarc resolved CUPTI to another object than {shown}")));
    }
    Ok(Cupti { path })
}

/// Runs a cudarc call; a panic (cudarc's loader) becomes `None` instead of unwinding.
fn guarded<R>(call: impl FnOnce() -> R) -> Option<R> {
    catch_unwind(AssertUnwindSafe(call)).ok()
}

/// A CUPTI call's result; a panic (cudarc's loader) reads as `CUPTI_ERROR_UNKNOWN`.
fn checked(call: impl FnOnce() -> CUptiResult) -> Result<(), CUptiResult> {
    match guarded(call) {
        Some(CUptiResult::CUPTI_SUCCESS) => Ok(()),
        Some(error) => Err(error),
        None => Err(CUptiResult::CUPTI_ERROR_UNKNOWN),
    }
}

/// The activity kinds the door enables.
pub const KERNELS: CUpti_ActivityKind = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
pub const MEMCPY: CUpti_ActivityKind = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY;
pub const RUNTIME: CUpti_ActivityKind = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_RUNTIME;

impl Cupti {
    pub fn version(&self) -> Option<u32> {
        let mut version = 0u32;
        // SAFETY: writes one u32 through a valid pointer.
        checked(|| unsafe { cupti::cuptiGetVersion(&mut version) }).ok().map(|_| version)
    }

    /// Subscribes with a callback that ignores everything: the door uses the activity API
    /// only, but the subscription is how CUPTI says whether another tool holds it.
    pub fn subscribe(&self, callback: cupti::CUpti_CallbackFunc) -> Result<(), CUptiResult> {
        let mut subscriber: cupti::CUpti_SubscriberHandle = null_mut();
        // SAFETY: writes the handle through a valid pointer; the callback is a plain
        // extern "C" fn that lives as long as the library.
        checked(|| unsafe { cupti::cuptiSubscribe(&mut subscriber, callback, null_mut()) })
    }

    pub fn register_callbacks(&self, (requested, completed): Callbacks) -> Result<(), CUptiResult> {
        // SAFETY: both are extern "C" fns with CUPTI's signatures that live as long as
        // the process.
        checked(|| unsafe { cupti::cuptiActivityRegisterCallbacks(requested, completed) })
    }

    pub fn enable(&self, kind: CUpti_ActivityKind) -> Result<(), CUptiResult> {
        // SAFETY: plain call with an enum argument.
        checked(|| unsafe { cupti::cuptiActivityEnable(kind) })
    }

    pub fn disable(&self, kind: CUpti_ActivityKind) -> Result<(), CUptiResult> {
        // SAFETY: plain call with an enum argument.
        checked(|| unsafe { cupti::cuptiActivityDisable(kind) })
    }

    /// Hands every buffer holding completed records to the completed callback; `forced`
    /// also those with records still in flight (at exit). Collector thread only.
    pub fn flush_all(&self, forced: bool) -> Result<(), CUptiResult> {
        // 1 is CUPTI_ACTIVITY_FLAG_FLUSH_FORCED.
        // SAFETY: plain call; CUPTI calls the completed callback before returning.
        checked(|| unsafe { cupti::cuptiActivityFlushAll(forced as u32) })
    }

    /// Records CUPTI dropped since the last call (CUPTI resets the count on each call).
    pub fn dropped_records(&self) -> Option<u64> {
        let mut dropped = 0usize;
        // SAFETY: a null context and stream 0 name the global queue; writes one usize.
        checked(|| unsafe { cupti::cuptiActivityGetNumDroppedRecords(null_mut(), 0, &mut dropped) })
            .ok()
            .map(|_| dropped as u64)
    }

    /// CUPTI's clock now, in nanoseconds.
    pub fn timestamp(&self) -> Option<u64> {
        let mut now = 0u64;
        // SAFETY: writes one u64 through a valid pointer.
        checked(|| unsafe { cupti::cuptiGetTimestamp(&mut now) }).ok().map(|_| now)
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
        checked(|| unsafe { cupti::cuptiActivityGetNextRecord(buffer, valid, &mut record) }).ok()?;
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
            "/usr/local/cuda-12.4/lib64/libcudart.so.12",
            "/preloaded/libcupti.so.12",
        ]
        .map(PathBuf::from);
        let listing: &[(&str, &[&str])] = &[
            ("/venv/lib/python3.11/site-packages/nvidia/cuda_cupti/lib", &["libcupti.so.12", "libpcsamplingutil.so"]),
            ("/usr/local/cuda-12.4/extras/CUPTI/lib64", &["libcupti.so", "libcupti.so.2024.1.0", "libcupti.so.12"]),
            ("/usr/local/cuda-12.4/lib64", &["libcudart.so.12"]),
            ("/usr/local/cuda/lib64", &["libcupti.so"]),
        ];
        let found = candidates(None, &loaded, dirs(listing));
        let expected = [
            "/preloaded/libcupti.so.12",
            "/venv/lib/python3.11/site-packages/nvidia/cuda_cupti/lib/libcupti.so.12",
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
