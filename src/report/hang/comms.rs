//! `sf hang`'s communicator objects: a stuck communicator, its members and its stuck
//! queue pairs, as the analysis judged them.

use super::*;

fn stuck_qp_report(q: StuckQp) -> StuckQpReport {
    StuckQpReport {
        rank: q.rank,
        source: q.source,
        device: q.device,
        qp_num: q.qp_num,
        in_flight: q.in_flight,
        stuck_s: seconds(q.stuck_ns),
    }
}

pub(super) fn comm_report(c: CommVerdict) -> CommReport {
    CommReport {
        comm_id: c.comm_id,
        nranks: c.nranks,
        stuck_seq: c.stuck_seq,
        stuck_op: c.stuck_op,
        stuck_p2p: c.stuck_p2p,
        stuck_s: c.stuck_ns.map(seconds),
        missing_ranks: c.missing_ranks,
        waiting_ranks: c.waiting_ranks,
        dead_ranks: c.dead_ranks,
        wedged_ranks: c.wedged_ranks,
        slow_ranks: c.slow_ranks,
        stalled_ranks: c.stalled_ranks,
        exited_ranks: c.exited_ranks,
        disabled_ranks: c.disabled_ranks,
        no_log_comm_ranks: c.no_log_comm_ranks,
        mismatches: c.mismatches,
        mismatches_total: c.mismatches_total,
        stuck_qps: c.stuck_qps.into_iter().map(stuck_qp_report).collect(),
        members: c.members.into_iter().map(member_report).collect(),
    }
}

fn member_report(m: Member) -> MemberReport {
    MemberReport {
        rank: m.rank,
        comm_rank: m.comm_rank,
        coll_entered: m.coll_entered,
        coll_returned: m.coll_returned,
        p2p_entered: m.p2p_entered,
        p2p_returned: m.p2p_returned,
        in_flight: m.in_flight.map(|c| MemberCallReport {
            op: c.op,
            comm_seq: c.comm_seq,
            age_s: seconds(c.age_ns),
            grouped: c.grouped,
        }),
    }
}
