"""What happens to a tile of scores before the softmax, written once for the
forward, dK/dV and dQ loops.

Scores arrive as raw products qk = q . k and leave in base 2,
s2 = s * log2(e), so that the softmax uses exp2.  In natural units the
modifications are applied in this order (flash-attn's order):

    s = scale * qk
    s = softcap * tanh(s / softcap)             HAS_SOFTCAP
    s = s - slope_h * |i + shift - j|           HAS_ALIBI
    s = s + bias_ij   or   -inf where !mask_ij  HAS_MASK (float / MASK_BOOL)
    s = -inf outside the causal / window band   MASKED tiles only
        (and outside the row's chunk: MASK_CHUNK)

Each switch is a compile-time constant: with every switch off the tile costs
one multiply, as before the variants existed.  The backward recomputes the
same s2 bit for bit (same helper, same order) and needs one more factor for
the softcap: ds/d(scale * qk) = 1 - tanh^2, returned here as ``t``.

Dropout (``dropout_keep``) acts on probabilities, not scores.  One Philox
4x32 call (``tl.randint4x`` with PHILOX_ROUNDS rounds, 10 by default) gives
4 words = 8 16-bit halves, one keep decision each: score (b, h, i, j) reads
half j0 of word 2 * i3 + j3 (xn: bit n of index x) of the call on counter
    philox_offset + ((b * Hq + h) * rng_rows + row0 + (i & ~8)) * rng_cols + (j & ~9)
(b = 0 and row0 = the sequence's first packed row for varlen batches), and
is kept iff that half is >= t = dropout_threshold(p) = round(p * 2^16): the
keep probability is 1 - t / 2^16 and kept scores are scaled by its inverse
2^16 / (2^16 - t) (reference.dropout_scale), so the output stays unbiased.
The eight scores of a call, rows {i, i ^ 8} x keys {j, j ^ 1, j ^ 8, j ^ 9},
sit in the registers of one thread of an NVIDIA MMA accumulator in queries x
keys tiles, so the forward and dQ tiles need no layout conversion; in keys x
queries (dK/dV) tiles key bit 0 lies across lanes, and the call's decisions
travel packed in one integer through one conversion.  Rows keep the stride
rng_cols (the key count), and i & ~8 <= i, j & ~9 <= j: a batch entry spans
Hq * rng_rows * rng_cols counters, as KernelMods.chunk assumes.
Tiles start at multiples of 16 rows and 16 keys, so a group never straddles
two tiles.  reference.dropout_keep reproduces the rule in PyTorch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

from ..reference import DROPOUT_ROUNDS, dropout_scale, dropout_threshold
from .tiles import chunk_start

LOG2E = 1.4426950408889634
# Philox rounds of the dropout draws (reference.DROPOUT_ROUNDS: 10 unless
# FLASHATTN_TRITON_DROPOUT_ROUNDS says otherwise); a global constexpr is part
# of each kernel's compile key.
PHILOX_ROUNDS: tl.constexpr = tl.constexpr(DROPOUT_ROUNDS)


@triton.jit
def visible(rows, cols, n_k, shift, window_left, window_right, chunk,
            MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr, MASK_CHUNK: tl.constexpr):
    """Key cols visible to query rows (rule in kernels/tiles.py).  rows and
    cols are broadcastable index tensors: rows[:, None] and cols[None, :] for
    a score tile, rows[None, :] and cols[:, None] for a transposed one."""
    keep = cols < n_k
    if MASK_RIGHT:
        keep = keep & (cols <= rows + (shift + window_right))
    if MASK_LEFT:
        keep = keep & (cols >= rows + (shift - window_left))
    if MASK_CHUNK:
        # j // C == p // C (floor) <=> first <= j < first + C with first the
        # start of p's chunk: one division per row instead of one per score;
        # `cols - first < chunk` does not form first + C (no int32 overflow).
        # Rows with p < 0 (before key 0) see nothing: the test p >= 0 removes
        # them, and p is clamped at 0 for the division, which so only ever
        # divides non-negative numbers (Triton's `//` truncates toward zero
        # on the GPU: not the floor for negative ones).
        pos = rows + shift
        first = chunk_start(tl.maximum(pos, 0), chunk)
        keep = keep & (pos >= 0) & (cols >= first) & (cols - first < chunk)
    return keep


@triton.jit
def mask_scores(s, rows, cols, n_k, shift, window_left, window_right, chunk,
                MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr, MASK_CHUNK: tl.constexpr):
    """s with invisible entries set to -inf (exp2 gives exactly 0 there);
    rows, cols broadcastable as in visible()."""
    keep = visible(rows, cols, n_k, shift, window_left, window_right, chunk, MASK_LEFT, MASK_RIGHT, MASK_CHUNK)
    return tl.where(keep, s, float("-inf"))


@triton.jit
def tanh(x, FAST: tl.constexpr):
    """tanh in float32.

    FAST (NVIDIA, 16-bit inputs): the hardware approximation (relative error
    ~2^-11, the precision of the inputs).  Otherwise an accurate version
    built from exp2 (Triton's interpreter has no tanh): an odd Taylor
    polynomial for |x| < 0.4, where 1 - 2 / (e^2x + 1) would cancel, and that
    formula elsewhere (it tends to +-1 without overflow: e^2x = inf gives 1)."""
    if FAST:
        y = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32,
                                      is_pure=True, pack=1)
    else:
        a = tl.abs(x)
        e = tl.math.exp2(a * 2.8853900817779268)  # exp(2|x|)
        big = 1.0 - 2.0 / (e + 1.0)
        big = tl.where(x < 0, -big, big)
        x2 = x * x
        # tanh x = x (1 + c1 x^2 + ... + c7 x^14) + O(x^17): error < 1e-9 at |x| = 0.4
        p = -0.0014558343870513183  # c7 = -929569 / 638512875
        p = p * x2 + 0.0035921280365724811  # 21844 / 6081075
        p = p * x2 - 0.0088632355299021966  # -1382 / 155925
        p = p * x2 + 0.021869488536155203  # 62 / 2835
        p = p * x2 - 0.053968253968253971  # -17 / 315
        p = p * x2 + 0.13333333333333333  # 2 / 15
        p = p * x2 - 0.33333333333333333  # -1 / 3
        small = x + x * x2 * p
        y = tl.where(a < 0.4, small, big)
    return y


@triton.jit
def score_tile(qk, rows, cols, n_q, n_k, shift, window_left, window_right, chunk,
               qk_scale, softcap2, alibi2, BIAS, stride_bm, stride_bn,
               MASKED: tl.constexpr, MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr,
               MASK_CHUNK: tl.constexpr,
               HAS_SOFTCAP: tl.constexpr, FAST_TANH: tl.constexpr, HAS_ALIBI: tl.constexpr,
               HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, ROUND_SCALED: tl.constexpr = False):
    """(s2, t): base-2 scores of a tile of products qk (module doc), and the
    tanh of the softcap (t = qk when HAS_SOFTCAP is off; unused then).

    ROUND_SCALED (the float32 builds): qk * qk_scale is rounded to float32
    before anything subtracts from it.  A plain product lets the compiler
    contract it with the caller's `s - m` / `s - lse2` into one FMA (exact
    product), while the row max and the LSE hold the rounded one: at scores
    of ~1e4 the two differ by up to half an ulp of s (2^-9 at 5e4), so a
    dominant key's P = exp2(s - lse2) was off by up to 0.14 % on the GPU
    (the interpreter never contracts).  An FMA with a zero addend is
    rounded once and is not contracted further.  16-bit builds keep the
    plain product: their inputs' rounding is far larger.

    rows, cols: broadcastable index tensors as in visible().
    chunk: the chunk size of chunked attention (read with MASK_CHUNK only).
    qk_scale: scale * log2(e), or scale / softcap with HAS_SOFTCAP.
    softcap2: softcap * log2(e).  alibi2: this head's slope * log2(e).
    BIAS: the mask / bias of this (batch entry, head), element (i, j) at
    BIAS + i * stride_bm + j * stride_bn (strides 0 where it broadcasts);
    rows past n_q and keys past n_k are not read."""
    if HAS_SOFTCAP:
        t = tanh(qk * qk_scale, FAST_TANH)
        s = t * softcap2
    elif ROUND_SCALED:
        t = qk
        s = tl.fma(qk, qk_scale, 0.0)
    else:
        t = qk
        s = qk * qk_scale
    if HAS_ALIBI:
        s = s - alibi2 * tl.abs((rows + shift - cols).to(tl.float32))
    if HAS_MASK:
        # Unmasked tiles hold whole key tiles, so only the rows need a bound:
        # a mask constant along the keys lets the load use wide vectors (with
        # a per-key bound every byte is a load of its own, and the addresses
        # alone fill the registers).
        if MASKED:
            in_bounds = (rows < n_q) & (cols < n_k)
        else:
            in_bounds = rows < n_q
        b = tl.load(BIAS + rows.to(tl.int64) * stride_bm + cols.to(tl.int64) * stride_bn,
                    mask=in_bounds, other=0)
        if MASK_BOOL:
            s = tl.where(b != 0, s, float("-inf"))
        else:
            b = b.to(tl.float32)
            # A finite bias stays finite (PyTorch's rows of finfo.min attend
            # uniformly, a row with one key at finfo.max attends it alone);
            # only -inf masks.  b * log2(e) overflows past |b| ~ 2.36e38: it is
            # held to +-finfo(float32).max, so values down to that stay ordered.
            # +-inf and NaN biases stay as they are (NaN rows, as in PyTorch).
            b2 = tl.minimum(tl.maximum(b * 1.4426950408889634, -3.4028234663852886e38,
                                       propagate_nan=tl.PropagateNan.ALL),
                            3.4028234663852886e38, propagate_nan=tl.PropagateNan.ALL)
            s = s + tl.where(tl.abs(b) == float("inf"), b, b2)
    if MASKED:
        s = mask_scores(s, rows, cols, n_k, shift, window_left, window_right, chunk,
                        MASK_LEFT, MASK_RIGHT, MASK_CHUNK)
    return s, t


@triton.jit
def _dropout_counters(rng_base, row0, col0, rng_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      KEYS_FIRST: tl.constexpr):
    """int64 counters of the tile's Philox calls (module doc): rows
    row0 + 16a + r and keys col0 + 16c + 2e (the members with bits 3 / 0, 3
    clear), shaped (a, r, c, e), or (c, e, a, r) with KEYS_FIRST."""
    ia = tl.arange(0, BLOCK_M // 2)
    rows = row0 + (ia // 8) * 16 + ia % 8
    row_part = tl.reshape(rng_base + rows.to(tl.int64) * rng_cols, (BLOCK_M // 16, 8))
    ic = tl.arange(0, BLOCK_N // 4)
    col_part = tl.reshape(col0 + (ic // 4) * 16 + (ic % 4) * 2, (BLOCK_N // 16, 4))
    if KEYS_FIRST:
        offs = col_part[:, :, None, None] + row_part[None, None, :, :]
    else:
        offs = row_part[:, :, None, None] + col_part[None, None, :, :]
    return offs


@triton.jit
def dropout_keep(seed, rng_base, row0, col0, rng_cols, dropout_thresh,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KEYS_FIRST: tl.constexpr):
    """Keep mask of query rows [row0, row0 + BLOCK_M) x keys [col0, col0 + BLOCK_N):
    (BLOCK_M, BLOCK_N), or its transpose (BLOCK_N, BLOCK_M) with KEYS_FIRST
    (the dK/dV loop's tiles).

    row0, col0: multiples of 16, as are BLOCK_M and BLOCK_N (tile starts are
    multiples of the tile sizes).  rng_base: int64 counter of (row 0, col 0)
    of this (batch entry, head).  dropout_thresh: the 16-bit threshold t
    (module doc).  One Philox call per 8 scores."""
    tl.static_assert(BLOCK_M % 16 == 0 and BLOCK_N % 16 == 0, "dropout tiles are multiples of 16")
    t_lo = dropout_thresh.to(tl.uint32)
    # high half >= t  <=>  word >= t * 2^16 (unsigned): one compare, no shift
    t_hi = t_lo << 16
    w0, w1, w2, w3 = tl.randint4x(seed, _dropout_counters(rng_base, row0, col0, rng_cols,
                                                           BLOCK_M, BLOCK_N, KEYS_FIRST), PHILOX_ROUNDS)
    if KEYS_FIRST:
        # Key bit 0 lies across lanes in this orientation: pack the 8
        # decisions of a call into the bits 4 * k0 + word of one integer, so
        # that the lane exchange moves one small integer per key pair
        # instead of booleans.
        bits = (((w0 & 0xFFFF) >= t_lo).to(tl.uint32) | (((w1 & 0xFFFF) >= t_lo).to(tl.uint32) << 1)
                | (((w2 & 0xFFFF) >= t_lo).to(tl.uint32) << 2) | (((w3 & 0xFFFF) >= t_lo).to(tl.uint32) << 3)
                | ((w0 >= t_hi).to(tl.uint32) << 4) | ((w1 >= t_hi).to(tl.uint32) << 5)
                | ((w2 >= t_hi).to(tl.uint32) << 6) | ((w3 >= t_hi).to(tl.uint32) << 7))
        half = tl.join(bits, bits >> 4)  # (c, e, a, r, k0): bit w = word w
        keep = tl.join(tl.join((half & 1) != 0, (half & 2) != 0),
                       tl.join((half & 4) != 0, (half & 8) != 0))
        # (c, e, a, r, k0, k3, q3) -> keys 16c + 8k3 + 2e + k0, queries 16a + 8q3 + r
        keep = tl.reshape(tl.permute(keep, (0, 5, 1, 4, 2, 6, 3)), (BLOCK_N, BLOCK_M))
    else:
        keep = tl.join(tl.join(tl.join((w0 & 0xFFFF) >= t_lo, w0 >= t_hi),
                               tl.join((w1 & 0xFFFF) >= t_lo, w1 >= t_hi)),
                       tl.join(tl.join((w2 & 0xFFFF) >= t_lo, w2 >= t_hi),
                               tl.join((w3 & 0xFFFF) >= t_lo, w3 >= t_hi)))
        # (a, r, c, e, k0, k3, q3) -> queries 16a + 8q3 + r, keys 16c + 8k3 + 2e + k0
        keep = tl.reshape(tl.permute(keep, (0, 6, 1, 2, 5, 3, 4)), (BLOCK_M, BLOCK_N))
    return keep


# ---------------------------------------------------------------------------
# Host side: the variant arguments of a launch
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelMods:
    """The variants of one launch, as the kernels take them.

    alibi: (B, Hq) float32 view (stride 0 over B for per-head slopes).
    sinks: (Hq,) float32.  bias: 4-D, broadcastable to (B, Hq, Nq, Nk), each
    dim of size 1 or full; bool (True = attend) or float (added to the
    natural-unit scores).  seed: (1,) int64 on the device; philox_offset
    shifts the counters of a batch chunk (score.py module doc)."""
    softcap: float = 0.0
    alibi: Optional[torch.Tensor] = None
    sinks: Optional[torch.Tensor] = None
    bias: Optional[torch.Tensor] = None
    dropout_p: float = 0.0
    seed: Optional[torch.Tensor] = None
    philox_offset: int = 0

    @property
    def dropout(self) -> bool:
        return self.dropout_p > 0.0

    def pointers(self, like: torch.Tensor):
        """(ALIBI, SINKS, BIAS, SEED); `like` stands in for absent ones (never read)."""
        bias = self.bias
        if bias is not None and bias.dtype == torch.bool:
            bias = bias.view(torch.uint8)
        return tuple(like if t is None else t for t in (self.alibi, self.sinks, bias, self.seed))

    def strides(self):
        """(stride_az, stride_ah, stride_bz, stride_bh, stride_bm, stride_bn); 0 on broadcast dims."""
        alibi = (0, 0) if self.alibi is None else tuple(self.alibi.stride())
        if self.bias is None:
            bias = (0, 0, 0, 0)
        else:
            bias = tuple(0 if n == 1 else s for n, s in zip(self.bias.shape, self.bias.stride()))
        return alibi + bias

    def scalars(self):
        """(softcap, dropout_scale, dropout_thresh, philox_offset): the 16-bit
        threshold and the exact inverse keep probability (module doc)."""
        p = self.dropout_p
        return (float(self.softcap) if self.softcap > 0 else 1.0, dropout_scale(p),
                dropout_threshold(p), int(self.philox_offset))

    def switches(self, q: torch.Tensor, with_sinks: bool):
        sw = dict(HAS_SOFTCAP=self.softcap > 0, FAST_TANH=self.softcap > 0 and fast_tanh(q),
                  HAS_ALIBI=self.alibi is not None, HAS_MASK=self.bias is not None,
                  MASK_BOOL=self.bias is not None and self.bias.dtype == torch.bool,
                  HAS_DROPOUT=self.dropout)
        if with_sinks:
            sw["HAS_SINKS"] = self.sinks is not None
        return sw

    def chunk(self, b: slice, counters_per_entry: int) -> "KernelMods":
        """The record for batch entries b of a dense batch launched in chunks."""
        if self.alibi is None and (self.bias is None or self.bias.shape[0] == 1) and (
                not self.dropout or b.start == 0):
            return self  # nothing depends on the batch entry (the common, single-chunk case)
        alibi = None if self.alibi is None else self.alibi[b]
        bias = self.bias
        if bias is not None and bias.shape[0] != 1:
            bias = bias[b]
        return KernelMods(self.softcap, alibi, self.sinks, bias, self.dropout_p, self.seed,
                          self.philox_offset + b.start * counters_per_entry)


NO_MODS = KernelMods()


def fast_tanh(q: torch.Tensor) -> bool:
    """The hardware tanh: compiled on NVIDIA GPUs, for 16-bit inputs only."""
    from .launch import INTERPRET
    return (not INTERPRET and q.is_cuda and torch.version.hip is None
            and q.dtype in (torch.float16, torch.bfloat16))
