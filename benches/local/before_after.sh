#!/usr/bin/env bash
# Before/after rows for a change on the local engine's path: the 64 MiB
# rows (AllReduce, ReduceScatter, AllGather, AlltoAll, Broadcast, Reduce at
# N = 2 and 4), the small sizes (8 B to 64 KiB, x8, the same collectives
# at N = 2 and 4) and the 8-byte AllReduce latency (N = 2, 4, 8), run with two
# rankwise binaries interleaved (the order alternates each repetition) so
# both see the same machine. Prints medians and the median of the paired
# after/before ratios.  Not part of CI.
#   benches/local/before_after.sh BEFORE_BINARY AFTER_BINARY [REPS [PARTS]]
# REPS defaults to 3; PARTS is `all` (default), `large` (the 64 MiB rows) or
# `small` (the small sizes and the latency, seconds per repetition, so
# run 20 or more: the paired ratios of a single repetition spread ±20%).
set -euo pipefail
cd "$(dirname "$0")/../.."
before=$1 after=$2 reps=${3:-3} parts=${4:-all}
case "$parts" in all|large|small) ;; *) echo "PARTS: all, large or small, not $parts" >&2; exit 2;; esac
out=target/before-after
rm -rf "$out"; mkdir -p "$out"
for rep in $(seq "$reps"); do
  if [ $((rep % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for which in $order; do
    bin=$before; [ "$which" = after ] && bin=$after
    if [ "$parts" != large ]; then
      for n in 2 4 8; do
        "$bin" bench all_reduce --ranks $n -b 8 -e 8 -n 2000 -w 200 --json > "$out/lat-$n-$which-$rep.json"
      done
    fi
    for n in 2 4; do
      if [ "$parts" != small ]; then
        "$bin" bench all_reduce,reduce_scatter,all_gather,all_to_all,broadcast,reduce --ranks $n -b 64M -e 64M -n 10 -w 2 --json > "$out/bw-$n-$which-$rep.json"
      fi
      if [ "$parts" != large ]; then
        "$bin" bench all_reduce,reduce_scatter,all_gather,all_to_all,broadcast,reduce --ranks $n -b 8 -e 64K -f 8 -n 500 -w 50 --json > "$out/small-$n-$which-$rep.json"
      fi
    done
  done
  echo "repetition $rep of $reps done" >&2
done
python3 benches/local/before_after.py "$out" "$reps"
