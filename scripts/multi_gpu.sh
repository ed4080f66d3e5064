#!/usr/bin/env bash
# Everything the multi-GPU conformance and bandwidth run needs, in one
# batch (for the device tool's one-call-at-a-time machines):
#
#   scripts/multi_gpu.sh OUT_DIR      # on a machine with 2, 4 or 8 GPUs
#
# Binaries: target/release/rankwise and target/release/examples/nccl_fidelity
# (built elsewhere with `cargo build --release --examples --bins`). For each
# N in 2, 4, 8 that the GPUs allow, one GPU per rank: the seed and full
# verify suites, the local-vs-NCCL differential, NCCL's INFO log of the
# seed suite, `rankwise bench --engine nccl` beside PyTorch's NCCL
# (scripts/torch_busbw.py) for five collectives from 8 B to 1 GiB; then the
# misuse suite at N = 4. NVLink multicast stays off. Every step has a
# timeout and its output goes to OUT_DIR; a failing step does not stop the
# others.
set -u
out=${1:?usage: multi_gpu.sh OUT_DIR}
mkdir -p "$out"
bin=${RANKWISE:-target/release/rankwise}
fid=${FIDELITY:-target/release/examples/nccl_fidelity}
export NCCL_NVLS_ENABLE=0
if [ -z "${RANKWISE_NCCL_LIBRARY:-}" ]; then
  lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(os.path.dirname(nvidia.nccl.__file__), "lib", "libnccl.so.2"))' 2>/dev/null)
  [ -n "$lib" ] && export RANKWISE_NCCL_LIBRARY=$lib
fi
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "GPUs: $gpus; NCCL: ${RANKWISE_NCCL_LIBRARY:-dynamic loader}" | tee "$out/machine.txt"
nvidia-smi topo -m >> "$out/machine.txt" 2>&1
step() { # name timeout command...
  local name=$1 t=$2; shift 2
  echo "== $name" >&2
  timeout "$t" "$@" > "$out/$name.txt" 2>&1
  echo "$name: exit $?" | tee -a "$out/steps.txt" >&2
}
for n in 2 4 8; do
  [ "$n" -le "$gpus" ] || { echo "N=$n: skipped, $gpus GPUs" | tee -a "$out/steps.txt"; continue; }
  step "verify-seed-$n" 300 "$bin" verify --engine nccl --ranks "$n" --out "$out/verify-seed-$n"
  step "verify-full-$n" 600 "$bin" verify --engine nccl --suite full --ranks "$n" --out "$out/verify-full-$n"
  step "diff-$n" 300 "$fid" diff --ranks "$n"
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL NCCL_DEBUG_FILE="$out/nccl-seed-$n.%h.%p.log" \
    RANKWISE_DEBUG=INFO RANKWISE_DEBUG_SUBSYS=COLL RANKWISE_DEBUG_FILE="$out/rankwise-seed-$n.%r.log" \
    step "trace-seed-$n" 300 "$bin" verify --engine nccl --ranks "$n" --out "$out/trace-seed-$n"
  for op in all_reduce all_gather reduce_scatter all_to_all broadcast; do
    step "bench-$op-$n" 600 "$bin" bench "$op" --engine nccl --ranks "$n" -b 8 -e 1G -f 2 -n 20 -w 5 --json
    step "torch-$op-$n" 600 torchrun --standalone --nproc_per_node="$n" scripts/torch_busbw.py --op "$op" -b 8 -e 1G -f 2 -n 20 -w 5
  done
done
if [ "$gpus" -ge 4 ]; then
  step "misuse-4" 600 "$bin" verify --engine nccl --suite misuse --ranks 4
fi
echo "results in $out"
