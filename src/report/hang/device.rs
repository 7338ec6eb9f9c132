//! `sf hang`'s device view: each rank's unfinished device work, the collectives its host
//! launched, and the stall report, from the CUDA door's records.

use super::*;
use crate::core::kernels::kernel_activity::readable_kernel_name;

/// A hang seen through NCCL's profiler alone: `profiler_stall`.
#[derive(Debug, Serialize)]
pub struct ProfilerStallReport {
    pub rank: i32,
    /// The collective the others wait in, as NCCL's profiler names it: its function, its
    /// per-function sequence number on the communicator (`nccl_seq` of `prof_op` records),
    /// and the communicator's hash folded to 14 bits.
    pub func: &'static str,
    pub nccl_seq: u64,
    pub comm_tag: u16,
    pub waiting_ranks: Vec<i32>,
    /// The longest any of them has waited since its device began it.
    pub waiting_s: f64,
}

impl From<KernelChStall> for ProfilerStallReport {
    fn from(s: KernelChStall) -> ProfilerStallReport {
        ProfilerStallReport {
            rank: s.rank,
            func: func_name(s.waited.func),
            nccl_seq: s.waited.seq,
            comm_tag: s.waited.comm_tag,
            waiting_ranks: s.waiting_ranks,
            waiting_s: seconds(s.waiting_ns),
        }
    }
}

/// A host waiting on its device: `device_waits`.
#[derive(Debug, Serialize)]
pub struct DeviceWaitReport {
    pub rank: i32,
    /// Inside a host synchronization this long.
    pub syncing_s: f64,
    /// The device's oldest unfinished kernel and how long ago it was launched, when the
    /// evidence shows it unfinished for longer than the threshold too.
    pub kernel: Option<String>,
    pub unfinished_s: Option<f64>,
}

impl From<DeviceWait> for DeviceWaitReport {
    fn from(w: DeviceWait) -> DeviceWaitReport {
        let (kernel, unfinished_s) = match w.kernel {
            Some((kernel, unfinished_ns)) => (kernel, Some(seconds(unfinished_ns))),
            None => (None, None),
        };
        DeviceWaitReport { rank: w.rank, syncing_s: seconds(w.syncing_ns), kernel, unfinished_s }
    }
}

/// The culprit of a hang the host counts cannot show.
#[derive(Debug, Serialize)]
pub struct DeviceStallReport {
    pub rank: i32,
    /// The kernel its device is stuck behind, the stage it was launched in, and how long
    /// ago it was launched (unfinished since).
    pub kernel: Option<String>,
    pub stage: Option<String>,
    pub t_launch_ns: u64,
    pub unfinished_s: f64,
    /// Its host has waited in a synchronization this long (null: not in one).
    pub syncing_s: Option<f64>,
    /// The collective its peers' devices wait in.
    #[serde(serialize_with = "hex_u64")]
    pub comm_id: u64,
    pub comm_seq: u64,
    pub op: NcclOp,
    pub waiting_ranks: Vec<i32>,
}

/// A hang whose waiters are on the devices and whose culprit is a host
/// (`analysis::hang::device_chain`): the host's counts named a waiter.
#[derive(Debug, Serialize)]
pub struct DeviceChainReport {
    /// The ranks whose hosts never launched a call some device waits in.
    pub culprit_ranks: Vec<i32>,
    /// The call the first of them never launched, and its peers whose devices wait in it.
    #[serde(serialize_with = "hex_u64")]
    pub comm_id: u64,
    pub comm_seq: u64,
    pub op: NcclOp,
    pub peer_ranks: Vec<i32>,
    /// Every rank whose device waits in an NCCL kernel.
    pub waiting_ranks: Vec<i32>,
    /// The send/recv the peers wait in: its pipeline pass (`microbatch`, `phase`).
    #[serde(flatten)]
    pub transfer: TransferPass,
}

/// The chain of device waits, when it overrules the host's counts: the ranks those name
/// include one whose device waits in an NCCL kernel or whose host waits on its device
/// (not a culprit, a link). Relabels the ranks: the chain's head `missing`, the false
/// culprits `waiting` for it. `None` leaves the report as the hosts' counts made it.
pub(super) fn overruling_chain(
    chain: Option<DeviceChain>,
    ranks: &mut [RankReport],
    named: &[i32],
) -> Option<DeviceChainReport> {
    let chain = chain?;
    if named.is_empty() || named.iter().all(|r| chain.culprits.contains(r)) {
        return None;
    }
    let waiters: Vec<i32> = named.iter().chain(&chain.waiting_ranks).copied().collect();
    relabel(ranks, &chain.culprits, &waiters);
    Some(DeviceChainReport {
        culprit_ranks: chain.culprits,
        comm_id: chain.comm_id,
        comm_seq: chain.seq,
        op: chain.op,
        peer_ranks: chain.peers,
        waiting_ranks: chain.waiting_ranks,
        transfer: TransferPass::default(),
    })
}

