//! The profiler door's contexts: one per communicator NCCL initialised the plugin for,
//! from a fixed pool (a full pool refuses the communicator; its events are counted dropped).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::profiler_names::FUNC_NAMES;

/// Functions with a per-communicator ordinal of their own (`FUNC_NAMES`).
pub(super) const FUNCS: usize = FUNC_NAMES.len();

const CONTEXTS: usize = 1024;

pub struct Context {
    pub(super) busy: AtomicBool,
    pub(super) abi: AtomicU32,
    pub(super) comm_hash: AtomicU64,
    pub(super) rank: AtomicU32,
    /// The chained plugin's own context for this communicator.
    pub(super) chain: AtomicUsize,
    pub(super) own_mask: AtomicU64,
    /// The chained plugin's mask as NCCL read it at the start of the current API call.
    pub(super) chain_mask: AtomicU64,
    /// Per function: the point-to-point tasks (Send, Recv) started so far.
    pub(super) p2p_seq: [AtomicU64; FUNCS],
    /// Per function: the API calls (v5+) started so far.
    pub(super) api_seq: [AtomicU64; FUNCS],
}

impl Context {
    const fn new() -> Context {
        Context {
            busy: AtomicBool::new(false),
            abi: AtomicU32::new(0),
            comm_hash: AtomicU64::new(0),
            rank: AtomicU32::new(0),
            chain: AtomicUsize::new(0),
            own_mask: AtomicU64::new(0),
            chain_mask: AtomicU64::new(0),
            p2p_seq: [const { AtomicU64::new(0) }; FUNCS],
            api_seq: [const { AtomicU64::new(0) }; FUNCS],
        }
    }
    pub fn chain(&self) -> usize {
        self.chain.load(Ordering::Acquire)
    }
    pub fn own_mask(&self) -> u64 {
        self.own_mask.load(Ordering::Acquire)
    }
    /// NCCL reads its mask once per API call and the call's tasks and proxy operations keep
    /// that value (src/plugin/profiler.cc at v2.30.7-1: `ncclProfilerApiState.eActivationMask`
    /// at the GroupApi event, `task->eActivationMask`, `sub->eActivationMask`): the door
    /// takes the chained mask at the same points, so a mask changed mid-call applies from
    /// the next call, as for a plugin alone.
    pub fn chain_mask(&self) -> u64 {
        self.chain_mask.load(Ordering::Acquire)
    }
    pub fn set_chain_mask(&self, mask: u64) {
        self.chain_mask.store(mask, Ordering::Release)
    }
}

static CONTEXT_POOL: [Context; CONTEXTS] = [const { Context::new() }; CONTEXTS];

fn index_in<T>(pool: &'static [T], addr: usize) -> Option<usize> {
    let base = pool.as_ptr() as usize;
    let size = std::mem::size_of::<T>();
    let offset = addr.checked_sub(base)?;
    (offset % size == 0 && offset / size < pool.len()).then_some(offset / size)
}

/// The context behind an opaque context pointer NCCL hands back, if it is one of ours.
pub fn context(addr: usize) -> Option<&'static Context> {
    index_in(&CONTEXT_POOL, addr).map(|i| &CONTEXT_POOL[i])
}

/// Opens a context; returns its address (NCCL's opaque context) or None when all are used.
/// `comm_hash` is 0 for v1–v3, whose descriptors carry it per task.
pub fn open_context(abi: u8, comm_hash: u64, rank: i32, own_mask: u64, chain: usize, chain_mask: u64) -> Option<usize> {
    let i = (0..CONTEXTS)
        .find(|&i| CONTEXT_POOL[i].busy.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok())?;
    let c = &CONTEXT_POOL[i];
    c.abi.store(abi as u32, Ordering::Relaxed);
    c.comm_hash.store(comm_hash, Ordering::Relaxed);
    c.rank.store(rank as u32, Ordering::Relaxed);
    c.chain.store(chain, Ordering::Relaxed);
    c.own_mask.store(own_mask, Ordering::Relaxed);
    c.chain_mask.store(chain_mask, Ordering::Relaxed);
    for n in c.p2p_seq.iter().chain(&c.api_seq) {
        n.store(0, Ordering::Relaxed);
    }
    std::sync::atomic::fence(Ordering::Release);
    Some(c as *const Context as usize)
}

pub fn close_context(addr: usize) {
    if let Some(c) = context(addr) {
        c.busy.store(false, Ordering::Release);
    }
}
