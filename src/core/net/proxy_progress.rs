//! Network progress on stock NCCL, from proxy steps (docs/network.md "Where RDMA evidence comes
//! from"). NCCL emits the profiler's IB QP events only when it was built with NET_PROFILER,
//! which its Makefile and CMake builds leave off; proxy steps exist in every build. A
//! proxy step is one chunk of one channel's transfer with one peer, and its states say
//! when the chunk went on the network and when the network was done with it
//! (src/transport/net.cc at v2.30.7-1):
//!
//! - a send step reaches `SendWait` when NCCL posted its `isend` (its `transSize` is the
//!   chunk's size) and is stopped when `test` reports the send done;
//! - a receive step reaches `RecvWait` when NCCL posted its `irecv` and `RecvFlushWait`
//!   when `test` reports it done, with the bytes received as `transSize`.
//!
//! That is a work request's post and completion, so each (communicator, channel, peer,
//! direction) becomes a link in `work_requests`' table under source `proxy`, and the QP
//! monitor judges it as it judges a QP: in flight, oldest in flight, sliding-window
//! bandwidth, stuck, degraded. While QP events arrive (an NCCL built with NET_PROFILER)
//! they are the better evidence and no new step is counted, so nothing is counted twice.
//!
//! Called from the profiler door's hot path: no allocation, no lock, no syscall beyond the
//! clock; a side table indexed like the door's event pool.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use crate::core::log::kernel_ch::{comm_tag, COMM_TAG_BITS};
use crate::core::log::records_net::WrSource;
use crate::core::net::profiler::SLOTS;
use crate::core::net::work_requests::{self, QpKey};
use crate::core::record::clock::now_ticks;

/// Proxy-step states (NCCL's `ncclProfilerEventState_t`, the same values v1 to v7).
const SEND_WAIT: i32 = 9;
const RECV_WAIT: i32 = 10;
const RECV_FLUSH_WAIT: i32 = 11;

/// One link of proxy traffic: what a QP key holds for source `proxy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProxyLink {
    /// 14 bits of NCCL's communicator hash: tells communicators apart in one rank.
    pub comm_tag: u16,
    pub channel: u8,
    pub is_send: bool,
    /// The peer's rank in that communicator.
    pub peer: u32,
}

impl ProxyLink {
    pub fn new(comm_hash: u64, channel: u8, is_send: bool, peer: u32) -> ProxyLink {
        ProxyLink { comm_tag: comm_tag(comm_hash), channel, is_send, peer }
    }

    /// The table key: the device field carries channel (bits 0-7), direction (bit 8) and
    /// the communicator tag (bits 9-22, so the 24-bit device stays positive); the QP
    /// number is the peer.
    pub fn key(self) -> QpKey {
        let device = self.channel as i32 | (self.is_send as i32) << 8 | (self.comm_tag as i32) << 9;
        QpKey { source: WrSource::Proxy, device, qp_num: self.peer }
    }

    /// How reports name it: "channel 2 send to peer 3 (proxy steps, comm 0x1a2b)".
    pub fn describe(self) -> String {
        format!(
            "channel {} {} peer {} (proxy steps, comm {:#06x})",
            self.channel,
            if self.is_send { "send to" } else { "receive from" },
            self.peer,
            self.comm_tag
        )
    }

    /// The link a `proxy` key names; None for a key of another source.
    pub fn of(source: WrSource, device: i32, qp_num: u32) -> Option<ProxyLink> {
        (source == WrSource::Proxy).then_some(ProxyLink {
            comm_tag: ((device >> 9) & ((1 << COMM_TAG_BITS) - 1)) as u16,
            channel: device as u8,
            is_send: device & 1 << 8 != 0,
            peer: qp_num,
        })
    }
}

/// One proxy step between its start and its stop.
struct Step {
    /// The link's packed key (`QpKey` for source `proxy`), 0 when the slot holds no step.
    link: AtomicU64,
    is_send: AtomicBool,
    /// 0 started, 1 on the network, 2 done with.
    phase: AtomicU8,
    t_post: AtomicU64,
    bytes: AtomicU64,
}

