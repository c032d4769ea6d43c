"""Time the packed Hopper paths (flash_attn_varlen_func, forward and forward +
backward) on a batch of many short documents, where each document's last
query tile and key block (the ones that reach into the next document) are a
large share of the work.  Used to time the zeroing of those tiles' foreign
rows (kernels/hopper/fwd.py, bwd.py) against the kernels without it, each
checkout timed by its own run of this script on the same GPU.

    PYTHONPATH=<checkout> python benchmarks/varlen_tail_probe.py --label NAME [--reps 3]

Prints one JSON line per row: label, d, causal, documents, fwd_ms, fwdbwd_ms
(medians of triton.testing.do_bench over --reps rounds).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_varlen import doc_lengths  # noqa: E402  (the same documents as bench_varlen.py draws)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", required=True)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--docs", default="64,1024", help="LO,HI: document lengths log-uniform in [LO, HI]")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    import torch
    import triton

    from flashattn_triton import _dispatch, flash_attn_varlen_func
    _dispatch.HOPPER_VARLEN_SHORT = {}  # the Hopper packed forward at every length
    lo, hi = (int(x) for x in args.docs.split(","))
    lens = doc_lengths(args.tokens, 0, lo, hi)
    cu = torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device="cuda")
    n_max = max(lens)
    for d in (64, 128):
        for causal in (False, True):
            gen = torch.Generator(device="cuda").manual_seed(1)
            q = torch.randn(args.tokens, 32, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            k = torch.randn(args.tokens, 8, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            v = torch.randn(args.tokens, 8, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            do = torch.randn_like(q)
            qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))

            def fwd():
                with torch.no_grad():
                    flash_attn_varlen_func(q, k, v, cu, cu, n_max, n_max, causal=causal)

            def fwdbwd():
                out = flash_attn_varlen_func(qg, kg, vg, cu, cu, n_max, n_max, causal=causal)
                torch.autograd.grad(out, (qg, kg, vg), grad_outputs=do)

            fwd()
            fwdbwd()
            torch.cuda.synchronize()
            f = sorted(triton.testing.do_bench(fwd, warmup=50, rep=200) for _ in range(args.reps))
            fb = sorted(triton.testing.do_bench(fwdbwd, warmup=50, rep=200) for _ in range(args.reps))
            print(json.dumps({"label": args.label, "d": d, "causal": causal, "documents": len(lens),
                              "fwd_ms": round(f[len(f) // 2], 5), "fwdbwd_ms": round(fb[len(fb) // 2], 5)}),
                  flush=True)


if __name__ == "__main__":
    main()
