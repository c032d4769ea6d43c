"""Argument checks for the public functions.

Every check raises before any kernel runs and names the argument and the
values seen: TypeError for wrong types (non-tensors, unsupported or mixed
dtypes, flags that are not real booleans), ValueError for wrong shapes,
devices, strides and values, NotImplementedError for what the library does
not support yet.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence, Tuple

import torch

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 512  # d pads to a power of two; 512 runs with small tiles
# CUDA caps a grid axis that holds batch x heads at 65535 programs; batches are
# split to fit, but a single batch entry's heads must fit.
MAX_HEADS = 65535


def check_flag(value, name: str) -> bool:
    """Flags must be real booleans: "False" or a tensor would silently be truthy."""
    if not isinstance(value, bool):
        kind = type(value)
        kind_name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        raise TypeError(f"{name} must be a bool, got {kind_name} {value!r}")
    return value


# The kernels hold the scale and the softcap as float32 and multiply them by
# log2(e) (base-2 scores): past FLOAT32_LIMIT that product overflows, and below
# float32's smallest normal the value is a denormal that GPUs flush to 0 (and
# Triton's interpreter types as float64 instead).
FLOAT32_TINY = 2.0 ** -126
FLOAT32_LIMIT = 3.4028234663852886e38 / 1.4426950408889634


def check_scale(scale, name: str, head_dim: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if type(scale) is float and FLOAT32_TINY <= abs(scale) < FLOAT32_LIMIT:  # fast accept
        return scale
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"{name} must be a Python float or None, got {type(scale).__name__}")
    value = finite_float(scale)
    if value is None:
        raise ValueError(f"{name} must be finite, got {short_repr(scale)}")
    if abs(value) >= FLOAT32_LIMIT:
        raise ValueError(f"{name}={value!r} is too large: the kernels' base-2 scores need |{name}| * log2(e) "
                         f"below float32's max, |{name}| < {FLOAT32_LIMIT:.4g}")
    if abs(value) < FLOAT32_TINY:
        # Every score is 0 to float precision (exp(scale * s) = 1): uniform
        # attention, exactly what a scale of 0 gives.
        return 0.0
    return value


def finite_float(x) -> Optional[float]:
    """float(x) for a real x, or None where it is not finite as a float
    (inf, NaN, or an int too large for a float: float() would raise OverflowError)."""
    try:
        value = float(x)
    except OverflowError:
        return None
    return value if -math.inf < value < math.inf else None


def short_repr(x) -> str:
    """repr(x), its middle cut where long (a 400-digit int)."""
    text = repr(x)
    return text if len(text) <= 40 else f"{text[:18]}...{text[-18:]} ({len(text)} characters)"


# A window side at or above this many tokens reaches past either end of any
# sequence this library can hold (offsets are int32), so it means unbounded
# (-1): the kernels add sides to positions in 32-bit integers, where a side
# near 2**31 (a common "infinite" sentinel) would wrap around.
WINDOW_UNBOUNDED_FROM = 2 ** 30


def unbounded_side(w: int) -> int:
    """A window side as the kernels take it: -1 for any side that covers every key."""
    return -1 if w >= WINDOW_UNBOUNDED_FROM else w


def check_window(window_size, causal: bool) -> Tuple[int, int]:
    """flash-attn's window_size=(left, right), -1 = unbounded; causal sets right = 0."""
    if type(window_size) is tuple and len(window_size) == 2:  # fast accept of plain ints
        left, right = window_size
        if (type(left) is int and type(right) is int and -1 <= left < WINDOW_UNBOUNDED_FROM
                and -1 <= right < WINDOW_UNBOUNDED_FROM):
            if causal:
                right = 0 if right < 0 else min(right, 0)
            return left, right
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise TypeError(f"window_size must be a pair (left, right) of ints, got {window_size!r}")
    left, right = window_size
    for side, w in (("left", left), ("right", right)):
        if isinstance(w, bool) or not isinstance(w, numbers.Integral):
            raise TypeError(f"window_size {side} must be an int, got {type(w).__name__} {w!r}")
        if w < -1:
            raise ValueError(f"window_size {side} must be >= -1 (-1 = unbounded), got {w}")
    left, right = unbounded_side(int(left)), unbounded_side(int(right))
    if causal:
        right = 0 if right < 0 else min(right, 0)
    return left, right


