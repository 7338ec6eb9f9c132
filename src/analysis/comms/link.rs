//! Which profiler record (`prof_op`) is which preload call (`nccl_call`) on one rank.
//!
//! The two doors see one NCCL call differently. The preload door records the call the
//! application made; the profiler door records what NCCL tells a profiler plugin, and NCCL
//! numbers that per communicator *and per function* (`comm->seqNumber[func]`, src/include/
//! comm.h, src/plugin/profiler.cc at v2.30.7-1), and turns some calls into other work
//! (src/enqueue.cc taskAppend at v2.28.3-1 and v2.30.7-1):
//! - an AlltoAll becomes a Send to and a Recv from every rank, each reported as its own
//!   P2pApi and P2p event named Send or Recv (p2pTaskAppend); no event names AlltoAll, so
//!   the point-to-point ordinals count those Sends and Recvs too;
//! - a Gather (2.28.3) becomes a Send to the root on every rank and, at the root only, a
//!   Recv from every rank (itself included); a Scatter, at the root only, a Send to every
//!   rank, and a Recv from the root on every rank: how many units a call takes depends on
//!   the caller's rank in the communicator;
//! - from NCCL 2.29.2 a Broadcast becomes an AllGatherV task with no task event: only its
//!   CollApi event (ABI v5+) names it;
//! - a copy-engine collective (an AllGather, AlltoAll, Gather or Scatter on symmetric
//!   windows under NCCL_CTA_POLICY_ZERO) is, from 2.29 (v6), one CollApi event named for
//!   the call and a CeColl event, no task; in 2.28 (v5) no event at all. An API record
//!   starts inside its call, so an ordinal whose record starts after the call returned is
//!   kept for the next call.
//!
//! So the link is by (communicator, function, per-function ordinal): each call is expanded
//! into the profiler units NCCL makes of it, and the k-th unit of a function on a
//! communicator is the profiler record of that function whose `seq` is k. From ABI v5 the
//! door records every API call (`api`, with its own per-function ordinal in `seq`); those
//! are the units where a communicator has them, else (v1–v4) the task records, whose
//! collective `seq` is NCCL's seqNumber.
//!
//! Graph capture: from NCCL 2.26.2 (ABI v3) a graph-captured (persistent) plan does not
//! advance seqNumber unless KernelCh events are asked for, yet its Coll event is reported
//! each time the plan runs, with the seqNumber the next call will also get (profiler.cc
//! ncclProfilerStartTaskEvents at v2.26.2-1 and v2.30.7-1; NCCL <= 2.25, v1–v2, advanced
//! it on every run of the plan, so its records link in order). At v3–v4 a repeated
//! (communicator, function, seqNumber) is therefore the mark of a capture: from the
//! earliest call the repeat could belong to, nothing more of that communicator is linked
//! (which call is which can no longer be told). A captured plan that never ran leaves no
//! repeat to see. The v5+ API ordinal counts every call, captured or not, and links on.
//!
//! Communicators are matched by the order in which each first appears (the preload door's
//! `comm_id` is job-wide, NCCL's `commHash` its own): both doors see one thread's calls in
//! the same order.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use crate::core::log::nccl_op::NcclOp;
use crate::core::log::records::{CommCreated, NcclCall, ProfOp};

/// `ncclFunc_t` codes (core::net::profiler's numbering).
const SEND: u8 = 6;
const RECV: u8 = 7;

/// A call of the preload log linked to a record of the profiler: indices into the slices
/// `link` was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    pub call: usize,
    pub prof: usize,
}

/// The function code NCCL's profiler names for a call that stays one unit.
fn func_of(op: NcclOp) -> Option<u8> {
    Some(match op {
        NcclOp::Broadcast | NcclOp::Bcast => 0,
        NcclOp::Reduce => 1,
        NcclOp::AllGather => 2,
        NcclOp::ReduceScatter => 3,
        NcclOp::AllReduce => 4,
        NcclOp::Send => SEND,
        NcclOp::Recv => RECV,
        _ => return None,
    })
}

/// The profiler units (function, how many) NCCL makes of one call on a communicator of
/// `nranks` ranks in which the caller is `rank` (the call's `peer` is a rooted call's
/// root); empty for a call NCCL reports no unit of.
pub fn units(call: &NcclCall, nranks: u32, rank: i32) -> Vec<(u8, u32)> {
    let at_root = rank >= 0 && rank == call.peer;
    match call.op.plain() {
        NcclOp::AlltoAll => vec![(SEND, nranks), (RECV, nranks)],
        NcclOp::Gather if at_root => vec![(SEND, 1), (RECV, nranks)],
        NcclOp::Gather => vec![(SEND, 1)],
        NcclOp::Scatter if at_root => vec![(SEND, nranks), (RECV, 1)],
        NcclOp::Scatter => vec![(RECV, 1)],
        other => func_of(other).map(|f| vec![(f, 1)]).unwrap_or_default(),
    }
}

