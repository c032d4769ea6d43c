"""The ``flashattn-triton`` command (also ``python -m flashattn_triton``).

  check   correctness self-check against a float64 reference (and a short benchmark on a GPU)
  info    versions, the GPU, the kernel path; with --shape, which kernels and launch
          configs a call of that shape uses (--arch sm90 answers for a GPU not present)
  bench   attention benchmark against PyTorch's implementations: progress bar, tables,
          plot (quick by default, --full for the sweep; needs a GPU, --smoke runs on a CPU)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional, Tuple

ENVIRONMENT = [
    ("FLASHATTN_TRITON_BACKEND", "portable | hopper | auto (default): force a kernel tier (tests, benchmarks)"),
    ("FLASHATTN_TRITON_AUTOTUNE", "1: autotune launch configs (opt-in; results cached on disk). "
                                  "Default: the committed per-GPU table"),
    ("FLASHATTN_TRITON_CONFIG_<KERNEL>", "force a launch config of FWD, BWD_DKDV or BWD_DQ, e.g. "
                                         "BLOCK_M=128,BLOCK_N=64,num_warps=8,num_stages=3; BWD_ONE (the "
                                         "one-launch backward): num_warps, num_stages, BLOCK_M1/N1, BLOCK_M2/N2; "
                                         "DECODE (flash_attn_with_kvcache's kernel): BLOCK_M, BLOCK_N, num_warps, "
                                         "num_stages"),
    ("FLASHATTN_TRITON_TABLE_DIR", "a directory whose sm<major><minor>.json replaces the committed launch-config "
                                   "table (e.g. one that benchmarks/tune.py --merge extended); set it before the "
                                   "first call"),
    ("FLASHATTN_TRITON_HOPPER_BWD", "0: the portable backward on Hopper too (default: the Gluon backward "
                                    "where it applies; its dQ adds are not bit-reproducible, "
                                    "deterministic=True always takes the portable kernels)"),
    ("FLASHATTN_TRITON_HOPPER_BWD_UNVERIFIED", "1: the Hopper backward also takes head dims whose build compiles "
                                               "but has not passed on a GPU (kernels/hopper/bwd.py "
                                               "CONFIGS_UNVERIFIED; tests and the probe)"),
    ("FLASHATTN_TRITON_BWD_ONE_LAUNCH", "1 / 0: the portable deterministic backward's dK/dV and dQ programs in "
                                        "one launch / two, for every call (read at import; dense calls without "
                                        "a bias gradient). Default: one launch at d = 128 non-causal, two elsewhere"),
    ("FLASHATTN_TRITON_BWD_WHOLE_Q", "1 / 0: the portable dK/dV kernel without the row checks of its masked "
                                     "loops when the query length is a multiple of 128 (read at import; "
                                     "dense calls). Default: on for causal calls, off otherwise"),
    ("FLASHATTN_TRITON_DECODE_COMBINE", "fused | separate | gathered: where split-KV decoding merges its "
                                        "partials (in the decode kernel, or in a second kernel). Default: "
                                        "gathered at small batch (4 x programs < SMs), fused elsewhere"),
    ("FLASHATTN_TRITON_DECODE_VARIANT", "comma list of decoding variants (deep, fill, pdl, reserve, "
                                        "pair, spread, longpages, solo, longtiles, solopages; docs/decode.md); "
                                        "default: deep,fill,pdl,reserve,spread,longpages,solo,longtiles,solopages; "
                                        "none: the plain plan"),
    ("FLASHATTN_TRITON_HOPPER_ANY_TRITON", "1: try the Hopper (Gluon) tier on untested Triton versions"),
    ("FLASHATTN_TRITON_HOPPER_WINDOW", "sliding windows (window_size (left >= 0, -1 or 0)) on Hopper. Default: the "
                                       "Hopper forward; the Hopper backward only for left bounds of at least "
                                       "_dispatch.HOPPER_BWD_WINDOW_MIN_LEFT (511; not measured faster than the "
                                       "portable one at smaller windows), else the portable one; 1: the Hopper "
                                       "forward and backward; 0: the portable kernels"),
    ("FLASHATTN_TRITON_HOPPER_VARLEN", "unset or 1: packed batches without pages or variants take the Hopper "
                                       "forward (but d = 64 batches of sequences up to 2048: "
                                       "_dispatch.HOPPER_VARLEN_SHORT); 0: the portable forward"),
    ("FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE", "1: the packed Hopper kernels zero the next sequence's rows that "
                                               "a sequence's last tiles load, so a NaN in one sequence reaches no "
                                               "other (on an H100 it cost -1 to +5 % of the forward and +3 to +16 % "
                                               "of forward + backward on short documents); "
                                               "unset or 0: they do not"),
    ("FLASHATTN_TRITON_HOPPER_VARLEN_BWD", "unset or 1: packed batches without variants (d = 64 / 128, not "
                                           "deterministic) take the Hopper backward; 0: the portable backward"),
    ("FLASHATTN_TRITON_HOPPER_SPLIT_QK", "0: head dims d = 192 with dv = 128 keep the portable forward. Default: "
                                         "the Hopper forward's split Q K^T takes them"),
    ("FLASHATTN_TRITON_HOPPER_DROPOUT", "1: dropout alone (no other variant, no mask or causal) may take the Hopper "
                                        "forward and backward (GPU-validated; same keep mask as the portable "
                                        "kernels); 0: the portable kernels; default: the Hopper backward, the "
                                        "portable forward (_dispatch.HOPPER_DROPOUT_BWD_DEFAULT \"1\", "
                                        "HOPPER_DROPOUT_DEFAULT \"0\")"),
    ("FLASHATTN_TRITON_DROPOUT_ROUNDS", "Philox rounds of the dropout draws, 7-10 (read at import; default 10, "
                                        "as tl.randint4x): both kernel tiers and the reference mask follow it"),
    ("FLASHATTN_TRITON_HOPPER_MASK", "0: a boolean attn_mask keeps the portable forward. Default (1): a boolean "
                                     "attn_mask alone takes the Hopper forward (GPU-validated; the backward "
                                     "stays portable)"),
    ("FLASHATTN_TRITON_HOPPER_SINKS", "1: learnable sinks take the Hopper forward at every head dim, run "
                                      "without them and folded into O and the LSE after it (GPU-validated); "
                                      "0: never. Default: the fold at d = 128 (_dispatch.HOPPER_SINKS_DIMS), "
                                      "the portable forward with sinks elsewhere"),
    ("FLASHATTN_TRITON_HOPPER_BWD_NAMED_BAR", "0, 1 or 2 for every call (read at import): 1, the Hopper backward's "
                                              "consumer warpgroups exchange dS through one hardware barrier; 2, also "
                                              "hand dQ to the producer warp through named barriers (d = 64 / 128); 0, "
                                              "the mbarriers. Default: by shape, 2 at d = 128 causal, else 0"),
    ("FLASHATTN_TRITON_HOPPER_BWD_NO_LICM", "1 / 0 for every call (read at import): the Hopper backward's "
                                            "query-tile loops are built with / without loop-invariant code "
                                            "motion off (NO_LICM; fewer spills, not yet timed). Default: by head "
                                            "dim (hopper/bwd.py NO_LICM_DIMS, empty)"),
    ("FLASHATTN_TRITON_DQ_CONVERT", "1 / 0: the backward's float32 dQ buffer is scaled and cast into dq by one "
                                    "Triton kernel (the same bits) / by torch's copy, for every call (read at "
                                    "import). Default: the kernel for every call (causal ones since session 27)"),
    ("FLASHATTN_TRITON_FAST_LAUNCH", "0: launch through Triton's own path every time and turn the call plans "
                                     "off (default: a call signature seen before launches the compiled kernel "
                                     "directly, and a repeated call with the same signature replays its "
                                     "recorded launches, skipping validation, config lookup and argument "
                                     "packing; its backward too, switch ops.BWD_PLANS; read at import)"),
    ("FLASHATTN_TRITON_PREFETCH_BWD", "0: no backward prefetch (default: the first forward of a shape that "
                                      "needs gradients compiles the backward kernels in background threads)"),
    ("FLASHATTN_TRITON_WARM_KEY", "0: no background computation of Triton's compiler cache key at import "
                                  "(default: with a GPU visible, a thread hashes Triton's compiler while the "
                                  "program goes on; read at import)"),
    ("TRITON_INTERPRET", "1: run the kernels in Triton's interpreter (set by the tests; never by the library)"),
]

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
VARIANTS = ("softcap", "alibi", "sinks", "mask", "dropout")
DEFAULT_BENCH_OUT = Path("bench_results")
INFO_DTYPE = "bf16"  # info --dtype when not given
# info's options that describe the call of --shape (dest: option), an error without it
CALL_OPTIONS = {"kv_heads": "--kv-heads", "seqlen_k": "--seqlen-k", "head_dim_v": "--head-dim-v",
                "dtype": "--dtype", "causal": "--causal", "window": "--window", "variant": "--variant",
                "arch": "--arch"}


def env_help() -> str:
    width = max(len(k) for k, _ in ENVIRONMENT)
    return "environment variables:\n" + "\n".join(f"  {k:<{width}}  {v}" for k, v in ENVIRONMENT)


# --------------------------------------------------------------------------- info

def _parse_ints(text: str, count: int, what: str) -> Tuple[int, ...]:
    try:
        values = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: expected {count} comma-separated integers, got {text!r}")
    if len(values) != count:
        raise argparse.ArgumentTypeError(f"{what}: expected {count} comma-separated integers, got {text!r}")
    return values


def _shape(text: str) -> Tuple[int, ...]:
    values = _parse_ints(text, 4, "--shape B,N,H,d")
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"--shape B,N,H,d: every value must be >= 1, got {text!r}")
    return values


def _positive(text: str) -> int:
    """argparse type of an option that takes one integer >= 1 (argparse names the option)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _window(text: str) -> Tuple[int, ...]:
    values = _parse_ints(text, 2, "--window LEFT,RIGHT")
    if min(values) < -1:
        raise argparse.ArgumentTypeError(f"--window LEFT,RIGHT: -1 (unbounded) or >= 0, got {text!r}")
    return values


