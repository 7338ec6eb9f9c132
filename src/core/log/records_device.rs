//! Record layouts of the device's own view (kinds 23-25): host synchronizations, NCCL
//! kernels linked to the call that launched them, and the collector's picture of the
//! device's unfinished work. All times are `CLOCK_MONOTONIC` nanoseconds: the collector
//! makes these records (device times converted with the CUDA door's paired clock
//! readings), the hot path never does.

use serde::Serialize;

use super::nccl_op::NcclOp;
use super::records::{hex_u64, Decoder, Encoder};

/// What a host synchronization waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum SyncKind {
    /// `cudaStreamSynchronize`, `cuStreamSynchronize`.
    Stream = 1,
    /// `cudaEventSynchronize`, `cuEventSynchronize`.
    Event = 2,
    /// `cudaDeviceSynchronize`, `cuCtxSynchronize`.
    Device = 3,
    /// A blocking device-to-host copy (`cudaMemcpy`, `cuMemcpyDtoH`).
    Copy = 4,
}

impl SyncKind {
    pub fn from_u8(raw: u8) -> Option<SyncKind> {
        [Self::Stream, Self::Event, Self::Device, Self::Copy].into_iter().find(|k| *k as u8 == raw)
    }
}

/// How a kernel was tied to the NCCL call that launched it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum LinkSource {
    /// The CUDA door's launch callback, on the thread inside the NCCL call.
    Callback = 1,
    /// The NCCL profiler door's KernelCh events, under the collective's seqNumber.
    Profiler = 2,
}

impl LinkSource {
    pub fn from_u8(raw: u8) -> Option<LinkSource> {
        [Self::Callback, Self::Profiler].into_iter().find(|l| *l as u8 == raw)
    }
}

/// Kind 23: one completed host synchronization (from a SYNCHRONIZATION activity record,
/// or from the callback's EXIT when there is none for it; never both for one call).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct HostSync {
    pub t_enter_ns: u64,
    pub t_exit_ns: u64,
    pub sync: SyncKind,
    /// The synchronizing thread, 0 when unknown.
    pub tid: u32,
    /// CUPTI's stream id, 0 when unknown or not a stream's.
    pub stream: u32,
}

/// Kind 24: one completed NCCL kernel and the NCCL call (or group) that launched it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceColl {
    #[serde(serialize_with = "hex_u64")]
    pub comm_id: u64,
    /// `comm_seq` of the launching call; for a group, its last call's.
    pub seq: u64,
    pub op: NcclOp,
    /// When the host launched it; 0 when only the profiler saw it.
    pub t_launch_ns: u64,
    /// Device start and end, converted to host time.
    pub t_start_ns: u64,
    pub t_end_ns: u64,
    pub stream: u32,
    pub link: LinkSource,
}

/// The oldest launch with no completion record yet: the kernel the rank is stuck behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Unfinished {
    /// Its `kernel_name` record's id.
    pub name_id: u32,
    pub t_launch_ns: u64,
    pub stream: u32,
    /// The NCCL call that launched it; 0, 0 and `None` for a compute kernel.
    #[serde(serialize_with = "hex_u64")]
    pub comm_id: u64,
    pub seq: u64,
    pub op: Option<NcclOp>,
    /// The stage its host launched it in: the stage-name id + 1, 0 when outside any stage
    /// (and in logs written before the field).
    pub stage: u16,
}

/// Kind 25: the collector's view of the device, written when it changes (at most once a
/// round) and at exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceState {
    pub t_ns: u64,
    /// Kernel launches seen, cumulative.
    pub launched: u64,
    /// Kernel completion records seen, cumulative.
    pub completed: u64,
    pub oldest: Option<Unfinished>,
    /// When the oldest host synchronization still in progress entered; 0 when none is.
    pub sync_since_ns: u64,
    /// What that synchronization waits for; `None` when none is in progress.
    pub sync: Option<SyncKind>,
    /// When the device last made progress: its newest launch or kernel end, by when it
    /// happened (a kernel's record may come seconds after its end). `None` in logs written
    /// before the field, whose records were written on a change only (`t_ns`).
    pub changed_ns: Option<u64>,
    /// When the picture was last complete: the last flush that made CUPTI hand over every
    /// record, so each launch still unfinished here was unfinished then. CUPTI's plain
    /// flush keeps back whole buffers behind one running kernel, so without such a flush
    /// an unfinished launch may long have ended. 0 before the first; `None` in logs written
    /// before the field.
    pub complete_ns: Option<u64>,
}