/// Adds each rank's place in the communicators the analysis placed (a split's members,
/// ordered by key), which a split's creation record does not know.
pub(super) fn place_members(views: &mut [DeviceView], comms: &[CommVerdict]) {
    for (comm_id, m) in comms.iter().flat_map(|c| c.members.iter().map(move |m| (c.comm_id, m))) {
        if let Some(v) = views.iter_mut().find(|v| v.rank == m.rank && m.comm_rank >= 0) {
            v.comm_ranks.push((comm_id, m.comm_rank));
        }
    }
}

/// The host counts' verdict while the devices have not settled it: ranks it names whose
/// hosts wait on their devices are links of a chain whose device evidence is not old
/// enough yet to say whom they wait for (it trails the devices by the CUDA door's buffer
/// reads). They wait for the others named; when every one named waits so, they come back
/// (`device_pending`): no verdict until the evidence is old enough.
pub(super) fn unsettled_names(ranks: &mut [RankReport], named: &[i32], views: &[DeviceView]) -> Vec<i32> {
    let syncing = |r: &&i32| views.iter().any(|v| v.rank == **r && v.sync_since_ns > 0);
    let (on_devices, on_hosts): (Vec<i32>, Vec<i32>) = named.iter().partition(syncing);
    if on_hosts.is_empty() {
        return on_devices;
    }
    if !on_devices.is_empty() {
        relabel(ranks, &on_hosts, named);
    }
    Vec::new()
}

/// Marks `culprits` missing and the other ranks of `waiters` waiting for them: the host
/// counts' verdict on ranks the devices show waiting.
pub(super) fn relabel(ranks: &mut [RankReport], culprits: &[i32], waiters: &[i32]) {
    for r in ranks.iter_mut() {
        if culprits.contains(&r.rank) {
            (r.role, r.state, r.waiting_for) = (State::Missing, State::Missing, Vec::new());
        } else if waiters.contains(&r.rank) {
            (r.role, r.state, r.waiting_for) = (State::Waiting, State::Waiting, culprits.to_vec());
        }
    }
}

/// What a log's records hold of its device: the newest `device_state`, kernel names, the
/// newest complete step, how many device records there were, and how far its device
/// evidence trails the device.
pub(super) type DeviceParts = (Option<DeviceState>, Vec<(u32, String)>, Vec<StepVector>, u64, u64);

/// What the profiler door's live words say of a rank's device, judged at `as_of_ns` (the
/// door writes them itself, as fresh as the read; a rank that is gone stopped at its last
/// heartbeat); a start before the clock's calibration is no time at all.
pub(super) fn kernel_ch_view(log: &RankLog, as_of_ns: u64, calibrated: u64) -> KernelChView {
    let words = log.kernel_ch();
    KernelChView {
        rank: log.header.global_rank,
        now_ns: Some(as_of_ns),
        started: words.started.filter(|&(_, since)| since >= calibrated),
        stopped: words.stopped,
    }
}

/// The stall NCCL's profiler shows across the ranks (`analysis::hang::kernel_ch`).
pub(super) fn profiler_stall(extras: &[Extra], threshold_ns: u64) -> Option<KernelChStall> {
    let views: Vec<KernelChView> = extras.iter().map(|e| e.kernel_ch).filter(|v| v.rank >= 0).collect();
    kernel_ch_stall(&views, threshold_ns)
}

