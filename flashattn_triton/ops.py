"""The op layer: forward and backward as ``torch.library`` custom ops.

Every public entry point (dense, packed, SDPA layout) is a thin wrapper over
``flashattn_triton::fwd`` and ``flashattn_triton::bwd``.  They have fake
(meta) implementations, so ``torch.compile(fullgraph=True)`` traces through
them, and one autograd registration, so there is one backward path.

Op conventions (see _params.py for the option record):
* q (B, Nq, Hq, d), k (B, Nk, Hkv, d), v (B, Nk, Hkv, dv); packed batches
  drop B: q (total_q, Hq, d) with cu_seqlens.
* The forward returns (out, lse2): out like q with dv columns; lse2 float32
  (B, Hq, Nq) or (Hq, total_q) packed, in base 2 (lse * log2(e)), the form
  the kernels use.  The public functions convert it to natural log; the
  backward takes it back unchanged, so it recomputes exactly the forward's
  exponent.

Raw helpers for composite algorithms (ring attention, tests):
    flash_fwd(q, k, v, softmax_scale, causal, window_size=(-1, -1)) -> (out, lse)
    flash_bwd(dout, q, k, v, out, lse, softmax_scale, causal, window_size=(-1, -1)) -> (dq, dk, dv)
with the natural-log LSE (B, Hq, Nq); flash_bwd's lse is the whole row's
LSE (it may come from merging partial attentions), so P = exp(s - lse).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch

from . import reference
from ._dispatch import use_hopper_forward, use_triton
from ._params import AttnParams, window_bounds
from .reference import LN2, LOG2E

# Debug aid for tests: fill every output buffer with NaN before the kernels
# write it, so an element they miss cannot pass as a plausible value.
_POISON = False

# CUDA caps the second grid axis, which holds batch x heads, at 65535 programs;
# larger batches are launched in chunks of whole batch entries.
MAX_GRID_Y = 65535


def _new(shape, like: torch.Tensor, dtype=None) -> torch.Tensor:
    dtype = dtype or like.dtype
    if _POISON:
        return torch.full(shape, float("nan"), dtype=dtype, device=like.device)
    return torch.empty(shape, dtype=dtype, device=like.device)


def _bhnd(x: torch.Tensor, varlen: bool) -> torch.Tensor:
    """View (B, N, H, d) as (B, H, N, d), or packed (T, H, d) as (1, H, T, d); no copy."""
    return x.unsqueeze(0).transpose(1, 2) if varlen else x.transpose(1, 2)


def _lse_bhn(lse: torch.Tensor, varlen: bool) -> torch.Tensor:
    """(B, H, N) as is; packed (H, T) as (1, H, T)."""
    return lse.unsqueeze(0) if varlen else lse


def _batch_chunks(batch: int, heads: int):
    """Slices of the batch whose batch x heads programs fit one grid axis."""
    step = max(1, MAX_GRID_Y // max(heads, 1))
    return [slice(b0, min(batch, b0 + step)) for b0 in range(0, batch, step)]


def _lse_shape(q: torch.Tensor, varlen: bool):
    return (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])


class _DeviceGuard:
    """Launch on the tensors' GPU, not the current one."""

    def __init__(self, t: torch.Tensor):
        self.ctx = (torch.cuda.device(t.device) if t.is_cuda and t.device.index != torch.cuda.current_device()
                    else None)

    def __enter__(self):
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


def _causal_offset(n_q: int, n_k: int, bottom_right: bool) -> int:
    """Kernels use shift = n_k - n_q + offset: 0 for bottom-right, n_q - n_k for top-left."""
    return 0 if bottom_right else n_q - n_k


def _seq_slices(cu: torch.Tensor) -> List[Tuple[int, int]]:
    """CPU only (the blockwise path): (start, end) of each packed sequence."""
    offs = cu.tolist()
    return list(zip(offs[:-1], offs[1:]))


