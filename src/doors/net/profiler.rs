//! The NCCL profiler-plugin door: `ncclProfiler_v1` … `ncclProfiler_v7`.
//!
//! NCCL (>= 2.23) loads a profiler plugin named by `NCCL_PROFILER_PLUGIN` and uses the newest
//! `ncclProfiler_vN` table it knows. Pointing it at libstagefrontier.so makes this door
//! record, per rank, every collective and point-to-point task (seqNumber, func, count,
//! datatype, algo, proto, nChannels), proxy operations and steps with their states, and the
//! network plugin's IB QP work requests (device, qpNum, wr_id, opcode, length).
//!
//! A collective's stopEvent means NCCL *enqueued* it (its kernel was launched on the
//! stream), not that it completed; completion shows in its proxy operations and steps.
//!
//! Every callback copies what it needs out of NCCL's descriptor and hands plain values to
//! `core::profiler`, which never allocates or blocks. `init` and `finalize` run once per
//! communicator and may (on the very first call) start the runtime and open the chained
//! plugin. Nothing panics across the boundary: all recording runs under `shielded`, and
//! every callback returns ncclSuccess, as the ABI asks of profilers.
//!
//! With `SF_CHAIN_PROFILER=path` every call is also forwarded to that plugin's table of the
//! same version, with the chained plugin's own context and event handles: a descriptor
//! whose parent is one of this door's events is copied with the parent replaced by the
//! chained plugin's handle for it. The chained plugin sees the event types NCCL would start
//! for its mask alone: those it asked for and their implied parents
//! (`core::profiler::started_types`).

mod abi;
#[cfg(test)]
mod abi_layout_nccl;
#[cfg(test)]
mod abi_layout_tests;
mod chain;
mod convert;

use std::ffi::{c_char, c_int, c_void, CStr};

use abi::{
    CName, DescrV1, DescrV2, DescrV3, DescrV4, DescrV5, DescrV6, DescrV7, InitV1, InitV4, InitV5, NetIbDescrV1,
    NetPlugin, Plugin, ProxyOp,
};

use crate::core::live::runtime;
use crate::core::net::profiler::{self as core, ty, Qp, Start};
use crate::core::record::doors;
use crate::doors::traced::shielded;

const SUCCESS: c_int = 0;
const NAME_STR: &std::ffi::CStr = c"stagefrontier";
const NAME: CName = CName(NAME_STR.as_ptr());

/// What each version's descriptor tells the door; implemented once per layout.
trait Descr: Copy {
    const ABI: u8;
    fn ty(&self) -> u64;
    fn parent(&self) -> *mut c_void;
    fn rank(&self) -> i32;
    /// Replaces the parent pointers (`parentObj`, and `parentGroup` where a coll or p2p
    /// descriptor has one) for a chained plugin.
    fn reparent(&mut self, map: impl Fn(*mut c_void) -> *mut c_void);
    /// # Safety
    /// `self` is a descriptor NCCL passed to startEvent, with its pointers still valid.
    unsafe fn start(&self) -> Start;
    /// A proxy operation's `pid`: the process the operation belongs to.
    fn proxy_pid(&self) -> Option<i32>;
}

/// This process's pid, taken at every `init` (never a syscall on the hot path).
static PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// # Safety
/// `p` is null or a NUL-terminated string valid for the call.
unsafe fn text<'a>(p: *const c_char) -> &'a [u8] {
    if p.is_null() {
        return b"";
    }
    // SAFETY: as the caller promises.
    unsafe { CStr::from_ptr(p) }.to_bytes()
}

fn proxy_op(op: &ProxyOp) -> Start {
    Start::ProxyOp {
        channel: op.channel,
        peer: op.peer,
        n_steps: op.n_steps,
        chunk_size: op.chunk_size,
        is_send: op.is_send != 0,
    }
}

