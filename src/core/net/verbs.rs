//! What the verbs fallback door (SF_VERBS=1, src/doors/net/verbs.rs) keeps between calls, and
//! how it turns verbs calls into the work-request contract (`work_requests::{posted,
//! completed}`). Plain values only: the door reads the C structs and hands them here.
//!
//! - Contexts: one slot per opened device context holds the provider's original
//!   `post_send`/`post_recv`/`poll_cq` (as addresses) and the device id the door assigned;
//!   the hot path finds its slot by the context address in a short scan.
//! - Queue pairs: per (device, QP number), whether every send is signaled
//!   (`sq_sig_all`), the bytes of unsignaled sends not yet carried by a signaled one, and
//!   a ring of the bytes of signaled sends in flight, so a send completion (whose
//!   `byte_len` the verbs spec leaves undefined) counts the bytes its post moved.
//!
//! Every table is fixed-size and lock-free on the hot path; a full one is counted.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::core::log::records::{RecordBody, Text, VerbsDevice};
use crate::core::log::records_net::WrSource;
use crate::core::log::records_ports::DeviceState;
use crate::core::net::work_requests::{self, QpKey};

/// Device contexts open at once (NCCL opens one per HCA port it uses).
pub const CONTEXTS: usize = 32;
/// Queue pairs tracked at once (NCCL opens a few per connection and channel).
pub const QPS: usize = 512;
/// Signaled sends per QP whose bytes are remembered until they complete.
const SEND_RING: usize = 64;
/// Slots a QP lookup probes.
const PROBE: usize = 16;
/// `IBV_WC_RECV`: completions of receive queues have this bit in `ibv_wc::opcode`.
pub const WC_RECV: u32 = 1 << 7;

/// The provider's entry points of one context, as addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Originals {
    pub post_send: usize,
    pub post_recv: usize,
    pub poll_cq: usize,
}

struct ContextSlot {
    context: AtomicUsize,
    device: AtomicI32,
    post_send: AtomicUsize,
    post_recv: AtomicUsize,
    poll_cq: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE_CONTEXT: ContextSlot = ContextSlot {
    context: AtomicUsize::new(0),
    device: AtomicI32::new(-1),
    post_send: AtomicUsize::new(0),
    post_recv: AtomicUsize::new(0),
    poll_cq: AtomicUsize::new(0),
};

static CONTEXT_SLOTS: [ContextSlot; CONTEXTS] = [FREE_CONTEXT; CONTEXTS];
static NEXT_DEVICE: AtomicI32 = AtomicI32::new(0);

/// Takes a slot for a context whose entry points the door is about to replace; returns the
/// device id its work requests are counted under, None when every slot is taken.
pub fn adopt_context(context: usize, originals: Originals, name: &[u8]) -> Option<i32> {
    let slot = CONTEXT_SLOTS.iter().find(|s| {
        s.context.load(Ordering::Acquire) == 0
            && s.context.compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    });
    let Some(slot) = slot else {
        note_device(-1, name, DeviceState::NoSlot);
        return None;
    };
    let device = NEXT_DEVICE.fetch_add(1, Ordering::Relaxed);
    slot.device.store(device, Ordering::Relaxed);
    slot.post_send.store(originals.post_send, Ordering::Relaxed);
    slot.post_recv.store(originals.post_recv, Ordering::Relaxed);
    slot.poll_cq.store(originals.poll_cq, Ordering::Relaxed);
    slot.context.store(context, Ordering::Release);
    note_device(device, name, DeviceState::Counting);
    Some(device)
}

/// The device id and original entry points of an adopted context.
#[inline]
pub fn context(context: usize) -> Option<(i32, Originals)> {
    let slot = CONTEXT_SLOTS.iter().find(|s| s.context.load(Ordering::Acquire) == context)?;
    Some((
        slot.device.load(Ordering::Relaxed),
        Originals {
            post_send: slot.post_send.load(Ordering::Relaxed),
            post_recv: slot.post_recv.load(Ordering::Relaxed),
            poll_cq: slot.poll_cq.load(Ordering::Relaxed),
        },
    ))
}

/// Entry points for a wrapper reached with an object whose context it does not know (only
/// a caller mixing contexts could do that): those of the adopted contexts when they all
/// share one provider, so the call still reaches the right code; None when providers
/// differ, since forwarding to another driver's code would be wrong.
#[cold]
pub fn any_context() -> Option<(i32, Originals)> {
    let mut adopted = CONTEXT_SLOTS
        .iter()
        .map(|s| s.context.load(Ordering::Acquire))
        .filter(|&c| c != 0 && c != usize::MAX)
        .filter_map(context);
    let first = adopted.next()?;
    adopted.all(|(_, originals)| originals == first.1).then_some(first)
}

/// The context was closed: its slot is free again (its device id is never reused).
pub fn release_context(context: usize) {
    if let Some(slot) = CONTEXT_SLOTS.iter().find(|s| s.context.load(Ordering::Acquire) == context) {
        note_device(slot.device.load(Ordering::Relaxed), b"", DeviceState::Closed);
        slot.context.store(0, Ordering::Release);
    }
}

/// One change of a device's state, for the collector to write as a `verbs_device` record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceNote {
    pub device: i32,
    pub state: DeviceState,
    pub name: [u8; DEVICE_NAME_BYTES],
    pub name_len: u8,
}

