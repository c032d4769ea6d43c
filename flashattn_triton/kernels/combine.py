"""Merging partial attentions by their log-sum-exp.

Attention over a key set split into parts A and B is recovered exactly from
the parts' outputs and LSEs (natural log):
    lse = log(exp(lse_a) + exp(lse_b)),   out = exp(lse_a - lse) out_a + exp(lse_b - lse) out_b.
A part that saw no key has lse = -inf and weight 0; if both saw none the
result is out = 0, lse = -inf.  Split-KV decoding and ring attention both
use this rule: `merge_attention_states` for two parts in PyTorch,
`combine_partials` / `combine_attention_states` for any number of parts in
one Triton kernel.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._validate import plain
from . import fastlaunch
from .launch import COMPILE_OPTIONS, INTERPRET, cdiv, head_dim_pad, next_power_of_2

try:  # programmatic dependent launch (combine_partials' use_pdl); absent from some Triton releases
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # pragma: no cover - depends on the installed Triton
    gdc_launch_dependents = gdc_wait = None


def merge_attention_states(out_a: torch.Tensor, lse_a: torch.Tensor,
                           out_b: torch.Tensor, lse_b: torch.Tensor):
    """Merge two partial results.

    out_*: (..., N, H, d) in flash layout; lse_*: (..., H, N) float32 natural log.
    Returns (out float32, lse float32) of the same shapes."""
    lse = torch.logaddexp(lse_a, lse_b)
    # Rows with lse = -inf on both sides: use 0 as the reference so weights are exp(-inf) = 0.
    ref = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    w_a = torch.exp(lse_a - ref).transpose(-1, -2).unsqueeze(-1)  # (..., N, H, 1)
    w_b = torch.exp(lse_b - ref).transpose(-1, -2).unsqueeze(-1)
    out = out_a.float() * w_a + out_b.float() * w_b
    return out, lse


# ---------------------------------------------------------------------------
# Many partials at once: a Triton kernel (split-KV decoding, ring attention)
# ---------------------------------------------------------------------------
#
# For S parts with LSEs lse_s (natural log) the exact merge is
#     lse = log sum_s exp(lse_s),   out = sum_s exp(lse_s - lse) out_s.
# The kernel folds the parts in one pass with a running maximum (base 2, as
# in the attention kernels), so any S works and nothing overflows.


@triton.jit
def cast_rtne(x, DTYPE: tl.constexpr, INTERPRET: tl.constexpr):
    """float32 -> DTYPE, rounded to nearest even.  GPUs round; Triton's
    interpreter truncates float32 -> bfloat16, so interpreted runs first round
    the float32 bits to the nearest bfloat16 (then truncation is exact)."""
    if INTERPRET:
        if DTYPE == tl.bfloat16:
            bits = x.to(tl.uint32, bitcast=True)
            bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
            x = bits.to(tl.float32, bitcast=True)
    return x.to(DTYPE)


@triton.jit
def merge_init(SINKS, head, row_ok, HAS_SINKS: tl.constexpr, ROWS: tl.constexpr, HEAD_DIM_PAD: tl.constexpr):
    """The running (m, l, acc) of a merge before any part, m in base 2: (-inf,
    0, 0), or with a sink (a key whose value is 0) folded in first:
    (sink * log2(e), 1, 0)."""
    if HAS_SINKS:
        m = tl.load(SINKS + head, mask=row_ok, other=0.0).to(tl.float32) * 1.4426950408889634
        l = tl.full([ROWS], 1.0, dtype=tl.float32)
    else:
        m = tl.full([ROWS], float("-inf"), dtype=tl.float32)
        l = tl.zeros([ROWS], dtype=tl.float32)
    return m, l, tl.zeros([ROWS, HEAD_DIM_PAD], dtype=tl.float32)


@triton.jit
def merge_part(m, l, acc, lse_s, out_s):
    """Fold one part (its LSE in base 2 and its normalised output) into the
    running (m, l, acc): acc and l are rescaled to the new maximum."""
    m_new = tl.maximum(m, lse_s)
    # Parts that saw no key have lse = -inf: keep their weight exactly 0.
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.math.exp2(m - m_ref)
    w = tl.math.exp2(lse_s - m_ref)
    acc = acc * alpha[:, None] + w[:, None] * out_s
    return m_new, l * alpha + w, acc


# Two ways through the parts, compile-time switch PARTS:
# * PARTS = 0, the running merge: one part at a time with a running maximum,
#   so each part's rescaling waits for the one before (few, wide programs);
# * PARTS > 0, the gathered merge (split-KV decoding's second kernel): the
#   parts' weights come from their LSEs alone,
#       m = max_s lse_s,   l = sum_s 2^(lse_s - m),   out = sum_s 2^(lse_s - m) out_s / l
#   (base 2; a sink is one more LSE with output 0), so a program issues the
#   loads of PARTS parts at once and waits for one memory round trip, not one
#   per part; past PARTS parts it makes two passes, the first over the LSEs
#   for m.  At batch-1 decoding the running merge's chain was the tail.


@triton.jit
def _part_lses(l_rows, row_ok, s, stride_ls, NUM_PARTS, LSE_BASE2: tl.constexpr):
    """The (PARTS, BLOCK_M) LSEs of parts s, in base 2 (-inf past NUM_PARTS)."""
    lse = tl.load(l_rows[None, :] + s[:, None] * stride_ls, mask=(s < NUM_PARTS)[:, None] & row_ok[None, :],
                  other=float("-inf")).to(tl.float32)
    if not LSE_BASE2:
        lse = lse * 1.4426950408889634
    return lse


@triton.jit
def _parts_at(l_ptrs, p_ptrs, row_ok, mask, s, stride_ls, stride_ps, NUM_PARTS, LSE_BASE2: tl.constexpr):
    """Parts s of a tile, in one load each: their (PARTS, BLOCK_M) LSEs in base 2
    and (PARTS, BLOCK_M, BLOCK_D) outputs (-inf and 0 past NUM_PARTS)."""
    part = tl.load(p_ptrs[None, :, :] + s[:, None, None] * stride_ps,
                   mask=(s < NUM_PARTS)[:, None, None] & mask[None, :, :], other=0.0).to(tl.float32)
    return _part_lses(l_ptrs, row_ok, s, stride_ls, NUM_PARTS, LSE_BASE2), part


@triton.jit
def _fold_parts(l, acc, lse, part, m):
    """(l, acc) plus the parts' weights 2^(lse - m) and weighted outputs, m the
    rows' final maximum (parts that saw no key: 2^-inf = 0)."""
    w = tl.math.exp2(lse - tl.where(m == float("-inf"), 0.0, m)[None, :])
    return l + tl.sum(w, 0), acc + tl.sum(w[:, :, None] * part, 0)


