"""Plain PyTorch attention: a dense reference and a blockwise CPU path.

Layout everywhere in this module is (B, H, N, d) (heads before sequence), the
layout the kernels see after the public functions have permuted strides.

Visibility: query row i may attend key j iff
    j <= i + shift + right  (if right >= 0)   and   j >= i + shift - left  (if left >= 0).
Causal masking is right = 0.  flash-attn's bottom-right alignment is
shift = Nk - Nq; SDPA's top-left alignment is shift = 0.  Chunked attention
(chunk = C > 0, Llama 4's attention_chunk) also asks
    j // C == (i + shift) // C   (floor division; i + shift < 0 sees nothing).

* :func:`attention_ref` materialises the full score matrix (O(N^2) memory).  It
  is the ground truth for tests when called on float64 inputs.
* :func:`blockwise_attention_fwd` / :func:`blockwise_attention_bwd` run the
  same tiled algorithm as the Triton kernels (base-2 online softmax forward,
  recomputing backward) with O(N) extra memory.  They serve CPU tensors when
  Triton's interpreter is not enabled.

Both support every variant of kernels/score.py (softcap, ALiBi, masks and
biases, sinks, dropout), in the kernels' order.  Dropout masks come from
:func:`philox_randint4x`, a bit-exact PyTorch twin of Triton's
``tl.randint4x``, with the kernels' counter layout (:func:`dropout_keep`),
so the kernels, the blockwise path and the tests' reference see one mask
(:func:`dropout_keep_mask` rebuilds a call's mask from its seed).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

__all__ = [
    "attention_ref",
    "flash_attention_ref",
    "causal_mask",
    "visible_mask",
    "chunk_mask",
    "blockwise_attention_fwd",
    "blockwise_attention_bwd",
    "sinks_grad_torch",
    "BlockMods",
    "alibi_bias",
    "philox_randint",
    "philox_randint4x",
    "dropout_keep",
    "dropout_counters",
    "dropout_threshold",
    "dropout_scale",
    "dropout_keep_mask",
    "varlen_dropout_keep_mask",
    "DROPOUT_ROUNDS",
]

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
_F32_MAX = 3.4028234663852886e38  # finfo(float32).max: finite biases in base 2 are held within it


def visible_mask(n_q: int, n_k: int, shift: int, window=(-1, -1), device=None,
                 q_start: int = 0, k_start: int = 0, chunk: int = 0) -> torch.Tensor:
    """Boolean mask (True = attend) of rows [q_start, q_start+n_q) and columns
    [k_start, k_start+n_k) under the rule of the module doc (chunk 0: no chunks)."""
    left, right = window
    i = torch.arange(q_start, q_start + n_q, device=device)[:, None]
    j = torch.arange(k_start, k_start + n_k, device=device)[None, :]
    keep = torch.ones(n_q, n_k, dtype=torch.bool, device=device)
    if right >= 0:
        keep &= j <= i + shift + right
    if left >= 0:
        keep &= j >= i + shift - left
    if chunk > 0:
        keep &= chunk_mask(i + shift, j, chunk)
    return keep


def chunk_mask(pos: torch.Tensor, j: torch.Tensor, chunk: int) -> torch.Tensor:
    """Chunked attention's rule: key j in the chunk of key position pos (the
    query's position i + shift), j // chunk == pos // chunk with floor
    division, and nothing for pos < 0 (broadcastable int tensors)."""
    same = torch.div(j, chunk, rounding_mode="floor") == torch.div(pos, chunk, rounding_mode="floor")
    return same & (pos >= 0)


def causal_mask(n_q: int, n_k: int, causal_shift: int, device=None,
                q_start: int = 0, k_start: int = 0) -> torch.Tensor:
    """``j <= i + causal_shift`` (see visible_mask)."""
    return visible_mask(n_q, n_k, causal_shift, (-1, 0), device, q_start, k_start)


def _expand_kv(k: torch.Tensor, n_heads_q: int) -> torch.Tensor:
    """(B, Hkv, N, d) -> (B, Hq, N, d): query head h reads KV head h // group."""
    group = n_heads_q // k.shape[1]
    return k if group == 1 else k.repeat_interleave(group, dim=1)


# ---------------------------------------------------------------------------
# Dropout: Philox 4x32 as Triton's tl.randint4x computes it
# ---------------------------------------------------------------------------

