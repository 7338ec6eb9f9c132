//! The LD_PRELOAD door: NCCL's C API, each entry forwarding to the real library.

// The exported names are NCCL's C names.
#![allow(non_snake_case)]

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::core::capture::doors;
use crate::core::capture::notice::say;
use crate::core::capture::runtime;
use crate::core::capture::thread_state::{self, ReentrancyGuard};
use crate::core::capture::tracer::{self, CallArgs, NewComm};
use crate::core::comms::nccl_op::NcclOp;
use crate::core::log::records::CommOrigin;
use crate::doors::comms::nccl_abi::*;
use crate::doors::real_symbol::RealSymbol;
use crate::doors::traced::{shielded, traced};

/// When no NCCL is loaded behind the library the call cannot be forwarded; the
/// application gets NCCL's own code for a failure outside its control.
fn missing(name: &str) -> NcclResult {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        say(&format!("{name}: no NCCL library is loaded behind the preload; returning ncclInternalError"));
    }
    NCCL_INTERNAL_ERROR
}

/// Resolves the real `$name` with the hook's own signature.
macro_rules! real {
    ($name:ident, fn($($ty:ty),*)) => {{
        static REAL: RealSymbol = RealSymbol::new(
            match std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                Ok(name) => name,
                Err(_) => panic!("symbol name"),
            },
            match std::ffi::CStr::from_bytes_with_nul(concat!("p", stringify!($name), "\0").as_bytes()) {
                Ok(name) => name,
                Err(_) => panic!("symbol name"),
            },
        );
        match REAL.get() {
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
            let Some(real) = real!($name, fn($($ty),*)) else { return missing(stringify!($name)) };
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

door! {
    fn ncclGroupEnd() => CallArgs::bare(NcclOp::GroupEnd),
        after |result| { if result == NCCL_SUCCESS || result == NCCL_IN_PROGRESS { thread_state::adjust_group_depth(-1) } };
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
    let pending_call = shielded(|| tracer::begin(&CallArgs::bare(op), &guard)).flatten();
    let result = forward();
    shielded(|| {
        register_version_probe();
        if let Some(pending) = pending_call {
            tracer::end(pending, result);
        }
        if let (Some(comm), true) = (&pending_comm, result == NCCL_SUCCESS || result == NCCL_IN_PROGRESS) {
            created(comm);
        }
    });
    result
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
        return missing("ncclCommInitRank");
    };
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
        return missing("ncclCommInitRankConfig");
    };
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
        return missing("ncclCommInitAll");
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
        return missing("ncclCommSplit");
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

/// Lets the collector learn the NCCL version even if the application never asks for it.
fn register_version_probe() {
    doors::opened(doors::PRELOAD);
    if let Some(real) = real!(ncclGetVersion, fn(*mut c_int)) {
        runtime::register_version_probe(real);
    }
}
