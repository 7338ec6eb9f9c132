"""What the Python door adds to a collective issued from Python on gloo.

    RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29590 SF_LOG_DIR=/tmp/sf-bench \
        LD_PRELOAD=target/release/libstagefrontier.so PYTHONPATH=python \
        python tests/torch/bench_collectives.py

One rank, a 1-element all_reduce (so that gloo's own work is as small as it gets), timed
in rounds that alternate between the recorded call (the door's wrapper: a signature bind,
a group lookup, two ctypes calls and the library's record) and the same function
unwrapped; the fastest round of each is kept (on a shared machine the slower rounds
measure the neighbours). Time is this thread's CPU time.
"""

import time

import stagefrontier_torch
import torch
import torch.distributed as dist

CALLS = 2000
ROUNDS = 15


def timed(call, tensor):
    start = time.thread_time_ns()
    for _ in range(CALLS):
        call(tensor)
    return (time.thread_time_ns() - start) / CALLS


def main():
    assert stagefrontier_torch.activate(), "the door is switched off (SF_DISABLE=1)"
    dist.init_process_group("gloo")
    recorded = dist.all_reduce
    # The door's wrapper (functools.wraps keeps the name, not the code).
    assert recorded.__code__.co_name == "recorded", "not wrapped: is libstagefrontier.so preloaded?"
    real = recorded.__wrapped__
    tensor = torch.ones(1)
    best = {"recorded": float("inf"), "real": float("inf")}
    for _ in range(ROUNDS):
        best["real"] = min(best["real"], timed(real, tensor))
        best["recorded"] = min(best["recorded"], timed(recorded, tensor))
    dist.destroy_process_group()
    print("all_reduce of 1 float32, 1 rank, gloo: %.1f us unwrapped, %.1f us recorded: +%.1f us per call"
          % (best["real"] / 1e3, best["recorded"] / 1e3, (best["recorded"] - best["real"]) / 1e3))


if __name__ == "__main__":
    main()
