"""Which implementation runs a call.

* CUDA tensors: the Triton kernels.  On Hopper (sm_90) the forward may take
  the Hopper tier (kernels/hopper/) where it supports the case; elsewhere, and
  whenever it declines, the portable kernels run.
* CPU tensors: the portable kernels in Triton's interpreter when
  TRITON_INTERPRET=1 (set by the tests, never by the library), else the
  blockwise PyTorch path of reference.py.

FLASHATTN_TRITON_BACKEND=portable|hopper|auto (default auto) forces a tier,
for tests and benchmarks; "hopper" raises if the Hopper tier cannot run.
Sliding windows (left >= 0, causal or not) take the Hopper forward by
default (its window path passed on the H200, session 13); the Hopper
backward's window path with FLASHATTN_TRITON_HOPPER_WINDOW=1, or, with the
variable unset, for left bounds of at least HOPPER_BWD_WINDOW_MIN_LEFT (511
since session 37, 1023 from session 29, 2047 before); "0": the portable kernels for windows in both directions.
Head dims d = 192 with dv = 128 take the Hopper forward and backward (split
Q K^T; the backward GPU-validated in session 15) unless
FLASHATTN_TRITON_HOPPER_SPLIT_QK=0.
Dropout (alone, with no mask or a causal one): FLASHATTN_TRITON_HOPPER_DROPOUT=1
takes the Hopper forward and backward, "0" the portable kernels; unset, the
Hopper backward (HOPPER_DROPOUT_BWD_DEFAULT, since session 16) after the
Hopper forward where HOPPER_DROPOUT_FWD_MIN_N (by head dim, causal flag and
query length, since session 18) says so, else the portable forward
(HOPPER_DROPOUT_DEFAULT).
A boolean attn_mask alone (no other variant) takes the Hopper forward by
default since session 16 (FLASHATTN_TRITON_HOPPER_MASK=0: the portable one);
the backward stays portable.
Short sequences: the backward keeps the portable kernels where
hopper_backward_pays says so (session 11), the forward of plain calls where
HOPPER_FWD_SHORT does (session 18); FLASHATTN_TRITON_BACKEND=hopper forces
the Hopper tier for both.
A chunk mask (attention_chunk > 0) always runs on the portable kernels,
forward and backward, whatever the switches say: the Hopper tier has no
chunk mask (takes_chunk).  Where that tier runs, flash_attn_func first turns
a chunked call whose queries (and cache, if any) are whole chunks into one
without chunks over one sequence per chunk (chunks_as_sequences).
"""

from __future__ import annotations

import functools
import os
from typing import Optional

import torch

from .kernels.launch import INTERPRET, cuda_index, env_switch, env_value

ENV_BACKEND = "FLASHATTN_TRITON_BACKEND"
BACKENDS = ("auto", "portable", "hopper")


def backend() -> str:
    value = env_value(ENV_BACKEND)
    name = "auto" if value is None else value.lower()
    if name not in BACKENDS:
        raise ValueError(f"{ENV_BACKEND}={name!r}: expected one of {', '.join(BACKENDS)}")
    return name


def use_triton(t: torch.Tensor) -> bool:
    """CUDA tensors, and CPU tensors when Triton's interpreter is enabled."""
    return t.is_cuda or (INTERPRET and t.device.type == "cpu")


@functools.lru_cache(maxsize=None)
def hopper_available(device_index: int) -> bool:
    if INTERPRET or torch.cuda.get_device_capability(device_index) != (9, 0):
        return False
    try:
        from .kernels.hopper import AVAILABLE
    except Exception:  # noqa: BLE001 - any import problem means: not available
        return False
    return bool(AVAILABLE)


ENV_HOPPER_BWD = "FLASHATTN_TRITON_HOPPER_BWD"  # "0": the portable backward even where Hopper runs


def takes_chunk(attention_chunk: int) -> bool:
    """Whether the Hopper tier (forward and backward) can run a call with
    this attention_chunk: only without one (0).  Its kernels have no chunk
    mask, and their tile schedules (the window paths' key start and query
    end, kernels/hopper/) know the causal / window band only; a chunked call
    taken there would attend across chunk boundaries.  So chunked calls run
    the portable kernels, whose shared range helpers skip the tiles outside
    the chunks (kernels/tiles.py), even under FLASHATTN_TRITON_BACKEND=hopper
    (as a window the Hopper switches turn away does)."""
    return attention_chunk == 0


