"""Cases for Nsight Compute (benchmarks/gpu_ncu_profile.sh): one attention
call repeated a few times so that ncu can pick one launch of the kernel it
is told to profile (GPU only).

    python benchmarks/ncu_cases.py --case bwd --d 128 --n 2048 [--causal] [--dtype bf16]

B * N = 16k tokens and H = 2048 / d, as bench_attention.py's rows.
"""

from __future__ import annotations

import argparse

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=("fwd", "bwd"), required=True)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--reps", type=int, default=4)
    args = ap.parse_args()
    from flashattn_triton import flash_attn_func
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    b, h = max(1, 16384 // args.n), max(1, 2048 // args.d)
    q, k, v = (torch.randn(b, args.n, h, args.d, device="cuda", dtype=dtype, requires_grad=args.case == "bwd")
               for _ in range(3))
    do = torch.randn(b, args.n, h, args.d, device="cuda", dtype=dtype)
    for _ in range(args.reps):
        out = flash_attn_func(q, k, v, causal=args.causal)
        if args.case == "bwd":
            out.backward(do)
    torch.cuda.synchronize()
    print(f"done: {args.case} d={args.d} N={args.n} causal={args.causal} {args.dtype} B={b} H={h}")


if __name__ == "__main__":
    main()
