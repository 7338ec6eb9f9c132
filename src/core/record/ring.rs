//! The hot path's bounded ring: many producers (application threads inside hooks), one
//! consumer (the collector). Slots are allocated once; a push is one CAS on the tail, a
//! copy of the event, and one release store that commits the slot. A full ring refuses
//! the push, and the caller counts the drop; nothing ever waits.
//!
//! This is Dmitry Vyukov's bounded queue: each slot carries a stamp that says whose turn
//! it is, so producers never read a slot the consumer has not released.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};

#[repr(C, align(64))]
struct Slot<T> {
    /// `pos` when free for the producer claiming position `pos`, `pos + 1` once that
    /// producer committed, `pos + capacity` once the consumer released it.
    stamp: AtomicU64,
    value: UnsafeCell<MaybeUninit<T>>,
}

#[repr(align(64))]
struct Padded(AtomicU64);

pub struct Ring<T: Copy> {
    slots: Box<[Slot<T>]>,
    mask: u64,
    tail: Padded,
    head: Padded,
    dropped: Padded,
}

// SAFETY: slots are handed between threads only through the stamp protocol below, which
// gives each slot to exactly one writer or the one reader at a time; T is Copy plain data.
unsafe impl<T: Copy + Send> Sync for Ring<T> {}
// SAFETY: as above; the ring owns its slots.
unsafe impl<T: Copy + Send> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// Memory per slot: the stamp and the value, padded to whole cache lines so that
    /// producers writing neighbouring slots never share a line. All of it is touched when
    /// the ring is built (each slot's stamp), so a ring is resident for its whole
    /// `capacity × SLOT_BYTES` from the start.
    pub const SLOT_BYTES: usize = std::mem::size_of::<Slot<T>>();

    /// `capacity` must be a power of two (the config guarantees it).
    pub fn with_capacity(capacity: usize) -> Ring<T> {
        assert!(capacity.is_power_of_two() && capacity >= 2, "ring capacity {capacity}");
        let slots = (0..capacity as u64)
            .map(|pos| Slot { stamp: AtomicU64::new(pos), value: UnsafeCell::new(MaybeUninit::uninit()) })
            .collect();
        Ring {
            slots,
            mask: capacity as u64 - 1,
            tail: Padded(AtomicU64::new(0)),
            head: Padded(AtomicU64::new(0)),
            dropped: Padded(AtomicU64::new(0)),
        }
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Cumulative pushes refused because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.0.load(Ordering::Relaxed)
    }

    /// Never blocks, never allocates. Returns false, and counts a drop, when full.
    #[inline]
    pub fn push(&self, value: T) -> bool {
        let mut pos = self.tail.0.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[(pos & self.mask) as usize];
            let stamp = slot.stamp.load(Ordering::Acquire);
            match stamp.wrapping_sub(pos) as i64 {
                0 => match self.tail.0.compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => {
                        // SAFETY: winning the CAS for `pos` while the stamp equals `pos`
                        // makes this thread the slot's only writer until it publishes.
                        unsafe { (*slot.value.get()).write(value) };
                        slot.stamp.store(pos + 1, Ordering::Release);
                        return true;
                    }
                    Err(current) => pos = current,
                },
                d if d < 0 => {
                    self.dropped.0.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
                _ => pos = self.tail.0.load(Ordering::Relaxed),
            }
        }
    }

    /// Single consumer only: the collector.
    pub fn pop(&self) -> Option<T> {
        let pos = self.head.0.load(Ordering::Relaxed);
        let slot = &self.slots[(pos & self.mask) as usize];
        if slot.stamp.load(Ordering::Acquire) != pos + 1 {
            return None;
        }
        // SAFETY: stamp == pos + 1 means the producer of `pos` published a whole value
        // (release/acquire on the stamp) and no producer may touch the slot until we
        // release it below.
        let value = unsafe { (*slot.value.get()).assume_init() };
        slot.stamp.store(pos + self.slots.len() as u64, Ordering::Release);
        self.head.0.store(pos + 1, Ordering::Relaxed);
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn fifo_and_full_drops() {
        let ring = Ring::<u64>::with_capacity(4);
        for v in 0..4 {
            assert!(ring.push(v));
        }
        assert!(!ring.push(99));
        assert_eq!(ring.dropped(), 1);
        assert_eq!(ring.pop(), Some(0));
        assert!(ring.push(4));
        assert_eq!((1..5).map(|_| ring.pop().unwrap()).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        assert_eq!(ring.pop(), None);
    }

    #[test]
    fn concurrent_producers_lose_nothing_they_did_not_count() {
        let ring = Arc::new(Ring::<[u64; 4]>::with_capacity(64));
        let producers: Vec<_> = (0..4u64)
            .map(|t| {
                let ring = ring.clone();
                std::thread::spawn(move || (0..50_000u64).filter(|i| ring.push([t, *i, t ^ *i, !t])).count() as u64)
            })
            .collect();
        let mut received = 0u64;
        let mut last_per_thread = [None::<u64>; 4];
        loop {
            let finished = producers.iter().all(|p| p.is_finished());
            while let Some([t, i, x, n]) = ring.pop() {
                assert_eq!((x, n), (t ^ i, !t), "torn event");
                let last = &mut last_per_thread[t as usize];
                assert!(last.is_none_or(|l| l < i), "per-producer order");
                *last = Some(i);
                received += 1;
            }
            if finished {
                break;
            }
            std::thread::yield_now();
        }
        let pushed: u64 = producers.into_iter().map(|p| p.join().unwrap()).sum();
        assert_eq!(received, pushed);
        assert_eq!(pushed + ring.dropped(), 4 * 50_000);
    }
}
