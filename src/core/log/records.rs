//! Record kinds and their fixed little-endian payload layouts.
//!
//! The same structs travel through the hot path's ring (timestamps in raw clock ticks)
//! and, after the collector's `to_nanoseconds`, into the log (timestamps in
//! `CLOCK_MONOTONIC` nanoseconds). One definition, so the ring and the log never drift.

use serde::{Serialize, Serializer};

use super::format::PAYLOAD_CAPACITY;
use crate::core::log::nccl_op::{dtype_size, NcclOp};
use crate::core::record::clock::Calibration;

pub use super::records_cupti::{CuptiState, CuptiStatus};
use super::records_device as device;
pub use super::records_device::{DeviceColl, DeviceState, HostSync, LinkSource, SyncKind, Unfinished};
pub use super::records_end::{EndHow, ProcessEnd};
use super::records_groups as groups;
pub use super::records_groups::GroupDesc;
use super::records_kernels as kernels;
pub use super::records_kernels::{KernelCluster, KernelName, NcclKernels, StageDevice, StreamBusy};
use super::records_net as net;
pub use super::records_net::{QpDegraded, QpStuck, QpWindow};
use super::records_ports as ports;
pub use super::records_ports::{CounterState, CounterValue, PortCounterName, PortCounters, Text, VerbsDevice};
use super::records_profiler as profiler;
pub use super::records_profiler::{ProfNet, ProfOp, ProfProxy};
use super::records_stacks as stacks;
pub use super::records_stacks::{StackFrame, StackReason, StackSample, StackStatus, StackThread};

/// Kind codes stored in each slot. Append, never renumber.
pub mod kind;

/// Stages one `step_vector` record carries; a step with more continues in further parts.
pub const STAGES_PER_PART: usize = 6;

/// JSON form of ids and hashes: `0x` and 16 hex digits, so they never lose precision.
pub fn hex_u64<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:#018x}"))
}

/// One intercepted NCCL API call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct NcclCall {
    pub op: NcclOp,
    pub t_enter_ns: u64,
    pub t_exit_ns: u64,
    /// Job-wide communicator identity (0 for calls without a communicator).
    #[serde(serialize_with = "hex_u64")]
    pub comm_id: u64,
    /// Per-communicator sequence: collectives and point-to-point calls count separately,
    /// from 1; 0 for other calls. `comm_seq` in JSON, apart from the record's own `seq`.
    #[serde(rename = "comm_seq")]
    pub seq: u64,
    pub count: u64,
    /// `count` times the element size of `dtype`.
    pub bytes: u64,
    #[serde(serialize_with = "hex_u64")]
    pub stream: u64,
    pub tid: u32,
    /// Root of a rooted collective or peer of a send/recv, else -1.
    pub peer: i32,
    pub dtype: i32,
    pub redop: i32,
    pub result: i32,
    /// `ncclGroupStart` nesting depth of the calling thread when the call entered.
    pub group_depth: u16,
}

/// How a communicator came to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum CommOrigin {
    InitRank = 1,
    InitRankConfig = 2,
    InitAll = 3,
    Split = 4,
    /// First seen in a call, created by an entry point the library does not wrap.
    Unknown = 5,
    /// `ncclCommInitRankScalable` (2.23.4): one or more unique ids.
    InitRankScalable = 6,
    /// `ncclCommShrink` (2.27.3): a parent less its excluded ranks.
    Shrink = 7,
    /// `ncclCommGrow` (2.29.2): a parent plus new ranks.
    Grow = 8,
    /// A `torch.distributed` process group of a backend other than NCCL (gloo), whose
    /// collectives the Python door records as it records NCCL's.
    ProcessGroup = 9,
}

impl CommOrigin {
    fn from_u8(raw: u8) -> Option<CommOrigin> {
        [
            Self::InitRank,
            Self::InitRankConfig,
            Self::InitAll,
            Self::Split,
            Self::Unknown,
            Self::InitRankScalable,
            Self::Shrink,
            Self::Grow,
            Self::ProcessGroup,
        ]
        .into_iter()
        .find(|o| *o as u8 == raw)
    }
}