# ---------------------------------------------------------------------------
# Forward
# ---------------------------------------------------------------------------

@torch.library.custom_op("flashattn_triton::fwd", mutates_args=(), device_types=None)
def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
                  max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
                  window_left: int, window_right: int, bottom_right: bool
                  ) -> Tuple[torch.Tensor, torch.Tensor]:
    return _attention_fwd_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                   softmax_scale, window_left, window_right, bottom_right)


def _attention_fwd_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        softmax_scale, window_left, window_right, bottom_right):
    varlen = cu_seqlens_q is not None
    out = _new(q.shape[:-1] + (v.shape[-1],), q)
    lse = _new(_lse_shape(q, varlen), q, torch.float32)
    window = (window_left, window_right)
    if out.numel() == 0:
        return out, lse
    if k.shape[-3] == 0:  # no key at all: every row is fully masked
        return out.zero_(), lse.fill_(float("-inf"))
    qh, kh, vh, oh = (_bhnd(t, varlen) for t in (q, k, v, out))
    lh = _lse_bhn(lse, varlen)
    if use_triton(q):
        from .kernels.fwd import attention_forward
        with _DeviceGuard(q):
            if varlen:
                batch = cu_seqlens_q.shape[0] - 1
                for b in _batch_chunks(batch, q.shape[1]):
                    cu = (cu_seqlens_q[b.start:b.stop + 1], cu_seqlens_k[b.start:b.stop + 1])
                    attention_forward(qh, kh, vh, oh, lh, softmax_scale, 0, window_bounds(*window),
                                      cu, (max_seqlen_q, max_seqlen_k))
            else:
                offset = _causal_offset(q.shape[1], k.shape[1], bottom_right)
                if use_hopper_forward(q, k, v, window, offset):
                    from .kernels.hopper import hopper_attention_forward
                    if hopper_attention_forward(qh, kh, vh, oh, lh, softmax_scale,
                                                None if window_right < 0 else k.shape[1] - q.shape[1] + offset):
                        return out, lse
                for b in _batch_chunks(q.shape[0], q.shape[2]):
                    attention_forward(qh[b], kh[b], vh[b], oh[b], lh[b], softmax_scale, offset,
                                      window_bounds(*window))
    else:
        with torch.autocast(q.device.type, enabled=False):  # the math is fixed by the dtypes
            _blockwise_fwd(qh, kh, vh, oh, lh, cu_seqlens_q, cu_seqlens_k, softmax_scale, window,
                           bottom_right)
    return out, lse


def _blockwise_fwd(qh, kh, vh, oh, lh, cu_seqlens_q, cu_seqlens_k, softmax_scale, window, bottom_right):
    """The blockwise PyTorch path (CPU without the interpreter), one call per sequence."""
    if cu_seqlens_q is not None:
        for (q0, q1), (k0, k1) in zip(_seq_slices(cu_seqlens_q), _seq_slices(cu_seqlens_k)):
            o_ref, l_ref = reference.blockwise_attention_fwd(
                qh[:, :, q0:q1], kh[:, :, k0:k1], vh[:, :, k0:k1], softmax_scale,
                (k1 - k0) - (q1 - q0), window)
            oh[:, :, q0:q1].copy_(o_ref)
            lh[:, :, q0:q1].copy_(l_ref)
    else:
        n_q, n_k = qh.shape[2], kh.shape[2]
        shift = n_k - n_q + _causal_offset(n_q, n_k, bottom_right)
        o_ref, l_ref = reference.blockwise_attention_fwd(qh, kh, vh, softmax_scale, shift, window)
        oh.copy_(o_ref)
        lh.copy_(l_ref)


@attention_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
      window_left, window_right, bottom_right):
    varlen = cu_seqlens_q is not None
    out = q.new_empty(q.shape[:-1] + (v.shape[-1],))
    lse = q.new_empty(_lse_shape(q, varlen), dtype=torch.float32)
    return out, lse


