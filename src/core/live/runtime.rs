//! The library's life: an atomic state machine that starts on the first intercepted call,
//! never blocks a caller while it starts, turns itself off in forked (and raw-cloned)
//! children, and flushes at exit within a bound (`ExitHandshake`); and the `Runtime` every
//! hook reads once it is active. `runtime::start` (the top of core) builds the runtime and
//! registers itself here at load, so that families below it can start it on a first call.
//!
//! ```text
//! UNINIT ──first call──► INITIALIZING ──► ACTIVE ──exit──► (flushed, still ACTIVE)
//!              ▲                      ├─► INERT    (SF_DISABLE, no log)
//!              │                      └─► PENDING  (no rank yet: no launcher variable, or
//!              │                                    its rank's log held by a live process)
//!              └── a declared rank (`init_process_group`, `ncclCommInitRank`) ◄──┘
//! any ──fork child / internal error──► DISABLED
//! ```

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use crate::core::inject::Injector;
use crate::core::live::event::Event;
use crate::core::log::comm_table::CommTable;
use crate::core::log::format::{live, WriterState};
use crate::core::log::identity::Identity;
use crate::core::log::mapping::SharedMap;
use crate::core::log::stage_names::StageNames;
use crate::core::record::clock::Calibration;
use crate::core::record::notice::say;
use crate::core::record::ring::Ring;

const UNINIT: u8 = 0;
const INITIALIZING: u8 = 1;
const ACTIVE: u8 = 2;
const INERT: u8 = 3;
const DISABLED: u8 = 4;
/// No rank known yet: nothing is written and hooks queue what they see
/// (`comms::early`, bounded) until the job declares its rank (`runtime::declared`).
const PENDING: u8 = 5;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());
/// `runtime::start`'s entry, a `Starter`, registered at load; 0 before.
static STARTER: AtomicUsize = AtomicUsize::new(0);
/// `ncclGetVersion` of the real library, registered by the NCCL door, for the collector.
static VERSION_PROBE: AtomicUsize = AtomicUsize::new(0);

pub type VersionProbe = unsafe extern "C" fn(*mut c_int) -> c_int;
/// Builds and publishes the runtime on the very first call (`runtime::start`).
pub type Starter = fn() -> Option<&'static Runtime>;

pub struct Runtime {
    pub ring: Ring<Event>,
    pub comms: CommTable,
    pub stage_names: StageNames,
    pub calibration: Calibration,
    /// Who the process was when its log was created; `global_rank()` and `world_size()`
    /// follow a later relabelling (`runtime::start::declare`).
    pub identity: Identity,
    /// (global rank, world size) now, packed by `pack_shape`.
    pub shape: AtomicU64,
    /// SF_NET_RAW, copied from the config for the profiler door's hot path: every work
    /// request is also recorded.
    pub net_raw: bool,
    pub host: String,
    pub pid: u32,
    pub nccl_version: AtomicU64,
    pub injector: Injector,
    /// Id of the first communicator spanning the whole job (`comm=world`), 0 until known.
    pub world_comm: AtomicU64,
    /// The exit handler's request to the collector thread, and its answer.
    pub exit: ExitHandshake,
    /// The collector thread, for the exit handler to wake (a leaked `Thread`, set once).
    pub(crate) collector_thread: AtomicPtr<std::thread::Thread>,
    pub(crate) map: &'static SharedMap,
}

/// How the exit handler gets the collector's last round without ever waiting unbounded:
/// it raises `requested`; the collector, at its next wake-up (one heartbeat at most),
/// flushes and raises `done`. The handler waits `exit_wait` and then lets the process
/// exit whatever the collector is doing (blocked reading a file, or in a CUPTI flush on a
/// wedged GPU).
#[derive(Default)]
pub struct ExitHandshake {
    pub requested: AtomicBool,
    /// The collector will not write again: it flushed, stopped, or panicked.
    pub done: AtomicBool,
}

/// How long the exit handler waits for the collector: two heartbeats, at most 1 s.
pub fn exit_wait(heartbeat_ms: u64) -> Duration {
    Duration::from_millis((2 * heartbeat_ms).min(1000))
}

