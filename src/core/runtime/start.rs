//! How the library starts: on the first intercepted call (through `live::runtime`), it
//! reads the config and the rank identity, places and opens the log, publishes the
//! `Runtime` and starts the collector thread; at exit it asks the collector for its last
//! round, within a bound. The top of core: it drives every family, none imports it.

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::core::comms::early;
use crate::core::comms::tracer;
use crate::core::inject::Injector;
use crate::core::live::runtime::{self, ExitHandshake, Runtime};
use crate::core::log::comm_table::CommTable;
use crate::core::log::format::live;
use crate::core::log::host;
use crate::core::log::identity::Identity;
use crate::core::log::records::EndHow;
use crate::core::log::sigbus_guard;
use crate::core::log::stage_names::StageNames;
use crate::core::log::writer::{self, HeaderInfo};
use crate::core::record::clock;
use crate::core::record::notice::say;
use crate::core::record::once::LeakedOnce;
use crate::core::record::ring::Ring;
use crate::core::runtime::collector::{self, Collector};
use crate::core::runtime::config::{ClockChoice, Config};
use crate::core::runtime::declared::{self, Declaration};
use crate::core::runtime::identity;
use crate::core::runtime::opened_through::{doors_open, our_library_path};
use crate::core::runtime::place;
use crate::core::runtime::process_end;

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
    start_claimed()
}

/// The job declared its rank (`init_process_group` through the Python door, or its first
/// NCCL communicator): a runtime waiting for one starts now, on this thread (a slow call
/// already: file creation is nothing next to a rendezvous). A runtime already recording
/// under a launcher's rank that the declaration contradicts keeps its log's name and says
/// so (renaming a live log is not done yet).
pub fn declare(declaration: Declaration) {
    if !declared::declare(declaration) {
        return;
    }
    if runtime::claim_declared_start() {
        start_claimed();
        return;
    }
    // Starting on another thread: that start reads the declaration, or finds it after
    // settling PENDING and starts again (`start_claimed`).
    let (Some(rt), Some(config)) = (runtime::active(), config()) else { return };
    // A forked child never gets here (DISABLED); a forced process is `pid-N` by design.
    if rt.identity.source == "forced" || !rt.in_owner_process() {
        return;
    }
    let declared = declared::current().unwrap_or(declaration);
    let env = |name: &str| std::env::var(name).ok();
    let Some(wanted) = identity::detect(env, config.job_id.as_deref(), config.force, Some(declared)) else { return };
    if (wanted.global_rank, wanted.world_size) == (rt.global_rank(), rt.world_size()) {
        return;
    }
    relabel(rt, config, &wanted);
}

/// Gives the live log the rank the job declared: the header's rank fields first (so a
/// reader that finds the file under either name reads the declared rank), then the name,
/// `rank-<declared>.sflog`, by an atomic rename that never replaces another file. What was
/// recorded stays where it is: one file, one mapping, renamed. If another live process
/// writes that name, nothing changes and one line says why.
fn relabel(rt: &Runtime, config: &Config, wanted: &Identity) {
    let Some((dir, name)) = LOG_AT.get() else { return };
    let mut name = name.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let to = wanted.file_name(rt.pid);
    let before = (rt.global_rank(), rt.world_size());
    writer::relabel(rt.map, wanted);
    rt.shape.store(runtime::pack_shape(wanted.global_rank, wanted.world_size), Ordering::Relaxed);
    match place::rename_live_log(dir, &name, &to, config, &rt.host) {
        Ok(()) => *name = to,
        Err(why) => {
            // The old identity back: the log keeps the name its header matches.
            let old = Identity { global_rank: before.0, world_size: before.1, ..rt.identity.clone() };
            writer::relabel(rt.map, &old);
            rt.shape.store(runtime::pack_shape(before.0, before.1), Ordering::Relaxed);
            say(&format!(
                "{} declared rank {} of {}, but this process's log stays {} (rank {} from {}): {why}",
                wanted.source,
                wanted.global_rank,
                wanted.world_size,
                dir.join(&*name).display(),
                before.0,
                rt.identity.source
            ));
        }
    }
}

/// What waits for the runtime of a process that had no rank yet when it was called (the
/// CUDA door: the driver loads it in `cuInit`, often before `init_process_group`); 0 or a
/// `fn()`, run once, right after a start publishes the runtime.
static ON_LATE_START: AtomicUsize = AtomicUsize::new(0);

/// Runs `then` once the runtime starts (now, if the start already happened meanwhile).
pub fn when_started(then: fn()) {
    ON_LATE_START.store(then as usize, Ordering::Release);
    if runtime::is_active() {
        run_late_start();
    }
}

fn run_late_start() {
    let then = ON_LATE_START.swap(0, Ordering::AcqRel);
    if then != 0 {
        // SAFETY: only `when_started` stores here, a `fn()`.
        let then = unsafe { std::mem::transmute::<usize, fn()>(then) };
        let _ = std::panic::catch_unwind(then);
    }
}

/// Where the log is: its job directory and its file name now (`relabel` renames it).
static LOG_AT: std::sync::OnceLock<(PathBuf, std::sync::Mutex<String>)> = std::sync::OnceLock::new();

