//! Who waits for whom, and who holds everyone up.
//!
//! Every wait (see `facts`) becomes a blockage listing the ranks it waits for; an edge of
//! it is stuck by the rules of the `hang` module doc. A rank plays a part on each
//! communicator and its state is the strongest of them, in this order: wedged, waiting,
//! gone (dead, stalled, exited), missing, waiting outside NCCL, slow, ok.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use super::facts::{Facts, Membership, Wait, WaitKind};
use super::{CommVerdict, Member, MemberCall, Position, RankInput, RankVerdict, State};
use crate::analysis::log::liveness::Liveness;
use crate::core::log::format::caps;
use crate::core::log::nccl_op::NcclOp;

pub(super) struct Classified {
    pub communicators: Vec<CommVerdict>,
    pub ranks: Vec<RankVerdict>,
    pub hung: bool,
}

/// A rank's part on a communicator; a later variant outranks an earlier one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    Ok,
    /// Others are stuck waiting for it, but it is making progress.
    Slow,
    /// Outside NCCL, silent, and ahead of ranks it will need: most likely blocked on them
    /// (real NCCL returns before the GPU work is done), but it could still be computing.
    Ahead,
    Missing,
    /// Others wait for it and it is gone.
    Gone(State),
    Waiting,
    Wedged,
}

impl Role {
    fn state(self) -> State {
        match self {
            Role::Ok => State::Ok,
            Role::Slow => State::Slow,
            Role::Ahead | Role::Waiting => State::Waiting,
            Role::Missing => State::Missing,
            Role::Gone(state) => state,
            Role::Wedged => State::Wedged,
        }
    }

    /// Holds others up by itself; slow ranks catch up, and a rank that stopped recording
    /// only looks behind.
    fn is_culprit(self) -> bool {
        matches!(self, Role::Missing | Role::Wedged | Role::Gone(State::Dead | State::Stalled | State::Exited))
    }
}

struct CommMember<'a> {
    rank: usize,
    m: &'a Membership,
}

struct Comm<'a> {
    id: u64,
    nranks: i32,
    members: Vec<CommMember<'a>>,
    /// Communicator ranks no log claims; known only when every member knows its own.
    unseen: Vec<i32>,
}

#[derive(Clone, Copy)]
enum Target {
    Member(usize),
    NoLog(i32),
}

/// A rank held up on a communicator, and by whom.
struct Blockage {
    comm: usize,
    waiter: usize,
    coll: bool,
    seq: u64,
    op: Option<NcclOp>,
    /// Inside the call; false for a rank outside NCCL but ahead of others.
    in_flight: bool,
    grouped: bool,
    age_ns: u64,
    targets: Vec<Target>,
}

/// A rank's strongest part so far, with where it plays it.
#[derive(Clone, Copy)]
struct Part {
    role: Role,
    at: Position,
    stuck_ns: Option<u64>,
}

fn stronger(slot: &mut Option<Part>, part: Part) {
    if slot.is_none_or(|old| part.role > old.role) {
        *slot = Some(part);
    }
}

struct Graph<'a> {
    ranks: &'a [RankInput],
    facts: &'a [Facts],
    comms: Vec<Comm<'a>>,
    threshold_ns: u64,
    /// `op_at` answers: each searches every rank's records.
    ops: RefCell<BTreeMap<(u64, u64), Option<NcclOp>>>,
}

/// Whether a send/recv wait may hold the half of an exchange with communicator rank `me`:
/// unless its group names its peers and `me` is not among them. Such a rank waits in
/// another exchange (in a pipeline, the receive from the stage before it) and has not
/// posted `me`'s half yet, so `me` waits for it and the blame passes along the chain of
/// receives to the rank that never posted; read as posted, it would make `me` look
/// wedged and the rank that waits for `me` elsewhere blame `me`.
fn may_match(w: &Wait, me: Option<i32>) -> bool {
    match (&w.kind, me) {
        (WaitKind::Coll, _) => false,
        (WaitKind::P2p { peers: Some(peers) }, Some(me)) => peers.contains(&me),
        (WaitKind::P2p { .. }, _) => true,
    }
}

