//! The collector's view of the device, from the CUDA door's launch and synchronization
//! callbacks and CUPTI's completion records: NCCL kernels matched with the call that
//! launched them by correlation id (`device_coll`), host synchronizations (`host_sync`),
//! and the device's unfinished work (`device_state`: the oldest launch with no completion
//! record yet, the counts, and a host synchronization still in progress).
//!
//! Everything kept is bounded: unfinished launches, completions that arrived before their
//! launch, open synchronizations and recent synchronizing threads.

use std::collections::{HashMap, VecDeque};

use crate::core::kernels::kernel_activity::{is_nccl_kernel, Activity, ActivityKind};
use crate::core::live::event::{DeviceEvent, Launch, SyncCall};
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::records::{
    DeviceColl, DeviceState, HostSync, KernelName, LinkSource, RecordBody, SyncKind, Unfinished,
};
use crate::core::record::clock::Calibration;
use crate::core::record::thread_state::NcclLink;

/// Unfinished launches tracked; more are counted in `untracked`, not kept.
const MAX_PENDING: usize = 1 << 16;
/// Completions kept while their launch may still be in the ring.
const MAX_EARLY: usize = 4096;
/// Threads inside a synchronization at once, and recent synchronizations' threads.
const MAX_SYNCS: usize = 256;

/// A launch with no completion record yet.
#[derive(Clone, Copy)]
struct Pending {
    t_launch_ns: u64,
    stream_handle: u64,
    nccl: NcclLink,
    name: [u8; Launch::NAME_BYTES],
    name_len: u8,
    name_cut: bool,
    stage: u16,
}

impl Pending {
    fn name(&self) -> &[u8] {
        &self.name[..self.name_len as usize]
    }

    /// The NCCL call that launched it, if it is an NCCL kernel: launched inside a recorded
    /// NCCL call (or its group's end), and named as NCCL names kernels when named at all.
    fn nccl_call(&self) -> Option<(NcclLink, NcclOp)> {
        let op = NcclOp::from_u16(self.nccl.op)?;
        let named_nccl = self.name_len == 0 || is_nccl_kernel(&String::from_utf8_lossy(self.name()));
        named_nccl.then_some((self.nccl, op))
    }
}

#[derive(Clone, Copy)]
struct OpenSync {
    tid: u32,
    since_ns: u64,
    sync: SyncKind,
}

/// What the last `device_state` said.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Said {
    launched: u64,
    completed: u64,
    oldest: Option<u32>,
    sync_since_ns: u64,
    complete_ns: u64,
}

#[derive(Default)]
pub struct DeviceTracker {
    pending: HashMap<u32, Pending>,
    /// Completions whose launch was not seen yet, by correlation id, and their arrival
    /// order for eviction (kernels of untraced launches, graph launches, land here too).
    early: HashMap<u32, Activity>,
    early_order: VecDeque<u32>,
    /// Unfinished launches per known stream handle, in launch order: a stream runs its work
    /// in order, so a completion retires every launch before it on its stream, even one
    /// whose own completion record CUPTI dropped (it would otherwise stay "unfinished").
    streams: HashMap<u64, VecDeque<u32>>,
    open_syncs: Vec<OpenSync>,
    /// (correlation, tid) of recent synchronization calls, for the activity records.
    sync_threads: VecDeque<(u32, u32)>,
    /// (stream handle, CUPTI stream id) learned from completed launches.
    stream_ids: Vec<(u64, u32)>,
    launched: u64,
    completed: u64,
    untracked: u64,
    /// Records made since the last round.
    out: Vec<RecordBody>,
    said: Option<Said>,
    /// The oldest unfinished launch's correlation and kernel-name id, once interned.
    oldest_name: Option<(u32, u32)>,
    /// When the device last made progress: the newest launch or kernel end seen, by when
    /// it happened (not when CUPTI handed its record over).
    progress_ns: u64,
    /// When CUPTI last handed over every record (`complete_at`).
    complete_ns: u64,
}

impl DeviceTracker {
    /// One event from the CUDA door's callbacks. `sync_activity`: CUPTI reports completed
    /// synchronizations itself, so an EXIT makes a `host_sync` only for copies.
    pub fn event(&mut self, event: &DeviceEvent, cal: &Calibration, sync_activity: bool) {
        match event {
            DeviceEvent::Launch(launch) => self.launch(launch, cal.to_mono_ns(launch.ticks)),
            DeviceEvent::Sync(call) => self.sync_call(call, cal.to_mono_ns(call.ticks), sync_activity),
        }
    }