ENV_DROPOUT_ROUNDS = "FLASHATTN_TRITON_DROPOUT_ROUNDS"


def _dropout_rounds() -> int:
    """Philox rounds of the dropout draws: 10 (tl.randint4x's default, as
    cuRAND's Philox4_32_10), or FLASHATTN_TRITON_DROPOUT_ROUNDS, read once
    at import, 7 to 10.  Seven is the fewest with which Philox 4x32 passed
    TestU01's BigCrush in its authors' tests (Salmon et al., SC 2011), who
    recommend 10 as a safety margin; fewer rounds cost fewer multiplies per
    draw.  Every kernel and dropout_keep below draw with this count, so
    masks agree across tiers and with the reference in one process."""
    value = os.environ.get(ENV_DROPOUT_ROUNDS, "").strip()
    if not value:
        return 10
    if value not in ("7", "8", "9", "10"):
        raise ValueError(f"{ENV_DROPOUT_ROUNDS}={value!r}: expected 7, 8, 9 or 10 (Philox rounds)")
    return int(value)


# Philox rounds of every dropout draw (kernels/score.py, kernels/hopper/dropout.py, dropout_keep).
DROPOUT_ROUNDS = _dropout_rounds()

_PHILOX_ROUND_A = 0xD2511F53
_PHILOX_ROUND_B = 0xCD9E8D57
_PHILOX_KEY_A = 0x9E3779B9
_PHILOX_KEY_B = 0xBB67AE85
_M32 = 0xFFFFFFFF


def _mulhilo32(a: int, x: torch.Tensor):
    """(hi, lo) 32-bit halves of the 64-bit product a * x (a, x < 2^32) in
    int64 arithmetic: x is split in 16-bit halves so that no product overflows."""
    p_hi = a * (x >> 16)
    p_lo = a * (x & 0xFFFF)
    hi = (p_hi + (p_lo >> 16)) >> 16
    lo = (((p_hi & 0xFFFF) << 16) + p_lo) & _M32
    return hi, lo


def philox_randint4x(seed: torch.Tensor, offsets: torch.Tensor, n_rounds: int = 10):
    """Bit-exact PyTorch version of ``tl.randint4x(seed, offsets)``: the four
    32-bit outputs of Philox 4x32 with key (seed_lo, seed_hi) and counter
    (offset_lo, offset_hi, 0, 0).  seed: int64 tensor of one element (>= 0);
    offsets: int64 tensor (>= 0).  Returns 4 int64 tensors holding uint32 values."""
    seed = seed.reshape(()).to(torch.int64)
    k0, k1 = seed & _M32, (seed >> 32) & _M32
    c0, c1 = offsets & _M32, (offsets >> 32) & _M32
    c2 = torch.zeros_like(c0)
    c3 = torch.zeros_like(c0)
    for _ in range(n_rounds):
        hi_b, lo_b = _mulhilo32(_PHILOX_ROUND_B, c2)
        hi_a, lo_a = _mulhilo32(_PHILOX_ROUND_A, c0)
        c0, c2 = hi_b ^ c1 ^ k0, hi_a ^ c3 ^ k1
        c1, c3 = lo_b, lo_a
        k0 = (k0 + _PHILOX_KEY_A) & _M32
        k1 = (k1 + _PHILOX_KEY_B) & _M32
    return c0, c1, c2, c3


def philox_randint(seed: torch.Tensor, offsets: torch.Tensor, n_rounds: int = 10) -> torch.Tensor:
    """``tl.randint(seed, offsets)``: the first output of :func:`philox_randint4x`."""
    return philox_randint4x(seed, offsets, n_rounds)[0]


def dropout_threshold(p: float) -> int:
    """The 16-bit threshold t of dropout probability p: a score is kept iff
    its 16-bit random half is >= t, so it is dropped with probability
    p' = t / 2^16.  t = round(p * 2^16) (|p' - p| <= 2^-17), at most
    2^16 - 1 so that some keys are always kept (p < 1); a p below 2^-17
    rounds to t = 0, which keeps every score."""
    x = p * 65536.0  # exact: a power-of-two scaling
    t = int(x)
    if x - t >= 0.5:
        t += 1
    return min(t, 65535)


def dropout_scale(p: float) -> float:
    """The factor of kept probabilities, 1 / (1 - p') = 2^16 / (2^16 - t) with
    the quantised p' of dropout_threshold: E[keep * scale] = 1 exactly, so
    the output stays unbiased whatever the rounding of p."""
    return 65536.0 / (65536 - dropout_threshold(p))


