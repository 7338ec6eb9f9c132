//! The LD_PRELOAD door: NCCL's C API, each entry forwarding to the real library.

// The exported names are NCCL's C names.
#![allow(non_snake_case)]

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::core::comms::comm_identity;
use crate::core::comms::tracer::{self, CallArgs, NewComm};
use crate::core::live::runtime;
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::records::CommOrigin;
use crate::core::record::doors;
use crate::core::record::notice::say;
use crate::core::record::thread_state::{self, ReentrancyGuard};
use crate::core::runtime::declared::{Declaration, DeclaredBy};
use crate::core::runtime::start;
use crate::doors::comms::nccl_abi::*;
use crate::doors::comms::nccl_symbols::{EntryPoint, NCCL};
use crate::doors::real_symbol::loaded_nccl_path;
use crate::doors::traced::{begin_early, shielded, traced};

/// When the real entry point cannot be found the call cannot be forwarded; the
/// application gets NCCL's own code for a failure outside its control, and one line per
/// entry point says which symbol is missing and whether any NCCL is loaded at all (an
/// application built against a newer nccl.h than the libnccl it runs with reaches here).
#[cold]
fn missing(name: &str, said: &AtomicBool) -> NcclResult {
    if !said.swap(true, Ordering::Relaxed) {
        let line = match loaded_nccl_path() {
            Some(path) => format!(
                "{name}: the NCCL loaded in this process ({}) has no symbol {name} (nor p{name}); returning ncclInternalError",
                path.to_string_lossy()
            ),
            None => format!("{name}: no NCCL library is loaded behind the preload; returning ncclInternalError"),
        };
        say(&line);
    }
    NCCL_INTERNAL_ERROR
}

/// The real `$name` with the hook's own signature (`nccl_symbols`).
macro_rules! real {
    ($name:ident, fn($($ty:ty),*)) => {{
        match NCCL.get(EntryPoint::$name as usize) {
            // SAFETY: NCCL's symbol of this name has exactly this signature (nccl.h).
            Some(address) => Some(unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) -> NcclResult>(address) }),
            None => None,
        }
    }};
}

/// A door that records one call: `args` from the parameters, `after` on its result.
macro_rules! door {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) => $args:expr $(, after |$res:ident| $after:expr)?;) => {
        $(#[$doc])*
        /// # Safety
        /// Called by C code under NCCL's contract for this function (nccl.h): every pointer
        /// is valid as the real library requires. Forwarded unchanged.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> NcclResult {
            static SAID: AtomicBool = AtomicBool::new(false);
            let Some(real) = real!($name, fn($($ty),*)) else { return missing(stringify!($name), &SAID) };
            // SAFETY: forwarding the caller's arguments unchanged to the real function.
            traced($args, || unsafe { real($($arg),*) }, |_result| { $(let $res = _result; $after;)? })
        }
    };
}

fn comm_key(comm: NcclComm) -> u64 {
    comm as u64
}

fn on_comm(op: NcclOp, comm: NcclComm) -> CallArgs {
    CallArgs::on_comm(op, comm_key(comm))
}

fn data_call(
    op: NcclOp,
    comm: NcclComm,
    count: usize,
    dtype: NcclDataType,
    redop: NcclRedOp,
    peer: c_int,
    stream: CudaStream,
) -> CallArgs {
    CallArgs { count: count as u64, dtype, redop, peer, stream: stream as u64, ..on_comm(op, comm) }
}

/// Reads an out-parameter the real library has just written, if it succeeded.
fn read_out(result: NcclResult, out: *const c_int) -> Option<c_int> {
    // SAFETY: NCCL wrote `*out` when it returned success; the caller gave us the pointer.
    (result == NCCL_SUCCESS && !out.is_null()).then(|| unsafe { *out })
}

door! {
    fn ncclGetVersion(version: *mut c_int) => CallArgs::bare(NcclOp::GetVersion),
        after |result| { if let Some(v) = read_out(result, version) { tracer::observed_nccl_version(v) } };
}

