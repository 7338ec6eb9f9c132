//! The RDMA work-request narrow waist (VenusTrace Sec. 3.2.2): the doors that see work
//! requests — the NCCL profiler plugin's NetPlugin IB QP events, its proxy steps on an NCCL
//! without NET_PROFILER (`proxy_progress`) and the SF_VERBS=1 verbs fallback — report
//! posts and completions here, from the hot path: no allocation, no
//! blocking, no syscall beyond the clock (the doors read it and pass it in).
//!
//! Per queue pair, a fixed-capacity lock-free table keeps: posted, completed and error
//! counts (in flight = posted − completed), posted and completed bytes, post-to-completion
//! latency (sum, count, maximum), a ring of the last `POST_RING` post times (to match a
//! completion to its post when the door does not know the post time, and to find the
//! oldest work request still in flight), and a ring of the last `WINDOW_MAX` completions
//! (bytes and busy time) from which the collector computes the sliding-window bandwidth.
//! A QP claims its slot with one CAS on first sight and keeps it for the process's life; a
//! QP that finds no free slot within `PROBE` steps is not recorded and is counted in
//! `dropped`.
//!
//! Busy time (the denominator of the window bandwidth): a completion's busy time is the
//! time from max(its post, the previous completion on the QP) to it. Time a work request
//! spends queued behind earlier ones is charged to those, and time with nothing in flight
//! (the job computing between collectives) to none, so the window measures the rate at
//! which the QP moves data while it has data to move — VenusTrace's "w data chunks in
//! transfer", without the post-to-start delay its sliding window is there to remove.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::core::log::records_net::WrSource;

/// One queue pair: the door, the device index (profiler) or a device id the verbs door
/// assigns, and the QP number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpKey {
    pub source: WrSource,
    pub device: i32,
    pub qp_num: u32,
}

impl QpKey {
    /// Never 0 (the source is at least 1), so 0 marks a free slot. The device keeps its
    /// low 24 bits, sign included: -8388608..8388607 round-trips.
    pub fn pack(self) -> u64 {
        (self.source as u64) << 56 | ((self.device as u32 as u64) & 0xff_ffff) << 32 | self.qp_num as u64
    }

    pub fn unpack(raw: u64) -> Option<QpKey> {
        let device = (((raw >> 32) as u32) << 8) as i32 >> 8;
        Some(QpKey { source: WrSource::from_u8((raw >> 56) as u8)?, device, qp_num: raw as u32 })
    }
}

/// QPs the process-wide table holds. NCCL opens a few per connection and channel; a job
/// with more is recorded for the first QP_CAPACITY and counts the rest as dropped.
pub const QP_CAPACITY: usize = 512;
/// Post times kept per QP for in-order matching and the oldest in-flight post.
pub const POST_RING: usize = 64;
/// Completions kept per QP: the largest sliding window (`SF_WR_WINDOW`) there can be.
pub const WINDOW_MAX: usize = 256;
/// Slots a lookup probes before giving up.
const PROBE: usize = 32;

/// One QP's counters. Every field is written with plain atomic adds or stores from any
/// thread; ring entries carry a tag (ordinal + 1) stored last, so a reader can tell a
/// finished entry from one being overwritten.
pub struct QpEntry {
    key: AtomicU64,
    posted: AtomicU64,
    completed: AtomicU64,
    errors: AtomicU64,
    bytes_posted: AtomicU64,
    bytes_completed: AtomicU64,
    latency_sum: AtomicU64,
    latency_count: AtomicU64,
    latency_max: AtomicU64,
    /// Maximum latency since the collector last took it.
    latency_max_recent: AtomicU64,
    last_completion: AtomicU64,
    post_tag: [AtomicU64; POST_RING],
    post_ticks: [AtomicU64; POST_RING],
    done_tag: [AtomicU64; WINDOW_MAX],
    done_bytes: [AtomicU64; WINDOW_MAX],
    done_busy: [AtomicU64; WINDOW_MAX],
}

/// A consistent-enough copy of one QP's counters (each field exact, read one by one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCounters {
    pub posted: u64,
    pub completed: u64,
    pub errors: u64,
    pub bytes_posted: u64,
    pub bytes_completed: u64,
    /// Sum and count of post-to-completion latencies, in ticks.
    pub latency_sum: u64,
    pub latency_count: u64,
    pub latency_max: u64,
}

impl QpCounters {
    pub fn in_flight(&self) -> u64 {
        self.posted.saturating_sub(self.completed)
    }
}

/// The last `n` completions of a QP: bytes moved and busy ticks spent moving them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowSum {
    pub n: usize,
    pub bytes: u64,
    pub busy_ticks: u64,
}

impl WindowSum {
    /// Bytes per second over the window's busy time; None when nothing was busy or no
    /// completion carried a size: a receive-side QP event has no length, and its bytes
    /// are unknown, not zero, so it has no rate rather than a rate of 0.
    pub fn bandwidth(&self, ticks_per_sec: f64) -> Option<f64> {
        (self.busy_ticks > 0 && self.bytes > 0).then(|| self.bytes as f64 * ticks_per_sec / self.busy_ticks as f64)
    }
}

