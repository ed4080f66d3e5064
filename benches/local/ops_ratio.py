"""Summary of ops_ratio.sh: per binary, median times and same-run ratios."""
import json, os, statistics, sys

out, reps, bins = sys.argv[1], int(sys.argv[2]), [os.path.basename(b) for b in sys.argv[3:]]

def t(tag, n, dt, op, rep, place):
    with open(os.path.join(out, f"{tag}-{n}-{dt}-{op}-{rep}.json")) as f:
        return json.load(f)["rows"][0][place]["time_us"] / 1000

def spread(xs, fmt):
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}–{fmt.format(max(xs))}]"

R = range(1, reps + 1)
for tag in bins:
    print(f"\n## {tag}: 64 MiB AllReduce per rank, median [min–max] of {reps} repetitions")
    print("| N | placement | type | Sum (ms) | Avg (ms) | Avg / Sum | PreMulSum(0.3) / Sum | Sum / float Sum |")
    print("|---:|---|---|---|---|---|---|---|")
    for n in (2, 4):
        for place in ("oop", "ip"):
            for dt in ("float", "half", "bfloat16", "double"):
                s = [t(tag, n, dt, "sum", r, place) for r in R]
                a = [t(tag, n, dt, "avg", r, place) for r in R]
                m = [t(tag, n, dt, "premulsum:0.3", r, place) for r in R]
                f = [t(tag, n, "float", "sum", r, place) for r in R]
                # the same bytes: half and bfloat16 move 2 bytes an element, float 4, double 8
                size = {"float": 4, "half": 2, "bfloat16": 2, "double": 8}[dt]
                per_byte = [x / y for x, y in zip(s, f)]
                pl = "out of place" if place == "oop" else "in place"
                print(f"| {n} | {pl} | {dt} | {spread(s, '{:.1f}')} | {spread(a, '{:.1f}')} | "
                      f"{spread([x / y for x, y in zip(a, s)], '{:.2f}')} | "
                      f"{spread([x / y for x, y in zip(m, s)], '{:.2f}')} | {spread(per_byte, '{:.2f}')} |")
