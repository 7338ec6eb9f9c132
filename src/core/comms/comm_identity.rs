//! Job-wide communicator ids: every rank of a communicator derives the same id from what
//! all of them know, with no message exchanged.

use crate::core::fnv::{mix64, Fnv1a};

/// FNV-1a then a SplitMix64 finaliser: cheap, deterministic across machines, and never 0
/// (0 means "no communicator" in records).
fn hash(parts: &[&[u8]]) -> u64 {
    let mut fnv = Fnv1a::default();
    for part in parts {
        fnv.write(part);
        fnv.write(&[0xff]);
    }
    mix64(fnv.finish()).max(1)
}

/// `ncclCommInitRank*`: every rank passes the same `ncclUniqueId`.
pub fn from_unique_id(unique_id: &[u8; 128]) -> u64 {
    hash(&[b"uid", unique_id])
}

/// `ncclCommInitRankScalable`: every rank passes the same `nId` unique ids in the same
/// order (nccl.h), so all of them hash the same bytes.
pub fn from_unique_ids(unique_ids: &[[u8; 128]]) -> u64 {
    let mut parts: Vec<&[u8]> = vec![b"uids"];
    parts.extend(unique_ids.iter().map(|id| id.as_slice()));
    hash(&parts)
}

/// `ncclCommShrink`: the remaining members share the parent, its child ordinal (NCCL
/// counts splits, shrinks and grows alike in `childCount`) and the excluded ranks, which
/// every caller passes identically.
pub fn for_shrink(parent_id: u64, child_ordinal: u64, excluded: &[i32]) -> u64 {
    let excluded: Vec<u8> = excluded.iter().flat_map(|r| r.to_le_bytes()).collect();
    hash(&[b"shrink", &parent_id.to_le_bytes(), &child_ordinal.to_le_bytes(), &excluded])
}

/// `ncclCommGrow` seen from an existing member: the parent, its child ordinal and the new
/// size. New ranks know only the unique id the root passed them, so they name the grown
/// communicator by `from_unique_id` instead; the root, which passes both the parent and the
/// unique id, records that alias (`GROW_ALIAS_COLOR`), and analysis names the communicator
/// by this id on every member (`analysis::comms::grow`).
pub fn for_grow(parent_id: u64, child_ordinal: u64, nranks: i32) -> u64 {
    hash(&[b"grow", &parent_id.to_le_bytes(), &child_ordinal.to_le_bytes(), &nranks.to_le_bytes()])
}

/// The `color` of a `comm_created` record (origin `grow`) that is no membership but an
/// alias: its `comm_id` (the new ranks' name) is the communicator `parent_id` names.
/// A grown communicator has no color of its own (NCCL's split colors are >= -1).
pub const GROW_ALIAS_COLOR: i32 = i32::MIN;

/// `ncclCommSplit`: the members of one new communicator share the parent and the color,
/// and split the parent in the same order, so the parent's split ordinal tells successive
/// splits apart. The key is not used: it differs per rank (it only orders ranks).
pub fn for_split(parent_id: u64, split_ordinal: u64, color: i32) -> u64 {
    hash(&[b"split", &parent_id.to_le_bytes(), &split_ordinal.to_le_bytes(), &color.to_le_bytes()])
}

/// `ncclCommInitAll`: all ranks live in this one process.
pub fn for_init_all(host: &str, pid: u32, ordinal: u64) -> u64 {
    hash(&[b"initall", host.as_bytes(), &pid.to_le_bytes(), &ordinal.to_le_bytes()])
}

/// A communicator first seen in a call: only this process can name it.
pub fn for_unknown(host: &str, pid: u32, handle: u64) -> u64 {
    hash(&[b"unknown", host.as_bytes(), &pid.to_le_bytes(), &handle.to_le_bytes()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_inputs_same_id_and_different_inputs_differ() {
        let mut uid = [0u8; 128];
        uid[..8].copy_from_slice(b"FAKENCCL");
        let a = from_unique_id(&uid);
        assert_eq!(a, from_unique_id(&uid));
        uid[20] = 1;
        assert_ne!(a, from_unique_id(&uid));
        assert_ne!(for_split(a, 0, 1), for_split(a, 0, 2));
        assert_ne!(for_split(a, 0, 1), for_split(a, 1, 1));
        assert_eq!(for_split(a, 3, 7), for_split(a, 3, 7));
        assert_ne!(for_unknown("h", 1, 0x1000), for_unknown("h", 2, 0x1000));
        let other = [7u8; 128];
        assert_eq!(from_unique_ids(&[uid, other]), from_unique_ids(&[uid, other]));
        assert_ne!(from_unique_ids(&[uid, other]), from_unique_ids(&[other, uid]));
        assert_ne!(from_unique_ids(&[uid]), from_unique_id(&uid), "one id through Scalable is another origin");
        assert_ne!(for_shrink(a, 0, &[2]), for_shrink(a, 0, &[3]));
        assert_ne!(for_shrink(a, 0, &[2]), for_shrink(a, 1, &[2]));
        assert_ne!(for_grow(a, 0, 4), for_grow(a, 0, 5));
    }
}