# Chunks as sequences.  With seqlen_q == seqlen_k = n, a multiple of the chunk
# size C, chunked attention is the same attention over the batch reshaped to
# (batch * n / C, C, ...): query i and key j share a chunk iff they fall in
# the same C-row slice, and the causal / window / ALiBi rules are relative
# (i - j), so they read the same inside a slice.  The reshaped call has no
# chunk and takes the Hopper tier, which has no chunk mask (takes_chunk).
# Queries after a cache (seqlen_k > seqlen_q, both counts of whole chunks
# apart) see only the last seqlen_q keys, whose chunks are theirs: the same
# holds on those keys.  Where n or the cache is not a whole number of
# chunks, the call runs as a packed batch (flash_attn_varlen_func) with one
# sequence per chunk that holds queries (its keys from the chunk's start),
# whose bounds are made on the device (api._chunks_as_packed).
# None: where the Hopper tier runs; True / False: always / never (tests).
CHUNKS_AS_SEQUENCES: Optional[bool] = None
# Below one 128-row query tile of the Hopper forward a chunk (or the queries
# of the call) would leave most of each tile empty; such calls stay on the
# portable kernels' chunk mask.
CHUNK_SEQUENCE_MIN = 128


def chunks_as_sequences(q, k, v, attention_chunk, dropout_p, alibi_slopes) -> bool:
    """Whether flash_attn_func runs this chunked call as one sequence per
    chunk (CHUNKS_AS_SEQUENCES): 4-D q, k, v of one batch, seqlen_k >=
    seqlen_q (the queries are the last keys), batch * seqlen_k in int32
    (the packed form's offsets), and no dropout (its
    pattern is drawn from the positions in the call, which the reshape would
    renumber); ALiBi slopes (Hq,) or (batch, Hq).  Anything malformed is left
    to the full path's checks."""
    choice = CHUNKS_AS_SEQUENCES
    # isinstance, not `.__class__ is int`: torch 2.11's dynamo reads the
    # latter as False for a constant int, and the compiled call missed the rule.
    if (choice is False or isinstance(attention_chunk, bool) or not isinstance(attention_chunk, int)
            or attention_chunk <= 0):
        return False
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (q, k, v)):
        return False
    n_q, n_k = q.shape[1], k.shape[1]
    if (v.shape[1] != n_k or k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0] or n_q == 0
            or q.shape[0] * n_k >= 2 ** 31 or n_k < n_q
            or isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or dropout_p != 0):
        return False
    if alibi_slopes is not None and not (isinstance(alibi_slopes, torch.Tensor) and (
            alibi_slopes.shape == (q.shape[2],) or alibi_slopes.shape == (q.shape[0], q.shape[2]))):
        return False
    return chunks_as_sequences_auto(q.device, attention_chunk, n_q) if choice is None else True


def chunks_as_sequences_auto(device: torch.device, attention_chunk: int, seqlen_q: int) -> bool:
    """CHUNKS_AS_SEQUENCES unset: on a CUDA device where the Hopper tier
    runs, chunks and queries of at least CHUNK_SEQUENCE_MIN (a few queries,
    a decode step: the packed form's offsets and full host path would cost
    more than the chunk mask's planned call)."""
    return (attention_chunk >= CHUNK_SEQUENCE_MIN and seqlen_q >= CHUNK_SEQUENCE_MIN and device.type == "cuda"
            and _hopper_runs(device.index))


def _hopper_runs(index: Optional[int]) -> bool:
    """The Hopper tier is chosen and available on CUDA device `index` (None:
    the current one), without raising where it is forced but missing (the
    chunk mask then runs, as before).  A constant to torch.compile, which
    does not trace into the cached availability probe."""
    return backend() != "portable" and hopper_available(cuda_index(torch.device("cuda", index)))


# What torch.compiler.assume_constant_result(_hopper_runs) does (torch 2.1 to
# 2.13), without the import of torch._dynamo that the public decorator makes
# at once: seconds on the first import of this package.
_hopper_runs._dynamo_marked_constant = True  # type: ignore[attr-defined]