/// A communicator this rank joined, mapping its comm rank to the global rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CommCreated {
    pub t_ns: u64,
    #[serde(serialize_with = "hex_u64")]
    pub comm_id: u64,
    #[serde(serialize_with = "hex_u64")]
    pub parent_id: u64,
    pub rank: i32,
    pub nranks: i32,
    pub global_rank: i32,
    pub color: i32,
    pub key: i32,
    pub origin: CommOrigin,
}

/// Cumulative count of events the hot path dropped, every cause together: its ring was
/// full, or (`profiler_dropped`, a part of the total) the profiler door could not keep an
/// event because its event pool had no free slot or the communicator had no context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Drops {
    pub t_ns: u64,
    pub dropped_total: u64,
    pub ring_capacity: u64,
    /// Logs written before this field existed read as 0.
    pub profiler_dropped: u64,
}

/// What an `SF_INJECT` rule does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum InjectAction {
    Delay = 1,
    Hang = 2,
    Fail = 3,
}

impl InjectAction {
    fn from_u8(raw: u8) -> Option<InjectAction> {
        [Self::Delay, Self::Hang, Self::Fail].into_iter().find(|a| *a as u8 == raw)
    }
}

/// An `SF_INJECT` rule fired: the ground truth analysis is scored against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Injection {
    pub t_ns: u64,
    pub action: InjectAction,
    /// Position of the rule in `SF_INJECT`, from 0.
    pub rule: u16,
    /// The NCCL call it fired in; `None` for a rule that fired at the end of a stage.
    pub op: Option<NcclOp>,
    #[serde(serialize_with = "hex_u64")]
    pub comm_id: u64,
    /// The sequence number the call would get on entry (`comm_seq` of its `nccl_call`).
    pub comm_seq: u64,
    /// The logical step, when step markers are recorded.
    pub step: Option<u64>,
    /// The stage-name id of the stage it fired at the end of, or was inside of.
    pub stage: Option<u16>,
    pub delay_ns: u64,
    /// For `fail`: the `ncclResult_t` returned instead of calling NCCL.
    pub result: i32,
}

/// The collector's watchdog found a call in flight for longer than the hang threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct HangEvidence {
    /// When the watchdog noticed.
    pub t_ns: u64,
    /// When the call entered.
    pub since_ns: u64,
    #[serde(serialize_with = "hex_u64")]
    pub comm_id: u64,
    pub comm_seq: u64,
    pub op: NcclOp,
    pub threshold_ns: u64,
}

/// One completed logical step of a rank: its ordered stage durations (part `part` of a
/// step with more than `STAGES_PER_PART` stages). Stage ids resolve through the log's
/// stage-name table; the residual `step.other_cpu_wall` is the last stage of the step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepVector {
    pub step: u64,
    pub t_begin_ns: u64,
    pub wall_ns: u64,
    /// How much the explicit stages exceeded the step's wall time (0 when they fit).
    pub overlap_ns: u64,
    /// Hash of the step's ordered stage names: equal hashes, equal stage lists (hex in JSON).
    pub schema_hash: u64,
    pub part: u8,
    /// Stages in the whole step, over all parts.
    pub stages_total: u8,
    /// Ordered stages opened inside another ordered stage, rejected from the vector.
    pub nested_rejected: u16,
    pub count: u8,
    pub stage_ids: [u16; STAGES_PER_PART],
    pub durations_ns: [u64; STAGES_PER_PART],
}

/// JSON: the scalar fields, then `stages`, this part's `{stage_id, duration_ns}` in order
/// (the ids resolve through the log's stage-name table, which `sf dump` adds).
impl Serialize for StepVector {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        #[derive(Serialize)]
        struct Stage {
            stage_id: u16,
            duration_ns: u64,
        }
        let stages: Vec<Stage> = self.stages().map(|(stage_id, duration_ns)| Stage { stage_id, duration_ns }).collect();
        let mut st = s.serialize_struct("StepVector", 9)?;
        st.serialize_field("step", &self.step)?;
        st.serialize_field("t_begin_ns", &self.t_begin_ns)?;
        st.serialize_field("wall_ns", &self.wall_ns)?;
        st.serialize_field("overlap_ns", &self.overlap_ns)?;
        st.serialize_field("schema_hash", &format!("{:#018x}", self.schema_hash))?;
        st.serialize_field("part", &self.part)?;
        st.serialize_field("stages_total", &self.stages_total)?;
        st.serialize_field("nested_rejected", &self.nested_rejected)?;
        st.serialize_field("stages", &stages)?;
        st.end()
    }
}

