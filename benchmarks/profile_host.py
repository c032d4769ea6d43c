"""Where the host time of one attention call goes, section by section.

    python benchmarks/profile_host.py                 # on the GPU (real launches)
    python benchmarks/profile_host.py --device cpu    # no GPU: CPU tensors through the
                                                      # CUDA code path, launches recorded
    python benchmarks/profile_host.py --out DIR       # also write profile_host.{json,md}
    python benchmarks/profile_host.py --device cpu --no-launch --compare-plans
                                  # the Python host path alone (launches do nothing),
                                  # with and without the call plans
    python benchmarks/profile_host.py --device cpu --backward --backends hopper,portable
                                  # forward + backward calls (torch.autograd.grad),
                                  # Hopper backward (stand-in on CPU) vs the portable one,
                                  # each also with the backward plans off (ops.BWD_PLANS);
                                  # --dq-convert-kernel: the Hopper backward replayable too

The call is the overhead benchmark's tiny shape (B=1, H=8, N=128, d=64,
fp16, causal), whose GPU work is a few microseconds, so the wall time of
back-to-back calls is host time.  After the first call of a signature a call
takes its plan (api.py: key, allocations, replay of the recorded launches);
--compare-plans adds rows with the plans off (the full path per call).  For each entry (flash_attn_func, with and
without grad-requiring inputs, the SDPA entry; Hopper and portable tiers) it
prints the plain time per call, then the time per call inside each section
(inclusive, nested as in the call tree), measured by wrapping the functions
with timers (each wrapper adds ~0.2-0.5 us, so the sections add up to more
than the plain time).  Then the Triton launch alone: a kernel's
``kernel[grid](...)`` with fixed arguments, against the library's launch
fast path (kernels/launch.py).

With --device cpu, Triton's driver is replaced by tests/fake_cuda.py: the JIT
binds, specializes and compiles for sm_90 (ptxas, no GPU) and records the
launch instead of running it.  Everything but the CUDA calls (launch,
stream/device queries, TMA descriptor encoding) is the real code; the Hopper
tier's GPU checks are bypassed so that its host code runs too (Triton 3.6).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))

SHAPE = dict(B=1, N=128, H=8, D=64)

# ---------------------------------------------------------------------------
# Section timers
# ---------------------------------------------------------------------------

_ACC = collections.defaultdict(lambda: [0, 0])  # label -> [ns, calls]
# Wall time on the GPU; with --device cpu, the thread's CPU time (the CPU
# emulation usually runs on shared machines, where wall time is noise).
_perf_ns = time.perf_counter_ns


def _timed(label, fn):
    acc = _ACC[label]

    def wrapper(*args, **kwargs):
        clock = _perf_ns
        t0 = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[0] += clock() - t0
            acc[1] += 1
    wrapper.__wrapped_fn__ = fn
    return wrapper


class Patcher:
    """setattr with undo."""

    def __init__(self):
        self.undo = []

    def set(self, owner, name, value):
        self.undo.append((owner, name, vars(owner).get(name, _MISSING)))
        setattr(owner, name, value)

    def wrap(self, label, owner, name, static=False):
        fn = getattr(owner, name)
        wrapped = _timed(label, fn)
        self.set(owner, name, staticmethod(wrapped) if static else wrapped)

    def restore(self):
        for owner, name, old in reversed(self.undo):
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
        self.undo.clear()


_MISSING = object()

# The call tree: (depth, label).  Labels without a wrapper in a run show as absent.
# A planned call (the signature was seen before, api.py):
TREE_PLANNED = [
    (0, "call"),
    (1, "api: plan key"), (1, "api: planned call"),
    (2, "ops.attention_planned (autograd)"), (3, "backward prefetch check"), (3, "ops.plan_forward"),
    (4, "ops._new (allocations)"), (4, "fastlaunch: replay (checks, arguments)"),
    (5, "launch: direct (C entry)"),
]
# The full path (first call of a signature, or plans off):
TREE = [
    (0, "call"),
    (1, "api: autocast_inputs"), (1, "api: check_qkv"), (1, "api: check_flag"),
    (1, "api: check_window"), (1, "api: check_scale"), (1, "api: _params (record + variant checks)"),
    (1, "ops.attention_base2 (op + autograd)"),
    (2, "ops._needs_autograd"), (2, "backward prefetch check"),
    (2, "ops._attention_fwd_impl"),
    (3, "ops._new (allocations)"), (3, "dispatch: use_triton"), (3, "dispatch: use_hopper_forward"),
    (3, "hopper forward (host + launch)"),
    (4, "hopper: signature"), (4, "hopper: unsupported_reason"), (4, "hopper: TensorDescriptor"),
    (4, "launch: hopper"), (5, "launch: direct (C entry)"), (4, "JIT run: hopper"),
    (3, "ops._kernel_mods"),
    (3, "fwd.attention_forward (host code)"),
    (4, "Launcher.__call__"), (5, "Launcher.config"), (5, "launch: fwd"), (6, "launch: direct (C entry)"),
    (5, "JIT run: fwd"),
    (6, "JIT binder (specialization)"), (6, "JIT compute_cache_key"), (6, "launcher (C / recorded)"),
    (2, "ops._setup_context"),
    (1, "api: _returns"),
]


# The backward of a fwd + bwd call (--backward), after the forward's sections:
TREE_BWD = [
    (1, "ops backward (autograd Function)"), (2, "ops.plan_backward (backward plan)"),
    (2, "ops._attention_bwd_impl"),
    (3, "bwd.attention_backward (host code)"), (4, "launch: bwd_preprocess"),
    (4, "hopper backward (host + launch)"), (5, "hopper bwd: unsupported_reason"),
    (5, "hopper bwd: kernel_meta"), (5, "launch: hopper_bwd"), (6, "launch: direct (C entry)"),
    (4, "launch: bwd_dkdv"), (4, "launch: bwd_dq"),
]


def _flat(items):
    for x in items:
        if isinstance(x, tuple):
            yield from _flat(x)
        else:
            yield x


def instrument(p: Patcher, kernels, planned: bool = False):
    """Wrap the sections with timers (what exists in this version of the code).
    planned: leave the op layer's dispatch functions as they are, which a
    call plan's replay checks (ops._world: replaced ones make it take the full
    op path, as they would for a test's spy)."""
    from flashattn_triton import api, ops
    from flashattn_triton.kernels import fwd, launch
    import triton.runtime.jit as jit
    world = set()
    if planned and hasattr(ops, "_world"):
        world = {id(f) for f in ops._world()}
    if planned and hasattr(ops, "_bwd_world"):  # what a backward plan's replay checks
        world |= {id(f) for f in _flat(ops._bwd_world())}

    def wrap(label, owner, name):
        if owner is not None and hasattr(owner, name) and id(getattr(owner, name)) not in world:
            p.wrap(label, owner, name)

    for name in ("autocast_inputs", "check_qkv", "check_flag", "check_window", "check_scale"):
        wrap(f"api: {name}", api, name)
    wrap("api: _params (record + variant checks)", api, "_params")
    wrap("api: plan key", api, "_flash_key")
    wrap("api: plan key", api, "_sdpa_key")
    if hasattr(api, "_CallPlan"):
        wrap("api: planned call", api._CallPlan, "flash")
        wrap("api: planned call", api._CallPlan, "sdpa")
    wrap("ops.attention_planned (autograd)", ops, "attention_planned")
    wrap("ops.plan_forward", ops, "plan_forward")
    wrap("api: _returns", api, "_returns")
    wrap("ops.attention_base2 (op + autograd)", ops, "attention_base2")
    wrap("ops._needs_autograd", ops, "_needs_autograd")
    wrap("backward prefetch check", getattr(ops, "_prefetch", None), "maybe_prefetch")
    wrap("ops._attention_fwd_impl", ops, "_attention_fwd_impl")
    wrap("ops._new (allocations)", ops, "_new")
    wrap("dispatch: use_triton", ops, "use_triton")
    wrap("dispatch: use_hopper_forward", ops, "use_hopper_forward")
    wrap("ops._kernel_mods", ops, "_kernel_mods")
    wrap("ops._setup_context", ops, "_setup_context")
    if hasattr(ops, "_EagerAttention"):
        p.wrap("ops backward (autograd Function)", ops._EagerAttention, "backward", static=True)
    wrap("ops._attention_bwd_impl", ops, "_attention_bwd_impl")
    wrap("ops.plan_backward (backward plan)", ops, "plan_backward")
    wrap("fwd.attention_forward (host code)", fwd, "attention_forward")
    wrap("Launcher.__call__", launch.Launcher, "__call__")
    wrap("Launcher.config", launch.Launcher, "config")
    wrap("JIT compute_cache_key", jit, "compute_cache_key")
    holder = getattr(ops, "_kernels", None)
    if holder is not None:  # the op layer's cached kernel entry points
        if holder.forward is None:
            holder.load()
        wrap("fwd.attention_forward (host code)", holder, "forward")
        wrap("hopper forward (host + launch)", holder, "hopper_forward")
        wrap("bwd.attention_backward (host code)", holder, "backward")
    try:
        from flashattn_triton.kernels import hopper
        if hopper.AVAILABLE:
            from flashattn_triton.kernels.hopper import fwd as hfwd
            if holder is None:
                wrap("hopper forward (host + launch)", hopper, "hopper_attention_forward")
            wrap("hopper: signature", hfwd, "_signature")
            wrap("hopper: unsupported_reason", hfwd, "unsupported_reason")
            wrap("hopper: TensorDescriptor", hfwd, "_descriptor" if hasattr(hfwd, "_descriptor") else "TensorDescriptor")
            from flashattn_triton.kernels.hopper import bwd as hbwd
            wrap("hopper backward (host + launch)", hopper, "hopper_attention_backward")
            wrap("hopper bwd: unsupported_reason", hbwd, "unsupported_reason")
            wrap("hopper bwd: kernel_meta", hbwd, "kernel_meta")
    except ImportError:
        pass
    try:
        from flashattn_triton.kernels import fastlaunch
    except ImportError:
        fastlaunch = None
    if fastlaunch is not None and hasattr(fastlaunch, "Replay"):
        wrap("fastlaunch: replay (checks, arguments)", fastlaunch.Replay, "__call__")
        wrap("launch: direct (C entry)", fastlaunch._Direct, "launch")
    for label, kernel in kernels.items():
        run = fastlaunch.fast_run(kernel) if fastlaunch is not None else None
        if run is not None:  # the fast path's entry, and Triton's path behind it
            p.set(run, "launch", _timed(f"launch: {label}", run.launch))
            p.set(run, "jit_run", _timed(f"JIT run: {label}", run.jit_run))
        else:
            p.set(kernel, "run", _timed(f"JIT run: {label}", kernel.run))