def use_hopper_backward(device: torch.device, window, deterministic: bool,
                        seqlen: int = 1 << 30, head_dim: int = 128, head_dim_v: Optional[int] = None,
                        attention_chunk: int = 0) -> bool:
    """Whether to try the Hopper backward (kernels/hopper/bwd.py; it may still
    decline a case) for tensors on ``device`` (the real device also for the
    backward prefetch's meta tensors): the Hopper tier is chosen (as for the
    forward), the call is not deterministic (its dQ adds arrive in a varying
    order), the mask is none or causal (a left window bound on either as
    hopper_backward_window says: FLASHATTN_TRITON_HOPPER_WINDOW=1, or the
    size rule HOPPER_BWD_WINDOW_MIN_LEFT with the variable unset),
    FLASHATTN_TRITON_HOPPER_BWD is not "0", and (unless
    FLASHATTN_TRITON_BACKEND=hopper forces the tier) the length ``seqlen`` =
    max(Nq, Nk) is one where it beats the portable backward
    (hopper_backward_pays).  d != dv (``head_dim_v``; d = 192 with dv = 128,
    the split Q K^T) only while the forward's switch
    FLASHATTN_TRITON_HOPPER_SPLIT_QK allows it (hopper_forward_dims); the
    kernel itself takes only head dims whose config is verified (in
    kernels/hopper/bwd.py's CONFIGS, d = 192 since session 15; those of
    CONFIGS_UNVERIFIED only with FLASHATTN_TRITON_HOPPER_BWD_UNVERIFIED=1).
    A chunked call (attention_chunk > 0) never does (takes_chunk)."""
    if not takes_chunk(attention_chunk):  # no chunk mask in the Hopper tier: portable
        return False
    if deterministic or torch.are_deterministic_algorithms_enabled():
        return False
    if env_switch(ENV_HOPPER_BWD) is False:
        return False
    if head_dim_v is not None and head_dim_v != head_dim and not _switch(ENV_HOPPER_SPLIT_QK,
                                                                          HOPPER_SPLIT_QK_DEFAULT):
        return False
    if not (_hopper_tier(device) and hopper_backward_window(window)):
        return False
    return backend() == "hopper" or hopper_backward_pays(seqlen, head_dim, window[1] == 0)


def hopper_backward_pays(seqlen: int, head_dim: int, causal: bool) -> bool:
    """Whether the Hopper backward is the faster one at this length.  Short
    sequences have few query tiles per key block to amortize each program's
    set-up (barriers, K/V loads, the dK/dV store) and the float32 dQ buffer's
    zeroing and conversion; there the portable kernels won on the H200
    (session 11 call 3, bf16 and fp16, B*N = 16k tokens): causal N = 512 at
    every head dim (1.4-2.3x), causal N = 1024 at d <= 128 (1.03-1.17x), and
    not causal N = 512 at d <= 128 (1.1-1.4x).  Session 26
    (benchmarks/history/gpu_next_short_bwd.sh, its rule fixed before the run, bf16
    and fp16): the portable backward still won every d <= 128 cell here
    (1.03-1.73x) and the Hopper one every longer cell; causal N = 512 at
    d = 256 moved to the Hopper backward (0.85x the portable time).  Session
    28 (the same script and rule, after the causal dQ conversion kernel):
    causal N = 1024 at d = 128 moved to the Hopper backward (0.963x bf16,
    0.952x fp16 the portable time); d = 64 there stays portable (1.12x).
    Session 37 (the same script and rule, after the Hopper backward's dK / dV
    TMA stores): every cell but causal N = 512 at d = 64 (1.008x / 1.007x)
    moved to the Hopper backward: d = 64 full N = 512 0.909x / 0.869x (bf16 /
    fp16 the portable time), causal N = 1024 0.914x / 0.925x; d = 128 N = 512
    full 0.828x / 0.826x, causal 0.976x / 0.833x.  d = 192 is not in that
    script's sweep: its causal N <= 512 stays portable, as session 11 had it."""
    if seqlen <= 512 and causal:
        return 64 < head_dim <= 128 or head_dim >= 256
    return True


ENV_HOPPER_WINDOW = "FLASHATTN_TRITON_HOPPER_WINDOW"  # "1" / "0": windows take the Hopper tier or not
# The forward's window path when FLASHATTN_TRITON_HOPPER_WINDOW is unset: "1"
# since session 13 (benchmarks/history/gpu_next_window.sh: 118 GPU tests passed, 1.40-1.98x
# the portable forward on every causal row, the rule in its header met).
HOPPER_FWD_WINDOW_DEFAULT = "1"


def hopper_forward_window(window) -> bool:
    """Whether the Hopper forward takes this window_size (left, right): no
    mask or causal (right -1 or 0), with or without a left bound (left >= 0:
    its window path, docs/hopper.md "Sliding windows"), unless
    FLASHATTN_TRITON_HOPPER_WINDOW=0 (or HOPPER_FWD_WINDOW_DEFAULT "0")."""
    return _takes_window(window, HOPPER_FWD_WINDOW_DEFAULT)


