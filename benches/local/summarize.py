"""Summary of targets.sh: medians over repetitions, with min and max."""
import json, os, statistics, sys

out, reps = sys.argv[1], int(sys.argv[2])

def load(name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)

def spread(xs):
    return f"{statistics.median(xs):.3g} (min {min(xs):.3g}, max {max(xs):.3g})"

print(f"## 64 MiB float32, fraction of the copy bound (median of {reps} runs)\n")
print("| op | N | out-of-place | in-place | copy bandwidth between the calls, median, all threads (GB/s) |")
print("|---|---:|---|---|---|")
for n in (2, 4):
    runs = [load(f"bw-{n}-{r}.json") for r in range(1, reps + 1)]
    ops = [row["func"] for row in runs[0]["rows"]]
    for i, op in enumerate(ops):
        # the copy bandwidth measured between the timed calls (out-of-place)
        bw = [r["rows"][i]["oop"]["copy_bw_gbs"] for r in runs]
        oop = [100 * r["rows"][i]["oop"]["bound_us"] / r["rows"][i]["oop"]["time_us"] for r in runs]
        ips = [r["rows"][i]["ip"] for r in runs]
        ip = spread([100 * m["bound_us"] / m["time_us"] for m in ips]) + " %" if ips[0] else "none"
        print(f"| {op} | {n} | {spread(oop)} % | {ip} | {spread(bw)} |")

print(f"\n## 8-byte AllReduce latency, median us (median of {reps} runs of 2000 calls)\n")
print("| N | rankwise | OpenMPI MPI_Allreduce | MPI / rankwise |")
print("|---:|---|---|---|")
for n in (2, 4, 8):
    rw = [load(f"lat-{n}-{r}.json")["rows"][0]["oop"]["time_us"] for r in range(1, reps + 1)]
    mp = []
    for r in range(1, reps + 1):
        p = os.path.join(out, f"mpilat-{n}-{r}.txt")
        if os.path.exists(p):
            mp.append(float(open(p).read().split()[2]))
    ratio = spread([m / w for m, w in zip(mp, rw)]) if mp else "-"
    print(f"| {n} | {spread(rw)} | {spread(mp) if mp else '-'} | {ratio} |")

print(f"\n## Oversubscription: 64 MiB AllReduce, time per byte, N = 8 against N = 2 (2 cores)\n")
t2 = [load(f"over-2-{r}.json")["rows"][0]["oop"]["time_us"] for r in range(1, reps + 1)]
t8 = [load(f"over-8-{r}.json")["rows"][0]["oop"]["time_us"] for r in range(1, reps + 1)]
# time per byte of data reduced: N ranks x 64 MiB each
per2 = [t / (2 * 64) for t in t2]
per8 = [t / (8 * 64) for t in t8]
print(f"- N = 2: {spread(t2)} us, {spread(per2)} us per MiB of input")
print(f"- N = 8: {spread(t8)} us, {spread(per8)} us per MiB of input")
print(f"- ratio N=8 / N=2 per byte: {spread([a / b for a, b in zip(per8, per2)])} (target: at most 3)")