# A chunk of this many keys or more holds every key of any sequence the
# kernels can hold as one chunk in practice (a sequence of 2^30 tokens does
# not fit a GPU); held there, as the window's sides are, so that chunk
# arithmetic stays within int32 (kernels/tiles.py chunk_end).
CHUNK_MAX = 2 ** 30


def check_attention_chunk(attention_chunk) -> int:
    """Chunked attention's chunk size: an int >= 0 (0 = off), TypeError for
    anything else (a bool or a float among them), ValueError for a negative
    one; sizes of CHUNK_MAX and more are held at CHUNK_MAX."""
    if type(attention_chunk) is int and 0 <= attention_chunk < CHUNK_MAX:  # fast accept
        return attention_chunk
    if isinstance(attention_chunk, bool) or not isinstance(attention_chunk, numbers.Integral):
        raise TypeError(f"attention_chunk must be an int (the chunk size, 0 = off), got "
                        f"{type(attention_chunk).__name__} {short_repr(attention_chunk)}")
    if attention_chunk < 0:
        raise ValueError(f"attention_chunk must be >= 0 (0 = off), got {attention_chunk}")
    return min(int(attention_chunk), CHUNK_MAX)


def check_softcap(softcap) -> float:
    """flash-attn's softcap: 0 = off, else a positive cap."""
    if type(softcap) is float and (softcap == 0.0 or FLOAT32_TINY <= softcap < FLOAT32_LIMIT):  # fast accept
        return softcap
    if isinstance(softcap, bool) or not isinstance(softcap, numbers.Real):
        raise TypeError(f"softcap must be a Python float, got {type(softcap).__name__}")
    value = finite_float(softcap)
    if value is None or value < 0:
        raise ValueError(f"softcap must be finite and >= 0 (0 = off), got {short_repr(softcap)}")
    check_softcap_range(value)
    return value


def check_softcap_range(value: float) -> None:
    """A finite softcap >= 0 that the kernels' float32 arithmetic holds:
    0 (off), or a normal float32 whose product with log2(e) is finite."""
    if value != 0 and not FLOAT32_TINY <= value < FLOAT32_LIMIT:
        raise ValueError(f"softcap={value!r} is outside what the kernels' float32 arithmetic holds: "
                         f"0 (off) or {FLOAT32_TINY:.4g} <= softcap < {FLOAT32_LIMIT:.4g}")


