"""Packed variable-length batches on the GPU: our flash_attn_varlen_func against
padding to the longest document with our dense kernel, FlexAttention with a
document mask, and SDPA on nested (jagged) tensors.  Also our forward with
the keys and values in a paged pool (block_table; pages of 16 and 256 keys,
shuffled; forward only), beside the same call on packed K / V.

Documents have lengths drawn from 64..8192 (log-uniform, fixed seed) and are
packed until 32k tokens; causal, d=128, GQA 32/8, bf16.  Effective TFLOP/s
count useful FLOPs only: sum over documents of 4 * Hq * n^2 * d / 2 (causal),
x2.5 for the backward.

    python benchmarks/bench_varlen.py --out DIR [--tokens 32768] [--batches 3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C  # noqa: E402
# The rows that switch the Hopper tier's packed paths on (set around their runs):
# _dispatch.ENV_HOPPER_VARLEN (forward) and ENV_HOPPER_VARLEN_BWD (backward, opt-in).
ROW_ENV = {"ours varlen hopper": {"FLASHATTN_TRITON_HOPPER_VARLEN": "1"},
           "ours varlen hopper bwd": {"FLASHATTN_TRITON_HOPPER_VARLEN": "1", "FLASHATTN_TRITON_HOPPER_VARLEN_BWD": "1"}}


def doc_lengths(tokens: int, seed: int, lo: int = 64, hi: int = 8192):
    rng = random.Random(seed)
    lens, total = [], 0
    while total < tokens:
        n = int(math.exp(rng.uniform(math.log(lo), math.log(hi))))
        n = min(n, tokens - total)
        lens.append(n)
        total += n
    return lens


def paged_pools(k, v, lens, page: int, seed: int):
    """(k_pool, v_pool), block_table: the packed keys / values of documents of
    lengths ``lens`` copied into pools of ``page``-key pages in a shuffled
    order (one spare page), as a paged KV cache holds them."""
    import torch
    need = [(n + page - 1) // page for n in lens]
    pages = sum(need) + 1
    order = torch.randperm(pages, generator=torch.Generator().manual_seed(seed))
    k_pool = k.new_zeros(pages, page, *k.shape[1:])
    v_pool = v.new_zeros(pages, page, *v.shape[1:])
    table = torch.zeros(len(lens), max(need), dtype=torch.int32)
    start, used = 0, 0
    for b, (n, m) in enumerate(zip(lens, need)):
        ids = order[used:used + m]
        table[b, :m] = ids.to(torch.int32)
        for i, p in enumerate(ids.tolist()):
            rows = min(page, n - i * page)
            k_pool[p, :rows] = k[start + i * page:start + i * page + rows]
            v_pool[p, :rows] = v[start + i * page:start + i * page + rows]
        start, used = start + n, used + m
    return (k_pool, v_pool), table.to(k.device)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--batches", type=int, default=3, help="number of random packed batches (seeds)")
    ap.add_argument("--heads", default="32,8")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--doc-lengths", default="64,8192", help="LO,HI: document lengths log-uniform in [LO, HI]")
    ap.add_argument("--providers", default="", help="comma list of provider names to time (default: all)")
    ap.add_argument("--no-causal", action="store_true", help="documents attend all of themselves")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    import flashattn_triton as fat

    hq, hkv = (int(x) for x in args.heads.split(","))
    d, dt, dev = args.head_dim, torch.bfloat16, "cuda"
    rows = []
    for seed in range(args.batches):
        lens = doc_lengths(args.tokens, seed, *(int(x) for x in args.doc_lengths.split(",")))
        total, nmax, b = sum(lens), max(lens), len(lens)
        causal = not args.no_causal
        useful = sum(C.attn_flops(1, hq, n, n, d, causal) for n in lens)  # the one convention
        cu = torch.tensor([0] + list(__import__("itertools").accumulate(lens)), dtype=torch.int32, device=dev)
        q = torch.randn(total, hq, d, device=dev, dtype=dt, requires_grad=True)
        k = torch.randn(total, hkv, d, device=dev, dtype=dt, requires_grad=True)
        v = torch.randn(total, hkv, d, device=dev, dtype=dt, requires_grad=True)
        do = torch.randn_like(q)
        providers = {}
        providers["ours varlen"] = (lambda: fat.flash_attn_varlen_func(q, k, v, cu, cu, nmax, nmax, causal=causal),
                                    do, (q, k, v))
        # The same call with the Hopper forward's packed path switched on
        # (FLASHATTN_TRITON_HOPPER_VARLEN=1, set around this provider's runs).
        providers["ours varlen hopper"] = providers["ours varlen"]
        providers["ours varlen hopper bwd"] = providers["ours varlen"]
        for page in (16, 256):
            pools, table = paged_pools(k.detach(), v.detach(), lens, page, seed)

            def paged(pools=pools, table=table):
                with torch.no_grad():
                    return fat.flash_attn_varlen_func(q, *pools, cu, cu, nmax, nmax, causal=causal, block_table=table)
            providers[f"ours paged {page}"] = (paged, None, ())

        # Padded to the longest document: (B, nmax, H, d), our dense kernel.
        qp = torch.zeros(b, nmax, hq, d, device=dev, dtype=dt)
        kp = torch.zeros(b, nmax, hkv, d, device=dev, dtype=dt)
        vp = torch.zeros_like(kp)
        for i, (s, n) in enumerate(zip(cu[:-1].tolist(), lens)):
            qp[i, :n], kp[i, :n], vp[i, :n] = q.detach()[s:s + n], k.detach()[s:s + n], v.detach()[s:s + n]
        qp.requires_grad_(), kp.requires_grad_(), vp.requires_grad_()
        dop = torch.randn_like(qp)
        # Causal aligned top-left, as the documents start at row 0 of their pad.
        providers["ours padded"] = (lambda: fat.scaled_dot_product_attention(
            qp.transpose(1, 2), kp.transpose(1, 2), vp.transpose(1, 2), is_causal=causal,
            enable_gqa=True), dop.transpose(1, 2), (qp, kp, vp))

        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            doc = torch.repeat_interleave(torch.arange(b, device=dev), torch.tensor(lens, device=dev))

            def mask_mod(bi, h, qi, ki):
                return (doc[qi] == doc[ki]) & ((qi >= ki) | (not causal))
            bm = create_block_mask(mask_mod, 1, None, total, total, device=dev)
            flex = torch.compile(flex_attention)
            qf, kf, vf = (t.detach().transpose(0, 1)[None].requires_grad_() for t in (q, k, v))
            providers["flex doc mask"] = (lambda: flex(qf, kf, vf, block_mask=bm, enable_gqa=True),
                                          do.transpose(0, 1)[None], (qf, kf, vf))
        except Exception as exc:  # noqa: BLE001
            rows.append(dict(seed=seed, provider="flex doc mask", error=C.short_error(exc)))
        try:
            offs = cu.long()
            qn, kn, vn = (torch.nested.nested_tensor_from_jagged(t.detach(), offs).transpose(1, 2).requires_grad_()
                          for t in (q, k, v))
            dn = torch.nested.nested_tensor_from_jagged(do, offs).transpose(1, 2)
            providers["sdpa nested"] = (lambda: F.scaled_dot_product_attention(qn, kn, vn, is_causal=causal,
                                                                               enable_gqa=True), dn, (qn, kn, vn))
        except Exception as exc:  # noqa: BLE001
            rows.append(dict(seed=seed, provider="sdpa nested", error=C.short_error(exc)))

        wanted = [p for p in args.providers.split(",") if p]
        for name, spec in providers.items():
            if wanted and name not in wanted:
                continue
            fn, grad, leaves = spec
            saved = {var: os.environ.get(var) for var in ROW_ENV.get(name, {})}
            os.environ.update(ROW_ENV.get(name, {}))
            try:
                out = fn()
                # C.bench_ms: waits for ours' backward prefetch first; grad_to_none: no
                # AccumulateGrad add over dQ/dK/dV inside the timed backward.
                fwd_ms = C.bench_ms(fn, warmup=10, rep=40)
                row = dict(seed=seed, provider=name, docs=b, max_len=nmax, fwd_ms=fwd_ms,
                           fwd_tflops=useful / fwd_ms * 1e-9)
                if grad is not None:  # (the paged calls are forward only)
                    bwd_ms = C.bench_ms(lambda: out.backward(grad, retain_graph=True), warmup=10, rep=40,
                                        grad_to_none=list(leaves))
                    row.update(bwd_ms=bwd_ms, bwd_tflops=2.5 * useful / bwd_ms * 1e-9)
                rows.append(row)
            except Exception as exc:  # noqa: BLE001
                rows.append(dict(seed=seed, provider=name, error=C.short_error(exc)))
            finally:
                for var, value in saved.items():
                    if value is None:
                        os.environ.pop(var, None)
                    else:
                        os.environ[var] = value
            print(rows[-1], flush=True)
        del providers
        torch.cuda.empty_cache()
    env = C.collect_env()
    args.out.mkdir(parents=True, exist_ok=True)
    C.write_json(args.out / "bench_varlen.json", dict(env=env, rows=rows))
    table = [[r["seed"], r["provider"], r.get("docs", ""), r.get("max_len", ""),
              C.fmt_num(r.get("fwd_ms"), 3), C.fmt_num(r.get("fwd_tflops"), 0),
              C.fmt_num(r.get("bwd_ms"), 3), C.fmt_num(r.get("bwd_tflops"), 0), r.get("error", "")]
             for r in rows]
    short = C.md_table(["seed", "provider", "docs", "longest", "fwd ms", "fwd TFLOP/s (useful)",
                        "bwd ms", "bwd TFLOP/s (useful)", "error"], table)
    C.write_markdown(args.out / "bench_varlen.md", "Packed variable-length batches (bench_varlen.py)", env,
                     f"{args.tokens} tokens per batch, documents {args.doc_lengths.replace(',', '..')} (log-uniform, "
                     f"seeds 0..{args.batches - 1}), {'full' if args.no_causal else 'causal'}, Hq={hq}, Hkv={hkv}, "
                     f"d={d}, bf16.\n\n" + short)
    print(short)


if __name__ == "__main__":
    main()
