//! The NCCL profiler plugin ABI, versions 1 to 7, declared from the facts in NVIDIA/nccl's
//! public headers (no header text copied):
//! - `src/include/plugin/profiler/profiler_v1.h` … `profiler_v7.h`: the descriptor unions,
//!   the state-argument unions and the `ncclProfiler_vN_t` function tables;
//! - `src/include/plugin/nccl_profiler.h`: event type bits and state values (see
//!   `core::profiler::{ty, state}`);
//! - `src/include/plugin/profiler/net_ib_v1.h` (and `ext-profiler/README.md`): the IB QP
//!   event a network plugin attaches to an `ncclProfileNetPlugin` event.
//!
//! Every descriptor starts `type` (uint8_t in v1–v4, uint64_t from v5), `void* parentObj`,
//! `int rank`, then the union, which holds pointers and so starts at offset 24 in every
//! version. The unions below list every member of their version so that a descriptor copied
//! for a chained plugin has NCCL's exact size.

use std::ffi::{c_char, c_int, c_void};

pub type InitV1 = unsafe extern "C" fn(*mut *mut c_void, *mut c_int) -> c_int;
/// v4: `init(context, eActivationMask, commName, commHash, nNodes, nranks, rank, logfn)`.
pub type InitV4 =
    unsafe extern "C" fn(*mut *mut c_void, *mut c_int, *const c_char, u64, c_int, c_int, c_int, *mut c_void) -> c_int;
/// v5–v7: `init(context, commId, eActivationMask, commName, nNodes, nranks, rank, logfn)`.
pub type InitV5 =
    unsafe extern "C" fn(*mut *mut c_void, u64, *mut c_int, *const c_char, c_int, c_int, c_int, *mut c_void) -> c_int;
/// `startEvent(context, eHandle, eDescr)`; the descriptor type is the version's.
pub type StartFn = unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut c_void) -> c_int;
pub type StopFn = unsafe extern "C" fn(*mut c_void) -> c_int;
/// `recordEventState(eHandle, eState, eStateArgs)`; the state is a C enum (int).
pub type RecordFn = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> c_int;
pub type FinalizeFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// The plugin's name, a NUL-terminated string in static memory.
#[repr(transparent)]
pub struct CName(pub *const c_char);
// SAFETY: points at an immutable static string literal; sharing it between threads is fine.
unsafe impl Sync for CName {}

/// `ncclProfiler_vN_t`: name, init, startEvent, stopEvent, recordEventState, finalize.
/// The layout is the same in every version but for `init`'s signature.
#[repr(C)]
pub struct Plugin<I> {
    pub name: CName,
    pub init: I,
    pub start: StartFn,
    pub stop: StopFn,
    pub record: RecordFn,
    pub finalize: FinalizeFn,
}

/// Another plugin's table, read through a pointer: every entry may be null.
#[repr(C)]
pub struct ForeignPlugin {
    pub name: *const c_char,
    pub init: *const c_void,
    pub start: Option<StartFn>,
    pub stop: Option<StopFn>,
    pub record: Option<RecordFn>,
    pub finalize: Option<FinalizeFn>,
}

// ----- union members shared by several versions -------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyOp {
    pub pid: c_int, // pid_t
    pub channel: u8,
    pub peer: c_int,
    pub n_steps: c_int,
    pub chunk_size: c_int,
    pub is_send: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyStep {
    pub step: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetPlugin {
    pub id: i64,
    pub data: *mut c_void,
}

/// v3 kernel channel: only the channel id.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelChV3 {
    pub channel: u8,
}

/// v4+ kernel channel: channel id and GPU globaltimer start.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelChV4 {
    pub channel: u8,
    pub p_timer: u64,
}

// ----- v1: numeric func/datatype/algo/proto, comm name and hash per task ------------------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV1 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub seq: u64,
    pub func: u8,
    pub send: *const c_void,
    pub recv: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: u8,
    pub op: u32,
    pub traffic_bytes: usize,
    pub n_max_channels: u8,
    pub n_warps: u8,
    pub algo: u8,
    pub proto: u8,
    pub is_collnet: c_int,
    pub is_nvls: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV1 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub func: u8,
    pub buff: *mut c_void,
    pub datatype: u8,
    pub count: usize,
    pub peer: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union UnionV1 {
    pub coll: CollV1,
    pub p2p: P2pV1,
    pub proxy_op: ProxyOp,
    pub proxy_step: ProxyStep,
}

// ----- v2: strings for func/datatype/algo/proto --------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV2 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub seq: u64,
    pub func: *const c_char,
    pub send: *const c_void,
    pub recv: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub traffic_bytes: usize,
    pub n_max_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV2 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union UnionV2 {
    pub coll: CollV2,
    pub p2p: P2pV2,
    pub proxy_op: ProxyOp,
    pub proxy_step: ProxyStep,
}

// ----- v3: no trafficBytes; kernel channel and network plugin events -----------------------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV3 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub seq: u64,
    pub func: *const c_char,
    pub send: *const c_void,
    pub recv: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_max_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union UnionV3 {
    pub coll: CollV3,
    pub p2p: P2pV2,
    pub proxy_op: ProxyOp,
    pub proxy_step: ProxyStep,
    pub kernel_ch: KernelChV3,
    pub net: NetPlugin,
}

