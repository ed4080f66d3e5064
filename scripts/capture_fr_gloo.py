import os, sys, datetime, time
import torch, torch.distributed as dist
import torch._C._distributed_c10d as c
def main():
    rank, world = int(sys.argv[1]), int(sys.argv[2])
    bug = sys.argv[3]
    out = sys.argv[4]
    dist.init_process_group("gloo", rank=rank, world_size=world, init_method="file:///tmp/frcap/init."+bug,
                            timeout=datetime.timedelta(seconds=5))
    x = torch.ones(4) * (rank + 1)
    dist.all_reduce(x)
    y = torch.ones(4)
    try:
        if bug == "skip":
            if rank != 2:
                dist.broadcast(y, src=0)
            dist.all_reduce(y)
        elif bug == "count":
            z = torch.ones(5 if rank == 2 else 4)
            dist.all_reduce(z)
        else:
            dist.all_reduce(y)
            dist.broadcast(y, src=world - 1)
            if rank == 0:
                dist.send(torch.ones(3), 1)
            elif rank == 1:
                dist.recv(torch.empty(3), 0)
            dist.all_gather_into_tensor(torch.empty(4 * world), torch.ones(4))
    except Exception as e:
        print(f"rank {rank}: {type(e).__name__}: {str(e)[:200]}", flush=True)
    open(f"{out}/fr_rank{rank}.pickle", "wb").write(c._dump_fr_trace())
    open(f"{out}/fr_rank{rank}.json", "wb").write(c._dump_fr_trace_json())
    os._exit(0)
main()
