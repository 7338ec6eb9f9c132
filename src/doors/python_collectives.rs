//! The C calls the Python door (python/stagefrontier_torch.py) makes around the
//! collectives and send/recv a program issues from Python on a process group NCCL does
//! not run (gloo). Declared in c_headers/stagefrontier.h; no-ops while nothing records.

use std::ffi::c_int;

use crate::core::comms::python_calls;
use crate::core::log::nccl_op::NcclOp;
use crate::core::record::doors;
use crate::doors::traced::shielded;

/// Process group `group` (the door's number for it, unique in the process) is the
/// communicator `group_id` on every member (a hash of its name and members), where this
/// process is `rank` of `size`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sf_py_group(group: u64, group_id: u64, rank: c_int, size: c_int) {
    doors::opened(doors::PYTHON);
    shielded(|| python_calls::group(group, group_id, rank, size));
}

/// Enters a call on `group`: `op` as the log numbers NCCL's calls (`NcclOp`), `count`
/// elements of NCCL data type `dtype` (-1 unknown), `peer` the group rank of the root or
/// peer (-1 none). 1 when recorded, and then `sf_py_call_end` follows on this thread.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sf_py_call_begin(group: u64, op: c_int, count: u64, dtype: c_int, peer: c_int) -> c_int {
    let Some(op) = u16::try_from(op).ok().and_then(NcclOp::from_u16) else { return 0 };
    shielded(|| python_calls::begin(group, op, count, dtype, peer) as c_int).unwrap_or(0)
}

/// The call `sf_py_call_begin` entered on this thread has returned.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sf_py_call_end() {
    shielded(python_calls::end);
}

/// The call `sf_py_call_begin` entered on this thread returned a handle to wait on
/// (`async_op=True`, `isend`/`irecv`): its record stays open until `sf_py_wait_end` with
/// the token returned; 0 when it was recorded as returned now instead.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sf_py_call_detach() -> u64 {
    shielded(python_calls::detach).unwrap_or(0)
}

/// The program waits on the detached call `token` (`Work.wait` entered).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sf_py_wait_begin(token: u64) {
    shielded(|| python_calls::wait_begin(token));
}

/// The wait on the detached call `token` returned: its record ends now.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sf_py_wait_end(token: u64) {
    shielded(|| python_calls::wait_end(token));
}
