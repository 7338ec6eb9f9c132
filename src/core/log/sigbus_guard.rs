//! Keeps the host process alive when its rank log shrinks under it.
//!
//! The log is a `MAP_SHARED` mapping of a file, and a store into a page past the file's
//! end raises SIGBUS, whose default action kills the process. Anyone who can write the
//! file (the job's user, a careless `truncate`, `sf snapshot` pointed at the wrong place)
//! could kill a rank that way, and not only the collector stores into the mapping:
//! application threads do too (step and stage markers, stage names, the tracer, the
//! communicator table). So the process keeps a SIGBUS handler that:
//!
//! - absorbs a fault the kernel raised at an address inside a guarded mapping: anonymous
//!   memory is mapped over the whole log with `MAP_FIXED` (the faulting store is retried
//!   on return and lands there), recording is turned off (`on_lost`, atomic stores
//!   only), and one line is written to stderr with `write(2)`;
//! - hands every other SIGBUS to the action that was installed before it, as the kernel
//!   would have: the default action is restored and the fault re-executes (or a sent
//!   signal is raised again) so the process dies of SIGBUS as it would have; an ignored
//!   signal stays ignored (a fault still kills, as the kernel forces it); a handler is
//!   called with the same arguments (`SA_SIGINFO`) or the signal number.
//!
//! Everything the handler does is async-signal-safe: atomic loads and stores, `mmap`,
//! `sigaction`, `raise`, `sched_yield` and `write` (the line is formatted when the mapping
//! is registered).
//!
//! The handler is installed when the first log is mapped, which in a training job is late
//! (the first NCCL call): handlers the application installed before (Python's
//! `faulthandler`, a runtime's own) are chained to. An application that installs its own
//! SIGBUS handler afterwards replaces this one, as `sigaction` does for everyone: its
//! handler then sees every SIGBUS first, and a truncated log is absorbed only if that
//! handler chains to the action it replaced by calling it with the signal's `siginfo`;
//! the library never intercepts `sigaction` or `signal` to keep its place.

use std::ffi::{c_int, c_void};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};

use crate::core::record::signal_chain;

/// Mappings one process may guard; a process maps one log, the library's unit tests a few
/// dozen. One past the last is left unguarded.
const SLOTS: usize = 64;

/// Faults at a mapping already replaced that are still let through (a store that faulted
/// on the file while another thread was replacing it retries and succeeds); beyond that
/// the fault is not ours (someone mapped over the log) and goes to the previous action,
/// so a fault that cannot be cured cannot spin for ever.
const LATE_FAULTS: usize = 1 << 16;

const FILE: u8 = 0;
const REPLACING: u8 = 1;
const REPLACED: u8 = 2;

struct Guarded {
    claimed: AtomicBool,
    /// Start address, published last (nonzero once the rest is set).
    base: AtomicUsize,
    len: AtomicUsize,
    state: AtomicU8,
    late_faults: AtomicUsize,
    /// The stderr line (a leaked `Box<[u8]>`).
    line: AtomicUsize,
    line_len: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)] // each array element gets its own copy
const UNUSED: Guarded = Guarded {
    claimed: AtomicBool::new(false),
    base: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    state: AtomicU8::new(FILE),
    late_faults: AtomicUsize::new(0),
    line: AtomicUsize::new(0),
    line_len: AtomicUsize::new(0),
};

static GUARDED: [Guarded; SLOTS] = [UNUSED; SLOTS];
static INSTALL: Once = Once::new();
/// The SIGBUS action this handler replaced.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
/// What turns recording off (`extern "C" fn()`, set by the runtime), or 0.
static ON_LOST: AtomicUsize = AtomicUsize::new(0);

/// Sets what the handler calls once it replaced a lost log: it runs inside a signal
/// handler, so it may only do async-signal-safe things (atomic stores).
pub fn on_lost(switch_off: extern "C" fn()) {
    ON_LOST.store(switch_off as usize, Ordering::Release);
}

/// Guards `len` bytes of the shared mapping at `base`, the log at `path`, for the rest of
/// the process (the mapping is never unmapped). Installs the handler on first use.
pub fn guard(base: *mut u8, len: usize, path: &Path) {
    install();
    let Some(slot) = GUARDED.iter().find(|g| !g.claimed.swap(true, Ordering::AcqRel)) else { return };
    let line = format!(
        "stagefrontier: {} was truncated by another process while this rank wrote it; recording stopped, the job continues unaffected\n",
        path.display()
    );
    let line: &'static [u8] = Box::leak(line.into_bytes().into_boxed_slice());
    slot.line.store(line.as_ptr() as usize, Ordering::Relaxed);
    slot.line_len.store(line.len(), Ordering::Relaxed);
    slot.len.store(len, Ordering::Relaxed);
    slot.base.store(base as usize, Ordering::Release);
}

fn install() {
    INSTALL.call_once(|| {
        // A fault through an ignored SIGBUS still kills: the handler goes in regardless.
        signal_chain::install(libc::SIGBUS, on_sigbus, &PREVIOUS, false);
    });
}

/// A fault the kernel raised at the faulting instruction, which re-executes when the
/// handler returns (as opposed to a signal sent with `kill`, or a deferred memory error).
fn is_synchronous_fault(code: c_int) -> bool {
    matches!(code, libc::BUS_ADRALN | libc::BUS_ADRERR | libc::BUS_OBJERR | libc::BUS_MCEERR_AR)
}

extern "C" fn on_sigbus(sig: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel hands an SA_SIGINFO handler a valid siginfo; si_addr is the
    // fault address of a SIGBUS (meaningless, but readable, for a sent one).
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    if is_synchronous_fault(code) {
        let hit = GUARDED.iter().find(|g| {
            let base = g.base.load(Ordering::Acquire);
            base != 0 && addr >= base && addr - base < g.len.load(Ordering::Relaxed)
        });
        if hit.is_some_and(absorb) {
            return;
        }
    }
    signal_chain::chain(PREVIOUS.get(), sig, info, context, is_synchronous_fault(code));
}

/// Replaces the lost log with anonymous memory; false when that failed (the fault then
/// goes on to the previous action).
fn absorb(g: &Guarded) -> bool {
    match g.state.compare_exchange(FILE, REPLACING, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            let (base, len) = (g.base.load(Ordering::Relaxed), g.len.load(Ordering::Relaxed));
            // SAFETY: maps fresh anonymous memory exactly over our own mapping, which no
            // one else owns; the stores in flight land in it instead of the file.
            let mapped = unsafe {
                libc::mmap(
                    base as *mut c_void,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if mapped == libc::MAP_FAILED {
                g.state.store(FILE, Ordering::Release);
                return false;
            }
            g.state.store(REPLACED, Ordering::Release);
            let switch_off = ON_LOST.load(Ordering::Acquire);
            if switch_off != 0 {
                // SAFETY: only `on_lost` stores here, an `extern "C" fn()`.
                unsafe { std::mem::transmute::<usize, extern "C" fn()>(switch_off)() };
            }
            let (line, line_len) = (g.line.load(Ordering::Relaxed), g.line_len.load(Ordering::Relaxed));
            // SAFETY: the leaked line set before `base` was published; a failed write
            // loses the line and nothing else.
            unsafe { libc::write(2, line as *const c_void, line_len) };
            true
        }
        Err(_) => {
            // Another thread is replacing it, or has: the faulting store retries on the
            // anonymous memory.
            while g.state.load(Ordering::Acquire) == REPLACING {
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
            g.state.load(Ordering::Acquire) == REPLACED && g.late_faults.fetch_add(1, Ordering::Relaxed) < LATE_FAULTS
        }
    }
}
