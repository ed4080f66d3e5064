"""What librankwise_nccl.so's local checks cost per NCCL call on a GPU, to the
tenth of a microsecond: no Python framework around the call, no other rank.

    python3 scripts/interpose_local_cost.py --so target/release/librankwise_nccl.so \
        --nccl /path/to/libnccl.so.2 --out /tmp/interpose_local_cost.txt [--rounds 3]

Each run is one process with a one-rank communicator on GPU 0 that calls
ncclAllReduce through ctypes on device buffers (torch allocates them with
cudaMalloc, as PyTorch's caching allocator does, so the interposer asks the
CUDA driver for each buffer's allocation) on torch's current stream: 2
float32 in place (as torch.distributed.all_reduce calls it) and out of
place, 64 MiB in place. The program's ncclAllReduce (looked up in the global
scope, so the interposer's under LD_PRELOAD) and NCCL's own entry point
(looked up in libnccl itself) are timed in the same process, batch for
batch in alternating order: each batch's issue time until its last call
returns, then the stream synchronised, untimed. A run reports the median
batch of each and the median paired difference, per call; processes vary
by a microsecond or more between them, pairs in one process much less.
Modes, interleaved over --rounds rounds: no LD_PRELOAD (both entry points
are NCCL's: the difference is the method's noise), RANKWISE_CHECK=0
(forwarding only) and RANKWISE_CHECK=local.
One rank makes no agreement across ranks: its cost is measured by
scripts/interpose_cost.py and interpose/examples/call_cost. For scale, each
process also times the CUDA driver's cuMemGetAddressRange (the query the
local checks make once per distinct buffer of a call) and an empty C call,
both through ctypes.
"""

import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

SIZES = [  # (label, float32 elements, in place, batch pairs, calls per batch)
    ("8 B in place", 2, True, 60, 1000),
    ("8 B out of place", 2, False, 60, 1000),
    ("64 MiB in place", 16 << 20, True, 20, 100),
]
MODES = [  # (label, LD_PRELOAD the interposer, RANKWISE_CHECK)
    ("no LD_PRELOAD", False, None),
    ("RANKWISE_CHECK=0", True, "0"),
    ("RANKWISE_CHECK=local", True, "local"),
]


def rank_program(nccl_path):
    import torch

    torch.cuda.set_device(0)
    ctypes.CDLL(nccl_path, mode=ctypes.RTLD_GLOBAL)
    scope = ctypes.CDLL(None)  # the global scope: LD_PRELOAD first
    get_id, init, all_reduce = scope.ncclGetUniqueId, scope.ncclCommInitRank, scope.ncclAllReduce
    all_reduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                           ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    class UniqueId(ctypes.Structure):  # passed by value, as NCCL's C API does
        _fields_ = [("internal", ctypes.c_char * 128)]

    uid = UniqueId()
    assert get_id(ctypes.byref(uid)) == 0, "ncclGetUniqueId failed"
    comm = ctypes.c_void_p()
    init.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
    rc = init(ctypes.byref(comm), 1, uid, 0)
    assert rc == 0, f"ncclCommInitRank returned {rc}"
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    # NCCL's own entry point, past the interposer: under LD_PRELOAD the same
    # process times both, batch for batch, so the difference is free of
    # what varies between processes (without LD_PRELOAD both are NCCL's,
    # and the difference shows the method's noise)
    direct = ctypes.CDLL(nccl_path).ncclAllReduce
    direct.argtypes = all_reduce.argtypes
    report = {}
    for label, n, in_place, pairs, calls in SIZES:
        x = torch.full((n,), 3.0, device="cuda")
        y = x if in_place else torch.zeros(n, device="cuda")
        args = (ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), n, 7, 0, comm, stream)
        for f in (all_reduce, direct):
            for _ in range(calls):
                assert f(*args) == 0
        torch.cuda.synchronize()

        def batch(f):
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                f(*args)
            took = (time.perf_counter_ns() - t0) / 1000 / calls
            torch.cuda.synchronize()
            return took

        mine, nccls = [], []
        for i in range(pairs):
            # alternate which goes first
            if i % 2 == 0:
                a = batch(all_reduce)
                b = batch(direct)
            else:
                b = batch(direct)
                a = batch(all_reduce)
            mine.append(a)
            nccls.append(b)
        assert bool((y == 3.0).all()), "the one-rank sum is its input"
        report[label] = {
            "call": statistics.median(mine),
            "nccl": statistics.median(nccls),
            "diff": statistics.median(a - b for a, b in zip(mine, nccls)),
        }
    # for scale: the CUDA driver's answer to "which allocation holds this
    # pointer" (cuMemGetAddressRange, which the local checks ask once per
    # distinct buffer of a call), and an empty C call, both through ctypes
    cuda = ctypes.CDLL("libcuda.so.1")
    rng = cuda.cuMemGetAddressRange_v2
    rng.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    labs = ctypes.CDLL(None).labs
    for name, f, a in (("cuMemGetAddressRange", rng, (ctypes.byref(base), ctypes.byref(size), x.data_ptr())),
                       ("empty C call", labs, (-1,))):
        per = []
        for _ in range(20):
            t0 = time.perf_counter_ns()
            for _ in range(10000):
                f(*a)
            per.append((time.perf_counter_ns() - t0) / 1000 / 10000)
        report[name] = statistics.median(per)
    print("REPORT " + json.dumps(report), flush=True)


