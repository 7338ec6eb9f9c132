//! A hang whose waiters are on the devices and whose culprit is a host: NCCL's calls return
//! once enqueued, so when one rank's host stops before launching a send, a receive or a
//! collective, its peers' devices spin in the matching kernel and their hosts block later
//! in synchronizations, short of their own next calls. Counted on the hosts, those peers
//! look like ranks that never entered the calls after (a pipeline's stages behind the
//! missing send, their data-parallel peers waiting for them): the host's analysis would
//! name a waiter.
//!
//! Followed on the devices instead: every device stuck in an NCCL kernel waits for the
//! members of that communicator whose hosts have not launched the call; such a member whose
//! own device waits in an NCCL kernel too, or whose host waits in a synchronization with
//! its device, is itself a link of the chain. The rank at its head, whose host stopped
//! somewhere else, holds the job up.

use super::device::{device_threshold_ns, DeviceView};
use crate::core::log::nccl_op::NcclOp;

/// The host at the head of a chain of device waits.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceChain {
    /// The ranks whose hosts never launched a call some device waits in, and wait for
    /// nothing themselves.
    pub culprits: Vec<i32>,
    /// The call the first culprit never launched: communicator, sequence, and the kind
    /// of kernel its peer waits in (`Send`/`Recv` for a pipeline's exchange).
    pub comm_id: u64,
    pub seq: u64,
    pub op: NcclOp,
    /// The ranks whose devices wait in that call (the culprit's direct peers).
    pub peers: Vec<i32>,
    /// Every rank whose device has waited in an NCCL kernel past the threshold.
    pub waiting_ranks: Vec<i32>,
}

