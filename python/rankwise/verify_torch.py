"""The seed suite's framework layer on real torch.distributed.

    torchrun --nproc-per-node 4 -m rankwise.verify_torch [--out DIR] [--backend nccl|gloo]
    rankwise summarize DIR

Each rank runs the 14 framework cases of rankwise's seed suite (the same
cases ``rankwise verify`` runs on rankwise's own typed face) through
``torch.distributed`` and writes one CSV row per case to
``DIR/raw/framework/rank<r>.csv``; rank 0 writes ``DIR/manifest.json``
(engine ``torch``). ``rankwise summarize DIR`` then re-derives every row
from the suite alone and checks it: the identity columns, the expected
values, and that every output equals them element by element.

The expected values here are the seed's closed forms, written again in
Python, independently of the Rust reference ``summarize`` compares them
with: a row passes only if both derivations and torch agree.

Backends: NCCL on GPUs (rank r on GPU ``LOCAL_RANK % device_count``),
Gloo on CPUs; ``--backend`` picks, default NCCL when CUDA is available.
Every case has the same semantics on both (docs/guide/check.md lists them
case by case); each row's note says which backend ran it.
"""

import argparse
import datetime
import decimal
import json
import os
import sys
import time

SUITE = "seed"
LAYER = "framework"
ENGINE = "torch"


# ---------------------------------------------------------------- the seed's closed forms


def encode(s, d, o):
    """The seed's AlltoAll encoding: source*10000 + destination*100 + offset."""
    return s * 10000 + d * 100 + o


def uneven_split(s, d):
    """Source s sends s + d + 1 elements to destination d."""
    return s + d + 1


def adapt_root(seed_root, n):
    """A seed root at this N: itself when it is a rank, else N-1 (with a note)."""
    if seed_root < n:
        return seed_root, None
    return n - 1, (
        f"seed root {seed_root} is not a rank of a {n}-rank communicator: "
        f"root {n - 1} used instead"
    )


def root_label(seed_root, root):
    return f"root {root}" if seed_root == root else f"root {root} (seed: root {seed_root})"


# ---------------------------------------------------------------- values as the CSVs write them


