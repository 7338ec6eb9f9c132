//! Record layouts of the NCCL profiler-plugin door (kinds 8-10, docs/profiler-plugin.md "NCCL profiler plugin"):
//! the tasks, proxy operations and network events NCCL reports through `ncclProfiler_vN`.
//! The hot path writes them with raw clock ticks; `to_nanoseconds` converts the times.

use serde::Serialize;

use super::records::{hex_u64, Decoder, Encoder};
use crate::core::record::clock::Calibration;

/// A collective (`p2p` false) or point-to-point task, from the profiler plugin's
/// `ncclProfileColl` / `ncclProfileP2p` events. `t_stop_ns` is NCCL's stopEvent, which
/// means the task was *enqueued* (handed to the GPU stream), not that it completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ProfOp {
    pub t_start_ns: u64,
    pub t_stop_ns: u64,
    /// NCCL's own communicator hash (`commHash` / `commId`), not the job-wide `comm_id`.
    #[serde(serialize_with = "hex_u64")]
    pub comm_hash: u64,
    /// NCCL's per-communicator `seqNumber` (from 0) for collectives; for point-to-point
    /// tasks (which have none) the door's own per-communicator ordinal, from 0.
    /// `nccl_seq` in JSON, apart from the record's own `seq`.
    #[serde(rename = "nccl_seq")]
    pub seq: u64,
    pub count: u64,
    pub rank: i32,
    /// Root of a collective, peer of a point-to-point task.
    pub peer: i32,
    /// `ncclFunc_t` numbering (`profiler::func_name`); 255 when unknown.
    pub func: u8,
    /// `ncclDataType_t`; -1 when unknown.
    pub dtype: i8,
    /// NCCL algorithm index (Tree 0, Ring 1, CollNetDirect 2, CollNetChain 3, NVLS 4,
    /// NVLSTree 5, PAT 6); 255 when unknown or not applicable.
    pub algo: u8,
    /// NCCL protocol index (LL 0, LL128 1, Simple 2); 255 when unknown.
    pub proto: u8,
    pub n_channels: u8,
    pub n_warps: u8,
    /// The `ncclProfiler_vN` version NCCL used.
    pub abi: u8,
    pub p2p: bool,
    /// From v5: the API call the application made (`ncclProfileCollApi` / `P2pApi`), not a
    /// task; `seq` is then the door's per-communicator, per-function ordinal of the call.
    /// NCCL turns some calls into tasks of another function (a Broadcast into an
    /// AllGatherV with no task event from 2.29.2), so this is the record of the call.
    pub api: bool,
    /// From v6: a copy-engine collective (`ncclProfileCeColl`); `seq` is NCCL's `ceSeqNum`.
    pub ce: bool,
}

/// A proxy operation, proxy step or kernel channel, with the states NCCL reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ProfProxy {
    pub t_start_ns: u64,
    pub t_stop_ns: u64,
    #[serde(serialize_with = "hex_u64")]
    pub comm_hash: u64,
    /// `seq` of the collective or point-to-point task this belongs to; u64::MAX unknown.
    /// `nccl_seq` in JSON, apart from the record's own `seq`.
    #[serde(rename = "nccl_seq")]
    pub seq: u64,
    /// Last `transSize` NCCL reported with a state.
    pub trans_size: u64,
    /// When the first three state transitions happened (0: fewer transitions).
    pub t_states_ns: [u64; 3],
    /// Bit `s` set: state `s` (`ncclProfilerEventState_t` value) was reported.
    pub states: u32,
    pub transitions: u16,
    /// `ProfProxy::OP`, `STEP` or `KERNEL_CH`.
    pub unit: u8,
    pub channel: u8,
    pub is_send: bool,
    pub peer: i32,
    pub n_steps: i32,
    pub chunk_size: i32,
    /// The step number of a proxy step; -1 for a proxy operation.
    pub step_no: i32,
}

impl ProfProxy {
    pub const OP: u8 = 0;
    pub const STEP: u8 = 1;
    pub const KERNEL_CH: u8 = 2;
}

/// A network-plugin event; `qp` when its payload was an IB QP work request (net type
/// IB, version 1) and the QP fields are filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ProfNet {
    pub t_start_ns: u64,
    pub t_stop_ns: u64,
    #[serde(serialize_with = "hex_u64")]
    pub comm_hash: u64,
    /// `seq` of the task this belongs to; `nccl_seq` in JSON.
    #[serde(rename = "nccl_seq")]
    pub seq: u64,
    #[serde(serialize_with = "hex_u64")]
    pub plugin_id: u64,
    pub wr_id: u64,
    pub length: u64,
    pub device: i32,
    pub qp_num: i32,
    pub opcode: i32,
    pub updates: u16,
    pub qp: bool,
}

