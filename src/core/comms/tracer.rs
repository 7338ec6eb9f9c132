//! What a hook records, in safe Rust: timestamps, the communicator's sequence number and
//! live state, and one fixed-size event pushed into the ring. No allocation, no lock, no
//! syscall beyond the clock (and one `gettid` per thread, ever).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::core::comms::comm_identity;
use crate::core::comms::early::{self, Early, Pushed};
use crate::core::inject::{self, Firing, Site};
use crate::core::live::event::Event;
use crate::core::live::runtime::{self, Runtime};
use crate::core::log::comm_table::{CommSlot, Registration};
use crate::core::log::format::live;
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::records::{CommCreated, CommOrigin, InjectAction, Injection, NcclCall, RecordBody};
use crate::core::record::clock::now_ticks;
use crate::core::record::thread_state::{NcclLink, ReentrancyGuard};

/// The arguments of an intercepted call that records keep.
#[derive(Clone, Copy)]
pub struct CallArgs {
    pub op: NcclOp,
    /// `ncclComm_t` as an integer, 0 for calls without one.
    pub comm: u64,
    pub count: u64,
    pub dtype: i32,
    pub redop: i32,
    /// Root or peer, -1 when the call has neither.
    pub peer: i32,
    pub stream: u64,
}

impl CallArgs {
    /// A call with no communicator and no data (version, unique id, groups).
    pub fn bare(op: NcclOp) -> CallArgs {
        CallArgs::on_comm(op, 0)
    }

    pub fn on_comm(op: NcclOp, comm: u64) -> CallArgs {
        CallArgs { op, comm, count: 0, dtype: -1, redop: -1, peer: -1, stream: 0 }
    }
}

/// A call between its entry and its return.
pub struct Pending {
    rt: &'static Runtime,
    slot: Option<&'static CommSlot>,
    call: NcclCall,
    forced_result: Option<i32>,
}

impl Pending {
    /// The result an `SF_INJECT` fail rule imposes: the call must not reach NCCL.
    pub fn forced_result(&self) -> Option<i32> {
        self.forced_result
    }

    /// Shows the call in flight on its communicator again, since its entry: a Python
    /// `Work.wait` on an asynchronous call that another call on the group has since
    /// replaced in the live table.
    pub fn mark_in_flight(&self) {
        if let (Some(slot), true) = (self.slot, self.call.seq != 0) {
            slot.inflight_op.store(self.call.op as u64, Ordering::Relaxed);
            slot.inflight_ticks.store(self.call.t_enter_ns, Ordering::Relaxed);
        }
    }
}

/// Records the entry of a call; `None` when not recording (and while another thread
/// starts the runtime: see `begin_while_starting`). The guard proves the caller is the
/// outermost hook on its thread and carries the thread's id and group depth.
#[inline]
pub fn begin(args: &CallArgs, thread: &ReentrancyGuard) -> Option<Pending> {
    let rt = runtime::active()?;
    let slot = if args.comm != 0 { comm_slot(rt, args.comm) } else { None };
    let entered = slot.and_then(|slot| {
        if args.op.is_collective() {
            Some(&slot.coll_entered)
        } else if args.op.is_p2p() {
            Some(&slot.p2p_entered)
        } else {
            None
        }
    });
    // NCCL forbids using one communicator from two threads at once, so the sequence
    // needs no locked read-modify-write.
    let seq = entered.map_or(0, |e| e.load(Ordering::Relaxed) + 1);
    let comm_id = slot.map_or(0, |s| s.comm_id.load(Ordering::Relaxed));
    let forced_result =
        if rt.injector.is_empty() || entered.is_none() { None } else { inject(rt, args.op, comm_id, seq) };
    let t_enter = now_ticks();
    if let (Some(slot), Some(entered), None) = (slot, entered, forced_result) {
        slot.inflight_op.store(args.op as u64, Ordering::Relaxed);
        slot.inflight_ticks.store(t_enter, Ordering::Relaxed);
        entered.store(seq, Ordering::Release);
        // The kernels this call (or its group's end) launches belong to it.
        thread.enter_nccl_call(NcclLink { comm_id, seq, op: args.op as u16 });
    }
    Some(Pending {
        rt,
        // A failed call never entered NCCL: its communicator's counters stay as they are.
        slot: slot.filter(|_| forced_result.is_none()),
        call: entered_call(args, thread, t_enter, comm_id, seq),
        forced_result,
    })
}

