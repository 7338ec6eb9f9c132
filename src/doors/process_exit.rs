//! `_exit` and `_Exit` (Python's `os._exit`, a forked worker's exit, a C program's fast
//! exit): no exit handler runs there, so the preload door stores the status
//! (`runtime::process_end`) and calls the real function. Found at load with
//! `dlsym(RTLD_NEXT)`, never at exit (the loader's lock may be held by a thread that will
//! never run again); if it was not found, the process ends with the `exit_group` system
//! call, which is what the real one does.

// The exported names are libc's.
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::core::log::records::EndHow;
use crate::core::runtime::process_end;
use crate::doors::traced::shielded;

static REAL_EXIT: AtomicUsize = AtomicUsize::new(0);

/// # Safety
/// Called as libc's `_exit`: never returns.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    shielded(|| process_end::record(EndHow::Exit, status));
    end(status)
}

/// # Safety
/// Called as libc's `_Exit`: never returns.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    shielded(|| process_end::record(EndHow::Exit, status));
    end(status)
}

fn end(status: c_int) -> ! {
    let real = REAL_EXIT.load(Ordering::Acquire);
    if real != 0 {
        // SAFETY: only `resolve` stores here, libc's `_exit`.
        let real = unsafe { std::mem::transmute::<usize, extern "C" fn(c_int) -> !>(real) };
        real(status)
    }
    loop {
        // SAFETY: exit_group ends every thread of the process; it does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, status as libc::c_long) };
    }
}

extern "C" fn resolve() {
    // SAFETY: dlsym with a NUL-terminated name, at load, before any thread of ours runs.
    let real: *mut c_void = unsafe { libc::dlsym(libc::RTLD_NEXT, c"_exit".as_ptr()) };
    if !real.is_null() && !std::ptr::eq(real, _exit as *const c_void) {
        REAL_EXIT.store(real as usize, Ordering::Release);
    }
}

#[used]
#[link_section = ".init_array"]
static RESOLVE: extern "C" fn() = resolve;
