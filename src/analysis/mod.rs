//! analysis: pure, safe, deterministic functions over what the logs hold (records in,
//! verdicts out). Imported by `report` and tests; imports only `core`'s record and log
//! types. Never does I/O, never reads a clock or the environment, never prints.

#![forbid(unsafe_code)]

pub mod blame;
pub mod comms;
pub mod frontier;
pub mod hang;
pub mod inferred;
pub mod kernels;
pub mod log;
pub mod net;
pub mod path;
pub mod roles;
pub mod slow;
