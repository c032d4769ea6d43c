"""Session 59: where the host time of an eager decoding call goes (bench_overhead.py's decode
row: one query token against 128 cached rows, B=1, H=8, d=64, fp16, under no_grad: 212 us per
call against torch SDPA's 28 us).  Host time per call (back to back, no sync), then a cProfile
of 300 calls by cumulative and by own time.  Session 60: also with the decode call plans off
(ops.PLANS_ENABLED = False) in the same process, and whether the plans recorded a replay."""
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
    print("plans recorded a replay:", [p.replay is not None for p in kvc.PLANS.values()], flush=True)
    ops.PLANS_ENABLED = False
    for name, fn in calls.items():
        print(f"{name}, plans off: host {C.host_us(fn, calls=1000, warmup=50):.1f} us per call", flush=True)
    ops.PLANS_ENABLED = True
    for key in ("cumulative", "tottime"):
        table = C.host_profile(calls["decode"], calls=300, sort=key, lines=45)
        print(f"=== decode: cProfile, 300 calls, by {key}\n" + table, flush=True)
