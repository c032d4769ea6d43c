"""Decoding bandwidth: one query token against a KV cache, K+V bytes read per second.

For each batch size B and cache length N (every sequence full, Hq=32, Hkv=8,
d=128, bf16 by default) it times

* ours (`flash_attn_with_kvcache`, automatic split count) on a contiguous
  cache and on paged caches (16- and 256-token pages, shuffled block tables);
* SDPA with a q of one token against the same cache (flash and cuDNN backends,
  forced, `enable_gqa=True`; K/V are views of our (B, N, Hkv, d) cache);
* FlexAttention (compiled once per shape, so only on a subset of lengths
  unless --flex-all);

and, in the same run, the device copy bandwidth (`dst.copy_(src)` and an
elementwise kernel that moves the same bytes, counting bytes read + written;
the fastest over the --copy-gb buffer sizes) as the ceiling.

Timing: every provider's call is captured in a CUDA graph (so host overhead
is excluded, as in a serving engine's captured decode step) and replayed;
when one cache is smaller than --l2-bytes the graph cycles through several
copies of it so that the reads come from HBM, not L2.  The figure reported
is K+V bytes of one call divided by the median time of one call.

Writes bench_decode.json and bench_decode.md to --out.  Runs only on CUDA;
--help and --dry-run work anywhere.  Example (from the repository root):

    PYTHONPATH=. python benchmarks/bench_decode.py --out /tmp/out
    PYTHONPATH=. python benchmarks/bench_decode.py --quick --out /tmp/out
    PYTHONPATH=. python benchmarks/bench_decode.py --configs "BLOCK_N=64,num_warps=4,num_stages=3;BLOCK_N=128,num_warps=4,num_stages=2"
    PYTHONPATH=. python benchmarks/bench_decode.py --batches 1,8 --layouts contiguous --variants default,deep,fill+pdl

--variants times ours once per candidate variant of kernels/decode.py
(FLASHATTN_TRITON_DECODE_VARIANT; '+' joins several, 'default' is none): a
column "ours contiguous {deep}" per variant, its split count as the variant
picks it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C  # noqa: E402

FULL_SEQLENS = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
QUICK_SEQLENS = (1024, 8192, 65536)
BATCHES = (1, 8, 64)
LAYOUTS = ("contiguous", "paged16", "paged256")
PEERS = ("sdpa_flash", "sdpa_cudnn", "flex")
# A gauge beside the peers: an elementwise copy that moves (reads + writes) as many bytes as the
# decoding step reads, in the same graph of `copies` calls: what those bytes cost at that size
# outside attention (launch, ramp and drain included), against the large-buffer copy ceiling.
COPY_GAUGE = "copy_same_bytes"
FLEX_SEQLENS = (8192, 65536)
DECODE_ENV = "FLASHATTN_TRITON_CONFIG_DECODE"
COMBINE_ENV = "FLASHATTN_TRITON_DECODE_COMBINE"
VARIANT_ENV = "FLASHATTN_TRITON_DECODE_VARIANT"
DEVICE = "cuda"  # "cpu" only for --smoke-cpu


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=C.DEFAULT_OUT, help="results folder (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help=f"N in {QUICK_SEQLENS} only")
    p.add_argument("--batches", default=",".join(map(str, BATCHES)), help="comma list (default %(default)s)")
    p.add_argument("--seqlens", help="comma list of cache lengths (default 1k..128k, powers of two)")
    p.add_argument("--heads-q", type=int, default=32)
    p.add_argument("--heads-kv", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--layouts", default=",".join(LAYOUTS), help="ours: comma list of contiguous,pagedP")
    p.add_argument("--peers", default=",".join(PEERS), help="comma list from sdpa_flash,sdpa_cudnn,flex")
    p.add_argument("--no-copy-gauge", dest="copy_gauge", action="store_false",
                   help=f"leave out the {COPY_GAUGE} column (a copy moving the bytes each row reads)")
    p.add_argument("--flex-all", action="store_true", help=f"FlexAttention at every length (default {FLEX_SEQLENS})")
    p.add_argument("--configs", help="';'-separated decode launch configs to sweep for ours, each as "
                                     f"{DECODE_ENV} takes it (default: the library's)")
    p.add_argument("--splits", default="0", help="comma list of num_splits for ours (0 = automatic)")
    p.add_argument("--sinks", action="store_true", help="also time ours with attention sinks (gpt-oss), "
                                                       "one random logit per query head")
    p.add_argument("--combine", default="default",
                   help="comma list from default,fused,separate,gathered: where ours merges the split partials "
                        "(each but 'default', the library's choice per batch, sets FLASHATTN_TRITON_DECODE_COMBINE)")
    p.add_argument("--variants", default=None,
                   help="comma list of candidate decode variants for ours (kernels/decode.py VARIANTS, "
                        f"'+' joins several, 'default' the library's defaults); each sets {VARIANT_ENV} "
                        "while it is timed, so the variable itself must be unset (default: 'default')")
    p.add_argument("--l2-bytes", type=float, default=256e6,
                   help="cycle through cache copies until a graph reads at least this many bytes")
    p.add_argument("--copy-gb", default="0.25,1,4",
                   help="comma list of buffer sizes (GB) of the copy ceiling; the fastest size sets it")
    p.add_argument("--reps", type=int, default=15, help="timed graph replays per measurement")
    p.add_argument("--max-seconds", type=float, default=420.0, help="stop starting new shapes after this")
    p.add_argument("--dry-run", action="store_true", help="list the measurements and exit")
    p.add_argument("--render", type=Path, metavar="RESULTS.json", help="rewrite the markdown of a JSON")
    p.add_argument("--smoke-cpu", action="store_true",
                   help="plumbing check without a GPU: tiny shapes on CPU tensors (run with TRITON_INTERPRET=1), "
                        "wall-clock timing instead of CUDA graphs; the numbers mean nothing")
    return p.parse_args(argv)


def ints(text):
    return [int(x) for x in str(text).split(",") if x.strip()]


def shapes(args):
    seqlens = ints(args.seqlens) if args.seqlens else list(QUICK_SEQLENS if args.quick else FULL_SEQLENS)
    return [(b, n) for b in ints(args.batches) for n in seqlens]


def kv_bytes(batch, n, h_kv, d, elem=2):
    return 2 * batch * n * h_kv * d * elem


# --------------------------------------------------------------------------- timing

def time_graph(fns, reps):
    """Median ms per call of the calls in ``fns`` (each a zero-argument
    callable), captured back to back in one CUDA graph."""
    import torch

    if DEVICE == "cpu":  # --smoke-cpu: plain wall clock
        fns[0]()
        t0 = time.perf_counter()
        for fn in fns:
            fn()
        return (time.perf_counter() - t0) * 1e3 / len(fns)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in fns[:2]:  # compile / autotune / allocate outside the capture
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in fns:
            fn()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / len(fns))
    del graph
    return statistics.median(times)


def copy_ceiling(gb, reps, how="copy_"):
    """(GB/s counting read + write, ms) of copying a gb-sized bf16 buffer:
    ``how`` "copy_" is dst.copy_(src) (a memcpy node in the captured graph),
    "kernel" an elementwise kernel that reads and writes the same bytes
    (torch.mul(src, 1, out=dst))."""
    import torch

    n = int(gb * 1e9) // 2
    src = torch.empty(n, dtype=torch.bfloat16, device=DEVICE).normal_()
    dst = torch.empty_like(src)
    fn = (lambda: dst.copy_(src)) if how == "copy_" else (lambda: torch.mul(src, 1, out=dst))
    ms = time_graph([fn], reps)
    del src, dst
    C.free_cuda_memory()
    return 2 * n * 2 / (ms * 1e-3) / 1e9, ms


def copy_ceilings(sizes_gb, reps):
    """The copy ceiling: the fastest of copy_ceiling over ``sizes_gb`` and both
    ways of copying, as dict(gbps, ms, gb, how, sizes=[dict(gb, how, gbps, ms),
    ...]).  On the H200 a captured bf16 ``copy_`` moved 2.70 / 2.74 / 2.77 TB/s
    (read + write) at 0.25 / 1 / 4 GB (session 32): below the 4.2 TB/s of
    ../shared/h200-peers and below what decoding itself reads (4.5 TB/s at
    B = 8).  The likeliest reason is that a captured device-to-device copy_
    becomes a memcpy node, not a kernel, hence the elementwise kernel beside
    it.  docs/decode.md takes the bar as 85 % of 4.2 TB/s."""
    sizes = []
    for gb in sizes_gb:
        for how in ("copy_", "kernel"):
            gbps, ms = copy_ceiling(gb, reps, how)
            sizes.append(dict(gb=gb, how=how, gbps=gbps, ms=ms))
    best = max(sizes, key=lambda x: x["gbps"])
    return dict(best, sizes=sizes)


# --------------------------------------------------------------------------- caches

def page_size(layout):
    """Tokens per page of a "pagedP" layout; 0 for "contiguous"."""
    return int(layout[len("paged"):]) if layout.startswith("paged") else 0


def make_caches(batch, n, h_kv, d, dtype, layout, copies):
    """``copies`` independent caches of one layout; each a dict with k, v and block_table."""
    import torch

    out = []
    for _ in range(copies):
        if layout == "contiguous":
            k = torch.empty(batch, n, h_kv, d, dtype=dtype, device=DEVICE).normal_()
            v = torch.empty_like(k).normal_()
            out.append(dict(k=k, v=v, block_table=None))
        else:
            page = page_size(layout)
            blocks = math.ceil(n / page)
            k = torch.empty(batch * blocks, page, h_kv, d, dtype=dtype, device=DEVICE).normal_()
            v = torch.empty_like(k).normal_()
            table = torch.randperm(batch * blocks, device=DEVICE).to(torch.int32).view(batch, blocks)
            out.append(dict(k=k, v=v, block_table=table))
    return out


def our_call(q, cache, lens, splits, sinks=None):
    from flashattn_triton._kvcache import flash_attn_with_kvcache

    return lambda: flash_attn_with_kvcache(q, cache["k"], cache["v"], cache_seqlens=lens,
                                           block_table=cache["block_table"], num_splits=splits, sinks=sinks)


def peer_call(provider, q_bhnd, cache):
    """SDPA / flex on (B, H, N, d) views of the (B, N, Hkv, d) cache."""
    import torch

    k, v = cache["k"].transpose(1, 2), cache["v"].transpose(1, 2)
    if provider.startswith("sdpa"):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, C.SDPA_BACKENDS[provider])
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def call():
            with sdpa_kernel(backend):
                return sdpa(q_bhnd, k, v, enable_gqa=True)
        return call
    if provider == "flex":
        flex = C.compiled_flex(False)
        return lambda: flex(q_bhnd, k, v, enable_gqa=True)
    raise ValueError(provider)


def spot_check(q, cache, lens, n, sinks=None):
    """max |ours - float32 reference| on one cache (every sequence full): SDPA,
    or with sinks the softmax over [scores, sink] with the sink's column dropped."""
    import torch

    out = our_call(q, cache, lens, 0, sinks)().float()
    k, v, table = cache["k"], cache["v"], cache["block_table"]
    if table is not None:  # the logical (B, N, Hkv, d) view of a paged cache
        k = k[table.long()].flatten(1, 2)[:, :n]
        v = v[table.long()].flatten(1, 2)[:, :n]
    qt, kt, vt = (t.transpose(1, 2).float() for t in (q, k, v))
    if sinks is None:
        ref = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
    else:
        group = qt.shape[1] // kt.shape[1]
        kt, vt = kt.repeat_interleave(group, 1), vt.repeat_interleave(group, 1)
        s = qt @ kt.transpose(-1, -2) * qt.shape[-1] ** -0.5
        s = torch.cat([s, sinks.float()[None, :, None, None].expand(*s.shape[:-1], 1)], -1)
        ref = torch.softmax(s, -1)[..., :-1] @ vt
    return (out - ref.transpose(1, 2)).abs().max().item()