def instrument_compiled(p: Patcher, kernels):
    """After the first call: the binders and launchers of the compiled kernels."""
    for kernel in kernels.values():
        for dev, entry in list(kernel.device_caches.items()):
            cache, key_cache, target, backend, binder = entry
            if not hasattr(binder, "__wrapped_fn__"):
                kernel.device_caches[dev] = (cache, key_cache, target, backend,
                                             _timed("JIT binder (specialization)", binder))
            for compiled in cache.values():
                compiled = compiled.result() if hasattr(compiled, "result") else compiled
                run = compiled.run  # loads the module on first access
                if not hasattr(run, "__wrapped_fn__"):
                    p.set(compiled, "_run", _timed("launcher (C / recorded)", run))


# ---------------------------------------------------------------------------
# CPU emulation of the CUDA path
# ---------------------------------------------------------------------------

@contextlib.contextmanager
def cpu_emulation(p: Patcher):
    """CPU tensors through the CUDA code path, Triton's driver faked (see module doc)."""
    sys.path.insert(0, str(REPO / "tests"))
    import torch
    from fake_cuda import fake_cuda
    from flashattn_triton import _dispatch, ops
    from flashattn_triton.kernels import launch

    def config(self, device, *key):
        cfg = launch.config_from_env(self.name)
        if cfg is not None:
            return cfg
        return self.choose(0, *key)

    with fake_cuda():
        p.set(ops, "use_triton", lambda t: True)
        p.set(launch, "_arch", lambda index: "sm90")
        p.set(launch.Launcher, "config", config)
        try:
            from flashattn_triton.kernels import hopper
            if hopper.AVAILABLE:
                from flashattn_triton.kernels.hopper import fwd as hfwd
                real_reason = hfwd.unsupported_reason

                class OnCuda:  # q as the checks see it: every check runs but the CUDA ones
                    is_cuda = True

                    def __init__(self, t):
                        self._t = t

                    def __getattr__(self, name):
                        return getattr(self._t, name)

                def reason(q, k, v, o, lse, sm_scale):
                    return real_reason(OnCuda(q), k, v, o, lse, sm_scale)

                p.set(hfwd.torch.cuda, "get_device_capability", lambda device=None: (9, 0))
                real_device = hfwd.torch.cuda.device
                p.set(hfwd.torch.cuda, "device", lambda d: contextlib.nullcontext()
                      if isinstance(d, torch.device) and d.type != "cuda" else real_device(d))

                def use_hopper(q, k, v, window, offset, plain=False, **options):  # (attention_chunk, ...)
                    return (_dispatch.backend() != "portable" and window[0] < 0 and window[1] in (-1, 0))

                p.set(hfwd, "unsupported_reason", reason)
                p.set(hfwd, "sm_count", lambda device: 132)  # the persistent / dynamic grids' size
                p.set(ops, "use_hopper_forward", use_hopper)

                # The Hopper backward (--backward): its checks see q on a CUDA
                # device of capability 9.0, the dispatch takes it on the Hopper tier.
                from flashattn_triton.kernels.hopper import bwd as hbwd
                real_bwd_reason = hbwd.unsupported_reason

                class OnCudaDevice(OnCuda):
                    is_meta = False
                    device = torch.device("cuda", 0)

                def bwd_reason(do, q, *rest, **kw):
                    return real_bwd_reason(do, OnCudaDevice(q), *rest, **kw)

                def use_hopper_bwd(device, window, deterministic, seqlen=1 << 30, head_dim=128, head_dim_v=None,
                                   **options):
                    return (_dispatch.backend() != "portable" and not deterministic
                            and window[0] < 0 and window[1] in (-1, 0))

                p.set(hbwd, "unsupported_reason", bwd_reason)
                p.set(hbwd, "sm_count", lambda device: 132)
                p.set(ops, "use_hopper_backward", use_hopper_bwd)
        except ImportError:
            pass
        yield


