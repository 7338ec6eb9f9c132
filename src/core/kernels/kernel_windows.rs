//! Per-window summaries of GPU kernel activity (ARGUS §5.2), made on the collector thread
//! from what the CUDA door hands it:
//! - each kernel name once, when first seen (`kernel_name`);
//! - per window of `SF_KERNEL_WINDOW_MS`, aligned to wall-clock time so every rank's
//!   window `k` covers the same span: KDE valley clusters (count, p50, p99) of each
//!   (kernel, device, stream) series' durations (`kernel_cluster`), NCCL kernels' starts
//!   and durations (`nccl_kernels`), and busy time per (device, stream) with what the
//!   window lost (`stream_busy`);
//! - per step, device time per stage ([`crate::core::kernels::stage_device`]).
//!
//! Activity arrives after the CUDA door flushes its buffers, so a window is written only
//! once it ended at least `2 × SF_CUPTI_FLUSH_MS` ago (or at exit); later activity for it
//! is counted as `late`. A window writes at most [`KernelWindows::MAX_RECORDS`] records
//! (4 KiB); what does not fit is counted, never silently dropped. Memory is bounded:
//! [`OPEN_WINDOWS`] windows of at most [`SERIES_PER_WINDOW`] series, each sampled by a
//! reservoir of [`SAMPLES_PER_SERIES`] durations.

use std::collections::HashMap;

use crate::core::fnv::Fnv1a;
use crate::core::kernels::cupti;
use crate::core::kernels::cupti::config::CuptiConfig;
use crate::core::kernels::kde::{Cluster, KdeParams};
use crate::core::kernels::kernel_activity::{Activity, ActivityKind, KernelNames};
use crate::core::kernels::reservoir::Reservoir;
use crate::core::kernels::stage_device::{StageDeviceTimes, StepWindows};
use crate::core::live::runtime::Runtime;
use crate::core::log::records::{CuptiState, KernelName, RecordBody};
use crate::core::log::records_kernels::{
    duration_code, BusyEntry, ClusterEntry, KernelCluster, NcclKernels, StreamBusy, NAME_ID_OVERFLOW,
};
use crate::core::log::writer::LogWriter;
use crate::core::record::clock::{monotonic_ns, wall_ns};

/// Windows open at once: the one filling and those waiting out the lateness delay.
pub const OPEN_WINDOWS: usize = 8;
/// (kernel, device, stream) series one window tracks; launches of more are `untracked`.
pub const SERIES_PER_WINDOW: usize = 512;
/// Durations kept per series and window (2 KiB), enough for the KDE's size filters.
pub const SAMPLES_PER_SERIES: usize = 256;
/// NCCL kernel launches one window keeps; more are counted in `truncated_nccl`.
pub const NCCL_PER_WINDOW: usize = 1024;
/// (device, stream) pairs one window tracks busy time for.
pub const STREAMS_PER_WINDOW: usize = 64;
/// The CUDA door's default buffer-flush period (SF_CUPTI_FLUSH_MS), until the
/// configuration is read at the first round.
const DEFAULT_FLUSH_MS: u64 = 500;

/// How windows are cut and when they are written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowSettings {
    pub window_ns: u64,
    /// How long after a window's (or step's) end its activity may still arrive.
    pub lateness_ns: u64,
    /// Wall-clock minus monotonic time, so window ids line up across ranks.
    pub wall_offset_ns: u64,
}

impl WindowSettings {
    pub fn new(window_ms: u64, flush_ms: u64, wall_offset_ns: u64) -> WindowSettings {
        WindowSettings { window_ns: window_ms * 1_000_000, lateness_ns: 2 * flush_ms * 1_000_000, wall_offset_ns }
    }

    fn window_of(&self, mono_ns: u64) -> u64 {
        (mono_ns + self.wall_offset_ns) / self.window_ns
    }

    /// Monotonic time at which window `id` starts.
    fn start_of(&self, id: u64) -> u64 {
        (id * self.window_ns).saturating_sub(self.wall_offset_ns)
    }

    fn window_ms(&self) -> u16 {
        (self.window_ns / 1_000_000).min(u16::MAX as u64) as u16
    }
}