/// The record of a call as it enters NCCL; its return fills in the rest.
#[inline(always)]
fn entered_call(args: &CallArgs, thread: &ReentrancyGuard, t_enter_ns: u64, comm_id: u64, seq: u64) -> NcclCall {
    NcclCall {
        op: args.op,
        t_enter_ns,
        t_exit_ns: 0,
        comm_id,
        seq,
        count: args.count,
        bytes: 0,
        stream: args.stream,
        tid: thread.tid,
        peer: args.peer,
        dtype: args.dtype,
        redop: args.redop,
        result: 0,
        group_depth: thread.group_depth,
    }
}

/// A call made while another thread starts the runtime (`begin` said None and
/// `runtime::is_starting`): timed now, its communicator's handle kept in `comm_id`, numbered
/// in its communicator when it is replayed (`replay_call`). Kept apart from `begin` and
/// `end` so that the recording path stays as short as it was.
#[cold]
pub fn begin_while_starting(args: &CallArgs, thread: &ReentrancyGuard) -> Option<NcclCall> {
    runtime::is_starting().then(|| entered_call(args, thread, now_ticks(), args.comm, 0))
}

/// The return of a call `begin_while_starting` timed.
#[cold]
pub fn end_while_starting(mut call: NcclCall, result: i32) {
    call.t_exit_ns = now_ticks();
    call.result = result;
    hand_over(Early::Call(call));
}

/// A status poll that found nothing, made while the runtime was starting.
#[cold]
pub fn count_poll_while_starting() {
    hand_over(Early::Poll);
}

/// Queues what a hook saw while the runtime was starting; if the queue has just closed,
/// the runtime is there (or never will be) and takes it directly.
#[cold]
#[inline(never)]
fn hand_over(entry: Early) {
    if let Pushed::Closed(entry) = early::push(entry) {
        if let Some(rt) = runtime::after_start() {
            replay(rt, entry);
        }
    }
}

/// Applies what a hook saw while the runtime was starting, as the hook would have.
pub fn replay(rt: &'static Runtime, entry: Early) {
    match entry {
        Early::Call(call) => replay_call(rt, call),
        Early::Poll => {
            rt.live(live::NCCL_POLLS).fetch_add(1, Ordering::Relaxed);
        }
        Early::Created { kind, handle, rank, nranks, t_ns } => {
            if let Some(derived) = derive(rt, kind) {
                register_created(rt, &derived, handle, rank, nranks, t_ns);
            }
        }
        Early::Ended { handle } => rt.comms.unregister(handle),
        Early::Shape { handle, rank, nranks } => record_shape(rt, handle, rank, nranks),
        Early::Version(version) => rt.set_nccl_version(version),
    }
}

/// A call that began before the runtime was there: numbered in its communicator now. One
/// communicator's calls never overlap (NCCL's rule), so none came in between.
fn replay_call(rt: &'static Runtime, mut call: NcclCall) {
    let slot = if call.comm_id != 0 { comm_slot(rt, call.comm_id) } else { None };
    call.comm_id = slot.map_or(0, |s| s.comm_id.load(Ordering::Relaxed));
    let counters = slot.and_then(|slot| {
        if call.op.is_collective() {
            Some((&slot.coll_entered, &slot.coll_returned))
        } else if call.op.is_p2p() {
            Some((&slot.p2p_entered, &slot.p2p_returned))
        } else {
            None
        }
    });
    if let Some((entered, returned)) = counters {
        call.seq = entered.load(Ordering::Relaxed) + 1;
        entered.store(call.seq, Ordering::Release);
        returned.store(call.seq, Ordering::Release);
    }
    rt.ring.push(Event::Record(RecordBody::NcclCall(call)));
}

