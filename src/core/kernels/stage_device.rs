//! Device time per stage of a step (`stage_device` records): which part of the GPU's work
//! each host-side stage window accounts for, and how much of it ran after the stage ended
//! on the host (the spill a host-side stage timer cannot see).
//!
//! A kernel belongs to the stage in which it was launched: the stage window holding the
//! start of the CUDA runtime call with the kernel's correlation id, when the CUDA door
//! records runtime calls; otherwise the stage window holding the kernel's own start (GPU
//! time), which charges a kernel queued in one stage and run in the next to the next.
//! Kernels of the step outside every explicit stage go to the residual stage. A stage's
//! device time is the union of its kernels' intervals over all the rank's streams; NCCL
//! kernels are not fed in (their time is mostly waiting for peers when any are late).
//!
//! Kernels arrive late (after the CUDA door's buffer flush), so the collector keeps the
//! last steps' windows and the last kernels in fixed rings and writes a step once its
//! activity has surely arrived. Fixed size: `STEP_RING` steps, `KERNEL_RING` kernels,
//! `CORRELATION_SLOTS` runtime calls.

use crate::core::kernels::kernel_activity::Activity;
use crate::core::log::records::{RecordBody, StageDevice};

/// Stage windows one step may carry: step assembly's 32 stages and the residual.
pub const MAX_STEP_STAGES: usize = 33;

/// Host-side windows of one closed step's stages, in the step vector's order, in
/// monotonic ns. The residual has no window of its own: it gets what no stage holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepWindows {
    pub step: u64,
    pub begin_ns: u64,
    pub end_ns: u64,
    stages: [(u16, u64, u64); MAX_STEP_STAGES],
    len: usize,
    residual: Option<u16>,
}

impl StepWindows {
    pub fn new(step: u64, begin_ns: u64, end_ns: u64) -> StepWindows {
        StepWindows { step, begin_ns, end_ns, stages: [(0, 0, 0); MAX_STEP_STAGES], len: 0, residual: None }
    }

    /// Adds the next explicit stage (stage id, host begin, host end); past capacity, ignored.
    pub fn push(&mut self, id: u16, begin_ns: u64, end_ns: u64) {
        if self.len < MAX_STEP_STAGES - 1 {
            self.stages[self.len] = (id, begin_ns, end_ns);
            self.len += 1;
        }
    }

    pub fn set_residual(&mut self, id: u16) {
        self.residual = Some(id);
    }

    /// Index of the stage a launch at `t_ns` belongs to: an explicit stage, else the
    /// residual (index `len`); `None` outside the step or with no residual.
    fn stage_of(&self, t_ns: u64) -> Option<usize> {
        if t_ns < self.begin_ns || t_ns >= self.end_ns {
            return None;
        }
        let explicit = self.stages[..self.len].iter().position(|&(_, b, e)| t_ns >= b && t_ns < e);
        explicit.or(self.residual.map(|_| self.len))
    }

    /// (stage id, host end) of stage `i`, the residual's host end being the step's end.
    fn stage(&self, i: usize) -> (u16, u64) {
        match self.stages[..self.len].get(i) {
            Some(&(id, _, end)) => (id, end),
            None => (self.residual.unwrap_or(0), self.end_ns),
        }
    }

    fn count(&self) -> usize {
        self.len + self.residual.is_some() as usize
    }
}

#[derive(Clone, Copy, Default)]
struct Launch {
    start_ns: u64,
    end_ns: u64,
    correlation: u32,
}

pub struct StageDeviceTimes {
    /// Closed steps not written yet, oldest first.
    steps: Vec<StepWindows>,
    /// The last `KERNEL_RING` kernels, overwritten in arrival order.
    kernels: Vec<Launch>,
    next_kernel: usize,
    /// Runtime-call start per correlation id, direct-mapped by id.
    correlations: Vec<(u32, u64)>,
    /// Reused per step: (stage index, start, end) of its kernels.
    scratch: Vec<(usize, u64, u64)>,
}

impl Default for StageDeviceTimes {
    fn default() -> StageDeviceTimes {
        StageDeviceTimes {
            steps: Vec::with_capacity(Self::STEP_RING),
            kernels: Vec::with_capacity(Self::KERNEL_RING),
            next_kernel: 0,
            correlations: vec![(0, 0); Self::CORRELATION_SLOTS],
            scratch: Vec::with_capacity(Self::KERNEL_RING),
        }
    }
}

impl StageDeviceTimes {
    /// Steps waiting for their kernels; a 64th forces the oldest out early.
    pub const STEP_RING: usize = 64;
    /// Kernels kept for attribution: 768 KiB, several steps of a thousand launches each
    /// through the lateness delay.
    pub const KERNEL_RING: usize = 32_768;
    pub const CORRELATION_SLOTS: usize = 16_384;

