//! Where the job's waits can be read from, if anywhere: the device's NCCL kernels, the
//! host's NCCL calls (when they block until every peer arrives), or nowhere.

use serde::Serialize;

use crate::core::log::records::NcclCall;

/// The source of the waits an analysis read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitsFrom {
    /// NCCL kernels linked to their calls (`device_coll` records): the CUDA door saw them.
    Device,
    /// NCCL calls that block on the host until every peer arrives (fakenccl, gloo-like
    /// blocking NCCL): the wait is inside the call.
    HostCalls,
    /// Neither: no collective was recorded, or the calls return at once (asynchronous
    /// NCCL) and the device was not seen.
    None,
}

/// Why the waits came from where they did (or from nowhere).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    DeviceKernels,
    BlockingCalls,
    NoCollective,
    /// Collectives were recorded, but in under half of the steps: the waits of the others
    /// ran where no door sees them (a gloo job's C++ collectives, DDP's allreduce among
    /// them, beside a barrier or evaluation collective the Python door recorded).
    StepsWithoutCollectives,
    AsynchronousCalls,
}

impl Why {
    /// How the human output says it, once.
    pub fn describe(self) -> &'static str {
        match self {
            Why::DeviceKernels => "device (NCCL kernels)",
            Why::BlockingCalls => "host calls (the collective calls block until every peer arrives)",
            Why::NoCollective => "none: no collective was recorded",
            Why::StepsWithoutCollectives => {
                "none: collectives were recorded in under half of the steps (the others' ran where no door sees \
                 them: gloo's C++ collectives, DDP's allreduce), so no rank is charged with another's waiting"
            }
            Why::AsynchronousCalls => {
                "none: the NCCL calls return at once (asynchronous launches) and the logs hold no device evidence \
                 (the CUDA door was shut), so no rank is charged with another's waiting"
            }
        }
    }
}

impl Why {
    /// Whether a rank's stage times may hold waits no door saw, so a rank the detectors
    /// single out may have been waiting: asynchronous calls with no device evidence, or no
    /// collective recorded in a job of several ranks (gloo's collectives, DDP's allreduce
    /// among them, run in C++ where no door sees them). A single rank waits for nobody.
    pub fn waits_unseen(self, world: usize) -> bool {
        match self {
            Why::AsynchronousCalls | Why::StepsWithoutCollectives => true,
            Why::NoCollective => world > 1,
            Why::DeviceKernels | Why::BlockingCalls => false,
        }
    }
}

/// What the logs show of the job's collectives.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Evidence {
    /// `device_coll` records over all ranks.
    pub device_kernels: u64,
    /// Completed collective calls over all ranks.
    pub collective_calls: u64,
    /// The largest share of a rank's time, from its first collective call to its last, it
    /// spent inside the calls that block a host-blocking job ([`blocks_a_host`]).
    pub call_share: f64,
    /// Complete steps the calls read cover, over all ranks, and how many of them hold a
    /// collective call (0 and 0 where the steps are not known: `sf hang`, `sf ls`).
    pub steps: u64,
    pub steps_with_calls: u64,
}

/// Below this share of every rank's time spent inside collective calls, the calls do
/// not carry the waits: they return once enqueued. A blocking job's calls hold at least
/// the transfer, and a slow rank's peers wait its whole delay inside them (5% of a step is
/// the smallest slow stage the matrices ask for); asynchronous launches cost tens of
/// microseconds a call, well under 1% of a step.
pub const ASYNC_CALL_SHARE: f64 = 0.02;

/// Where the waits come from, and why.
pub fn waits_from(e: &Evidence) -> (WaitsFrom, Why) {
    if e.device_kernels > 0 {
        (WaitsFrom::Device, Why::DeviceKernels)
    } else if e.collective_calls == 0 {
        (WaitsFrom::None, Why::NoCollective)
    } else if e.steps_with_calls * 2 < e.steps {
        (WaitsFrom::None, Why::StepsWithoutCollectives)
    } else if e.call_share < ASYNC_CALL_SHARE {
        (WaitsFrom::None, Why::AsynchronousCalls)
    } else {
        (WaitsFrom::HostCalls, Why::BlockingCalls)
    }
}

