"""Ratio table for compare.sh: MPI median time / rankwise median time, per
collective, rank count and size. rankwise's out-of-place time, except for
Bcast: MPI_Bcast has one buffer, which is NCCL's in-place Broadcast (the
out-of-place form also writes the root's separate output)."""
import json, sys, os

out, ns = sys.argv[1], [int(x) for a in sys.argv[2:] for x in a.split()]
ops = ["allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast"]
names = {"allreduce": "Allreduce", "allgather": "Allgather", "reduce_scatter": "Reduce_scatter_block",
         "alltoall": "Alltoall", "broadcast": "Bcast"}

def label(b):
    for u, v in (("M", 1 << 20), ("K", 1 << 10)):
        if b >= v:
            return f"{b // v}{u}"
    return str(b)

for n in ns:
    table, sizes = {}, set()
    for op in ops:
        mpi = {}
        with open(os.path.join(out, f"mpi-{op}-{n}.txt")) as f:
            for line in f:
                _, size, us = line.split()
                mpi[int(size)] = float(us)
        place = "ip" if op == "broadcast" else "oop"
        rw = {}
        for part in ("small", "large"):
            with open(os.path.join(out, f"rankwise-{op}-{n}-{part}.json")) as f:
                rw.update({r["size"]: r[place]["time_us"] for r in json.load(f)["rows"]})
        for s in mpi.keys() & rw.keys():
            table[(op, s)] = (mpi[s], rw[s])
            sizes.add(s)
    print(f"\nN = {n}: MPI time / rankwise time (median us in brackets: MPI | rankwise); above 1 = rankwise faster\n")
    print("| size | " + " | ".join(names[o] for o in ops) + " |")
    print("|---:|" + "---:|" * len(ops))
    behind = []
    for s in sorted(sizes):
        cells = []
        for op in ops:
            if (op, s) in table:
                m, r = table[(op, s)]
                cells.append(f"{m / r:.2f} ({m:.1f} \\| {r:.1f})")
                if s >= 65536 and m < r:
                    behind.append(f"{names[op]} {label(s)}")
            else:
                cells.append("")
        print(f"| {label(s)} | " + " | ".join(cells) + " |")
    print(f"\nsizes >= 64K where rankwise is behind at N={n}: {', '.join(behind) or 'none'}")
