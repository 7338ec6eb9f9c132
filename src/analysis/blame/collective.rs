//! Collectives matched across ranks, each rank's wait inside them, and the wait each late
//! rank caused.

use std::collections::HashMap;
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
/// once. The ranks' completed collectives are grouped by key in one counting sort (eight
/// bytes a call): each rank's calls are read in order once, and each collective's members
/// then lie together, where a merge over thousands of ranks' lists would miss the cache on
/// every member.
pub fn for_each_collective(calls: &[&[CallTiming]], mut visit: impl FnMut(&Collective)) {
    let groups = Groups::of(calls);
    let mut members: Vec<(usize, usize)> = Vec::new();
    let mut inside: Vec<f64> = Vec::new();
    let mut c = Collective { comm_id: 0, seq: 0, participants: Vec::new() };
    for (key, group) in groups.iter() {
        members.clear();
        members.extend(group.iter().map(|&(rank, i)| (rank as usize, i as usize)));
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

/// A collective's (communicator, sequence) and its members as (rank, call index).
type Group<'a> = ((u64, u64), &'a [(u32, u32)]);

/// Every rank's completed collectives grouped by key: (rank, call index) pairs, each
/// key's together in rank then call order, keys ascending.
struct Groups {
    /// (communicator, first sequence, first slot in `starts`) per communicator, ascending.
    comms: Vec<(u64, u64, usize)>,
    /// Where each key's members start in `members` (one more entry than keys); a key whose
    /// sequence no rank completed has none.
    starts: Vec<u32>,
    members: Vec<(u32, u32)>,
    /// Keys in order, when their sequences are too sparse for `starts` (then empty).
    sparse: Vec<(u64, u64)>,
}

impl Groups {
    fn of(calls: &[&[CallTiming]]) -> Groups {
        // A call without an exit (a hang, a killed rank) has no known wait yet.
        let keyed = || {
            calls.iter().enumerate().flat_map(|(rank, list)| {
                list.iter().enumerate().filter_map(move |(i, c)| {
                    let completed = c.exit_ns >= c.enter_ns && c.exit_ns > 0;
                    Some((c.key().filter(|_| completed)?, rank as u32, i as u32))
                })
            })
        };
        let mut spans: HashMap<u64, (u64, u64)> = HashMap::new();
        let mut total = 0usize;
        for ((comm, seq), ..) in keyed() {
            let span = spans.entry(comm).or_insert((seq, seq));
            *span = (span.0.min(seq), span.1.max(seq));
            total += 1;
        }
        let mut comms: Vec<(u64, u64, usize)> = Vec::with_capacity(spans.len());
        let mut slots = 0usize;
        let mut sorted: Vec<(u64, (u64, u64))> = spans.into_iter().collect();
        sorted.sort_unstable();
        for (comm, (first, last)) in sorted {
            comms.push((comm, first, slots));
            slots = slots.saturating_add((last - first).saturating_add(1).min(usize::MAX as u64) as usize);
        }
        // Sequences a log claims are not trusted to be dense: a counting sort only where
        // the slots stay within a few per call, a plain sort otherwise.
        if slots > 4 * total + 4096 || total >= u32::MAX as usize {
            let mut all: Vec<((u64, u64), u32, u32)> = keyed().collect();
            all.sort_unstable();
            let sparse = all.iter().map(|&(key, ..)| key).collect();
            let members = all.into_iter().map(|(_, rank, i)| (rank, i)).collect();
            return Groups { comms: Vec::new(), starts: Vec::new(), members, sparse };
        }
        let slot_of = |comm: u64, seq: u64| {
            let at = comms.binary_search_by_key(&comm, |&(c, ..)| c).expect("every communicator was spanned");
            comms[at].2 + (seq - comms[at].1) as usize
        };
        let mut starts = vec![0u32; slots + 1];
        for ((comm, seq), ..) in keyed() {
            starts[slot_of(comm, seq) + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let mut fill = starts.clone();
        let mut members = vec![(0u32, 0u32); total];
        for ((comm, seq), rank, i) in keyed() {
            let at = &mut fill[slot_of(comm, seq)];
            members[*at as usize] = (rank, i);
            *at += 1;
        }
        Groups { comms, starts, members, sparse: Vec::new() }
    }

    /// Each key with its members, keys ascending.
    fn iter(&self) -> Box<dyn Iterator<Item = Group<'_>> + '_> {
        if self.comms.is_empty() {
            let mut rest = &self.members[..];
            let mut keys = &self.sparse[..];
            return Box::new(std::iter::from_fn(move || {
                let key = *keys.first()?;
                let n = keys.iter().take_while(|&&k| k == key).count();
                let group;
                (group, rest) = rest.split_at(n);
                keys = &keys[n..];
                Some((key, group))
            }));
        }
        Box::new(self.comms.iter().enumerate().flat_map(move |(c, &(comm, first, from))| {
            let to = self.comms.get(c + 1).map_or(self.starts.len() - 1, |&(.., next)| next);
            (from..to).filter_map(move |slot| {
                let (a, b) = (self.starts[slot] as usize, self.starts[slot + 1] as usize);
                (a < b).then(|| ((comm, first + (slot - from) as u64), &self.members[a..b]))
            })
        }))
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

    type Key = (u64, u64);

    /// Each key's members, keys ascending: the grouping `for_each_collective` must make,
    /// written the obvious way.
    fn grouped_plainly(calls: &[Vec<CallTiming>]) -> Vec<(Key, Vec<(usize, usize)>)> {
        let mut by_key: std::collections::BTreeMap<(u64, u64), Vec<(usize, usize)>> = Default::default();
        for (rank, list) in calls.iter().enumerate() {
            for (i, c) in list.iter().enumerate() {
                if let Some(key) = c.key().filter(|_| c.exit_ns >= c.enter_ns && c.exit_ns > 0) {
                    by_key.entry(key).or_default().push((rank, i));
                }
            }
        }
        by_key.into_iter().filter(|(_, m)| m.len() >= 2).collect()
    }

    proptest::proptest! {
        #[test]
        fn collectives_group_as_a_plain_map_does(
            ranks in proptest::collection::vec(
                proptest::collection::vec((0u64..3, 0u64..40, 0u64..50, 0u64..60, proptest::bool::ANY), 0..40),
                1..6,
            ),
            sparse in proptest::bool::ANY,
        ) {
            // Sparse: sequence numbers far apart, which the plain sort takes instead.
            let calls: Vec<Vec<CallTiming>> = ranks
                .iter()
                .map(|list| {
                    list.iter()
                        .map(|&(comm, seq, enter, exit, keyed)| {
                            let seq = if sparse { seq << 40 } else { seq };
                            CallTiming::new(keyed.then_some((comm * 1000, seq)), enter, exit)
                        })
                        .collect()
                })
                .collect();
            let refs: Vec<&[CallTiming]> = calls.iter().map(|v| v.as_slice()).collect();
            let mut seen = Vec::new();
            for_each_collective(&refs, |c| {
                seen.push(((c.comm_id, c.seq), c.participants.iter().map(|p| (p.rank, p.call)).collect::<Vec<_>>()))
            });
            proptest::prop_assert_eq!(seen, grouped_plainly(&calls));
        }
    }
}
