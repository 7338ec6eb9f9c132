//! Record layouts of the GPU kernel summaries (kinds 11-14, 16): what the collector writes
//! per kernel-summary window and per step from CUDA activity. All times are already
//! `CLOCK_MONOTONIC` (or, for window ids, wall-clock aligned) nanoseconds: the collector
//! makes these records, the hot path never does.
//!
//! Every layout is packed to keep a window's summary small (docs/kernels.md "Kernel summaries"):
//! durations inside cluster entries are 16-bit log codes (`duration_code`), NCCL kernel
//! starts are 32-bit offsets from the window's start, and one record carries many entries.

use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Serialize, Serializer};

use super::records::{Decoder, Encoder};

/// Duration codes: `round(ln(ns) * DURATION_CODE_SCALE)`, so one step is a factor of
/// `exp(1/2048)`, a 0.05% change in duration (a code rounds by half that), from 1 ns to
/// 22 hours in 16 bits. L3 compares distributions whose differences of interest are
/// percents, so the code costs nothing it needs.
pub const DURATION_CODE_SCALE: f64 = 2048.0;

pub fn duration_code(ns: f64) -> u16 {
    if ns.is_nan() || ns <= 1.0 {
        return 0;
    }
    (ns.ln() * DURATION_CODE_SCALE).round().min(u16::MAX as f64) as u16
}

pub fn code_ns(code: u16) -> f64 {
    (code as f64 / DURATION_CODE_SCALE).exp()
}

/// Kernel-name ids in records are 12 bits (`KernelNames::CAPACITY` is 4096); every name
/// past the table's capacity is this id.
pub const NAME_ID_OVERFLOW: u16 = 0x0fff;

/// Kind 11: a kernel name interned on this rank, written once, when first seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelName {
    pub name_id: u32,
    /// FNV-1a of the full name, so ranks can match names that were truncated here.
    pub hash: u64,
    /// Length of the full name in bytes; more than `len` when truncated.
    pub full_len: u16,
    pub len: u8,
    pub bytes: [u8; KernelName::CAPACITY],
}

impl KernelName {
    /// Name bytes one record holds (112 - 4 - 8 - 2 - 1, one byte spare).
    pub const CAPACITY: usize = 96;

    pub fn new(name_id: u32, name: &[u8]) -> KernelName {
        let len = name.len().min(Self::CAPACITY);
        let mut bytes = [0; Self::CAPACITY];
        bytes[..len].copy_from_slice(&name[..len]);
        KernelName {
            name_id,
            hash: crate::core::fnv::fnv1a(name),
            full_len: name.len().min(u16::MAX as usize) as u16,
            len: len as u8,
            bytes,
        }
    }

    pub fn name(&self) -> String {
        String::from_utf8_lossy(&self.bytes[..self.len as usize]).into_owned()
    }

    pub fn truncated(&self) -> bool {
        self.full_len as usize > self.len as usize
    }
}

impl Serialize for KernelName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("KernelName", 4)?;
        st.serialize_field("name_id", &self.name_id)?;
        st.serialize_field("hash", &format!("{:#018x}", self.hash))?;
        st.serialize_field("name", &self.name())?;
        st.serialize_field("truncated", &self.truncated())?;
        st.end()
    }
}

/// One KDE cluster of one (kernel name, device, stream) series in one window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterEntry {
    /// Kernel-name id (12 bits; [`NAME_ID_OVERFLOW`] past the table).
    pub name_id: u16,
    /// Position of the cluster in its series, ascending by duration (0-15).
    pub index: u8,
    /// Launches in the cluster (24 bits, saturating).
    pub launches: u32,
    pub p50_code: u16,
    pub p99_code: u16,
}

impl ClusterEntry {
    pub const MAX_LAUNCHES: u32 = (1 << 24) - 1;
    pub const MAX_INDEX: u8 = 15;

    pub fn p50_ns(&self) -> f64 {
        code_ns(self.p50_code)
    }

    pub fn p99_ns(&self) -> f64 {
        code_ns(self.p99_code)
    }
}

