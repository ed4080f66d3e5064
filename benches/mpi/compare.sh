#!/usr/bin/env bash
# rankwise's local engine against OpenMPI on this machine: the same five
# collectives, rank counts and sizes (8 B to 64 MiB, float32, sum), each
# pair run back to back. Not part of CI. Needs Debian's openmpi-bin and
# libopenmpi-dev (apt-get install openmpi-bin libopenmpi-dev).
#
#   benches/mpi/compare.sh            # N = 2 and 4
#   benches/mpi/compare.sh 2 4 8      # any rank counts
#
# Prints, per N, the median time of each and the ratio MPI / rankwise
# (above 1: rankwise is faster). Raw outputs go to target/mpi-compare/.
# Sizes below 64 KiB take a microsecond or less per call: they are timed
# over SMALL_ITERS calls (default 1000), so the first, colder calls do
# not decide the median; larger sizes over ITERS (default 20).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=target/mpi-compare
mkdir -p "$out"
mpicc -O2 -o "$out/mpi_bench" benches/mpi/mpi_bench.c
cargo build --release --quiet
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
SMALL_ITERS=${SMALL_ITERS:-1000}
SMALL_WARMUP=${SMALL_WARMUP:-100}
MAX=${MAX:-67108864}
ns=("$@")
[ ${#ns[@]} -eq 0 ] && ns=(2 4)
for n in "${ns[@]}"; do
  for op in allreduce allgather reduce_scatter alltoall broadcast; do
    case $op in
      allreduce) rw=all_reduce ;; allgather) rw=all_gather ;; reduce_scatter) rw=reduce_scatter ;;
      alltoall) rw=all_to_all ;; broadcast) rw=broadcast ;;
    esac
    # sizes 8 B to 32 KiB, then 64 KiB to MAX
    mpirun --allow-run-as-root --oversubscribe -np "$n" "$out/mpi_bench" "$op" 8 32768 "$SMALL_ITERS" "$SMALL_WARMUP" > "$out/mpi-$op-$n.txt"
    mpirun --allow-run-as-root --oversubscribe -np "$n" "$out/mpi_bench" "$op" 65536 "$MAX" "$ITERS" "$WARMUP" >> "$out/mpi-$op-$n.txt"
    target/release/rankwise bench "$rw" --ranks "$n" -b 8 -e 32K -n "$SMALL_ITERS" -w "$SMALL_WARMUP" --json > "$out/rankwise-$op-$n-small.json"
    target/release/rankwise bench "$rw" --ranks "$n" -b 64K -e "$MAX" -n "$ITERS" -w "$WARMUP" --json > "$out/rankwise-$op-$n-large.json"
  done
done
python3 benches/mpi/ratio.py "$out" "${ns[@]}"