def _dropout_bits(q: torch.Tensor, k: torch.Tensor):
    """(row part, key part, word, half) of the counter rule for query rows q
    and keys k (int64, broadcastable): rows q and q ^ 8 (within a 16-row
    block) and keys k, k ^ 1, k ^ 8, k ^ 9 (within a 16-key block) share one
    Philox call; the score takes word 2 * q3 + k3 and half k0 of it (bit n of
    an index written xn)."""
    return q & ~8, k & ~9, 2 * ((q >> 3) & 1) + ((k >> 3) & 1), k & 1


def dropout_counters(batch: int, heads: int, rows, keys, rng_rows: int, rng_cols: int,
                     row0: int = 0, offset: int = 0, device=None) -> torch.Tensor:
    """Philox counter of each score, (batch, heads, len(rows), len(keys)) for
    index ranges rows, keys (the rule of kernels/score.py):
        offset + ((b * heads + h) * rng_rows + row0 + (i & ~8)) * rng_cols + (j & ~9).
    Eight scores share each counter (see _dropout_bits)."""
    b = torch.arange(batch, device=device, dtype=torch.int64)[:, None, None, None]
    h = torch.arange(heads, device=device, dtype=torch.int64)[None, :, None, None]
    i = torch.as_tensor(rows, device=device, dtype=torch.int64)[None, None, :, None]
    j = torch.as_tensor(keys, device=device, dtype=torch.int64)[None, None, None, :]
    ri, kj, _, _ = _dropout_bits(i, j)
    return offset + ((b * heads + h) * rng_rows + row0 + ri) * rng_cols + kj


def dropout_keep(seed: torch.Tensor, p: float, batch: int, heads: int, rows, k0: int, k1: int,
                 rng_rows: int, rng_cols: int, row0: int = 0, offset: int = 0) -> torch.Tensor:
    """Keep mask (True = kept), (batch, heads, len(rows), k1 - k0), of query
    rows x keys [k0, k1) (any rows, any k0), as the kernels draw it: score
    (i, j) reads the 16-bit half j & 1 of word 2 * ((i >> 3) & 1) + ((j >> 3) & 1)
    of the Philox call on dropout_counters' counter, kept iff that half is
    >= dropout_threshold(p).  Each distinct counter is drawn once (the index
    bookkeeping runs on the CPU: no device synchronisation)."""
    dev = seed.device
    i = torch.as_tensor(rows, dtype=torch.int64)
    j = torch.arange(k0, k1, dtype=torch.int64)
    ri, kj, word, half = _dropout_bits(i[:, None], j[None, :])
    urow, inv_r = torch.unique(ri[:, 0], return_inverse=True)
    ukey, inv_k = torch.unique(kj[0], return_inverse=True)
    c = dropout_counters(batch, heads, urow, ukey, rng_rows, rng_cols, row0, offset, device=dev)
    words = torch.stack(philox_randint4x(seed, c, DROPOUT_ROUNDS), dim=-1)  # (B, H, rows', keys', 4)
    w = words[:, :, inv_r[:, None].to(dev), inv_k[None, :].to(dev), word.to(dev)]  # (B, H, rows, keys)
    return ((w >> (16 * half.to(dev))) & 0xFFFF) >= dropout_threshold(p)


def dropout_keep_mask(seed: torch.Tensor, p: float, batch: int, heads: int, n_q: int,
                      n_k: int) -> torch.Tensor:
    """The keep mask (batch, heads, n_q, n_k) that a dense call (flash_attn_func
    or the SDPA entry) with dropout_p = p used, given its seed."""
    return dropout_keep(seed, p, batch, heads, range(n_q), 0, n_k, n_q, n_k)


def varlen_dropout_keep_mask(seed: torch.Tensor, p: float, heads: int, cu_seqlens_q,
                             cu_seqlens_k, max_seqlen_k: int, offset: int = 0):
    """Per sequence b of a packed call, the keep mask (heads, n_q_b, n_k_b);
    offset: the call's philox_offset (ops.flash_varlen_fwd)."""
    cq, ck = torch.as_tensor(cu_seqlens_q).tolist(), torch.as_tensor(cu_seqlens_k).tolist()
    total_q = cq[-1]
    masks = []
    for b in range(len(cq) - 1):
        masks.append(dropout_keep(seed, p, 1, heads, range(cq[b + 1] - cq[b]), 0, ck[b + 1] - ck[b],
                                  total_q, max_seqlen_k, row0=cq[b], offset=offset)[0])
    return masks


