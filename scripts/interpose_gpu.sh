#!/usr/bin/env bash
# The interposer on one GPU: scripts/interpose_bugs.py's programs at 4 ranks;
# one log per run under ${OUT:-/tmp}/runs (BUGS="a2a none" picks programs).
# Build first, here or on another
# machine: cargo build --release -p rankwise-nccl
#
#   scripts/interpose_gpu.sh           every program with LD_PRELOAD, without
#                                      it, and under TORCH_DISTRIBUTED_DEBUG=DETAIL,
#                                      all at once (times in runs/times.log)
#   scripts/interpose_gpu.sh --serial  the programs with LD_PRELOAD only, one
#                                      at a time, so each job's wall time is its
#                                      own (runs/times-serial.log)
#   scripts/interpose_gpu.sh --serial-watch
#                                      the same with RANKWISE_CHECK=watch
#                                      (runs/times-serial-watch.log; stuck, whose
#                                      kernel spins on, last)
#   scripts/interpose_gpu.sh --watch   every program with LD_PRELOAD and
#                                      RANKWISE_CHECK=watch, all at once
#                                      (runs/times-watch.log)
#   scripts/interpose_gpu.sh --baselines "root isend a2a"
#                                      the named programs without LD_PRELOAD and
#                                      under TORCH_DISTRIBUTED_DEBUG=DETAIL, all
#                                      at once (runs/times-baselines.log)
set -u
cd "$(dirname "$0")/.."
serial=0
mode=""
watch=0
baselines=""
case "${1:-}" in
  --serial) serial=1 ;;
  --serial-watch) serial=1; mode=watch ;;
  --watch) watch=1 ;;
  --baselines) baselines=${2:?--baselines needs the programs, e.g. "root isend"} ;;
  "") ;;
  *) echo "usage: $0 [--serial | --serial-watch | --watch | --baselines PROGRAMS]" >&2; exit 2 ;;
esac
out=${OUT:-/tmp}/runs
mkdir -p "$out"
so=$PWD/target/release/librankwise_nccl.so
lib=$(python3 -c "import nvidia.nccl as m, os; print(os.path.dirname(m.__file__) if getattr(m, '__file__', None) else list(m.__path__)[0])")/lib/libnccl.so.2
python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())" > "$out/versions.log" 2>&1
nvidia-smi -L >> "$out/versions.log" 2>&1
one() {  # times file, name, then env assignments and the bug
  local times=$1 name=$2; shift 2
  local t0; t0=$(date +%s%N)
  env "$@" > "$out/$name.log" 2>&1
  echo "$name: $(( ($(date +%s%N) - t0) / 1000000 )) ms" >> "$out/$times"
}
bugs=${BUGS:-"none count skip root isend a2a abort stuck"}
if [ -n "$baselines" ]; then
  : > "$out/times-baselines.log"
  for bug in $baselines; do
    one times-baselines.log "plain-$bug" python3 scripts/interpose_bugs.py $bug --timeout 25 &
    one times-baselines.log "detail-$bug" TORCH_DISTRIBUTED_DEBUG=DETAIL python3 scripts/interpose_bugs.py $bug --timeout 25 &
  done
  wait
  cat "$out/times-baselines.log"
  exit 0
fi
if [ "$watch" = 1 ]; then
  : > "$out/times-watch.log"
  for bug in $bugs; do
    one times-watch.log "watch-$bug" LD_PRELOAD="$so" RANKWISE_NCCL_LIBRARY="$lib" RANKWISE_TIMEOUT=10 \
      RANKWISE_CHECK=watch python3 scripts/interpose_bugs.py $bug --timeout 25 &
  done
  wait
  cat "$out/times-watch.log"
  exit 0
fi
if [ "$serial" = 1 ]; then
  times=times-serial${mode:+-$mode}.log
  : > "$out/$times"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/$times"
  for bug in $bugs; do
    one "$times" "serial-${mode:-preload}-$bug" LD_PRELOAD="$so" RANKWISE_NCCL_LIBRARY="$lib" RANKWISE_TIMEOUT=10 \
      RANKWISE_CHECK="${mode:-full}" python3 scripts/interpose_bugs.py $bug --timeout 25
  done
  cat "$out/$times"
  exit 0
fi
for bug in $bugs; do
  one times.log "preload-$bug" LD_PRELOAD="$so" RANKWISE_NCCL_LIBRARY="$lib" RANKWISE_TIMEOUT=10 \
    python3 scripts/interpose_bugs.py $bug --timeout 25 &
done
for bug in none count skip abort stuck; do
  one times.log "plain-$bug" python3 scripts/interpose_bugs.py $bug --timeout 25 &
done
for bug in count skip; do
  one times.log "detail-$bug" TORCH_DISTRIBUTED_DEBUG=DETAIL python3 scripts/interpose_bugs.py $bug --timeout 25 &
done
wait
cat "$out/times.log"
