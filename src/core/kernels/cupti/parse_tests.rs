//! The parser over buffers laid out with cudarc's bindgen structures of the CUPTI records
//! (the C layouts of cupti_activity.h, per CUDA version): a CUDA 12 kernel record
//! (`Kernel9`), CUDA 13 ones (`Kernel10`, `Kernel11`), memcpy and runtime records, a record
//! too short for its kind, an incomplete one and one of a kind the parser skips.

use std::ffi::CStr;
use std::mem::{offset_of, size_of};

use cudarc::cupti::sys::{
    CUpti_ActivityAPI, CUpti_ActivityKernel10, CUpti_ActivityKernel11, CUpti_ActivityKernel12, CUpti_ActivityKernel13,
    CUpti_ActivityKernel4, CUpti_ActivityKernel5, CUpti_ActivityKernel6, CUpti_ActivityKernel7, CUpti_ActivityKernel8,
    CUpti_ActivityKernel9, CUpti_ActivityKind, CUpti_ActivityMemcpy, CUpti_ActivityMemcpy3, CUpti_ActivityMemcpy4,
    CUpti_ActivityMemcpy5, CUpti_ActivityMemcpy6, CUpti_ActivityMemcpy7, CUpti_ActivitySynchronization,
    CUpti_ActivitySynchronization2, CUpti_ActivitySynchronizationType,
};

use super::*;

/// Every supported record version has the fields at the offsets the parser reads, and
/// is at least as long as the parser's minimum.
#[test]
fn offsets_are_those_of_every_supported_record_version() {
    macro_rules! kernel_versions {
        ($($t:ty),*) => {$(
            assert_eq!(
                [offset_of!($t, start), offset_of!($t, end), offset_of!($t, deviceId), offset_of!($t, contextId),
                 offset_of!($t, streamId), offset_of!($t, correlationId), offset_of!($t, name)],
                [kernel::START, kernel::END, kernel::DEVICE, kernel::CONTEXT, kernel::STREAM,
                 kernel::CORRELATION, kernel::NAME],
                stringify!($t)
            );
            assert!(size_of::<$t>() >= kernel::MIN_SIZE, stringify!($t));
        )*};
    }
    kernel_versions!(
        CUpti_ActivityKernel4,
        CUpti_ActivityKernel5,
        CUpti_ActivityKernel6,
        CUpti_ActivityKernel7,
        CUpti_ActivityKernel8,
        CUpti_ActivityKernel9,
        CUpti_ActivityKernel10,
        CUpti_ActivityKernel11,
        CUpti_ActivityKernel12,
        CUpti_ActivityKernel13
    );
    macro_rules! memcpy_versions {
        ($($t:ty),*) => {$(
            assert_eq!(
                [offset_of!($t, copyKind), offset_of!($t, bytes), offset_of!($t, start), offset_of!($t, end),
                 offset_of!($t, deviceId), offset_of!($t, contextId), offset_of!($t, streamId),
                 offset_of!($t, correlationId)],
                [memcpy::COPY_KIND, memcpy::BYTES, memcpy::START, memcpy::END, memcpy::DEVICE, memcpy::CONTEXT,
                 memcpy::STREAM, memcpy::CORRELATION],
                stringify!($t)
            );
            assert!(size_of::<$t>() >= memcpy::MIN_SIZE, stringify!($t));
        )*};
    }
    memcpy_versions!(
        CUpti_ActivityMemcpy,
        CUpti_ActivityMemcpy3,
        CUpti_ActivityMemcpy4,
        CUpti_ActivityMemcpy5,
        CUpti_ActivityMemcpy6,
        CUpti_ActivityMemcpy7
    );
    assert_eq!(
        [
            offset_of!(CUpti_ActivityAPI, cbid),
            offset_of!(CUpti_ActivityAPI, start),
            offset_of!(CUpti_ActivityAPI, end),
            offset_of!(CUpti_ActivityAPI, correlationId)
        ],
        [api::CBID, api::START, api::END, api::CORRELATION]
    );
    assert_eq!(
        [
            CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY as u32,
            CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_RUNTIME as u32,
            CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL as u32
        ],
        [kind::MEMCPY, kind::RUNTIME, kind::CONCURRENT_KERNEL]
    );
}