    fn launch(&mut self, launch: &Launch, t_launch_ns: u64) {
        self.launched += 1;
        self.progress_ns = self.progress_ns.max(t_launch_ns);
        let pending = Pending {
            t_launch_ns,
            stream_handle: launch.stream_handle,
            nccl: launch.nccl,
            name: launch.name,
            name_len: launch.name_len,
            name_cut: launch.name_cut,
            stage: launch.stage,
        };
        if let Some(completion) = self.early.remove(&launch.correlation) {
            return self.completed_launch(&pending, &completion);
        }
        if self.pending.len() < MAX_PENDING {
            self.pending.insert(launch.correlation, pending);
            if launch.stream_handle != 0 {
                self.streams.entry(launch.stream_handle).or_default().push_back(launch.correlation);
            }
        } else {
            self.untracked += 1;
        }
    }

    fn sync_call(&mut self, call: &SyncCall, t_ns: u64, sync_activity: bool) {
        if !call.exit {
            if self.open_syncs.len() < MAX_SYNCS {
                let open = OpenSync { tid: call.tid, since_ns: t_ns, sync: call.sync };
                self.open_syncs.push(open);
            }
            if self.sync_threads.len() == MAX_SYNCS {
                self.sync_threads.pop_front();
            }
            self.sync_threads.push_back((call.correlation, call.tid));
            return;
        }
        let Some(at) = self.open_syncs.iter().position(|s| s.tid == call.tid) else { return };
        let open = self.open_syncs.swap_remove(at);
        if open.sync == SyncKind::Copy || !sync_activity {
            self.out.push(RecordBody::HostSync(HostSync {
                t_enter_ns: open.since_ns,
                t_exit_ns: t_ns.max(open.since_ns),
                sync: open.sync,
                tid: call.tid,
                stream: 0,
            }));
        }
    }

    /// One CUPTI activity record (the same the kernel windows get).
    pub fn activity(&mut self, activity: &Activity) {
        match activity.kind {
            ActivityKind::Kernel => {
                self.completed += 1;
                self.progress_ns = self.progress_ns.max(activity.end_ns);
                match self.pending.remove(&activity.correlation) {
                    Some(pending) => {
                        self.retire_before(pending.stream_handle, activity.correlation);
                        self.completed_launch(&pending, activity)
                    }
                    None => {
                        if self.early_order.len() == MAX_EARLY {
                            let oldest = self.early_order.pop_front().expect("full");
                            self.early.remove(&oldest);
                        }
                        self.early.insert(activity.correlation, *activity);
                        self.early_order.push_back(activity.correlation);
                    }
                }
            }
            ActivityKind::Synchronization { sync_type } => {
                // Type 2 (stream wait event) is a wait on the device, not of the host.
                let sync = match sync_type {
                    1 => SyncKind::Event,
                    3 => SyncKind::Stream,
                    4 => SyncKind::Device,
                    _ => return,
                };
                let tid = self.sync_threads.iter().find(|(c, _)| *c == activity.correlation).map_or(0, |(_, t)| *t);
                self.out.push(RecordBody::HostSync(HostSync {
                    t_enter_ns: activity.start_ns,
                    t_exit_ns: activity.end_ns,
                    sync,
                    tid,
                    stream: activity.stream,
                }));
            }
            ActivityKind::Memcpy { .. } | ActivityKind::Runtime { .. } => {}
        }
    }

    /// A flush at `t_ns` made CUPTI hand over every record, unfinished ones too: what is
    /// unfinished after this round's completions was unfinished then.
    pub fn complete_at(&mut self, t_ns: u64) {
        self.complete_ns = t_ns;
    }

    /// When the host synchronization in progress longest entered: the host has waited on
    /// its device since then.
    pub fn host_waiting_since_ns(&self) -> Option<u64> {
        self.open_syncs.iter().map(|s| s.since_ns).min()
    }