/// What a start made of the process.
enum Built {
    /// Boxed: the runtime is large, the other outcomes small.
    Runtime(Box<(Runtime, Collector)>),
    /// Not recording, for good.
    Inert,
    /// No rank yet, or its log is another live process's: wait for a declaration. Holds
    /// the declaration this start used, and the line to say if none better ever comes.
    Pending(Option<Declaration>, Option<String>),
}

/// The start, once this thread holds INITIALIZING.
fn start_claimed() -> Option<&'static Runtime> {
    loop {
        let built = std::panic::catch_unwind(build);
        if let Ok(Built::Pending(used, note)) = built {
            if let Some(note) = note {
                let _ = PENDING_NOTE.set(note);
            }
            // Said at exit if no declaration ever gave this process a log of its own.
            static REGISTERED: std::sync::Once = std::sync::Once::new();
            REGISTERED.call_once(|| {
                // SAFETY: registering a plain extern "C" fn with no arguments.
                unsafe { libc::atexit(say_pending_note_at_exit) };
            });
            runtime::settle_pending();
            // A declaration made while this start ran found INITIALIZING and left it here.
            if declared::current() != used && runtime::claim_declared_start() {
                continue;
            }
            return None;
        }
        return finish_start(built);
    }
}

/// Why a process that waited for a rank never recorded (a log of its rank held by a live
/// process), said at exit.
static PENDING_NOTE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

extern "C" fn say_pending_note_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let (true, Some(note)) = (runtime::is_pending(), PENDING_NOTE.get()) {
            say(&format!("{note}; not recording, the job continues unaffected"));
        }
    });
}

fn finish_start(built: std::thread::Result<Built>) -> Option<&'static Runtime> {
    // What racing hooks queued meanwhile enters the runtime before any hook can see it.
    let replayed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match built {
        Ok(Built::Runtime(built)) => {
            let (rt, collector) = *built;
            Some(Some((runtime::publish(rt, |rt| early::close(|entry| tracer::replay(rt, entry))), collector)))
        }
        Ok(_) => {
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
                    // `on_exit` (glibc), not `atexit`: it is given the exit status.
                    // SAFETY: registering an extern "C" fn of the signature on_exit calls.
                    unsafe { on_exit(flush_at_exit, std::ptr::null_mut()) };
                    process_end::install_signal_handlers();
                }
                Err(e) => {
                    rt.exit.done.store(true, Ordering::Release);
                    runtime::disable(&format!("cannot start the collector thread: {e}"));
                    return None;
                }
            }
            run_late_start();
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

fn build() -> Built {
    let (config, warnings) = Config::from_env();
    if config.disabled {
        return Built::Inert;
    }
    // Only processes that record speak: a launcher inheriting the same bad setting as its
    // ranks must not add its own copy of the line.
    let declared = declared::current();
    let env = |name: &str| std::env::var(name).ok();
    let Some(identity) = identity::detect(env, config.job_id.as_deref(), config.force, declared) else {
        return Built::Pending(declared, None);
    };
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
    let mut created = place::create(&request);
    // The job declared this rank and a live process still writes its log: one whose
    // launcher variables gave it the same rank (every child of mp.spawn inherits one RANK)
    // renames its log as soon as its own declaration comes, about now. A bounded wait, on
    // the declaring thread (inside init_process_group or a communicator's creation).
    let deadline = Instant::now() + Duration::from_secs(1);
    while declared.is_some() && matches!(&created, Err(r) if r.held_by_live) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        created = place::create(&request);
    }
    let placed = match created {
        Ok(placed) => placed,
        // A launcher's rank another live process writes (every child of mp.spawn inherits
        // one RANK): the job may yet declare this process's own.
        Err(refused) if refused.held_by_live && declared.is_none() => {
            return Built::Pending(declared, Some(refused.message));
        }
        Err(refused) => {
            say(&format!("{}; not recording, the job continues unaffected", refused.message));
            return Built::Inert;
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
    let file_name = placed.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let _ = LOG_AT.set((placed.dir.clone(), std::sync::Mutex::new(file_name)));
    let runtime = Runtime {
        ring,
        shape: AtomicU64::new(runtime::pack_shape(identity.global_rank, identity.world_size)),
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
    Built::Runtime(Box::new((runtime, Collector::new(writer, config))))
}

/// Local rank 0 speaks for its node (a process with no local rank, for itself).
fn speaks_for_node(identity: &Identity) -> bool {
    identity.local_rank == 0 || (identity.local_rank < 0 && identity.global_rank <= 0)
}

extern "C" {
    /// glibc's `atexit` whose handler is given the exit status.
    fn on_exit(function: extern "C" fn(c_int, *mut c_void), arg: *mut c_void) -> c_int;
}

/// At exit: stores the exit status, asks the collector for its last round and waits for
/// it, within `exit_wait`.
extern "C" fn flush_at_exit(status: c_int, _arg: *mut c_void) {
    if !runtime::is_active() {
        return;
    }
    process_end::record(EndHow::Exit, status);
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
