//! The NCCL profiler-plugin door's core: fixed pools of contexts and in-flight events, and
//! the records they turn into. Safe Rust; `doors::profiler` turns NCCL's descriptors into
//! the plain values below.
//!
//! Nothing here allocates or blocks once the pools exist (they are statics): a start claims
//! a free slot with one CAS (bounded scan), a state update is a few atomic stores, a stop
//! builds one fixed-size record and pushes it into the runtime's ring. A full pool or ring
//! loses that event, never the job's progress; both are counted (the ring's drops, and
//! `dropped()` here) and reach the log's dropped count.
//!
//! Event lifetimes follow NCCL's hierarchy: a proxy operation's parent is the collective or
//! point-to-point task, a proxy step's parent is the proxy operation, a network-plugin
//! event's parent is the proxy step. A child takes a reference on a live parent, so a slot
//! is freed only after the event *and* its children were stopped, and a freed slot is
//! reused as late as the pool allows (round robin), because NCCL stops a task when it is
//! enqueued and may start its proxy operations afterwards. Children inherit the task's communicator hash and
//! sequence number through the parent.
//!
//! Facts about the ABI come from NVIDIA/nccl: `src/include/plugin/nccl_profiler.h` (event
//! type bits, state values, `NCCL_PROFILER_NET_TYPE_IB`), `src/include/plugin/profiler/
//! profiler_v1.h` … `profiler_v7.h` (descriptor layouts), `net_ib_v1.h` and
//! `ext-profiler/README.md` (the network-plugin event and its plugin id).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::core::live::event::Event;
use crate::core::live::runtime;
use crate::core::log::format::{live, PAYLOAD_CAPACITY};
use crate::core::log::kernel_ch::KernelChKey;
use crate::core::log::records::{kind, ProfNet, ProfOp, ProfProxy, RecordBody};
use crate::core::log::records_net::WrSource;
use crate::core::net::proxy_progress;
use crate::core::net::work_requests::{self, QpKey};
use crate::core::record::clock::now_ticks;

pub use super::profiler_abi::*;
use super::profiler_contexts::FUNCS;
pub use super::profiler_contexts::{close_context, context, open_context, Context};
pub use super::profiler_names::*;

/// What a startEvent descriptor said, in plain values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Start {
    Coll {
        /// Present in v1–v3 descriptors; v4+ give it once, at init.
        comm_hash: Option<u64>,
        seq: u64,
        func: u8,
        count: u64,
        root: i32,
        dtype: i8,
        algo: u8,
        proto: u8,
        n_channels: u8,
        n_warps: u8,
    },
    P2p {
        comm_hash: Option<u64>,
        func: u8,
        count: u64,
        peer: i32,
        dtype: i8,
        n_channels: u8,
    },
    /// v5+: the API call the application made (`ncclProfileCollApi` / `P2pApi`).
    Api {
        p2p: bool,
        func: u8,
        count: u64,
        /// The root of a collective; -1 for a point-to-point call (its descriptor has none).
        root: i32,
        dtype: i8,
    },
    /// v6+: a copy-engine collective (`ncclProfileCeColl`), with NCCL's `ceSeqNum`.
    CeColl {
        seq: u64,
        func: u8,
        count: u64,
        root: i32,
        dtype: i8,
    },
    ProxyOp {
        channel: u8,
        peer: i32,
        n_steps: i32,
        chunk_size: i32,
        is_send: bool,
    },
    ProxyStep {
        step: i32,
    },
    KernelCh {
        channel: u8,
    },
    Net {
        plugin_id: u64,
        qp: Option<Qp>,
    },
    /// A type this door does not record (it may still be forwarded to a chained plugin).
    Other,
}

/// An IB QP work request, from `ncclProfilerNetIbDescr_v1_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Qp {
    pub device: i32,
    pub wr_id: u64,
    pub opcode: i32,
    pub qp_num: i32,
    pub length: u64,
}

// ---------------------------------------------------------------------------------------
// Events.