door! {
    fn ncclGetUniqueId(unique_id: *mut NcclUniqueId) => CallArgs::bare(NcclOp::GetUniqueId);
}

door! {
    fn ncclCommDestroy(comm: NcclComm) => on_comm(NcclOp::CommDestroy, comm),
        after |_result| tracer::comm_ended(comm_key(comm));
}

door! {
    fn ncclCommAbort(comm: NcclComm) => on_comm(NcclOp::CommAbort, comm),
        after |_result| tracer::comm_ended(comm_key(comm));
}

door! {
    fn ncclCommCount(comm: NcclComm, count: *mut c_int) => on_comm(NcclOp::CommCount, comm),
        after |result| tracer::observed_comm_shape(comm_key(comm), None, read_out(result, count));
}

door! {
    fn ncclCommUserRank(comm: NcclComm, rank: *mut c_int) => on_comm(NcclOp::CommUserRank, comm),
        after |result| tracer::observed_comm_shape(comm_key(comm), read_out(result, rank), None);
}

door! {
    fn ncclCommCuDevice(comm: NcclComm, device: *mut c_int) => on_comm(NcclOp::CommCuDevice, comm);
}

door! {
    fn ncclAllReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, op: NcclRedOp, comm: NcclComm, stream: CudaStream)
        => data_call(NcclOp::AllReduce, comm, count, datatype, op, -1, stream);
}

door! {
    fn ncclBroadcast(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, root: c_int, comm: NcclComm, stream: CudaStream)
        => data_call(NcclOp::Broadcast, comm, count, datatype, -1, root, stream);
}

door! {
    fn ncclBcast(buff: *mut c_void, count: usize, datatype: NcclDataType, root: c_int, comm: NcclComm, stream: CudaStream)
        => data_call(NcclOp::Bcast, comm, count, datatype, -1, root, stream);
}

door! {
    fn ncclReduce(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, op: NcclRedOp, root: c_int, comm: NcclComm, stream: CudaStream)
        => data_call(NcclOp::Reduce, comm, count, datatype, op, root, stream);
}

door! {
    fn ncclAllGather(sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize, datatype: NcclDataType, comm: NcclComm, stream: CudaStream)
        => data_call(NcclOp::AllGather, comm, sendcount, datatype, -1, -1, stream);
}

door! {
    fn ncclReduceScatter(sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize, datatype: NcclDataType, op: NcclRedOp, comm: NcclComm, stream: CudaStream)
        => data_call(NcclOp::ReduceScatter, comm, recvcount, datatype, op, -1, stream);
}

door! {
    fn ncclAlltoAll(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, comm: NcclComm, stream: CudaStream)
        => data_call(NcclOp::AlltoAll, comm, count, datatype, -1, -1, stream);
}

door! {
    fn ncclSend(sendbuff: *const c_void, count: usize, datatype: NcclDataType, peer: c_int, comm: NcclComm, stream: CudaStream)
        => data_call(NcclOp::Send, comm, count, datatype, -1, peer, stream);
}

door! {
    fn ncclRecv(recvbuff: *mut c_void, count: usize, datatype: NcclDataType, peer: c_int, comm: NcclComm, stream: CudaStream)
        => data_call(NcclOp::Recv, comm, count, datatype, -1, peer, stream);
}

door! {
    fn ncclGroupStart() => CallArgs::bare(NcclOp::GroupStart),
        after |result| { if result == NCCL_SUCCESS { thread_state::adjust_group_depth(1) } };
}

// NCCL's ncclGroupEndInternal decrements the thread's depth before it checks the group's
// error, so every end inside a group closes one level whatever it returns; the only end
// that leaves the depth alone is one outside any group (depth 0, where the count stays 0).
// ncclGroupSimulateEnd runs the same function (src/group.cc, 2.18 to 2.30).

door! {
    fn ncclGroupEnd() => CallArgs::bare(NcclOp::GroupEnd),
        after |_result| thread_state::adjust_group_depth(-1);
}