/// Kind 12: up to [`KernelCluster::ENTRIES`] clusters of series on one (device, stream) in
/// one window. A series' clusters are consecutive and ascending by index; a series may
/// continue in the next record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelCluster {
    /// Window index: the window starts at wall-clock `window * window_ms` ms.
    pub window: u64,
    pub window_ms: u16,
    pub device: u8,
    pub stream: u32,
    pub count: u8,
    pub entries: [ClusterEntry; KernelCluster::ENTRIES],
}

impl KernelCluster {
    pub const ENTRIES: usize = 10;

    pub fn entries(&self) -> &[ClusterEntry] {
        &self.entries[..self.count as usize]
    }
}

impl Serialize for KernelCluster {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Entries<'a>(&'a [ClusterEntry]);
        impl Serialize for Entries<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(Some(self.0.len()))?;
                for e in self.0 {
                    seq.serialize_element(&EntryJson::from(e))?;
                }
                seq.end()
            }
        }
        let mut st = s.serialize_struct("KernelCluster", 5)?;
        st.serialize_field("window", &self.window)?;
        st.serialize_field("window_ms", &self.window_ms)?;
        st.serialize_field("device", &self.device)?;
        st.serialize_field("stream", &self.stream)?;
        st.serialize_field("clusters", &Entries(self.entries()))?;
        st.end()
    }
}

#[derive(Serialize)]
struct EntryJson {
    name_id: u16,
    index: u8,
    count: u32,
    p50_ns: u64,
    p99_ns: u64,
}

impl From<&ClusterEntry> for EntryJson {
    fn from(e: &ClusterEntry) -> EntryJson {
        EntryJson {
            name_id: e.name_id,
            index: e.index,
            count: e.launches,
            p50_ns: e.p50_ns().round() as u64,
            p99_ns: e.p99_ns().round() as u64,
        }
    }
}

/// Kind 13: NCCL kernels of one (device, stream, kernel name) in one window: start
/// offsets from the window's wall-clock start and durations, in ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NcclKernels {
    pub window: u64,
    pub window_ms: u16,
    pub device: u8,
    pub stream: u32,
    pub name_id: u16,
    pub count: u8,
    /// (start offset ns, duration ns), duration saturating at `u32::MAX`.
    pub pairs: [(u32, u32); NcclKernels::PAIRS],
}

impl NcclKernels {
    pub const PAIRS: usize = 11;

    pub fn pairs(&self) -> &[(u32, u32)] {
        &self.pairs[..self.count as usize]
    }
}

impl Serialize for NcclKernels {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("NcclKernels", 6)?;
        st.serialize_field("window", &self.window)?;
        st.serialize_field("window_ms", &self.window_ms)?;
        st.serialize_field("device", &self.device)?;
        st.serialize_field("stream", &self.stream)?;
        st.serialize_field("name_id", &self.name_id)?;
        st.serialize_field("start_offset_and_duration_ns", self.pairs())?;
        st.end()
    }
}

/// One (device, stream)'s GPU busy time in a window: the union of its kernels' intervals
/// clipped to the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BusyEntry {
    pub device: u8,
    pub stream: u32,
    pub busy_ns: u32,
    pub kernels: u32,
}

/// Kind 14: busy time per (device, stream) in one window, plus what the window lost:
/// every part of a window repeats the window's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamBusy {
    pub window: u64,
    pub window_ms: u16,
    pub part: u8,
    pub count: u8,
    /// Activity that arrived after its window had been written (counted in the next
    /// window written).
    pub late: u32,
    /// Cluster entries and NCCL (start, duration) pairs this window had but did not write,
    /// because one window may write at most `KernelWindows::MAX_RECORDS` records.
    pub truncated_clusters: u32,
    pub truncated_nccl: u32,
    /// Launches not summarized because the window's series table was full.
    pub untracked: u32,
    pub entries: [BusyEntry; StreamBusy::ENTRIES],
}

impl StreamBusy {
    pub const ENTRIES: usize = 6;

    pub fn entries(&self) -> &[BusyEntry] {
        &self.entries[..self.count as usize]
    }
}

