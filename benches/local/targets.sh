#!/usr/bin/env bash
# The local engine's speed targets (BENCHMARKS.md, "Local engine"), measured
# REPS times each so the spread shows how noisy the machine was:
#  1. 64 MiB float32 AllReduce, ReduceScatter, AllGather, AlltoAll,
#     Broadcast, Reduce at N = 2 and 4, both placements: time against the copy bound measured by the
#     same process (%bound);
#  2. 8-byte AllReduce median latency at N = 2, 4, 8, next to OpenMPI's
#     MPI_Allreduce at the same N (when mpirun is installed), run back to back;
#  3. oversubscription: 64 MiB AllReduce at N = 8 against N = 2, time per byte.
# Not part of CI.   benches/local/targets.sh [REPS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=${1:-5}
out=target/targets
rm -rf "$out"; mkdir -p "$out"
cargo build --release --quiet
rw=target/release/rankwise
have_mpi=0
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  mpicc -O2 -o "$out/mpi_bench" benches/mpi/mpi_bench.c && have_mpi=1
fi
for rep in $(seq "$reps"); do
  for n in 2 4; do
    $rw bench all_reduce,reduce_scatter,all_gather,all_to_all,broadcast,reduce --ranks $n -b 64M -e 64M -n 10 -w 2 --json > "$out/bw-$n-$rep.json"
  done
  for n in 2 4 8; do
    $rw bench all_reduce --ranks $n -b 8 -e 8 -n 2000 -w 200 --json > "$out/lat-$n-$rep.json"
    if [ $have_mpi = 1 ] && [ $n -le 4 ]; then
      mpirun --allow-run-as-root --oversubscribe -np $n "$out/mpi_bench" allreduce 8 8 2000 200 > "$out/mpilat-$n-$rep.txt"
    fi
  done
  for n in 2 8; do
    $rw bench all_reduce --ranks $n -b 64M -e 64M -n 10 -w 2 --json > "$out/over-$n-$rep.json"
  done
done
python3 benches/local/summarize.py "$out" "$reps"
