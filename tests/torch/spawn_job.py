"""A DDP job started as PyTorch's own DDP tutorial starts one: torch.multiprocessing.spawn,
the rank passed to init_process_group(rank=r, world_size=n), no RANK from a launcher.
gloo on CPU, a DataLoader, no stagefrontier code.

    python tests/torch/spawn_job.py --ranks 3 --steps 8 --port 29512
    python tests/torch/spawn_job.py --ranks 3 --steps 30 --exit-rank 1 --exit-step 10

With --exit-rank, that rank calls os._exit(1) at the start of step --exit-step; spawn then
terminates the others (SIGTERM) and raises.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset


def train(rank, world_size, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                                        torch.nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8 * args.steps, 16)
    data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=8)
    for step, (inputs, targets) in enumerate(data):
        if rank == args.exit_rank and step == args.exit_step:
            os._exit(1)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("spawn_job: ok ranks=%d steps=%d rank_env=%s" % (world_size, args.steps, os.environ.get("RANK")),
              flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--port", type=int, default=29512)
    parser.add_argument("--exit-rank", type=int, default=-1, help="this rank calls os._exit(1) at --exit-step")
    parser.add_argument("--exit-step", type=int, default=-1)
    args = parser.parse_args()
    mp.spawn(train, args=(args.ranks, args), nprocs=args.ranks, join=True)
