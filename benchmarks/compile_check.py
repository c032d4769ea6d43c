"""Compile the portable kernels for a GPU target without a GPU (Triton's
ahead-of-time path): catches compile errors and reports registers, spills
and shared memory per config before any device time is spent.

    python benchmarks/compile_check.py [--arch 90] [--d 64,128,256]
"""

from __future__ import annotations

import argparse
import itertools

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from flashattn_triton.kernels import bwd, fwd
from flashattn_triton.kernels.launch import CANDIDATES


def _sig(kernel, dtype: str, constexprs: dict):
    sig = {}
    for name in kernel.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name[0].isupper() and not name.startswith(("N_", "H_", "GROUP", "SEQ_", "RNG_")):
            sig[name] = "*i32" if name.startswith("CU_") else "*i64" if name == "SEED" else (
                "*fp32" if name in ("LSE", "DELTA", "DLSE", "ALIBI", "SINKS", "DSINKS", "BIAS", "DBIAS")
                else f"*{dtype}")
        elif name in ("sm_scale", "softcap", "dropout_scale"):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


def compile_one(kernel, dtype, constexprs, target):
    src = ASTSource(fn=kernel, signature=_sig(kernel, dtype, constexprs), constexprs=constexprs)
    return triton.compile(src, target=target)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--d", default="64,128,256")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--all-configs", action="store_true")
    ap.add_argument("--variants", action="store_true", help="every score-modification switch on")
    args = ap.parse_args()
    target = GPUTarget("cuda", args.arch, 32)
    kernels = {"FWD": fwd._attn_fwd, "BWD_DKDV": bwd._bwd_dkdv, "BWD_DQ": bwd._bwd_dq}
    failures = 0
    for d, (name, kernel) in itertools.product([int(x) for x in args.d.split(",")], kernels.items()):
        for causal, varlen in ((False, False), (True, False), (True, True)):
            cands = CANDIDATES[name] if args.all_configs else CANDIDATES[name][:1]
            for bm, bn, w, s in cands:
                meta = dict(HEAD_DIM=d, HEAD_DIM_PAD=d, EVEN_D=True, HEAD_DIM_V=d, HEAD_DIM_V_PAD=d,
                            EVEN_DV=True, IS_VARLEN=varlen, MASK_LEFT=False, MASK_RIGHT=causal,
                            DOT_PRECISION="tf32", INTERPRET=False, BLOCK_M=bm, BLOCK_N=bn,
                            HAS_SOFTCAP=False, FAST_TANH=False, HAS_ALIBI=False, HAS_MASK=False,
                            MASK_BOOL=False, HAS_SINKS=False, HAS_DROPOUT=False, HAS_DBIAS=False,
                            HEADS_PER_PROGRAM=1)
                if args.variants:
                    meta.update(HAS_SOFTCAP=True, HAS_ALIBI=True, HAS_SINKS=True, HAS_DROPOUT=True,
                                HAS_MASK=True)
                if name == "FWD":
                    meta["REVERSE_M"] = causal
                meta = {k: v for k, v in meta.items() if k in kernel.arg_names}
                label = f"{name:9s} d={d:3d} causal={causal!s:5} varlen={varlen!s:5} ({bm},{bn},{w},{s})"
                try:
                    src = ASTSource(fn=kernel, signature=_sig(kernel, args.dtype, meta), constexprs=meta)
                    k = triton.compile(src, target=target, options=dict(num_warps=w, num_stages=s))
                    print(f"{label}: ok, smem {k.metadata.shared}")
                except Exception as exc:  # noqa: BLE001
                    failures += 1
                    print(f"{label}: FAILED {type(exc).__name__}: {str(exc)[:300]}")
    print("failures:", failures)
    return failures


if __name__ == "__main__":
    raise SystemExit(main())