def check_dropout(dropout_p) -> float:
    if type(dropout_p) is float and 0.0 <= dropout_p < 1.0:  # fast accept
        return dropout_p
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real):
        raise TypeError(f"dropout_p must be a Python float, got {type(dropout_p).__name__}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    return float(dropout_p)


def _check_vector(name: str, t, q: torch.Tensor):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device != q.device:
        raise ValueError(f"{name} must be on {q.device} like q, got {t.device}")


def shape_is(t: torch.Tensor, *shapes: tuple) -> bool:
    """t's shape equals one of shapes.  Compares with ==, never tuple `in`: under
    torch.compile(dynamic=True) a static size equal to a symbolic one (a buffer's
    (4,) against q's s0 heads) fails `in` but passes == (with a guard)."""
    return any(len(t.shape) == len(s) and all(a == b for a, b in zip(t.shape, s)) for s in shapes)


def check_alibi(alibi_slopes, q: torch.Tensor, batch: int, heads: int) -> Optional[torch.Tensor]:
    """float32 (nheads,) or (batch, nheads), as flash-attn requires."""
    if alibi_slopes is None:
        return None
    _check_vector("alibi_slopes", alibi_slopes, q)
    if alibi_slopes.dtype != torch.float32:
        raise TypeError(f"alibi_slopes must be float32, got {alibi_slopes.dtype}")
    if not shape_is(alibi_slopes, (heads,), (batch, heads)):
        raise ValueError(f"alibi_slopes must have shape ({heads},) or ({batch}, {heads}) "
                         f"(nheads,) / (batch, nheads), got {tuple(alibi_slopes.shape)}")
    return plain(alibi_slopes)


def check_sinks(sinks, q: torch.Tensor, heads: int) -> Optional[torch.Tensor]:
    """One logit per query head, any float dtype; used (and differentiated) in float32."""
    if sinks is None:
        return None
    _check_vector("sinks", sinks, q)
    if not sinks.is_floating_point():
        raise TypeError(f"sinks must be a floating-point tensor, got {sinks.dtype}")
    if tuple(sinks.shape) != (heads,):
        raise ValueError(f"sinks must have shape (nheads,) = ({heads},), got {tuple(sinks.shape)}")
    return sinks_for_kernels(sinks)


def sinks_for_kernels(sinks: torch.Tensor) -> torch.Tensor:
    """Checked sinks as the kernels read them (sinks[h] at SINKS + h): float32,
    contiguous; also what a planned call (api._CallPlan) passes per call."""
    return plain(sinks.float().contiguous())


def check_attn_mask(attn_mask, query: torch.Tensor, target: Tuple[int, ...], batch: int,
                    heads: int) -> Optional[torch.Tensor]:
    """SDPA's attn_mask, bool (True = attend) or float16/bfloat16/float32
    (added to the scores), broadcastable to ``target`` = query's (..., nheads,
    seqlen_q, seqlen_k) (3-D queries: (batch, seqlen_q, seqlen_k)).
    Returned 4-D (batch or 1, nheads or 1, seqlen_q or 1, seqlen_k or 1): a
    view whenever the leading dims allow, never expanded in memory."""
    if attn_mask is None:
        return None
    if not isinstance(attn_mask, torch.Tensor):
        raise TypeError(f"attn_mask must be a torch.Tensor or None, got {type(attn_mask).__name__}")
    if attn_mask.dtype not in (torch.bool,) + SUPPORTED_DTYPES:
        raise TypeError(f"attn_mask must be bool or float16/bfloat16/float32, got {attn_mask.dtype}")
    if attn_mask.device != query.device:
        raise ValueError(f"attn_mask must be on {query.device} like query, got {attn_mask.device}")
    attn_mask = plain(attn_mask)
    shape = tuple(attn_mask.shape)
    # (== tests, not `in`: under torch.compile(dynamic=True) `m in (1, s0)` is False
    # for a static m equal to a symbolic s0, where m == s0 is True and guarded)
    if len(shape) > len(target) or any(not (m == 1 or m == t) for m, t in
                                       zip(shape[::-1], target[::-1])):
        raise ValueError(f"attn_mask of shape {shape} is not broadcastable to {target}")
    mask = attn_mask.reshape((1,) * (len(target) - len(shape)) + shape)
    if len(target) == 3:  # (batch, seqlen_q, seqlen_k): one head
        return mask.unsqueeze(1)
    lead = mask.shape[:-3]
    if all(n == 1 for n in lead):
        lead_n = 1
    else:
        mask = mask.expand(target[:-3] + mask.shape[-3:])
        lead_n = batch
    return mask.reshape((lead_n,) + tuple(mask.shape[-3:]))


def check_dense(name: str, t: torch.Tensor) -> None:
    """A nested or sparse tensor raises TypeError naming it (PyTorch's own
    errors on reading its shape say nothing of the argument)."""
    if t.is_nested or t.layout != torch.strided:
        kind = "a nested" if t.is_nested else f"a {t.layout}"
        raise TypeError(f"{name} must be a dense (strided) tensor, got {kind} tensor: pad the sequences, or "
                        "pack them for flash_attn_varlen_func")


def check_qkv(names: Sequence[str], tensors: Sequence[torch.Tensor], layout: str,
              rank: int, head_axis: int) -> None:
    """q, k, v of one layout: `rank`-D, heads on `head_axis`, the head dim last,
    the sequence just before the head axis (flash) or after it (SDPA)."""
    if len(tensors) == 3 and not torch.compiler.is_compiling() and _qkv_ok(*tensors, rank, head_axis):
        return  # the common valid case, checked in one pass; the checks below name any problem
    for name, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        check_dense(name, t)
        if t.dim() != rank:
            raise ValueError(f"{name} must be {rank}-D {layout}, got shape {tuple(t.shape)}")
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} must be float16, bfloat16 or float32, got {t.dtype}")
    (qn, kn, vn), (q, k, v) = names, tensors
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"{qn}, {kn}, {vn} must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"{qn}, {kn}, {vn} must be on one device, got {q.device}, {k.device}, {v.device}")
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"{kn} and {vn} must have the same shape {layout} except the head dim, "
                         f"got {tuple(k.shape)} and {tuple(v.shape)}")
    if rank == 4 and q.shape[0] != k.shape[0]:
        raise ValueError(f"batch sizes differ: {qn}.shape[0]={q.shape[0]}, {kn}.shape[0]={k.shape[0]}")
    d, d_last = q.shape[-1], rank - 1
    if k.shape[-1] != d:
        raise ValueError(f"head dims differ: {qn}.shape[{d_last}]={d}, {kn}.shape[{d_last}]={k.shape[-1]}")
    for name, t in ((qn, q), (vn, v)):
        if t.shape[-1] == 0:
            raise ValueError(f"{name}.shape[{d_last}] (the head dim) must be at least 1, got 0")
        if t.shape[-1] > MAX_HEAD_DIM:
            raise NotImplementedError(f"head dim {t.shape[-1]} (from {name}.shape[{d_last}]) is not "
                                      f"supported; supported: 1..{MAX_HEAD_DIM}")
    h_q, h_kv = q.shape[head_axis], k.shape[head_axis]
    if h_q > MAX_HEADS:
        raise NotImplementedError(f"{qn} has {h_q} heads ({qn}.shape[{head_axis}]); at most {MAX_HEADS} "
                                  "are supported")
    if h_kv == 0 or h_q % h_kv != 0:
        raise ValueError(f"the number of query heads ({qn}.shape[{head_axis}]={h_q}) must be a "
                         f"multiple of the number of key/value heads ({kn}.shape[{head_axis}]={h_kv})")
    for name, t in zip(names, tensors):
        if t.stride(-1) != 1 and t.shape[-1] != 1:
            raise ValueError(f"{name} must have stride 1 in its last dimension, got strides "
                             f"{tuple(t.stride())}; call .contiguous() on it first")