/// In-flight events the pool holds, sized from NCCL's own limits (src/include/device.h at
/// v2.30.7-1): MAXCHANNELS (64) channels × NCCL_STEPS (8) proxy steps in flight × 2
/// directions × 2 (a step and its QP event) is 2048 for one peer per channel; 16384 leaves
/// room for 8 peers per channel at full depth, plus tasks and proxy operations.
pub(crate) const SLOTS: usize = 16384;
/// Slots a start looks at for a free one before it counts the event dropped.
const SCAN: usize = 256;

/// Events the door could not keep (no free slot, or no context for the communicator): the
/// collector adds them to the log's dropped count and `drops` record.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Events this door lost so far, every cause together.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// An event of a type this door records started on a communicator it has no context for.
pub fn dropped_without_context() {
    DROPPED.fetch_add(1, Ordering::Relaxed);
}
const WORDS: usize = PAYLOAD_CAPACITY / 8;

/// One in-flight event: its record-to-be (encoded payload words) and its mutable state.
pub struct Slot {
    busy: AtomicBool,
    /// `generation << 1 | live`: the generation counts the slot's events, `live` is set from
    /// start to the first stop. A handle names its slot and the generation's low bits, so a
    /// second stop, or a stop or state of a stale handle, finds it and does nothing.
    life: AtomicU32,
    /// The event itself plus one per live child.
    refs: AtomicU32,
    /// Parent slot index + 1, 0 for none.
    parent: AtomicUsize,
    /// The chained plugin's handle for this event.
    chain: AtomicUsize,
    /// The chained plugin's mask in force for this event and its descendants.
    chain_mask: AtomicU64,
    /// A PXN event: another process's proxy operation, or one of its descendants.
    foreign: AtomicBool,
    kind: AtomicU32,
    len: AtomicU32,
    words: [AtomicU64; WORDS],
    comm_hash: AtomicU64,
    seq: AtomicU64,
    states: AtomicU32,
    transitions: AtomicU32,
    t_states: [AtomicU64; 3],
    trans_size: AtomicU64,
    /// Whether this event's recordEventState calls carry `transSize` (see `start`).
    sized_states: AtomicBool,
    /// A KernelCh event's collective (`KernelChKey::word`), 0 for any other event.
    kernel_ch: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            busy: AtomicBool::new(false),
            life: AtomicU32::new(0),
            refs: AtomicU32::new(0),
            parent: AtomicUsize::new(0),
            chain: AtomicUsize::new(0),
            chain_mask: AtomicU64::new(0),
            foreign: AtomicBool::new(false),
            kind: AtomicU32::new(0),
            len: AtomicU32::new(0),
            words: [const { AtomicU64::new(0) }; WORDS],
            comm_hash: AtomicU64::new(0),
            seq: AtomicU64::new(u64::MAX),
            states: AtomicU32::new(0),
            transitions: AtomicU32::new(0),
            t_states: [const { AtomicU64::new(0) }; 3],
            trans_size: AtomicU64::new(0),
            sized_states: AtomicBool::new(false),
            kernel_ch: AtomicU64::new(0),
        }
    }
}

static SLOT_POOL: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
static CURSOR: AtomicUsize = AtomicUsize::new(0);

/// Generations a handle tells apart: its address is the slot's plus `generation % GENS`,
/// an address inside this library's own pool, so never a chained plugin's pointer.
const GENS: usize = 64;
const _: () = assert!(std::mem::size_of::<Slot>() >= GENS);

/// An opaque event handle NCCL holds: a slot and the generation it was started in.
#[derive(Clone, Copy)]
pub struct Handle {
    index: usize,
    generation: u32,
}

impl Handle {
    pub fn slot(&self) -> &'static Slot {
        &SLOT_POOL[self.index]
    }
    /// Whether the slot still holds this handle's event (started, not yet stopped).
    pub fn live(&self) -> bool {
        self.slot().life.load(Ordering::Acquire) == live_word(self.generation)
    }
    /// Whether the slot was not reused since this handle's event started: its data (the
    /// chained plugin's handle, the record) is still this event's.
    fn current(&self) -> bool {
        self.slot().life.load(Ordering::Acquire) >> 1 == self.generation
    }
    /// The chained plugin's mask in force when this event started, while the slot was not
    /// reused: its descendants keep it, as NCCL's proxy operations keep their task's.
    pub fn chain_mask(&self) -> Option<u64> {
        let mask = self.slot().chain_mask.load(Ordering::Acquire);
        self.current().then_some(mask)
    }
    /// Whether this event is another process's (PXN), while the slot was not reused.
    pub fn foreign(&self) -> bool {
        self.slot().foreign.load(Ordering::Acquire) && self.current()
    }
    /// The chained plugin's handle for this event while the slot was not reused.
    pub fn chain(&self) -> usize {
        let chain = self.slot().chain.load(Ordering::Acquire);
        if self.current() {
            chain
        } else {
            0
        }
    }
}

