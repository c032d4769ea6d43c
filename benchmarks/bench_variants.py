"""Attention variants on the GPU: each variant of flashattn_triton next to its
nearest peer, forward and backward, and the sliding-window cost against the
window size at a fixed length.

Peers: FlexAttention (torch.compile'd) with the equivalent score_mod /
block_mask for the window, chunked attention (chunk 1024, causal), softcap
and ALiBi; PyTorch SDPA with the same
explicit mask / bias / dropout; eager PyTorch (materialised scores) for
learnable sinks, which no fused PyTorch kernel offers.  Dropout rows time
different random masks of the same rate.

Default shapes: bf16, B=2, Hq=16, Hkv=4 (GQA), N=4096, d=128, causal;
head-dim rows d=192/dv=128 and d=512 (N=2048); window sweep B=1, N=16384.

    PYTHONPATH=. python benchmarks/bench_variants.py --out benchmarks/results/h200
    PYTHONPATH=. python benchmarks/bench_variants.py --only "plain,dropout" --out /tmp/drop   # some rows only
    python benchmarks/bench_variants.py --smoke --out /tmp/x     # CPU plumbing check (tiny, no timing value)

--head-dim, --heads HQ,HKV and --not-causal change the variant table's shape
(--not-causal: the plain and dropout rows only; the other rows' peers are
causal); --shapes "B,N,Hq,Hkv,d,causal;..." runs the selected rows at each
shape in turn, in one process:

    PYTHONPATH=. python benchmarks/bench_variants.py --only dropout \
        --shapes "8,2048,32,32,64,1;2,8192,16,4,128,0" --out /tmp/drop
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C  # noqa: E402


def timer(device: str, warmup: int, rep: int):
    """ms per call of fn: triton's do_bench (CUDA events, median) on the GPU,
    a wall-clock mean on the CPU (--smoke only)."""
    def ms(fn, grad_to_none=None):
        # grad_to_none: the leaves' .grad reset before each timed call (as the
        # harness's bench_attention does), so that a timed backward does not also
        # run AccumulateGrad's in-place add over dQ, dK, dV (and a bias's gradient).
        if device == "cuda":
            return C.bench_ms(fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none)
        fn()
        total = 0.0
        for _ in range(2):
            for t in grad_to_none or ():
                t.grad = None
            t0 = time.perf_counter()
            fn()
            total += time.perf_counter() - t0
        return total / 2 * 1e3
    return ms


class Case:
    """Inputs of one benchmark shape, in flash layout (B, N, H, d)."""

    def __init__(self, b, n, hq, hkv, d, dv, dtype, device):
        import torch
        self.b, self.n, self.hq, self.hkv, self.d, self.dv = b, n, hq, hkv, d, dv
        self.dtype, self.device = dtype, device
        mk = lambda h, e: torch.randn(b, n, h, e, device=device, dtype=dtype)  # noqa: E731
        self.q, self.k, self.v = mk(hq, d), mk(hkv, d), mk(hkv, dv)
        self.do = mk(hq, dv)
        self.scale = d ** -0.5

    def flash(self):
        """Fresh leaves (B, N, H, d) and the output cotangent."""
        leaves = [t.clone().requires_grad_() for t in (self.q, self.k, self.v)]
        return leaves, self.do

    def bhnd(self, repeat_kv: bool = False):
        """Fresh leaves in SDPA / Flex layout (B, H, N, d) and the cotangent.
        repeat_kv: K and V repeated to Hq heads before timing (the leaves are
        the repeated tensors), for SDPA rows whose fused kernels do not take
        enable_gqa's grouped heads with the case (a float bias with its
        gradient, d = 512): with enable_gqa SDPA falls back to its unfused
        math path there, which is not the peer a user would pick."""
        k, v = self.k, self.v
        if repeat_kv and self.hq != self.hkv:
            k, v = (t.repeat_interleave(self.hq // self.hkv, 2) for t in (k, v))
        leaves = [t.transpose(1, 2).contiguous().requires_grad_() for t in (self.q, k, v)]
        return leaves, self.do.transpose(1, 2).contiguous()

    def flops(self, causal: bool, window: int | None = None, chunk: int | None = None) -> float:
        """Forward FLOPs counting only the visible scores (4 * visible * d);
        chunk: causal chunked attention (each chunk a causal triangle)."""
        n = self.n
        if chunk is not None and chunk < n:
            full, rest = divmod(n, chunk)
            visible = full * chunk * (chunk + 1) / 2 + rest * (rest + 1) / 2
        elif window is not None and window < n:
            visible = n * (window + 1) - window * (window + 1) / 2
        elif causal:
            visible = n * (n + 1) / 2
        else:
            visible = n * n
        return 2.0 * self.b * self.hq * visible * (self.d + self.dv)


def run_provider(ms, make, row, key, flops):
    """Time make() -> (fn, leaves, dout): forward, then backward only; an
    error (e.g. a peer that lacks the backward) is recorded, not raised."""
    fn, leaves, dout = make()
    out = fn()
    fwd = ms(fn)
    row.update({f"{key}_fwd_ms": fwd, f"{key}_fwd_tflops": flops / fwd * 1e-9})

    def bwd():
        out.backward(dout, retain_graph=True)
    try:
        bwd_ms = ms(bwd, grad_to_none=list(leaves))
        row.update({f"{key}_bwd_ms": bwd_ms, f"{key}_bwd_tflops": 2.5 * flops / bwd_ms * 1e-9})
        if key == "peer" and "sdpa" in row.get("peer_provider", "") and out.is_cuda:
            row["peer_kernels"] = cuda_kernels(fn)  # which backend SDPA's default dispatch picked
    finally:
        for t in leaves:
            t.grad = None


def cuda_kernels(fn) -> list:
    """The CUDA kernels one call of fn runs (torch.profiler): an unforced SDPA's
    backend (flash / cuDNN / efficient, or the unfused math path's GEMMs and
    softmax), recorded next to the row it is compared with."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.key for e in prof.key_averages() if e.device_type.name == "CUDA"})[:8]


