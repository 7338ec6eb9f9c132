//! Confirmation from the names a job gave its process groups: where the Python door saw
//! `torch.distributed.new_group(group_desc=...)` (Megatron names every group it makes),
//! each communicator is told the names given to a group of its members, and whether they
//! agree with the role inferred. The names never change a role: a job without them is
//! read the same, and a name that disagrees is reported, not obeyed.

use std::collections::{BTreeMap, BTreeSet};

use super::{Role, Roles};
use crate::core::log::records_groups::members_id;

/// The role a group's name claims; None for names that claim none (MODEL_PARALLEL_GROUP,
/// EMBEDDING_GROUP, TENSOR_AND_DATA_PARALLEL_GROUP, a program's own names, ...).
pub fn role_of(name: &str) -> Option<Role> {
    match name {
        "TENSOR_MODEL_PARALLEL_GROUP" => Some(Role::Tp),
        "PIPELINE_MODEL_PARALLEL_GROUP" => Some(Role::Pp),
        "CONTEXT_PARALLEL_GROUP" => Some(Role::Cp),
        "EXPERT_MODEL_PARALLEL_GROUP" => Some(Role::Ep),
        // torch's name for the group init_process_group makes.
        "default_pg" => Some(Role::World),
        // With its gloo twin (_GLOO) and the one context parallelism widens (_WITH_CP).
        _ if name.starts_with("DATA_PARALLEL_GROUP") => Some(Role::Dp),
        _ => None,
    }
}

/// Gives each communicator the names of the groups with its members (`named`: members'
/// id, as `records_groups::members_id` computes it, to the names seen) and whether they
/// agree with its role; a note for each that disagrees.
pub fn confirm(roles: &mut Roles, named: &BTreeMap<u64, BTreeSet<String>>) {
    for comm in &mut roles.communicators {
        let Some(names) = named.get(&members_id(&comm.members)) else { continue };
        comm.names = names.iter().cloned().collect();
        // Several names can share one member set (DATA_PARALLEL_GROUP and
        // DATA_PARALLEL_GROUP_WITH_CP without context parallelism): one of the right role
        // is agreement.
        let claimed: Vec<Role> = names.iter().filter_map(|name| role_of(name)).collect();
        comm.names_agree = (!claimed.is_empty()).then(|| claimed.contains(&comm.role));
        if comm.names_agree == Some(false) {
            roles.notes.push(format!(
                "{:#018x} is inferred {} from its calls but named {}: the inference stands (names confirm it, \
                 never decide it)",
                comm.comm_id,
                comm.role.name(),
                comm.names.join(", ")
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::roles::{CommRole, Layout, Traffic};

    fn roles(comms: &[(Role, &[u32])]) -> Roles {
        let communicators = comms
            .iter()
            .enumerate()
            .map(|(i, &(role, members))| CommRole {
                comm_id: i as u64 + 1,
                role,
                members: members.to_vec(),
                traffic: Traffic::default(),
                evidence: String::new(),
                names: Vec::new(),
                names_agree: None,
            })
            .collect();
        Roles {
            world_size: 4,
            layout: Layout::default(),
            flat: false,
            communicators,
            pipelines: Vec::new(),
            ranks: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn named(groups: &[(&[u32], &str)]) -> BTreeMap<u64, BTreeSet<String>> {
        let mut named: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
        for (members, name) in groups {
            named.entry(members_id(members)).or_default().insert(name.to_string());
        }
        named
    }

    #[test]
    fn a_name_of_the_inferred_role_agrees() {
        let mut r = roles(&[(Role::Tp, &[0, 1]), (Role::Dp, &[0, 2]), (Role::World, &[0, 1, 2, 3])]);
        let names = named(&[
            (&[0, 1], "TENSOR_MODEL_PARALLEL_GROUP"),
            (&[0, 2], "DATA_PARALLEL_GROUP"),
            (&[0, 1, 2, 3], "default_pg"),
        ]);
        confirm(&mut r, &names);
        for c in &r.communicators {
            assert_eq!((c.names.len(), c.names_agree), (1, Some(true)), "{c:?}");
        }
        assert!(r.notes.is_empty(), "{:?}", r.notes);
    }

    #[test]
    fn a_name_of_another_role_disagrees_and_the_role_stays() {
        let mut r = roles(&[(Role::Tp, &[0, 1])]);
        confirm(&mut r, &named(&[(&[0, 1], "DATA_PARALLEL_GROUP")]));
        let c = &r.communicators[0];
        assert_eq!((c.role, c.names_agree), (Role::Tp, Some(false)));
        assert_eq!(r.notes.len(), 1);
        assert!(r.notes[0].contains("inferred tp") && r.notes[0].contains("DATA_PARALLEL_GROUP"), "{:?}", r.notes);
    }

    #[test]
    fn names_that_claim_no_role_neither_agree_nor_disagree() {
        let mut r = roles(&[(Role::Other, &[0, 3]), (Role::Dp, &[1, 2])]);
        confirm(&mut r, &named(&[(&[0, 3], "EMBEDDING_GROUP")]));
        let [embedding, unnamed] = &r.communicators[..] else { panic!() };
        assert_eq!((embedding.names.as_slice(), embedding.names_agree), (&["EMBEDDING_GROUP".to_string()][..], None));
        assert_eq!((unnamed.names.len(), unnamed.names_agree), (0, None));
        assert!(r.notes.is_empty());
    }

    #[test]
    fn one_of_several_names_of_the_role_is_agreement() {
        let mut r = roles(&[(Role::Pp, &[0, 2])]);
        let names = named(&[(&[0, 2], "MODEL_PARALLEL_GROUP"), (&[0, 2], "PIPELINE_MODEL_PARALLEL_GROUP")]);
        confirm(&mut r, &names);
        let c = &r.communicators[0];
        assert_eq!(c.names, ["MODEL_PARALLEL_GROUP", "PIPELINE_MODEL_PARALLEL_GROUP"]);
        assert_eq!(c.names_agree, Some(true));
        let mut r = roles(&[(Role::Dp, &[0, 2])]);
        confirm(&mut r, &named(&[(&[0, 2], "DATA_PARALLEL_GROUP"), (&[0, 2], "DATA_PARALLEL_GROUP_WITH_CP")]));
        assert_eq!(r.communicators[0].names_agree, Some(true));
    }
}
