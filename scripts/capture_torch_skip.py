"""Capture NCCL's INFO log of a PyTorch job in which one rank skips a call.

    bash scripts/capture_torch_skip.sh OUT_DIR     # 4 ranks on one GPU

Every rank runs the same short training-like sequence of collectives,
except that rank 2 leaves out the Broadcast (a rank-dependent `if` around a
collective, the commonest cause of NCCL hangs). torch.distributed enqueues
each call without waiting, so every rank logs its whole sequence before
the job hangs in the final synchronize; the watchdog (20 s) or the
launcher's timeout ends it. The per-rank logs are what `rankwise logs
analyze` must read as "rank 2 skipped Broadcast #1".
"""

import datetime
import os

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
dist.init_process_group(
    "nccl",
    rank=rank,
    world_size=world,
    timeout=datetime.timedelta(seconds=20),
    device_id=dev,
)
x = torch.ones(16, device=dev)
dist.all_reduce(x)
if rank != 2:
    dist.broadcast(x, src=0)
dist.all_reduce(x)
dist.all_gather_into_tensor(torch.empty(16 * world, device=dev), x)
dist.reduce_scatter_tensor(torch.empty(16 // world, device=dev), x)
dist.all_reduce(x)
print(f"rank {rank}: every call enqueued", flush=True)
torch.cuda.synchronize()
print(f"rank {rank}: finished (not expected)", flush=True)