impl QpEntry {
    #[allow(clippy::declare_interior_mutable_const)]
    const FREE: QpEntry = QpEntry {
        key: AtomicU64::new(0),
        posted: AtomicU64::new(0),
        completed: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        bytes_posted: AtomicU64::new(0),
        bytes_completed: AtomicU64::new(0),
        latency_sum: AtomicU64::new(0),
        latency_count: AtomicU64::new(0),
        latency_max: AtomicU64::new(0),
        latency_max_recent: AtomicU64::new(0),
        last_completion: AtomicU64::new(0),
        post_tag: [const { AtomicU64::new(0) }; POST_RING],
        post_ticks: [const { AtomicU64::new(0) }; POST_RING],
        done_tag: [const { AtomicU64::new(0) }; WINDOW_MAX],
        done_bytes: [const { AtomicU64::new(0) }; WINDOW_MAX],
        done_busy: [const { AtomicU64::new(0) }; WINDOW_MAX],
    };

    fn post(&self, bytes: u64, t: u64) {
        // A completion polled between the fetch_add and the tag store finds no match and
        // counts no latency; it cannot read a time that belongs to another post.
        let ordinal = self.posted.fetch_add(1, Ordering::AcqRel);
        let i = ordinal as usize % POST_RING;
        self.post_tag[i].store(0, Ordering::Release);
        self.post_ticks[i].store(t, Ordering::Release);
        self.post_tag[i].store(ordinal + 1, Ordering::Release);
        self.bytes_posted.fetch_add(bytes, Ordering::Relaxed);
    }

    /// When post number `ordinal` (from 0) happened, if the ring still holds it.
    fn post_time(&self, ordinal: u64) -> Option<u64> {
        let i = ordinal as usize % POST_RING;
        let before = self.post_tag[i].load(Ordering::Acquire);
        let t = self.post_ticks[i].load(Ordering::Acquire);
        let after = self.post_tag[i].load(Ordering::Acquire);
        (before == ordinal + 1 && after == before).then_some(t)
    }

    fn complete(&self, bytes: u64, t_post: Option<u64>, t: u64, ok: bool) {
        let ordinal = self.completed.fetch_add(1, Ordering::AcqRel);
        // An RC queue completes in post order: completion k belongs to post k.
        let t_post = t_post.or_else(|| self.post_time(ordinal));
        let previous = self.last_completion.fetch_max(t, Ordering::AcqRel);
        let busy_from = match (t_post, previous) {
            (Some(p), prev) => p.max(prev),
            (None, 0) => t, // nothing to measure from: no busy time claimed
            (None, prev) => prev,
        };
        if let Some(p) = t_post {
            let latency = t.saturating_sub(p);
            self.latency_sum.fetch_add(latency, Ordering::Relaxed);
            self.latency_count.fetch_add(1, Ordering::Relaxed);
            self.latency_max.fetch_max(latency, Ordering::Relaxed);
            self.latency_max_recent.fetch_max(latency, Ordering::Relaxed);
        }
        let moved = if ok { bytes } else { 0 };
        if ok {
            self.bytes_completed.fetch_add(bytes, Ordering::Relaxed);
        } else {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        let i = ordinal as usize % WINDOW_MAX;
        self.done_tag[i].store(0, Ordering::Release);
        self.done_bytes[i].store(moved, Ordering::Release);
        self.done_busy[i].store(t.saturating_sub(busy_from), Ordering::Release);
        self.done_tag[i].store(ordinal + 1, Ordering::Release);
    }

    pub fn key(&self) -> Option<QpKey> {
        QpKey::unpack(self.key.load(Ordering::Acquire))
    }

    pub fn counters(&self) -> QpCounters {
        QpCounters {
            posted: self.posted.load(Ordering::Acquire),
            completed: self.completed.load(Ordering::Acquire),
            errors: self.errors.load(Ordering::Relaxed),
            bytes_posted: self.bytes_posted.load(Ordering::Relaxed),
            bytes_completed: self.bytes_completed.load(Ordering::Relaxed),
            latency_sum: self.latency_sum.load(Ordering::Relaxed),
            latency_count: self.latency_count.load(Ordering::Relaxed),
            latency_max: self.latency_max.load(Ordering::Relaxed),
        }
    }

    /// The largest latency (ticks) since the previous call; resets it.
    pub fn take_recent_latency_max(&self) -> u64 {
        self.latency_max_recent.swap(0, Ordering::AcqRel)
    }

    /// Post time (ticks) of the oldest work request still in flight, taking completions in
    /// post order. When more are in flight than the ring holds, the oldest post the ring
    /// still has: a later time, so an age computed from it is a lower bound.
    pub fn oldest_in_flight(&self) -> Option<u64> {
        let completed = self.completed.load(Ordering::Acquire);
        let posted = self.posted.load(Ordering::Acquire);
        let first = completed.max(posted.saturating_sub(POST_RING as u64));
        (first..posted).find_map(|ordinal| self.post_time(ordinal))
    }

    /// The last `n` (at most `WINDOW_MAX`) completions; fewer when fewer happened or some
    /// are being overwritten right now.
    pub fn window(&self, n: usize) -> WindowSum {
        let completed = self.completed.load(Ordering::Acquire);
        let mut sum = WindowSum::default();
        for ordinal in completed.saturating_sub(n.min(WINDOW_MAX) as u64)..completed {
            let i = ordinal as usize % WINDOW_MAX;
            let before = self.done_tag[i].load(Ordering::Acquire);
            let bytes = self.done_bytes[i].load(Ordering::Acquire);
            let busy = self.done_busy[i].load(Ordering::Acquire);
            if before == ordinal + 1 && self.done_tag[i].load(Ordering::Acquire) == before {
                // Byte counts come from the doors' callers; a sum past u64 saturates
                // instead of panicking in the collector.
                sum.n += 1;
                sum.bytes = sum.bytes.saturating_add(bytes);
                sum.busy_ticks = sum.busy_ticks.saturating_add(busy);
            }
        }
        sum
    }
}

/// The `k`-th slot a key whose hash is `hash` probes in a table of `n` slots. Reduced
/// before adding, so no hash (the whole u64 range) can overflow the sum.
fn probe_slot(hash: u64, k: usize, n: usize) -> usize {
    ((hash % n as u64) as usize + k) % n
}

/// The slot holding `key` (never 0) in an open-addressing table of per-QP slots, whose key
/// `key_of` gives (0: free): found, or claimed with one CAS on the first free slot within
/// `probe` steps. None when no slot is left along the way; the caller counts that.
pub fn find_or_claim<T>(slots: &[T], key: u64, probe: usize, key_of: impl Fn(&T) -> &AtomicU64) -> Option<&T> {
    let start = crate::core::fnv::fnv1a(&key.to_le_bytes());
    (0..probe.min(slots.len())).map(|k| &slots[probe_slot(start, k, slots.len())]).find(|slot| {
        let held = match key_of(slot).load(Ordering::Acquire) {
            0 => key_of(slot).compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire).map_or_else(|o| o, |_| key),
            held => held,
        };
        held == key
    })
}

