//! What the job itself says its rank is, as opposed to what its environment says:
//! `init_process_group`'s rank and world size (through the Python door's
//! `sf_declare_rank`), and the first communicator a process creates with
//! `ncclCommInitRank*`. One atomic word, written by the declaring thread and read by the
//! start (`runtime::start`), so a declaration that races the start is never lost.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::core::log::format::caps;

/// Who declared the rank, strongest first (`identity::detect` documents the whole order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeclaredBy {
    /// `torch.distributed.init_process_group`: the job's own world.
    ProcessGroup = 1,
    /// The first `ncclCommInitRank*` communicator of the process.
    Nccl = 2,
}

impl DeclaredBy {
    /// The log header's identity source (at most `format::SOURCE_LEN` bytes).
    pub fn source(self) -> &'static str {
        match self {
            DeclaredBy::ProcessGroup => "process_group",
            DeclaredBy::Nccl => "nccl",
        }
    }

    fn from_code(code: u64) -> Option<DeclaredBy> {
        match code {
            1 => Some(DeclaredBy::ProcessGroup),
            2 => Some(DeclaredBy::Nccl),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Declaration {
    pub by: DeclaredBy,
    pub rank: i32,
    pub world_size: i32,
}

impl Declaration {
    /// A rank inside its world, within the reader's caps; else None.
    pub fn new(by: DeclaredBy, rank: i32, world_size: i32) -> Option<Declaration> {
        (rank >= 0 && world_size > rank && world_size <= caps::WORLD_SIZE).then_some(Declaration {
            by,
            rank,
            world_size,
        })
    }

    fn pack(self) -> u64 {
        (self.by as u64) << 56 | (self.world_size as u64) << 28 | self.rank as u64
    }

    fn unpack(word: u64) -> Option<Declaration> {
        let by = DeclaredBy::from_code(word >> 56)?;
        let mask = (1u64 << 28) - 1;
        Declaration::new(by, (word & mask) as i32, ((word >> 28) & mask) as i32)
    }
}

static DECLARED: AtomicU64 = AtomicU64::new(0);

/// Keeps `declaration` unless one at least as strong was made before (the first
/// communicator is the world's, a later one a subgroup's; `init_process_group` replaces a
/// communicator's). Returns whether it was kept.
pub fn declare(declaration: Declaration) -> bool {
    let word = declaration.pack();
    let mut current = DECLARED.load(Ordering::Acquire);
    loop {
        if !replaces(Declaration::unpack(current), declaration) {
            return false;
        }
        match DECLARED.compare_exchange_weak(current, word, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(seen) => current = seen,
        }
    }
}

/// Whether `new` replaces what was declared before.
fn replaces(old: Option<Declaration>, new: Declaration) -> bool {
    old.is_none_or(|old| new.by < old.by)
}

/// The strongest declaration so far.
pub fn current() -> Option<Declaration> {
    Declaration::unpack(DECLARED.load(Ordering::Acquire))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_and_bounds() {
        let d = Declaration::new(DeclaredBy::ProcessGroup, 5, 1 << 18).unwrap();
        assert_eq!(Declaration::unpack(d.pack()), Some(d));
        assert_eq!(Declaration::new(DeclaredBy::Nccl, 4, 4), None, "rank outside the world");
        assert_eq!(Declaration::new(DeclaredBy::Nccl, -1, 4), None);
        assert_eq!(Declaration::new(DeclaredBy::Nccl, 0, (1 << 18) + 1), None, "world over the cap");
        assert_eq!(Declaration::unpack(0), None);
    }

    #[test]
    fn the_process_group_replaces_the_first_communicator_and_nothing_replaces_it() {
        let pg = Declaration::new(DeclaredBy::ProcessGroup, 2, 4).unwrap();
        let world = Declaration::new(DeclaredBy::Nccl, 2, 4).unwrap();
        let subgroup = Declaration::new(DeclaredBy::Nccl, 0, 2).unwrap();
        assert!(replaces(None, world));
        assert!(!replaces(Some(world), subgroup), "the first communicator is the world's");
        assert!(replaces(Some(world), pg));
        assert!(!replaces(Some(pg), world));
        assert!(!replaces(Some(pg), pg), "a second init_process_group (a re-init) keeps the first");
    }
}