/// # Safety
/// `net.data` is null or points at the network plugin's event for the call.
unsafe fn net(net: &NetPlugin) -> Start {
    let plugin_id = net.id as u64;
    let qp = if plugin_id == core::NET_TYPE_IB | core::NET_IB_VERSION && !net.data.is_null() {
        // SAFETY: plugin id IB version 1 says `data` is an ncclProfilerNetIbDescr_v1_t.
        let d = unsafe { *(net.data as *const NetIbDescrV1) };
        (d.ty == core::NET_IB_QP).then_some(Qp {
            device: d.qp.device,
            wr_id: d.qp.wr_id,
            opcode: d.qp.opcode,
            qp_num: d.qp.qp_num,
            length: d.qp.length as u64,
        })
    } else {
        None
    };
    Start::Net { plugin_id, qp }
}

macro_rules! head {
    () => {
        fn ty(&self) -> u64 {
            self.ty as u64
        }
        fn parent(&self) -> *mut c_void {
            self.parent
        }
        fn rank(&self) -> i32 {
            self.rank
        }
        fn proxy_pid(&self) -> Option<i32> {
            // SAFETY: `ty` names the member NCCL filled.
            (self.ty as u64 == ty::PROXY_OP).then(|| unsafe { self.u.proxy_op.pid })
        }
    };
}

impl Descr for DescrV1 {
    const ABI: u8 = 1;
    head!();
    fn reparent(&mut self, map: impl Fn(*mut c_void) -> *mut c_void) {
        self.parent = map(self.parent);
    }
    unsafe fn start(&self) -> Start {
        // SAFETY (all union reads below): `ty` names the member NCCL filled.
        match self.ty as u64 {
            ty::COLL => {
                let c = unsafe { self.u.coll };
                Start::Coll {
                    comm_hash: Some(c.comm_hash),
                    seq: c.seq,
                    func: c.func,
                    count: c.count as u64,
                    root: c.root,
                    dtype: c.datatype as i8,
                    algo: c.algo,
                    proto: c.proto,
                    n_channels: c.n_max_channels,
                    n_warps: c.n_warps,
                }
            }
            ty::P2P => {
                let p = unsafe { self.u.p2p };
                Start::P2p {
                    comm_hash: Some(p.comm_hash),
                    func: p.func,
                    count: p.count as u64,
                    peer: p.peer,
                    dtype: p.datatype as i8,
                    n_channels: 0,
                }
            }
            ty::PROXY_OP => proxy_op(unsafe { &self.u.proxy_op }),
            ty::PROXY_STEP => Start::ProxyStep { step: unsafe { self.u.proxy_step.step } },
            _ => Start::Other,
        }
    }
}

/// v2 and v3 share the string-typed coll (less `trafficBytes` in v3) and p2p members.
macro_rules! v2_v3_tasks {
    ($self:ident) => {
        match $self.ty as u64 {
            ty::COLL => {
                // SAFETY: `ty` names the member; strings are NCCL's, valid for the call.
                let c = unsafe { $self.u.coll };
                unsafe {
                    Start::Coll {
                        comm_hash: Some(c.comm_hash),
                        seq: c.seq,
                        func: core::func_code(text(c.func)),
                        count: c.count as u64,
                        root: c.root,
                        dtype: core::dtype_code(text(c.datatype)),
                        algo: core::algo_code(text(c.algo)),
                        proto: core::proto_code(text(c.proto)),
                        n_channels: c.n_max_channels,
                        n_warps: c.n_warps,
                    }
                }
            }
            ty::P2P => {
                // SAFETY: as above.
                let p = unsafe { $self.u.p2p };
                unsafe {
                    Start::P2p {
                        comm_hash: Some(p.comm_hash),
                        func: core::func_code(text(p.func)),
                        count: p.count as u64,
                        peer: p.peer,
                        dtype: core::dtype_code(text(p.datatype)),
                        n_channels: 0,
                    }
                }
            }
            // SAFETY: `ty` names the member.
            ty::PROXY_OP => proxy_op(unsafe { &$self.u.proxy_op }),
            ty::PROXY_STEP => Start::ProxyStep { step: unsafe { $self.u.proxy_step.step } },
            _ => Start::Other,
        }
    };
}

impl Descr for DescrV2 {
    const ABI: u8 = 2;
    head!();
    fn reparent(&mut self, map: impl Fn(*mut c_void) -> *mut c_void) {
        self.parent = map(self.parent);
    }
    unsafe fn start(&self) -> Start {
        v2_v3_tasks!(self)
    }
}

