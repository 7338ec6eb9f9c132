//! The rules on logs made up here: a GPipe-ordered job of any layout in Megatron's rank
//! order (rank = tp + T·dp + T·D·pp), its communicators made from unique ids.

use super::*;
use crate::core::log::nccl_op::NcclOp;
use crate::core::log::records::CommOrigin;

const WORLD: u64 = 1;

struct Job {
    tp: u32,
    pp: u32,
    dp: u32,
    /// The DP gradient sync: reduce-scatter + all-gather, or DDP's allreduce.
    distributed_optimizer: bool,
}

impl Job {
    fn coords(&self, rank: u32) -> (u32, u32, u32) {
        (rank % self.tp, rank / self.tp % self.dp, rank / (self.tp * self.dp))
    }

    fn rank(&self, tp: u32, dp: u32, pp: u32) -> u32 {
        tp + self.tp * dp + self.tp * self.dp * pp
    }

    /// (comm id, position of `rank`, size) of its group along each dimension of size > 1.
    fn groups(&self, rank: u32) -> Vec<(u64, i32, i32)> {
        let (tp, dp, pp) = self.coords(rank);
        let mut groups = Vec::new();
        if self.tp > 1 {
            groups.push((100 + u64::from(self.rank(0, dp, pp)), tp as i32, self.tp as i32));
        }
        if self.dp > 1 {
            groups.push((200 + u64::from(self.rank(tp, 0, pp)), dp as i32, self.dp as i32));
        }
        if self.pp > 1 {
            groups.push((300 + u64::from(self.rank(tp, dp, 0)), pp as i32, self.pp as i32));
        }
        groups
    }

    fn created(&self, rank: u32) -> Vec<CommCreated> {
        let made = |comm_id, rank, nranks| CommCreated {
            t_ns: 0,
            comm_id,
            parent_id: 0,
            rank,
            nranks,
            global_rank: 0,
            color: -1,
            key: -1,
            origin: CommOrigin::InitRank,
        };
        let world = self.tp * self.pp * self.dp;
        let mut created = vec![made(WORLD, rank as i32, world as i32)];
        created.extend(self.groups(rank).into_iter().map(|(id, r, n)| made(id, r, n)));
        created
    }

    fn calls(&self, rank: u32, microbatches: u32) -> Vec<Call> {
        let (tp, dp, pp) = self.coords(rank);
        let call = |comm_id, op, peer| Call { comm_id, op, peer };
        let (tp_comm, dp_comm, pp_comm) = (
            100 + u64::from(self.rank(0, dp, pp)),
            200 + u64::from(self.rank(tp, 0, pp)),
            300 + u64::from(self.rank(tp, dp, 0)),
        );
        let mut calls = vec![call(WORLD, NcclOp::Broadcast, -1)];
        let pass = |calls: &mut Vec<Call>, forward: bool| {
            for _ in 0..microbatches {
                let (from, to) =
                    if forward { (pp.checked_sub(1), Some(pp + 1)) } else { (Some(pp + 1), pp.checked_sub(1)) };
                if let Some(from) = from.filter(|&s| s < self.pp) {
                    calls.push(call(pp_comm, NcclOp::Recv, from as i32));
                }
                if self.tp > 1 {
                    calls.push(call(tp_comm, NcclOp::AllReduce, -1));
                    calls.push(call(tp_comm, NcclOp::AllReduce, -1));
                }
                if let Some(to) = to.filter(|&s| s < self.pp) {
                    calls.push(call(pp_comm, NcclOp::Send, to as i32));
                }
            }
        };
        for _step in 0..2 {
            pass(&mut calls, true);
            pass(&mut calls, false);
            if self.dp > 1 {
                for _bucket in 0..3 {
                    if self.distributed_optimizer {
                        calls.push(call(dp_comm, NcclOp::ReduceScatter, -1));
                        calls.push(call(dp_comm, NcclOp::AllGather, -1));
                    } else {
                        calls.push(call(dp_comm, NcclOp::AllReduce, -1));
                    }
                }
            }
        }
        calls
    }

