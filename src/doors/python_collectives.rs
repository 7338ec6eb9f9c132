//! The C calls the Python door (python/stagefrontier_torch.py) makes around the
//! collectives and send/recv a program issues from Python on a process group NCCL does
//! not run (gloo). Declared in c_headers/stagefrontier.h; no-ops while nothing records.

use std::ffi::{c_char, c_int};

use crate::core::comms::python_calls;
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::records_groups::DESC_BYTES;
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

/// This process is a member of a process group of `size` ranks described as the `len`
/// bytes at `desc` (`torch.distributed.new_group(group_desc=...)`), whose members' global
/// ranks, ascending and joined by ",", hash (FNV-1a) to `members_id`. Only the first
/// `records_groups::DESC_BYTES` bytes are read.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn sf_py_group_desc(members_id: u64, size: c_int, desc: *const c_char, len: usize) {
    if desc.is_null() {
        return;
    }
    doors::opened(doors::PYTHON);
    let len = len.min(DESC_BYTES);
    // SAFETY: the door passes a bytes object's buffer of at least `len` bytes, alive for
    // the call; no more than that (bounded above) is read, and it is copied before return.
    let desc = unsafe { std::slice::from_raw_parts(desc.cast::<u8>(), len) };
    shielded(|| python_calls::group_desc(members_id, size, desc));
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
