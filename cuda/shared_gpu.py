"""Where a smoke job's rank runs, also when several ranks share one GPU.

NCCL refuses two ranks of one communicator on one device ("Duplicate GPU detected",
src/init.cc) when both report the same host hash. A host's hash is NCCL_HOSTID when set
(src/misc/utils.cc, getHostHash), so with SF_SMOKE_HOSTID_PER_RANK=1 each rank claims a
host of its own before NCCL starts: NCCL then joins them through its network transport
(sockets on loopback) as it joins ranks on two nodes, and each rank's kernels, proxy
thread and device waits are those of a multi-node job. The GPU time-slices the ranks'
contexts, so every collective is slower than on separate GPUs; what is smoke-tested is
where the waits happen, not how fast.
"""

import os

import torch


def bind_rank_to_gpu():
    """Select this rank's GPU (LOCAL_RANK modulo the GPUs there are) and return its index."""
    local_rank = int(os.environ["LOCAL_RANK"])
    if os.environ.get("SF_SMOKE_HOSTID_PER_RANK") == "1":
        os.environ["NCCL_HOSTID"] = f"sf-smoke-rank-{os.environ['RANK']}"
    device = local_rank % torch.cuda.device_count()
    torch.cuda.set_device(device)
    return device