# The Hopper backward's window path (kernels/hopper/bwd.py HAS_WINDOW) when
# FLASHATTN_TRITON_HOPPER_WINDOW is unset: "0" (not taken). Its GPU tests
# passed (session 13) but benchmarks/history/gpu_next_window_bwd.sh's timing rule did
# not (0.53-1.05x the portable backward through the API: host-bound at small
# windows, docs/hopper.md); kept apart from the forward's default, "1".
HOPPER_BWD_WINDOW_DEFAULT = "0"
# The size rule, read only while FLASHATTN_TRITON_HOPPER_WINDOW is unset: a
# left bound of at least this many keys takes the Hopper backward's window
# path whatever HOPPER_BWD_WINDOW_DEFAULT says (None: no rule).  Session 15 call 2
# (bf16, B*N = 16k, causal) had the Hopper window backward at 0.75-0.92x the
# portable one for windows of 128 / 256 keys, 0.96-1.12x at 512 and
# 1.03-1.11x at 1024; benchmarks/history/gpu_next_window_rule.sh sets the value by
# the rule in its header.
# Session 16 (benchmarks/history/gpu_next_window_rule.sh, two repeats, 33 rows):
# from left = 2047 every row was >= 1.12x the portable backward in both
# repeats (1.12-1.36x); at 1023 one row fell to 0.73x in one repeat, at 511
# several were below 1.0x.
# Session 29 call 4 (the same script and rule, the causal GQA group split at 4
# programs per SM since session 23): from left = 1024 every row was 1.05-1.59x
# the portable backward in both repeats (the variant table's B=2 Hq 16 / Hkv 4
# N=4k row 1.59 / 1.33x); at 512 two MHA rows were 0.96x: the rule chose 1023.
# Session 37 call 4 (the same script and rule, after the window calls took
# TMA_DKV: kernels/hopper/bwd.py TMA_DKV_WINDOW): all 33 rows in both repeats,
# every check ok; from left = 512 every row 1.10-1.47x the portable backward
# (1.18-1.59x FlexAttention's): the rule chose 511.
HOPPER_BWD_WINDOW_MIN_LEFT: Optional[int] = 511


def hopper_backward_window(window) -> bool:
    """Whether the Hopper backward takes this window_size (left, right): no
    mask or causal (right -1 or 0) with no left bound; a left bound (left
    >= 0: its window path, docs/hopper.md "Sliding windows" of the backward)
    as FLASHATTN_TRITON_HOPPER_WINDOW says ("1" takes it, any other value
    not: the forward's switch too), and with the variable unset when left >=
    HOPPER_BWD_WINDOW_MIN_LEFT (the size rule, when not None) or
    HOPPER_BWD_WINDOW_DEFAULT is "1", whatever the forward's default."""
    return backward_window_source(window) is not None


def backward_window_source(window) -> Optional[str]:
    """What takes this window_size to the Hopper backward (None: nothing,
    the portable backward): "no window" (left < 0), "env"
    (FLASHATTN_TRITON_HOPPER_WINDOW=1), "rule" (left >=
    HOPPER_BWD_WINDOW_MIN_LEFT, the variable unset) or "default"
    (HOPPER_BWD_WINDOW_DEFAULT "1", the variable unset).  For `flashattn-triton
    info`, which says why."""
    left, right = window
    if right not in (-1, 0):
        return None
    if left < 0:
        return "no window"
    value = env_switch(ENV_HOPPER_WINDOW)
    if value is not None:
        return "env" if value else None
    if HOPPER_BWD_WINDOW_MIN_LEFT is not None and left >= HOPPER_BWD_WINDOW_MIN_LEFT:
        return "rule"
    return "default" if HOPPER_BWD_WINDOW_DEFAULT == "1" else None


def _switch(name: str, default: str) -> bool:
    """An on/off variable (launch.env_switch): its value, or ``default`` ("0" /
    "1") when unset."""
    value = env_switch(name)
    return default == "1" if value is None else value


def _takes_window(window, default: str) -> bool:
    """No mask or causal (right -1 or 0) always; a left bound (left >= 0) as
    FLASHATTN_TRITON_HOPPER_WINDOW says, ``default`` when it is unset."""
    if window[1] not in (-1, 0):
        return False
    return window[0] < 0 or _switch(ENV_HOPPER_WINDOW, default)