pub(super) fn encode_host_sync(s: &HostSync, w: &mut Encoder) {
    w.u64(s.t_enter_ns);
    w.u64(s.t_exit_ns);
    w.u32(s.tid);
    w.u32(s.stream);
    w.u8(s.sync as u8);
}

pub(super) fn decode_host_sync(r: &mut Decoder) -> Option<HostSync> {
    let (t_enter_ns, t_exit_ns, tid, stream) = (r.u64()?, r.u64()?, r.u32()?, r.u32()?);
    Some(HostSync { t_enter_ns, t_exit_ns, tid, stream, sync: SyncKind::from_u8(r.u8()?)? })
}

pub(super) fn encode_device_coll(c: &DeviceColl, w: &mut Encoder) {
    for v in [c.comm_id, c.seq, c.t_launch_ns, c.t_start_ns, c.t_end_ns] {
        w.u64(v);
    }
    w.u32(c.stream);
    w.u16(c.op as u16);
    w.u8(c.link as u8);
}

pub(super) fn decode_device_coll(r: &mut Decoder) -> Option<DeviceColl> {
    let (comm_id, seq, t_launch_ns, t_start_ns, t_end_ns) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?);
    let stream = r.u32()?;
    let op = NcclOp::from_u16(r.u16()?)?;
    Some(DeviceColl {
        comm_id,
        seq,
        op,
        t_launch_ns,
        t_start_ns,
        t_end_ns,
        stream,
        link: LinkSource::from_u8(r.u8()?)?,
    })
}

/// Fixed layout: the oldest launch's fields are always there, zero when there is none,
/// so every `device_state` payload has one size.
pub(super) fn encode_device_state(s: &DeviceState, w: &mut Encoder) {
    for v in [s.t_ns, s.launched, s.completed, s.sync_since_ns] {
        w.u64(v);
    }
    w.u8(s.sync.map_or(0, |k| k as u8));
    w.u8(s.oldest.is_some() as u8);
    let o = s.oldest.unwrap_or(Unfinished {
        name_id: 0,
        t_launch_ns: 0,
        stream: 0,
        comm_id: 0,
        seq: 0,
        op: None,
        stage: 0,
    });
    w.u32(o.name_id);
    w.u32(o.stream);
    for v in [o.t_launch_ns, o.comm_id, o.seq] {
        w.u64(v);
    }
    w.u16(o.op.map_or(0, |op| op as u16));
    w.u16(o.stage);
    // Both unknown: as a log written before them, which a reader's tests write too.
    if s.changed_ns.is_some() || s.complete_ns.is_some() {
        w.u64(s.changed_ns.unwrap_or(s.t_ns));
        w.u64(s.complete_ns.unwrap_or(0));
    }
}

