"""What librankwise_nccl.so costs per torch.distributed.all_reduce on a GPU.

    python3 scripts/interpose_cost.py --so target/release/librankwise_nccl.so \
        --nccl /path/to/libnccl.so.2 --out /tmp/interpose_cost.txt [--ranks 4]

Runs --ranks processes of itself on GPU 0 (each its own NCCL_HOSTID, sockets
on lo, NVLS off, so NCCL accepts several ranks on one GPU) five times: without
LD_PRELOAD, with the interposer at RANKWISE_CHECK=0, RANKWISE_CHECK=local and
with every check, and under TORCH_DISTRIBUTED_DEBUG=DETAIL. Each rank times all_reduce of 8 bytes (2 float32; 1000
calls after 50 warm-up calls) and of 64 MiB (20 calls after 3), each call
synchronised (torch.cuda.synchronize) before the next, and reports its
median per call; then it times the same calls issued in batches without
synchronising (8 B: 20 batches of 50; 64 MiB: 6 of 10): the host's time per
call until dist.all_reduce returns, where the interposer's checks and its
wait for the other ranks show without the GPU's time around them (median
over calls; the first call of a batch also waits out the ranks' skew
after the synchronisation, which the median leaves out). DETAIL is PyTorch's
own check across ranks, run without the interposer for comparison. Each table (every rank's median, the slowest rank's, and
its difference from the run without the interposer) and each rank's raw
report go to --out, one file. Every run has a deadline, so the whole script
ends within about nine minutes even when one hangs.
"""

import datetime
import json
import os
import statistics
import subprocess
import sys
import time

import one_gpu

SIZES = [  # (label, float32 elements, warm-up calls, timed calls, issue batches, batch)
    ("8 B", 2, 50, 1000, 20, 50),
    ("64 MiB", 16 << 20, 3, 20, 6, 10),
]
MODES = [  # (label, LD_PRELOAD the interposer, RANKWISE_CHECK)
    ("no LD_PRELOAD", False, None),
    ("RANKWISE_CHECK=0", True, "0"),
    ("RANKWISE_CHECK=local", True, "local"),
    ("RANKWISE_CHECK=watch", True, "watch"),
    ("full checks", True, None),
    # PyTorch's own cross-rank check, for comparison (no interposer)
    ("TORCH_DISTRIBUTED_DEBUG=DETAIL", False, "DETAIL"),
]
RUN_DEADLINE_S = 100


def rank_program(rank, world):
    import torch
    import torch.distributed as dist

    dev = one_gpu.init(rank, world, 30)
    dist.init_process_group(
        "nccl",
        rank=rank,
        world_size=world,
        init_method=os.environ["RW_INIT"],
        timeout=datetime.timedelta(seconds=30),
        device_id=dev,
    )
    print(f"rank {rank}: initialised", flush=True)
    report = {"rank": rank}
    for label, n, warm, calls, batches, batch in SIZES:
        x = torch.full((n,), float(rank + 1), device=dev)
        for _ in range(warm):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        times = []
        for _ in range(calls):
            t0 = time.perf_counter_ns()
            dist.all_reduce(x)
            torch.cuda.synchronize()
            times.append(time.perf_counter_ns() - t0)
        us = [t / 1000 for t in times]
        issue, each = [], []
        for _ in range(batches):
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for _ in range(batch):
                t1 = time.perf_counter_ns()
                dist.all_reduce(x)
                each.append((time.perf_counter_ns() - t1) / 1000)
            issue.append((time.perf_counter_ns() - t0) / 1000 / batch)
        torch.cuda.synchronize()
        report[label] = {
            "median_us": statistics.median(us),
            "mean_us": statistics.fmean(us),
            "p90_us": sorted(us)[int(0.9 * len(us))],
            "calls": calls,
            "issue_us": statistics.median(each),
            "issue_p90_us": sorted(each)[int(0.9 * len(each))],
            "issue_batches": [round(b, 2) for b in issue],
        }
        # each size as soon as it is done, so a run cut short keeps what it measured
        print("REPORT " + json.dumps(report), flush=True)
    dist.destroy_process_group()