ENV_HOPPER_SPLIT_QK = "FLASHATTN_TRITON_HOPPER_SPLIT_QK"  # "0": d != dv (d = 192, dv = 128) stays portable
# The switch when the variable is unset: "1" since session 13
# (benchmarks/history/gpu_next_mla.sh: 67 GPU tests passed, 1.22-1.51x the portable
# forward on every row, the rule in its header met).
HOPPER_SPLIT_QK_DEFAULT = "1"


def hopper_forward_dims(q, v) -> bool:
    """Whether the Hopper forward is tried for these head dims: d = dv, or
    d != dv (kernels/hopper/fwd.py's split Q K^T, d = 192 with dv = 128; the
    kernel declines other pairs) unless FLASHATTN_TRITON_HOPPER_SPLIT_QK=0
    (or HOPPER_SPLIT_QK_DEFAULT "0")."""
    if q.shape[-1] == v.shape[-1]:
        return True
    return _switch(ENV_HOPPER_SPLIT_QK, HOPPER_SPLIT_QK_DEFAULT)


ENV_HOPPER_DROPOUT = "FLASHATTN_TRITON_HOPPER_DROPOUT"  # "1" / "0": dropout takes the Hopper tier or not
# The dropout switch when FLASHATTN_TRITON_HOPPER_DROPOUT is unset: "0" (the
# portable kernels).  GPU-validated (tests/test_hopper_dropout.py, sessions
# 13 and 15) and 1.19x / 1.21x the portable forward / backward on
# bench_variants' dropout row (session 13 call 4), but below SDPA's backward
# there; benchmarks/history/gpu_next_dropout_default.sh's rule, in its header,
# decides whether it turns "1".
HOPPER_DROPOUT_DEFAULT = "0"
# The backward's switch when the variable is unset: "1" since session 16
# (benchmarks/results/h200/session16/call2/dropout_default/): the Hopper
# dropout backward was 1.12-2.83x the portable one on all 16 rows of
# gpu_next_dropout_default.sh in both repeats (d 64/128/256, N 2k/8k, causal
# and not, GQA), and its GPU tests passed, among them a portable forward
# followed by the Hopper backward (the keep mask is the same bit for bit);
# the forward's half of that rule failed (0.81-0.98x at N = 2k causal), so
# the forward keeps HOPPER_DROPOUT_DEFAULT.  With this default, the dropout
# GPU tests passed again in session 17 call 5 (101 passed, 12 skipped).
HOPPER_DROPOUT_BWD_DEFAULT = "1"


# The forward's dropout default by query length, with the variable unset:
# None (HOPPER_DROPOUT_DEFAULT alone decides) or {(head dim, causal): least
# N_Q}: the Hopper forward takes a dropout call whose query length reaches
# the entry of its head dim and causal flag (no entry: the default decides);
# a key (head dim, causal, "gqa"), where present, serves the calls with
# fewer KV heads than query heads instead, None there meaning no length
# (then the default decides).
# Session 16 call 2 measured the Hopper dropout forward at 1.03-1.73x the
# portable one on every row but N = 2k causal (0.82-0.98x);
# benchmarks/history/gpu_next_dropout_fwd.sh's rule, in its header, sets the
# entries: session 18 call 2 first, session 23 call 5 now (two repeats, 28
# rows each, portable / Hopper forward time): non-causal 1.12-1.26x at
# d = 64 / 128 and 1.60-1.64x at d = 256; causal d = 128 MHA 1.055-1.18x
# from N = 2k, its GQA rows (Hq 16 / Hkv 4) 1.15-1.25x from 3k but 1.045x
# at 2k; d = 256 1.54-1.73x; d = 64 causal 0.81-1.05x, below the rule's
# 1.05 at every length up to 8k (no entry).
HOPPER_DROPOUT_FWD_MIN_N: Optional[dict] = {
    (64, False): 0, (128, False): 0, (128, True): 2048, (128, True, "gqa"): 3072,
    (256, False): 0, (256, True): 2048}


