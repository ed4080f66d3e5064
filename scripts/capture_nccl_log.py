"""Capture NCCL's own INFO/WARN lines for every operation on a 1-rank group.

    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL NCCL_NVLS_ENABLE=0 \
        torchrun --standalone --nproc_per_node=1 scripts/capture_nccl_log.py

Part 1 goes through torch.distributed, the way users produce these logs.
Part 2 calls libnccl directly (ctypes) for what PyTorch never sends: native
Gather/Scatter, a group fusing a collective with Send/Recv, zero-count
Send/Recv, invalid root, datatype and op.  Each step is a line of Python that
is evaluated and echoed as `step <code>: <result>`, so the log says which call
produced which NCCL line.
"""

import ctypes
import os

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
torch.cuda.set_device(dev)


def steps(codes):
    for code in codes.strip().splitlines():
        try:
            r = eval(code)
            torch.cuda.synchronize()
            print(f"step {code}: ok {r or ''}", flush=True)
        except Exception as x:  # the log is the evidence; keep going
            print(f"step {code}: {type(x).__name__} {str(x)[:150]!r}", flush=True)


def t(n, dt=torch.float32):
    return torch.arange(n, device=dev).to(dt)


def e(n):
    return torch.empty(n, device=dev)


def coalesced(*sizes):
    with dist._coalescing_manager(async_ops=True) as cm:
        [dist.all_reduce(t(n)) for n in sizes]
    cm.wait()


def p2p_self(n):
    ops = [dist.P2POp(dist.isend, t(n), 0), dist.P2POp(dist.irecv, e(n), 0)]
    [w.wait() for w in dist.batch_isend_irecv(ops)]


def bad_root_broadcast(root):
    o = dist.BroadcastOptions()
    o.rootRank = root
    pg.broadcast([t(4)], o).wait()


dist.init_process_group("nccl", device_id=dev)
W = dist.get_world_size()
pg = dist.distributed_c10d._get_default_group()
R = dist.ReduceOp
I64, BF16, F16, U8, I32 = torch.int64, torch.bfloat16, torch.float16, torch.uint8, torch.int32
steps("""
dist.all_reduce(t(3, I64))
dist.all_reduce(t(5), op=R.MAX)
dist.all_reduce(t(6, BF16), op=R.AVG)
dist.reduce(t(7, F16), dst=0)
dist.broadcast(t(4, U8), src=0)
dist.all_gather_into_tensor(e(6 * W), t(6))
dist.reduce_scatter_tensor(e(8), t(8 * W))
dist.all_to_all_single(e(6 * W), t(6 * W))
dist.all_to_all_single(e(5), t(5), [5], [5])
dist.gather(t(3), [e(3)] * W, dst=0)
dist.scatter(e(3), [t(3)] * W, src=0)
p2p_self(9)
coalesced(2, 3)
dist.all_reduce(e(0))
dist.all_reduce(t(4, I32))
dist.all_reduce(t(2), group=dist.new_group([0]))
""")

# ---- part 2: libnccl through ctypes ----
nccl = ctypes.CDLL("libnccl.so.2")  # the copy PyTorch already loaded (same soname)


class Id(ctypes.Structure):
    _fields_ = [("b", ctypes.c_char * 128)]


V, Z, C = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
uid, comm = Id(), V()
nccl.ncclGetUniqueId(ctypes.byref(uid))
nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(V), C, Id, C]
S = V(torch.cuda.current_stream().cuda_stream)
a, b = t(64), e(64)
A, B = V(a.data_ptr()), V(b.data_ptr())


def nc(fn, n, *ints, bufs=(A, B)):  # count, then datatype, op and/or root
    return getattr(nccl, "nccl" + fn)(*bufs, Z(n), *map(C, ints), comm, S)


def grp(*calls):
    nccl.ncclGroupStart()
    [eval(c) for c in calls]
    return nccl.ncclGroupEnd()


steps("""
nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0)
nc("AllReduce", 8, 7, 1)
nc("Gather", 4, 7, 0)
nc("Scatter", 4, 7, 0)
grp('nc("AllReduce", 2, 7, 0)', 'nc("Send", 8, 7, 0, bufs=[A])', 'nc("Recv", 8, 7, 0, bufs=[B])')
grp('nc("Send", 0, 7, 0, bufs=[A])', 'nc("Recv", 0, 7, 0, bufs=[B])')
nc("Reduce", 8, 7, 0, 3)
nc("AllReduce", 8, 42, 0)
nc("AllReduce", 8, 7, 42)
nccl.ncclCommDestroy(comm)
""")
steps("bad_root_broadcast(W)")  # last: PyTorch may tear the group down after it
dist.destroy_process_group()
