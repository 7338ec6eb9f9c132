//! CUPTI activity records to [`Activity`] values: a pure function over one completed
//! activity buffer, so it is tested on synthetic buffers without CUPTI.
//!
//! CUPTI writes records back to back, each a `CUpti_Activity*` structure whose first
//! 32-bit word is its kind. The structure version depends on the CUPTI that wrote it
//! (CUDA 12 writes `CUpti_ActivityKernel9`, CUDA 13.0 `Kernel10`, 13.1 `Kernel11`, ...),
//! and the buffer does not say which; the walker (`cuptiActivityGetNextRecord` in the real
//! path) knows. So a record's size is the distance to the next record, or to the end of
//! the valid data for the last one, and only fields at offsets that every supported
//! version shares are read, each after checking the record reaches past it. The offsets
//! below are pinned to cudarc's bindgen layouts of every version by the tests.

use crate::core::kernels::kernel_activity::{Activity, ActivityKind, KernelNames};
use crate::core::log::format::bytes;

/// `CUpti_ActivityKind` values (cupti_activity.h).
pub mod kind {
    pub const MEMCPY: u32 = 1;
    pub const RUNTIME: u32 = 5;
    pub const CONCURRENT_KERNEL: u32 = 10;
    pub const SYNCHRONIZATION: u32 = 38;
}

/// `CUpti_ActivityKernel4` .. `Kernel13` (CUDA 11.x to 13.4): the fields read.
mod kernel {
    pub const START: usize = 16;
    pub const END: usize = 24;
    pub const DEVICE: usize = 40;
    pub const CONTEXT: usize = 44;
    pub const STREAM: usize = 48;
    pub const CORRELATION: usize = 92;
    pub const NAME: usize = 104;
    /// One past the last byte read.
    pub const MIN_SIZE: usize = NAME + 8;
}

/// `CUpti_ActivityMemcpy` .. `Memcpy7`.
mod memcpy {
    pub const COPY_KIND: usize = 4;
    pub const BYTES: usize = 8;
    pub const START: usize = 16;
    pub const END: usize = 24;
    pub const DEVICE: usize = 32;
    pub const CONTEXT: usize = 36;
    pub const STREAM: usize = 40;
    pub const CORRELATION: usize = 44;
    pub const MIN_SIZE: usize = CORRELATION + 4;
}

/// `CUpti_ActivityAPI` (runtime and driver API records; one version since CUDA 4).
mod api {
    pub const CBID: usize = 4;
    pub const START: usize = 8;
    pub const END: usize = 16;
    pub const CORRELATION: usize = 32;
    pub const MIN_SIZE: usize = CORRELATION + 4;
}

/// `CUpti_ActivitySynchronization` and `Synchronization2` (CUDA 12.8+, a longer tail).
mod sync {
    pub const TYPE: usize = 4;
    pub const START: usize = 8;
    pub const END: usize = 16;
    pub const CORRELATION: usize = 24;
    pub const CONTEXT: usize = 28;
    pub const STREAM: usize = 32;
    pub const MIN_SIZE: usize = STREAM + 4;
}

/// What parsing one buffer found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParseStats {
    /// Records handed to the sink.
    pub delivered: u64,
    /// Records of a kind this parser does not read.
    pub unknown: u64,
    /// Records of a known kind that were shorter than the fields read, or incomplete
    /// (CUPTI writes a zero start or end for an activity a forced flush cut short).
    pub rejected: u64,
}

/// Turns CUPTI timestamps into `CLOCK_MONOTONIC` nanoseconds: `cupti + offset_ns`, the
/// offset measured by paired readings of both clocks (see `CuptiDrain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeBase {
    pub offset_ns: i64,
}

impl TimeBase {
    pub fn to_mono_ns(self, cupti_ns: u64) -> u64 {
        (cupti_ns as i128 + self.offset_ns as i128).clamp(0, u64::MAX as i128) as u64
    }
}

