//! The libibverbs fallback door (SF_VERBS=1): RDMA work requests of NCCL older than 2.26
//! (no profiler network events) and of other programs that look verbs up with `dlvsym`.
//!
//! `dlvsym` (dlvsym.rs) hands out wrappers of `ibv_open_device`, `ibv_close_device` and
//! `ibv_create_qp`, and the library exports those three verbs for programs linked against
//! libibverbs (linked.rs); both run the same `*_through` functions below. Once the real
//! `ibv_open_device` returns a context, the door replaces
//! the three entries of its ops table that the header's inline `ibv_post_send`,
//! `ibv_post_recv` and `ibv_poll_cq` call (`qp->context->ops.post_send`, ...,
//! `cq->context->ops.poll_cq`) with counting wrappers that call the provider's originals,
//! kept in core::verbs, and return their results untouched. A context whose layout does
//! not look like rdma-core's is left alone, with one stderr line.
//!
//! The wrappers take no reentrancy guard: nothing they record calls verbs, and a WR posted
//! from inside an NCCL call (a thread holding the NCCL door's guard) must still count.

pub mod abi;
mod dlvsym;
mod linked;

pub use dlvsym::dlvsym;
pub use linked::{ibv_close_device, ibv_create_qp, ibv_open_device};

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::core::live::runtime;
use crate::core::log::records_ports::DeviceState;
use crate::core::net::verbs::{self, Completion, Originals, SendWr};
use crate::core::record::clock::now_ticks;
use crate::core::record::doors;
use crate::core::record::notice::say;
use crate::doors::traced::shielded;
use abi::*;

type OpenDeviceFn = unsafe extern "C" fn(*mut IbvDevice) -> *mut IbvContext;
type CloseDeviceFn = unsafe extern "C" fn(*mut IbvContext) -> c_int;
type CreateQpFn = unsafe extern "C" fn(*mut c_void, *mut IbvQpInitAttr) -> *mut IbvQp;

static REAL_OPEN_DEVICE: AtomicUsize = AtomicUsize::new(0);
static REAL_CLOSE_DEVICE: AtomicUsize = AtomicUsize::new(0);
static REAL_CREATE_QP: AtomicUsize = AtomicUsize::new(0);

/// Longest WR list and scatter/gather list the door walks (a longer one is counted short).
const MAX_WRS: usize = 1 << 16;
const MAX_SGES: usize = 1 << 10;

/// The wrapper to hand out for the verb `name` whose real address is `found`; None leaves
/// the lookup's answer as it is (another verb, a second libibverbs in the process, or
/// the library's own export, found through a handle whose scope holds this library).
fn wrapper_for(name: &[u8], found: *mut c_void) -> Option<*mut c_void> {
    let (real, wrapper) = match name {
        b"ibv_open_device" => (&REAL_OPEN_DEVICE, open_device as *mut c_void),
        b"ibv_close_device" => (&REAL_CLOSE_DEVICE, close_device as *mut c_void),
        b"ibv_create_qp" => (&REAL_CREATE_QP, create_qp as *mut c_void),
        _ => return None,
    };
    if found == wrapper || linked::is_export(found) {
        return None;
    }
    match real.compare_exchange(0, found as usize, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(wrapper),
        Err(known) if known == found as usize => Some(wrapper),
        Err(_) => None,
    }
}

unsafe extern "C" fn open_device(device: *mut IbvDevice) -> *mut IbvContext {
    // SAFETY: `wrapper_for` stored the real ibv_open_device before handing this out.
    let real = unsafe { std::mem::transmute::<usize, OpenDeviceFn>(REAL_OPEN_DEVICE.load(Ordering::Acquire)) };
    // SAFETY: the real verb and the caller's argument.
    unsafe { open_device_through(real, device) }
}

unsafe extern "C" fn close_device(context: *mut IbvContext) -> c_int {
    // SAFETY: as in `open_device`.
    let real = unsafe { std::mem::transmute::<usize, CloseDeviceFn>(REAL_CLOSE_DEVICE.load(Ordering::Acquire)) };
    // SAFETY: the real verb and the caller's argument.
    unsafe { close_device_through(real, context) }
}

