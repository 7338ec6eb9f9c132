//! Which doors were open, for the log's `live::DOORS` field: a door marks itself once when
//! it first acts (cold paths only: communicator creation, NVTX and CUPTI initialisation,
//! the first step marker, a profiler context, an adopted verbs device), and the collector
//! publishes the set with the environment variables that open the injection doors. `sf`
//! then tells "no NVTX ranges" from "NVTX_INJECTION64_PATH was not set".

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// NCCL calls through the LD_PRELOAD door.
pub const PRELOAD: u64 = 1 << 0;
/// The C API step and stage markers (`sf_step_begin`, also used by python/stagefrontier.py).
pub const MARKERS: u64 = 1 << 1;
/// NVTX ranges through NVTX_INJECTION64_PATH.
pub const NVTX: u64 = 1 << 2;
/// CUDA activity through CUDA_INJECTION64_PATH (CUPTI).
pub const CUDA: u64 = 1 << 3;
/// The NCCL profiler plugin (NCCL_PROFILER_PLUGIN).
pub const PROFILER: u64 = 1 << 4;
/// The libibverbs door (SF_VERBS=1).
pub const VERBS: u64 = 1 << 5;
/// `torch.distributed` collectives issued from Python on a non-NCCL process group.
pub const PYTHON: u64 = 1 << 6;

/// Set in the environment of the process at its start.
pub const NVTX_PATH_SET: u64 = 1 << 32;
pub const CUDA_PATH_SET: u64 = 1 << 33;
pub const PROFILER_PLUGIN_SET: u64 = 1 << 34;
/// Always set by a library that publishes the field: a 0 is a log from an older library.
pub const KNOWN: u64 = 1 << 63;

/// Doors and their names, in the order `sf` lists them.
pub const NAMES: [(u64, &str); 7] = [
    (PRELOAD, "preload"),
    (MARKERS, "markers"),
    (NVTX, "nvtx"),
    (CUDA, "cuda"),
    (PROFILER, "profiler"),
    (VERBS, "verbs"),
    (PYTHON, "python"),
];

static OPENED: AtomicU64 = AtomicU64::new(0);

/// Marks `door` open. A load first, so repeated marks only read a shared line.
pub fn opened(door: u64) {
    if OPENED.load(Ordering::Relaxed) & door != door {
        OPENED.fetch_or(door, Ordering::Relaxed);
    }
}

/// What the collector publishes: the doors opened so far, `environment`'s bits, `KNOWN`.
pub fn published(environment: u64) -> u64 {
    OPENED.load(Ordering::Relaxed) | environment | KNOWN
}

/// The injection variables set in this process's environment; read once, by the collector.
pub fn environment() -> u64 {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    [
        ("NVTX_INJECTION64_PATH", NVTX_PATH_SET),
        ("CUDA_INJECTION64_PATH", CUDA_PATH_SET),
        ("NCCL_PROFILER_PLUGIN", PROFILER_PLUGIN_SET),
    ]
    .into_iter()
    .filter(|(name, _)| set(name))
    .fold(0, |bits, (_, bit)| bits | bit)
}

/// The `DOORS` field as `sf` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Doors {
    /// Doors that acted, by name.
    pub open: Vec<&'static str>,
    pub nvtx_injection_path_set: bool,
    pub cuda_injection_path_set: bool,
    pub nccl_profiler_plugin_set: bool,
}

impl Doors {
    /// `None` for a log from a library that did not record its doors.
    pub fn decode(field: u64) -> Option<Doors> {
        (field & KNOWN != 0).then(|| Doors {
            open: NAMES.iter().filter(|(bit, _)| field & bit != 0).map(|(_, name)| *name).collect(),
            nvtx_injection_path_set: field & NVTX_PATH_SET != 0,
            cuda_injection_path_set: field & CUDA_PATH_SET != 0,
            nccl_profiler_plugin_set: field & PROFILER_PLUGIN_SET != 0,
        })
    }

    /// Why NVTX ranges could not be seen, naming the variable; `None` when the NVTX door
    /// was open.
    pub fn nvtx_note(&self) -> Option<&'static str> {
        if self.open.contains(&"nvtx") {
            None
        } else if !self.nvtx_injection_path_set {
            Some("NVTX ranges were not seen: NVTX_INJECTION64_PATH was not set (export NVTX_INJECTION64_PATH=/path/to/libstagefrontier.so, or mark steps with the C API or python/stagefrontier.py)")
        } else {
            Some("NVTX_INJECTION64_PATH was set but NVTX never loaded the library: the job made no NVTX call, or the variable names another file")
        }
    }
}

/// Why a job's logs hold no step markers, from its ranks' doors: when no rank's C-API
/// markers or NVTX door acted, the first rank's NVTX note (the variable not set).
pub fn no_markers_note<'a>(ranks: impl IntoIterator<Item = &'a Doors>) -> Option<&'static str> {
    let known: Vec<&Doors> = ranks.into_iter().collect();
    if known.iter().any(|d| d.open.contains(&"markers") || d.open.contains(&"nvtx")) {
        return None;
    }
    known.iter().find_map(|d| d.nvtx_note())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_names_doors_and_variables() {
        assert_eq!(Doors::decode(0), None, "an older log");
        let d = Doors::decode(KNOWN | PRELOAD | CUDA | CUDA_PATH_SET).unwrap();
        assert_eq!(d.open, ["preload", "cuda"]);
        assert!(d.nvtx_note().unwrap().contains("NVTX_INJECTION64_PATH was not set"));
        let set = Doors::decode(KNOWN | NVTX_PATH_SET).unwrap();
        assert!(set.nvtx_note().unwrap().contains("was set but"));
        assert_eq!(Doors::decode(KNOWN | NVTX | NVTX_PATH_SET).unwrap().nvtx_note(), None);
        let markers = Doors::decode(KNOWN | MARKERS).unwrap();
        assert_eq!(no_markers_note([&d, &markers]), None, "a rank with C-API markers needs no NVTX");
        assert!(no_markers_note([&d]).unwrap().contains("NVTX_INJECTION64_PATH"));
    }
}
