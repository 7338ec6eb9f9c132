//! The step and stage API behind the C functions, NVTX ranges and the Python helper:
//! one clock read, one interned name lookup and one ring push per call; the current step
//! and stage, and when the rank last moved between them, also go to the log's live
//! header, where `sf hang` finds them on a wedged rank.

use std::sync::atomic::Ordering;

use crate::core::live::event::{Event, Marker, MarkerKind};
use crate::core::live::runtime::{self, Runtime};
use crate::core::log::format::live;
use crate::core::record::clock::now_ticks;

fn push(rt: &Runtime, kind: MarkerKind, step: u64, name: u16, value: f64) {
    let ticks = now_ticks();
    if kind != MarkerKind::Value {
        // A value is no progress: it may be logged from anywhere, a stuck loop included.
        rt.live(live::PROGRESS_TICKS).store(ticks, Ordering::Relaxed);
    }
    rt.ring.push(Event::Marker(Marker { kind, ticks, step, name, value }));
}

/// Opens logical step `step`, or the one after the last when `step` is negative.
pub fn step_begin(step: i64) {
    let Some(rt) = runtime::active() else { return };
    let current = rt.live(live::CURRENT_STEP);
    // The live field holds step + 1 so that 0 can mean "no step yet".
    let step = if step >= 0 { step as u64 } else { current.load(Ordering::Relaxed) };
    current.store(step + 1, Ordering::Relaxed);
    push(rt, MarkerKind::StepBegin, step, 0, 0.0);
}

pub fn step_end() {
    let Some(rt) = runtime::active() else { return };
    let step = rt.live(live::CURRENT_STEP).load(Ordering::Relaxed).saturating_sub(1);
    push(rt, MarkerKind::StepEnd, step, 0, 0.0);
}

pub fn stage_begin(name: &[u8]) {
    let Some(rt) = runtime::active() else { return };
    let Some(id) = named(rt, name) else { return };
    rt.live(live::CURRENT_STAGE).store(id as u64 + 1, Ordering::Relaxed);
    push(rt, MarkerKind::StageBegin, current_step(rt), id, 0.0);
    crate::core::comms::tracer::stage_boundary(rt, id, false);
}

pub fn stage_end(name: &[u8]) {
    let Some(rt) = runtime::active() else { return };
    let Some(id) = named(rt, name) else { return };
    // Injected stage delays act here, at the end of the selected stage, so they lengthen it.
    crate::core::comms::tracer::stage_boundary(rt, id, true);
    rt.live(live::CURRENT_STAGE).store(0, Ordering::Relaxed);
    push(rt, MarkerKind::StageEnd, current_step(rt), id, 0.0);
}

pub fn value(name: &[u8], value: f64) {
    let Some(rt) = runtime::active() else { return };
    let Some(id) = named(rt, name) else { return };
    push(rt, MarkerKind::Value, current_step(rt), id, value);
}

/// The name's id in the stage-name table; none, counted, when the table is full.
fn named(rt: &Runtime, name: &[u8]) -> Option<u16> {
    let id = rt.stage_names.intern(name);
    if id.is_none() {
        rt.live(live::MARKERS_UNNAMED).fetch_add(1, Ordering::Relaxed);
    }
    id
}

fn current_step(rt: &Runtime) -> u64 {
    rt.live(live::CURRENT_STEP).load(Ordering::Relaxed).saturating_sub(1)
}
