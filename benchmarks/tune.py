"""Sweep launch configurations of each kernel on the GPU (not part of the test suite).

For each shape, times the forward, the dK/dV kernel and the dQ kernel under
every candidate config (set through the FLASHATTN_TRITON_CONFIG_* overrides)
and prints the ranking, so the autotune lists in _fwd.py / _bwd.py can be
ordered with measured data.  Output: a table on stdout and --json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os

import torch
import triton
import triton.testing

FWD = [(128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 3), (128, 128, 8, 2), (128, 64, 8, 4),
       (128, 32, 4, 4), (64, 64, 4, 4), (128, 128, 4, 3), (64, 32, 4, 2), (128, 32, 8, 2)]
DKDV = [(64, 128, 8, 2), (32, 128, 4, 2), (64, 128, 4, 2), (64, 64, 4, 3), (32, 64, 4, 2),
        (64, 128, 8, 3), (32, 128, 8, 2), (128, 128, 8, 2), (16, 64, 4, 2), (32, 64, 4, 3)]
DQ = [(128, 64, 8, 2), (128, 32, 4, 2), (128, 64, 4, 2), (64, 64, 4, 3), (64, 32, 4, 2),
      (128, 64, 8, 3), (128, 128, 8, 2), (64, 16, 4, 2), (128, 32, 8, 3)]


def cfg_str(c):
    return f"BLOCK_M={c[0]},BLOCK_N={c[1]},num_warps={c[2]},num_stages={c[3]}"


def time_kernel(fn):
    try:
        fn()
        return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")
    except Exception as exc:  # out of resources etc.
        return f"{type(exc).__name__}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from flashattn_triton.kernels.bwd import attention_backward
    from flashattn_triton.kernels.fwd import attention_forward

    dtype = getattr(torch, args.dtype)
    results = []
    for d, causal in itertools.product([int(x) for x in args.head_dims.split(",")], (False, True)):
        n = args.seqlen
        b, h = 16384 // n, 2048 // d
        q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(4))
        o = torch.empty_like(q)
        lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
        scale = d ** -0.5
        shift = 0 if causal else None
        attention_forward(q, k, v, o, lse, scale, shift)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        flops = 4 * b * h * n * n * d / (2 if causal else 1)
        for kernel, cands, mult in (("FWD", FWD, 1.0), ("BWD_DKDV", DKDV, 2.5), ("BWD_DQ", DQ, 2.5)):
            rows = []
            for c in cands:
                os.environ["FLASHATTN_TRITON_CONFIG_" + kernel] = cfg_str(c)
                if kernel == "FWD":
                    ms = time_kernel(lambda: attention_forward(q, k, v, o, lse, scale, shift))
                else:
                    ms = time_kernel(lambda: attention_backward(do, q, k, v, o, lse, dq, dk, dv, scale, shift))
                del os.environ["FLASHATTN_TRITON_CONFIG_" + kernel]
                rows.append((c, ms))
                results.append(dict(kernel=kernel, head_dim=d, causal=causal, seqlen=n, config=c,
                                    ms=ms if isinstance(ms, float) else None,
                                    error=None if isinstance(ms, float) else ms))
            ok = sorted([r for r in rows if isinstance(r[1], float)], key=lambda r: r[1])
            print(f"\n{kernel} d={d} causal={causal} N={n} (bwd times include the other two kernels "
                  f"at their defaults; TFLOP/s counts {mult}x fwd FLOPs)")
            for c, ms in ok[:5]:
                print(f"  {str(c):<20} {ms:8.3f} ms {flops * mult / ms * 1e-9:6.0f} TFLOP/s")
            for c, ms in rows:
                if not isinstance(ms, float):
                    print(f"  {str(c):<20} {ms}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(torch=torch.__version__, triton=triton.__version__,
                           gpu=torch.cuda.get_device_name(), results=results), f, indent=1)


if __name__ == "__main__":
    main()
