//! Hangs the host cannot see: NCCL's calls return once the collective is enqueued, so in
//! a hang every rank may have launched the same collectives (the host counts agree) while
//! the device of one is stuck behind other work: a compute kernel that never ends (a
//! device waiting in a collective of another communicator is a link of a chain:
//! `device_chain`). Its peers' NCCL kernels spin in the collective,
//! waiting for it; their hosts block later, in a synchronization, waiting too.
//!
//! Each rank's newest `device_state` names the oldest kernel it launched that has not
//! completed. The collective the peers wait in is the NCCL kernel most ranks' devices are
//! stuck at; the culprit is the member whose oldest unfinished work is something else,
//! though its host launched that collective too. A rank whose host is blocked in a
//! synchronization is waiting on its device, not guilty of anything by itself.

use crate::core::log::nccl_op::NcclOp;

/// The oldest kernel a rank launched that has not completed.
#[derive(Clone, Debug, PartialEq)]
pub struct Unfinished {
    /// Its name (`kernel_name`), when the log holds it.
    pub kernel: Option<String>,
    /// The stage it was launched in, when the steps say.
    pub stage: Option<String>,
    pub t_launch_ns: u64,
    /// The NCCL call that launched it; `None` for a compute kernel.
    pub collective: Option<(u64, u64, NcclOp)>,
}

/// What one rank's device and host say.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceView {
    pub rank: i32,
    /// When the view holds, on the rank's clock: the reader's now, or the rank's last
    /// heartbeat if earlier (its state is no fresher than the collector's last round).
    pub now_ns: Option<u64>,
    pub oldest: Option<Unfinished>,
    /// When the device's state last changed (a launch or a completion seen): a device
    /// still making progress is slow, not stuck.
    pub changed_ns: u64,
    /// When the host synchronization in progress entered; 0 when none is.
    pub sync_since_ns: u64,
    /// (communicator, collectives its host launched on it): the live table's counts.
    pub launched: Vec<(u64, u64)>,
    /// (communicator, send/recv calls its host launched on it), counted apart.
    pub launched_p2p: Vec<(u64, u64)>,
    /// (communicator, its rank in it), to find a send/recv's peer among the views.
    pub comm_ranks: Vec<(u64, i32)>,
    /// The peer (its rank in the communicator) of the send/recv its oldest unfinished
    /// kernel is, when the calls held say.
    pub oldest_peer: Option<i32>,
    /// How far the log's device evidence trails the device: the longest a completed NCCL
    /// kernel waited for the `device_state` that counted it (the CUDA door reads CUPTI's
    /// buffers every `SF_CUPTI_FLUSH_MS`); 0 when unknown.
    pub evidence_lag_ns: u64,
    /// When what is unfinished was last known to be (CUPTI handed over every record); a
    /// stall is judged as of then, its ages shown as of `now_ns`. `None`: judged at now.
    pub complete_ns: Option<u64>,
}

/// A rank whose device is stuck behind other work while its peers wait for it in a
/// collective its host launched.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceStall {
    pub rank: i32,
    pub kernel: Option<String>,
    pub stage: Option<String>,
    pub t_launch_ns: u64,
    pub unfinished_ns: u64,
    /// Inside a host synchronization since this long (0: not in one).
    pub syncing_ns: u64,
    /// The collective the peers wait in.
    pub comm_id: u64,
    pub seq: u64,
    pub op: NcclOp,
    /// Ranks whose devices wait in it.
    pub waiting_ranks: Vec<i32>,
}

/// A host that has waited on its device for longer than the threshold, with no peer's
/// collective to tell whether the device is stuck or busy: what is seen, not a verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceWait {
    pub rank: i32,
    /// Inside a host synchronization since this long.
    pub syncing_ns: u64,
    /// The device's oldest unfinished kernel, when the evidence shows it unfinished for
    /// longer than the threshold too (name, how long unfinished, as of now).
    pub kernel: Option<(Option<String>, u64)>,
}

/// The ranks whose hosts have waited in a synchronization for longer than `threshold_ns`
/// (the device threshold: `device_threshold_ns`), oldest wait first.
pub fn device_waits(views: &[DeviceView], threshold_ns: u64) -> Vec<DeviceWait> {
    let threshold_ns = device_threshold_ns(views, threshold_ns);
    let mut waits: Vec<DeviceWait> = views
        .iter()
        .filter(|v| v.sync_since_ns > 0)
        .filter_map(|v| {
            let syncing_ns = v.age_ns(v.sync_since_ns).filter(|&age| age >= threshold_ns)?;
            let kernel = v.oldest.as_ref().and_then(|o| {
                let known = v.known_age_ns(o.t_launch_ns)? >= threshold_ns;
                known.then(|| (o.kernel.clone(), v.age_ns(o.t_launch_ns).unwrap_or(0)))
            });
            Some(DeviceWait { rank: v.rank, syncing_ns, kernel })
        })
        .collect();
    waits.sort_by_key(|w| (std::cmp::Reverse(w.syncing_ns), w.rank));
    waits
}

