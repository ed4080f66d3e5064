"""What a CUDA event costs the host, against what one small NCCL call costs:
the figures that decide how the checker learns when a call has finished.

Times, per call, on one GPU of this process (median of 5 runs of N calls):
  query_null  cuEventQuery(NULL): ctypes and the driver's error path
  record   cuEventRecord of a disable-timing event on the stream
  query    cuEventQuery of an event that has completed
  query_p  cuEventQuery of an event that has not (a kernel still running)
  kernel   one tiny kernel launch (x.add_(1) on one element)
  nccl     ncclAllReduce of 8 bytes, one rank (torch.distributed, NCCL)

  python3 scripts/event_cost.py [N]
"""

import ctypes
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20000


def per_call(f, n=N, runs=5):
    out = []
    for _ in range(runs):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for _ in range(n):
            f()
        out.append((time.perf_counter_ns() - t0) / n / 1000.0)
    torch.cuda.synchronize()
    return statistics.median(out)


def check(rc, what):
    if rc != 0:
        raise SystemExit(f"{what} returned {rc}")


def main():
    torch.cuda.init()
    x = torch.zeros(1, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    cu = ctypes.CDLL("libcuda.so.1")
    ev = ctypes.c_void_p()
    check(cu.cuEventCreate(ctypes.byref(ev), 2), "cuEventCreate")  # CU_EVENT_DISABLE_TIMING
    rec = cu.cuEventRecord
    rec.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    qry = cu.cuEventQuery
    qry.argtypes = [ctypes.c_void_p]
    s = ctypes.c_void_p(stream)

    rows = {}
    # a driver call that fails at once (a NULL event): ctypes and the
    # driver's error path, for scale
    rows["query_null"] = per_call(lambda: qry(None))
    rows["record"] = per_call(lambda: rec(ev, s))
    torch.cuda.synchronize()
    rows["query"] = per_call(lambda: qry(ev))
    # a long kernel in front, so the event stays pending
    big = torch.empty(1 << 26, device="cuda")
    for _ in range(200):
        big.mul_(1.0000001)
    check(rec(ev, s), "cuEventRecord")
    pend = qry(ev)
    rows["query_p"] = per_call(lambda: qry(ev), n=min(N, 2000))
    torch.cuda.synchronize()
    rows["kernel"] = per_call(lambda: x.add_(1))

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    y = torch.zeros(2, device="cuda")
    dist.all_reduce(y)
    rows["nccl"] = per_call(lambda: dist.all_reduce(y))
    dist.destroy_process_group()

    print(f"torch {torch.__version__} nccl {torch.cuda.nccl.version()} {torch.cuda.get_device_name()}")
    print(f"pending query said {pend} (600 = not ready)")
    print(f"{'what':<12} {'us/call':>8}")
    for k, v in rows.items():
        print(f"{k:<12} {v:8.3f}")


if __name__ == "__main__":
    main()
