//! Per-thread state of the hot path: the reentrancy flag, the `ncclGroupStart` depth and
//! the cached thread id. Const-initialised and without destructors, so reaching it never
//! allocates and works until the thread's very end.

use std::cell::Cell;

struct ThreadState {
    in_hook: Cell<bool>,
    group_depth: Cell<u16>,
    tid: Cell<u32>,
}

thread_local! {
    static STATE: ThreadState = const {
        ThreadState { in_hook: Cell::new(false), group_depth: Cell::new(0), tid: Cell::new(0) }
    };
}

/// Held while a hook records. A call that arrives while one is held (NCCL calling its own
/// API through the PLT, or the library reaching NCCL from inside a hook) is forwarded
/// untouched, so nothing is counted twice and no hook ever recurses.
///
/// Entering also copies out what a record needs from the thread, so a hook reaches
/// thread-local storage twice in all (enter and drop): in a shared library each access is
/// a call into the dynamic linker's TLS resolver.
pub struct ReentrancyGuard {
    pub tid: u32,
    pub group_depth: u16,
}

impl ReentrancyGuard {
    #[inline]
    pub fn enter() -> Option<ReentrancyGuard> {
        STATE
            .try_with(|s| {
                if s.in_hook.replace(true) {
                    return None;
                }
                if s.tid.get() == 0 {
                    // The raw syscall, not glibc's gettid(): that wrapper came in glibc
                    // 2.30 and the shipped library runs on glibc 2.28.
                    // SAFETY: gettid has no arguments and no preconditions; once per thread.
                    s.tid.set(unsafe { libc::syscall(libc::SYS_gettid) } as u32);
                }
                Some(ReentrancyGuard { tid: s.tid.get(), group_depth: s.group_depth.get() })
            })
            .ok()
            .flatten()
    }
}

impl Drop for ReentrancyGuard {
    #[inline]
    fn drop(&mut self) {
        let _ = STATE.try_with(|s| s.in_hook.set(false));
    }
}

/// Follows `ncclGroupStart` (+1) and `ncclGroupEnd` (-1) calls that succeeded.
pub fn adjust_group_depth(delta: i32) {
    let _ =
        STATE.try_with(|s| s.group_depth.set((s.group_depth.get() as i32 + delta).clamp(0, u16::MAX as i32) as u16));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_refuses_reentry_until_dropped() {
        let outer = ReentrancyGuard::enter().expect("first entry");
        assert!(ReentrancyGuard::enter().is_none());
        drop(outer);
        assert!(ReentrancyGuard::enter().is_some());
    }

    fn depth() -> u16 {
        ReentrancyGuard::enter().unwrap().group_depth
    }

    #[test]
    fn group_depth_never_underflows() {
        adjust_group_depth(-1);
        assert_eq!(depth(), 0);
        adjust_group_depth(1);
        adjust_group_depth(1);
        assert_eq!(depth(), 2);
        adjust_group_depth(-2);
        assert_eq!(depth(), 0);
    }

    #[test]
    fn tid_is_per_thread() {
        let tid = || ReentrancyGuard::enter().unwrap().tid;
        let here = tid();
        let there = std::thread::spawn(tid).join().unwrap();
        assert!(here != 0 && there != 0 && here != there);
    }
}