/// Parses every record of `buffer` (the valid bytes of one completed activity buffer).
///
/// `next` walks the buffer: each call returns the offset of the next record, `None` at the
/// end. `name` resolves a kernel record's name pointer to the name's bytes, which need only
/// live until the sink returns. `sink` gets every kernel, memcpy, runtime and
/// synchronization activity.
pub fn parse_buffer<'n>(
    buffer: &[u8],
    mut next: impl FnMut() -> Option<usize>,
    time: TimeBase,
    name: impl Fn(u64) -> Option<&'n [u8]>,
    sink: &mut dyn FnMut(&Activity, Option<&[u8]>),
) -> ParseStats {
    let mut stats = ParseStats::default();
    let mut current = next();
    while let Some(at) = current {
        let following = next();
        let end = following.unwrap_or(buffer.len());
        // A walker going backwards or past the data would make every size below wrong.
        let Some(record) = buffer.get(at..end).filter(|r| r.len() >= 4) else { break };
        match parse_record(record, time) {
            Parsed::Activity(activity, name_ptr) => {
                let name = name_ptr.filter(|&p| p != 0).and_then(&name);
                sink(&activity, name);
                stats.delivered += 1;
            }
            Parsed::Unknown => stats.unknown += 1,
            Parsed::Rejected => stats.rejected += 1,
        }
        current = following;
    }
    stats
}

enum Parsed {
    /// The activity and, for a kernel, its name pointer.
    Activity(Activity, Option<u64>),
    Unknown,
    Rejected,
}

fn parse_record(record: &[u8], time: TimeBase) -> Parsed {
    let u32_at = |at: usize| bytes::get_u32(record, at);
    let u64_at = |at: usize| bytes::get_u64(record, at);
    let (min_size, kind) = match u32_at(0) {
        kind::CONCURRENT_KERNEL => (kernel::MIN_SIZE, ActivityKind::Kernel),
        kind::MEMCPY => (memcpy::MIN_SIZE, ActivityKind::Memcpy { bytes: 0, copy_kind: 0 }),
        kind::RUNTIME => (api::MIN_SIZE, ActivityKind::Runtime { cbid: 0 }),
        kind::SYNCHRONIZATION => (sync::MIN_SIZE, ActivityKind::Synchronization { sync_type: 0 }),
        _ => return Parsed::Unknown,
    };
    if record.len() < min_size {
        return Parsed::Rejected;
    }
    let blank = Activity {
        kind,
        name_id: KernelNames::NONE,
        device: 0,
        context: 0,
        stream: 0,
        correlation: 0,
        start_ns: 0,
        end_ns: 0,
    };
    let (activity, start, end, name) = match kind {
        ActivityKind::Kernel => {
            let activity = Activity {
                device: u32_at(kernel::DEVICE),
                context: u32_at(kernel::CONTEXT),
                stream: u32_at(kernel::STREAM),
                correlation: u32_at(kernel::CORRELATION),
                ..blank
            };
            (activity, u64_at(kernel::START), u64_at(kernel::END), Some(u64_at(kernel::NAME)))
        }
        ActivityKind::Memcpy { .. } => {
            let activity = Activity {
                kind: ActivityKind::Memcpy { bytes: u64_at(memcpy::BYTES), copy_kind: record[memcpy::COPY_KIND] },
                device: u32_at(memcpy::DEVICE),
                context: u32_at(memcpy::CONTEXT),
                stream: u32_at(memcpy::STREAM),
                correlation: u32_at(memcpy::CORRELATION),
                ..blank
            };
            (activity, u64_at(memcpy::START), u64_at(memcpy::END), None)
        }
        ActivityKind::Runtime { .. } => {
            let activity = Activity {
                kind: ActivityKind::Runtime { cbid: u32_at(api::CBID) },
                correlation: u32_at(api::CORRELATION),
                ..blank
            };
            (activity, u64_at(api::START), u64_at(api::END), None)
        }
        ActivityKind::Synchronization { .. } => {
            let activity = Activity {
                kind: ActivityKind::Synchronization { sync_type: u32_at(sync::TYPE) },
                context: u32_at(sync::CONTEXT),
                stream: u32_at(sync::STREAM),
                correlation: u32_at(sync::CORRELATION),
                ..blank
            };
            (activity, u64_at(sync::START), u64_at(sync::END), None)
        }
    };
    if start == 0 || end < start {
        return Parsed::Rejected;
    }
    Parsed::Activity(Activity { start_ns: time.to_mono_ns(start), end_ns: time.to_mono_ns(end), ..activity }, name)
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