    pub fn kernel(&mut self, a: &Activity) {
        let launch = Launch { start_ns: a.start_ns, end_ns: a.end_ns.max(a.start_ns), correlation: a.correlation };
        if self.kernels.len() < Self::KERNEL_RING {
            self.kernels.push(launch);
        } else {
            self.kernels[self.next_kernel] = launch;
        }
        self.next_kernel = (self.next_kernel + 1) % Self::KERNEL_RING;
    }

    /// A launch with CUPTI correlation id `correlation` at host time `t_ns` (a runtime
    /// call's activity record, or the launch callback's ENTER).
    pub fn launched(&mut self, correlation: u32, t_ns: u64) {
        if correlation != 0 {
            self.correlations[correlation as usize % Self::CORRELATION_SLOTS] = (correlation, t_ns);
        }
    }

    pub fn step_closed(&mut self, windows: StepWindows, emit: &mut dyn FnMut(&RecordBody)) {
        if self.steps.len() == Self::STEP_RING {
            let oldest = self.steps.remove(0);
            self.write(&oldest, emit);
        }
        self.steps.push(windows);
    }

    /// Writes every step whose host end is at least `lateness(step)` before `now_ns`.
    pub fn due(&mut self, now_ns: u64, lateness: impl Fn(&StepWindows) -> u64, emit: &mut dyn FnMut(&RecordBody)) {
        while let Some(step) = self.steps.first().copied() {
            if step.end_ns.saturating_add(lateness(&step)) > now_ns {
                break;
            }
            self.steps.remove(0);
            self.write(&step, emit);
        }
    }

    /// Writes every step still waiting (at exit).
    pub fn finish(&mut self, emit: &mut dyn FnMut(&RecordBody)) {
        self.due(u64::MAX, |_| 0, emit);
    }

    /// The launch time a kernel is attributed by, and whether it came from correlation.
    fn launched_at(&self, k: &Launch) -> (u64, bool) {
        let (id, t) = self.correlations[k.correlation as usize % Self::CORRELATION_SLOTS];
        if k.correlation != 0 && id == k.correlation {
            (t, true)
        } else {
            (k.start_ns, false)
        }
    }

    fn write(&mut self, step: &StepWindows, emit: &mut dyn FnMut(&RecordBody)) {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let mut correlated = 0u32;
        for k in &self.kernels {
            let (t, by_correlation) = self.launched_at(k);
            if let Some(i) = step.stage_of(t) {
                scratch.push((i, k.start_ns, k.end_ns));
                correlated += by_correlation as u32;
            }
        }
        scratch.sort_unstable();
        let kernels = scratch.len() as u32;
        let stages = step.count();
        let mut totals = [(0u64, 0u64); MAX_STEP_STAGES];
        for (i, total) in totals.iter_mut().enumerate().take(stages) {
            let from = scratch.partition_point(|k| k.0 < i);
            let to = scratch.partition_point(|k| k.0 <= i);
            *total = union_and_spill(scratch[from..to].iter().map(|k| (k.1, k.2)), step.stage(i).1);
        }
        self.scratch = scratch;
        let chunks = stages.div_ceil(StageDevice::STAGES).max(1);
        for part in 0..chunks {
            let mut record = StageDevice {
                step: step.step,
                kernels,
                correlated,
                part: part as u8,
                stages: [(0, 0, 0); StageDevice::STAGES],
                count: 0,
            };
            for (i, &(device, spill)) in
                totals.iter().enumerate().take(stages).skip(part * StageDevice::STAGES).take(StageDevice::STAGES)
            {
                record.stages[record.count as usize] = (step.stage(i).0, micros(device), micros(spill));
                record.count += 1;
            }
            emit(&RecordBody::StageDevice(record));
        }
    }
}

fn micros(ns: u64) -> u32 {
    ((ns + 500) / 1000).min(u32::MAX as u64) as u32
}

/// Length of the union of `sorted` intervals (ascending by start), and the part of it
/// after `host_end_ns`.
pub fn union_and_spill(sorted: impl Iterator<Item = (u64, u64)>, host_end_ns: u64) -> (u64, u64) {
    let (mut total, mut spill) = (0u64, 0u64);
    let mut close = |(s, e): (u64, u64)| {
        total += e - s;
        spill += e.saturating_sub(s.max(host_end_ns));
    };
    let mut current: Option<(u64, u64)> = None;
    for (s, e) in sorted {
        current = match current {
            Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
            Some(done) => {
                close(done);
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some(done) = current {
        close(done);
    }
    (total, spill)
}
