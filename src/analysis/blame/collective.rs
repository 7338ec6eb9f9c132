//! Collectives matched across ranks, each rank's wait inside them, and the wait each late
//! rank caused.

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::BinaryHeap;
use std::num::NonZeroU64;

/// One NCCL call of one rank, as the preload door recorded it (rank-local nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallTiming {
    /// (communicator id, per-communicator collective sequence) for a collective, which
    /// every member of the communicator makes with the same key; `None` for other calls
    /// (point-to-point, group ends, set-up), which only bound the time around them. A
    /// collective's sequence starts at 1, so the key fits the pair's 16 bytes: every call
    /// of every rank is held for the attribution.
    pub key: Option<(u64, NonZeroU64)>,
    pub enter_ns: u64,
    pub exit_ns: u64,
}

impl CallTiming {
    /// A call with `key` (communicator, sequence); a sequence of 0 is no collective's.
    pub fn new(key: Option<(u64, u64)>, enter_ns: u64, exit_ns: u64) -> CallTiming {
        let key = key.and_then(|(comm, seq)| Some((comm, NonZeroU64::new(seq)?)));
        CallTiming { key, enter_ns, exit_ns }
    }

    /// (communicator, sequence) of a collective.
    pub fn key(&self) -> Option<(u64, u64)> {
        self.key.map(|(comm, seq)| (comm, seq.get()))
    }
}

/// One rank's part in a collective.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Participant {
    /// Index of the rank in the slice given to [`match_collectives`].
    pub rank: usize,
    /// Index of its call in that rank's calls.
    pub call: usize,
    /// Seconds it waited inside the call for the last arrival.
    pub wait_s: f64,
    /// Seconds of the other ranks' waiting it caused by arriving after them.
    pub caused_s: f64,
}

/// A collective every participant completed.
#[derive(Clone, Debug, PartialEq)]
pub struct Collective {
    pub comm_id: u64,
    pub seq: u64,
    pub participants: Vec<Participant>,
}

impl Collective {
    /// The participant that arrived last (shortest time inside the call).
    pub fn last(&self) -> &Participant {
        let mut last = &self.participants[0];
        for p in &self.participants[1..] {
            if p.wait_s < last.wait_s {
                last = p;
            }
        }
        last
    }
}

/// Matches `calls[rank]` (each in call order) by communicator and sequence number. A
/// collective needs two or more participants that completed it; an unfinished call (no
/// exit: a hang, a killed rank) is left out, as its wait is not known yet.
pub fn match_collectives(calls: &[&[CallTiming]]) -> Vec<Collective> {
    let mut found = Vec::new();
    for_each_collective(calls, |c| found.push(c.clone()));
    found
}

/// [`match_collectives`] one collective at a time, in (communicator, sequence) order,
/// participants in rank order then call order: a job's collectives are never all held at
/// once. Each rank's completed collectives are ordered by key (four bytes a call), and a
/// merge over the ranks yields each key's participants together.
pub fn for_each_collective(calls: &[&[CallTiming]], mut visit: impl FnMut(&Collective)) {
    let key_of = |rank: usize, i: u32| calls[rank][i as usize].key().expect("only keyed calls are ordered");
    // Per rank, its completed collectives' call indexes in (key, call) order.
    let ordered: Vec<Vec<u32>> = calls
        .iter()
        .map(|list| {
            let mut order: Vec<u32> = (0..list.len() as u32)
                .filter(|&i| {
                    let call = list[i as usize];
                    call.key.is_some() && call.exit_ns >= call.enter_ns && call.exit_ns > 0
                })
                .collect();
            order.sort_by_key(|&i| list[i as usize].key());
            order
        })
        .collect();
    let mut next = vec![0usize; calls.len()];
    let mut heads: BinaryHeap<Reverse<((u64, u64), usize)>> =
        ordered.iter().enumerate().filter(|(_, o)| !o.is_empty()).map(|(r, o)| Reverse((key_of(r, o[0]), r))).collect();
    let mut members: Vec<(usize, usize)> = Vec::new();
    let mut inside: Vec<f64> = Vec::new();
    let mut c = Collective { comm_id: 0, seq: 0, participants: Vec::new() };
    while let Some(&Reverse((key, _))) = heads.peek() {
        members.clear();
        // Ranks come up in rank order for one key; each gives every call it made with it
        // and goes back with its next key in one sift (not a pop and a push).
        while let Some(mut top) = heads.peek_mut() {
            let Reverse((k, rank)) = *top;
            if k != key {
                break;
            }
            let order = &ordered[rank];
            while let Some(&i) = order.get(next[rank]).filter(|&&i| key_of(rank, i) == key) {
                members.push((rank, i as usize));
                next[rank] += 1;
            }
            match order.get(next[rank]) {
                Some(&i) => *top = Reverse((key_of(rank, i), rank)),
                None => {
                    PeekMut::pop(top);
                }
            }
        }
        if members.len() < 2 {
            continue;
        }
        inside.clear();
        inside.extend(members.iter().map(|&(rank, i)| {
            let c = calls[rank][i];
            (c.exit_ns - c.enter_ns) as f64 / 1e9
        }));
        let shortest = inside.iter().copied().fold(f64::INFINITY, f64::min);
        let waits: Vec<f64> = inside.iter().map(|t| t - shortest).collect();
        let caused = caused_shares(&waits);
        (c.comm_id, c.seq) = key;
        c.participants.clear();
        c.participants.extend(
            members.iter().zip(waits.iter().zip(&caused)).map(|(&(rank, call), (&wait_s, &caused_s))| Participant {
                rank,
                call,
                wait_s,
                caused_s,
            }),
        );
        visit(&c);
    }
}