unsafe extern "C" fn create_qp(pd: *mut c_void, attr: *mut IbvQpInitAttr) -> *mut IbvQp {
    // SAFETY: as in `open_device`.
    let real = unsafe { std::mem::transmute::<usize, CreateQpFn>(REAL_CREATE_QP.load(Ordering::Acquire)) };
    // SAFETY: the real verb and the caller's arguments.
    unsafe { create_qp_through(real, pd, attr) }
}

/// `ibv_open_device` with SF_VERBS=1: the real call, then the context is adopted.
///
/// # Safety
/// `real` is libibverbs' `ibv_open_device`; `device` is the caller's argument.
unsafe fn open_device_through(real: OpenDeviceFn, device: *mut IbvDevice) -> *mut IbvContext {
    // SAFETY: forwarding the caller's argument unchanged.
    let context = unsafe { real(device) };
    if !context.is_null() {
        // SAFETY: the real ibv_open_device just returned this live context.
        shielded(|| unsafe { adopt(context) });
    }
    context
}

/// `ibv_close_device` with SF_VERBS=1: the context's slot is released, then the real call.
///
/// # Safety
/// `real` is libibverbs' `ibv_close_device`; `context` is the caller's argument.
unsafe fn close_device_through(real: CloseDeviceFn, context: *mut IbvContext) -> c_int {
    // Released first: once the real call frees it, a new context may get the same address.
    shielded(|| verbs::release_context(context as usize));
    // SAFETY: forwarding the caller's argument unchanged.
    unsafe { real(context) }
}

/// `ibv_create_qp` with SF_VERBS=1: the real call, then the QP's `sq_sig_all` is noted.
///
/// # Safety
/// `real` is libibverbs' `ibv_create_qp`; `pd` and `attr` are the caller's arguments.
unsafe fn create_qp_through(real: CreateQpFn, pd: *mut c_void, attr: *mut IbvQpInitAttr) -> *mut IbvQp {
    // SAFETY: forwarding the caller's arguments unchanged.
    let qp = unsafe { real(pd, attr) };
    if !qp.is_null() {
        shielded(|| {
            // SAFETY: a QP the real ibv_create_qp just returned; `attr` is the caller's
            // init attributes, which the real call read.
            let (context, qp_num, sig_all) =
                unsafe { ((*qp).context, (*qp).qp_num, !attr.is_null() && (*attr).sq_sig_all != 0) };
            if verbs::context(context as usize).is_none() {
                // Opened where the door did not see it (looked up before SF_VERBS's door).
                // SAFETY: the QP's own context is live while the QP is.
                unsafe { adopt(context) };
            }
            if let Some((device, _)) = verbs::context(context as usize) {
                verbs::qp_created(device, qp_num, sig_all);
            }
        });
    }
    qp
}

/// Replaces the context's post/poll entries with the counting wrappers, after checking
/// that it looks like rdma-core's `ibv_context`.
///
/// # Safety
/// `context` is a live context returned by the real libibverbs.
unsafe fn adopt(context: *mut IbvContext) {
    if runtime::active().is_none() || verbs::context(context as usize).is_some() {
        return;
    }
    doors::opened(doors::VERBS);
    // SAFETY: the caller's contract; the ops table is inside the context.
    let ops = unsafe { &raw mut (*context).ops };
    // SAFETY: `ops` points into the live context; plain reads of three words.
    let originals =
        unsafe { Originals { post_send: (*ops).post_send, post_recv: (*ops).post_recv, poll_cq: (*ops).poll_cq } };
    // SAFETY: reads the device pointer of the live context.
    let name = match unsafe { device_name((*context).device) } {
        Some(name) => name,
        None => return refuse(b"", "its device name is unreadable"),
    };
    let name = &name.0[..name.1];
    let ours = [post_send as *const () as usize, post_recv as *const () as usize, poll_cq as *const () as usize];
    let sane = |address: usize| address != 0 && !ours.contains(&address) && in_loaded_object(address);
    if ![originals.post_send, originals.post_recv, originals.poll_cq].into_iter().all(sane) {
        return refuse(name, "its post_send/post_recv/poll_cq entries do not point into loaded code");
    }
    if verbs::adopt_context(context as usize, originals, name).is_none() {
        return refuse(name, "every context slot is taken");
    }
    // SAFETY: addresses of three words inside the live context's ops table.
    let entries = unsafe { [&raw mut (*ops).post_send, &raw mut (*ops).post_recv, &raw mut (*ops).poll_cq] };
    for (entry, wrapper) in entries.into_iter().zip(ours) {
        // SAFETY: an aligned word of the live context; an atomic store because another
        // thread may already be posting through a context the door adopts late.
        unsafe { AtomicUsize::from_ptr(entry) }.store(wrapper, Ordering::Release);
    }
}

