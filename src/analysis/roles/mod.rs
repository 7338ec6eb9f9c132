//! Roles without configuration: each communicator's part in a tensor-, pipeline-, data-,
//! expert- or context-parallel job, and each rank's coordinates, from what the logs hold
//! (communicator creation, the calls each communicator carries and in what order, and
//! send/recv peers). Nothing is asked of the operator.
//!
//! The rules, in order (each communicator's `evidence` says which one applied):
//! 1. world: the first communicator made that spans every rank.
//! 2. send/recv between ranks (on communicators other than the world) joins them into
//!    flows (`flow`): a chain is a pipeline, its stages in the activations' order (pp);
//!    a ring is context parallelism (cp).
//! 3. alltoall: expert parallelism (ep).
//! 4. reduce-scatter or all-gather (a distributed optimizer's gradient and parameter
//!    sync): data parallelism (dp).
//! 5. allreduce only: tensor parallelism when its calls fall between the pipeline's
//!    exchanges in more than half of the stretches (`INTERLEAVED_SHARE`): TP runs inside
//!    every forward and backward pass, DP once per step after the last. Without a
//!    pipeline: tp when a dp communicator is found by rule 4, or when it carries at least
//!    `TP_CALLS_RATIO` times the calls per member of the quietest allreduce-only
//!    communicator (one allreduce per layer and microbatch against one per gradient
//!    bucket); otherwise dp.
//! 6. no calls (or broadcasts only): the role of a communicator with the same members
//!    (a pipeline's group when its stages talk on pair communicators), else other.
//! 7. a job with no tp, pp, dp, ep or cp communicator is data parallel on the world.
//!
//! Coordinates: tp, dp, ep and cp are a rank's position by global rank in its group of
//! that role; pp is its stage in its pipeline.
//!
//! The names a job gave its groups, where the Python door saw them, are checked against
//! the roles afterwards (`names`): confirmation, never an input.

mod flow;
pub mod names;
mod traffic;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::analysis::comms::members::{self, CommMembers};
use crate::core::log::records::CommCreated;
pub use flow::Flow;
pub use traffic::{Call, Traffic};

/// Above this share of the stretches between pipeline exchanges holding its calls, an
/// allreduce-only communicator is tensor parallel.
pub const INTERLEAVED_SHARE: f64 = 0.5;
/// Without a pipeline, an allreduce-only communicator with at least this many times the
/// calls per member of the quietest one is tensor parallel.
pub const TP_CALLS_RATIO: f64 = 2.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    World,
    Tp,
    Pp,
    Dp,
    Ep,
    Cp,
    Other,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::World => "world",
            Role::Tp => "tp",
            Role::Pp => "pp",
            Role::Dp => "dp",
            Role::Ep => "ep",
            Role::Cp => "cp",
            Role::Other => "other",
        }
    }

    /// The roles that are parallel dimensions, in the order a layout is written.
    pub const DIMENSIONS: [Role; 5] = [Role::Tp, Role::Pp, Role::Dp, Role::Ep, Role::Cp];
}

/// One rank's logs, as the analysis needs them.
pub struct RankInput<'a> {
    pub global_rank: u32,
    /// Its `comm_created` records, in log order.
    pub created: &'a [CommCreated],
    /// Its NCCL calls on communicators, in the order they were entered.
    pub calls: &'a [Call],
    /// Where in `calls` each step begins that began after the oldest call (the index of
    /// its first call), ascending; empty without step markers.
    pub step_starts: &'a [usize],
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CommRole {
    #[serde(serialize_with = "crate::core::log::records::hex_u64")]
    pub comm_id: u64,
    pub role: Role,
    /// Global ranks, ascending.
    pub members: Vec<u32>,
    pub traffic: Traffic,
    pub evidence: String,
    /// The names the job gave process groups of these members (`group_desc` records of
    /// the Python door), sorted; empty without them (`names::confirm`).
    pub names: Vec<String>,
    /// Whether a name's role is the one inferred; None when no name claims a role.
    pub names_agree: Option<bool>,
}

/// The size of each parallel dimension found (1: not found); ep and cp only when found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Layout {
    pub tp: usize,
    pub pp: usize,
    pub dp: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ep: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cp: Option<usize>,
}

