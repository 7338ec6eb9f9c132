//! The CUDA door's core (CUDA_INJECTION64_PATH): GPU kernel and memcpy activity from
//! CUPTI's activity API, on ARGUS's three decoupled paths (Sec. 4.3, App. A):
//!
//! - control: [`open`], called once by `InitializeInjection`, loads CUPTI, subscribes,
//!   registers the buffer callbacks and enables the activity kinds;
//! - collection: the callbacks (doors::cuda) only take a buffer from the [`BufferPool`] or
//!   hand a filled one over, lock-free and bounded;
//! - processing: the collector's [`CuptiDrain`] flushes CUPTI periodically, parses the
//!   filled buffers, feeds the kernel windows, gives the buffers back and writes the
//!   door's `cupti_status` records.

pub mod callbacks;
pub mod config;
mod drain;
pub mod loader;
pub mod parse;
pub mod pool;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::OnceLock;

use cudarc::cupti::sys::{CUptiResult, CUpti_CallbackFunc};

use self::config::CuptiConfig;
pub use self::drain::CuptiDrain;
use self::loader::{Callbacks, Cupti, OpenError};
use self::pool::BufferPool;
use crate::core::log::records::CuptiState;
use crate::core::record::notice::say;

/// CUPTI and the buffers lent to it, from the moment the callbacks may run.
pub struct Session {
    pub cupti: Cupti,
    pub pool: BufferPool,
    pub correlation: bool,
}

static SESSION: OnceLock<Session> = OnceLock::new();
/// `CuptiState` once the door has settled; 0 while it never opened.
static STATE: AtomicU8 = AtomicU8::new(0);
/// The `CUptiResult` that degraded the door, 0 if none.
static RESULT: AtomicU32 = AtomicU32::new(0);
/// `cuptiGetVersion` of the CUPTI loaded, 0 if none.
static VERSION: AtomicU32 = AtomicU32::new(0);
/// Whether CUPTI records completed synchronizations (activity kind 38).
static SYNC_ACTIVITY: AtomicBool = AtomicBool::new(false);

/// Whether completed host synchronizations come from CUPTI's SYNCHRONIZATION records (else
/// from the callbacks' EXIT).
pub fn sync_activity() -> bool {
    SYNC_ACTIVITY.load(Ordering::Acquire)
}

/// The session, for the buffer callbacks; `None` before CUPTI was loaded.
pub fn session() -> Option<&'static Session> {
    SESSION.get()
}

/// How the door settled; `None` if it was never opened.
pub fn state() -> Option<CuptiState> {
    CuptiState::from_u8(STATE.load(Ordering::Acquire))
}

fn settle(state: CuptiState, result: Option<CUptiResult>) {
    RESULT.store(result.map_or(0, |r| r as u32), Ordering::Relaxed);
    STATE.store(state as u8, Ordering::Release);
}

/// What the door registers with CUPTI (the extern "C" fns live in doors::cuda).
pub struct DoorCallbacks {
    pub buffers: Callbacks,
    pub subscriber: CUpti_CallbackFunc,
}

/// Opens the door: loads CUPTI from `SF_CUPTI_PATH` or the places `loaded` (the
/// process's loaded objects) point to, and starts kernel and memcpy activity (runtime
/// calls too with correlation on). Another CUPTI subscriber gives no-kernel mode. Says
/// nothing when there is no CUPTI at all, one line for anything else that goes wrong.
pub fn open(config: &CuptiConfig, loaded: &[PathBuf], callbacks: DoorCallbacks) {
    let candidates = loader::candidates(config.path.as_deref(), loaded, loader::list_dir);
    let mut cupti = match loader::open(&candidates) {
        Ok(cupti) => cupti,
        Err(OpenError::NotFound) => {
            if let Some(path) = &config.path {
                say(&format!(
                    "SF_CUPTI_PATH={} cannot be loaded; CUDA kernel activity is not recorded",
                    path.display()
                ));
            }
            return settle(CuptiState::Unavailable, None);
        }
        Err(OpenError::Unusable(why)) => {
            say(&format!("{why}; CUDA kernel activity is not recorded"));
            return settle(CuptiState::Unavailable, None);
        }
    };
    VERSION.store(cupti.version().unwrap_or(0), Ordering::Relaxed);
    let failed = |call: &str, result: CUptiResult, cupti: &Cupti| {
        say(&format!("{call} failed ({result:?}) in {}; CUDA kernel activity is not recorded", cupti.path.display()));
        settle(CuptiState::Unavailable, Some(result));
    };
    match cupti.subscribe(callbacks.subscriber) {
        Ok(()) => {}
        Err(result @ CUptiResult::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) => {
            say("another CUPTI client (torch.profiler, Nsight Systems, ...) holds CUPTI: CUDA kernel activity is not recorded (no-kernel mode); everything else is");
            return settle(CuptiState::NoKernelMode, Some(result));
        }
        Err(result) => return failed("cuptiSubscribe", result, &cupti),
    }
    // The buffers exist before CUPTI may ask for one.
    let session = SESSION.get_or_init(|| Session {
        cupti,
        pool: BufferPool::new(config.buffers, config.buffer_kb * 1024),
        correlation: config.correlation,
    });
    let cupti = &session.cupti;
    if let Err(result) = cupti.register_callbacks(callbacks.buffers) {
        return failed("cuptiActivityRegisterCallbacks", result, cupti);
    }
    let kinds = [loader::KERNELS, loader::MEMCPY].into_iter().chain(config.correlation.then_some(loader::RUNTIME));
    let mut enabled = Vec::new();
    for kind in kinds {
        if let Err(result) = cupti.enable(kind) {
            for kind in enabled {
                let _ = cupti.disable(kind);
            }
            return failed(&format!("cuptiActivityEnable({kind:?})"), result, cupti);
        }
        enabled.push(kind);
    }
    // Device evidence beyond kernels is best effort: without it the door records kernels
    // as before, and the log says which evidence it has.
    SYNC_ACTIVITY.store(cupti.enable(loader::SYNCHRONIZATION).is_ok(), Ordering::Release);
    for (domain, cbid) in callbacks::enabled() {
        if cupti.enable_callback(domain, cbid) == Err(None) {
            break; // no callback API: activity only
        }
    }
    settle(CuptiState::Enabled, None);
}