def num_splits_used(batch, h_q, h_kv, d, n, dtype, layout="contiguous"):
    """(automatic split count, launch config, merge) of ours as
    decode_attention plans it for ``layout`` (with the variants and the
    merge of the environment)."""
    from flashattn_triton.kernels import decode
    import torch

    plan = decode.decode_plan(batch, h_q // h_kv, h_kv, d, n, dtype, torch.device(DEVICE), 0, page_size(layout))
    return plan.num_splits, plan.config, plan.merge


# --------------------------------------------------------------------------- run

def run(args):
    import torch

    if args.variants is None and os.environ.get(VARIANT_ENV):
        # Each timed variant sets the variable; a value from outside would be silently replaced.
        raise SystemExit(f"bench_decode.py: {VARIANT_ENV}={os.environ[VARIANT_ENV]!r} is set; pass the variants "
                         f"to time as --variants (e.g. --variants {os.environ[VARIANT_ENV].replace(',', '+')}) "
                         "and unset the variable")
    if "default" in args.combine.split(",") and os.environ.get(COMBINE_ENV):
        # "default" times the library's own choice, which a value from outside would replace.
        raise SystemExit(f"bench_decode.py: {COMBINE_ENV}={os.environ[COMBINE_ENV]!r} is set; pass it as "
                         f"--combine {os.environ[COMBINE_ENV]} and unset the variable")
    if DEVICE == "cuda":
        C.require_cuda("bench_decode.py")
    dtype = C.torch_dtype(args.dtype)
    elem = torch.finfo(dtype).bits // 8  # bytes per cache element
    h_q, h_kv, d = args.heads_q, args.heads_kv, args.head_dim
    layouts = [x for x in args.layouts.split(",") if x]
    peers = [x for x in args.peers.split(",") if x]
    configs = [c.strip() for c in args.configs.split(";")] if args.configs else [None]
    splits_list = ints(args.splits)
    combines = [x for x in args.combine.split(",") if x]
    variants = [x for x in (args.variants or "default").split(",") if x] or ["default"]
    # --sinks: ours also with gpt-oss attention sinks (one logit per query head)
    sinks_list = [None] + ([torch.randn(h_q, device=DEVICE)] if args.sinks else [])
    budget = C.Budget(args.max_seconds)
    env = C.collect_env()
    torch.manual_seed(0)

    copy = copy_ceilings([float(x) for x in str(args.copy_gb).split(",") if x.strip()], args.reps)
    copy_gbps = copy["gbps"]
    for c in copy["sizes"]:
        print(f"copy ({c['how']}): {c['gbps']:.0f} GB/s (read+write of {c['gb']:g} GB in {c['ms']:.3f} ms)",
              flush=True)
    print(f"copy ceiling: {copy_gbps:.0f} GB/s (the fastest, {copy['how']} of {copy['gb']:g} GB)", flush=True)
    rows = []
    checks = []
    pending_checks = []  # (batch, n, layout) to spot-check once every timing is taken
    cfg = None
    for batch, n in shapes(args):
        if budget.exhausted():
            rows.append(dict(batch=batch, seqlen=n, provider="*", layout="*",
                             error="skipped: time budget exhausted"))
            continue
        nbytes = kv_bytes(batch, n, h_kv, d, elem)
        copies = max(1, min(64, math.ceil(args.l2_bytes / nbytes)))
        lens = torch.full((batch,), n, dtype=torch.int32, device=DEVICE)
        qs = [torch.randn(batch, 1, h_q, d, device=DEVICE, dtype=dtype) for _ in range(copies)]

        def record(provider, layout, fns, extra=None):
            row = dict(batch=batch, seqlen=n, provider=provider, layout=layout, copies=copies,
                       kv_bytes=nbytes, **(extra or {}))
            try:
                ms = time_graph(fns, args.reps)
                row.update(ms=ms, gbps=nbytes / (ms * 1e-3) / 1e9)
                row["frac_copy"] = row["gbps"] / copy_gbps
            except Exception as exc:  # noqa: BLE001 - record and go on
                row["error"] = C.short_error(exc)
                ok, why = C.cuda_still_usable() if DEVICE == "cuda" else (True, "")
                if not ok:
                    raise RuntimeError(f"CUDA context lost after {provider}: {why}") from exc
            rows.append(row)
            shown = f"{row['gbps']:7.0f} GB/s ({row['frac_copy']:.0%} of copy)" if "gbps" in row else row["error"]
            print(f"B={batch:3d} N={C.n_label(n):>5s} {provider:>16s} {layout:>10s}: {shown}", flush=True)

        for layout in layouts:
            try:
                caches = make_caches(batch, n, h_kv, d, dtype, layout, copies)
            except Exception as exc:  # noqa: BLE001
                rows.append(dict(batch=batch, seqlen=n, provider=C.OURS, layout=layout, error=C.short_error(exc)))
                C.free_cuda_memory()
                continue
            for variant in variants:
                for config in configs:
                    for combine in combines:
                        with env_var(DECODE_ENV, config), \
                                env_var(COMBINE_ENV, None if combine == "default" else combine), \
                                env_var(VARIANT_ENV, variant.replace("+", ",")):
                            splits_auto, cfg_used, merge = num_splits_used(batch, h_q, h_kv, d, n, dtype, layout)
                            if variant == "default" and config is None:
                                cfg = cfg_used
                            for splits in splits_list:
                                for sinks in sinks_list:
                                    extra = dict(config=config, num_splits=splits if splits else splits_auto,
                                                 auto_splits=splits == 0, combine=combine, merge=merge,
                                                 sinks=sinks is not None, variant=variant,
                                                 launch=dict(cfg_used._asdict()))
                                    record(C.OURS, layout,
                                           [our_call(q, c, lens, splits, sinks) for q, c in zip(qs, caches)],
                                           extra)
            if layout == "contiguous":
                q_bhnd = [q.transpose(1, 2) for q in qs]
                for peer in peers:
                    if peer == "flex" and not args.flex_all and n not in FLEX_SEQLENS:
                        continue
                    record(peer, "contiguous", [peer_call(peer, qb, c) for qb, c in zip(q_bhnd, caches)])
            if nbytes <= 2e9:  # caches up to 2 GB: the check's float32 copy is twice that
                pending_checks.append((batch, n, layout))
            del caches
            C.free_cuda_memory()
        if args.copy_gauge:
            # nbytes / 2 read and as many written: nbytes moved, counted as the ceiling counts them.
            elems = nbytes // 2 // elem
            bufs = [(torch.empty(elems, dtype=dtype, device=DEVICE).normal_(), torch.empty(elems, dtype=dtype,
                                                                                          device=DEVICE))
                    for _ in range(copies)]
            record(COPY_GAUGE, "contiguous", [lambda src=src, dst=dst: torch.mul(src, 1, out=dst) for src, dst in bufs])
            del bufs
            C.free_cuda_memory()
        del qs, lens
        C.free_cuda_memory()

    # Correctness spot checks: our output against SDPA in float32 over the logical cache of
    # each layout, on fresh caches of the timed shapes, once every timing is taken.  Run
    # between the timings, a check slowed the graph timed after it by 12-15 % (session 66,
    # H100: cuDNN at B = 1, 128k keys 2490 GB/s timed right after one, 2934 otherwise;
    # docs/decode.md "A timing artifact").
    for batch, n, layout in pending_checks:
        if budget.exhausted():
            checks.append(dict(batch=batch, seqlen=n, layout=layout, error="skipped: time budget exhausted"))
            continue
        try:
            q = torch.randn(batch, 1, h_q, d, device=DEVICE, dtype=dtype)
            lens = torch.full((batch,), n, dtype=torch.int32, device=DEVICE)
            caches = make_caches(batch, n, h_kv, d, dtype, layout, 1)
            for sinks in sinks_list:
                checks.append(dict(batch=batch, seqlen=n, layout=layout, sinks=sinks is not None,
                                   max_abs_err_vs_fp32=spot_check(q, caches[0], lens, n, sinks)))
        except Exception as exc:  # noqa: BLE001
            checks.append(dict(batch=batch, seqlen=n, layout=layout, error=C.short_error(exc)))
        caches = []
        C.free_cuda_memory()

    payload = dict(env=env, settings=dict(heads_q=h_q, heads_kv=h_kv, head_dim=d, dtype=args.dtype,
                                          reps=args.reps, l2_bytes=args.l2_bytes, configs=configs,
                                          splits=splits_list, combine=combines, variants=variants,
                                          decode_config=dict(cfg._asdict()) if cfg else None),
                   copy=copy, rows=rows, checks=checks,
                   wall_s=budget.elapsed())
    args.out.mkdir(parents=True, exist_ok=True)
    C.write_json(args.out / "bench_decode.json", payload)
    write_md(payload, args.out / "bench_decode.md")
    print((args.out / "bench_decode.md").read_text())


@contextlib.contextmanager
def env_var(name, value):
    old = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if value is not None:
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


# --------------------------------------------------------------------------- report

def write_md(payload, path):
    rows = [r for r in payload["rows"] if "gbps" in r]
    copy = payload["copy"]["gbps"]
    s = payload["settings"]
    def ours_key(r):
        return (r["layout"], r.get("config"), r.get("num_splits") if not r.get("auto_splits") else "auto",
                r.get("combine", "default"), r.get("sinks", False), r.get("variant", "default"))

    ours_keys = sorted({ours_key(r) for r in rows if r["provider"] == C.OURS}, key=str)
    peers = [p for p in PEERS if any(r["provider"] == p for r in rows)]

    def ours_label(key):
        layout, config, splits, combine, sinks, variant = key
        label = f"ours {layout}" + (" +sinks" if sinks else "") + (f" {{{variant}}}" if variant != "default" else "")
        if config:
            label += f" [{config}]"
        if splits != "auto":
            label += f" s={splits}"
        if combine != "default":
            label += f" {combine} combine"
        return label

    table = {}
    for r in rows:
        if r["provider"] == C.OURS:
            key = ours_label(ours_key(r))
        else:
            key = r["provider"]
        table[(r["batch"], r["seqlen"], key)] = r
    gauges = [COPY_GAUGE] if any(r["provider"] == COPY_GAUGE for r in rows) else []
    cols = [ours_label(k) for k in ours_keys] + peers + gauges
    shapes_seen = sorted({(r["batch"], r["seqlen"]) for r in rows})
    body = []
    for b, n in shapes_seen:
        cells = []
        for c in cols:
            r = table.get((b, n, c))
            cells.append("" if r is None else f"{r['gbps']:.0f} ({r['frac_copy']:.0%})")
        best_peer = max((table[(b, n, p)]["gbps"] for p in peers if (b, n, p) in table), default=None)
        best_ours = max((table[(b, n, ours_label(k))]["gbps"] for k in ours_keys
                         if k[0] == "contiguous" and not k[4] and (b, n, ours_label(k)) in table), default=None)
        ratio = f"{best_ours / best_peer:.2f}x" if best_ours and best_peer else ""
        splits = next((r.get("num_splits") for r in rows if r["batch"] == b and r["seqlen"] == n
                       and r["provider"] == C.OURS and r.get("auto_splits")
                       and r.get("variant", "default") == "default"), "")
        body.append([b, C.n_label(n), splits] + cells + [ratio])
    headers = ["B", "N", "splits"] + cols + ["ours contiguous / best peer"]

    # The bars: >= 85% of copy at N >= 8k; >= every peer at B = 1 and 8.
    verdict = []
    for label in [ours_label(key) for key in ours_keys] + gauges:
        fr = [table[(b, n, label)]["frac_copy"] for b, n in shapes_seen if n >= 8192 and (b, n, label) in table]
        if fr:
            verdict.append(f"- {label}: min {min(fr):.0%}, median {statistics.median(fr):.0%} of copy over N >= 8k")
    lost = []
    for b, n in shapes_seen:
        if b not in (1, 8):
            continue
        ours = max((table[(b, n, ours_label(k))]["gbps"] for k in ours_keys
                    if k[0] == "contiguous" and not k[4] and (b, n, ours_label(k)) in table), default=None)
        for p in peers:
            r = table.get((b, n, p))
            if ours and r and r["gbps"] > ours:
                lost.append(f"B={b} N={C.n_label(n)} {p} {r['gbps']:.0f} > ours {ours:.0f} GB/s "
                            f"(ours {ours / r['gbps']:.4f}x)")
    if peers:
        verdict.append("- B = 1, 8, best of ours contiguous vs every peer: " +
                       ("ahead or equal everywhere" if not lost else "behind at " + "; ".join(lost)))
    errors = [f"- B={r['batch']} N={C.n_label(r['seqlen'])} {r['provider']} {r['layout']}: {r['error']}"
              for r in payload["rows"] if "error" in r]
    checks = [c for c in payload.get("checks") or [] if "max_abs_err_vs_fp32" in c]
    worst = max((c["max_abs_err_vs_fp32"] for c in checks), default=None)
    errors += [f"- spot check B={c['batch']} N={C.n_label(c['seqlen'])} {c['layout']}: {c['error']}"
               for c in payload.get("checks") or [] if "error" in c]
    short = (f"K+V bytes read per second, GB/s (and fraction of the copy ceiling, {copy:.0f} GB/s read+write "
             f"measured in the same run). Hq={s['heads_q']}, Hkv={s['heads_kv']}, d={s['head_dim']}, "
             f"{s['dtype']}, one query token, every sequence full, automatic split count (column 'splits'); "
             "CUDA-graph replays, median.\n\n"
             + C.md_table(headers, body) + "\n\n" + "\n".join(verdict))
    details = ""
    if worst is not None:
        details += (f"Spot check: max |ours - SDPA(float32)| over {len(checks)} (shape, layout) pairs: "
                    f"{worst:.2e}.\n\n")
    if errors:
        details += "Errors / skips:\n" + "\n".join(errors) + "\n"
    C.write_markdown(path, "Decoding bandwidth (bench_decode.py)", payload["env"], short, details)


def smoke_shapes(args):
    """--smoke-cpu's small shapes and settings, set on ``args``."""
    args.batches, args.seqlens, args.heads_q, args.heads_kv, args.head_dim = "1,2", "64,96", 4, 2, 32
    args.copy_gb, args.l2_bytes, args.reps = "0.01", 0, 1


def main(argv=None):
    args = parse_args(argv)
    if args.render:
        payload = json.loads(args.render.read_text())
        args.out.mkdir(parents=True, exist_ok=True)
        write_md(payload, args.out / "bench_decode.md")
        print((args.out / "bench_decode.md").read_text())
        return
    if args.dry_run:
        for b, n in shapes(args):
            print(f"B={b} N={C.n_label(n)}: {kv_bytes(b, n, args.heads_kv, args.head_dim) / 1e9:.3f} GB K+V, "
                  f"ours {args.layouts}, peers {args.peers}")
        return
    global DEVICE
    if args.smoke_cpu:
        DEVICE = "cpu"
        smoke_shapes(args)
    t0 = time.time()
    run(args)
    print(f"bench_decode.py: {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