fn refuse(name: &[u8], why: &str) {
    static SAID: AtomicBool = AtomicBool::new(false);
    verbs::note_device(-1, name, DeviceState::Refused);
    if !SAID.swap(true, Ordering::Relaxed) {
        say(&format!(
            "SF_VERBS: leaving verbs context of device {:?} alone: {why}; its work requests are not counted",
            String::from_utf8_lossy(name)
        ));
    }
}

/// Whether `address` lies in a loaded object (code a provider library mapped).
fn in_loaded_object(address: usize) -> bool {
    // SAFETY: Dl_info is plain data; dladdr only reads the loader's tables.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::dladdr(address as *const c_void, &mut info) != 0 && !info.dli_fbase.is_null() }
}

/// The device's name if it reads as one: printable ASCII, NUL-terminated within
/// `IBV_SYSFS_NAME_MAX`. Read through a pipe, so a pointer that is not what the layout
/// says fails with EFAULT instead of faulting.
///
/// # Safety
/// None beyond the pointer being a value the context holds; it is never dereferenced.
unsafe fn device_name(device: *mut IbvDevice) -> Option<([u8; DEVICE_NAME_MAX], usize)> {
    if device.is_null() {
        return None;
    }
    // SAFETY: computes an address only; the read goes through the kernel.
    let name = unsafe { (&raw const (*device).name).cast::<u8>() };
    let mut buf = [0u8; DEVICE_NAME_MAX];
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: write copies from `name` in the kernel (EFAULT if unmapped); read fills `buf`;
    // both descriptors are ours and closed here.
    let read = unsafe {
        let written = libc::write(fds[1], name.cast(), DEVICE_NAME_MAX);
        let read = if written == DEVICE_NAME_MAX as isize {
            libc::read(fds[0], buf.as_mut_ptr().cast(), DEVICE_NAME_MAX)
        } else {
            -1
        };
        libc::close(fds[0]);
        libc::close(fds[1]);
        read
    };
    if read != DEVICE_NAME_MAX as isize {
        return None;
    }
    let len = buf.iter().position(|&b| b == 0)?;
    (len > 0 && buf[..len].iter().all(|b| b.is_ascii_graphic())).then_some((buf, len))
}

/// The device id and originals for a context whose ops reached a wrapper.
#[inline]
fn originals_of(context: *mut IbvContext) -> Option<(i32, Originals)> {
    verbs::context(context as usize).or_else(verbs::any_context)
}

/// `ops.post_send`.
unsafe extern "C" fn post_send(qp: *mut IbvQp, wr: *mut IbvSendWr, bad_wr: *mut *mut IbvSendWr) -> c_int {
    let count = |device, qp_num, stop, t| {
        // SAFETY: the caller's WR list is valid for the call; `stop` ends it at the first WR
        // the provider did not take.
        unsafe {
            let sends = wr_list(wr, stop, |w| (*w).next).map(|w| SendWr {
                wr_id: (*w).wr_id,
                bytes: sge_bytes((*w).sg_list, (*w).num_sge),
                signaled: (*w).send_flags & SEND_SIGNALED != 0,
            });
            verbs::sends_posted(device, qp_num, sends, t);
        }
    };
    // SAFETY: the header's ibv_post_send called us through `qp->context->ops` with its own
    // arguments, and `post_send` is that verb's saved original.
    unsafe { forward_post(qp, wr, bad_wr, |o| o.post_send, count) }
}

/// `ops.post_recv`.
unsafe extern "C" fn post_recv(qp: *mut IbvQp, wr: *mut IbvRecvWr, bad_wr: *mut *mut IbvRecvWr) -> c_int {
    let count = |device, qp_num, stop, t| {
        // SAFETY: as in `post_send`.
        unsafe {
            let recvs = wr_list(wr, stop, |w| (*w).next).map(|w| sge_bytes((*w).sg_list, (*w).num_sge));
            verbs::recvs_posted(device, qp_num, recvs, t);
        }
    };
    // SAFETY: as in `post_send`, for ibv_post_recv and its saved `post_recv`.
    unsafe { forward_post(qp, wr, bad_wr, |o| o.post_recv, count) }
}

