#!/usr/bin/env bash
# The interposer's cost per torch.distributed.all_reduce on one GPU:
# scripts/interpose_cost.py at 4 rank processes, without LD_PRELOAD, then
# at RANKWISE_CHECK=0, local, watch and with every check, and under
# TORCH_DISTRIBUTED_DEBUG=DETAIL without it. One
# file: ${OUT:-/tmp}/interpose_cost.txt (the table, then each rank's
# output). Needs target/release/librankwise_nccl.so, built here or on
# another machine: cargo build --release -p rankwise-nccl
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
mkdir -p "$out"
so=$PWD/target/release/librankwise_nccl.so
lib=$(python3 -c "import nvidia.nccl as m, os; print(os.path.dirname(m.__file__) if getattr(m, '__file__', None) else list(m.__path__)[0])")/lib/libnccl.so.2
# each of the six runs has its own 100 s deadline; this one bounds the whole
timeout 540 python3 scripts/interpose_cost.py --so "$so" --nccl "$lib" --ranks 4 --out "$out/interpose_cost.txt"