impl Descr for DescrV3 {
    const ABI: u8 = 3;
    head!();
    fn reparent(&mut self, map: impl Fn(*mut c_void) -> *mut c_void) {
        self.parent = map(self.parent);
    }
    unsafe fn start(&self) -> Start {
        match self.ty as u64 {
            // SAFETY: `ty` names the member; `data` is the network plugin's, for the call.
            ty::KERNEL_CH => Start::KernelCh { channel: unsafe { self.u.kernel_ch.channel } },
            ty::NET_PLUGIN => unsafe { net(&self.u.net) },
            _ => v2_v3_tasks!(self),
        }
    }
}

/// v4 to v7 share the v4 shape of coll (seqNumber first, strings) and p2p (nChannels).
macro_rules! v4_plus {
    ($descr:ident, $abi:expr, $has_parent_group:tt, $ce:tt) => {
        impl Descr for $descr {
            const ABI: u8 = $abi;
            head!();
            fn reparent(&mut self, map: impl Fn(*mut c_void) -> *mut c_void) {
                self.parent = map(self.parent);
                v4_plus!(@group self, map, $has_parent_group);
            }
            unsafe fn start(&self) -> Start {
                match self.ty as u64 {
                    ty::COLL => {
                        // SAFETY: `ty` names the member; strings are NCCL's, for the call.
                        let c = unsafe { self.u.coll };
                        unsafe {
                            Start::Coll {
                                comm_hash: None,
                                seq: c.seq,
                                func: core::func_code(text(c.func)),
                                count: c.count as u64,
                                root: c.root,
                                dtype: core::dtype_code(text(c.datatype)),
                                algo: core::algo_code(text(c.algo)),
                                proto: core::proto_code(text(c.proto)),
                                n_channels: c.n_channels,
                                n_warps: c.n_warps,
                            }
                        }
                    }
                    ty::P2P => {
                        // SAFETY: as above.
                        let p = unsafe { self.u.p2p };
                        unsafe {
                            Start::P2p {
                                comm_hash: None,
                                func: core::func_code(text(p.func)),
                                count: p.count as u64,
                                peer: p.peer,
                                dtype: core::dtype_code(text(p.datatype)),
                                n_channels: p.n_channels,
                            }
                        }
                    }
                    // SAFETY: `ty` names the member.
                    ty::PROXY_OP => proxy_op(unsafe { &self.u.proxy_op }),
                    ty::PROXY_STEP => Start::ProxyStep { step: unsafe { self.u.proxy_step.step } },
                    ty::KERNEL_CH => Start::KernelCh { channel: unsafe { self.u.kernel_ch.channel } },
                    // SAFETY: `ty` names the member; `data` is the network plugin's.
                    ty::NET_PLUGIN => unsafe { net(&self.u.net) },
                    t => v4_plus!(@newer self, t, $has_parent_group, $ce),
                }
            }
        }
    };
    (@newer $self:ident, $t:ident, no, $ce:tt) => {{
        let _ = $t;
        Start::Other
    }};
    (@newer $self:ident, $t:ident, yes, $ce:tt) => {
        match $t {
            // SAFETY (all three arms): `ty` names the member; strings are NCCL's, for the call.
            ty::COLL_API => unsafe {
                let a = $self.u.coll_api;
                Start::Api {
                    p2p: false,
                    func: core::func_code(text(a.func)),
                    count: a.count as u64,
                    root: a.root,
                    dtype: core::dtype_code(text(a.datatype)),
                }
            }
            ty::P2P_API => unsafe {
                let a = $self.u.p2p_api;
                Start::Api {
                    p2p: true,
                    func: core::func_code(text(a.func)),
                    count: a.count as u64,
                    root: -1,
                    dtype: core::dtype_code(text(a.datatype)),
                }
            }
            _ => v4_plus!(@ce $self, $t, $ce),
        }
    };
    (@ce $self:ident, $t:ident, no) => {
        Start::Other
    };
    (@ce $self:ident, $t:ident, yes) => {
        match $t {
            ty::CE_COLL => unsafe {
                let c = *$self.u.ce_coll.v6();
                Start::CeColl {
                    seq: c.seq,
                    func: core::func_code(text(c.func)),
                    count: c.count as u64,
                    root: c.root,
                    dtype: core::dtype_code(text(c.datatype)),
                }
            }
            _ => Start::Other,
        }
    };
    (@group $self:ident, $map:ident, no) => {};
    (@group $self:ident, $map:ident, yes) => {
        // SAFETY: `ty` names the member written; parentGroup is a plain pointer field.
        unsafe {
            match $self.ty {
                t if t == ty::COLL => $self.u.coll.parent_group = $map($self.u.coll.parent_group),
                t if t == ty::P2P => $self.u.p2p.parent_group = $map($self.u.p2p.parent_group),
                _ => {}
            }
        }
    };
}

