//! Per-thread state of the hot path: the reentrancy flag, the `ncclGroupStart` depth, the
//! cached thread id and the NCCL call the thread is in. Const-initialised and without
//! destructors, so reaching it never allocates and works until the thread's very end.

use std::cell::Cell;

/// The NCCL call a thread is inside (inside a group: the group's latest call, which
/// `ncclGroupEnd` launches with the rest): what a kernel launched on the thread belongs to.
/// Raw values, since this layer knows no NCCL vocabulary; `op` 0 is no call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NcclLink {
    pub comm_id: u64,
    pub seq: u64,
    pub op: u16,
}

impl NcclLink {
    pub const NONE: NcclLink = NcclLink { comm_id: 0, seq: 0, op: 0 };
}

struct ThreadState {
    in_hook: Cell<bool>,
    group_depth: Cell<u16>,
    tid: Cell<u32>,
    nccl_call: Cell<NcclLink>,
    /// CUDA API calls the CUDA door traces that the thread is inside: only the outermost
    /// counts (a runtime call may reach a traced driver call).
    cuda_depth: Cell<u8>,
}

thread_local! {
    static STATE: ThreadState = const {
        ThreadState {
            in_hook: Cell::new(false),
            group_depth: Cell::new(0),
            tid: Cell::new(0),
            nccl_call: Cell::new(NcclLink::NONE),
            cuda_depth: Cell::new(0),
        }
    };
}

/// The thread's id, read once per thread.
#[inline]
fn cached_tid(s: &ThreadState) -> u32 {
    if s.tid.get() == 0 {
        // The raw syscall, not glibc's gettid(): that wrapper came in glibc 2.30 and the
        // shipped library runs on glibc 2.28.
        // SAFETY: gettid has no arguments and no preconditions; once per thread.
        s.tid.set(unsafe { libc::syscall(libc::SYS_gettid) } as u32);
    }
    s.tid.get()
}

/// Held while a hook records. A call that arrives while one is held (NCCL calling its own
/// API through the PLT, or the library reaching NCCL from inside a hook) is forwarded
/// untouched, so nothing is counted twice and no hook ever recurses.
///
/// Entering also copies out what a record needs from the thread and keeps the address of
/// the thread's state, so a hook reaches thread-local storage once in all: in a shared
/// library each access is a call into the dynamic linker's TLS resolver.
pub struct ReentrancyGuard {
    pub tid: u32,
    pub group_depth: u16,
    /// This thread's state: const-initialised, without a destructor, so it lives as long
    /// as the thread; the raw pointer also keeps the guard on its thread (not Send).
    state: *const ThreadState,
}

impl ReentrancyGuard {
    #[inline]
    pub fn enter() -> Option<ReentrancyGuard> {
        STATE
            .try_with(|s| {
                if s.in_hook.replace(true) {
                    return None;
                }
                Some(ReentrancyGuard { tid: cached_tid(s), group_depth: s.group_depth.get(), state: s })
            })
            .ok()
            .flatten()
    }

    #[inline]
    fn state(&self) -> &ThreadState {
        // SAFETY: `state` is this thread's STATE (the guard never leaves its thread), which
        // lives until the thread ends, and is only reached through shared references.
        unsafe { &*self.state }
    }

    /// The thread is now inside this NCCL call: launches until the guard drops outside a
    /// group (or, inside one, until the group's `ncclGroupEnd` returns) belong to it.
    #[inline]
    pub fn enter_nccl_call(&self, link: NcclLink) {
        self.state().nccl_call.set(link);
    }
}

impl Drop for ReentrancyGuard {
    #[inline]
    fn drop(&mut self) {
        let s = self.state();
        s.in_hook.set(false);
        if s.group_depth.get() == 0 {
            s.nccl_call.set(NcclLink::NONE);
        }
    }
}

/// The NCCL call the calling thread is inside (`NcclLink::NONE` when none) and its id.
#[cfg(test)]
fn nccl_call_and_tid() -> (NcclLink, u32) {
    STATE.try_with(|s| (s.nccl_call.get(), cached_tid(s))).unwrap_or((NcclLink::NONE, 0))
}

/// The CUDA door's callback at the ENTER of a traced CUDA API call: the NCCL call the
/// thread is inside (`NcclLink::NONE` when none) and the thread's id, or `None` for a call
/// nested in another traced one. One thread-local access; works inside a hook (NCCL's
/// launches come from inside the hooked call).
#[inline]
pub fn cuda_api_enter() -> Option<(NcclLink, u32)> {
    STATE
        .try_with(|s| {
            let depth = s.cuda_depth.get();
            s.cuda_depth.set(depth.saturating_add(1));
            (depth == 0).then(|| (s.nccl_call.get(), cached_tid(s)))
        })
        .ok()
        .flatten()
}

/// At the EXIT of a traced CUDA API call: the thread's id when it was the outermost one.
#[inline]
pub fn cuda_api_exit() -> Option<u32> {
    STATE
        .try_with(|s| {
            let depth = s.cuda_depth.get().saturating_sub(1);
            s.cuda_depth.set(depth);
            (depth == 0).then(|| cached_tid(s))
        })
        .ok()
        .flatten()
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
    fn an_nccl_call_is_kept_through_its_group_and_no_longer() {
        let link = NcclLink { comm_id: 7, seq: 3, op: 16 };
        let call = ReentrancyGuard::enter().unwrap();
        call.enter_nccl_call(link);
        assert_eq!(nccl_call_and_tid().0, link, "seen from inside the call");
        drop(call);
        assert_eq!(nccl_call_and_tid().0, NcclLink::NONE, "a call outside a group ends with its return");

        adjust_group_depth(1);
        let grouped = ReentrancyGuard::enter().unwrap();
        grouped.enter_nccl_call(link);
        drop(grouped);
        assert_eq!(nccl_call_and_tid().0, link, "kept for the group's end, which launches");
        let group_end = ReentrancyGuard::enter().unwrap();
        adjust_group_depth(-1);
        drop(group_end);
        assert_eq!(nccl_call_and_tid().0, NcclLink::NONE, "gone once the group ended");
        assert_ne!(nccl_call_and_tid().1, 0);
    }

    #[test]
    fn only_the_outermost_cuda_call_is_traced() {
        let (_, tid) = cuda_api_enter().expect("outermost");
        assert!(cuda_api_enter().is_none(), "a driver call inside the runtime's");
        assert_eq!(cuda_api_exit(), None);
        assert_eq!(cuda_api_exit(), Some(tid));
        assert_eq!(cuda_api_exit(), Some(tid), "an EXIT without its ENTER never underflows");
        assert!(cuda_api_enter().is_some());
        cuda_api_exit();
    }

    #[test]
    fn tid_is_per_thread() {
        let tid = || ReentrancyGuard::enter().unwrap().tid;
        let here = tid();
        let there = std::thread::spawn(tid).join().unwrap();
        assert!(here != 0 && there != 0 && here != there);
    }
}
