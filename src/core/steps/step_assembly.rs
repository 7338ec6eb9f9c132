//! Turns the stream of step and stage markers into one stage vector per completed step,
//! under the ordered-stage contract (StageFrontier App. A):
//! - stages do not nest: an ordered stage opened inside another is rejected and counted;
//! - a stage that recurs within a step is gradient accumulation: its occurrences are
//!   expanded by accumulation index, `name@0`, `name@1`, ...;
//! - prefetch-aware alignment: stages recorded between two steps (a `data.next_wait`
//!   around `next(loader)` before the step body opens) are charged to the step that opens
//!   next, the one consuming the batch, and that step's wall time starts with them;
//! - the residual `step.other_cpu_wall = max(0, wall - sum of stages)` closes every vector;
//! - the vector's schema hash names its ordered stage list, so readers can tell schemas
//!   apart without comparing names.
//!
//! Runs on the collector thread; its state has a fixed size.

use crate::core::kernels::stage_device::StepWindows;
use crate::core::live::event::{Marker, MarkerKind};
use crate::core::log::records::{RecordBody, SideValue, StepVector, STAGES_PER_PART};
use crate::core::log::stage_names::StageNames;
use crate::core::record::clock::Calibration;

/// Stage occurrences one step may hold; more are folded into the residual.
const MAX_STAGES: usize = 32;

pub const RESIDUAL_STAGE: &str = "step.other_cpu_wall";

#[derive(Clone, Copy)]
struct Stages {
    /// (stage id, duration ns) in the order the stages closed.
    list: [(u16, u64); MAX_STAGES],
    /// When each listed stage ended (monotonic ns), for device-time attribution.
    ends_ns: [u64; MAX_STAGES],
    len: usize,
    open: Option<(u16, u64)>,
    /// When the first of these stages began.
    first_ticks: Option<u64>,
    /// Depth of rejected stages opened inside the open one.
    nested_depth: u32,
    nested_rejected: u16,
}

impl Stages {
    const EMPTY: Stages = Stages {
        list: [(0, 0); MAX_STAGES],
        ends_ns: [0; MAX_STAGES],
        len: 0,
        open: None,
        first_ticks: None,
        nested_depth: 0,
        nested_rejected: 0,
    };

    fn begin(&mut self, name: u16, ticks: u64) {
        self.first_ticks.get_or_insert(ticks);
        if self.open.is_some() {
            self.nested_depth += 1;
            self.nested_rejected = self.nested_rejected.saturating_add(1);
        } else {
            self.open = Some((name, ticks));
        }
    }

    fn end(&mut self, name: u16, ticks: u64, cal: &Calibration) {
        if self.nested_depth > 0 {
            self.nested_depth -= 1;
            return;
        }
        let Some((_, begin)) = self.open.take().filter(|(open, _)| *open == name) else { return };
        if self.len < MAX_STAGES {
            self.list[self.len] = (name, cal.to_mono_ns(ticks).saturating_sub(cal.to_mono_ns(begin)));
            self.ends_ns[self.len] = cal.to_mono_ns(ticks);
            self.len += 1;
        }
    }
}

struct OpenStep {
    step: u64,
    begin_ticks: u64,
    stages: Stages,
}

pub struct StepAssembly {
    open: Option<OpenStep>,
    /// Stages closed since the last step ended, for the next step.
    between: Stages,
    /// Host-side stage windows of the step that closed last, until taken.
    closed: Option<StepWindows>,
}

impl Default for StepAssembly {
    fn default() -> StepAssembly {
        StepAssembly { open: None, between: Stages::EMPTY, closed: None }
    }
}

impl StepAssembly {
    /// Feeds one marker; calls `emit` with each record it completes. Stage names resolve
    /// and intern (`name@k`, the residual) through `names`.
    pub fn feed(&mut self, marker: &Marker, cal: &Calibration, names: StageNames, mut emit: impl FnMut(RecordBody)) {
        match marker.kind {
            MarkerKind::StepBegin => {
                // A step still open ends where this one begins: a program that only marks
                // where steps begin, or a second source of steps taking over, loses none.
                if let Some(step) = self.open.take() {
                    self.closed = Some(close(&step, marker.ticks, cal, names, &mut emit));
                }
                // Stages recorded before this step opened belong to it (prefetch alignment),
                // and so does their time: the step begins where the first of them began.
                let carried = std::mem::replace(&mut self.between, Stages::EMPTY);
                let begin_ticks =
                    carried.first_ticks.filter(|_| carried.len > 0).unwrap_or(marker.ticks).min(marker.ticks);
                self.open = Some(OpenStep {
                    step: marker.step,
                    begin_ticks,
                    stages: Stages { open: None, nested_depth: 0, ..carried },
                });
            }
            MarkerKind::StageBegin => self.stages().begin(marker.name, marker.ticks),
            MarkerKind::StageEnd => self.stages().end(marker.name, marker.ticks, cal),
            MarkerKind::StepEnd => {
                if let Some(step) = self.open.take() {
                    self.closed = Some(close(&step, marker.ticks, cal, names, &mut emit));
                }
            }
            MarkerKind::Value => {
                emit(RecordBody::SideValue(SideValue { step: marker.step, name_id: marker.name, value: marker.value }))
            }
        }
    }