/// Who caused how much of the waiting, from each participant's wait (seconds before the
/// last arrival that it arrived). Between two consecutive arrivals every rank already in
/// the call waits, and that stretch would vanish only if all the ranks still out had
/// arrived earlier: it is shared equally among them (the Shapley value of the group's
/// waiting). So one late rank is charged all the wait; two late ranks share what both
/// caused, and the later one alone carries what only it caused. The shares sum to the
/// total wait.
pub fn caused_shares(waits: &[f64]) -> Vec<f64> {
    let n = waits.len();
    let mut order: Vec<usize> = (0..n).collect();
    // Earliest arrival (longest wait) first; ties keep rank order.
    order.sort_by(|&a, &b| waits[b].total_cmp(&waits[a]).then(a.cmp(&b)));
    let mut caused = vec![0.0; n];
    for k in 0..n.saturating_sub(1) {
        let gap = waits[order[k]] - waits[order[k + 1]];
        if gap <= 0.0 {
            continue;
        }
        let arrived = (k + 1) as f64;
        let still_out = &order[k + 1..];
        let share = arrived * gap / still_out.len() as f64;
        for &r in still_out {
            caused[r] += share;
        }
    }
    caused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(comm: u64, seq: u64, enter_ms: u64, exit_ms: u64) -> CallTiming {
        CallTiming::new(Some((comm, seq)), enter_ms * 1_000_000, exit_ms * 1_000_000)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn the_last_rank_is_charged_the_wait_it_caused_and_waits_for_nobody() {
        // Ranks 0-2 arrive at 10, 12 and 11 ms; rank 3 at 30: all leave at 31.
        let r: Vec<Vec<CallTiming>> = [10, 12, 11, 30].iter().map(|&enter| vec![call(7, 1, enter, 31)]).collect();
        let refs: Vec<&[CallTiming]> = r.iter().map(|v| v.as_slice()).collect();
        let c = &match_collectives(&refs)[0];
        assert_eq!(c.last().rank, 3);
        let waits: Vec<f64> = c.participants.iter().map(|p| p.wait_s).collect();
        for (got, want) in waits.iter().zip([0.020, 0.018, 0.019, 0.0]) {
            assert!(close(*got, want), "{waits:?}");
        }
        let caused: Vec<f64> = c.participants.iter().map(|p| p.caused_s).collect();
        // Rank 3 alone kept everyone from 12 to 30 ms (3 x 18 ms) and shares the earlier
        // stretches with the ranks also still out: 10-11 ms three ways, 11-12 ms two ways.
        for (got, want) in caused.iter().zip([0.0, 0.001 / 3.0 + 0.001, 0.001 / 3.0, 0.054 + 0.001 / 3.0 + 0.001]) {
            assert!(close(*got, want), "{caused:?}");
        }
        assert!(close(caused.iter().sum(), waits.iter().sum()));
    }

    #[test]
    fn two_late_ranks_share_what_both_caused() {
        // Waits: rank 0 in from the start (20 ms), rank 1 arrives 19 ms late, rank 2 20 ms.
        let caused = caused_shares(&[0.020, 0.001, 0.0]);
        // 0-19 ms: rank 0 waits, caused by ranks 1 and 2 (9.5 ms each); 19-20 ms: ranks 0
        // and 1 wait for rank 2 alone (2 ms).
        assert!(close(caused[0], 0.0) && close(caused[1], 0.0095) && close(caused[2], 0.0115), "{caused:?}");
        assert!(close(caused.iter().sum(), 0.021));
    }

    #[test]
    fn calls_are_matched_by_communicator_and_sequence_not_by_position() {
        let a = [call(1, 1, 0, 5), call(2, 1, 6, 9), CallTiming::new(None, 0, 1)];
        let b = [call(2, 1, 8, 9), call(1, 1, 4, 5)];
        let c = [call(3, 1, 0, 1)];
        let found = match_collectives(&[&a, &b, &c]);
        assert_eq!(found.len(), 2, "comm 3 has one participant");
        let comm2 = found.iter().find(|c| c.comm_id == 2).unwrap();
        assert_eq!(comm2.last().rank, 1);
        assert_eq!((comm2.participants[1].call, comm2.participants[0].call), (0, 1));
    }

    #[test]
    fn an_unfinished_call_is_not_a_wait_yet() {
        let a = [CallTiming::new(Some((1, 1)), 5, 0)];
        let b = [call(1, 1, 4, 5)];
        assert!(match_collectives(&[&a, &b]).is_empty());
    }
}
