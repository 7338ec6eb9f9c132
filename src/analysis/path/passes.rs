//! Pass boundaries from a pipeline stage's send/recv calls, for a job without
//! per-microbatch pass markers (a Megatron job with tensor parallelism 1 marks no passes:
//! its passes are what lies between its pipeline exchanges).
//!
//! The stage runs Megatron's non-interleaved 1F1B (`forward_backward_pipelining_without_
//! interleaving`): stage s of P with M microbatches runs w = min(P-s-1, M) warm-up
//! forwards, M-w (forward, backward) pairs, then w backwards, and exchanges with its
//! neighbours between passes: a lone recv or send, or a send grouped with the receive
//! the next pass needs (`send_forward_recv_backward`, `send_backward_recv_forward`), each
//! one NCCL group. M is the one whose schedule has the exchanges the rank made.
//!
//! A pass runs from the return of the exchange before it to the entry of the exchange
//! after it. Where the schedule has no exchange on one side of a pass, the time is a
//! bound, not a measurement, and the pass is marked unjudged. Two passes with no exchange
//! between them (the last stage's forward then backward of a microbatch; the first stage's
//! backward then its next forward) are one measured span whose split is unknown: the first
//! pass carries the whole span and is judged as the span (`Derived::merged`), the second
//! carries 0 and is unjudged. That gives the graph the same timing as any split (the
//! first's only successor is the second, the second's only predecessor the first), and a
//! slowdown in either is still found, named as the span's.
//! Bounds: the first stage's first forward starts at the step's start (after the data
//! loading), its last backward ends at the stage's next other NCCL call (the gradient
//! reduction), else at the step's end.

use std::collections::{BTreeMap, BTreeSet};

use super::{Pass, Phase};

/// What a host call is to the pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    GroupStart,
    GroupEnd,
    /// A send or receive on a pipeline communicator.
    Send,
    Recv,
    /// Any other call with a communicator.
    Other,
}

/// A device's run of the kernel(s) a call launched: (start, end), ns on the host's clock.
pub type DeviceRun = (u64, u64);

/// One NCCL call of a rank's host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostCall {
    pub tid: u32,
    pub kind: CallKind,
    pub enter_ns: u64,
    pub exit_ns: u64,
    /// The thread's group nesting depth when the call entered.
    pub group_depth: u16,
    /// Its kernel's run, when the CUDA door linked one to it (for a group, the kernel is
    /// linked to its last call on each communicator).
    pub device: Option<DeviceRun>,
}

/// One exchange with a pipeline neighbour: a group of sends and receives (from the group's
/// start to its end's return, where the host waits for a blocking transfer), or one
/// ungrouped send or receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exchange {
    pub enter_ns: u64,
    pub exit_ns: u64,
    pub sends: bool,
    pub recvs: bool,
    /// From the first of its kernels' start to the last one's end, when any was linked.
    pub device: Option<DeviceRun>,
}

/// Another call (or a group without a pipeline transfer): its host entry, and its
/// kernel's start on the device when one was linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OtherCall {
    pub enter_ns: u64,
    pub device_start_ns: Option<u64>,
}

/// Two runs as one: from the earlier start to the later end.
fn span(a: Option<DeviceRun>, b: Option<DeviceRun>) -> Option<DeviceRun> {
    match (a, b) {
        (Some((s1, e1)), Some((s2, e2))) => Some((s1.min(s2), e1.max(e2))),
        (a, b) => a.or(b),
    }
}

/// An outermost group while it is open: its start and what it held.
struct OpenGroup {
    enter_ns: u64,
    sends: bool,
    recvs: bool,
    device: Option<DeviceRun>,
}

/// A rank's exchanges, in entry order, and its other calls (groups without a pipeline
/// transfer counted from their start), by entry.
pub fn exchanges(calls: &[HostCall]) -> (Vec<Exchange>, Vec<OtherCall>) {
    let mut done = Vec::new();
    let mut others = Vec::new();
    let mut open: BTreeMap<u32, OpenGroup> = BTreeMap::new();
    for call in calls {
        let group = open.get_mut(&call.tid);
        match (call.kind, group) {
            (CallKind::GroupStart, _) if call.group_depth == 0 => {
                let group = OpenGroup { enter_ns: call.enter_ns, sends: false, recvs: false, device: None };
                open.insert(call.tid, group);
            }
            (CallKind::GroupStart, _) => {}
            (CallKind::Send | CallKind::Recv | CallKind::Other, Some(g)) if call.group_depth > 0 => {
                g.sends |= call.kind == CallKind::Send;
                g.recvs |= call.kind == CallKind::Recv;
                g.device = span(g.device, call.device);
            }
            (CallKind::Send | CallKind::Recv, _) => done.push(Exchange {
                enter_ns: call.enter_ns,
                exit_ns: call.exit_ns,
                sends: call.kind == CallKind::Send,
                recvs: call.kind == CallKind::Recv,
                device: call.device,
            }),
            // The outermost group's end entered at depth 1 (0: an unbalanced end, which
            // closes nothing either).
            (CallKind::GroupEnd, Some(_)) if call.group_depth <= 1 => {
                if let Some(OpenGroup { enter_ns, sends, recvs, device }) = open.remove(&call.tid) {
                    if sends || recvs {
                        done.push(Exchange { enter_ns, exit_ns: call.exit_ns, sends, recvs, device });
                    } else {
                        others.push(OtherCall { enter_ns, device_start_ns: device.map(|d| d.0) });
                    }
                }
            }
            (CallKind::GroupEnd, _) => {}
            (CallKind::Other, _) => {
                others.push(OtherCall { enter_ns: call.enter_ns, device_start_ns: call.device.map(|d| d.0) })
            }
        }
    }
    done.sort_by_key(|e| e.enter_ns);
    others.sort_by_key(|o| o.enter_ns);
    (done, others)
}

