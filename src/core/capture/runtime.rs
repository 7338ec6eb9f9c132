//! The library's life: an atomic state machine that starts on the first intercepted call,
//! never blocks a caller while it starts, turns itself off in forked (and raw-cloned)
//! children, and flushes at exit within a bound (`ExitHandshake`).
//!
//! ```text
//! UNINIT ──first call──► INITIALIZING ──► ACTIVE ──exit──► (flushed, still ACTIVE)
//!                                     └─► INERT    (no rank identity, SF_DISABLE, no log)
//! any ──fork child / internal error──► DISABLED
//! ```

use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::core::capture::clock::{self, Calibration};
use crate::core::capture::collector::{self, Collector};
use crate::core::capture::config::{ClockChoice, Config};
use crate::core::capture::doors::{doors_open, our_library_path};
use crate::core::capture::event::Event;
use crate::core::capture::host;
use crate::core::capture::identity::{self, Identity};
use crate::core::capture::notice::say;
use crate::core::capture::ring::Ring;
use crate::core::comms::comm_table::CommTable;
use crate::core::comms::inject::Injector;
use crate::core::log::format::{live, WriterState};
use crate::core::log::mapping::SharedMap;
use crate::core::log::place;
use crate::core::log::writer::HeaderInfo;
use crate::core::steps::stage_names::StageNames;

const UNINIT: u8 = 0;
const INITIALIZING: u8 = 1;
const ACTIVE: u8 = 2;
const INERT: u8 = 3;
const DISABLED: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());
/// `ncclGetVersion` of the real library, registered by the NCCL door, for the collector.
static VERSION_PROBE: AtomicUsize = AtomicUsize::new(0);

pub type VersionProbe = unsafe extern "C" fn(*mut c_int) -> c_int;

pub struct Runtime {
    pub ring: Ring<Event>,
    pub comms: CommTable,
    pub stage_names: StageNames,
    pub calibration: Calibration,
    pub identity: Identity,
    pub config: Config,
    pub host: String,
    pub pid: u32,
    pub nccl_version: AtomicU64,
    pub injector: Injector,
    /// Id of the first communicator spanning the whole job (`comm=world`), 0 until known.
    pub world_comm: AtomicU64,
    /// `ncclCommInitAll` calls so far, to tell their communicators apart.
    pub init_all_calls: AtomicU64,
    /// The exit handler's request to the collector thread, and its answer.
    pub exit: ExitHandshake,
    /// The collector thread, for the exit handler to wake (a leaked `Thread`, set once).
    collector_thread: AtomicPtr<std::thread::Thread>,
    map: &'static SharedMap,
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

impl Runtime {
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
/// races another thread's start is simply not recorded.
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

#[cold]
fn start() -> Option<&'static Runtime> {
    if STATE.compare_exchange(UNINIT, INITIALIZING, Ordering::AcqRel, Ordering::Relaxed).is_err() {
        return None;
    }
    match std::panic::catch_unwind(build) {
        Ok(Some((rt, collector))) => {
            let rt: &'static Runtime = Box::leak(Box::new(rt));
            RUNTIME.store(rt as *const Runtime as *mut Runtime, Ordering::Release);
            STATE.store(ACTIVE, Ordering::Release);
            let spawned = std::thread::Builder::new()
                .name(collector::THREAD_NAME.into())
                .spawn(move || collector::run(rt, collector));
            match spawned {
                Ok(handle) => {
                    let thread = Box::into_raw(Box::new(handle.thread().clone()));
                    rt.collector_thread.store(thread, Ordering::Release);
                    // Registered now, not at load: exit handlers run in reverse order, so
                    // this one runs before those of CUDA and NCCL, registered earlier, and
                    // the last CUPTI flush happens while the driver is still there.
                    // SAFETY: registering a plain extern "C" fn with no arguments.
                    unsafe { libc::atexit(flush_at_exit) };
                }
                Err(e) => {
                    rt.exit.done.store(true, Ordering::Release);
                    disable(&format!("cannot start the collector thread: {e}"));
                    return None;
                }
            }
            Some(rt)
        }
        Ok(None) => {
            STATE.store(INERT, Ordering::Release);
            None
        }
        Err(_) => {
            STATE.store(DISABLED, Ordering::Release);
            say("internal error during start; not recording, the job continues unaffected");
            None
        }
    }
}

fn build() -> Option<(Runtime, Collector)> {
    let (config, warnings) = Config::from_env();
    if config.disabled {
        return None;
    }
    // Only processes that record speak: a launcher inheriting the same bad setting as its
    // ranks must not add its own copy of the line.
    let identity = identity::detect(|name| std::env::var(name).ok(), config.job_id.as_deref(), config.force)?;
    let (injector, notes) = Injector::from_setting(config.inject.as_deref(), identity.global_rank);
    for warning in warnings.iter().chain(&notes) {
        say(warning);
    }
    let pid = std::process::id();
    let host = host::name();
    let calibration = clock::select(config.clock != ClockChoice::Monotonic);
    let ring = Ring::with_capacity(config.ring_events);
    let info = HeaderInfo {
        identity: &identity,
        pid,
        host: &host,
        calibration: &calibration,
        slot_count: config.log_records,
        ring_capacity: ring.capacity() as u32,
    };
    let request = place::Request {
        config: &config,
        info,
        job_id: &identity.job_id,
        file_name: identity.file_name(pid),
        local_ranks: place::local_ranks(|name| std::env::var(name).ok(), identity.world_size),
        speaks_for_node: speaks_for_node(&identity),
        runtime_dir: std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from),
    };
    let placed = match place::create(&request) {
        Ok(placed) => placed,
        Err(message) => {
            say(&format!("{message}; not recording, the job continues unaffected"));
            return None;
        }
    };
    for note in &placed.notes {
        say(note);
    }
    if request.speaks_for_node && !config.quiet {
        let doors = doors_open(|name| std::env::var(name).ok(), &our_library_path());
        let doors = if doors.is_empty() { "none named".to_string() } else { doors.join(", ") };
        say(&format!("recording rank logs in {} (doors: {doors})", placed.dir.display()));
    }
    let writer = placed.writer;
    let map = writer.map();
    let runtime = Runtime {
        ring,
        comms: CommTable::in_map(map),
        stage_names: StageNames::in_map(map),
        calibration,
        identity,
        config,
        host,
        pid,
        nccl_version: AtomicU64::new(0),
        injector,
        world_comm: AtomicU64::new(0),
        init_all_calls: AtomicU64::new(0),
        exit: ExitHandshake::default(),
        collector_thread: AtomicPtr::new(std::ptr::null_mut()),
        map,
    };
    Some((runtime, Collector::new(writer)))
}

