"""One-command GPU probe of the Hopper (Gluon, sm_90) forward.

    PYTHONPATH=. python3 benchmarks/hopper_fwd_probe.py [--budget SECONDS] [--out DIR]

1. env: versions, GPU, whether the Hopper tier is available (and why not);
2. correctness, one subprocess per kernel variant, run in parallel (a variant
   that deadlocks only loses its own subprocess): O and LSE against a float64
   reference on ragged lengths with batch > 1, GQA, causal top-left and
   bottom-right, rows with no visible key, Nq = 1, strided (packed-qkv) views,
   inputs whose rows past N are NaN (a tile that read past its head's N would
   produce NaN) and outputs whose rows past N are sentinels (a tile that wrote
   past N would change them), and a misaligned view that must be declined;
3. speed: TFLOP/s of the Hopper kernel (each variant that passed), the
   portable kernel and SDPA cuDNN / SDPA flash, bf16, B*N = 16k tokens,
   H = 2048 / d, printed as a table.  ``--rows window`` times sliding
   windows (window_size (left, 0), Mistral / Gemma / gpt-oss sizes) against
   the portable kernel, the API with FLASHATTN_TRITON_HOPPER_WINDOW=1 and
   FlexAttention with a block mask (--baselines api:portable,api:window,flex):

    PYTHONPATH=. python3 benchmarks/hopper_fwd_probe.py --stage bench --rows window \
        --variants default,skip_tiles --baselines api:portable,api:window,flex

Results go to stdout and, as JSON lines, to DIR/hopper_probe.jsonl (DIR
defaults to $OUT if set, else benchmarks/results/h200).  A Triton cache
precompiled for sm_90 on a CPU machine is used if ./.hopper_cache exists
(TRITON_CACHE_DIR), so most kernels need no compile on the GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# Kernel variants: overrides of CONFIGS / SCHEDULE in kernels/hopper/fwd.py,
# and the head dims each is tried at (192: with dv = 128, split Q K^T).
VARIANTS = {
    "default": ({}, (64, 128, 256, 192)),
    "paired": ({"PAIRED": True}, (64, 128, 256)),
    "unpaired": ({"PAIRED": False}, (64, 128, 256)),
    "no_pingpong": ({"PINGPONG": False}, (64, 128, 256)),
    "stages2": ({"NUM_STAGES": 2}, (64, 128)),
    "nc3": ({"NUM_CONSUMERS": 3, "CONSUMER_REGS": 160, "PAIRED": False}, (64,)),
    "nc3_paired": ({"NUM_CONSUMERS": 3, "CONSUMER_REGS": 160, "PAIRED": True}, (64,)),
    # Persistent grid (one program per SM looping over work tiles).
    "persistent": ({"PERSISTENT": True}, (64, 128, 256, 192)),
    "nc3_persistent": ({"NUM_CONSUMERS": 3, "CONSUMER_REGS": 160, "PAIRED": False, "PERSISTENT": True}, (64,)),
    # Correctness only: 7 programs, so that every program runs several work
    # tiles (its ring, turn and Q phases carried from tile to tile) and the
    # snake's last round is partial.
    "persistent_g7": ({"PERSISTENT": True, "NUM_SMS": 7}, (64, 128, 256, 192)),
    "persistent_g7_nopp": ({"PERSISTENT": True, "NUM_SMS": 7, "PINGPONG": False}, (128,)),
    "persistent_g7_paired": ({"PERSISTENT": True, "NUM_SMS": 7, "PAIRED": True}, (128,)),
    "persistent_g5_nc1": ({"PERSISTENT": True, "NUM_SMS": 5, "NUM_CONSUMERS": 1}, (128,)),
    "persistent_g5_nc3": ({"PERSISTENT": True, "NUM_SMS": 5, "NUM_CONSUMERS": 3, "CONSUMER_REGS": 160,
                           "PAIRED": False}, (64,)),
    # Dynamic tile scheduler: the persistent grid with tiles claimed from an
    # atomic counter (longest first when causal), DYNAMIC_DEFAULT in fwd.py.
    "dynamic": ({"DYNAMIC": True}, (64, 128, 256, 192)),
    "nc3_dynamic": ({"NUM_CONSUMERS": 3, "CONSUMER_REGS": 160, "PAIRED": False, "DYNAMIC": True}, (64,)),
    "dynamic_g7": ({"DYNAMIC": True, "NUM_SMS": 7}, (64, 128, 256, 192)),
    # Causal tile order by bands of M_BAND m-blocks per head (fwd.py's
    # SCHEDULE): the programs running at once share each head's K/V in L2.
    "band2": ({"M_BAND": 2}, (64, 128)),
    "band4": ({"M_BAND": 4}, (64, 128)),
    "band2_dynamic": ({"M_BAND": 2, "DYNAMIC": True}, (128,)),
    "band4_dynamic": ({"M_BAND": 4, "DYNAMIC": True}, (128,)),
    "dynamic_g5_nopp": ({"DYNAMIC": True, "NUM_SMS": 5, "PINGPONG": False}, (128,)),
    "dynamic_g5_nc1": ({"DYNAMIC": True, "NUM_SMS": 5, "NUM_CONSUMERS": 1}, (128,)),
    "dynamic_g5_nc3": ({"DYNAMIC": True, "NUM_SMS": 5, "NUM_CONSUMERS": 3, "CONSUMER_REGS": 160,
                        "PAIRED": False}, (64,)),
    # SKIP_TILES where CONFIGS has it off (with a window it also releases the
    # key tiles before each warpgroup's own window unread).
    "skip_tiles": ({"SKIP_TILES": True}, (128, 256)),
    # Split Q K^T (d = 192, dv = 128; CONFIGS[192]: 128-key tiles, 2 stages):
    # the other tile config that fits shared memory, 64-key tiles in 3 stages.
    "bn64": ({"BLOCK_N": 64, "NUM_STAGES": 3}, (192,)),
    # (The early Q release, variants early_q*, measured slower in session 17 and
    # was removed in session 45; docs/hopper.md "Early Q release".)
    # Causal tiles by head sections whose K / V fill SECTION_MB MiB of L2
    # (SECTION_MB_DEFAULT in fwd.py; the dynamic scheduler only).
    "sec16": ({"SECTION_MB": 16, "DYNAMIC": True}, (64, 128)),
    "sec32": ({"SECTION_MB": 32, "DYNAMIC": True}, (64, 128)),
    # The same through the cached plans, as a user's call runs: "mod" maps
    # fwd.py's module switches to their values for the variant's timing
    # (a callable of the module, so that other head dims keep theirs).  Calls
    # with overrides build their plan every call (host time that made the
    # N = 1k rows of session 17 call 9 host-bound); these do not.
    "dynamic_plans": ({"mod": lambda hf: {"DYNAMIC_DEFAULT": _causal_on(hf.DYNAMIC_DEFAULT, 128)}}, (128,)),
    "sec16_plans": ({"mod": lambda hf: {"DYNAMIC_DEFAULT": _causal_on(hf.DYNAMIC_DEFAULT, 128),
                                        "SECTION_MB_DEFAULT": {64: (0, 16), 128: (0, 16)}}}, (64, 128)),
    "sec32_plans": ({"mod": lambda hf: {"DYNAMIC_DEFAULT": _causal_on(hf.DYNAMIC_DEFAULT, 128),
                                        "SECTION_MB_DEFAULT": {64: (0, 32), 128: (0, 32)}}}, (64, 128)),
    # d = 64 causal on two 240-register consumers (fwd.py CAUSAL_CONFIGS;
    # three 160-register ones spill in the masked step): as an override (the
    # correctness stage, on d = 64's default dynamic grid) and through the
    # cached plans, alone and with 16 MiB head sections.
    "nc2_dynamic": ({"NUM_CONSUMERS": 2, "CONSUMER_REGS": 240, "DYNAMIC": True}, (64,)),
    "nc2_causal_plans": ({"mod": lambda hf: {"CAUSAL_CONFIGS": {**hf.CAUSAL_CONFIGS, 64: _NC2}}}, (64,)),
    "nc2_sec16_plans": ({"mod": lambda hf: {"CAUSAL_CONFIGS": {**hf.CAUSAL_CONFIGS, 64: _NC2},
                                            "SECTION_MB_DEFAULT": {**hf.SECTION_MB_DEFAULT, 64: (0, 16)}}}, (64,)),
    # d = 64 non-causal short calls on two 240-register consumers (fwd.py
    # SHORT_CONFIGS: 128-row programs instead of 192), as an override (the
    # correctness stage) and through the cached plans up to N = 2048.
    "nc2": ({"NUM_CONSUMERS": 2, "CONSUMER_REGS": 240}, (64,)),
    "nc2_short_plans": ({"mod": lambda hf: {"SHORT_CONFIGS": {**hf.SHORT_CONFIGS, (64, False): (2048, _NC2)}}},
                        (64,)),
    # The masked causal step with one compare per score against each row's
    # last visible key (fwd.py ROW_BOUND_DIMS): as an override (the
    # correctness stage) and through the cached plans at every head dim.
    "row_bound": ({"ROW_BOUND": True}, (64, 128, 256, 192)),
    "row_bound_plans": ({"mod": lambda hf: {"ROW_BOUND_DIMS": frozenset({64, 128, 256, 192})}}, (64, 128, 256, 192)),
}


_NC2 = {"NUM_CONSUMERS": 2, "CONSUMER_REGS": 240}


def _causal_on(table, d):
    """A (not causal, causal) per head dim table with d's causal entry True."""
    return {**table, d: (table[d][0], True)}


