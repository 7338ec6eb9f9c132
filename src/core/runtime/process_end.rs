//! The library records its own end, so that `sf` can tell which rank went first when a
//! launcher tears a job down within milliseconds (heartbeats, every 50 ms, cannot):
//!
//! - `exit(status)` and a return from `main`: the exit handler (`on_exit`, which is given
//!   the status) stores it before the collector's last round, which also writes it as a
//!   `process_end` record;
//! - `_exit(status)` (Python's `os._exit`): the preload door's `_exit` stores it, then
//!   calls the real one;
//! - a termination or fatal signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGABRT, SIGSEGV,
//!   SIGFPE, SIGILL): a handler installed when the log is first mapped stores it and
//!   hands the signal on as the action it replaced would have taken it
//!   (`signal_chain`): the application's own handler runs as before (the end then says
//!   the application handled it, and a later exit replaces it); with none, the default
//!   action is restored and the signal raised again, so the process dies of it as it
//!   would have. An ignored signal stays ignored. An application that installs its own
//!   handler later replaces ours, as `sigaction` does for everyone.
//!
//! What is stored: three live header words, written with atomic stores after two clock
//! reads, all async-signal-safe. SIGKILL leaves none: a rank with no end died at or after
//! its last heartbeat.

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::{Once, OnceLock};

use crate::core::live::runtime;
use crate::core::log::format::live;
use crate::core::log::records::{EndHow, ProcessEnd};
use crate::core::record::clock::{monotonic_ns, wall_ns};
use crate::core::record::signal_chain;

const SIGNALS: [c_int; 8] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGABRT,
    libc::SIGSEGV,
    libc::SIGFPE,
    libc::SIGILL,
];

/// The action each of `SIGNALS` had before ours.
static PREVIOUS: [OnceLock<libc::sigaction>; SIGNALS.len()] = [const { OnceLock::new() }; SIGNALS.len()];

/// Stores how the process ends into its log's header. Async-signal-safe: one pointer load,
/// `getpid`, two `clock_gettime` and three atomic stores. Nothing in a process that does
/// not record, or in a child that shares its parent's mapping.
pub fn record(how: EndHow, code: i32) {
    let Some(rt) = runtime::published() else { return };
    if !rt.in_owner_process() {
        return;
    }
    rt.live(live::END_MONO_NS).store(monotonic_ns(), Ordering::Relaxed);
    rt.live(live::END_WALL_NS).store(wall_ns(), Ordering::Relaxed);
    rt.live(live::END_HOW).store(ProcessEnd::how_word(how, code), Ordering::Release);
}

/// The end stored so far, for the collector's last round.
pub fn stored(rt: &runtime::Runtime) -> Option<ProcessEnd> {
    let how = rt.live(live::END_HOW).load(Ordering::Acquire);
    let (mono, wall) =
        (rt.live(live::END_MONO_NS).load(Ordering::Relaxed), rt.live(live::END_WALL_NS).load(Ordering::Relaxed));
    ProcessEnd::from_words(mono, wall, how)
}

/// Installs the signal handlers, once per process.
pub fn install_signal_handlers() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        for (sig, previous) in SIGNALS.iter().zip(&PREVIOUS) {
            signal_chain::install(*sig, on_signal, previous, true);
        }
    });
}

extern "C" fn on_signal(sig: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: errno is thread-local; reading and restoring it is async-signal-safe.
    let errno = unsafe { *libc::__errno_location() };
    let previous = SIGNALS.iter().position(|s| *s == sig).and_then(|i| PREVIOUS[i].get());
    let handled = previous.is_some_and(signal_chain::handled);
    record(if handled { EndHow::HandledSignal } else { EndHow::Signal }, sig);
    // A fault the kernel raised at an instruction (si_code > 0) re-executes on return; a
    // signal sent with kill, tgkill or abort() has si_code <= 0.
    // SAFETY: the kernel hands an SA_SIGINFO handler a valid siginfo.
    let sent = unsafe { (*info).si_code } <= 0;
    let synchronous = [libc::SIGSEGV, libc::SIGFPE, libc::SIGILL].contains(&sig) && !sent;
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    signal_chain::chain(previous, sig, info, context, synchronous);
}