def _qkv_ok(q, k, v, rank: int, head_axis: int) -> bool:
    """True only if every check of check_qkv passes (False: let them run)."""
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
        return False
    if q.is_nested or k.is_nested or v.is_nested:  # (their shape cannot be read)
        return False
    qs, ks, vs = q.shape, k.shape, v.shape
    dt = q.dtype
    if (len(qs) != rank or len(ks) != rank or len(vs) != rank or dt not in SUPPORTED_DTYPES
            or k.dtype is not dt or v.dtype is not dt):
        return False
    dev = q.device
    if k.device != dev or v.device != dev:
        return False
    if ks[:-1] != vs[:-1] or (rank == 4 and qs[0] != ks[0]) or ks[-1] != qs[-1]:
        return False
    d, dv = qs[-1], vs[-1]
    if not (0 < d <= MAX_HEAD_DIM and 0 < dv <= MAX_HEAD_DIM):
        return False
    h_q, h_kv = qs[head_axis], ks[head_axis]
    if h_q > MAX_HEADS or h_kv == 0 or h_q % h_kv != 0:
        return False
    return ((q.stride(-1) == 1 or d == 1) and (k.stride(-1) == 1 or d == 1)
            and (v.stride(-1) == 1 or dv == 1))


MAX_SEQLEN = 2 ** 31 - 1


