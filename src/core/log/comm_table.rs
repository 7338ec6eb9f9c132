//! Live per-communicator state, kept inside the rank log's mapping so that an outside
//! reader sees which collective each rank is in even while the whole process is wedged.
//!
//! Hooks find a communicator's slot by its `ncclComm_t` value with open addressing; slots
//! are claimed with a CAS, so registration never takes a lock and never allocates. A
//! destroyed communicator leaves a tombstone that a later registration may reuse.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::core::log::format::{comm, COMM_SLOTS, COMM_SLOT_SIZE, HEADER_SIZE};
use crate::core::log::mapping::SharedMap;

/// The layout of `format::comm`, as atomics.
#[repr(C)]
pub struct CommSlot {
    key: AtomicU64,
    pub comm_id: AtomicU64,
    rank_nranks: AtomicU64,
    pub coll_entered: AtomicU64,
    pub coll_returned: AtomicU64,
    pub p2p_entered: AtomicU64,
    pub p2p_returned: AtomicU64,
    pub inflight_ticks: AtomicU64,
    pub inflight_op: AtomicU64,
    pub splits: AtomicU64,
    _reserved: [AtomicU64; 6],
}

const _: () = {
    assert!(std::mem::size_of::<CommSlot>() == COMM_SLOT_SIZE);
    assert!(std::mem::offset_of!(CommSlot, key) == comm::KEY);
    assert!(std::mem::offset_of!(CommSlot, comm_id) == comm::COMM_ID);
    assert!(std::mem::offset_of!(CommSlot, rank_nranks) == comm::RANK_NRANKS);
    assert!(std::mem::offset_of!(CommSlot, coll_entered) == comm::COLL_ENTERED);
    assert!(std::mem::offset_of!(CommSlot, coll_returned) == comm::COLL_RETURNED);
    assert!(std::mem::offset_of!(CommSlot, p2p_entered) == comm::P2P_ENTERED);
    assert!(std::mem::offset_of!(CommSlot, p2p_returned) == comm::P2P_RETURNED);
    assert!(std::mem::offset_of!(CommSlot, inflight_ticks) == comm::INFLIGHT_TICKS);
    assert!(std::mem::offset_of!(CommSlot, inflight_op) == comm::INFLIGHT_OP);
    assert!(std::mem::offset_of!(CommSlot, splits) == comm::SPLITS);
};

impl CommSlot {
    pub fn set_rank(&self, rank: i32, nranks: i32) {
        self.rank_nranks.store(((rank as u32 as u64) << 32) | nranks as u32 as u64, Ordering::Relaxed);
    }

    pub fn rank(&self) -> (i32, i32) {
        let v = self.rank_nranks.load(Ordering::Relaxed);
        ((v >> 32) as u32 as i32, v as u32 as i32)
    }
}

#[derive(Clone, Copy)]
pub struct CommTable {
    slots: &'static [CommSlot],
}

/// What `register` found.
pub enum Registration {
    New(&'static CommSlot),
    Existing(&'static CommSlot),
    Full,
}

impl CommTable {
    pub fn in_map(map: &'static SharedMap) -> CommTable {
        let len = COMM_SLOTS * COMM_SLOT_SIZE;
        let base = map.ptr(HEADER_SIZE, len);
        // SAFETY: the table range is in bounds of a mapping that is never unmapped, page
        // aligned, zero-initialised by the file's creation, and only ever accessed through
        // these atomics; CommSlot is repr(C) of AtomicU64 with the size asserted above.
        let slots = unsafe { std::slice::from_raw_parts(base.cast::<CommSlot>(), COMM_SLOTS) };
        CommTable { slots }
    }

    fn home(handle: u64) -> usize {
        // Fibonacci hashing of the pointer; its low bits are alignment zeros.
        ((handle >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % COMM_SLOTS
    }

    #[inline]
    pub fn find(&self, handle: u64) -> Option<&'static CommSlot> {
        let home = Self::home(handle);
        for i in 0..COMM_SLOTS {
            let slot = &self.slots[(home + i) % COMM_SLOTS];
            match slot.key.load(Ordering::Acquire) {
                k if k == handle => return Some(slot),
                comm::EMPTY => return None,
                _ => {}
            }
        }
        None
    }

    /// Claims a slot for `handle`, resetting its counters. Handles that collide with the
    /// table's marker values (null, tombstone, claiming) are never registered.
    pub fn register(&self, handle: u64, comm_id: u64) -> Registration {
        if handle <= comm::CLAIMING {
            return Registration::Full;
        }
        if let Some(slot) = self.find(handle) {
            return Registration::Existing(slot);
        }
        let home = Self::home(handle);
        for i in 0..COMM_SLOTS {
            let slot = &self.slots[(home + i) % COMM_SLOTS];
            let key = slot.key.load(Ordering::Relaxed);
            if key != comm::EMPTY && key != comm::TOMBSTONE {
                continue;
            }
            // Claim before initialising, so two registrations never write one slot.
            if slot.key.compare_exchange(key, comm::CLAIMING, Ordering::Acquire, Ordering::Relaxed).is_err() {
                continue;
            }
            for counter in [&slot.coll_entered, &slot.coll_returned, &slot.p2p_entered, &slot.p2p_returned] {
                counter.store(0, Ordering::Relaxed);
            }
            slot.inflight_ticks.store(0, Ordering::Relaxed);
            slot.splits.store(0, Ordering::Relaxed);
            slot.comm_id.store(comm_id, Ordering::Relaxed);
            slot.set_rank(-1, -1);
            slot.key.store(handle, Ordering::Release);
            return Registration::New(slot);
        }
        Registration::Full
    }

    /// Registered slots with their index, for the collector's watchdog.
    pub fn live(&self) -> impl Iterator<Item = (usize, &'static CommSlot)> {
        self.slots.iter().enumerate().filter(|(_, slot)| slot.key.load(Ordering::Acquire) > comm::CLAIMING)
    }

    pub fn unregister(&self, handle: u64) {
        if let Some(slot) = self.find(handle) {
            slot.key.store(comm::TOMBSTONE, Ordering::Release);
        }
    }
}