# ---------------------------------------------------------------------------
# Dense reference
# ---------------------------------------------------------------------------

def alibi_bias(slopes: torch.Tensor, batch: int, n_q: int, n_k: int, shift: int) -> torch.Tensor:
    """-slope * |i + shift - j| as (B or 1, H, n_q, n_k); slopes (H,) or (B, H)."""
    i = torch.arange(n_q, device=slopes.device)[:, None]
    j = torch.arange(n_k, device=slopes.device)[None, :]
    dist = (i + shift - j).abs().to(slopes.dtype)
    s = slopes if slopes.dim() == 2 else slopes[None]
    return -s[:, :, None, None] * dist


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  softmax_scale: Optional[float] = None,
                  causal_shift: Optional[int] = None, *, window=(-1, -1),
                  shift: Optional[int] = None, softcap: float = 0.0,
                  alibi_slopes: Optional[torch.Tensor] = None,
                  attn_mask: Optional[torch.Tensor] = None,
                  sinks: Optional[torch.Tensor] = None,
                  dropout_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                  return_probs: bool = False, attention_chunk: int = 0):
    """Dense attention in the dtype of the inputs.

    q: (B, Hq, Nq, d); k: (B, Hkv, Nk, d); v: (B, Hkv, Nk, dv), Hq % Hkv == 0.
    causal_shift=X is the causal mask j <= i + X.  window=(left, right) with
    shift (default Nk - Nq) is the general band; both may be combined.
    Variants, in the kernels' order (kernels/score.py):
        softcap > 0: s = softcap * tanh(s / softcap);
        alibi_slopes (Hq,) or (B, Hq): s -= slope * |i + shift - j|;
        attn_mask broadcastable to (B, Hq, Nq, Nk): bool (True = attend) or
            float (added to s);
        sinks (Hq,): one extra logit per head in the softmax denominator;
        dropout_mask (broadcastable to (B, Hq, Nq, Nk), True = kept) with
            dropout_p: P * mask * dropout_scale(p) multiplies V (the LSE is
            unchanged); dropout_scale(p) = 1 / (1 - p) up to the kernels'
            16-bit quantisation of p (dropout_threshold).
    attention_chunk C > 0 (chunked attention, module doc) keeps only keys
    with j // C == (i + shift) // C, shift as the window's; intersected with
    the causal mask and the window.
    Returns ``(out, lse)``: out (B, Hq, Nq, dv), lse (B, Hq, Nq) natural-log
    log-sum-exp of the modified, masked scores (and the sink).  Rows that see
    no key (and have no sink) give out = 0 and lse = -inf.  With
    return_probs, the probabilities P (B, Hq, Nq, Nk) (before dropout) come
    third.  Every tensor argument is differentiable.
    """
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    n_q, n_k = q.shape[2], k.shape[2]
    band_shift = n_k - n_q if shift is None else shift
    k = _expand_kv(k, q.shape[1])
    v = _expand_kv(v, q.shape[1])
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        s = s + alibi_bias(alibi_slopes.to(s.dtype), q.shape[0], n_q, n_k, band_shift)
    keep = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = attn_mask.expand(s.shape)
        else:
            s = s + attn_mask.to(s.dtype)
    if causal_shift is not None:
        c = causal_mask(n_q, n_k, causal_shift, device=q.device)
        keep = c if keep is None else keep & c
    if tuple(window) != (-1, -1) or attention_chunk > 0:
        band = visible_mask(n_q, n_k, band_shift, window, q.device, chunk=attention_chunk)
        keep = band if keep is None else keep & band
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    if sinks is not None:
        sink = sinks.to(s.dtype)[None, :, None, None].expand(s.shape[0], -1, n_q, 1)
        lse = torch.logsumexp(torch.cat([s, sink], -1), dim=-1)
    else:
        lse = torch.logsumexp(s, dim=-1)
    # exp(s - lse) is NaN on rows where lse == -inf; those rows see no key.
    lse_safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    p = torch.exp(s - lse_safe[..., None])
    p_used = p
    if dropout_mask is not None:
        p_used = p * dropout_mask.to(p.dtype) * dropout_scale(dropout_p)
    out = torch.matmul(p_used.to(v.dtype), v)
    if return_probs:
        return out, lse, p
    return out, lse