/// A (global rank, world size) pair in one word.
pub fn pack_shape(global_rank: i32, world_size: i32) -> u64 {
    (global_rank as u32 as u64) | (world_size as u32 as u64) << 32
}

impl Runtime {
    pub fn global_rank(&self) -> i32 {
        self.shape.load(Ordering::Relaxed) as u32 as i32
    }

    pub fn world_size(&self) -> i32 {
        (self.shape.load(Ordering::Relaxed) >> 32) as u32 as i32
    }

    pub fn set_nccl_version(&self, version: i32) {
        if version > 0 {
            self.nccl_version.store(version as u64, Ordering::Relaxed);
            self.map.atomic_u64(live::NCCL_VERSION).store(version as u64, Ordering::Relaxed);
        }
    }

    /// A live header field (`format::live`).
    pub fn live(&self, field: usize) -> &AtomicU64 {
        self.map.atomic_u64(field)
    }

    pub fn count_comm_overflow(&self) {
        self.map.atomic_u64(live::COMM_TABLE_OVERFLOW).fetch_add(1, Ordering::Relaxed);
    }

    /// Whether this is the process that created the runtime. A child made by a raw
    /// `clone()` (no fork handlers ran) shares the log's mapping and must never write it.
    pub fn in_owner_process(&self) -> bool {
        std::process::id() == self.pid
    }

    /// Called by the collector thread, never from a hook.
    pub fn probe_nccl_version(&self) {
        let probe = VERSION_PROBE.load(Ordering::Acquire);
        if probe == 0 {
            return;
        }
        // SAFETY: only `register_version_probe` stores here, with a VersionProbe.
        let probe: VersionProbe = unsafe { std::mem::transmute::<usize, VersionProbe>(probe) };
        let mut version: c_int = 0;
        // SAFETY: ncclGetVersion writes one int through a valid pointer and has no other
        // effect; this runs on the collector thread, outside every hook.
        if unsafe { probe(&mut version) } == 0 {
            self.set_nccl_version(version);
        }
    }
}

/// Lets the collector ask the real NCCL for its version once it has been resolved.
pub fn register_version_probe(probe: VersionProbe) {
    VERSION_PROBE.store(probe as usize, Ordering::Release);
}

/// The runtime if recording; starts it on the very first call. Never waits: a call that
/// races another thread's start is queued (`is_starting`, `comms::early`).
#[inline]
pub fn active() -> Option<&'static Runtime> {
    let rt = RUNTIME.load(Ordering::Acquire);
    if !rt.is_null() {
        // SAFETY: RUNTIME only ever holds a leaked Box that is never freed.
        return Some(unsafe { &*rt });
    }
    if STATE.load(Ordering::Relaxed) == UNINIT {
        return start();
    }
    None
}

/// The runtime if it was published, without ever starting it: for a signal handler or an
/// exit path (one atomic load).
pub fn published() -> Option<&'static Runtime> {
    let rt = RUNTIME.load(Ordering::Acquire);
    // SAFETY: RUNTIME only ever holds a leaked Box that is never freed.
    (!rt.is_null()).then(|| unsafe { &*rt })
}

/// Lets `active` start the runtime; called once, at load, by `runtime::start`.
pub fn register_starter(starter: Starter) {
    STARTER.store(starter as usize, Ordering::Release);
}

#[cold]
fn start() -> Option<&'static Runtime> {
    let starter = STARTER.load(Ordering::Acquire);
    if starter == 0 {
        return None;
    }
    // SAFETY: only `register_starter` stores here, with a Starter.
    let starter: Starter = unsafe { std::mem::transmute::<usize, Starter>(starter) };
    starter()
}

/// The state machine's steps for `runtime::start`: claims the start (UNINIT to
/// INITIALIZING); `false` when another call already did.
pub fn claim_start() -> bool {
    STATE.compare_exchange(UNINIT, INITIALIZING, Ordering::AcqRel, Ordering::Relaxed).is_ok()
}