/// Name bytes a note keeps (rdma-core's names are at most 63).
pub const DEVICE_NAME_BYTES: usize = 64;

/// Notes written since the collector last took them; opens and closes are rare, so a lock
/// (never taken on the hot path) and a short fixed list are enough. Overflow is counted.
static NOTES: Mutex<([Option<DeviceNote>; CONTEXTS], u64)> = Mutex::new(([None; CONTEXTS], 0));

/// Records a device state change (also used by the door for refused contexts).
pub fn note_device(device: i32, name: &[u8], state: DeviceState) {
    // A forked child must neither write notes nor wait on a lock its parent's collector
    // may have held at fork time.
    if crate::core::live::runtime::is_disabled() {
        return;
    }
    let len = name.len().min(DEVICE_NAME_BYTES);
    let mut note = DeviceNote { device, state, name: [0; DEVICE_NAME_BYTES], name_len: len as u8 };
    note.name[..len].copy_from_slice(&name[..len]);
    let Ok(mut notes) = NOTES.lock() else { return };
    match notes.0.iter_mut().find(|n| n.is_none()) {
        Some(free) => *free = Some(note),
        None => notes.1 += 1,
    }
}

/// Takes the notes written since the last call, and how many did not fit.
pub fn take_notes() -> (Vec<DeviceNote>, u64) {
    let Ok(mut notes) = NOTES.lock() else { return (Vec::new(), 0) };
    let taken = notes.0.iter_mut().filter_map(Option::take).collect();
    (taken, std::mem::take(&mut notes.1))
}

/// Writes a `verbs_device` record for every device note since the last call.
pub fn write_notes(t_ns: u64, emit: &mut dyn FnMut(&RecordBody)) {
    let (notes, lost) = take_notes();
    let qp_table_full = QP_TABLE_FULL.load(Ordering::Relaxed);
    for note in notes {
        emit(&RecordBody::VerbsDevice(VerbsDevice {
            t_ns,
            device: note.device,
            state: note.state,
            qp_table_full,
            notes_lost: lost,
            name: Text::new(&note.name[..note.name_len as usize]),
        }));
    }
}

struct QpSlot {
    /// `pack(device, qp_num)`; 0 free.
    key: AtomicU64,
    sig_all: AtomicBool,
    /// Bytes of unsignaled sends waiting for the next signaled one.
    carried: AtomicU64,
    sends_posted: AtomicU64,
    sends_done: AtomicU64,
    send_wr_ids: [AtomicU64; SEND_RING],
    send_bytes: [AtomicU64; SEND_RING],
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE_QP: QpSlot = QpSlot {
    key: AtomicU64::new(0),
    sig_all: AtomicBool::new(false),
    carried: AtomicU64::new(0),
    sends_posted: AtomicU64::new(0),
    sends_done: AtomicU64::new(0),
    send_wr_ids: [const { AtomicU64::new(0) }; SEND_RING],
    send_bytes: [const { AtomicU64::new(0) }; SEND_RING],
};

static QP_SLOTS: [QpSlot; QPS] = [FREE_QP; QPS];
/// Queue pairs that found no slot; their sends count without unsignaled folding.
pub static QP_TABLE_FULL: AtomicU64 = AtomicU64::new(0);

fn pack(device: i32, qp_num: u32) -> u64 {
    1 << 63 | (device as u32 as u64) << 32 | qp_num as u64
}

/// The slot of a QP, claimed on first sight.
fn qp_slot(device: i32, qp_num: u32) -> Option<&'static QpSlot> {
    let found = work_requests::find_or_claim(&QP_SLOTS, pack(device, qp_num), PROBE, |s| &s.key);
    if found.is_none() {
        QP_TABLE_FULL.fetch_add(1, Ordering::Relaxed);
    }
    found
}