def check_offsets(name: str, cu, device: Optional[torch.device] = None) -> None:
    """A packed batch's offsets tensor (cu_seqlens): int32, 1-D of length
    batch + 1, and on ``device`` when one is given (no value is read)."""
    if not isinstance(cu, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(cu).__name__}")
    if cu.dtype != torch.int32:
        raise TypeError(f"{name} must be int32, got {cu.dtype}")
    if cu.dim() != 1 or cu.shape[0] < 1:
        raise ValueError(f"{name} must be 1-D of length batch + 1, got shape {tuple(cu.shape)}")
    if device is not None and cu.device != device:
        raise ValueError(f"{name} must be on {device} like q, got {cu.device}")


def offset_values(name: str, cu: torch.Tensor):
    """(offsets, lengths) of a packed batch's offsets tensor read on the host
    (check_inputs=True: a device synchronisation), after checking that they
    start at 0 and do not decrease."""
    offs = cu.tolist()
    lengths = [b - a for a, b in zip(offs[:-1], offs[1:])]
    if offs[0] != 0:
        raise ValueError(f"{name}[0] must be 0, got {offs[0]}")
    if any(n < 0 for n in lengths):
        raise ValueError(f"{name} must be non-decreasing, got {offs}")
    return offs, lengths


def check_cu_seqlens(cu_q, cu_k, max_q, max_k, q: torch.Tensor, k: torch.Tensor,
                     check_inputs: bool, paged: bool = False) -> None:
    """Packed-batch offsets.  What needs the values (monotone offsets, within
    the totals, lengths <= max_seqlen) is checked only with check_inputs=True,
    since reading them from the GPU would synchronise.  paged: k is a page
    pool, whose offsets check_paged_values checks (cu_seqlens_q's only here)."""
    for name, cu in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)):
        check_offsets(name, cu, q.device)
    if cu_q.shape[0] != cu_k.shape[0]:
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k must have the same length (batch + 1), "
                         f"got {cu_q.shape[0]} and {cu_k.shape[0]}")
    for name, m in (("max_seqlen_q", max_q), ("max_seqlen_k", max_k)):
        if isinstance(m, bool) or not isinstance(m, numbers.Integral) and not isinstance(m, torch.SymInt):
            raise TypeError(f"{name} must be an int, got {type(m).__name__}")
        if m < 1:
            raise ValueError(f"{name} must be positive, got {m}")
        if m > MAX_SEQLEN:  # (lengths are 32-bit in the kernels; the grid grows with the bound)
            raise ValueError(f"{name}={m} exceeds the largest supported sequence length {MAX_SEQLEN} "
                             "(2**31 - 1)")
    if check_inputs:
        for name, cu, total, m in (("cu_seqlens_q", cu_q, q.shape[0], max_q),
                                   ("cu_seqlens_k", cu_k, k.shape[0], max_k))[:1 if paged else 2]:
            offs, lengths = offset_values(name, cu)
            if offs[-1] > total:
                raise ValueError(f"{name}[-1]={offs[-1]} must equal the {total} packed rows: it points "
                                 f"past them (the kernels would read and write out of bounds)")
            if offs[-1] != total:
                raise ValueError(f"{name}[-1]={offs[-1]} must equal the {total} packed rows (rows past "
                                 f"it would be neither read nor written: pass {'qk'[name[-1] == 'k']}"
                                 f"[:{offs[-1]}] or the like)")
            if lengths and max(lengths) > m:
                raise ValueError(f"a sequence of {max(lengths)} rows exceeds "
                                 f"max_seqlen_{name[-1]}={m}")


PAGED_LAYOUT = "(num_blocks, page_block_size, nheads_k, headdim)"
PAGE_MULTIPLE = 16  # page sizes: positive multiples of 16 (vLLM's 16 included)