impl Serialize for StreamBusy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("StreamBusy", 8)?;
        st.serialize_field("window", &self.window)?;
        st.serialize_field("window_ms", &self.window_ms)?;
        st.serialize_field("part", &self.part)?;
        st.serialize_field("late", &self.late)?;
        st.serialize_field("truncated_clusters", &self.truncated_clusters)?;
        st.serialize_field("truncated_nccl", &self.truncated_nccl)?;
        st.serialize_field("untracked", &self.untracked)?;
        st.serialize_field("streams", self.entries())?;
        st.end()
    }
}

/// Kind 16: per step, the device time each stage of the step accounts for (one record per
/// [`StageDevice::STAGES`] stages; `part` numbers them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageDevice {
    pub step: u64,
    /// Kernels attributed to the step.
    pub kernels: u32,
    /// Of those, attributed through the runtime call's correlation id (the rest by time).
    pub correlated: u32,
    pub part: u8,
    /// (stage id, device_us, spill_us): GPU busy time (union over the rank's streams) of
    /// the stage's kernels, and the part of it after the stage's host-side end.
    pub stages: [(u16, u32, u32); StageDevice::STAGES],
    pub count: u8,
}

impl StageDevice {
    pub const STAGES: usize = 9;

    /// (stage id, device ns, spill ns).
    pub fn stages(&self) -> impl Iterator<Item = (u16, u64, u64)> + '_ {
        self.stages[..self.count as usize].iter().map(|&(id, d, s)| (id, d as u64 * 1000, s as u64 * 1000))
    }
}

impl Serialize for StageDevice {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Stage {
            stage_id: u16,
            device_us: u32,
            spill_us: u32,
        }
        let stages: Vec<Stage> = self.stages[..self.count as usize]
            .iter()
            .map(|&(stage_id, device_us, spill_us)| Stage { stage_id, device_us, spill_us })
            .collect();
        let mut st = s.serialize_struct("StageDevice", 5)?;
        st.serialize_field("step", &self.step)?;
        st.serialize_field("kernels", &self.kernels)?;
        st.serialize_field("correlated", &self.correlated)?;
        st.serialize_field("part", &self.part)?;
        st.serialize_field("stages", &stages)?;
        st.end()
    }
}

pub(super) fn encode_kernel_name(n: &KernelName, w: &mut Encoder) {
    w.u32(n.name_id);
    w.u64(n.hash);
    w.u16(n.full_len);
    w.short_bytes(&n.bytes[..n.len as usize]);
}

pub(super) fn decode_kernel_name(r: &mut Decoder) -> Option<KernelName> {
    let (name_id, hash, full_len, (len, bytes)) = (r.u32()?, r.u64()?, r.u16()?, r.short_bytes()?);
    Some(KernelName { name_id, hash, full_len, len, bytes })
}

pub(super) fn encode_kernel_cluster(c: &KernelCluster, w: &mut Encoder) {
    w.u64(c.window);
    w.u16(c.window_ms);
    w.u8(c.device);
    w.u32(c.stream);
    w.u8(c.count);
    for e in c.entries() {
        w.u16((e.name_id & NAME_ID_OVERFLOW) | (e.index.min(ClusterEntry::MAX_INDEX) as u16) << 12);
        let launches = e.launches.min(ClusterEntry::MAX_LAUNCHES);
        w.u16(launches as u16);
        w.u8((launches >> 16) as u8);
        w.u16(e.p50_code);
        w.u16(e.p99_code);
    }
}

pub(super) fn decode_kernel_cluster(r: &mut Decoder) -> Option<KernelCluster> {
    let (window, window_ms, device, stream, count) = (r.u64()?, r.u16()?, r.u8()?, r.u32()?, r.u8()?);
    if count as usize > KernelCluster::ENTRIES {
        return None;
    }
    let mut entries = [ClusterEntry::default(); KernelCluster::ENTRIES];
    for e in &mut entries[..count as usize] {
        let name = r.u16()?;
        let (low, high) = (r.u16()?, r.u8()?);
        *e = ClusterEntry {
            name_id: name & NAME_ID_OVERFLOW,
            index: (name >> 12) as u8,
            launches: low as u32 | (high as u32) << 16,
            p50_code: r.u16()?,
            p99_code: r.u16()?,
        };
    }
    Some(KernelCluster { window, window_ms, device, stream, count, entries })
}