v4_plus!(DescrV4, 4, no, no);
v4_plus!(DescrV5, 5, yes, no);
v4_plus!(DescrV6, 6, yes, yes);
v4_plus!(DescrV7, 7, yes, yes);

// ----- the generic callbacks ---------------------------------------------------------------

/// v7's copy-engine collective is v6's plus `userTag`.
trait CeCollV6Prefix {
    fn v6(&self) -> &abi::CeCollV6;
}
impl CeCollV6Prefix for abi::CeCollV6 {
    fn v6(&self) -> &abi::CeCollV6 {
        self
    }
}
impl CeCollV6Prefix for abi::CeCollV7 {
    fn v6(&self) -> &abi::CeCollV6 {
        &self.base
    }
}

/// What `init` learned, common to all versions.
struct Init {
    abi: u8,
    comm_hash: u64,
    rank: i32,
}

/// # Safety
/// `context` and `mask` are valid for writes (NCCL's out-parameters); `chain_init` calls the
/// chained plugin's init of the same version with NCCL's other arguments.
unsafe fn init_any(
    context: *mut *mut c_void,
    mask: *mut c_int,
    info: Init,
    chain_init: impl FnOnce(&abi::ForeignPlugin, *mut *mut c_void, *mut c_int) -> c_int,
) -> c_int {
    if context.is_null() || mask.is_null() {
        return SUCCESS;
    }
    PID.store(std::process::id(), std::sync::atomic::Ordering::Relaxed);
    let mut chain_ctx: *mut c_void = std::ptr::null_mut();
    let settings = shielded(chain::settings);
    if let Some(plugin) = shielded(|| chain::lookup(info.abi)).flatten() {
        if !plugin.init.is_null() && chain_init(plugin, &mut chain_ctx, chain::chain_mask_slot()) != SUCCESS {
            chain_ctx = std::ptr::null_mut();
        }
    }
    let recording = shielded(|| runtime::active().is_some()).unwrap_or(false);
    if recording {
        doors::opened(doors::PROFILER);
    }
    let own = if recording { core::own_mask(settings.is_some_and(|s| s.kernel_ch), info.abi) } else { 0 };
    let opened = shielded(|| {
        core::open_context(info.abi, info.comm_hash, info.rank, own, chain_ctx as usize, chain::chain_mask())
    })
    .flatten();
    let (ctx, own) = match opened {
        Some(ctx) => (ctx as *mut c_void, own),
        // No context left: forward only, with the chained plugin's own context.
        None => (chain_ctx, 0),
    };
    let chained = !chain_ctx.is_null();
    // SAFETY: NCCL's out-parameters, checked non-null above.
    unsafe {
        *context = ctx;
        *mask = if chained { chain::set_masks(mask, own) } else { own as c_int };
    }
    SUCCESS
}

