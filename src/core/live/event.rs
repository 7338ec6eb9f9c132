//! What travels through the hot path's ring: finished records, and stage markers that the
//! collector assembles into step vectors, and the CUDA door's launches and synchronizations.

use crate::core::log::records::{RecordBody, SyncKind};
use crate::core::record::thread_state::NcclLink;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Event {
    Record(RecordBody),
    Marker(Marker),
    Device(DeviceEvent),
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

/// What the CUDA door's callbacks saw, in raw ticks: a kernel launch or the ENTER or EXIT
/// of a host synchronization. Plain data, one ring slot each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceEvent {
    Launch(Launch),
    Sync(SyncCall),
}

/// A kernel launch, at its API call's ENTER.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    pub ticks: u64,
    /// CUPTI's correlation id: the kernel's completion record carries the same.
    pub correlation: u32,
    /// The `cudaStream_t`/`CUstream` handle when the call's parameters say it, else 0.
    pub stream_handle: u64,
    /// The NCCL call the launching thread was inside (`NcclLink::NONE`: a compute kernel).
    pub nccl: NcclLink,
    /// The kernel's name, cut at `Launch::NAME_BYTES` (then `name_cut`).
    pub name_len: u8,
    pub name_cut: bool,
    pub name: [u8; Launch::NAME_BYTES],
    /// The stage its host was in (stage-name id + 1; 0 outside any stage): a stuck
    /// kernel is named in the stage that launched it, not one guessed from offsets.
    pub stage: u16,
}

impl Launch {
    /// Name bytes a launch carries: NCCL's kernel names (`ncclDevKernel_AllReduce_Sum_f32_RING_LL`)
    /// fit whole; the slot stays within the size of a record's.
    pub const NAME_BYTES: usize = 64;

    pub fn name(&self) -> &[u8] {
        &self.name[..self.name_len as usize]
    }
}

/// The ENTER (`exit` false) or EXIT of a host synchronization call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncCall {
    pub ticks: u64,
    pub correlation: u32,
    pub tid: u32,
    pub sync: SyncKind,
    pub exit: bool,
}

const _: () = assert!(std::mem::size_of::<DeviceEvent>() <= std::mem::size_of::<RecordBody>());
