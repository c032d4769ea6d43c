"""Attention throughput: flashattn_triton against PyTorch SDPA (each backend forced),
FlexAttention (torch.compile) and a naive PyTorch implementation.

Forward, backward and forward+backward TFLOP/s. The full sweep follows the
FlashAttention papers (bf16/fp16, d in {64, 128, 256}, causal and not,
N = 512..16384 with B*N = 16384 tokens and H = 2048/d) plus GQA (Hq=32, Hkv=8,
d=128, causal, each dtype); the quick preset measures bf16, d=128, N in {2048, 8192}.
Writes bench_attention.json, bench_attention.md and bench_attention.png into --out
and prints the summary tables.

Behind ``flashattn-triton bench`` (quick by default, --full for the sweep) and
``benchmarks/bench_attention.py`` (full by default, --quick), e.g.:
  flashattn-triton bench --dry-run
  flashattn-triton bench --out results/
  flashattn-triton bench --full --dtype bf16,fp16 --peers sdpa_flash,sdpa_cudnn
  flashattn-triton bench --smoke            # no GPU: tiny CPU run of the plumbing only
  python benchmarks/bench_attention.py --compare old.json --against new.json   # no GPU needed
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import signal
import statistics
import sys
import time
import warnings
from pathlib import Path

from . import common as C

FULL_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
GQA_SEQLENS = (4096, 16384)
# flex compiles once per shape (tens of seconds each): by default the full sweep
# measures it where the shared peer table has it (bf16, d=128, N 2048 and 8192,
# and the GQA shapes); --flex-all measures it everywhere.
BUDGET_SKIP = "skipped: time budget exhausted"
FLEX_SUBSET = dict(dtype="bf16", head_dim=128, seqlens=(2048, 8192))
GQA_HEADS = (32, 8)
# Providers run in tiers, each tier over all configs: the core comparison first,
# then the cheap baselines, then flex, whose per-shape compiles take most of the
# time; so a --max-seconds cut costs flex coverage of the last configs first.
# Ours forced onto one tier (a comparison of our two tiers) comes last.
TIER = {C.OURS: 0, "sdpa_flash": 0, "sdpa_cudnn": 0, "sdpa_efficient": 1, "sdpa_math": 1,
        "naive": 1, "flex": 2, C.OURS_DET: 1, C.OURS_PORTABLE: 3, C.OURS_HOPPER: 3}
HEAD_DIM_PRIORITY = {128: 0, 64: 1, 256: 2}
QUICK = dict(dtypes=["bf16"], head_dims=[128], seqlens=[2048, 8192], causal=[False, True],
             providers=[C.OURS, "sdpa_flash", "sdpa_cudnn", "flex"], modes=["fwd", "bwd"],
             gqa=False, max_seconds=75.0)
FULL = dict(dtypes=["bf16", "fp16"], head_dims=[64, 128, 256], seqlens=list(FULL_SEQLENS),
            causal=[False, True], providers=[p for p in C.PROVIDERS if p not in (C.OURS_PORTABLE, C.OURS_HOPPER)],
            modes=list(C.MODES), gqa=True, max_seconds=270.0)
# --smoke: a CPU run of the whole path (inputs, providers, timing, tables, plot)
# at toy size; ours runs the blockwise PyTorch path (or, with TRITON_INTERPRET=1,
# the kernels in Triton's interpreter). The times say nothing about speed.
SMOKE = dict(dtypes=["bf16"], head_dims=[32], seqlens=[64, 128], causal=[False, True],
             providers=[C.OURS, "sdpa_math", "naive"], modes=["fwd", "bwd"], gqa=False,
             max_seconds=60.0, tokens=256, model_dim=64, warmup=1, rep=20)
PRESETS = {"quick": QUICK, "full": FULL, "smoke": SMOKE}
MAX_ERROR_LINES = 40
STYLE = {C.OURS: ("tab:red", "o", 2.4), "sdpa_flash": ("tab:blue", "s", 1.3),
         "sdpa_cudnn": ("tab:green", "^", 1.3), "sdpa_efficient": ("tab:purple", "v", 1.1),
         "sdpa_math": ("tab:gray", "x", 1.0), "flex": ("tab:orange", "D", 1.3),
         "naive": ("tab:brown", "+", 1.0), C.OURS_DET: ("tab:pink", "o", 1.3),
         C.OURS_PORTABLE: ("tab:olive", "o", 1.3), C.OURS_HOPPER: ("tab:cyan", "o", 1.3)}


class Interrupted(BaseException):
    """Raised from the SIGTERM handler so partial results still get written
    (a BaseException, so the per-measurement `except Exception` does not eat it)."""


@dataclasses.dataclass
class Task:
    cfg: C.AttnConfig
    provider: str
    modes: list[str]
    skip: str | None = None


# --------------------------------------------------------------------------- CLI

def add_arguments(p: argparse.ArgumentParser, default_preset: str = "full",
                  default_out: Path | None = None) -> None:
    """The options of the sweep (shared by the CLI's ``bench`` and benchmarks/bench_attention.py)."""
    preset = p.add_mutually_exclusive_group()
    preset.add_argument("--quick", dest="preset", action="store_const", const="quick",
                        help="short run (~1.5 min on an H200): bf16, d=128, N in {2048, 8192}, causal and "
                             "not, ours + sdpa_flash + sdpa_cudnn + flex, fwd and bwd"
                             + (" (the default)" if default_preset == "quick" else ""))
    preset.add_argument("--full", dest="preset", action="store_const", const="full",
                        help="the full sweep (~5 min): bf16 and fp16, d in {64, 128, 256}, N 512..16k, "
                             "causal and not, GQA, every peer, fwd/bwd/fwd_bwd"
                             + (" (the default)" if default_preset == "full" else ""))
    preset.add_argument("--smoke", dest="preset", action="store_const", const="smoke",
                        help="no GPU needed: a tiny CPU run of the whole path (ours, sdpa_math, naive; "
                             "B*N=256, d=32, N 64 and 128); checks the plumbing, not the speed")
    p.set_defaults(preset=default_preset)
    p.add_argument("--out", type=Path, default=default_out,
                   help="results folder (default: %(default)s)")
    p.add_argument("--dtype", "--dtypes", dest="dtypes", help="comma list from bf16,fp16,fp32")
    p.add_argument("--peers", help=f"comma list of peers to run next to ours, from {','.join(C.PEERS)} "
                                   "(a peer this GPU or PyTorch lacks gives error rows)")
    p.add_argument("--providers", help=f"comma list from {','.join(C.PROVIDERS)} (ours included or not)")
    p.add_argument("--modes", help=f"comma list from {','.join(C.MODES)}")
    p.add_argument("--head-dims", type=C.positive_int_list, help="comma list, e.g. 64,128,256")
    p.add_argument("--seqlens", type=C.positive_int_list, help="comma list, e.g. 512,1024")
    p.add_argument("--causal", choices=["both", "yes", "no"], help="default: both")
    p.add_argument("--no-gqa", action="store_true", help="skip the GQA configs")
    p.add_argument("--tokens", type=int, help="B*N per config (default 16384)")
    p.add_argument("--model-dim", type=int, help="H*d per config (default 2048)")
    p.add_argument("--max-seconds", type=float,
                   help="wall budget: later measurements are recorded as skipped "
                        f"(default {FULL['max_seconds']:.0f}, --quick {QUICK['max_seconds']:.0f})")
    p.add_argument("--warmup", type=int, help="do_bench warmup in ms (default 25)")
    p.add_argument("--rep", type=int, help="do_bench rep in ms (default 100)")
    p.add_argument("--rounds", type=int, default=1,
                   help="measure every config R times, its providers taking turns (ours, peers, ours, "
                        "peers, ...), each time over rep / R ms, and keep the median: slow drifts of the "
                        "clock or temperature then touch every provider alike (default %(default)s)")
    p.add_argument("--math-max-gb", type=float, default=8.0,
                   help="skip sdpa_math/naive when the fp32 B*H*N*N scores exceed this (default %(default)s GB)")
    p.add_argument("--flex-all", action="store_true",
                   help="measure flex on every config (default: bf16, d=128, N 2048/8192 and GQA)")
    p.add_argument("--flex-dynamic", action="store_true",
                   help="compile flex with dynamic shapes (fewer compiles, possibly slower kernels)")
    p.add_argument("--no-autotune", action="store_true",
                   help="set FLASHATTN_TRITON_AUTOTUNE=0 for the run, overriding a 1 in the environment: "
                        "flashattn_triton launches the committed per-GPU table's configs (or the shared-memory "
                        "model's), as it does by default; autotuning is opt-in (FLASHATTN_TRITON_AUTOTUNE=1)")
    p.add_argument("--dry-run", action="store_true", help="list the configurations and exit")
    p.add_argument("--compare", type=Path, metavar="PREV.json",
                   help="print the run-to-run spread of our TFLOP/s against a previous JSON")
    p.add_argument("--against", type=Path, metavar="CUR.json",
                   help="with --compare: compare two existing files without running anything")
    p.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    p.add_argument("--render", type=Path, metavar="RESULTS.json",
                   help="rewrite the markdown and plot of an existing JSON into --out (no GPU needed)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(usage_error=p.error)  # execute's checks of files and folders report as argparse does


def parse_args(argv=None, default_out: Path | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p, "full", default_out or Path("bench_results"))
    return p.parse_args(argv)


def resolve_settings(args) -> dict:
    """Preset (quick/full) overridden by explicit filters."""
    s = dict(tokens=16384, model_dim=2048, warmup=25, rep=100)
    s.update(PRESETS[args.preset])
    peers = C.parse_list(args.peers, str, C.PEERS, "peer")
    overrides = {
        "providers": C.parse_list(args.providers, str, C.PROVIDERS, "provider")
        or (None if peers is None else [C.OURS] + peers),
        "modes": C.parse_list(args.modes, str, C.MODES, "mode"),
        "dtypes": C.parse_list(args.dtypes, str, C.DTYPE_NAMES, "dtype"),
        "head_dims": args.head_dims,  # lists already (C.positive_int_list)
        "seqlens": args.seqlens,
        "causal": None if args.causal is None else
                  {"both": [False, True], "yes": [True], "no": [False]}[args.causal],
        "max_seconds": args.max_seconds,
        "tokens": args.tokens, "model_dim": args.model_dim, "warmup": args.warmup, "rep": args.rep,
    }
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be >= 1, got {args.rounds}")
    s.update({k: v for k, v in overrides.items() if v is not None})
    if args.no_gqa:
        s["gqa"] = False
    # Keep the canonical provider/mode order whatever order was typed.
    s["providers"] = [p for p in C.PROVIDERS if p in s["providers"]]
    s["modes"] = [m for m in C.MODES if m in s["modes"]]
    quick = args.preset == "quick"
    s.update(math_max_gb=args.math_max_gb, math_max_bytes=args.math_max_gb * 1e9,
             flex_dynamic=args.flex_dynamic, flex_all=args.flex_all or quick, quick=quick,
             preset=args.preset, device="cpu" if args.preset == "smoke" else "cuda",
             ours_autotune=not args.no_autotune, rounds=args.rounds)
    if args.rounds > 1:
        s["rep"] = max(1, s["rep"] // args.rounds)
    return s


# --------------------------------------------------------------------------- plan

def build_configs(s: dict) -> list[C.AttnConfig]:
    configs = []
    for dtype in s["dtypes"]:
        for d in s["head_dims"]:
            for causal in s["causal"]:
                for n in s["seqlens"]:
                    heads = max(1, s["model_dim"] // d)
                    configs.append(C.AttnConfig(dtype, d, causal, max(1, s["tokens"] // n),
                                                heads, heads, n, n))
    if s["gqa"] and 128 in s["head_dims"] and True in s["causal"]:
        hq, hkv = GQA_HEADS
        for dtype in s["dtypes"]:   # d = 128 causal GQA rows in every dtype of the sweep
            for n in GQA_SEQLENS:
                if n in s["seqlens"]:
                    configs.append(C.AttnConfig(dtype, 128, True, max(1, s["tokens"] // n), hq, hkv, n, n))
    return configs


def config_priority(cfg: C.AttnConfig, dtypes: list[str]) -> tuple:
    return (dtypes.index(cfg.dtype), HEAD_DIM_PRIORITY.get(cfg.head_dim, cfg.head_dim),
            cfg.gqa, cfg.causal, cfg.seqlen_q)


def static_skip(provider: str, cfg: C.AttnConfig, s: dict) -> str | None:
    if provider == "flex" and not s["flex_all"] and not cfg.gqa and not (
            cfg.dtype == FLEX_SUBSET["dtype"] and cfg.head_dim == FLEX_SUBSET["head_dim"]
            and cfg.seqlen_q in FLEX_SUBSET["seqlens"]):
        return ("skipped: flex is measured at bf16, d=128, N in {2048, 8192} and the GQA shapes "
                "(it compiles once per shape; --flex-all for all)")
    if provider in ("sdpa_math", "naive") and cfg.scores_fp32_bytes() > s["math_max_bytes"]:
        return (f"skipped: N x N fp32 scores would take {cfg.scores_fp32_bytes() / 1e9:.1f} GB "
                f"(> {s['math_max_bytes'] / 1e9:.0f} GB, --math-max-gb)")
    return None


def build_plan(s: dict) -> list[Task]:
    configs = sorted(build_configs(s), key=lambda c: config_priority(c, s["dtypes"]))
    providers = sorted(s["providers"], key=lambda p: (TIER[p], C.PROVIDERS.index(p)))
    tiers = sorted({TIER[p] for p in providers})
    plan = []
    for tier in tiers:
        for cfg in configs:
            for prov in providers:
                if TIER[prov] == tier:
                    plan.append(Task(cfg, prov, list(s["modes"]), static_skip(prov, cfg, s)))
    return plan


def print_dry_run(plan: list[Task], s: dict) -> None:
    by_cfg = collections.OrderedDict()
    for t in sorted(plan, key=lambda t: config_priority(t.cfg, s["dtypes"])):
        by_cfg.setdefault(t.cfg, []).append(t)
    n_meas = sum(len(t.modes) for t in plan)
    n_skip = sum(len(t.modes) for t in plan if t.skip)
    print(f"{len(by_cfg)} configs x providers [{', '.join(s['providers'])}] x modes "
          f"[{', '.join(s['modes'])}] -> {n_meas} measurements ({n_skip} pre-skipped)")
    rounds = f" x {s['rounds']} rounds (median)" if s.get("rounds", 1) > 1 else ""
    print(f"budget --max-seconds {s['max_seconds']:.0f}; do_bench warmup={s['warmup']} ms rep={s['rep']} ms{rounds}; "
          f"flex compile: {'dynamic' if s['flex_dynamic'] else 'static, once per shape'}")
    for cfg, tasks in by_cfg.items():
        run = [t.provider for t in tasks if not t.skip]
        skipped = [t for t in tasks if t.skip]
        extra = ("   (skip " + "; ".join(f"{t.provider}: {t.skip.split(':', 1)[-1].split('(')[0].strip()}"
                                      for t in skipped) + ")") if skipped else ""
        fwd_gflop = cfg.flops("fwd") / 1e9
        print(f"  {cfg.label():<44} fwd {fwd_gflop:8.1f} GFLOP  {', '.join(run)}{extra}")
    print("execution order: tiers " + " -> ".join(
        "[" + ", ".join(p for p in s["providers"] if TIER[p] == tier) + "]"
        for tier in sorted({TIER[p] for p in s["providers"]})) + ", each over all configs")


# --------------------------------------------------------------------------- measuring

def measure(attn, q, k, v, mode: str, warmup: int, rep: int) -> float:
    """Median ms of one mode. One untimed call first: autotuning/compilation happen there."""
    import torch

    grads = None
    if mode == "fwd":
        def fn():
            return attn(q, k, v)
    elif mode == "bwd":
        out = attn(q, k, v)  # forward once, outside the timed region
        dout = torch.randn_like(out)

        def fn():
            out.backward(dout, retain_graph=True)
        grads = [q, k, v]
    else:
        out = attn(q, k, v)
        dout = torch.randn_like(out)
        del out

        def fn():
            attn(q, k, v).backward(dout)
        grads = [q, k, v]
    fn()
    if C.DEVICE == "cuda":
        torch.cuda.synchronize()
    try:
        return C.bench_ms(fn, warmup, rep, grad_to_none=grads)
    finally:
        for t in (q, k, v):
            t.grad = None


def warning_reasons(caught) -> str:
    """SDPA explains a refused backend only through warnings; keep the gist."""
    keep = []
    for w in caught:
        msg = " ".join(str(w.message).split())
        if any(s in msg.lower() for s in ("because", "not support", "requires", "only support")):
            if msg not in keep:
                keep.append(msg)
    return " | ".join(keep)[:400]


def make_row(cfg: C.AttnConfig, provider: str, mode: str, status: str, ms: float | None = None,
             error: str | None = None, wall_s: float | None = None) -> dict:
    flops = cfg.flops(mode)
    row = {"provider": provider, "mode": mode, **cfg.as_dict(),
           "ms": ms, "tflops": C.tflops(flops, ms) if ms else None, "flops": flops, "status": status}
    if error:
        row["error"] = error
    if wall_s is not None:
        row["wall_s"] = round(wall_s, 2)
    return row


class Runner:
    def __init__(self, s: dict, progress: C.Progress, budget: C.Budget):
        self.s, self.progress, self.budget = s, progress, budget
        self.rows: list[dict] = []
        self.dead: str | None = None  # set when the CUDA context is unusable

    def record(self, row: dict) -> None:
        self.rows.append(row)
        note = f"{row['provider']} {row['mode']} N={row['seqlen_q']}"
        if row["status"] == "ok":
            msg = f"{fmt_tflops(row['tflops'], 1):>7} TFLOP/s  {row['ms']:8.3f} ms"
        else:
            msg = f"{row['status'].upper()}: {row.get('error', '')[:150]}"
        if row["status"] != "skipped" or not row.get("error", "").startswith(BUDGET_SKIP):
            self.progress.write(f"{row['mode']:>7} {row['provider']:<16} {label(row):<44} {msg}")
        self.progress.update(1, note)

    def skip_all(self, task: Task, modes: list[str], reason: str) -> None:
        for mode in modes:
            self.record(make_row(task.cfg, task.provider, mode, "skipped", error=reason))

    def run_task(self, task: Task) -> None:
        if task.skip:
            return self.skip_all(task, task.modes, task.skip)
        if self.dead:
            return self.skip_all(task, task.modes, f"skipped: CUDA context unusable after: {self.dead}")
        if self.budget.exhausted():
            return self.skip_all(task, task.modes, self.budget_reason())
        try:
            attn, context = C.build_attention(task.provider, task.cfg, self.s["flex_dynamic"])
            q, k, v = C.make_qkv(task.cfg, C.provider_layout(task.provider), requires_grad=True)
        except Exception as exc:  # noqa: BLE001 - recorded, sweep continues
            status, err = ("oom" if C.is_oom(exc) else "error"), C.short_error(exc)
            self.after_error()
            return self.skip_all_status(task, task.modes, status, err)
        with context():
            for i, mode in enumerate(task.modes):
                if self.dead:
                    self.skip_all(task, task.modes[i:], f"skipped: CUDA context unusable after: {self.dead}")
                    break
                if self.budget.exhausted():
                    self.skip_all(task, task.modes[i:], self.budget_reason())
                    break
                row = self.run_mode(task, mode, attn, q, k, v)
                if row["status"] == "error":
                    # Every later mode runs the same forward (and bwd's backward): it would fail
                    # the same way, and a failing flex compile is slow to repeat.
                    err = f"not run: {mode} failed with: {row['error']}"
                    self.skip_all_status(task, task.modes[i + 1:], "error", err)
                    break
        del q, k, v, attn
        if task.provider in ("sdpa_math", "naive"):
            C.free_cuda_memory()  # large N x N temporaries: do not let them fragment later runs

    def run_mode(self, task: Task, mode: str, attn, q, k, v) -> dict:
        t0 = time.monotonic()
        status, err, ms = "ok", None, None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                ms = measure(attn, q, k, v, mode, self.s["warmup"], self.s["rep"])
            except Exception as exc:  # noqa: BLE001 - OOM / unsupported: recorded as a row
                status = "oom" if C.is_oom(exc) else "error"
                err = C.short_error(exc)
                reasons = warning_reasons(caught)
                if reasons:
                    err += f" [warnings: {reasons}]"
        if status != "ok":
            self.after_error()
        row = make_row(task.cfg, task.provider, mode, status, ms, err, time.monotonic() - t0)
        self.record(row)
        return row

    def skip_all_status(self, task: Task, modes: list[str], status: str, err: str) -> None:
        for mode in modes:
            self.record(make_row(task.cfg, task.provider, mode, status, error=err))

    def after_error(self) -> None:
        C.free_cuda_memory()
        ok, why = C.cuda_still_usable()
        if not ok:
            self.dead = why

    def budget_reason(self) -> str:
        return f"{BUDGET_SKIP} (--max-seconds {self.budget.max_seconds:.0f})"


def config_groups(plan: list[Task]) -> list[list[Task]]:
    """The plan cut into runs of consecutive tasks of one (tier, config): the
    providers that take turns when --rounds > 1."""
    groups: list[list[Task]] = []
    for task in plan:
        if groups and groups[-1][0].cfg == task.cfg and TIER[groups[-1][0].provider] == TIER[task.provider]:
            groups[-1].append(task)
        else:
            groups.append([task])
    return groups


def merge_rounds(rows: list[dict]) -> list[dict]:
    """One row per (config, mode, provider) from the rows of every round: the
    median time of the rounds that ran (their times kept in "ms_rounds"), or,
    when none ran, the first round's row (its status and error)."""
    by_key: dict = {}
    for r in rows:
        by_key.setdefault((C.row_key(r), r["provider"]), []).append(r)
    merged = []
    for group in by_key.values():
        ok = [r for r in group if r["status"] == "ok"]
        if not ok:
            merged.append(group[0])
            continue
        ms = statistics.median(r["ms"] for r in ok)
        row = dict(ok[0], ms=ms, tflops=C.tflops(ok[0]["flops"], ms), ms_rounds=[r["ms"] for r in ok])
        row["wall_s"] = round(sum(r.get("wall_s", 0.0) for r in group), 2)
        merged.append(row)
    return merged


# --------------------------------------------------------------------------- results

def add_ratios(rows: list[dict]) -> None:
    """Our rows get ours_over{peer: ours/peer}; peer rows get ours_over_this."""
    ours = {C.row_key(r): r["tflops"] for r in rows if r["provider"] == C.OURS and r.get("tflops")}
    peers = collections.defaultdict(dict)
    for r in rows:
        if r["provider"] != C.OURS and r.get("tflops"):
            peers[C.row_key(r)][r["provider"]] = r["tflops"]
    for r in rows:
        key = C.row_key(r)
        mine = ours.get(key)
        if r["provider"] == C.OURS:
            r["ours_over"] = ({p: round(mine / t, 4) for p, t in peers[key].items()} if mine else {})
        else:
            r["ours_over_this"] = round(mine / r["tflops"], 4) if mine and r.get("tflops") else None


def fmt_tflops(x: float, digits: int = 0) -> str:
    """TFLOP/s as the tables print them; small values (CPU smoke runs) keep two significant digits."""
    return f"{x:.{digits}f}" if x >= 10 or digits and x >= 1 else f"{x:.2g}"


def status_code(row: dict | None) -> str:
    if row is None:
        return ""
    if row["status"] == "ok":
        return ""
    if row["status"] == "oom":
        return "OOM"
    if row["status"] == "skipped":
        return "budget" if row.get("error", "").startswith(BUDGET_SKIP) else "skip"
    return "n/a"


def label(row: dict) -> str:
    return C.AttnConfig(**{k: row[k] for k in C.CONFIG_KEYS}).label()


def index_rows(rows: list[dict]) -> dict:
    return {(C.row_key(r), r["provider"]): r for r in rows}


def config_sort_key(cfg_key: tuple) -> tuple:
    mode, dtype, d, causal, b, hq, hkv, nq, nk = cfg_key
    return (C.MODES.index(mode), C.DTYPE_NAMES.index(dtype) if dtype in C.DTYPE_NAMES else 9,
            hq != hkv, d, causal, nq)


def summary_markdown(rows: list[dict], s: dict) -> str:
    idx = index_rows(rows)
    keys = sorted({C.row_key(r) for r in rows}, key=config_sort_key)
    providers = [p for p in C.PROVIDERS if any(r["provider"] == p for r in rows)]
    peers = [p for p in providers if p != C.OURS]
    parts = []

    # 1. geometric-mean speed ratio per mode and peer
    table = []
    for mode in C.MODES:
        cells = []
        for peer in peers:
            ratios = [idx[(k, C.OURS)]["tflops"] / idx[(k, peer)]["tflops"] for k in keys
                      if k[0] == mode and idx.get((k, C.OURS), {}).get("tflops")
                      and idx.get((k, peer), {}).get("tflops")]
            g = C.geomean(ratios)
            cells.append(f"{g:.2f}x [{min(ratios):.2f}-{max(ratios):.2f}] n={len(ratios)}" if g else "")
        if any(cells):
            table.append([mode] + cells)
    if table and peers:
        parts.append("Geometric-mean speed ratio flashattn_triton / peer over the configs where both ran "
                     "[min-max], n = configs:\n\n" + C.md_table(["mode"] + peers, table))

    # 2. status counts
    counts = []
    for p in providers:
        c = collections.Counter(r["status"] for r in rows if r["provider"] == p)
        counts.append([p, c["ok"], c["error"], c["oom"], c["skipped"]])
    parts.append("Rows per provider:\n\n" + C.md_table(["provider", "ok", "error", "oom", "skipped"], counts))

    # 3. our TFLOP/s by (mode, dtype, d, causal) x N, with ratio to the fastest peer that ran
    seqlens = sorted({k[7] for k in keys})
    groups = collections.OrderedDict()
    for k in keys:
        mode, dtype, d, causal, b, hq, hkv, nq, nk = k
        name = f"{mode} {dtype} d={d} {'causal' if causal else 'full'}" + (f" GQA {hq}/{hkv}" if hq != hkv else "")
        groups.setdefault(name, {})[nq] = k
    table = []
    for name, by_n in groups.items():
        cells = []
        for n in seqlens:
            k = by_n.get(n)
            mine = idx.get((k, C.OURS)) if k else None
            if mine is None:
                cells.append("")
                continue
            if not mine.get("tflops"):
                cells.append(status_code(mine))
                continue
            best = max((idx[(k, p)]["tflops"] for p in peers
                        if p not in C.OURS_ALL and idx.get((k, p), {}).get("tflops")), default=None)
            cells.append(fmt_tflops(mine["tflops"]) + (f" ({mine['tflops'] / best:.2f}x)" if best else ""))
        table.append([name] + cells)
    if C.OURS in providers:
        parts.append("flashattn_triton TFLOP/s (ratio to the fastest peer that ran):\n\n"
                     + C.md_table(["config"] + [f"N={n}" for n in seqlens], table))
    n_budget = sum(1 for r in rows if r.get("error", "").startswith(BUDGET_SKIP))
    if n_budget:
        parts.append(f"**{n_budget} measurements were skipped by the --max-seconds budget "
                     f"({s.get('max_seconds', 0):.0f} s).**")
    return "\n\n".join(parts)


def details_markdown(rows: list[dict]) -> str:
    idx = index_rows(rows)
    keys = sorted({C.row_key(r) for r in rows}, key=config_sort_key)
    peers = [p for p in C.PEERS if any(r["provider"] == p for r in rows)]
    parts = ["Per config: our TFLOP/s; per peer: ours/peer ratio (peer TFLOP/s). "
             "OOM = out of memory, n/a = error/unsupported, skip = size limit, budget = --max-seconds."]
    for mode in C.MODES:
        table = []
        for k in (k for k in keys if k[0] == mode):
            _, dtype, d, causal, b, hq, hkv, nq, nk = k
            mine = idx.get((k, C.OURS))
            line = [dtype, d, "yes" if causal else "no", b, hq, hkv, nq,
                    (fmt_tflops(mine["tflops"], 1) if mine and mine.get("tflops") else status_code(mine))]
            for p in peers:
                r = idx.get((k, p))
                if r is not None and r.get("tflops"):
                    ratio = f"{mine['tflops'] / r['tflops']:.2f}x " if mine and mine.get("tflops") else ""
                    line.append(f"{ratio}({fmt_tflops(r['tflops'])})")
                else:
                    line.append(status_code(r))
            table.append(line)
        if table:
            parts.append(f"### {mode}\n\n" + C.md_table(
                ["dtype", "d", "causal", "B", "Hq", "Hkv", "N", "ours TFLOP/s"] + peers, table))
    errors = collections.OrderedDict()
    for r in rows:
        if r["status"] in ("error", "oom") or (r["status"] == "skipped" and not r.get("error", "").startswith(BUDGET_SKIP)):
            errors.setdefault((r["provider"], r.get("error", "")), []).append(r)
    if errors:
        lines = [f"- {prov} ({len(rs)} rows, e.g. {rs[0]['mode']} {label(rs[0])}): {err}"
                 for (prov, err), rs in list(errors.items())[:MAX_ERROR_LINES]]
        if len(errors) > MAX_ERROR_LINES:
            lines.append(f"- ... {len(errors) - MAX_ERROR_LINES} more distinct messages in the JSON")
        parts.append("### Errors and skips\n\n" + "\n".join(lines))
    return "\n\n".join(parts)


def plot(rows: list[dict], path: Path) -> Path | None:
    """One figure: rows = (mode, dtype), columns = (head_dim, causal); TFLOP/s vs N."""
    ok = [r for r in rows if r.get("tflops") and r["heads_q"] == r["heads_kv"]]
    if not ok:
        print("no successful non-GQA rows: nothing to plot")
        return None
    plt = C.import_pyplot()
    if plt is None:
        return None
    row_keys = sorted({(r["mode"], r["dtype"]) for r in ok},
                      key=lambda t: (C.MODES.index(t[0]), C.DTYPE_NAMES.index(t[1])))
    col_keys = sorted({(r["head_dim"], r["causal"]) for r in ok})
    seqlens = sorted({r["seqlen_q"] for r in ok})
    fig, axes = plt.subplots(len(row_keys), len(col_keys), squeeze=False, sharex=True,
                             figsize=(3.3 * len(col_keys) + 0.5, 2.5 * len(row_keys) + 0.9))
    handles = {}
    for i, (mode, dtype) in enumerate(row_keys):
        for j, (d, causal) in enumerate(col_keys):
            ax = axes[i][j]
            for prov in C.PROVIDERS:
                pts = sorted((r["seqlen_q"], r["tflops"]) for r in ok if r["provider"] == prov
                             and (r["mode"], r["dtype"], r["head_dim"], r["causal"]) == (mode, dtype, d, causal))
                if pts:
                    color, marker, width = STYLE[prov]
                    (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color,
                                      marker=marker, lw=width, ms=3.5, label=prov)
                    handles[prov] = line
            ax.set_xscale("log", base=2)
            ax.set_xticks(seqlens, [C.n_label(n) for n in seqlens])
            ax.minorticks_off()
            ax.set_title(f"{mode} {dtype} d={d} {'causal' if causal else 'non-causal'}", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            ax.set_ylim(bottom=0)
            if j == 0:
                ax.set_ylabel("TFLOP/s", fontsize=8)
            if i == len(row_keys) - 1:
                ax.set_xlabel("sequence length N", fontsize=8)
    order = [p for p in C.PROVIDERS if p in handles]
    fig.legend([handles[p] for p in order], order, loc="upper center", ncol=len(order), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_size_inches()[1]))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def compare_markdown(prev_rows: list[dict], cur_rows: list[dict], prev_name: str) -> tuple[str, str]:
    """Relative spread |a - b| / mean(a, b) of our TFLOP/s, per row present in both runs.

    Returns (summary lines, per-row table)."""
    def ok_map(rows, provider):
        return {C.row_key(r): r["tflops"] for r in rows if r["provider"] == provider and r.get("tflops")}

    prev, cur = ok_map(prev_rows, C.OURS), ok_map(cur_rows, C.OURS)
    common_keys = sorted(set(prev) & set(cur), key=config_sort_key)
    if not common_keys:
        return f"No flashattn_triton rows in common with {prev_name}.", ""
    table, spreads = [], []
    for k in common_keys:
        a, b = prev[k], cur[k]
        spread = abs(a - b) / ((a + b) / 2)
        spreads.append(spread)
        mode, dtype, d, causal, bsz, hq, hkv, nq, nk = k
        table.append([mode, dtype, d, "yes" if causal else "no", bsz, f"{hq}/{hkv}", nq,
                      f"{a:.1f}", f"{b:.1f}", f"{100 * spread:.1f}%"])
    lines = [f"Run-to-run spread of flashattn_triton TFLOP/s vs {prev_name}: median "
             f"{100 * statistics.median(spreads):.1f}%, max {100 * max(spreads):.1f}% over {len(spreads)} rows."]
    for peer in C.PEERS:
        pp, pc = ok_map(prev_rows, peer), ok_map(cur_rows, peer)
        sp = [abs(pp[k] - pc[k]) / ((pp[k] + pc[k]) / 2) for k in set(pp) & set(pc)]
        if sp:
            lines.append(f"- {peer}: median {100 * statistics.median(sp):.1f}%, max {100 * max(sp):.1f}% "
                         f"({len(sp)} rows)")
    return "\n".join(lines), C.md_table(
        ["mode", "dtype", "d", "causal", "B", "Hq/Hkv", "N", "prev", "now", "spread"], table)


def load_rows(path: Path) -> list[dict]:
    data = json.loads(Path(path).read_text())
    return data["rows"] if isinstance(data, dict) else data


def write_outputs(out: Path, env: dict, s: dict, rows: list[dict], run_info: dict,
                  with_plot: bool, compare: tuple[str, str] | None = None, final: bool = True) -> None:
    add_ratios(rows)
    settings = {k: v for k, v in s.items() if k != "math_max_bytes"}
    C.write_json(out / "bench_attention.json", {"env": env, "run": {**run_info, "settings": settings},
                                                "rows": rows})
    if not final:
        return
    short, details = summary_markdown(rows, s), details_markdown(rows)
    if compare:
        short += "\n\n" + compare[0]
        details += "\n\n### Run-to-run spread of flashattn_triton TFLOP/s\n\n" + compare[1]
    C.write_markdown(out / "bench_attention.md", "Attention TFLOP/s: flashattn_triton vs peers", env, short,
                     details)
    if with_plot:
        png = plot(rows, out / "bench_attention.png")
        if png:
            print(f"wrote {png}")
    print(f"wrote {out / 'bench_attention.json'} and {out / 'bench_attention.md'}")


# --------------------------------------------------------------------------- main

NO_GPU = ("needs a CUDA GPU, and torch sees none here (torch {torch}, CUDA build {cuda}).\n"
          "  --smoke   runs a tiny CPU check of the whole path (the times say nothing about speed)\n"
          "  --dry-run lists the configurations of a run")


def run(args, s: dict, prog: str = "bench_attention.py", prev_rows: list[dict] | None = None) -> int:
    """The measurements, then the outputs in args.out (prev_rows: --compare's
    rows, read by execute before anything runs; read here when None)."""
    import torch

    if s["device"] == "cuda" and not torch.cuda.is_available():
        print(f"{prog} " + NO_GPU.format(torch=torch.__version__, cuda=torch.version.cuda), file=sys.stderr)
        return 2
    C.set_device(s["device"])
    if s["device"] == "cpu":
        print("smoke run on the CPU: checks inputs, providers, timing, tables and plot; "
              "the times say nothing about speed", flush=True)
    if not s["ours_autotune"]:
        os.environ["FLASHATTN_TRITON_AUTOTUNE"] = "0"
    torch.manual_seed(args.seed)
    env = C.collect_env()
    print(C.env_line(env), flush=True)
    plan = build_plan(s)
    rounds = s.get("rounds", 1)
    total = sum(len(t.modes) for t in plan) * rounds
    progress = C.Progress(total, "bench_attention", enabled=not args.no_progress)
    budget = C.Budget(s["max_seconds"])
    runner = Runner(s, progress, budget)
    run_info = {"started": env["date"], "planned": total, "interrupted": False}

    def on_term(signum, frame):
        raise Interrupted(f"signal {signum}")
    previous_handler = signal.signal(signal.SIGTERM, on_term)

    last_flush = time.monotonic()
    try:
        for group in config_groups(plan):
            for _ in range(rounds):
                for task in group:
                    runner.run_task(task)
            if time.monotonic() - last_flush > 20:
                run_info["wall_s"] = round(budget.elapsed(), 1)
                write_outputs(args.out, env, s, runner.rows, run_info, False, final=False)
                last_flush = time.monotonic()
    except (Interrupted, KeyboardInterrupt) as exc:
        run_info["interrupted"] = True
        print(f"\ninterrupted ({exc!r}): writing partial results", flush=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        recorded = {(C.row_key(r), r["provider"]) for r in runner.rows}
        for task in plan:
            for mode in task.modes:
                row = make_row(task.cfg, task.provider, mode, "skipped", error="skipped: run interrupted")
                if (C.row_key(row), task.provider) not in recorded:
                    runner.rows.append(row)
    finally:
        progress.close()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # let the final write finish (timeout -k still kills)
    if rounds > 1:
        runner.rows = merge_rounds(runner.rows)
        run_info["rounds"] = rounds
    run_info["wall_s"] = round(budget.elapsed(), 1)
    compare = None
    if args.compare:
        prev_rows = load_rows(args.compare) if prev_rows is None else prev_rows
        compare = compare_markdown(prev_rows, runner.rows, args.compare.name)
        print("\n\n".join(compare))
    write_outputs(args.out, env, s, runner.rows, run_info, not args.no_plot, compare)
    signal.signal(signal.SIGTERM, previous_handler)
    print()
    print(summary_markdown(runner.rows, s))
    print(f"total wall time {run_info['wall_s']:.0f} s; results in {args.out}")
    return 0


def main(argv=None, default_out: Path | None = None) -> int:
    """Entry point of benchmarks/bench_attention.py (the full sweep by default)."""
    return execute(parse_args(argv, default_out), "bench_attention.py")


def usage_error(args: argparse.Namespace, message: str):
    """Exit with status 2 and ``message``, as argparse does for a bad option."""
    error = getattr(args, "usage_error", None)
    if error is not None:
        error(message)  # prints the usage and "prog: error: message", exits 2
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def read_results(args: argparse.Namespace, option: str, path: Path, render: bool = False) -> dict:
    """The JSON of an earlier run named by ``option`` (--compare, --against,
    --render) as {"rows": [...], ...}; a file that is missing, unreadable,
    not JSON or not a results file is a usage error."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        usage_error(args, f"{option} {path}: cannot read it ({exc.strerror or exc})")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        usage_error(args, f"{option} {path}: not a JSON file ({exc})")
    if not render and isinstance(data, list):
        data = {"rows": data}  # load_rows takes a bare list of rows too
    need = ("env", "run", "rows") if render else ("rows",)
    row_fields = ("provider", "mode", "status") + C.CONFIG_KEYS
    ok = (isinstance(data, dict) and all(k in data for k in need) and isinstance(data["rows"], list)
          and all(isinstance(r, dict) and all(f in r for f in row_fields) for r in data["rows"]))
    if ok and render:
        settings = data["run"].get("settings") if isinstance(data["run"], dict) else None
        ok = isinstance(data["env"], dict) and isinstance(settings, dict) and "math_max_gb" in settings
    if not ok:
        usage_error(args, f"{option} {path}: not a bench_attention.json of this benchmark (expected "
                          + ("env, run.settings and rows" if render else "rows") + ")")
    return data


def check_out(args: argparse.Namespace, out: Path) -> None:
    """--out must be a folder, or a path where one can be made, with write
    access: checked before any measurement, so that a bad path does not cost
    the run. (Its bench_attention.* files are replaced; other files stay.)"""
    out = Path(out)
    if out.exists() and not out.is_dir():
        usage_error(args, f"--out {out}: exists and is not a folder (the results are files in a folder)")
    parent = out
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        usage_error(args, f"--out {out}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        usage_error(args, f"--out {out}: {parent} is not writable")


def execute(args: argparse.Namespace, prog: str = "flashattn-triton bench") -> int:
    """Run what the parsed options of add_arguments ask for. Input files and
    --out are checked first: a usage error (exit status 2) before anything runs."""
    if args.out is None:
        args.out = Path("bench_results")
    if args.against and not args.compare:
        usage_error(args, "--against needs --compare PREV.json")
    if args.compare and args.against:
        prev = read_results(args, "--compare", args.compare)["rows"]
        cur = read_results(args, "--against", args.against)["rows"]
        print("\n\n".join(compare_markdown(prev, cur, args.compare.name)))
        return 0
    if args.render:
        data = read_results(args, "--render", args.render, render=True)
        check_out(args, args.out)
        s = dict(data["run"]["settings"])
        s["math_max_bytes"] = s["math_max_gb"] * 1e9
        args.out.mkdir(parents=True, exist_ok=True)
        write_outputs(args.out, data["env"], s, data["rows"],
                      {k: v for k, v in data["run"].items() if k != "settings"}, not args.no_plot)
        return 0
    s = resolve_settings(args)
    if args.dry_run:
        print_dry_run(build_plan(s), s)
        return 0
    prev_rows = read_results(args, "--compare", args.compare)["rows"] if args.compare else None
    check_out(args, args.out)
    return run(args, s, prog, prev_rows)


if __name__ == "__main__":
    sys.exit(main())
