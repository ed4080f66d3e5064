#!/usr/bin/env bash
# The interposer on one GPU: scripts/interpose_bugs.py's programs at 4 ranks,
# with LD_PRELOAD, without it, and under TORCH_DISTRIBUTED_DEBUG=DETAIL, all
# at once; one log per run under ${OUT:-/tmp}/runs. Build first, here or on
# another machine: cargo build --release -p rankwise-nccl
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}/runs
mkdir -p "$out"
so=$PWD/target/release/librankwise_nccl.so
lib=$(python3 -c "import nvidia.nccl as m, os; print(os.path.dirname(m.__file__) if getattr(m, '__file__', None) else list(m.__path__)[0])")/lib/libnccl.so.2
python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())" > "$out/versions.log" 2>&1
nvidia-smi -L >> "$out/versions.log" 2>&1
one() {  # name, then env assignments and the bug
  local name=$1; shift
  local t0; t0=$(date +%s%N)
  env "$@" > "$out/$name.log" 2>&1
  echo "$name: $(( ($(date +%s%N) - t0) / 1000000 )) ms" >> "$out/times.log"
}
for bug in none count skip root isend a2a; do
  one "preload-$bug" LD_PRELOAD="$so" RANKWISE_NCCL_LIBRARY="$lib" RANKWISE_TIMEOUT=10 \
    python3 scripts/interpose_bugs.py $bug --timeout 25 &
done
for bug in none count skip; do
  one "plain-$bug" python3 scripts/interpose_bugs.py $bug --timeout 25 &
done
for bug in count skip; do
  one "detail-$bug" TORCH_DISTRIBUTED_DEBUG=DETAIL python3 scripts/interpose_bugs.py $bug --timeout 25 &
done
wait
cat "$out/times.log"