pub(super) fn decode_device_state(r: &mut Decoder) -> Option<DeviceState> {
    let (t_ns, launched, completed, sync_since_ns) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
    let sync = match r.u8()? {
        0 => None,
        raw => Some(SyncKind::from_u8(raw)?),
    };
    let has_oldest = match r.u8()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let (name_id, stream, t_launch_ns, comm_id, seq) = (r.u32()?, r.u32()?, r.u64()?, r.u64()?, r.u64()?);
    let op = match r.u16()? {
        0 => None,
        raw => Some(NcclOp::from_u16(raw)?),
    };
    // Appended later, each: older logs end before it.
    let stage = r.u16().unwrap_or(0);
    let (changed_ns, complete_ns) = (r.u64(), r.u64());
    let oldest = has_oldest.then_some(Unfinished { name_id, t_launch_ns, stream, comm_id, seq, op, stage });
    Some(DeviceState { t_ns, launched, completed, oldest, sync_since_ns, sync, changed_ns, complete_ns })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::log::format::PAYLOAD_CAPACITY;
    use crate::core::log::records::{kind, RecordBody};

    fn round_trip(body: RecordBody) -> serde_json::Value {
        let mut payload = [0u8; PAYLOAD_CAPACITY];
        let len = body.encode(&mut payload);
        assert_eq!(RecordBody::decode(body.kind(), &payload[..len]), Some(body));
        assert_eq!(RecordBody::decode(body.kind(), &payload[..len - 1]), None, "short payload");
        let json = serde_json::to_value(body).unwrap();
        assert_eq!(kind::code(json["kind"].as_str().unwrap()), Some(body.kind()), "{json}");
        json
    }

    #[test]
    fn host_sync_round_trips_and_refuses_an_unknown_kind() {
        let sync = HostSync { t_enter_ns: 10, t_exit_ns: 99, sync: SyncKind::Copy, tid: 4242, stream: 7 };
        let json = round_trip(RecordBody::HostSync(sync));
        assert_eq!((json["kind"].as_str(), json["sync"].as_str()), (Some("host_sync"), Some("copy")));
        let mut payload = [0u8; PAYLOAD_CAPACITY];
        let len = RecordBody::HostSync(sync).encode(&mut payload);
        payload[len - 1] = 9;
        assert_eq!(RecordBody::decode(kind::HOST_SYNC, &payload[..len]), None);
    }

    #[test]
    fn device_coll_round_trips_with_its_link() {
        let coll = DeviceColl {
            comm_id: 0xfeed_0000_0000_0001,
            seq: 41,
            op: NcclOp::AllReduce,
            t_launch_ns: 5,
            t_start_ns: 1_000,
            t_end_ns: 9_000,
            stream: 13,
            link: LinkSource::Profiler,
        };
        let json = round_trip(RecordBody::DeviceColl(coll));
        assert_eq!(json["comm_id"].as_str(), Some("0xfeed000000000001"));
        assert_eq!(
            (json["op"].as_str(), json["link"].as_str(), json["seq"].as_u64()),
            (Some("allreduce"), Some("profiler"), Some(41))
        );
    }

    #[test]
    fn device_state_round_trips_with_and_without_an_oldest_launch() {
        let stuck = Unfinished { name_id: 3, t_launch_ns: 77, stream: 2, comm_id: 0, seq: 0, op: None, stage: 0 };
        let state = DeviceState {
            t_ns: 100,
            launched: 12,
            completed: 11,
            oldest: Some(stuck),
            sync_since_ns: 90,
            sync: Some(SyncKind::Stream),
            changed_ns: Some(95),
            complete_ns: Some(98),
        };
        let json = round_trip(RecordBody::DeviceState(state));
        assert_eq!((json["changed_ns"].as_u64(), json["complete_ns"].as_u64()), (Some(95), Some(98)));
        let mut payload = [0u8; PAYLOAD_CAPACITY];
        let len = RecordBody::DeviceState(state).encode(&mut payload);
        let before_the_times = RecordBody::decode(kind::DEVICE_STATE, &payload[..len - 16]);
        assert_eq!(
            before_the_times,
            Some(RecordBody::DeviceState(DeviceState { changed_ns: None, complete_ns: None, ..state })),
            "a log written before the two times"
        );
        assert_eq!((json["oldest"]["name_id"].as_u64(), json["sync"].as_str()), (Some(3), Some("stream")));
        assert!(json["oldest"]["op"].is_null());
        let nccl = Unfinished { comm_id: 9, seq: 4, op: Some(NcclOp::Send), ..stuck };
        round_trip(RecordBody::DeviceState(DeviceState { oldest: Some(nccl), ..state }));
        let idle = DeviceState { oldest: None, sync_since_ns: 0, sync: None, ..state };
        let json = round_trip(RecordBody::DeviceState(idle));
        assert!(json["oldest"].is_null() && json["sync"].is_null(), "{json}");
    }
}
