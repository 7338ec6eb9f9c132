//! Record layout of the CUDA door's status (kind 15, `cupti_status`): written by the
//! collector when the door opens (or finds it cannot) and whenever a drop count changes,
//! so a reader knows whether kernel activity was recorded at all and how much was lost.

use serde::Serialize;

use super::records::{Decoder, Encoder};

/// What the CUDA door is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum CuptiState {
    /// Kernel and memcpy activity (and runtime calls with correlation on) is recorded.
    Enabled = 1,
    /// Another CUPTI subscriber (torch.profiler, Nsight Systems) holds CUPTI: no GPU
    /// activity; everything else records as usual.
    NoKernelMode = 2,
    /// The door was reached but CUPTI could not be used (none found, or it refused).
    Unavailable = 3,
}

impl CuptiState {
    pub fn from_u8(raw: u8) -> Option<CuptiState> {
        [Self::Enabled, Self::NoKernelMode, Self::Unavailable].into_iter().find(|s| *s as u8 == raw)
    }
}

/// Kind 15. Counts are cumulative since the door opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CuptiStatus {
    pub t_ns: u64,
    pub state: CuptiState,
    /// `cuptiGetVersion`, 0 when unknown.
    pub cupti_version: u32,
    /// The `CUptiResult` of the CUPTI call that degraded the door; 0 when none did.
    pub cupti_result: u32,
    /// Records CUPTI dropped for want of buffer space (`cuptiActivityGetNumDroppedRecords`).
    pub dropped_by_cupti: u64,
    /// Buffer requests the pool refused because every buffer was out (CUPTI drops the
    /// records that would have gone there and counts them in `dropped_by_cupti`).
    pub pool_refusals: u64,
    /// Activity buffers parsed.
    pub buffers: u64,
    /// Kernel, memcpy and runtime records handed on.
    pub records: u64,
    /// Records skipped: of another kind, too short for their kind, or incomplete.
    pub skipped: u64,
    pub pool_buffers: u32,
    pub buffer_bytes: u32,
    /// Whether runtime API records are recorded too (SF_CUPTI_CORRELATION=1).
    pub correlation: bool,
    /// How often the door reads CUPTI's buffers (`SF_CUPTI_FLUSH_MS`): a kernel's record
    /// reaches the log up to this long after it completed. 0 in logs written before the
    /// field existed.
    pub flush_ms: u32,
}

pub(super) fn encode(s: &CuptiStatus, w: &mut Encoder) {
    for v in [s.t_ns, s.dropped_by_cupti, s.pool_refusals, s.buffers, s.records, s.skipped] {
        w.u64(v);
    }
    for v in [s.cupti_version, s.cupti_result, s.pool_buffers, s.buffer_bytes] {
        w.u32(v);
    }
    w.u8(s.state as u8);
    w.u8(s.correlation as u8);
    w.u32(s.flush_ms);
}

pub(super) fn decode(r: &mut Decoder) -> Option<CuptiStatus> {
    let (t_ns, dropped_by_cupti, pool_refusals, buffers, records, skipped) =
        (r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?);
    let (cupti_version, cupti_result, pool_buffers, buffer_bytes) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
    Some(CuptiStatus {
        t_ns,
        state: CuptiState::from_u8(r.u8()?)?,
        cupti_version,
        cupti_result,
        dropped_by_cupti,
        pool_refusals,
        buffers,
        records,
        skipped,
        pool_buffers,
        buffer_bytes,
        correlation: r.u8()? != 0,
        // Appended later: older logs end before it.
        flush_ms: r.u32().unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::log::format::PAYLOAD_CAPACITY;
    use crate::core::log::records::{kind, RecordBody};

    #[test]
    fn round_trips_through_the_record_codec() {
        let status = CuptiStatus {
            t_ns: 123_456_789,
            state: CuptiState::NoKernelMode,
            cupti_version: 130_401,
            cupti_result: 39,
            dropped_by_cupti: 7,
            pool_refusals: 3,
            buffers: 1 << 40,
            records: 99,
            skipped: 2,
            pool_buffers: 16,
            buffer_bytes: 1 << 20,
            correlation: true,
            flush_ms: 500,
        };
        let body = RecordBody::CuptiStatus(status);
        assert_eq!(body.kind(), kind::CUPTI_STATUS);
        let mut payload = [0u8; PAYLOAD_CAPACITY];
        let len = body.encode(&mut payload);
        assert_eq!(RecordBody::decode(kind::CUPTI_STATUS, &payload[..len]), Some(body));
        let older = RecordBody::CuptiStatus(CuptiStatus { flush_ms: 0, ..status });
        assert_eq!(RecordBody::decode(kind::CUPTI_STATUS, &payload[..len - 4]), Some(older), "a log before flush_ms");
        assert_eq!(RecordBody::decode(kind::CUPTI_STATUS, &payload[..len - 5]), None, "short payload");
        payload[len - 6] = 9;
        assert_eq!(RecordBody::decode(kind::CUPTI_STATUS, &payload[..len]), None, "unknown state");
        let json = serde_json::to_value(body).unwrap();
        assert_eq!((json["kind"].as_str(), json["state"].as_str()), (Some("cupti_status"), Some("no_kernel_mode")));
    }
}