impl StepVector {
    /// (stage id, duration) of the stages this part carries.
    pub fn stages(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.stage_ids.iter().copied().zip(self.durations_ns.iter().copied()).take(self.count as usize)
    }
}

/// A named side-channel value for a step (`sf_value`), kept out of the stage vector.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SideValue {
    pub step: u64,
    pub name_id: u16,
    pub value: f64,
}

impl Eq for SideValue {}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RecordBody {
    NcclCall(NcclCall),
    CommCreated(CommCreated),
    Drops(Drops),
    Injection(Injection),
    HangEvidence(HangEvidence),
    StepVector(StepVector),
    SideValue(SideValue),
    ProfOp(ProfOp),
    ProfProxy(ProfProxy),
    ProfNet(ProfNet),
    KernelName(KernelName),
    KernelCluster(KernelCluster),
    NcclKernels(NcclKernels),
    StreamBusy(StreamBusy),
    StageDevice(StageDevice),
    CuptiStatus(CuptiStatus),
    QpWindow(QpWindow),
    QpStuck(QpStuck),
    QpDegraded(QpDegraded),
    PortCounterName(PortCounterName),
    PortCounters(PortCounters),
    VerbsDevice(VerbsDevice),
    HostSync(HostSync),
    DeviceColl(DeviceColl),
    DeviceState(DeviceState),
    ProcessEnd(ProcessEnd),
    StackFrame(StackFrame),
    StackThread(StackThread),
    StackSample(StackSample),
    GroupDesc(GroupDesc),
}

impl RecordBody {
    pub fn kind(&self) -> u16 {
        match self {
            RecordBody::NcclCall(_) => kind::NCCL_CALL,
            RecordBody::CommCreated(_) => kind::COMM_CREATED,
            RecordBody::Drops(_) => kind::DROPS,
            RecordBody::Injection(_) => kind::INJECTION,
            RecordBody::HangEvidence(_) => kind::HANG_EVIDENCE,
            RecordBody::StepVector(_) => kind::STEP_VECTOR,
            RecordBody::SideValue(_) => kind::SIDE_VALUE,
            RecordBody::ProfOp(_) => kind::PROF_OP,
            RecordBody::ProfProxy(_) => kind::PROF_PROXY,
            RecordBody::ProfNet(_) => kind::PROF_NET,
            RecordBody::KernelName(_) => kind::KERNEL_NAME,
            RecordBody::KernelCluster(_) => kind::KERNEL_CLUSTER,
            RecordBody::NcclKernels(_) => kind::NCCL_KERNELS,
            RecordBody::StreamBusy(_) => kind::STREAM_BUSY,
            RecordBody::StageDevice(_) => kind::STAGE_DEVICE,
            RecordBody::CuptiStatus(_) => kind::CUPTI_STATUS,
            RecordBody::QpWindow(_) => kind::QP_WINDOW,
            RecordBody::QpStuck(_) => kind::QP_STUCK,
            RecordBody::QpDegraded(_) => kind::QP_DEGRADED,
            RecordBody::PortCounterName(_) => kind::PORT_COUNTER_NAME,
            RecordBody::PortCounters(_) => kind::PORT_COUNTERS,
            RecordBody::VerbsDevice(_) => kind::VERBS_DEVICE,
            RecordBody::HostSync(_) => kind::HOST_SYNC,
            RecordBody::DeviceColl(_) => kind::DEVICE_COLL,
            RecordBody::DeviceState(_) => kind::DEVICE_STATE,
            RecordBody::ProcessEnd(_) => kind::PROCESS_END,
            RecordBody::StackFrame(_) => kind::STACK_FRAME,
            RecordBody::StackThread(_) => kind::STACK_THREAD,
            RecordBody::StackSample(_) => kind::STACK_SAMPLE,
            RecordBody::GroupDesc(_) => kind::GROUP_DESC,
        }
    }

