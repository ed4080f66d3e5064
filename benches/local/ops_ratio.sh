#!/usr/bin/env bash
# Avg and PreMulSum (scalar 0.3, which has significand bits in every
# type, so no power-of-two shortcut) against Sum, and half and bfloat16 Sum against float Sum for the same
# bytes: 64 MiB AllReduce per rank at N = 2 and 4, each binary given run
# with every datatype and op in turn, binaries interleaved (the order
# alternates each repetition). Prints, per binary, the median time of each
# row and the ratios of times measured in the same repetition, median
# [min–max] over repetitions. Unchecked (-c 0): checking is the tests' job
# and `rankwise bench`'s default.  Not part of CI.
#   benches/local/ops_ratio.sh REPS BINARY [BINARY…]
source "$(dirname "$0")/interleaved.sh"
reps=$1; shift
out=target/ops-ratio
fresh "$out"
for rep in $(seq "$reps"); do
  for bin in $(in_turn "$rep" "$@"); do
    tag=$(basename "$bin")
    for n in 2 4; do
      for dt in float half bfloat16 double; do
        for op in sum avg premulsum:0.3; do
          "$bin" bench all_reduce --ranks $n -b 64M -e 64M -d $dt -o $op -n 5 -w 1 -c 0 --json \
            > "$out/$tag-$n-$dt-$op-$rep.json"
        done
      done
    done
  done
  done_with "$rep" "$reps"
done
python3 benches/local/ops_ratio.py "$out" "$reps" "$@"