/// What both post verbs do around their own WR walk: find the context's originals, call
/// the provider's function (`original` picks it) with the caller's arguments, and, while
/// the runtime is active, hand `count` the device, the QP number, where the WRs the
/// provider took end (see `first_rejected`) and the post's tick. Returns the provider's
/// result untouched.
///
/// # Safety
/// `qp`, `wr` and `bad_wr` are the arguments the header's `ibv_post_*` passed to the
/// wrapper it found in `qp->context->ops`, and `original` picks that same verb's saved
/// function, whose signature is `(qp, wr, bad_wr) -> int` for WRs of type `W`.
#[inline(always)]
unsafe fn forward_post<W>(
    qp: *mut IbvQp,
    wr: *mut W,
    bad_wr: *mut *mut W,
    original: impl FnOnce(&Originals) -> usize,
    count: impl FnOnce(i32, u32, Option<*mut W>, u64),
) -> c_int {
    // SAFETY: the header's ibv_post_* reached the wrapper through `qp->context->ops`: `qp`
    // is live.
    let Some((device, originals)) = originals_of(unsafe { (*qp).context }) else { return libc::EINVAL };
    let saved = original(&originals);
    // SAFETY: the provider's function for this verb, saved from this context's ops table;
    // post_send and post_recv both have PostFn's shape.
    let real = unsafe { std::mem::transmute::<usize, PostFn<W>>(saved) };
    let t = now_ticks();
    // SAFETY: forwarding the caller's arguments unchanged.
    let rc = unsafe { real(qp, wr, bad_wr) };
    if runtime::is_active() {
        shielded(|| {
            // SAFETY: `qp` is live (above); on failure `*bad_wr` is the first WR the
            // provider did not take.
            let (qp_num, stop) = unsafe { ((*qp).qp_num, first_rejected(rc, bad_wr)) };
            count(device, qp_num, stop, t);
        });
    }
    rc
}

/// `ops.poll_cq`.
unsafe extern "C" fn poll_cq(cq: *mut IbvCq, num_entries: c_int, wc: *mut IbvWc) -> c_int {
    // SAFETY: the header's ibv_poll_cq reached us through `cq->context->ops`: `cq` is live.
    let Some((device, originals)) = originals_of(unsafe { (*cq).context }) else { return -libc::EINVAL };
    // SAFETY: the provider's poll_cq, saved from this context's ops table.
    let real = unsafe { std::mem::transmute::<usize, PollCqFn>(originals.poll_cq) };
    // SAFETY: forwarding the caller's arguments unchanged.
    let polled = unsafe { real(cq, num_entries, wc) };
    if polled > 0 && runtime::is_active() {
        let t = now_ticks();
        shielded(|| {
            // SAFETY: the provider filled the first `polled` entries of the caller's array.
            let entries = unsafe { std::slice::from_raw_parts(wc, polled.min(num_entries.max(0)) as usize) };
            let completions = entries.iter().map(|e| Completion {
                wr_id: e.wr_id,
                status: e.status,
                opcode: e.opcode,
                byte_len: e.byte_len,
                qp_num: e.qp_num,
            });
            verbs::completions(device, completions, t);
        });
    }
    polled
}

/// Where counting stops: at the WR the provider rejected, or (success) at the list's end.
///
/// # Safety
/// `bad_wr` is the caller's out-parameter, written by the provider on failure.
unsafe fn first_rejected<T>(rc: c_int, bad_wr: *mut *mut T) -> Option<*mut T> {
    match rc {
        0 => None,
        // SAFETY: the caller's contract.
        _ if !bad_wr.is_null() => Some(unsafe { *bad_wr }),
        // A failure without the out-parameter: nothing can be said to be posted.
        _ => Some(std::ptr::null_mut()),
    }
}

