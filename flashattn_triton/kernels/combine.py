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

try:  # programmatic dependent launch (gather_partials' use_pdl); absent from some Triton releases
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
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, HAS_SINKS: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, LSE_BASE2: tl.constexpr = False,
):
    """Rows r of one batch entry z are (head r // N, position r % N); a 1-D
    grid of batch entries x row tiles (no grid-axis cap on the batch).
    HAS_SINKS: SINKS (H,) float32 adds logit SINKS[h] without a value to the
    merged softmax of head h (an extra part with lse = sink and output 0).
    LSE_BASE2: LSE_PART and LSE hold base-2 LSEs (the attention kernels'
    lse2 = lse * log2(e)) instead of natural ones; SINKS stays natural.
    O may be O_PART itself (one part, merged in place): a program reads its
    rows' parts before it writes them, and no other program touches them."""
    n_tiles = (H * N + BLOCK_M - 1) // BLOCK_M
    pid = tl.program_id(0)
    z = (pid // n_tiles).to(tl.int64)
    rows = (pid % n_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < H * N
    h = (rows // N).to(tl.int64)
    m = (rows % N).to(tl.int64)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask = row_ok[:, None] & (offs_d[None, :] < HEAD_DIM)
    p_ptrs = (O_PART + z * stride_pz + h[:, None] * stride_ph + m[:, None] * stride_pm
              + offs_d[None, :] * stride_pk)
    l_ptrs = LSE_PART + z * stride_lz + h * stride_lh + m * stride_lm

    m_i, l_i, acc = merge_init(SINKS, h, row_ok, HAS_SINKS, BLOCK_M, HEAD_DIM_PAD)
    for s in range(0, NUM_PARTS):
        lse_s = tl.load(l_ptrs, mask=row_ok, other=float("-inf")).to(tl.float32)
        if not LSE_BASE2:
            lse_s = lse_s * 1.4426950408889634
        out_s = tl.load(p_ptrs, mask=mask, other=0.0).to(tl.float32)
        m_i, l_i, acc = merge_part(m_i, l_i, acc, lse_s, out_s)
        p_ptrs += stride_ps
        l_ptrs += stride_ls

    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse = tl.where(empty, float("-inf"), m_i + tl.math.log2(l_safe))
    if not LSE_BASE2:
        lse = lse * 0.6931471805599453
    o_ptrs = O + z * stride_oz + h[:, None] * stride_oh + m[:, None] * stride_om + offs_d[None, :] * stride_ok
    tl.store(o_ptrs, cast_rtne(out, O.dtype.element_ty, INTERPRET), mask=mask)
    tl.store(LSE + z * stride_rz + h * stride_rh + m * stride_rm, lse, mask=row_ok)


# Launched by its callers directly (not through a Launcher): the launch fast path
# (a no-op under the interpreter), so that a recording (a call plan) replays it.
fastlaunch.install(_combine_fwd)


def combine_partials(out_parts: torch.Tensor, lse_parts: torch.Tensor,
                     out: torch.Tensor, lse: torch.Tensor, sinks: torch.Tensor = None,
                     base2: bool = False, rows_per_program: int = 0) -> None:
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
    place, ops.py).  rows_per_program: rows per program on the GPU (a power
    of two; 0: 4, for many parts).  CUDA tensors, or CPU tensors under
    Triton's interpreter."""
    n_parts, z, h, m, d = out_parts.shape
    if out.numel() == 0 and lse.numel() == 0:
        return
    # Few rows per program on the GPU (many programs share the reads); more
    # under the interpreter, where each program costs the same Python overhead.
    block_m = min(32 if INTERPRET else (rows_per_program or 4), next_power_of_2(max(h * m, 1)))
    grid = (cdiv(h * m, block_m) * z,)
    _combine_fwd[grid](
        out_parts, lse_parts, out, lse, sinks if sinks is not None else lse_parts,
        *out_parts.stride(), *lse_parts.stride(), *out.stride(), *lse.stride(),
        h, m, n_parts,
        HEAD_DIM=d, HEAD_DIM_PAD=head_dim_pad(d), HAS_SINKS=sinks is not None, INTERPRET=INTERPRET,
        BLOCK_M=block_m, LSE_BASE2=base2,
        num_warps=4 if head_dim_pad(d) * block_m >= 1024 else 2, **COMPILE_OPTIONS,
    )


# ---------------------------------------------------------------------------
# All parts at once, launched behind the kernel that wrote them (split-KV decoding)
# ---------------------------------------------------------------------------
#
# _combine_fwd's running maximum makes each part's rescaling wait for the one
# before it, and its few programs wait for one memory round trip per part: at
# batch 1 that chain is the decode's tail.  Here the parts' weights come from
# their LSEs alone, so every load of a program is issued at once:
#     m = max_s lse_s,   l = sum_s 2^(lse_s - m),   out = sum_s 2^(lse_s - m) out_s / l
# (base 2; a sink is one more LSE with output 0).  Each program takes BLOCK_M
# rows and BLOCK_D columns; with more parts than PARTS it makes two passes, the
# first over the LSEs for m.


@triton.jit
def _part_weights(l_rows, row_ok, s, stride_ls, NUM_PARTS, LSE_BASE2: tl.constexpr):
    """The (PARTS, BLOCK_M) LSEs of parts s, in base 2 (-inf past NUM_PARTS)."""
    lse = tl.load(l_rows[None, :] + s[:, None] * stride_ls, mask=(s < NUM_PARTS)[:, None] & row_ok[None, :],
                  other=float("-inf")).to(tl.float32)
    if not LSE_BASE2:
        lse = lse * 1.4426950408889634
    return lse


@triton.jit(do_not_specialize=["H", "N", "NUM_PARTS"])
def _gather_combine(
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
    HEAD_DIM: tl.constexpr, HAS_SINKS: tl.constexpr, INTERPRET: tl.constexpr, LSE_BASE2: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, PARTS: tl.constexpr, ONE_LOAD: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """_combine_fwd's merge (same arguments, rows r of batch entry z = head
    r // N, position r % N) over a 2-D grid: (batch entries x row tiles,
    column blocks of BLOCK_D).  ONE_LOAD: NUM_PARTS <= PARTS, every part in
    one load.  USE_PDL (launched with launch_pdl=True behind the kernel that
    writes the parts): the program may start while that kernel runs and
    reads memory only after griddepcontrol.wait."""
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
    offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_s = tl.arange(0, PARTS)
    l_rows = LSE_PART + z * stride_lz + h * stride_lh + m * stride_lm
    p_tile = (O_PART + z * stride_pz + h[None, :, None] * stride_ph + m[None, :, None] * stride_pm
              + offs_d[None, None, :] * stride_pk)
    tile_ok = row_ok[None, :, None] & (offs_d < HEAD_DIM)[None, None, :]
    if USE_PDL:
        gdc_wait()

    if HAS_SINKS:  # base 2, as the parts' LSEs
        sink = tl.load(SINKS + h, mask=row_ok, other=0.0).to(tl.float32) * 1.4426950408889634
        m_i = sink
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    if ONE_LOAD:
        lse = _part_weights(l_rows, row_ok, offs_s, stride_ls, NUM_PARTS, LSE_BASE2)
        part = tl.load(p_tile + offs_s[:, None, None] * stride_ps,
                       mask=(offs_s < NUM_PARTS)[:, None, None] & tile_ok, other=0.0).to(tl.float32)
        m_i = tl.maximum(m_i, tl.max(lse, 0))
        m_ref = tl.where(m_i == float("-inf"), 0.0, m_i)
        w = tl.math.exp2(lse - m_ref[None, :])  # parts that saw no key: 2^-inf = 0
        l_i = tl.sum(w, 0)
        acc = tl.sum(w[:, :, None] * part, 0)
    else:
        for s0 in range(0, NUM_PARTS, PARTS):
            m_i = tl.maximum(m_i, tl.max(_part_weights(l_rows, row_ok, s0 + offs_s, stride_ls, NUM_PARTS,
                                                       LSE_BASE2), 0))
        m_ref = tl.where(m_i == float("-inf"), 0.0, m_i)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        for s0 in range(0, NUM_PARTS, PARTS):
            s = s0 + offs_s
            w = tl.math.exp2(_part_weights(l_rows, row_ok, s, stride_ls, NUM_PARTS, LSE_BASE2) - m_ref[None, :])
            part = tl.load(p_tile + s[:, None, None] * stride_ps, mask=(s < NUM_PARTS)[:, None, None] & tile_ok,
                           other=0.0).to(tl.float32)
            l_i += tl.sum(w, 0)
            acc += tl.sum(w[:, :, None] * part, 0)
    if HAS_SINKS:
        l_i += tl.math.exp2(sink - m_ref)

    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    o_ptrs = O + z * stride_oz + h[:, None] * stride_oh + m[:, None] * stride_om + offs_d[None, :] * stride_ok
    tl.store(o_ptrs, cast_rtne(acc / l_safe[:, None], O.dtype.element_ty, INTERPRET),
             mask=row_ok[:, None] & (offs_d < HEAD_DIM)[None, :])
    if pid_d == 0:
        lse_out = tl.where(empty, float("-inf"), m_ref + tl.math.log2(l_safe))
        if not LSE_BASE2:
            lse_out = lse_out * 0.6931471805599453
        tl.store(LSE + z * stride_rz + h * stride_rh + m * stride_rm, lse_out, mask=row_ok)


fastlaunch.install(_gather_combine)

# gather_partials' tiles on the GPU: 4 rows x 32 columns per program, up to 16
# parts per load (2048 float32 values, 32 per thread at 2 warps).
GATHER_ROWS, GATHER_COLS, GATHER_PARTS = 4, 32, 16


def gather_partials(out_parts: torch.Tensor, lse_parts: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                    sinks: torch.Tensor = None, base2: bool = False, use_pdl: bool = False) -> None:
    """combine_partials' merge (same arguments) by _gather_combine: every part
    of a program's tile in one load (two passes past GATHER_PARTS parts), many
    small programs.  use_pdl: launched with programmatic dependent launch
    behind the kernel that wrote the parts (sm_90 or later; decode.pdl_supported)."""
    n_parts, z, h, m, d = out_parts.shape
    if out.numel() == 0 and lse.numel() == 0:
        return
    d_pad = head_dim_pad(d)
    # Under the interpreter every program costs the same Python overhead: few, large row tiles
    # (and 4 parts per load, so that its tests see the two-pass merge).
    block_m = min(32 if INTERPRET else GATHER_ROWS, next_power_of_2(max(h * m, 1)))
    block_d = min(GATHER_COLS, d_pad)  # (the interpreter too: its tests see the column blocks)
    parts = min(next_power_of_2(max(n_parts, 1)), 4 if INTERPRET else GATHER_PARTS)
    grid = (cdiv(h * m, block_m) * z, cdiv(d, block_d))
    _gather_combine[grid](
        out_parts, lse_parts, out, lse, sinks if sinks is not None else lse_parts,
        *out_parts.stride(), *lse_parts.stride(), *out.stride(), *lse.stride(),
        h, m, n_parts,
        HEAD_DIM=d, HAS_SINKS=sinks is not None, INTERPRET=INTERPRET, LSE_BASE2=base2,
        BLOCK_M=block_m, BLOCK_D=block_d, PARTS=parts, ONE_LOAD=n_parts <= parts, USE_PDL=use_pdl,
        num_warps=2, **COMPILE_OPTIONS, **({"launch_pdl": True} if use_pdl else {}),
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