/// The function code of a copy-engine collective's CollApi record
/// (core::net::profiler's numbering); None for a call the copy engines never run as one.
fn ce_func(op: NcclOp) -> Option<u8> {
    match op.plain() {
        NcclOp::AlltoAll => Some(8),
        NcclOp::Gather => Some(9),
        NcclOp::Scatter => Some(10),
        _ => None,
    }
}

/// Whether a record could be the call's: it did not start after the call returned (a
/// call still in flight has `t_exit_ns` 0).
fn within(p: &ProfOp, call: &NcclCall) -> bool {
    call.t_exit_ns == 0 || p.t_start_ns <= call.t_exit_ns
}

/// Whether a call's units depend on the communicator's size or the caller's rank in it.
fn needs_shape(op: NcclOp) -> bool {
    matches!(op.plain(), NcclOp::AlltoAll | NcclOp::Gather | NcclOp::Scatter)
}

/// Links one rank's preload calls (`calls`, with the `comms` it created) to its profiler
/// records (`ops`). Calls that failed or moved nothing are not linked (NCCL reports no
/// event for them); a unit the profiler did not record (a dropped event, a type it was not
/// asked for) leaves that call's unit unlinked, never linked to another call's record.
pub fn link(calls: &[NcclCall], comms: &[CommCreated], ops: &[ProfOp]) -> Vec<Link> {
    link_all(calls, comms, ops, None).0
}

/// `link`, then `next`: a call that has not returned (the preload door records a call when
/// it returns; one in flight is only in the log's live table, with no count or root).
/// Returns the links and the indices into `ops` of `next`'s profiler records.
pub fn link_with_next(
    calls: &[NcclCall],
    comms: &[CommCreated],
    ops: &[ProfOp],
    next: &NcclCall,
) -> (Vec<Link>, Vec<usize>) {
    link_all(calls, comms, ops, Some(next))
}