    /// Drops the launches queued on `handle` before `correlation` (which just completed).
    fn retire_before(&mut self, handle: u64, correlation: u32) {
        let Some(queue) = self.streams.get_mut(&handle) else { return };
        while let Some(front) = queue.pop_front() {
            if front == correlation {
                break;
            }
            self.pending.remove(&front);
        }
        if queue.is_empty() {
            self.streams.remove(&handle);
        }
    }

    fn completed_launch(&mut self, pending: &Pending, kernel: &Activity) {
        if pending.stream_handle != 0 && !self.stream_ids.iter().any(|(h, _)| *h == pending.stream_handle) {
            if self.stream_ids.len() == MAX_SYNCS {
                self.stream_ids.remove(0);
            }
            self.stream_ids.push((pending.stream_handle, kernel.stream));
        }
        if let Some((link, op)) = pending.nccl_call() {
            self.out.push(RecordBody::DeviceColl(DeviceColl {
                comm_id: link.comm_id,
                seq: link.seq,
                op,
                t_launch_ns: pending.t_launch_ns,
                t_start_ns: kernel.start_ns,
                t_end_ns: kernel.end_ns,
                stream: kernel.stream,
                link: LinkSource::Callback,
            }));
        }
    }

    /// The collector's round: the records made since the last, then a `device_state` when
    /// the picture changed (or `at_exit`). `intern` gives a kernel name's id and whether it
    /// is new (its `kernel_name` record is written here, before the state naming it).
    pub fn round(
        &mut self,
        t_ns: u64,
        at_exit: bool,
        intern: &mut dyn FnMut(&[u8]) -> (u32, bool),
        emit: &mut dyn FnMut(&RecordBody),
    ) {
        for record in self.out.drain(..) {
            emit(&record);
        }
        if self.launched == 0 && self.completed == 0 && self.sync_threads.is_empty() {
            return;
        }
        let oldest = self.pending.iter().min_by_key(|(c, p)| (p.t_launch_ns, **c)).map(|(c, p)| (*c, *p));
        let sync = self.open_syncs.iter().min_by_key(|s| s.since_ns).copied();
        let now = Said {
            launched: self.launched,
            completed: self.completed,
            oldest: oldest.map(|(c, _)| c),
            sync_since_ns: sync.map_or(0, |s| s.since_ns),
            complete_ns: self.complete_ns,
        };
        if self.said == Some(now) && !at_exit {
            return;
        }
        self.said = Some(now);
        let oldest = oldest.map(|(correlation, p)| {
            let name_id = match self.oldest_name {
                Some((c, id)) if c == correlation => id,
                _ => {
                    let id = name_id(&p, intern, emit);
                    self.oldest_name = Some((correlation, id));
                    id
                }
            };
            let call = p.nccl_call();
            Unfinished {
                name_id,
                t_launch_ns: p.t_launch_ns,
                stream: self.stream_ids.iter().find(|(h, _)| *h == p.stream_handle && h != &0).map_or(0, |(_, s)| *s),
                comm_id: call.map_or(0, |(l, _)| l.comm_id),
                seq: call.map_or(0, |(l, _)| l.seq),
                op: call.map(|(_, op)| op),
                stage: p.stage,
            }
        });
        emit(&RecordBody::DeviceState(DeviceState {
            t_ns,
            launched: self.launched,
            completed: self.completed,
            oldest,
            sync_since_ns: now.sync_since_ns,
            sync: sync.map(|s| s.sync),
            changed_ns: Some(self.progress_ns),
            complete_ns: Some(now.complete_ns),
        }));
    }
}

/// The kernel-name id of a launch's name; a name cut on the hot path is interned with
/// `...` after it, so it never passes for another kernel's whole name.
fn name_id(p: &Pending, intern: &mut dyn FnMut(&[u8]) -> (u32, bool), emit: &mut dyn FnMut(&RecordBody)) -> u32 {
    let mut name = [0u8; Launch::NAME_BYTES + 3];
    let len = p.name_len as usize;
    name[..len].copy_from_slice(p.name());
    let len = if p.name_cut {
        name[len..len + 3].copy_from_slice(b"...");
        len + 3
    } else {
        len
    };
    let (id, new) = intern(&name[..len]);
    if new {
        emit(&RecordBody::KernelName(KernelName::new(id, &name[..len])));
    }
    id
}

#[cfg(test)]
#[path = "device_tracker_tests.rs"]
mod tests;
