"""Plain PyTorch attention: a dense reference and a blockwise CPU path.

Layout everywhere in this module is (B, H, N, d) (heads before sequence), the
layout the kernels see after the public functions have permuted strides.

Visibility: query row i may attend key j iff
    j <= i + shift + right  (if right >= 0)   and   j >= i + shift - left  (if left >= 0).
Causal masking is right = 0.  flash-attn's bottom-right alignment is
shift = Nk - Nq; SDPA's top-left alignment is shift = 0.

* :func:`attention_ref` materialises the full score matrix (O(N^2) memory).  It
  is the ground truth for tests when called on float64 inputs.
* :func:`blockwise_attention_fwd` / :func:`blockwise_attention_bwd` run the
  same tiled algorithm as the Triton kernels (base-2 online softmax forward,
  recomputing backward) with O(N) extra memory.  They serve CPU tensors when
  Triton's interpreter is not enabled.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

__all__ = [
    "attention_ref",
    "flash_attention_ref",
    "causal_mask",
    "visible_mask",
    "blockwise_attention_fwd",
    "blockwise_attention_bwd",
]

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def visible_mask(n_q: int, n_k: int, shift: int, window=(-1, -1), device=None,
                 q_start: int = 0, k_start: int = 0) -> torch.Tensor:
    """Boolean mask (True = attend) of rows [q_start, q_start+n_q) and columns
    [k_start, k_start+n_k) under the rule of the module doc."""
    left, right = window
    i = torch.arange(q_start, q_start + n_q, device=device)[:, None]
    j = torch.arange(k_start, k_start + n_k, device=device)[None, :]
    keep = torch.ones(n_q, n_k, dtype=torch.bool, device=device)
    if right >= 0:
        keep &= j <= i + shift + right
    if left >= 0:
        keep &= j >= i + shift - left
    return keep


def causal_mask(n_q: int, n_k: int, causal_shift: int, device=None,
                q_start: int = 0, k_start: int = 0) -> torch.Tensor:
    """``j <= i + causal_shift`` (see visible_mask)."""
    return visible_mask(n_q, n_k, causal_shift, (-1, 0), device, q_start, k_start)


def _expand_kv(k: torch.Tensor, n_heads_q: int) -> torch.Tensor:
    """(B, Hkv, N, d) -> (B, Hq, N, d): query head h reads KV head h // group."""
    group = n_heads_q // k.shape[1]
    return k if group == 1 else k.repeat_interleave(group, dim=1)


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  softmax_scale: Optional[float] = None,
                  causal_shift: Optional[int] = None, *, window=(-1, -1),
                  shift: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Dense attention in the dtype of the inputs.

    q: (B, Hq, Nq, d); k: (B, Hkv, Nk, d); v: (B, Hkv, Nk, dv), Hq % Hkv == 0.
    causal_shift=X is the causal mask j <= i + X.  window=(left, right) with
    shift (default Nk - Nq) is the general band; both may be combined.
    Returns ``(out, lse)``: out (B, Hq, Nq, dv), lse (B, Hq, Nq) natural-log
    log-sum-exp of the scaled, masked scores.  Rows that see no key give
    out = 0 and lse = -inf.
    """
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    n_q, n_k = q.shape[2], k.shape[2]
    k = _expand_kv(k, q.shape[1])
    v = _expand_kv(v, q.shape[1])
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    keep = None
    if causal_shift is not None:
        keep = causal_mask(n_q, n_k, causal_shift, device=q.device)
    if tuple(window) != (-1, -1):
        band = visible_mask(n_q, n_k, n_k - n_q if shift is None else shift, window, q.device)
        keep = band if keep is None else keep & band
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    # exp(s - lse) is NaN on rows where lse == -inf; those rows see no key.
    lse_safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    p = torch.exp(s - lse_safe[..., None])
    out = torch.matmul(p.to(v.dtype), v)
    return out, lse


def flash_attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                        softmax_scale: Optional[float] = None,
                        dtype: Optional[torch.dtype] = torch.float64, window_size=(-1, -1)):
    """:func:`attention_ref` in flash-attn's layout and semantics, computed in ``dtype``.

    q: (B, Nq, Hq, d); k: (B, Nk, Hkv, d); v: (B, Nk, Hkv, dv); causal and the
    window aligned bottom-right.  Returns (out (B, Nq, Hq, dv), lse (B, Hq, Nq)),
    both differentiable."""
    qh, kh, vh = (t.to(dtype or t.dtype).transpose(1, 2) for t in (q, k, v))
    out, lse = attention_ref(qh, kh, vh, softmax_scale, k.shape[1] - q.shape[1] if causal else None,
                             window=window_size)
    return out.transpose(1, 2), lse


# ---------------------------------------------------------------------------
# Blockwise CPU path (same algorithm as the kernels, O(N) extra memory)
# ---------------------------------------------------------------------------

_CPU_BLOCK = 128


def _grouped(x: torch.Tensor, n_kv: int) -> torch.Tensor:
    """(B, Hq, N, d) -> (B, Hkv, G, N, d) view: group g of KV head h is query head h*G+g."""
    b, hq, n, d = x.shape
    return x.reshape(b, n_kv, hq // n_kv, n, d)


def _key_range(q0: int, q1: int, n_k: int, shift: int, window) -> Tuple[int, int]:
    """Keys [lo, hi) that rows [q0, q1) may see."""
    left, right = window
    hi = n_k if right < 0 else max(0, min(n_k, q1 - 1 + shift + right + 1))
    lo = 0 if left < 0 else max(0, min(hi, q0 + shift - left))
    return lo, hi


def _scaled_q(q_block: torch.Tensor, softmax_scale: float) -> torch.Tensor:
    """Query rows pre-multiplied by scale * log2(e): scores come out in base 2.
    Forward and backward both form scores as _scaled_q(q) @ k^T, so the
    backward's exponent is bit-identical to the forward's."""
    return q_block * (softmax_scale * LOG2E)


def blockwise_attention_fwd(q, k, v, softmax_scale: float, shift: int, window=(-1, -1),
                            block: int = _CPU_BLOCK):
    """Online-softmax forward in base 2.  q (B, Hq, Nq, d), k (B, Hkv, Nk, d), v (B, Hkv, Nk, dv).

    Returns out (B, Hq, Nq, dv) in q's dtype and lse2 (B, Hq, Nq) float32 in
    base 2 (lse2 = lse * log2(e)).  Accumulates in float32 (float64 for float64 inputs)."""
    acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    b, hq, n_q, d = q.shape
    n_kv, n_k, dv = k.shape[1], k.shape[2], v.shape[3]
    qg = _grouped(q, n_kv).to(acc_dtype)
    kf, vf = k.to(acc_dtype)[:, :, None], v.to(acc_dtype)[:, :, None]
    out = torch.empty(b, hq, n_q, dv, dtype=q.dtype, device=q.device)
    lse = torch.empty(b, hq, n_q, dtype=torch.float32, device=q.device)
    out_g, lse_g = _grouped(out, n_kv), lse.view(b, n_kv, hq // n_kv, n_q)
    masked = tuple(window) != (-1, -1)
    for q0 in range(0, n_q, block):
        q1 = min(n_q, q0 + block)
        qb = _scaled_q(qg[:, :, :, q0:q1], softmax_scale)
        m = torch.full(qb.shape[:-1], float("-inf"), dtype=acc_dtype, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros(*qb.shape[:-1], dv, dtype=acc_dtype, device=q.device)
        lo, hi = _key_range(q0, q1, n_k, shift, window)
        for k0 in range((lo // block) * block, hi, block):
            k1 = min(n_k, k0 + block)
            s = torch.matmul(qb, kf[..., k0:k1, :].transpose(-1, -2))
            if masked:
                keep = visible_mask(q1 - q0, k1 - k0, shift, window, q.device, q0, k0)
                s = s.masked_fill(~keep, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            # Rows with no visible key so far keep m = -inf; use 0 so that
            # exp2(-inf - 0) = 0 instead of exp2(-inf + inf) = NaN.
            m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp2(s - m_use[..., None])
            alpha = torch.exp2(m - m_use)
            l = l * alpha + p.sum(-1)
            acc = acc * alpha[..., None] + torch.matmul(p.to(v.dtype).to(acc_dtype), vf[..., k0:k1, :])
            m = m_new
        empty = l == 0
        l_safe = torch.where(empty, torch.ones_like(l), l)
        out_g[:, :, :, q0:q1] = (acc / l_safe[..., None]).to(q.dtype)
        lse_g[:, :, :, q0:q1] = torch.where(empty, torch.full_like(m, float("-inf")),
                                            m + torch.log2(l_safe)).float()
    return out, lse


def blockwise_attention_bwd(do, q, k, v, out, lse2, softmax_scale: float, shift: int,
                            window=(-1, -1), dlse2=None, block: int = _CPU_BLOCK):
    """Recomputing backward.  Returns dq, dk, dv in the input dtypes.

    lse2 is the forward's base-2 LSE.  dS = P * (dP - delta) with
    delta = rowsum(dO * O) - dlse2 * log2(e): the optional gradient of lse2
    enters only through delta, because d lse2_i / d s_ij = P_ij * log2(e)."""
    acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    b, hq, n_q, d = q.shape
    n_kv, n_k = k.shape[1], k.shape[2]
    group = hq // n_kv
    qg = _grouped(q, n_kv).to(acc_dtype)
    dog = _grouped(do, n_kv).to(acc_dtype)
    delta = (do.to(acc_dtype) * out.to(acc_dtype)).sum(-1)
    if dlse2 is not None:
        delta = delta - dlse2.to(acc_dtype) * LOG2E
    delta = delta.view(b, n_kv, group, n_q)
    # Rows with lse2 = -inf saw no key: +inf makes exp2(s - lse2) = 0 for them.
    lse_g = lse2.to(acc_dtype).reshape(b, n_kv, group, n_q)
    lse_g = torch.where(torch.isinf(lse_g), torch.full_like(lse_g, float("inf")), lse_g)
    kf, vf = k.to(acc_dtype)[:, :, None], v.to(acc_dtype)[:, :, None]
    dq = torch.zeros_like(qg)
    dk = torch.zeros(b, n_kv, n_k, d, dtype=acc_dtype, device=q.device)
    dv = torch.zeros(b, n_kv, n_k, v.shape[3], dtype=acc_dtype, device=q.device)
    masked = tuple(window) != (-1, -1)
    for q0 in range(0, n_q, block):
        q1 = min(n_q, q0 + block)
        qb, dob = qg[:, :, :, q0:q1], dog[:, :, :, q0:q1]
        qb2 = _scaled_q(qb, softmax_scale)
        lo, hi = _key_range(q0, q1, n_k, shift, window)
        for k0 in range((lo // block) * block, hi, block):
            k1 = min(n_k, k0 + block)
            kb, vb = kf[..., k0:k1, :], vf[..., k0:k1, :]
            s = torch.matmul(qb2, kb.transpose(-1, -2))
            if masked:
                keep = visible_mask(q1 - q0, k1 - k0, shift, window, q.device, q0, k0)
                s = s.masked_fill(~keep, float("-inf"))
            p = torch.exp2(s - lse_g[:, :, :, q0:q1, None])
            dv[:, :, k0:k1] += torch.matmul(p.to(v.dtype).to(acc_dtype).transpose(-1, -2), dob).sum(2)
            dp = torch.matmul(dob, vb.transpose(-1, -2))
            ds = p * (dp - delta[:, :, :, q0:q1, None])
            dq[:, :, :, q0:q1] += torch.matmul(ds, kb) * softmax_scale
            dk[:, :, k0:k1] += torch.matmul(ds.transpose(-1, -2), qb).sum(2) * softmax_scale
    return (dq.reshape(b, hq, n_q, d).to(q.dtype), dk.to(k.dtype), dv.to(v.dtype))