def _arch(text: str) -> str:
    if not (text.startswith("sm") and text[2:].isdigit() and len(text) >= 4):
        raise argparse.ArgumentTypeError(f"--arch: expected smXY such as sm90 or sm80, got {text!r}")
    return text


def _fmt_entry(entry) -> str:
    bm, bn, warps, stages = entry
    return f"BLOCK_M={bm} BLOCK_N={bn} num_warps={warps} num_stages={stages}"


def table_tag(variants: Tuple[str, ...], window_left: int) -> str:
    """The launch table's variant tag of a call, as kernels/launch.py's
    variant_tag computes it from the kernel switches ("" for a plain call)."""
    from .kernels import launch
    on = set(variants) | ({"window"} if window_left >= 0 else set())
    return next((t for t in launch.VARIANT_TAGS if t in on), "")


def portable_config(launcher, arch: str, dtype, d_pad: int, masked_right: bool,
                    bucket: int, tag: str = "", dv_pad: Optional[int] = None,
                    budget: Optional[int] = None) -> Tuple[str, str]:
    """(config, where it comes from) of one portable kernel on a GPU of ``arch``
    with ``budget`` bytes of shared memory for the model (None: the arch's,
    launch.arch_budget), in the order of kernels/launch.py (environment,
    autotune, table, model)."""
    import torch
    from .kernels import launch

    forced = launch.config_from_env(launcher.name)
    if forced is not None:
        return _fmt_entry((forced.kwargs["BLOCK_M"], forced.kwargs["BLOCK_N"], forced.num_warps,
                           forced.num_stages)), f"forced by {launch.ENV_CONFIG_PREFIX}{launcher.name}"
    if launch.autotune_enabled():
        return "autotuned on first use", f"{launch.ENV_AUTOTUNE}=1 (cached on disk)"
    elem = torch.tensor([], dtype=dtype).element_size()
    budget = launch.arch_budget(arch) if budget is None else budget
    entry = launch.table_lookup(launcher.name, arch, dtype, d_pad, masked_right, bucket, tag, dv_pad)
    key = launch.table_key(launcher.name, dtype, d_pad, masked_right, bucket, tag, dv_pad)
    if entry is not None and launch.fits(entry, launcher.resident, d_pad, elem, dv_pad, budget):
        exact = key in launch.load_table(arch)
        return _fmt_entry(entry), (f"tuned table {arch}.json, key {key}" if exact else
                                   f"tuned table {arch}.json, nearest entry to {key}")
    why = f"no entry in {arch}.json" if launch.load_table(arch) else f"no tuned table for {arch}"
    return (_fmt_entry(launcher.default_entry(d_pad, elem, dv_pad, budget)),
            f"{why}: first candidate that fits the model in {budget // 1024} KiB of shared memory")


