//! A collective that does not complete though every rank is in it is *wedged*; when one
//! rank's RDMA queue pair holds a work request past the library's timeout (`qp_stuck`
//! evidence not resolved by later completions), that rank and QP are why. This pass turns
//! "every rank wedged" into "rank R's QP is stuck, the others wait for it".

use serde::Serialize;

use super::{Diagnosis, State};

/// A queue pair of one rank with a work request in flight past the timeout, and no
/// completion since.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StuckQp {
    pub rank: i32,
    /// The door that saw it (`profiler`, `verbs`).
    pub source: &'static str,
    pub device: i32,
    pub qp_num: u32,
    /// Post time of its oldest work request in flight, on the rank's clock.
    pub since_ns: u64,
    pub in_flight: u32,
    /// How long that request has been in flight as of the reader's now (or the rank's last
    /// heartbeat, for a rank that is gone).
    pub stuck_ns: u64,
}

/// Points every communicator whose ranks are wedged at the members holding a stuck QP:
/// those become `stuck_qp` (the culprit), the other wedged members `waiting` for them.
/// Communicators with no such member are left as they are.
pub(super) fn blame_stuck_qps(d: &mut Diagnosis, stuck: &[StuckQp]) {
    for comm in &mut d.communicators {
        let holders: Vec<StuckQp> = stuck.iter().filter(|q| comm.wedged_ranks.contains(&q.rank)).copied().collect();
        if holders.is_empty() {
            continue;
        }
        let culprits: Vec<i32> = {
            let mut r: Vec<i32> = holders.iter().map(|q| q.rank).collect();
            r.dedup();
            r
        };
        let waiters: Vec<i32> = comm.wedged_ranks.iter().copied().filter(|r| !culprits.contains(r)).collect();
        for v in d.ranks.iter_mut().filter(|v| comm.wedged_ranks.contains(&v.rank)) {
            let (state, waiting_for) = if culprits.contains(&v.rank) {
                (State::StuckQp, Vec::new())
            } else {
                (State::Waiting, culprits.clone())
            };
            if v.state == State::Wedged {
                v.state = state;
            }
            v.role = state;
            v.waiting_for = waiting_for;
        }
        comm.waiting_ranks.extend(&waiters);
        comm.waiting_ranks.sort_unstable();
        comm.waiting_ranks.dedup();
        comm.wedged_ranks.clear();
        comm.stuck_qps = holders;
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::analysis::hang::{diagnose, RankInput, Settings};
    use crate::core::log::nccl_op::NcclOp;

    const MS: u64 = 1_000_000;
    const STEP: u64 = 100 * MS;

    /// `n` ranks, 20 collectives done one per 100 ms step, all inside #21 for a second.
    fn every_rank_inside_allreduce_21(n: i32, stuck: &[StuckQp]) -> Vec<RankInput> {
        (0..n)
            .map(|r| {
                let mut input = rank(r, n);
                history(&mut input, 20, BEAT - 2 * SEC - 19 * STEP, STEP);
                in_flight(&mut input, WORLD, 20, NcclOp::AllReduce, BEAT - SEC - r as u64 * MS);
                input.stuck_qps = stuck.iter().filter(|q| q.rank == r).copied().collect();
                input
            })
            .collect()
    }

    fn settings() -> Settings {
        Settings { min_stuck_ns: 50 * MS, ..Settings::default() }
    }

    #[test]
    fn the_rank_whose_qp_is_stuck_is_named_and_the_others_wait_for_it() {
        let d = diagnose(&every_rank_inside_allreduce_21(3, &[]), &settings());
        assert_eq!(d.communicators[0].wedged_ranks, [0, 1, 2], "without QP evidence: everyone wedged");
        let qp = StuckQp {
            rank: 1,
            source: "profiler",
            device: 0,
            qp_num: 0x101,
            since_ns: 0,
            in_flight: 1,
            stuck_ns: 40_000_000_000,
        };
        let d = diagnose(&every_rank_inside_allreduce_21(3, &[qp]), &settings());
        let c = &d.communicators[0];
        assert!(c.wedged_ranks.is_empty());
        assert_eq!(c.waiting_ranks, [0, 2]);
        assert_eq!(c.stuck_qps, [qp]);
        let states: Vec<(State, Vec<i32>)> = d.ranks.iter().map(|r| (r.state, r.waiting_for.clone())).collect();
        assert_eq!(
            states,
            [(State::Waiting, vec![1]), (State::StuckQp, vec![]), (State::Waiting, vec![1])],
            "{:?}",
            d.ranks
        );
        assert!(d.hung);
    }

    #[test]
    fn a_stuck_qp_on_a_collective_that_completes_changes_nothing() {
        // Rank 1 is in the collective only 10 ms: a healthy skew, nothing is stuck.
        let qp = StuckQp { rank: 1, source: "verbs", device: 0, qp_num: 1, since_ns: 0, in_flight: 1, stuck_ns: 1 };
        let mut ranks = every_rank_inside_allreduce_21(3, &[qp]);
        returned(&mut ranks[0], WORLD, 21);
        let d = diagnose(&ranks, &settings());
        assert!(!d.hung && d.communicators[0].stuck_qps.is_empty(), "{d:?}");
    }
}
