"""Session 59: where the host time of an eager decoding call goes (bench_overhead.py's decode
row: one query token against 128 cached rows, B=1, H=8, d=64, fp16, under no_grad: 212 us per
call against torch SDPA's 28 us).  Host time per call (back to back, no sync), then a cProfile
of 300 calls by cumulative and by own time.  Session 60: also with the decode call plans off
(ops.PLANS_ENABLED = False) in the same process, and whether the plans recorded a replay.
Session 63: also the median / min / max of 21 short runs (common.host_us_spread): one long run's
mean moved by up to 2x between repeats on the same host."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import common as C  # noqa: E402

import flashattn_triton as fat  # noqa: E402
from flashattn_triton import _kvcache as kvc, ops  # noqa: E402

q = torch.randn(1, 1, 8, 64, device="cuda", dtype=torch.float16)
k, v = (torch.randn(1, 128, 8, 64, device="cuda", dtype=torch.float16) for _ in range(2))
seqlens = torch.full((1,), 128, dtype=torch.int32, device="cuda")
kn, vn = (torch.randn(1, 1, 8, 64, device="cuda", dtype=torch.float16) for _ in range(2))
seqlens_append = torch.full((1,), 100, dtype=torch.int32, device="cuda")
calls = {"decode": lambda: fat.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens),
         "decode with append": lambda: fat.flash_attn_with_kvcache(q, k, v, k=kn, v=vn, cache_seqlens=seqlens_append)}
with torch.no_grad():
    for name, fn in calls.items():
        print(f"{name}: host {C.host_us(fn, calls=1000, warmup=50):.1f} us per call", flush=True)
        print(f"{name}: host median / min / max of 21 runs of 100: "
              + " / ".join(f"{t:.1f}" for t in C.host_us_spread(fn)) + " us", flush=True)
    print("plans recorded a replay:", [p.replay is not None for p in kvc.PLANS.values()], flush=True)
    ops.PLANS_ENABLED = False
    for name, fn in calls.items():
        print(f"{name}, plans off: host {C.host_us(fn, calls=1000, warmup=50):.1f} us per call", flush=True)
        print(f"{name}, plans off: host median / min / max of 21 runs of 100: "
              + " / ".join(f"{t:.1f}" for t in C.host_us_spread(fn)) + " us", flush=True)
    ops.PLANS_ENABLED = True
    for key in ("cumulative", "tottime"):
        table = C.host_profile(calls["decode"], calls=300, sort=key, lines=45)
        print(f"=== decode: cProfile, 300 calls, by {key}\n" + table, flush=True)
