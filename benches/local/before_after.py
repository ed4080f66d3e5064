"""Summary of before_after.sh: medians over repetitions and paired ratios,
for whichever parts of the run are there."""
import json, os, statistics, sys

out, reps = sys.argv[1], int(sys.argv[2])

def load(name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)

def med(xs):
    return statistics.median(xs)

def spread(xs, fmt="{:.3g}"):
    return f"{fmt.format(med(xs))} [{fmt.format(min(xs))}–{fmt.format(max(xs))}]"

def ran(prefix):
    return os.path.exists(os.path.join(out, f"{prefix}-2-before-1.json"))

def place_name(place):
    return "out-of-place" if place == "oop" else "in-place"

def latency():
    print(f"8-byte AllReduce, median time per call in us, median [min–max] of {reps} runs of 2000 calls")
    print("| N | before | after | after / before (paired) |")
    print("|---:|---|---|---|")
    for n in (2, 4, 8):
        b = [load(f"lat-{n}-before-{r}.json")["rows"][0]["oop"]["time_us"] for r in range(1, reps + 1)]
        a = [load(f"lat-{n}-after-{r}.json")["rows"][0]["oop"]["time_us"] for r in range(1, reps + 1)]
        print(f"| {n} | {spread(b)} | {spread(a)} | {spread([x / y for x, y in zip(a, b)], '{:.2f}')} |")

def rows(prefix, n):
    """Each (row, placement, {"before": [...], "after": [...]}) of the
    `prefix` runs at N = n, the lists holding that row's measures (dicts
    with time_us and bound_us), one per repetition."""
    runs = {w: [load(f"{prefix}-{n}-{w}-{r}.json") for r in range(1, reps + 1)] for w in ("before", "after")}
    for i, row in enumerate(runs["before"][0]["rows"]):
        for place in ("oop", "ip"):
            if row[place]:
                yield row, place, {w: [rr["rows"][i][place] for rr in runs[w]] for w in runs}

def large():
    print(f"\n64 MiB float32 per rank, fraction of the copy bound in %, median [min–max] of {reps} runs")
    print("| op | N | placement | before | after |")
    print("|---|---:|---|---|---|")
    for n in (2, 4):
        for row, place, m in rows("bw", n):
            frac = {w: [100 * x["bound_us"] / x["time_us"] for x in m[w]] for w in m}
            print(f"| {row['func']} | {n} | {place_name(place)} | {spread(frac['before'], '{:.0f}')} | {spread(frac['after'], '{:.0f}')} |")

def small():
    print(f"\nSmall sizes, float32 sum, median time per call in us (both placements), median [min–max] of {reps} runs; after / before paired")
    print("| op | N | size (B) | placement | before | after | after / before |")
    print("|---|---:|---:|---|---|---|---|")
    medians = {}
    for n in (2, 4):
        for row, place, m in rows("small", n):
            t = {w: [x["time_us"] for x in m[w]] for w in m}
            ratio = [a / b for a, b in zip(t["after"], t["before"])]
            medians.setdefault(n, []).append(med(ratio))
            print(f"| {row['func']} | {n} | {row['size']} | {place_name(place)} | {spread(t['before'])} | {spread(t['after'])} | {spread(ratio, '{:.2f}')} |")
    for n, ms in medians.items():
        print(f"N = {n}: the {len(ms)} rows' median paired after/before ratios: median {med(ms):.3f}, range {min(ms):.2f}–{max(ms):.2f}")

if ran("lat"):
    latency()
if ran("bw"):
    large()
if ran("small"):
    small()