/// A fixed-capacity open-addressing table of QPs.
pub struct WrTable<const N: usize> {
    entries: [QpEntry; N],
    dropped: AtomicU64,
}

impl<const N: usize> WrTable<N> {
    pub const fn new() -> Self {
        WrTable { entries: [QpEntry::FREE; N], dropped: AtomicU64::new(0) }
    }

    fn entry(&self, qp: QpKey) -> Option<&QpEntry> {
        let found = find_or_claim(&self.entries, qp.pack(), PROBE, |e| &e.key);
        if found.is_none() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    pub fn posted(&self, qp: QpKey, bytes: u64, t_ticks: u64) {
        if let Some(e) = self.entry(qp) {
            e.post(bytes, t_ticks);
        }
    }

    pub fn completed(&self, qp: QpKey, bytes: u64, t_post_ticks: Option<u64>, t_ticks: u64, ok: bool) {
        if let Some(e) = self.entry(qp) {
            e.complete(bytes, t_post_ticks, t_ticks, ok);
        }
    }

    /// Posts and completions lost because their QP found no slot.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Every QP seen so far, with its slot index (stable for the process's life).
    pub fn qps(&self) -> impl Iterator<Item = (usize, QpKey, &QpEntry)> {
        self.entries.iter().enumerate().filter_map(|(i, e)| e.key().map(|k| (i, k, e)))
    }
}

impl<const N: usize> Default for WrTable<N> {
    fn default() -> Self {
        Self::new()
    }
}

static TABLE: WrTable<QP_CAPACITY> = WrTable::new();

/// The process-wide table both doors write and the collector reads.
pub fn table() -> &'static WrTable<QP_CAPACITY> {
    &TABLE
}

/// A work request was posted (`ibv_post_send`/`ibv_post_recv`, or a QP event started).
/// `t_ticks` is the hot-path clock (`clock::now_ticks`).
pub fn posted(qp: QpKey, bytes: u64, t_ticks: u64) {
    TABLE.posted(qp, bytes, t_ticks);
}

/// A work request's completion was polled. `t_post_ticks` is its post time where the door
/// knows it (the profiler event's start), else None (the accounting matches completions to
/// posts in order, as an RC queue completes them). `ok` is false for an error completion.
pub fn completed(qp: QpKey, bytes: u64, t_post_ticks: Option<u64>, t_ticks: u64, ok: bool) {
    TABLE.completed(qp, bytes, t_post_ticks, t_ticks, ok);
}

#[cfg(test)]
#[path = "work_requests_tests.rs"]
mod tests;
