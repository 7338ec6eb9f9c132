//! After a job is torn down (torchrun stops every rank once one times out) every rank is
//! gone, and "ranks 0-7 are dead" hides what the logs saw last: which rank never entered
//! the collective the others were stuck in. The roles the classifier keeps from each log's
//! last word still say it; this names them as a post-mortem.

use serde::Serialize;

use super::{Diagnosis, Position, State};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PostMortem {
    /// Every rank with a log, all gone (dead, stalled, exited or not recording).
    pub gone_ranks: Vec<i32>,
    /// The ranks the hang was waiting on when the logs last spoke: never entered the
    /// collective (missing), stuck inside it (wedged) or on a stuck queue pair.
    pub culprit_ranks: Vec<i32>,
    /// What they were holding up (the first culprit's position).
    pub at: Option<Position>,
    /// The ranks waiting for them.
    pub waiting_ranks: Vec<i32>,
}

const GONE: [State; 4] = [State::Dead, State::Stalled, State::Exited, State::Disabled];

/// The post-mortem of a hung job whose every rank is gone; `None` for a job with a live
/// rank or no hang.
pub(super) fn of(d: &Diagnosis) -> Option<PostMortem> {
    if !d.hung || d.ranks.is_empty() || !d.ranks.iter().all(|r| GONE.contains(&r.state)) {
        return None;
    }
    let with_role =
        |roles: &[State]| -> Vec<i32> { d.ranks.iter().filter(|r| roles.contains(&r.role)).map(|r| r.rank).collect() };
    let culprit_ranks = with_role(&[State::Missing, State::Wedged, State::StuckQp]);
    let at = d.ranks.iter().find(|r| culprit_ranks.contains(&r.rank)).and_then(|r| r.at);
    Some(PostMortem {
        gone_ranks: d.ranks.iter().map(|r| r.rank).collect(),
        culprit_ranks,
        at,
        waiting_ranks: with_role(&[State::Waiting]),
    })
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use crate::analysis::hang::{diagnose, Settings};
    use crate::analysis::log::liveness::Liveness;
    use crate::core::log::nccl_op::NcclOp;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_job_torn_down_while_hung_names_the_rank_that_never_entered() {
        // Ranks 0-2 waited 5 s in allreduce #21 for rank 3; then torchrun killed them all.
        let ranks: Vec<_> = (0..4)
            .map(|r| {
                let mut input = rank(r, 4);
                history(&mut input, 20, BEAT - 7 * SEC - 19 * 100 * MS, 100 * MS);
                if r != 3 {
                    in_flight(&mut input, WORLD, 20, NcclOp::AllReduce, BEAT - 5 * SEC);
                }
                input.liveness = Liveness::Dead;
                input.heartbeat_age_ns = Some(30 * SEC);
                input
            })
            .collect();
        let d = diagnose(&ranks, &Settings { min_stuck_ns: 50 * MS, ..Settings::default() });
        let pm = d.post_mortem.expect("a post-mortem");
        assert_eq!((pm.gone_ranks, pm.culprit_ranks, pm.waiting_ranks), (vec![0, 1, 2, 3], vec![3], vec![0, 1, 2]));
        let at = pm.at.unwrap();
        assert_eq!((at.comm_id, at.comm_seq, at.in_flight), (WORLD, Some(21), false));
    }

    #[test]
    fn a_live_job_has_no_post_mortem() {
        let ranks: Vec<_> = (0..2).map(|r| rank(r, 2)).collect();
        assert!(diagnose(&ranks, &Settings::default()).post_mortem.is_none());
    }
}
