//! Activity buffers for CUPTI, allocated once and lent out again and again (ARGUS App. A,
//! "pre-allocated buffer reuse"): CUPTI's buffer-requested callback takes a free buffer
//! with one compare-and-swap per buffer it looks at, or gets none and the refusal is
//! counted (bounded resources: CUPTI then drops records and counts them itself); the
//! completed callback hands the filled buffer to the collector through a bounded ring; the
//! collector parses it and gives it back. Nothing allocates, locks or waits after init.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::core::record::ring::Ring;

/// A filled buffer on its way from CUPTI to the collector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filled {
    pub index: usize,
    pub valid: usize,
    pub stream: u32,
}

/// A buffer's life: free → lent (CUPTI fills it) → queued (the collector parses it) → free.
const FREE: u8 = 0;
const LENT: u8 = 1;
const QUEUED: u8 = 2;

pub struct BufferPool {
    /// `count` buffers of `buffer_bytes`, back to back; u64 cells keep each 8-byte aligned
    /// as CUPTI requires.
    memory: Box<[UnsafeCell<u64>]>,
    buffer_bytes: usize,
    /// Each buffer's state; every transition is one compare-and-swap, so a buffer is lent
    /// to one lender and queued once, whatever CUPTI hands back.
    state: Box<[AtomicU8]>,
    filled: Ring<Filled>,
    /// Buffer requests answered with no buffer because every one was lent or unparsed.
    refused: AtomicU64,
}

// SAFETY: the memory of buffer i is written only by CUPTI while it is lent (from winning
// state[i] FREE→LENT until its Filled entry is pushed) and read only by the collector after popping
// that entry (the ring's release/acquire orders the two) until `give_back(i)`.
unsafe impl Sync for BufferPool {}
// SAFETY: as above; the pool owns its memory.
unsafe impl Send for BufferPool {}

impl BufferPool {
    /// `buffer_bytes` is rounded up to a multiple of 8.
    pub fn new(count: usize, buffer_bytes: usize) -> BufferPool {
        let words = buffer_bytes.div_ceil(8);
        BufferPool {
            memory: (0..count * words).map(|_| UnsafeCell::new(0)).collect(),
            buffer_bytes: words * 8,
            state: (0..count).map(|_| AtomicU8::new(FREE)).collect(),
            filled: Ring::with_capacity(count.next_power_of_two().max(2)),
            refused: AtomicU64::new(0),
        }
    }

    pub fn buffer_bytes(&self) -> usize {
        self.buffer_bytes
    }

    pub fn count(&self) -> usize {
        self.state.len()
    }

    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    fn base(&self, index: usize) -> *mut u8 {
        self.memory[index * self.buffer_bytes / 8].get().cast()
    }

    /// A free buffer for CUPTI to fill, or `None` (counted) when every buffer is out.
    pub fn lend(&self) -> Option<*mut u8> {
        for (index, state) in self.state.iter().enumerate() {
            if state.load(Ordering::Relaxed) == FREE
                && state.compare_exchange(FREE, LENT, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                return Some(self.base(index));
            }
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Which buffer `pointer` is, if it is the start of one of ours.
    fn index_of(&self, pointer: *const u8) -> Option<usize> {
        let offset = (pointer as usize).checked_sub(self.base(0) as usize)?;
        let index = offset / self.buffer_bytes;
        (offset.is_multiple_of(self.buffer_bytes) && index < self.count()).then_some(index)
    }

    /// CUPTI finished with a buffer: queue it for the collector. Returns false for a
    /// pointer that is not one of ours (then nothing happens).
    pub fn hand_over(&self, pointer: *const u8, valid: usize, stream: u32) -> bool {
        let Some(index) = self.index_of(pointer) else { return false };
        // Only a lent buffer is queued: one handed back twice, or never lent, could be
        // parsed while it is lent and filled again.
        if self.state[index].compare_exchange(LENT, QUEUED, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return false;
        }
        let valid = valid.min(self.buffer_bytes);
        // The ring holds at least as many entries as there are buffers, so this never
        // fails; if it did, the buffer is at least not lost.
        if !self.filled.push(Filled { index, valid, stream }) {
            self.give_back(index);
        }
        true
    }

    /// The next buffer CUPTI completed, oldest first. Collector only.
    pub fn next_filled(&self) -> Option<Filled> {
        self.filled.pop()
    }

    /// Start of buffer `index`, for CUPTI's record walker.
    pub fn start(&self, index: usize) -> *mut u8 {
        self.base(index)
    }

    /// The valid bytes of a filled buffer.
    ///
    /// # Safety
    /// `filled` came from [`next_filled`](Self::next_filled) and has not been given back;
    /// the slice must be dropped before `give_back(filled.index)`.
    pub unsafe fn contents(&self, filled: &Filled) -> &[u8] {
        // SAFETY: the buffer lies inside `memory`, `valid` was capped to its size, and per
        // this function's contract nobody writes it while the slice lives.
        unsafe { std::slice::from_raw_parts(self.base(filled.index), filled.valid) }
    }

    /// The collector is done with buffer `index`: it may be lent again.
    pub fn give_back(&self, index: usize) {
        self.state[index].store(FREE, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn lends_each_buffer_once_refuses_when_empty_and_reuses_returned_ones() {
        let pool = BufferPool::new(3, 1000);
        assert_eq!(pool.buffer_bytes(), 1000);
        let lent: Vec<_> = (0..3).map(|_| pool.lend().unwrap()).collect();
        assert!(lent.iter().all(|p| (*p as usize).is_multiple_of(8)), "8-byte aligned");
        assert_eq!(lent[1] as usize - lent[0] as usize, 1000);
        assert_eq!((pool.lend(), pool.refused()), (None, 1));

        assert!(pool.hand_over(lent[1], 640, 7));
        assert!(!pool.hand_over(lent[1], 640, 7), "handed over twice");
        assert!(!pool.hand_over(lent[1].wrapping_add(8), 8, 0), "not the start of a buffer");
        let filled = pool.next_filled().unwrap();
        assert_eq!(filled, Filled { index: 1, valid: 640, stream: 7 });
        assert_eq!(pool.next_filled(), None);
        // SAFETY: popped above, given back below after the slice's last use.
        assert_eq!(unsafe { pool.contents(&filled) }.len(), 640);
        pool.give_back(filled.index);
        assert_eq!(pool.lend(), Some(lent[1]));
    }

    #[test]
    fn concurrent_lenders_never_share_a_buffer() {
        let pool = Arc::new(BufferPool::new(8, 64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    for _ in 0..1000 {
                        if let Some(p) = pool.lend() {
                            // SAFETY: a lent buffer belongs to this thread alone.
                            unsafe { p.cast::<u64>().write(p as u64) };
                            got.push(p as usize);
                            // SAFETY: as above.
                            assert_eq!(unsafe { p.cast::<u64>().read() }, p as u64, "another lender wrote here");
                            assert!(pool.hand_over(p, 8, 0));
                        }
                    }
                    got.len()
                })
            })
            .collect();
        let mut returned = 0;
        loop {
            let finished = threads.iter().all(|t| t.is_finished());
            while let Some(filled) = pool.next_filled() {
                pool.give_back(filled.index);
                returned += 1;
            }
            if finished {
                break;
            }
            std::thread::yield_now();
        }
        let lent: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(lent + pool.refused() as usize, 4000);
        assert_eq!(returned, lent);
    }
}
