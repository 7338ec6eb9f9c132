//! The per-rank log: a fixed-size, crash-consistent, memory-mapped file; its format, its
//! record vocabulary (calls, communicators, stage names, identity, host, process stamp),
//! its writer and its truncation-tolerant reader. Imports only record and the leaf files;
//! every layer above, analysis and `sf` may import it. Never imports a family, the
//! runtime or its config: what a record means is said here, not where it came from.

pub mod comm_table;
pub mod copy;
pub mod format;
pub mod host;
pub mod identity;
pub mod kernel_ch;
pub mod mapping;
pub mod nccl_op;
pub(crate) mod pread;
pub mod private_dir;
pub mod process_stamp;
pub mod reader;
pub mod records;
pub mod records_cupti;
pub mod records_device;
pub mod records_end;
pub mod records_groups;
pub mod records_kernels;
pub mod records_net;
pub mod records_ports;
pub mod records_profiler;
pub mod records_stacks;
pub mod safe_path;
pub mod sigbus_guard;
pub mod stage_names;
pub mod synth;
pub mod tail;
pub mod writer;

#[cfg(test)]
mod records_tests;
#[cfg(test)]
mod roundtrip_tests;