door! {
    fn ncclGroupSimulateEnd(sim_info: NcclSimInfo) => CallArgs::bare(NcclOp::GroupSimulateEnd),
        after |_result| thread_state::adjust_group_depth(-1);
}

// Entry points of NCCL 2.19 to 2.32 beyond the classic API, with nccl.h 2.32.3's
// signatures: a job that uses only these is as visible as one that uses the classic API.

door! {
    fn ncclGather(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, root: c_int, comm: NcclComm, stream: CudaStream)
        => data_call(NcclOp::Gather, comm, count, datatype, -1, root, stream);
}

door! {
    fn ncclScatter(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, root: c_int, comm: NcclComm, stream: CudaStream)
        => data_call(NcclOp::Scatter, comm, count, datatype, -1, root, stream);
}

door! {
    fn ncclAllReduceConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, op: NcclRedOp, comm: NcclComm, stream: CudaStream, config: NcclCollConfig)
        => data_call(NcclOp::AllReduceConfig, comm, count, datatype, op, -1, stream);
}

door! {
    fn ncclBroadcastConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, root: c_int, comm: NcclComm, stream: CudaStream, config: NcclCollConfig)
        => data_call(NcclOp::BroadcastConfig, comm, count, datatype, -1, root, stream);
}

door! {
    fn ncclReduceConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, op: NcclRedOp, root: c_int, comm: NcclComm, stream: CudaStream, config: NcclCollConfig)
        => data_call(NcclOp::ReduceConfig, comm, count, datatype, op, root, stream);
}

door! {
    fn ncclAllGatherConfig(sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize, datatype: NcclDataType, comm: NcclComm, stream: CudaStream, config: NcclCollConfig)
        => data_call(NcclOp::AllGatherConfig, comm, sendcount, datatype, -1, -1, stream);
}

door! {
    fn ncclReduceScatterConfig(sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize, datatype: NcclDataType, op: NcclRedOp, comm: NcclComm, stream: CudaStream, config: NcclCollConfig)
        => data_call(NcclOp::ReduceScatterConfig, comm, recvcount, datatype, op, -1, stream);
}

door! {
    fn ncclAlltoAllConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, comm: NcclComm, stream: CudaStream, config: NcclCollConfig)
        => data_call(NcclOp::AlltoAllConfig, comm, count, datatype, -1, -1, stream);
}

door! {
    fn ncclGatherConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, root: c_int, comm: NcclComm, stream: CudaStream, config: NcclCollConfig)
        => data_call(NcclOp::GatherConfig, comm, count, datatype, -1, root, stream);
}

door! {
    fn ncclScatterConfig(sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: NcclDataType, root: c_int, comm: NcclComm, stream: CudaStream, config: NcclCollConfig)
        => data_call(NcclOp::ScatterConfig, comm, count, datatype, -1, root, stream);
}

door! {
    fn ncclPutSignal(localbuff: *const c_void, count: usize, datatype: NcclDataType, peer: c_int, peer_win: NcclWindow, peer_win_offset: usize, sig_idx: c_int, ctx: c_int, flags: c_uint, comm: NcclComm, stream: CudaStream)
        => data_call(NcclOp::PutSignal, comm, count, datatype, -1, peer, stream);
}

door! {
    fn ncclSignal(peer: c_int, sig_idx: c_int, ctx: c_int, flags: c_uint, comm: NcclComm, stream: CudaStream)
        => data_call(NcclOp::Signal, comm, 0, -1, -1, peer, stream);
}

door! {
    /// `count` records the number of descriptors waited on.
    fn ncclWaitSignal(n_desc: c_int, signal_descs: *mut c_void, comm: NcclComm, stream: CudaStream)
        => data_call(NcclOp::WaitSignal, comm, n_desc.max(0) as usize, -1, -1, -1, stream);
}

