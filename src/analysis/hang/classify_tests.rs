//! The classifier on synthetic jobs: every state, threshold and read race it handles.

use super::{diagnose, CommVerdict, Diagnosis, RankInput, Settings, State};
use crate::analysis::hang::testkit::*;
use crate::analysis::log::liveness::Liveness;
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::records::NcclCall;

/// One collective per 100 ms step: the threshold is 150 ms.
const STEP: u64 = SEC / 10;
const DONE: u64 = 20;
const MS: u64 = 1_000_000;

/// `n` ranks that returned from collectives 1..=DONE, one per step, the last one
/// entered `ago` before now.
fn job(n: i32, ago: u64) -> Vec<RankInput> {
    (0..n)
        .map(|r| {
            let mut input = rank(r, n);
            history(&mut input, DONE, BEAT - ago - (DONE - 1) * STEP, STEP);
            input
        })
        .collect()
}

/// Inside collective DONE + 1 since `ago` before now.
fn wait_next(r: &mut RankInput, ago: u64) {
    in_flight(r, WORLD, DONE, NcclOp::AllReduce, BEAT - ago);
}

fn stopped(r: &mut RankInput, liveness: Liveness, ago: u64) {
    r.liveness = liveness;
    (r.heartbeat_mono_ns, r.drained_ns) = (BEAT - ago, BEAT - ago);
    r.heartbeat_age_ns = Some(ago);
}

fn world(d: &Diagnosis) -> &CommVerdict {
    d.communicators.iter().find(|c| c.comm_id == WORLD).unwrap()
}

fn states(d: &Diagnosis) -> Vec<State> {
    d.ranks.iter().map(|r| r.state).collect()
}

/// The fixtures' steps are 100 ms: the production floor (0.25 s) would hide the
/// cadence rule these tests exercise.
fn diag(ranks: &[RankInput]) -> Diagnosis {
    let d = diagnose(ranks, &Settings { min_stuck_ns: 50 * MS, ..Settings::default() });
    assert_eq!(d.threshold.threshold_ns, 150 * MS, "the cadence sets the threshold: {:?}", d.threshold);
    d
}

const OTHERS: [i32; 7] = [0, 1, 2, 3, 4, 6, 7];

#[test]
fn the_rank_that_never_entered_is_missing_and_the_others_wait() {
    let mut ranks = job(8, 1100 * MS);
    for r in ranks.iter_mut().filter(|r| r.rank != 5) {
        wait_next(r, SEC);
    }
    let d = diag(&ranks);
    assert!(d.hung);
    let w = world(&d);
    assert_eq!((w.stuck_seq, w.stuck_op, w.stuck_ns), (Some(DONE + 1), Some(NcclOp::AllReduce), Some(SEC)));
    assert_eq!((w.missing_ranks.as_slice(), w.waiting_ranks.as_slice()), (&[5][..], &OTHERS[..]));
    let five = &d.ranks[5];
    assert_eq!((five.state, five.stuck_ns), (State::Missing, Some(1100 * MS - CALL_NS)));
    let at = five.at.unwrap();
    assert_eq!((at.comm_seq, at.op, at.in_flight), (Some(DONE + 1), Some(NcclOp::AllReduce), false));
    assert_eq!((d.ranks[0].state, d.ranks[0].waiting_for.as_slice()), (State::Waiting, &[5][..]));
    assert!(d.ranks[0].at.unwrap().in_flight);
    assert_eq!(d.ranks[0].stage, None, "no stage markers yet");
}

#[test]
fn skew_is_not_a_hang() {
    // The others entered 50 ms ago; rank 5 returned from the last one 100 ms ago.
    let mut ranks = job(8, STEP);
    for r in ranks.iter_mut().filter(|r| r.rank != 5) {
        wait_next(r, 50 * MS);
    }
    let d = diag(&ranks);
    assert!(!d.hung);
    assert_eq!(world(&d).stuck_seq, None);
    assert!(states(&d).iter().all(|&s| s == State::Ok), "{:?}", states(&d));
}