    /// The host time of the record (`CLOCK_MONOTONIC` ns; when it began, for a call, a
    /// step or a task); `None` for kinds that carry none (values, kernel windows, names).
    pub fn t_ns(&self) -> Option<u64> {
        match self {
            RecordBody::NcclCall(c) => Some(c.t_enter_ns),
            RecordBody::CommCreated(c) => Some(c.t_ns),
            RecordBody::Drops(d) => Some(d.t_ns),
            RecordBody::Injection(i) => Some(i.t_ns),
            RecordBody::HangEvidence(h) => Some(h.t_ns),
            RecordBody::StepVector(v) => Some(v.t_begin_ns),
            RecordBody::ProfOp(p) => Some(p.t_start_ns),
            RecordBody::ProfProxy(p) => Some(p.t_start_ns),
            RecordBody::ProfNet(n) => Some(n.t_start_ns),
            RecordBody::CuptiStatus(s) => Some(s.t_ns),
            RecordBody::QpWindow(w) => Some(w.t_ns),
            RecordBody::QpStuck(s) => Some(s.t_ns),
            RecordBody::QpDegraded(d) => Some(d.t_ns),
            RecordBody::PortCounterName(n) => Some(n.t_ns),
            RecordBody::PortCounters(p) => Some(p.t_ns),
            RecordBody::VerbsDevice(d) => Some(d.t_ns),
            RecordBody::HostSync(s) => Some(s.t_enter_ns),
            RecordBody::DeviceColl(c) => Some(c.t_start_ns),
            RecordBody::DeviceState(s) => Some(s.t_ns),
            RecordBody::ProcessEnd(e) => Some(e.t_ns),
            RecordBody::StackSample(s) => Some(s.t_ns),
            RecordBody::GroupDesc(g) => Some(g.t_ns),
            RecordBody::StackFrame(_) | RecordBody::StackThread(_) => None,
            RecordBody::SideValue(_)
            | RecordBody::KernelName(_)
            | RecordBody::KernelCluster(_)
            | RecordBody::NcclKernels(_)
            | RecordBody::StreamBusy(_)
            | RecordBody::StageDevice(_) => None,
        }
    }

    /// Turns the hot path's raw ticks into `CLOCK_MONOTONIC` nanoseconds and fills the
    /// fields the hot path leaves to the collector.
    pub fn to_nanoseconds(mut self, cal: &Calibration) -> RecordBody {
        match &mut self {
            RecordBody::NcclCall(c) => {
                c.t_enter_ns = cal.to_mono_ns(c.t_enter_ns);
                c.t_exit_ns = cal.to_mono_ns(c.t_exit_ns);
                c.bytes = c.count.saturating_mul(dtype_size(c.dtype));
            }
            RecordBody::CommCreated(c) => c.t_ns = cal.to_mono_ns(c.t_ns),
            RecordBody::GroupDesc(g) => g.t_ns = cal.to_mono_ns(g.t_ns),
            RecordBody::Drops(d) => d.t_ns = cal.to_mono_ns(d.t_ns),
            RecordBody::Injection(i) => i.t_ns = cal.to_mono_ns(i.t_ns),
            RecordBody::HangEvidence(h) => {
                h.t_ns = cal.to_mono_ns(h.t_ns);
                h.since_ns = cal.to_mono_ns(h.since_ns);
            }
            // Assembled by the collector, already in nanoseconds.
            RecordBody::StepVector(_) | RecordBody::SideValue(_) => {}
            RecordBody::ProfOp(p) => p.ticks_to_nanoseconds(cal),
            RecordBody::ProfProxy(p) => p.ticks_to_nanoseconds(cal),
            RecordBody::ProfNet(n) => n.ticks_to_nanoseconds(cal),
            // Made by the collector from GPU activity, already in nanoseconds.
            RecordBody::KernelName(_)
            | RecordBody::KernelCluster(_)
            | RecordBody::NcclKernels(_)
            | RecordBody::StreamBusy(_)
            | RecordBody::StageDevice(_) => {}
            // Written by the collector, already in nanoseconds.
            RecordBody::CuptiStatus(_) => {}
            // Made by the collector's QP monitor, already in nanoseconds.
            RecordBody::QpWindow(_) | RecordBody::QpStuck(_) | RecordBody::QpDegraded(_) => {}
            // Made by the collector (sysfs sampler, verbs door notes), already in nanoseconds.
            RecordBody::PortCounterName(_) | RecordBody::PortCounters(_) | RecordBody::VerbsDevice(_) => {}
            // Made by the collector's device tracker, or copied from the header: already in
            // nanoseconds.
            RecordBody::HostSync(_)
            | RecordBody::DeviceColl(_)
            | RecordBody::DeviceState(_)
            | RecordBody::ProcessEnd(_) => {}
            // Taken by the collector's stack watch, already in nanoseconds.
            RecordBody::StackFrame(_) | RecordBody::StackThread(_) | RecordBody::StackSample(_) => {}
        }
        self
    }