/// A QP was created; `sig_all` is its `sq_sig_all`. Its counters start afresh (QP numbers
/// are reused after destruction).
pub fn qp_created(device: i32, qp_num: u32, sig_all: bool) {
    if let Some(slot) = qp_slot(device, qp_num) {
        slot.carried.store(0, Ordering::Relaxed);
        let done = slot.sends_posted.load(Ordering::Relaxed);
        slot.sends_done.store(done, Ordering::Relaxed);
        slot.sig_all.store(sig_all, Ordering::Release);
    }
}

/// One send work request as the door read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    /// Sum of its scatter/gather lengths.
    pub bytes: u64,
    pub signaled: bool,
}

/// Sends the provider accepted. Only a signaled send (or any send on an `sq_sig_all` QP)
/// produces a completion, so only those count as posted; the bytes of unsignaled ones
/// ride on the next signaled send of the QP, which completes after them.
pub fn sends_posted(device: i32, qp_num: u32, wrs: impl Iterator<Item = SendWr>, t_ticks: u64) {
    let key = QpKey { source: WrSource::Verbs, device, qp_num };
    let slot = qp_slot(device, qp_num);
    let sig_all = slot.is_some_and(|s| s.sig_all.load(Ordering::Acquire));
    let mut carried = slot.map_or(0, |s| s.carried.swap(0, Ordering::AcqRel));
    for wr in wrs {
        carried = carried.saturating_add(wr.bytes);
        if !(wr.signaled || sig_all) && slot.is_some() {
            continue;
        }
        if let Some(slot) = slot {
            // One fetch_add claims the ring entry, so two threads posting to one QP at
            // once never write the same entry.
            let n = slot.sends_posted.fetch_add(1, Ordering::AcqRel);
            slot.send_wr_ids[n as usize % SEND_RING].store(wr.wr_id, Ordering::Release);
            slot.send_bytes[n as usize % SEND_RING].store(carried, Ordering::Release);
        }
        work_requests::posted(key, carried, t_ticks);
        carried = 0;
    }
    if let Some(slot) = slot.filter(|_| carried > 0) {
        slot.carried.fetch_add(carried, Ordering::AcqRel);
    }
}

/// Receives the provider accepted, as their buffer sizes: every one completes.
pub fn recvs_posted(device: i32, qp_num: u32, wrs: impl Iterator<Item = u64>, t_ticks: u64) {
    let key = QpKey { source: WrSource::Verbs, device, qp_num };
    for bytes in wrs {
        work_requests::posted(key, bytes, t_ticks);
    }
}

/// One work completion as `poll_cq` returned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub byte_len: u32,
    pub qp_num: u32,
}

/// Completions polled from a CQ of `device`. A receive counts the bytes that arrived
/// (`byte_len`); a send the bytes its post carried; an error completion (whose opcode
/// and length are undefined) counts as not ok with no bytes.
pub fn completions(device: i32, polled: impl Iterator<Item = Completion>, t_ticks: u64) {
    for wc in polled {
        let key = QpKey { source: WrSource::Verbs, device, qp_num: wc.qp_num };
        let ok = wc.status == 0;
        let bytes = if ok && wc.opcode & WC_RECV != 0 {
            wc.byte_len as u64
        } else {
            // An error completion may be a send's: retire it by its wr_id all the same.
            let sent = send_completed(device, wc.qp_num, wc.wr_id);
            if ok {
                sent.unwrap_or(0)
            } else {
                0
            }
        };
        work_requests::completed(key, bytes, None, t_ticks, ok);
    }
}