def run_mode(mode, args, world, log):
    label, preload, check = mode
    port = one_gpu.free_port()
    procs = []
    for r in range(world):
        env = one_gpu.rank_env(r, world, port)
        for k in ("LD_PRELOAD", "RANKWISE_CHECK"):
            env.pop(k, None)
        if preload:
            env.update(LD_PRELOAD=args["so"], RANKWISE_TIMEOUT="30")
            if args.get("nccl"):
                env["RANKWISE_NCCL_LIBRARY"] = args["nccl"]
        env.pop("TORCH_DISTRIBUTED_DEBUG", None)
        if check == "DETAIL":
            env["TORCH_DISTRIBUTED_DEBUG"] = check
        elif check is not None:
            env["RANKWISE_CHECK"] = check
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    t0 = time.time()
    reports, failed, killed = [], [], False
    for r, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(1, t0 + RUN_DEADLINE_S - time.time()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            killed = True
        log.append(f"--- {label}, rank {r}, exit {p.returncode}\n{out.strip()}")
        rep = [l for l in out.splitlines() if l.startswith("REPORT ")]
        if rep:
            # the last report holds every size this rank finished
            reports.append(json.loads(rep[-1][len("REPORT "):]))
        if killed:
            failed.append(f"rank {r} killed at the {RUN_DEADLINE_S} s deadline")
        elif p.returncode != 0 or not rep:
            failed.append(f"rank {r} exited {p.returncode}")
    return reports, failed, time.time() - t0


def parent(argv):
    def opt(name, default=None):
        return argv[argv.index(name) + 1] if name in argv else default

    args = {
        "so": os.path.abspath(opt("--so", "target/release/librankwise_nccl.so")),
        "nccl": opt("--nccl"),
    }
    out_path = opt("--out", "interpose_cost.txt")
    world = int(opt("--ranks", "4"))
    if not os.path.exists(args["so"]):
        sys.exit(f"{args['so']} is missing: cargo build --release -p rankwise-nccl")
    start = time.time()
    lines, log = [], []
    try:
        import torch

        lines.append(f"torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}")
    except Exception as e:  # the ranks will say more
        lines.append(f"torch: {e}")
    try:
        gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip()
    except OSError as e:
        gpus = f"nvidia-smi: {e}"
    lines.append(gpus or "nvidia-smi -L said nothing")
    lines.append(f"{world} rank processes on GPU 0; interposer {args['so']}; NCCL for it {args['nccl']}")
    lines.append(f"load average at start: {os.getloadavg()}")
    results = {}
    for mode in MODES:
        reports, failed, took = run_mode(mode, args, world, log)
        results[mode[0]] = reports if len(reports) == world else None
        status = "ok" if not failed else "; ".join(failed)
        lines.append(f"{mode[0]}: {took:.1f} s ({status})")
    lines.append("")
    for key, title in (
        ("median_us", "µs per call, each call synchronised; per rank its median, then the slowest rank's median and its difference from no LD_PRELOAD"),
        ("issue_us", "µs per call on the host (until dist.all_reduce returns), calls issued in batches without synchronising; per rank its median call, then the slowest rank's and its difference from no LD_PRELOAD"),
    ):
        table(lines, results, world, key, title)
    lines.append(f"whole script: {time.time() - start:.0f} s; load average at end: {os.getloadavg()}")
    lines.append("")
    lines.append("each rank's output:")
    text = "\n".join(lines + log) + "\n"
    with open(out_path, "w") as f:
        f.write(text)
    print("\n".join(lines))
    print(f"written to {out_path}")


def table(lines, results, world, key, title):
    lines.append(title)
    head = f"{'size':<8} {'mode':<22} " + " ".join(f"{'rank ' + str(r):>9}" for r in range(world))
    lines.append(head + f" {'slowest':>9} {'+':>9}")
    for size, *_ in SIZES:
        base = None
        for label, *_ in MODES:
            reps = results.get(label)
            if not reps:
                lines.append(f"{size:<8} {label:<22} (no result)")
                continue
            if any(size not in r for r in reps):
                lines.append(f"{size:<8} {label:<22} (not every rank finished it)")
                continue
            med = [r[size][key] for r in sorted(reps, key=lambda r: r["rank"])]
            slowest = max(med)
            if label == MODES[0][0]:
                base = slowest
            plus = "-" if base is None or label == MODES[0][0] else f"{slowest - base:+.1f}"
            cells = " ".join(f"{m:>9.1f}" for m in med)
            lines.append(f"{size:<8} {label:<22} {cells} {slowest:>9.1f} {plus:>9}")
    lines.append("")


if __name__ == "__main__":
    if os.environ.get("RW_RANK"):
        rank_program(int(os.environ["RW_RANK"]), int(os.environ["RW_WORLD"]))
    else:
        parent(sys.argv[1:])
