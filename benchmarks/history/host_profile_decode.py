"""Session 59: where the host time of an eager decoding call goes (bench_overhead.py's decode
row: one query token against 128 cached rows, B=1, H=8, d=64, fp16, under no_grad: 212 us per
call against torch SDPA's 28 us).  Host time per call (back to back, no sync), then a cProfile
of 300 calls by cumulative and by own time."""
import cProfile
import io
import pstats
import time

import torch

import flashattn_triton as fat

q = torch.randn(1, 1, 8, 64, device="cuda", dtype=torch.float16)
k, v = (torch.randn(1, 128, 8, 64, device="cuda", dtype=torch.float16) for _ in range(2))
seqlens = torch.full((1,), 128, dtype=torch.int32, device="cuda")
kn, vn = (torch.randn(1, 1, 8, 64, device="cuda", dtype=torch.float16) for _ in range(2))
seqlens_append = torch.full((1,), 100, dtype=torch.int32, device="cuda")
calls = {"decode": lambda: fat.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens),
         "decode with append": lambda: fat.flash_attn_with_kvcache(q, k, v, k=kn, v=vn, cache_seqlens=seqlens_append)}
with torch.no_grad():
    for name, fn in calls.items():
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(1000):
            fn()
        host = (time.perf_counter() - t) / 1000 * 1e6
        torch.cuda.synchronize()
        print(f"{name}: host {host:.1f} us per call", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        calls["decode"]()
    prof.disable()
    torch.cuda.synchronize()
    for key in ("cumulative", "tottime"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(45)
        print(f"=== decode: cProfile, 300 calls, by {key}\n" + s.getvalue(), flush=True)
