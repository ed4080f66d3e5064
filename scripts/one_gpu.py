"""Rank processes sharing GPU 0, for the scripts that run PyTorch programs
at several ranks on one GPU: each its own NCCL_HOSTID (so NCCL accepts
several ranks on one device), sockets on lo, NVLS off, and a TCP
rendezvous on a free port of this host.
"""

import os
import socket
import subprocess
import sys
import time


def free_port():
    """A TCP port free on this host now, for the ranks' rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rank_env(r, world, port, env=None):
    """Rank r's environment: this process's, `env` added, then RW_RANK,
    RW_WORLD, RW_INIT and the NCCL settings for several ranks on one GPU."""
    e = dict(os.environ)
    e.update(env or {})
    e.update(
        RW_RANK=str(r),
        RW_WORLD=str(world),
        RW_INIT=f"tcp://127.0.0.1:{port}",
        NCCL_HOSTID=f"rankwise-host-{r}",
        NCCL_SOCKET_IFNAME="lo",
        NCCL_NVLS_ENABLE="0",
    )
    return e


def run_ranks(argv, world, limit_s, env=None):
    """Runs `python3 argv...` as ranks 0..world-1 (RW_RANK, RW_WORLD and
    RW_INIT in their environment, with `env` added), kills what is still
    running after `limit_s`; the seconds it took and the exit codes (None:
    killed)."""
    port = free_port()
    t0 = time.time()
    procs = [subprocess.Popen([sys.executable, *argv], env=rank_env(r, world, port, env)) for r in range(world)]
    for p in procs:
        try:
            p.wait(timeout=max(1, t0 + limit_s - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return time.time() - t0, [p.returncode if p.returncode is not None and p.returncode >= 0 else None for p in procs]


def init(rank, world, timeout_s):
    """This rank's default process group on GPU 0 (NCCL), and the device."""
    import datetime

    import torch
    import torch.distributed as dist

    dev = torch.device("cuda:0")
    dist.init_process_group(
        "nccl",
        rank=rank,
        world_size=world,
        init_method=os.environ["RW_INIT"],
        timeout=datetime.timedelta(seconds=float(timeout_s)),
        device_id=dev,
    )
    return dev
