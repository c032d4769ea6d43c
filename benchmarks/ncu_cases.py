"""One benchmark row's attention call per provider, for Nsight Compute
(benchmarks/gpu_ncu_short_rows.sh; GPU only).

    python benchmarks/ncu_cases.py --case bwd --d 128 --n 2048 [--causal] [--dtype bf16] \\
        [--providers ours,cudnn] [--windows-json PATH]

The row is bench_attention.py's: B = 16k / N sequences, H = 2048 / d heads, the inputs
made by the benchmark's harness in each provider's layout (ours (B, N, H, d), SDPA
(B, H, N, d)) with requires_grad, and the op the benchmark times: fwd, one forward;
bwd, one ``out.backward(dout, retain_graph=True)`` of a forward run beforehand, the
inputs' .grad reset to None first (do_bench's grad_to_none). --providers: ours, cudnn
(PyTorch SDPA's cuDNN backend), flash (SDPA's FlashAttention-2 backend), flex
(torch.compile'd FlexAttention, the sweep's; compiled during the warm-up, outside the
profiled windows: under ncu, TORCHINDUCTOR_COMPILE_THREADS=1 keeps Inductor's compiles
in this process).

Every provider is warmed up first (--warmup ops: compiles, cuDNN's plans, the
backward's background compile). Then each provider's op runs once, in turn, between
cudaProfilerStart and cudaProfilerStop (``ncu --profile-from-start off`` profiles only
there), right after a marker kernel ``_ncu_window`` on grid (window, 1, 1):
ncu_summary.py splits the report at the markers, so every kernel of a call is counted
with its provider, whichever thread launched it (autograd runs the backward on a thread
of its own). --windows-json records the row and which window is which provider.

--case decode profiles one decoding step instead (issue 11's batch-1 rows): one query
token of Hq 32 / Hkv 8, d 128, bf16 against a contiguous cache of --n keys in --batch
sequences, as bench_decode.py builds it: ours (flash_attn_with_kvcache, automatic split
count) against SDPA's cuDNN (cudnn) or flash (flash) backend on (B, H, N, d) views of the
same cache. Nsight Compute flushes the caches before each profiled kernel by default, so
the cache is read from DRAM as in the benchmark's rotation of copies.

--variant NAME profiles a row of bench_variants.py's table instead (issue 10: B = 2,
N = --n, Hq 16 / Hkv 4, d = 128, bf16, causal): plain, dropout (p = 0.1), d192 (d = 192,
dv = 128) against SDPA's default backend, window ((1024, 0)) against the compiled
FlexAttention with the band's block mask; its providers are ours and peer.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

PROVIDERS = {"ours": C.OURS, "cudnn": "sdpa_cudnn", "flash": "sdpa_flash", "flex": "flex"}
VARIANTS = ("plain", "dropout", "d192", "window")
VARIANT_WINDOW = 1024


@triton.jit
def _ncu_window(X):
    pass  # launched on grid (window, 1, 1) before each profiled call: its label in the report


def row_config(args) -> C.AttnConfig:
    b, h = max(1, 16384 // args.n), max(1, 2048 // args.d)
    return C.AttnConfig(dtype=args.dtype, head_dim=args.d, causal=args.causal, batch=b, heads_q=h,
                        heads_kv=h, seqlen_q=args.n, seqlen_k=args.n)


def make_op(provider: str, cfg: C.AttnConfig, mode: str):
    """The benchmark's measured op for one provider, as a function of no arguments."""
    name = PROVIDERS[provider]
    attn, context = C.build_attention(name, cfg)
    q, k, v = C.make_qkv(cfg, C.provider_layout(name), requires_grad=True)
    if mode == "fwd":
        def op():
            with context():
                attn(q, k, v)
        return op
    with context():
        out = attn(q, k, v)
    dout = torch.randn_like(out)

    def op():
        for t in (q, k, v):
            t.grad = None
        out.backward(dout, retain_graph=True)
    return op


def variant_op(provider: str, variant: str, n: int):
    """(the op, the row) of bench_variants.py's row ``variant`` (module doc) for provider
    ours or peer: forward, or one backward as make_op's, grads reset first."""
    import torch.nn.functional as F

    import flashattn_triton as fat
    b, hq, hkv = 2, 16, 4
    d, dv = (192, 128) if variant == "d192" else (128, 128)
    gen = torch.Generator(device="cuda").manual_seed(0)
    mk = lambda h, e: torch.randn(b, n, h, e, device="cuda", generator=gen).to(torch.bfloat16)  # noqa: E731
    q, k, v, do = mk(hq, d), mk(hkv, d), mk(hkv, dv), mk(hq, dv)
    kw = dict(dropout_p=0.1) if variant == "dropout" else {}
    if provider == "ours":
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        window = (VARIANT_WINDOW, 0) if variant == "window" else (-1, -1)

        def fwd():
            return fat.flash_attn_func(*leaves, causal=True, window_size=window, **kw)
    else:
        leaves = [t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v)]
        do = do.transpose(1, 2).contiguous()
        if variant == "window":
            from torch.nn.attention.flex_attention import create_block_mask
            flex = C.compiled_flex()
            bm = create_block_mask(lambda bi, h, qi, ki: (qi >= ki) & (qi - ki <= VARIANT_WINDOW), None, None,
                                   n, n, device="cuda")

            def fwd():
                return flex(*leaves, block_mask=bm, enable_gqa=True)
        else:
            def fwd():
                return F.scaled_dot_product_attention(*leaves, is_causal=True, enable_gqa=True, **kw)
    row = dict(variant=variant, batch=b, seqlen_q=n, seqlen_k=n, heads_q=hq, heads_kv=hkv, head_dim=d, head_dim_v=dv,
               causal=True, dtype="bf16", peer="flex" if variant == "window" else "sdpa (default backend)")
    return fwd, leaves, do, row