    /// The stage windows of the step that closed last, once.
    pub fn take_closed(&mut self) -> Option<StepWindows> {
        self.closed.take()
    }

    fn stages(&mut self) -> &mut Stages {
        match &mut self.open {
            Some(step) => &mut step.stages,
            None => &mut self.between,
        }
    }
}

/// Emits the vector of a step that ended at `end_ticks`; returns its stage windows.
fn close(
    step: &OpenStep,
    end_ticks: u64,
    cal: &Calibration,
    names: StageNames,
    emit: &mut impl FnMut(RecordBody),
) -> StepWindows {
    let wall = cal.to_mono_ns(end_ticks).saturating_sub(cal.to_mono_ns(step.begin_ticks));
    let recorded = &step.stages.list[..step.stages.len];
    let sum: u64 = recorded.iter().map(|(_, d)| d).sum();
    let mut stages = [(0u16, 0u64); MAX_STAGES + 1];
    let mut len = 0;
    for (i, &(id, duration)) in recorded.iter().enumerate() {
        let occurrences = recorded.iter().filter(|(other, _)| *other == id).count();
        let index = recorded[..i].iter().filter(|(other, _)| *other == id).count();
        let id = if occurrences > 1 { accumulation_name(names, id, index).unwrap_or(id) } else { id };
        stages[len] = (id, duration);
        len += 1;
    }
    if let Some(residual) = names.intern(RESIDUAL_STAGE.as_bytes()) {
        stages[len] = (residual, wall.saturating_sub(sum));
        len += 1;
    }
    let stages = &stages[..len];
    let (begin_ns, end_ns) = (cal.to_mono_ns(step.begin_ticks), cal.to_mono_ns(end_ticks));
    let mut windows = StepWindows::new(step.step, begin_ns, end_ns);
    for (i, &(id, duration)) in stages.iter().enumerate().take(recorded.len()) {
        windows.push(id, step.stages.ends_ns[i].saturating_sub(duration), step.stages.ends_ns[i]);
    }
    if len > recorded.len() {
        windows.set_residual(stages[len - 1].0);
    }
    let schema_hash = schema_hash(names, stages);
    for (part, chunk) in stages.chunks(STAGES_PER_PART).enumerate() {
        let mut vector = StepVector {
            step: step.step,
            t_begin_ns: cal.to_mono_ns(step.begin_ticks),
            wall_ns: wall,
            overlap_ns: sum.saturating_sub(wall),
            schema_hash,
            part: part as u8,
            stages_total: stages.len() as u8,
            nested_rejected: step.stages.nested_rejected,
            count: chunk.len() as u8,
            stage_ids: [0; STAGES_PER_PART],
            durations_ns: [0; STAGES_PER_PART],
        };
        for (i, (id, duration)) in chunk.iter().enumerate() {
            vector.stage_ids[i] = *id;
            vector.durations_ns[i] = *duration;
        }
        emit(RecordBody::StepVector(vector));
    }
    windows
}

/// `name@index`, the `index`-th occurrence of stage `id` within one step.
fn accumulation_name(names: StageNames, id: u16, index: usize) -> Option<u16> {
    let (name, len) = names.name(id)?;
    let mut expanded = [0u8; 64];
    let suffix = format!("@{index}");
    let base = len.min(expanded.len() - suffix.len());
    expanded[..base].copy_from_slice(&name[..base]);
    expanded[base..base + suffix.len()].copy_from_slice(suffix.as_bytes());
    names.intern(&expanded[..base + suffix.len()])
}