# ---------------------------------------------------------------------------
# Backward
# ---------------------------------------------------------------------------

@torch.library.custom_op("flashattn_triton::bwd", mutates_args=(), device_types=None)
def attention_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  out: torch.Tensor, lse: torch.Tensor, dlse: Optional[torch.Tensor],
                  cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
                  max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
                  window_left: int, window_right: int, bottom_right: bool
                  ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _attention_bwd_impl(dout, q, k, v, out, lse, dlse, cu_seqlens_q, cu_seqlens_k,
                                   max_seqlen_q, max_seqlen_k, softmax_scale, window_left,
                                   window_right, bottom_right)


def _attention_bwd_impl(dout, q, k, v, out, lse, dlse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                        max_seqlen_k, softmax_scale, window_left, window_right, bottom_right):
    varlen = cu_seqlens_q is not None
    dq, dk, dv = _new(q.shape, q), _new(k.shape, k), _new(v.shape, v)
    if dq.numel() == 0 or dk.numel() == 0:  # no query or no key: nothing flows back
        return dq.zero_(), dk.zero_(), dv.zero_()
    if dout.stride(-1) != 1:  # e.g. the expanded gradient of out.sum()
        dout = dout.contiguous()
    if dlse is not None:
        dlse = dlse.to(torch.float32).contiguous()
        if dlse.stride() != lse.stride():
            dlse = dlse.as_strided(lse.shape, lse.stride()).copy_(dlse)
    window = (window_left, window_right)
    qh, kh, vh, oh, doh, dqh, dkh, dvh = (_bhnd(t, varlen) for t in (q, k, v, out, dout, dq, dk, dv))
    lh = _lse_bhn(lse, varlen)
    dlh = None if dlse is None else _lse_bhn(dlse, varlen)
    if use_triton(q):
        from .kernels.bwd import attention_backward
        with _DeviceGuard(q):
            if varlen:
                batch = cu_seqlens_q.shape[0] - 1
                for b in _batch_chunks(batch, q.shape[1]):
                    cu = (cu_seqlens_q[b.start:b.stop + 1], cu_seqlens_k[b.start:b.stop + 1])
                    attention_backward(doh, qh, kh, vh, oh, lh, dqh, dkh, dvh, softmax_scale, 0,
                                       window_bounds(*window), dlh, cu, (max_seqlen_q, max_seqlen_k))
            else:
                offset = _causal_offset(q.shape[1], k.shape[1], bottom_right)
                for b in _batch_chunks(q.shape[0], q.shape[2]):
                    attention_backward(doh[b], qh[b], kh[b], vh[b], oh[b], lh[b], dqh[b], dkh[b], dvh[b],
                                       softmax_scale, offset, window_bounds(*window),
                                       None if dlh is None else dlh[b])
    else:
        with torch.autocast(q.device.type, enabled=False):  # the math is fixed by the dtypes
            _blockwise_bwd(doh, qh, kh, vh, oh, lh, dlh, dqh, dkh, dvh, cu_seqlens_q, cu_seqlens_k,
                           softmax_scale, window, bottom_right)
    return dq, dk, dv


def _blockwise_bwd(doh, qh, kh, vh, oh, lh, dlh, dqh, dkh, dvh, cu_seqlens_q, cu_seqlens_k,
                   softmax_scale, window, bottom_right):
    if cu_seqlens_q is not None:
        dkh.zero_()
        dvh.zero_()
        dqh.zero_()
        for (q0, q1), (k0, k1) in zip(_seq_slices(cu_seqlens_q), _seq_slices(cu_seqlens_k)):
            if q1 == q0 or k1 == k0:
                continue
            grads = reference.blockwise_attention_bwd(
                doh[:, :, q0:q1], qh[:, :, q0:q1], kh[:, :, k0:k1], vh[:, :, k0:k1], oh[:, :, q0:q1],
                lh[:, :, q0:q1], softmax_scale, (k1 - k0) - (q1 - q0), window,
                None if dlh is None else dlh[:, :, q0:q1])
            dqh[:, :, q0:q1].copy_(grads[0])
            dkh[:, :, k0:k1].copy_(grads[1])
            dvh[:, :, k0:k1].copy_(grads[2])
    else:
        n_q, n_k = qh.shape[2], kh.shape[2]
        shift = n_k - n_q + _causal_offset(n_q, n_k, bottom_right)
        grads = reference.blockwise_attention_bwd(doh, qh, kh, vh, oh, lh, softmax_scale, shift,
                                                  window, dlh)
        for dst, src in zip((dqh, dkh, dvh), grads):
            dst.copy_(src)