struct Series {
    name: u32,
    device: u32,
    stream: u32,
    samples: Reservoir,
    /// Sum of durations: the series' weight when a window must leave some out.
    total_ns: u64,
}

#[derive(Clone, Copy)]
struct Busy {
    device: u32,
    stream: u32,
    busy_ns: u64,
    /// End of the union so far; kernels of one stream arrive in start order.
    covered_to: u64,
    kernels: u32,
}

#[derive(Clone, Copy)]
struct NcclLaunch {
    device: u32,
    stream: u32,
    name: u32,
    start_offset: u32,
    duration: u32,
}

struct Window {
    id: u64,
    series: Vec<Series>,
    index: HashMap<(u32, u32, u32), usize>,
    busy: Vec<Busy>,
    nccl: Vec<NcclLaunch>,
    truncated_nccl: u32,
    untracked: u32,
}

impl Window {
    fn new(id: u64) -> Window {
        Window {
            id,
            series: Vec::new(),
            index: HashMap::new(),
            busy: Vec::new(),
            nccl: Vec::new(),
            truncated_nccl: 0,
            untracked: 0,
        }
    }
}

pub struct KernelWindows {
    names: KernelNames,
    /// Names interned since the last round, written as `kernel_name` records by `round`
    /// (`feed` runs inside the CUDA door's drain, which holds the writer).
    new_names: Vec<u32>,
    settings: WindowSettings,
    /// Whether anything was fed yet: the window length may change only before.
    started: bool,
    open: Vec<Window>,
    /// Windows closed early for room, written at the next round.
    evicted: Vec<Window>,
    /// Highest window id written: activity for it or earlier is late.
    written_through: Option<u64>,
    late: u32,
    stages: StageDeviceTimes,
    kde: KdeParams,
    /// Whether the CUDA door records kernels now. A step that closed while it did not
    /// (no CUDA injection, no CUPTI, another CUPTI client, CUDA not initialised yet) is no
    /// device evidence: writing it as zero device time would read as a host-bound forward.
    kernels_recorded: fn() -> bool,
}

fn door_records_kernels() -> bool {
    cupti::state() == Some(CuptiState::Enabled)
}

impl Default for KernelWindows {
    fn default() -> KernelWindows {
        KernelWindows::new(WindowSettings::new(1000, DEFAULT_FLUSH_MS, wall_ns().saturating_sub(monotonic_ns())))
    }
}

impl KernelWindows {
    /// Records one window may write: 32 slots of 128 bytes, 4 KiB.
    pub const MAX_RECORDS: usize = 32;

    pub fn new(settings: WindowSettings) -> KernelWindows {
        KernelWindows {
            names: KernelNames::default(),
            new_names: Vec::new(),
            settings,
            started: false,
            open: Vec::with_capacity(OPEN_WINDOWS),
            evicted: Vec::new(),
            written_through: None,
            late: 0,
            stages: StageDeviceTimes::default(),
            kde: KdeParams::default(),
            kernels_recorded: door_records_kernels,
        }
    }

    /// A kernel launch seen by the CUDA door's launch callback: its kernel's device time
    /// goes to the stage that launched it.
    pub fn launched(&mut self, correlation: u32, t_ns: u64) {
        self.stages.launched(correlation, t_ns);
    }

    /// Takes one activity record; `name` is the kernel's name, valid only during the call.
    pub fn feed(&mut self, activity: &Activity, name: Option<&[u8]>) {
        self.started = true;
        match activity.kind {
            ActivityKind::Runtime { .. } => self.stages.launched(activity.correlation, activity.start_ns),
            ActivityKind::Memcpy { .. } | ActivityKind::Synchronization { .. } => {}
            ActivityKind::Kernel => {
                let id = match name {
                    Some(name) => {
                        let (id, new) = self.names.intern(name);
                        if new {
                            self.new_names.push(id);
                        }
                        id
                    }
                    None => activity.name_id,
                };
                // A stage's device time is its own work: an NCCL kernel spins while its
                // peers are late, and the waits are read from `device_coll` instead.
                let nccl = self.names.is_nccl(id);
                if !nccl {
                    self.stages.kernel(activity);
                }
                self.kernel(activity, id, nccl);
            }
        }
    }