/// Applies the first matching `SF_INJECT` rule before the call enters NCCL, so a hung
/// rank shows as never having entered the collective its peers wait in.
#[cold]
fn inject(rt: &'static Runtime, op: NcclOp, comm_id: u64, comm_seq: u64) -> Option<i32> {
    let stage = rt.live(live::CURRENT_STAGE).load(Ordering::Relaxed).checked_sub(1).map(|id| id as u16);
    let stage_name = stage.and_then(|id| rt.stage_names.name(id));
    let site = Site {
        op: Some(op),
        comm_id,
        world_comm_id: rt.world_comm.load(Ordering::Relaxed),
        comm_seq,
        step: current_step(rt),
        stage: stage_name.as_ref().map(|(name, len)| &name[..*len]),
    };
    let firing = rt.injector.check(&site)?;
    fire(rt, &firing, Some(op), comm_id, comm_seq, site.step, stage);
    (firing.action == InjectAction::Fail).then_some(firing.result)
}

/// At a stage's begin or end: stage rules (`stage=` without a call) act at the end.
pub fn stage_boundary(rt: &'static Runtime, stage: u16, is_end: bool) {
    if rt.injector.is_empty() || !is_end {
        return;
    }
    let Some((name, len)) = rt.stage_names.name(stage) else { return };
    let site =
        Site { op: None, comm_id: 0, world_comm_id: 0, comm_seq: 0, step: current_step(rt), stage: Some(&name[..len]) };
    if let Some(firing) = rt.injector.check(&site) {
        fire(rt, &firing, None, 0, 0, site.step, Some(stage));
    }
}

fn current_step(rt: &Runtime) -> Option<u64> {
    rt.live(live::CURRENT_STEP).load(Ordering::Relaxed).checked_sub(1)
}

/// Writes the ground truth first, then acts: a hang never returns.
fn fire(
    rt: &Runtime,
    firing: &Firing,
    op: Option<NcclOp>,
    comm_id: u64,
    comm_seq: u64,
    step: Option<u64>,
    stage: Option<u16>,
) {
    rt.ring.push(Event::Record(RecordBody::Injection(Injection {
        t_ns: now_ticks(),
        action: firing.action,
        rule: firing.rule,
        op,
        comm_id,
        comm_seq,
        step,
        stage,
        delay_ns: firing.delay_ns,
        result: firing.result,
    })));
    inject::act(firing);
}

/// Records the return of a call with the real library's result.
#[inline]
pub fn end(mut pending: Pending, result: i32) {
    pending.call.t_exit_ns = now_ticks();
    pending.call.result = result;
    if let (Some(slot), seq) = (pending.slot, pending.call.seq) {
        if seq != 0 {
            slot.inflight_ticks.store(0, Ordering::Relaxed);
            let returned = if pending.call.op.is_collective() { &slot.coll_returned } else { &slot.p2p_returned };
            returned.store(seq, Ordering::Release);
        }
    }
    pending.rt.ring.push(Event::Record(RecordBody::NcclCall(pending.call)));
}

/// Counts a status poll that found nothing, instead of recording it.
pub fn count_poll(pending: Pending) {
    pending.rt.live(live::NCCL_POLLS).fetch_add(1, Ordering::Relaxed);
}

