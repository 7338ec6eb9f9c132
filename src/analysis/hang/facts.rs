//! What one rank's log says about where the rank is: its counters on each communicator,
//! the calls it is blocked in, and how long it has been silent.

use std::collections::BTreeMap;

use super::RankInput;
use crate::analysis::log::liveness::Liveness;
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::records::NcclCall;

pub(super) struct Facts {
    /// How long before the reader's now the instant the log describes is: 0 while the rank
    /// beats, the heartbeat's age once it stopped.
    pub known_ago_ns: u64,
    pub memberships: Vec<Membership>,
    pub waits: Vec<Wait>,
    /// At least this long without a sign of progress (a call entered or returned).
    pub silent_ns: Option<u64>,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Membership {
    /// The counters are up to date: from the live table, or from records read after the
    /// rank's last call. Stale ones cannot say the rank is behind.
    pub current: bool,
    pub comm_id: u64,
    pub comm_rank: i32,
    pub nranks: i32,
    pub coll_entered: u64,
    pub coll_returned: u64,
    pub p2p_entered: u64,
    pub p2p_returned: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum WaitKind {
    Coll,
    /// The communicator ranks it exchanges with, when the records name them.
    P2p {
        peers: Option<Vec<i32>>,
    },
}

/// A call the rank is blocked in.
#[derive(Clone, Debug)]
pub(super) struct Wait {
    pub comm_id: u64,
    pub comm_rank: i32,
    pub kind: WaitKind,
    pub seq: u64,
    pub op: Option<NcclOp>,
    pub age_ns: u64,
    /// Inferred: the thread is inside `ncclGroupEnd` of a group holding this call.
    pub grouped: bool,
}

/// Newest collective and send/recv sequence numbers the records hold per communicator.
fn newest_seqs(calls: &[NcclCall]) -> BTreeMap<u64, (u64, u64)> {
    let mut newest: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for c in calls.iter().filter(|c| c.comm_id != 0 && c.seq != 0) {
        let entry = newest.entry(c.comm_id).or_default();
        if c.op.is_collective() {
            entry.0 = entry.0.max(c.seq);
        } else if c.op.is_p2p() {
            entry.1 = entry.1.max(c.seq);
        }
    }
    newest
}

impl Facts {
    pub fn of(input: &RankInput) -> Facts {
        let live = input.liveness == Liveness::Live;
        // The instant the log describes, on the rank's clock: the reader's now while it
        // beats, its last heartbeat once it stopped.
        let known_ns = if live { input.now_ns } else { Some(input.heartbeat_mono_ns).filter(|&hb| hb != 0) };
        let known_ago_ns = if live { 0 } else { input.heartbeat_age_ns.unwrap_or(u64::MAX) };
        let newest = newest_seqs(&input.calls);
        let memberships = memberships(input, &newest);
        let mut waits = Vec::new();
        let mut activity = input.calls.iter().map(|c| c.t_exit_ns).chain(input.created.iter().map(|c| c.t_ns)).max();
        for row in &input.comms {
            let Some(inflight) = row.inflight.as_ref() else { continue };
            activity = activity.max(Some(inflight.since_mono_ns));
            // The op decides; without a known op, the counters do.
            let coll = inflight.op.map_or(row.coll_entered > row.coll_returned, NcclOp::is_collective);
            let p2p = inflight.op.map_or(row.p2p_entered > row.p2p_returned, NcclOp::is_p2p);
            // A call in flight is the one after the last returned: the entered counter may
            // be read a moment before the call stores it.
            let (kind, seq) = match (coll, p2p) {
                (true, _) => (WaitKind::Coll, row.coll_returned + 1),
                (false, true) => (WaitKind::P2p { peers: None }, row.p2p_returned + 1),
                _ => continue,
            };
            let Some(known) = known_ns else { continue };
            waits.push(Wait {
                comm_id: row.comm_id,
                comm_rank: row.rank,
                kind,
                seq,
                op: inflight.op,
                age_ns: known.saturating_sub(inflight.since_mono_ns),
                grouped: false,
            });
        }
        let groups = open_groups(&input.calls);
        if input.history_complete && known_ns.is_some() {
            for group in &groups {
                // A dropped event may be the ncclGroupEnd; otherwise, drained after the
                // group's last call without its ncclGroupEnd, the thread was inside the
                // group at least until that drain.
                let dropped = input.newest_drop_ns.is_some_and(|d| d >= group.opened_ns);
                if dropped || group.since_ns >= input.drained_ns {
                    continue;
                }
                activity = activity.max(Some(group.since_ns));
                let age_ns = input.drained_ns - group.since_ns;
                waits.extend(group_waits(&group.calls, &memberships, age_ns));
            }
        }
        // Silence is a lower bound, so that it never makes a hang up. A call the table
        // counts but the records do not hold, or records committed since they were read,
        // mean progress after them, maybe a moment ago: no silence. Otherwise the table,
        // read after the clock, says no collective or send/recv came since the newest
        // record; only the ncclGroupEnd of a group holding such calls, which no counter
        // sees, could have blocked and returned unseen, so with one open (or records lost)
        // silence counts only up to the drain.
        let unflushed = input.comms.iter().any(|row| {
            let (coll, p2p) = newest.get(&row.comm_id).copied().unwrap_or_default();
            row.coll_returned > coll || row.p2p_returned > p2p
        });
        let group_may_block = groups.iter().any(|g| !g.calls.is_empty());
        let sure_until = if group_may_block || !input.history_complete { Some(input.drained_ns) } else { known_ns };
        let silent_ns = match sure_until.filter(|&t| t != 0 && input.drained_ns != 0) {
            Some(_) if unflushed || input.records_stale => Some(0),
            Some(until) => activity.map(|last| until.saturating_sub(last)),
            None => None,
        };
        Facts { known_ago_ns, memberships, waits, silent_ns }
    }
}

/// One row per live-table slot, then one per communicator only the records know (destroyed,
/// or beyond a full table), with counters from the newest records.
fn memberships(input: &RankInput, newest: &BTreeMap<u64, (u64, u64)>) -> Vec<Membership> {
    let mut rows: Vec<Membership> = input
        .comms
        .iter()
        .map(|row| Membership {
            current: true,
            comm_id: row.comm_id,
            comm_rank: row.rank,
            nranks: row.nranks,
            coll_entered: row.coll_entered,
            coll_returned: row.coll_returned,
            p2p_entered: row.p2p_entered,
            p2p_returned: row.p2p_returned,
        })
        .collect();
    let mut from_records: BTreeMap<u64, Membership> = BTreeMap::new();
    let blank = |comm_id| Membership {
        current: !input.records_stale,
        comm_id,
        comm_rank: -1,
        nranks: -1,
        coll_entered: 0,
        coll_returned: 0,
        p2p_entered: 0,
        p2p_returned: 0,
    };
    for created in &input.created {
        let m = from_records.entry(created.comm_id).or_insert_with(|| blank(created.comm_id));
        (m.comm_rank, m.nranks) = (created.rank, created.nranks);
    }
    for (&comm_id, &(coll, p2p)) in newest {
        let m = from_records.entry(comm_id).or_insert_with(|| blank(comm_id));
        (m.coll_entered, m.coll_returned, m.p2p_entered, m.p2p_returned) = (coll, coll, p2p, p2p);
    }
    rows.extend(from_records.into_values().filter(|m| !input.comms.iter().any(|row| row.comm_id == m.comm_id)));
    rows
}

struct OpenGroup<'a> {
    /// When its first call entered.
    opened_ns: u64,
    /// When its last call returned.
    since_ns: u64,
    calls: Vec<&'a NcclCall>,
}

fn depth_after(call: &NcclCall) -> u16 {
    match call.op {
        NcclOp::GroupStart if call.result == 0 => call.group_depth + 1,
        // NCCL decrements its depth before it checks the group's error (src/group.cc), so
        // an end that failed has closed the group as well; only an end outside any group
        // (depth 0) changes nothing.
        op if op.ends_group() => call.group_depth.saturating_sub(1),
        _ => call.group_depth,
    }
}

/// Threads whose newest record leaves a `ncclGroupStart` unclosed, with the calls of that
/// group. Calls inside a group return at once; the group blocks in `ncclGroupEnd`, which
/// has no communicator and so no slot in the live table.
fn open_groups(calls: &[NcclCall]) -> Vec<OpenGroup<'_>> {
    let mut newest_by_thread: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, call) in calls.iter().enumerate() {
        newest_by_thread.insert(call.tid, i);
    }
    let mut groups = Vec::new();
    for (&tid, &newest) in &newest_by_thread {
        if depth_after(&calls[newest]) == 0 {
            continue;
        }
        let mut members = Vec::new();
        let mut opened_ns = calls[newest].t_enter_ns;
        for call in calls[..=newest].iter().rev().filter(|c| c.tid == tid) {
            // Up to the outermost ncclGroupStart, or a call outside any group if that was lost.
            if call.group_depth == 0 && call.op != NcclOp::GroupStart {
                break;
            }
            opened_ns = call.t_enter_ns;
            if call.group_depth == 0 {
                break;
            }
            if call.comm_id != 0 && (call.op.is_collective() || call.op.is_p2p()) {
                members.push(call);
            }
        }
        members.reverse();
        groups.push(OpenGroup { opened_ns, since_ns: calls[newest].t_exit_ns, calls: members });
    }
    groups
}

