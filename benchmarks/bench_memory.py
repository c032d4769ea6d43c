#!/usr/bin/env python3
"""Peak extra GPU memory of one attention forward+backward against sequence length.

For each provider (flashattn_triton, SDPA flash, naive) and N = 1k, 2k, ..., 128k
(B=1, H=16, d=128, causal, bf16): warm up once (autotuning, library workspaces),
then reset the peak counter and record

    extra = torch.cuda.max_memory_allocated() - memory allocated before the call

for out = attn(q, k, v); out.backward(dout). The inputs q, k, v, dout are allocated
before, so "extra" is the output, every temporary and the three input gradients.
FlashAttention-style kernels grow O(N); naive attention materialises N x N scores
and grows O(N^2) until it runs out of memory (larger N are then not tried).
Writes bench_memory.json, bench_memory.md and bench_memory.png into --out.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C  # noqa: E402

DEFAULT_SEQLENS = [1024 * 2**i for i in range(8)]  # 1k .. 128k
DEFAULT_PROVIDERS = [C.OURS, "sdpa_flash", "naive"]
COLORS = {C.OURS: "tab:red", "sdpa_flash": "tab:blue", "naive": "tab:brown",
          "sdpa_efficient": "tab:purple", "sdpa_cudnn": "tab:green", "sdpa_math": "tab:gray",
          "flex": "tab:orange"}
MIB = 2**20


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=C.DEFAULT_OUT, help="results folder (default: %(default)s)")
    p.add_argument("--providers", default=",".join(DEFAULT_PROVIDERS),
                   help="comma list (default %(default)s; flex is not offered here)")
    p.add_argument("--seqlens", default=",".join(map(str, DEFAULT_SEQLENS)), help="comma list")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", choices=C.DTYPE_NAMES, default="bf16")
    p.add_argument("--no-causal", action="store_true", help="full (non-causal) attention")
    p.add_argument("--max-seconds", type=float, default=50.0,
                   help="stop starting new measurements after this (default %(default)s)")
    p.add_argument("--autotune", action="store_true",
                   help="let flashattn_triton autotune (default off, FLASHATTN_TRITON_AUTOTUNE=0: the "
                        "launch config does not change what is allocated, and tuning every N bucket "
                        "would cost most of the time budget)")
    p.add_argument("--no-plot", action="store_true")
    return p.parse_args(argv)


def measure_peak(provider: str, cfg: C.AttnConfig) -> int:
    """Bytes allocated on top of the inputs during one forward+backward."""
    import torch

    attn, context = C.build_attention(provider, cfg)
    q, k, v = C.make_qkv(cfg, C.provider_layout(provider), requires_grad=True)
    dout = torch.randn_like(q)  # the output has q's shape in every layout here
    with context():
        attn(q, k, v).backward(dout)  # warm-up: autotuning and workspaces stay out of the peak
        q.grad = k.grad = v.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        attn(q, k, v).backward(dout)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before


def input_bytes(cfg: C.AttnConfig) -> int:
    elem = 2 if cfg.dtype in ("bf16", "fp16") else 4
    per_q = cfg.batch * cfg.heads_q * cfg.seqlen_q * cfg.head_dim * elem
    per_kv = cfg.batch * cfg.heads_kv * cfg.seqlen_k * cfg.head_dim * elem
    return 2 * per_q + 2 * per_kv  # q, dout, k, v


def make_row(provider: str, cfg: C.AttnConfig, status: str, peak: int | None = None,
             error: str | None = None) -> dict:
    row = {"provider": provider, **cfg.as_dict(), "status": status,
           "peak_extra_bytes": peak, "peak_extra_mib": round(peak / MIB, 2) if peak is not None else None,
           "input_bytes": input_bytes(cfg)}
    if error:
        row["error"] = error
    return row


def run_sweep(args, providers: list[str], seqlens: list[int]) -> list[dict]:
    budget = C.Budget(args.max_seconds)
    rows = []
    for provider in providers:
        stop_reason = None
        for n in seqlens:
            cfg = C.AttnConfig(args.dtype, args.head_dim, not args.no_causal, args.batch,
                               args.heads, args.heads, n, n)
            if stop_reason is None and budget.exhausted():
                stop_reason = f"skipped: time budget exhausted (--max-seconds {args.max_seconds:.0f})"
            if stop_reason:
                rows.append(make_row(provider, cfg, "skipped", error=stop_reason))
                continue
            t0 = time.monotonic()
            try:
                row = make_row(provider, cfg, "ok", measure_peak(provider, cfg))
            except Exception as exc:  # noqa: BLE001 - recorded as a row
                oom = C.is_oom(exc)
                row = make_row(provider, cfg, "oom" if oom else "error", error=C.short_error(exc))
                if oom:
                    stop_reason = f"not tried: {provider} ran out of memory at N={n}"
            C.free_cuda_memory()
            ok, why = C.cuda_still_usable()
            if not ok:
                stop_reason = f"skipped: CUDA context unusable after: {why}"
            row["wall_s"] = round(time.monotonic() - t0, 2)
            rows.append(row)
            shown = f"{row['peak_extra_mib']:10.1f} MiB" if row["status"] == "ok" else row["error"]
            print(f"{provider:<16} N={n:<7} {shown}", flush=True)
    return rows


def growth_exponent(rows: list[dict], provider: str) -> float | None:
    """Least-squares slope of log(extra) against log(N) over the successful points."""
    pts = [(math.log(r["seqlen_q"]), math.log(r["peak_extra_bytes"])) for r in rows
           if r["provider"] == provider and r["status"] == "ok" and r["peak_extra_bytes"]]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    var = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / var if var else None


def markdown(rows: list[dict], providers: list[str], seqlens: list[int]) -> str:
    by = {(r["provider"], r["seqlen_q"]): r for r in rows}
    table = []
    for n in seqlens:
        line = [C.n_label(n)]
        for p in providers:
            r = by.get((p, n))
            if r is None:
                line.append("")
            elif r["status"] == "ok":
                line.append(f"{r['peak_extra_mib']:.0f}")
            else:
                line.append({"oom": "OOM", "skipped": "-"}.get(r["status"], "error"))
        inputs = next((r["input_bytes"] for r in rows if r["seqlen_q"] == n), 0)
        table.append(line + [f"{inputs / MIB:.0f}"])
    exps = [f"{p}: {e:.2f}" for p in providers if (e := growth_exponent(rows, p)) is not None]
    r0 = rows[0] if rows else {}
    text = (f"Peak extra memory (MiB) of one forward+backward, B={r0.get('batch')}, H={r0.get('heads_q')}, "
            f"d={r0.get('head_dim')}, {'causal' if r0.get('causal') else 'non-causal'}, {r0.get('dtype')}; "
            "extra = output + temporaries + input gradients (q, k, v, dout excluded):\n\n"
            + C.md_table(["N"] + providers + ["inputs q,k,v,dout"], table))
    if exps:
        text += ("\n\nFitted growth exponent of extra memory in N (1 = linear, 2 = quadratic): "
                 + ", ".join(exps) + ".")
    errors = sorted({(r["provider"], r["error"]) for r in rows if r["status"] == "error"})
    if errors:
        text += "\n\nErrors:\n" + "\n".join(f"- {p}: {e}" for p, e in errors)
    return text


def plot(rows: list[dict], providers: list[str], path: Path, gpu_bytes: int | None) -> Path | None:
    plt = C.import_pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 5))
    anchors = {}
    for p in providers:
        pts = sorted((r["seqlen_q"], r["peak_extra_bytes"] / MIB) for r in rows
                     if r["provider"] == p and r["status"] == "ok")
        if pts:
            ours = p == C.OURS
            ax.plot(*zip(*pts), marker="o", color=COLORS.get(p), lw=2.4 if ours else 1.4,
                    ms=6 if ours else 4, zorder=3 if ours else 2, label=p)
            anchors[p] = pts[0]
        oom = [r["seqlen_q"] for r in rows if r["provider"] == p and r["status"] == "oom"]
        if oom and pts:
            ax.annotate(f"{p}: OOM at N={C.n_label(oom[0])}", xy=pts[-1], xytext=(8, -4),
                        textcoords="offset points", fontsize=8, color=COLORS.get(p))
    ns = sorted({r["seqlen_q"] for r in rows})
    # Reference slopes, offset from the first point so they do not hide the data.
    for p, slope, offset, style in ((C.OURS, 1, 0.5, "--"), ("naive", 2, 2.0, ":")):
        if p in anchors and ns:
            n0, m0 = anchors[p]
            ax.plot(ns, [offset * m0 * (n / n0) ** slope for n in ns], style, color="gray", lw=1,
                    label=f"O(N{'^2' if slope == 2 else ''}) reference")
    if gpu_bytes:
        ax.axhline(gpu_bytes / MIB, color="black", lw=0.8, alpha=0.5)
        ax.text(ns[0] if ns else 1, gpu_bytes / MIB * 1.1, "GPU memory", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ns, [C.n_label(n) for n in ns])
    ax.minorticks_off()
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("peak extra memory, fwd+bwd (MiB)")
    r0 = rows[0]
    ax.set_title(f"Attention memory vs N (B={r0['batch']}, H={r0['heads_q']}, d={r0['head_dim']}, "
                 f"{'causal' if r0['causal'] else 'full'}, {r0['dtype']})", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    args = parse_args(argv)
    providers = C.parse_list(args.providers, str, [p for p in C.PROVIDERS if p != "flex"], "provider")
    seqlens = C.parse_list(args.seqlens, int)
    C.require_cuda("bench_memory.py")
    if not args.autotune:
        os.environ["FLASHATTN_TRITON_AUTOTUNE"] = "0"
    import torch

    torch.manual_seed(0)
    env = C.collect_env()
    print(C.env_line(env), flush=True)
    rows = run_sweep(args, providers, seqlens)
    gpu_bytes = torch.cuda.get_device_properties(0).total_memory
    out = args.out
    C.write_json(out / "bench_memory.json", {"env": env, "run": {
        "batch": args.batch, "heads": args.heads, "head_dim": args.head_dim, "dtype": args.dtype,
        "causal": not args.no_causal, "providers": providers, "seqlens": seqlens,
        "gpu_memory_bytes": gpu_bytes, "ours_autotune": args.autotune,
        "definition": "max_memory_allocated after reset_peak_memory_stats minus memory_allocated "
                      "before one out=attn(q,k,v); out.backward(dout), after one warm-up call"},
        "rows": rows})
    text = markdown(rows, providers, seqlens)
    C.write_markdown(out / "bench_memory.md", "Attention memory vs sequence length", env, text)
    print(text)
    if not args.no_plot and any(r["status"] == "ok" for r in rows):
        png = plot(rows, providers, out / "bench_memory.png", gpu_bytes)
        if png:
            print(f"wrote {png}")
    print(f"wrote {out / 'bench_memory.json'} and {out / 'bench_memory.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