def hopper_takes_variants(softcap, alibi_slopes, sinks, attn_bias, dropout_p, window, backward=False,
                          n_q: Optional[int] = None, head_dim: Optional[int] = None, gqa: bool = False) -> bool:
    """Whether a call with variants may try the Hopper forward (backward:
    the Hopper backward; use_hopper_forward / use_hopper_backward still
    decide the rest): only dropout alone (no softcap, ALiBi, sinks or mask),
    with no mask or a causal one (no window bound), and only as
    FLASHATTN_TRITON_HOPPER_DROPOUT says ("1": yes, any other value: no);
    when it is unset, HOPPER_DROPOUT_BWD_DEFAULT for the backward, and for
    the forward HOPPER_DROPOUT_DEFAULT or, where HOPPER_DROPOUT_FWD_MIN_N
    is set, a query length n_q of at least its entry for the call's head dim
    and causal flag (with gqa, fewer KV heads than query heads, the entry
    keyed (head dim, causal, "gqa") where there is one; their dropout paths,
    docs/hopper.md "Dropout").  Calls without variants do not ask."""
    if not (dropout_p > 0 and not softcap and alibi_slopes is None and sinks is None and attn_bias is None
            and window[0] < 0 and window[1] in (-1, 0)):
        return False
    if backward:
        return _switch(ENV_HOPPER_DROPOUT, HOPPER_DROPOUT_BWD_DEFAULT)
    if env_switch(ENV_HOPPER_DROPOUT) is None and HOPPER_DROPOUT_FWD_MIN_N is not None and n_q is not None:
        causal = window[1] == 0
        gqa_key = (head_dim, causal, "gqa")
        least = (HOPPER_DROPOUT_FWD_MIN_N[gqa_key] if gqa and gqa_key in HOPPER_DROPOUT_FWD_MIN_N
                 else HOPPER_DROPOUT_FWD_MIN_N.get((head_dim, causal)))
        if least is not None and n_q >= least:
            return True
    return _switch(ENV_HOPPER_DROPOUT, HOPPER_DROPOUT_DEFAULT)


ENV_HOPPER_MASK = "FLASHATTN_TRITON_HOPPER_MASK"  # "1" / "0": a boolean attn_mask may take the Hopper forward
# The switch when the variable is unset: "1" since session 16 (H200,
# benchmarks/history/gpu_next_mask.sh: 71 GPU tests passed; B=2 N=4k Hq=16 d=128 causal
# + key-padding mask, forward 0.613 ms, 1.37x SDPA's masked attention and
# 1.44x the portable forward; its rule asked >= 1.0x and >= 1.1x).
HOPPER_MASK_DEFAULT = "1"


def hopper_forward_takes_mask(softcap, alibi_slopes, sinks, attn_bias, dropout_p) -> bool:
    """Whether a call with variants may try the Hopper forward for its mask
    (use_hopper_forward still decides the rest, the kernel may still decline
    a mask's layout): a boolean attn_bias alone (no softcap, ALiBi, sinks or
    dropout), any window the forward takes, when
    FLASHATTN_TRITON_HOPPER_MASK is "1" (HOPPER_MASK_DEFAULT when unset).
    The forward only: the backward of a masked call stays portable
    (hopper_takes_variants says no to masks)."""
    return (attn_bias is not None and attn_bias.dtype == torch.bool and not softcap and alibi_slopes is None
            and sinks is None and not dropout_p > 0 and _switch(ENV_HOPPER_MASK, HOPPER_MASK_DEFAULT))


ENV_HOPPER_SINKS = "FLASHATTN_TRITON_HOPPER_SINKS"  # "1" / "0": sinks may take the Hopper forward
# The switch when the variable is unset: HOPPER_SINKS_DEFAULT, or "1" for
# the head dims in HOPPER_SINKS_DIMS.  With it on, a dense call whose only
# variant is learnable sinks (any mask or window the plain Hopper forward
# takes) runs that forward without them and folds each head's sink into O
# and the LSE afterwards, in place
# (ops.py _fold_sinks: kernels/combine.py's merge with the sink as a second
# part of output 0); the backward reads sinks only through the LSE, so it is
# unchanged.  Session 23 call 1 (benchmarks/history/gpu_next_sinks_fwd.sh, 3
# rounds, causal B=2 N=4k, forward time on / off): d = 128 (Hq16 Hkv4)
# 0.708-0.721x, d = 64 (Hq64 Hkv8) 0.960-0.969x; the rule asked <= 0.95x on
# every row and round and a backward <= 1.03x (one round read 1.30x on the
# unchanged backward), so the default stayed "0".  Call 6
# (benchmarks/history/gpu_next_sinks_d128.sh, its rule per head dim: forward <= 0.95x
# in every round, median backward <= 1.03x) read d = 128 0.707 / 0.711 /
# 0.929x forward, backward median 1.010x: d = 128 takes the fold by default;
# d = 64 0.972-0.974x stays off (its Hopper causal forward is the weaker
# one: docs/performance.md).
HOPPER_SINKS_DEFAULT = "0"
HOPPER_SINKS_DIMS: frozenset = frozenset({128})