def check_paged_kv(k, v, block_table, q: torch.Tensor, batch: int) -> None:
    """A paged K / V for packed queries: k / v page pools of PAGED_LAYOUT
    (pages of a multiple of 16 keys) and block_table (batch, max_blocks)
    int32 on q's device.  dtypes, heads and head dims are then checked on
    one page row by check_qkv.  No value is read."""
    if not isinstance(block_table, torch.Tensor):
        raise TypeError(f"block_table must be a torch.Tensor (batch, max_blocks_per_seq) int32, got "
                        f"{type(block_table).__name__}")
    if block_table.dtype != torch.int32:
        raise TypeError(f"block_table must be int32, got {block_table.dtype}")
    if block_table.dim() != 2 or block_table.shape[0] != batch:
        raise ValueError(f"block_table must be 2-D (batch, max_blocks_per_seq) with batch = "
                         f"len(cu_seqlens_q) - 1 = {batch} rows, got shape {tuple(block_table.shape)}")
    if block_table.device != q.device:
        raise ValueError(f"block_table must be on {q.device} like q, got {block_table.device}")
    for name, t in (("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"with block_table, {name} must be a 4-D page pool {PAGED_LAYOUT}, got shape "
                             f"{tuple(t.shape)}")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k and v must be page pools of one shape {PAGED_LAYOUT} except the head dim, got "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    page = k.shape[1]
    if page < 1 or page % PAGE_MULTIPLE:
        raise ValueError(f"the page size (k.shape[1], page_block_size) must be a positive multiple of "
                         f"{PAGE_MULTIPLE}, got {page}")


def check_paged_values(cu_k: torch.Tensor, max_k: int, block_table: torch.Tensor, num_blocks: int,
                       page: int) -> None:
    """check_inputs=True for a paged K / V (reads the values: a device
    synchronisation): cu_seqlens_k starts at 0 and does not decrease, no
    sequence exceeds max_seqlen_k or its block-table row, and the pages the
    sequences use are within the pool."""
    _, lengths = offset_values("cu_seqlens_k", cu_k)
    if lengths and max(lengths) > max_k:
        raise ValueError(f"a sequence of {max(lengths)} keys exceeds max_seqlen_k={max_k}")
    capacity = block_table.shape[1] * page
    for b, n in enumerate(lengths):
        if n > capacity:
            raise ValueError(f"sequence {b} has {n} keys but its block_table row holds "
                             f"{block_table.shape[1]} pages of {page} keys ({capacity})")
        used = block_table[b, :(n + page - 1) // page]
        if used.numel() and (int(used.min()) < 0 or int(used.max()) >= num_blocks):
            raise ValueError(f"block_table[{b}] names pages {used.tolist()} outside the pool's {num_blocks} "
                             f"pages (k.shape[0])")


_ANY_AUTOCAST = getattr(torch._C, "_is_any_autocast_enabled", None)


def autocast_active() -> bool:
    """Whether autocast may be on for some device (True when PyTorch cannot say in one call)."""
    return _ANY_AUTOCAST is None or _ANY_AUTOCAST()


def plain(t: torch.Tensor) -> torch.Tensor:
    """t without PyTorch's lazy negation bit (torch._neg_view, or the imaginary
    part of a conjugated complex tensor): the kernels read raw memory, so a
    tensor whose bit is set is materialised first, as PyTorch's own ops do.
    (Under torch.compile the custom ops receive tensors through the
    dispatcher, which resolves the bit itself; dynamo cannot trace is_neg.)"""
    if torch.compiler.is_compiling():
        return t
    return t.resolve_neg() if t.is_neg() else t


def autocast_inputs(*tensors: Optional[torch.Tensor]):
    """Under torch.autocast, float inputs are cast to the autocast dtype, as SDPA
    does; every tensor comes back without a lazy negation bit (plain)."""
    if not torch.compiler.is_compiling() and any(isinstance(t, torch.Tensor) and t.is_neg() for t in tensors):
        tensors = tuple(plain(t) if isinstance(t, torch.Tensor) else t for t in tensors)
    if _ANY_AUTOCAST is not None and not _ANY_AUTOCAST() and not torch.compiler.is_compiling():
        return tensors  # no autocast anywhere (one call instead of a per-device query)
    t0 = tensors[0]
    if not isinstance(t0, torch.Tensor):
        return tensors
    dev = t0.device.type
    if dev not in ("cuda", "cpu") or not torch.is_autocast_enabled(dev):
        return tensors
    dtype = torch.get_autocast_dtype(dev)
    return tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                 for t in tensors)