    /// Writes the payload; returns its length.
    pub fn encode(&self, out: &mut [u8; PAYLOAD_CAPACITY]) -> usize {
        let mut w = Encoder { buf: out, at: 0 };
        match self {
            RecordBody::NcclCall(c) => {
                w.u16(c.op as u16);
                w.u16(c.group_depth);
                w.u32(c.tid);
                for v in [c.t_enter_ns, c.t_exit_ns, c.comm_id, c.seq, c.count, c.bytes, c.stream] {
                    w.u64(v);
                }
                for v in [c.peer, c.dtype, c.redop, c.result] {
                    w.i32(v);
                }
            }
            RecordBody::CommCreated(c) => {
                for v in [c.t_ns, c.comm_id, c.parent_id] {
                    w.u64(v);
                }
                for v in [c.rank, c.nranks, c.global_rank, c.color, c.key] {
                    w.i32(v);
                }
                w.u16(c.origin as u16);
            }
            RecordBody::Drops(d) => {
                for v in [d.t_ns, d.dropped_total, d.ring_capacity, d.profiler_dropped] {
                    w.u64(v);
                }
            }
            RecordBody::Injection(i) => {
                w.u16(i.action as u16);
                w.u16(i.rule);
                w.u16(i.op.map_or(0, |op| op as u16));
                w.u16(i.stage.map_or(u16::MAX, |s| s));
                w.i32(i.result);
                for v in [i.t_ns, i.comm_id, i.comm_seq, i.step.map_or(u64::MAX, |s| s), i.delay_ns] {
                    w.u64(v);
                }
            }
            RecordBody::HangEvidence(h) => {
                w.u16(h.op as u16);
                for v in [h.t_ns, h.since_ns, h.comm_id, h.comm_seq, h.threshold_ns] {
                    w.u64(v);
                }
            }
            RecordBody::StepVector(v) => {
                for x in [v.step, v.t_begin_ns, v.wall_ns, v.overlap_ns, v.schema_hash] {
                    w.u64(x);
                }
                w.u16(v.part as u16 | (v.stages_total as u16) << 8);
                w.u16(v.nested_rejected);
                w.u16(v.count as u16);
                for (id, ns) in v.stages() {
                    w.u16(id);
                    w.u64(ns);
                }
            }
            RecordBody::SideValue(v) => {
                w.u64(v.step);
                w.u16(v.name_id);
                w.u64(v.value.to_bits());
            }
            RecordBody::ProfOp(p) => profiler::encode_prof_op(p, &mut w),
            RecordBody::ProfProxy(p) => profiler::encode_prof_proxy(p, &mut w),
            RecordBody::ProfNet(n) => profiler::encode_prof_net(n, &mut w),
            RecordBody::KernelName(n) => kernels::encode_kernel_name(n, &mut w),
            RecordBody::KernelCluster(c) => kernels::encode_kernel_cluster(c, &mut w),
            RecordBody::NcclKernels(n) => kernels::encode_nccl_kernels(n, &mut w),
            RecordBody::StreamBusy(b) => kernels::encode_stream_busy(b, &mut w),
            RecordBody::StageDevice(d) => kernels::encode_stage_device(d, &mut w),
            RecordBody::CuptiStatus(c) => super::records_cupti::encode(c, &mut w),
            RecordBody::QpWindow(q) => net::encode_qp_window(q, &mut w),
            RecordBody::QpStuck(q) => net::encode_qp_stuck(q, &mut w),
            RecordBody::QpDegraded(q) => net::encode_qp_degraded(q, &mut w),
            RecordBody::PortCounterName(n) => ports::encode_port_counter_name(n, &mut w),
            RecordBody::PortCounters(p) => ports::encode_port_counters(p, &mut w),
            RecordBody::VerbsDevice(d) => ports::encode_verbs_device(d, &mut w),
            RecordBody::HostSync(s) => device::encode_host_sync(s, &mut w),
            RecordBody::DeviceColl(c) => device::encode_device_coll(c, &mut w),
            RecordBody::DeviceState(s) => device::encode_device_state(s, &mut w),
            RecordBody::ProcessEnd(e) => super::records_end::encode(e, &mut w),
            RecordBody::StackFrame(f) => stacks::encode_frame(f, &mut w),
            RecordBody::StackThread(t) => stacks::encode_thread(t, &mut w),
            RecordBody::StackSample(s) => stacks::encode_sample(s, &mut w),
            RecordBody::GroupDesc(g) => groups::encode(g, &mut w),
        }
        w.at
    }