/// One wait per communicator the group touches: its newest collective, and its
/// sends/receives with the peers they name.
fn group_waits(calls: &[&NcclCall], memberships: &[Membership], age_ns: u64) -> Vec<Wait> {
    let mut by_comm: BTreeMap<u64, Vec<&NcclCall>> = BTreeMap::new();
    for call in calls {
        by_comm.entry(call.comm_id).or_default().push(call);
    }
    let mut waits = Vec::new();
    for (comm_id, calls) in by_comm {
        let comm_rank = memberships.iter().find(|m| m.comm_id == comm_id).map_or(-1, |m| m.comm_rank);
        let wait = |kind, last: &NcclCall| Wait {
            comm_id,
            comm_rank,
            kind,
            seq: last.seq,
            op: Some(last.op),
            age_ns,
            grouped: true,
        };
        if let Some(last) = calls.iter().filter(|c| c.op.is_collective()).max_by_key(|c| c.seq) {
            waits.push(wait(WaitKind::Coll, last));
        }
        if let Some(last) = calls.iter().filter(|c| c.op.is_p2p()).max_by_key(|c| c.seq) {
            let mut peers: Vec<i32> = calls.iter().filter(|c| c.op.is_p2p() && c.peer >= 0).map(|c| c.peer).collect();
            peers.sort_unstable();
            peers.dedup();
            waits.push(wait(WaitKind::P2p { peers: Some(peers) }, last));
        }
    }
    waits
}