door! {
    fn ncclCommFinalize(comm: NcclComm) => on_comm(NcclOp::CommFinalize, comm);
}

/// PyTorch's watchdog polls this for every communicator many times a second (three polls
/// per allreduce with torch 2.11 on an H100): recorded, the polls filled most of the ring
/// and evicted the collectives. A poll that finds no error is counted in the header
/// (`NCCL_POLLS`), and so is one that finds `ncclInProgress`: NCCL's src/group.cc sets it
/// while a nonblocking communicator's work is pending, and PyTorch polls in a loop until
/// it clears. One that finds an error, or fails, is recorded, its `result` the error found.
///
/// # Safety
/// Called by C code under NCCL's contract (nccl.h); `async_error` is written by the real
/// library. Forwarded unchanged.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommGetAsyncError(comm: NcclComm, async_error: *mut NcclResult) -> NcclResult {
    static SAID: AtomicBool = AtomicBool::new(false);
    let Some(real) = real!(ncclCommGetAsyncError, fn(NcclComm, *mut NcclResult)) else {
        return missing("ncclCommGetAsyncError", &SAID);
    };
    let Some(guard) = ReentrancyGuard::enter() else {
        // SAFETY: forwarding the caller's arguments unchanged.
        return unsafe { real(comm, async_error) };
    };
    let args = on_comm(NcclOp::CommGetAsyncError, comm);
    let pending = shielded(|| tracer::begin(&args, &guard)).flatten();
    let early = begin_early(&pending, &args, &guard);
    // SAFETY: forwarding the caller's arguments unchanged.
    let result = unsafe { real(comm, async_error) };
    // None: a poll that found nothing (counted); else the result the call is recorded with.
    let recorded = || match (result, read_out(result, async_error)) {
        (NCCL_SUCCESS, Some(NCCL_SUCCESS | NCCL_IN_PROGRESS) | None) => None,
        (NCCL_SUCCESS, Some(found)) => Some(found),
        (failed, _) => Some(failed),
    };
    if let Some(pending) = pending {
        shielded(|| match recorded() {
            None => tracer::count_poll(pending),
            Some(result) => tracer::end(pending, result),
        });
    } else if let Some(call) = early {
        shielded(|| match recorded() {
            None => tracer::count_poll_while_starting(),
            Some(result) => tracer::end_while_starting(call, result),
        });
    }
    result
}

door! {
    fn ncclCommRevoke(comm: NcclComm, revoke_flags: c_int) => on_comm(NcclOp::CommRevoke, comm);
}

door! {
    fn ncclCommSuspend(comm: NcclComm, flags: c_int) => on_comm(NcclOp::CommSuspend, comm);
}

door! {
    fn ncclCommResume(comm: NcclComm) => on_comm(NcclOp::CommResume, comm);
}

door! {
    /// `count` records the registered size in bytes.
    fn ncclCommRegister(comm: NcclComm, buff: *mut c_void, size: usize, handle: *mut *mut c_void)
        => CallArgs { count: size as u64, ..on_comm(NcclOp::CommRegister, comm) };
}

door! {
    fn ncclCommDeregister(comm: NcclComm, handle: *mut c_void) => on_comm(NcclOp::CommDeregister, comm);
}

door! {
    /// `count` records the window's size in bytes.
    fn ncclCommWindowRegister(comm: NcclComm, buff: *mut c_void, size: usize, win: *mut NcclWindow, win_flags: c_int)
        => CallArgs { count: size as u64, ..on_comm(NcclOp::CommWindowRegister, comm) };
}

door! {
    fn ncclCommWindowDeregister(comm: NcclComm, win: NcclWindow) => on_comm(NcclOp::CommWindowDeregister, comm);
}