# ---------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------

_STAT = statistics.median  # --stat min: the least noisy estimate of a pure host path on a shared machine
_REPEATS = 5


def _per_call_us(fn, n, repeats=None, sync=None):
    """Median (--stat) over `repeats` of the time per call of n calls (garbage collection off)."""
    repeats = repeats or _REPEATS
    times = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            if sync:
                sync()
            t0 = _perf_ns()
            for _ in range(n):
                fn()
            if sync:
                sync()
            times.append((_perf_ns() - t0) / n / 1e3)
    finally:
        gc.enable()
    return _STAT(times)


def calls(device, backward: bool = False):
    import torch
    import torch.nn.functional as F
    import flashattn_triton as fat
    s = SHAPE
    q, k, v = (torch.randn(s["B"], s["N"], s["H"], s["D"], device=device, dtype=torch.float16)
               for _ in range(3))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    if backward:  # forward + backward (the gradients returned, not accumulated)
        g = torch.randn_like(q)
        from flashattn_triton import ops

        if hasattr(ops, "BWD_PLANS"):  # the rows with the backward plans on (the default)
            ops.BWD_PLANS = True

        def fwd_bwd():
            return torch.autograd.grad(fat.flash_attn_func(qg, kg, vg, causal=True), (qg, kg, vg), g)

        def no_bwd_plan():  # the backward's launches not replayed (ops.BWD_PLANS)
            ops.BWD_PLANS = False
            try:
                return fwd_bwd()
            finally:
                ops.BWD_PLANS = True

        sinks = torch.randn(s["H"], device=device, dtype=torch.float32, requires_grad=True)

        def fwd_bwd_sinks():  # a tensor option: planned since session 29 (its own tensors as replay roles)
            return torch.autograd.grad(fat.flash_attn_func(qg, kg, vg, causal=True, sinks=sinks),
                                       (qg, kg, vg, sinks), g)

        out = {
            "flash_attn_func, inputs require grad": lambda: fat.flash_attn_func(qg, kg, vg, causal=True),
            "flash_attn_func fwd + bwd": fwd_bwd,
            "flash_attn_func fwd + bwd, sinks": fwd_bwd_sinks,
        }
        if hasattr(ops, "BWD_PLANS"):
            out["flash_attn_func fwd + bwd, backward plans off"] = no_bwd_plan
        if device == "cuda":
            out["torch SDPA fwd + bwd"] = lambda: torch.autograd.grad(F.scaled_dot_product_attention(
                qg.transpose(1, 2), kg.transpose(1, 2), vg.transpose(1, 2), is_causal=True),
                (qg, kg, vg), g.transpose(1, 2))
        return out
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    out = {
        "flash_attn_func": lambda: fat.flash_attn_func(q, k, v, causal=True),
        "flash_attn_func, inputs require grad": lambda: fat.flash_attn_func(qg, kg, vg, causal=True),
        "scaled_dot_product_attention (ours)": lambda: fat.scaled_dot_product_attention(qt, kt, vt, is_causal=True),
    }
    if device == "cuda":
        out["torch SDPA"] = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
        out["torch SDPA, inputs require grad"] = lambda: F.scaled_dot_product_attention(
            qg.transpose(1, 2), kg.transpose(1, 2), vg.transpose(1, 2), is_causal=True)
    return out


