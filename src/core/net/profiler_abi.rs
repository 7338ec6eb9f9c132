//! The profiler ABI's numbers (event type bits, state values, network-plugin ids, from
//! nccl_profiler.h and net_ib_v1.h) and which event types NCCL starts for a mask and this
//! door asks for.

/// `ncclProfile*` event type bits (nccl_profiler.h). The descriptor's `type` is one bit.
pub mod ty {
    pub const GROUP: u64 = 1 << 0;
    pub const COLL: u64 = 1 << 1;
    pub const P2P: u64 = 1 << 2;
    pub const PROXY_OP: u64 = 1 << 3;
    pub const PROXY_STEP: u64 = 1 << 4;
    pub const PROXY_CTRL: u64 = 1 << 5;
    pub const KERNEL_CH: u64 = 1 << 6;
    pub const NET_PLUGIN: u64 = 1 << 7;
    /// v5+: API-level events (ncclProfileGroupApi, CollApi, P2pApi, KernelLaunch).
    pub const GROUP_API: u64 = 1 << 8;
    pub const COLL_API: u64 = 1 << 9;
    pub const P2P_API: u64 = 1 << 10;
    pub const KERNEL_LAUNCH: u64 = 1 << 11;
    /// v6+: copy-engine collectives.
    pub const CE_COLL: u64 = 1 << 12;
    pub const CE_SYNC: u64 = 1 << 13;
    pub const CE_BATCH: u64 = 1 << 14;
}

/// `ncclProfilerEventState_t` values (nccl_profiler.h; v1–v3 use the first 19, numbered
/// implicitly from 0 in the same order; v4 added 19..22).
pub mod state {
    pub const PROXY_OP_SEND_POSTED: i32 = 0;
    pub const PROXY_OP_SEND_REM_FIFO_WAIT: i32 = 1;
    pub const PROXY_OP_SEND_TRANSMITTED: i32 = 2;
    pub const PROXY_OP_SEND_DONE: i32 = 3;
    pub const PROXY_OP_RECV_POSTED: i32 = 4;
    pub const PROXY_OP_RECV_RECEIVED: i32 = 5;
    pub const PROXY_OP_RECV_TRANSMITTED: i32 = 6;
    pub const PROXY_OP_RECV_DONE: i32 = 7;
    pub const PROXY_STEP_SEND_GPU_WAIT: i32 = 8;
    pub const PROXY_STEP_SEND_WAIT: i32 = 9;
    pub const PROXY_STEP_RECV_WAIT: i32 = 10;
    pub const PROXY_STEP_RECV_FLUSH_WAIT: i32 = 11;
    pub const PROXY_STEP_RECV_GPU_WAIT: i32 = 12;
    pub const PROXY_OP_IN_PROGRESS_V4: i32 = 19;
    pub const PROXY_STEP_SEND_PEER_WAIT_V4: i32 = 20;
    pub const NET_PLUGIN_UPDATE: i32 = 21;
    pub const KERNEL_CH_STOP: i32 = 22;
}

/// Network-plugin ids: 16 LSB the event version, next 16 bits the network type
/// (ext-profiler/README.md, nccl_profiler.h).
pub const NET_TYPE_IB: u64 = 1 << 16;
pub const NET_IB_VERSION: u64 = 1;
/// `ncclProfileQp` (net_ib_v1.h).
pub const NET_IB_QP: u8 = 1;

/// The event types NCCL starts for an activation mask: a type is started when the mask
/// holds it or any type NCCL makes its descendant (src/plugin/profiler.cc at v2.30.7-1:
/// `groupApiMask`, `collApiMask`, `p2pApiMask`, and the `enable` masks of the group, task,
/// proxy-op and proxy-step events). Up to v4 (NCCL 2.26.2) a point-to-point task is not
/// started for NetPlugin alone.
pub fn started_types(mask: u64, abi: u8) -> u64 {
    use ty::*;
    let below_task = PROXY_OP | PROXY_STEP | KERNEL_CH | NET_PLUGIN;
    let p2p_below = if abi <= 4 { PROXY_OP | PROXY_STEP | KERNEL_CH } else { below_task };
    let ce = CE_COLL | CE_SYNC | CE_BATCH;
    let enablers: [(u64, u64); 15] = [
        (GROUP_API, GROUP_API | COLL_API | P2P_API | KERNEL_LAUNCH | GROUP | COLL | P2P | below_task | ce),
        (COLL_API, COLL_API | COLL | below_task | ce),
        (P2P_API, P2P_API | P2P | below_task),
        (KERNEL_LAUNCH, KERNEL_LAUNCH),
        (GROUP, GROUP | COLL | P2P | below_task),
        (COLL, COLL | below_task),
        (P2P, P2P | p2p_below),
        (PROXY_OP, PROXY_OP | PROXY_STEP | NET_PLUGIN),
        (PROXY_STEP, PROXY_STEP | NET_PLUGIN),
        (PROXY_CTRL, PROXY_CTRL),
        (KERNEL_CH, KERNEL_CH),
        (NET_PLUGIN, NET_PLUGIN),
        (CE_COLL, ce),
        (CE_SYNC, CE_SYNC),
        (CE_BATCH, CE_BATCH),
    ];
    enablers.iter().filter(|(_, by)| mask & by != 0).fold(0, |acc, (t, _)| acc | t)
}

/// The event types this door asks NCCL for under ABI `abi`: from v5 also the API calls
/// (NCCL >= 2.29.2 runs a Broadcast as an AllGatherV task with no task event, so the call's
/// own event is its only record), from v6 copy-engine collectives.
pub fn own_mask(kernel_ch: bool, abi: u8) -> u64 {
    let api = if abi >= 5 { ty::COLL_API | ty::P2P_API } else { 0 };
    let ce = if abi >= 6 { ty::CE_COLL } else { 0 };
    ty::COLL
        | ty::P2P
        | ty::PROXY_OP
        | ty::PROXY_STEP
        | ty::NET_PLUGIN
        | api
        | ce
        | if kernel_ch { ty::KERNEL_CH } else { 0 }
}