#[test]
fn a_silent_rank_is_missing_before_the_others_waited_a_threshold() {
    // Rank 5 stopped right after collective DONE; the others only just arrived.
    let mut ranks = job(8, SEC);
    for r in ranks.iter_mut().filter(|r| r.rank != 5) {
        wait_next(r, 10 * MS);
    }
    let d = diag(&ranks);
    assert!(d.hung);
    assert_eq!(world(&d).missing_ranks, [5]);
}

#[test]
fn a_rank_behind_but_busy_elsewhere_is_slow_not_a_hang() {
    let mut ranks = job(8, SEC);
    for r in ranks.iter_mut().filter(|r| r.rank != 5) {
        wait_next(r, 900 * MS);
    }
    // Rank 5 is still working through its tensor-parallel collectives, as it has been
    // every 100 ms, in between the others.
    let five = &mut ranks[5];
    five.comms.push(row(0x99, 0, 1));
    five.calls.extend((0..30).map(|k| coll(0x99, 30 - k, NcclOp::AllGather, BEAT - 10 * MS - k * STEP)));
    five.calls.sort_by_key(|c| c.t_enter_ns);
    (five.comms[1].coll_entered, five.comms[1].coll_returned) = (30, 30);
    let d = diag(&ranks);
    assert!(!d.hung, "the job is progressing");
    let w = world(&d);
    assert_eq!((w.stuck_seq, w.slow_ranks.as_slice()), (Some(DONE + 1), &[5][..]));
    assert_eq!(w.waiting_ranks, OTHERS);
    assert_eq!(d.ranks[5].state, State::Slow);
}

#[test]
fn a_collective_all_entered_that_does_not_complete_is_wedged() {
    let mut ranks = job(4, 2 * SEC);
    for (i, r) in ranks.iter_mut().enumerate() {
        wait_next(r, SEC + i as u64 * MS);
    }
    let d = diag(&ranks);
    assert!(d.hung);
    assert_eq!(world(&d).wedged_ranks, [0, 1, 2, 3]);
    assert_eq!(states(&d), [State::Wedged; 4]);

    // The last one arrived 10 ms ago: the others waited for it, and it may complete now.
    wait_next(&mut ranks[3], 10 * MS);
    let d = diag(&ranks);
    assert!(!d.hung);
    assert!(states(&d).iter().all(|&s| s == State::Ok), "{:?}", states(&d));

    // Rank 3 returned from it (its record is not drained yet): it completed, and the
    // others, a second into it, are on their way out.
    (1..3).for_each(|r| wait_next(&mut ranks[r], SEC));
    returned(&mut ranks[3], WORLD, DONE + 1);
    let d = diag(&ranks);
    assert!(!d.hung, "{:?}", states(&d));
}

#[test]
fn stuck_in_a_call_on_its_own() {
    let mut ranks = job(2, STEP);
    let solo = &mut ranks[0];
    solo.comms.push(row(0x51, 0, 1));
    solo.comms[1].coll_entered = 1;
    solo.comms[1].inflight =
        Some(crate::core::log::reader::InFlight { op: Some(NcclOp::AllReduce), since_mono_ns: BEAT - SEC });
    let d = diag(&ranks);
    assert!(d.hung);
    assert_eq!(d.ranks[0].state, State::Wedged);
    let solo = d.communicators.iter().find(|c| c.comm_id == 0x51).unwrap();
    assert_eq!((solo.stuck_seq, solo.wedged_ranks.as_slice()), (Some(1), &[0][..]));
}

#[test]
fn a_rank_not_yet_beating_is_not_silent() {
    let mut ranks = job(2, STEP);
    wait_next(&mut ranks[0], 10 * MS);
    (ranks[1].drained_ns, ranks[1].heartbeat_mono_ns) = (0, 0);
    assert!(!diag(&ranks).hung);
}

