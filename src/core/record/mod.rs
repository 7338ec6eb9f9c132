//! The bottom of core: the hot path's building blocks every family shares (the clock, the
//! lock-free ring, per-thread state, a lock-free once, door marks, the library's one stderr
//! line). Any layer of core may import it; it imports nothing of core but the leaf files.
//! Hot-path laws: no allocation, no blocking, no syscall beyond the clock, no panic across
//! FFI; a full ring drops and counts.

pub mod clock;
pub mod doors;
pub mod notice;
pub mod once;
pub mod ring;
pub mod signal_chain;
pub mod thread_state;
