#!/usr/bin/env bash
# Runs scripts/capture_torch_skip.py as 4 rank processes sharing one GPU
# (each its own NCCL_HOSTID, sockets over lo, NVLink multicast off) and
# keeps each rank's NCCL INFO log as OUT_DIR/skipped-broadcast.rank<r>.log.
set -u
out=${1:?usage: capture_torch_skip.sh OUT_DIR}
mkdir -p "$out"
here=$(dirname "$0")
for r in 0 1 2 3; do
  RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 \
  NCCL_HOSTID=rankwise-host-$r NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0 \
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL \
  NCCL_DEBUG_FILE="$out/skipped-broadcast.rank$r.log" \
  timeout 45 python3 "$here/capture_torch_skip.py" > "$out/stdout.rank$r.txt" 2>&1 &
done
wait
echo "logs in $out"
