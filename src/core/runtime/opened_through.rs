//! The doors a process was opened through, told from the variables that name this
//! library, for the start line (`recording rank logs in DIR (doors: ...)`).

use std::path::Path;

use crate::core::runtime::config;

/// The variables that open a door, in the order the start line names them. For all but
/// SF_VERBS the value must name this library.
const DOORS: [&str; 5] =
    ["LD_PRELOAD", "NCCL_PROFILER_PLUGIN", "CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "SF_VERBS"];

/// The doors whose variable names this library (`ours`: its path as loaded).
pub fn doors_open(var: impl Fn(&str) -> Option<String>, ours: &Path) -> Vec<&'static str> {
    let our_name = ours.file_name();
    let names_us = |value: &str| {
        value.split([':', ' ']).filter(|v| !v.is_empty()).any(|v| {
            let v = Path::new(v);
            v == ours
                || (our_name.is_some() && v.file_name() == our_name)
                || v.to_string_lossy().contains("stagefrontier")
        })
    };
    DOORS
        .into_iter()
        .filter(|door| match var(door) {
            Some(v) if *door == "SF_VERBS" => config::flag(&v) == Some(true),
            Some(v) => names_us(&v),
            None => false,
        })
        .collect()
}

/// This library's path as the dynamic linker loaded it.
pub fn our_library_path() -> std::path::PathBuf {
    // SAFETY: an all-zero Dl_info is a valid value for dladdr to overwrite.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr reads the address of a function of this library and fills `info`;
    // dli_fname, when set, is a NUL-terminated string owned by the loader.
    let found = unsafe { libc::dladdr(our_library_path as *const libc::c_void, &mut info) } != 0;
    if !found || info.dli_fname.is_null() {
        return std::path::PathBuf::new();
    }
    // SAFETY: checked non-null above; the loader keeps the string for the library's life.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    use std::os::unix::ffi::OsStrExt;
    std::path::PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doors_are_the_variables_naming_this_library() {
        let ours = Path::new("/opt/sf/libstagefrontier.so");
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let both = env(&[
            ("LD_PRELOAD", "/usr/lib/libfoo.so:/opt/sf/libstagefrontier.so"),
            ("NVTX_INJECTION64_PATH", "/opt/sf/libstagefrontier.so"),
        ]);
        assert_eq!(doors_open(both, ours), ["LD_PRELOAD", "NVTX_INJECTION64_PATH"]);
        let other =
            env(&[("LD_PRELOAD", "/usr/lib/libfoo.so"), ("CUDA_INJECTION64_PATH", "libother.so"), ("SF_VERBS", "1")]);
        assert_eq!(doors_open(other, ours), ["SF_VERBS"]);
    }
}
