//! A descriptor of the ABI NCCL runs, for a chained plugin that exports only an older one
//! (NVIDIA's NCCL Inspector exports v5; NCCL >= 2.29 runs v6, 2.31 v7): v7 → v6 → v5 → v4.
//!
//! Each version's union members start with the previous version's members unchanged
//! (`abi_layout_tests` holds both to NCCL's numbers): a v7 `coll` is v6's plus
//! `kernelVariant`, `isSymColl` and `userTag`; a v5 `coll` is v4's plus `parentGroup`. So a
//! newer descriptor becomes an older one by copying the older union's bytes, with the type
//! narrowed to `uint8_t` for v4, and, for v4, a task's parent being its group (`parentGroup`),
//! as NCCL up to v4 sets it. Event types the older ABI does not have are not forwarded.

use std::ffi::c_void;
use std::mem::{offset_of, size_of};

use super::abi::{DescrV4, DescrV5, DescrV6, DescrV7};
use crate::core::net::profiler::ty;

/// Room for the largest descriptor (v7), 8-byte aligned.
pub type Buf = [u64; size_of::<DescrV7>() / 8];

/// The newest event type bit each ABI has (v4: NetPlugin; v5: KernelLaunch; v6: CeBatch).
fn known(version: u8, event_ty: u64) -> bool {
    let top = match version {
        4 => ty::NET_PLUGIN,
        5 => ty::KERNEL_LAUNCH,
        6 => ty::CE_BATCH,
        _ => return true,
    };
    event_ty != 0 && event_ty <= top
}

fn union_size(version: u8) -> usize {
    match version {
        4 => size_of::<DescrV4>() - 24,
        5 => size_of::<DescrV5>() - 24,
        6 => size_of::<DescrV6>() - 24,
        _ => size_of::<DescrV7>() - 24,
    }
}

/// Whether a plugin exporting `to` can be chained behind the door running `from`.
pub fn convertible(from: u8, to: u8) -> bool {
    (4..from).contains(&to) && from <= 7
}

/// `descr`, a descriptor of version `from` of type `event_ty`, as version `to`; None for an
/// event type `to` lacks.
///
/// # Safety
/// `descr` points at a whole descriptor of version `from` (>= 5), `convertible(from, to)`.
pub unsafe fn down(descr: *const u8, from: u8, to: u8, event_ty: u64) -> Option<Buf> {
    if !known(to, event_ty) {
        return None;
    }
    let mut buf: Buf = [0; size_of::<DescrV7>() / 8];
    let out = buf.as_mut_ptr() as *mut u8;
    debug_assert!(from >= 5 && union_size(from) >= union_size(to));
    // SAFETY: `descr` holds a whole `from` descriptor, larger than the `to` one written into
    // `buf`; the offsets are the same in both (head at 0, 8, 16; union at 24).
    unsafe {
        if to <= 4 {
            *out = event_ty as u8;
        } else {
            (out as *mut u64).write(event_ty);
        }
        std::ptr::copy_nonoverlapping(descr.add(8), out.add(8), 16);
        std::ptr::copy_nonoverlapping(descr.add(24), out.add(24), union_size(to));
        if to == 4 && (event_ty == ty::COLL || event_ty == ty::P2P) {
            // Up to v4 a task's parent is its group; from v5 it is the API event, and the
            // group is `parentGroup`.
            let group = if event_ty == ty::COLL {
                offset_of!(DescrV5, u.coll.parent_group)
            } else {
                offset_of!(DescrV5, u.p2p.parent_group)
            };
            let parent = (descr.add(group) as *const *mut c_void).read_unaligned();
            (out.add(8) as *mut *mut c_void).write(parent);
        }
    }
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doors::net::profiler::abi::CollV5;

    #[test]
    fn a_v7_collective_becomes_v5_and_v4() {
        // SAFETY: all-zero is a valid descriptor (null pointers, zero numbers).
        let mut d: DescrV7 = unsafe { std::mem::zeroed() };
        d.ty = ty::COLL;
        d.parent = 0x1000 as *mut c_void;
        d.rank = 3;
        // Writing a union field is safe; reading it back is not.
        d.u.coll.seq = 42;
        d.u.coll.count = 7;
        d.u.coll.parent_group = 0x2000 as *mut c_void;
        d.u.coll.user_tag = 9;
        let p = &d as *const DescrV7 as *const u8;
        // SAFETY: a whole v7 descriptor.
        let v5 = unsafe { down(p, 7, 5, ty::COLL) }.unwrap();
        // SAFETY: `down` wrote a v5 descriptor into the aligned buffer.
        let v5 = unsafe { &*(v5.as_ptr() as *const DescrV5) };
        // SAFETY: the member the type names.
        let c: CollV5 = unsafe { v5.u.coll };
        assert_eq!((v5.ty, v5.parent as usize, v5.rank, c.seq, c.count), (ty::COLL, 0x1000, 3, 42, 7));
        assert_eq!(c.parent_group as usize, 0x2000);
        // SAFETY: as above.
        let v4 = unsafe { down(p, 7, 4, ty::COLL) }.unwrap();
        // SAFETY: `down` wrote a v4 descriptor.
        let v4 = unsafe { &*(v4.as_ptr() as *const DescrV4) };
        assert_eq!((v4.ty, v4.parent as usize, v4.rank), (ty::COLL as u8, 0x2000, 3), "v4: parent is the group");
        // SAFETY: the member the type names.
        assert_eq!(unsafe { v4.u.coll.seq }, 42);
    }

    #[test]
    fn types_an_older_abi_lacks_are_not_forwarded() {
        // SAFETY: all-zero is a valid descriptor.
        let d: DescrV7 = unsafe { std::mem::zeroed() };
        let p = &d as *const DescrV7 as *const u8;
        // SAFETY: a whole v7 descriptor.
        unsafe {
            assert!(down(p, 7, 4, ty::GROUP_API).is_none());
            assert!(down(p, 7, 5, ty::CE_COLL).is_none());
            assert!(down(p, 7, 6, 1 << 15).is_none(), "v7's kernel phase");
            assert!(down(p, 7, 6, ty::CE_COLL).is_some());
        }
        assert!(convertible(7, 4) && convertible(6, 5) && !convertible(5, 6) && !convertible(4, 3));
    }
}
