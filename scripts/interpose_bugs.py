"""PyTorch programs with one injected NCCL misuse each, for the interposer.

    python3 scripts/interpose_bugs.py BUG [--ranks 4] [--timeout 30]

BUG is one of: none, count, skip, root, isend, a2a, ring, abort, stuck. The script starts
--ranks processes of itself on GPU 0 (each its own NCCL_HOSTID, sockets on
lo, NVLS off, so NCCL accepts several ranks on one GPU), runs the program,
and prints per rank what the program saw and how long it took. Run it
with and without the interposer:

    LD_PRELOAD=target/release/librankwise_nccl.so RANKWISE_TIMEOUT=10 \
        python3 scripts/interpose_bugs.py count

The bugs (rank 2 is the odd one out unless said):
  count  all_reduce of 5 elements where the others pass 4
  skip   rank 2 leaves out a broadcast and calls the next all_reduce
  root   broadcast with src 1 on rank 2, src 0 elsewhere
  isend  rank 0 isends 16 elements to rank 1, which calls all_reduce
  a2a    all_to_all_single whose output splits on rank 2 are not the
         transpose of the others' input splits
  ring   every rank sends 16 elements to the next with dist.send, then
         receives from the one before with dist.recv: a ring outside a
         group (batch_isend_irecv), so each send waits for a recv the peer
         makes only after its own send
  abort  rank 2 sleeps 30 s instead of calling all_reduce; on the others a
         second thread aborts the process group 3 s into the call (as
         PyTorch's watchdog does), printing how long the abort took and
         what the stuck call did
  stuck  rank 2 queues a kernel that spins for hours on its stream, then
         every rank calls the same all_reduce: the calls agree, the
         streams do not (the hang only the completion check can name)
  none   the same calls without a bug: results are printed for comparing
"""

import os
import sys
import time

import one_gpu


def program(bug, rank, world):
    import torch
    import torch.distributed as dist

    dev = one_gpu.init(rank, world, os.environ["RW_TIMEOUT"])
    x = torch.full((4,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    out = {"warmup": x.tolist()}
    t0 = time.time()
    if bug == "count":
        y = torch.ones(5 if rank == 2 else 4, device=dev)
        dist.all_reduce(y)
        out["result"] = y.tolist()
    elif bug == "skip":
        y = torch.full((4,), float(rank), device=dev)
        if rank != 2:
            dist.broadcast(y, src=0)
        dist.all_reduce(y)
        out["result"] = y.tolist()
    elif bug == "root":
        y = torch.full((4,), float(rank), device=dev)
        dist.broadcast(y, src=1 if rank == 2 else 0)
        out["result"] = y.tolist()
    elif bug == "isend":
        y = torch.ones(16, device=dev)
        if rank == 0:
            dist.isend(y, 1).wait()
        else:
            dist.all_reduce(y)
        out["result"] = y[:4].tolist()
    elif bug == "ring":
        y = torch.full((16,), float(rank), device=dev)
        z = torch.empty(16, device=dev)
        dist.send(y, (rank + 1) % world)
        dist.recv(z, (rank - 1) % world)
        out["result"] = z[:4].tolist()
    elif bug == "abort":
        y = torch.ones(4, device=dev)
        if rank == 2:
            time.sleep(30)
            print(f"rank {rank}: slept 30 s, leaves without the call", flush=True)
            os._exit(0)
        abort_thread(dev, t0)
        dist.all_reduce(y)
        print(f"rank {rank}: the call returned after {time.time() - t0:.3f} s", flush=True)
        torch.cuda.synchronize()
        out["result"] = y.tolist()
    elif bug == "stuck":
        y = torch.ones(4, device=dev)
        if rank == 2:
            torch.cuda._sleep(1 << 45)  # about 5 hours of a spinning kernel
        dist.all_reduce(y)
        print(f"rank {rank}: all_reduce enqueued after {time.time() - t0:.3f} s", flush=True)
        torch.cuda.synchronize()
        out["result"] = y.tolist()
    elif bug in ("a2a", "none"):
        ins = [2 * rank + d + 1 for d in range(world)]
        outs = [2 * s + rank + 1 for s in range(world)]
        if bug == "a2a" and rank == 2:
            outs = [2 * rank + s + 1 for s in range(world)]
        src = torch.cat([torch.full((n,), float(100 * rank + d), device=dev) for d, n in enumerate(ins)])
        dst = torch.empty(sum(outs), device=dev)
        dist.all_to_all_single(dst, src, outs, ins)
        out["result"] = dst.tolist()
        if bug == "none":
            z = torch.arange(4, device=dev, dtype=torch.float32) + rank
            dist.all_reduce(z)
            dist.broadcast(z, src=world - 1)
            out["more"] = z.tolist()
    torch.cuda.synchronize()
    out["seconds"] = round(time.time() - t0, 3)
    print(f"rank {rank}: ok {out}", flush=True)
    dist.destroy_process_group()


def abort_thread(dev, t0):
    """Aborts the default process group 3 s after t0 from a thread of its
    own, the way PyTorch's watchdog aborts a stuck communicator, and
    prints how long the abort took."""
    import threading

    import torch.distributed as dist

    def run():
        time.sleep(max(0.0, t0 + 3 - time.time()))
        rank = dist.get_rank()
        start = time.time()
        how = "_abort_process_group"
        try:
            dist.distributed_c10d._abort_process_group()
        except Exception:
            how = "backend.abort"
            dist.distributed_c10d._get_default_group()._get_backend(dev).abort()
        print(f"rank {rank}: abort ({how}) returned in {time.time() - start:.3f} s", flush=True)

    threading.Thread(target=run, daemon=True).start()


def main():
    args = sys.argv[1:]
    if os.environ.get("RW_RANK"):
        rank, world = int(os.environ["RW_RANK"]), int(os.environ["RW_WORLD"])
        try:
            program(args[0], rank, world)
        except Exception as e:  # the program's view of the failure
            print(f"rank {rank}: raised {type(e).__name__}: {str(e)[:600]}", flush=True)
            os._exit(1)
        return
    bug = args[0]
    world = int(args[args.index("--ranks") + 1]) if "--ranks" in args else 4
    timeout = args[args.index("--timeout") + 1] if "--timeout" in args else "30"
    took, codes = one_gpu.run_ranks([__file__, bug], world, float(timeout) * 3 + 60, {"RW_TIMEOUT": timeout})
    print(f"{bug}: all ranks ended after {took:.1f} s; exit codes {codes}", flush=True)

if __name__ == "__main__":
    main()