pub(super) fn encode_nccl_kernels(n: &NcclKernels, w: &mut Encoder) {
    w.u64(n.window);
    w.u16(n.window_ms);
    w.u8(n.device);
    w.u32(n.stream);
    w.u16(n.name_id);
    w.u8(n.count);
    for &(start, duration) in n.pairs() {
        w.u32(start);
        w.u32(duration);
    }
}

pub(super) fn decode_nccl_kernels(r: &mut Decoder) -> Option<NcclKernels> {
    let (window, window_ms, device, stream, name_id, count) =
        (r.u64()?, r.u16()?, r.u8()?, r.u32()?, r.u16()?, r.u8()?);
    if count as usize > NcclKernels::PAIRS {
        return None;
    }
    let mut pairs = [(0, 0); NcclKernels::PAIRS];
    for p in &mut pairs[..count as usize] {
        *p = (r.u32()?, r.u32()?);
    }
    Some(NcclKernels { window, window_ms, device, stream, name_id, count, pairs })
}

pub(super) fn encode_stream_busy(b: &StreamBusy, w: &mut Encoder) {
    w.u64(b.window);
    w.u16(b.window_ms);
    w.u8(b.part);
    w.u8(b.count);
    for v in [b.late, b.truncated_clusters, b.truncated_nccl, b.untracked] {
        w.u32(v);
    }
    for e in b.entries() {
        w.u8(e.device);
        w.u32(e.stream);
        w.u32(e.busy_ns);
        w.u32(e.kernels);
    }
}

pub(super) fn decode_stream_busy(r: &mut Decoder) -> Option<StreamBusy> {
    let (window, window_ms, part, count) = (r.u64()?, r.u16()?, r.u8()?, r.u8()?);
    if count as usize > StreamBusy::ENTRIES {
        return None;
    }
    let (late, truncated_clusters, truncated_nccl, untracked) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
    let mut entries = [BusyEntry::default(); StreamBusy::ENTRIES];
    for e in &mut entries[..count as usize] {
        *e = BusyEntry { device: r.u8()?, stream: r.u32()?, busy_ns: r.u32()?, kernels: r.u32()? };
    }
    Some(StreamBusy { window, window_ms, part, count, late, truncated_clusters, truncated_nccl, untracked, entries })
}

pub(super) fn encode_stage_device(d: &StageDevice, w: &mut Encoder) {
    w.u64(d.step);
    w.u32(d.kernels);
    w.u32(d.correlated);
    w.u8(d.part);
    w.u8(d.count);
    for &(id, device_us, spill_us) in &d.stages[..d.count as usize] {
        w.u16(id);
        w.u32(device_us);
        w.u32(spill_us);
    }
}

