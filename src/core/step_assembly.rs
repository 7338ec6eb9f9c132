//! Turns the stream of step and stage markers into one stage vector per completed step,
//! under the ordered-stage contract: stages do not nest (an ordered stage opened inside
//! another is rejected and counted), a stage that recurs within a step adds up, and the
//! residual `step.other_cpu_wall = max(0, wall - sum of stages)` closes every vector.
//! Runs on the collector thread; its state has a fixed size.

use super::clock::Calibration;
use super::event::{Marker, MarkerKind};
use super::log::records::{RecordBody, SideValue, StepVector, STAGES_PER_PART};

/// Stages one step may hold; more are folded into the residual.
const MAX_STAGES: usize = 32;

pub const RESIDUAL_STAGE: &str = "step.other_cpu_wall";

struct OpenStep {
    step: u64,
    begin_ticks: u64,
    stages: [(u16, u64); MAX_STAGES],
    stage_count: usize,
    open_stage: Option<(u16, u64)>,
    /// Depth of rejected stages opened inside the open one.
    nested_depth: u32,
    nested_rejected: u16,
}

#[derive(Default)]
pub struct StepAssembly {
    open: Option<OpenStep>,
}

impl StepAssembly {
    /// Feeds one marker; calls `emit` with each record it completes. `residual` is the
    /// stage-name id of `step.other_cpu_wall`.
    pub fn feed(
        &mut self,
        marker: &Marker,
        cal: &Calibration,
        residual: Option<u16>,
        mut emit: impl FnMut(RecordBody),
    ) {
        let ns = |ticks: u64| cal.to_mono_ns(ticks);
        match marker.kind {
            MarkerKind::StepBegin => {
                self.open = Some(OpenStep {
                    step: marker.step,
                    begin_ticks: marker.ticks,
                    stages: [(0, 0); MAX_STAGES],
                    stage_count: 0,
                    open_stage: None,
                    nested_depth: 0,
                    nested_rejected: 0,
                });
            }
            MarkerKind::StageBegin => {
                let Some(step) = &mut self.open else { return };
                if step.open_stage.is_some() {
                    step.nested_depth += 1;
                    step.nested_rejected = step.nested_rejected.saturating_add(1);
                } else {
                    step.open_stage = Some((marker.name, marker.ticks));
                }
            }
            MarkerKind::StageEnd => {
                let Some(step) = &mut self.open else { return };
                if step.nested_depth > 0 {
                    step.nested_depth -= 1;
                    return;
                }
                let Some((name, begin)) = step.open_stage.take().filter(|(name, _)| *name == marker.name) else {
                    return;
                };
                let duration = ns(marker.ticks).saturating_sub(ns(begin));
                match step.stages[..step.stage_count].iter_mut().find(|(id, _)| *id == name) {
                    Some((_, total)) => *total += duration,
                    None if step.stage_count < MAX_STAGES => {
                        step.stages[step.stage_count] = (name, duration);
                        step.stage_count += 1;
                    }
                    None => {}
                }
            }
            MarkerKind::StepEnd => {
                let Some(mut step) = self.open.take() else { return };
                let wall = ns(marker.ticks).saturating_sub(ns(step.begin_ticks));
                let sum: u64 = step.stages[..step.stage_count].iter().map(|(_, d)| d).sum();
                if let Some(residual) = residual.filter(|_| step.stage_count < MAX_STAGES) {
                    step.stages[step.stage_count] = (residual, wall.saturating_sub(sum));
                    step.stage_count += 1;
                }
                let stages = &step.stages[..step.stage_count];
                for (part, chunk) in stages.chunks(STAGES_PER_PART).enumerate() {
                    let mut vector = StepVector {
                        step: step.step,
                        t_begin_ns: ns(step.begin_ticks),
                        wall_ns: wall,
                        overlap_ns: sum.saturating_sub(wall),
                        part: part as u8,
                        stages_total: stages.len() as u8,
                        nested_rejected: step.nested_rejected,
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
            }
            MarkerKind::Value => {
                emit(RecordBody::SideValue(SideValue { step: marker.step, name_id: marker.name, value: marker.value }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::clock::ClockSource;

    fn marker(kind: MarkerKind, ms: u64, name: u16) -> Marker {
        Marker { kind, ticks: ms * 1_000_000, step: 7, name, value: 0.5 }
    }

    fn run(markers: &[Marker]) -> Vec<RecordBody> {
        let cal = Calibration::new(ClockSource::Monotonic, 0, 0, 0, 1e9);
        let mut assembly = StepAssembly::default();
        let mut out = Vec::new();
        for m in markers {
            assembly.feed(m, &cal, Some(99), |r| out.push(r));
        }
        out
    }

    fn vector(records: &[RecordBody]) -> Vec<(u16, u64)> {
        records
            .iter()
            .filter_map(|r| match r {
                RecordBody::StepVector(v) => Some(v.stages().map(|(id, ns)| (id, ns / 1_000_000)).collect::<Vec<_>>()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    use MarkerKind::*;

    #[test]
    fn ordered_stages_and_the_residual() {
        let out = run(&[
            marker(StepBegin, 0, 0),
            marker(StageBegin, 1, 1),
            marker(StageEnd, 21, 1),
            marker(StageBegin, 21, 2),
            marker(StageEnd, 51, 2),
            marker(StepEnd, 60, 0),
        ]);
        assert_eq!(vector(&out), [(1, 20), (2, 30), (99, 10)]);
        let RecordBody::StepVector(v) = out[0] else { panic!() };
        assert_eq!((v.step, v.wall_ns, v.overlap_ns, v.nested_rejected), (7, 60_000_000, 0, 0));
    }

    #[test]
    fn nested_stages_are_rejected_and_counted_and_repeats_add_up() {
        let out = run(&[
            marker(StepBegin, 0, 0),
            marker(StageBegin, 0, 1),
            marker(StageBegin, 2, 5),
            marker(StageEnd, 4, 5),
            marker(StageEnd, 10, 1),
            marker(StageBegin, 10, 1),
            marker(StageEnd, 15, 1),
            marker(StepEnd, 20, 0),
        ]);
        assert_eq!(vector(&out), [(1, 15), (99, 5)]);
        let RecordBody::StepVector(v) = out[0] else { panic!() };
        assert_eq!(v.nested_rejected, 1);
    }

    #[test]
    fn long_vectors_split_into_parts_and_values_stay_apart() {
        let mut markers = vec![marker(StepBegin, 0, 0)];
        for i in 0..8u16 {
            markers.push(marker(StageBegin, i as u64, 10 + i));
            markers.push(marker(StageEnd, i as u64 + 1, 10 + i));
        }
        markers.push(marker(Value, 8, 3));
        markers.push(marker(StepEnd, 8, 0));
        let out = run(&markers);
        let parts: Vec<_> = out
            .iter()
            .filter_map(|r| match r {
                RecordBody::StepVector(v) => Some((v.part, v.count, v.stages_total)),
                _ => None,
            })
            .collect();
        assert_eq!(parts, [(0, 6, 9), (1, 3, 9)]);
        assert!(out.contains(&RecordBody::SideValue(SideValue { step: 7, name_id: 3, value: 0.5 })));
        assert_eq!(vector(&out).last(), Some(&(99, 0)), "stages covered the whole step");
    }

    #[test]
    fn stages_outside_a_step_are_ignored() {
        assert!(run(&[marker(StageBegin, 0, 1), marker(StageEnd, 1, 1), marker(StepEnd, 2, 0)]).is_empty());
    }
}