    /// Interns a kernel name seen elsewhere (a launch still unfinished); the caller writes
    /// its `kernel_name` record when new, so it is not queued here.
    pub fn intern_name(&mut self, name: &[u8]) -> (u32, bool) {
        self.names.intern(name)
    }

    fn kernel(&mut self, a: &Activity, name: u32, nccl: bool) {
        let first = self.settings.window_of(a.start_ns);
        if self.written_through.is_some_and(|w| first <= w) {
            self.late = self.late.saturating_add(1);
            return;
        }
        let Some(w) = self.window(first) else {
            self.late = self.late.saturating_add(1);
            return;
        };
        let duration = a.duration_ns();
        let key = (name, a.device, a.stream);
        let series_count = self.open[w].series.len();
        let window = &mut self.open[w];
        match window.index.get(&key).copied() {
            Some(i) => {
                window.series[i].samples.push(duration as f64);
                window.series[i].total_ns += duration;
            }
            None if series_count < SERIES_PER_WINDOW => {
                let mut seed = Fnv1a::default();
                for v in [name as u64, a.device as u64, a.stream as u64, first] {
                    seed.write(&v.to_le_bytes());
                }
                let mut samples = Reservoir::new(SAMPLES_PER_SERIES, seed.finish());
                samples.push(duration as f64);
                window.series.push(Series { name, device: a.device, stream: a.stream, samples, total_ns: duration });
                window.index.insert(key, series_count);
            }
            None => window.untracked = window.untracked.saturating_add(1),
        }
        if nccl {
            let start = self.settings.start_of(first);
            let window = &mut self.open[w];
            if window.nccl.len() < NCCL_PER_WINDOW {
                window.nccl.push(NcclLaunch {
                    device: a.device,
                    stream: a.stream,
                    name,
                    start_offset: a.start_ns.saturating_sub(start).min(u32::MAX as u64) as u32,
                    duration: duration.min(u32::MAX as u64) as u32,
                });
            } else {
                window.truncated_nccl = window.truncated_nccl.saturating_add(1);
            }
        }
        // Busy time: the kernel's interval clipped to each window it overlaps.
        let last = self.settings.window_of(a.end_ns.max(a.start_ns).saturating_sub(1)).min(first + 3);
        for id in first..=last {
            let Some(w) = self.window(id) else { break };
            let (from, to) = (self.settings.start_of(id), self.settings.start_of(id + 1));
            let (s, e) = (a.start_ns.max(from), a.end_ns.min(to));
            add_busy(&mut self.open[w], a.device, a.stream, s, e, id == first);
        }
    }

    /// The open window `id`, opened if need be. With every slot taken, the oldest window
    /// is closed early (written next round) to make room for a newer one; `None` when
    /// `id` is older than every open window then.
    fn window(&mut self, id: u64) -> Option<usize> {
        if let Some(i) = self.open.iter().position(|w| w.id == id) {
            return Some(i);
        }
        if self.open.len() == OPEN_WINDOWS {
            let (oldest, _) = self.open.iter().enumerate().min_by_key(|(_, w)| w.id)?;
            if self.open[oldest].id > id {
                return None;
            }
            let evicted = self.open.swap_remove(oldest);
            self.written_through = Some(evicted.id);
            if self.evicted.len() < OPEN_WINDOWS {
                self.evicted.push(evicted);
            } else {
                // Activity spread over more windows than one round can hold (a clock jump):
                // memory stays bounded and the launches are counted as late, not kept.
                let launches: u64 = evicted.series.iter().map(|s| s.samples.seen()).sum();
                self.late = self.late.saturating_add(launches.min(u32::MAX as u64) as u32);
            }
        }
        self.open.push(Window::new(id));
        Some(self.open.len() - 1)
    }

    /// A step closed on the host: its stage windows, for device-time attribution, when the
    /// CUDA door records kernels. (With 64 steps already waiting, the oldest is written
    /// through `emit` now.)
    pub fn step_closed(&mut self, windows: StepWindows, emit: &mut dyn FnMut(&RecordBody)) {
        if !(self.kernels_recorded)() {
            return;
        }
        self.stages.step_closed(windows, emit);
    }