/// One step of one rank: its window (the step markers') and its calls in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepCalls {
    pub begin_ns: u64,
    pub end_ns: u64,
    pub exchanges: Vec<Exchange>,
    /// The rank's other calls, by entry.
    pub others: Vec<OtherCall>,
}

impl StepCalls {
    /// The step as the device ran it (asynchronous launches: a host call returns once its
    /// work is queued): each exchange from its kernels' start to their end, each other call
    /// at its kernel's start (its host entry when none was linked, which is earlier). None
    /// when an exchange has no kernel linked (the CUDA door shut, or records lost).
    pub fn on_device(&self) -> Option<StepCalls> {
        let exchanges = self.exchanges.iter().map(|e| {
            let (enter_ns, exit_ns) = e.device?;
            Some(Exchange { enter_ns, exit_ns, ..*e })
        });
        let exchanges = exchanges.collect::<Option<Vec<_>>>()?;
        let mut others: Vec<OtherCall> =
            self.others.iter().map(|o| OtherCall { enter_ns: o.device_start_ns.unwrap_or(o.enter_ns), ..*o }).collect();
        others.sort_by_key(|o| o.enter_ns);
        Some(StepCalls { exchanges, others, ..*self })
    }
}

/// A stage's passes of one step, as `StepPasses` takes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Derived {
    pub microbatches: usize,
    pub passes: Vec<(Pass, u64)>,
    /// Passes whose time is a bound, not a measurement (see the module's notes).
    pub unjudged: BTreeSet<Pass>,
    /// The first pass of a measured span of two → the second, which it carries.
    pub merged: BTreeMap<Pass, Pass>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Item {
    Exchange { sends: bool, recvs: bool },
    Compute(Pass),
}

/// Stage `stage`'s 1F1B actions: Megatron's order of passes and exchanges.
fn schedule(stage: usize, stages: usize, microbatches: usize) -> Vec<Item> {
    let (first, last) = (stage == 0, stage + 1 == stages);
    let mut items = Vec::new();
    // A forward's activations go to the next stage, a backward's gradients to the previous
    // one; the ends of the pipeline have no neighbour on one side.
    let exchange = |sends: bool, recvs: bool, items: &mut Vec<Item>| {
        if sends || recvs {
            items.push(Item::Exchange { sends, recvs });
        }
    };
    let compute = |microbatch, phase| Item::Compute(Pass { stage, microbatch, phase });
    let warmup = (stages - stage - 1).min(microbatches);
    let remaining = microbatches - warmup;
    for mb in 0..warmup {
        exchange(false, !first, &mut items);
        items.push(compute(mb, Phase::Fwd));
        exchange(!last, false, &mut items);
    }
    if remaining > 0 {
        exchange(false, !first, &mut items);
    }
    for i in 0..remaining {
        items.push(compute(warmup + i, Phase::Fwd));
        // send_forward_recv_backward
        exchange(!last, !last, &mut items);
        items.push(compute(i, Phase::Bwd));
        // send_backward_recv_forward, without the receive after the last steady forward
        exchange(!first, !first && i + 1 < remaining, &mut items);
    }
    for mb in remaining..microbatches {
        exchange(false, !last, &mut items);
        items.push(compute(mb, Phase::Bwd));
        exchange(!first, false, &mut items);
    }
    items
}