def interpreter_configs() -> List[str]:
    """Lines naming the tiles each portable kernel launches with in Triton's
    interpreter, in the order of Launcher.config in kernels/launch.py: a
    config forced by the environment, else the interpreter's fixed one."""
    from .kernels import launch
    from .kernels.bwd import _launch_dkdv, _launch_dq
    from .kernels.fwd import _launch_fwd

    fixed = launch.INTERPRET_CONFIG
    lines = []
    for launcher in (_launch_fwd, _launch_dkdv, _launch_dq):
        forced = launch.config_from_env(launcher.name)
        cfg = fixed if forced is None else forced
        where = ("the interpreter's fixed config (launch.INTERPRET_CONFIG)" if forced is None
                 else f"forced by {launch.ENV_CONFIG_PREFIX}{launcher.name}")
        lines.append(f"          {launcher.name:<8} BLOCK_M={cfg.kwargs['BLOCK_M']} BLOCK_N={cfg.kwargs['BLOCK_N']}"
                     f"  [{where}]")
    return lines


def _hopper_variants(variants: Tuple[str, ...], window: Tuple[int, int], backward: bool = False,
                     n_q: Optional[int] = None, d: Optional[int] = None, gqa: bool = False) -> bool:
    """No variant, or those that may take the Hopper forward (backward: the
    Hopper backward): dropout alone, as _dispatch.hopper_takes_variants
    decides (the forward's by query length n_q, head dim d and gqa)."""
    from ._dispatch import hopper_takes_variants
    return not variants or (tuple(variants) == ("dropout",)
                            and hopper_takes_variants(0.0, None, None, None, 0.1, window, backward=backward,
                                                      n_q=n_q, head_dim=d, gqa=gqa))


