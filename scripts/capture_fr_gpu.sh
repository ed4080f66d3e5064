#!/usr/bin/env bash
# One GPU, PyTorch 2.11, NCCL 2.28.9: the bug programs of
# scripts/interpose_bugs.py (4 ranks on GPU 0) with Flight Recorder on and
# dump-on-timeout, capturing, for each program, the NCCL INFO logs, the
# ranks' stderr (PyTorch's watchdog lines) and the Flight Recorder dumps of
# the same run; then PyTorch's own analyzer (fr_trace) on the dumps and, if
# it is built, rankwise on the whole folder. Everything lands in
# ${OUT:-/tmp}/fr/<program>/:
#
#   nccl.<host>.<pid>.log   NCCL_DEBUG=INFO, SUBSYS=INIT,COLL, one per rank
#   stderr.log              the ranks' output (watchdog and ProcessGroupNCCL lines)
#   fr/nccl_trace_rank_N    Flight Recorder dumps (pickle), one per rank
#   fr_json/fr_rank_N.json  the same dumps as JSON (converted with Python's pickle)
#   fr_trace.txt            python -m torch.distributed.flight_recorder.fr_trace
#   rankwise.txt            target/release/rankwise logs analyze <program>/ (if built)
#
# The six programs run at once (24 processes on the one GPU), each bounded
# (watchdog 20 s, the whole program 150 s, fr_trace 60 s), so the script
# ends in under 5 minutes.
#
#   cargo build --release --bin rankwise   # optional, for rankwise.txt
#   OUT=/some/dir scripts/capture_fr_gpu.sh
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}/fr
mkdir -p "$out"
python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())" > "$out/versions.log" 2>&1
nvidia-smi -L >> "$out/versions.log" 2>&1
: > "$out/times.log"

one() {  # program
  local bug=$1 d=$out/$1 t0
  rm -rf "$d"
  mkdir -p "$d/fr" "$d/fr_json"
  t0=$(date +%s)
  env TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_TRACE_BUFFER_SIZE=2000 \
      TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=15000 \
      TORCH_FR_DUMP_TEMP_FILE="$d/fr/nccl_trace_rank_" \
      TORCH_NCCL_DEBUG_INFO_TEMP_FILE="$d/fr/nccl_trace_rank_" \
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL NCCL_DEBUG_FILE="$d/nccl.%h.%p.log" \
      timeout -k 10 150 python3 scripts/interpose_bugs.py "$bug" --timeout 20 > "$d/stderr.log" 2>&1
  local rc=$?
  echo "$bug: $(( $(date +%s) - t0 )) s, exit $rc" >> "$out/times.log"
  python3 - "$d" <<'PY' >> "$d/stderr.log" 2>&1
import json, os, pickle, sys
d = sys.argv[1]
for name in sorted(os.listdir(f"{d}/fr")):
    with open(f"{d}/fr/{name}", "rb") as f:
        dump = pickle.load(f)
    rank = name[len("nccl_trace_rank_"):]
    with open(f"{d}/fr_json/fr_rank_{rank}.json", "w") as f:
        json.dump(dump, f, default=str)
PY
  if ls "$d/fr"/nccl_trace_rank_* > /dev/null 2>&1; then
    timeout 60 python3 -m torch.distributed.flight_recorder.fr_trace "$d/fr" -p nccl_trace_rank_ \
      --allow-incomplete-ranks > "$d/fr_trace.txt" 2>&1
  else
    echo "no Flight Recorder dump was written" > "$d/fr_trace.txt"
  fi
  if [ -x target/release/rankwise ]; then
    # the JSON copies are left out: the pickles hold the same records
    target/release/rankwise logs analyze "$d"/nccl.*.log "$d/stderr.log" "$d/fr" > "$d/rankwise.txt" 2>&1
    target/release/rankwise logs analyze --json "$d"/nccl.*.log "$d/stderr.log" "$d/fr" > "$d/rankwise.json" 2>&1
  fi
}

for bug in none skip count root isend a2a; do
  one "$bug" &
done
wait
cat "$out/times.log"
