//! Pipelines from the send/recv traffic: which ranks exchange with which, and which way
//! the activations flow.
//!
//! The first transfer between two pipeline neighbours in a step is always the first
//! microbatch's activation, forward (1F1B and GPipe alike: no gradient exists before a
//! forward pass). So per pair of peers, a rank whose first send/recv with the other in a
//! step is a send is the earlier stage. Steps begin where the step markers say; a log
//! without them has one step, from its oldest call held (right when the log holds the
//! job's start; a log that lost its oldest calls may start mid-step, which the report
//! says). Every step of both ends must agree. Ranks joined by exchanges form chains (pipelines; stage = position
//! along the forward flow) or rings (every rank sending on to the next, as context
//! parallelism's ring attention does); anything else is neither.

use std::collections::{BTreeMap, BTreeSet};

use super::traffic::Call;
use super::RankInput;
use crate::core::log::nccl_op::NcclOp;

/// A group of ranks connected by send/recv.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Ranks in stage order, the activations flowing from each to the next.
    Chain(Vec<u32>),
    /// Ranks each sending on to the next (the last to the first).
    Ring(Vec<u32>),
    /// Connected, but neither (the ranks, sorted): branching, or the two ends disagree on
    /// which way the first transfer went.
    Irregular(Vec<u32>),
}

impl Flow {
    pub fn ranks(&self) -> &[u32] {
        match self {
            Flow::Chain(r) | Flow::Ring(r) | Flow::Irregular(r) => r,
        }
    }
}

/// The stretches of a rank's calls that begin a step: from each step start to the next
/// (calls before the first start are in a step begun before the log's oldest call); all
/// the calls when there is no step start.
fn steps<'a>(rank: &RankInput<'a>) -> Vec<&'a [Call]> {
    let calls = rank.calls;
    if rank.step_starts.is_empty() {
        return vec![calls];
    }
    let mut bounds: Vec<usize> = rank.step_starts.iter().map(|&s| s.min(calls.len())).collect();
    bounds.push(calls.len());
    bounds.windows(2).map(|w| &calls[w[0]..w[1].max(w[0])]).collect()
}

/// Who sent first between each pair: (earlier, later) per unordered pair, or None where
/// the ends or the steps disagree. `global(comm, caller, peer)` is the global rank of the
/// caller's peer.
fn first_transfers(
    ranks: &[RankInput],
    p2p_comms: &BTreeSet<u64>,
    global: impl Fn(u64, u32, i32) -> Option<u32>,
) -> BTreeMap<(u32, u32), Option<(u32, u32)>> {
    let mut pairs: BTreeMap<(u32, u32), Option<(u32, u32)>> = BTreeMap::new();
    for input in ranks {
        let rank = input.global_rank;
        for step in steps(input) {
            let mut seen = BTreeSet::new();
            for call in step.iter().filter(|c| c.is_p2p() && p2p_comms.contains(&c.comm_id)) {
                let Some(peer) = global(call.comm_id, rank, call.peer) else { continue };
                if peer == rank || !seen.insert(peer) {
                    continue;
                }
                let direction = if call.op == NcclOp::Send { (rank, peer) } else { (peer, rank) };
                let key = (rank.min(peer), rank.max(peer));
                match pairs.get(&key) {
                    None => {
                        pairs.insert(key, Some(direction));
                    }
                    Some(Some(seen_direction)) if *seen_direction != direction => {
                        pairs.insert(key, None);
                    }
                    Some(_) => {}
                }
            }
        }
    }
    pairs
}

/// The flows of a job's send/recv traffic on `p2p_comms`, ordered by lowest rank.
pub fn flows(
    ranks: &[RankInput],
    p2p_comms: &BTreeSet<u64>,
    global: impl Fn(u64, u32, i32) -> Option<u32>,
) -> Vec<Flow> {
    let pairs = first_transfers(ranks, p2p_comms, global);
    // Connected components over the pairs.
    let mut component: BTreeMap<u32, u32> = BTreeMap::new();
    fn root(component: &mut BTreeMap<u32, u32>, mut r: u32) -> u32 {
        while let Some(&up) = component.get(&r) {
            if up == r {
                break;
            }
            r = up;
        }
        r
    }
    for &(a, b) in pairs.keys() {
        component.entry(a).or_insert(a);
        component.entry(b).or_insert(b);
        let (ra, rb) = (root(&mut component, a), root(&mut component, b));
        component.insert(ra.max(rb), ra.min(rb));
    }
    let mut groups: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for &rank in component.clone().keys() {
        let r = root(&mut component, rank);
        groups.entry(r).or_default().push(rank);
    }
    groups.into_values().map(|ranks| shape(&ranks, &pairs)).collect()
}

