"""A small PyTorch DDP training job for the GPU-node smoke run (scripts/gpu_smoke.sh).

Launched by torchrun, one process per GPU. Each step is an NVTX range named "step", and
its phases are NVTX ranges named like stagefrontier's default stages, so that under
NVTX_INJECTION64_PATH=libstagefrontier.so every rank records step vectors with no
stagefrontier code in the job. DDP's gradient allreduce goes through NCCL (the LD_PRELOAD
door), and the kernels through CUDA (the CUDA_INJECTION64_PATH door).

Rank 0 writes {"samples_per_s", "steps", "world", "batch"} to --out, timed over the steps
after --warmup, with the GPU synchronized at both ends. Needs torch with CUDA, no network,
no data set: batches are random tensors made on the GPU.
"""

import argparse
import json
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.cuda import nvtx
from torch.nn.parallel import DistributedDataParallel

from shared_gpu import bind_rank_to_gpu


def stage(name):
    """An NVTX push/pop range, the form torch.cuda.nvtx.range_push/range_pop gives."""

    class Range:
        def __enter__(self):
            nvtx.range_push(name)

        def __exit__(self, *exc):
            nvtx.range_pop()

    return Range()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    device = bind_rank_to_gpu()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)

    model = nn.Sequential(*[nn.Sequential(nn.Linear(args.width, args.width), nn.ReLU()) for _ in range(6)]).cuda()
    ddp = DistributedDataParallel(model, device_ids=[device])
    optim = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()

    start = None
    for step in range(args.steps):
        if step == args.warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        with stage(f"step {step}"):
            with stage("data.next_wait"):
                x = torch.randn(args.batch, args.width, device="cuda")
                y = torch.randn(args.batch, args.width, device="cuda")
            with stage("model.fwd_loss_cpu_wall"):
                loss = loss_fn(ddp(x), y)
            with stage("model.backward_cpu_wall"):
                optim.zero_grad(set_to_none=True)
                loss.backward()
            with stage("optim.step_cpu_wall"):
                optim.step()
            with stage("callbacks.cpu_wall"):
                if step % 10 == 0:
                    # A host sync every 10 steps, as loss logging does.
                    loss.item()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    timed = args.steps - args.warmup
    if rank == 0:
        result = {
            "samples_per_s": timed * args.batch * world / elapsed,
            "steps": timed,
            "world": world,
            "batch": args.batch,
        }
        with open(args.out, "w") as f:
            json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