/// Creation doors: derive the job-wide id before forwarding (the unique id or parent is
/// an argument), register the new handle after.
fn creating(
    op: NcclOp,
    kind: impl FnOnce() -> NewComm,
    forward: impl FnOnce() -> NcclResult,
    created: impl FnOnce(&tracer::PendingComm),
) -> NcclResult {
    let Some(guard) = ReentrancyGuard::enter() else {
        return forward();
    };
    let pending_comm = shielded(|| tracer::comm_creation(kind())).flatten();
    let args = CallArgs::bare(op);
    let pending_call = shielded(|| tracer::begin(&args, &guard)).flatten();
    let early_call = begin_early(&pending_call, &args, &guard);
    let result = forward();
    shielded(|| {
        register_version_probe();
        if let Some(pending) = pending_call {
            tracer::end(pending, result);
        }
        if let Some(call) = early_call {
            tracer::end_while_starting(call, result);
        }
        if let (Some(comm), true) = (&pending_comm, result == NCCL_SUCCESS || result == NCCL_IN_PROGRESS) {
            created(comm);
        }
    });
    result
}

/// The first communicator a process creates from a unique id names its rank when nothing
/// stronger did (`runtime::identity` gives the order); a process waiting for its rank
/// starts recording here, before the call is forwarded, so the call itself is recorded.
fn declare_rank(rank: c_int, nranks: c_int) {
    if let Some(declaration) = Declaration::new(DeclaredBy::Nccl, rank, nranks) {
        shielded(|| start::declare(declaration));
    }
}

/// Reads the communicator handle NCCL stored through `out`.
fn handle_at(out: *const NcclComm, index: usize) -> u64 {
    // SAFETY: called only after NCCL returned success or in-progress, which means it wrote
    // `out[index]` (index < ndev for ncclCommInitAll, 0 otherwise); the pointer is the
    // caller's and was checked non-null.
    comm_key(unsafe { *out.add(index) })
}

/// # Safety
/// Called by C code under NCCL's contract (nccl.h); `comm` is written by the real library.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut NcclComm,
    nranks: c_int,
    comm_id: NcclUniqueId,
    rank: c_int,
) -> NcclResult {
    let Some(real) = real!(ncclCommInitRank, fn(*mut NcclComm, c_int, NcclUniqueId, c_int)) else {
        static SAID: AtomicBool = AtomicBool::new(false);
        return missing("ncclCommInitRank", &SAID);
    };
    declare_rank(rank, nranks);
    creating(
        NcclOp::CommInitRank,
        || NewComm::FromUniqueId(CommOrigin::InitRank, comm_id.bytes()),
        // SAFETY: forwarding the caller's arguments unchanged.
        || unsafe { real(comm, nranks, comm_id, rank) },
        |pending| {
            if !comm.is_null() {
                tracer::comm_created(pending, handle_at(comm, 0), rank, nranks)
            }
        },
    )
}

/// # Safety
/// Called by C code under NCCL's contract (nccl.h); output handles are written by the real
/// library.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    comm: *mut NcclComm,
    nranks: c_int,
    comm_id: NcclUniqueId,
    rank: c_int,
    config: NcclConfig,
) -> NcclResult {
    let Some(real) = real!(ncclCommInitRankConfig, fn(*mut NcclComm, c_int, NcclUniqueId, c_int, NcclConfig)) else {
        static SAID: AtomicBool = AtomicBool::new(false);
        return missing("ncclCommInitRankConfig", &SAID);
    };
    declare_rank(rank, nranks);
    creating(
        NcclOp::CommInitRankConfig,
        || NewComm::FromUniqueId(CommOrigin::InitRankConfig, comm_id.bytes()),
        // SAFETY: forwarding the caller's arguments unchanged.
        || unsafe { real(comm, nranks, comm_id, rank, config) },
        |pending| {
            if !comm.is_null() {
                tracer::comm_created(pending, handle_at(comm, 0), rank, nranks)
            }
        },
    )
}