    fn infer(&self) -> Roles {
        let world = self.tp * self.pp * self.dp;
        let logs: Vec<(Vec<CommCreated>, Vec<Call>)> =
            (0..world).map(|r| (self.created(r), self.calls(r, 4))).collect();
        let inputs: Vec<RankInput> = logs
            .iter()
            .enumerate()
            .map(|(r, (created, calls))| RankInput { global_rank: r as u32, created, calls, step_starts: &[] })
            .collect();
        infer(world as usize, &inputs)
    }

    fn assert_coordinates(&self, roles: &Roles) {
        for c in &roles.ranks {
            let (tp, dp, pp) = self.coords(c.rank);
            assert_eq!(
                (c.tp, c.pp, c.dp),
                (Some(tp as usize), Some(pp as usize), Some(dp as usize)),
                "rank {}",
                c.rank
            );
        }
    }
}

#[test]
fn a_three_d_job_reads_as_its_layout() {
    for (tp, pp, dp) in [(2, 2, 2), (2, 4, 1), (1, 2, 4), (4, 1, 2)] {
        let job = Job { tp, pp, dp, distributed_optimizer: true };
        let roles = job.infer();
        let expected = Layout { tp: tp as usize, pp: pp as usize, dp: dp as usize, ep: None, cp: None };
        assert_eq!(roles.layout, expected, "{tp}x{pp}x{dp}: {roles:#?}");
        assert!(roles.notes.is_empty(), "{:?}", roles.notes);
        assert!(!roles.flat);
        job.assert_coordinates(&roles);
    }
}

#[test]
fn ddp_allreduce_is_told_from_tensor_parallel_allreduce() {
    // With a pipeline: by where the calls fall; without: by how many there are.
    for (tp, pp, dp) in [(2, 2, 2), (2, 1, 2)] {
        let job = Job { tp, pp, dp, distributed_optimizer: false };
        let roles = job.infer();
        assert_eq!((roles.layout.tp, roles.layout.pp, roles.layout.dp), (tp as usize, pp as usize, dp as usize));
        job.assert_coordinates(&roles);
        let dp_comm = roles.communicators.iter().find(|c| c.comm_id == 200).unwrap();
        assert_eq!(dp_comm.role, Role::Dp, "{}", dp_comm.evidence);
    }
}

#[test]
fn a_flat_job_is_data_parallel_on_the_world() {
    let job = Job { tp: 1, pp: 1, dp: 1, distributed_optimizer: false };
    let created: Vec<Vec<CommCreated>> = (0..4)
        .map(|r| {
            let mut c = job.created(0);
            c[0].rank = r;
            c[0].nranks = 4;
            c
        })
        .collect();
    let calls = vec![Call { comm_id: WORLD, op: NcclOp::AllReduce, peer: -1 }; 5];
    let inputs: Vec<RankInput> = created
        .iter()
        .enumerate()
        .map(|(r, c)| RankInput { global_rank: r as u32, created: c, calls: &calls, step_starts: &[] })
        .collect();
    let roles = infer(4, &inputs);
    assert!(roles.flat);
    assert_eq!(roles.layout, Layout { tp: 1, pp: 1, dp: 4, ep: None, cp: None });
    assert_eq!(roles.ranks[3], Coords { rank: 3, tp: Some(0), pp: Some(0), dp: Some(3), ep: None, cp: None });
    assert_eq!(roles.communicators[0].role, Role::World);
}

#[test]
fn a_missing_log_is_said() {
    let job = Job { tp: 2, pp: 1, dp: 2, distributed_optimizer: true };
    let logs: Vec<(Vec<CommCreated>, Vec<Call>)> = (0..3).map(|r| (job.created(r), job.calls(r, 2))).collect();
    let inputs: Vec<RankInput> = logs
        .iter()
        .enumerate()
        .map(|(r, (created, calls))| RankInput { global_rank: r as u32, created, calls, step_starts: &[] })
        .collect();
    let roles = infer(4, &inputs);
    assert!(roles.notes.iter().any(|n| n.contains("3 of 4 ranks")), "{:?}", roles.notes);
}

#[test]
fn no_communicator_is_no_flat_job() {
    let inputs = [RankInput { global_rank: 0, created: &[], calls: &[], step_starts: &[] }];
    let roles = infer(2, &inputs);
    assert!(!roles.flat && roles.communicators.is_empty());
    assert!(roles.notes.iter().any(|n| n.contains("hold no communicator")), "{:?}", roles.notes);
}
