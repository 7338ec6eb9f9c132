//! Who is in each communicator, and at which communicator rank, from every rank's
//! `comm_created` records.
//!
//! A communicator made from a unique id records its rank and size. One made by
//! `ncclCommSplit` records -1 for both (NCCL reports them only when asked), but its key
//! and its parent: NCCL orders a colour's members by key, then by parent rank
//! (src/init.cc, commSplit), so the ranks follow from the members' keys and their
//! ranks in the parent, resolved the same way up to a communicator that recorded them.

use std::collections::{BTreeMap, BTreeSet};

use crate::analysis::comms::grow;
use crate::core::log::records::{CommCreated, CommOrigin};

/// One member's view of a communicator's creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Membership {
    pub global_rank: u32,
    /// -1 when not recorded.
    pub rank: i32,
    pub key: i32,
    /// Where the communicator came in this member's sequence of creations (0 first).
    pub ordinal: usize,
}

/// One communicator of the job, as its members' logs describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommMembers {
    pub comm_id: u64,
    pub parent_id: u64,
    pub origin: CommOrigin,
    /// The size a member recorded (-1: none did).
    pub nranks: i32,
    /// Sorted by global rank.
    pub members: Vec<Membership>,
}

impl CommMembers {
    pub fn global_ranks(&self) -> Vec<u32> {
        self.members.iter().map(|m| m.global_rank).collect()
    }

    /// The least creation ordinal over the members: communicators every rank makes in one
    /// order (world first) compare by it.
    pub fn first_ordinal(&self) -> usize {
        self.members.iter().map(|m| m.ordinal).min().unwrap_or(usize::MAX)
    }
}

/// Every communicator of the job by id, from (global rank, its `comm_created` records in
/// log order) per rank. Grow aliases are not memberships and are left out.
pub fn collect<'a>(ranks: impl IntoIterator<Item = (u32, &'a [CommCreated])>) -> BTreeMap<u64, CommMembers> {
    let mut comms: BTreeMap<u64, CommMembers> = BTreeMap::new();
    for (global_rank, created) in ranks {
        let mut seen = BTreeSet::new();
        for (ordinal, c) in created.iter().filter(|c| !grow::is_alias(c)).enumerate() {
            // A handle re-registered under the same id is one membership.
            if !seen.insert(c.comm_id) {
                continue;
            }
            let entry = comms.entry(c.comm_id).or_insert_with(|| CommMembers {
                comm_id: c.comm_id,
                parent_id: c.parent_id,
                origin: c.origin,
                nranks: -1,
                members: Vec::new(),
            });
            entry.nranks = entry.nranks.max(c.nranks);
            entry.members.push(Membership { global_rank, rank: c.rank, key: c.key, ordinal });
        }
    }
    for comm in comms.values_mut() {
        comm.members.sort_by_key(|m| m.global_rank);
        comm.members.dedup_by_key(|m| m.global_rank);
    }
    comms
}

/// Communicator rank → global rank, per communicator whose ranks are known or follow from
/// its parent's. Missing entries: the ranks cannot be told (a parent's logs are missing).
pub fn local_ranks(comms: &BTreeMap<u64, CommMembers>) -> BTreeMap<u64, BTreeMap<i32, u32>> {
    let mut resolved: BTreeMap<u64, BTreeMap<i32, u32>> = BTreeMap::new();
    // Each pass resolves at least one more generation of splits; a chain is at most as
    // long as there are communicators, and a cycle (impossible in a sane log) just stops.
    for _ in 0..comms.len().max(1) {
        let mut progressed = false;
        for comm in comms.values() {
            if resolved.contains_key(&comm.comm_id) {
                continue;
            }
            if let Some(map) = resolve(comm, &resolved) {
                resolved.insert(comm.comm_id, map);
                progressed = true;
            }
        }
        if !progressed {
            break;
        }
    }
    resolved
}