def module_setting(hfwd, mod):
    """Set fwd.py's switches as mod(hfwd) says, the plans made under the old
    values dropped (a plan's key does not hold them); returns the undo."""
    new = mod(hfwd)
    old = {name: getattr(hfwd, name) for name in new}
    for name, value in new.items():
        setattr(hfwd, name, value)
    hfwd._PLANS.clear()

    def undo():
        for name, value in old.items():
            setattr(hfwd, name, value)
        hfwd._PLANS.clear()
    return undo
# Variants that only run the correctness stage (their timing says nothing).
CORRECTNESS_ONLY = {v for v in VARIANTS if "_g" in v}
# (batch, h_q, h_kv, n_q, n_k, causal: None | "br" (bottom-right) | "tl" (top-left), layout)
SHAPES_FULL = [
    (2, 4, 4, 1000, 1000, None, "flash"),
    (2, 4, 4, 1000, 1000, "br", "flash"),
    (2, 8, 2, 333, 1201, "br", "flash"),
    (2, 8, 2, 333, 1201, "tl", "bhnd"),
    (1, 4, 1, 700, 130, "br", "flash"),     # Nq > Nk: the first 570 rows see no key
    (3, 2, 2, 1, 517, "br", "flash"),
    (3, 2, 2, 1, 517, None, "flash"),
    (2, 4, 4, 128, 128, None, "bhnd"),
    (2, 6, 3, 515, 777, None, "qkv"),       # slices of a packed qkv tensor
    (2, 4, 2, 300, 900, "br", "padded"),    # rows past N hold NaN (inputs) / sentinels (outputs)
    (2, 4, 2, 300, 900, None, "padded"),
]
SHAPES_BIG = [(2, 16, 16, 4096, 4096, "br", "flash"), (2, 16, 4, 4096, 4096, None, "flash")]
SHAPES_VARIANT = [(2, 4, 4, 1000, 1000, None, "flash"), (2, 8, 2, 333, 1201, "br", "flash"),
                  (1, 4, 1, 700, 130, "br", "flash"), (2, 4, 2, 300, 900, "br", "padded")]
