//! The per-rank log: a fixed-size, crash-consistent, memory-mapped file.

pub mod copy;
pub mod format;
pub mod mapping;
pub mod place;
pub(crate) mod pread;
pub mod private_dir;
pub mod reader;
pub mod records;
pub mod records_cupti;
pub mod records_kernels;
pub mod records_net;
pub mod records_ports;
pub mod records_profiler;
pub mod synth;
pub mod tail;
pub mod writer;

#[cfg(test)]
mod records_tests;
#[cfg(test)]
mod roundtrip_tests;
