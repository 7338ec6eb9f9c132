"""What the Python door adds to a training step, on a model of more than 500 modules.

    RANK=0 WORLD_SIZE=1 SF_LOG_DIR=/tmp/sf-bench LD_PRELOAD=target/release/libstagefrontier.so \
        PYTHONPATH=python python tests/torch/bench_door.py

Steps of a small-tensor model (so that the hooks' cost is not lost in arithmetic) are
timed in rounds that alternate between three modes, the fastest round of each mode kept
(on a shared machine the slower rounds measure the neighbours). Time is this thread's CPU
time (with one torch thread, CPU autograd runs on it too), which a loaded machine
inflates far less than wall time:
  off     the door installed but switched off (its wrappers return at once)
  door    the door recording: one hook on the outermost module, ~10 marker calls a step
  global  the door off, plus a no-op global forward pre- and post-hook: what keeping the
          global hook to find the model would cost on every module call
Before any of them, the same steps without the door installed at all ("none") show what
the switched-off wrappers cost. Last, the door's own work per step (the calls its hooks
make in one step with accumulation 1, markers included) is timed alone, free of the
model's noise.
"""

import sys
import time

import torch

BLOCKS = 170  # Linear + ReLU + LayerNorm each: 510 leaf modules, 511 with the container
STEPS = 40
ROUNDS = 15


def build():
    layers = []
    for _ in range(BLOCKS):
        layers += [torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.LayerNorm(8)]
    model = torch.nn.Sequential(*layers)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


def train_steps(model, optimizer, batches):
    it = iter(batches)
    start = time.thread_time()
    for _ in range(STEPS):
        x, y = next(it)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return (time.thread_time() - start) / STEPS


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model, optimizer = build()
    modules = sum(1 for _ in model.modules())
    data = [(torch.randn(4, 8), torch.randn(4, 8)) for _ in range(STEPS)]
    batches = torch.utils.data.DataLoader(data, batch_size=None)
    train_steps(model, optimizer, batches)  # warm-up

    none = min(train_steps(model, optimizer, batches) for _ in range(ROUNDS))

    import stagefrontier_torch
    if not stagefrontier_torch.activate() or stagefrontier_torch._door is None:
        sys.exit("the door did not install: run with RANK, WORLD_SIZE and the library preloaded")
    door = stagefrontier_torch._door
    train_steps(model, optimizer, batches)  # the first backward picks the model
    assert door.model is model and not door.global_hooks

    import torch.nn.modules.module as hooks
    times = {"off": [], "door": [], "global": []}
    for _ in range(ROUNDS):
        for mode in times:
            door.enabled = mode == "door"
            handles = []
            if mode == "global":
                handles = [hooks.register_module_forward_pre_hook(lambda m, a: None),
                           hooks.register_module_forward_hook(lambda m, a, o: None, always_call=True)]
            times[mode].append(train_steps(model, optimizer, batches))
            for h in handles:
                h.remove()
    door.enabled = True
    med = {mode: min(t) for mode, t in times.items()}
    us = lambda s: s * 1e6
    print("model: %d modules; step %.0f us without the door" % (modules, us(none)))
    print("door recording: %+.1f us/step (vs switched off)" % us(med["door"] - med["off"]))
    print("switched-off wrappers: %+.1f us/step (vs not installed)" % us(med["off"] - none))
    print("a global hook kept instead: %+.1f us/step" % us(med["global"] - med["off"]))
    print("door's own work: %.1f us/step" % us(door_work(door, model)))


def door_work(door, model):
    """The door's calls of one training step, as its hooks make them, timed alone."""
    from stagefrontier_torch import DATA, BACKWARD, OPTIMIZER
    n = 2000
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.thread_time()
        for _ in range(n):
            door.active(); door.settle(); door.open(DATA); door.close()  # DataLoader __next__
            door.active(); door.forward(model)  # the model's forward pre-hook
            door.active(); door.begin_step(); door.open(BACKWARD); door.close()  # backward
            door.active(); door.begin_step(); door.open(OPTIMIZER)  # optimizer pre-hook
            door.active(); door.close(); door.step_done = True  # optimizer post-hook
        best = min(best, (time.thread_time() - start) / n)
    door.settle()
    return best


if __name__ == "__main__":
    main()