pub(super) fn decode_stage_device(r: &mut Decoder) -> Option<StageDevice> {
    let (step, kernels, correlated, part, count) = (r.u64()?, r.u32()?, r.u32()?, r.u8()?, r.u8()?);
    if count as usize > StageDevice::STAGES {
        return None;
    }
    let mut stages = [(0, 0, 0); StageDevice::STAGES];
    for s in &mut stages[..count as usize] {
        *s = (r.u16()?, r.u32()?, r.u32()?);
    }
    Some(StageDevice { step, kernels, correlated, part, stages, count })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::log::format::PAYLOAD_CAPACITY;
    use crate::core::log::records::RecordBody;

    fn round_trip(body: RecordBody) -> usize {
        let mut buf = [0u8; PAYLOAD_CAPACITY];
        let len = body.encode(&mut buf);
        assert_eq!(RecordBody::decode(body.kind(), &buf[..len]), Some(body));
        assert_eq!(RecordBody::decode(body.kind(), &buf[..len.saturating_sub(1)]), None, "short payload");
        len
    }

    #[test]
    fn full_records_round_trip_and_fit_a_slot() {
        let name = KernelName::new(7, &[b'k'; 300]);
        assert!(name.truncated() && name.full_len == 300 && name.len as usize == KernelName::CAPACITY);
        round_trip(RecordBody::KernelName(name));
        round_trip(RecordBody::KernelName(KernelName::new(0, b"gemm")));

        let mut entries = [ClusterEntry::default(); KernelCluster::ENTRIES];
        for (i, e) in entries.iter_mut().enumerate() {
            *e = ClusterEntry {
                name_id: 4000 + i as u16,
                index: (i % 16) as u8,
                launches: ClusterEntry::MAX_LAUNCHES - i as u32,
                p50_code: duration_code(1e4 + i as f64),
                p99_code: duration_code(2e4),
            };
        }
        let cluster = KernelCluster {
            window: 1_800_000_000_123,
            window_ms: 1000,
            device: 3,
            stream: 70_000,
            count: KernelCluster::ENTRIES as u8,
            entries,
        };
        round_trip(RecordBody::KernelCluster(cluster));

        let mut pairs = [(0, 0); NcclKernels::PAIRS];
        pairs.iter_mut().enumerate().for_each(|(i, p)| *p = (i as u32 * 1000, u32::MAX - i as u32));
        let nccl = NcclKernels { window: 9, window_ms: 500, device: 1, stream: 13, name_id: 2, count: 11, pairs };
        round_trip(RecordBody::NcclKernels(nccl));

        let mut busy = [BusyEntry::default(); StreamBusy::ENTRIES];
        busy.iter_mut()
            .enumerate()
            .for_each(|(i, e)| *e = BusyEntry { device: i as u8, stream: 7, busy_ns: 5, kernels: 9 });
        round_trip(RecordBody::StreamBusy(StreamBusy {
            window: 1,
            window_ms: 1000,
            part: 2,
            count: StreamBusy::ENTRIES as u8,
            late: 1,
            truncated_clusters: 2,
            truncated_nccl: 3,
            untracked: 4,
            entries: busy,
        }));

        let mut stages = [(0, 0, 0); StageDevice::STAGES];
        stages.iter_mut().enumerate().for_each(|(i, s)| *s = (i as u16, 1000 * i as u32, i as u32));
        let device = StageDevice { step: 42, kernels: 900, correlated: 800, part: 1, stages, count: 9 };
        assert!(round_trip(RecordBody::StageDevice(device)) <= PAYLOAD_CAPACITY);
        assert_eq!(device.stages().nth(2), Some((2, 2_000_000, 2000)));
    }

    #[test]
    fn duration_codes_keep_a_twentieth_of_a_percent() {
        for ns in [1.5, 10.0, 999.0, 12_345.0, 4.0e6, 3.3e9, 7.0e13] {
            let back = code_ns(duration_code(ns));
            assert!((back / ns - 1.0).abs() < 2.5e-4, "{ns} -> {back}");
        }
        assert_eq!(duration_code(0.0), 0);
        assert_eq!(duration_code(f64::NAN), 0);
        assert_eq!(duration_code(1e30), u16::MAX);
    }

    #[test]
    fn json_names() {
        let mut entries = [ClusterEntry::default(); KernelCluster::ENTRIES];
        entries[0] = ClusterEntry {
            name_id: 3,
            index: 1,
            launches: 5,
            p50_code: duration_code(1000.0),
            p99_code: duration_code(2000.0),
        };
        let c = KernelCluster { window: 1, window_ms: 1000, device: 0, stream: 7, count: 1, entries };
        let json = serde_json::to_string(&RecordBody::KernelCluster(c)).unwrap();
        assert!(json.contains(r#""kind":"kernel_cluster""#) && json.contains(r#""p50_ns":1000"#), "{json}");
        let d = StageDevice { step: 3, kernels: 1, correlated: 0, part: 0, stages: [(4, 10, 2); 9], count: 1 };
        let json = serde_json::to_string(&RecordBody::StageDevice(d)).unwrap();
        assert!(json.contains(r#""stages":[{"stage_id":4,"device_us":10,"spill_us":2}]"#), "{json}");
    }
}