/// Publishes the built runtime: from here on `active` returns it. `before` runs first,
/// on the runtime no hook can see yet (`runtime::start` replays the start-up queue).
pub fn publish(rt: Runtime, before: impl FnOnce(&'static Runtime)) -> &'static Runtime {
    let rt: &'static Runtime = Box::leak(Box::new(rt));
    before(rt);
    RUNTIME.store(rt as *const Runtime as *mut Runtime, Ordering::Release);
    STATE.store(ACTIVE, Ordering::Release);
    rt
}

/// A declared rank restarts a start that found none (PENDING to INITIALIZING), or makes
/// the first start; `false` when the runtime is already past that.
pub fn claim_declared_start() -> bool {
    claim_start() || STATE.compare_exchange(PENDING, INITIALIZING, Ordering::AcqRel, Ordering::Relaxed).is_ok()
}

/// No rank yet: waits for the job to declare one.
pub fn settle_pending() {
    STATE.store(PENDING, Ordering::Release);
}

/// Whether the runtime waits for a declared rank.
pub fn is_pending() -> bool {
    STATE.load(Ordering::Acquire) == PENDING
}

/// Nothing to record in this process (SF_DISABLE, no log).
pub fn settle_inert() {
    STATE.store(INERT, Ordering::Release);
}

/// The start itself failed: off for good.
pub fn settle_disabled() {
    STATE.store(DISABLED, Ordering::Release);
}

/// The runtime for a hook's slow path (communicator creation and teardown): as `active`,
/// but a process that is not the runtime's owner (a raw `clone()` child, which no fork
/// handler switched off) turns recording off for itself here, before it writes anything
/// into its parent's communicator table. One `getpid` per slow call, never per NCCL call.
pub fn owner() -> Option<&'static Runtime> {
    let rt = active()?;
    if rt.in_owner_process() {
        return Some(rt);
    }
    disable_in_child();
    None
}

/// Whether another thread is starting the runtime, or it waits for a declared rank: a
/// hook queues what it sees (`comms::early`; the queue stays open while PENDING).
pub fn is_starting() -> bool {
    matches!(STATE.load(Ordering::Acquire), INITIALIZING | PENDING)
}

/// The runtime, for a hook the start-up queue no longer takes: the starting thread closed
/// it and is replaying it, a bounded copy of at most `early::CAPACITY` entries with no lock
/// or I/O, after which it publishes the runtime. None if the start left no runtime.
#[cold]
pub fn after_start() -> Option<&'static Runtime> {
    loop {
        if let Some(rt) = active() {
            return Some(rt);
        }
        if !is_starting() {
            return None;
        }
        std::thread::yield_now();
    }
}

pub fn is_active() -> bool {
    STATE.load(Ordering::Acquire) == ACTIVE
}

/// Switched off for good: in a forked child, or after an internal error (`disable`). Code that may take a lock checks this first: a child must not wait on a lock
/// its parent's threads held at fork time.
pub fn is_disabled() -> bool {
    STATE.load(Ordering::Acquire) == DISABLED
}

/// Stops recording for good after an internal error; the job runs on.
pub fn disable(reason: &str) {
    stop(WriterState::Disabled, reason);
}

/// Stops recording for good, leaving `state` in the log header for readers.
pub fn stop(state: WriterState, reason: &str) {
    if STATE.swap(DISABLED, Ordering::AcqRel) == ACTIVE {
        let rt = RUNTIME.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !rt.is_null() {
            // SAFETY: as in `active`.
            let rt = unsafe { &*rt };
            rt.map.atomic_u64(live::WRITER_STATE).store(state as u64, Ordering::Release);
        }
        say(&format!("recording stopped: {reason}; the job continues unaffected"));
    }
}

/// A forked child shares the parent's log mapping and ring memory but not its collector:
/// it must never write either. Registered at load (`runtime::start`), so it also covers
/// forks before init. Also what the SIGBUS guard calls when the log was truncated under
/// the process: atomic stores only, so it is safe in a signal handler.
pub extern "C" fn disable_in_child() {
    STATE.store(DISABLED, Ordering::Release);
    RUNTIME.store(std::ptr::null_mut(), Ordering::Release);
}
