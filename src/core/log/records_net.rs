//! Record layouts of the RDMA work-request monitor (kinds 17-19, docs/network.md "RDMA work
//! requests"): what the collector writes per queue pair from `core::work_requests`. The
//! collector makes them, so every time is already `CLOCK_MONOTONIC` nanoseconds and every
//! rate bytes per second.

use serde::Serialize;

use super::records::{Decoder, Encoder};

/// Which door saw the work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum WrSource {
    Profiler = 1,
    Verbs = 2,
    /// The profiler plugin's proxy steps: one link per communicator, channel, peer and
    /// direction (`proxy_progress::ProxyLink`), for NCCL builds without QP events.
    Proxy = 3,
}

impl WrSource {
    pub fn from_u8(raw: u8) -> Option<WrSource> {
        [WrSource::Profiler, WrSource::Verbs, WrSource::Proxy].into_iter().find(|s| *s as u8 == raw)
    }

    pub fn name(self) -> &'static str {
        match self {
            WrSource::Profiler => "profiler",
            WrSource::Verbs => "verbs",
            WrSource::Proxy => "proxy",
        }
    }
}

/// Kind 17: a periodic sample of one QP (every `SF_NET_SAMPLE_MS`, and at exit), for every
/// QP that posted or completed since the previous sample or still has work in flight.
/// Counters are cumulative since the QP was first seen; latency is over the completions
/// since the previous sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct QpWindow {
    pub t_ns: u64,
    pub source: WrSource,
    pub device: i32,
    pub qp_num: u32,
    pub posted: u64,
    pub completed: u64,
    pub in_flight: u32,
    pub errors: u32,
    pub bytes_posted: u64,
    pub bytes_completed: u64,
    /// Completions since the previous sample whose post time is known, their mean and
    /// largest post-to-completion latency.
    pub latency_n: u32,
    pub latency_mean_ns: u64,
    pub latency_max_ns: u64,
    /// Bytes of the last `window_n` completions over their busy time; 0 with none.
    pub window_bps: u64,
    pub window_n: u16,
    /// The QP's own baseline window bandwidth; 0 until it is known.
    pub baseline_bps: u64,
    /// Whether a stuck or degraded episode is open at this sample.
    pub stuck: bool,
    pub degraded: bool,
    /// Posts and completions of QPs the table had no room for (process-wide, cumulative).
    pub table_dropped: u32,
}

/// Kind 18: a work request on this QP has been in flight longer than `timeout_ns`; once
/// per episode (until the QP completes past it or drains).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct QpStuck {
    pub t_ns: u64,
    pub source: WrSource,
    pub device: i32,
    pub qp_num: u32,
    /// Post time of the oldest work request in flight (a lower bound on its age when more
    /// were in flight than the post ring holds).
    pub since_ns: u64,
    pub timeout_ns: u64,
    pub posted: u64,
    pub completed: u64,
    pub in_flight: u32,
}

/// Kind 19: the window bandwidth stayed more than `threshold` below the QP's baseline
/// for `windows` consecutive evaluated windows; once per episode (until a window is back
/// above the threshold).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct QpDegraded {
    pub t_ns: u64,
    pub source: WrSource,
    pub device: i32,
    pub qp_num: u32,
    pub window_bps: u64,
    pub baseline_bps: u64,
    /// `SF_WR_DEGRADED`: degraded below (1 − threshold) × baseline.
    pub threshold: f64,
    pub window_n: u16,
    pub windows: u16,
    pub posted: u64,
    pub completed: u64,
}

impl Eq for QpDegraded {}

pub(super) fn encode_qp_window(q: &QpWindow, w: &mut Encoder) {
    let QpWindow { t_ns, source, device, qp_num, posted, completed, in_flight, errors, .. } = *q;
    for v in [t_ns, posted, completed, q.bytes_posted, q.bytes_completed, q.latency_mean_ns, q.latency_max_ns] {
        w.u64(v);
    }
    w.u64(q.window_bps);
    w.u64(q.baseline_bps);
    for v in [qp_num, in_flight, errors, q.latency_n, q.table_dropped] {
        w.u32(v);
    }
    w.i32(device);
    w.u16(q.window_n);
    w.u8(source as u8);
    w.u8(q.stuck as u8 | (q.degraded as u8) << 1);
}

pub(super) fn decode_qp_window(r: &mut Decoder) -> Option<QpWindow> {
    let [t_ns, posted, completed, bytes_posted, bytes_completed, latency_mean_ns, latency_max_ns, window_bps, baseline_bps] =
        [(); 9].map(|_| r.u64());
    let [qp_num, in_flight, errors, latency_n, table_dropped] = [(); 5].map(|_| r.u32());
    let (device, window_n, source, flags) = (r.i32()?, r.u16()?, WrSource::from_u8(r.u8()?)?, r.u8()?);
    Some(QpWindow {
        t_ns: t_ns?,
        source,
        device,
        qp_num: qp_num?,
        posted: posted?,
        completed: completed?,
        in_flight: in_flight?,
        errors: errors?,
        bytes_posted: bytes_posted?,
        bytes_completed: bytes_completed?,
        latency_n: latency_n?,
        latency_mean_ns: latency_mean_ns?,
        latency_max_ns: latency_max_ns?,
        window_bps: window_bps?,
        window_n,
        baseline_bps: baseline_bps?,
        stuck: flags & 1 != 0,
        degraded: flags & 2 != 0,
        table_dropped: table_dropped?,
    })
}

