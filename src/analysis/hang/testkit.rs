//! Synthetic rank inputs for the unit tests: a world communicator, calls that last
//! `CALL_NS`, heartbeats that are fresh unless a test says otherwise.

use super::RankInput;
use crate::analysis::log::liveness::Liveness;
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::reader::{CommLive, InFlight};
use crate::core::log::records::{CommCreated, CommOrigin, NcclCall};

pub const SEC: u64 = 1_000_000_000;
pub const WORLD: u64 = 0x77;
pub const CALL_NS: u64 = 1_000;
/// The heartbeat every rank of `rank()` last beat at, on its clock.
pub const BEAT: u64 = 100 * SEC;

pub fn row(comm_id: u64, rank: i32, nranks: i32) -> CommLive {
    CommLive {
        comm_id,
        rank,
        nranks,
        coll_entered: 0,
        coll_returned: 0,
        p2p_entered: 0,
        p2p_returned: 0,
        inflight: None,
    }
}

pub fn created(comm_id: u64, rank: i32, nranks: i32) -> CommCreated {
    CommCreated {
        t_ns: 1,
        comm_id,
        parent_id: 0,
        rank,
        nranks,
        global_rank: rank,
        color: -1,
        key: -1,
        origin: CommOrigin::InitRank,
    }
}

/// A live rank of `world` on the world communicator, comm rank = global rank, no calls yet.
pub fn rank(rank: i32, world: i32) -> RankInput {
    RankInput {
        rank,
        liveness: Liveness::Live,
        now_ns: Some(BEAT),
        heartbeat_age_ns: Some(0),
        heartbeat_mono_ns: BEAT,
        drained_ns: BEAT,
        comms: vec![row(WORLD, rank, world)],
        created: vec![created(WORLD, rank, world)],
        calls: Vec::new(),
        history_complete: true,
        records_stale: false,
        newest_drop_ns: None,
        stage: None,
        stuck_qps: Vec::new(),
    }
}

pub fn coll(comm_id: u64, seq: u64, op: NcclOp, t_enter_ns: u64) -> NcclCall {
    let rooted = matches!(op, NcclOp::Broadcast | NcclOp::Bcast | NcclOp::Reduce);
    NcclCall {
        op,
        t_enter_ns,
        t_exit_ns: t_enter_ns + CALL_NS,
        comm_id,
        seq,
        count: 1024,
        bytes: 4096,
        stream: 0x10,
        tid: 1,
        peer: if rooted { 0 } else { -1 },
        dtype: 7,
        redop: if matches!(op, NcclOp::AllReduce | NcclOp::Reduce | NcclOp::ReduceScatter) { 0 } else { -1 },
        result: 0,
        group_depth: 0,
    }
}

/// A send or receive inside a group.
pub fn p2p(comm_id: u64, seq: u64, op: NcclOp, peer: i32, t_enter_ns: u64) -> NcclCall {
    NcclCall { peer, group_depth: 1, redop: -1, ..coll(comm_id, seq, op, t_enter_ns) }
}

pub fn group_start(t_enter_ns: u64) -> NcclCall {
    NcclCall { count: 0, dtype: -1, ..coll(0, 0, NcclOp::GroupStart, t_enter_ns) }
}

pub fn group_end(t_enter_ns: u64) -> NcclCall {
    NcclCall { op: NcclOp::GroupEnd, group_depth: 1, ..group_start(t_enter_ns) }
}

fn table_row(r: &mut RankInput, comm_id: u64) -> &mut CommLive {
    r.comms.iter_mut().find(|c| c.comm_id == comm_id).expect("the rank has this communicator")
}

/// The table says: `returned` collectives done, the next one in flight since `since`.
pub fn in_flight(r: &mut RankInput, comm_id: u64, returned: u64, op: NcclOp, since: u64) {
    let row = table_row(r, comm_id);
    (row.coll_entered, row.coll_returned) = (returned + 1, returned);
    row.inflight = Some(InFlight { op: Some(op), since_mono_ns: since });
}

/// The table says: `n` collectives entered and returned, nothing in flight.
pub fn returned(r: &mut RankInput, comm_id: u64, n: u64) {
    let row = table_row(r, comm_id);
    (row.coll_entered, row.coll_returned) = (n, n);
    row.inflight = None;
}

/// Collectives 1..=n on the world communicator, one every `step` ns from `start`, with
/// the table agreeing.
pub fn history(r: &mut RankInput, n: u64, start: u64, step: u64) {
    r.calls = (1..=n).map(|s| coll(WORLD, s, NcclOp::AllReduce, start + (s - 1) * step)).collect();
    returned(r, WORLD, n);
}

/// Inside the `ncclGroupEnd` of a group of sends and receives on `comm_id`, opened at `t`:
/// one call per `(op, peer)`, with the table counting them entered and returned (calls in a
/// group return at once).
pub fn in_group(r: &mut RankInput, comm_id: u64, t: u64, calls: &[(NcclOp, i32)]) {
    let row = table_row(r, comm_id);
    let first = row.p2p_entered + 1;
    row.p2p_entered += calls.len() as u64;
    row.p2p_returned = row.p2p_entered;
    r.calls.push(group_start(t));
    r.calls.extend(calls.iter().zip(first..).map(|(&(op, peer), seq)| p2p(comm_id, seq, op, peer, t + seq * 10)));
}