impl Layout {
    pub fn size(&self, role: Role) -> Option<usize> {
        match role {
            Role::Tp => Some(self.tp),
            Role::Pp => Some(self.pp),
            Role::Dp => Some(self.dp),
            Role::Ep => self.ep,
            Role::Cp => self.cp,
            Role::World | Role::Other => None,
        }
    }

    /// `tp=2 pp=4 dp=2` (ep and cp when found).
    pub fn line(&self) -> String {
        Role::DIMENSIONS
            .iter()
            .filter_map(|&role| self.size(role).map(|size| (role, size)))
            .map(|(role, size)| format!("{}={size}", role.name()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// One rank's 0-based coordinates; None where the rank is in no group of a role the job has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Coords {
    pub rank: u32,
    pub tp: Option<usize>,
    pub pp: Option<usize>,
    pub dp: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ep: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cp: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Roles {
    pub world_size: usize,
    pub layout: Layout,
    /// Only data parallelism on the world communicator (rule 7).
    pub flat: bool,
    pub communicators: Vec<CommRole>,
    /// The pipelines, each its ranks in stage order.
    pub pipelines: Vec<Vec<u32>>,
    /// Every rank with a log, ascending.
    pub ranks: Vec<Coords>,
    /// What kept the answer from being whole (missing logs, uneven groups, ...).
    pub notes: Vec<String>,
}

/// Infers the roles of a job of `world_size` ranks from the logs of `ranks`.
pub fn infer(world_size: usize, ranks: &[RankInput]) -> Roles {
    let comms = members::collect(ranks.iter().map(|r| (r.global_rank, r.created)));
    let locals = members::local_ranks(&comms);
    let traffic = traffic::per_comm(ranks.iter().map(|r| r.calls));
    let mut notes = Vec::new();
    let logged: BTreeSet<u32> = ranks.iter().map(|r| r.global_rank).collect();
    if logged.len() < world_size {
        notes.push(format!("{} of {world_size} ranks have a log: roles are read from those", logged.len()));
    }
    let span = world_size.max(logged.len());
    let with_comms = ranks.iter().filter(|r| !r.created.is_empty()).count();
    if with_comms < logged.len() {
        notes.push(format!("{} ranks' logs hold no communicator creation", logged.len() - with_comms));
    }
    // Spanning: a member recorded the job's size, or (a split, its size unrecorded) every
    // rank whose log holds a creation is a member.
    let spans = |c: &CommMembers| c.nranks as usize == span || (c.nranks < 0 && c.members.len() >= with_comms);
    let world = comms.values().filter(|c| spans(c)).min_by_key(|c| (c.first_ordinal(), c.comm_id));
    let world_id = world.map(|c| c.comm_id);
    let mut assigned: BTreeMap<u64, (Role, String)> = BTreeMap::new();
    if let Some(world) = world {
        let evidence = format!("spans all {span} ranks; the first such communicator made");
        assigned.insert(world.comm_id, (Role::World, evidence));
    }
    let group_comms: Vec<&CommMembers> =
        comms.values().filter(|c| Some(c.comm_id) != world_id && c.members.len() >= 2).collect();
    let traffic_of = |id: u64| traffic.get(&id).copied().unwrap_or_default();

    // Rule 2: send/recv flows.
    let p2p_comms: BTreeSet<u64> =
        group_comms.iter().map(|c| c.comm_id).filter(|&id| traffic_of(id).p2p() > 0).collect();
    let flows = flow::flows(ranks, &p2p_comms, |comm, caller, peer| match locals.get(&comm) {
        Some(locals) => locals.get(&peer).copied(),
        None => other_member(&comms, comm, caller),
    });
    let mut pipelines = Vec::new();
    for comm in group_comms.iter().filter(|c| p2p_comms.contains(&c.comm_id)) {
        let ranks = comm.global_ranks();
        let Some(flow) = flows.iter().find(|f| ranks.iter().all(|r| f.ranks().contains(r))) else { continue };
        let (role, evidence) = match flow {
            Flow::Chain(order) => {
                (Role::Pp, format!("send/recv along a pipeline, activations flowing {}", arrows(order)))
            }
            Flow::Ring(order) => (Role::Cp, format!("send/recv around a ring {} (ring attention)", arrows(order))),
            Flow::Irregular(_) => (Role::Other, "send/recv, neither a chain nor a ring".to_string()),
        };
        assigned.insert(comm.comm_id, (role, evidence));
    }
    for flow in &flows {
        if let Flow::Chain(order) = flow {
            pipelines.push(order.clone());
        }
    }

    // Rules 3 and 4.
    for comm in &group_comms {
        if assigned.contains_key(&comm.comm_id) {
            continue;
        }
        let t = traffic_of(comm.comm_id);
        let found = if t.alltoall > 0 {
            Some((Role::Ep, format!("alltoall ({} calls)", t.alltoall)))
        } else if t.reduce_scatter + t.all_gather > 0 {
            Some((
                Role::Dp,
                format!(
                    "reduce-scatter ({}) and all-gather ({}): a distributed optimizer's gradient and parameter sync",
                    t.reduce_scatter, t.all_gather
                ),
            ))
        } else {
            None
        };
        if let Some(found) = found {
            assigned.insert(comm.comm_id, found);
        }
    }

    // Rule 5: allreduce only.
    let allreduce_only: Vec<&&CommMembers> = group_comms
        .iter()
        .filter(|c| !assigned.contains_key(&c.comm_id) && traffic_of(c.comm_id).allreduce_only())
        .collect();
    let p2p_list: Vec<u64> = p2p_comms.iter().copied().collect();
    let any_dp = assigned.values().any(|(role, _)| *role == Role::Dp);
    let per_member = |c: &CommMembers| traffic_of(c.comm_id).allreduce as f64 / c.members.len() as f64;
    let quietest = allreduce_only.iter().map(|c| per_member(c)).fold(f64::INFINITY, f64::min);
    for comm in &allreduce_only {
        let found = if !pipelines.is_empty() {
            let (mut with, mut total) = (0, 0);
            for rank in ranks.iter().filter(|r| comm.members.iter().any(|m| m.global_rank == r.global_rank)) {
                let (w, t) = traffic::stretches_with(rank.calls, comm.comm_id, &p2p_list);
                with += w;
                total += t;
            }
            let share = with as f64 / total.max(1) as f64;
            let role = if share > INTERLEAVED_SHARE { Role::Tp } else { Role::Dp };
            let place = if role == Role::Tp { "inside the passes" } else { "once per step, apart from the passes" };
            (role, format!("allreduce only, in {with} of {total} stretches between pipeline exchanges ({place})"))
        } else if any_dp {
            (Role::Tp, "allreduce only, beside a data-parallel communicator".to_string())
        } else {
            let calls = per_member(comm);
            if calls >= TP_CALLS_RATIO * quietest {
                (Role::Tp, format!("allreduce only, {calls:.0} calls per member, at least {TP_CALLS_RATIO}x the quietest allreduce communicator's {quietest:.0}"))
            } else {
                (Role::Dp, format!("allreduce only, {calls:.0} calls per member: the gradient allreduce"))
            }
        };
        assigned.insert(comm.comm_id, found);
    }

    // Rule 6: quiet communicators take the role of one with the same members.
    for comm in &group_comms {
        if assigned.contains_key(&comm.comm_id) {
            continue;
        }
        let ranks = comm.global_ranks();
        let what = if traffic_of(comm.comm_id).total() == 0 { "no calls" } else { "broadcasts only" };
        let found = if let Some(order) = pipelines.iter().find(|p| sorted(p) == ranks) {
            (Role::Pp, format!("{what}; the same ranks as the pipeline {}", arrows(order)))
        } else if let Some((role, _)) = group_comms
            .iter()
            .filter(|other| other.global_ranks() == ranks)
            .find_map(|other| assigned.get(&other.comm_id).filter(|(role, _)| *role != Role::Other))
        {
            (*role, format!("{what}; the same ranks as a {} communicator", role.name()))
        } else {
            (Role::Other, format!("{what}; no role to tell"))
        };
        assigned.insert(comm.comm_id, found);
    }

    let mut communicators: Vec<CommRole> = comms
        .values()
        .filter_map(|c| {
            let (role, evidence) = assigned.get(&c.comm_id)?.clone();
            Some(CommRole {
                comm_id: c.comm_id,
                role,
                members: c.global_ranks(),
                traffic: traffic_of(c.comm_id),
                evidence,
                names: Vec::new(),
                names_agree: None,
            })
        })
        .collect();
    communicators.sort_by(|a, b| (a.role, &a.members, a.comm_id).cmp(&(b.role, &b.members, b.comm_id)));
    // Rule 7 needs the world communicator: a job that recorded none has no layout to tell.
    let flat = world_id.is_some() && !communicators.iter().any(|c| Role::DIMENSIONS.contains(&c.role));
    let (layout, coords) = coordinates(span, &logged, &communicators, &pipelines, flat, &mut notes);
    Roles { world_size: span, layout, flat, communicators, pipelines, ranks: coords, notes }
}

fn sorted(ranks: &[u32]) -> Vec<u32> {
    let mut ranks = ranks.to_vec();
    ranks.sort_unstable();
    ranks
}

fn arrows(order: &[u32]) -> String {
    order.iter().map(u32::to_string).collect::<Vec<_>>().join("->")
}

/// In a 2-rank communicator whose ranks are unknown, the peer is the other member.
fn other_member(comms: &BTreeMap<u64, CommMembers>, comm: u64, caller: u32) -> Option<u32> {
    match comms.get(&comm)?.global_ranks().as_slice() {
        [a, b] if *a == caller => Some(*b),
        [a, b] if *b == caller => Some(*a),
        _ => None,
    }
}

/// The layout and the coordinates of every rank with a log (a header's world size is
/// not trusted with an allocation) from the communicators' roles.
fn coordinates(
    world_size: usize,
    logged: &BTreeSet<u32>,
    communicators: &[CommRole],
    pipelines: &[Vec<u32>],
    flat: bool,
    notes: &mut Vec<String>,
) -> (Layout, Vec<Coords>) {
    let mut coords: Vec<Coords> =
        logged.iter().map(|&rank| Coords { rank, tp: None, pp: None, dp: None, ep: None, cp: None }).collect();
    let mut layout = Layout { tp: 1, pp: 1, dp: 1, ep: None, cp: None };
    if flat {
        layout.dp = world_size;
        for c in &mut coords {
            (c.tp, c.pp, c.dp) = (Some(0), Some(0), Some(c.rank as usize));
        }
        return (layout, coords);
    }
    for role in Role::DIMENSIONS {
        let groups: Vec<Vec<u32>> = if role == Role::Pp {
            pipelines.to_vec()
        } else {
            let mut groups: Vec<Vec<u32>> =
                communicators.iter().filter(|c| c.role == role).map(|c| c.members.clone()).collect();
            groups.sort();
            groups.dedup();
            groups
        };
        let size = groups.iter().map(Vec::len).max();
        if let Some(size) = size {
            if groups.iter().any(|g| g.len() != size) {
                notes.push(format!("{} groups differ in size; the layout gives the largest", role.name()));
            }
        }
        match role {
            Role::Tp => layout.tp = size.unwrap_or(1),
            Role::Pp => layout.pp = size.unwrap_or(1),
            Role::Dp => layout.dp = size.unwrap_or(1),
            Role::Ep => layout.ep = size,
            Role::Cp => layout.cp = size,
            Role::World | Role::Other => {}
        }
        for c in &mut coords {
            // Stages keep the pipeline's order; the other groups are sorted by rank.
            let position = groups.iter().find_map(|g| g.iter().position(|&r| r == c.rank));
            let position = if size.is_none() { Some(0) } else { position };
            match role {
                Role::Tp => c.tp = position,
                Role::Pp => c.pp = position,
                Role::Dp => c.dp = position,
                Role::Ep => c.ep = size.and(position),
                Role::Cp => c.cp = size.and(position),
                Role::World | Role::Other => {}
            }
        }
    }
    let product: usize = Role::DIMENSIONS.iter().filter_map(|&r| layout.size(r)).product();
    if product != world_size {
        notes.push(format!("the layout {} makes {product} ranks, the job has {world_size}", layout.line()));
    }
    (layout, coords)
}

#[cfg(test)]
mod tests;