/// # Safety
/// Called by C code under NCCL's contract (nccl.h); output handles are written by the real
/// library.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommInitAll(comms: *mut NcclComm, ndev: c_int, devlist: *const c_int) -> NcclResult {
    let Some(real) = real!(ncclCommInitAll, fn(*mut NcclComm, c_int, *const c_int)) else {
        static SAID: AtomicBool = AtomicBool::new(false);
        return missing("ncclCommInitAll", &SAID);
    };
    creating(
        NcclOp::CommInitAll,
        || NewComm::InitAll { call: tracer::next_init_all_call() },
        // SAFETY: forwarding the caller's arguments unchanged.
        || unsafe { real(comms, ndev, devlist) },
        |pending| {
            if !comms.is_null() {
                for rank in 0..ndev.max(0) {
                    tracer::comm_created(pending, handle_at(comms, rank as usize), rank, ndev);
                }
            }
        },
    )
}

/// # Safety
/// Called by C code under NCCL's contract (nccl.h); output handles are written by the real
/// library.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommSplit(
    comm: NcclComm,
    color: c_int,
    key: c_int,
    newcomm: *mut NcclComm,
    config: NcclConfig,
) -> NcclResult {
    let Some(real) = real!(ncclCommSplit, fn(NcclComm, c_int, c_int, *mut NcclComm, NcclConfig)) else {
        static SAID: AtomicBool = AtomicBool::new(false);
        return missing("ncclCommSplit", &SAID);
    };
    creating(
        NcclOp::CommSplit,
        || NewComm::Split { parent: comm_key(comm), color, key },
        // SAFETY: forwarding the caller's arguments unchanged.
        || unsafe { real(comm, color, key, newcomm, config) },
        |pending| {
            // NCCL_SPLIT_NOCOLOR leaves *newcomm NULL: no communicator to register.
            if !newcomm.is_null() && handle_at(newcomm, 0) != 0 {
                tracer::comm_created(pending, handle_at(newcomm, 0), -1, -1)
            }
        },
    )
}

/// The most unique ids a Scalable init hashes: NCCL takes up to one per rank, every rank
/// passes the same list, and the first ones already tell communicators apart.
const SCALABLE_IDS_HASHED: usize = 64;

/// # Safety
/// Called by C code under NCCL's contract (nccl.h 2.23.4+): `comm_ids` points at `n_id`
/// unique ids; `newcomm` is written by the real library.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankScalable(
    newcomm: *mut NcclComm,
    nranks: c_int,
    myrank: c_int,
    n_id: c_int,
    comm_ids: *mut NcclUniqueId,
    config: NcclConfig,
) -> NcclResult {
    let Some(real) =
        real!(ncclCommInitRankScalable, fn(*mut NcclComm, c_int, c_int, c_int, *mut NcclUniqueId, NcclConfig))
    else {
        static SAID: AtomicBool = AtomicBool::new(false);
        return missing("ncclCommInitRankScalable", &SAID);
    };
    declare_rank(myrank, nranks);
    let ids = || {
        let n = if comm_ids.is_null() { 0 } else { (n_id.max(0) as usize).min(SCALABLE_IDS_HASHED) };
        // SAFETY: NCCL's contract: `comm_ids` holds `n_id` ids, of which we read at most
        // the first `n`; a null pointer or a non-positive count reads nothing.
        let ids: Vec<[u8; 128]> = (0..n).map(|i| unsafe { (*comm_ids.add(i)).bytes() }).collect();
        NewComm::Scalable { id: comm_identity::from_unique_ids(&ids) }
    };
    creating(
        NcclOp::CommInitRankScalable,
        ids,
        // SAFETY: forwarding the caller's arguments unchanged.
        || unsafe { real(newcomm, nranks, myrank, n_id, comm_ids, config) },
        |pending| {
            if !newcomm.is_null() {
                tracer::comm_created(pending, handle_at(newcomm, 0), myrank, nranks)
            }
        },
    )
}

/// The most excluded ranks a shrink hashes (the list is the same on every caller).
const SHRINK_EXCLUDED_HASHED: usize = 4096;