def sinks_after_hopper_forward(sinks, varlen: bool, head_dim: Optional[int] = None) -> bool:
    """Whether a dense call's sinks may be folded in after a Hopper forward
    run without them (FLASHATTN_TRITON_HOPPER_SINKS; when unset "1" for a
    head dim in HOPPER_SINKS_DIMS, else HOPPER_SINKS_DEFAULT); ops.py asks
    only when sinks are the call's only variant."""
    default = "1" if head_dim in HOPPER_SINKS_DIMS else HOPPER_SINKS_DEFAULT
    return sinks is not None and not varlen and _switch(ENV_HOPPER_SINKS, default)


# Short sequences on the portable forward: {(head dim, causal): N} sends a
# call without variants or left window bound whose max(Nq, Nk) is at most N
# to the portable kernels (FLASHATTN_TRITON_BACKEND=hopper still forces the Hopper tier).
# The session 18 sweeps (bf16 and fp16, B*N = 16k) had the portable forward
# ahead at d = 64 only: causal N = 512 / 1k 1.15-1.19x, non-causal N = 512
# 1.11-1.13x (2k and d >= 128: the Hopper forward at or ahead).
# benchmarks/history/gpu_next_short_fwd.sh's rule, fixed in its header, set the
# entries: non-causal 512 in session 18 call 9 (1.12 / 1.18x in two repeats;
# 1k 1.04 / 1.05, under the rule's 1.05), causal 1k in session 19 call 1
# (512: 1.18 / 1.17x, 1k: 1.15 / 1.15x; 2k 0.97 / 0.96x stays on Hopper;
# benchmarks/results/h200/session19).
HOPPER_FWD_SHORT: dict = {(64, True): 1024, (64, False): 512}


def hopper_forward_pays(seqlen: int, head_dim: int, causal: bool) -> bool:
    """Whether the Hopper forward is the faster one at this length
    (max(Nq, Nk)) for a call without variants: HOPPER_FWD_SHORT."""
    short = HOPPER_FWD_SHORT.get((head_dim, causal))
    return short is None or seqlen > short


def short_forward_portable(seqlen: int, head_dim: int, window, plain: bool) -> bool:
    """Whether HOPPER_FWD_SHORT sends this call to the portable forward: a
    plain call (no variants) with no left window bound at a length (max(Nq,
    Nk)) where hopper_forward_pays says no, unless FLASHATTN_TRITON_BACKEND=hopper."""
    return (plain and window[0] < 0 and backend() != "hopper"
            and not hopper_forward_pays(seqlen, head_dim, window[1] == 0))


def use_hopper_forward(q, k, v, window, causal_offset, plain: bool = False, attention_chunk: int = 0) -> bool:
    """Whether to try the Hopper forward (it may still decline a case) for
    dense (B, N, H, d) q, k, v; plain: a call without variants, which
    short_forward_portable may keep on the portable forward.  A chunked call
    (attention_chunk > 0) never does (takes_chunk)."""
    # (chunk first: no chunk mask in the Hopper forward, the portable one runs it)
    return (takes_chunk(attention_chunk) and _hopper_tier(q.device) and hopper_forward_window(window)
            and hopper_forward_dims(q, v)
            and not short_forward_portable(max(q.shape[1], k.shape[1]), q.shape[-1], window, plain))


ENV_HOPPER_VARLEN = "FLASHATTN_TRITON_HOPPER_VARLEN"  # "1" / "0": packed batches take the Hopper forward or not
# The switch when FLASHATTN_TRITON_HOPPER_VARLEN is unset: "1" since session
# 55 (benchmarks/results/h100/session55/call4, the rule in
# benchmarks/history/gpu_session55_call4.sh met on an H100: tests/test_hopper_varlen.py
# 34 passed; bench_varlen's causal GQA packed forward 1.23x / 1.15x the
# portable one, 395 -> 484 and 400 -> 461 TFLOP/s, in both seeds).
HOPPER_VARLEN_DEFAULT = "1"


