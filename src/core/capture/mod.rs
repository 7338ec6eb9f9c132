//! The hot path and its runtime: events, the lock-free ring, the tracer and per-thread
//! state, the clock, the collector thread, identity and configuration.
//! Hot-path laws: no allocation, no blocking, no syscall beyond the clock, no panic across
//! FFI; a full ring drops and counts. Everything slow happens in the collector.

pub mod clock;
pub mod collector;
pub mod config;
pub mod doors;
pub mod event;
pub mod host;
pub mod identity;
pub mod notice;
pub mod once;
pub mod process_stamp;
pub mod ring;
pub mod runtime;
pub mod thread_state;
pub mod tracer;