// ----- v4: comm name/hash move to init; nChannels --------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV4 {
    pub seq: u64,
    pub func: *const c_char,
    pub send: *const c_void,
    pub recv: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV4 {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub n_channels: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union UnionV4 {
    pub coll: CollV4,
    pub p2p: P2pV4,
    pub proxy_op: ProxyOp,
    pub proxy_step: ProxyStep,
    pub kernel_ch: KernelChV4,
    pub net: NetPlugin,
}

// ----- v5: 64-bit type; API-level events; parentGroup kept for v4 compatibility -----------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct GroupApi {
    pub graph_captured: bool,
    pub group_depth: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollApiV5 {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub root: c_int,
    pub stream: *mut c_void,
    pub graph_captured: bool,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pApiV5 {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub stream: *mut c_void,
    pub graph_captured: bool,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelLaunch {
    pub stream: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV5 {
    pub seq: u64,
    pub func: *const c_char,
    pub send: *const c_void,
    pub recv: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
    pub parent_group: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV5 {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub n_channels: u8,
    pub parent_group: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union UnionV5 {
    pub group_api: GroupApi,
    pub coll_api: CollApiV5,
    pub p2p_api: P2pApiV5,
    pub kernel_launch: KernelLaunch,
    pub coll: CollV5,
    pub p2p: P2pV5,
    pub proxy_op: ProxyOp,
    pub proxy_step: ProxyStep,
    pub kernel_ch: KernelChV4,
    pub net: NetPlugin,
}

// ----- v6: v5 plus copy-engine collectives (NCCL 2.29; no kernel-step member exists) -------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeCollV6 {
    pub seq: u64,
    pub func: *const c_char,
    pub send: *const c_void,
    pub recv: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub sync_strategy: *const c_char,
    pub intra_batch_sync: bool,
    pub batch_size: u32,
    pub num_batches: u32,
    pub ce_seq_num: u32,
    pub stream: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeSync {
    pub is_complete: bool,
    pub n_ranks: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeBatch {
    pub num_ops: c_int,
    pub total_bytes: usize,
    pub use_intra_sync: bool,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union UnionV6 {
    pub group_api: GroupApi,
    pub coll_api: CollApiV5,
    pub p2p_api: P2pApiV5,
    pub kernel_launch: KernelLaunch,
    pub coll: CollV5,
    pub p2p: P2pV5,
    pub proxy_op: ProxyOp,
    pub proxy_step: ProxyStep,
    pub kernel_ch: KernelChV4,
    pub net: NetPlugin,
    pub ce_coll: CeCollV6,
    pub ce_sync: CeSync,
    pub ce_batch: CeBatch,
}

// ----- v7: user tags, kernel variant, symmetric collectives, kernel phases -----------------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollApiV7 {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub root: c_int,
    pub stream: *mut c_void,
    pub graph_captured: bool,
    pub user_tag: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pApiV7 {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub stream: *mut c_void,
    pub graph_captured: bool,
    pub user_tag: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV7 {
    pub seq: u64,
    pub func: *const c_char,
    pub send: *const c_void,
    pub recv: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
    pub parent_group: *mut c_void,
    pub kernel_variant: *const c_char,
    pub is_sym_coll: bool,
    pub user_tag: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV7 {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub n_channels: u8,
    pub parent_group: *mut c_void,
    pub user_tag: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeCollV7 {
    pub base: CeCollV6,
    pub user_tag: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelPhase {
    pub channel: u8,
    pub phase_id: u8,
    pub phase_name: *const c_char,
    pub p_timer: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union UnionV7 {
    pub group_api: GroupApi,
    pub coll_api: CollApiV7,
    pub p2p_api: P2pApiV7,
    pub kernel_launch: KernelLaunch,
    pub coll: CollV7,
    pub p2p: P2pV7,
    pub proxy_op: ProxyOp,
    pub proxy_step: ProxyStep,
    pub kernel_ch: KernelChV4,
    pub net: NetPlugin,
    pub ce_coll: CeCollV7,
    pub ce_sync: CeSync,
    pub ce_batch: CeBatch,
    pub kernel_phase: KernelPhase,
}

// ----- descriptors ----------------------------------------------------------------------------

macro_rules! descr {
    ($name:ident, $ty:ty, $union:ty) => {
        #[repr(C)]
        #[derive(Clone, Copy)]
        pub struct $name {
            pub ty: $ty,
            pub parent: *mut c_void,
            pub rank: c_int,
            pub u: $union,
        }
        const _: () = assert!(std::mem::offset_of!($name, u) == 24);
    };
}

descr!(DescrV1, u8, UnionV1);
descr!(DescrV2, u8, UnionV2);
descr!(DescrV3, u8, UnionV3);
descr!(DescrV4, u8, UnionV4);
descr!(DescrV5, u64, UnionV5);
descr!(DescrV6, u64, UnionV6);
descr!(DescrV7, u64, UnionV7);

/// `ncclProfilerNetIbDescr_v1_t`: `uint8_t type` then a union whose one member is the QP
/// work request.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetIbDescrV1 {
    pub ty: u8,
    pub qp: NetIbQpV1,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetIbQpV1 {
    pub device: c_int,
    pub wr_id: u64,
    pub opcode: c_int,
    pub qp_num: c_int,
    pub length: usize,
}

// Sizes on LP64. fakenccl's own C declarations (tests/fixtures/fakenccl/profiler_driver.c)
// assert the same numbers with a C compiler, so both sides are held to one layout.
const _: () = assert!(std::mem::size_of::<DescrV1>() == 24 + 96);
const _: () = assert!(std::mem::size_of::<DescrV4>() == 24 + 80);
const _: () = assert!(std::mem::size_of::<DescrV5>() == 24 + 88);
const _: () = assert!(std::mem::size_of::<NetIbDescrV1>() == 40);