/// The WRs of a list from `first` up to (not including) `stop`, or to its end.
fn wr_list<T>(first: *mut T, stop: Option<*mut T>, next: impl Fn(*mut T) -> *mut T) -> impl Iterator<Item = *mut T> {
    let first = if stop == Some(std::ptr::null_mut()) { std::ptr::null_mut() } else { first };
    std::iter::successors((!first.is_null()).then_some(first), move |&w| {
        let n = next(w);
        (!n.is_null() && Some(n) != stop).then_some(n)
    })
    .take_while(move |&w| Some(w) != stop)
    .take(MAX_WRS)
}

/// Bytes a scatter/gather list covers.
///
/// # Safety
/// `sges` points at `count` entries, as the verbs contract requires of a posted WR.
unsafe fn sge_bytes(sges: *const IbvSge, count: c_int) -> u64 {
    if sges.is_null() || count <= 0 {
        return 0;
    }
    // SAFETY: the caller's contract.
    let sges = unsafe { std::slice::from_raw_parts(sges, (count as usize).min(MAX_SGES)) };
    sges.iter().map(|s| s.length as u64).sum()
}

/// Whether the door is on (SF_VERBS=1 at load).
pub fn enabled() -> bool {
    dlvsym::enabled()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    struct Node {
        next: *mut Node,
    }

    fn chain(n: usize) -> Vec<Node> {
        let mut nodes: Vec<Node> = (0..n).map(|_| Node { next: std::ptr::null_mut() }).collect();
        for i in 0..n.saturating_sub(1) {
            nodes[i].next = &mut nodes[i + 1] as *mut Node;
        }
        nodes
    }

    fn walk(nodes: &mut [Node], stop: Option<usize>) -> usize {
        let first = nodes.as_mut_ptr();
        let stop = stop.map(|i| if i == usize::MAX { std::ptr::null_mut() } else { &mut nodes[i] as *mut Node });
        // SAFETY: the nodes are live and linked above.
        wr_list(first, stop, |w| unsafe { (*w).next }).count()
    }

    #[test]
    fn wr_lists_stop_at_the_rejected_wr() {
        let mut nodes = chain(5);
        assert_eq!(walk(&mut nodes, None), 5, "success: the whole list");
        assert_eq!(walk(&mut nodes, Some(3)), 3, "rejected at the fourth: three were posted");
        assert_eq!(walk(&mut nodes, Some(0)), 0, "rejected at the first: none");
        assert_eq!(walk(&mut nodes, Some(usize::MAX)), 0, "failed without naming one: none");
        assert_eq!(wr_list(std::ptr::null_mut::<Node>(), None, |w| w).count(), 0);
    }

    #[test]
    fn only_the_counted_verbs_are_wrapped() {
        let fake = 0x1234 as *mut c_void;
        assert_eq!(wrapper_for(b"ibv_alloc_pd", fake), None);
        assert_eq!(wrapper_for(b"ibv_create_qp", fake), Some(create_qp as *mut c_void));
        assert_eq!(wrapper_for(b"ibv_create_qp", fake), Some(create_qp as *mut c_void), "same library again");
        assert_eq!(wrapper_for(b"ibv_create_qp", 0x5678 as *mut c_void), None, "a second libibverbs is left alone");
        assert_eq!(wrapper_for(b"ibv_create_qp", create_qp as *mut c_void), None, "never wraps itself");
        assert_eq!(wrapper_for(b"ibv_create_qp", ibv_create_qp as *mut c_void), None, "nor the library's export");
    }

    #[test]
    fn device_names_are_read_safely() {
        let mut device = IbvDevice { _ops: [0; 2], node_type: 1, transport_type: 0, name: [0; DEVICE_NAME_MAX] };
        for (i, b) in b"mlx5_0".iter().enumerate() {
            device.name[i] = *b as _;
        }
        // SAFETY: a live device struct.
        let (buf, len) = unsafe { device_name(&mut device) }.unwrap();
        assert_eq!(&buf[..len], b"mlx5_0");
        device.name = [b'x' as _; DEVICE_NAME_MAX];
        // SAFETY: as above.
        assert!(unsafe { device_name(&mut device) }.is_none(), "no NUL within the field");
        // SAFETY: an unmapped address is read through the kernel, never dereferenced.
        assert!(unsafe { device_name(16 as *mut IbvDevice) }.is_none());
    }

    #[test]
    fn code_addresses_are_in_loaded_objects() {
        assert!(in_loaded_object(libc::getpid as *const () as usize));
        assert!(!in_loaded_object(16));
    }
}