impl Evidence {
    /// One rank's: its device records, and its completed collective calls (communicator,
    /// enter, exit), whose share of its time from the first to the last is the call share.
    pub fn of_rank(device_records: u64, calls: &[(u64, u64, u64)]) -> Evidence {
        Evidence {
            device_kernels: device_records,
            collective_calls: calls.len() as u64,
            call_share: call_share(calls),
            steps: 0,
            steps_with_calls: 0,
        }
    }

    /// One rank's, from its `nccl_call` records: its collectives, and the share of its time
    /// inside them and the send/recv and group ends that block a host-blocking job too.
    pub fn of_nccl_calls<'a>(device_records: u64, calls: impl Iterator<Item = &'a NcclCall> + Clone) -> Evidence {
        let completed = calls.filter(|c| c.t_exit_ns >= c.t_enter_ns);
        let collectives = completed.clone().filter(|c| c.op.is_collective() && c.seq > 0).count();
        let blocking: Vec<(u64, u64, u64)> = completed.filter(|c| blocks_a_host(c)).map(timing).collect();
        Evidence {
            device_kernels: device_records,
            collective_calls: collectives as u64,
            call_share: call_share(&blocking),
            steps: 0,
            steps_with_calls: 0,
        }
    }

    /// The job's, from its ranks': counts summed, the largest share.
    pub fn of_job<'a>(ranks: impl Iterator<Item = &'a Evidence>) -> Evidence {
        ranks.fold(Evidence::default(), |job, e| Evidence {
            device_kernels: job.device_kernels + e.device_kernels,
            collective_calls: job.collective_calls + e.collective_calls,
            call_share: job.call_share.max(e.call_share),
            steps: job.steps + e.steps,
            steps_with_calls: job.steps_with_calls + e.steps_with_calls,
        })
    }
}

/// Whether a host-blocking job waits inside the call: a collective, a send or recv, or the
/// group end that runs a group's send/recv (a pipeline's exchanges wait there).
pub fn blocks_a_host(c: &NcclCall) -> bool {
    (c.op.is_collective() && c.seq > 0) || c.op.is_p2p() || c.op.ends_group()
}

/// A call as (communicator, enter, exit).
pub fn timing(c: &NcclCall) -> (u64, u64, u64) {
    (c.comm_id, c.t_enter_ns, c.t_exit_ns)
}