fn communicators(facts: &[Facts]) -> Vec<Comm<'_>> {
    let mut by_id: BTreeMap<u64, Vec<CommMember>> = BTreeMap::new();
    for (rank, f) in facts.iter().enumerate() {
        for m in &f.memberships {
            by_id.entry(m.comm_id).or_default().push(CommMember { rank, m });
        }
    }
    by_id
        .into_iter()
        .map(|(id, members)| {
            let nranks = members.iter().map(|c| c.m.nranks).max().unwrap_or(-1);
            let seen: BTreeSet<i32> = members.iter().map(|c| c.m.comm_rank).collect();
            // A size read from a log lists the ranks never seen only within what a job can have.
            let plausible = (1..=caps::WORLD_SIZE).contains(&nranks);
            let unseen = if plausible && seen.iter().all(|&r| (0..nranks).contains(&r)) {
                (0..nranks).filter(|r| !seen.contains(r)).collect()
            } else {
                Vec::new()
            };
            Comm { id, nranks, members, unseen }
        })
        .collect()
}

impl Graph<'_> {
    fn liveness(&self, rank: usize) -> Liveness {
        self.ranks[rank].liveness
    }

    fn gone(&self, rank: usize) -> bool {
        matches!(self.liveness(rank), Liveness::Dead | Liveness::Stalled | Liveness::Exited)
    }

    /// How long `rank` has made no NCCL progress, as of `seen_by`'s last word.
    fn inactive_for(&self, rank: usize, seen_by: usize) -> Option<u64> {
        let f = &self.facts[rank];
        let now = f.silent_ns?.saturating_add(f.known_ago_ns);
        Some(now.saturating_sub(self.facts[seen_by].known_ago_ns))
    }

    /// How long `rank` has made no NCCL progress: until now while its process is there
    /// (live, or stopped and still holding the job up), until its last word once it died
    /// or exited, when its silence ended with it.
    fn inactive_now(&self, rank: usize) -> Option<u64> {
        let f = &self.facts[rank];
        let ended = matches!(self.liveness(rank), Liveness::Dead | Liveness::Exited);
        f.silent_ns.map(|s| if ended { s } else { s.saturating_add(f.known_ago_ns) })
    }

    fn waits_on(&self, rank: usize, comm_id: u64) -> impl Iterator<Item = &Wait> {
        self.facts[rank].waits.iter().filter(move |w| w.comm_id == comm_id)
    }

    /// Whether member `j` has done its part of a send/recv that member `me` waits in:
    /// it is inside a send/recv of its own on the communicator that may hold the matching
    /// half (see `may_match`), or it entered more collectives there (it got past the
    /// exchange; ranks issue the calls of one communicator in the same order).
    fn passed(&self, comm: &Comm, j: usize, me: Option<usize>) -> bool {
        let peer = &comm.members[j];
        let mine = me.map_or(0, |me| comm.members[me].m.coll_entered);
        let me_in_comm = me.map(|me| comm.members[me].m.comm_rank).filter(|&r| r >= 0);
        self.waits_on(peer.rank, comm.id).any(|w| may_match(w, me_in_comm)) || peer.m.coll_entered > mine
    }

    fn comm_index(&self, comm_id: u64) -> Option<usize> {
        self.comms.binary_search_by_key(&comm_id, |c| c.id).ok()
    }

    /// The op of collective `seq` on a communicator, from any rank that entered it.
    fn op_at(&self, comm_id: u64, seq: u64) -> Option<NcclOp> {
        *self.ops.borrow_mut().entry((comm_id, seq)).or_insert_with(|| {
            let in_flight = self
                .facts
                .iter()
                .flat_map(|f| &f.waits)
                .find(|w| w.comm_id == comm_id && w.kind == WaitKind::Coll && w.seq == seq && w.op.is_some());
            in_flight.and_then(|w| w.op).or_else(|| {
                self.ranks
                    .iter()
                    .flat_map(|r| &r.calls)
                    .find(|c| c.comm_id == comm_id && c.seq == seq && c.op.is_collective())
                    .map(|c| c.op)
            })
        })
    }

    fn blockage_of(&self, rank: usize, w: &Wait) -> Option<Blockage> {
        let ci = self.comm_index(w.comm_id)?;
        let comm = &self.comms[ci];
        let me = comm
            .members
            .iter()
            .position(|c| c.rank == rank && c.m.comm_rank == w.comm_rank)
            .or_else(|| comm.members.iter().position(|c| c.rank == rank));
        let others = || comm.members.iter().enumerate().filter(move |&(j, _)| Some(j) != me);
        let targets: Vec<Target> = match &w.kind {
            WaitKind::Coll => {
                let mut behind: Vec<Target> = others()
                    .filter(|(_, c)| c.m.current && c.m.coll_entered < w.seq)
                    .map(|(j, _)| Target::Member(j))
                    .collect();
                behind.extend(comm.unseen.iter().map(|&r| Target::NoLog(r)));
                if behind.is_empty() {
                    // Everyone entered: a member gone while inside can never finish it.
                    behind = others()
                        .filter(|(_, c)| c.m.current && c.m.coll_returned < w.seq && self.gone(c.rank))
                        .map(|(j, _)| Target::Member(j))
                        .collect();
                }
                behind
            }
            WaitKind::P2p { peers: Some(peers) } => peers
                .iter()
                .filter_map(|&peer| match comm.members.iter().position(|c| c.m.comm_rank == peer) {
                    Some(j) if self.passed(comm, j, me) || !comm.members[j].m.current => None,
                    Some(j) => Some(Target::Member(j)),
                    None => comm.unseen.contains(&peer).then_some(Target::NoLog(peer)),
                })
                .collect(),
            // Peer unknown: suspect only members that are outside any call on it and make
            // no progress.
            WaitKind::P2p { peers: None } => others()
                .filter(|&(j, c)| {
                    c.m.current
                        && !self.passed(comm, j, me)
                        && self.waits_on(c.rank, comm.id).next().is_none()
                        && self.inactive_for(c.rank, rank).is_none_or(|i| i > self.threshold_ns)
                })
                .map(|(j, _)| Target::Member(j))
                .collect(),
        };
        Some(Blockage {
            comm: ci,
            waiter: rank,
            coll: w.kind == WaitKind::Coll,
            seq: w.seq,
            op: w.op,
            in_flight: true,
            grouped: w.grouped,
            age_ns: w.age_ns,
            targets,
        })
    }

    /// A rank outside NCCL that entered more collectives on a communicator than others did
    /// waits, sooner or later, for the ones furthest behind.
    fn ahead_of_others(&self, rank: usize) -> Vec<Blockage> {
        let f = &self.facts[rank];
        let (Some(silent), true) = (f.silent_ns, f.waits.is_empty()) else { return Vec::new() };
        if matches!(self.liveness(rank), Liveness::Exited | Liveness::Disabled) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (ci, comm) in self.comms.iter().enumerate() {
            let Some(mine) = comm.members.iter().filter(|c| c.rank == rank).map(|c| c.m.coll_entered).max() else {
                continue;
            };
            let least = comm.members.iter().filter(|c| c.m.current).map(|c| c.m.coll_entered).min().unwrap_or(mine);
            if mine <= least {
                continue;
            }
            let targets = comm
                .members
                .iter()
                .enumerate()
                .filter(|(_, c)| c.m.current && c.m.coll_entered == least)
                .map(|(j, _)| Target::Member(j))
                .collect();
            out.push(Blockage {
                comm: ci,
                waiter: rank,
                coll: true,
                seq: least + 1,
                op: None,
                in_flight: false,
                grouped: false,
                age_ns: silent,
                targets,
            });
        }
        out
    }

    /// The target's part if the edge to it is stuck.
    fn judge(&self, b: &Blockage, target: Target) -> Option<Role> {
        let t = self.threshold_ns;
        let Target::Member(j) = target else {
            return (b.age_ns > t).then_some(Role::Missing);
        };
        let rank = self.comms[b.comm].members[j].rank;
        let liveness = self.liveness(rank);
        if self.liveness(b.waiter) == Liveness::Live && self.gone(rank) {
            // Silent past the threshold before its last word, while the waiter waited: it
            // held the call up alive and went after (killed in the hang, or a node's logs
            // copied later): the rank that never entered, gone since. Otherwise it went
            // first (a crash) and the waiting followed.
            let f = &self.facts[rank];
            // The waiter is live (its word is now): it waited this long before the rank's
            // last word.
            let overlap = b.age_ns.saturating_sub(f.known_ago_ns);
            let held_up_alive = f.silent_ns.is_some_and(|s| s.min(overlap) > t);
            return Some(if held_up_alive { Role::Missing } else { Role::Gone(State::of_liveness(liveness)) });
        }
        let inactive = self.inactive_for(rank, b.waiter);
        if b.age_ns <= t && inactive.is_none_or(|i| i <= t) {
            return None;
        }
        Some(match liveness {
            Liveness::Disabled => Role::Gone(State::Disabled),
            _ if inactive.is_some_and(|i| i <= t) => Role::Slow,
            _ => Role::Missing,
        })
    }

    /// Stuck with nobody to wait for: a collective everyone entered (for longer than the
    /// threshold since the last arrived) and nobody returned from, or a send/recv whose
    /// peers are all there. A rank still inside a collective another rank has returned
    /// from is finishing it; should it never return, the next collective finds it missing.
    fn wedged(&self, b: &Blockage) -> bool {
        if !b.targets.is_empty() || !b.in_flight {
            return false;
        }
        let comm = &self.comms[b.comm];
        if b.coll && comm.members.iter().any(|c| c.m.current && c.m.coll_returned >= b.seq) {
            return false;
        }
        let comm_id = comm.id;
        let since_complete = if b.coll {
            self.facts
                .iter()
                .flat_map(|f| &f.waits)
                .filter(|w| w.comm_id == comm_id && w.kind == WaitKind::Coll && w.seq == b.seq)
                .map(|w| w.age_ns)
                .min()
                .unwrap_or(b.age_ns)
        } else {
            b.age_ns
        };
        since_complete > self.threshold_ns
    }

    fn position(&self, b: &Blockage) -> Position {
        Position {
            comm_id: self.comms[b.comm].id,
            comm_seq: Some(b.seq),
            op: b.op.or_else(|| if b.coll { self.op_at(self.comms[b.comm].id, b.seq) } else { None }),
            in_flight: b.in_flight,
            grouped: b.grouped,
        }
    }

    /// Where a rank that others wait for is: not in the call they wait in.
    fn target_position(&self, b: &Blockage) -> Position {
        let at = self.position(b);
        if b.coll {
            Position { in_flight: false, grouped: false, ..at }
        } else {
            Position { comm_seq: None, op: None, in_flight: false, grouped: false, ..at }
        }
    }

    fn global(&self, rank: usize) -> i32 {
        self.ranks[rank].rank
    }
}