/// # Safety
/// NCCL's startEvent arguments for ABI `D`.
unsafe fn start_any<D: Descr>(context: *mut c_void, handle: *mut *mut c_void, descr: *mut D) -> c_int {
    if handle.is_null() || descr.is_null() {
        return SUCCESS;
    }
    // SAFETY: NCCL passes a valid descriptor of this version for the duration of the call.
    let d = unsafe { *descr };
    let event_ty = d.ty();
    // PXN: a proxy operation this process runs for another one carries the other process's
    // pid, context and parent pointers (src/proxy.cc, ncclProfilerAddPidToProxyOp, at
    // v2.30.7-1), and its steps and network events the same context. Such pointers are
    // never looked up here (in a forked sibling they may even fall inside this pool); the
    // events are recorded with no communicator and no sequence number, never another's,
    // and not forwarded (the chained plugin's context for them lives in the other process).
    let foreign = d.proxy_pid().is_some_and(|pid| pid as u32 != PID.load(std::sync::atomic::Ordering::Relaxed))
        || core::event(d.parent() as usize).is_some_and(|p| p.foreign());
    let ours = if foreign { None } else { core::context(context as usize) };
    let (chain_ctx, own_mask) = match ours {
        Some(c) => (c.chain(), c.own_mask()),
        None if foreign => {
            let kernel_ch = shielded(chain::settings).is_some_and(|s| s.kernel_ch);
            let recording = shielded(|| runtime::active().is_some()).unwrap_or(false);
            (0, if recording { core::own_mask(kernel_ch, D::ABI) } else { 0 })
        }
        None => {
            // A communicator the context pool had no room for: its events are lost to
            // this door, and counted.
            shielded(|| {
                if runtime::active().is_some() && core::own_mask(false, D::ABI) & event_ty != 0 {
                    core::dropped_without_context();
                }
            });
            (context as usize, 0) // a chained plugin's context (see init_any)
        }
    };
    // The chained mask in force: the parent's if it is one of this door's events, else
    // read afresh where NCCL reads its mask, at an API call's first event (GroupApi from v5,
    // the Group up to v4; see Context::chain_mask).
    // Without a chained plugin there is nothing to work out.
    let chain_table = chain::table(D::ABI);
    let call_starts = event_ty == if D::ABI >= 5 { ty::GROUP_API } else { ty::GROUP };
    let chain_mask = match (core::event(d.parent() as usize).and_then(|p| p.chain_mask()), ours) {
        _ if chain_table.is_none() => 0,
        (Some(inherited), _) => inherited,
        (None, Some(c)) if call_starts => {
            c.set_chain_mask(chain::chain_mask());
            c.chain_mask()
        }
        (None, Some(c)) => c.chain_mask(),
        (None, None) => chain::chain_mask(),
    };
    let mut chain_handle: *mut c_void = std::ptr::null_mut();
    if let Some(start) = chain_table.and_then(|t| t.start) {
        let version = chain::version(D::ABI);
        if chain_ctx != 0 && core::started_types(chain_mask, version) & event_ty != 0 {
            let mut copy = d;
            copy.reparent(|p| core::event(p as usize).map_or(p, |parent| parent.chain() as *mut c_void));
            // SAFETY: `copy` is a whole descriptor of version D::ABI; `lookup` chose a version
            // it converts to.
            let mut converted = (version != D::ABI)
                .then(|| unsafe { convert::convert((&copy as *const D).cast(), D::ABI, version, event_ty) })
                .flatten();
            let descr: *mut c_void = match converted.as_mut() {
                _ if version == D::ABI => (&mut copy as *mut D).cast(),
                Some(buf) => buf.as_mut_ptr().cast(),
                None => std::ptr::null_mut(), // a type the chained plugin's version lacks
            };
            if !descr.is_null() {
                // SAFETY: the chained plugin's startEvent of its version, with its own context
                // and a descriptor of that version's layout that lives for the call.
                unsafe { start(chain_ctx as *mut c_void, &mut chain_handle, descr) };
                chain::fold_mask();
            }
        }
    }
    let mine = if own_mask & event_ty != 0 {
        shielded(|| {
            // SAFETY: `d` is NCCL's descriptor for this call (see Descr::start).
            let what = unsafe { d.start() };
            let chain = chain_handle as usize;
            let (ctx, parent) = match (foreign, d.proxy_pid()) {
                (true, Some(_)) => (0, 0),                // the originating process's context and task
                (true, None) => (0, d.parent() as usize), // this process's foreign operation
                (false, _) => (context as usize, d.parent() as usize),
            };
            core::start(ctx, parent, d.rank(), D::ABI, what, chain, chain_mask, foreign)
        })
        .unwrap_or(0)
    } else {
        0
    };
    // SAFETY: NCCL's out-parameter, checked non-null above.
    unsafe { *handle = if mine != 0 { mine as *mut c_void } else { chain_handle } };
    SUCCESS
}