/// The passes of stage `stage` of `stages` in `step`, from its exchanges; None when no
/// microbatch count gives a 1F1B schedule with exactly those exchanges (another schedule,
/// or calls lost).
pub fn derive(stage: usize, stages: usize, step: &StepCalls) -> Option<Derived> {
    if stage >= stages || stages < 2 {
        return None;
    }
    let seen: Vec<Item> = step.exchanges.iter().map(|e| Item::Exchange { sends: e.sends, recvs: e.recvs }).collect();
    // Every microbatch is at least one exchange, so M is at most their count.
    let (microbatches, items) = (1..=seen.len()).find_map(|m| {
        let items = schedule(stage, stages, m);
        let shape = items.iter().filter(|i| matches!(i, Item::Exchange { .. })).copied();
        shape.eq(seen.iter().copied()).then_some((m, items))
    })?;
    let mut derived = Derived { microbatches, passes: Vec::new(), unjudged: BTreeSet::new(), merged: BTreeMap::new() };
    // The passes since the last exchange, and where they started (None: the step's start).
    let mut run: Vec<Pass> = Vec::new();
    let mut since: Option<u64> = None;
    let mut flush = |run: &mut Vec<Pass>, since: Option<u64>, until: Option<u64>| {
        if run.is_empty() {
            return;
        }
        let start = since.unwrap_or(step.begin_ns);
        // After the last exchange: the next other call bounds the pass, else the step's end.
        let end = until.unwrap_or_else(|| {
            let next = step.others.iter().map(|o| o.enter_ns).find(|&t| t >= start && t < step.end_ns);
            next.unwrap_or(step.end_ns)
        });
        let measured = since.is_some() && until.is_some();
        if let (true, [first, second]) = (measured, &run[..]) {
            derived.merged.insert(*first, *second);
        }
        for (i, &pass) in run.iter().enumerate() {
            derived.passes.push((pass, if i == 0 { end.saturating_sub(start) } else { 0 }));
            // Judged: a pass alone between two exchanges, or the first of a span of two.
            if !(measured && i == 0 && run.len() <= 2) {
                derived.unjudged.insert(pass);
            }
        }
        run.clear();
    };
    let mut at = step.exchanges.iter();
    for item in items {
        match item {
            Item::Compute(pass) => run.push(pass),
            Item::Exchange { .. } => {
                let exchange = at.next()?;
                flush(&mut run, since, Some(exchange.enter_ns));
                since = Some(exchange.exit_ns);
            }
        }
    }
    flush(&mut run, since, None);
    Some(derived)
}

/// `derive` on the device's times where every exchange has its kernels' run, else on the
/// host's; the flag says whether the device timed it. On the device a pass runs from the
/// end of the exchange kernel before it to the start of the one after it: the NCCL stream
/// waits for the compute launched before the exchange, and the compute for the exchange
/// it needs. That gap holds the pass's kernels and any idle time waiting for their
/// launches, so a slow host that starves its device is in it too; the host's own times
/// are launch times, and a bound's may hold a synchronization's wait for the whole
/// pipeline to drain.
pub fn derive_timed(stage: usize, stages: usize, step: &StepCalls) -> Option<(Derived, bool)> {
    // The device's exchanges are the host's with other times: one shape, one schedule.
    match step.on_device() {
        Some(device) => derive(stage, stages, &device).map(|d| (d, true)),
        None => derive(stage, stages, step).map(|d| (d, false)),
    }
}

/// The pass a pipeline transfer carries, from its place in the stage's step: `previous`
/// is the stage's previous step's sends (true) and receives (false) on the pipeline's
/// communicator in the order the rank posted them, `index` the transfer's place among the
/// next step's, `send` whether it is a send. A send carries the output of the pass before
/// its exchange (a forward's activations, a backward's gradients), a receive the input of
/// the pass after it. None when no microbatch count gives a 1F1B schedule with exactly
/// `previous`'s transfers (another schedule, or calls lost), or the schedule has no such
/// transfer there.
pub fn transfer_pass(stage: usize, stages: usize, previous: &[bool], index: usize, send: bool) -> Option<Pass> {
    if stage >= stages || stages < 2 {
        return None;
    }
    // Each exchange's transfers, in schedule order: a group's send and receive in either
    // order (NCCL does not order a group's calls).
    let exchanges = |items: &[Item]| -> Vec<(usize, bool, bool)> {
        items
            .iter()
            .enumerate()
            .filter_map(|(at, item)| match *item {
                Item::Exchange { sends, recvs } => Some((at, sends, recvs)),
                Item::Compute(_) => None,
            })
            .collect()
    };
    let matches = |shape: &[(usize, bool, bool)]| {
        let mut calls = previous.iter();
        let whole = shape.iter().all(|&(_, sends, recvs)| {
            let taken: Vec<bool> = calls.by_ref().take(usize::from(sends) + usize::from(recvs)).copied().collect();
            taken.len() == usize::from(sends) + usize::from(recvs)
                && taken.contains(&true) == sends
                && taken.contains(&false) == recvs
        });
        whole && calls.next().is_none()
    };
    // Every microbatch is at least one transfer, so M is at most their count.
    let items = (1..=previous.len()).map(|m| schedule(stage, stages, m)).find(|items| matches(&exchanges(items)))?;
    let mut before = 0;
    for (at, sends, recvs) in exchanges(&items) {
        let size = usize::from(sends) + usize::from(recvs);
        if index < before + size {
            let carried = if send && sends {
                items[..at].iter().rev().find_map(computed)
            } else if !send && recvs {
                items[at + 1..].iter().find_map(computed)
            } else {
                None
            };
            return carried;
        }
        before += size;
    }
    None
}

fn computed(item: &Item) -> Option<Pass> {
    match *item {
        Item::Compute(pass) => Some(pass),
        Item::Exchange { .. } => None,
    }
}

#[cfg(test)]
#[path = "passes_tests.rs"]
mod tests;