@triton.jit(do_not_specialize=["H", "N", "NUM_PARTS"])
def _combine_fwd(
    # pointers
    O_PART, LSE_PART, O, LSE, SINKS,
    # strides
    stride_ps, stride_pz, stride_ph, stride_pm, stride_pk,
    stride_ls, stride_lz, stride_lh, stride_lm,
    stride_oz, stride_oh, stride_om, stride_ok,
    stride_rz, stride_rh, stride_rm,
    # shapes
    H, N, NUM_PARTS,
    # meta-parameters
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, HAS_SINKS: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, LSE_BASE2: tl.constexpr = False,
    PARTS: tl.constexpr = 0, ONE_LOAD: tl.constexpr = False, USE_PDL: tl.constexpr = False,
):
    """Rows r of one batch entry z are (head r // N, position r % N); a grid
    of (batch entries x row tiles, column blocks of BLOCK_D) (no grid-axis
    cap on the batch).  PARTS: 0 for the running merge (then one column
    block), else the gathered merge's parts per load; ONE_LOAD: NUM_PARTS <=
    PARTS.  HAS_SINKS: SINKS (H,) float32 adds logit SINKS[h] without a value
    to the merged softmax of head h (an extra part with lse = sink and output 0).
    LSE_BASE2: LSE_PART and LSE hold base-2 LSEs (the attention kernels'
    lse2 = lse * log2(e)) instead of natural ones; SINKS stays natural.
    USE_PDL (launched with launch_pdl=True behind the kernel that writes the
    parts): the program may start while that kernel runs and reads memory
    only after griddepcontrol.wait.  O may be O_PART itself (one part, merged
    in place, one column block): a program reads its rows' parts before it
    writes them, and no other program touches them."""
    if USE_PDL:
        gdc_launch_dependents()
    n_tiles = (H * N + BLOCK_M - 1) // BLOCK_M
    pid = tl.program_id(0)
    pid_d = tl.program_id(1)
    z = (pid // n_tiles).to(tl.int64)
    rows = (pid % n_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < H * N
    h = (rows // N).to(tl.int64)
    m = (rows % N).to(tl.int64)
    if PARTS == 0:  # one column block (the running merge's build as it was before the gathered one)
        offs_d = tl.arange(0, BLOCK_D)
    else:
        offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = row_ok[:, None] & (offs_d[None, :] < HEAD_DIM)
    p_ptrs = (O_PART + z * stride_pz + h[:, None] * stride_ph + m[:, None] * stride_pm
              + offs_d[None, :] * stride_pk)
    l_ptrs = LSE_PART + z * stride_lz + h * stride_lh + m * stride_lm
    if USE_PDL:
        gdc_wait()

    m_i, l_i, acc = merge_init(SINKS, h, row_ok, HAS_SINKS, BLOCK_M, BLOCK_D)
    if PARTS == 0:
        for s in range(0, NUM_PARTS):
            lse_s = tl.load(l_ptrs, mask=row_ok, other=float("-inf")).to(tl.float32)
            if not LSE_BASE2:
                lse_s = lse_s * 1.4426950408889634
            out_s = tl.load(p_ptrs, mask=mask, other=0.0).to(tl.float32)
            m_i, l_i, acc = merge_part(m_i, l_i, acc, lse_s, out_s)
            p_ptrs += stride_ps
            l_ptrs += stride_ls
    else:
        offs_s = tl.arange(0, PARTS)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # (the sink's term last, at the final m)
        if ONE_LOAD:
            lse, part = _parts_at(l_ptrs, p_ptrs, row_ok, mask, offs_s, stride_ls, stride_ps, NUM_PARTS, LSE_BASE2)
            m_i = tl.maximum(m_i, tl.max(lse, 0))
            l_i, acc = _fold_parts(l_i, acc, lse, part, m_i)
        else:
            for s0 in range(0, NUM_PARTS, PARTS):
                m_i = tl.maximum(m_i, tl.max(_part_lses(l_ptrs, row_ok, s0 + offs_s, stride_ls, NUM_PARTS,
                                                        LSE_BASE2), 0))
            for s0 in range(0, NUM_PARTS, PARTS):
                lse, part = _parts_at(l_ptrs, p_ptrs, row_ok, mask, s0 + offs_s, stride_ls, stride_ps, NUM_PARTS,
                                      LSE_BASE2)
                l_i, acc = _fold_parts(l_i, acc, lse, part, m_i)
        if HAS_SINKS:
            sink = tl.load(SINKS + h, mask=row_ok, other=0.0).to(tl.float32) * 1.4426950408889634
            l_i += tl.math.exp2(sink - tl.where(m_i == float("-inf"), 0.0, m_i))

    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc / l_safe[:, None]
    o_ptrs = O + z * stride_oz + h[:, None] * stride_oh + m[:, None] * stride_om + offs_d[None, :] * stride_ok
    tl.store(o_ptrs, cast_rtne(out, O.dtype.element_ty, INTERPRET), mask=mask)
    lse_out = tl.where(empty, float("-inf"), m_i + tl.math.log2(l_safe))
    if not LSE_BASE2:
        lse_out = lse_out * 0.6931471805599453
    lse_ptrs = LSE + z * stride_rz + h * stride_rh + m * stride_rm
    if PARTS == 0:
        tl.store(lse_ptrs, lse_out, mask=row_ok)
    elif pid_d == 0:  # the first column block writes the rows' LSEs
        tl.store(lse_ptrs, lse_out, mask=row_ok)


# Launched by its callers directly (not through a Launcher): the launch fast path
# (a no-op under the interpreter), so that a recording (a call plan) replays it.
fastlaunch.install(_combine_fwd)

# The gathered merge's tiles on the GPU: 4 rows x 32 columns per program, up to
# 16 parts per load (2048 float32 values, 32 per thread at 2 warps).
GATHER_ROWS, GATHER_COLS, GATHER_PARTS = 4, 32, 16


def combine_partials(out_parts: torch.Tensor, lse_parts: torch.Tensor,
                     out: torch.Tensor, lse: torch.Tensor, sinks: torch.Tensor = None,
                     base2: bool = False, rows_per_program: int = 0, gather: bool = False,
                     use_pdl: bool = False) -> None:
    """Merge S partial attentions with the Triton kernel, writing in place.

    out_parts: (S, Z, H, M, d) view (any strides, e.g. float32 partials);
    lse_parts: (S, Z, H, M) float32, natural log, -inf for a part that saw no key;
    out: (Z, H, M, d) view, any float dtype; lse: (Z, H, M) float32 view;
    sinks: None, or (H,) float32 with stride 1: head h's merged softmax gets
    the extra logit sinks[h] in its denominator (out * sigmoid(lse - sink),
    LSE logaddexp(lse, sink); rows no part saw: out 0, LSE = sink);
    base2: lse_parts and lse in base 2 (lse * log2(e), as the attention
    kernels write them; sinks stay natural).  out / lse may be the one
    part's own buffers (S = 1: a sink folded into a finished attention in
    place, ops.py; not with gather).  rows_per_program: rows per program on
    the GPU (a power of two; 0: 4, for many parts).  gather: the gathered
    merge (GATHER_ROWS x GATHER_COLS tiles, GATHER_PARTS parts per load),
    for split-KV decoding's second kernel; use_pdl: launched with
    programmatic dependent launch behind the kernel that wrote the parts
    (sm_90 or later, decode.pdl_supported).  CUDA tensors, or CPU tensors
    under Triton's interpreter."""
    n_parts, z, h, m, d = out_parts.shape
    if out.numel() == 0 and lse.numel() == 0:
        return
    d_pad = head_dim_pad(d)
    # Few rows per program on the GPU (many programs share the reads); more
    # under the interpreter, where each program costs the same Python overhead
    # (and 4 parts per gathered load, so that its tests see the two passes).
    block_m = min(32 if INTERPRET else (rows_per_program or (GATHER_ROWS if gather else 4)),
                  next_power_of_2(max(h * m, 1)))
    block_d = min(GATHER_COLS, d_pad) if gather else d_pad
    parts = min(next_power_of_2(max(n_parts, 1)), 4 if INTERPRET else GATHER_PARTS) if gather else 0
    grid = (cdiv(h * m, block_m) * z, cdiv(d, block_d))
    _combine_fwd[grid](
        out_parts, lse_parts, out, lse, sinks if sinks is not None else lse_parts,
        *out_parts.stride(), *lse_parts.stride(), *out.stride(), *lse.stride(),
        h, m, n_parts,
        HEAD_DIM=d, BLOCK_D=block_d, HAS_SINKS=sinks is not None, INTERPRET=INTERPRET,
        BLOCK_M=block_m, LSE_BASE2=base2, PARTS=parts, ONE_LOAD=0 < n_parts <= parts, USE_PDL=use_pdl,
        num_warps=2 if gather or block_d * block_m < 1024 else 4, **COMPILE_OPTIONS,
        **({"launch_pdl": True} if use_pdl else {}),
    )


def combine_attention_states(out_parts: torch.Tensor, lse_parts: torch.Tensor,
                             out_dtype: torch.dtype = None):
    """Exact merge of S partial attentions over disjoint key sets.

    Arguments:
        out_parts: (S, batch_size, seqlen, nheads, headdim), flash layout, any float dtype.
        lse_parts: (S, batch_size, nheads, seqlen) float32, natural log; -inf marks
            a part that saw no key (its weight is 0).
        out_dtype: dtype of the merged output (default: that of out_parts).
    Returns:
        out: (batch_size, seqlen, nheads, headdim); lse: (batch_size, nheads, seqlen)
        float32.  Rows that no part saw get out = 0, lse = -inf.
    Runs the Triton kernel on CUDA (and on CPU under Triton's interpreter),
    else the same arithmetic in PyTorch."""
    for name, t in (("out_parts", out_parts), ("lse_parts", lse_parts)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not out_parts.is_floating_point():
        raise TypeError(f"out_parts must be a floating-point tensor, got {out_parts.dtype}")
    if lse_parts.dtype != torch.float32:
        raise TypeError(f"lse_parts must be float32 (the LSEs the attention functions return), "
                        f"got {lse_parts.dtype}")
    if out_parts.device != lse_parts.device:
        raise ValueError(f"out_parts and lse_parts must be on one device, got {out_parts.device} "
                         f"and {lse_parts.device}")
    if out_parts.dim() != 5 or lse_parts.dim() != 4:
        raise ValueError(f"out_parts must be 5-D (S, B, N, H, d) and lse_parts 4-D (S, B, H, N), got "
                         f"{tuple(out_parts.shape)} and {tuple(lse_parts.shape)}")
    s, b, n, h, d = out_parts.shape
    if tuple(lse_parts.shape) != (s, b, h, n):
        raise ValueError(f"lse_parts must have shape (S, B, H, N) = {(s, b, h, n)}, "
                         f"got {tuple(lse_parts.shape)}")
    if out_dtype is not None and out_dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"out_dtype must be None or torch.float16 / bfloat16 / float32, got {out_dtype!r}")
    out_dtype = out_dtype or out_parts.dtype
    out_parts, lse_parts = plain(out_parts), plain(lse_parts)
    out = fastlaunch.empty((b, n, h, d), out_dtype, out_parts.device)
    lse = fastlaunch.empty((b, h, n), torch.float32, out_parts.device)
    if s == 0:
        return out.zero_(), lse.fill_(float("-inf"))
    if out_parts.is_cuda or (INTERPRET and out_parts.device.type == "cpu"):
        combine_partials(out_parts.transpose(2, 3), lse_parts, out.transpose(1, 2), lse)
        return out, lse
    lse_f = lse_parts.float()
    lse.copy_(torch.logsumexp(lse_f, dim=0))
    ref = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    w = torch.exp(lse_f - ref).transpose(-1, -2).unsqueeze(-1)  # (S, B, N, H, 1)
    out.copy_((out_parts.float() * w).sum(0))
    return out, lse