fn stop_any(abi: u8, handle: *mut c_void) -> c_int {
    let chained = match core::event(handle as usize) {
        Some(event) => {
            // Read before the stop, which may free the slot for reuse.
            let chained = event.chain();
            shielded(|| core::stop(event));
            chained
        }
        None => handle as usize,
    };
    if let (Some(stop), true) = (chain::table(abi).and_then(|t| t.stop), chained != 0) {
        // SAFETY: the chained plugin's stopEvent with the handle its startEvent returned.
        unsafe { stop(chained as *mut c_void) };
        chain::fold_mask();
    }
    SUCCESS
}

/// # Safety
/// NCCL's recordEventState arguments: `args` null or the version's state-argument union.
unsafe fn record_any(abi: u8, handle: *mut c_void, state: c_int, args: *mut c_void) -> c_int {
    let chained = match core::event(handle as usize) {
        Some(event) => {
            shielded(|| {
                let size = (!args.is_null() && core::takes_trans_size(event))
                    // SAFETY: in every version the proxyOp (v1–v3) / proxyStep (v4+)
                    // arguments start with `size_t transSize`, and the union is at least
                    // that large.
                    .then(|| unsafe { *(args as *const usize) } as u64);
                core::state(event, state, size)
            });
            event.chain()
        }
        None => handle as usize,
    };
    if let (Some(record), true) = (chain::table(abi).and_then(|t| t.record), chained != 0) {
        // SAFETY: the chained plugin's recordEventState with its own handle and NCCL's args.
        unsafe { record(chained as *mut c_void, state, args) };
        chain::fold_mask();
    }
    SUCCESS
}

fn finalize_any(abi: u8, context: *mut c_void) -> c_int {
    let chained = match core::context(context as usize) {
        Some(c) => {
            let chained = c.chain();
            core::close_context(context as usize);
            chained
        }
        None => context as usize,
    };
    if let (Some(finalize), true) = (chain::table(abi).and_then(|t| t.finalize), chained != 0) {
        // SAFETY: the chained plugin's finalize with the context its init returned.
        unsafe { finalize(chained as *mut c_void) };
    }
    SUCCESS
}

// ----- per-version entry points --------------------------------------------------------------

macro_rules! common_entries {
    ($abi:expr, $descr:ty, $start:ident, $stop:ident, $record:ident, $finalize:ident) => {
        unsafe extern "C" fn $start(context: *mut c_void, handle: *mut *mut c_void, descr: *mut c_void) -> c_int {
            // SAFETY: NCCL calls this table's startEvent with a descriptor of this version.
            unsafe { start_any::<$descr>(context, handle, descr.cast()) }
        }
        unsafe extern "C" fn $stop(handle: *mut c_void) -> c_int {
            stop_any($abi, handle)
        }
        unsafe extern "C" fn $record(handle: *mut c_void, state: c_int, args: *mut c_void) -> c_int {
            // SAFETY: NCCL's recordEventState arguments for this version.
            unsafe { record_any($abi, handle, state, args) }
        }
        unsafe extern "C" fn $finalize(context: *mut c_void) -> c_int {
            finalize_any($abi, context)
        }
    };
}

macro_rules! v1_family {
    ($abi:expr, $descr:ty, $static:ident, $init:ident, $start:ident, $stop:ident, $record:ident, $finalize:ident) => {
        common_entries!($abi, $descr, $start, $stop, $record, $finalize);
        unsafe extern "C" fn $init(context: *mut *mut c_void, mask: *mut c_int) -> c_int {
            let info = Init { abi: $abi, comm_hash: 0, rank: -1 };
            // SAFETY: NCCL's out-parameters; the chained init is the same version's.
            unsafe {
                init_any(context, mask, info, |p, ctx, m| {
                    let init = std::mem::transmute::<*const c_void, InitV1>(p.init);
                    init(ctx, m)
                })
            }
        }
        #[cfg_attr(not(test), no_mangle)]
        #[allow(non_upper_case_globals)]
        pub static $static: Plugin<InitV1> =
            Plugin { name: NAME, init: $init, start: $start, stop: $stop, record: $record, finalize: $finalize };
    };
}

