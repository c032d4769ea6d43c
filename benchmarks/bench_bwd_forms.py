"""Backward only: our two backward forms (deterministic separate-dQ and fused
dQ with atomic adds, kernels/bwd.py) next to SDPA's cuDNN and flash backends,
in one run, on the rows of issue 8 (bf16, B*N = 16k tokens, H = 2048 / d)
plus a grouped-query row.  bwd FLOPs = 2.5 x fwd.

    PYTHONPATH=. python benchmarks/bench_bwd_forms.py --out benchmarks/results/h200/session7
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C  # noqa: E402

ROWS = [  # (d, causal, N, Hkv or None for MHA)
    (128, False, 8192, None), (128, True, 8192, None), (128, True, 2048, None),
    (128, False, 2048, None), (64, True, 8192, None), (64, False, 2048, None),
    (64, True, 2048, None), (256, True, 4096, None), (256, False, 4096, None),
    (128, True, 4096, 8),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import flashattn_triton as fat
    from flashattn_triton.kernels.bwd import ENV_FUSED_DQ
    dtype = getattr(torch, args.dtype)
    res = dict(env=C.collect_env(), rows=[])
    lines = ["| d | causal | N | heads | ours separate | ours fused | cuDNN | SDPA flash | "
             "fused/cuDNN | fused/flash | fused/separate |", "|" + "---|" * 11]
    for d, causal, n, hkv in ROWS:
        b, hq = max(1, 16384 // n), 2048 // d
        hkv = hkv or hq
        flops = 2.5 * 4 * b * hq * n * n * d / (2 if causal else 1)
        q = torch.randn(b, n, hq, d, device="cuda", dtype=dtype, requires_grad=True)
        k = torch.randn(b, n, hkv, d, device="cuda", dtype=dtype, requires_grad=True)
        v = torch.randn(b, n, hkv, d, device="cuda", dtype=dtype, requires_grad=True)
        do = torch.randn(b, n, hq, d, device="cuda", dtype=dtype)
        row = dict(d=d, causal=causal, n=n, b=b, hq=hq, hkv=hkv)
        def time_backward(name, forward, leaves, grad_out):
            """Backward-only ms of forward() into row[name]; an error is recorded, not raised."""
            try:
                out = forward()
                fn = lambda: torch.autograd.grad(out, leaves, grad_out, retain_graph=True)  # noqa: E731
                fn()
                row[name] = C.bench_ms(fn)
            except Exception as exc:  # noqa: BLE001
                row[name] = None
                row[name + "_error"] = C.short_error(exc)

        for form, flag in (("separate", "0"), ("fused", "1")):
            os.environ[ENV_FUSED_DQ] = flag
            time_backward(form, lambda: fat.flash_attn_func(q, k, v, causal=causal), (q, k, v), do)
        os.environ.pop(ENV_FUSED_DQ, None)
        qt, kt, vt, dot = (t.detach().transpose(1, 2).requires_grad_(True) for t in (q, k, v, do))
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            with sdpa_kernel([backend]):
                time_backward(name, lambda: F.scaled_dot_product_attention(
                    qt, kt, vt, is_causal=causal, enable_gqa=hkv != hq), (qt, kt, vt), dot)
        res["rows"].append(row)

        def tf(ms):
            return f"{flops / ms * 1e-9:.0f}" if ms else "-"

        def x(a, b_):
            return f"{row[b_] / row[a]:.2f}" if row.get(a) and row.get(b_) else "-"
        lines.append(f"| {d} | {causal} | {n} | {hq}/{hkv} | {tf(row['separate'])} | {tf(row['fused'])} | "
                     f"{tf(row['cudnn'])} | {tf(row['flash'])} | {x('fused', 'cudnn')} | "
                     f"{x('fused', 'flash')} | {x('fused', 'separate')} |")
        print(lines[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_bwd_forms.json").write_text(json.dumps(res, indent=1))
    (args.out / "bench_bwd_forms.md").write_text(
        "Backward TFLOP/s (bf16, B*N = 16k, H = 2048/d; x = peer ms / ours ms)\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