/// A record structure as the bytes CUPTI would write.
fn bytes_of<T: Copy>(record: &T) -> Vec<u8> {
    // SAFETY: the record is a plain-data repr(C) structure, fully initialised (zeroed,
    // then fields set), read as bytes for its own size.
    unsafe { std::slice::from_raw_parts((record as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
}

fn zeroed<T>() -> T {
    // SAFETY: used only for CUPTI record structures: integers, raw pointers, and enums
    // (kind, channel type, cache config) whose zero is a declared variant.
    unsafe { std::mem::zeroed() }
}

/// A buffer being laid out record by record, remembering where each starts.
#[derive(Default)]
struct Buffer {
    bytes: Vec<u8>,
    offsets: Vec<usize>,
}

impl Buffer {
    fn push(&mut self, record: Vec<u8>) -> &mut Buffer {
        self.offsets.push(self.bytes.len());
        self.bytes.extend_from_slice(&record);
        // CUPTI keeps records 8-byte aligned.
        self.bytes.resize(self.bytes.len().next_multiple_of(8), 0);
        self
    }

    /// Parses it, walking the recorded offsets, with names resolved from `NAMES`.
    fn parse(&self, time: TimeBase) -> (ParseStats, Vec<(Activity, Option<String>)>) {
        let mut walk = self.offsets.iter().copied();
        let mut seen = Vec::new();
        let stats = parse_buffer(&self.bytes, || walk.next(), time, resolve, &mut |activity, name| {
            seen.push((*activity, name.map(|n| String::from_utf8_lossy(n).into_owned())))
        });
        (stats, seen)
    }
}

const NAMES: [&CStr; 2] = [c"ncclDevKernel_AllReduce_Sum_f32_RING_LL", c"sm90_xmma_gemm_bf16"];

fn resolve(pointer: u64) -> Option<&'static [u8]> {
    NAMES.iter().find(|n| n.as_ptr() as u64 == pointer).map(|n| n.to_bytes())
}

fn kernel9(name: &CStr, start: u64, end: u64, stream: u32, correlation: u32) -> Vec<u8> {
    let mut k: CUpti_ActivityKernel9 = zeroed();
    k.kind = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    (k.start, k.end, k.deviceId, k.contextId, k.streamId) = (start, end, 1, 2, stream);
    (k.correlationId, k.name, k.gridX, k.completed) = (correlation, name.as_ptr(), 1024, end);
    bytes_of(&k)
}

fn kernel11(name: &CStr, start: u64, end: u64, stream: u32, correlation: u32) -> Vec<u8> {
    let mut k: CUpti_ActivityKernel11 = zeroed();
    k.kind = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    (k.start, k.end, k.deviceId, k.contextId, k.streamId) = (start, end, 3, 4, stream);
    (k.correlationId, k.name, k.priority, k.queued) = (correlation, name.as_ptr(), -1, start - 10);
    bytes_of(&k)
}

fn kernel10(name: &CStr, start: u64, end: u64) -> Vec<u8> {
    let mut k: CUpti_ActivityKernel10 = zeroed();
    k.kind = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    (k.start, k.end, k.streamId, k.name) = (start, end, 9, name.as_ptr());
    bytes_of(&k)
}

fn memcpy5(bytes: u64, start: u64, end: u64, stream: u32) -> Vec<u8> {
    let mut m: CUpti_ActivityMemcpy5 = zeroed();
    m.kind = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY;
    (m.copyKind, m.bytes, m.start, m.end, m.deviceId, m.streamId, m.correlationId) =
        (1, bytes, start, end, 1, stream, 77);
    bytes_of(&m)
}

fn memcpy6(bytes: u64, start: u64, end: u64) -> Vec<u8> {
    let mut m: CUpti_ActivityMemcpy6 = zeroed();
    m.kind = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY;
    (m.copyKind, m.bytes, m.start, m.end, m.streamId, m.copyCount) = (2, bytes, start, end, 5, 1);
    bytes_of(&m)
}

fn synchronization(
    type_: CUpti_ActivitySynchronizationType,
    start: u64,
    end: u64,
    stream: u32,
    correlation: u32,
) -> Vec<u8> {
    let mut s: CUpti_ActivitySynchronization2 = zeroed();
    s.kind = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
    (s.type_, s.start, s.end, s.correlationId, s.contextId, s.streamId) = (type_, start, end, correlation, 1, stream);
    bytes_of(&s)
}

/// The synchronization records of CUDA 12 and 13 (`Synchronization` and the longer
/// `Synchronization2`) carry the fields the parser reads at its offsets.
#[test]
fn synchronization_records_of_every_version() {
    macro_rules! sync_versions {
        ($($t:ty),*) => {$(
            assert_eq!(
                [offset_of!($t, type_), offset_of!($t, start), offset_of!($t, end), offset_of!($t, correlationId),
                 offset_of!($t, contextId), offset_of!($t, streamId)],
                [sync::TYPE, sync::START, sync::END, sync::CORRELATION, sync::CONTEXT, sync::STREAM],
                stringify!($t)
            );
            assert!(size_of::<$t>() >= sync::MIN_SIZE, stringify!($t));
        )*};
    }
    sync_versions!(CUpti_ActivitySynchronization, CUpti_ActivitySynchronization2);
    assert_eq!(CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION as u32, kind::SYNCHRONIZATION);
    use CUpti_ActivitySynchronizationType as T;
    let mut buffer = Buffer::default();
    buffer
        .push(synchronization(T::CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, 7_000_000, 7_900_000, 13, 55))
        .push(synchronization(T::CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE, 8_000_000, 0, 0, 56));
    let (stats, seen) = buffer.parse(BASE);
    assert_eq!(stats, ParseStats { delivered: 1, unknown: 0, rejected: 1 }, "one still in progress at a forced flush");
    let s = seen[0].0;
    assert_eq!(s.kind, ActivityKind::Synchronization { sync_type: 3 });
    assert_eq!((s.stream, s.correlation, s.start_ns, s.end_ns), (13, 55, 6_000_000, 6_900_000));
}

fn runtime_api(cbid: u32, start: u64, end: u64, correlation: u32) -> Vec<u8> {
    let mut a: CUpti_ActivityAPI = zeroed();
    a.kind = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_RUNTIME;
    (a.cbid, a.start, a.end, a.correlationId, a.threadId) = (cbid, start, end, correlation, 4242);
    bytes_of(&a)
}

const BASE: TimeBase = TimeBase { offset_ns: -1_000_000 };

#[test]
fn cuda12_records_become_activities_in_monotonic_time() {
    let mut buffer = Buffer::default();
    buffer
        .push(runtime_api(211, 5_000_000, 5_000_400, 31))
        .push(kernel9(NAMES[0], 5_001_000, 5_003_000, 7, 31))
        .push(memcpy5(4096, 5_004_000, 5_004_500, 7));
    let (stats, seen) = buffer.parse(BASE);
    assert_eq!(stats, ParseStats { delivered: 3, unknown: 0, rejected: 0 });
    let (runtime, kernel, copy) = (seen[0].0, seen[1].0, seen[2].0);
    assert_eq!(runtime.kind, ActivityKind::Runtime { cbid: 211 });
    assert_eq!((runtime.correlation, runtime.start_ns, runtime.end_ns), (31, 4_000_000, 4_000_400));
    assert_eq!(kernel.kind, ActivityKind::Kernel);
    assert_eq!((kernel.device, kernel.context, kernel.stream, kernel.correlation), (1, 2, 7, 31));
    assert_eq!((kernel.start_ns, kernel.end_ns, kernel.duration_ns()), (4_001_000, 4_003_000, 2_000));
    assert_eq!(kernel.name_id, KernelNames::NONE, "names are interned by the sink, not here");
    assert_eq!(seen[1].1.as_deref(), Some("ncclDevKernel_AllReduce_Sum_f32_RING_LL"));
    assert_eq!(copy.kind, ActivityKind::Memcpy { bytes: 4096, copy_kind: 1 });
    assert_eq!((copy.stream, copy.correlation, copy.start_ns), (7, 77, 4_004_000));
    assert_eq!((seen[0].1.as_ref(), seen[2].1.as_ref()), (None, None));
}

#[test]
fn cuda13_records_with_their_longer_layouts() {
    let mut buffer = Buffer::default();
    buffer
        .push(kernel11(NAMES[1], 9_000_000, 9_500_000, 3, 8))
        .push(kernel10(NAMES[0], 9_600_000, 9_700_000))
        .push(memcpy6(1 << 20, 9_800_000, 9_900_000));
    let (stats, seen) = buffer.parse(TimeBase { offset_ns: 0 });
    assert_eq!(stats.delivered, 3);
    let k = seen[0].0;
    assert_eq!((k.device, k.context, k.stream, k.correlation), (3, 4, 3, 8));
    assert_eq!((k.start_ns, k.end_ns), (9_000_000, 9_500_000));
    assert_eq!(seen[0].1.as_deref(), Some("sm90_xmma_gemm_bf16"));
    assert_eq!((seen[1].0.stream, seen[1].1.as_deref()), (9, Some("ncclDevKernel_AllReduce_Sum_f32_RING_LL")));
    assert_eq!(seen[2].0.kind, ActivityKind::Memcpy { bytes: 1 << 20, copy_kind: 2 });
    assert_eq!(seen[2].0.stream, 5);
}

#[test]
fn short_incomplete_and_unknown_records_are_counted_and_skipped() {
    let mut short = kernel9(NAMES[0], 100, 200, 1, 1);
    short.truncate(kernel::MIN_SIZE - 8); // ends before the name pointer
    let mut memset = runtime_api(0, 1, 2, 0);
    memset[0..4].copy_from_slice(&(CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET as u32).to_le_bytes());
    let mut buffer = Buffer::default();
    buffer
        .push(short)
        .push(memset)
        .push(kernel9(NAMES[1], 0, 0, 1, 2)) // cut short by a forced flush
        .push(kernel9(NAMES[1], 300, 250, 1, 3)) // ends before it starts
        .push(kernel9(NAMES[1], 1_000, 2_000, 4, 4));
    let (stats, seen) = buffer.parse(TimeBase { offset_ns: 5 });
    assert_eq!(stats, ParseStats { delivered: 1, unknown: 1, rejected: 3 });
    assert_eq!((seen[0].0.stream, seen[0].0.start_ns), (4, 1_005));
}

#[test]
fn a_null_name_pointer_gives_no_name() {
    let mut unnamed: CUpti_ActivityKernel9 = zeroed();
    unnamed.kind = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    (unnamed.start, unnamed.end) = (10, 20);
    let mut buffer = Buffer::default();
    buffer.push(bytes_of(&unnamed));
    let (stats, seen) = buffer.parse(TimeBase { offset_ns: 0 });
    assert_eq!((stats.delivered, seen[0].1.as_ref()), (1, None));
}

#[test]
fn a_walker_leaving_the_buffer_stops_the_parse() {
    let mut buffer = Buffer::default();
    buffer.push(kernel9(NAMES[0], 10, 20, 1, 1)).push(kernel9(NAMES[0], 30, 40, 1, 2));
    let mut walk = [0, buffer.bytes.len() + 64].into_iter();
    let mut delivered = 0;
    let stats = parse_buffer(&buffer.bytes, || walk.next(), BASE, resolve, &mut |_, _| delivered += 1);
    assert_eq!((stats.delivered, delivered), (0, 0), "a record cannot reach past the valid data");
    let mut backwards = [208, 0].into_iter();
    let stats = parse_buffer(&buffer.bytes, || backwards.next(), BASE, resolve, &mut |_, _| {});
    assert_eq!(stats.delivered, 0);
}

#[test]
fn timestamps_clamp_instead_of_wrapping() {
    assert_eq!(TimeBase { offset_ns: -100 }.to_mono_ns(40), 0);
    assert_eq!(TimeBase { offset_ns: 100 }.to_mono_ns(u64::MAX - 1), u64::MAX);
    assert_eq!(TimeBase { offset_ns: -1_700_000_000_000_000_000 }.to_mono_ns(1_700_000_000_123_456_789), 123_456_789);
}
