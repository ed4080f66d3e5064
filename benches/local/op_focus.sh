#!/usr/bin/env bash
# One datatype's 64 MiB AllReduce per rank with a few ops and N, for
# several rankwise binaries interleaved (the order alternates each
# repetition): the focused before/after for a change to one type's
# kernels, where `ops_ratio.sh` would spend most of its time on the
# others. Prints the median [min–max] time in ms of each binary, N, op
# and placement. Unchecked (-c 0), `-n 5 -w 1` as in ops_ratio.sh.
# Not part of CI.
#   benches/local/op_focus.sh REPS DTYPE "N…" "OP…" BINARY [BINARY…]
# e.g. benches/local/op_focus.sh 5 bfloat16 "2 4" "sum premulsum:0.3" BEFORE AFTER
source "$(dirname "$0")/interleaved.sh"
reps=$1 dt=$2 ns=$3 ops=$4; shift 4
out=target/op-focus
fresh "$out"
for rep in $(seq "$reps"); do
  for bin in $(in_turn "$rep" "$@"); do
    for n in $ns; do
      for op in $ops; do
        "$bin" bench all_reduce --ranks "$n" -b 64M -e 64M -d "$dt" -o "$op" -n 5 -w 1 -c 0 --json \
          > "$out/$(basename "$bin")-$n-$op-$rep.json"
      done
    done
  done
  done_with "$rep" "$reps"
done
python3 - "$out" "$reps" "$ns" "$ops" "$@" <<'PY'
import json, statistics, sys, os
out, reps, ns, ops = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
tags = [os.path.basename(b) for b in sys.argv[5:]]
def cell(v):
    return f"{statistics.median(v):.1f} [{min(v):.1f}–{max(v):.1f}]"
print("| N | op | binary | out of place (ms) | in place (ms) |")
print("|---:|---|---|---|---|")
for n in ns:
    for op in ops:
        for tag in tags:
            oop, ip = [], []
            for rep in range(1, reps + 1):
                row = json.load(open(f"{out}/{tag}-{n}-{op}-{rep}.json"))["rows"][0]
                oop.append(row["oop"]["time_us"] / 1e3)
                ip.append(row["ip"]["time_us"] / 1e3)
            print(f"| {n} | {op} | {tag} | {cell(oop)} | {cell(ip)} |")
PY