def _sinks_folded(variants: Tuple[str, ...], d: int) -> bool:
    """Whether the call's only variant, its sinks, is folded in after a
    Hopper forward run without them (ops._fwd_into, _dispatch's switch)."""
    from ._dispatch import sinks_after_hopper_forward
    return tuple(variants) == ("sinks",) and sinks_after_hopper_forward(True, False, d)


def hopper_plan(arch: str, on_gpu: bool, device_index: int, dtype, batch: int, h_q: int, h_kv: int,
                n_q: int, d: int, d_v: int, window: Tuple[int, int],
                variants: Tuple[str, ...]) -> Tuple[bool, str]:
    """(whether the Hopper forward takes the call, what it launches or why not)."""
    import torch
    from ._dispatch import (ENV_HOPPER_DROPOUT, ENV_HOPPER_SPLIT_QK, ENV_HOPPER_WINDOW, backend, hopper_available,
                            hopper_forward_dims, hopper_forward_window)
    from .kernels import hopper

    if backend() == "portable":
        return False, "FLASHATTN_TRITON_BACKEND=portable"
    if arch != "sm90":
        return False, f"{arch} is not sm_90"
    fold = _sinks_folded(variants, d)
    if fold:
        variants = ()  # the forward runs without them (ops._fold_sinks after it)
    if variants and not _hopper_variants(variants, window, n_q=n_q, d=d, gqa=h_kv != h_q):
        if tuple(variants) == ("dropout",) and window[0] < 0 and window[1] in (-1, 0):
            return False, (f"dropout: the portable forward ({ENV_HOPPER_DROPOUT}=1 takes dropout alone to the "
                           "Hopper tier; unset: _dispatch.HOPPER_DROPOUT_FWD_MIN_N by head dim, causal flag "
                           "and query length, else _dispatch.HOPPER_DROPOUT_DEFAULT)")
        return False, f"{', '.join(variants)}: variants run on the portable forward"
    if not hopper_forward_window(window):
        if window[1] in (-1, 0):
            return False, f"window_size {window}: {ENV_HOPPER_WINDOW}=0 keeps sliding windows portable"
        return False, f"window_size {window}: the Hopper forward takes full or causal attention only"
    if dtype not in (torch.float16, torch.bfloat16):
        return False, f"dtype {dtype} (float16 / bfloat16 only)"
    available = hopper_available(device_index) if on_gpu else hopper.AVAILABLE
    if not available:
        why = hopper.REASON or "the Gluon kernel did not import"
        if backend() == "hopper":
            return False, f"FLASHATTN_TRITON_BACKEND=hopper, but the tier is not available: the call raises ({why})"
        return False, f"not available here: {why}"
    from .kernels.hopper.fwd import (CONFIGS, DROPOUT_DECLINE, DYNAMIC_DEFAULT, HEAD_DIM_V, SECTION_MB_DEFAULT,
                                     SMEM_LIMIT, default_meta, smem_bytes, value_head_dim)
    if value_head_dim(d) != d_v:
        pairs = ", ".join(f"{a}/{b}" for a, b in sorted(HEAD_DIM_V.items()))
        return False, (f"head dims d={d}, dv={d_v} (d = dv in {sorted(x for x in CONFIGS if x not in HEAD_DIM_V)}, "
                       f"or d/dv {pairs})")
    if d_v != d and not hopper_forward_dims(torch.empty(0, d), torch.empty(0, d_v)):
        return False, f"head dims d={d}, dv={d_v}: {ENV_HOPPER_SPLIT_QK}=0 keeps them portable"
    dropout = "dropout" in variants
    if dropout and d in DROPOUT_DECLINE:
        return False, DROPOUT_DECLINE[d]
    causal = window[1] == 0
    meta = default_meta(d, causal, windowed=window[0] >= 0, dropout=dropout, masked="mask" in variants, n_q=n_q)
    meta["PERSISTENT"] = meta["PERSISTENT"] or meta["DYNAMIC"]
    rows = meta["BLOCK_M"] * meta["NUM_CONSUMERS"]
    n_m = -(-n_q // rows)
    if not meta["PERSISTENT"] and (n_m if meta["HEADS_FIRST"] else batch * h_q) > 65535:
        return False, "grid too large for the Hopper schedule"
    if smem_bytes(d, head_dim_v=d_v, **meta) > SMEM_LIMIT:
        return False, "shared memory"
    section_mb = (SECTION_MB_DEFAULT.get(d, (0, 0))[causal]
                  if DYNAMIC_DEFAULT[d][causal] and meta["HEADS_FIRST"] and window[0] < 0 else 0)
    return True, (f"Gluon kernel (kernels/hopper/fwd.py): {meta['NUM_CONSUMERS']} consumer warpgroups x "
                  f"BLOCK_M={meta['BLOCK_M']} rows, BLOCK_N={meta['BLOCK_N']}, "
                  f"NUM_STAGES={meta['NUM_STAGES']}, pingpong={meta['PINGPONG'] and meta['NUM_CONSUMERS'] > 1}, "
                  f"{'heads-first' if meta['HEADS_FIRST'] else 'rows-first'} "
                  f"{'grid' if not meta['PERSISTENT'] else 'persistent grid (one program per SM), tiles claimed from a counter' if DYNAMIC_DEFAULT[d][causal] else 'persistent grid (one program per SM)'}"
                  + (f", causal tiles in head sections whose K/V fill about {section_mb} MiB of L2 "
                     "(SECTION_MB_DEFAULT; one section when every head fits)" if section_mb else "")
                  + (", left window bound (HAS_WINDOW)" if window[0] >= 0 else "")
                  + (", dropout (HAS_DROPOUT)" if dropout else "")
                  + (", one compare per score in the masked causal steps (ROW_BOUND, fwd.ROW_BOUND_DIMS)"
                     if meta.get("ROW_BOUND") else "")
                  + (f", Q K^T split in {d_v} + {d - d_v} columns" if d_v != d else "")
                  + (", run without the sinks, which are folded into O and the LSE after it "
                     "(_dispatch.HOPPER_SINKS_DIMS, FLASHATTN_TRITON_HOPPER_SINKS)" if fold else ""))


def explain_shape(shape: Tuple[int, ...], dtype_name: str, causal: bool, window: Tuple[int, int],
                  h_kv: Optional[int] = None, n_k: Optional[int] = None, d_v: Optional[int] = None,
                  variants: Tuple[str, ...] = (), arch: Optional[str] = None) -> List[str]:
    """Lines saying which kernels and configs ``flash_attn_func`` uses for q of
    shape (B, N, H, d) (and k/v of Nk, Hkv, dv), on this machine or, with
    ``arch`` ("sm90"), on a GPU of that architecture."""
    import torch
    from .kernels import launch
    from .kernels.bwd import _PREPROCESS_BLOCK_M, _launch_dkdv, _launch_dq, group_split
    from .kernels.fwd import _launch_fwd
    from .ops import _batch_chunks

    batch, n_q, h_q, d = shape
    h_kv = h_kv or h_q
    n_k = n_k or n_q
    d_v = d_v or d
    dtype = getattr(torch, DTYPES[dtype_name])
    if h_q % h_kv:
        raise ValueError(f"--kv-heads {h_kv} must divide H={h_q}")
    if max(d, d_v) > 512:
        raise ValueError(f"head dims d={d}, dv={d_v}: at most 512 are supported")
    left, right = window
    if causal:
        right = 0
    window = (left, right)
    lines = [f"call: q ({batch}, {n_q}, {h_q}, {d}), k, v ({batch}, {n_k}, {h_kv}, {d})"
             + (f" with v head dim {d_v}" if d_v != d else "") + f", {dtype_name}, "
             f"{'causal' if causal else 'not causal'}, window_size={window}"
             + (f", with {', '.join(variants)}" if variants else "")]
    on_gpu = arch is None and torch.cuda.is_available()
    device_index = 0
    if on_gpu:
        device_index = torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(device_index)
        arch = f"sm{major}{minor}"
    if arch is None:
        if launch.INTERPRET:
            lines.append("CPU tensors, TRITON_INTERPRET=1: the portable kernels in Triton's interpreter")
            lines.extend(interpreter_configs())
        else:
            from .reference import _CPU_BLOCK
            lines.append(f"CPU tensors: the blockwise PyTorch path (reference.py), {_CPU_BLOCK}x{_CPU_BLOCK} "
                         "tiles, no Triton launch (TRITON_INTERPRET=1: the kernels in the interpreter)")
        lines.append("add --arch sm90 to see what an H100/H200 would launch")
        return lines

    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        raise ValueError(f"variants {bad}: expected some of {', '.join(VARIANTS)}")
    tag = table_tag(tuple(variants), left)
    d_pad, dv_pad = launch.head_dim_pad(d), launch.head_dim_pad(d_v)
    bucket = launch.seq_bucket(max(n_q, n_k))
    masked_right = right >= 0
    where = "this GPU" if on_gpu else "a GPU (simulated: no such GPU here)"
    dims = f"padded head dim {d_pad}" if d_pad == dv_pad else f"padded head dims {d_pad} (q, k) / {dv_pad} (v)"
    lines.append(f"{arch}, {where}; config key: {dtype_name}, {dims}, "
                 f"{'right-bounded mask' if masked_right else 'no right mask'}, length bucket {bucket}"
                 + (f", variant {tag}" if tag else ""))
    chunks = len(_batch_chunks(batch, h_q))
    takes, how = hopper_plan(arch, on_gpu, device_index, dtype, batch, h_q, h_kv, n_q, d, d_v, window,
                             variants)
    budget = launch.smem_budget(device_index) if on_gpu else None
    fwd_cfg, fwd_src = portable_config(_launch_fwd, arch, dtype, d_pad, masked_right, bucket, tag, dv_pad, budget)
    from ._dispatch import short_forward_portable
    fwd_takes, fwd_how = takes, how
    # (sinks folded in after the forward leave it a plain call, as in ops._fwd_into)
    kernel_plain = not variants or _sinks_folded(variants, d)
    if takes and short_forward_portable(max(n_q, n_k), d, window, plain=kernel_plain):
        fwd_takes, fwd_how = False, (f"N = {max(n_q, n_k)} is short enough that the portable forward is faster "
                                     "(_dispatch.HOPPER_FWD_SHORT)")
    if fwd_takes:
        lines.append(f"forward : Hopper tier, {how}")
        lines.append(f"          (if it declines at launch: portable FWD {fwd_cfg})")
    else:
        lines.append(f"forward : portable kernel FWD {fwd_cfg}  [{fwd_src}]")
        lines.append(f"          Hopper tier not used: {fwd_how}")
    group = h_q // h_kv
    split = group_split(group, batch * n_k, h_kv, d_pad + dv_pad)
    dkdv_cfg, dkdv_src = portable_config(_launch_dkdv, arch, dtype, d_pad, masked_right, bucket, tag, dv_pad,
                                         budget)
    dq_cfg, dq_src = portable_config(_launch_dq, arch, dtype, d_pad, masked_right, bucket, tag, dv_pad, budget)
    head = "backward: portable kernels"
    # What the Hopper backward may take: sinks reach the backward only through
    # the LSE (ops._bwd_into launches it without them): the call's other variants decide.
    kernel_variants = tuple(v for v in variants if v != "sinks")
    plain = not kernel_variants or _hopper_variants(kernel_variants, window, backward=True)
    # The backward has a switch of its own (dropout): then the tier as a plain call would find it.
    bwd_tier = takes or (plain and bool(variants)
                         and hopper_plan(arch, on_gpu, device_index, dtype, batch, h_q, h_kv, n_q, d, d_v, window,
                                         ())[0])
    if bwd_tier and plain and d != d_v:
        from .kernels.hopper import bwd as hbwd
        if hbwd.HEAD_DIM_V.get(d) == d_v and d not in hbwd.configs():
            lines.append(f"backward: Hopper tier not used: its d={d}/dv={d_v} build is not GPU-validated yet "
                         f"(CONFIGS_UNVERIFIED; {hbwd.UNVERIFIED_ENV}=1 opts in)")
        elif hbwd.HEAD_DIM_V.get(d) == d_v and window[0] >= 0:
            lines.append(f"backward: Hopper tier not used: {hbwd.WINDOW_DECLINE[d]}")
    if bwd_tier and plain and (d == d_v or (d != d_v and window[0] < 0)):
        from . import _dispatch
        from ._dispatch import ENV_HOPPER_WINDOW, backend, backward_window_source, hopper_backward_pays
        from .kernels.hopper import bwd as hbwd
        BWD_CONFIGS = hbwd.configs() if hbwd.HEAD_DIM_V.get(d, d) == d_v else {}
        source = backward_window_source(window)
        min_left = _dispatch.HOPPER_BWD_WINDOW_MIN_LEFT
        if d in BWD_CONFIGS and source is None:
            if os.environ.get(ENV_HOPPER_WINDOW) is not None:
                why = f"{ENV_HOPPER_WINDOW}={os.environ[ENV_HOPPER_WINDOW]} keeps sliding windows portable"
            elif min_left is not None:
                why = (f"left bound {window[0]} < {min_left} (_dispatch.HOPPER_BWD_WINDOW_MIN_LEFT: smaller "
                       f"windows are faster on the portable backward, docs/hopper.md); {ENV_HOPPER_WINDOW}=1 "
                       "takes it")
            else:
                why = (f"sliding windows take the Hopper backward only with {ENV_HOPPER_WINDOW}=1 (opt-in: "
                       "slower than the portable one at small windows, docs/hopper.md)")
            lines.append(f"backward: Hopper tier not used: window_size {window}: {why}")
        elif d in BWD_CONFIGS and not (backend() == "hopper" or hopper_backward_pays(max(n_q, n_k), d, right == 0)):
            lines.append(f"backward: Hopper tier not used: N = {max(n_q, n_k)} is short enough that the portable "
                         "backward is faster (docs/hopper.md)")
        elif d in BWD_CONFIGS:
            head = "          else (deterministic, or a decline) portable kernels"
            c = hbwd.kernel_meta(d, right == 0, unverified=d not in hbwd.CONFIGS, dropout="dropout" in variants)
            lines.append(f"backward: Hopper tier, Gluon kernel (kernels/hopper/bwd.py): {c['BLOCK_N']} keys per "
                         f"program, {c['BLOCK_M']}-row query tiles, {c['NUM_CONSUMERS']} consumer warpgroups, "
                         "dQ by TMA reduce-add into float32 (not bit-reproducible; deterministic=True or "
                         "FLASHATTN_TRITON_HOPPER_BWD=0: the portable kernels below)"
                         + ({"env": "; with its left window bound (opt-in)",
                             "rule": f"; with its left window bound (left >= {min_left}: "
                                     "_dispatch.HOPPER_BWD_WINDOW_MIN_LEFT)",
                             "default": "; with its left window bound"}.get(source or "", ""))
                         + ("; dropout (HAS_DROPOUT)" if "dropout" in variants else "")
                         + ("; one compare per score in the masked causal steps (ROW_BOUND, bwd.ROW_BOUND_DIMS)"
                            if window[0] < 0 and c["ROW_BOUND"] else "")
                         + ("; query-tile loops without loop-invariant code motion (NO_LICM, bwd.NO_LICM_DIMS or "
                            "FLASHATTN_TRITON_HOPPER_BWD_NO_LICM)" if c["NO_LICM"] else "")
                         + (f"; Q K^T split in {d_v} + {d - d_v} columns" if d != d_v else "")
                         + (" (opt-in: not GPU-validated yet)" if d not in hbwd.CONFIGS else ""))
    lines.append(f"{head}: preprocess (BLOCK_M={_PREPROCESS_BLOCK_M}), then")
    lines.append(f"          BWD_DKDV {dkdv_cfg}  [{dkdv_src}]")
    lines.append(f"          BWD_DQ   {dq_cfg}  [{dq_src}]")
    if group > 1:
        lines.append(f"          GQA group of {group} query heads per KV head: dK/dV in {split} program(s) "
                     "per KV head" + (" (float32 partials, summed)" if split > 1 else ""))
    if chunks > 1:
        lines.append(f"          B*H = {batch * h_q} programs per tile row exceed the grid limit: "
                     f"{chunks} launches over slices of the batch")
    return lines


def info(args: Optional[argparse.Namespace] = None) -> int:
    """Versions, the device, and which kernel path serves a call on it."""
    import torch
    import triton

    from . import __version__
    from ._dispatch import backend, hopper_available
    print(f"flashattn_triton {__version__}, torch {torch.__version__}, triton {triton.__version__}")
    if torch.cuda.is_available():
        idx = torch.cuda.current_device()
        cap = torch.cuda.get_device_capability(idx)
        print(f"GPU {torch.cuda.get_device_name(idx)} (sm_{cap[0]}{cap[1]}); backend setting: {backend()}")
        print(f"Hopper tier available: {hopper_available(idx)}")
        from .kernels.launch import load_table
        table = load_table(f"sm{cap[0]}{cap[1]}")
        print(f"tuned config table: {len(table)} entries" if table else "no tuned config table for this GPU: "
              "launch configs come from the shared-memory model")
    else:
        path = "Triton interpreter" if os.environ.get("TRITON_INTERPRET") == "1" else "blockwise PyTorch path"
        print(f"no GPU: CPU tensors run on the {path}")
    if args is None or args.shape is None:
        return 0
    try:
        window = (-1, -1) if args.window is None else tuple(args.window)
        lines = explain_shape(tuple(args.shape), args.dtype or INFO_DTYPE, args.causal, window,
                              args.kv_heads, args.seqlen_k, args.head_dim_v, tuple(args.variant), args.arch)
    except ValueError as exc:
        print(f"flashattn-triton info: {exc}", file=sys.stderr)
        return 2
    print()
    print("\n".join(lines))
    return 0


# --------------------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    from .bench import attention

    parser = argparse.ArgumentParser(prog="flashattn-triton", description=__doc__,
                                     epilog=env_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"flashattn_triton {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{check,info,bench}")

    chk = sub.add_parser("check", help="correctness self-check (and a benchmark on GPU)",
                         description="Compare against a float64 reference and print a pass/fail table. "
                                     "CPU: the blockwise path, then the kernels in Triton's interpreter; "
                                     "GPU: realistic shapes through the compiled kernels, then a short "
                                     "benchmark.")
    chk.add_argument("--no-bench", action="store_true", help="skip the GPU benchmark")
    chk.add_argument("--child", action="store_true", help=argparse.SUPPRESS)

    inf = sub.add_parser("info", help="versions, GPU, and which kernel path and configs a shape uses",
                         description="Versions, the GPU and the kernel tier; with --shape, which kernels "
                                     "and launch configs flash_attn_func uses for that call.",
                         epilog="example: flashattn-triton info --shape 4,4096,32,128 --kv-heads 8 "
                                "--dtype bf16 --causal --arch sm90",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    inf.add_argument("--shape", type=_shape, metavar="B,N,H,d",
                     help="q of shape (batch, seqlen, heads, head_dim) in flash_attn_func's layout")
    inf.add_argument("--kv-heads", type=_positive, metavar="HKV", help="K/V heads (GQA; default H)")
    inf.add_argument("--seqlen-k", type=_positive, metavar="NK", help="key length (default N)")
    inf.add_argument("--head-dim-v", type=_positive, metavar="DV", help="head dim of V (default d)")
    # --dtype and --window default to None so that main can tell them given (they need --shape)
    inf.add_argument("--dtype", choices=sorted(DTYPES), help=f"default: {INFO_DTYPE}")
    inf.add_argument("--causal", action="store_true", help="causal (bottom-right aligned)")
    inf.add_argument("--window", type=_window, metavar="LEFT,RIGHT",
                     help="window_size, -1 = unbounded (default -1,-1; write --window=-1,R when LEFT is -1)")
    inf.add_argument("--variant", action="append", choices=VARIANTS, default=[],
                     help="a variant the call uses (repeat for several)")
    inf.add_argument("--arch", type=_arch, metavar="smXY",
                     help="answer for a GPU of this architecture (e.g. sm90) instead of this machine's")

    bench = sub.add_parser("bench", help="attention benchmark vs PyTorch: progress, tables, plot",
                           description=attention.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    attention.add_arguments(bench, "quick", DEFAULT_BENCH_OUT)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "info":
        given = [option for dest, option in CALL_OPTIONS.items()
                 if getattr(args, dest) not in (None, False, [])]
        if args.shape is None and given:
            verb = "describes" if len(given) == 1 else "describe"
            print(f"flashattn-triton info: {', '.join(given)} {verb} a call: add --shape B,N,H,d",
                  file=sys.stderr)
            return 2
        return info(args)
    if args.command == "bench":
        from .bench import attention
        return attention.execute(args, "flashattn-triton bench")
    from .check import run_check
    return run_check(no_bench=args.no_bench, child=args.child)


if __name__ == "__main__":
    sys.exit(main())