def profile(device: str, n_calls: int, backends, compare_plans: bool = False, backward: bool = False):
    import torch
    from flashattn_triton.kernels import bwd, fwd
    kernels = {"fwd": fwd._attn_fwd, "bwd_preprocess": bwd._bwd_preprocess, "bwd_dkdv": bwd._bwd_dkdv,
               "bwd_dq": bwd._bwd_dq}
    try:
        from flashattn_triton.kernels import hopper
        if hopper.AVAILABLE:
            from flashattn_triton.kernels.hopper import bwd as hbwd, fwd as hfwd
            kernels["hopper"] = hfwd._attn_fwd_hopper
            kernels["hopper_bwd"] = hbwd._attn_bwd_hopper
    except ImportError:
        pass
    from flashattn_triton import ops
    sync = torch.cuda.synchronize if device == "cuda" else None
    results = {}
    runs = [(b, True) for b in backends]
    if compare_plans and hasattr(ops, "PLANS_ENABLED"):
        runs += [(b, False) for b in backends]
    for backend, plans in runs:
        os.environ["FLASHATTN_TRITON_BACKEND"] = backend
        if hasattr(ops, "PLANS_ENABLED"):
            ops.PLANS_ENABLED = plans
        for name, fn in calls(device, backward).items():
            if name.startswith("torch") and (backend != backends[0] or not plans):
                continue
            label = name if name.startswith("torch") else f"{name} [{backend}{'' if plans else ', plans off'}]"
            t_first = time.perf_counter()
            fn()
            t_first = time.perf_counter() - t_first
            for _ in range(20):
                fn()
            try:  # a backward prefetch compiling in the background would skew the timing
                from flashattn_triton import _prefetch
                _prefetch.wait_pending()
            except ImportError:
                pass
            plain = _per_call_us(fn, n_calls, sync=sync)
            entry = dict(first_call_s=t_first, plain_us=plain, sections={})
            if not name.startswith("torch"):
                p = Patcher()
                try:
                    instrument(p, kernels, planned=plans)
                    instrument_compiled(p, kernels)
                    for _ in range(5):
                        fn()
                    totals, runs = [], []
                    for _ in range(5):  # medians over 5 runs of n_calls
                        for acc in _ACC.values():
                            acc[0] = acc[1] = 0
                        totals.append(_per_call_us(fn, n_calls, repeats=1, sync=sync))
                        runs.append({k: (v[0] / 1e3 / n_calls, v[1] / n_calls) for k, v in _ACC.items() if v[1]})
                    entry["instrumented_us"] = statistics.median(totals)
                    entry["sections"] = {k: statistics.median(r[k][0] for r in runs if k in r) for k in runs[0]}
                    entry["section_calls"] = {k: runs[0][k][1] for k in runs[0]}
                finally:
                    p.restore()
            results[label] = entry
            print(f"{label}: {plain:.1f} us/call (first call {t_first:.2f} s)", flush=True)
    if hasattr(ops, "PLANS_ENABLED"):
        ops.PLANS_ENABLED = True
    return results