/// The share of a rank's time, from its first call to its last, it spent inside `calls`
/// (communicator, enter, exit). Each communicator's first call is left out where it has
/// later ones: NCCL connects the ranks at their first collective (runtime connection, the
/// default since 2.22) or send/recv, and that call blocks the host on a GPU too (74 ms of
/// a 290 ms job on an H200, which read as blocking calls).
pub fn call_share(calls: &[(u64, u64, u64)]) -> f64 {
    let mut firsts: Vec<(u64, u64)> = Vec::new();
    for &(comm, enter, _) in calls {
        match firsts.iter_mut().find(|(c, _)| *c == comm) {
            Some((_, first)) => *first = (*first).min(enter),
            None => firsts.push((comm, enter)),
        }
    }
    let later: Vec<&(u64, u64, u64)> =
        calls.iter().filter(|&&(comm, enter, _)| !firsts.contains(&(comm, enter))).collect();
    let counted = if later.is_empty() { calls.iter().collect() } else { later };
    let first = counted.iter().map(|c| c.1).min().unwrap_or(0);
    let last = counted.iter().map(|c| c.2).max().unwrap_or(0);
    let inside: u64 = counted.iter().map(|&&(_, enter, exit)| exit.saturating_sub(enter)).sum();
    let span = last.saturating_sub(first);
    if span == 0 {
        0.0
    } else {
        inside as f64 / span as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_kernels_win_blocking_calls_carry_waits_and_short_calls_do_not() {
        let e = |device_kernels, collective_calls, call_share| Evidence {
            device_kernels,
            collective_calls,
            call_share,
            ..Evidence::default()
        };
        assert_eq!(waits_from(&e(10, 10, 0.001)).0, WaitsFrom::Device);
        assert_eq!(waits_from(&e(0, 10, 0.3)), (WaitsFrom::HostCalls, Why::BlockingCalls));
        assert_eq!(waits_from(&e(0, 10, 0.004)), (WaitsFrom::None, Why::AsynchronousCalls));
        assert_eq!(waits_from(&e(0, 0, 0.0)), (WaitsFrom::None, Why::NoCollective));
        // A barrier at the end of a gloo DDP job: blocking, but in none of the 30 steps.
        let barrier_only = Evidence { steps: 30, steps_with_calls: 0, ..e(0, 1, 1.0) };
        assert_eq!(waits_from(&barrier_only), (WaitsFrom::None, Why::StepsWithoutCollectives));
        assert!(Why::StepsWithoutCollectives.waits_unseen(1));
        let in_most = Evidence { steps: 30, steps_with_calls: 29, ..e(0, 90, 0.3) };
        assert_eq!(waits_from(&in_most).0, WaitsFrom::HostCalls);
        assert!(Why::NoCollective.describe().contains("no collective was recorded"));
        let rank = Evidence::of_rank(0, &[(1, 0, 10), (2, 0, 10), (1, 490, 500), (2, 990, 1000)]);
        // Each communicator's first call connects: 20 ns inside of 510 from the later ones.
        assert!((rank.call_share - 20.0 / 510.0).abs() < 1e-12 && rank.collective_calls == 4, "{rank:?}");
        let job = Evidence::of_job([rank, Evidence::of_rank(3, &[(1, 0, 500)])].iter());
        assert_eq!((job.device_kernels, job.collective_calls, job.call_share), (3, 5, 1.0));
    }

    #[test]
    fn the_first_call_that_connects_the_ranks_is_not_taken_for_blocking() {
        // Two ranks on an H200, NCCL 2.28.9: the first allreduce 74 ms (connecting), the
        // next five 0.06-0.14 ms, over 290 ms.
        let ms = 1_000_000;
        let mut calls = vec![(7, 0, 74 * ms)];
        calls.extend((1..6).map(|i| (7, i * 50 * ms + 6 * ms, i * 50 * ms + 6 * ms + ms / 10)));
        let rank = Evidence::of_rank(0, &calls);
        assert!(rank.call_share < ASYNC_CALL_SHARE, "{rank:?}");
        assert_eq!(waits_from(&rank), (WaitsFrom::None, Why::AsynchronousCalls));
    }

    #[test]
    fn a_pipelines_blocking_exchanges_count_as_calls_that_carry_waits() {
        // A pipeline stage: its tensor-parallel allreduces return in 0.1 ms, its group of
        // send/recv waits 8 ms for the stage before it, every 100 ms.
        use crate::core::log::nccl_op::NcclOp;
        let ms = 1_000_000;
        let call = |op, comm_id, seq, t: u64, lasted: u64| NcclCall {
            op,
            comm_id,
            seq,
            t_enter_ns: t,
            t_exit_ns: t + lasted,
            count: 1,
            bytes: 4,
            stream: 0,
            tid: 1,
            peer: -1,
            dtype: 7,
            redop: 0,
            result: 0,
            group_depth: 0,
        };
        let mut calls = Vec::new();
        for step in 0..10u64 {
            let t = step * 100 * ms;
            calls.push(call(NcclOp::AllReduce, 7, step + 1, t, ms / 10));
            calls.push(call(NcclOp::Send, 9, 0, t + 10 * ms, ms / 100));
            calls.push(call(NcclOp::GroupEnd, 0, 0, t + 11 * ms, 8 * ms));
        }
        let collectives_only: Vec<(u64, u64, u64)> =
            calls.iter().filter(|c| c.op.is_collective()).map(timing).collect();
        assert!(call_share(&collectives_only) < ASYNC_CALL_SHARE);
        let rank = Evidence::of_nccl_calls(0, calls.iter());
        assert_eq!(rank.collective_calls, 10);
        assert!(rank.call_share > ASYNC_CALL_SHARE, "{rank:?}");
        assert_eq!(waits_from(&rank), (WaitsFrom::HostCalls, Why::BlockingCalls));
    }
}
