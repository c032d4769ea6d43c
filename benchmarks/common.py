"""Shared helpers of the benchmark scripts.

The harness lives in the package, ``flashattn_triton/bench/common.py``, so that
the installed ``flashattn-triton bench`` command runs the same code; this
module re-exports it and adds the repository's paths. Scripts do
``import common as C`` and use ``C.attn_flops``, ``C.bench_ms``, ``C.Progress``...
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "h200"

# Fallback so `python benchmarks/x.py` finds the in-repo package without
# PYTHONPATH; appended, so an explicit PYTHONPATH or installed copy wins.
if str(REPO_ROOT) not in sys.path:
    sys.path.append(str(REPO_ROOT))

from flashattn_triton.bench import common as harness  # noqa: E402
from flashattn_triton.bench.common import *  # noqa: E402,F401,F403


def host_profile(fn, calls: int = 20, sort: str = "cumulative", lines: int = 18) -> str:
    """cProfile's table (``lines`` entries by ``sort``) of ``calls`` calls of fn
    (a CUDA function: synchronised before and after, so the table holds the
    host side of those calls)."""
    import cProfile
    import io
    import pstats

    import torch
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats(sort).print_stats(lines)
    return text.getvalue()


def host_us(fn, calls: int = 1000, warmup: int = 0) -> float:
    """Host microseconds per call of ``calls`` back-to-back calls of fn (a CUDA
    function; no sync between calls, synchronised before and after), after
    ``warmup`` calls."""
    import time

    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    us = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return us


def host_us_spread(fn, calls: int = 100, repeats: int = 21, warmup: int = 50) -> tuple:
    """(median, min, max) of host_us over ``repeats`` runs of ``calls`` calls
    each, after ``warmup`` calls.  On a shared host one long run's mean moves
    with the other tenants (session 63: 54-124 us for the same call); the
    median of short runs is steadier, and the min bounds what the code costs."""
    import statistics

    runs = [host_us(fn, calls=calls, warmup=warmup if i == 0 else 0) for i in range(repeats)]
    return statistics.median(runs), min(runs), max(runs)


def kernel_us(fn, calls: int = 20, width: int = 80) -> dict:
    """torch.profiler's CUDA kernel time per call of fn over ``calls`` back-to-back
    calls (synchronised after): {kernel name (its first ``width`` characters): us
    per call}, largest first. Kernels launched from any thread count (autograd's
    backward runs on a thread of its own)."""
    from collections import defaultdict

    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per: dict = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name[:width]] += e.device_time / calls
    return dict(sorted(per.items(), key=lambda kv: -kv[1]))


def parse_overrides(spec: str) -> dict:
    """KEY=VALUE meta-parameter overrides joined by '+' (values int, or true /
    false), as the Gluon probes and compile_check take them; "" -> {}."""
    out = {}
    for item in filter(None, spec.split("+")):
        key, _, val = item.partition("=")
        out[key] = {"true": True, "false": False}.get(val.lower(), None)
        if out[key] is None:
            out[key] = int(val)
    return out
