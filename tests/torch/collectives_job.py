"""An FSDP-style training job for the real-PyTorch test tier: gloo on CPU, parameters
sharded across ranks, gathered from Python before each forward
(all_gather_into_tensor) and their gradients reduce-scattered in backward
(reduce_scatter_tensor), the loss all-reduced for logging. It holds no stagefrontier
marker: under `sf run` its stages come from the Python door, and its collectives, issued
from Python on a gloo group, are recorded by the door too.

    torchrun --nproc-per-node 3 tests/torch/collectives_job.py --steps 30 \\
        --slow-rank 1 --slow-ms 30
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

WIDTH = 48  # WIDTH * WIDTH splits evenly over 1, 2, 3, 4 and 6 ranks


class Synthetic(Dataset):
    def __len__(self):
        return 1 << 20

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(index)
        x = torch.randn(WIDTH, generator=g)
        return x, x.sum().unsqueeze(0)


class Gathered(torch.autograd.Function):
    """The full weight from every rank's shard; its gradient reduce-scattered back. With
    ASYNC, the gather is issued with async_op=True and waited for after a little
    overlapped work, as FSDP's prefetch does: the host waits in Work.wait."""

    ASYNC = False

    @staticmethod
    def forward(ctx, shard):
        full = torch.empty(shard.numel() * dist.get_world_size())
        if Gathered.ASYNC:
            work = dist.all_gather_into_tensor(full, shard.contiguous(), async_op=True)
            time.sleep(0.002)
            work.wait()
        else:
            dist.all_gather_into_tensor(full, shard.contiguous())
        return full

    @staticmethod
    def backward(ctx, grad):
        shard = torch.empty(grad.numel() // dist.get_world_size())
        dist.reduce_scatter_tensor(shard, grad.contiguous())
        return shard


class Model(torch.nn.Module):
    def __init__(self, world, compute_s, hang_step):
        super().__init__()
        self.shard = torch.nn.Parameter(torch.randn(WIDTH * WIDTH // world) * 0.01)
        self.compute_s = compute_s
        self.hang_step = hang_step
        self.calls = 0

    def forward(self, x):
        if self.calls == self.hang_step:
            print("rank %d stops before its gather at step %d" % (dist.get_rank(), self.calls), flush=True)
            time.sleep(3600)
        self.calls += 1
        time.sleep(self.compute_s)
        weight = Gathered.apply(self.shard).view(WIDTH, WIDTH)
        return (x @ weight).sum(dim=1, keepdim=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--compute-ms", type=float, default=10.0, help="every rank's forward compute")
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-ms", type=float, default=0.0, help="added to the slow rank's forward")
    parser.add_argument("--hang-rank", type=int, default=-1)
    parser.add_argument("--hang-step", type=int, default=-1, help="the hang rank stops before this step's gather")
    parser.add_argument("--async-gather", action="store_true", help="issue the gather with async_op=True, then wait")
    args = parser.parse_args()
    Gathered.ASYNC = args.async_gather

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    compute_s = (args.compute_ms + (args.slow_ms if rank == args.slow_rank else 0.0)) / 1000.0
    model = Model(world, compute_s, args.hang_step if rank == args.hang_rank else -1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    batches = iter(DataLoader(Synthetic(), batch_size=8, num_workers=1))
    for step in range(args.steps):
        x, y = next(batches)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        reported = loss.detach().clone()
        dist.all_reduce(reported)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("collectives_job: ok ranks=%s steps=%d" % (os.environ["WORLD_SIZE"], args.steps))


if __name__ == "__main__":
    main()