/// The slot of a communicator, registering one the library did not see created.
fn comm_slot(rt: &'static Runtime, handle: u64) -> Option<&'static CommSlot> {
    if let Some(slot) = rt.comms.find(handle) {
        return Some(slot);
    }
    let comm_id = comm_identity::for_unknown(&rt.host, rt.pid, handle);
    let created = CommCreated {
        t_ns: now_ticks(),
        comm_id,
        parent_id: 0,
        rank: -1,
        nranks: -1,
        global_rank: rt.global_rank(),
        color: -1,
        key: -1,
        origin: CommOrigin::Unknown,
    };
    register(rt, handle, created)
}

fn register(rt: &'static Runtime, handle: u64, created: CommCreated) -> Option<&'static CommSlot> {
    match rt.comms.register(handle, created.comm_id) {
        Registration::New(slot) | Registration::Existing(slot) => {
            slot.comm_id.store(created.comm_id, Ordering::Relaxed);
            slot.set_rank(created.rank, created.nranks);
            rt.ring.push(Event::Record(RecordBody::CommCreated(created)));
            Some(slot)
        }
        Registration::Full => {
            rt.count_comm_overflow();
            rt.ring.push(Event::Record(RecordBody::CommCreated(created)));
            None
        }
    }
}

/// A `torch.distributed` process group the Python door reports, as a communicator:
/// `handle` its number in this process (`python_calls` keeps it clear of `ncclComm_t`
/// values), `comm_id` the same on every member.
pub fn register_process_group(rt: &'static Runtime, handle: u64, comm_id: u64, rank: i32, nranks: i32) {
    if rt.comms.find(handle).is_some() {
        return;
    }
    let created = CommCreated {
        t_ns: now_ticks(),
        comm_id,
        parent_id: 0,
        rank,
        nranks,
        global_rank: rt.global_rank(),
        color: -1,
        key: -1,
        origin: CommOrigin::ProcessGroup,
    };
    register(rt, handle, created);
}

/// How a new communicator relates to the job, as the init hooks know it.
#[derive(Clone)]
pub enum NewComm {
    FromUniqueId(CommOrigin, [u8; 128]),
    /// `ncclCommInitAll`: the `call`-th such call of this process.
    InitAll {
        call: u64,
    },
    Split {
        parent: u64,
        color: i32,
        key: i32,
    },
    /// `ncclCommInitRankScalable`: the id derived from all its unique ids.
    Scalable {
        id: u64,
    },
    /// `ncclCommShrink` by a remaining member of `parent`.
    Shrink {
        parent: u64,
        excluded: Vec<i32>,
    },
    /// `ncclCommGrow` by an existing member of `parent`; the root also passes the unique
    /// id it gave the new ranks (nccl.h 2.32.3).
    GrowExisting {
        parent: u64,
        nranks: i32,
        uid: Option<[u8; 128]>,
    },
    /// `ncclCommGrow` by a new rank: it has the root's unique id and no parent.
    GrowNew([u8; 128]),
}

/// What a communicator-creating hook must remember before forwarding: the derived id, or,
/// while the runtime starts, what to derive it from once it is there.
pub enum PendingComm {
    Derived(Derivation),
    Deferred(NewComm),
}

/// A new communicator's job-wide id and its relation to the job.
pub struct Derivation {
    id: u64,
    /// The id the communicator's new ranks know it by (`ncclCommGrow`'s root only).
    alias: Option<u64>,
    /// The rank an existing member keeps in a grown communicator (its parent's).
    kept_rank: Option<i32>,
    parent_id: u64,
    origin: CommOrigin,
    color: i32,
    key: i32,
}

/// Called before forwarding a creation call: derives the job-wide id.
pub fn comm_creation(kind: NewComm) -> Option<PendingComm> {
    match runtime::owner() {
        Some(rt) => derive(rt, kind).map(PendingComm::Derived),
        None => runtime::is_starting().then_some(PendingComm::Deferred(kind)),
    }
}

fn derive(rt: &'static Runtime, kind: NewComm) -> Option<Derivation> {
    let (mut alias, mut kept_rank) = (None, None);
    let (id, parent_id, origin, color, key) = match kind {
        NewComm::FromUniqueId(origin, uid) => (comm_identity::from_unique_id(&uid), 0, origin, -1, -1),
        NewComm::InitAll { call } => {
            (comm_identity::for_init_all(&rt.host, rt.pid, call), 0, CommOrigin::InitAll, -1, -1)
        }
        NewComm::Split { parent, color, key } => {
            let (parent_id, ordinal) = child_of(rt, parent)?;
            (comm_identity::for_split(parent_id, ordinal, color), parent_id, CommOrigin::Split, color, key)
        }
        NewComm::Scalable { id } => (id, 0, CommOrigin::InitRankScalable, -1, -1),
        NewComm::Shrink { parent, excluded } => {
            let (parent_id, ordinal) = child_of(rt, parent)?;
            (comm_identity::for_shrink(parent_id, ordinal, &excluded), parent_id, CommOrigin::Shrink, -1, -1)
        }
        NewComm::GrowExisting { parent, nranks, uid } => {
            let (parent_id, ordinal) = child_of(rt, parent)?;
            alias = uid.map(|uid| comm_identity::from_unique_id(&uid));
            // Existing members keep their ranks (src/init.cc ncclCommGrow at v2.30.7-1).
            kept_rank = comm_slot(rt, parent).map(|slot| slot.rank().0).filter(|&r| r >= 0);
            (comm_identity::for_grow(parent_id, ordinal, nranks), parent_id, CommOrigin::Grow, -1, -1)
        }
        NewComm::GrowNew(uid) => (comm_identity::from_unique_id(&uid), 0, CommOrigin::Grow, -1, -1),
    };
    Some(Derivation { id, alias, kept_rank, parent_id, origin, color, key })
}

/// The parent's job-wide id and the ordinal of the child being made from it: every member
/// makes its children (splits, shrinks, grows) in the same order, as NCCL's own
/// `childCount` assumes.
fn child_of(rt: &'static Runtime, parent: u64) -> Option<(u64, u64)> {
    let parent_slot = comm_slot(rt, parent)?;
    Some((parent_slot.comm_id.load(Ordering::Relaxed), parent_slot.splits.fetch_add(1, Ordering::Relaxed)))
}

/// `ncclCommInitAll` calls so far in this process, to tell their communicators apart.
static INIT_ALL_CALLS: AtomicU64 = AtomicU64::new(0);

/// Numbers `ncclCommInitAll` calls within this process.
pub fn next_init_all_call() -> u64 {
    INIT_ALL_CALLS.fetch_add(1, Ordering::Relaxed)
}

/// Called after the real creation call returned a communicator.
pub fn comm_created(pending: &PendingComm, handle: u64, rank: i32, nranks: i32) {
    let t_ns = now_ticks();
    let Some(rt) = runtime::owner() else {
        if let PendingComm::Deferred(kind) = pending {
            hand_over(Early::Created { kind: kind.clone(), handle, rank, nranks, t_ns });
        }
        return;
    };
    let derived = match pending {
        PendingComm::Derived(derived) => derived,
        PendingComm::Deferred(kind) => &match derive(rt, kind.clone()) {
            Some(derived) => derived,
            None => return,
        },
    };
    register_created(rt, derived, handle, rank, nranks, t_ns);
}

fn register_created(rt: &'static Runtime, pending: &Derivation, handle: u64, rank: i32, nranks: i32, t_ns: u64) {
    let rank = if rank < 0 { pending.kept_rank.unwrap_or(rank) } else { rank };
    let created = CommCreated {
        t_ns,
        comm_id: pending.id,
        parent_id: pending.parent_id,
        rank,
        nranks,
        global_rank: rt.global_rank(),
        color: pending.color,
        key: pending.key,
        origin: pending.origin,
    };
    let spans_job = nranks == rt.world_size() && pending.origin != CommOrigin::InitAll;
    if spans_job {
        let _ = rt.world_comm.compare_exchange(0, pending.id, Ordering::Relaxed, Ordering::Relaxed);
    }
    register(rt, handle, created);
    // ncclCommGrow's root alone knows both names of the grown communicator: it records that
    // the new ranks' (from the unique id) is this one (comm_identity::GROW_ALIAS_COLOR).
    if let Some(alias) = pending.alias {
        let record = CommCreated {
            comm_id: alias,
            parent_id: pending.id,
            color: comm_identity::GROW_ALIAS_COLOR,
            key: -1,
            ..created
        };
        rt.ring.push(Event::Record(RecordBody::CommCreated(record)));
    }
}

/// Called after `ncclCommDestroy`/`ncclCommAbort` returned: the handle may be reused.
pub fn comm_ended(handle: u64) {
    match runtime::owner() {
        Some(rt) => rt.comms.unregister(handle),
        None if runtime::is_starting() => hand_over(Early::Ended { handle }),
        None => {}
    }
}

/// `ncclCommUserRank`/`ncclCommCount` told the application a rank or size; keep it, since
/// a split communicator's are not known at creation without asking NCCL.
pub fn observed_comm_shape(handle: u64, rank: Option<i32>, nranks: Option<i32>) {
    match runtime::active() {
        Some(rt) => record_shape(rt, handle, rank, nranks),
        None if runtime::is_starting() => hand_over(Early::Shape { handle, rank, nranks }),
        None => {}
    }
}

fn record_shape(rt: &'static Runtime, handle: u64, rank: Option<i32>, nranks: Option<i32>) {
    let Some(slot) = rt.comms.find(handle) else { return };
    let (old_rank, old_nranks) = slot.rank();
    slot.set_rank(rank.unwrap_or(old_rank), nranks.unwrap_or(old_nranks));
}

pub fn observed_nccl_version(version: i32) {
    match runtime::active() {
        Some(rt) => rt.set_nccl_version(version),
        None if runtime::is_starting() => hand_over(Early::Version(version)),
        None => {}
    }
}