# More for the persistent variants: top-left causal, packed views, one row,
# and enough work tiles that each of the 132 programs runs several.
SHAPES_PERSISTENT = [(2, 8, 2, 333, 1201, "tl", "bhnd"), (2, 6, 3, 515, 777, None, "qkv"),
                     (3, 2, 2, 1, 517, "br", "flash"), (4, 8, 8, 1500, 1500, None, "flash"),
                     (2, 16, 4, 2000, 2000, "br", "flash"), (2, 16, 4, 2000, 2000, "tl", "padded")]
# Timing rows (d, N, causal, Hq / Hkv[, left]): "run1" as in docs/hopper.md
# run 1, "grid": d 64 / 128 / 256 x N 2k / 8k x causal or not; "window":
# sliding windows, window_size (left, 0) (causal) or (left, -1) (a left
# bound only), the sizes of Mistral / Gemma 2 (4096), Gemma 3 (1024) and
# gpt-oss (128, d = 64, GQA 8).
ROWS = {
    "run1": [(d, n, causal, 1) for d in (64, 128) for n in (2048, 8192) for causal in (False, True)]
    + [(128, 8192, True, 4), (256, 8192, False, 1), (256, 8192, True, 1)],
    "grid": [(d, n, causal, 1) for d in (64, 128, 256) for n in (2048, 8192) for causal in (False, True)],
    "causal": [(d, n, True, 1) for d in (64, 128, 256) for n in (1024, 2048, 4096, 8192)],
    "causal64": [(64, n, True, 1) for n in (1024, 2048, 4096, 8192)],
    "causal64_gqa": [(64, n, True, 1) for n in (1024, 2048, 4096, 8192)] + [(64, 4096, True, 8)],
    # d = 64 non-causal at the short lengths (SHORT_CONFIGS' candidate), GQA at 1k too
    "full64_short": [(64, n, False, 1) for n in (512, 1024, 1536, 2048)] + [(64, 1024, False, 8)],
    "causal64_128": [(d, n, True, 1) for d in (64, 128) for n in (1024, 2048, 4096, 8192)],
    # d = 64 causal (with a GQA row) and not, the softmax-bound forward rows (session 38: EXP2_POLY)
    "softmax64": [(64, n, True, 1) for n in (1024, 2048, 4096, 8192)] + [(64, 4096, True, 8)]
    + [(64, n, False, 1) for n in (1024, 2048, 4096)],
    # Those and a GQA row per head dim (Hq / Hkv 4): the head-section order's rows.
    "sections": [(d, n, True, 1) for d in (128, 64) for n in (2048, 1024, 4096, 8192)]
    + [(128, 4096, True, 4), (64, 4096, True, 4)],
    # The rows where the forward trails cuDNN most (short N), and 8k.
    "short": [(d, n, causal, 1) for d in (128, 64, 256) for causal in (True, False) for n in (2048, 4096, 8192)],
    # (most wanted first: a timed-out stage keeps the rows it printed); a
    # window as wide as N next to the same row without one: the window
    # build's own cost.
    # DeepSeek MLA head dims, d = 192 with dv = 128 (split Q K^T; H = 2048 / dv = 16)
    "mla": [(192, n, causal, 1) for n in (2048, 4096, 8192) for causal in (False, True)],
    "window": [(128, 8192, True, 1, 1024), (64, 8192, True, 8, 128), (128, 8192, True, 4, 4096),
               (256, 8192, True, 1, 1024), (64, 8192, True, 1, 1024), (128, 8192, True, 1, 8191),
               (128, 8192, True, 1), (128, 8192, False, 1, 1024)],
}
BASELINES = ("api:auto", "api:portable", "sdpa:cudnn", "sdpa:flash")
# Also known to --baselines: "api:window" (the API with FLASHATTN_TRITON_HOPPER_WINDOW=1,
# window rows only), "flex" (FlexAttention, compiled, with the row's block mask),
# "api:split" (the API with FLASHATTN_TRITON_HOPPER_SPLIT_QK=1), "sdpa:auto"
# (SDPA choosing its own backend; the row records the CUDA kernels it ran
# as "sdpa:auto:kernels") and "sdpa:efficient".


def emit(kind, **rec):
    rec = {"kind": kind, **rec}
    print("RESULT " + json.dumps(rec), flush=True)


