"""Host time of a warm-cache first forward without a GPU (CPU emulation).

    PYTHONPATH=. TRITON_INTERPRET=0 python benchmarks/first_call_host.py [--pause 1.0]

Imports the library as on a GPU machine (torch.cuda.is_available() reported
True, so the import-time warm-up of Triton's cache key starts), waits
--pause seconds (the user's model construction), then times one
flash_attn_func forward (B=4, N=4096, H=16, d=128, fp16, causal) through the
CUDA code path with Triton's driver replaced by tests/fake_cuda.py
(benchmarks/profile_host.py's --device cpu).  Run it twice first so that
Triton's disk cache holds the kernels (a warm cache); compare with
FLASHATTN_TRITON_WARM_KEY=0.  Needs Triton 3.6 (the stand-in's version).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pause", type=float, default=1.0, help="seconds between the import and the first call")
    args = ap.parse_args()
    import torch
    torch.cuda.is_available = lambda: True  # the warm-up's condition, as on a GPU machine
    import profile_host as ph
    from flashattn_triton import flash_attn_func
    time.sleep(args.pause)
    patcher = ph.Patcher()
    with ph.cpu_emulation(patcher):
        q, k, v = (torch.randn(4, 4096, 16, 128, dtype=torch.float16) for _ in range(3))
        t0 = time.perf_counter()
        flash_attn_func(q, k, v, causal=True)
        t1 = time.perf_counter()
    print(f"first forward host time {t1 - t0:.3f} s (pause {args.pause} s, "
          f"FLASHATTN_TRITON_WARM_KEY={os.environ.get('FLASHATTN_TRITON_WARM_KEY', '1')})")


if __name__ == "__main__":
    main()
