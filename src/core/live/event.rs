//! What travels through the hot path's ring: finished records, and stage markers that the
//! collector assembles into step vectors.

use crate::core::log::records::RecordBody;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Event {
    Record(RecordBody),
    Marker(Marker),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerKind {
    StepBegin,
    StepEnd,
    StageBegin,
    StageEnd,
    Value,
}

/// One call of the step/stage API, in raw ticks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Marker {
    pub kind: MarkerKind,
    pub ticks: u64,
    /// The step a StepBegin opens (the others carry the current step).
    pub step: u64,
    /// Stage-name id (StageBegin, StageEnd, Value).
    pub name: u16,
    pub value: f64,
}
