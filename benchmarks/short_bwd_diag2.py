"""Host time of flash_attn_func's backward at B=32, N=512, H=16, d=128, causal, bf16 (session 18,
call 9): the wall time per call of 50 back-to-back backward calls, without and with a final
synchronisation, then cProfile's table (by own time) of 20 more.

    PYTHONPATH=. TAG=default python benchmarks/short_bwd_diag2.py
    PYTHONPATH=. TAG=portable FLASHATTN_TRITON_HOPPER_BWD=0 python benchmarks/short_bwd_diag2.py
"""
import cProfile
import io
import os
import pstats
import threading
import time

import torch

from flashattn_triton import flash_attn_func

n, d = 512, 128
b, h = 16384 // n, 2048 // d
q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
o = flash_attn_func(q, k, v, causal=True)
do = torch.randn_like(o)


def bwd():
    return torch.autograd.grad(o, (q, k, v), do, retain_graph=True)


for _ in range(5):
    bwd()
torch.cuda.synchronize()
print("threads after warm-up:", [t.name for t in threading.enumerate()])
time.sleep(3)
print("threads after 3 s:", [t.name for t in threading.enumerate()])
for rnd in range(2):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(50):
        bwd()
    th = (time.perf_counter() - t0) / 50
    torch.cuda.synchronize()
    tw = (time.perf_counter() - t0) / 50
    print(f"{os.environ.get('TAG')} round {rnd}: host {th * 1e6:.0f} us/call, wall {tw * 1e6:.0f} us/call")
pr = cProfile.Profile()
pr.enable()
for _ in range(20):
    bwd()
pr.disable()
torch.cuda.synchronize()
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
print(s.getvalue()[:5000])
