"""Reference bandwidth from PyTorch's NCCL, for `rankwise bench --engine nccl`.

    torchrun --standalone --nproc_per_node=N scripts/torch_busbw.py \
        --op all_reduce -b 8 -e 1G -f 2 -n 20 -w 5

One GPU per rank. For each size (bytes per rank's send buffer, float32, as
nccl-tests and `rankwise bench` count it), times `iters` calls between CUDA
events after `warmup` calls, and prints one JSON line per size from rank 0:
time in microseconds per call, algbw and busbw in GB/s with nccl-tests'
bus factors (AllReduce 2(N-1)/N; AllGather, ReduceScatter, AlltoAll
(N-1)/N; Broadcast 1).
"""

import argparse
import json
import os

import torch
import torch.distributed as dist


def size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    return int(t[:-1]) * mult[t[-1]] if t[-1] in mult else int(t)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--op", required=True,
                   choices=["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"])
    p.add_argument("-b", type=size, default=8)
    p.add_argument("-e", type=size, default=64 << 20)
    p.add_argument("-f", type=int, default=2)
    p.add_argument("-n", type=int, default=20)
    p.add_argument("-w", type=int, default=5)
    a = p.parse_args()

    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    n, me = dist.get_world_size(), dist.get_rank()
    factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(a.op, (n - 1) / n)

    b = a.b
    while b <= a.e:
        count = max(b // 4, 1)
        # nccl-tests' size: the larger of the send and receive buffers
        # per rank for AllGather/ReduceScatter is N blocks
        if a.op == "all_gather":
            block = max(count // n, 1)
            send = torch.ones(block, device=dev)
            recv = torch.empty(block * n, device=dev)
            call = lambda: dist.all_gather_into_tensor(recv, send)  # noqa: E731
        elif a.op == "reduce_scatter":
            block = max(count // n, 1)
            send = torch.ones(block * n, device=dev)
            recv = torch.empty(block, device=dev)
            call = lambda: dist.reduce_scatter_tensor(recv, send)  # noqa: E731
        elif a.op == "all_to_all":
            block = max(count // n, 1)
            send = torch.ones(block * n, device=dev)
            recv = torch.empty(block * n, device=dev)
            call = lambda: dist.all_to_all_single(recv, send)  # noqa: E731
        elif a.op == "broadcast":
            buf = torch.ones(count, device=dev)
            call = lambda: dist.broadcast(buf, src=0)  # noqa: E731
        else:
            buf = torch.ones(count, device=dev)
            call = lambda: dist.all_reduce(buf)  # noqa: E731
        for _ in range(a.w):
            call()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(a.n):
            call()
        end.record()
        torch.cuda.synchronize()
        us = start.elapsed_time(end) * 1000.0 / a.n
        algbw = b / (us * 1e-6) / 1e9
        if me == 0:
            print(json.dumps({"op": a.op, "nranks": n, "bytes": b, "time_us": us,
                              "algbw": algbw, "busbw": algbw * factor}), flush=True)
        b *= a.f
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