fn live_word(generation: u32) -> u32 {
    generation << 1 | 1
}

/// The event behind an opaque handle, if it is one of ours (else it is a chained plugin's).
/// A handle of ours whose slot was reused since (a stale handle) is still ours: its
/// generation no longer matches, so nothing acts on it.
pub fn event(addr: usize) -> Option<Handle> {
    let base = SLOT_POOL.as_ptr() as usize;
    let size = std::mem::size_of::<Slot>();
    let offset = addr.checked_sub(base)?;
    let (index, low) = (offset / size, offset % size);
    if index >= SLOTS || low >= GENS {
        return None;
    }
    let now = SLOT_POOL[index].life.load(Ordering::Acquire) >> 1;
    // The newest generation whose low bits are `low`, not newer than the slot's.
    let generation = now.wrapping_sub((now as usize).wrapping_sub(low) as u32 % GENS as u32);
    Some(Handle { index, generation })
}

fn handle_address(index: usize, generation: u32) -> usize {
    &SLOT_POOL[index] as *const Slot as usize + generation as usize % GENS
}

/// A free slot, searched round robin from a cursor every start advances: a freed slot is
/// reused only after the cursor came round (up to SLOTS starts later), so a task NCCL
/// stopped when it enqueued it still lends its data to the proxy operations NCCL starts
/// after; when it did get reused, the handle's generation says so (`Handle::current`).
fn claim() -> Option<usize> {
    let from = CURSOR.fetch_add(1, Ordering::Relaxed);
    (0..SCAN).map(|k| (from + k) % SLOTS).find(|&i| {
        let slot = &SLOT_POOL[i];
        !slot.busy.load(Ordering::Relaxed)
            && slot.busy.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    })
}

