//! GPU activity as the collector sees it, whatever door it came through: one plain value
//! per kernel, copy or runtime call, timestamps already in `CLOCK_MONOTONIC` nanoseconds.
//! The CUPTI door produces these from activity buffers; the kernel-window summaries
//! consume them.

use std::borrow::Cow;

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

    pub fn is_nccl(&self, id: u32) -> bool {
        self.get(id).is_some_and(is_nccl_kernel)
    }
}

/// NCCL's kernels are the global functions `ncclKernel_*` (before 2.19) and
/// `ncclDevKernel_*`, which CUPTI names as the compiler mangled them: on a GPU, NCCL
/// 2.28's allreduce is `_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE`.
/// A name cut short (the launch callback keeps 64 bytes) still starts with the function's.
pub fn is_nccl_kernel(name: &str) -> bool {
    let function = mangled_global_function(name).map_or(name, |(start, _)| &name[start..]);
    function.starts_with("ncclKernel") || function.starts_with("ncclDevKernel")
}

/// The name people read: a mangled function's qualified name, without the encoded
/// parameter types: `ncclDevKernel_AllReduce_Sum_f32_RING_LL`, and for PyTorch's
/// `_ZN2at4cuda40_GLOBAL__N__758183f4_8_Sleep_cu_088d913f11spin_kernelEl`,
/// `at::cuda::(anonymous namespace)::spin_kernel`. A name this cannot read (templates,
/// a cut inside the qualified name) stays as it is.
pub fn readable_kernel_name(name: &str) -> Cow<'_, str> {
    if let Some((start, len)) = mangled_global_function(name) {
        return Cow::Borrowed(start.checked_add(len).and_then(|end| name.get(start..end)).unwrap_or(&name[start..]));
    }
    nested_function(name).map_or(Cow::Borrowed(name), Cow::Owned)
}

/// The qualified name of an Itanium-mangled function in namespaces (`_ZN` <length>
/// <name>... `E`), when every part is a plain name.
fn nested_function(name: &str) -> Option<String> {
    let mut rest = name.strip_prefix("_ZN")?;
    let mut parts: Vec<&str> = Vec::new();
    while !rest.starts_with('E') {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let len = rest[..digits].parse::<usize>().ok().filter(|&len| len > 0)?;
        let part = rest.get(digits..digits.checked_add(len)?)?;
        parts.push(if part.starts_with("_GLOBAL__N") { "(anonymous namespace)" } else { part });
        rest = &rest[digits + len..];
    }
    (!parts.is_empty()).then(|| parts.join("::"))
}

/// Where the function name of an Itanium-mangled global function starts in `name`
/// (`_Z` <length> <name>), and the length the mangling gives it (the name may be cut).
fn mangled_global_function(name: &str) -> Option<(usize, usize)> {
    let rest = name.strip_prefix("_Z")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let len = rest[..digits].parse::<usize>().ok().filter(|&len| len > 0)?;
    Some((2 + digits, len))
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

    #[test]
    fn nccl_kernels_are_known_by_their_mangled_names_as_cupti_gives_them() {
        // Names as CUPTI reported them for PyTorch 2.11 with NCCL 2.28.9 on an H200.
        let allreduce = "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE";
        assert!(is_nccl_kernel(allreduce));
        assert!(is_nccl_kernel("_Z31ncclDevKernel_AllGather_RING_LL24ncclDevKernelArgsStorageILm..."));
        assert!(is_nccl_kernel("_Z38ncclKernel_AllReduce_RING_LL_Sum_floatP11ncclDevCommmP8ncclWork"));
        assert!(is_nccl_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL"));
        assert!(is_nccl_kernel("_Z39ncclDevKernel_AllRe"), "cut inside the function name");
        assert_eq!(readable_kernel_name(allreduce), "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
        let spin = "_ZN2at4cuda40_GLOBAL__N__758183f4_8_Sleep_cu_088d913f11spin_kernelEl";
        assert!(!is_nccl_kernel(spin));
        assert_eq!(readable_kernel_name(spin), "at::cuda::(anonymous namespace)::spin_kernel");
        let cut = "_ZN2at4cuda40_GLOBAL__N__758183f4_8_Sleep_cu_088d913f11spin_kern...";
        assert_eq!(readable_kernel_name(cut), cut, "cut inside the qualified name");
        let template = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEEEEviT0_T1_";
        assert_eq!(readable_kernel_name(template), template, "a template stays as it is");
        assert!(!is_nccl_kernel("_Z11scal_kernelIffLi1ELb1ELi6ELi5ELi5ELi3EEv21cublasTransposePar"));
        assert_eq!(readable_kernel_name("_Z11scal_kernelIffLi1EEv"), "scal_kernel");
        for odd in ["_Z", "_Z0x", "_Z99999999999999999999999x", "_Z18446744073709551615x", "_Z5ab", "gemm"] {
            assert!(!is_nccl_kernel(odd), "{odd}");
            let _ = readable_kernel_name(odd);
        }
    }
}