# --------------------------------------------------------------------------- stages

def stage_env(args):
    import torch
    import triton
    from flashattn_triton.kernels import hopper
    emit("env", torch=torch.__version__, triton=triton.__version__,
         gpu=torch.cuda.get_device_name(0), capability=list(torch.cuda.get_device_capability(0)),
         hopper_available=hopper.AVAILABLE, reason=hopper.REASON,
         cache=os.environ.get("TRITON_CACHE_DIR", ""))


def _value_dim(d):
    """The value head dim the Hopper forward takes with head dim d (d, or 128 at 192)."""
    from flashattn_triton.kernels.hopper import fwd as hfwd
    return getattr(hfwd, "HEAD_DIM_V", {}).get(d, d)


def _make(shape, d, dtype, device, seed, dv=None):
    """(B, H, N, d)-indexed views q, k, v, o plus extra info for the checks;
    dv: v's and o's head dim (default d)."""
    import torch
    if dv is not None and dv != d:
        q, k, _, _, shift, pad = _make(shape, d, dtype, device, seed)
        _, _, v, o, _, _ = _make(shape, dv, dtype, device, seed + 1)
        return q, k, v, o, shift, pad
    b, hq, hkv, nq, nk, causal, layout = shape
    g = torch.Generator(device=device).manual_seed(seed)

    def rnd(*s):
        return torch.randn(*s, generator=g, device=device, dtype=torch.float32).to(dtype)

    pad = 0
    if layout == "flash":
        q, k, v = rnd(b, nq, hq, d), rnd(b, nk, hkv, d), rnd(b, nk, hkv, d)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        o = torch.full((b, nq, hq, d), float("nan"), device=device, dtype=dtype).transpose(1, 2)
    elif layout == "bhnd":
        q, k, v = rnd(b, hq, nq, d), rnd(b, hkv, nk, d), rnd(b, hkv, nk, d)
        o = torch.full((b, hq, nq, d), float("nan"), device=device, dtype=dtype)
    elif layout == "qkv":
        assert hq == hkv * 2
        qkv = rnd(b, nq, hq + 2 * hkv, d)
        q, k, v = qkv[:, :, :hq], qkv[:, :, hq:hq + hkv], qkv[:, :, hq + hkv:]
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        o = torch.full((b, nq, hq, d), float("nan"), device=device, dtype=dtype).transpose(1, 2)
    elif layout == "padded":
        pad = 40
        qb = torch.full((b, hq, nq + pad, d), float("nan"), device=device, dtype=dtype)
        kb = torch.full((b, hkv, nk + pad, d), float("nan"), device=device, dtype=dtype)
        vb = torch.full((b, hkv, nk + pad, d), float("nan"), device=device, dtype=dtype)
        qb[:, :, :nq] = rnd(b, hq, nq, d)
        kb[:, :, :nk] = rnd(b, hkv, nk, d)
        vb[:, :, :nk] = rnd(b, hkv, nk, d)
        q, k, v = qb[:, :, :nq], kb[:, :, :nk], vb[:, :, :nk]
        ob = torch.full((b, hq, nq + pad, d), 7.0, device=device, dtype=dtype)
        o = ob[:, :, :nq]
    else:
        raise ValueError(layout)
    shift = None if causal is None else (nk - nq if causal == "br" else 0)
    return q, k, v, o, shift, pad


def _ref(q, k, v, scale, shift, dtype):
    from flashattn_triton.reference import attention_ref
    return attention_ref(q.to(dtype), k.to(dtype), v.to(dtype), scale, shift)