fn shape(ranks: &[u32], pairs: &BTreeMap<(u32, u32), Option<(u32, u32)>>) -> Flow {
    let irregular = || Flow::Irregular(ranks.to_vec());
    let mut next: BTreeMap<u32, u32> = BTreeMap::new();
    let mut has_previous: BTreeSet<u32> = BTreeSet::new();
    for (_, direction) in pairs.iter().filter(|((a, _), _)| ranks.contains(a)) {
        let Some((from, to)) = direction else { return irregular() };
        // Branching: one rank forwarding to two, or fed by two.
        if next.insert(*from, *to).is_some() || !has_previous.insert(*to) {
            return irregular();
        }
    }
    let heads: Vec<u32> = ranks.iter().copied().filter(|r| !has_previous.contains(r)).collect();
    let start = match heads.as_slice() {
        [head] => *head,
        // Every rank has a previous one: a ring, walked from the lowest rank.
        [] => ranks[0],
        _ => return irregular(),
    };
    let mut order = vec![start];
    while let Some(&to) = next.get(order.last().unwrap_or(&start)) {
        if to == start || order.len() > ranks.len() {
            break;
        }
        order.push(to);
    }
    if order.len() != ranks.len() {
        return irregular();
    }
    if heads.is_empty() {
        Flow::Ring(order)
    } else {
        Flow::Chain(order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p2p(op: NcclOp, peer: i32) -> Call {
        Call { comm_id: 9, op, peer }
    }

    fn flows_with_steps(calls: &[(u32, Vec<Call>)], step_starts: &[usize]) -> Vec<Flow> {
        let comms = BTreeSet::from([9]);
        let inputs: Vec<RankInput> =
            calls.iter().map(|(r, c)| RankInput { global_rank: *r, created: &[], calls: c, step_starts }).collect();
        flows(&inputs, &comms, |_, _, peer| u32::try_from(peer).ok())
    }

    fn flows_of(calls: &[(u32, Vec<Call>)]) -> Vec<Flow> {
        flows_with_steps(calls, &[])
    }

    #[test]
    fn the_first_send_points_downstream() {
        use NcclOp::{Recv, Send};
        // Stages 2 -> 0 -> 1 (global ranks), gradients coming back afterwards.
        let calls = vec![
            (2, vec![p2p(Send, 0), p2p(Recv, 0)]),
            (0, vec![p2p(Recv, 2), p2p(Send, 1), p2p(Recv, 1), p2p(Send, 2)]),
            (1, vec![p2p(Recv, 0), p2p(Send, 0)]),
        ];
        assert_eq!(flows_of(&calls), [Flow::Chain(vec![2, 0, 1])]);
    }

    #[test]
    fn rings_and_disagreements_are_told_apart() {
        use NcclOp::{Recv, Send};
        let ring: Vec<(u32, Vec<Call>)> =
            (0..3).map(|r| (r, vec![p2p(Send, ((r + 1) % 3) as i32), p2p(Recv, ((r + 2) % 3) as i32)])).collect();
        assert_eq!(flows_of(&ring), [Flow::Ring(vec![0, 1, 2])]);
        let both_send = vec![(0, vec![p2p(Send, 1)]), (1, vec![p2p(Send, 0)])];
        assert_eq!(flows_of(&both_send), [Flow::Irregular(vec![0, 1])]);
    }

    #[test]
    fn step_starts_anchor_the_flow_in_a_log_that_begins_mid_step() {
        use NcclOp::{Recv, Send};
        // Held from the middle of step 0: upstream 0 receives a gradient first, then step 1
        // (starting at call 1 on both) begins with the activation 0 -> 1.
        let calls = vec![
            (0, vec![p2p(Recv, 1), p2p(Send, 1), p2p(Recv, 1)]),
            (1, vec![p2p(Send, 0), p2p(Recv, 0), p2p(Send, 0)]),
        ];
        assert_eq!(flows_of(&calls), [Flow::Chain(vec![1, 0])], "no steps: read from the oldest call");
        assert_eq!(flows_with_steps(&calls, &[1]), [Flow::Chain(vec![0, 1])]);
    }
}
