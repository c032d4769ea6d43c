"""Cases for Nsight Compute (benchmarks/gpu_ncu_profile.sh): one attention
call repeated a few times so that ncu can pick one launch of the kernel it
is told to profile (GPU only).

    python benchmarks/ncu_cases.py --case bwd --d 128 --n 2048 [--causal] [--dtype bf16] [--provider cudnn]

--provider cudnn runs PyTorch SDPA's cuDNN backend on the same inputs (the
peer the Hopper kernels are measured against).

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
    ap.add_argument("--provider", choices=("ours", "cudnn"), default="ours")
    args = ap.parse_args()
    from flashattn_triton import flash_attn_func
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    b, h = max(1, 16384 // args.n), max(1, 2048 // args.d)
    q, k, v = (torch.randn(b, args.n, h, args.d, device="cuda", dtype=dtype, requires_grad=args.case == "bwd")
               for _ in range(3))
    do = torch.randn(b, args.n, h, args.d, device="cuda", dtype=dtype)
    def attention(q, k, v):
        if args.provider == "ours":
            return flash_attn_func(q, k, v, causal=args.causal)
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=args.causal)
        return out.transpose(1, 2)

    for _ in range(args.reps):
        out = attention(q, k, v)
        if args.case == "bwd":
            out.backward(do)
    torch.cuda.synchronize()
    print(f"done: {args.provider} {args.case} d={args.d} N={args.n} causal={args.causal} {args.dtype} B={b} H={h}")


if __name__ == "__main__":
    main()