/// Global rank → communicator rank, per communicator whose every member's log is here:
/// one whose members number the size they recorded, or a split of such a one (a colour's
/// members are those of the parent that chose it, and each recorded its split). Nothing
/// for a communicator some of whose members may be missing: a rank ordered without them
/// could be another member's.
pub fn complete_ranks(comms: &BTreeMap<u64, CommMembers>) -> BTreeMap<u64, BTreeMap<u32, i32>> {
    let locals = local_ranks(comms);
    let mut complete: BTreeSet<u64> = BTreeSet::new();
    for _ in 0..comms.len().max(1) {
        let before = complete.len();
        for comm in comms.values() {
            let whole = usize::try_from(comm.nranks).is_ok_and(|n| n == comm.members.len());
            let of_whole = comm.origin == CommOrigin::Split && complete.contains(&comm.parent_id);
            if (whole || of_whole) && locals.contains_key(&comm.comm_id) {
                complete.insert(comm.comm_id);
            }
        }
        if complete.len() == before {
            break;
        }
    }
    complete.into_iter().map(|id| (id, locals[&id].iter().map(|(&local, &global)| (global, local)).collect())).collect()
}

fn resolve(comm: &CommMembers, resolved: &BTreeMap<u64, BTreeMap<i32, u32>>) -> Option<BTreeMap<i32, u32>> {
    if comm.members.iter().all(|m| m.rank >= 0) {
        return Some(comm.members.iter().map(|m| (m.rank, m.global_rank)).collect());
    }
    if comm.origin != CommOrigin::Split {
        return None;
    }
    let parent = resolved.get(&comm.parent_id)?;
    let parent_rank = |global: u32| parent.iter().find(|(_, &g)| g == global).map(|(&r, _)| r);
    let mut order: Vec<(i32, i32, u32)> = Vec::with_capacity(comm.members.len());
    for m in &comm.members {
        order.push((m.key, parent_rank(m.global_rank)?, m.global_rank));
    }
    order.sort_unstable();
    Some(order.iter().enumerate().map(|(i, &(_, _, global))| (i as i32, global)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created(comm_id: u64, parent_id: u64, rank: i32, nranks: i32, key: i32, origin: CommOrigin) -> CommCreated {
        CommCreated { t_ns: 0, comm_id, parent_id, rank, nranks, global_rank: 0, color: 0, key, origin }
    }

    /// World 0..4 (communicator 1) with global rank == world rank, and communicator 2 a
    /// split of {1, 3} keyed in reverse.
    fn split_of_world() -> Vec<Vec<CommCreated>> {
        let mut logs: Vec<Vec<CommCreated>> =
            (0..4).map(|r| vec![created(1, 0, r, 4, -1, CommOrigin::InitRank)]).collect();
        logs[1].push(created(2, 1, -1, -1, 9, CommOrigin::Split));
        logs[3].push(created(2, 1, -1, -1, 5, CommOrigin::Split));
        logs
    }

    #[test]
    fn split_ranks_follow_key_then_parent_rank() {
        let logs = split_of_world();
        let comms = collect(logs.iter().enumerate().map(|(r, c)| (r as u32, c.as_slice())));
        assert_eq!(comms[&2].global_ranks(), [1, 3]);
        let locals = local_ranks(&comms);
        assert_eq!(locals[&2], BTreeMap::from([(0, 3), (1, 1)]), "key 5 (rank 3) comes first");
        assert_eq!(locals[&1][&2], 2);
    }

    #[test]
    fn only_splits_of_communicators_whose_every_member_is_here_are_complete() {
        let mut logs = split_of_world();
        let comms = collect(logs.iter().enumerate().map(|(r, c)| (r as u32, c.as_slice())));
        let complete = complete_ranks(&comms);
        assert_eq!(complete[&2], BTreeMap::from([(3, 0), (1, 1)]));
        assert_eq!(complete[&1].len(), 4);
        // Rank 2's log is missing: the world is not whole, and a member of the split could
        // be missing too.
        logs.remove(2);
        let comms = collect([0u32, 1, 3].into_iter().zip(logs.iter().map(|c| c.as_slice())));
        assert!(complete_ranks(&comms).is_empty(), "{:?}", complete_ranks(&comms));
    }

    #[test]
    fn a_split_of_an_unknown_parent_stays_unresolved() {
        let logs = [vec![created(2, 7, -1, -1, 0, CommOrigin::Split)]];
        let comms = collect(logs.iter().enumerate().map(|(r, c)| (r as u32, c.as_slice())));
        assert!(local_ranks(&comms).is_empty());
    }
}
