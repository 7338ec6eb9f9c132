//! GPU activity as the collector sees it, whatever door it came through: one plain value
//! per kernel, copy or runtime call, timestamps already in `CLOCK_MONOTONIC` nanoseconds.
//! The CUPTI door produces these from activity buffers; the kernel-window summaries
//! consume them.

use crate::core::fnv::fnv1a;

/// What kind of GPU activity a record describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActivityKind {
    Kernel,
    Memcpy {
        bytes: u64,
        copy_kind: u8,
    },
    /// A CUDA runtime API call (recorded only when correlation is on).
    Runtime {
        cbid: u32,
    },
    /// A completed synchronization (`CUpti_ActivitySynchronizationType`: 1 event
    /// synchronize, 2 stream wait event, 3 stream synchronize, 4 context synchronize).
    Synchronization {
        sync_type: u32,
    },
}

/// One GPU activity record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Activity {
    pub kind: ActivityKind,
    /// Interned name (kernels only), see [`KernelNames`]; [`KernelNames::NONE`] otherwise.
    pub name_id: u32,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    /// CUPTI's correlation id, linking a kernel to the runtime call that launched it.
    pub correlation: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Activity {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// Kernel names interned by the collector: the name pointer in a CUPTI record dies with
/// its buffer, and names repeat millions of times. Fixed capacity, so memory stays
/// constant; names beyond it share [`KernelNames::OVERFLOW`].
pub struct KernelNames {
    names: Vec<Box<str>>,
    /// Open-addressing index of `names` by hash; `u32::MAX` marks a free bucket.
    index: Vec<u32>,
}

impl Default for KernelNames {
    fn default() -> KernelNames {
        KernelNames { names: Vec::with_capacity(Self::CAPACITY), index: vec![u32::MAX; Self::CAPACITY * 2] }
    }
}

impl KernelNames {
    pub const CAPACITY: usize = 4096;
    pub const NONE: u32 = u32::MAX;
    /// Shared by every name seen after the table filled up.
    pub const OVERFLOW: u32 = u32::MAX - 1;

    /// The id of `name`, adding it if new. Returns the id and whether it was new, so the
    /// caller can write the name into the log once.
    pub fn intern(&mut self, name: &[u8]) -> (u32, bool) {
        let mask = self.index.len() - 1;
        let mut bucket = (fnv1a(name) as usize) & mask;
        loop {
            match self.index[bucket] {
                u32::MAX => break,
                id if self.names[id as usize].as_bytes() == name => return (id, false),
                _ => bucket = (bucket + 1) & mask,
            }
        }
        if self.names.len() == Self::CAPACITY {
            return (Self::OVERFLOW, false);
        }
        let id = self.names.len() as u32;
        self.names.push(String::from_utf8_lossy(name).into());
        self.index[bucket] = id;
        (id, true)
    }

    pub fn get(&self, id: u32) -> Option<&str> {
        self.names.get(id as usize).map(|n| &**n)
    }

    /// NCCL's kernels are named `ncclKernel_*` or `ncclDevKernel_*`.
    pub fn is_nccl(&self, id: u32) -> bool {
        self.get(id).is_some_and(is_nccl_kernel)
    }
}

pub fn is_nccl_kernel(name: &str) -> bool {
    name.starts_with("ncclKernel") || name.starts_with("ncclDevKernel")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interns_once_and_overflows_to_one_id() {
        let mut names = KernelNames::default();
        assert_eq!(names.intern(b"ncclDevKernel_AllReduce_Sum_f32_RING_LL"), (0, true));
        assert_eq!(names.intern(b"gemm"), (1, true));
        assert_eq!(names.intern(b"ncclDevKernel_AllReduce_Sum_f32_RING_LL"), (0, false));
        assert!(names.is_nccl(0) && !names.is_nccl(1));
        for i in 2..KernelNames::CAPACITY {
            names.intern(format!("k{i}").as_bytes());
        }
        assert_eq!(names.intern(b"one too many"), (KernelNames::OVERFLOW, false));
        assert_eq!(names.get(1), Some("gemm"));
    }
}
