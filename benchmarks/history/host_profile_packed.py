"""Session 58: where the host time of a packed call goes (the probe of
chunked_host_probe.py: the packed chunk form's forward at N 5000 takes 0.148
ms of host time per call, its varlen call alone 0.095, the planned dense call
at N 5120 0.068, against 0.118 ms on the device).  For each call: host time per
call (back-to-back, no sync) and a cProfile of 300 calls, top functions by
their own time.  Run 1 (session 58) profiled after the call with gradients,
whose backward prefetch was still compiling (so its profiles were not clean),
and aborted at exit (status 134: the prefetch thread ended inside Triton's
compiler; fixed since, _prefetch._wait_at_exit).  Now the call with gradients
comes last, timed while its prefetch compiles and again after it, and the
script ends without waiting: the exit must wait for it."""
import cProfile
import io
import pstats
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import common as C  # noqa: E402

from flashattn_triton import flash_attn_func, flash_attn_varlen_func  # noqa: E402


def host_us(fn, n=300):
    return C.host_us(fn, calls=n, warmup=5)


torch.manual_seed(0)
calls = {}
for n in (5000, 5120):
    q = torch.randn(2, n, 16, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, n, 4, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    calls[f"chunked N {n}"] = (lambda q=q, k=k, v=v: flash_attn_func(q, k, v, causal=True, attention_chunk=1024))
    calls[f"dense N {n}"] = (lambda q=q, k=k, v=v: flash_attn_func(q, k, v, causal=True))
cu = torch.tensor([0, 1024, 2048, 3072, 4096, 5000, 6024, 7048, 8072, 9096, 10000], dtype=torch.int32, device="cuda")
qp = torch.randn(10000, 16, 128, device="cuda", dtype=torch.bfloat16)
kp = torch.randn(10000, 4, 128, device="cuda", dtype=torch.bfloat16)
vp = torch.randn_like(kp)
calls["varlen 10 x <=1024"] = lambda: flash_attn_varlen_func(qp, kp, vp, cu, cu, 1024, 1024, causal=True)

for name, fn in calls.items():
    print(f"{name}: host {host_us(fn):.1f} us per call", flush=True)
for name in ("chunked N 5000", "varlen 10 x <=1024"):
    fn = calls[name]
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30)
    print(f"=== {name}: cProfile, 300 calls, by own time\n" + s.getvalue(), flush=True)
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(40)
    print(f"=== {name}: by cumulative time\n" + s.getvalue(), flush=True)
from flashattn_triton import _prefetch
qg, kg, vg = (t.clone().requires_grad_() for t in (qp, kp, vp))
grad = lambda: flash_attn_varlen_func(qg, kg, vg, cu, cu, 1024, 1024, causal=True)
t = time.perf_counter()
print(f"varlen with grad (fwd), its backward prefetch compiling: host {host_us(grad, n=100):.1f} us per call", flush=True)
_prefetch.wait_pending()
print(f"prefetch done after {time.perf_counter() - t:.2f} s", flush=True)
print(f"varlen with grad (fwd), after it: host {host_us(grad):.1f} us per call", flush=True)
# a new signature (MHA: another group size), then exit at once: the exit waits for its prefetch
qh, kh, vh = (torch.randn(10000, h, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for h in (8, 8, 8))
flash_attn_varlen_func(qh, kh, vh, cu, cu, 1024, 1024, causal=True)
print(f"exiting with a prefetch pending: {_prefetch.pending()}", flush=True)
sys.exit(0)
