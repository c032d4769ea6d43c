"""End-to-end training benchmark: a GPT-2-small-sized model (124M parameters) with
its attention switched between eager (matmul-softmax-matmul), PyTorch SDPA and
flashattn_triton, bf16 autocast, one GPU.

Sections (all written to --out as bench_e2e.json, bench_e2e.md, bench_e2e.png):

1. throughput: training steps (forward, backward, AdamW) at sequence lengths 1k,
   4k, 16k with 16k tokens per step: tokens/s, peak memory, and the
   forward+backward time of the attention alone at the same shape, so the
   whole-step speedup sits next to the attention-only speedup.
2. loss: a few hundred steps at 1k context on the Python standard library's
   source (tokenised here, nothing downloaded), from the same initial weights
   and the same batches for every option: the curves should overlap.
3. longest: the longest context each option trains at (batch 1, one full
   training step) on this GPU: doubling from 8k, then bisection between the
   last success and the first out-of-memory, bounded in time (a trial slower
   than --trial-seconds stops the climb; the answer is then a lower bound).

    PYTHONPATH=. python benchmarks/bench_e2e.py --out DIR            # ~5 min on an H200
    PYTHONPATH=. python benchmarks/bench_e2e.py --quick --out DIR    # ~2 min
    PYTHONPATH=. python benchmarks/bench_e2e.py --smoke --out DIR    # CPU plumbing check, toy model

The model (examples/gpt.py) is GPT-2's (12 layers, 768 wide, 12 heads, GELU MLP,
tied 50304-token embedding) with rotary positions instead of a learned position
table.  No torch.compile: the rest of the step is plain PyTorch eager mode.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C  # noqa: E402

sys.path.insert(0, str(C.REPO_ROOT / "examples"))

ATTNS = ("eager", "sdpa", "ours")
LABEL = {"eager": "eager (matmul-softmax-matmul)", "sdpa": "PyTorch SDPA", "ours": "flashattn_triton"}
COLOR = {"eager": "tab:gray", "sdpa": "tab:blue", "ours": "tab:red"}
GIB = 1024 ** 3


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=C.DEFAULT_OUT)
    ap.add_argument("--quick", action="store_true", help="fewer steps, shorter search (~2 min)")
    ap.add_argument("--smoke", action="store_true", help="CPU, toy model, tiny lengths: checks the plumbing")
    ap.add_argument("--sections", default="throughput,loss,longest")
    ap.add_argument("--attns", default=",".join(ATTNS))
    ap.add_argument("--seqlens", default=None, help="throughput lengths (default 1024,4096,16384)")
    ap.add_argument("--tokens-per-step", type=int, default=None, help="default 16384")
    ap.add_argument("--loss-steps", type=int, default=None, help="default 300 (quick: 100)")
    ap.add_argument("--max-context", type=int, default=None, help="cap of the search (default 262144, quick 65536)")
    ap.add_argument("--trial-seconds", type=float, default=None,
                    help="a longest-context trial slower than this stops the climb (default 25, quick 8)")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="stop starting new work after this (default 330, quick 140)")
    return ap.parse_args(argv)


def settings(args):
    s = {
        "device": "cpu" if args.smoke else "cuda",
        "preset": "toy" if args.smoke else "gpt2-small",
        "seqlens": [64, 128] if args.smoke else [1024, 4096, 16384],
        "tokens_per_step": 256 if args.smoke else 16384,
        "warmup": 1 if args.smoke else 3, "timed": 2 if args.smoke else (5 if args.quick else 10),
        "loss_steps": 20 if args.smoke else (100 if args.quick else 300),
        "loss_seq": 64 if args.smoke else 1024, "loss_batch": 4 if args.smoke else 16, "lr": 6e-4,
        "corpus_bytes": 300_000 if args.smoke else (8_000_000 if args.quick else 16_000_000),
        "start_context": 64 if args.smoke else 8192,
        "max_context": 256 if args.smoke else (65536 if args.quick else 262144),
        "trial_seconds": 30.0 if args.smoke else (8.0 if args.quick else 25.0),
        "longest_seconds": 60.0 if args.smoke else (25.0 if args.quick else 75.0),
        "max_seconds": 600.0 if args.smoke else (140.0 if args.quick else 330.0),
    }
    if args.seqlens:
        s["seqlens"] = [int(x) for x in args.seqlens.split(",")]
    for key in ("tokens_per_step", "loss_steps", "max_context", "trial_seconds", "max_seconds"):
        if getattr(args, key) is not None:
            s[key] = getattr(args, key)
    return s


# --------------------------------------------------------------------------- helpers

def _sync(device):
    import torch
    if device == "cuda":
        torch.cuda.synchronize()


def _reset_peak(device):
    import torch
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device):
    import torch
    return torch.cuda.max_memory_allocated() / GIB if device == "cuda" else None


def _build(cfg, attn, device, seed=0):
    import torch
    from gpt import GPT, make_optimizer
    torch.manual_seed(seed)
    with torch.device(device):  # initialise on the device: faster than on the host for 124M parameters
        model = GPT(cfg, attn)
    return model, make_optimizer(model, 6e-4)


def _step(model, opt, x, y, device, loss_chunk=32768):
    import torch
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(x, y, loss_chunk=loss_chunk)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss


def _tokenize_worker(kind, max_bytes, vocab):
    sys.path.insert(0, str(C.REPO_ROOT / "examples"))
    from gpt import tokenize_corpus
    ids, _ = tokenize_corpus(kind, max_bytes, vocab)
    return ids.numpy()


# --------------------------------------------------------------------------- 1. throughput

def attention_only_ms(attn, batch, n, heads, head_dim, device, warmup, rep):
    """Forward+backward of the attention alone: (B, N, H, d) causal, bf16 on GPU."""
    import torch
    from gpt import _ATTN_CLASSES
    block = _ATTN_CLASSES[attn](heads * head_dim, heads, causal=True).to(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    q, k, v = (torch.randn(batch, n, heads, head_dim, device=device, dtype=dtype, requires_grad=True)
               for _ in range(3))
    do = torch.randn(batch, n, heads, head_dim, device=device, dtype=dtype)

    def fn():
        out = block.attend(q, k, v)
        out.backward(do)

    if device == "cuda":
        return C.bench_ms(fn, warmup=warmup, rep=rep, grad_to_none=[q, k, v])
    t0 = time.perf_counter()
    for _ in range(max(1, rep // 100)):
        fn()
    return (time.perf_counter() - t0) * 1000 / max(1, rep // 100)


def section_throughput(s, attns, cfg, budget, log):
    import torch
    rows = []
    for n in s["seqlens"]:
        batch = max(1, s["tokens_per_step"] // n)
        for attn in attns:
            row = {"seqlen": n, "batch": batch, "attn": attn, "status": "ok"}
            rows.append(row)
            if budget.exhausted():
                row["status"] = "skipped (time budget)"
                continue
            try:
                model, opt = _build(cfg, attn, s["device"])
                x = torch.randint(0, cfg.vocab_size, (batch, n), device=s["device"])
                y = torch.randint(0, cfg.vocab_size, (batch, n), device=s["device"])
                _reset_peak(s["device"])
                t0 = time.perf_counter()
                for _ in range(s["warmup"]):
                    _step(model, opt, x, y, s["device"])
                _sync(s["device"])
                row["warmup_s"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                for _ in range(s["timed"]):
                    loss = _step(model, opt, x, y, s["device"])
                _sync(s["device"])
                dt = (time.perf_counter() - t0) / s["timed"]
                row.update(step_ms=dt * 1000, tokens_per_s=batch * n / dt, peak_gib=_peak_gib(s["device"]),
                           loss=float(loss))
            except Exception as exc:  # noqa: BLE001
                if not C.is_oom(exc):
                    raise
                row["status"] = "OOM"
            finally:
                model = opt = None
                C.free_cuda_memory()
            try:
                row["attn_ms"] = attention_only_ms(attn, batch, n, cfg.n_head, cfg.n_embd // cfg.n_head,
                                                   s["device"], warmup=5, rep=30 if s["device"] == "cuda" else 100)
            except Exception as exc:  # noqa: BLE001
                if not C.is_oom(exc):
                    raise
                row["attn_ms"] = None
                row["attn_status"] = "OOM"
            C.free_cuda_memory()
            log(f"throughput N={n:>6} B={batch:>2} {attn:<5}: " + (
                f"{row['tokens_per_s']:>9.0f} tok/s, step {row['step_ms']:7.1f} ms, peak {_fmt(row['peak_gib'])} GiB, "
                if row["status"] == "ok" else f"{row['status']}, ") +
                f"attention fwd+bwd {_fmt(row.get('attn_ms'), 2)} ms")
    # speedups of ours over each other option, whole step and attention alone
    for n in s["seqlens"]:
        by = {r["attn"]: r for r in rows if r["seqlen"] == n}
        ours = by.get("ours")
        if not ours:
            continue
        for other in ("eager", "sdpa"):
            r = by.get(other)
            if r is None:
                continue
            if ours.get("step_ms") and r.get("step_ms"):
                ours[f"step_speedup_vs_{other}"] = r["step_ms"] / ours["step_ms"]
            if ours.get("attn_ms") and r.get("attn_ms"):
                ours[f"attn_speedup_vs_{other}"] = r["attn_ms"] / ours["attn_ms"]
        for r in by.values():
            if r.get("attn_ms") and r.get("step_ms"):
                r["attn_share"] = r["attn_ms"] * cfg.n_layer / r["step_ms"]
    return rows


# --------------------------------------------------------------------------- 2. loss

def section_loss(s, attns, cfg, ids, budget, log):
    import torch
    from gpt import Batches, evaluate, train
    runs = {}
    for attn in attns:
        if budget.exhausted():
            runs[attn] = {"status": "skipped (time budget)"}
            continue
        model, _ = _build(cfg, attn, s["device"])
        batches = Batches(ids, s["loss_batch"], s["loss_seq"], s["device"], seed=0)
        amp = torch.bfloat16 if s["device"] == "cuda" else None
        res = train(model, batches, s["loss_steps"], s["lr"], amp)
        res["val_loss"] = evaluate(model, batches.val_batches(8), amp)
        res["final_loss"] = sum(res["loss"][-20:]) / len(res["loss"][-20:])
        res["tokens_per_s_incl_sync"] = s["loss_steps"] * s["loss_batch"] * s["loss_seq"] / res["time"][-1]
        res["status"] = "ok"
        runs[attn] = res
        log(f"loss {attn:<5}: final (last 20 steps) {res['final_loss']:.4f}, val {res['val_loss']:.4f}, "
            f"{res['time'][-1]:.1f} s")
        model = None
        C.free_cuda_memory()
    ok = [a for a in attns if runs[a].get("status") == "ok"]
    if "ours" in ok:
        for other in ok:
            if other != "ours":
                d = [abs(a - b) for a, b in zip(runs["ours"]["loss"], runs[other]["loss"])]
                runs[other]["max_abs_diff_vs_ours"] = max(d)
                runs[other]["mean_abs_diff_vs_ours"] = sum(d) / len(d)
    return runs


# --------------------------------------------------------------------------- 3. longest context

def _trial(model, opt, n, cfg, device):
    """One training step at batch 1, context n: (status, seconds, peak GiB)."""
    import torch
    x = torch.randint(0, cfg.vocab_size, (1, n), device=device)
    _reset_peak(device)
    t0 = time.perf_counter()
    try:
        _step(model, opt, x, x, device, loss_chunk=8192)
        _sync(device)
    except Exception as exc:  # noqa: BLE001
        if not C.is_oom(exc):
            raise
        opt.zero_grad(set_to_none=True)
        x = None
        C.free_cuda_memory()
        return "OOM", time.perf_counter() - t0, None
    dt = time.perf_counter() - t0
    opt.zero_grad(set_to_none=True)
    peak = _peak_gib(device)
    x = None
    C.free_cuda_memory()
    return "ok", dt, peak


def section_longest(s, attns, cfg, budget, log):
    results = {}
    for attn in attns:
        res = {"trials": [], "longest_ok": None, "first_fail": None, "bound": None}
        results[attn] = res
        if budget.exhausted():
            res["bound"] = "skipped (time budget)"
            continue
        model, opt = _build(cfg, attn, s["device"])
        t_start = time.monotonic()

        def try_n(n):
            status, dt, peak = _trial(model, opt, n, cfg, s["device"])
            res["trials"].append({"seqlen": n, "status": status, "seconds": dt, "peak_gib": peak})
            log(f"longest {attn:<5} N={n:>7}: {status:<3} {dt:6.2f} s" + (f", peak {peak:.1f} GiB" if peak else ""))
            return status == "ok", dt

        def out_of_time():
            return budget.exhausted() or time.monotonic() - t_start > s["longest_seconds"]

        n, lo, hi = s["start_context"], None, None
        # climb by doubling
        while True:
            ok, dt = try_n(n)
            if not ok:
                hi = n
                break
            lo = n
            if n * 2 > s["max_context"]:
                res["bound"] = f"cap {s['max_context']}"
                break
            if dt > s["trial_seconds"] or out_of_time():
                res["bound"] = "time"
                break
            n *= 2
        if lo is None and hi is not None:  # even the first length failed: halve down
            n = hi // 2
            while n >= 256 and not out_of_time():
                ok, _ = try_n(n)
                if ok:
                    lo = n
                    break
                hi, n = n, n // 2
        # bisect between the last success and the first failure (granularity 1/16 of lo, >= 256)
        if lo is not None and hi is not None:
            step = max(256, lo // 16)
            while hi - lo > step and not out_of_time():
                mid = (lo + hi) // 2 // 256 * 256
                ok, _ = try_n(mid)
                if ok:
                    lo = mid
                else:
                    hi = mid
            if hi - lo > step:
                res["bound"] = "time"
        res["longest_ok"], res["first_fail"] = lo, hi
        model = opt = None
        C.free_cuda_memory()
    return results


# --------------------------------------------------------------------------- report

def _fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def _k(n):
    return "-" if n is None else C.n_label(n)


def markdown(payload):
    s, cfg = payload["settings"], payload["model"]
    parts, short = [], []
    thr = payload.get("throughput")
    if thr:
        headers = ["N", "batch", "attention", "tokens/s", "step ms", "peak GiB",
                   "ours: whole-step speedup", "attention fwd+bwd ms (1 layer)", "ours: attention-only speedup",
                   "attention share of step"]
        rows = []
        for r in thr:
            sp_step = sp_attn = ""
            if r["attn"] == "ours":
                sp_step = " / ".join(f"{_fmt(r.get(f'step_speedup_vs_{o}'), 2)}x vs {o}" for o in ("eager", "sdpa"))
                sp_attn = " / ".join(f"{_fmt(r.get(f'attn_speedup_vs_{o}'), 2)}x vs {o}" for o in ("eager", "sdpa"))
            rows.append([C.n_label(r["seqlen"]), r["batch"], r["attn"],
                         _fmt(r.get("tokens_per_s"), 0) if r["status"] == "ok" else r["status"],
                         _fmt(r.get("step_ms")), _fmt(r.get("peak_gib")), sp_step,
                         _fmt(r.get("attn_ms"), 2) if r.get("attn_ms") else r.get("attn_status", "-"), sp_attn,
                         f"{100 * r['attn_share']:.0f}%" if r.get("attn_share") else "-"])
        table = C.md_table(headers, rows)
        short.append(table)
        parts.append("### Training throughput\n\n"
                     f"{cfg['params_m']:.1f}M-parameter GPT, bf16 autocast, AdamW (fused), "
                     f"{s['tokens_per_step']} tokens per step, mean of {s['timed']} steps after {s['warmup']} "
                     "warm-up steps. Attention alone: forward+backward of one layer's attention at the same "
                     "(B, N, 12, 64) causal shape (median, triton do_bench); the share column is 12 layers' "
                     "attention time over the step time.\n\n" + table)
    loss = payload.get("loss")
    if loss:
        rows = []
        for attn, r in loss.items():
            if r.get("status") != "ok":
                rows.append([attn, r.get("status"), "", "", ""])
                continue
            rows.append([attn, f"{r['final_loss']:.4f}", f"{r['val_loss']:.4f}",
                         _fmt(r.get("max_abs_diff_vs_ours"), 4) if attn != "ours" else "-",
                         _fmt(r.get("tokens_per_s_incl_sync"), 0)])
        table = C.md_table(["attention", "train loss (mean of last 20 steps)", "validation loss",
                            "max per-step |loss - loss(ours)|", "tokens/s (incl. per-step loss sync)"], rows)
        short.append(table)
        parts.append(f"### Loss curves\n\n{s['loss_steps']} steps at context {s['loss_seq']}, batch "
                     f"{s['loss_batch']}, on the Python standard library's source "
                     f"({payload.get('corpus', {}).get('tokens', '?')} tokens, GPT-2-like piece tokenizer, "
                     f"vocabulary {cfg['vocab_size']}); same initial weights and batches for every option; "
                     "validation on 8 held-out batches (last 5% of the corpus).\n\n" + table)
    longest = payload.get("longest")
    if longest:
        rows = []
        for attn, r in longest.items():
            note = r.get("bound") or ""
            if r.get("first_fail") is not None:
                note = (note + "; " if note else "") + f"out of memory at {_k(r['first_fail'])}"
            best = max((t for t in r["trials"] if t["status"] == "ok"), key=lambda t: t["seqlen"], default=None)
            rows.append([attn, _k(r.get("longest_ok")) + ("+" if r.get("bound") and "OOM" not in note
                                                         and r.get("first_fail") is None else ""),
                         note, _fmt(best["seconds"], 2) if best else "-", _fmt(best["peak_gib"]) if best else "-",
                         len(r["trials"])])
        table = C.md_table(["attention", "longest context trained (batch 1)", "limit", "step s at that length",
                            "peak GiB", "trials"], rows)
        short.append(table)
        parts.append("### Longest trainable context\n\nOne full training step (forward, backward, AdamW) at "
                     "batch 1; doubling from " f"{_k(s['start_context'])}, then bisection to 1/16 of the length; "
                     "'+' marks a lower bound (cap or time limit reached, not memory). Loss computed in "
                     "checkpointed chunks of 8192 tokens so the logits never dominate.\n\n" + table)
    return "\n\n".join(short), "\n\n".join(parts)


def plot(payload, path):
    plt = C.import_pyplot()
    if plt is None:
        return None
    from gpt import smooth
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    s = payload["settings"]
    ax = axes[0, 0]
    for attn, r in (payload.get("loss") or {}).items():
        if r.get("status") == "ok":
            ax.plot(smooth(r["loss"], 0.95), label=f"{LABEL[attn]} (val {r['val_loss']:.3f})", color=COLOR[attn],
                    alpha=0.8, lw=1.4)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (EMA 0.95)")
    ax.set_title(f"loss: context {s['loss_seq']}, batch {s['loss_batch']}, Python stdlib source")
    if ax.lines:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "section not run", ha="center", va="center", transform=ax.transAxes)

    thr = payload.get("throughput") or []
    seqlens = sorted({r["seqlen"] for r in thr})
    attns = [a for a in ATTNS if any(r["attn"] == a for r in thr)]
    ax = axes[0, 1]
    width = 0.8 / max(1, len(attns))
    for i, attn in enumerate(attns):
        xs, ys = [], []
        for j, n in enumerate(seqlens):
            r = next((r for r in thr if r["seqlen"] == n and r["attn"] == attn), None)
            xs.append(j + (i - (len(attns) - 1) / 2) * width)
            ys.append(r.get("tokens_per_s", 0) / 1e3 if r and r["status"] == "ok" else 0)
            if r and r["status"] != "ok":
                ax.text(xs[-1], 0, " OOM" if r["status"] == "OOM" else " -", ha="center", va="bottom",
                        fontsize=8, rotation=90)
        ax.bar(xs, ys, width, label=LABEL[attn], color=COLOR[attn])
    ax.set_xticks(range(len(seqlens)), [C.n_label(n) for n in seqlens])
    ax.set_xlabel(f"context length ({s['tokens_per_step']} tokens per step)")
    ax.set_ylabel("training throughput (k tokens/s)")
    ax.set_title("whole training step")
    if attns:
        ax.legend(fontsize=8)

    ax = axes[1, 0]
    ours = {r["seqlen"]: r for r in thr if r["attn"] == "ours"}
    series = [(f"step_speedup_vs_{o}", f"whole step vs {o}", COLOR[o], None) for o in ("eager", "sdpa")] + \
             [(f"attn_speedup_vs_{o}", f"attention only vs {o}", COLOR[o], "//") for o in ("eager", "sdpa")]
    width = 0.8 / len(series)
    for i, (key, label, color, hatch) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(seqlens))]
        ys = [ours.get(n, {}).get(key) or 0 for n in seqlens]
        ax.bar(xs, ys, width, label=label, color=color, hatch=hatch, alpha=0.55 if hatch else 0.9,
               edgecolor="black", lw=0.3)
        for x, y in zip(xs, ys):
            if y:
                ax.text(x, y, f"{y:.2f}", ha="center", va="bottom", fontsize=7)
    ax.axhline(1.0, color="black", lw=0.6)
    ax.set_xticks(range(len(seqlens)), [C.n_label(n) for n in seqlens])
    ax.set_xlabel("context length")
    ax.set_ylabel("speedup of flashattn_triton (x)")
    ax.set_title("flashattn_triton speedup: whole step vs attention alone")
    ax.legend(fontsize=8)

    ax = axes[1, 1]
    longest = payload.get("longest") or {}
    names = [a for a in ATTNS if a in longest]
    vals = [(longest[a].get("longest_ok") or 0) / 1024 for a in names]
    ax.barh([LABEL[a] for a in names], vals, color=[COLOR[a] for a in names])
    for i, a in enumerate(names):
        r = longest[a]
        lower = r.get("first_fail") is None and r.get("bound")
        ax.text(vals[i], i, f" {_k(r.get('longest_ok'))}{'+' if lower else ''}", va="center", fontsize=9)
    ax.set_xlabel("longest trainable context at batch 1 (k tokens)")
    ax.set_title("longest context on one GPU ('+': lower bound)")
    dev = payload["env"].get("gpu") or "CPU (smoke test)"
    prec = "bf16 autocast" if payload["settings"]["device"] == "cuda" else "float32"
    fig.suptitle(f"{payload['model']['params_m']:.1f}M-parameter GPT, {prec}, {dev}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- main

def main(argv=None):
    args = parse_args(argv)
    s = settings(args)
    sections = [x.strip() for x in args.sections.split(",") if x.strip()]
    attns = [a.strip() for a in args.attns.split(",") if a.strip()]
    for a in attns:
        if a not in ATTNS:
            sys.exit(f"--attns: unknown {a!r}; choose from {ATTNS}")
    if not args.smoke:
        C.require_cuda("bench_e2e.py")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    # tokenise in a separate process while the GPU runs the throughput section
    pool = future = None
    if "loss" in sections:
        import concurrent.futures
        import multiprocessing
        pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        future = pool.submit(_tokenize_worker, "pieces", s["corpus_bytes"], 50304 if not args.smoke else 512)

    import torch
    from gpt import GPTConfig
    if not args.smoke:
        torch.backends.cuda.matmul.allow_tf32 = True
    cfg = GPTConfig.preset(s["preset"], **({"vocab_size": 512} if args.smoke else {}))
    budget = C.Budget(s["max_seconds"])
    env = C.collect_env()
    from gpt import GPT
    n_params = GPT(cfg, "ours").num_params()
    payload = {"env": env, "settings": s, "sections": sections,
               "model": {"params_m": n_params / 1e6, "vocab_size": cfg.vocab_size, "n_layer": cfg.n_layer,
                         "n_head": cfg.n_head, "n_embd": cfg.n_embd, "positions": "rotary"}}
    print(f"bench_e2e: {n_params / 1e6:.1f}M parameters, {C.env_line(env)}", flush=True)

    def log(msg):
        print(f"[{budget.elapsed():5.0f}s] {msg}", flush=True)

    def save():
        C.write_json(out / "bench_e2e.json", payload)
        short, details = markdown(payload)
        C.write_markdown(out / "bench_e2e.md", "End-to-end GPT training", env, short, details)
        plot(payload, out / "bench_e2e.png")

    if "throughput" in sections:
        payload["throughput"] = section_throughput(s, attns, cfg, budget, log)
        save()
    if "loss" in sections:
        t0 = time.perf_counter()
        ids = torch.from_numpy(future.result())
        pool.shutdown()
        payload["corpus"] = {"tokens": len(ids), "bytes": s["corpus_bytes"],
                             "wait_s": time.perf_counter() - t0, "python": sys.version.split()[0]}
        log(f"corpus: {len(ids)} tokens (waited {payload['corpus']['wait_s']:.1f} s for the tokenizer)")
        payload["loss"] = section_loss(s, attns, cfg, ids, budget, log)
        save()
    if "longest" in sections:
        payload["longest"] = section_longest(s, attns, cfg, budget, log)
    payload["elapsed_s"] = budget.elapsed()
    save()
    short, _ = markdown(payload)
    print("\n" + short)
    png = ", bench_e2e.png" if (out / "bench_e2e.png").exists() else " (no plot written)"
    print(f"\nwrote {out / 'bench_e2e.json'}, bench_e2e.md{png} in {budget.elapsed():.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
