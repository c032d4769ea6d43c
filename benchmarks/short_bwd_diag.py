"""Where the time of flash_attn_func's backward goes at short sequences (session 18, calls 8
and 9): bf16, B*N = 16k tokens, H = 2048/d, d = 128.

Default (call 8): causal N = 512 / 1k and non-causal N = 512; per shape the host time per call
of 20 back-to-back backward calls (no synchronisation), their wall time, the CUDA-event time,
and torch.profiler's kernel times per call.  ``--host`` (call 9, then a script of its own):
causal N = 512 only, the threads alive after the warm-up, two rounds of 50 calls (host and
wall time per call) and cProfile's table of 20 more by own time.

    PYTHONPATH=. TAG=default python benchmarks/short_bwd_diag.py [--host]
    PYTHONPATH=. TAG=portable FLASHATTN_TRITON_HOPPER_BWD=0 python benchmarks/short_bwd_diag.py [--host]
"""
import argparse
import os
import sys
import threading
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import host_profile  # noqa: E402

from flashattn_triton import flash_attn_func  # noqa: E402

TAG = os.environ.get("TAG", "")


def backward_of(n, d=128, causal=True):
    """(bwd, flops): a callable running the backward of one forward, and its FLOPs."""
    b, h = 16384 // n, 2048 // d
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    o = flash_attn_func(q, k, v, causal=causal)
    do = torch.randn_like(o)

    def bwd():
        return torch.autograd.grad(o, (q, k, v), do, retain_graph=True)

    for _ in range(5):
        bwd()
    torch.cuda.synchronize()
    return bwd, 2.5 * 4 * b * h * n * n * d / (2 if causal else 1)


def per_call(bwd, calls):
    """(host, wall) seconds per call of `calls` back-to-back calls."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        bwd()
    host = (time.perf_counter() - t0) / calls
    torch.cuda.synchronize()
    return host, (time.perf_counter() - t0) / calls


def kernels_and_events(n, causal=True):
    bwd, flops = backward_of(n, causal=causal)
    host, wall = per_call(bwd, 20)
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
    print(f"{TAG} N={n} causal={causal}: host {host * 1e6:.0f} us/call, wall {wall * 1e6:.0f}, events {te:.0f} us "
          f"-> {flops / te / 1e6:.0f} TFLOP/s; kernels sum {sum(kernels.values()):.0f} us")
    for name, t in sorted(kernels.items(), key=lambda x: -x[1]):
        print(f"    {t:8.1f} us  {name}")


def host_side():
    bwd, _ = backward_of(512)
    print("threads after warm-up:", [t.name for t in threading.enumerate()])
    time.sleep(3)
    print("threads after 3 s:", [t.name for t in threading.enumerate()])
    for rnd in range(2):
        host, wall = per_call(bwd, 50)
        print(f"{TAG} round {rnd}: host {host * 1e6:.0f} us/call, wall {wall * 1e6:.0f} us/call")
    print(host_profile(bwd, sort="tottime")[:5000])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", action="store_true", help="the host side of causal N = 512 (call 9's form)")
    if ap.parse_args().host:
        host_side()
        return
    for n in (512, 1024):
        kernels_and_events(n)
    kernels_and_events(512, causal=False)


if __name__ == "__main__":
    main()