/// Every rank's part and every communicator's verdict; `hung` when a stuck wait ends at a
/// culprit: a rank whose strongest part is missing, wedged or gone, or a communicator rank
/// without a log. A chain that ends at a rank still making progress is not a hang (yet),
/// and a rank waited for that is itself waiting only passes the blame on.
pub(super) fn classify(ranks: &[RankInput], facts: &[Facts], threshold_ns: u64) -> Classified {
    let graph = Graph { ranks, facts, comms: communicators(facts), threshold_ns, ops: RefCell::default() };
    let mut blockages = Vec::new();
    for (rank, f) in facts.iter().enumerate() {
        blockages.extend(f.waits.iter().filter_map(|w| graph.blockage_of(rank, w)));
        blockages.extend(graph.ahead_of_others(rank));
    }

    let mut parts: BTreeMap<(usize, usize), Part> = BTreeMap::new();
    let mut best: Vec<Option<Part>> = vec![None; ranks.len()];
    let mut waiting_for: Vec<BTreeSet<i32>> = vec![BTreeSet::new(); ranks.len()];
    let mut no_log: Vec<BTreeSet<i32>> = vec![BTreeSet::new(); graph.comms.len()];
    let mut stuck: Vec<Vec<&Blockage>> = vec![Vec::new(); graph.comms.len()];
    let mut no_log_waited_for = false;
    let mut play = |rank: usize, comm: usize, part: Part| {
        let mut slot = parts.get(&(rank, comm)).copied();
        stronger(&mut slot, part);
        parts.insert((rank, comm), slot.expect("just set"));
        stronger(&mut best[rank], part);
    };
    for b in &blockages {
        if graph.wedged(b) {
            stuck[b.comm].push(b);
            play(b.waiter, b.comm, Part { role: Role::Wedged, at: graph.position(b), stuck_ns: Some(b.age_ns) });
            continue;
        }
        let edges: Vec<(Target, Role)> =
            b.targets.iter().filter_map(|&t| graph.judge(b, t).map(|role| (t, role))).collect();
        if edges.is_empty() {
            continue;
        }
        stuck[b.comm].push(b);
        let role = if b.in_flight { Role::Waiting } else { Role::Ahead };
        play(b.waiter, b.comm, Part { role, at: graph.position(b), stuck_ns: Some(b.age_ns) });
        for (target, role) in edges {
            match target {
                Target::NoLog(r) => {
                    no_log_waited_for = true;
                    no_log[b.comm].insert(r);
                    waiting_for[b.waiter].insert(-1);
                }
                Target::Member(j) => {
                    let rank = graph.comms[b.comm].members[j].rank;
                    waiting_for[b.waiter].insert(graph.global(rank));
                    let stuck_ns = (role != Role::Slow).then(|| graph.inactive_now(rank)).flatten();
                    play(rank, b.comm, Part { role, at: graph.target_position(b), stuck_ns });
                }
            }
        }
    }

    let hung = no_log_waited_for || best.iter().flatten().any(|part| part.role.is_culprit());
    let rank_verdicts = ranks
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let part = best[i];
            let role = part.map_or(Role::Ok, |p| p.role);
            let live = r.liveness == Liveness::Live;
            let oldest_call = facts[i].waits.iter().max_by_key(|w| w.age_ns).map(|w| Position {
                comm_id: w.comm_id,
                comm_seq: Some(w.seq),
                op: w.op,
                in_flight: true,
                grouped: w.grouped,
            });
            let stopped = matches!(r.liveness, Liveness::Dead | Liveness::Stalled);
            RankVerdict {
                rank: r.rank,
                state: if live { role.state() } else { State::of_liveness(r.liveness) },
                role: role.state(),
                stage: r.stage.clone(),
                stuck_ns: part.and_then(|p| p.stuck_ns).or_else(|| stopped.then(|| graph.inactive_now(i)).flatten()),
                at: part.map(|p| p.at).or(oldest_call),
                waiting_for: if matches!(role, Role::Waiting | Role::Ahead) {
                    waiting_for[i].iter().copied().collect()
                } else {
                    Vec::new()
                },
                silent_ns: facts[i].silent_ns,
            }
        })
        .collect();

    let communicators = graph
        .comms
        .iter()
        .enumerate()
        .map(|(ci, comm)| {
            let mut v = CommVerdict {
                comm_id: comm.id,
                nranks: comm.nranks,
                stuck_seq: None,
                stuck_op: None,
                stuck_p2p: false,
                stuck_ns: stuck[ci].iter().map(|b| b.age_ns).max(),
                missing_ranks: Vec::new(),
                waiting_ranks: Vec::new(),
                dead_ranks: Vec::new(),
                wedged_ranks: Vec::new(),
                slow_ranks: Vec::new(),
                stalled_ranks: Vec::new(),
                exited_ranks: Vec::new(),
                disabled_ranks: Vec::new(),
                no_log_comm_ranks: no_log[ci].iter().copied().collect(),
                members: members(&graph, comm),
                mismatches: Vec::new(),
                mismatches_total: 0,
                stuck_qps: Vec::new(),
            };
            if let Some(first) = stuck[ci].iter().filter(|b| b.coll).min_by_key(|b| b.seq) {
                v.stuck_seq = Some(first.seq);
                v.stuck_op = graph.position(first).op;
            }
            v.stuck_p2p = stuck[ci].iter().any(|b| !b.coll);
            for (&(rank, _), part) in parts.iter().filter(|((_, c), _)| *c == ci) {
                let liveness = ranks[rank].liveness;
                let state = if liveness == Liveness::Live { part.role.state() } else { State::of_liveness(liveness) };
                let list = match state {
                    // Progress and the devices name their culprits after classification.
                    State::Ok | State::Behind | State::StuckKernel => continue,
                    State::Slow => &mut v.slow_ranks,
                    State::Waiting => &mut v.waiting_ranks,
                    State::Missing => &mut v.missing_ranks,
                    // Named by `qp` after classification, never here.
                    State::Wedged | State::StuckQp => &mut v.wedged_ranks,
                    State::Dead => &mut v.dead_ranks,
                    State::Stalled => &mut v.stalled_ranks,
                    State::Exited => &mut v.exited_ranks,
                    State::Disabled => &mut v.disabled_ranks,
                };
                list.push(ranks[rank].rank);
                // A rank that never entered is the culprit whatever became of it since:
                // listed as missing too, so the answer names it first.
                if part.role == Role::Missing && state != State::Missing {
                    v.missing_ranks.push(ranks[rank].rank);
                }
            }
            for list in [
                &mut v.missing_ranks,
                &mut v.waiting_ranks,
                &mut v.dead_ranks,
                &mut v.wedged_ranks,
                &mut v.slow_ranks,
                &mut v.stalled_ranks,
                &mut v.exited_ranks,
                &mut v.disabled_ranks,
            ] {
                list.sort_unstable();
                list.dedup();
            }
            v
        })
        .collect();

    Classified { communicators, ranks: rank_verdicts, hung }
}

fn members(graph: &Graph, comm: &Comm) -> Vec<Member> {
    comm.members
        .iter()
        .map(|c| {
            // Its collective wait if it has one: that is what the others compare against.
            let wait = graph
                .waits_on(c.rank, comm.id)
                .filter(|w| w.comm_rank == c.m.comm_rank || w.comm_rank < 0)
                .min_by_key(|w| w.kind != WaitKind::Coll);
            Member {
                rank: graph.global(c.rank),
                comm_rank: c.m.comm_rank,
                coll_entered: c.m.coll_entered,
                coll_returned: c.m.coll_returned,
                p2p_entered: c.m.p2p_entered,
                p2p_returned: c.m.p2p_returned,
                in_flight: wait.map(|w| MemberCall { op: w.op, comm_seq: w.seq, age_ns: w.age_ns, grouped: w.grouped }),
            }
        })
        .collect()
}