/// A free slot, or the event is counted dropped.
fn claim_or_count() -> Option<usize> {
    let claimed = claim();
    if claimed.is_none() {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
    claimed
}

fn release(mut index: usize) {
    loop {
        let slot = &SLOT_POOL[index];
        if slot.refs.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let parent = slot.parent.swap(0, Ordering::AcqRel);
        slot.busy.store(false, Ordering::Release);
        match parent {
            0 => return,
            p => index = p - 1,
        }
    }
}

/// startEvent. Returns the new event's handle (0: not recorded: not recording, a type this
/// door leaves alone, or the pool is full). `chain` is the chained plugin's handle.
#[allow(clippy::too_many_arguments)]
pub fn start(
    ctx: usize,
    parent: usize,
    rank: i32,
    abi: u8,
    what: Start,
    chain: usize,
    chain_mask: u64,
    foreign: bool,
) -> usize {
    if matches!(what, Start::Other) {
        return 0;
    }
    let Some(rt) = runtime::active() else { return 0 };
    let Some(index) = claim_or_count() else { return 0 };
    let t_start = now_ticks();
    let slot = &SLOT_POOL[index];
    let context = context(ctx);
    // A stale parent handle (its slot reused) lends nothing: its data is another event's.
    let parent = event(parent).filter(Handle::current).map(|h| h.index);
    let (mut comm_hash, mut seq) = (context.map_or(0, |c| c.comm_hash.load(Ordering::Relaxed)), u64::MAX);
    let mut linked = None;
    let mut kernel_ch = 0;
    if let Some(p) = parent {
        let p_slot = &SLOT_POOL[p];
        // A live parent is kept alive by this child; a parent already stopped and freed
        // (its slot not reused since) only lends its data.
        let alive = p_slot.refs.fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| (r > 0).then_some(r + 1));
        linked = alive.is_ok().then_some(p);
        comm_hash = p_slot.comm_hash.load(Ordering::Relaxed);
        seq = p_slot.seq.load(Ordering::Relaxed);
    }
    let body = match what {
        Start::Coll { comm_hash: hash, seq: s, func, count, root, dtype, algo, proto, n_channels, n_warps } => {
            comm_hash = hash.unwrap_or(comm_hash);
            seq = s;
            RecordBody::ProfOp(ProfOp {
                count,
                peer: root,
                func,
                dtype,
                algo,
                proto,
                n_channels,
                n_warps,
                ..op_started(t_start, comm_hash, seq, rank, abi)
            })
        }
        Start::P2p { comm_hash: hash, func, count, peer, dtype, n_channels } => {
            comm_hash = hash.unwrap_or(comm_hash);
            seq = ordinal(context.map(|c| &c.p2p_seq), func);
            RecordBody::ProfOp(ProfOp {
                count,
                peer,
                func,
                dtype,
                n_channels,
                p2p: true,
                ..op_started(t_start, comm_hash, seq, rank, abi)
            })
        }
        Start::Api { p2p, func, count, root, dtype } => {
            seq = ordinal(context.map(|c| &c.api_seq), func);
            RecordBody::ProfOp(ProfOp {
                count,
                peer: root,
                func,
                dtype,
                p2p,
                api: true,
                ..op_started(t_start, comm_hash, seq, rank, abi)
            })
        }
        Start::CeColl { seq: s, func, count, root, dtype } => {
            seq = s;
            RecordBody::ProfOp(ProfOp {
                count,
                peer: root,
                func,
                dtype,
                ce: true,
                ..op_started(t_start, comm_hash, seq, rank, abi)
            })
        }
        Start::ProxyOp { channel, peer, n_steps, chunk_size, is_send } => RecordBody::ProfProxy(ProfProxy {
            is_send,
            peer,
            n_steps,
            chunk_size,
            ..proxy_started(t_start, comm_hash, seq, ProfProxy::OP, channel)
        }),
        Start::ProxyStep { step } => {
            // A step inherits the proxy operation's direction and peer.
            let (is_send, peer, channel) = parent
                .and_then(|p| pending(&SLOT_POOL[p]))
                .and_then(|b| match b {
                    RecordBody::ProfProxy(op) => Some((op.is_send, op.peer, op.channel)),
                    _ => None,
                })
                .unwrap_or((false, -1, 0));
            // Another process's step (PXN) names a peer of its communicator: not followed.
            proxy_progress::step_started(index, comm_hash, channel, is_send, if foreign { -1 } else { peer });
            RecordBody::ProfProxy(ProfProxy {
                is_send,
                peer,
                step_no: step,
                ..proxy_started(t_start, comm_hash, seq, ProfProxy::STEP, channel)
            })
        }
        Start::KernelCh { channel } => {
            // The device began a channel of this collective: said in the live header at
            // once, since NCCL hands the event over only as it stops.
            let func = parent.and_then(|p| pending(&SLOT_POOL[p])).map_or(0, |b| match b {
                RecordBody::ProfOp(op) => op.func,
                _ => 0,
            });
            kernel_ch = KernelChKey::new(comm_hash, func, seq).word();
            rt.live(live::KERNEL_CH_STARTED_TICKS).store(t_start, Ordering::Relaxed);
            rt.live(live::KERNEL_CH_STARTED).store(kernel_ch, Ordering::Release);
            RecordBody::ProfProxy(proxy_started(t_start, comm_hash, seq, ProfProxy::KERNEL_CH, channel))
        }
        Start::Net { plugin_id, qp } => {
            let q = qp.unwrap_or_default();
            if qp.is_some() {
                // The event's start is the post; its stop, the completion (see `stop`).
                work_requests::posted(wr_qp(q.device, q.qp_num), q.length, t_start);
                proxy_progress::qp_events_seen();
            }
            RecordBody::ProfNet(ProfNet {
                t_start_ns: t_start,
                t_stop_ns: 0,
                comm_hash,
                seq,
                plugin_id,
                wr_id: q.wr_id,
                length: q.length,
                device: q.device,
                qp_num: q.qp_num,
                opcode: q.opcode,
                updates: 0,
                qp: qp.is_some(),
            })
        }
        Start::Other => unreachable!("returned above"),
    };
    // ProxyOp events in v1–v3, ProxyStep events from v4 carry `transSize` with their states;
    // settled here once, so a state update never decodes the record.
    let sized_unit = if abi <= 3 { ProfProxy::OP } else { ProfProxy::STEP };
    let sized_states = matches!(body, RecordBody::ProfProxy(p) if p.unit == sized_unit);
    let mut buf = [0u8; PAYLOAD_CAPACITY];
    let len = body.encode(&mut buf);
    for (w, chunk) in slot.words.iter().zip(buf.chunks_exact(8)) {
        w.store(u64::from_le_bytes(chunk.try_into().expect("8 bytes")), Ordering::Relaxed);
    }
    slot.kind.store(body.kind() as u32, Ordering::Relaxed);
    slot.len.store(len as u32, Ordering::Relaxed);
    slot.comm_hash.store(comm_hash, Ordering::Relaxed);
    slot.seq.store(seq, Ordering::Relaxed);
    slot.states.store(0, Ordering::Relaxed);
    slot.transitions.store(0, Ordering::Relaxed);
    for t in &slot.t_states {
        t.store(0, Ordering::Relaxed);
    }
    slot.trans_size.store(0, Ordering::Relaxed);
    slot.sized_states.store(sized_states, Ordering::Relaxed);
    slot.kernel_ch.store(kernel_ch, Ordering::Relaxed);
    slot.chain.store(chain, Ordering::Relaxed);
    slot.chain_mask.store(chain_mask, Ordering::Relaxed);
    slot.foreign.store(foreign, Ordering::Relaxed);
    slot.parent.store(linked.map_or(0, |p| p + 1), Ordering::Relaxed);
    slot.refs.store(1, Ordering::Relaxed);
    let generation = (slot.life.load(Ordering::Relaxed) >> 1).wrapping_add(1) & (u32::MAX >> 1);
    slot.life.store(live_word(generation), Ordering::Release);
    handle_address(index, generation)
}