/// Local rank 0 speaks for its node (a process with no local rank, for itself).
fn speaks_for_node(identity: &Identity) -> bool {
    identity.local_rank == 0 || (identity.local_rank < 0 && identity.global_rank <= 0)
}

/// At exit: asks the collector for its last round and waits for it, within `exit_wait`.
extern "C" fn flush_at_exit() {
    if !is_active() {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        let Some(rt) = active().filter(|rt| rt.in_owner_process()) else { return };
        // A step marker leaves CURRENT_STEP nonzero for good; a stage marker interns a name.
        let marked = rt.live(live::CURRENT_STEP).load(Ordering::Relaxed) != 0 || !rt.stage_names.is_empty();
        if let Some(note) = rt.injector.unmarked_note(marked) {
            say(&note);
        }
        rt.exit.requested.store(true, Ordering::Release);
        let thread = rt.collector_thread.load(Ordering::Acquire);
        if !thread.is_null() {
            // SAFETY: a leaked Box<Thread>, stored once and never freed.
            unsafe { &*thread }.unpark();
        }
        let deadline = Instant::now() + exit_wait(rt.config.heartbeat_ms);
        while !rt.exit.done.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// A forked child shares the parent's log mapping and ring memory but not its collector:
/// it must never write either. Registered at load, so it also covers forks before init.
extern "C" fn disable_in_child() {
    STATE.store(DISABLED, Ordering::Release);
    RUNTIME.store(std::ptr::null_mut(), Ordering::Release);
}

/// Runs when the library is loaded, before `main`: only registers the fork handler.
extern "C" fn on_load() {
    // SAFETY: registering plain extern "C" fns; pthread_atfork copies the pointers.
    unsafe { libc::pthread_atfork(None, None, Some(disable_in_child)) };
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;
