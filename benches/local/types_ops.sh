#!/usr/bin/env bash
# Every datatype with every built-in op (Sum, Prod, Max, Min, Avg): a
# 64 MiB AllReduce per rank at N = 2, for several rankwise binaries
# interleaved (the order alternates each repetition). Prints, per
# binary, the median [min–max] out-of-place time of each row and its
# ratio to float Sum taken in the same repetition (the same bytes for
# the 32-bit types; twice the elements for the 16-bit ones, four times
# for the 8-bit ones). Unchecked (-c 0), `-n 3 -w 1`. Not part of CI.
#   benches/local/types_ops.sh REPS BINARY [BINARY…]
source "$(dirname "$0")/interleaved.sh"
reps=$1; shift
out=target/types-ops
fresh "$out"
for rep in $(seq "$reps"); do
  for bin in $(in_turn "$rep" "$@"); do
    "$bin" bench all_reduce --ranks 2 -b 64M -e 64M -d all -o all -n 3 -w 1 -c 0 --json \
      > "$out/$(basename "$bin")-$rep.json"
  done
  done_with "$rep" "$reps"
done
python3 - "$out" "$reps" "$@" <<'PY'
import json, statistics, sys, os
out, reps = sys.argv[1], int(sys.argv[2])
tags = [os.path.basename(b) for b in sys.argv[3:]]
def cell(v, f="{:.1f}"):
    return f"{f.format(statistics.median(v))} [{f.format(min(v))}–{f.format(max(v))}]"
times = {}  # (tag, dtype, op) -> [ms per rep]
ratio = {}  # (tag, dtype, op) -> [time / float Sum, same rep]
for tag in tags:
    for rep in range(1, reps + 1):
        rows = json.load(open(f"{out}/{tag}-{rep}.json"))["rows"]
        t = {(r["dtype"], r["op"]): r["oop"]["time_us"] / 1e3 for r in rows}
        base = t[("Float32", "Sum")]
        for k, v in t.items():
            times.setdefault((tag,) + k, []).append(v)
            ratio.setdefault((tag,) + k, []).append(v / base)
keys = sorted({k[1:] for k in times}, key=lambda k: list(times).index((tags[0],) + k))
head = " | ".join(f"{t} (ms) | {t} / float Sum" for t in tags)
print(f"| type | op | {head} |")
print("|---|---|" + "---|---|" * len(tags))
for k in keys:
    cells = " | ".join(f"{cell(times[(t,) + k])} | {cell(ratio[(t,) + k], '{:.2f}')}" for t in tags)
    print(f"| {k[0]} | {k[1]} | {cells} |")
PY
