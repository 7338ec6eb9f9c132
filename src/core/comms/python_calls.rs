//! Collectives and send/recv a program issues from Python on a `torch.distributed`
//! process group that NCCL does not run (gloo): the Python door reports each group once
//! and brackets each call, and they are recorded as NCCL's are (`nccl_call` records, the
//! live communicator table), so the wait attribution and `sf hang` read them alike. A
//! call's entry and return come through two C calls, so its record waits in between in
//! this thread's slot; Python never nests them (the door passes nested calls through).

use std::cell::RefCell;
use std::sync::Mutex;

use crate::core::comms::tracer::{self, CallArgs, Pending};
use crate::core::live::event::Event;
use crate::core::live::runtime;
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::records::{GroupDesc, RecordBody, Text};
use crate::core::record::clock::now_ticks;
use crate::core::record::thread_state::ReentrancyGuard;

/// Set in every handle the door's groups get: user-space pointers (an `ncclComm_t`) never
/// have the top bit, so a group's number never names a communicator of NCCL's.
const GROUP_HANDLE: u64 = 1 << 63;

thread_local! {
    /// The call this thread is inside, between `begin` and `end`.
    static OPEN: RefCell<Option<Pending>> = const { RefCell::new(None) };
}

/// Group `group` of this process is communicator `comm_id` (the same on every member),
/// where this process is `rank` of `nranks`.
pub fn group(group: u64, comm_id: u64, rank: i32, nranks: i32) {
    if let Some(rt) = runtime::active() {
        tracer::register_process_group(rt, GROUP_HANDLE | group, comm_id, rank, nranks);
    }
}

/// This process is a member of a group of `size` ranks described as `desc`, whose
/// members' id is `members_id` (`records_groups::members_id`): written to the history
/// ring, as communicator creations are, so it outlives the run's calls.
pub fn group_desc(members_id: u64, size: i32, desc: &[u8]) {
    if let Some(rt) = runtime::active() {
        let desc = Text::new(desc);
        let record = GroupDesc { t_ns: now_ticks(), members_id, size, global_rank: rt.global_rank(), desc };
        rt.ring.push(Event::Record(RecordBody::GroupDesc(record)));
    }
}

/// Enters a call on `group`; whether it is recorded (then `end` records its return).
pub fn begin(group: u64, op: NcclOp, count: u64, dtype: i32, peer: i32) -> bool {
    let Some(guard) = ReentrancyGuard::enter() else { return false };
    let args = CallArgs { op, comm: GROUP_HANDLE | group, count, dtype, redop: -1, peer, stream: 0 };
    let Some(pending) = tracer::begin(&args, &guard) else { return false };
    OPEN.with(|open| *open.borrow_mut() = Some(pending));
    true
}

/// The return of the call `begin` entered on this thread.
pub fn end() {
    if let Some(pending) = OPEN.with(|open| open.borrow_mut().take()) {
        tracer::end(pending, 0);
    }
}

/// Asynchronous calls (`async_op=True`, `isend`/`irecv`) returned but not yet waited for:
/// their records stay open until `Work.wait` returns, since that is where the host waits
/// for its peers. A fixed table: a program that never waits fills it, and then a call is
/// recorded as returning where it was issued, as before.
const DETACHED: usize = 64;

struct Detached {
    next_token: u64,
    calls: [Option<(u64, Pending)>; DETACHED],
}

static DETACHED_CALLS: Mutex<Detached> = Mutex::new(Detached { next_token: 1, calls: [const { None }; DETACHED] });

/// The call `begin` entered on this thread returned a handle to wait on: its record stays
/// open under the token returned (0: recorded as returned now, the table being full or
/// no call open).
pub fn detach() -> u64 {
    let Some(pending) = OPEN.with(|open| open.borrow_mut().take()) else { return 0 };
    let Ok(mut table) = DETACHED_CALLS.lock() else {
        tracer::end(pending, 0);
        return 0;
    };
    let token = table.next_token;
    match table.calls.iter_mut().find(|c| c.is_none()) {
        Some(free) => {
            *free = Some((token, pending));
            table.next_token += 1;
            token
        }
        None => {
            drop(table);
            tracer::end(pending, 0);
            0
        }
    }
}

/// The program waits on a detached call: its communicator's live state shows the rank
/// inside it again (its entry time as it was), for `sf hang` to see while it waits.
pub fn wait_begin(token: u64) {
    let Ok(table) = DETACHED_CALLS.lock() else { return };
    if let Some((_, pending)) = table.calls.iter().flatten().find(|(t, _)| *t == token) {
        pending.mark_in_flight();
    }
}

/// The wait on a detached call returned: its record ends here.
pub fn wait_end(token: u64) {
    let taken = match DETACHED_CALLS.lock() {
        Ok(mut table) => {
            table.calls.iter_mut().find(|c| c.as_ref().is_some_and(|(t, _)| *t == token)).and_then(Option::take)
        }
        Err(_) => None,
    };
    if let Some((_, pending)) = taken {
        tracer::end(pending, 0);
    }
}