#[test]
fn a_dead_rank_holds_up_the_living_at_once() {
    // Rank 3 returned from its last collective 3 s ago and died a second later.
    let mut ranks = job(8, 3 * SEC);
    for r in ranks.iter_mut().filter(|r| r.rank != 3) {
        wait_next(r, 10 * MS);
    }
    stopped(&mut ranks[3], Liveness::Dead, 2 * SEC);
    let d = diag(&ranks);
    assert!(d.hung);
    let w = world(&d);
    assert_eq!((w.dead_ranks.as_slice(), w.missing_ranks.len()), (&[3][..], 0));
    assert_eq!(w.waiting_ranks, [0, 1, 2, 4, 5, 6, 7]);
    assert_eq!(d.ranks[3].state, State::Dead);
    // Silent from its last call until its death; the time stops there.
    assert_eq!(d.ranks[3].stuck_ns, Some(SEC - CALL_NS), "silent for the second it lived on");
}

#[test]
fn a_rank_that_held_the_others_up_alive_and_died_after_never_entered() {
    // The others have waited 5 s in the next collective; rank 3 stayed silent and alive
    // for 4 s of that, then died (killed in the hang, or its node's logs copied later).
    let mut ranks = job(8, 6 * SEC);
    for r in ranks.iter_mut().filter(|r| r.rank != 3) {
        wait_next(r, 5 * SEC);
    }
    stopped(&mut ranks[3], Liveness::Dead, SEC);
    let d = diag(&ranks);
    assert!(d.hung);
    let w = world(&d);
    assert_eq!((w.missing_ranks.as_slice(), w.dead_ranks.as_slice()), (&[3][..], &[3][..]), "missing, dead since");
    assert_eq!(w.waiting_ranks, [0, 1, 2, 4, 5, 6, 7]);
    assert_eq!((d.ranks[3].state, d.ranks[3].role), (State::Dead, State::Missing));

    // Silent as long, but dead before the others began to wait (a crash in a long phase
    // without NCCL, a checkpoint): it went first, and the waiting followed.
    let mut ranks = job(8, 9 * SEC);
    for r in ranks.iter_mut().filter(|r| r.rank != 3) {
        wait_next(r, 3 * SEC);
    }
    stopped(&mut ranks[3], Liveness::Dead, 5 * SEC);
    let d = diag(&ranks);
    let w = world(&d);
    assert_eq!((w.missing_ranks.len(), w.dead_ranks.as_slice()), (0, &[3][..]), "dead, not missing");
}

#[test]
fn stalled_and_exited_ranks_are_culprits_too() {
    for (liveness, state) in [(Liveness::Stalled, State::Stalled), (Liveness::Exited, State::Exited)] {
        let mut ranks = job(4, SEC);
        for r in ranks.iter_mut().filter(|r| r.rank != 2) {
            wait_next(r, 10 * MS);
        }
        stopped(&mut ranks[2], liveness, 2 * SEC);
        let d = diag(&ranks);
        assert!(d.hung, "{state:?}");
        let w = world(&d);
        let list = if state == State::Stalled { &w.stalled_ranks } else { &w.exited_ranks };
        assert_eq!((list.as_slice(), d.ranks[2].state), (&[2][..], state));
    }
}

#[test]
fn ranks_that_finished_while_the_logs_were_read_are_not_behind() {
    // Ranks 5-7 ran the last collective, destroyed the communicator and exited between
    // the read of their records (3 collectives ago) and the read of the live tables.
    let mut ranks = job(8, STEP);
    for r in ranks.iter_mut() {
        if r.rank < 5 {
            wait_next(r, 10 * MS);
        } else {
            r.calls.truncate(DONE as usize - 3);
            r.comms.clear();
            stopped(r, Liveness::Exited, MS);
            r.records_stale = true;
        }
    }
    let d = diag(&ranks);
    assert!(!d.hung, "{:?}", states(&d));
    // Read whole, the same logs would say they left without the others.
    for r in &mut ranks[5..] {
        r.records_stale = false;
    }
    let d = diag(&ranks);
    assert!(d.hung);
    assert_eq!(world(&d).exited_ranks, [5, 6, 7]);
}