    /// Writes what is due: new names, then the windows and steps safely in the past.
    /// `window_ms` and the CUDA door's settings are read at the first round.
    pub fn round(&mut self, rt: &Runtime, window_ms: u64, cupti: &CuptiConfig, writer: &mut LogWriter) {
        if !self.started {
            self.settings = WindowSettings::new(
                window_ms,
                cupti.flush_ms,
                rt.calibration.base_wall_ns.saturating_sub(rt.calibration.base_mono_ns),
            );
        }
        self.write_due(monotonic_ns(), &mut |r| writer.append(r));
    }

    /// Writes everything still held (at exit): every open window and waiting step.
    pub fn finish(&mut self, writer: &mut LogWriter) {
        self.write_due(u64::MAX, &mut |r| writer.append(r));
        self.stages.finish(&mut |r| writer.append(r));
    }

    /// `round`'s work at monotonic time `now_ns`.
    pub fn write_due(&mut self, now_ns: u64, emit: &mut dyn FnMut(&RecordBody)) {
        for id in self.new_names.drain(..) {
            if let Some(name) = self.names.get(id) {
                emit(&RecordBody::KernelName(KernelName::new(id, name.as_bytes())));
            }
        }
        let settings = self.settings;
        for window in std::mem::take(&mut self.evicted) {
            write_window(&window, &settings, std::mem::take(&mut self.late), &self.kde, emit);
        }
        self.open.sort_by_key(|w| w.id);
        while let Some(w) = self.open.first() {
            if settings.start_of(w.id + 1).saturating_add(settings.lateness_ns) > now_ns {
                break;
            }
            let window = self.open.remove(0);
            self.written_through = Some(window.id);
            let late = std::mem::take(&mut self.late);
            write_window(&window, &settings, late, &self.kde, emit);
        }
        // A step's kernels may run up to about a step behind its host side.
        let lateness = |s: &StepWindows| settings.lateness_ns + s.end_ns.saturating_sub(s.begin_ns).min(10_000_000_000);
        self.stages.due(now_ns, lateness, emit);
    }
}

fn add_busy(window: &mut Window, device: u32, stream: u32, s: u64, e: u64, count: bool) {
    let i = match window.busy.iter().position(|b| b.device == device && b.stream == stream) {
        Some(i) => i,
        None if window.busy.len() < STREAMS_PER_WINDOW => {
            window.busy.push(Busy { device, stream, busy_ns: 0, covered_to: 0, kernels: 0 });
            window.busy.len() - 1
        }
        None => return,
    };
    let b = &mut window.busy[i];
    let from = s.max(b.covered_to);
    if e > from {
        b.busy_ns += e - from;
        b.covered_to = e;
    }
    b.kernels += count as u32;
}

/// One series' clusters, ready to write.
struct Summary<'a> {
    series: &'a Series,
    clusters: Vec<Cluster>,
}