impl Step {
    const fn new() -> Step {
        Step {
            link: AtomicU64::new(0),
            is_send: AtomicBool::new(false),
            phase: AtomicU8::new(0),
            t_post: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    fn key(&self) -> Option<QpKey> {
        QpKey::unpack(self.link.load(Ordering::Acquire))
    }
}

/// One entry per slot of the profiler door's event pool.
static STEP_POOL: [Step; SLOTS] = [const { Step::new() }; SLOTS];
static QP_EVENTS_SEEN: AtomicBool = AtomicBool::new(false);

/// An IB QP event arrived: this NCCL reports work requests itself (NET_PROFILER).
pub fn qp_events_seen() {
    QP_EVENTS_SEEN.store(true, Ordering::Relaxed);
}

/// Whether QP events supersede the proxy links: then the QP monitor reports none of them
/// (receive steps posted ahead of the first QP event may have counted a few).
pub fn superseded() -> bool {
    QP_EVENTS_SEEN.load(Ordering::Relaxed)
}

/// A proxy step started in event slot `slot` on `link` (a negative peer: unknown, the
/// step is not followed).
pub fn step_started(slot: usize, comm_hash: u64, channel: u8, is_send: bool, peer: i32) {
    let Some(step) = STEP_POOL.get(slot) else { return };
    if peer < 0 {
        step.link.store(0, Ordering::Release);
        return;
    }
    step.is_send.store(is_send, Ordering::Relaxed);
    step.phase.store(0, Ordering::Relaxed);
    step.bytes.store(0, Ordering::Relaxed);
    step.link.store(ProxyLink::new(comm_hash, channel, is_send, peer as u32).key().pack(), Ordering::Release);
}

/// recordEventState on the step in `slot`: the post and (receives) the completion.
pub fn step_state(slot: usize, state: i32, trans_size: Option<u64>) {
    let Some(step) = STEP_POOL.get(slot) else { return };
    let Some(key) = step.key() else { return };
    let is_send = step.is_send.load(Ordering::Relaxed);
    let posts = if is_send { state == SEND_WAIT } else { state == RECV_WAIT };
    if posts && !QP_EVENTS_SEEN.load(Ordering::Relaxed) && step.phase.load(Ordering::Relaxed) == 0 {
        let t = now_ticks();
        // A receive's size is known only when it completes.
        let bytes = if is_send { trans_size.unwrap_or(0) } else { 0 };
        step.t_post.store(t, Ordering::Relaxed);
        step.bytes.store(bytes, Ordering::Relaxed);
        step.phase.store(1, Ordering::Relaxed);
        work_requests::posted(key, bytes, t);
    } else if !is_send && state == RECV_FLUSH_WAIT {
        complete(step, key, trans_size.unwrap_or(0));
    }
}

/// stopEvent on the step in `slot`: a send is done with; the slot is free again.
pub fn step_stopped(slot: usize) {
    let Some(step) = STEP_POOL.get(slot) else { return };
    let Some(key) = step.key() else { return };
    let bytes = step.bytes.load(Ordering::Relaxed);
    // A receive stopped before its data arrived (an aborted operation) moved nothing
    // known: it completes with no bytes, which the window does not take as a rate.
    complete(step, key, if step.is_send.load(Ordering::Relaxed) { bytes } else { 0 });
    step.link.store(0, Ordering::Release);
}

fn complete(step: &Step, key: QpKey, bytes: u64) {
    if step.phase.compare_exchange(1, 2, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
        let t_post = step.t_post.load(Ordering::Relaxed);
        work_requests::completed(key, bytes, Some(t_post), now_ticks(), true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_round_trips_through_its_key() {
        for link in [
            ProxyLink::new(0xdead_beef_0123_4567, 0, true, 1),
            ProxyLink::new(u64::MAX, 255, false, 1023),
            ProxyLink::new(0, 63, true, u32::MAX),
        ] {
            let key = link.key();
            assert!(key.device >= 0, "{key:?}");
            assert_eq!(QpKey::unpack(key.pack()), Some(key));
            assert_eq!(ProxyLink::of(key.source, key.device, key.qp_num), Some(link));
        }
        assert_eq!(ProxyLink::of(WrSource::Profiler, 5, 1), None);
        let a = ProxyLink::new(1, 2, true, 3).key();
        assert_ne!(a, ProxyLink::new(1, 2, false, 3).key(), "direction is part of the link");
        assert_ne!(a, ProxyLink::new(1, 3, true, 3).key(), "and the channel");
    }

    /// Drives steps as NCCL's net.cc does and reads the table (slots far from the ones the
    /// door's tests could use; each test its own links).
    #[test]
    fn sends_post_at_send_wait_and_complete_at_stop_receives_complete_with_their_size() {
        let send = ProxyLink::new(0x5e4d, 1, true, 7);
        let recv = ProxyLink::new(0x5e4d, 1, false, 6);
        let entry = |link: ProxyLink| {
            work_requests::table().qps().find(|(_, k, _)| *k == link.key()).map(|(_, _, e)| e.counters())
        };
        step_started(8000, 0x5e4d, 1, true, 7);
        step_state(8000, 8, Some(4096)); // SendGPUWait: not on the network yet
        assert_eq!(entry(send), None);
        step_state(8000, SEND_WAIT, Some(4096));
        let c = entry(send).unwrap();
        assert_eq!((c.posted, c.completed, c.bytes_posted), (1, 0, 4096));
        step_stopped(8000);
        step_stopped(8000); // a second stop of a freed slot counts nothing
        let c = entry(send).unwrap();
        assert_eq!((c.completed, c.bytes_completed, c.in_flight()), (1, 4096, 0));

        step_started(8001, 0x5e4d, 1, false, 6);
        step_state(8001, RECV_WAIT, Some(0));
        assert_eq!(entry(recv).unwrap().in_flight(), 1);
        step_state(8001, RECV_FLUSH_WAIT, Some(1000));
        step_state(8001, 12, Some(1000)); // RecvGPUWait
        step_stopped(8001);
        let c = entry(recv).unwrap();
        assert_eq!((c.posted, c.completed, c.bytes_completed), (1, 1, 1000), "the step's size, once");

        step_started(8002, 0x5e4d, 1, true, -1);
        step_state(8002, SEND_WAIT, Some(4096));
        step_stopped(8002);
        assert!(STEP_POOL[8002].key().is_none(), "a step with no peer is not followed");
    }
}
