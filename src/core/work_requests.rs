//! The RDMA work-request narrow waist (VenusTrace Sec. 3.2.2): both doors that see work
//! requests — the NCCL profiler plugin's NetPlugin IB QP events and the SF_VERBS=1 verbs
//! fallback — report posts and completions here, from the hot path: no allocation, no
//! blocking, no syscall beyond the clock.
//!
//! SCAFFOLD: the signatures are the contract between the doors; the per-QP accounting
//! behind them is being written (issue 6).

/// Which door saw the work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WrSource {
    Profiler = 1,
    Verbs = 2,
}

/// One queue pair: the door, the device index (profiler) or a device id the verbs door
/// assigns, and the QP number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpKey {
    pub source: WrSource,
    pub device: i32,
    pub qp_num: u32,
}

/// A work request was posted (`ibv_post_send`/`ibv_post_recv`, or a QP event started).
/// `t_ticks` is the hot-path clock (`clock::now_ticks`).
pub fn posted(_qp: QpKey, _wr_id: u64, _bytes: u64, _opcode: i32, _t_ticks: u64) {}

/// A work request's completion was polled. `t_post_ticks` is its post time where the door
/// knows it (the profiler event's start), else None (the accounting matches completions to
/// posts in order, as an RC queue completes them). `ok` is false for an error completion.
pub fn completed(_qp: QpKey, _wr_id: u64, _bytes: u64, _t_post_ticks: Option<u64>, _t_ticks: u64, _ok: bool) {}
