//! A process group's description as the Python door saw it (kind 30, history ring):
//! `torch.distributed.new_group(group_desc=...)`, which Megatron fills with the group's
//! part (TENSOR_MODEL_PARALLEL_GROUP, DATA_PARALLEL_GROUP, ...). `sf roles` takes it as
//! confirmation of the role it infers, never as a requirement: a job without the door
//! writes none.

use serde::Serialize;

use super::records::{Decoder, Encoder};
use super::records_ports::Text;

/// Bytes of a description kept (112 - 8 - 8 - 4 - 4 - 1, seven spare): Megatron's
/// longest is under 40.
pub const DESC_BYTES: usize = 80;

/// Kind 30: this rank is a member of a process group described as `desc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct GroupDesc {
    pub t_ns: u64,
    /// FNV-1a of the members' global ranks, ascending, in decimal joined by ","
    /// ("0,2,4,6"): what a reader computes from a communicator's members to match it.
    #[serde(serialize_with = "super::records::hex_u64")]
    pub members_id: u64,
    pub size: i32,
    pub global_rank: i32,
    pub desc: Text<DESC_BYTES>,
}

/// The id `GroupDesc::members_id` gives the group of these global ranks, ascending.
pub fn members_id(ranks: &[u32]) -> u64 {
    let text = ranks.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    crate::core::fnv::fnv1a(text.as_bytes())
}

pub(super) fn encode(g: &GroupDesc, w: &mut Encoder) {
    w.u64(g.t_ns);
    w.u64(g.members_id);
    w.i32(g.size);
    w.i32(g.global_rank);
    g.desc.encode(w);
}

pub(super) fn decode(r: &mut Decoder) -> Option<GroupDesc> {
    Some(GroupDesc {
        t_ns: r.u64()?,
        members_id: r.u64()?,
        size: r.i32()?,
        global_rank: r.i32()?,
        desc: Text::decode(r)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::log::format::PAYLOAD_CAPACITY;
    use crate::core::log::records::RecordBody;

    #[test]
    fn a_description_survives_its_round_trip_and_a_long_one_is_cut() {
        for desc in [&b"TENSOR_MODEL_PARALLEL_GROUP"[..], &[b'x'; 200][..]] {
            let body = RecordBody::GroupDesc(GroupDesc {
                t_ns: 7,
                members_id: members_id(&[0, 2, 4, 6]),
                size: 4,
                global_rank: 2,
                desc: Text::new(desc),
            });
            let mut out = [0; PAYLOAD_CAPACITY];
            let len = body.encode(&mut out);
            assert_eq!(RecordBody::decode(body.kind(), &out[..len]), Some(body));
            let RecordBody::GroupDesc(g) = body else { unreachable!() };
            assert_eq!(g.desc.as_bytes(), &desc[..desc.len().min(DESC_BYTES)]);
        }
    }

    #[test]
    fn the_members_id_is_the_python_doors() {
        // What python/stagefrontier_torch.py's _fnv1a64("0,2,4,6") gives.
        assert_eq!(members_id(&[0, 2, 4, 6]), 0xef0d_4919_f2bf_132b);
    }
}