def stage_correct(args):
    import torch
    from flashattn_triton.kernels.hopper import hopper_attention_forward, AVAILABLE, REASON
    from flashattn_triton.testing import tolerance, max_abs_err
    if not AVAILABLE:
        emit("correct", variant=args.variant, ok=False, error=f"unavailable: {REASON}")
        return
    from flashattn_triton.kernels.hopper import fwd as hfwd
    overrides = {key: val for key, val in VARIANTS[args.variant][0].items() if key != "mod"}
    if "mod" in VARIANTS[args.variant][0]:  # (this stage's process only: no undo needed)
        module_setting(hfwd, VARIANTS[args.variant][0]["mod"])
    dev = torch.device("cuda")
    dims = [int(x) for x in args.dims.split(",")]
    if args.variant == "default":
        cases = [(dt, d, s) for dt in (torch.bfloat16, torch.float16) for d in dims for s in SHAPES_FULL]
        cases += [(torch.bfloat16, 128, s) for s in SHAPES_BIG if 128 in dims]
    else:
        shapes = SHAPES_VARIANT + (SHAPES_PERSISTENT if overrides.get("PERSISTENT") else [])
        cases = [(torch.bfloat16, d, s) for d in dims for s in shapes]
    n_fail = 0
    for i, (dtype, d, shape) in enumerate(cases):
        rec = dict(variant=args.variant, dtype=str(dtype).split(".")[-1], d=d, shape=list(shape))
        try:
            dv = _value_dim(d)
            q, k, v, o, shift, pad = _make(shape, d, dtype, dev, seed=i, dv=dv)
            lse = torch.full(q.shape[:3], float("nan"), device=dev, dtype=torch.float32)
            scale = 1.0 / math.sqrt(d)
            t0 = time.time()
            took = hopper_attention_forward(q, k, v, o, lse, scale, shift, **overrides)
            torch.cuda.synchronize()
            rec["seconds"] = round(time.time() - t0, 2)
            if not took:
                raise AssertionError("hopper_attention_forward declined the case")
            o_ref, lse_ref = _ref(q, k, v, scale, shift, torch.float64)
            o_low, _ = _ref(q, k, v, scale, shift, dtype)
            err = max_abs_err(o, o_ref)
            tol = tolerance(max_abs_err(o_low, o_ref), o_ref, dtype, 2.0)
            lse_ref2 = lse_ref / math.log(2.0)
            lse_err = max_abs_err(lse, lse_ref2)
            rec.update(o_err=err, o_tol=tol, lse_err=lse_err)
            problems = []
            if not err <= tol:
                problems.append(f"O error {err:.3e} > tol {tol:.3e}")
            if not lse_err <= 1e-3 * max(1.0, lse_ref2[torch.isfinite(lse_ref2)].abs().max().item()
                                         if torch.isfinite(lse_ref2).any() else 1.0):
                problems.append(f"LSE error {lse_err:.3e}")
            empty = torch.isinf(lse_ref2)
            if empty.any():
                rec["empty_rows"] = int(empty.sum().item())
                if not (o[empty] == 0).all():
                    problems.append("rows with no visible key are not zero")
            if pad:
                sentinel = o.as_strided((o.shape[0], o.shape[1], pad, dv),
                                        o.stride(), o.storage_offset() + o.shape[2] * o.stride(2))
                if not (sentinel == 7.0).all():
                    problems.append("wrote rows past N_Q")
            if problems:
                raise AssertionError("; ".join(problems))
            rec["ok"] = True
        except Exception as exc:  # noqa: BLE001 - report and go on
            n_fail += 1
            rec.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:500])
        emit("case", **rec)
    # A view whose base is not 16-byte aligned must be declined (and left alone).
    if args.variant == "default" and 64 in dims:
        base = torch.randn(2 * 64 * 4 * 64 + 1, device=dev, dtype=torch.bfloat16)
        q = base[1:].view(2, 64, 4, 64).transpose(1, 2)
        o = torch.zeros_like(q)
        lse = torch.zeros(2, 4, 64, device=dev)
        declined = not hopper_attention_forward(q, q, q, o, lse, 0.125, None)
        emit("case", variant="default", check="misaligned view declined", ok=declined and not o.any().item())
        n_fail += not declined
    emit("correct", variant=args.variant, dims=dims, ok=n_fail == 0, failures=n_fail, cases=len(cases))


def stage_memcheck(args):
    """A few ragged cases for compute-sanitizer (it checks every access)."""
    import torch
    from flashattn_triton.kernels.hopper import hopper_attention_forward
    dev = torch.device("cuda")
    done = []
    persistent = {"PERSISTENT": True, "NUM_SMS": 5}  # several work tiles per program
    cases = [(128, (2, 8, 2, 333, 1201, "br", "flash"), {}), (128, (2, 4, 2, 300, 900, None, "padded"), {}),
             (64, (1, 4, 1, 700, 130, "br", "flash"), {}), (256, (2, 2, 1, 77, 77, None, "qkv"), {}),
             (128, (2, 8, 2, 333, 1201, "br", "flash"), persistent),
             (64, (2, 4, 2, 300, 900, None, "padded"), persistent)]
    for i, (d, shape, overrides) in enumerate(cases):
        q, k, v, o, shift, _ = _make(shape, d, torch.bfloat16, dev, seed=i)
        lse = torch.empty(q.shape[:3], device=dev, dtype=torch.float32)
        done.append(bool(hopper_attention_forward(q, k, v, o, lse, d ** -0.5, shift, **overrides)))
        torch.cuda.synchronize()
    emit("memcheck", ran=done)


def visible_pairs(n: int, causal: bool, left=None) -> int:
    """(query, key) pairs that a row sees at Nq = Nk = n: causal (keys
    j <= i), and with a window left also j >= i - left."""
    if left is None:
        return n * (n + 1) // 2 if causal else n * n
    w = min(left, n - 1)
    if causal:  # rows i see min(i, left) + 1 keys
        return n * (w + 1) - w * (w + 1) // 2
    return n * n - (n - w - 1) * (n - w) // 2  # row i sees n - max(i - left, 0) keys