fn link_all(
    calls: &[NcclCall],
    comms: &[CommCreated],
    ops: &[ProfOp],
    extra: Option<&NcclCall>,
) -> (Vec<Link>, Vec<usize>) {
    // The profiler's units per communicator: API records where it has any, else tasks.
    let with_api: HashSet<u64> = ops.iter().filter(|p| p.api).map(|p| p.comm_hash).collect();
    let is_unit = |p: &ProfOp| !p.ce && p.api == with_api.contains(&p.comm_hash);
    let mut by_key: HashMap<(u64, u8, u64), usize> = HashMap::new();
    // The smallest repeated (function, seq) per communicator: a graph capture (module doc).
    let mut repeated: HashMap<(u64, u8), u64> = HashMap::new();
    let mut first_seen: Vec<(u64, u64)> = Vec::new(); // (t_start, comm_hash)
    for (i, p) in ops.iter().enumerate().filter(|(_, p)| is_unit(p)) {
        match by_key.entry((p.comm_hash, p.func, p.seq)) {
            Entry::Occupied(_) => {
                let r = repeated.entry((p.comm_hash, p.func)).or_insert(p.seq);
                *r = (*r).min(p.seq);
            }
            Entry::Vacant(v) => {
                v.insert(i);
            }
        }
        match first_seen.iter_mut().find(|(_, h)| *h == p.comm_hash) {
            Some(seen) => seen.0 = seen.0.min(p.t_start_ns),
            None => first_seen.push((p.t_start_ns, p.comm_hash)),
        }
    }
    first_seen.sort();

    let shape: HashMap<u64, (u32, i32)> = comms.iter().map(|c| (c.comm_id, (c.nranks.max(0) as u32, c.rank))).collect();
    let mut order: Vec<usize> = (0..calls.len())
        .filter(|&i| {
            let c = &calls[i];
            c.result == 0 && c.count > 0 && !units(c, 1, -1).is_empty()
        })
        .collect();
    order.sort_by_key(|&i| (calls[i].t_enter_ns, i));
    let mut comm_order: Vec<u64> = Vec::new();
    for id in order.iter().map(|&i| calls[i].comm_id).chain(extra.map(|c| c.comm_id)) {
        if !comm_order.contains(&id) {
            comm_order.push(id);
        }
    }
    let hash_of: HashMap<u64, u64> = comm_order.iter().zip(&first_seen).map(|(&id, &(_, hash))| (id, hash)).collect();

    let mut next: HashMap<(u64, u8), u64> = HashMap::new();
    let mut stopped: HashSet<u64> = HashSet::new();
    let mut links = Vec::new();
    let mut extra_links = Vec::new();
    let extra = extra.map(|c| (usize::MAX, c));
    for (i, call) in order.into_iter().map(|i| (i, &calls[i])).chain(extra) {
        let Some(&hash) = hash_of.get(&call.comm_id) else { continue };
        let (n, rank) = shape.get(&call.comm_id).copied().unwrap_or((0, -1));
        // On the copy engines (v6+) an AlltoAll, Gather or Scatter is one CollApi record
        // named for it: such records exist only for those calls.
        let ce = ce_func(call.op).filter(|&code| {
            let k = next.get(&(hash, code)).copied().unwrap_or(0);
            by_key.get(&(hash, code, k)).is_some_and(|&p| ops[p].api && within(&ops[p], call))
        });
        let units = match ce {
            Some(code) => vec![(code, 1)],
            None if needs_shape(call.op)
                && (n == 0 || (call.op.plain() != NcclOp::AlltoAll && (rank < 0 || call.peer < 0))) =>
            {
                continue; // how many units the call took is not known
            }
            None => units(call, n, rank),
        };
        // A call that may own a repeated ordinal: this communicator links no further.
        let captured = units.iter().any(|&(func, times)| {
            let k = next.get(&(hash, func)).copied().unwrap_or(0);
            repeated.get(&(hash, func)).is_some_and(|&r| r < k + times as u64)
        });
        if captured {
            stopped.insert(hash);
        }
        for (func, times) in units {
            for _ in 0..times {
                let k = next.entry((hash, func)).or_insert(0);
                // An API record starts inside its call: one that starts after this call
                // returned is a later call's, and this call made none (NCCL 2.28 reports no
                // event of a copy-engine collective): the ordinal stays for the next call.
                if by_key.get(&(hash, func, *k)).is_some_and(|&p| ops[p].api && !within(&ops[p], call)) {
                    continue;
                }
                if let Some(&prof) = by_key.get(&(hash, func, *k)).filter(|_| !stopped.contains(&hash)) {
                    match i {
                        usize::MAX => extra_links.push(prof),
                        call => links.push(Link { call, prof }),
                    }
                }
                *k += 1;
            }
        }
    }
    (links, extra_links)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::log::records::CommOrigin;

    fn call(op: NcclOp, comm_id: u64, t: u64) -> NcclCall {
        NcclCall {
            op,
            t_enter_ns: t,
            t_exit_ns: t + 9,
            comm_id,
            seq: 0,
            count: 4,
            bytes: 16,
            stream: 0,
            tid: 1,
            peer: -1,
            dtype: 7,
            redop: 0,
            result: 0,
            group_depth: 0,
        }
    }

    fn prof(func: u8, seq: u64, hash: u64, t: u64, api: bool) -> ProfOp {
        ProfOp {
            t_start_ns: t,
            t_stop_ns: t + 1,
            comm_hash: hash,
            seq,
            count: 4,
            rank: 0,
            peer: -1,
            func,
            dtype: 7,
            algo: 255,
            proto: 255,
            n_channels: 0,
            n_warps: 0,
            abi: 6,
            p2p: func == SEND || func == RECV,
            api,
            ce: false,
        }
    }

    fn comm(comm_id: u64, nranks: i32) -> CommCreated {
        CommCreated {
            t_ns: 0,
            comm_id,
            parent_id: 0,
            rank: 0,
            nranks,
            global_rank: 0,
            color: -1,
            key: -1,
            origin: CommOrigin::InitRank,
        }
    }

    #[test]
    fn an_alltoall_takes_its_sends_and_recvs_and_later_ordinals_move_on() {
        // AlltoAll on 2 ranks, then a Broadcast (API record only, as from NCCL 2.29.2), an
        // AllReduce and one Send: the Send is the profiler's third Send.
        let calls = [
            call(NcclOp::AlltoAll, 77, 10),
            call(NcclOp::Broadcast, 77, 20),
            call(NcclOp::AllReduce, 77, 30),
            call(NcclOp::Send, 77, 40),
        ];
        let h = 0xabc;
        let ops = [
            prof(SEND, 0, h, 11, true),
            prof(RECV, 0, h, 12, true),
            prof(SEND, 1, h, 13, true),
            prof(RECV, 1, h, 14, true),
            prof(SEND, 0, h, 15, false), // tasks: not units where API records exist
            prof(0, 0, h, 21, true),
            prof(4, 0, h, 31, true),
            prof(4, 0, h, 32, false),
            prof(SEND, 2, h, 41, true),
        ];
        let links = link(&calls, &[comm(77, 2)], &ops);
        let of = |call: usize| links.iter().filter(|l| l.call == call).map(|l| l.prof).collect::<Vec<_>>();
        assert_eq!(of(0), vec![0, 2, 1, 3], "N sends, then N recvs (ordinals per function)");
        assert_eq!((of(1), of(2), of(3)), (vec![5], vec![6], vec![8]));
    }

    #[test]
    fn a_call_in_flight_takes_the_units_after_every_returned_call() {
        let calls = [call(NcclOp::AllReduce, 5, 1), call(NcclOp::Send, 5, 2)];
        let ops = [prof(4, 0, 0xa, 1, true), prof(SEND, 0, 0xa, 2, true), prof(4, 1, 0xa, 3, true)];
        let mut next = call(NcclOp::AllReduce, 5, 3);
        next.count = 0; // unknown while in flight
        let (links, next_ops) = link_with_next(&calls, &[comm(5, 2)], &ops, &next);
        assert_eq!((links.len(), next_ops), (2, vec![2]));
    }

    #[test]
    fn gather_and_scatter_take_units_by_the_callers_rank() {
        let mut g = call(NcclOp::Gather, 77, 10);
        g.peer = 1; // root 1
        let mut s = call(NcclOp::ScatterConfig, 77, 20);
        s.peer = 1;
        assert_eq!(units(&g, 3, 1), vec![(SEND, 1), (RECV, 3)], "the root receives from every rank");
        assert_eq!(units(&g, 3, 0), vec![(SEND, 1)]);
        assert_eq!(units(&s, 3, 1), vec![(SEND, 3), (RECV, 1)], "the root sends to every rank");
        assert_eq!(units(&s, 3, 2), vec![(RECV, 1)]);
        // On rank 0 of 2 (not the root), then a Send: the Send is the profiler's second.
        let h = 0xabc;
        let ops = [prof(SEND, 0, h, 11, true), prof(RECV, 0, h, 21, true), prof(SEND, 1, h, 31, true)];
        let mut c0 = comm(77, 2);
        c0.rank = 0;
        let links = link(&[g, s, call(NcclOp::Send, 77, 30)], &[c0], &ops);
        assert_eq!(links, vec![Link { call: 0, prof: 0 }, Link { call: 1, prof: 1 }, Link { call: 2, prof: 2 }]);
        // A rank it does not know: the rooted calls take an unknown number of units.
        let mut unknown = c0;
        unknown.rank = -1;
        assert_eq!(link(&[g], &[unknown], &ops), vec![]);
    }

    #[test]
    fn a_repeated_task_seq_is_a_capture_and_stops_linking_that_communicator() {
        // AllReduce seq 0, then a captured AllReduce whose Coll event repeats the next
        // seqNumber (1), then an uncaptured one (1 again) and an AllGather: only the first
        // call links on that communicator; another communicator links on.
        let calls = [
            call(NcclOp::AllReduce, 5, 1),
            call(NcclOp::AllReduce, 5, 2),
            call(NcclOp::AllReduce, 9, 3),
            call(NcclOp::AllReduce, 5, 4),
            call(NcclOp::AllGather, 5, 5),
            call(NcclOp::AllReduce, 9, 6),
        ];
        let ops = [
            prof(4, 0, 0xa, 1, false),
            prof(4, 1, 0xa, 2, false),
            prof(4, 0, 0xb, 3, false),
            prof(4, 1, 0xa, 4, false),
            prof(2, 0, 0xa, 5, false),
            prof(4, 1, 0xb, 6, false),
        ];
        let links = link(&calls, &[comm(5, 2), comm(9, 2)], &ops);
        assert_eq!(links, vec![Link { call: 0, prof: 0 }, Link { call: 2, prof: 2 }, Link { call: 5, prof: 5 }]);
    }

    #[test]
    fn without_api_records_tasks_link_and_communicators_pair_in_order() {
        let calls = [call(NcclOp::AllReduce, 5, 1), call(NcclOp::AllReduce, 9, 2), call(NcclOp::AllReduce, 5, 3)];
        let ops = [prof(4, 0, 0xa, 1, false), prof(4, 0, 0xb, 2, false), prof(4, 1, 0xa, 3, false)];
        let links = link(&calls, &[comm(5, 2), comm(9, 2)], &ops);
        assert_eq!(links, vec![Link { call: 0, prof: 0 }, Link { call: 1, prof: 1 }, Link { call: 2, prof: 2 }]);
        // A failed call and a missing record link nothing, and shift nothing else.
        let mut failed = call(NcclOp::AllReduce, 5, 0);
        failed.result = 2;
        let calls = [failed, call(NcclOp::AllReduce, 5, 1), call(NcclOp::AllReduce, 5, 3)];
        let links = link(&calls, &[], &[prof(4, 1, 0xa, 3, false)]);
        assert_eq!(links, vec![Link { call: 2, prof: 0 }]);
    }
}
