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

Each switch is a compile-time constant: with every switch off the tile costs
one multiply, as before the variants existed.  The backward recomputes the
same s2 bit for bit (same helper, same order) and needs one more factor for
the softcap: ds/d(scale * qk) = 1 - tanh^2, returned here as ``t``.

Dropout (``dropout_keep``) acts on probabilities, not scores.  One Philox
4x32 call gives 4 words, so 4 neighbouring keys share a counter: score
(b, h, i, j) is decided by word j % 4 of counter
    philox_offset + ((b * Hq + h) * rng_rows + row0 + i) * rng_cols + j // 4
(b = 0 and row0 = the sequence's first packed row for varlen batches).  Rows
keep the stride rng_cols (the key count), of which the first cdiv(rng_cols, 4)
counters are used: a batch entry spans Hq * rng_rows * rng_cols counters, as
KernelMods.chunk assumes.  Key tiles start at multiples of BLOCK_N (a multiple
of 4), so a group never straddles two tiles.  reference.dropout_keep_mask
reproduces the rule in PyTorch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def visible(rows, cols, n_k, shift, window_left, window_right,
            MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr):
    """Key cols visible to query rows (rule in kernels/tiles.py).  rows and
    cols are broadcastable index tensors: rows[:, None] and cols[None, :] for
    a score tile, rows[None, :] and cols[:, None] for a transposed one."""
    keep = cols < n_k
    if MASK_RIGHT:
        keep = keep & (cols <= rows + (shift + window_right))
    if MASK_LEFT:
        keep = keep & (cols >= rows + (shift - window_left))
    return keep


@triton.jit
def mask_scores(s, rows, cols, n_k, shift, window_left, window_right,
                MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr):
    """s with invisible entries set to -inf (exp2 gives exactly 0 there);
    rows, cols broadcastable as in visible()."""
    keep = visible(rows, cols, n_k, shift, window_left, window_right, MASK_LEFT, MASK_RIGHT)
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
def score_tile(qk, rows, cols, n_q, n_k, shift, window_left, window_right,
               qk_scale, softcap2, alibi2, BIAS, stride_bm, stride_bn,
               MASKED: tl.constexpr, MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr,
               HAS_SOFTCAP: tl.constexpr, FAST_TANH: tl.constexpr, HAS_ALIBI: tl.constexpr,
               HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr):
    """(s2, t): base-2 scores of a tile of products qk (module doc), and the
    tanh of the softcap (t = qk when HAS_SOFTCAP is off; unused then).

    rows, cols: broadcastable index tensors as in visible().
    qk_scale: scale * log2(e), or scale / softcap with HAS_SOFTCAP.
    softcap2: softcap * log2(e).  alibi2: this head's slope * log2(e).
    BIAS: the mask / bias of this (batch entry, head), element (i, j) at
    BIAS + i * stride_bm + j * stride_bn (strides 0 where it broadcasts);
    rows past n_q and keys past n_k are not read."""
    if HAS_SOFTCAP:
        t = tanh(qk * qk_scale, FAST_TANH)
        s = t * softcap2
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
            # uniformly); only -inf masks.  b * log2(e) would overflow at finfo.min.
            b2 = tl.maximum(b * 1.4426950408889634, -1.0e38)
            s = s + tl.where(b == float("-inf"), b, b2)
    if MASKED:
        s = mask_scores(s, rows, cols, n_k, shift, window_left, window_right, MASK_LEFT, MASK_RIGHT)
    return s, t


@triton.jit
def dropout_keep(seed, rng_base, rows, col0, rng_cols, dropout_thresh,
                 BLOCK_N: tl.constexpr, KEYS_FIRST: tl.constexpr):
    """Keep mask of query rows x keys [col0, col0 + BLOCK_N): (rows, BLOCK_N),
    or its transpose (BLOCK_N, rows) with KEYS_FIRST (the dK/dV loop's tiles).

    rows: 1-D query indices.  col0: a multiple of 4 (tile starts are
    multiples of BLOCK_N).  rng_base: int64 counter of (row 0, col 0) of this
    (batch entry, head).  One Philox call per 4 keys (module doc): key j
    takes output j % 4 of counter group j // 4, kept iff
    output >> 1 >= dropout_thresh = floor(p * 2^31)."""
    groups = col0 // 4 + tl.arange(0, BLOCK_N // 4)
    if KEYS_FIRST:
        offs = rng_base + rows.to(tl.int64)[None, :] * rng_cols + groups[:, None]
    else:
        offs = rng_base + rows.to(tl.int64)[:, None] * rng_cols + groups[None, :]
    r0, r1, r2, r3 = tl.randint4x(seed, offs)
    k0 = (r0 >> 1).to(tl.int32, bitcast=True) >= dropout_thresh
    k1 = (r1 >> 1).to(tl.int32, bitcast=True) >= dropout_thresh
    k2 = (r2 >> 1).to(tl.int32, bitcast=True) >= dropout_thresh
    k3 = (r3 >> 1).to(tl.int32, bitcast=True) >= dropout_thresh
    # join stacks along a new last dim, so [.., b, a] below holds output a + 2b
    # and row-major flattening of (b, a) puts it at key offset 2b + a.
    keep = tl.join(tl.join(k0, k2), tl.join(k1, k3))
    if KEYS_FIRST:
        keep = tl.reshape(tl.permute(keep, (0, 2, 3, 1)), (BLOCK_N, rows.shape[0]))
    else:
        keep = tl.reshape(keep, (rows.shape[0], BLOCK_N))
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
        """(softcap, dropout_scale, dropout_thresh, philox_offset)."""
        p = self.dropout_p
        thresh = min(int(p * 2.0 ** 31), 2 ** 31 - 1)
        return (float(self.softcap) if self.softcap > 0 else 1.0, 1.0 / (1.0 - p), thresh,
                int(self.philox_offset))

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