/// # Safety
/// Called by C code under NCCL's contract (nccl.h 2.27.3+): `exclude_ranks_list` holds
/// `exclude_ranks_count` ranks; `newcomm` is written by the real library.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommShrink(
    comm: NcclComm,
    exclude_ranks_list: *mut c_int,
    exclude_ranks_count: c_int,
    newcomm: *mut NcclComm,
    config: NcclConfig,
    shrink_flags: c_int,
) -> NcclResult {
    let Some(real) = real!(ncclCommShrink, fn(NcclComm, *mut c_int, c_int, *mut NcclComm, NcclConfig, c_int)) else {
        static SAID: AtomicBool = AtomicBool::new(false);
        return missing("ncclCommShrink", &SAID);
    };
    let kind = || {
        let n = if exclude_ranks_list.is_null() {
            0
        } else {
            (exclude_ranks_count.max(0) as usize).min(SHRINK_EXCLUDED_HASHED)
        };
        // SAFETY: NCCL's contract: the list holds `exclude_ranks_count` ranks; we read at
        // most the first `n`.
        // (A null list never reaches from_raw_parts: even an empty slice needs a non-null,
        // aligned pointer.)
        let excluded =
            if n == 0 { Vec::new() } else { unsafe { std::slice::from_raw_parts(exclude_ranks_list, n) }.to_vec() };
        NewComm::Shrink { parent: comm_key(comm), excluded }
    };
    creating(
        NcclOp::CommShrink,
        kind,
        // SAFETY: forwarding the caller's arguments unchanged.
        || unsafe { real(comm, exclude_ranks_list, exclude_ranks_count, newcomm, config, shrink_flags) },
        |pending| {
            if !newcomm.is_null() && handle_at(newcomm, 0) != 0 {
                tracer::comm_created(pending, handle_at(newcomm, 0), -1, -1)
            }
        },
    )
}

/// # Safety
/// Called by C code under NCCL's contract (nccl.h 2.29.2+): existing ranks pass their
/// communicator and rank -1, new ranks a null communicator, the root's unique id and
/// their rank; `newcomm` is written by the real library.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ncclCommGrow(
    comm: NcclComm,
    n_ranks: c_int,
    unique_id: *const NcclUniqueId,
    rank: c_int,
    newcomm: *mut NcclComm,
    config: NcclConfig,
) -> NcclResult {
    let Some(real) = real!(ncclCommGrow, fn(NcclComm, c_int, *const NcclUniqueId, c_int, *mut NcclComm, NcclConfig))
    else {
        static SAID: AtomicBool = AtomicBool::new(false);
        return missing("ncclCommGrow", &SAID);
    };
    let kind = || match (comm.is_null(), unique_id.is_null()) {
        (false, no_uid) => NewComm::GrowExisting {
            parent: comm_key(comm),
            nranks: n_ranks,
            // SAFETY: the root's unique id is a valid 128-byte struct (NCCL's contract).
            uid: (!no_uid).then(|| unsafe { (*unique_id).bytes() }),
        },
        // SAFETY: a new rank's unique id is a valid 128-byte struct (NCCL's contract).
        (true, false) => NewComm::GrowNew(unsafe { (*unique_id).bytes() }),
        // NCCL refuses this call: the id is never registered.
        (true, true) => NewComm::GrowNew([0; 128]),
    };
    creating(
        NcclOp::CommGrow,
        kind,
        // SAFETY: forwarding the caller's arguments unchanged.
        || unsafe { real(comm, n_ranks, unique_id, rank, newcomm, config) },
        |pending| {
            if !newcomm.is_null() && handle_at(newcomm, 0) != 0 {
                let rank = if comm.is_null() { rank } else { -1 };
                tracer::comm_created(pending, handle_at(newcomm, 0), rank, n_ranks)
            }
        },
    )
}

/// Lets the collector learn the NCCL version even if the application never asks for it.
fn register_version_probe() {
    doors::opened(doors::PRELOAD);
    if let Some(real) = real!(ncclGetVersion, fn(*mut c_int)) {
        runtime::register_version_probe(real);
    }
}
