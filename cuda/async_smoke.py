"""Asynchronous NCCL on a real GPU, for the GPU-node smoke run (scripts/gpu_smoke.sh).

Launched by torchrun, one process per GPU. Each step places PyTorch's spin kernel
(`torch.cuda._sleep`, a kernel that keeps the GPU busy for a number of clock cycles)
before an allreduce on the current stream, then reads the result with `.item()`, the
synchronization real training loops make. On a GPU the allreduce returns once enqueued,
long before the spin kernel ends; the host then waits in the `.item()`'s stream
synchronization. Rank 0 writes {"spin_ms", "call_ms"} (the median host time of the
allreduce calls) to --out.

With --late-rank R, rank R's spin kernel lasts --late-ms longer each step: its host
returns from the allreduce as early as the others', and the others' NCCL kernels wait on
the device for rank R's (the late rank `sf slow` must name from the device).

With --stall-after N, at step N a spin kernel of --stall-s seconds runs before the
allreduce on every rank, or on --stall-rank alone, and each rank then synchronizes: the
job stands still behind that kernel (the device stall `sf hang` must name) until it ends.
"""

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

from shared_gpu import bind_rank_to_gpu


def cycles_for(ms):
    """Clock cycles of the spin kernel that last about `ms` on this GPU."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    probe = 10_000_000
    start.record()
    torch.cuda._sleep(probe)
    end.record()
    end.synchronize()
    return int(probe * ms / max(start.elapsed_time(end), 1e-3))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--spin-ms", type=float, default=50.0)
    parser.add_argument("--stall-after", type=int, default=-1)
    parser.add_argument("--stall-s", type=float, default=60.0)
    parser.add_argument("--stall-rank", type=int, default=-1, help="default: every rank")
    parser.add_argument("--late-rank", type=int, default=-1)
    parser.add_argument("--late-ms", type=float, default=30.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    bind_rank_to_gpu()
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    spin = cycles_for(args.spin_ms + (args.late_ms if rank == args.late_rank else 0.0))
    tensor = torch.ones(1 << 20, device="cuda")
    calls = []
    for step in range(args.steps):
        stall = step == args.stall_after and args.stall_rank in (-1, rank)
        torch.cuda._sleep(cycles_for(args.stall_s * 1000.0) if stall else spin)
        begin = time.perf_counter()
        dist.all_reduce(tensor)
        calls.append((time.perf_counter() - begin) * 1000.0)
        tensor.div_(dist.get_world_size())
        tensor[0].item()  # the host waits here, in a device-to-host copy's synchronization
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"spin_ms": args.spin_ms, "call_ms": statistics.median(calls)}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