def fmt_value(x):
    """An element as rankwise's records write it: integers in decimal, floats
    as the shortest digits that read back to the same double, positionally
    (``3``, ``1.75``, ``-0``, ``0.0000001``), ``inf``, ``-inf``, ``nan``."""
    if isinstance(x, bool):
        x = int(x)
    if isinstance(x, int):
        return str(x)
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    text = format(decimal.Decimal(repr(float(x))), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def fmt_values(values):
    return "[" + ", ".join(fmt_value(v) for v in values) + "]"


REJECTED_ROOT = "ncclInvalidArgument (InvalidRoot)"


# ---------------------------------------------------------------- the cases


class Case:
    """One framework case: its identity columns, what each rank must see
    (``expect`` returns a list of values, ``None`` for no output, or
    ``REJECTED_ROOT``) and how it runs on torch (``run`` returns
    (values or None, addresses))."""

    def __init__(self, operation, variant, dtype, count, relation, expect, run, note=""):
        self.operation = operation
        self.variant = variant
        self.dtype = dtype
        self.count = count
        self.relation = relation
        self.expect = expect
        self.run = run
        self.note = note


def cases(n, me, torch=None, dist=None, device=None):
    """The seed suite's 14 framework cases at N = n, in its order, for rank
    `me`. Their identity and expectations need nothing else; running them
    needs `torch`, `torch.distributed` and the device."""
    i32, i64, f32 = "int32", "int64", "float32"

    def t(values, dtype):
        return torch.tensor(values, dtype=getattr(torch, dtype), device=device)

    def empty(count, dtype):
        return torch.empty(count, dtype=getattr(torch, dtype), device=device)

    def addr(x):
        return f"0x{x.data_ptr():x}"

    def all_reduce_sum():
        x = t([me + 1, me + 10, me * 2], i64)
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
        return x.tolist(), f"tensor {addr(x)}"

    def all_reduce_max():
        # 0.0 - r: rank 0 gives +0, so the maximum is +0 exactly
        x = t([float(me), 0.0 - me, me * 0.5 + 0.25], f32)
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        return x.tolist(), f"tensor {addr(x)}"

    def all_reduce_zero():
        x = t([], f32)
        dist.all_reduce(x)
        return x.tolist(), f"tensor {addr(x)}"

    def broadcast(root):
        def run():
            x = t([me * 1000 + j for j in range(4)], i64)
            dist.broadcast(x, src=root)
            return x.tolist(), f"tensor {addr(x)}"

        return run

    def reduce(root):
        def run():
            x = t([me + 1, (me + 1) * 10], i64)
            dist.reduce(x, dst=root, op=dist.ReduceOp.SUM)
            # a non-root's tensor is not an output: never read
            return (x.tolist() if me == root else None), f"tensor {addr(x)}"

        return run

    def all_gather_list():
        x = t([me, me + 10, me + 100], i32)
        out = [empty(3, i32) for _ in range(n)]
        dist.all_gather(out, x)
        return [v for b in out for v in b.tolist()], f"input {addr(x)}"

    def all_gather_flat():
        x = t([me, me + 10, me + 100], i32)
        out = empty(3 * n, i32)
        dist.all_gather_into_tensor(out, x)
        return out.tolist(), f"input {addr(x)} output {addr(out)}"

    def reduce_scatter():
        x = t([i + me * 100 for i in range(3 * n)], i64)
        out = empty(3, i64)
        dist.reduce_scatter_tensor(out, x, op=dist.ReduceOp.SUM)
        return out.tolist(), f"input {addr(x)} output {addr(out)}"

    def alltoall_equal():
        x = t([encode(me, d, o) for d in range(n) for o in range(2)], i64)
        out = empty(2 * n, i64)
        dist.all_to_all_single(out, x, [2] * n, [2] * n)
        return out.tolist(), f"input {addr(x)} output {addr(out)}"

    def alltoall_uneven():
        ins = [uneven_split(me, d) for d in range(n)]
        outs = [uneven_split(s, me) for s in range(n)]
        x = t([encode(me, d, o) for d in range(n) for o in range(ins[d])], i64)
        out = empty(sum(outs), i64)
        dist.all_to_all_single(out, x, outs, ins)
        return out.tolist(), f"input {addr(x)} output {addr(out)}"

    def ring():
        nxt, prev = (me + 1) % n, (me + n - 1) % n
        send = t([me, me + 100], i64)
        recv = t([0, 0], i64)
        reqs = dist.batch_isend_irecv(
            [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prev)]
        )
        for r in reqs:
            r.wait()
        return recv.tolist(), f"send {addr(send)} recv {addr(recv)}"

    def invalid_root():
        x = t([1, 1, 1, 1], i64)
        dist.broadcast(x, src=n)
        return x.tolist(), f"tensor {addr(x)}"

    tri = n * (n + 1) // 2
    out = [
        Case("AllReduce", "SUM/int64", "int64", 3, "sendbuff == recvbuff",
             lambda: [tri, 10 * n + n * (n - 1) // 2, n * (n - 1)], all_reduce_sum),
        Case("AllReduce", "MAX/float32", "float", 3, "sendbuff == recvbuff",
             lambda: [float(n - 1), 0.0, (n - 1) * 0.5 + 0.25], all_reduce_max),
        Case("AllReduce", "count 0", "float", 0, "sendbuff == recvbuff",
             lambda: [], all_reduce_zero),
    ]
    for seed_root in (0, 2):
        root, note = adapt_root(seed_root, n)
        out.append(Case("Broadcast", root_label(seed_root, root), "int64", 4, "sendbuff == recvbuff",
                        (lambda root=root: [root * 1000 + j for j in range(4)]), broadcast(root),
                        note or ""))
    for seed_root in (0, 3):
        root, note = adapt_root(seed_root, n)
        out.append(Case("Reduce", root_label(seed_root, root), "int64", 2, "sendbuff == recvbuff",
                        (lambda root=root: [tri, 10 * tri] if me == root else None), reduce(root),
                        note or ""))
    gathered = [s + k for s in range(n) for k in (0, 10, 100)]
    out += [
        Case("AllGather", "tensor list", "int32", 3, "separate q input and N*q output",
             lambda: gathered, all_gather_list),
        Case("AllGather", "flat output", "int32", 3, "separate q input and N*q output",
             lambda: gathered, all_gather_flat),
        Case("ReduceScatter", f"{3 * n} -> 3 per rank", "int64", 3, "separate N*q input and q output",
             lambda: [i * n + 100 * n * (n - 1) // 2 for i in range(3 * me, 3 * me + 3)], reduce_scatter),
        Case("AlltoAll", "equal splits (Send/Recv pairs)", "int64", 2, "separate N*q input and N*q output",
             lambda: [encode(s, me, o) for s in range(n) for o in range(2)], alltoall_equal),
        Case("AlltoAll", "uneven splits s+d+1", "int64", sum(uneven_split(me, d) for d in range(n)),
             "separate input and output, sized by the split lists",
             lambda: [encode(s, me, o) for s in range(n) for o in range(uneven_split(s, me))],
             alltoall_uneven),
        Case("Send/Recv", f"grouped ring of {n}", "int64", 2, "separate send and recv buffers",
             lambda: [(me + n - 1) % n, (me + n - 1) % n + 100], ring),
        Case("invalid root", f"Broadcast root {n}", "int64", 4, "rejected before any buffer is used",
             lambda: REJECTED_ROOT, invalid_root),
    ]
    return out


# ---------------------------------------------------------------- judging a row


def refuses_root(err, root):
    """Whether an exception is torch.distributed (or NCCL through it)
    refusing `root` as no rank of the group."""
    text = str(err)
    return str(root) in text and ("rank" in text.lower() or "root" in text.lower())


def judge(case, n, me, run_id, backend, device_sync):
    """Runs one case on this rank and returns its CSV row."""
    expect = case.expect()
    notes = [note for note in (case.note, f"torch.distributed, {backend} backend") if note]
    actual_text, correct, addresses = "", False, ""
    try:
        values, addresses = case.run()
        device_sync()
    except Exception as err:  # the call's refusal is this case's outcome
        if expect == REJECTED_ROOT and refuses_root(err, n):
            notes.append(f"rejected: {type(err).__name__}: {str(err).splitlines()[0][:200]}")
            actual_text, correct = REJECTED_ROOT, True
        else:
            notes.append(f"unexpected error: {type(err).__name__}: {str(err).splitlines()[0][:200]}")
            actual_text = f"error ({type(err).__name__})"
    else:
        if expect == REJECTED_ROOT:
            notes.append("the call was accepted but the contract requires its rejection")
            actual_text = fmt_values(values)
        elif expect is None:
            notes.append("no output contract")
            correct = values is None
        elif values is None:
            notes.append("no output was produced")
        else:
            actual_text = fmt_values(values)
            correct = actual_text == fmt_values(expect) and len(values) == len(expect)
    if expect == REJECTED_ROOT:
        expected_text = REJECTED_ROOT
    elif expect is None:
        expected_text = ""
    else:
        expected_text = fmt_values(expect)
    return {
        "run_id": run_id,
        "layer": LAYER,
        "rank": me,
        "world_size": n,
        "operation": case.operation,
        "variant": case.variant,
        "pointer_relation": case.relation,
        "addresses": addresses,
        "dtype": case.dtype,
        "count": case.count,
        "expected": expected_text,
        "actual": actual_text,
        "correct": "true" if correct else "false",
        "note": "; ".join(notes),
    }


COLUMNS = ["run_id", "layer", "rank", "world_size", "operation", "variant", "pointer_relation",
           "addresses", "dtype", "count", "expected", "actual", "correct", "note"]


def write_rows(path, rows):
    import csv

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        for row in rows:
            w.writerow(row)


def utc_run_id():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def package_version():
    try:
        from importlib.metadata import version

        return version("rankwise")
    except Exception:
        return "unknown"


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m rankwise.verify_torch",
        description="The seed suite's framework cases through torch.distributed; "
        "run under torchrun, then `rankwise summarize DIR`.",
    )
    p.add_argument("--out", help="a new or empty run directory [default: runs/<UTC time>]")
    p.add_argument("--backend", choices=["nccl", "gloo"],
                   help="default: nccl when CUDA is available, else gloo")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds torch.distributed waits for a collective (default 120)")
    args = p.parse_args(argv)
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if var not in os.environ:
            print(f"python -m rankwise.verify_torch: {var} is not set: run it under torchrun "
                  "(torchrun --nproc-per-node 4 -m rankwise.verify_torch)", file=sys.stderr)
            return 1

    import torch
    import torch.distributed as dist

    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    me, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    kw = {}
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", me))
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
        kw["device_id"] = device
        device_sync = torch.cuda.synchronize
    else:
        device = torch.device("cpu")

        def device_sync():
            return None

    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout), **kw)
    # the run id and the directory are rank 0's, sent to every rank
    setup = [None]
    if me == 0:
        run_id = utc_run_id()
        out = args.out or os.path.join("runs", run_id)
        problem = None
        if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
            problem = f"--out {out}: not a new or empty directory"
        setup = [(run_id, os.path.abspath(out), problem)]
    dist.broadcast_object_list(setup, src=0)
    run_id, out, problem = setup[0]
    if problem:
        if me == 0:
            print(f"python -m rankwise.verify_torch: {problem}", file=sys.stderr)
        dist.destroy_process_group()
        return 1

    t0 = time.time()
    plan = cases(n, me, torch, dist, device)
    rows = [judge(c, n, me, run_id, backend, device_sync) for c in plan]
    write_rows(os.path.join(out, "raw", LAYER, f"rank{me}.csv"), rows)
    if me == 0:
        adaptations = [f"{LAYER} {c.operation}: {c.note}" for c in plan if c.note]
        manifest = {
            "tool": "rankwise.verify_torch",
            "version": package_version(),
            "run_id": run_id,
            "suite": SUITE,
            "ranks": n,
            "engine": ENGINE,
            "layers": [{"name": LAYER, "rows_per_rank": len(plan), "rows": len(plan) * n,
                        "records": len(plan)}],
            "adaptations": adaptations,
            "backend": backend,
            "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if backend == "nccl" else None,
        }
        with open(os.path.join(out, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=2)
            f.write("\n")
    wrong = [f"{r['operation']} / {r['variant']}" for r in rows if r["correct"] != "true"]
    print(f"rank {me}: {len(rows) - len(wrong)} of {len(rows)} cases right on {backend} "
          f"in {time.time() - t0:.2f} s" + (f"; wrong: {', '.join(wrong)}" if wrong else ""),
          flush=True)
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception as err:  # the rows are written; say it and keep them
        print(f"rank {me}: ending the process group failed: {type(err).__name__}: {err}",
              file=sys.stderr, flush=True)
    if me == 0:
        print(f"run directory {out}: check it with `rankwise summarize {out}`", flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
