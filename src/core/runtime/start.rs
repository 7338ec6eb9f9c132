//! How the library starts: on the first intercepted call (through `live::runtime`), it
//! reads the config and the rank identity, places and opens the log, publishes the
//! `Runtime` and starts the collector thread; at exit it asks the collector for its last
//! round, within a bound. The top of core: it drives every family, none imports it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::core::comms::early;
use crate::core::comms::tracer;
use crate::core::inject::Injector;
use crate::core::live::runtime::{self, ExitHandshake, Runtime};
use crate::core::log::comm_table::CommTable;
use crate::core::log::format::live;
use crate::core::log::host;
use crate::core::log::identity::Identity;
use crate::core::log::sigbus_guard;
use crate::core::log::stage_names::StageNames;
use crate::core::log::writer::HeaderInfo;
use crate::core::record::clock;
use crate::core::record::notice::say;
use crate::core::record::once::LeakedOnce;
use crate::core::record::ring::Ring;
use crate::core::runtime::collector::{self, Collector};
use crate::core::runtime::config::{ClockChoice, Config};
use crate::core::runtime::identity;
use crate::core::runtime::opened_through::{doors_open, our_library_path};
use crate::core::runtime::place;

static CONFIG: LeakedOnce<Config> = LeakedOnce::new();

/// The settings the runtime started with; `None` before it started (or when it did not).
pub fn config() -> Option<&'static Config> {
    CONFIG.get()
}

/// `live::runtime`'s starter: the state machine's first call lands here.
#[cold]
fn start() -> Option<&'static Runtime> {
    if !runtime::claim_start() {
        return None;
    }
    let built = std::panic::catch_unwind(build);
    // What racing hooks queued meanwhile enters the runtime before any hook can see it.
    let replayed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match built {
        Ok(Some((rt, collector))) => {
            Some(Some((runtime::publish(rt, |rt| early::close(|entry| tracer::replay(rt, entry))), collector)))
        }
        Ok(None) => {
            early::close(drop);
            Some(None)
        }
        Err(_) => None,
    }));
    match replayed {
        Ok(Some(Some((rt, collector)))) => {
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
                    runtime::disable(&format!("cannot start the collector thread: {e}"));
                    return None;
                }
            }
            Some(rt)
        }
        Ok(Some(None)) => {
            runtime::settle_inert();
            None
        }
        Ok(None) | Err(_) => {
            runtime::settle_disabled();
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
    let net_raw = config.net_raw;
    // Set once: only the call that claimed the start gets here.
    let config = CONFIG.get_or_init(|| config);
    let runtime = Runtime {
        ring,
        comms: CommTable::in_map(map),
        stage_names: StageNames::in_map(map),
        calibration,
        identity,
        net_raw,
        host,
        pid,
        nccl_version: AtomicU64::new(0),
        injector,
        world_comm: AtomicU64::new(0),
        exit: ExitHandshake::default(),
        collector_thread: AtomicPtr::new(std::ptr::null_mut()),
        map,
    };
    Some((runtime, Collector::new(writer, config)))
}

/// Local rank 0 speaks for its node (a process with no local rank, for itself).
fn speaks_for_node(identity: &Identity) -> bool {
    identity.local_rank == 0 || (identity.local_rank < 0 && identity.global_rank <= 0)
}

/// At exit: asks the collector for its last round and waits for it, within `exit_wait`.
extern "C" fn flush_at_exit() {
    if !runtime::is_active() {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        let Some(rt) = runtime::active().filter(|rt| rt.in_owner_process()) else { return };
        let Some(config) = config() else { return };
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
        let deadline = Instant::now() + runtime::exit_wait(config.heartbeat_ms);
        while !rt.exit.done.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// Runs when the library is loaded, before `main`: only registers the fork handler, this
/// module's start with the state machine (which sits below every family), and what a
/// lost log turns off (no signal handler yet: that waits for the first log).
extern "C" fn on_load() {
    runtime::register_starter(start);
    // SAFETY: registering plain extern "C" fns; pthread_atfork copies the pointers.
    unsafe { libc::pthread_atfork(None, None, Some(runtime::disable_in_child)) };
    sigbus_guard::on_lost(runtime::disable_in_child);
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;