/// The device's view of a rank: its newest `device_state`, its oldest unfinished kernel
/// named and placed in a stage, and the collectives its host launched per communicator.
pub(super) fn device_view(
    parts: &DeviceParts,
    input: &RankInput,
    stage_names: &[Option<String>],
) -> Option<DeviceView> {
    let (state, kernel_names, newest_step, _, evidence_lag_ns) = parts;
    // The device's state is as fresh as the collector's last round, which its heartbeat
    // follows: judged at the reader's now, a healthy rank whose collector a loaded host
    // held back for a second reads as a device stuck for that long.
    let as_of_ns = match input.heartbeat_mono_ns {
        0 => input.now_ns,
        beat => input.now_ns.map(|now| now.min(beat)),
    };
    // A rank without a device state is a member that shows nothing: it keeps the devices
    // from naming a culprit in a collective it is part of.
    let Some(state) = *state else {
        return Some(DeviceView {
            rank: input.rank,
            now_ns: as_of_ns,
            oldest: None,
            changed_ns: 0,
            sync_since_ns: 0,
            launched: launched(input, false),
            launched_p2p: launched(input, true),
            comm_ranks: comm_ranks(input),
            oldest_peer: None,
            evidence_lag_ns: *evidence_lag_ns,
            complete_ns: None,
        });
    };
    let oldest = state.oldest.map(|o| Unfinished {
        kernel: kernel_names
            .iter()
            .rev()
            .find(|(id, _)| *id == o.name_id)
            .map(|(_, name)| whole_name(name, kernel_names)),
        // The stage its host launched it in, as the library saw it; for a log written
        // before launches carried it, the stage at the same offset into the step.
        stage: match o.stage.checked_sub(1) {
            Some(id) => stage_names.get(usize::from(id)).cloned().flatten(),
            None => stage_at(newest_step, o.t_launch_ns, stage_names),
        },
        t_launch_ns: o.t_launch_ns,
        collective: o.op.map(|op| (o.comm_id, o.seq, op)),
    });
    Some(DeviceView {
        rank: input.rank,
        now_ns: as_of_ns,
        oldest,
        changed_ns: state.changed_ns.unwrap_or(state.t_ns),
        sync_since_ns: state.sync_since_ns,
        launched: launched(input, false),
        launched_p2p: launched(input, true),
        comm_ranks: comm_ranks(input),
        // A send/recv's peer, from the call that launched it.
        oldest_peer: state.oldest.filter(|o| o.op.is_some_and(|op| op.is_p2p())).and_then(|o| {
            input.calls.iter().rev().find(|c| c.comm_id == o.comm_id && c.seq == o.seq && c.op.is_p2p()).map(|c| c.peer)
        }),
        evidence_lag_ns: *evidence_lag_ns,
        // What is unfinished is known only as of CUPTI's last complete hand-over: later, a
        // kernel long ended may still read as unfinished (its record kept back in a buffer
        // behind another one still running). A log written before the field: at now.
        complete_ns: state.complete_ns,
    })
}

/// The name to show for a launch's kernel name: a name the launch callback cut short
/// (`...` after it) is the whole name of a kernel that completed before, when one starts
/// so; then as people read it (`readable_kernel_name`).
fn whole_name(name: &str, kernel_names: &[(u32, String)]) -> String {
    let whole = name
        .strip_suffix("...")
        .and_then(|cut| kernel_names.iter().map(|(_, n)| n).find(|n| n.starts_with(cut) && !n.ends_with("...")));
    readable_kernel_name(whole.map_or(name, |n| n)).into_owned()
}

/// Its rank in each communicator: the live table's, and the creations' (a slot that did
/// not learn its rank, a communicator whose slot is gone).
fn comm_ranks(input: &RankInput) -> Vec<(u64, i32)> {
    let live = input.comms.iter().map(|c| (c.comm_id, c.rank));
    live.chain(input.created.iter().map(|c| (c.comm_id, c.rank))).filter(|&(_, rank)| rank >= 0).collect()
}

/// Collectives (or, `p2p`, send/recv calls) the host launched per communicator: the live
/// table's count, or the newest call's sequence where the records say more (a table gone
/// with its process).
fn launched(input: &RankInput, p2p: bool) -> Vec<(u64, u64)> {
    let entered = |c: &crate::core::log::reader::CommLive| if p2p { c.p2p_entered } else { c.coll_entered };
    let mut launched: Vec<(u64, u64)> = input.comms.iter().map(|c| (c.comm_id, entered(c))).collect();
    let kind = |op: NcclOp| if p2p { op.is_p2p() } else { op.is_collective() };
    for c in input.calls.iter().filter(|c| kind(c.op) && c.seq > 0) {
        match launched.iter_mut().find(|(comm, _)| *comm == c.comm_id) {
            Some((_, n)) => *n = (*n).max(c.seq),
            None => launched.push((c.comm_id, c.seq)),
        }
    }
    launched
}

/// The stage an instant falls in: within the newest complete step, the stage there; in
/// the step after it (the one under way), the stage at the same offset into the step.
fn stage_at(newest: &[StepVector], t_ns: u64, names: &[Option<String>]) -> Option<String> {
    let first = newest.first()?;
    let end = first.t_begin_ns.saturating_add(first.wall_ns);
    let offset = if t_ns >= end { t_ns - end } else { t_ns.checked_sub(first.t_begin_ns)? };
    let mut at = 0u64;
    let stages = newest.iter().flat_map(|p| p.stages());
    for (id, ns) in stages {
        at = at.saturating_add(ns);
        if offset < at {
            return names.get(id as usize).cloned().flatten();
        }
    }
    None
}

pub(super) fn device_stall_report(s: DeviceStall) -> DeviceStallReport {
    DeviceStallReport {
        rank: s.rank,
        kernel: s.kernel,
        stage: s.stage,
        t_launch_ns: s.t_launch_ns,
        unfinished_s: seconds(s.unfinished_ns),
        syncing_s: (s.syncing_ns > 0).then(|| seconds(s.syncing_ns)),
        comm_id: s.comm_id,
        comm_seq: s.seq,
        op: s.op,
        waiting_ranks: s.waiting_ranks,
    }
}