def launch_only(device: str, n_calls: int):
    """The portable forward's launch with fixed arguments: Triton's JIT path
    against the library's fast path (if any)."""
    import torch
    from flashattn_triton.kernels import fwd, launch
    captured = {}
    orig = launch.Launcher.__call__

    def capture(self, grid, key, *args, **kwargs):
        captured.setdefault("call", (self, grid, key, args, kwargs))
        return orig(self, grid, key, *args, **kwargs)

    import flashattn_triton as fat
    s = SHAPE
    q, k, v = (torch.randn(s["B"], s["N"], s["H"], s["D"], device=device, dtype=torch.float16)
               for _ in range(3))
    os.environ["FLASHATTN_TRITON_BACKEND"] = "portable"
    from flashattn_triton import ops
    plans = getattr(ops, "PLANS_ENABLED", False)
    ops.PLANS_ENABLED = False  # a planned call replays its launches, without the Launcher
    launch.Launcher.__call__ = capture
    try:
        fat.flash_attn_func(q, k, v, causal=True)
    finally:
        launch.Launcher.__call__ = orig
        ops.PLANS_ENABLED = plans
    self, grid, key, args, kwargs = captured["call"]
    cfg = self.config(args[0].device, *key)
    allkw = dict(kwargs, **cfg.all_kwargs())
    g = grid(allkw)
    sync = torch.cuda.synchronize if device == "cuda" else None
    out = {"n_args": len(args) + len(allkw)}
    triton_run = type(fwd._attn_fwd).run.__get__(fwd._attn_fwd)  # Triton's JITFunction.run
    out["triton kernel[grid](...)"] = _per_call_us(lambda: triton_run(*args, grid=g, warmup=False, **allkw),
                                                   n_calls, sync=sync)
    out["Launcher.__call__"] = _per_call_us(lambda: self(grid, key, *args, **kwargs), n_calls, sync=sync)
    try:
        from flashattn_triton.kernels import fastlaunch
        fast = fastlaunch.fast_run(fwd._attn_fwd)
    except ImportError:
        fast = None
    if fast is not None:
        out["fast path (FastRun.launch)"] = _per_call_us(lambda: fast.launch(args, allkw, g), n_calls, sync=sync)
    for name, value in out.items():
        if name != "n_args":
            print(f"launch only, {name}: {value:.1f} us/call", flush=True)
    return out


# ---------------------------------------------------------------------------
# --check: the fast path launches what Triton's path launches
# ---------------------------------------------------------------------------

