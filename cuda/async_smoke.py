"""Asynchronous NCCL on a real GPU, for the GPU-node smoke run (scripts/gpu_smoke.sh).

Launched by torchrun, one process per GPU. Each step places PyTorch's spin kernel
(`torch.cuda._sleep`, a kernel that keeps the GPU busy for a number of clock cycles)
before an allreduce on the current stream, then reads the result with `.item()`, the
synchronization real training loops make. On a GPU the allreduce returns once enqueued,
long before the spin kernel ends; the host then waits in the `.item()`'s stream
synchronization. Rank 0 writes {"spin_ms", "call_ms"} (the median host time of the
allreduce calls) to --out.

With --stall-after N, every rank launches, at step N, a spin kernel of --stall-s seconds
before its allreduce and then synchronizes: the job stands still behind that kernel (the
device stall `sf hang` must name) until it ends.
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


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
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    spin = cycles_for(args.spin_ms)
    tensor = torch.ones(1 << 20, device="cuda")
    calls = []
    for step in range(args.steps):
        stall = step == args.stall_after
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
