"""Where the time of flash_attn_func's backward goes at short sequences (session 18, call 8):
bf16, B*N = 16k tokens, H = 2048/d, d = 128, causal N = 512 / 1k and non-causal N = 512.  Per
shape: the host time per call of 20 back-to-back backward calls (no synchronisation), their
wall time, the CUDA-event time, and torch.profiler's kernel times per call.

    PYTHONPATH=. TAG=default python benchmarks/short_bwd_diag.py
    PYTHONPATH=. TAG=portable FLASHATTN_TRITON_HOPPER_BWD=0 python benchmarks/short_bwd_diag.py
"""
import os
import time

import torch
from torch.profiler import ProfilerActivity, profile

from flashattn_triton import flash_attn_func

torch.manual_seed(0)


def run(n, d=128, causal=True, tag=""):
    b, h = 16384 // n, 2048 // d
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    o = flash_attn_func(q, k, v, causal=causal)
    do = torch.randn_like(o)

    def bwd():
        return torch.autograd.grad(o, (q, k, v), do, retain_graph=True)

    for _ in range(5):
        bwd()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        bwd()
    th = (time.perf_counter() - t0) / 20
    torch.cuda.synchronize()
    tw = (time.perf_counter() - t0) / 20
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(20):
        bwd()
    e1.record()
    torch.cuda.synchronize()
    te = e0.elapsed_time(e1) / 20 * 1e3
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(5):
            bwd()
        torch.cuda.synchronize()
    kernels = {}
    for ev in p.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            kernels[ev.name[:60]] = kernels.get(ev.name[:60], 0) + ev.device_time / 5
    flops = 2.5 * 4 * b * h * n * n * d / (2 if causal else 1)
    print(f"{tag} N={n} causal={causal}: host {th * 1e6:.0f} us/call, wall {tw * 1e6:.0f}, events {te:.0f} us "
          f"-> {flops / te / 1e6:.0f} TFLOP/s; kernels sum {sum(kernels.values()):.0f} us")
    for name, t in sorted(kernels.items(), key=lambda x: -x[1]):
        print(f"    {t:8.1f} us  {name}")


for n in (512, 1024):
    run(n, tag=os.environ.get("TAG", ""))
run(512, causal=False, tag=os.environ.get("TAG", ""))
