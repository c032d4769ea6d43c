"""Session 62: host time of the eager decode plans' per-call pieces on the CPU path (no GPU):
_kvcache._plan_key, _kvcache._world and decode.split_counters, by timeit, on CPU tensors
(B=1, one query token, H=8, d=64, 256 cached rows).  Run from the repository root:
`PYTHONPATH=. python benchmarks/history/host_micro_decode_cpu.py`.  On the 2-core CI machine
(Triton 3.9, torch 2.13 CPU) _world read 3.5-4.7 us before session 62's change (28e0361) and
1.5-2.6 us after; split_counters 2.7 -> 1.1 us.  The CUDA path (raw stream handle) needs a GPU."""
import timeit

import torch

from flashattn_triton import _kvcache as kvc
from flashattn_triton.kernels import decode

q = torch.randn(1, 1, 8, 64)
k_cache, v_cache = torch.randn(1, 256, 8, 64), torch.randn(1, 256, 8, 64)
seqlens = torch.full((1,), 128, dtype=torch.int32)
optional = (None, None, None, None, seqlens, None, None, None, None, None)
cases = {
    "_plan_key": lambda: kvc._plan_key(q, k_cache, v_cache, optional, None, True, (-1, -1), 0.0, True, 0, False, 0),
    "_world": kvc._world,
    "split_counters": lambda: decode.split_counters(8, q.device),
}
for name, fn in cases.items():
    n = 20000
    best = min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6
    print(f"{name:16s} {best:.2f} us per call (best of 5 x {n})")