/// Retires the signaled send `wr_id` of the QP (sends complete in post order, so it is the
/// oldest in flight unless an earlier one was never polled) and returns the bytes its post
/// carried; None when no send in flight has that wr_id (a receive's error completion, or a
/// send posted before its QP had a slot). The ring is advanced by the CQ's poller alone.
fn send_completed(device: i32, qp_num: u32, wr_id: u64) -> Option<u64> {
    let slot = qp_slot(device, qp_num)?;
    let done = slot.sends_done.load(Ordering::Acquire);
    let posted = slot.sends_posted.load(Ordering::Acquire);
    let oldest = done.max(posted.saturating_sub(SEND_RING as u64));
    let n = (oldest..posted).find(|&n| slot.send_wr_ids[n as usize % SEND_RING].load(Ordering::Relaxed) == wr_id)?;
    slot.sends_done.store(n + 1, Ordering::Release);
    Some(slot.send_bytes[n as usize % SEND_RING].load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(wr_id: u64, bytes: u64, signaled: bool) -> SendWr {
        SendWr { wr_id, bytes, signaled }
    }

    #[test]
    fn unsignaled_sends_ride_on_the_next_signaled_one() {
        let (device, qp) = (900, 7);
        qp_created(device, qp, false);
        sends_posted(device, qp, [send(1, 10, false), send(2, 20, false)].into_iter(), 1);
        sends_posted(device, qp, [send(3, 5, true), send(4, 100, true)].into_iter(), 2);
        assert_eq!(send_completed(device, qp, 3), Some(35), "10 + 20 unsignaled, then the signaled 5");
        assert_eq!(send_completed(device, qp, 4), Some(100));
        assert_eq!(send_completed(device, qp, 4), None, "nothing else is in flight");
    }

    #[test]
    fn sq_sig_all_counts_every_send() {
        let (device, qp) = (901, 8);
        qp_created(device, qp, true);
        sends_posted(device, qp, [send(1, 10, false), send(2, 20, false)].into_iter(), 1);
        assert_eq!((send_completed(device, qp, 1), send_completed(device, qp, 2)), (Some(10), Some(20)));
    }

    #[test]
    fn recreated_qp_forgets_what_was_in_flight() {
        let (device, qp) = (902, 9);
        qp_created(device, qp, false);
        sends_posted(device, qp, [send(1, 10, true), send(2, 20, false)].into_iter(), 1);
        qp_created(device, qp, false);
        sends_posted(device, qp, [send(3, 7, true)].into_iter(), 2);
        assert_eq!(send_completed(device, qp, 1), None, "the old QP's send is forgotten");
        assert_eq!(send_completed(device, qp, 3), Some(7));
    }

    #[test]
    fn an_error_completion_retires_its_send_so_later_sends_keep_their_bytes() {
        let (device, qp) = (903, 10);
        qp_created(device, qp, false);
        sends_posted(device, qp, [send(1, 64, true), send(2, 10, true)].into_iter(), 1);
        assert_eq!(send_completed(device, qp, 77), None, "a receive's error completion touches no send");
        assert_eq!(send_completed(device, qp, 1), Some(64), "the failed send, retired");
        assert_eq!(send_completed(device, qp, 2), Some(10));
    }

    #[test]
    fn contexts_get_distinct_devices_and_free_their_slot_on_close() {
        let originals = Originals { post_send: 1, post_recv: 2, poll_cq: 3 };
        let a = adopt_context(0x1000, originals, b"mlx5_0").unwrap();
        let b = adopt_context(0x2000, originals, b"mlx5_1").unwrap();
        assert_ne!(a, b);
        assert_eq!(context(0x1000), Some((a, originals)));
        release_context(0x1000);
        assert_eq!(context(0x1000), None);
        let c = adopt_context(0x1000, originals, b"mlx5_0").unwrap();
        assert!(c > b, "device ids are never reused");
        let (notes, lost) = take_notes();
        assert_eq!(lost, 0);
        let states: Vec<_> = notes.iter().filter(|n| [a, b, c].contains(&n.device)).map(|n| n.state).collect();
        assert_eq!(states, [DeviceState::Counting, DeviceState::Counting, DeviceState::Closed, DeviceState::Counting]);
        release_context(0x1000);
        release_context(0x2000);
    }
}