def run(mode, so, nccl):
    label, preload, check = mode
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "RANKWISE_CHECK", "RANKWISE_DEBUG"):
        env.pop(k, None)
    env.update(RW_CHILD="1", RANKWISE_NCCL_LIBRARY=nccl)
    if preload:
        env["LD_PRELOAD"] = so
    if check is not None:
        env["RANKWISE_CHECK"] = check
    p = subprocess.run([sys.executable, __file__, "--nccl", nccl], env=env,
                       capture_output=True, text=True, timeout=120)
    rep = [l for l in p.stdout.splitlines() if l.startswith("REPORT ")]
    if p.returncode != 0 or not rep:
        raise SystemExit(f"{label}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return json.loads(rep[-1][len("REPORT "):])


def main(argv):
    def opt(name, default=None):
        return argv[argv.index(name) + 1] if name in argv else default

    nccl = opt("--nccl")
    if os.environ.get("RW_CHILD"):
        return rank_program(nccl)
    so = os.path.abspath(opt("--so", "target/release/librankwise_nccl.so"))
    rounds = int(opt("--rounds", "3"))
    out = opt("--out", "interpose_local_cost.txt")
    got = {m[0]: [] for m in MODES}
    for _ in range(rounds):
        for m in MODES:
            got[m[0]].append(run(m, so, nccl))
    lines = [
        f"one rank on GPU 0, ncclAllReduce through ctypes; NCCL {nccl}; interposer {so}",
        "µs per call issued: the program's ncclAllReduce (the interposer's under LD_PRELOAD) and NCCL's own",
        "entry point in the same process, batch for batch; + is the median paired difference; median over rounds",
        f"{'mode':<22} " + " ".join(f"{s + ': call':>24} {'nccl':>7} {'+':>6}" for s, *_ in SIZES),
    ]
    for label, *_ in MODES:
        cells = []
        for s, *_ in SIZES:
            m = {k: statistics.median(r[s][k] for r in got[label]) for k in ("call", "nccl", "diff")}
            cells.append(f"{m['call']:>24.2f} {m['nccl']:>7.2f} {m['diff']:>+6.2f}")
        lines.append(f"{label:<22} " + " ".join(cells))
    lines.append("")
    lines.append("for scale, through ctypes in the same processes (µs, median over rounds): "
                 + ", ".join(f"{k} {statistics.median(r[k] for rs in got.values() for r in rs):.2f}"
                             for k in ("cuMemGetAddressRange", "empty C call")))
    lines.append("")
    lines.append("each round: " + json.dumps(got))
    text = "\n".join(lines) + "\n"
    with open(out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
