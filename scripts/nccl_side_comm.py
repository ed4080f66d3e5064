"""Could a second NCCL communicator carry the checker's rounds? What a
16-byte all_reduce on a communicator of its own costs, and whether it
still completes while the program's communicator hangs.

    python3 scripts/nccl_side_comm.py [--ranks 4]

Starts --ranks processes of itself on GPU 0 (each its own NCCL_HOSTID,
sockets on lo, NVLS off), three times: with nothing hung, with rank 2's
stream held by a kernel that spins for hours before an all_reduce every
rank makes ("kernel"), and with rank 2 never making the all_reduce the
others make ("missing"). Each rank first times 200 all_reduces of 16
bytes on the side communicator (a new_group of every rank, on a stream of
its own), then hangs as told, then makes one more side all_reduce and
says whether it finished within 10 s.
"""

import os
import sys
import time

import one_gpu


def rank_main(rank, world, hang):
    import torch
    import torch.distributed as dist

    dev = one_gpu.init(rank, world, 60)
    side_pg = dist.new_group(list(range(world)))
    side = torch.cuda.Stream()
    x = torch.ones(4, device=dev)
    dist.all_reduce(x)
    d = torch.zeros(4, device=dev)
    times = []
    for _ in range(200):
        t = time.perf_counter()
        with torch.cuda.stream(side):
            dist.all_reduce(d, group=side_pg)
        side.synchronize()
        times.append(time.perf_counter() - t)
    times.sort()
    print(f"rank {rank}: 16-byte side all_reduce, nothing hung: median {times[100] * 1e6:.1f} us, "
          f"min {times[0] * 1e6:.1f} us", flush=True)
    if hang == "kernel" and rank == 2:
        torch.cuda._sleep(1 << 45)
    if hang == "kernel" or (hang == "missing" and rank != 2):
        y = torch.ones(4, device=dev)
        dist.all_reduce(y)
    time.sleep(1)
    t = time.perf_counter()
    with torch.cuda.stream(side):
        dist.all_reduce(d, group=side_pg)
    while not side.query() and time.perf_counter() - t < 10:
        time.sleep(0.01)
    state = "finished" if side.query() else "not finished"
    print(f"rank {rank}: side all_reduce with the default communicator hung ({hang}): "
          f"{state} after {time.perf_counter() - t:.2f} s", flush=True)
    sys.stdout.flush()
    os._exit(0)


def main():
    args = sys.argv[1:]
    if os.environ.get("RW_RANK"):
        rank_main(int(os.environ["RW_RANK"]), int(os.environ["RW_WORLD"]), os.environ["RW_HANG"])
        return
    world = int(args[args.index("--ranks") + 1]) if "--ranks" in args else 4
    for hang in ("none", "kernel", "missing"):
        took, codes = one_gpu.run_ranks([__file__], world, 120, {"RW_HANG": hang})
        print(f"{hang}: ended after {took:.1f} s; exit codes {codes}", flush=True)

if __name__ == "__main__":
    main()