fn pending(slot: &Slot) -> Option<RecordBody> {
    let mut buf = [0u8; PAYLOAD_CAPACITY];
    for (w, chunk) in slot.words.iter().zip(buf.chunks_exact_mut(8)) {
        chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    let len = (slot.len.load(Ordering::Relaxed) as usize).min(PAYLOAD_CAPACITY);
    RecordBody::decode(slot.kind.load(Ordering::Relaxed) as u16, &buf[..len])
}

/// recordEventState. `trans_size` is the `transSize` argument where the event has one.
pub fn state(handle: Handle, state: i32, trans_size: Option<u64>) {
    if !handle.live() {
        return;
    }
    let slot = handle.slot();
    if (0..32).contains(&state) {
        slot.states.fetch_or(1 << state, Ordering::Relaxed);
    }
    let n = slot.transitions.fetch_add(1, Ordering::Relaxed) as usize;
    if let Some(t) = slot.t_states.get(n) {
        t.store(now_ticks(), Ordering::Relaxed);
    }
    if let Some(size) = trans_size {
        slot.trans_size.store(size, Ordering::Relaxed);
    }
    proxy_progress::step_state(handle.index, state, trans_size);
}

/// Whether a recordEventState on this event carries `transSize` in its arguments.
pub fn takes_trans_size(handle: Handle) -> bool {
    handle.slot().sized_states.load(Ordering::Relaxed)
}

/// stopEvent: the record goes to the ring; the slot is reused once its children stopped.
/// Only the first stop of a live handle counts: NCCL's IB transport stops a QP event once
/// per polled completion and again when the request completes (src/transport/net_ib/p2p.cc
/// at v2.30.7-1, net_ib.cc at v2.26.2-1), and NCCL may stop handles it never started.
/// Returns whether this stop ended the event.
pub fn stop(handle: Handle) -> bool {
    let t_stop = now_ticks();
    let slot = handle.slot();
    let live = live_word(handle.generation);
    if slot.life.compare_exchange(live, live & !1, Ordering::AcqRel, Ordering::Relaxed).is_err() {
        return false;
    }
    if let (Some(body), Some(rt)) = (pending(slot), runtime::active()) {
        let kernel_ch = slot.kernel_ch.load(Ordering::Relaxed);
        if kernel_ch != 0 {
            rt.live(live::KERNEL_CH_STOPPED).store(kernel_ch, Ordering::Release);
        }
        let states = slot.states.load(Ordering::Relaxed);
        let transitions = slot.transitions.load(Ordering::Relaxed);
        let body = match body {
            RecordBody::ProfOp(mut p) => {
                p.t_stop_ns = t_stop;
                RecordBody::ProfOp(p)
            }
            RecordBody::ProfProxy(mut p) => {
                p.t_stop_ns = t_stop;
                p.states = states;
                p.transitions = transitions.min(u16::MAX as u32) as u16;
                p.trans_size = slot.trans_size.load(Ordering::Relaxed);
                for (dst, src) in p.t_states_ns.iter_mut().zip(&slot.t_states) {
                    *dst = src.load(Ordering::Relaxed);
                }
                RecordBody::ProfProxy(p)
            }
            RecordBody::ProfNet(mut n) => {
                n.t_stop_ns = t_stop;
                n.updates = transitions.min(u16::MAX as u32) as u16;
                RecordBody::ProfNet(n)
            }
            other => other,
        };
        debug_assert!(matches!(body.kind(), kind::PROF_OP | kind::PROF_PROXY | kind::PROF_NET));
        match body {
            // A work request: NCCL stops the QP event when it polled the completion. The
            // per-QP aggregates take it; the record itself only with SF_NET_RAW=1, since a
            // real job posts thousands per second and would flood the log ring.
            RecordBody::ProfNet(n) if n.qp => {
                work_requests::completed(wr_qp(n.device, n.qp_num), n.length, Some(n.t_start_ns), t_stop, true);
                if rt.net_raw {
                    rt.ring.push(Event::Record(body));
                }
            }
            _ => {
                rt.ring.push(Event::Record(body));
            }
        }
    }
    proxy_progress::step_stopped(handle.index);
    release(handle.index);
    true
}

/// The work-request table's key of a profiler QP event.
fn wr_qp(device: i32, qp_num: i32) -> QpKey {
    QpKey { source: WrSource::Profiler, device, qp_num: qp_num as u32 }
}

/// A task record at its start: nothing about the call known yet (algorithm, protocol and
/// warps stay unknown for a point-to-point task).
fn op_started(t_start_ns: u64, comm_hash: u64, seq: u64, rank: i32, abi: u8) -> ProfOp {
    ProfOp {
        t_start_ns,
        t_stop_ns: 0,
        comm_hash,
        seq,
        count: 0,
        rank,
        peer: -1,
        func: UNKNOWN,
        dtype: -1,
        algo: UNKNOWN,
        proto: UNKNOWN,
        n_channels: 0,
        n_warps: 0,
        abi,
        p2p: false,
        api: false,
        ce: false,
    }
}

/// The next per-communicator ordinal of `func` (the call's or task's own function: a
/// point-to-point ordinal counts Sends and Recvs apart, as the preload door's calls are
/// linked per function); u64::MAX without a context or for a function with no name.
fn ordinal(counters: Option<&[AtomicU64; FUNCS]>, func: u8) -> u64 {
    counters.and_then(|c| c.get(func as usize)).map_or(u64::MAX, |n| n.fetch_add(1, Ordering::Relaxed))
}

/// A proxy-side record at its start: no state seen yet, no peer, no step.
fn proxy_started(t_start_ns: u64, comm_hash: u64, seq: u64, unit: u8, channel: u8) -> ProfProxy {
    ProfProxy {
        t_start_ns,
        t_stop_ns: 0,
        comm_hash,
        seq,
        trans_size: 0,
        t_states_ns: [0; 3],
        states: 0,
        transitions: 0,
        unit,
        channel,
        is_send: false,
        peer: -1,
        n_steps: 0,
        chunk_size: 0,
        step_no: -1,
    }
}

#[cfg(test)]
#[path = "profiler_tests.rs"]
mod tests;