impl ProfOp {
    pub(super) fn ticks_to_nanoseconds(&mut self, cal: &Calibration) {
        self.t_start_ns = cal.to_mono_ns(self.t_start_ns);
        self.t_stop_ns = cal.to_mono_ns(self.t_stop_ns);
    }
}

impl ProfProxy {
    /// State times of 0 mean "fewer transitions" and stay 0.
    pub(super) fn ticks_to_nanoseconds(&mut self, cal: &Calibration) {
        self.t_start_ns = cal.to_mono_ns(self.t_start_ns);
        self.t_stop_ns = cal.to_mono_ns(self.t_stop_ns);
        for t in self.t_states_ns.iter_mut().filter(|t| **t != 0) {
            *t = cal.to_mono_ns(*t);
        }
    }
}

impl ProfNet {
    pub(super) fn ticks_to_nanoseconds(&mut self, cal: &Calibration) {
        self.t_start_ns = cal.to_mono_ns(self.t_start_ns);
        self.t_stop_ns = cal.to_mono_ns(self.t_stop_ns);
    }
}

pub(super) fn encode_prof_op(p: &ProfOp, w: &mut Encoder) {
    for v in [p.t_start_ns, p.t_stop_ns, p.comm_hash, p.seq, p.count] {
        w.u64(v);
    }
    w.i32(p.rank);
    w.i32(p.peer);
    // The last byte: bit 0 p2p, bit 1 api, bit 2 ce (records written before had only bit 0).
    let what = p.p2p as u8 | (p.api as u8) << 1 | (p.ce as u8) << 2;
    for b in [p.func, p.dtype as u8, p.algo, p.proto, p.n_channels, p.n_warps, p.abi, what] {
        w.u8(b);
    }
}

pub(super) fn decode_prof_op(r: &mut Decoder) -> Option<ProfOp> {
    let mut op = ProfOp {
        t_start_ns: r.u64()?,
        t_stop_ns: r.u64()?,
        comm_hash: r.u64()?,
        seq: r.u64()?,
        count: r.u64()?,
        rank: r.i32()?,
        peer: r.i32()?,
        func: r.u8()?,
        dtype: r.u8()? as i8,
        algo: r.u8()?,
        proto: r.u8()?,
        n_channels: r.u8()?,
        n_warps: r.u8()?,
        abi: r.u8()?,
        p2p: false,
        api: false,
        ce: false,
    };
    let what = r.u8()?;
    (op.p2p, op.api, op.ce) = (what & 1 != 0, what & 2 != 0, what & 4 != 0);
    Some(op)
}

pub(super) fn encode_prof_proxy(p: &ProfProxy, w: &mut Encoder) {
    for v in [p.t_start_ns, p.t_stop_ns, p.comm_hash, p.seq, p.trans_size] {
        w.u64(v);
    }
    for v in p.t_states_ns {
        w.u64(v);
    }
    w.u32(p.states);
    w.u16(p.transitions);
    for b in [p.unit, p.channel, p.is_send as u8] {
        w.u8(b);
    }
    for v in [p.peer, p.n_steps, p.chunk_size, p.step_no] {
        w.i32(v);
    }
}

pub(super) fn decode_prof_proxy(r: &mut Decoder) -> Option<ProfProxy> {
    Some(ProfProxy {
        t_start_ns: r.u64()?,
        t_stop_ns: r.u64()?,
        comm_hash: r.u64()?,
        seq: r.u64()?,
        trans_size: r.u64()?,
        t_states_ns: [r.u64()?, r.u64()?, r.u64()?],
        states: r.u32()?,
        transitions: r.u16()?,
        unit: r.u8()?,
        channel: r.u8()?,
        is_send: r.u8()? != 0,
        peer: r.i32()?,
        n_steps: r.i32()?,
        chunk_size: r.i32()?,
        step_no: r.i32()?,
    })
}

pub(super) fn encode_prof_net(n: &ProfNet, w: &mut Encoder) {
    for v in [n.t_start_ns, n.t_stop_ns, n.comm_hash, n.seq, n.plugin_id, n.wr_id, n.length] {
        w.u64(v);
    }
    for v in [n.device, n.qp_num, n.opcode] {
        w.i32(v);
    }
    w.u16(n.updates);
    w.u8(n.qp as u8);
}

pub(super) fn decode_prof_net(r: &mut Decoder) -> Option<ProfNet> {
    Some(ProfNet {
        t_start_ns: r.u64()?,
        t_stop_ns: r.u64()?,
        comm_hash: r.u64()?,
        seq: r.u64()?,
        plugin_id: r.u64()?,
        wr_id: r.u64()?,
        length: r.u64()?,
        device: r.i32()?,
        qp_num: r.i32()?,
        opcode: r.i32()?,
        updates: r.u16()?,
        qp: r.u8()? != 0,
    })
}
