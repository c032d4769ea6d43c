"""Public attention functions, input validation and the autograd.Function."""

from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence, Tuple, Union

import torch

from . import reference
from .kernels.launch import INTERPRET

__all__ = ["flash_attn_func", "scaled_dot_product_attention", "SUPPORTED_DTYPES", "MAX_HEAD_DIM"]

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256

# Debug aid for tests: fill every output buffer with NaN before the kernels
# write it, so an element they miss cannot pass as a plausible value.
_POISON = False

# Layouts the public functions accept, by the position of the sequence axis.
_SEQ_DIM_FLASH = 1  # (B, N, H, d)
_SEQ_DIM_SDPA = 2  # (B, H, N, d)
# CUDA caps the second grid axis, which holds batch x heads, at 65535 programs;
# larger batches are launched in chunks of whole batch entries.
MAX_GRID_Y = 65535

_LAYOUT_NAMES = {_SEQ_DIM_FLASH: "(batch, seqlen, nheads, headdim)",
                 _SEQ_DIM_SDPA: "(batch, nheads, seqlen, headdim)"}


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------

def _check_qkv(names: Sequence[str], tensors: Sequence[torch.Tensor], seq_dim: int) -> None:
    """Raise TypeError / ValueError / NotImplementedError naming the argument."""
    layout = _LAYOUT_NAMES[seq_dim]
    head_dim_axis = 3 - seq_dim  # the other of axes 1 and 2
    for name, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D {layout}, got shape {tuple(t.shape)}")
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} must be float16, bfloat16 or float32, got {t.dtype}")
    (qn, kn, vn), (q, k, v) = names, tensors
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"{qn}, {kn}, {vn} must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"{qn}, {kn}, {vn} must be on one device, got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape:
        raise ValueError(f"{kn} and {vn} must have the same shape {layout}, "
                         f"got {tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"batch sizes differ: {qn}.shape[0]={q.shape[0]}, {kn}.shape[0]={k.shape[0]}")
    d = q.shape[3]
    if k.shape[3] != d:
        raise ValueError(f"head dims differ: {qn}.shape[3]={d}, {kn}.shape[3]={k.shape[3]}")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise NotImplementedError(f"head dim {d} (from {qn}.shape[3]) is not supported; "
                                  f"supported: 1..{MAX_HEAD_DIM}")
    h_q, h_kv = q.shape[head_dim_axis], k.shape[head_dim_axis]
    if h_q > MAX_GRID_Y:
        raise NotImplementedError(f"{qn} has {h_q} heads ({qn}.shape[{head_dim_axis}]); at most {MAX_GRID_Y} "
                                  "are supported")
    if h_kv == 0 or h_q % h_kv != 0:
        raise ValueError(f"the number of query heads ({qn}.shape[{head_dim_axis}]={h_q}) must be a "
                         f"multiple of the number of key/value heads ({kn}.shape[{head_dim_axis}]={h_kv})")
    for name, t in zip(names, tensors):
        if t.stride(-1) != 1 and t.shape[-1] != 1:
            raise ValueError(f"{name} must have stride 1 in its last dimension, got strides "
                             f"{tuple(t.stride())}; call .contiguous() on it first")


def _check_scale(scale, name: str, head_dim: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"{name} must be a Python float or None, got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"{name} must be finite, got {scale}")
    return float(scale)


def _not_implemented(name: str, value, issue: str) -> None:
    raise NotImplementedError(f"{name}={value!r} is not supported yet ({issue}); "
                              "only the default value is accepted")


# ---------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------

def _use_triton(t: torch.Tensor) -> bool:
    """CUDA tensors, and CPU tensors when Triton's interpreter is enabled."""
    return t.is_cuda or (INTERPRET and t.device.type == "cpu")


def _new(shape, like: torch.Tensor, dtype=None) -> torch.Tensor:
    dtype = dtype or like.dtype
    if _POISON:
        return torch.full(shape, float("nan"), dtype=dtype, device=like.device)
    return torch.empty(shape, dtype=dtype, device=like.device)


def _bhnd(x: torch.Tensor, seq_dim: int) -> torch.Tensor:
    """View a tensor of the public layout as (B, H, N, d), no copy."""
    return x.transpose(1, 2) if seq_dim == _SEQ_DIM_FLASH else x


class _DeviceGuard:
    """Launch on the tensors' GPU, not the current one."""

    def __init__(self, t: torch.Tensor):
        self.ctx = torch.cuda.device(t.device) if t.is_cuda else None

    def __enter__(self):
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


def _batch_chunks(batch: int, heads: int):
    """Slices of the batch whose batch x heads programs fit one grid axis."""
    step = max(1, MAX_GRID_Y // max(heads, 1))
    return [slice(b0, min(batch, b0 + step)) for b0 in range(0, batch, step)]


def _forward(q, k, v, scale, causal_shift, seq_dim):
    """q, k, v in the public layout -> (out in q's layout, lse (B, Hq, Nq) float32)."""
    qh, kh, vh = (_bhnd(t, seq_dim) for t in (q, k, v))
    batch, h_q, n_q, _ = qh.shape
    out = _new(q.shape, q)
    lse = _new((batch, h_q, n_q), q, torch.float32)
    if out.numel() == 0:
        return out, lse
    if kh.shape[2] == 0:  # no key at all: every row is fully masked
        return out.zero_(), lse.fill_(float("-inf"))
    if _use_triton(q):
        from .kernels.fwd import attention_forward
        oh = _bhnd(out, seq_dim)
        with _DeviceGuard(q):
            for b in _batch_chunks(batch, h_q):
                attention_forward(qh[b], kh[b], vh[b], oh[b], lse[b], scale, causal_shift)
    else:
        o_ref, lse_ref = reference.blockwise_attention_fwd(qh, kh, vh, scale, causal_shift)
        _bhnd(out, seq_dim).copy_(o_ref)
        lse.copy_(lse_ref)
    return out, lse


def _backward(do, dlse, q, k, v, out, lse, scale, causal_shift, seq_dim):
    dq, dk, dv = _new(q.shape, q), _new(k.shape, k), _new(v.shape, v)
    if dq.numel() == 0 or dk.numel() == 0:  # no query or no key: nothing flows back
        return dq.zero_(), dk.zero_(), dv.zero_()
    if do is None:  # only the LSE was differentiated
        do = torch.zeros_like(out)
    if do.stride(-1) != 1:  # e.g. the expanded gradient of out.sum()
        do = do.contiguous()
    if dlse is not None:
        dlse = dlse.to(torch.float32).contiguous()
    qh, kh, vh, oh, doh = (_bhnd(t, seq_dim) for t in (q, k, v, out, do))
    if _use_triton(q):
        from .kernels.bwd import attention_backward
        dqh, dkh, dvh = (_bhnd(t, seq_dim) for t in (dq, dk, dv))
        with _DeviceGuard(q):
            for b in _batch_chunks(qh.shape[0], qh.shape[1]):
                attention_backward(doh[b], qh[b], kh[b], vh[b], oh[b], lse[b], dqh[b], dkh[b], dvh[b],
                                   scale, causal_shift, None if dlse is None else dlse[b])
    else:
        grads = reference.blockwise_attention_bwd(doh, qh, kh, vh, oh, lse, scale, causal_shift, dlse)
        for dst, src in zip((dq, dk, dv), grads):
            _bhnd(dst, seq_dim).copy_(src)
    return dq, dk, dv


class FlashAttnFunction(torch.autograd.Function):
    """out, lse = attention(q, k, v); only q, k, v, out, lse are saved."""

    @staticmethod
    def forward(ctx, q, k, v, scale: float, causal_shift: Optional[int], seq_dim: int):
        out, lse = _forward(q, k, v, scale, causal_shift, seq_dim)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale, ctx.causal_shift, ctx.seq_dim = scale, causal_shift, seq_dim
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _backward(do, dlse, q, k, v, out, lse, ctx.scale, ctx.causal_shift, ctx.seq_dim)
        return dq, dk, dv, None, None, None


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------

def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    *,
    return_lse: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, ...]]:
    """Exact attention ``softmax(q k^T * softmax_scale) v``, call-compatible with
    ``flash_attn.flash_attn_func``.

    Arguments:
        q: (batch_size, seqlen_q, nheads, headdim)
        k: (batch_size, seqlen_k, nheads_k, headdim)
        v: (batch_size, seqlen_k, nheads_k, headdim)
            float16, bfloat16 or float32, all three the same dtype and device;
            any strides as long as the last dimension has stride 1 (slices of a
            packed qkv tensor work without a copy).  headdim: 1..256.
        dropout_p: must be 0.0 (dropout is not implemented yet).
        softmax_scale: scaling of q k^T before the softmax; default 1/sqrt(headdim).
        causal: apply a causal mask.  When seqlen_q != seqlen_k the mask is
            aligned to the bottom-right corner: query i attends key j iff
            j <= i + seqlen_k - seqlen_q.  For seqlen_q = 2, seqlen_k = 5
            (1 = attended)::

                1 1 1 1 0
                1 1 1 1 1

            and for seqlen_q = 5, seqlen_k = 2::

                0 0
                0 0
                0 0
                1 0
                1 1

            A query row that attends no key (the first three rows above)
            outputs zeros, and its LSE is -inf.  Its gradients are zero.
        window_size, softcap, alibi_slopes: must keep their defaults
            ((-1, -1), 0.0, None); the variants are not implemented yet and
            raise NotImplementedError.
        deterministic: accepted for compatibility; the backward never uses
            atomics and is always deterministic.
        return_attn_probs: if True, return ``(out, softmax_lse, None)`` like
            flash-attn; the probability matrix is never materialised, so its
            slot is None.
        return_lse: if True, return ``(out, softmax_lse)``.  The LSE is
            differentiable: its gradient flows back into q and k.

    GQA / MQA: nheads must be a multiple of nheads_k.  Query head h reads
    key/value head ``h // (nheads // nheads_k)``: with 6 query heads and 2 KV
    heads, query heads 0, 1, 2 use KV head 0 and heads 3, 4, 5 use KV head 1.
    K and V are never repeated in memory; dk, dv sum over the group.

    Returns:
        out: (batch_size, seqlen_q, nheads, headdim), the dtype of q.
        softmax_lse (with return_lse or return_attn_probs):
            (batch_size, nheads, seqlen_q) float32, natural-log log-sum-exp of
            each row of the scaled scores.
    """
    _check_qkv(("q", "k", "v"), (q, k, v), _SEQ_DIM_FLASH)
    if dropout_p != 0.0:
        _not_implemented("dropout_p", dropout_p, "dropout")
    if tuple(window_size) != (-1, -1):
        _not_implemented("window_size", tuple(window_size), "sliding-window attention")
    if softcap != 0.0:
        _not_implemented("softcap", softcap, "logit soft-capping")
    if alibi_slopes is not None:
        _not_implemented("alibi_slopes", "<tensor>", "ALiBi")
    scale = _check_scale(softmax_scale, "softmax_scale", q.shape[-1])
    causal_shift = k.shape[1] - q.shape[1] if causal else None
    out, lse = FlashAttnFunction.apply(q, k, v, scale, causal_shift, _SEQ_DIM_FLASH)
    if return_attn_probs:
        return out, lse, None
    if return_lse:
        return out, lse
    return out


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """Drop-in for ``torch.nn.functional.scaled_dot_product_attention``.

    Arguments:
        query: (batch_size, nheads, seqlen_q, headdim)
        key:   (batch_size, nheads_k, seqlen_k, headdim)
        value: (batch_size, nheads_k, seqlen_k, headdim)
            float16, bfloat16 or float32; last dimension with stride 1;
            headdim 1..256.
        attn_mask: must be None (arbitrary masks are not implemented yet).
        dropout_p: must be 0.0.
        is_causal: causal mask aligned to the top-left corner, as in PyTorch:
            query i attends key j iff j <= i.  For seqlen_q = 2, seqlen_k = 4::

                1 0 0 0
                1 1 0 0

            (flash_attn_func's causal aligns bottom-right instead.)
        scale: default 1/sqrt(headdim).
        enable_gqa: must be True when nheads != nheads_k; query head h then
            reads key/value head ``h // (nheads // nheads_k)``.

    Returns:
        (batch_size, nheads, seqlen_q, headdim), the dtype of query.
    """
    _check_qkv(("query", "key", "value"), (query, key, value), _SEQ_DIM_SDPA)
    if attn_mask is not None:
        _not_implemented("attn_mask", "<tensor>", "arbitrary masks; use is_causal for causal masking")
    if dropout_p != 0.0:
        _not_implemented("dropout_p", dropout_p, "dropout")
    if query.shape[1] != key.shape[1] and not enable_gqa:
        raise ValueError(f"query has {query.shape[1]} heads and key/value have {key.shape[1]}: "
                         "pass enable_gqa=True for grouped-query attention")
    sm_scale = _check_scale(scale, "scale", query.shape[-1])
    out, _ = FlashAttnFunction.apply(query, key, value, sm_scale, 0 if is_causal else None,
                                     _SEQ_DIM_SDPA)
    return out