pub(super) fn encode_qp_stuck(q: &QpStuck, w: &mut Encoder) {
    for v in [q.t_ns, q.since_ns, q.timeout_ns, q.posted, q.completed] {
        w.u64(v);
    }
    w.u32(q.qp_num);
    w.u32(q.in_flight);
    w.i32(q.device);
    w.u8(q.source as u8);
}

pub(super) fn decode_qp_stuck(r: &mut Decoder) -> Option<QpStuck> {
    let [t_ns, since_ns, timeout_ns, posted, completed] = [(); 5].map(|_| r.u64());
    let (qp_num, in_flight, device) = (r.u32()?, r.u32()?, r.i32()?);
    Some(QpStuck {
        t_ns: t_ns?,
        source: WrSource::from_u8(r.u8()?)?,
        device,
        qp_num,
        since_ns: since_ns?,
        timeout_ns: timeout_ns?,
        posted: posted?,
        completed: completed?,
        in_flight,
    })
}

pub(super) fn encode_qp_degraded(q: &QpDegraded, w: &mut Encoder) {
    for v in [q.t_ns, q.window_bps, q.baseline_bps, q.threshold.to_bits(), q.posted, q.completed] {
        w.u64(v);
    }
    w.u32(q.qp_num);
    w.i32(q.device);
    w.u16(q.window_n);
    w.u16(q.windows);
    w.u8(q.source as u8);
}

pub(super) fn decode_qp_degraded(r: &mut Decoder) -> Option<QpDegraded> {
    let [t_ns, window_bps, baseline_bps, threshold, posted, completed] = [(); 6].map(|_| r.u64());
    let (qp_num, device, window_n, windows) = (r.u32()?, r.i32()?, r.u16()?, r.u16()?);
    Some(QpDegraded {
        t_ns: t_ns?,
        source: WrSource::from_u8(r.u8()?)?,
        device,
        qp_num,
        window_bps: window_bps?,
        baseline_bps: baseline_bps?,
        threshold: f64::from_bits(threshold?),
        window_n,
        windows,
        posted: posted?,
        completed: completed?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::format::PAYLOAD_CAPACITY;
    use super::super::records::{kind, RecordBody};
    use super::*;

    fn samples() -> [RecordBody; 3] {
        [
            RecordBody::QpWindow(QpWindow {
                t_ns: 1_000,
                source: WrSource::Verbs,
                device: -2,
                qp_num: 0xdead_beef,
                posted: 10,
                completed: 9,
                in_flight: 1,
                errors: 2,
                bytes_posted: 1 << 40,
                bytes_completed: (1 << 40) - 4096,
                latency_n: 9,
                latency_mean_ns: 12_345,
                latency_max_ns: 99_999,
                window_bps: 25_000_000_000,
                window_n: 64,
                baseline_bps: 24_000_000_000,
                stuck: true,
                degraded: false,
                table_dropped: 3,
            }),
            RecordBody::QpStuck(QpStuck {
                t_ns: 2_000,
                source: WrSource::Profiler,
                device: 1,
                qp_num: 0x101,
                since_ns: 1_400,
                timeout_ns: 500,
                posted: 41,
                completed: 40,
                in_flight: 1,
            }),
            RecordBody::QpDegraded(QpDegraded {
                t_ns: 3_000,
                source: WrSource::Profiler,
                device: 0,
                qp_num: 7,
                window_bps: 5,
                baseline_bps: 20,
                threshold: 0.2,
                window_n: 16,
                windows: 2,
                posted: 300,
                completed: 299,
            }),
        ]
    }

    #[test]
    fn every_work_request_record_round_trips() {
        for (body, code) in samples().into_iter().zip([kind::QP_WINDOW, kind::QP_STUCK, kind::QP_DEGRADED]) {
            assert_eq!(body.kind(), code);
            let mut buf = [0u8; PAYLOAD_CAPACITY];
            let len = body.encode(&mut buf);
            assert_eq!(RecordBody::decode(code, &buf[..len]), Some(body));
            assert_eq!(RecordBody::decode(code, &buf[..len - 1]), None, "short payload");
        }
    }

    #[test]
    fn an_unknown_source_does_not_decode() {
        let body = samples()[1];
        let mut buf = [0u8; PAYLOAD_CAPACITY];
        let len = body.encode(&mut buf);
        buf[len - 1] = 9; // the source byte comes last
        assert_eq!(RecordBody::decode(kind::QP_STUCK, &buf[..len]), None);
    }

    #[test]
    fn json_names_are_stable() {
        let json: Vec<String> = samples().iter().map(|b| serde_json::to_string(b).unwrap()).collect();
        assert!(json[0].contains(r#""kind":"qp_window""#) && json[0].contains(r#""source":"verbs""#), "{}", json[0]);
        assert!(json[1].contains(r#""kind":"qp_stuck""#) && json[1].contains(r#""since_ns":1400"#), "{}", json[1]);
        assert!(json[2].contains(r#""kind":"qp_degraded""#) && json[2].contains(r#""threshold":0.2"#), "{}", json[2]);
    }
}