def flash_attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                        softmax_scale: Optional[float] = None,
                        dtype: Optional[torch.dtype] = torch.float64, window_size=(-1, -1),
                        **variants):
    """:func:`attention_ref` in flash-attn's layout and semantics, computed in ``dtype``.

    q: (B, Nq, Hq, d); k: (B, Nk, Hkv, d); v: (B, Nk, Hkv, dv); causal and the
    window aligned bottom-right.  ``variants``: the keyword arguments of
    attention_ref (softcap, alibi_slopes, attn_mask, sinks, dropout_mask,
    dropout_p, attention_chunk); tensors among them are cast to ``dtype`` too (bool masks
    stay bool).  Returns (out (B, Nq, Hq, dv), lse (B, Hq, Nq)), both differentiable."""
    qh, kh, vh = (t.to(dtype or t.dtype).transpose(1, 2) for t in (q, k, v))
    for name in ("alibi_slopes", "sinks", "attn_mask"):
        t = variants.get(name)
        if t is not None and t.is_floating_point():
            variants[name] = t.to(dtype or t.dtype)
    res = attention_ref(qh, kh, vh, softmax_scale, k.shape[1] - q.shape[1] if causal else None,
                        window=window_size, **variants)
    return (res[0].transpose(1, 2),) + tuple(res[1:])


# ---------------------------------------------------------------------------
# Blockwise CPU path (same algorithm as the kernels, O(N) extra memory)
# ---------------------------------------------------------------------------

_CPU_BLOCK = 128


@dataclass(frozen=True)
class BlockMods:
    """The variants of a blockwise call (the CPU counterpart of kernels.score.KernelMods).

    alibi: (B, Hq) slopes.  sinks: (Hq,).  bias: 4-D broadcastable to
    (B, Hq, Nq, Nk), bool (True = attend) or float.  dropout: p and the (1,)
    int64 seed; the keep mask follows dropout_keep with rng_rows / rng_cols
    (0: Nq / Nk of the call), the first row rng_row0 and the counter offset
    rng_offset."""
    softcap: float = 0.0
    alibi: Optional[torch.Tensor] = None
    sinks: Optional[torch.Tensor] = None
    bias: Optional[torch.Tensor] = None
    dropout_p: float = 0.0
    seed: Optional[torch.Tensor] = None
    rng_rows: int = 0
    rng_cols: int = 0
    rng_row0: int = 0
    rng_offset: int = 0