v1_family!(1, DescrV1, ncclProfiler_v1, init_v1, start_v1, stop_v1, record_v1, finalize_v1);
v1_family!(2, DescrV2, ncclProfiler_v2, init_v2, start_v2, stop_v2, record_v2, finalize_v2);
v1_family!(3, DescrV3, ncclProfiler_v3, init_v3, start_v3, stop_v3, record_v3, finalize_v3);

common_entries!(4, DescrV4, start_v4, stop_v4, record_v4, finalize_v4);

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn init_v4(
    context: *mut *mut c_void,
    mask: *mut c_int,
    comm_name: *const c_char,
    comm_hash: u64,
    n_nodes: c_int,
    nranks: c_int,
    rank: c_int,
    logfn: *mut c_void,
) -> c_int {
    let info = Init { abi: 4, comm_hash, rank };
    // SAFETY: NCCL's arguments, forwarded to the chained init of the version the chained
    // plugin has (v5 to v7 take the same arguments in another order, the hash as the id).
    unsafe {
        init_any(context, mask, info, |p, ctx, m| {
            if chain::version(4) == 4 {
                let init = std::mem::transmute::<*const c_void, InitV4>(p.init);
                init(ctx, m, comm_name, comm_hash, n_nodes, nranks, rank, logfn)
            } else {
                let init = std::mem::transmute::<*const c_void, InitV5>(p.init);
                init(ctx, comm_hash, m, comm_name, n_nodes, nranks, rank, logfn)
            }
        })
    }
}

#[cfg_attr(not(test), no_mangle)]
#[allow(non_upper_case_globals)]
pub static ncclProfiler_v4: Plugin<InitV4> =
    Plugin { name: NAME, init: init_v4, start: start_v4, stop: stop_v4, record: record_v4, finalize: finalize_v4 };

macro_rules! v5_family {
    ($abi:expr, $descr:ty, $static:ident, $init:ident, $start:ident, $stop:ident, $record:ident, $finalize:ident) => {
        common_entries!($abi, $descr, $start, $stop, $record, $finalize);
        #[allow(clippy::too_many_arguments)]
        unsafe extern "C" fn $init(
            context: *mut *mut c_void,
            comm_id: u64,
            mask: *mut c_int,
            comm_name: *const c_char,
            n_nodes: c_int,
            nranks: c_int,
            rank: c_int,
            logfn: *mut c_void,
        ) -> c_int {
            let info = Init { abi: $abi, comm_hash: comm_id, rank };
            // SAFETY: NCCL's arguments, forwarded to the chained init of the version the
            // chained plugin has (v4's takes the same arguments in another order).
            unsafe {
                init_any(context, mask, info, |p, ctx, m| {
                    if chain::version($abi) == 4 {
                        let init = std::mem::transmute::<*const c_void, InitV4>(p.init);
                        init(ctx, m, comm_name, comm_id, n_nodes, nranks, rank, logfn)
                    } else {
                        let init = std::mem::transmute::<*const c_void, InitV5>(p.init);
                        init(ctx, comm_id, m, comm_name, n_nodes, nranks, rank, logfn)
                    }
                })
            }
        }
        #[cfg_attr(not(test), no_mangle)]
        #[allow(non_upper_case_globals)]
        pub static $static: Plugin<InitV5> =
            Plugin { name: NAME, init: $init, start: $start, stop: $stop, record: $record, finalize: $finalize };
    };
}

v5_family!(5, DescrV5, ncclProfiler_v5, init_v5, start_v5, stop_v5, record_v5, finalize_v5);
v5_family!(6, DescrV6, ncclProfiler_v6, init_v6, start_v6, stop_v6, record_v6, finalize_v6);
v5_family!(7, DescrV7, ncclProfiler_v7, init_v7, start_v7, stop_v7, record_v7, finalize_v7);