    /// `None` for a kind this reader does not know or a payload of the wrong size.
    pub fn decode(kind: u16, payload: &[u8]) -> Option<RecordBody> {
        let mut r = Decoder { buf: payload, at: 0 };
        let body = match kind {
            kind::NCCL_CALL => {
                let op = NcclOp::from_u16(r.u16()?)?;
                let group_depth = r.u16()?;
                let tid = r.u32()?;
                RecordBody::NcclCall(NcclCall {
                    op,
                    group_depth,
                    tid,
                    t_enter_ns: r.u64()?,
                    t_exit_ns: r.u64()?,
                    comm_id: r.u64()?,
                    seq: r.u64()?,
                    count: r.u64()?,
                    bytes: r.u64()?,
                    stream: r.u64()?,
                    peer: r.i32()?,
                    dtype: r.i32()?,
                    redop: r.i32()?,
                    result: r.i32()?,
                })
            }
            kind::COMM_CREATED => RecordBody::CommCreated(CommCreated {
                t_ns: r.u64()?,
                comm_id: r.u64()?,
                parent_id: r.u64()?,
                rank: r.i32()?,
                nranks: r.i32()?,
                global_rank: r.i32()?,
                color: r.i32()?,
                key: r.i32()?,
                origin: CommOrigin::from_u8(r.u16()? as u8)?,
            }),
            kind::DROPS => RecordBody::Drops(Drops {
                t_ns: r.u64()?,
                dropped_total: r.u64()?,
                ring_capacity: r.u64()?,
                profiler_dropped: r.u64().unwrap_or(0),
            }),
            kind::INJECTION => RecordBody::Injection(Injection {
                action: InjectAction::from_u8(r.u16()? as u8)?,
                rule: r.u16()?,
                op: NcclOp::from_u16(r.u16()?),
                stage: Some(r.u16()?).filter(|&s| s != u16::MAX),
                result: r.i32()?,
                t_ns: r.u64()?,
                comm_id: r.u64()?,
                comm_seq: r.u64()?,
                step: Some(r.u64()?).filter(|&s| s != u64::MAX),
                delay_ns: r.u64()?,
            }),
            kind::HANG_EVIDENCE => RecordBody::HangEvidence(HangEvidence {
                op: NcclOp::from_u16(r.u16()?)?,
                t_ns: r.u64()?,
                since_ns: r.u64()?,
                comm_id: r.u64()?,
                comm_seq: r.u64()?,
                threshold_ns: r.u64()?,
            }),
            kind::STEP_VECTOR => {
                let (step, t_begin_ns, wall_ns, overlap_ns, schema_hash) =
                    (r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?);
                let parts = r.u16()?;
                let nested_rejected = r.u16()?;
                let count = r.u16()?;
                if count as usize > STAGES_PER_PART {
                    return None;
                }
                let mut vector = StepVector {
                    step,
                    t_begin_ns,
                    wall_ns,
                    overlap_ns,
                    schema_hash,
                    part: parts as u8,
                    stages_total: (parts >> 8) as u8,
                    nested_rejected,
                    count: count as u8,
                    stage_ids: [0; STAGES_PER_PART],
                    durations_ns: [0; STAGES_PER_PART],
                };
                for i in 0..count as usize {
                    vector.stage_ids[i] = r.u16()?;
                    vector.durations_ns[i] = r.u64()?;
                }
                RecordBody::StepVector(vector)
            }
            kind::SIDE_VALUE => {
                RecordBody::SideValue(SideValue { step: r.u64()?, name_id: r.u16()?, value: f64::from_bits(r.u64()?) })
            }
            kind::PROF_OP => RecordBody::ProfOp(profiler::decode_prof_op(&mut r)?),
            kind::PROF_PROXY => RecordBody::ProfProxy(profiler::decode_prof_proxy(&mut r)?),
            kind::PROF_NET => RecordBody::ProfNet(profiler::decode_prof_net(&mut r)?),
            kind::KERNEL_NAME => RecordBody::KernelName(kernels::decode_kernel_name(&mut r)?),
            kind::KERNEL_CLUSTER => RecordBody::KernelCluster(kernels::decode_kernel_cluster(&mut r)?),
            kind::NCCL_KERNELS => RecordBody::NcclKernels(kernels::decode_nccl_kernels(&mut r)?),
            kind::STREAM_BUSY => RecordBody::StreamBusy(kernels::decode_stream_busy(&mut r)?),
            kind::STAGE_DEVICE => RecordBody::StageDevice(kernels::decode_stage_device(&mut r)?),
            kind::CUPTI_STATUS => RecordBody::CuptiStatus(super::records_cupti::decode(&mut r)?),
            kind::QP_WINDOW => RecordBody::QpWindow(net::decode_qp_window(&mut r)?),
            kind::QP_STUCK => RecordBody::QpStuck(net::decode_qp_stuck(&mut r)?),
            kind::QP_DEGRADED => RecordBody::QpDegraded(net::decode_qp_degraded(&mut r)?),
            kind::PORT_COUNTER_NAME => RecordBody::PortCounterName(ports::decode_port_counter_name(&mut r)?),
            kind::PORT_COUNTERS => RecordBody::PortCounters(ports::decode_port_counters(&mut r)?),
            kind::VERBS_DEVICE => RecordBody::VerbsDevice(ports::decode_verbs_device(&mut r)?),
            kind::HOST_SYNC => RecordBody::HostSync(device::decode_host_sync(&mut r)?),
            kind::DEVICE_COLL => RecordBody::DeviceColl(device::decode_device_coll(&mut r)?),
            kind::DEVICE_STATE => RecordBody::DeviceState(device::decode_device_state(&mut r)?),
            kind::PROCESS_END => RecordBody::ProcessEnd(super::records_end::decode(&mut r)?),
            kind::STACK_FRAME => RecordBody::StackFrame(stacks::decode_frame(&mut r)?),
            kind::STACK_THREAD => RecordBody::StackThread(stacks::decode_thread(&mut r)?),
            kind::STACK_SAMPLE => RecordBody::StackSample(stacks::decode_sample(&mut r)?),
            kind::GROUP_DESC => RecordBody::GroupDesc(groups::decode(&mut r)?),
            _ => return None,
        };
        (r.at == payload.len()).then_some(body)
    }
}