@attention_bwd.register_fake
def _(dout, q, k, v, out, lse, dlse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
      softmax_scale, window_left, window_right, bottom_right):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


# ---------------------------------------------------------------------------
# Autograd: one registration for every entry point
# ---------------------------------------------------------------------------

_OPTION_NAMES = ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "softmax_scale",
                 "window_left", "window_right", "bottom_right")


def _setup_context(ctx, inputs, output):
    q, k, v = inputs[:3]
    out, lse = output
    ctx.options = inputs[3:]
    ctx.save_for_backward(q, k, v, out, lse)


def _backward_with(bwd, ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    if dout is None:  # only the LSE was differentiated
        dout = torch.zeros_like(out)
    dq, dk, dv = bwd(dout, q, k, v, out, lse, dlse, *ctx.options)
    return (dq, dk, dv) + (None,) * len(_OPTION_NAMES)


def _backward(ctx, dout, dlse):
    return _backward_with(attention_bwd, ctx, dout, dlse)


attention_fwd.register_autograd(_backward, setup_context=_setup_context)


class _EagerAttention(torch.autograd.Function):
    """The same forward, backward and autograd rule as the custom ops above,
    entered without the dispatcher's Python custom-op machinery, which costs
    60-200 us of host time per call (measured: bench_overhead.py).  Used in
    eager mode only; torch.compile traces the custom ops."""

    @staticmethod
    def forward(ctx, q, k, v, *options):
        out, lse = _attention_fwd_impl(q, k, v, *options)
        _setup_context(ctx, (q, k, v) + options, (out, lse))
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        return _backward_with(_attention_bwd_impl, ctx, dout, dlse)


# ---------------------------------------------------------------------------
# Entry used by the public functions, and raw helpers
# ---------------------------------------------------------------------------

def attention_base2(q, k, v, params: AttnParams):
    """(out, lse2): the forward op with autograd; lse2 in base 2 (see module doc)."""
    if torch.compiler.is_compiling():
        return attention_fwd(q, k, v, *params.op_args())
    return _EagerAttention.apply(q, k, v, *params.op_args())


def attention(q, k, v, params: AttnParams):
    """(out, lse) with lse in natural log; differentiable in q, k, v and lse."""
    out, lse2 = attention_base2(q, k, v, params)
    return out, lse2 * LN2


def flash_fwd(q, k, v, softmax_scale: float, causal: bool, window_size=(-1, -1)):
    """Raw forward, no autograd: (out, lse natural log (B, Hq, Nq))."""
    left, right = window_size
    out, lse2 = attention_fwd(q, k, v, None, None, 0, 0, float(softmax_scale),
                              left, 0 if causal else right, True)
    return out, lse2 * LN2


def flash_bwd(dout, q, k, v, out, lse, softmax_scale: float, causal: bool, window_size=(-1, -1)):
    """Raw backward, no autograd: (dq, dk, dv) given the row LSE (natural log)."""
    left, right = window_size
    lse2 = (lse.float() * LOG2E).contiguous()
    return attention_bwd(dout, q, k, v, out, lse2, None, None, None, 0, 0, float(softmax_scale),
                         left, 0 if causal else right, True)


__all__ = ["attention", "attention_fwd", "attention_bwd", "flash_fwd", "flash_bwd"]