#[test]
fn a_rank_that_stopped_recording_is_not_blamed() {
    let mut ranks = job(4, SEC);
    for r in ranks.iter_mut().filter(|r| r.rank != 2) {
        wait_next(r, SEC);
    }
    stopped(&mut ranks[2], Liveness::Disabled, 2 * SEC);
    let d = diag(&ranks);
    assert!(!d.hung, "its counters stopped with its recording: it only looks behind");
    assert_eq!(world(&d).disabled_ranks, [2]);
}

#[test]
fn post_mortem_of_a_job_killed_while_hung() {
    // Hung for 2 s, then killed a minute ago, each rank's collector within a few ms.
    let mut ranks = job(8, 63 * SEC);
    for r in ranks.iter_mut().filter(|r| r.rank != 5) {
        wait_next(r, 62 * SEC);
    }
    for (i, r) in ranks.iter_mut().enumerate() {
        stopped(r, Liveness::Dead, 60 * SEC - i as u64 * MS);
    }
    let d = diag(&ranks);
    assert!(d.hung, "it was hung when it died");
    assert!(states(&d).iter().all(|&s| s == State::Dead));
    let roles: Vec<State> = d.ranks.iter().map(|r| r.role).collect();
    let mut expected = [State::Waiting; 8];
    expected[5] = State::Missing;
    assert_eq!(roles, expected);
    assert_eq!(world(&d).dead_ranks, [0, 1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn post_mortem_of_a_healthy_job_killed_mid_step() {
    // Killed a minute ago, 30 ms after the others entered a collective rank 5 had not.
    let mut ranks = job(8, 60 * SEC + STEP);
    for r in ranks.iter_mut().filter(|r| r.rank != 5) {
        wait_next(r, 60 * SEC + 30 * MS);
    }
    for (i, r) in ranks.iter_mut().enumerate() {
        stopped(r, Liveness::Dead, 60 * SEC - i as u64 * MS);
    }
    assert!(!diag(&ranks).hung);
}

#[test]
fn a_rank_without_a_log_is_waited_for_by_communicator_rank() {
    let mut ranks = job(8, SEC);
    ranks.remove(5);
    for r in &mut ranks {
        wait_next(r, SEC);
    }
    let d = diag(&ranks);
    assert!(d.hung);
    let w = world(&d);
    assert_eq!((w.no_log_comm_ranks.as_slice(), w.waiting_ranks.len()), (&[5][..], 7));
    assert_eq!(d.ranks[0].waiting_for, [-1]);
}

#[test]
fn outside_nccl_ahead_of_a_silent_rank_is_waiting_for_it() {
    // Real NCCL: the call returns at once, the rank blocks later on the GPU.
    let mut ranks = job(8, SEC);
    for r in ranks.iter_mut().filter(|r| r.rank != 5) {
        r.calls.push(coll(WORLD, DONE + 1, NcclOp::AllReduce, BEAT - 900 * MS));
        returned(r, WORLD, DONE + 1);
    }
    let d = diag(&ranks);
    assert!(d.hung);
    let w = world(&d);
    assert_eq!((w.stuck_seq, w.missing_ranks.as_slice()), (Some(DONE + 1), &[5][..]));
    assert_eq!(w.waiting_ranks, OTHERS);
    assert!(!d.ranks[0].at.unwrap().in_flight);
}

#[test]
fn a_group_end_waits_for_its_peers() {
    // A ring exchange in a group: rank 5 never posted its send and receive, so 4 and 6
    // block in ncclGroupEnd; the others finished the exchange and wait in the next
    // collective for 4, 5 and 6.
    let mut ranks = job(8, SEC);
    let p2p_at = BEAT - 900 * MS;
    for r in ranks.iter_mut() {
        let (next, prev) = ((r.rank + 1) % 8, (r.rank + 7) % 8);
        match r.rank {
            5 => continue,
            4 | 6 => {
                r.calls.extend([
                    group_start(p2p_at),
                    NcclCall { tid: 1, ..p2p(WORLD, 1, NcclOp::Send, next, p2p_at + 10) },
                    p2p(WORLD, 2, NcclOp::Recv, prev, p2p_at + 20),
                ]);
                r.comms[0].p2p_entered = 2;
                r.comms[0].p2p_returned = 2;
            }
            _ => wait_next(r, 800 * MS),
        }
    }
    let d = diag(&ranks);
    assert!(d.hung);
    let w = world(&d);
    assert_eq!((w.missing_ranks.as_slice(), w.waiting_ranks.as_slice(), w.stuck_p2p), (&[5][..], &OTHERS[..], true));
    assert_eq!(d.ranks[4].waiting_for, [5]);
    let at = d.ranks[4].at.unwrap();
    assert!(at.in_flight && at.grouped, "{at:?}");
}

#[test]
fn blame_passes_along_a_chain_of_waits_to_its_end() {
    // Rank 1 waits in the collective for rank 0, which waits in ncclGroupEnd for its
    // send to rank 2, which is still busy with collectives of its own every 100 ms.
    let mut ranks = job(3, 2 * SEC);
    wait_next(&mut ranks[1], SEC);
    let t = BEAT - 2 * SEC + 50 * MS;
    ranks[0].calls.extend([group_start(t), p2p(WORLD, 1, NcclOp::Send, 2, t + 10)]);
    (ranks[0].comms[0].p2p_entered, ranks[0].comms[0].p2p_returned) = (1, 1);
    let busy_until = |r: &mut RankInput, last: u64| {
        r.calls.retain(|c| c.comm_id == WORLD);
        r.calls.extend((0..30).map(|k| coll(0x99, 30 - k, NcclOp::AllGather, last - k * STEP)));
        r.calls.sort_by_key(|c| c.t_enter_ns);
    };
    ranks[2].comms.push(row(0x99, 0, 1));
    (ranks[2].comms[1].coll_entered, ranks[2].comms[1].coll_returned) = (30, 30);
    busy_until(&mut ranks[2], BEAT - 10 * MS);
    let d = diag(&ranks);
    assert!(!d.hung, "the chain ends at a rank making progress: {:?}", states(&d));
    assert_eq!(states(&d), [State::Waiting, State::Waiting, State::Slow]);
    assert_eq!(d.ranks[0].waiting_for, [2]);

    busy_until(&mut ranks[2], BEAT - 1100 * MS);
    let d = diag(&ranks);
    assert!(d.hung);
    let w = world(&d);
    assert_eq!((w.missing_ranks.as_slice(), w.waiting_ranks.as_slice()), (&[2][..], &[0, 1][..]));
}

/// Four pipeline stages on the world communicator, each blocked since a second ago in a
/// receive from the stage before (rank 2 in the group `two`), but rank 0, which never posted
/// its send; rank 4, rank 3's data-parallel peer, waits for it in their next allreduce.
fn pipeline(two: &[(NcclOp, i32)]) -> Vec<RankInput> {
    const DP: u64 = 0xd9;
    // Each rank's calls a step apart or less, as the cadence expects.
    let ago = SEC + STEP / 2;
    let mut ranks = job(4, ago);
    for r in [1, 3] {
        in_group(&mut ranks[r], WORLD, BEAT - SEC, &[(NcclOp::Recv, r as i32 - 1)]);
    }
    in_group(&mut ranks[2], WORLD, BEAT - SEC, two);
    let mut four = rank(4, 5);
    (four.comms, four.created) = (vec![row(DP, 1, 2)], vec![created(DP, 1, 2)]);
    let three = &mut ranks[3];
    three.comms.push(row(DP, 0, 2));
    three.created.push(created(DP, 0, 2));
    for r in [&mut four, three] {
        r.calls.extend((1..=DONE).map(|s| coll(DP, s, NcclOp::AllReduce, BEAT - ago - (DONE - s) * STEP + STEP / 4)));
        r.calls.sort_by_key(|c| c.t_enter_ns);
        returned(r, DP, DONE);
    }
    in_flight(&mut four, DP, DONE, NcclOp::AllReduce, BEAT - SEC + STEP / 4);
    ranks.push(four);
    ranks
}

#[test]
fn blame_passes_along_a_pipelines_chain_of_receives() {
    // Rank 2 is inside a send/recv of its own, but one with rank 1 only: it never posted
    // rank 3's half, so rank 3 waits for it rather than being wedged, and rank 4's wait
    // ends, through the chain, at rank 0.
    let d = diag(&pipeline(&[(NcclOp::Recv, 1)]));
    assert!(d.hung);
    assert_eq!(states(&d), [State::Missing, State::Waiting, State::Waiting, State::Waiting, State::Waiting]);
    let waiting_for: Vec<&[i32]> = d.ranks.iter().map(|r| r.waiting_for.as_slice()).collect();
    assert_eq!(waiting_for, [&[][..], &[0], &[1], &[2], &[3]]);
    let w = world(&d);
    assert_eq!((w.missing_ranks.as_slice(), w.waiting_ranks.as_slice()), (&[0][..], &[1, 2, 3][..]));
    assert!(w.wedged_ranks.is_empty(), "{w:?}");
    // The allreduce misses rank 3, which only waits itself: a link of the chain.
    let dp = d.communicators.iter().find(|c| c.comm_id == 0xd9).unwrap();
    assert_eq!((dp.missing_ranks.as_slice(), d.ranks[3].role), (&[3][..], State::Waiting));

    // Rank 2's group holds rank 3's half too: posted, so rank 3 is stuck with nobody to
    // wait for.
    let d = diag(&pipeline(&[(NcclOp::Recv, 1), (NcclOp::Send, 3)]));
    assert_eq!((d.ranks[3].state, d.ranks[4].waiting_for.as_slice()), (State::Wedged, &[3][..]));
}

#[test]
fn a_send_without_a_known_peer_waits_for_silent_members() {
    let mut ranks = job(2, SEC);
    let row = &mut ranks[0].comms[0];
    (row.p2p_entered, row.p2p_returned) = (1, 0);
    row.inflight = Some(crate::core::log::reader::InFlight { op: Some(NcclOp::Send), since_mono_ns: BEAT - SEC });
    let d = diag(&ranks);
    assert!(d.hung);
    assert_eq!(states(&d), [State::Waiting, State::Missing]);

    // Both inside point-to-point calls on it: nobody to blame but the calls.
    let row = &mut ranks[1].comms[0];
    (row.p2p_entered, row.p2p_returned) = (1, 0);
    row.inflight = Some(crate::core::log::reader::InFlight { op: Some(NcclOp::Recv), since_mono_ns: BEAT - SEC });
    let d = diag(&ranks);
    assert_eq!(states(&d), [State::Wedged, State::Wedged]);
}

#[test]
fn every_rank_quiet_is_noted_but_not_a_hang() {
    let ranks = job(4, 5 * SEC);
    let d = diag(&ranks);
    assert!(!d.hung);
    assert_eq!(d.quiet_ns, Some(5 * SEC - CALL_NS));
    assert_eq!(diag(&job(4, STEP)).quiet_ns, None);
}

#[test]
fn the_threshold_is_configurable() {
    let mut ranks = job(8, 1100 * MS);
    for r in ranks.iter_mut().filter(|r| r.rank != 5) {
        wait_next(r, SEC);
    }
    let patient = Settings { factor: 20.0, ..Settings::default() };
    let d = diagnose(&ranks, &patient);
    assert_eq!(d.threshold.threshold_ns, 2 * SEC);
    assert!(!d.hung);
}