def _check_cases(device):
    """name -> (inputs(grad) -> tensors, call(*tensors) -> output)."""
    import torch
    import flashattn_triton as fat
    dt = torch.float16

    def qkv(b, n, hq, hkv, d, nk=None):
        nk = nk or n

        def make(grad):
            q = torch.randn(b, n, hq, d, device=device, dtype=dt)
            k = torch.randn(b, nk, hkv, d, device=device, dtype=dt)
            v = torch.randn(b, nk, hkv, d, device=device, dtype=dt)
            return [t.requires_grad_(grad) for t in (q, k, v)]
        return make

    def packed(grad):
        t = torch.randn(1, 200, 3, 3, 36, device=device, dtype=dt)  # k, v: pointers 8 bytes off 16
        return [x.detach().requires_grad_(grad) for x in t.unbind(2)]

    def sdpa(grad):
        return [t.detach().transpose(1, 2).requires_grad_(grad) for t in qkv(2, 64, 4, 4, 64)(False)]

    def other_strides(make):  # the values in (b, h, n, d) memory order: same shapes, other strides
        def remake(grad):
            return [t.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_(grad)
                    for t in make(False)]
        return remake

    def cast(make, dtype):
        def remake(grad):
            return [t.detach().to(dtype).requires_grad_(grad) for t in make(False)]
        return remake

    tiny = qkv(1, 128, 8, 8, 64)
    causal = lambda q, k, v: fat.flash_attn_func(q, k, v, causal=True)  # noqa: E731
    return {
        "tiny causal": (tiny, causal),
        "tiny causal, other strides": (other_strides(tiny), causal),
        "tiny causal, bfloat16": (cast(tiny, torch.bfloat16), causal),
        "tiny causal, return_lse": (tiny, lambda q, k, v: fat.flash_attn_func(q, k, v, causal=True, return_lse=True)),
        "tiny, not causal": (tiny, lambda q, k, v: fat.flash_attn_func(q, k, v)),
        "GQA, Nq != Nk, d=96": (qkv(2, 77, 6, 2, 96, nk=130),
                                lambda q, k, v: fat.flash_attn_func(q, k, v, causal=True)),
        "full, d=128": (qkv(2, 300, 4, 4, 128), lambda q, k, v: fat.flash_attn_func(q, k, v)),
        "window + softcap": (qkv(1, 200, 4, 2, 64), lambda q, k, v: fat.flash_attn_func(
            q, k, v, causal=True, window_size=(50, 0), softcap=20.0)),
        "qkv slices (misaligned strides)": (packed, lambda q, k, v: fat.flash_attn_func(q, k, v, causal=True)),
        "SDPA entry": (sdpa, lambda q, k, v: fat.scaled_dot_product_attention(q, k, v, is_causal=True)),
    }


def _describe(x, inputs, kind=None):
    """What must agree between two launches of one call: tensors by layout,
    alignment and which input's memory they are (new buffers differ per call);
    pointer arguments (kind "*...") passed as addresses by alignment and input;
    TMA descriptors (the fake driver's encodings) by their fields, the base
    address as a pointer."""
    import torch
    if isinstance(x, torch.Tensor):
        ptr = x.data_ptr()
        if kind is not None:  # the launcher reads the address only
            return ("ptr", ptr % 16, inputs.get(ptr))
        return ("tensor", x.dtype, tuple(x.shape), tuple(x.stride()), ptr % 16, inputs.get(ptr))
    if isinstance(kind, str) and kind.startswith("*") and type(x) is int:
        return ("ptr", x % 16, inputs.get(x))
    if isinstance(x, tuple) and len(x) == 2 and x[0] == "tma":  # fake_cuda's fill_tma_descriptor
        ptr, *rest = x[1]
        return ("tma", ptr % 16, inputs.get(ptr), repr(rest))
    if hasattr(x, "block_shape") and hasattr(x, "base"):  # a TMA descriptor: what the launcher reads
        ptr = x.base.data_ptr()
        return ("desc", x.base.dtype, ptr % 16, inputs.get(ptr), tuple(x.shape), tuple(x.strides),
                tuple(x.block_shape), repr(x.layout), x.padding)
    return (type(x).__name__, x)


def _describe_launch(launcher, args, inputs):
    kinds = getattr(launcher, "kinds", None)
    if kinds is None or len(kinds) != len(args):
        return [_describe(a, inputs) for a in args]
    return [_describe(a, inputs, kind if isinstance(kind, str) and kind.startswith("*") else None)
            for a, kind in zip(args, kinds)]


def _bwd_kernels():
    from flashattn_triton.kernels import bwd
    from triton.runtime.jit import JITFunction
    return [k for k in vars(bwd).values() if isinstance(k, JITFunction) and k.__name__.startswith("_bwd")]


def check_prefetch(device: str) -> int:
    """For each case with gradients: drop the backward kernels from Triton's
    in-memory cache, run the forward (which starts the backward prefetch),
    wait for the prefetch, then run the backward: it must not need a kernel
    that the prefetch did not build."""
    import torch
    from flashattn_triton import _prefetch
    from flashattn_triton.kernels import fastlaunch
    if device == "cpu":
        _prefetch._on_gpu = lambda t: True
    failures = 0
    for name, (make, call) in _check_cases(device).items():
        kernels = _bwd_kernels()
        for kern in kernels:
            kern.device_caches.clear()
            run = fastlaunch.fast_run(kern)
            if run is not None:
                run.layouts.clear()
        _prefetch._seen.clear()
        torch.manual_seed(0)
        inputs = make(True)
        t0 = time.perf_counter()
        out = call(*inputs)
        out = out[0] if isinstance(out, tuple) else out
        _prefetch.wait_pending()
        t_prefetch = time.perf_counter() - t0
        built = {id(k): set(k.device_caches[0][0]) if 0 in k.device_caches else set() for k in kernels}
        out.float().sum().backward()
        missed = sum(len((set(k.device_caches[0][0]) if 0 in k.device_caches else set()) - built[id(k)])
                     for k in kernels)
        n_built = sum(len(b) for b in built.values())
        if "softcap" in name:  # not prefetched by design
            ok = True
        else:
            ok = missed == 0 and n_built > 0
        failures += not ok
        print(f"prefetch {name}: {'ok' if ok else 'MISSED'} ({n_built} kernels prefetched, {missed} compiled "
              f"by the backward, forward + prefetch {t_prefetch:.2f} s)", flush=True)
    return failures