impl DeviceView {
    fn age_ns(&self, t_ns: u64) -> Option<u64> {
        Some(self.now_ns?.saturating_sub(t_ns))
    }

    /// The age of `t_ns` as far as the evidence is complete.
    pub fn known_age_ns(&self, t_ns: u64) -> Option<u64> {
        let now = self.now_ns?;
        Some(self.complete_ns.map_or(now, |c| c.min(now)).saturating_sub(t_ns))
    }

    fn launched_on(&self, comm_id: u64) -> Option<u64> {
        self.launched.iter().find(|&&(c, _)| c == comm_id).map(|&(_, n)| n)
    }

    /// The calls of `op`'s kind (collective or send/recv) its host launched on `comm_id`.
    pub fn launched_of(&self, comm_id: u64, op: NcclOp) -> Option<u64> {
        let counts = if op.is_p2p() { &self.launched_p2p } else { &self.launched };
        counts.iter().find(|&&(c, _)| c == comm_id).map(|&(_, n)| n)
    }

    /// Whether this rank is `comm_rank` of `comm_id`.
    pub fn is_member(&self, comm_id: u64, comm_rank: i32) -> bool {
        self.comm_ranks.contains(&(comm_id, comm_rank))
    }

    /// How long its host has been inside a synchronization with its device, if it is.
    pub fn syncing_ns(&self) -> Option<u64> {
        (self.sync_since_ns > 0).then(|| self.age_ns(self.sync_since_ns)).flatten()
    }
}

/// The threshold a device stall is judged by: `threshold_ns`, raised to the evidence's lag.
/// A state older than the lag may only be one whose completions are not read yet: judged
/// sooner, a healthy rank's kernels that ended unseen read as unfinished (a false stall,
/// most likely early in a job on a loaded host), and a stall can never be named within
/// twice a threshold shorter than the lag.
pub fn device_threshold_ns(views: &[DeviceView], threshold_ns: u64) -> u64 {
    views.iter().map(|v| v.evidence_lag_ns).fold(threshold_ns, u64::max)
}

