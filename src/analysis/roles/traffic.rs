//! What each communicator carries: calls per kind of operation, and each member's calls
//! in order (for where they fall between pipeline exchanges).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::core::log::nccl_op::NcclOp;

/// One NCCL call on a communicator, as the roles analysis needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub comm_id: u64,
    pub op: NcclOp,
    /// A send's or receive's peer, as a rank of the communicator; else -1.
    pub peer: i32,
}

impl Call {
    pub fn is_p2p(&self) -> bool {
        matches!(self.op, NcclOp::Send | NcclOp::Recv)
    }
}

/// Calls on one communicator, all members together, per kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Traffic {
    pub allreduce: u64,
    pub reduce_scatter: u64,
    pub all_gather: u64,
    pub broadcast: u64,
    pub alltoall: u64,
    pub send: u64,
    pub recv: u64,
    /// reduce, gather, scatter and the one-sided calls.
    pub other: u64,
}

impl Traffic {
    pub fn add(&mut self, op: NcclOp) {
        use NcclOp::*;
        let slot = match op {
            AllReduce | AllReduceConfig => &mut self.allreduce,
            ReduceScatter | ReduceScatterConfig => &mut self.reduce_scatter,
            AllGather | AllGatherConfig => &mut self.all_gather,
            Broadcast | Bcast | BroadcastConfig => &mut self.broadcast,
            AlltoAll | AlltoAllConfig => &mut self.alltoall,
            Send => &mut self.send,
            Recv => &mut self.recv,
            Reduce | ReduceConfig | Gather | GatherConfig | Scatter | ScatterConfig | PutSignal | Signal
            | WaitSignal => &mut self.other,
            _ => return,
        };
        *slot += 1;
    }

    pub fn p2p(&self) -> u64 {
        self.send + self.recv
    }

    pub fn total(&self) -> u64 {
        self.allreduce
            + self.reduce_scatter
            + self.all_gather
            + self.broadcast
            + self.alltoall
            + self.p2p()
            + self.other
    }

    /// Only allreduces (at least one).
    pub fn allreduce_only(&self) -> bool {
        self.allreduce > 0 && self.allreduce == self.total()
    }
}

/// Per communicator, its traffic from every rank's calls.
pub fn per_comm<'a>(calls: impl IntoIterator<Item = &'a [Call]>) -> BTreeMap<u64, Traffic> {
    let mut traffic: BTreeMap<u64, Traffic> = BTreeMap::new();
    for rank_calls in calls {
        for call in rank_calls.iter().filter(|c| c.comm_id != 0) {
            traffic.entry(call.comm_id).or_default().add(call.op);
        }
    }
    traffic
}

/// Of the stretches between one rank's pipeline exchanges (runs of send/recv calls on
/// the communicators in `p2p_comms`, and before the first and after the last), how many
/// hold a call on `comm`, and how many there are.
pub fn stretches_with(calls: &[Call], comm: u64, p2p_comms: &[u64]) -> (u64, u64) {
    let (mut with, mut total) = (0, 1);
    let (mut current_has, mut in_exchange) = (false, false);
    for call in calls {
        if call.is_p2p() && p2p_comms.contains(&call.comm_id) {
            if !in_exchange {
                with += u64::from(current_has);
                total += 1;
                current_has = false;
            }
            in_exchange = true;
        } else {
            // Any other call is work between exchanges: the next exchange starts a stretch.
            current_has |= call.comm_id == comm;
            in_exchange = false;
        }
    }
    with += u64::from(current_has);
    (with, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(comm_id: u64, op: NcclOp) -> Call {
        Call { comm_id, op, peer: -1 }
    }

    #[test]
    fn stretches_count_runs_of_exchanges_as_one_boundary() {
        let (tp, dp, pp) = (1, 2, 3);
        let calls = [
            call(tp, NcclOp::AllReduce),
            call(pp, NcclOp::Send),
            call(pp, NcclOp::Recv),
            call(tp, NcclOp::AllReduce),
            call(pp, NcclOp::Send),
            call(dp, NcclOp::ReduceScatter),
        ];
        assert_eq!(stretches_with(&calls, tp, &[pp]), (2, 3));
        assert_eq!(stretches_with(&calls, dp, &[pp]), (1, 3));
    }

    #[test]
    fn traffic_sorts_calls_by_kind() {
        let mut t = Traffic::default();
        for op in [NcclOp::AllReduce, NcclOp::AllReduceConfig, NcclOp::GroupStart, NcclOp::Send] {
            t.add(op);
        }
        assert_eq!((t.allreduce, t.send, t.total()), (2, 1, 3));
        assert!(!t.allreduce_only());
    }
}
