//! The subset of nccl.h's C ABI the NCCL door needs, declared from NVIDIA's documented
//! interface (x86-64 SysV): enums are `int`, handles are pointers, and `ncclUniqueId` is
//! a 128-byte struct passed by value.

use std::ffi::{c_char, c_int, c_void};

pub type NcclResult = c_int;
pub type NcclComm = *mut c_void;
pub type NcclDataType = c_int;
pub type NcclRedOp = c_int;
pub type CudaStream = *mut c_void;
/// `ncclConfig_t*`: passed through, never read.
pub type NcclConfig = *mut c_void;
/// `const ncclCollConfig_t*` (2.32): passed through, never read.
pub type NcclCollConfig = *const c_void;
/// `ncclWindow_t` (2.27): an opaque handle.
pub type NcclWindow = *mut c_void;
/// `ncclSimInfo_t*` (2.22): passed through, never read.
pub type NcclSimInfo = *mut c_void;

pub const NCCL_SUCCESS: NcclResult = 0;
pub const NCCL_INTERNAL_ERROR: NcclResult = 3;
pub const NCCL_IN_PROGRESS: NcclResult = 7;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct NcclUniqueId {
    pub internal: [c_char; 128],
}

impl NcclUniqueId {
    pub fn bytes(&self) -> [u8; 128] {
        self.internal.map(|b| b as u8)
    }
}