/// The device stall of the job, if any: stuck means older than the device threshold
/// (`threshold_ns` raised to the evidence's lag: `device_threshold_ns`), and the
/// culprit's device made no progress for as long (a rank descheduled on a loaded host, or
/// busy with a long kernel, still completes work now and then). `None`
/// when no collective is stuck on the devices, when some member's host has not launched
/// it (the rank behind on the host holds it up: the host's analysis names it), or when
/// every member's device is in it (nobody is behind: a link or a wedged collective).
pub fn device_stall(views: &[DeviceView], threshold_ns: u64) -> Option<DeviceStall> {
    let threshold_ns = device_threshold_ns(views, threshold_ns);
    let stuck_in = |v: &DeviceView| {
        let oldest = v.oldest.as_ref()?;
        let (comm, seq, op) = oldest.collective?;
        (v.known_age_ns(oldest.t_launch_ns)? >= threshold_ns).then_some((comm, seq, op))
    };
    // The collective most stuck devices are in (the lowest sequence on a tie).
    let mut counts: Vec<((u64, u64, NcclOp), usize)> = Vec::new();
    for key in views.iter().filter_map(stuck_in) {
        match counts.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => counts.push((key, 1)),
        }
    }
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0 .1.cmp(&b.0 .1)).then(a.0 .0.cmp(&b.0 .0)));
    let &((comm_id, seq, op), _) = counts.first()?;
    let members: Vec<&DeviceView> = views.iter().filter(|v| v.launched_on(comm_id).is_some()).collect();
    if members.iter().any(|v| v.launched_on(comm_id).is_some_and(|n| n < seq)) {
        return None;
    }
    let waiting_ranks: Vec<i32> =
        members.iter().filter(|v| stuck_in(v).is_some_and(|k| k == (comm_id, seq, op))).map(|v| v.rank).collect();
    let stuck_elsewhere = |v: &&DeviceView| {
        let oldest = v.oldest.as_ref()?;
        let unfinished_ns = v.age_ns(oldest.t_launch_ns)?;
        // Only a compute kernel is other work. A later collective of the same communicator
        // shows its device got past the one its peers' states show (theirs lag: kernel
        // records come in batches); one of another communicator waits for that one's
        // members (`device_chain` follows it to the host that holds it up).
        let other_work = oldest.collective.is_none();
        let still = v.known_age_ns(v.changed_ns)? >= threshold_ns;
        let stuck = v.known_age_ns(oldest.t_launch_ns)? >= threshold_ns;
        (other_work && still && stuck).then_some(unfinished_ns)
    };
    // Every other member waits in the collective: one that does neither is somewhere the
    // states do not show (starting up, or its state behind), and nothing is certain.
    let others: Vec<&&DeviceView> = members.iter().filter(|v| !waiting_ranks.contains(&v.rank)).collect();
    if others.iter().any(|v| stuck_elsewhere(v).is_none()) {
        return None;
    }
    let (v, unfinished_ns) = others
        .into_iter()
        .filter_map(|v| Some((*v, stuck_elsewhere(v)?)))
        .max_by_key(|&(v, unfinished_ns)| (unfinished_ns, -v.rank))?;
    let oldest = v.oldest.as_ref()?;
    Some(DeviceStall {
        rank: v.rank,
        kernel: oldest.kernel.clone(),
        stage: oldest.stage.clone(),
        t_launch_ns: oldest.t_launch_ns,
        unfinished_ns,
        syncing_ns: if v.sync_since_ns > 0 { v.age_ns(v.sync_since_ns).unwrap_or(0) } else { 0 },
        comm_id,
        seq,
        op,
        waiting_ranks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;
    const COMM: u64 = 0xc0;

    fn in_collective(rank: i32, seq: u64, syncing: bool) -> DeviceView {
        DeviceView {
            rank,
            now_ns: Some(100 * SEC),
            oldest: Some(Unfinished {
                kernel: Some("ncclDevKernel_AllReduce_Sum_f32_RING_LL".into()),
                stage: Some("model.backward_cpu_wall".into()),
                t_launch_ns: 90 * SEC,
                collective: Some((COMM, seq, NcclOp::AllReduce)),
            }),
            changed_ns: 90 * SEC,
            sync_since_ns: if syncing { 91 * SEC } else { 0 },
            launched: vec![(COMM, seq)],
            launched_p2p: Vec::new(),
            comm_ranks: Vec::new(),
            oldest_peer: None,
            evidence_lag_ns: 0,
            complete_ns: None,
        }
    }

    #[test]
    fn a_stuck_compute_kernel_with_equal_host_counts_names_its_rank_and_kernel() {
        let mut views: Vec<DeviceView> = (0..4).map(|r| in_collective(r, 41, true)).collect();
        views[3].oldest = Some(Unfinished {
            kernel: Some("sim_bwd_0".into()),
            stage: Some("model.backward_cpu_wall".into()),
            t_launch_ns: 89 * SEC,
            collective: None,
        });
        let stall = device_stall(&views, SEC).unwrap();
        assert_eq!(
            (stall.rank, stall.kernel.as_deref(), stall.stage.as_deref()),
            (3, Some("sim_bwd_0"), Some("model.backward_cpu_wall"))
        );
        assert_eq!((stall.comm_id, stall.seq, stall.op), (COMM, 41, NcclOp::AllReduce));
        assert_eq!(stall.unfinished_ns, 11 * SEC);
        assert_eq!(stall.syncing_ns, 9 * SEC, "its host waits on it too, in a sync");
        assert_eq!(stall.waiting_ranks, [0, 1, 2]);
    }

    #[test]
    fn a_stall_is_judged_as_of_the_last_complete_hand_over_and_shown_as_of_now() {
        let mut views: Vec<DeviceView> = (0..4).map(|r| in_collective(r, 41, true)).collect();
        views[3].oldest =
            Some(Unfinished { kernel: Some("sim_bwd_0".into()), stage: None, t_launch_ns: 89 * SEC, collective: None });
        // CUPTI last handed over everything before the kernel had run a second: it may
        // have ended since, its record kept back behind another kernel's.
        for v in &mut views {
            v.complete_ns = Some(89 * SEC + SEC / 2);
        }
        assert_eq!(device_stall(&views, SEC), None);
        // A forced flush later: still unfinished then, and 11 s old now.
        for v in &mut views {
            v.complete_ns = Some(95 * SEC);
        }
        let stall = device_stall(&views, SEC).expect("stuck as of the flush");
        assert_eq!((stall.rank, stall.unfinished_ns), (3, 11 * SEC));
    }

    #[test]
    fn a_host_waiting_long_on_its_device_is_seen_with_the_kernel_when_the_evidence_is_complete() {
        // One rank, its host in a synchronization for 9 s behind a kernel launched 11 s ago.
        let mut view = in_collective(0, 41, true);
        view.oldest =
            Some(Unfinished { kernel: Some("spin".into()), stage: None, t_launch_ns: 89 * SEC, collective: None });
        view.complete_ns = Some(99 * SEC);
        let waits = device_waits(std::slice::from_ref(&view), SEC);
        assert_eq!(waits, [DeviceWait { rank: 0, syncing_ns: 9 * SEC, kernel: Some((Some("spin".into()), 11 * SEC)) }]);
        // No complete hand-over since the launch: the host's wait is known, the kernel not.
        view.complete_ns = Some(0);
        assert_eq!(device_waits(std::slice::from_ref(&view), SEC)[0].kernel, None);
        // A short wait is no observation.
        view.sync_since_ns = 99 * SEC + SEC / 2;
        assert!(device_waits(&[view], SEC).is_empty());
    }

    #[test]
    fn ranks_blocked_in_a_sync_are_waiting_not_guilty() {
        // Rank 1's host has not launched #41 (it is behind on the host): the host's
        // analysis names it; the devices name nobody, least of all the syncing ranks.
        let mut views: Vec<DeviceView> = (0..4).map(|r| in_collective(r, 41, true)).collect();
        views[1] = DeviceView { oldest: None, sync_since_ns: 0, launched: vec![(COMM, 40)], ..views[1].clone() };
        assert_eq!(device_stall(&views, SEC), None);
        // Every device is in the collective: nobody is behind on the device either.
        let all: Vec<DeviceView> = (0..4).map(|r| in_collective(r, 41, true)).collect();
        assert_eq!(device_stall(&all, SEC), None);
    }

    #[test]
    fn a_device_still_making_progress_is_not_stuck() {
        let mut views: Vec<DeviceView> = (0..4).map(|r| in_collective(r, 41, true)).collect();
        views[3].oldest = Some(Unfinished { kernel: None, stage: None, t_launch_ns: 89 * SEC, collective: None });
        views[3].changed_ns = 99 * SEC + SEC / 2;
        assert_eq!(device_stall(&views, SEC), None, "it completed work half a second ago");
        views[3].changed_ns = 95 * SEC;
        assert_eq!(device_stall(&views, SEC).map(|s| s.rank), Some(3));
    }

    #[test]
    fn a_device_past_the_collective_proves_its_peers_states_stale() {
        let mut views: Vec<DeviceView> = (0..3).map(|r| in_collective(r, 1, true)).collect();
        views[0].oldest = Some(Unfinished {
            kernel: Some("ncclDevKernel_AllGather_RING_LL".into()),
            stage: None,
            t_launch_ns: 89 * SEC,
            collective: Some((COMM, 2, NcclOp::AllGather)),
        });
        views[0].launched = vec![(COMM, 2)];
        assert_eq!(device_stall(&views, SEC), None);
    }

    #[test]
    fn a_member_neither_waiting_nor_stuck_leaves_nothing_certain() {
        let mut views: Vec<DeviceView> = (0..3).map(|r| in_collective(r, 1, true)).collect();
        views[2].oldest = Some(Unfinished { kernel: None, stage: None, t_launch_ns: 89 * SEC, collective: None });
        // Rank 0's device shows nothing unfinished: it is not waiting, nor stuck.
        views[0].oldest = None;
        assert_eq!(device_stall(&views, SEC), None);
    }

    #[test]
    fn a_young_wait_is_the_skew_of_a_healthy_job() {
        let mut views: Vec<DeviceView> = (0..4).map(|r| in_collective(r, 41, false)).collect();
        views[3].oldest = Some(Unfinished { kernel: None, stage: None, t_launch_ns: 89 * SEC, collective: None });
        assert_eq!(device_stall(&views, 20 * SEC), None);
    }

    #[test]
    fn a_stall_younger_than_the_evidence_lag_is_not_judged() {
        let mut views: Vec<DeviceView> = (0..4).map(|r| in_collective(r, 41, true)).collect();
        views[3].oldest = Some(Unfinished { kernel: None, stage: None, t_launch_ns: 89 * SEC, collective: None });
        views[3].changed_ns = 89 * SEC;
        // 10 s old, a 1 s threshold: stuck, unless completions arrive up to 12 s late.
        assert_eq!(device_stall(&views, SEC).map(|s| s.rank), Some(3));
        views[1].evidence_lag_ns = 12 * SEC;
        assert_eq!(device_threshold_ns(&views, SEC), 12 * SEC);
        assert_eq!(device_stall(&views, SEC), None);
        views[1].evidence_lag_ns = SEC / 2;
        assert_eq!(device_threshold_ns(&views, SEC), SEC, "a lag under the threshold changes nothing");
        assert_eq!(device_stall(&views, SEC).map(|s| s.rank), Some(3));
    }
}
