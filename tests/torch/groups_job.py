"""A Megatron-style job for the real-PyTorch test tier: gloo on CPU, 4 ranks as tp=2 x dp=2
in Megatron's rank order (tensor-parallel groups [0,1] and [2,3], data-parallel groups
[0,2] and [1,3]), each group made with new_group(ranks, group_desc=...) as Megatron's
parallel_state does. Each marked step runs four allreduces on the rank's tensor-parallel
group (one per layer) and one on its data-parallel group (the gradients), then a barrier
on the default group. With --misname, the tensor-parallel group [2,3] is described as a
data-parallel one: `sf roles` must keep the role it infers and say the name disagrees.

    torchrun --nproc-per-node 4 tests/torch/groups_job.py --steps 5 --misname
"""

import argparse

import torch
import torch.distributed as dist

import stagefrontier

TP = 2
LAYERS = 4


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--misname", action="store_true", help="describe tp group [2,3] as DATA_PARALLEL_GROUP")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dp = world // TP
    # Every rank makes every group, in the same order; new_group hands non-members a
    # placeholder.
    tp_group = dp_group = None
    for first in range(0, world, TP):
        ranks = list(range(first, first + TP))
        desc = "DATA_PARALLEL_GROUP" if args.misname and first == TP else "TENSOR_MODEL_PARALLEL_GROUP"
        group = dist.new_group(ranks, group_desc=desc)
        if rank in ranks:
            tp_group = group
    for offset in range(TP):
        ranks = list(range(offset, world, TP))
        group = dist.new_group(ranks, group_desc="DATA_PARALLEL_GROUP")
        if rank in ranks:
            dp_group = group
    assert dp == len(dist.get_process_group_ranks(dp_group))

    activations, gradients = torch.ones(64), torch.ones(256)
    for _ in range(args.steps):
        with stagefrontier.step():
            for _ in range(LAYERS):
                dist.all_reduce(activations, group=tp_group)
            dist.all_reduce(gradients, group=dp_group)
            dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("groups_job: ok ranks=%d steps=%d" % (world, args.steps))


if __name__ == "__main__":
    main()