# Packed batches at these head dims whose longest sequence (max(max_seqlen_q,
# max_seqlen_k)) is at most this long keep the portable forward (no left
# window; FLASHATTN_TRITON_BACKEND=hopper overrides).  Session 55 call 6
# (H100, benchmarks/results/h100/session55/call6, 32k tokens, Hq 32 / Hkv 8):
# documents of 64..1024 tokens at d = 64 ran 0.87x (causal) and 0.73x (not)
# the portable forward on the Hopper one; 64..8192 at d = 64 causal 1.28x,
# d = 128 64..1024 causal 1.23x, d = 256 2.06x, d = 128 not causal 1.39x.
# Session 56 call 3 (H100, results/h100/session56/call3) moved the bound to
# 2048: d = 64 documents of 64..2048 ran 0.98x / 0.92x causal and 0.89x /
# 0.81x not causal on the Hopper forward, 64..4096 (longest 3813 / 3262)
# 1.08x / 2.7x causal, 64..8192 1.25x / 1.19x.
HOPPER_VARLEN_SHORT: dict = {64: 2048}


def use_hopper_varlen_forward(q, v, window, attention_chunk: int = 0, max_seqlen: int = 1 << 30) -> bool:
    """Whether to try the Hopper forward (kernels/hopper/fwd.py
    hopper_forward_varlen; it may still decline a case) for a packed batch
    without variants: FLASHATTN_TRITON_HOPPER_VARLEN (HOPPER_VARLEN_DEFAULT
    when unset), no chunk, the windows and head dims of the dense rule, and
    not a batch of short sequences at a head dim of HOPPER_VARLEN_SHORT
    (max_seqlen: the larger of max_seqlen_q and max_seqlen_k)."""
    short = (window[0] < 0 and max_seqlen <= HOPPER_VARLEN_SHORT.get(q.shape[-1], 0)
             and backend() != "hopper")
    return (takes_chunk(attention_chunk) and not short and _switch(ENV_HOPPER_VARLEN, HOPPER_VARLEN_DEFAULT)
            and _hopper_tier(q.device) and hopper_forward_window(window) and hopper_forward_dims(q, v))


ENV_HOPPER_VARLEN_BWD = "FLASHATTN_TRITON_HOPPER_VARLEN_BWD"  # "1": packed batches take the Hopper backward
# The switch when FLASHATTN_TRITON_HOPPER_VARLEN_BWD is unset: "1" since
# session 56 (results/h100/session56/call1: tests/test_hopper_varlen.py 56
# passed on an H100, its 10 packed backward cases included; bench_varlen's
# causal GQA d = 128 packed backward 7.52 -> 5.72 ms and 8.16 -> 6.03 ms,
# 1.31x / 1.35x the portable one; call2: test_varlen, test_varlen_paged,
# test_integrations and test_hopper_varlen with it on, 273 passed; call 3:
# 1.30-1.52x at d = 128 on documents of 64..1024 and 64..8192 tokens, 1.36-
# 1.46x at d = 64 up to 2048; call 6: 1.26-1.37x at d = 64 on 64..4096 and
# 64..8192 once packed plans no longer take HEADS_FIRST, 0.82-0.92x before).
HOPPER_VARLEN_BWD_DEFAULT = "1"


def use_hopper_varlen_backward(q, v, window, deterministic: bool, attention_chunk: int = 0) -> bool:
    """Whether to try the Hopper backward (kernels/hopper/bwd.py
    hopper_backward_varlen; it declines head dims other than 64 / 128 and
    more) for a packed batch without variants: FLASHATTN_TRITON_HOPPER_VARLEN_BWD
    (HOPPER_VARLEN_BWD_DEFAULT when unset), not deterministic (dQ's adds
    arrive in a varying order), no chunk, the windows the forward takes, d = dv."""
    return (takes_chunk(attention_chunk) and not deterministic and not torch.are_deterministic_algorithms_enabled()
            and _switch(ENV_HOPPER_VARLEN_BWD, HOPPER_VARLEN_BWD_DEFAULT) and q.shape[-1] == v.shape[-1]
            and _hopper_tier(q.device) and hopper_forward_window(window))


def _hopper_tier(device: torch.device) -> bool:
    """The Hopper tier is chosen for this device (FLASHATTN_TRITON_BACKEND) and
    available; raises if it is forced but unavailable."""
    choice = backend()
    if choice == "portable" or device.type != "cuda":
        return False
    ok = hopper_available(cuda_index(device))
    if choice == "hopper" and not ok:
        raise RuntimeError(f"{ENV_BACKEND}=hopper but the Hopper tier is not available on this "
                           "GPU / Triton version")
    return ok
