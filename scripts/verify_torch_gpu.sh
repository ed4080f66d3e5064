#!/usr/bin/env bash
# The front door on one GPU, from the wheel: everything lands in
# ${OUT:-/tmp}/front/.
#
# 1. the torch framework suite (python -m rankwise.verify_torch) at 4 ranks
#    under torchrun, NCCL backend, every rank on GPU 0 with its own
#    NCCL_HOSTID; `rankwise summarize` on its run directory, and beside it
#    the nccl engine's own run of the same suite (`rankwise verify --engine
#    nccl --ranks 4`) summarized the same way;
# 2. `rankwise check -- torchrun --nproc-per-node 4 scripts/check_torch_bugs.py BUG`
#    for every bug program of scripts/interpose_bugs.py, with its exit code
#    and the journals.
#
# The wheel: built on any machine with `cd python && maturin build
# --release --out ../target/wheels` and brought along in target/wheels; the
# script installs it into a virtual environment that sees the system's
# torch (--system-site-packages). With no wheel there, the `rankwise`
# already on PATH (and its Python package) is used.
#
#   OUT=/some/dir scripts/verify_torch_gpu.sh
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}/front
rm -rf "$out"
mkdir -p "$out"
wheel=$(ls target/wheels/rankwise-*.whl 2>/dev/null | tail -n 1)
if [ -n "$wheel" ]; then
  venv=/tmp/rankwise-front-venv
  rm -rf "$venv"
  python3 -m venv --system-site-packages "$venv"
  # where python3 is itself a virtual environment (torch installed in it),
  # --system-site-packages reaches only the interpreter's base: name
  # python3's own site-packages in a .pth, so the wheel's venv sees torch
  python3 -c "import site; print('\n'.join(site.getsitepackages()))" \
    > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/rankwise-parent-site.pth"
  "$venv/bin/pip" install -q --no-deps "$wheel" > "$out/install.log" 2>&1
  export PATH="$venv/bin:$PATH"
fi
py=$(command -v python3)
{
  echo "wheel: ${wheel:-none (rankwise from PATH)}"
  echo "rankwise: $(command -v rankwise) ($(rankwise --version))"
  "$py" -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())"
  nvidia-smi -L
} > "$out/versions.log" 2>&1
# torch's own libnccl, for the checker to forward to (its wheel's file)
lib=$("$py" -c "import nvidia.nccl as m, os; print(os.path.dirname(m.__file__) if getattr(m, '__file__', None) else list(m.__path__)[0])" 2>/dev/null)/lib/libnccl.so.2
[ -f "$lib" ] && export RANKWISE_NCCL_LIBRARY=$lib

echo "== the torch framework suite, 4 ranks on one GPU"
t0=$(date +%s)
timeout -k 10 300 torchrun --standalone --nproc-per-node 4 --no-python sh -c \
  'NCCL_HOSTID=rankwise-host-$LOCAL_RANK NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0 exec '"$py"' -m rankwise.verify_torch --backend nccl --out '"$out"'/torch' \
  > "$out/torch.log" 2>&1
echo "torch suite: exit $?, $(( $(date +%s) - t0 )) s" | tee -a "$out/times.log"
rankwise summarize "$out/torch" > "$out/summarize-torch.txt" 2>&1
echo "summarize torch: exit $?" | tee -a "$out/times.log"
timeout -k 10 300 rankwise verify --engine nccl --ranks 4 --out "$out/nccl" > "$out/verify-nccl.log" 2>&1
echo "verify --engine nccl: exit $?" | tee -a "$out/times.log"
rankwise summarize "$out/nccl" > "$out/summarize-nccl.txt" 2>&1
echo "summarize nccl: exit $?" | tee -a "$out/times.log"

echo "== rankwise check on the bug programs under torchrun"
for bug in none count skip root isend a2a; do
  t0=$(date +%s%N)
  timeout -k 10 300 rankwise check --timeout 10 --journal "$out/check-$bug" -- \
    torchrun --standalone --nproc-per-node 4 scripts/check_torch_bugs.py "$bug" \
    > "$out/check-$bug.log" 2>&1
  rc=$?
  echo "check $bug: exit $rc, $(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee -a "$out/times.log"
done
# the library each run preloaded is a copy of the one in the wheel
rm -f "$out"/check-*/.librankwise_nccl.so
cat "$out/times.log"