/// Writes one window within `MAX_RECORDS`: busy records first (they carry the window's
/// loss counters), then NCCL kernels (at least a quarter of what is left, if they need
/// it), then clusters by series, the most GPU time first; whole series only.
fn write_window(
    window: &Window,
    settings: &WindowSettings,
    late: u32,
    kde: &KdeParams,
    emit: &mut dyn FnMut(&RecordBody),
) {
    let window_ms = settings.window_ms();
    let mut busy = window.busy.clone();
    busy.sort_by_key(|b| (b.device, b.stream));
    let busy_records = busy.len().div_ceil(StreamBusy::ENTRIES).max(1);
    let budget = KernelWindows::MAX_RECORDS - busy_records;

    let mut summaries: Vec<Summary> = window
        .series
        .iter()
        .map(|series| {
            let mut clusters = series.samples.summarize(kde);
            clusters.truncate(ClusterEntry::MAX_INDEX as usize + 1);
            Summary { series, clusters }
        })
        .collect();
    summaries.sort_by(|a, b| b.series.total_ns.cmp(&a.series.total_ns).then(a.series.name.cmp(&b.series.name)));
    let cluster_records = |chosen: &[&Summary]| -> usize {
        let mut per_stream: Vec<((u32, u32), usize)> = Vec::new();
        for s in chosen {
            let key = (s.series.device, s.series.stream);
            match per_stream.iter_mut().find(|p| p.0 == key) {
                Some(p) => p.1 += s.clusters.len(),
                None => per_stream.push((key, s.clusters.len())),
            }
        }
        per_stream.iter().map(|p| p.1.div_ceil(KernelCluster::ENTRIES)).sum()
    };
    let all: Vec<&Summary> = summaries.iter().collect();
    let clusters_wanted = cluster_records(&all);

    let mut nccl = window.nccl.clone();
    nccl.sort_by_key(|n| (n.device, n.stream, n.name, n.start_offset));
    let groups: Vec<&[NcclLaunch]> =
        nccl.chunk_by(|a, b| (a.device, a.stream, a.name) == (b.device, b.stream, b.name)).collect();
    let nccl_wanted: usize = groups.iter().map(|g| g.len().div_ceil(NcclKernels::PAIRS)).sum();
    let nccl_budget = nccl_wanted.min((budget / 4).max(budget.saturating_sub(clusters_wanted)));

    let mut chosen: Vec<&Summary> = Vec::new();
    let mut truncated_clusters = 0u32;
    for s in &summaries {
        chosen.push(s);
        if cluster_records(&chosen) > budget - nccl_budget {
            chosen.pop();
            truncated_clusters += s.clusters.len() as u32;
        }
    }
    let mut nccl_records: Vec<NcclKernels> = Vec::new();
    let mut truncated_nccl = window.truncated_nccl;
    for group in &groups {
        for chunk in group.chunks(NcclKernels::PAIRS) {
            if nccl_records.len() == nccl_budget {
                truncated_nccl += chunk.len() as u32;
                continue;
            }
            let mut record = NcclKernels {
                window: window.id,
                window_ms,
                device: device_u8(chunk[0].device),
                stream: chunk[0].stream,
                name_id: name_u16(chunk[0].name),
                count: chunk.len() as u8,
                pairs: [(0, 0); NcclKernels::PAIRS],
            };
            for (p, n) in record.pairs.iter_mut().zip(chunk.iter()) {
                *p = (n.start_offset, n.duration);
            }
            nccl_records.push(record);
        }
    }

    for (part, chunk) in busy.chunks(StreamBusy::ENTRIES).enumerate() {
        let mut record = StreamBusy {
            window: window.id,
            window_ms,
            part: part as u8,
            count: chunk.len() as u8,
            late,
            truncated_clusters,
            truncated_nccl,
            untracked: window.untracked,
            entries: [BusyEntry::default(); StreamBusy::ENTRIES],
        };
        for (e, b) in record.entries.iter_mut().zip(chunk.iter()) {
            *e = BusyEntry {
                device: device_u8(b.device),
                stream: b.stream,
                busy_ns: b.busy_ns.min(u32::MAX as u64) as u32,
                kernels: b.kernels,
            };
        }
        emit(&RecordBody::StreamBusy(record));
    }

    chosen.sort_by_key(|s| (s.series.device, s.series.stream, s.series.name));
    for stream in chosen.chunk_by(|a, b| (a.series.device, a.series.stream) == (b.series.device, b.series.stream)) {
        let entries = stream.iter().flat_map(|s| {
            s.clusters.iter().enumerate().map(|(i, c)| ClusterEntry {
                name_id: name_u16(s.series.name),
                index: i as u8,
                launches: c.count.min(ClusterEntry::MAX_LAUNCHES as u64) as u32,
                p50_code: duration_code(c.p50),
                p99_code: duration_code(c.p99),
            })
        });
        let entries: Vec<ClusterEntry> = entries.collect();
        for chunk in entries.chunks(KernelCluster::ENTRIES) {
            let mut record = KernelCluster {
                window: window.id,
                window_ms,
                device: device_u8(stream[0].series.device),
                stream: stream[0].series.stream,
                count: chunk.len() as u8,
                entries: [ClusterEntry::default(); KernelCluster::ENTRIES],
            };
            record.entries[..chunk.len()].copy_from_slice(chunk);
            emit(&RecordBody::KernelCluster(record));
        }
    }
    for record in &nccl_records {
        emit(&RecordBody::NcclKernels(*record));
    }
}

fn device_u8(device: u32) -> u8 {
    device.min(u8::MAX as u32) as u8
}

fn name_u16(name: u32) -> u16 {
    name.min(NAME_ID_OVERFLOW as u32) as u16
}

#[cfg(test)]
#[path = "kernel_windows_tests.rs"]
mod tests;
