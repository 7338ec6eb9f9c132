//! core: everything between a door and the log, grouped by evidence family. Safe Rust
//! except where a module maps shared memory, each such block with its SAFETY note.
//!
//! - [`capture`]: the hot path (event, ring, tracer) and the runtime around it.
//! - [`log`]: the per-rank log format, its writer and its truncation-tolerant reader.
//! - [`comms`], [`steps`], [`kernels`], [`net`]: one folder per evidence family.
//! - [`fnv`], [`rng`], [`quantile`]: hashing, seeded draws and quantiles every family
//!   and `analysis` share.

pub mod capture;
pub mod comms;
pub mod fnv;
pub mod kernels;
pub mod log;
pub mod net;
pub mod quantile;
pub mod rng;
pub mod steps;