def _load_prev(path, index=0):
    """Another version of kernels/hopper/fwd.py (a file copied from another
    commit), loaded as a sibling module of the package's so that its relative
    imports resolve: its kernels are timed in the same process as the current
    ones (columns hopper:prev, hopper:prev1, ...)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"flashattn_triton.kernels.hopper._fwd_prev{index}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def stage_bench(args):
    import torch
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    from flashattn_triton.kernels.hopper import hopper_attention_forward
    from flashattn_triton.kernels.hopper import fwd as hfwd
    try:
        from flashattn_triton import flash_attn_func
    except Exception as exc:  # noqa: BLE001 - the API rows then report the error
        flash_attn_func = None
        api_error = f"{type(exc).__name__}: {exc}"[:160]
    variants = [v for v in args.variants.split(",") if v]
    baselines = [b for b in args.baselines.split(",") if b]
    prev = [_load_prev(path, i) for i, path in enumerate(args.prev.split(",")) if path]
    dev = torch.device("cuda")
    dtype = torch.bfloat16
    for row in ROWS[args.rows]:
        d, n, causal, gqa = row[:4]
        left = row[4] if len(row) > 4 else None
        window = None if left is None else (left, 0)  # (left, shift): Nq = Nk, the diagonal i
        window_size = (-1 if left is None else left, 0 if causal else -1)
        dv = _value_dim(d)
        h = 2048 // dv
        b = max(1, 16384 // n)
        hkv = h // gqa
        q = torch.randn(b, n, h, d, device=dev, dtype=dtype)
        k = torch.randn(b, n, hkv, d, device=dev, dtype=dtype)
        v = torch.randn(b, n, hkv, dv, device=dev, dtype=dtype)
        qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
        oh = torch.empty(b, n, h, dv, device=dev, dtype=dtype).transpose(1, 2)
        lse = torch.empty(b, h, n, device=dev, dtype=torch.float32)
        scale = d ** -0.5
        flops = 2.0 * b * h * visible_pairs(n, causal, left) * (d + dv)
        fns = {}
        for var in variants:
            if d in VARIANTS[var][1]:
                ov = {key: val for key, val in VARIANTS[var][0].items() if key != "mod"}
                fns[f"hopper:{var}"] = (lambda ov=ov: hopper_attention_forward(
                    qh, kh, vh, oh, lse, scale, 0 if causal else None, window, **ov))

        def api(backend, window_opt_in=False, split_opt_in=False):
            if flash_attn_func is None:
                def broken():
                    raise RuntimeError(api_error)
                return broken

            def run():
                os.environ["FLASHATTN_TRITON_BACKEND"] = backend
                for name, on in (("FLASHATTN_TRITON_HOPPER_WINDOW", window_opt_in),
                                 ("FLASHATTN_TRITON_HOPPER_SPLIT_QK", split_opt_in)):
                    if on:
                        os.environ[name] = "1"
                    else:
                        os.environ.pop(name, None)
                return flash_attn_func(q, k, v, causal=causal, window_size=window_size)
            return run
        if "api:auto" in baselines:
            fns["api:auto"] = api("auto")
        if "api:portable" in baselines:
            fns["api:portable"] = api("portable")
        if "api:window" in baselines and left is not None:  # the dispatch's opt-in: the Hopper forward
            fns["api:window"] = api("auto", window_opt_in=True)
        if "api:split" in baselines and dv != d:  # the dispatch's opt-in: the Hopper forward
            fns["api:split"] = api("auto", split_opt_in=True)
        if "flex" in baselines:
            fns["flex"] = _flex_fn(qh, kh, vh, causal, left)
        kr = kh.repeat_interleave(gqa, 1) if gqa > 1 else kh
        vr = vh.repeat_interleave(gqa, 1) if gqa > 1 else vh
        for name, be in (("sdpa:cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa:flash", SDPBackend.FLASH_ATTENTION),
                         ("sdpa:efficient", SDPBackend.EFFICIENT_ATTENTION), ("sdpa:auto", None)):
            if name not in baselines or left is not None:  # SDPA has no sliding window but a dense mask
                continue

            def run(be=be):
                if be is None:  # SDPA's own choice
                    return F.scaled_dot_product_attention(qh, kr, vr, is_causal=causal)
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(qh, kr, vr, is_causal=causal)
            fns[name] = run
        for i, mod in enumerate(prev if left is None else ()):  # (an older fwd.py may have no window)
            fns[f"hopper:prev{i or ''}"] = (lambda mod=mod: mod.hopper_attention_forward(
                qh, kh, vh, oh, lse, scale, 0 if causal else None))
        rec = dict(d=d, n=n, b=b, h=h, hkv=hkv, causal=causal, window=left, dtype="bf16")
        if dv != d:
            rec["dv"] = dv
        if "sdpa:auto" in fns:
            rec["sdpa:auto:kernels"] = _cuda_kernels(fns["sdpa:auto"])
        for name, fn in fns.items():
            mod = VARIANTS.get(name[len("hopper:"):], ({},))[0].get("mod") if name.startswith("hopper:") else None
            undo = module_setting(hfwd, mod) if mod else None
            try:
                if name.startswith("hopper:") and not fn():
                    raise RuntimeError("declined")
                ms = triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")
                rec[name] = round(flops / (ms * 1e-3) / 1e12, 1)
            except Exception as exc:  # noqa: BLE001
                rec[name] = f"{type(exc).__name__}: {exc}"[:160]
            finally:
                if undo:
                    undo()
        os.environ.pop("FLASHATTN_TRITON_BACKEND", None)
        os.environ.pop("FLASHATTN_TRITON_HOPPER_WINDOW", None)
        emit("bench", **rec)


def _cuda_kernels(fn):
    """The names of the CUDA kernels one call of fn runs (torch.profiler):
    which backend SDPA picked."""
    try:
        from torch.profiler import ProfilerActivity, profile
        fn()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
        import torch
        torch.cuda.synchronize()
        return sorted({e.key for e in prof.key_averages() if e.device_type.name == "CUDA"})[:6]
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"[:160]


def _flex_fn(qh, kh, vh, causal, left):
    """FlexAttention (torch.compile'd) on contiguous (B, H, N, d) copies with
    the block mask of the row (causal, a window of left keys, or none)."""
    from torch.nn.attention.flex_attention import create_block_mask
    from flashattn_triton.bench.common import compiled_flex
    flex = compiled_flex()
    q, k, v = (t.contiguous() for t in (qh, kh, vh))
    n = q.shape[2]

    def mask_mod(b, h, qi, ki):
        keep = ki <= qi if causal else ki >= 0
        return keep if left is None else keep & (ki >= qi - left)
    block_mask = None if not causal and left is None else create_block_mask(mask_mod, None, None, n, n,
                                                                          device=q.device)
    return lambda: flex(q, k, v, block_mask=block_mask, enable_gqa=k.shape[1] != q.shape[1])


# --------------------------------------------------------------------------- orchestration

def _run_stage(argv, timeout, log):
    """Run this script with argv in its own process group; returns (records, rc)."""
    cmd = [sys.executable, __file__] + argv
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, cwd=str(REPO))
    return proc


def _collect(proc, timeout, label, log):
    try:
        out, _ = proc.communicate(timeout=max(1, timeout))
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        rc = "TIMEOUT"
    records = []
    for line in (out or "").splitlines():
        log.write(f"[{label}] {line}\n")
        if line.startswith("RESULT "):
            records.append(json.loads(line[7:]))
        elif "Error" in line or "error" in line or "Traceback" in line:
            print(f"[{label}] {line}"[:400], flush=True)
    if rc != 0:
        tail = "\n".join((out or "").splitlines()[-25:])
        print(f"[{label}] exit {rc}\n{tail}", flush=True)
    return records, rc


def _table(bench, variants, baselines=BASELINES):
    cols = [f"hopper:{v}" for v in variants] + list(baselines)
    head = "| d | N | causal | Hq/Hkv | " + " | ".join(cols) + " | best hopper / cuDNN |"
    lines = [head, "|" + "---|" * (len(cols) + 5)]
    for r in bench:
        vals = []
        for c in cols:
            x = r.get(c)
            vals.append(f"{x:.0f}" if isinstance(x, (int, float)) else "err" if x else "-")
        ours = [r[c] for c in cols[:len(variants)] if isinstance(r.get(c), (int, float))]
        cud = r.get("sdpa:cudnn")
        ratio = f"{max(ours) / cud:.2f}" if ours and isinstance(cud, (int, float)) else "-"
        mask = f"{r['causal']} w{r['window']}" if r.get("window") is not None else r["causal"]
        lines.append(f"| {r['d']} | {r['n']} | {mask} | {r['h']}/{r['hkv']} | " + " | ".join(vals)
                     + f" | {ratio} |")
    return "\n".join(lines)


# Ratios that decide the defaults (kernels/hopper/fwd.py CONFIGS / SCHEDULE):
# (label, numerator variant, denominator variant), each where both ran.
DECISIONS = [("persistent / default", "persistent", "default"),
             ("nc3 / default", "nc3", "default"),
             ("nc3_persistent / nc3", "nc3_persistent", "nc3"),
             ("nc3_persistent / default", "nc3_persistent", "default"),
             ("dynamic / default", "dynamic", "default"),
             ("dynamic / persistent", "dynamic", "persistent"),
             ("nc3_dynamic / nc3", "nc3_dynamic", "nc3")]


def _decision_table(bench):
    """Per row: the ratios of DECISIONS and best / cuDNN, '-' where a
    variant did not run (declined, failed, or not at this head dim)."""
    def val(r, v):
        x = r.get(f"hopper:{v}")
        return x if isinstance(x, (int, float)) else None
    used = [dd for dd in DECISIONS if any(val(r, dd[1]) and val(r, dd[2]) for r in bench)]
    lines = ["| d | N | causal | " + " | ".join(lbl for lbl, _, _ in used) + " | best variant | best / cuDNN |",
             "|" + "---|" * (len(used) + 5)]
    for r in bench:
        cells = []
        for _, a, b in used:
            x, y = val(r, a), val(r, b)
            cells.append(f"{x / y:.3f}" if x and y else "-")
        ours = {k[7:]: v for k, v in r.items() if k.startswith("hopper:") and isinstance(v, (int, float))}
        best = max(ours, key=ours.get) if ours else "-"
        cud = r.get("sdpa:cudnn")
        ratio = f"{ours[best] / cud:.3f}" if ours and isinstance(cud, (int, float)) else "-"
        lines.append(f"| {r['d']} | {r['n']} | {r['causal']} | " + " | ".join(cells) + f" | {best} | {ratio} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stage", choices=["env", "correct", "bench", "memcheck"])
    ap.add_argument("--variant", default="default")
    ap.add_argument("--variants", default="default")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--budget", type=float, default=225.0, help="seconds for the whole probe")
    ap.add_argument("--only", default="", help="comma-separated VARIANTS to run (default: all)")
    ap.add_argument("--rows", default="run1", choices=sorted(ROWS), help="timing rows (ROWS)")
    ap.add_argument("--baselines", default=",".join(BASELINES), help="comparison columns of the timing")
    ap.add_argument("--no-memcheck", action="store_true", help="skip compute-sanitizer")
    ap.add_argument("--prev", default="", help="bench stage: also time these copies of kernels/hopper/fwd.py "
                    "(comma-separated, from other commits) as columns hopper:prev, hopper:prev1, ...")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "benchmarks" / "results" / "h200"))
    args = ap.parse_args()
    if args.stage:
        {"env": stage_env, "correct": stage_correct, "bench": stage_bench,
         "memcheck": stage_memcheck}[args.stage](args)
        return

    t_start = time.time()
    cache = REPO / ".hopper_cache"
    if cache.is_dir() and "TRITON_CACHE_DIR" not in os.environ:
        os.environ["TRITON_CACHE_DIR"] = str(cache)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = open(out_dir / "hopper_probe.log", "w")
    records = []

    def left():
        return args.budget - (time.time() - t_start)

    recs, _ = _collect(_run_stage(["--stage", "env"], 60, log), 60, "env", log)
    records += recs
    for r in recs:
        print("env:", json.dumps(r), flush=True)

    # One process per (variant, head dims), all at once: their compiles (if the
    # cache misses) and any deadlock stay independent.
    only = set(args.only.split(",")) - {""} or set(VARIANTS)
    unknown = only - set(VARIANTS)
    if unknown:
        raise SystemExit(f"--only: unknown variants {sorted(unknown)} (known: {', '.join(VARIANTS)})")
    jobs = [("default", "64"), ("default", "128"), ("default", "256")] if "default" in only else []
    jobs += [(v, ",".join(map(str, dims))) for v, (_, dims) in VARIANTS.items() if v != "default" and v in only]
    memcheck = None
    if shutil.which("compute-sanitizer") and not args.no_memcheck:
        memcheck = subprocess.Popen(
            ["compute-sanitizer", "--tool", "memcheck", "--target-processes", "all", sys.executable, __file__,
             "--stage", "memcheck"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True, cwd=str(REPO))
    n_cache0 = len(os.listdir(cache)) if cache.is_dir() else 0
    procs = {(v, dims): _run_stage(["--stage", "correct", "--variant", v, "--dims", dims], 0, log)
             for v, dims in jobs}
    status = {}
    shown = {}
    deadline = time.time() + min(110.0, left() - 90.0)
    for (v, dims), p in procs.items():
        recs, rc = _collect(p, deadline - time.time(), f"correct:{v}:{dims}", log)
        records += recs
        for r in recs:
            if r["kind"] == "case" and not r.get("ok"):
                shown[v] = shown.get(v, 0) + 1
                if shown[v] <= 3 and sum(shown.values()) <= 12:  # the rest are in hopper_probe.jsonl
                    print(f"FAIL {v}: {json.dumps(r)}"[:600], flush=True)
            if r["kind"] == "correct":
                print(f"correctness {v} d={dims}: {'PASS' if r['ok'] else 'FAIL'} "
                      f"({r.get('failures', '?')} failures / {r.get('cases', '?')} cases) {r.get('error', '')}",
                      flush=True)
        ok = rc == 0 and any(r["kind"] == "correct" and r["ok"] for r in recs)
        worst = "hung" if rc == "TIMEOUT" else "pass" if ok else "fail"
        prev = status.get(v, "pass")
        status[v] = max(prev, worst, key=["pass", "fail", "hung"].index)
        if rc != 0:
            n_cases = sum(1 for r in recs if r["kind"] == "case")
            print(f"correctness {v} d={dims}: stage ended with {rc} after {n_cases} cases", flush=True)
    print("correctness by variant:", json.dumps(status), flush=True)
    if cache.is_dir():
        n_cache1 = len(os.listdir(cache))
        print(f"Triton cache: {n_cache0} entries carried, {n_cache1 - n_cache0} compiled here", flush=True)
        records.append({"kind": "cache", "carried": n_cache0, "compiled_here": n_cache1 - n_cache0})
    if memcheck is not None:
        recs, rc = _collect(memcheck, max(5.0, min(60.0, left() - 60.0)), "memcheck", log)
        records += recs
        log.flush()
        summary = [ln for ln in open(out_dir / "hopper_probe.log") if "[memcheck]" in ln and "ERROR SUMMARY" in ln]
        print(f"memcheck: rc={rc} {summary[-1].strip() if summary else 'no summary'} "
              f"{[r for r in recs if r['kind'] == 'memcheck']}", flush=True)
    else:
        print("memcheck: skipped" if args.no_memcheck else "memcheck: compute-sanitizer not found", flush=True)
    records.append({"kind": "status", **status})
    # Variants that hung are not benchmarked (they could hang again).
    passed = [v for v in VARIANTS if status.get(v) in ("pass", "fail") and v not in CORRECTNESS_ONLY]

    bench = []
    if left() > 20:
        recs, rc = _collect(_run_stage(["--stage", "bench", "--variants", ",".join(passed), "--rows", args.rows,
                                        "--baselines", args.baselines], 0, log),
                            left() - 5, "bench", log)
        records += recs
        bench = [r for r in recs if r["kind"] == "bench"]
    print("\nbf16 forward TFLOP/s (B*N = 16k tokens, H = 2048/d; 'err' = failed or declined; "
          "correctness per variant above)\n", flush=True)
    baselines = [b for b in args.baselines.split(",") if b]
    print(_table(bench, passed, baselines), flush=True)
    print("\nratios that decide the defaults (TFLOP/s over TFLOP/s; '-' = not run there)\n", flush=True)
    print(_decision_table(bench), flush=True)
    for r in bench:
        errs = {k: v for k, v in r.items() if isinstance(v, str) and k not in ("dtype", "kind")}
        if errs:
            print("bench errors:", r["d"], r["n"], r["causal"], errs, flush=True)
    with open(out_dir / "hopper_probe.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    print(f"\ntotal {time.time() - t_start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
