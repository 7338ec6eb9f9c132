//! core: everything between a door and the log, in layers that only import downwards
//! (tests/layering.rs enforces it). Safe Rust except where a module maps shared memory,
//! each such block with its SAFETY note. May be imported by doors, analysis, report and
//! `sf`; must never import any of them.
//!
//! From the bottom up:
//! - [`fnv`], [`rng`], [`quantile`], [`regular_file`]: leaf files; hashing, seeded draws
//!   and quantiles that every layer and `analysis` share, and files a setting names,
//!   opened without blocking.
//! - [`record`]: the hot path's building blocks (clock, ring, per-thread state, the one
//!   stderr line, door marks).
//! - [`log`]: the per-rank log format, its record vocabulary, writer and reader.
//! - [`inject`]: scripted NCCL faults (`SF_INJECT`).
//! - [`live`]: the running recording every hook shares (`Runtime`, its state machine) and
//!   the events its ring carries.
//! - [`comms`], [`steps`], [`kernels`], [`net`], [`stacks`]: one folder per evidence family;
//!   steps may use comms and kernels, no family uses steps.
//! - [`runtime`]: the top; starts, drives (collector) and stops the families, with the
//!   config, the rank identity and where the log goes.

pub mod comms;
pub mod fnv;
pub mod inject;
pub mod kernels;
pub mod live;
pub mod log;
pub mod net;
pub mod quantile;
pub mod record;
pub mod regular_file;
pub mod rng;
pub mod runtime;
pub mod stacks;
pub mod steps;