def variant_case_op(provider: str, variant: str, n: int, mode: str):
    """(op of no arguments, row) for --variant: the forward, or one backward of a forward
    run here (leaves' grads reset first, as make_op's)."""
    fwd, leaves, do, row = variant_op(provider, variant, n)
    if mode == "fwd":
        return (lambda: fwd()), row
    out = fwd()

    def op():
        for t in leaves:
            t.grad = None
        out.backward(do, retain_graph=True)
    return op, row


def decode_op(provider: str, batch: int, n: int):
    """(op of no arguments, row) for --case decode (module doc)."""
    import bench_decode as BD
    h_q, h_kv, d, dtype = 32, 8, 128, torch.bfloat16
    cache = BD.make_caches(batch, n, h_kv, d, dtype, "contiguous", 1)[0]
    q = torch.randn(batch, 1, h_q, d, dtype=dtype, device="cuda")
    if provider == "ours":
        lens = torch.full((batch,), n, dtype=torch.int32, device="cuda")
        op = BD.our_call(q, cache, lens, 0)
    else:
        op = BD.peer_call(PROVIDERS[provider], q.transpose(1, 2), cache)
    row = dict(case="decode", batch=batch, seqlen_k=n, heads_q=h_q, heads_kv=h_kv, head_dim=d, dtype="bf16",
               kv_bytes=BD.kv_bytes(batch, n, h_kv, d))
    return op, row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=("fwd", "bwd", "decode"), required=True)
    ap.add_argument("--batch", type=int, default=1, help="--case decode: sequences")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--providers", default="ours,cudnn", help="comma-separated, among " + ", ".join(PROVIDERS))
    ap.add_argument("--variant", choices=VARIANTS, help="a row of bench_variants.py's table (module doc)")
    ap.add_argument("--warmup", type=int, default=2, help="ops per provider before the profiled ones")
    ap.add_argument("--windows-json", help="write the row and the window of each provider here")
    args = ap.parse_args()
    providers = [p for p in args.providers.split(",") if p]
    if args.case == "decode" and args.variant:
        ap.error("--case decode takes no --variant")
    known = ("ours", "peer") if args.variant else PROVIDERS
    unknown = [p for p in providers if p not in known]
    if unknown:
        ap.error(f"--providers: unknown {', '.join(unknown)} (choose among {', '.join(known)})")
    C.require_cuda("ncu_cases.py")
    cfg = None if args.variant or args.case == "decode" else row_config(args)
    ops, errors, row = {}, {}, {}
    for p in providers:
        try:
            if args.variant:
                op, row = variant_case_op(p, args.variant, args.n, args.case)
            elif args.case == "decode":
                op, row = decode_op(p, args.batch, args.n)
            else:
                op = make_op(p, cfg, args.case)
            for _ in range(args.warmup):
                op()
            torch.cuda.synchronize()
            ops[p] = op
        except Exception as exc:  # noqa: BLE001 - recorded; the other providers still run
            errors[p] = C.short_error(exc)
            print(f"{p}: not profiled: {errors[p]}", flush=True)
    from flashattn_triton import _prefetch
    _prefetch.wait_pending()
    mark = torch.empty(1, device="cuda")
    _ncu_window[(1,)](mark, num_warps=1)  # compiled outside the windows
    torch.cuda.synchronize()
    windows = []
    for window, (p, op) in enumerate(ops.items(), 1):
        torch.cuda.profiler.start()
        _ncu_window[(window,)](mark, num_warps=1)
        op()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        windows.append({"window": window, "provider": p})
    if args.windows_json:
        row = dict(row if cfg is None else cfg.as_dict(), mode=args.case)
        Path(args.windows_json).write_text(json.dumps({"row": row, "windows": windows, "errors": errors}, indent=1))
    label = (f"variant {args.variant} N={args.n}" if args.variant else
             f"B={args.batch} N={args.n}" if cfg is None else cfg.label())
    print(f"done: {args.case} {label} windows {windows}" + (f" errors {errors}" if errors else ""))
    return 0 if ops else 1


if __name__ == "__main__":
    sys.exit(main())
