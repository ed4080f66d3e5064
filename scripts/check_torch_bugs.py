"""scripts/interpose_bugs.py's programs, started by torchrun instead of by
themselves, for `rankwise check -- torchrun ...` on one GPU:

    rankwise check --timeout 10 -- \
        torchrun --standalone --nproc-per-node 4 scripts/check_torch_bugs.py BUG

BUG is one of interpose_bugs.py's (none, count, skip, root, isend, a2a).
Every rank runs on GPU 0 with its own NCCL_HOSTID, sockets on lo and NVLS
off, which is what lets NCCL put several ranks of one communicator on one
GPU; each rank prints what it saw and exits 1 when its program raised.
"""

import importlib.util
import os
import sys

rank = int(os.environ["RANK"])
os.environ["NCCL_HOSTID"] = f"rankwise-host-{rank}"
os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ["RW_INIT"] = "env://"
os.environ.setdefault("RW_TIMEOUT", "25")

spec = importlib.util.spec_from_file_location(
    "interpose_bugs", os.path.join(os.path.dirname(os.path.abspath(__file__)), "interpose_bugs.py")
)
bugs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bugs)

try:
    bugs.program(sys.argv[1], rank, int(os.environ["WORLD_SIZE"]))
except Exception as e:  # the program's view of the failure
    print(f"rank {rank}: raised {type(e).__name__}: {str(e)[:600]}", flush=True)
    os._exit(1)
