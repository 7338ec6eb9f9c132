//! What the hooks hand over while the runtime starts. One thread builds the runtime (the
//! log file, its mapping: milliseconds); the others, making their first calls at the same
//! moment, must neither wait for it nor lose their calls, and a communicator they create
//! meanwhile must get the job-wide id its peers give it. So they queue what they saw here:
//! a fixed array in static memory, claimed by one counter, no allocation, no lock. The
//! starting thread closes the queue and replays it into the new runtime, in claim order,
//! before any hook sees the runtime (`core::runtime::start`); claims past the capacity are
//! counted and the count joins the log's dropped events.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::core::comms::tracer::NewComm;
use crate::core::log::records::NcclCall;

/// Entries the queue holds. Static memory that is zero until used, so a process that
/// never races the start touches none of it.
pub const CAPACITY: usize = 4096;
/// Set in `CLAIMS` by the starting thread: the queue takes nothing more.
const CLOSED: usize = 1 << (usize::BITS - 1);

/// One thing a hook saw before the runtime was there.
pub enum Early {
    /// A finished call; its `comm_id` holds the communicator's handle, its `seq` is 0.
    Call(NcclCall),
    /// A status poll that found nothing (`tracer::count_poll`).
    Poll,
    /// A communicator the real library created, and how it relates to the job.
    Created {
        kind: NewComm,
        handle: u64,
        rank: i32,
        nranks: i32,
        t_ns: u64,
    },
    /// A communicator destroyed or aborted.
    Ended {
        handle: u64,
    },
    /// A rank or size the application was told (`tracer::observed_comm_shape`).
    Shape {
        handle: u64,
        rank: Option<i32>,
        nranks: Option<i32>,
    },
    Version(i32),
}

struct Slot {
    ready: AtomicBool,
    entry: UnsafeCell<MaybeUninit<Early>>,
}

struct Queue {
    claims: AtomicUsize,
    slots: [Slot; CAPACITY],
}

// SAFETY: a slot's entry is written only by the thread whose claim returned its index, then
// published by `ready` (release); the one reader (the starting thread, after closing) reads
// it only once `ready` is set (acquire), and only once.
unsafe impl Sync for Queue {}

static QUEUE: Queue = Queue {
    claims: AtomicUsize::new(0),
    slots: [const { Slot { ready: AtomicBool::new(false), entry: UnsafeCell::new(MaybeUninit::uninit()) } }; CAPACITY],
};

/// Claims the queue could not hold, known once it is closed.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// What became of an entry handed to `push`.
pub enum Pushed {
    /// Queued for the replay, or counted as dropped.
    Taken,
    /// The queue is closed: the runtime is there now (or will never be).
    Closed(Early),
}

/// Queues `entry` for the runtime being started.
pub fn push(entry: Early) -> Pushed {
    let claim = QUEUE.claims.fetch_add(1, Ordering::AcqRel);
    if claim & CLOSED != 0 {
        return Pushed::Closed(entry);
    }
    if let Some(slot) = QUEUE.slots.get(claim) {
        // SAFETY: this claim is the only one that returned `claim`, and the reader waits
        // for `ready` (see `Queue`).
        unsafe { (*slot.entry.get()).write(entry) };
        slot.ready.store(true, Ordering::Release);
    }
    Pushed::Taken
}

/// Closes the queue and hands every entry to `replay`, in claim order. Called once, by the
/// thread that started the runtime, before it publishes it. Waits for entries claimed but
/// still being written: a copy of a few words by a thread that holds nothing.
pub fn close(mut replay: impl FnMut(Early)) {
    let claims = QUEUE.claims.fetch_or(CLOSED, Ordering::AcqRel) & !CLOSED;
    DROPPED.store(claims.saturating_sub(CAPACITY) as u64, Ordering::Relaxed);
    for slot in &QUEUE.slots[..claims.min(CAPACITY)] {
        while !slot.ready.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        // SAFETY: `ready` says the claimer wrote a whole entry; this is its one read.
        replay(unsafe { (*slot.entry.get()).assume_init_read() });
    }
}

/// Entries the queue had no room for: each was a call or an event lost and counted.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}
