//! The microbatch of a pipeline's stuck send/recv, and whether it carries a forward's
//! activations or a backward's gradients.
//!
//! Not from the stage markers: the ones a rank has open are in its live header under
//! their plain names (the ordered-stage contract numbers a repeated stage `@M` only when
//! its step closes), and a pipeline exchanges between its passes, outside them. From the
//! schedule instead (`analysis::path::passes::transfer_pass`): the rank's pipeline stage
//! (`sf roles`), its sends and receives on the pipeline's communicator in its newest
//! complete step (which say the microbatch count and that the schedule is 1F1B), and the
//! stuck call's place in the step after it (each rank numbers its own send/recv calls,
//! one by one). Anything short of that places nothing.

use std::collections::BTreeSet;

use serde::Serialize;

use super::{DeviceChainReport, RankInput, RankReport, StepVector};
use crate::analysis::comms::grow::Aliases;
use crate::analysis::path::passes::transfer_pass;
use crate::analysis::path::{Pass, Phase};
use crate::analysis::roles::Role;
use crate::core::log::nccl_op::NcclOp;
use crate::report::path::position;
use crate::report::roles::{self, call_of, RankRoles};

/// The pass a stuck send or receive carries: null, both, when the logs cannot say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct TransferPass {
    pub microbatch: Option<usize>,
    /// `fwd` (activations) or `bwd` (gradients).
    pub phase: Option<Phase>,
}

impl From<Pass> for TransferPass {
    fn from(pass: Pass) -> TransferPass {
        TransferPass { microbatch: Some(pass.microbatch), phase: Some(pass.phase) }
    }
}

/// What one log gives: its part in the roles, and its newest complete step's sends and
/// receives as (communicator, sequence, send?).
pub(crate) struct PipelineHistory {
    roles: RankRoles,
    previous: Vec<(u64, u64, bool)>,
}

/// A log's pipeline history, from its calls and its newest complete step's parts.
pub(super) fn pipeline_history(input: &RankInput, world_size: i32, newest_step: &[StepVector]) -> PipelineHistory {
    let window = newest_step.first().map(|v| (v.t_begin_ns, v.t_begin_ns.saturating_add(v.wall_ns)));
    let previous = match window {
        Some((begin, end)) => input
            .calls
            .iter()
            .filter(|c| c.op.is_p2p() && c.t_enter_ns >= begin && c.t_enter_ns <= end)
            .map(|c| (c.comm_id, c.seq, c.op == NcclOp::Send))
            .collect(),
        None => Vec::new(),
    };
    let calls = input.calls.iter().filter_map(call_of).collect();
    let begins = window.map(|w| w.0).into_iter().collect();
    let roles = RankRoles::of(input.rank, world_size, input.created.clone(), calls, begins, !input.history_complete);
    PipelineHistory { roles, previous }
}

/// Places the send/recv each rank waits in, and the one the device chain's peer waits in,
/// in their passes. Reads the roles only when some wait is a send/recv.
pub(super) fn place(histories: Vec<PipelineHistory>, ranks: &mut [RankReport], chain: Option<&mut DeviceChainReport>) {
    let p2p_wait = |r: &RankReport| r.in_flight && r.op.is_some_and(NcclOp::is_p2p) && r.comm_seq.is_some();
    let chain_p2p = chain.as_ref().is_some_and(|c| c.op.is_p2p());
    if !chain_p2p && !ranks.iter().any(p2p_wait) {
        return;
    }
    let pipelines = Pipelines::of(histories);
    for r in ranks.iter_mut().filter(|r| p2p_wait(r)) {
        if let (Some(comm), Some(seq), Some(op)) = (r.comm_id, r.comm_seq, r.op) {
            r.transfer = pipelines.locate(r.rank, comm, seq, op);
        }
    }
    if let Some(c) = chain.filter(|c| c.op.is_p2p()) {
        // Each peer numbers its own send/recv: the sequence is the first peer's.
        if let Some(&peer) = c.peer_ranks.first() {
            c.transfer = pipelines.locate(peer, c.comm_id, c.comm_seq, c.op);
        }
    }
}

/// The job's pipelines as the roles find them, and each log's previous step.
struct Pipelines {
    /// Per log, what the roles read of it and its previous step's transfers.
    read: Vec<RankRoles>,
    previous: Vec<Vec<(u64, u64, bool)>>,
    aliases: Aliases,
    /// The pipeline communicators, canonical ids.
    comms: BTreeSet<u64>,
    /// Each pipeline's ranks in stage order.
    stages: Vec<Vec<u32>>,
}

impl Pipelines {
    fn of(histories: Vec<PipelineHistory>) -> Pipelines {
        let (read, previous): (Vec<RankRoles>, Vec<_>) = histories.into_iter().map(|h| (h.roles, h.previous)).unzip();
        let found = roles::infer(&read);
        Pipelines {
            aliases: Aliases::of(read.iter().flat_map(|r| &r.created)),
            comms: found.communicators.iter().filter(|c| c.role == Role::Pp).map(|c| c.comm_id).collect(),
            stages: found.pipelines,
            read,
            previous,
        }
    }

    /// The pass of `rank`'s send/recv `seq` on `comm`: its stage in its pipeline, and its
    /// place in the step after its newest complete one, whose transfers on that
    /// communicator are numbered without a gap.
    fn locate(&self, rank: i32, comm: u64, seq: u64, op: NcclOp) -> TransferPass {
        let comm = self.aliases.canonical(comm);
        let found = || -> Option<Pass> {
            if !self.comms.contains(&comm) {
                return None;
            }
            let global = u32::try_from(rank).ok()?;
            let (pipeline, stage) = position(&self.stages, global)?;
            let log = self.read.iter().position(|r| r.global_rank == rank)?;
            let mut previous: Vec<(u64, bool)> = self.previous[log]
                .iter()
                .filter(|&&(c, ..)| self.aliases.canonical(c) == comm)
                .map(|&(_, seq, send)| (seq, send))
                .collect();
            previous.sort_unstable();
            let (first, last) = (previous.first()?.0, previous.last()?.0);
            if last - first + 1 != previous.len() as u64 {
                return None;
            }
            let index = usize::try_from(seq.checked_sub(last + 1)?).ok()?;
            let sends: Vec<bool> = previous.iter().map(|&(_, send)| send).collect();
            transfer_pass(stage, self.stages[pipeline].len(), &sends, index, op == NcclOp::Send)
        };
        found().map(TransferPass::from).unwrap_or_default()
    }
}