/// How long every live rank has been outside NCCL, when that is longer than the threshold.
pub(super) fn quiet_ns(ranks: &[RankInput], facts: &[Facts], threshold_ns: u64) -> Option<u64> {
    let live: Vec<&Facts> =
        ranks.iter().zip(facts).filter(|(r, _)| r.liveness == Liveness::Live).map(|(_, f)| f).collect();
    if live.is_empty() || live.iter().any(|f| !f.waits.is_empty()) {
        return None;
    }
    let quiet = live.iter().map(|f| f.silent_ns).collect::<Option<Vec<u64>>>()?.into_iter().min()?;
    (quiet > threshold_ns).then_some(quiet)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::hang::testkit::*;

    #[test]
    fn a_call_in_flight_is_a_wait_aged_on_the_ranks_own_clock() {
        let mut r = rank(3, 8);
        (r.heartbeat_mono_ns, r.drained_ns, r.now_ns) = (10 * SEC, 10 * SEC, Some(10 * SEC + SEC / 10));
        r.heartbeat_age_ns = Some(SEC / 10);
        history(&mut r, 4, SEC, SEC);
        in_flight(&mut r, WORLD, 4, NcclOp::AllReduce, 9 * SEC);
        let f = Facts::of(&r);
        assert_eq!((f.known_ago_ns, f.waits.len()), (0, 1));
        let w = &f.waits[0];
        assert_eq!(
            (w.kind.clone(), w.seq, w.op, w.age_ns),
            (WaitKind::Coll, 5, Some(NcclOp::AllReduce), SEC + SEC / 10)
        );
        assert_eq!(f.silent_ns, Some(SEC + SEC / 10), "since entering the call");
    }

    #[test]
    fn a_dead_ranks_log_speaks_of_its_last_heartbeat() {
        let mut r = rank(1, 2);
        r.liveness = Liveness::Dead;
        (r.heartbeat_mono_ns, r.drained_ns) = (10 * SEC, 10 * SEC);
        r.heartbeat_age_ns = Some(3600 * SEC);
        r.calls = vec![coll(WORLD, 1, NcclOp::AllReduce, 7 * SEC)];
        let f = Facts::of(&r);
        assert_eq!(f.known_ago_ns, 3600 * SEC);
        assert_eq!(f.silent_ns, Some(3 * SEC - CALL_NS), "silent for 3 s when it last beat");
    }

    #[test]
    fn a_call_returned_but_not_yet_drained_counts_as_recent_progress() {
        let mut r = rank(0, 2);
        (r.heartbeat_mono_ns, r.drained_ns, r.heartbeat_age_ns) = (10 * SEC, 10 * SEC, Some(SEC / 20));
        r.now_ns = Some(10 * SEC + SEC / 20);
        r.calls = vec![coll(WORLD, 1, NcclOp::AllReduce, SEC)];
        returned(&mut r, WORLD, 2);
        assert_eq!(Facts::of(&r).silent_ns, Some(0));
        returned(&mut r, WORLD, 1);
        assert_eq!(Facts::of(&r).silent_ns, Some(9 * SEC + SEC / 20 - CALL_NS));
        r.records_stale = true;
        assert_eq!(Facts::of(&r).silent_ns, Some(0), "it committed records since they were read");
    }

    #[test]
    fn an_open_group_is_a_wait_in_group_end_for_each_of_its_peers() {
        let mut r = rank(4, 8);
        (r.heartbeat_mono_ns, r.drained_ns, r.heartbeat_age_ns, r.now_ns) =
            (11 * SEC, 10 * SEC, Some(0), Some(11 * SEC));
        let t = 8 * SEC;
        r.calls = vec![group_start(t), p2p(WORLD, 7, NcclOp::Send, 5, t + 10), p2p(WORLD, 8, NcclOp::Recv, 3, t + 20)];
        returned(&mut r, WORLD, 0);
        let f = Facts::of(&r);
        assert_eq!(f.waits.len(), 1);
        let w = &f.waits[0];
        assert_eq!(w.kind, WaitKind::P2p { peers: Some(vec![3, 5]) });
        assert!(w.grouped);
        assert_eq!((w.seq, w.age_ns), (8, 2 * SEC - 20 - CALL_NS));
        assert_eq!(f.silent_ns, Some(w.age_ns), "its ncclGroupEnd may have returned after the drain, unseen");

        r.calls.push(group_end(t + 30));
        assert!(Facts::of(&r).waits.is_empty(), "a closed group waits for nothing");
        r.calls.last_mut().unwrap().result = 4;
        assert!(Facts::of(&r).waits.is_empty(), "a failed ncclGroupEnd closed the group too (src/group.cc)");
        r.calls.last_mut().unwrap().op = NcclOp::GroupSimulateEnd;
        assert!(Facts::of(&r).waits.is_empty(), "ncclGroupSimulateEnd closes a group");
        r.calls.pop();
        r.calls.truncate(1);
        let f = Facts::of(&r);
        assert!(f.waits.is_empty(), "a group holding no call yet is being built, not waited in");
        assert_eq!(f.silent_ns, Some(3 * SEC - CALL_NS), "its ncclGroupEnd cannot block: silent until now");
        r.calls.extend([p2p(WORLD, 7, NcclOp::Send, 5, t + 10), p2p(WORLD, 8, NcclOp::Recv, 3, t + 20)]);
        r.newest_drop_ns = Some(t + 5 * SEC / 10);
        assert!(Facts::of(&r).waits.is_empty(), "a dropped ncclGroupEnd must not look like a wait");
        r.newest_drop_ns = Some(t - 1);
        assert_eq!(Facts::of(&r).waits.len(), 1, "drops before the group do not matter");
        r.history_complete = false;
        assert!(Facts::of(&r).waits.is_empty(), "nor a torn one");
        r.history_complete = true;
        r.drained_ns = t + 20;
        assert!(Facts::of(&r).waits.is_empty(), "its ncclGroupEnd may have returned after the drain");
    }

    #[test]
    fn memberships_come_from_the_table_then_the_records() {
        let mut r = rank(2, 4);
        r.created.push(created(0xdead, 1, 2));
        r.calls = vec![coll(0xdead, 1, NcclOp::AllReduce, SEC), coll(0xdead, 2, NcclOp::AllReduce, 2 * SEC)];
        let f = Facts::of(&r);
        let destroyed = f.memberships.iter().find(|m| m.comm_id == 0xdead).unwrap();
        assert_eq!((destroyed.comm_rank, destroyed.nranks, destroyed.coll_entered), (1, 2, 2));
        assert!(destroyed.current);
        assert_eq!(f.memberships.iter().filter(|m| m.comm_id == WORLD).count(), 1, "the table row only");
        r.records_stale = true;
        let f = Facts::of(&r);
        assert!(!f.memberships.iter().find(|m| m.comm_id == 0xdead).unwrap().current);
        assert!(f.memberships.iter().find(|m| m.comm_id == WORLD).unwrap().current, "the table is read after");
    }
}