def check(device: str) -> int:
    """Run each case with the fast paths off (no call plans, Triton's launch
    path) on two sets of inputs A and B, then with them on: A (first call of
    the signature: validated, plan made, launches recorded), A again (the
    plan's replay), B (the replay with other addresses), A.  On the CPU compare
    the launches (compiled kernel, grid, arguments), on the GPU the outputs and
    gradients (bitwise), each with the fast-path-off run of the same inputs.
    The plans persist from case to case: the cases that share shapes with an
    earlier one (other strides, dtype, requires_grad, return_lse) must not take
    its plan."""
    import torch
    from flashattn_triton import api, ops
    from flashattn_triton.kernels import fastlaunch
    failures = 0
    replays = [0, 0]  # taken, declined
    real_replay = fastlaunch.Replay.__call__

    def counting(self, roles):
        ok = real_replay(self, roles)
        replays[0 if ok else 1] += 1
        return ok

    fastlaunch.Replay.__call__ = counting
    api.clear_plans()

    def run(call, inputs, grad):
        ptrs = {t.data_ptr(): i for i, t in enumerate(inputs)}
        torch.manual_seed(0)
        if device == "cpu":
            from fake_cuda import LAUNCHES
            LAUNCHES.clear()
        out = call(*inputs)
        out = out[0] if isinstance(out, tuple) else out
        if grad:
            for t in inputs:
                t.grad = None
            out.float().sum().backward()
        if device == "cpu":
            return [(id(l), g, _describe_launch(l, args, ptrs)) for l, g, args in LAUNCHES]
        torch.cuda.synchronize()
        return [out.detach().clone()] + ([t.grad.clone() for t in inputs] if grad else [])

    def same(a, b):
        if device == "cpu":
            return a == b and len(a) > 0
        return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))

    try:
        for name, (make, call) in _check_cases(device).items():
            for grad in (False, True):
                torch.manual_seed(0)
                inputs = {"A": make(grad), "B": make(grad)}
                fastlaunch.ENABLED, ops.PLANS_ENABLED = False, False
                ref = {which: run(call, inputs[which], grad) for which in "AB"}
                fastlaunch.ENABLED, ops.PLANS_ENABLED = fastlaunch.SUPPORTED, True
                before = list(replays)
                results = [(which, run(call, inputs[which], grad)) for which in "AABA"]
                ok = all(same(ref[which], got) for which, got in results)
                taken = replays[0] - before[0]
                detail = (f"{len(ref['A'])} launches" if device == "cpu" else
                          "outputs and gradients bitwise equal" if ok else "results differ")
                failures += not ok
                print(f"check {name} (grad={grad}): {'ok' if ok else 'MISMATCH'} ({detail}; "
                      f"{taken} of 3 repeated calls replayed)", flush=True)
    finally:
        fastlaunch.Replay.__call__ = real_replay
        fastlaunch.ENABLED, ops.PLANS_ENABLED = fastlaunch.SUPPORTED, True
    print(f"replays: {replays[0]} taken, {replays[1]} declined", flush=True)
    return failures


def _placed(tree, sections):
    """The tree's entries that ran, a label listed more than once (the Hopper
    and the portable launch share one) only where its parent ran."""
    parents, last = [], {}
    for depth, name in tree:
        last[depth] = name
        parents.append(last.get(depth - 1) if depth > 1 else None)
    chosen = {}
    for i, (depth, name) in enumerate(tree):
        if name in sections and (name not in chosen or (parents[chosen[name]] not in sections
                                                         and parents[i] in sections)):
            chosen[name] = i
    return [tree[i] for i in sorted(chosen.values())]


