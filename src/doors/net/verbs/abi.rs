//! The subset of libibverbs' public ABI (rdma-core's `<infiniband/verbs.h>`) the verbs door
//! reads or writes, declared from the header's documented layout. Only prefixes of structs
//! the door never allocates are declared; every offset the door relies on is in `LAYOUT`,
//! which tests/verbs.rs compares with `offsetof` from the real header.

use std::ffi::{c_char, c_int, c_void};

/// `IBV_SYSFS_NAME_MAX`: size of `ibv_device::name`.
pub const DEVICE_NAME_MAX: usize = 64;
/// `IBV_SEND_SIGNALED` in `ibv_send_wr::send_flags`.
pub const SEND_SIGNALED: u32 = 1 << 1;
/// `IBV_WC_SUCCESS`.
pub const WC_SUCCESS: u32 = 0;

/// `struct ibv_device`, up to its kernel device name.
#[repr(C)]
pub struct IbvDevice {
    /// `struct _ibv_device_ops`: two function pointers kept for ABI compatibility.
    pub _ops: [usize; 2],
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; DEVICE_NAME_MAX],
}

/// `post_send` (`W` = [`IbvSendWr`]) and `post_recv` (`W` = [`IbvRecvWr`]): one shape.
pub type PostFn<W> = unsafe extern "C" fn(*mut IbvQp, *mut W, *mut *mut W) -> c_int;
pub type PollCqFn = unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int;

/// `struct ibv_context_ops`: 32 function pointers. The header's inline `ibv_post_send`,
/// `ibv_post_recv` and `ibv_poll_cq` call through `poll_cq` (entry 11), `post_send` (25)
/// and `post_recv` (26); the rest are compatibility slots or verbs the door leaves alone.
#[repr(C)]
pub struct IbvContextOps {
    pub _before_poll_cq: [usize; 11],
    pub poll_cq: usize,
    pub _between: [usize; 13],
    pub post_send: usize,
    pub post_recv: usize,
    pub _after: [usize; 5],
}

/// `struct ibv_context`, up to its ops table.
#[repr(C)]
pub struct IbvContext {
    pub device: *mut IbvDevice,
    pub ops: IbvContextOps,
}

/// `struct ibv_qp`, up to `qp_num`.
#[repr(C)]
pub struct IbvQp {
    pub context: *mut IbvContext,
    pub qp_context: *mut c_void,
    pub pd: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
}

/// `struct ibv_cq`, up to its context.
#[repr(C)]
pub struct IbvCq {
    pub context: *mut IbvContext,
}

/// `struct ibv_sge`, whole (the door indexes arrays of it).
#[repr(C)]
pub struct IbvSge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_send_wr`, up to `send_flags`.
#[repr(C)]
pub struct IbvSendWr {
    pub wr_id: u64,
    pub next: *mut IbvSendWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: u32,
}

/// `struct ibv_recv_wr`, whole.
#[repr(C)]
pub struct IbvRecvWr {
    pub wr_id: u64,
    pub next: *mut IbvRecvWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
}

/// `struct ibv_wc`, whole (the door indexes the array `poll_cq` fills).
#[repr(C)]
pub struct IbvWc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_qp_init_attr`, up to `sq_sig_all`.
#[repr(C)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut c_void,
    /// `struct ibv_qp_cap`: five u32 capacities.
    pub cap: [u32; 5],
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

/// (C expression, offset or size in bytes) of everything above the door relies on; the
/// names are what `offsetof`/`sizeof` take in C.
pub const LAYOUT: &[(&str, usize)] = &[
    ("offsetof(struct ibv_device, name)", std::mem::offset_of!(IbvDevice, name)),
    ("offsetof(struct ibv_context, device)", std::mem::offset_of!(IbvContext, device)),
    ("offsetof(struct ibv_context, ops)", std::mem::offset_of!(IbvContext, ops)),
    ("offsetof(struct ibv_context_ops, poll_cq)", std::mem::offset_of!(IbvContextOps, poll_cq)),
    ("offsetof(struct ibv_context_ops, post_send)", std::mem::offset_of!(IbvContextOps, post_send)),
    ("offsetof(struct ibv_context_ops, post_recv)", std::mem::offset_of!(IbvContextOps, post_recv)),
    ("sizeof(struct ibv_context_ops)", std::mem::size_of::<IbvContextOps>()),
    ("offsetof(struct ibv_qp, context)", std::mem::offset_of!(IbvQp, context)),
    ("offsetof(struct ibv_qp, qp_num)", std::mem::offset_of!(IbvQp, qp_num)),
    ("offsetof(struct ibv_cq, context)", std::mem::offset_of!(IbvCq, context)),
    ("offsetof(struct ibv_sge, length)", std::mem::offset_of!(IbvSge, length)),
    ("sizeof(struct ibv_sge)", std::mem::size_of::<IbvSge>()),
    ("offsetof(struct ibv_send_wr, wr_id)", std::mem::offset_of!(IbvSendWr, wr_id)),
    ("offsetof(struct ibv_send_wr, next)", std::mem::offset_of!(IbvSendWr, next)),
    ("offsetof(struct ibv_send_wr, sg_list)", std::mem::offset_of!(IbvSendWr, sg_list)),
    ("offsetof(struct ibv_send_wr, num_sge)", std::mem::offset_of!(IbvSendWr, num_sge)),
    ("offsetof(struct ibv_send_wr, opcode)", std::mem::offset_of!(IbvSendWr, opcode)),
    ("offsetof(struct ibv_send_wr, send_flags)", std::mem::offset_of!(IbvSendWr, send_flags)),
    ("offsetof(struct ibv_recv_wr, next)", std::mem::offset_of!(IbvRecvWr, next)),
    ("offsetof(struct ibv_recv_wr, sg_list)", std::mem::offset_of!(IbvRecvWr, sg_list)),
    ("offsetof(struct ibv_recv_wr, num_sge)", std::mem::offset_of!(IbvRecvWr, num_sge)),
    ("offsetof(struct ibv_wc, status)", std::mem::offset_of!(IbvWc, status)),
    ("offsetof(struct ibv_wc, opcode)", std::mem::offset_of!(IbvWc, opcode)),
    ("offsetof(struct ibv_wc, byte_len)", std::mem::offset_of!(IbvWc, byte_len)),
    ("offsetof(struct ibv_wc, qp_num)", std::mem::offset_of!(IbvWc, qp_num)),
    ("sizeof(struct ibv_wc)", std::mem::size_of::<IbvWc>()),
    ("offsetof(struct ibv_qp_init_attr, sq_sig_all)", std::mem::offset_of!(IbvQpInitAttr, sq_sig_all)),
];