/// The head of the job's chain of device waits, if one host is it: `None` when no device
/// waits in an NCCL kernel past the device threshold, or when every member any of them
/// waits for is a waiter too (a cycle, or a wedged collective: the other analyses' case).
pub fn device_chain(views: &[DeviceView], threshold_ns: u64) -> Option<DeviceChain> {
    let threshold_ns = device_threshold_ns(views, threshold_ns);
    // (rank, the NCCL call its device has been stuck in past the threshold)
    let stuck: Vec<(i32, (u64, u64, NcclOp))> = views
        .iter()
        .filter_map(|v| {
            let oldest = v.oldest.as_ref()?;
            let call = oldest.collective?;
            (v.known_age_ns(oldest.t_launch_ns)? >= threshold_ns).then_some((v.rank, call))
        })
        .collect();
    if stuck.is_empty() {
        return None;
    }
    let waits_itself = |v: &DeviceView| {
        stuck.iter().any(|(rank, _)| *rank == v.rank) || v.syncing_ns().is_some_and(|ns| ns >= threshold_ns)
    };
    // Per held call, who holds it: a send/recv waits for its peer alone (each rank numbers
    // its own sends and receives: their sequences say nothing across ranks), a
    // collective for the members whose hosts never launched it. Those that wait for
    // nothing themselves head the chain.
    let mut heads: Vec<(i32, (u64, u64, NcclOp), i32)> = Vec::new();
    for &(waiter, (comm_id, seq, op)) in &stuck {
        let peer = views.iter().find(|v| v.rank == waiter).and_then(|v| v.oldest_peer);
        for v in views.iter().filter(|v| v.rank != waiter) {
            let holds = match (op.is_p2p(), peer) {
                (true, Some(peer)) => v.is_member(comm_id, peer),
                (true, None) => false,
                (false, _) => v.launched_of(comm_id, op).is_some_and(|n| n < seq),
            };
            if holds && !waits_itself(v) {
                heads.push((v.rank, (comm_id, seq, op), waiter));
            }
        }
    }
    // The pipeline's exchange first (its peer waits for this very host), then the lowest
    // rank: one call to name, every culprit listed.
    heads.sort_by_key(|&(rank, (_, seq, op), _)| (!op.is_p2p(), rank, seq));
    let &(_, (comm_id, seq, op), _) = heads.first()?;
    let mut culprits: Vec<i32> = heads.iter().map(|h| h.0).collect();
    culprits.sort_unstable();
    culprits.dedup();
    let mut peers: Vec<i32> =
        heads.iter().filter(|h| h.1 == (comm_id, seq, op) && h.0 == heads[0].0).map(|h| h.2).collect();
    peers.sort_unstable();
    peers.dedup();
    let mut waiting_ranks: Vec<i32> = stuck.iter().map(|s| s.0).collect();
    waiting_ranks.sort_unstable();
    Some(DeviceChain { culprits, comm_id, seq, op, peers, waiting_ranks })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::hang::device::Unfinished;

    const SEC: u64 = 1_000_000_000;
    const PP: u64 = 0xa1;
    const TP: u64 = 0xb2;
    const DP: u64 = 0xc3;

    /// A rank at 100 s whose device has been in `call` since 90 s (none: idle), whose
    /// host syncs since 91 s or not, with its hosts' launch counts; its rank in every
    /// communicator is its global rank.
    fn rank(
        rank: i32,
        call: Option<(u64, u64, NcclOp)>,
        syncing: bool,
        coll: &[(u64, u64)],
        p2p: &[(u64, u64)],
    ) -> DeviceView {
        let comms: Vec<(u64, i32)> = coll.iter().chain(p2p).map(|&(c, _)| (c, rank)).collect();
        DeviceView {
            rank,
            now_ns: Some(100 * SEC),
            oldest: call.map(|c| Unfinished {
                kernel: Some("ncclDevKernel_SendRecv".into()),
                stage: None,
                t_launch_ns: 90 * SEC,
                collective: Some(c),
            }),
            changed_ns: 90 * SEC,
            sync_since_ns: if syncing { 91 * SEC } else { 0 },
            launched: coll.to_vec(),
            launched_p2p: p2p.to_vec(),
            comm_ranks: comms,
            oldest_peer: None,
            evidence_lag_ns: 0,
            complete_ns: None,
        }
    }

    #[test]
    fn the_host_that_never_sent_heads_the_chain_not_the_peers_stuck_behind_it() {
        // Rank 1 stopped before its send #25 to rank 5; rank 5's device waits in the
        // receive, rank 4's in the tensor-parallel allreduce rank 5 never reached, rank 6
        // (rank 4's data-parallel peer) in the reduce-scatter rank 4's host never launched,
        // its host syncing. Ranks 4 and 5 count short on the data-parallel communicator:
        // they are waiters, not culprits.
        let mut views = [
            // Rank 1's own tensor- and data-parallel communicators are others.
            rank(1, None, false, &[(TP + 1, 24), (DP + 1, 25)], &[(PP, 24)]),
            rank(5, Some((PP, 25, NcclOp::Recv)), true, &[(TP, 25), (DP, 25)], &[(PP, 25)]),
            rank(4, Some((TP, 25, NcclOp::AllReduce)), true, &[(TP, 25), (DP, 25)], &[]),
            rank(6, Some((DP, 26, NcclOp::ReduceScatter)), true, &[(DP, 26)], &[]),
        ];
        assert_eq!(device_chain(&views, SEC), None, "a receive whose peer the calls do not say names nobody");
        views[1].oldest_peer = Some(1);
        let chain = device_chain(&views, SEC).unwrap();
        assert_eq!(chain.culprits, vec![1]);
        assert_eq!((chain.comm_id, chain.seq, chain.op, chain.peers.clone()), (PP, 25, NcclOp::Recv, vec![5]));
        assert_eq!(chain.waiting_ranks, vec![4, 5, 6]);
    }

    #[test]
    fn a_pipelines_receives_are_followed_peer_by_peer_on_one_communicator() {
        // Four stages on one pipeline communicator (ranks 1, 3, 5, 7): each later stage's
        // device waits in a receive from the stage before; their send/recv counts differ
        // by position, so only the peers say who waits for whom. Rank 1 stopped.
        let mut views = [
            rank(1, None, false, &[], &[(PP, 40)]),
            rank(3, Some((PP, 61, NcclOp::Recv)), true, &[], &[(PP, 61)]),
            rank(5, Some((PP, 63, NcclOp::Recv)), true, &[], &[(PP, 63)]),
            rank(7, Some((PP, 49, NcclOp::Recv)), true, &[], &[(PP, 49)]),
        ];
        for (view, peer) in views.iter_mut().skip(1).zip([1, 3, 5]) {
            view.oldest_peer = Some(peer);
        }
        let chain = device_chain(&views, SEC).unwrap();
        assert_eq!((chain.culprits.clone(), chain.peers.clone(), chain.seq), (vec![1], vec![3], 61));
        assert_eq!(chain.waiting_ranks, vec![3, 5, 7]);
    }

    #[test]
    fn no_head_when_every_member_behind_waits_itself_or_nothing_is_stuck_long_enough() {
        let views = [
            rank(0, Some((DP, 26, NcclOp::ReduceScatter)), true, &[(DP, 26)], &[]),
            rank(2, None, true, &[(DP, 25)], &[]),
        ];
        assert_eq!(device_chain(&views, SEC), None, "rank 2 waits on its own device");
        let young = [
            rank(0, Some((DP, 26, NcclOp::ReduceScatter)), false, &[(DP, 26)], &[]),
            rank(2, None, false, &[(DP, 25)], &[]),
        ];
        assert!(device_chain(&young, SEC).is_some());
        assert_eq!(device_chain(&young, 20 * SEC), None, "10 s stuck is under a 20 s threshold");
    }
}