/// FNV-1a over the ordered stage names, NUL-separated.
fn schema_hash(names: StageNames, stages: &[(u16, u64)]) -> u64 {
    let mut hash = crate::core::fnv::Fnv1a::default();
    for &(id, _) in stages {
        let (name, len) = names.name(id).unwrap_or(([0; 40], 0));
        hash.write(&name[..len]);
        hash.write(&[0]);
    }
    hash.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::log::format;
    use crate::core::log::mapping::SharedMap;
    use crate::core::record::clock::ClockSource;

    fn names() -> StageNames {
        let path =
            std::env::temp_dir().join(format!("sf-assembly-{}-{:?}", std::process::id(), std::thread::current().id()));
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        let map = SharedMap::create(&file, format::HEADER_SIZE, 0, &path).unwrap();
        let _ = std::fs::remove_file(&path);
        StageNames::in_map(map)
    }

    use MarkerKind::*;

    struct Run {
        names: StageNames,
        ids: Vec<u16>,
    }

    impl Run {
        fn new(stages: &[&str]) -> Run {
            let names = names();
            let ids = stages.iter().map(|s| names.intern(s.as_bytes()).unwrap()).collect();
            Run { names, ids }
        }

        fn marker(&self, kind: MarkerKind, ms: u64, stage: usize) -> Marker {
            Marker { kind, ticks: ms * 1_000_000, step: 7, name: self.ids.get(stage).copied().unwrap_or(0), value: 0.5 }
        }

        fn feed(&self, markers: &[(MarkerKind, u64, usize)]) -> Vec<RecordBody> {
            let cal = Calibration::new(ClockSource::Monotonic, 0, 0, 0, 1e9);
            let mut assembly = StepAssembly::default();
            let mut out = Vec::new();
            for &(kind, ms, stage) in markers {
                assembly.feed(&self.marker(kind, ms, stage), &cal, self.names, |r| out.push(r));
            }
            out
        }

        /// (stage name, ms) of every vector emitted, parts concatenated.
        fn named(&self, records: &[RecordBody]) -> Vec<(String, u64)> {
            records
                .iter()
                .filter_map(|r| match r {
                    RecordBody::StepVector(v) => Some(v.stages().collect::<Vec<_>>()),
                    _ => None,
                })
                .flatten()
                .map(|(id, ns)| {
                    let (name, len) = self.names.name(id).unwrap();
                    (String::from_utf8_lossy(&name[..len]).into_owned(), ns / 1_000_000)
                })
                .collect()
        }
    }

    fn owned(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
        pairs.iter().map(|(n, ms)| (n.to_string(), *ms)).collect()
    }

    #[test]
    fn ordered_stages_and_the_residual() {
        let run = Run::new(&["data", "fwd"]);
        let out = run.feed(&[
            (StepBegin, 0, 0),
            (StageBegin, 1, 0),
            (StageEnd, 21, 0),
            (StageBegin, 21, 1),
            (StageEnd, 51, 1),
            (StepEnd, 60, 0),
        ]);
        assert_eq!(run.named(&out), owned(&[("data", 20), ("fwd", 30), (RESIDUAL_STAGE, 10)]));
        let RecordBody::StepVector(v) = out[0] else { panic!() };
        assert_eq!((v.step, v.wall_ns, v.overlap_ns, v.nested_rejected), (7, 60_000_000, 0, 0));
    }

    #[test]
    fn nested_stages_are_rejected_and_counted() {
        let run = Run::new(&["a", "inner"]);
        let out = run.feed(&[
            (StepBegin, 0, 0),
            (StageBegin, 0, 0),
            (StageBegin, 2, 1),
            (StageEnd, 4, 1),
            (StageEnd, 10, 0),
            (StepEnd, 20, 0),
        ]);
        assert_eq!(run.named(&out), owned(&[("a", 10), (RESIDUAL_STAGE, 10)]));
        let RecordBody::StepVector(v) = out[0] else { panic!() };
        assert_eq!(v.nested_rejected, 1);
    }

    #[test]
    fn accumulation_expands_by_index() {
        let run = Run::new(&["fwd", "bwd", "optim"]);
        let out = run.feed(&[
            (StepBegin, 0, 0),
            (StageBegin, 0, 0),
            (StageEnd, 3, 0),
            (StageBegin, 3, 1),
            (StageEnd, 8, 1),
            (StageBegin, 8, 0),
            (StageEnd, 12, 0),
            (StageBegin, 12, 1),
            (StageEnd, 18, 1),
            (StageBegin, 18, 2),
            (StageEnd, 20, 2),
            (StepEnd, 20, 0),
        ]);
        assert_eq!(
            run.named(&out),
            owned(&[("fwd@0", 3), ("bwd@0", 5), ("fwd@1", 4), ("bwd@1", 6), ("optim", 2), (RESIDUAL_STAGE, 0)])
        );
    }

    #[test]
    fn a_data_wait_before_the_step_opens_is_charged_to_that_step() {
        let run = Run::new(&["data.next_wait", "fwd"]);
        let out = run.feed(&[
            (StageBegin, 0, 0),
            (StageEnd, 15, 0),
            (StepBegin, 15, 0),
            (StageBegin, 15, 1),
            (StageEnd, 25, 1),
            (StepEnd, 25, 0),
        ]);
        assert_eq!(run.named(&out), owned(&[("data.next_wait", 15), ("fwd", 10), (RESIDUAL_STAGE, 0)]));
        let RecordBody::StepVector(v) = out[0] else { panic!() };
        assert_eq!((v.wall_ns, v.overlap_ns), (25_000_000, 0), "the step's wall begins with the carried wait");
    }

    #[test]
    fn a_step_begun_while_one_is_open_closes_that_one_first() {
        let run = Run::new(&["fwd", "bwd"]);
        let out = run.feed(&[
            (StepBegin, 0, 0),
            (StageBegin, 0, 0),
            (StageEnd, 4, 0),
            (StepBegin, 10, 0),
            (StageBegin, 10, 1),
            (StageEnd, 13, 1),
            (StepEnd, 15, 0),
        ]);
        assert_eq!(
            run.named(&out),
            owned(&[("fwd", 4), (RESIDUAL_STAGE, 6), ("bwd", 3), (RESIDUAL_STAGE, 2)]),
            "both steps, the first ending where the second begins"
        );
        let walls: Vec<u64> = out
            .iter()
            .filter_map(|r| match r {
                RecordBody::StepVector(v) => Some(v.wall_ns / 1_000_000),
                _ => None,
            })
            .collect();
        assert_eq!(walls, [10, 5]);
    }

    #[test]
    fn closed_steps_hand_over_their_stage_windows() {
        let run = Run::new(&["data.next_wait", "fwd"]);
        let cal = Calibration::new(ClockSource::Monotonic, 0, 0, 0, 1e9);
        let mut assembly = StepAssembly::default();
        for (kind, ms, stage) in [(StageBegin, 2, 0), (StageEnd, 15, 0), (StepBegin, 15, 0), (StageBegin, 16, 1)] {
            assembly.feed(&run.marker(kind, ms, stage), &cal, run.names, |_| {});
        }
        assert!(assembly.take_closed().is_none());
        for (kind, ms) in [(StageEnd, 25), (StepEnd, 30)] {
            assembly.feed(&run.marker(kind, ms, 1), &cal, run.names, |_| {});
        }
        let mut expected = StepWindows::new(7, 2_000_000, 30_000_000);
        expected.push(run.ids[0], 2_000_000, 15_000_000);
        expected.push(run.ids[1], 16_000_000, 25_000_000);
        expected.set_residual(run.names.intern(RESIDUAL_STAGE.as_bytes()).unwrap());
        assert_eq!(assembly.take_closed(), Some(expected));
        assert!(assembly.take_closed().is_none(), "once");
    }

    #[test]
    fn long_vectors_split_into_parts_values_stay_apart_and_schemas_hash_by_names() {
        let stages: Vec<String> = (0..8).map(|i| format!("s{i}")).collect();
        let run = Run::new(&stages.iter().map(String::as_str).collect::<Vec<_>>());
        let mut markers = vec![(StepBegin, 0, 0)];
        for i in 0..8 {
            markers.push((StageBegin, i as u64, i));
            markers.push((StageEnd, i as u64 + 1, i));
        }
        markers.push((Value, 8, 3));
        markers.push((StepEnd, 8, 0));
        let out = run.feed(&markers);
        let parts: Vec<_> = out
            .iter()
            .filter_map(|r| match r {
                RecordBody::StepVector(v) => Some((v.part, v.count, v.stages_total, v.schema_hash)),
                _ => None,
            })
            .collect();
        assert_eq!(parts.iter().map(|p| (p.0, p.1, p.2)).collect::<Vec<_>>(), [(0, 6, 9), (1, 3, 9)]);
        assert_eq!(parts[0].3, parts[1].3, "one schema for the step");
        assert!(out.contains(&RecordBody::SideValue(SideValue { step: 7, name_id: run.ids[3], value: 0.5 })));

        let reordered = run.feed(&[
            (StepBegin, 0, 0),
            (StageBegin, 0, 1),
            (StageEnd, 1, 1),
            (StageBegin, 1, 0),
            (StageEnd, 2, 0),
            (StepEnd, 2, 0),
        ]);
        let again = run.feed(&[
            (StepBegin, 0, 0),
            (StageBegin, 0, 1),
            (StageEnd, 1, 1),
            (StageBegin, 1, 0),
            (StageEnd, 3, 0),
            (StepEnd, 3, 0),
        ]);
        let hash = |records: &[RecordBody]| match records[0] {
            RecordBody::StepVector(v) => v.schema_hash,
            _ => 0,
        };
        assert_eq!(hash(&reordered), hash(&again), "same names in the same order");
        assert_ne!(hash(&reordered), parts[0].3);
    }
}