def _grouped(x: torch.Tensor, n_kv: int) -> torch.Tensor:
    """(B, Hq, N, ...) -> (B, Hkv, G, N, ...): group g of KV head h is query head h*G+g."""
    b, hq = x.shape[:2]
    return x.reshape(b, n_kv, hq // n_kv, *x.shape[2:])


def _key_range(q0: int, q1: int, n_k: int, shift: int, window) -> Tuple[int, int]:
    """Keys [lo, hi) that rows [q0, q1) may see."""
    left, right = window
    hi = n_k if right < 0 else max(0, min(n_k, q1 - 1 + shift + right + 1))
    lo = 0 if left < 0 else max(0, min(hi, q0 + shift - left))
    return lo, hi


def _scaled_q(q_block: torch.Tensor, softmax_scale: float, softcap: float = 0.0) -> torch.Tensor:
    """Query rows pre-multiplied by scale * log2(e): scores come out in base 2
    (by scale / softcap with a softcap: the argument of its tanh).
    Forward and backward both form scores as _scaled_q(q) @ k^T, so the
    backward's exponent is bit-identical to the forward's."""
    if softcap > 0:
        return q_block * (softmax_scale / softcap)
    return q_block * (softmax_scale * LOG2E)


class _TileScores:
    """Base-2 scores of (query rows x key cols) tiles with every variant,
    in the order of kernels/score.py; shared by the blockwise forward and backward."""

    def __init__(self, mods: BlockMods, b: int, hq: int, n_kv: int, n_q: int, n_k: int,
                 shift: int, window, acc_dtype, device, chunk: int = 0):
        self.mods, self.shift, self.window, self.chunk = mods, shift, window, chunk
        self.b, self.hq, self.n_kv = b, hq, n_kv
        self.masked = tuple(window) != (-1, -1) or chunk > 0
        self.alibi2 = None
        if mods.alibi is not None:
            self.alibi2 = _grouped(mods.alibi.to(acc_dtype).expand(b, hq) * LOG2E, n_kv)[..., None, None]
        self.bias = None if mods.bias is None else mods.bias.expand(b, hq, n_q, n_k)
        self.rng_rows = mods.rng_rows or n_q
        self.rng_cols = mods.rng_cols or n_k
        self.device = device

    def __call__(self, qb2, kb, q0, q1, k0, k1):
        """(s2, t) of rows [q0, q1) x keys [k0, k1); t is the softcap's tanh (else None)."""
        m = self.mods
        s = torch.matmul(qb2, kb.transpose(-1, -2))
        t = None
        if m.softcap > 0:
            t = torch.tanh(s)
            s = t * (m.softcap * LOG2E)
        if self.alibi2 is not None:
            i = torch.arange(q0, q1, device=self.device)[:, None]
            j = torch.arange(k0, k1, device=self.device)[None, :]
            s = s - self.alibi2 * (i + self.shift - j).abs().to(s.dtype)
        if self.bias is not None:
            tile = _grouped(self.bias[:, :, q0:q1, k0:k1], self.n_kv)
            if tile.dtype == torch.bool:
                s = s.masked_fill(~tile, float("-inf"))
            else:
                tile = tile.to(s.dtype)
                # kernels/score.py: finite biases stay finite in base 2 (held to
                # +-finfo(float32).max), +-inf and NaN stay as they are
                b2 = torch.clamp(tile * LOG2E, -_F32_MAX, _F32_MAX)
                s = s + torch.where(torch.isinf(tile), tile, b2)
        if self.masked:
            keep = visible_mask(q1 - q0, k1 - k0, self.shift, self.window, self.device, q0, k0, self.chunk)
            s = s.masked_fill(~keep, float("-inf"))
        return s, t

    def keep(self, q0, q1, k0, k1):
        """Dropout keep mask of the tile, grouped (B, Hkv, G, rows, cols)."""
        m = self.mods
        keep = dropout_keep(m.seed.to(self.device), m.dropout_p, self.b, self.hq, range(q0, q1), k0,
                            k1, self.rng_rows, self.rng_cols, m.rng_row0, m.rng_offset)
        return _grouped(keep, self.n_kv)


def blockwise_attention_fwd(q, k, v, softmax_scale: float, shift: int, window=(-1, -1),
                            block: int = _CPU_BLOCK, mods: Optional[BlockMods] = None, with_lo: bool = False,
                            chunk: int = 0):
    """Online-softmax forward in base 2.  q (B, Hq, Nq, d), k (B, Hkv, Nk, d), v (B, Hkv, Nk, dv).

    Returns out (B, Hq, Nq, dv) in q's dtype and lse2 (B, Hq, Nq) float32 in
    base 2 (lse2 = lse * log2(e)).  Accumulates in float32 (float64 for float64 inputs).
    with_lo: also return the compensated LSE's residual lo (B, Hq, Nq) float32,
    (m + log2(l)) - lse2 formed before rounding to float32 (0 for rows that
    saw no key), as kernels/fwd.py's LSE_LO: blockwise_attention_bwd's lse2_lo.
    chunk: chunked attention's chunk size (module doc), 0 for none: masked
    per tile (the blocks outside the chunks are visited, all -inf)."""
    mods = mods or BlockMods()
    acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    b, hq, n_q, d = q.shape
    n_kv, n_k, dv = k.shape[1], k.shape[2], v.shape[3]
    qg = _grouped(q, n_kv).to(acc_dtype)
    kf, vf = k.to(acc_dtype)[:, :, None], v.to(acc_dtype)[:, :, None]
    out = torch.empty(b, hq, n_q, dv, dtype=q.dtype, device=q.device)
    lse = torch.empty(b, hq, n_q, dtype=torch.float32, device=q.device)
    out_g, lse_g = _grouped(out, n_kv), lse.view(b, n_kv, hq // n_kv, n_q)
    lse_lo = torch.empty_like(lse) if with_lo else None
    lo_g = None if lse_lo is None else lse_lo.view(b, n_kv, hq // n_kv, n_q)
    scores = _TileScores(mods, b, hq, n_kv, n_q, n_k, shift, window, acc_dtype, q.device, chunk)
    dropout = mods.dropout_p > 0
    for q0 in range(0, n_q, block):
        q1 = min(n_q, q0 + block)
        qb = _scaled_q(qg[:, :, :, q0:q1], softmax_scale, mods.softcap)
        if mods.sinks is not None:  # the sink's logit starts the running softmax
            m = (_grouped(mods.sinks.to(acc_dtype)[None, :, None] * LOG2E, n_kv)
                 .expand(*qb.shape[:-1]).clone())
            l = torch.ones_like(m)
        else:
            m = torch.full(qb.shape[:-1], float("-inf"), dtype=acc_dtype, device=q.device)
            l = torch.zeros_like(m)
        acc = torch.zeros(*qb.shape[:-1], dv, dtype=acc_dtype, device=q.device)
        lo, hi = _key_range(q0, q1, n_k, shift, window)
        for k0 in range((lo // block) * block, hi, block):
            k1 = min(n_k, k0 + block)
            s, _ = scores(qb, kf[..., k0:k1, :], q0, q1, k0, k1)
            m_new = torch.maximum(m, s.amax(-1))
            # Rows with no visible key so far keep m = -inf; use 0 so that
            # exp2(-inf - 0) = 0 instead of exp2(-inf + inf) = NaN.
            m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp2(s - m_use[..., None])
            alpha = torch.exp2(m - m_use)
            l = l * alpha + p.sum(-1)
            if dropout:
                p = p * scores.keep(q0, q1, k0, k1)
            acc = acc * alpha[..., None] + torch.matmul(p.to(v.dtype).to(acc_dtype), vf[..., k0:k1, :])
            m = m_new
        empty = l == 0
        l_safe = torch.where(empty, torch.ones_like(l), l)
        o = acc / l_safe[..., None]
        if dropout:
            o = o * dropout_scale(mods.dropout_p)
        out_g[:, :, :, q0:q1] = o.to(q.dtype)
        hi = torch.where(empty, torch.full_like(m, float("-inf")), m + torch.log2(l_safe)).float()
        lse_g[:, :, :, q0:q1] = hi
        if lo_g is not None:  # (m - hi) is exact; its sum with log2(l) rounds once
            lo_g[:, :, :, q0:q1] = torch.where(empty, torch.zeros_like(m),
                                               (m - hi.to(m.dtype)) + torch.log2(l_safe)).float()
    return (out, lse, lse_lo) if with_lo else (out, lse)


def sinks_grad_torch(dsinks: torch.Tensor, sinks: torch.Tensor, lse2: torch.Tensor,
                     delta: torch.Tensor, lse2_lo: Optional[torch.Tensor] = None) -> None:
    """dsinks (Hq,) <- d sink_h = -sum over the rows (and batch) of head h of
    P_sink * delta, P_sink = exp2(sink_h * log2(e) - lse2) (0 where lse2 is
    -inf), given the base-2 LSE and delta (rowsum(dO * O), less dlse), both
    (B, Hq, N) or packed (Hq, T).  The CPU path's form; kernels/bwd.py
    sinks_grad is the kernel one.  lse2_lo: the compensated LSE's residual
    (dense calls with a float bias), laid out like lse2: P_sink =
    exp2((sink_h * log2(e) - lse2) - lse2_lo)."""
    lse_h, delta_h = (lse2, delta) if lse2.dim() == 2 else (lse2.transpose(0, 1), delta.transpose(0, 1))
    expo = sinks.float().view(-1, *([1] * (lse_h.dim() - 1))) * LOG2E - lse_h
    if lse2_lo is not None:
        expo = expo - (lse2_lo if lse2_lo.dim() == 2 else lse2_lo.transpose(0, 1))
    p_sink = torch.where(torch.isinf(lse_h), torch.zeros_like(lse_h), torch.exp2(expo))
    dsinks.copy_(-(p_sink * delta_h).flatten(1).sum(1))


def blockwise_attention_bwd(do, q, k, v, out, lse2, softmax_scale: float, shift: int,
                            window=(-1, -1), dlse2=None, block: int = _CPU_BLOCK,
                            mods: Optional[BlockMods] = None, want_dbias: bool = False, lse2_lo=None,
                            chunk: int = 0):
    """Recomputing backward.  Returns (dq, dk, dv, delta, dbias): the gradients
    in the input dtypes, delta (B, Hq, Nq) and, with want_dbias, dS
    (B, Hq, Nq, Nk) float32 (the gradient of an additive bias before any
    reduction; else None).

    lse2 is the forward's base-2 LSE.  dS = P * (dP - delta) with
    delta = rowsum(dO * O) - dlse2 * log2(e): the optional gradient of lse2
    enters only through delta, because d lse2_i / d s_ij = P_ij * log2(e).
    Variants as in kernels/bwd.py.  lse2_lo: None, or the forward's
    compensated-LSE residual (blockwise_attention_fwd's with_lo): P =
    exp2((s2 - lse2) - lse2_lo).  chunk: as blockwise_attention_fwd's."""
    mods = mods or BlockMods()
    acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    b, hq, n_q, d = q.shape
    n_kv, n_k = k.shape[1], k.shape[2]
    group = hq // n_kv
    qg = _grouped(q, n_kv).to(acc_dtype)
    dog = _grouped(do, n_kv).to(acc_dtype)
    delta_flat = (do.to(acc_dtype) * out.to(acc_dtype)).sum(-1)
    if dlse2 is not None:
        delta_flat = delta_flat - dlse2.to(acc_dtype) * LOG2E
    delta = delta_flat.view(b, n_kv, group, n_q)
    # Rows with lse2 = -inf saw no key: +inf makes exp2(s - lse2) = 0 for them.
    lse_g = lse2.to(acc_dtype).reshape(b, n_kv, group, n_q)
    lse_g = torch.where(torch.isinf(lse_g), torch.full_like(lse_g, float("inf")), lse_g)
    lo_g = None if lse2_lo is None else lse2_lo.to(acc_dtype).reshape(b, n_kv, group, n_q)
    kf, vf = k.to(acc_dtype)[:, :, None], v.to(acc_dtype)[:, :, None]
    dq = torch.zeros_like(qg)
    dk = torch.zeros(b, n_kv, n_k, d, dtype=acc_dtype, device=q.device)
    dv = torch.zeros(b, n_kv, n_k, v.shape[3], dtype=acc_dtype, device=q.device)
    dbias = torch.zeros(b, hq, n_q, n_k, dtype=torch.float32, device=q.device) if want_dbias else None
    dbias_g = None if dbias is None else _grouped(dbias, n_kv)
    scores = _TileScores(mods, b, hq, n_kv, n_q, n_k, shift, window, acc_dtype, q.device, chunk)
    dropout = mods.dropout_p > 0
    for q0 in range(0, n_q, block):
        q1 = min(n_q, q0 + block)
        qb, dob = qg[:, :, :, q0:q1], dog[:, :, :, q0:q1]
        qb2 = _scaled_q(qb, softmax_scale, mods.softcap)
        lo, hi = _key_range(q0, q1, n_k, shift, window)
        for k0 in range((lo // block) * block, hi, block):
            k1 = min(n_k, k0 + block)
            kb, vb = kf[..., k0:k1, :], vf[..., k0:k1, :]
            s, t = scores(qb2, kb, q0, q1, k0, k1)
            if lo_g is None:
                p = torch.exp2(s - lse_g[:, :, :, q0:q1, None])
            else:
                p = torch.exp2((s - lse_g[:, :, :, q0:q1, None]) - lo_g[:, :, :, q0:q1, None])
            dp = torch.matmul(dob, vb.transpose(-1, -2))
            pd = p
            if dropout:
                keep = scores.keep(q0, q1, k0, k1)
                pd = p * keep * dropout_scale(mods.dropout_p)
                dp = dp * keep * dropout_scale(mods.dropout_p)
            dv[:, :, k0:k1] += torch.matmul(pd.to(v.dtype).to(acc_dtype).transpose(-1, -2), dob).sum(2)
            ds = p * (dp - delta[:, :, :, q0:q1, None])
            if dbias_g is not None:
                dbias_g[:, :, :, q0:q1, k0:k1] = ds.float()
            if t is not None:
                ds = ds * (1.0 - t * t)
            dq[:, :, :, q0:q1] += torch.matmul(ds, kb) * softmax_scale
            dk[:, :, k0:k1] += torch.matmul(ds.transpose(-1, -2), qb).sum(2) * softmax_scale
    return (dq.reshape(b, hq, n_q, d).to(q.dtype), dk.to(k.dtype), dv.to(v.dtype),
            delta_flat.float(), dbias)
