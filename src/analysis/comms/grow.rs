//! One name for a communicator grown with `ncclCommGrow` (NCCL 2.29.2).
//!
//! No value is shared by every member at the call (nccl.h 2.32.3): existing members pass
//! their communicator (the root also the unique id it gave the new ranks), new ranks only
//! that unique id. So existing members name the grown communicator from the parent and its
//! child ordinal (`comm_identity::for_grow`), new ranks from the unique id
//! (`from_unique_id`), and the root, which knows both, records that the second is the
//! first: a `comm_created` record with `color` `GROW_ALIAS_COLOR`. `Aliases` gathers those
//! records from every rank's log and names every record by the existing members' id, so
//! whatever groups by communicator sees the grown one once, with all its ranks.

use std::collections::HashMap;

use crate::core::comms::comm_identity::GROW_ALIAS_COLOR;
use crate::core::log::records::{CommCreated, CommOrigin};

/// The aliases of a job's logs: another id → the id every report uses.
#[derive(Clone, Debug, Default)]
pub struct Aliases(HashMap<u64, u64>);

/// Whether a `comm_created` record is an alias, not a membership.
pub fn is_alias(c: &CommCreated) -> bool {
    c.origin == CommOrigin::Grow && c.color == GROW_ALIAS_COLOR && c.parent_id != 0
}

impl Aliases {
    /// From every rank's `comm_created` records.
    pub fn of<'a>(created: impl IntoIterator<Item = &'a CommCreated>) -> Aliases {
        Aliases(created.into_iter().filter(|c| is_alias(c)).map(|c| (c.comm_id, c.parent_id)).collect())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The id reports use for `id` (a chain is followed a bounded number of steps: a grown
    /// communicator grown again has its own alias).
    pub fn canonical(&self, mut id: u64) -> u64 {
        for _ in 0..16 {
            match self.0.get(&id) {
                Some(&to) if to != id => id = to,
                _ => break,
            }
        }
        id
    }

    /// A rank's `comm_created` records named by the reports' ids, aliases dropped.
    pub fn memberships(&self, created: &[CommCreated]) -> Vec<CommCreated> {
        created
            .iter()
            .filter(|c| !is_alias(c))
            .map(|c| CommCreated { comm_id: self.canonical(c.comm_id), parent_id: self.canonical(c.parent_id), ..*c })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created(comm_id: u64, parent_id: u64, color: i32, origin: CommOrigin) -> CommCreated {
        CommCreated { t_ns: 0, comm_id, parent_id, rank: 0, nranks: 3, global_rank: 0, color, key: -1, origin }
    }

    #[test]
    fn the_roots_alias_names_the_new_ranks_communicator_by_the_existing_members_id() {
        let root = [created(0x90, 0x10, -1, CommOrigin::Grow), created(0x77, 0x90, GROW_ALIAS_COLOR, CommOrigin::Grow)];
        let new_rank = [created(0x77, 0, -1, CommOrigin::Grow)];
        let aliases = Aliases::of(root.iter().chain(&new_rank));
        assert_eq!((aliases.canonical(0x77), aliases.canonical(0x90), aliases.canonical(0x5)), (0x90, 0x90, 0x5));
        assert_eq!(aliases.memberships(&root), vec![root[0]], "the alias is no membership");
        assert_eq!(aliases.memberships(&new_rank)[0].comm_id, 0x90);
        // A split's color is never the alias marker; a grown communicator's parent is kept.
        assert!(!is_alias(&created(0x77, 0x90, 3, CommOrigin::Split)));
        assert!(Aliases::of(&[created(0x90, 0x10, -1, CommOrigin::Grow)]).is_empty());
    }
}
