"""A small, unmodified-style DDP training job for the real-PyTorch test tier: gloo on CPU,
a DataLoader with 2 forked workers, gradient accumulation 2, an evaluation loop, and an
optional planted fault on one rank (a slow stage, or a rank asleep forever). It contains
no stagefrontier marker: under `sf run` its stages come from the Python door alone.

    torchrun --nproc-per-node 2 tests/torch/ddp_job.py --steps 30 \
        --slow-rank 1 --slow-stage data --slow-ms 40
"""

import argparse
import contextlib
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

BATCH = 8


class Synthetic(Dataset):
    """Deterministic samples; on the slow rank with --slow-stage data, each batch takes
    --slow-ms longer to load (spread over its samples, in the worker processes)."""

    def __init__(self, size, delay_s):
        self.size = size
        self.delay_s = delay_s

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        if self.delay_s:
            time.sleep(self.delay_s)
        g = torch.Generator().manual_seed(index)
        x = torch.randn(32, generator=g)
        return x, x.sum().unsqueeze(0)


class SlowBackward(torch.autograd.Function):
    """Identity forward; its backward sleeps, as a slow kernel or a host stall would."""

    @staticmethod
    def forward(ctx, x, delay_s):
        ctx.delay_s = delay_s
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.delay_s)
        return grad, None


class Model(torch.nn.Module):
    def __init__(self, backward_delay_s, compute_s):
        super().__init__()
        self.hidden = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU())
        self.out = torch.nn.Linear(64, 1)
        self.backward_delay_s = backward_delay_s
        self.compute_s = compute_s

    def forward(self, x):
        if self.compute_s:
            # The forward pass of a model worth training takes time on every rank.
            time.sleep(self.compute_s)
        h = self.hidden(x)
        if self.backward_delay_s:
            h = SlowBackward.apply(h, self.backward_delay_s)
        return self.out(h)


@contextlib.contextmanager
def nvtx_range(name):
    torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        torch.cuda.nvtx.range_pop()


@contextlib.contextmanager
def no_range(name):
    yield


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--accumulation", type=int, default=2)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-stage", choices=["data", "backward"], default="data")
    parser.add_argument("--slow-ms", type=float, default=0.0)
    parser.add_argument("--compute-ms", type=float, default=0.0,
                        help="every rank's forward pass takes this much longer")
    parser.add_argument("--sleep-rank", type=int, default=-1,
                        help="this rank falls asleep forever before its optimizer step at --sleep-step")
    parser.add_argument("--sleep-step", type=int, default=-1)
    parser.add_argument("--nvtx", action="store_true",
                        help="mark steps and stages with NVTX ranges (torch.cuda.nvtx), as ddp_smoke.py does")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    slow = rank == args.slow_rank
    delay_s = args.slow_ms / 1000.0 if slow else 0.0
    sample_delay = delay_s / BATCH if args.slow_stage == "data" else 0.0
    model = DistributedDataParallel(
        Model(delay_s if args.slow_stage == "backward" else 0.0, args.compute_ms / 1000.0))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.MSELoss()

    samples = BATCH * args.accumulation * (args.steps + 2)
    train = DataLoader(Synthetic(samples, sample_delay), batch_size=BATCH, num_workers=2)
    evaluation = DataLoader(Synthetic(4 * BATCH, 0.0), batch_size=BATCH)
    batches = iter(train)
    stage = nvtx_range if args.nvtx else no_range
    for step in range(args.steps):
        with stage("step %d" % step):
            for micro in range(args.accumulation):
                with stage("data.next_wait"):
                    x, y = next(batches)
                with stage("model.fwd_loss_cpu_wall"):
                    loss = loss_fn(model(x), y) / args.accumulation
                with stage("model.backward_cpu_wall"):
                    if micro + 1 < args.accumulation:
                        with model.no_sync():
                            loss.backward()
                    else:
                        loss.backward()
            if rank == args.sleep_rank and step == args.sleep_step:
                print("rank %d asleep at step %d" % (rank, step), flush=True)
                time.sleep(3600)
            with stage("optim.step_cpu_wall"):
                optimizer.step()
            with stage("callbacks.cpu_wall"):
                optimizer.zero_grad()
        if (step + 1) % args.eval_every == 0:
            model.eval()
            with torch.no_grad():
                total = sum(loss_fn(model(x), y).item() for x, y in evaluation)
            model.train()
            if rank == 0:
                print("step %d eval loss %.4f" % (step + 1, total), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("ddp_job: ok ranks=%s steps=%d" % (os.environ["WORLD_SIZE"], args.steps))


if __name__ == "__main__":
    main()
