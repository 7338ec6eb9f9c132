//! A value set once without a lock: what the first intercepted call initialises must not
//! be a `OnceLock` or a `Mutex`, because a `fork` from another thread while one thread is
//! inside the initialiser would leave the child's copy locked forever, and its first call
//! would hang. Here racing threads each build a value, one wins, the others drop theirs;
//! nobody ever waits. Values are leaked: these live as long as the process.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, Ordering};

pub struct LeakedOnce<T> {
    ptr: AtomicPtr<T>,
    /// Shared across threads like a `Box<T>`: Sync and Send only when T is.
    _owns: PhantomData<Box<T>>,
}

impl<T> LeakedOnce<T> {
    pub const fn new() -> LeakedOnce<T> {
        LeakedOnce { ptr: AtomicPtr::new(std::ptr::null_mut()), _owns: PhantomData }
    }

    pub fn get(&self) -> Option<&T> {
        let ptr = self.ptr.load(Ordering::Acquire);
        // SAFETY: a non-null pointer came from Box::into_raw below and is never freed.
        (!ptr.is_null()).then(|| unsafe { &*ptr })
    }

    /// The value, built by `init` if none is set yet; a thread that loses the race to set
    /// it drops its own and returns the winner's.
    pub fn get_or_init(&self, init: impl FnOnce() -> T) -> &T {
        if let Some(value) = self.get() {
            return value;
        }
        let mine = Box::into_raw(Box::new(init()));
        match self.ptr.compare_exchange(std::ptr::null_mut(), mine, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: just stored our own leaked Box, never freed.
            Ok(_) => unsafe { &*mine },
            Err(winner) => {
                // SAFETY: `mine` was never shared; reclaiming it is the only use.
                drop(unsafe { Box::from_raw(mine) });
                // SAFETY: the winner's pointer came from Box::into_raw and is never freed.
                unsafe { &*winner }
            }
        }
    }
}

impl<T> Default for LeakedOnce<T> {
    fn default() -> LeakedOnce<T> {
        LeakedOnce::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn racing_threads_agree_on_one_value() {
        static ONCE: LeakedOnce<u64> = LeakedOnce::new();
        assert!(ONCE.get().is_none());
        let seen: Vec<u64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8).map(|i| s.spawn(move || *ONCE.get_or_init(|| i))).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(seen.iter().all(|v| *v == seen[0]), "{seen:?}");
        assert_eq!(ONCE.get(), Some(&seen[0]));
    }
}
