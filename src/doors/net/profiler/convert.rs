//! A descriptor of the ABI NCCL runs, for a chained plugin that exports only an older one
//! (NVIDIA's NCCL Inspector exports v5; NCCL >= 2.29 runs v6, 2.31 v7): v7 → v6 → v5 → v4;
//! or only a newer one (a plugin built for a newer NCCL under NCCL 2.26 at v4 or 2.27/2.28
//! at v5): v4 → v5 → v6 → v7.
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
    from != to && (4..=7).contains(&from) && (4..=7).contains(&to)
}

/// `descr` (version `from`, type `event_ty`) as version `to`, whichever way.
///
/// # Safety
/// As `down` or `up`: `descr` is a whole descriptor of version `from`, `convertible(from, to)`.
pub unsafe fn convert(descr: *const u8, from: u8, to: u8, event_ty: u64) -> Option<Buf> {
    // SAFETY: as the caller promises.
    unsafe {
        if to < from {
            down(descr, from, to, event_ty)
        } else {
            up(descr, from, to, event_ty)
        }
    }
}

/// Where a kernel variant is unknown (an NCCL before v7 names none): an empty name rather
/// than a null pointer a plugin might print.
static NO_VARIANT: &std::ffi::CStr = c"";

/// `descr`, a descriptor of version `from` (>= 4), as the newer version `to`: the older
/// member's bytes, then the fields the newer ABI appended to it: from v4 a task's
/// `parentGroup` (its group, which up to v4 is its parent), from v7 `userTag` 0 and, for a
/// collective, no kernel variant and not symmetric. NCCL of the older version never starts
/// the event types only the newer one has.
///
/// # Safety
/// `descr` points at a whole descriptor of version `from`, `4 <= from < to <= 7`.
pub unsafe fn up(descr: *const u8, from: u8, to: u8, event_ty: u64) -> Option<Buf> {
    if !known(from, event_ty) {
        return None;
    }
    let mut buf: Buf = [0; size_of::<DescrV7>() / 8];
    let out = buf.as_mut_ptr() as *mut u8;
    debug_assert!((4..to).contains(&from) && to <= 7);
    // SAFETY: `descr` holds a whole `from` descriptor, smaller than the `to` one written into
    // `buf`, which is zero beyond what is copied; the head and union offsets are the same in
    // both, and the appended fields are written at the newer layout's offsets.
    unsafe {
        (out as *mut u64).write(event_ty);
        std::ptr::copy_nonoverlapping(descr.add(8), out.add(8), 16);
        std::ptr::copy_nonoverlapping(descr.add(24), out.add(24), union_size(from));
        let put = |offset: usize, value: *mut c_void| (out.add(offset) as *mut *mut c_void).write_unaligned(value);
        let parent = (descr.add(8) as *const *mut c_void).read_unaligned();
        match event_ty {
            ty::COLL => {
                let end = offset_of!(DescrV7, u.coll.parent_group);
                std::ptr::write_bytes(out.add(end), 0, size_of::<DescrV7>() - end);
                put(end, if from == 4 { parent } else { (descr.add(end) as *const *mut c_void).read_unaligned() });
                if to == 7 {
                    put(offset_of!(DescrV7, u.coll.kernel_variant), NO_VARIANT.as_ptr() as *mut c_void);
                }
            }
            ty::P2P => {
                let end = offset_of!(DescrV7, u.p2p.parent_group);
                let group = if from == 4 { parent } else { (descr.add(end) as *const *mut c_void).read_unaligned() };
                std::ptr::write_bytes(out.add(end), 0, size_of::<DescrV7>() - end);
                put(end, group);
            }
            ty::COLL_API => {
                let end = offset_of!(DescrV7, u.coll_api.user_tag);
                std::ptr::write_bytes(out.add(end), 0, size_of::<DescrV7>() - end);
            }
            ty::P2P_API => {
                let end = offset_of!(DescrV7, u.p2p_api.user_tag);
                std::ptr::write_bytes(out.add(end), 0, size_of::<DescrV7>() - end);
            }
            ty::CE_COLL => {
                let end = offset_of!(DescrV7, u.ce_coll.user_tag);
                std::ptr::write_bytes(out.add(end), 0, size_of::<DescrV7>() - end);
            }
            _ => {}
        }
    }
    Some(buf)
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
        assert!(convertible(7, 4) && convertible(6, 5) && convertible(5, 6) && convertible(4, 7));
        assert!(!convertible(4, 3) && !convertible(3, 5) && !convertible(6, 6));
    }

    #[test]
    fn a_v4_task_becomes_v5_and_v7_with_its_group() {
        // SAFETY: all-zero is a valid descriptor (null pointers, zero numbers).
        let mut d: DescrV4 = unsafe { std::mem::zeroed() };
        d.ty = ty::P2P as u8;
        d.parent = 0x3000 as *mut c_void; // up to v4 a task's parent is its group
        d.rank = 1;
        d.u.p2p.count = 9;
        d.u.p2p.peer = 4;
        let p = &d as *const DescrV4 as *const u8;
        // SAFETY: a whole v4 descriptor.
        let v5 = unsafe { convert(p, 4, 5, ty::P2P) }.unwrap();
        // SAFETY: `up` wrote a v5 descriptor into the aligned buffer.
        let v5 = unsafe { &*(v5.as_ptr() as *const DescrV5) };
        // SAFETY: the member the type names.
        let q = unsafe { v5.u.p2p };
        assert_eq!((v5.ty, v5.parent as usize, v5.rank, q.count, q.peer), (ty::P2P, 0x3000, 1, 9, 4));
        assert_eq!(q.parent_group as usize, 0x3000, "parentGroup: the group");
        d.ty = ty::COLL as u8;
        d.u.coll.seq = 5;
        let p = &d as *const DescrV4 as *const u8;
        // SAFETY: as above.
        let v7 = unsafe { convert(p, 4, 7, ty::COLL) }.unwrap();
        // SAFETY: `up` wrote a v7 descriptor.
        let v7 = unsafe { &*(v7.as_ptr() as *const DescrV7) };
        // SAFETY: the member the type names.
        let c = unsafe { v7.u.coll };
        assert_eq!((v7.ty, c.seq, c.parent_group as usize, c.user_tag, c.is_sym_coll), (ty::COLL, 5, 0x3000, 0, false));
        // SAFETY: `up` set a NUL-terminated static name.
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(c.kernel_variant) }, c"");
        // SAFETY: a whole v4 descriptor; v4 has no API events to convert.
        assert!(unsafe { convert(p, 4, 5, ty::COLL_API) }.is_none());
    }
}