pub(super) struct Encoder<'a> {
    buf: &'a mut [u8; PAYLOAD_CAPACITY],
    at: usize,
}

impl Encoder<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.buf[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }
    pub(super) fn u8(&mut self, v: u8) {
        self.put(&[v])
    }
    pub(super) fn u16(&mut self, v: u16) {
        self.put(&v.to_le_bytes())
    }
    pub(super) fn u32(&mut self, v: u32) {
        self.put(&v.to_le_bytes())
    }
    pub(super) fn i32(&mut self, v: i32) {
        self.put(&v.to_le_bytes())
    }
    pub(super) fn u64(&mut self, v: u64) {
        self.put(&v.to_le_bytes())
    }
    /// A length byte, then the bytes: the layout of every inline name (at most 255 bytes).
    pub(super) fn short_bytes(&mut self, bytes: &[u8]) {
        self.u8(bytes.len() as u8);
        self.put(bytes)
    }
}

pub(super) struct Decoder<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Decoder<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let bytes = self.buf.get(self.at..self.at + N)?.try_into().ok()?;
        self.at += N;
        Some(bytes)
    }
    pub(super) fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|[b]| b)
    }
    pub(super) fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_le_bytes)
    }
    pub(super) fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    pub(super) fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_le_bytes)
    }
    pub(super) fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    /// What `Encoder::short_bytes` wrote, zero-padded to `N`: its length and bytes, or
    /// `None` when the length is over `N` or the payload ends first.
    pub(super) fn short_bytes<const N: usize>(&mut self) -> Option<(u8, [u8; N])> {
        let len = self.u8()?;
        let src = self.buf.get(self.at..self.at + len as usize).filter(|src| src.len() <= N)?;
        let mut bytes = [0; N];
        bytes[..src.len()].copy_from_slice(src);
        self.at += src.len();
        Some((len, bytes))
    }
}
