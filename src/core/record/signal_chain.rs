//! How the library's signal handlers sit in front of the application's: installed with the
//! previous action's mask and flags, and every signal then handed on as the previous
//! action would have taken it (`chain`). Everything here is async-signal-safe: `sigaction`
//! and `raise`, nothing else.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

pub type Handler = extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void);

/// Installs `handler` for `sig`, keeping the action it replaces in `previous`. A handler
/// the application installed before would have run with its own mask, stack and flags;
/// ours runs with the same, so calling it from ours changes none of them (system calls
/// restart or are interrupted as they were). Without one, nothing was interrupted: system
/// calls restart. An ignored signal is left ignored when `keep_ignored`. Returns whether
/// it installed.
pub fn install(sig: c_int, handler: Handler, previous: &OnceLock<libc::sigaction>, keep_ignored: bool) -> bool {
    // SAFETY: an all-zero sigaction is a valid value for sigaction(2) to overwrite.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: reads the current action through a valid pointer; changes nothing.
    if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
        return false;
    }
    if keep_ignored && old.sa_sigaction == libc::SIG_IGN {
        return false;
    }
    let old = previous.get_or_init(|| old);
    // SAFETY: as above.
    let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
    ours.sa_sigaction = handler as *const () as usize;
    ours.sa_mask = old.sa_mask;
    let inherited = libc::SA_NODEFER | libc::SA_RESTART | libc::SA_ONSTACK;
    ours.sa_flags =
        libc::SA_SIGINFO | if handled(old) { old.sa_flags & inherited } else { libc::SA_RESTART | libc::SA_ONSTACK };
    // SAFETY: installs a handler whose caller promises it is async-signal-safe.
    unsafe { libc::sigaction(sig, &ours, std::ptr::null_mut()) == 0 }
}

/// Whether the action is the application's own handler (not the default, not ignored).
pub fn handled(action: &libc::sigaction) -> bool {
    ![libc::SIG_DFL, libc::SIG_IGN].contains(&action.sa_sigaction)
}

/// What the previous action would have done with this signal. `synchronous`: raised by
/// the kernel at the faulting instruction, which re-executes when the handler returns.
pub fn chain(
    previous: Option<&libc::sigaction>,
    sig: c_int,
    info: *mut libc::siginfo_t,
    context: *mut c_void,
    synchronous: bool,
) {
    let Some(previous) = previous else { return die_by_default(sig, synchronous) };
    match previous.sa_sigaction {
        libc::SIG_DFL => die_by_default(sig, synchronous),
        // The kernel forces a fault through an ignored signal (it resets the default); a
        // sent one is dropped.
        libc::SIG_IGN if synchronous => die_by_default(sig, synchronous),
        libc::SIG_IGN => {}
        handler => {
            if previous.sa_flags & libc::SA_RESETHAND != 0 {
                set_default(sig);
            }
            if previous.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the application installed this as an SA_SIGINFO handler; it gets
                // the arguments the kernel gave us.
                let handler = unsafe {
                    std::mem::transmute::<usize, extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void)>(handler)
                };
                handler(sig, info, context);
            } else {
                // SAFETY: the application installed this as a plain handler.
                let handler = unsafe { std::mem::transmute::<usize, extern "C" fn(c_int)>(handler) };
                handler(sig);
            }
        }
    }
}

/// The default action, as if no handler had been installed: a fault re-executes on
/// return and kills the process; a sent signal is raised again and does on return.
pub fn die_by_default(sig: c_int, synchronous: bool) {
    set_default(sig);
    if !synchronous {
        // SAFETY: raise is async-signal-safe; the signal stays blocked until we return.
        unsafe { libc::raise(sig) };
    }
}

fn set_default(sig: c_int) {
    // SAFETY: an all-zero sigaction with SIG_DFL (0) is the default action.
    let default: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: sigaction is async-signal-safe; restores the default action.
    unsafe { libc::sigaction(sig, &default, std::ptr::null_mut()) };
}