def render(results, launch_res, env) -> str:
    lines = [f"Environment: {env}", "",
             f"Shape: {SHAPE}, fp16, causal.  'plain': us per call, no timers.  Sections: us per call "
             "inside each (inclusive, timers add ~0.3 us each).", ""]
    for label, r in results.items():
        lines.append(f"### {label}: {r['plain_us']:.1f} us/call plain"
                     + (f", {r['instrumented_us']:.1f} instrumented" if "instrumented_us" in r else ""))
        if r["sections"]:
            lines += ["", "| section | us/call | calls/call |", "|---|---|---|"]
            tree = (TREE_PLANNED if "api: planned call" in r["sections"] else TREE) + TREE_BWD
            for depth, name in _placed(tree[1:], r["sections"]):
                lines.append(f"| {'&nbsp;&nbsp;' * (depth - 1)}{name} | {r['sections'][name]:.1f} | "
                             f"{r['section_calls'][name]:.0f} |")
        lines.append("")
    lines += ["### launch alone (portable forward, fixed arguments)", "",
              "| path | us/call |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in launch_res.items() if k != "n_args"]
    lines.append(f"\n{launch_res['n_args']} kernel arguments (with meta-parameters).")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--calls", type=int, default=2000, help="calls per timing (default 2000)")
    ap.add_argument("--backends", default="auto,portable",
                    help="FLASHATTN_TRITON_BACKEND values to profile (default auto,portable)")
    ap.add_argument("--out", default="", help="directory for profile_host.json / .md")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="statistic over the repeats of each timing (default median)")
    ap.add_argument("--repeats", type=int, default=5, help="repeats of each timing (default 5)")
    ap.add_argument("--no-launch", action="store_true",
                    help="with --device cpu: the fake launcher does nothing (no recording), so the "
                         "times are the Python host path alone")
    ap.add_argument("--compare-plans", action="store_true",
                    help="also profile every entry with the call plans off (ops.PLANS_ENABLED = False: "
                         "validation, dispatch and the launch fast path on every call)")
    ap.add_argument("--backward", action="store_true",
                    help="profile forward + backward calls (torch.autograd.grad of flash_attn_func with "
                         "grad-requiring inputs) and the forward alone with grad; with --backends "
                         "hopper,portable the Hopper backward (on CPU: its host code on the fake driver) "
                         "against the portable one")
    ap.add_argument("--dq-convert-kernel", action="store_true",
                    help="kernels/bwd.py DQ_CONVERT_KERNEL = True: the Hopper backward's (and the fused "
                         "form's) dQ conversion by a Triton kernel instead of torch's copy, which makes "
                         "its backward replayable by the backward plans")
    ap.add_argument("--seqlen", type=int, default=SHAPE["N"],
                    help=f"sequence length N of the calls (default {SHAPE['N']}; on CPU a smaller one keeps the "
                         "tensor operations that stand in for GPU work, e.g. the backward's float32 dQ "
                         "buffer, from hiding the host time)")
    ap.add_argument("--check", action="store_true",
                    help="only check that the call plans and the launch fast path launch what the full "
                         "path and Triton's launch do "
                         "(CPU: same kernels and arguments; GPU: bitwise equal outputs) and that the "
                         "backward prefetch builds every kernel the backward launches")
    args = ap.parse_args()
    import torch
    import triton
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU (or --device cpu)")
    env = dict(torch=torch.__version__, triton=triton.__version__, device=args.device,
               gpu=torch.cuda.get_device_name() if args.device == "cuda" else "none (fake driver)",
               commit=os.environ.get("GIT_COMMIT", ""))
    backends = [b for b in args.backends.split(",") if b]
    if args.device == "cpu":
        global _perf_ns
        _perf_ns = time.thread_time_ns
        # CPU tensor operations stand in for the GPU's allocations and small
        # kernels: one thread, as OpenMP's start-up per operation on a shared
        # 2-core machine measured 12 ms for a 256 KB torch.zeros (0.2 ms on one).
        torch.set_num_threads(1)
    p = Patcher()
    if args.check:
        with (cpu_emulation(p) if args.device == "cpu" else contextlib.nullcontext()):
            try:
                failures = check(args.device) + check_prefetch(args.device)
            finally:
                p.restore()
        sys.exit(1 if failures else 0)
    global _STAT, _REPEATS
    SHAPE["N"] = args.seqlen
    if args.dq_convert_kernel:
        from flashattn_triton.kernels import bwd
        bwd.DQ_CONVERT_KERNEL = True
        if args.device == "cpu":  # CPU tensors stand for CUDA ones
            p.set(bwd, "_dq_convert_launches", lambda dq: True)
    _STAT = min if args.stat == "min" else statistics.median
    _REPEATS = args.repeats
    if args.no_launch:
        sys.path.insert(0, str(REPO / "tests"))
        import fake_cuda
        fake_cuda.RECORD = False
    with (cpu_emulation(p) if args.device == "cpu" else contextlib.nullcontext()):
        try:
            results = profile(args.device, args.calls, backends, args.compare_plans, args.backward)
            launch_res = launch_only(args.device, args.calls)
        finally:
            p.restore()
    text = render(results, launch_res, env)
    print()
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "profile_host.json"), "w") as f:
            json.dump(dict(env=env, results=results, launch=launch_res), f, indent=1)
        with open(os.path.join(args.out, "profile_host.md"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