def flex_fn(compiled):
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex = C.compiled_flex() if compiled else flex_attention

    def block_mask(mask_mod, n, device):
        return create_block_mask(mask_mod, None, None, n, n, device=device)
    return flex, block_mask, torch


def variant_rows(args, ms, device):
    import torch
    import torch.nn.functional as F
    import flashattn_triton as fat

    dtype = torch.bfloat16
    hq, hkv = map(int, args.heads.split(","))
    b, n, d, causal = args.batch, args.seqlen, args.head_dim, not args.not_causal
    if args.smoke and not args.shapes:
        b, n, hq, hkv, d = 1, 64, 4, 2, 32
    case = Case(b, n, hq, hkv, d, d, dtype, device)
    flex, block_mask, _ = flex_fn(compiled=device == "cuda")
    causal_mm = lambda bi, h, qi, ki: qi >= ki  # noqa: E731
    window = min(args.window, n // 4) if not args.smoke else 16
    slopes = torch.exp2(-8.0 * torch.arange(1, hq + 1, device=device) / hq).float()
    sinks = torch.randn(hq, device=device, dtype=torch.float32)
    rows = []

    def ours_flash(causal=True, **kw):
        def make():
            (q, k, v), do = case.flash()
            return (lambda: fat.flash_attn_func(q, k, v, causal=causal, **kw)), (q, k, v), do
        return make

    def flex_make(score_mod=None, mask_mod=causal_mm):
        bm = block_mask(mask_mod, n, device)

        def make():
            (q, k, v), do = case.bhnd()
            return (lambda: flex(q, k, v, score_mod=score_mod, block_mask=bm, enable_gqa=True)), (q, k, v), do
        return make

    def sdpa_make(**kw):
        def make():
            (q, k, v), do = case.bhnd()
            return (lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)), (q, k, v), do
        return make

    def ours_sdpa(**kw):
        def make():
            (q, k, v), do = case.bhnd()
            return (lambda: fat.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)), (q, k, v), do
        return make

    def eager_sinks(dropout_p=0.0):
        def make():
            (q, k, v), do = case.bhnd()
            s_leaf = sinks.clone().requires_grad_()
            g = hq // hkv

            def fn():
                kk, vv = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
                s = (q @ kk.transpose(-1, -2)).float() * case.scale
                s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=device).triu(1), float("-inf"))
                logits = torch.cat([s, s_leaf[None, :, None, None].expand(b, hq, n, 1)], -1)
                p = torch.softmax(logits, -1)[..., :-1]
                return F.dropout(p, dropout_p).to(v.dtype) @ vv
            return fn, (q, k, v, s_leaf), do
        return make

    softcap = 30.0

    def softcap_mod(score, bi, h, qi, ki):
        return softcap * torch.tanh(score / softcap)

    def alibi_mod(score, bi, h, qi, ki):
        return score - slopes[h] * (qi - ki).abs()

    def window_mm(bi, h, qi, ki):
        return (qi >= ki) & (qi - ki <= window)

    chunk = min(args.chunk, n // 4) if not args.smoke else 16

    def chunk_mm(bi, h, qi, ki):
        return (qi >= ki) & (qi // chunk == ki // chunk)

    # (made only for their rows: at N = 8k the bias alone is gigabytes)
    bool_mask = torch.rand(b, 1, n, n, device=device) > 0.1 if selected(args, "bool mask") else None
    bias = torch.randn(1, hq, n, n, device=device, dtype=dtype) if selected(args, "float bias") else None

    def with_bias(fn_name):
        def make():
            ours = fn_name == "ours"
            (q, k, v), do = case.bhnd(repeat_kv=not ours)
            bb = bias.clone().requires_grad_()
            f = fat.scaled_dot_product_attention if ours else F.scaled_dot_product_attention
            return (lambda: f(q, k, v, attn_mask=bb, enable_gqa=ours)), (q, k, v, bb), do
        return make

    variants = [
        ("plain causal" if causal else "plain, no mask", dict(causal=causal), ours_flash(causal),
         "sdpa (default backend)", sdpa_make(is_causal=causal)),
        (f"window ({window}, 0)", dict(causal=True, window=window), ours_flash(window_size=(window, 0)),
         "flex block_mask", flex_make(mask_mod=window_mm)),
        (f"chunked {chunk}", dict(causal=True, chunk=chunk), ours_flash(attention_chunk=chunk),
         "flex block_mask", flex_make(mask_mod=chunk_mm)),
        (f"softcap {softcap:g}", dict(causal=True), ours_flash(softcap=softcap), "flex score_mod",
         flex_make(score_mod=softcap_mod)),
        ("alibi", dict(causal=True), ours_flash(alibi_slopes=slopes), "flex score_mod",
         flex_make(score_mod=alibi_mod)),
        ("dropout 0.1", dict(causal=causal), ours_flash(causal, dropout_p=0.1), "sdpa dropout",
         sdpa_make(is_causal=causal, dropout_p=0.1)),
        ("sinks", dict(causal=True), ours_flash(sinks=sinks.clone().requires_grad_()), "eager PyTorch",
         eager_sinks()),
        ("sinks+dropout 0.1", dict(causal=True), ours_flash(dropout_p=0.1, sinks=sinks.clone().requires_grad_()),
         "eager PyTorch", eager_sinks(0.1)),
        ("bool mask (B,1,N,N)", dict(causal=False), ours_sdpa(attn_mask=bool_mask), "sdpa attn_mask",
         sdpa_make(attn_mask=bool_mask)),
        ("float bias (1,H,N,N) + grad", dict(causal=False), with_bias("ours"), "sdpa attn_mask, K/V repeated",
         with_bias("sdpa")),
    ]
    for name, shape, ours, peer_name, peer in variants:
        if not selected(args, name):
            continue
        rows.append(measure(ms, name, case, shape, [("flashattn_triton", ours), (peer_name, peer)]))
        torch.cuda.empty_cache() if device == "cuda" else None

    # Head dims: MLA-like d != dv, and d = 512 (Gemma-style global layers).
    for d_, dv_, n_ in ((192, 128, n), (512, 512, n // 2)):
        if args.smoke:
            d_, dv_, n_ = (48, 32, 64) if d_ == 192 else (512, 512, 32)
        if not selected(args, f"d={d_}, dv={dv_}"):
            continue
        c2 = Case(b, n_, hq, hkv, d_, dv_, dtype, device)

        def ours_make(c=c2):
            def make():
                (q, k, v), do = c.flash()
                return (lambda: fat.flash_attn_func(q, k, v, causal=True)), (q, k, v), do
            return make

        # d = 512: no fused SDPA kernel takes enable_gqa there (see Case.bhnd).
        repeat = d_ > 256

        def peer_make(c=c2, repeat=repeat):
            def make():
                (q, k, v), do = c.bhnd(repeat_kv=repeat)
                return (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=not repeat)), \
                    (q, k, v), do
            return make
        peer_name = "sdpa (default backend, K/V repeated)" if repeat else "sdpa (default backend)"
        rows.append(measure(ms, f"d={d_}, dv={dv_}", c2, dict(causal=True),
                            [("flashattn_triton", ours_make()), (peer_name, peer_make())]))
        del c2
    return rows


def selected(args, name: str) -> bool:
    """Whether the variant row `name` is among --only's (all rows without it);
    a combined row ("sinks+dropout 0.1") only by a word with its "+"."""
    words = [w.strip().lower() for w in args.only.split(",") if w.strip()]
    return not args.only or any(w in name.lower() and ("+" in w or "+" not in name) for w in words)


NO_PEER = False  # --no-peer: time our rows only


def measure(ms, name, case, shape, providers):
    row = dict(variant=name, batch=case.b, seqlen=case.n, heads_q=case.hq, heads_kv=case.hkv,
               head_dim=case.d, head_dim_v=case.dv, causal=shape.get("causal", False))
    flops = case.flops(shape.get("causal", False), shape.get("window"), shape.get("chunk"))
    for label, make in providers:
        if NO_PEER and label != "flashattn_triton":
            continue
        key = "ours" if label == "flashattn_triton" else "peer"
        row[f"{key}_provider"] = label
        try:
            run_provider(ms, make, row, key, flops)
        except Exception as exc:  # noqa: BLE001 - a peer may not support the case
            row[f"{key}_error"] = C.short_error(exc)
            if C.is_oom(exc):
                C.free_cuda_memory()
    for m in ("fwd", "bwd"):
        o, p = row.get(f"ours_{m}_ms"), row.get(f"peer_{m}_ms")
        row[f"speedup_{m}"] = p / o if o and p else None
    print(row, flush=True)
    return row


def window_rows(args, ms, device):
    """Time against the window size at a fixed length: O(N * window)."""
    import torch
    import flashattn_triton as fat

    n = 64 if args.smoke else args.sweep_seqlen
    case = Case(1, n, 16 if not args.smoke else 2, 4 if not args.smoke else 1, 128 if not args.smoke else 16,
                128 if not args.smoke else 16, torch.bfloat16, device)
    flex, block_mask, _ = flex_fn(compiled=device == "cuda")
    windows = [8, 16, 32, None] if args.smoke else [128, 256, 512, 1024, 2048, 4096, 8192, None]
    rows = []
    for w in windows:
        def ours(w=w):
            def make():
                (q, k, v), do = case.flash()
                ws = (-1, 0) if w is None else (w, 0)
                return (lambda: fat.flash_attn_func(q, k, v, causal=True, window_size=ws)), (q, k, v), do
            return make

        def window_mm(bi, h, qi, ki, w=w):
            keep = qi >= ki
            return keep if w is None else keep & (qi - ki <= w)

        def peer(mm=window_mm):
            bm = block_mask(mm, n, device)

            def make():
                (q, k, v), do = case.bhnd()
                return (lambda: flex(q, k, v, block_mask=bm, enable_gqa=True)), (q, k, v), do
            return make
        row = measure(ms, f"window {w if w is not None else 'full causal'}", case,
                      dict(causal=True, window=w), [("flashattn_triton", ours()), ("flex block_mask", peer())])
        row["window"] = w if w is not None else n
        rows.append(row)
    base = [r for r in rows if r.get("ours_fwd_ms")]
    for r in base:  # time per visible score, relative to the smallest window: ~constant if O(N * window)
        vis = case.flops(True, r["window"] if r["window"] < n else None)
        r["ours_fwd_ns_per_mflop"] = r["ours_fwd_ms"] / vis * 1e12 if vis else None
        r["ours_bwd_ns_per_mflop"] = r["ours_bwd_ms"] / vis * 1e12 if r.get("ours_bwd_ms") else None
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--head-dim", type=int, default=128, help="head dim of the variant table")
    ap.add_argument("--heads", default="16,4", help="HQ,HKV of the variant table")
    ap.add_argument("--not-causal", action="store_true", help="the plain and dropout rows without a causal mask")
    ap.add_argument("--shapes", default="", help="';'-separated B,N,Hq,Hkv,d,causal: the selected variant rows at "
                    "each shape in turn (replacing --batch, --seqlen, --heads, --head-dim, --not-causal)")
    ap.add_argument("--window", type=int, default=1024, help="window of the variant table's window row")
    ap.add_argument("--chunk", type=int, default=1024, help="chunk size of the variant table's chunked row")
    ap.add_argument("--sweep-seqlen", type=int, default=16384)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rep", type=int, default=50)
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run of the plumbing (needs TRITON_INTERPRET=1)")
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated substrings of the variant rows to run "
                    "(case-insensitive, e.g. 'plain,dropout'); implies --skip-sweep")
    ap.add_argument("--no-peer", action="store_true", help="time our rows only (no peer columns)")
    args = ap.parse_args()
    args.skip_sweep = args.skip_sweep or bool(args.only)
    global NO_PEER
    NO_PEER = args.no_peer
    device = "cpu" if args.smoke else "cuda"
    if not args.smoke:
        C.require_cuda("bench_variants.py")
    ms = timer(device, args.warmup, args.rep)
    rows = []
    for shape in filter(None, args.shapes.split(";")) if args.shapes else [None]:
        if shape:
            b, n, hq, hkv, d, causal = map(int, shape.split(","))
            args.batch, args.seqlen, args.heads, args.head_dim, args.not_causal = b, n, f"{hq},{hkv}", d, not causal
        rows += variant_rows(args, ms, device)
    if not rows:
        raise SystemExit(f"--only {args.only!r} selects no variant row")
    sweep = [] if args.skip_sweep else window_rows(args, ms, device)
    env = C.collect_env()
    args.out.mkdir(parents=True, exist_ok=True)
    C.write_json(args.out / "bench_variants.json", dict(env=env, args=vars(args), variants=rows, window_sweep=sweep))

    def f(x, digits=3):
        return C.fmt_num(x, digits)

    def name(r):
        if not args.shapes:
            return r["variant"]
        return (f"{r['variant']} (B={r['batch']} N={r['seqlen']} Hq={r['heads_q']} Hkv={r['heads_kv']} "
                f"d={r['head_dim']}{' causal' if r['causal'] else ''})")
    table = [[name(r), r.get("peer_provider", ""), f(r.get("ours_fwd_ms")), f(r.get("peer_fwd_ms")),
              f(r.get("speedup_fwd"), 2), f(r.get("ours_bwd_ms")), f(r.get("peer_bwd_ms")),
              f(r.get("speedup_bwd"), 2), r.get("ours_error", "") or r.get("peer_error", "")] for r in rows]
    short = (f"bf16, causal unless a mask is given, B={rows[0]['batch']}, N={rows[0]['seqlen']} "
             f"(d=512: N/2), Hq={rows[0]['heads_q']}, Hkv={rows[0]['heads_kv']}, d={rows[0]['head_dim']} "
             "unless stated; ms (median), speedup = peer ms / ours ms; "
             "bwd = backward only.\n\n"
             + C.md_table(["variant", "peer", "ours fwd", "peer fwd", "fwd x", "ours bwd", "peer bwd", "bwd x",
                           "error"], table))
    details = ""
    if sweep:
        stable = [[r["window"], f(r.get("ours_fwd_ms")), f(r.get("peer_fwd_ms")), f(r.get("ours_bwd_ms")),
                   f(r.get("peer_bwd_ms")), f(r.get("ours_fwd_ns_per_mflop"), 2), f(r.get("ours_bwd_ns_per_mflop"), 2),
                   r.get("ours_error", "") or r.get("peer_error", "")] for r in sweep]
        details = (f"### Sliding window, causal, B=1, N={sweep[0]['seqlen']}, Hq={sweep[0]['heads_q']}, "
                   f"Hkv={sweep[0]['heads_kv']}, d={sweep[0]['head_dim']}\n\n"
                   "Time should grow with the window (O(N * window)); ns per MFLOP of visible "
                   "scores stays roughly constant when it does.\n\n"
                   + C.md_table(["window", "ours fwd ms", "flex fwd ms", "ours bwd ms", "flex bwd ms",
                                 "ours fwd ns/MFLOP", "ours bwd ns/MFLOP", "error"], stable))
    C.write_markdown(args.out / "bench_variants.md", "Attention variants (bench_variants.py)", env, short, details)
    print(short)
    print(details)


if __name__ == "__main__":
    main()
