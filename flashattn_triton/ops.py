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
* Compensated LSE (dense calls with a floating-point attn_bias only,
  _params.compensated_lse): lse2 is float32 (B, Hq, 2, Nq) instead, [:, :, 0]
  the usual lse2 = fl(m + log2(l)) and [:, :, 1] its residual
  lo = (m - lse2) + log2(l) (0 for rows that saw no key), and the backward
  forms P = exp2((s - lse2) - lo).  A bias row of one huge finite value
  (-1e9, finfo.min) and no moderate one puts m where a float32 ulp is 128
  or more: lse2 == m there, and exp2(s - lse2) would give every key 1
  instead of 1 / l.  The two planes travel as one tensor (autograd's saved
  tensors, saved-tensor hooks, torch.compile's fake implementation, batch
  chunks all see one output); the backward takes any layout of it (a copy
  where it is not contiguous), and only plane 0's gradient (lo is a
  rounding residual: hi + lo varies as hi does).  The only caller that
  passes attn_bias (api.scaled_dot_product_attention) discards the LSE.

Variants (after the options above; every one off by default): softcap,
alibi_slopes (Hq,) / (B, Hq), sinks (Hq,) float32, attn_bias (4-D,
broadcastable to (B, Hq, Nq, Nk), bool or float; dense batches only),
dropout_p with rng_seed ((1,) int64 on the device, _params.draw_dropout_seed);
after deterministic, attention_chunk (chunked attention's chunk size, 0 =
off: _params.py; the portable kernels only).
The backward returns (dq, dk, dv, dsinks, dbias): dsinks (Hq,) float32 when
sinks are given, dbias shaped like attn_bias when want_dbias, else empty.

Raw helpers for composite algorithms (ring attention, tests):
    flash_fwd(q, k, v, softmax_scale, causal, window_size=(-1, -1), softcap=0.0, *, shift=None,
              alibi_slopes=None, dropout_p=0.0, rng_seed=None, philox_offset=0) -> (out, lse)
    flash_bwd(dout, q, k, v, out, lse, softmax_scale, causal, window_size=(-1, -1), softcap=0.0,
              *, the same keywords) -> (dq, dk, dv)
    flash_varlen_fwd / flash_varlen_bwd: the same for packed batches (cu_seqlens
              and max_seqlen after v), doc_shift=(mul, add) instead of shift
with the natural-log LSE (B, Hq, Nq), packed (Hq, total_q); the backward's
lse is the whole row's LSE (it may come from merging partial attentions), so
P = exp(s - lse).  shift places the mask's and ALiBi's diagonal explicitly
(a block of a longer sequence), doc_shift one per packed sequence
(shift_b = n_k_b - n_q_b + mul * n_k_b + add); with either, or philox_offset, they call the op layer's
forward / backward functions directly (keyword-only arguments the custom
ops and the call plans never pass), so ordinary calls are unchanged.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Dict, List, Optional, Tuple, cast

import torch
import torch.autograd.forward_ad as _fwd_ad

from . import _dispatch, _prefetch, reference
from ._dispatch import (hopper_forward_takes_mask, hopper_takes_variants, sinks_after_hopper_forward,
                        use_hopper_backward, use_hopper_forward, use_hopper_varlen_backward,
                        use_hopper_varlen_forward,
                        use_triton)
from ._params import AttnParams, has_variants, lse_shape, window_bounds
from .kernels import fastlaunch
from .kernels.launch import env_snapshot
from .kernels.score import NO_MODS, KernelMods
from .reference import LN2, LOG2E, BlockMods

# CUDA caps the second grid axis, which holds batch x heads, at 65535 programs;
# larger batches are launched in chunks of whole batch entries.
MAX_GRID_Y = 65535


def _new(shape, like: torch.Tensor, dtype=None) -> torch.Tensor:
    """An output buffer on like's device (and in its dtype unless given): NaN
    under fastlaunch.POISON (tests), so an element the kernels miss cannot
    pass as a plausible value."""
    return fastlaunch.empty(shape, dtype or like.dtype, like.device)


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


def _varlen_chunks(cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, heads: int):
    """(batch slice, (cu_q, cu_k)) per launch of a packed batch: the offsets are
    sliced views, so chunking needs no copy and no host sync."""
    for b in _batch_chunks(cu_seqlens_q.shape[0] - 1, heads):
        yield b, (cu_seqlens_q[b.start:b.stop + 1], cu_seqlens_k[b.start:b.stop + 1])


def _split_lse(lse: torch.Tensor):
    """(lse2, lo): the compensated LSE's planes (module doc) as (B, Hq, Nq)
    views, lo Nq elements after lse2 as the kernels read it (a contiguous
    copy first where a saved-tensor hook gave it another layout); (lse, None)
    for the usual LSE."""
    if lse.dim() != 4:
        return lse, None
    n = lse.shape[3]
    if not (lse.is_contiguous() and lse.stride(3) == 1 and lse.stride(2) == n):
        lse = torch.empty(lse.shape, dtype=torch.float32, device=lse.device).copy_(lse)
    return lse[:, :, 0], lse[:, :, 1]


_NO_GUARD = contextlib.nullcontext()


def _device_guard(t: torch.Tensor):
    """Launch on the tensor's GPU, not the current one (a context manager)."""
    if t.is_cuda and t.device.index != torch.cuda.current_device():
        return torch.cuda.device(t.device)
    return _NO_GUARD


class _kernels:
    """The kernels' launch functions, imported at the first launch (importing
    them costs Triton and Gluon imports; a per-call import statement costs
    microseconds)."""

    forward = backward = hopper_forward = bwd = hopper = None  # bwd, hopper: the modules

    @classmethod
    def load(cls) -> None:
        from .kernels import bwd, hopper
        from .kernels.fwd import attention_forward
        cls.backward, cls.hopper_forward = bwd.attention_backward, hopper.hopper_forward_flash
        cls.bwd, cls.hopper = bwd, hopper
        _install_direct_launches()
        cls.forward = attention_forward  # last: the others are set once this is


_DIRECT_INSTALLED = False


def _install_direct_launches() -> None:
    """The kernels that kernels/bwd.py launches itself (not through a
    Launcher) get the launch fast path and compile-only mode too
    (kernels/fastlaunch.py).  A recording replays only launches made through
    it.  (kernels/combine.py installs its merge kernel at import: the merge
    that folds sinks in after a Hopper forward, _fold_sinks, is one of a
    planned call's launches, and the separate decode combine one of a
    planned decode call's.)"""
    global _DIRECT_INSTALLED
    if _DIRECT_INSTALLED:
        return
    from .kernels import bwd
    for name, obj in list(vars(bwd).items()):
        if name.startswith("_bwd"):  # the kernels, not the helpers they call
            fastlaunch.install(obj)
    _DIRECT_INSTALLED = True


def _causal_offset(n_q: int, n_k: int, bottom_right: bool) -> int:
    """Kernels use shift = n_k - n_q + offset: 0 for bottom-right, n_q - n_k for top-left."""
    return 0 if bottom_right else n_q - n_k


def _seq_slices(cu: torch.Tensor) -> List[Tuple[int, int]]:
    """CPU only (the blockwise path): (start, end) of each packed sequence."""
    offs = cu.tolist()
    return list(zip(offs[:-1], offs[1:]))


# ---------------------------------------------------------------------------
# Variant arguments per path
# ---------------------------------------------------------------------------

def _alibi_bh(alibi_slopes: Optional[torch.Tensor], batch: int, heads: int):
    """Slopes as a (B, Hq) view: per-head slopes get stride 0 over the batch."""
    if alibi_slopes is None:
        return None
    return alibi_slopes if alibi_slopes.dim() == 2 else alibi_slopes[None].expand(batch, heads)


def _kernel_mods(softcap, alibi, sinks, attn_bias, dropout_p, rng_seed, philox_offset=0) -> KernelMods:
    """The launch's variants; philox_offset (ring attention's blocks) shifts
    the dropout counters, and only matters with dropout."""
    if not has_variants(softcap, alibi, sinks, attn_bias, dropout_p):
        return NO_MODS
    return KernelMods(float(softcap), alibi, sinks, attn_bias, float(dropout_p),
                      rng_seed if dropout_p > 0 else None, philox_offset if dropout_p > 0 else 0)


def _sinks_lse2(sinks: torch.Tensor, lse: torch.Tensor, varlen: bool) -> torch.Tensor:
    """The base-2 LSE of rows that see no key: the sink's logit alone."""
    s2 = sinks.float() * LOG2E
    return (s2[:, None] if varlen else s2[None, :, None]).expand(lse.shape)


def _fold_sinks(out: torch.Tensor, lse: torch.Tensor, sinks: torch.Tensor) -> None:
    """A dense attention's result (out (B, N, H, dv), lse (B, H, N) in base
    2) made the result with each head's sink in its softmax denominator, in
    place: the sink is a second part of output 0 and LSE sink * log2(e), so
    lse2' = log2(2^lse2 + 2^sink2) and out' = out * 2^(lse2 - lse2') (the
    merge of kernels/combine.py, one part, base-2 LSEs); rows that saw no key
    keep out = 0 and get lse2' = sink2, as the kernels with sinks give."""
    from .kernels.combine import combine_partials
    oh = out.transpose(1, 2)
    # One part, nothing shared between rows: a plain streaming pass, 16 rows
    # per program (not the 4 that spread many parts' reads).
    combine_partials(oh[None], lse[None], oh, lse, sinks.float().contiguous(), base2=True, rows_per_program=16)


def _reduce_to(full: torch.Tensor, shape) -> torch.Tensor:
    """Sum a per-(b, h, i, j) gradient over the dims where the input broadcast (size 1)."""
    dims = [i for i, (n, m) in enumerate(zip(shape, full.shape)) if n == 1 and m != 1]
    return full.sum(dims, keepdim=True) if dims else full


# ---------------------------------------------------------------------------
# Forward
# ---------------------------------------------------------------------------

@torch.library.custom_op("flashattn_triton::fwd", mutates_args=(), device_types=None)
def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
                  max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
                  window_left: int, window_right: int, bottom_right: bool,
                  softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None,
                  sinks: Optional[torch.Tensor] = None, attn_bias: Optional[torch.Tensor] = None,
                  dropout_p: float = 0.0, rng_seed: Optional[torch.Tensor] = None,
                  deterministic: bool = False, attention_chunk: int = 0,
                  ) -> Tuple[torch.Tensor, torch.Tensor]:
    return _attention_fwd_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               softmax_scale, window_left, window_right, bottom_right, softcap,
                               alibi_slopes, sinks, attn_bias, dropout_p, rng_seed, deterministic,
                               attention_chunk)


def _attention_fwd_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        softmax_scale, window_left, window_right, bottom_right, softcap=0.0,
                        alibi_slopes=None, sinks=None, attn_bias=None, dropout_p=0.0, rng_seed=None,
                        deterministic=False, attention_chunk=0, *, shift=None, philox_offset=0, doc_shift=None):
    """(out, lse2) in fresh buffers.  deterministic concerns the backward only.
    shift, philox_offset, doc_shift: see _fwd_into (internal; the ops never pass them)."""
    varlen = cu_seqlens_q is not None
    out = _new(q.shape[:-1] + (v.shape[-1],), q)
    lse = _new(lse_shape(q, varlen, attn_bias), q, torch.float32)
    _fwd_into(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
              window_left, window_right, bottom_right, softcap, alibi_slopes, sinks, attn_bias, dropout_p,
              rng_seed, False, attention_chunk, shift=shift, philox_offset=philox_offset, doc_shift=doc_shift)
    return out, lse


def _fwd_into(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
              softmax_scale, window_left, window_right, bottom_right, softcap=0.0,
              alibi_slopes=None, sinks=None, attn_bias=None, dropout_p=0.0, rng_seed=None,
              deterministic=False, attention_chunk=0, *, shift=None, philox_offset=0, doc_shift=None):
    """The forward into out and lse (fresh buffers shaped as _attention_fwd_impl makes them;
    a 4-D lse: the compensated LSE, module doc).  attention_chunk: chunked
    attention's chunk size (0: off; _params.py), relative to the mask's diagonal.

    Internal keyword arguments of composite algorithms (ring attention):
    shift (dense batches), the diagonal of the mask and of ALiBi given
    explicitly (row i sees key j iff i + shift - left <= j <= i + shift +
    right; ALiBi -slope * |i + shift - j|) instead of by bottom_right;
    doc_shift = (mul, add) (packed batches), the diagonal of sequence b
    shift_b = n_k_b - n_q_b + mul * n_k_b + add (None: (0, 0), bottom-right);
    philox_offset, added to every dropout counter (kernels/score.py)."""
    varlen = cu_seqlens_q is not None
    if varlen and attn_bias is not None:
        raise ValueError("attn_bias is not supported with cu_seqlens (packed batches)")
    window = (window_left, window_right)
    if out.numel() == 0:
        return
    lse, lse_lo = _split_lse(lse)  # (fresh buffers: views, no copy)
    if k.shape[-3] == 0:  # no key at all: every row is fully masked (but for a sink)
        out.zero_()
        if lse_lo is not None:
            lse_lo.zero_()
        if sinks is not None:
            lse.copy_(_sinks_lse2(sinks, lse, varlen))
        else:
            lse.fill_(float("-inf"))
        return
    variants = has_variants(softcap, alibi_slopes, sinks, attn_bias, dropout_p)
    if use_triton(q):
        if _kernels.forward is None:
            _kernels.load()
        with _device_guard(q):
            if not varlen:
                offset = (_causal_offset(q.shape[1], k.shape[1], bottom_right) if shift is None
                          else shift - (k.shape[1] - q.shape[1]))
                diagonal = k.shape[1] - q.shape[1] + offset
                # Sinks alone (where _dispatch says so) are folded in after a
                # Hopper forward run without them (which then sees a plain call).
                fold = (sinks_after_hopper_forward(sinks, varlen, q.shape[-1])
                        and not has_variants(softcap, alibi_slopes, None, attn_bias, dropout_p))
                kernel_sinks = None if fold else sinks
                kernel_variants = variants and not fold  # (a folded call's only variant is its sinks)
                # Variants: dropout alone may take it (opt-in), as a last
                # argument; a boolean mask alone (opt-in), as mask=.
                masked = kernel_variants and hopper_forward_takes_mask(softcap, alibi_slopes, kernel_sinks,
                                                                       attn_bias, dropout_p)
                if lse_lo is None and ((not kernel_variants or masked
                     or hopper_takes_variants(softcap, alibi_slopes, kernel_sinks, attn_bias, dropout_p, window,
                                              n_q=q.shape[1], head_dim=q.shape[-1], gqa=k.shape[2] != q.shape[2]))
                        and use_hopper_forward(q, k, v, window, offset, plain=not kernel_variants,
                                               attention_chunk=attention_chunk)
                        and _kernels.hopper_forward(
                            q, k, v, out, lse, softmax_scale, None if window_right < 0 else diagonal,
                            None if window_left < 0 else (window_left, diagonal),
                            *(((rng_seed, dropout_p, philox_offset),) if kernel_variants and not masked else ()),
                            **({"mask": attn_bias} if masked else {}))):
                    if fold:
                        _fold_sinks(out, lse, sinks)
                    return
            elif (not variants and lse_lo is None and doc_shift is None
                  and use_hopper_varlen_forward(q, v, window, attention_chunk, max(max_seqlen_q, max_seqlen_k))
                  and _kernels.hopper.hopper_forward_varlen(
                      q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                      window_right == 0, window_left)):
                return  # a packed batch on the Hopper forward (bottom-right diagonals, as below)
            attention_forward = _kernels.forward
            qh, kh, vh, oh = (_bhnd(t, varlen) for t in (q, k, v, out))
            lh = _lse_bhn(lse, varlen)
            if varlen:
                batch = cu_seqlens_q.shape[0] - 1
                mods = _kernel_mods(softcap, _alibi_bh(alibi_slopes, batch, q.shape[1]), sinks, None,
                                    dropout_p, rng_seed, philox_offset)
                mul, add = doc_shift or (0, 0)
                for b, cu in _varlen_chunks(cu_seqlens_q, cu_seqlens_k, q.shape[1]):
                    attention_forward(qh, kh, vh, oh, lh, softmax_scale, add, window_bounds(*window),
                                      cu, (max_seqlen_q, max_seqlen_k), mods.chunk(b, 0), shift_mul=mul,
                                      chunk=attention_chunk)
            else:
                mods = _kernel_mods(softcap, _alibi_bh(alibi_slopes, q.shape[0], q.shape[2]), sinks,
                                    attn_bias, dropout_p, rng_seed, philox_offset)
                per_entry = q.shape[2] * q.shape[1] * k.shape[1]  # dropout counters per batch entry
                chunks = _batch_chunks(q.shape[0], q.shape[2])
                if len(chunks) == 1:  # one launch: the views themselves (what slicing would give)
                    attention_forward(qh, kh, vh, oh, lh, softmax_scale, offset, window_bounds(*window),
                                      mods=mods, chunk=attention_chunk,
                                      **({} if lse_lo is None else {"lse_lo": lse_lo}))
                    return
                for b in chunks:
                    attention_forward(qh[b], kh[b], vh[b], oh[b], lh[b], softmax_scale, offset,
                                      window_bounds(*window), mods=mods.chunk(b, per_entry), chunk=attention_chunk,
                                      **({} if lse_lo is None else {"lse_lo": lse_lo[b]}))
    else:
        qh, kh, vh, oh = (_bhnd(t, varlen) for t in (q, k, v, out))
        lh = _lse_bhn(lse, varlen)
        with torch.autocast(q.device.type, enabled=False):  # the math is fixed by the dtypes
            _blockwise_fwd(qh, kh, vh, oh, lh, cu_seqlens_q, cu_seqlens_k, max_seqlen_k, softmax_scale,
                           window, bottom_right, softcap, alibi_slopes, sinks, attn_bias, dropout_p,
                           rng_seed, shift, philox_offset, doc_shift, lse_lo, attention_chunk)


def _blockwise_fwd(qh, kh, vh, oh, lh, cu_seqlens_q, cu_seqlens_k, max_seqlen_k, softmax_scale,
                   window, bottom_right, softcap, alibi_slopes, sinks, attn_bias, dropout_p, rng_seed,
                   shift=None, philox_offset=0, doc_shift=None, lse_lo=None, chunk=0):
    """The blockwise PyTorch path (CPU without the interpreter), one call per
    sequence; lse_lo: the compensated LSE's residual plane (dense), or None;
    chunk: attention_chunk."""
    if cu_seqlens_q is not None:
        seqs = list(zip(_seq_slices(cu_seqlens_q), _seq_slices(cu_seqlens_k)))
        alibi = _alibi_bh(alibi_slopes, len(seqs), qh.shape[1])
        mul, add = doc_shift or (0, 0)
        for i, ((q0, q1), (k0, k1)) in enumerate(seqs):
            if q1 == q0:
                continue
            mods = BlockMods(softcap, None if alibi is None else alibi[i:i + 1], sinks, None,
                             dropout_p, rng_seed, qh.shape[2], max_seqlen_k, q0, philox_offset)
            o_ref, l_ref = reference.blockwise_attention_fwd(
                qh[:, :, q0:q1], kh[:, :, k0:k1], vh[:, :, k0:k1], softmax_scale,
                (k1 - k0) - (q1 - q0) + mul * (k1 - k0) + add, window, mods=mods, chunk=chunk)
            oh[:, :, q0:q1].copy_(o_ref)
            lh[:, :, q0:q1].copy_(l_ref)
    else:
        n_q, n_k = qh.shape[2], kh.shape[2]
        if shift is None:
            shift = n_k - n_q + _causal_offset(n_q, n_k, bottom_right)
        mods = BlockMods(softcap, _alibi_bh(alibi_slopes, qh.shape[0], qh.shape[1]), sinks, attn_bias,
                         dropout_p, rng_seed, rng_offset=philox_offset)
        res = reference.blockwise_attention_fwd(qh, kh, vh, softmax_scale, shift, window, mods=mods,
                                                with_lo=lse_lo is not None, chunk=chunk)
        oh.copy_(res[0])
        lh.copy_(res[1])
        if lse_lo is not None:
            lse_lo.copy_(res[2])


@attention_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
      window_left, window_right, bottom_right, softcap=0.0, alibi_slopes=None, sinks=None,
      attn_bias=None, dropout_p=0.0, rng_seed=None, deterministic=False, attention_chunk=0):
    varlen = cu_seqlens_q is not None
    out = q.new_empty(q.shape[:-1] + (v.shape[-1],))
    lse = q.new_empty(lse_shape(q, varlen, attn_bias), dtype=torch.float32)
    return out, lse


# ---------------------------------------------------------------------------
# Packed queries against a paged K / V (forward only)
# ---------------------------------------------------------------------------

@torch.library.custom_op("flashattn_triton::varlen_paged_fwd", mutates_args=(), device_types=None)
def varlen_paged_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                     block_table: torch.Tensor, softmax_scale: float, window_left: int, window_right: int,
                     softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None,
                     sinks: Optional[torch.Tensor] = None, attention_chunk: int = 0,
                     ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(out, lse2) of packed queries q (total_q, Hq, d) against page pools k
    (num_blocks, page_size, Hkv, d) and v (num_blocks, page_size, Hkv, dv):
    key j of sequence b (n_k_b = cu_seqlens_k[b + 1] - cu_seqlens_k[b] keys)
    lies in page block_table[b, j // page_size], row j % page_size.  Options
    as the forward op's (bottom-right alignment).  No autograd registration:
    the public function refuses calls that would need a gradient."""
    out = _new(q.shape[:-1] + (v.shape[-1],), q)
    lse = _new((q.shape[1], q.shape[0]), q, torch.float32)
    if out.numel() == 0:
        return out, lse
    if k.shape[0] * k.shape[1] == 0:  # an empty pool: no sequence has a key
        out.zero_()
        if sinks is not None:
            lse.copy_(_sinks_lse2(sinks, lse, True))
        else:
            lse.fill_(float("-inf"))
        return out, lse
    if use_triton(q):
        if _kernels.forward is None:
            _kernels.load()
        attention_forward: Any = _kernels.forward
        heads = q.shape[1]
        mods = _kernel_mods(softcap, _alibi_bh(alibi_slopes, cu_seqlens_q.shape[0] - 1, heads), sinks, None,
                            0.0, None)
        # The pools as (num_blocks, Hkv, page_size, d) views: the page stride
        # in the batch stride's place.
        kh, vh = k.transpose(1, 2), v.transpose(1, 2)
        if block_table.shape[1] == 0:  # (no sequence has a key) the kernel reads entry 0 ahead of its loops
            block_table = block_table.new_zeros(block_table.shape[0], 1)
        with _device_guard(q):
            for b, cu in _varlen_chunks(cu_seqlens_q, cu_seqlens_k, heads):
                attention_forward(_bhnd(q, True), kh, vh, _bhnd(out, True), _lse_bhn(lse, True), softmax_scale, 0,
                                  window_bounds(window_left, window_right), cu, (max_seqlen_q, max_seqlen_k),
                                  mods.chunk(b, 0), chunk=attention_chunk, block_table=block_table[b])
    else:  # CPU without the interpreter: gather the pages, then the packed forward
        kp, vp, cu_k = _gather_pages(k, v, cu_seqlens_k, block_table)
        _fwd_into(q, kp, vp, out, lse, cu_seqlens_q, cu_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                  window_left, window_right, True, softcap, alibi_slopes, sinks, attention_chunk=attention_chunk)
    return out, lse


def _gather_pages(k: torch.Tensor, v: torch.Tensor, cu_seqlens_k: torch.Tensor, block_table: torch.Tensor):
    """The paged keys and values as packed rows (total_k, Hkv, d) with their
    offsets (host reads: the CPU path only)."""
    page = k.shape[1]
    lengths = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).tolist()
    pos = [torch.arange(n, device=k.device) for n in lengths]
    pages = torch.cat([block_table[b, j // page].long() for b, j in enumerate(pos)])
    rows = torch.cat([j % page for j in pos])
    cu_k = torch.zeros(len(lengths) + 1, dtype=torch.int32, device=k.device)
    cu_k[1:] = torch.tensor(lengths, dtype=torch.int32).cumsum(0)
    return k[pages, rows], v[pages, rows], cu_k


@varlen_paged_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_table, softmax_scale,
      window_left, window_right, softcap=0.0, alibi_slopes=None, sinks=None, attention_chunk=0):
    return q.new_empty(q.shape[:-1] + (v.shape[-1],)), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


# ---------------------------------------------------------------------------
# Backward
# ---------------------------------------------------------------------------

def _bwd_extras(q, sinks, attn_bias, want_dbias):
    """Fresh dsinks / dbias outputs (empty when not asked for)."""
    dsinks = (torch.zeros(sinks.shape, dtype=torch.float32, device=q.device) if sinks is not None
              else q.new_empty(0, dtype=torch.float32))
    dbias = (torch.zeros(attn_bias.shape, dtype=attn_bias.dtype, device=q.device) if want_dbias
             else q.new_empty(0, dtype=torch.float32))
    return dsinks, dbias


@torch.library.custom_op("flashattn_triton::bwd", mutates_args=(), device_types=None)
def attention_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  out: torch.Tensor, lse: torch.Tensor, dlse: Optional[torch.Tensor],
                  cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
                  max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
                  window_left: int, window_right: int, bottom_right: bool,
                  softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None,
                  sinks: Optional[torch.Tensor] = None, attn_bias: Optional[torch.Tensor] = None,
                  dropout_p: float = 0.0, rng_seed: Optional[torch.Tensor] = None,
                  want_dbias: bool = False, deterministic: bool = False, attention_chunk: int = 0,
                  ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _attention_bwd_impl(dout, q, k, v, out, lse, dlse, cu_seqlens_q, cu_seqlens_k,
                               max_seqlen_q, max_seqlen_k, softmax_scale, window_left, window_right,
                               bottom_right, softcap, alibi_slopes, sinks, attn_bias, dropout_p,
                               rng_seed, deterministic, attention_chunk, want_dbias)


def _attention_bwd_impl(dout, q, k, v, out, lse, dlse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                        max_seqlen_k, softmax_scale, window_left, window_right, bottom_right,
                        softcap=0.0, alibi_slopes=None, sinks=None, attn_bias=None, dropout_p=0.0,
                        rng_seed=None, deterministic=False, attention_chunk=0, want_dbias=False, *, shift=None,
                        philox_offset=0, doc_shift=None):
    """The backward.  Positional arguments follow the forward op's (the
    options in _OPTION_NAMES order, attention_chunk last), then want_dbias
    (the backward prefetch, _prefetch.py, calls it so); shift, philox_offset
    and doc_shift as in _fwd_into.  deterministic: never the Hopper backward
    (its dQ adds by atomics): the portable kernels, bit-reproducible."""
    want_dbias = want_dbias and attn_bias is not None and attn_bias.is_floating_point()
    dq, dk, dv = _new(q.shape, q), _new(k.shape, k), _new(v.shape, v)
    dsinks, dbias = _bwd_extras(q, sinks, attn_bias, want_dbias)
    _bwd_into(dout, q, k, v, out, lse, dlse, dq, dk, dv, dsinks, dbias, cu_seqlens_q, cu_seqlens_k,
              max_seqlen_q, max_seqlen_k, softmax_scale, window_left, window_right, bottom_right, softcap,
              alibi_slopes, sinks, attn_bias, dropout_p, rng_seed, deterministic, attention_chunk, want_dbias,
              shift=shift, philox_offset=philox_offset, doc_shift=doc_shift)
    return dq, dk, dv, dsinks, dbias


def _bwd_into(dout, q, k, v, out, lse, dlse, dq, dk, dv, dsinks, dbias, cu_seqlens_q, cu_seqlens_k,
              max_seqlen_q, max_seqlen_k, softmax_scale, window_left, window_right, bottom_right,
              softcap=0.0, alibi_slopes=None, sinks=None, attn_bias=None, dropout_p=0.0, rng_seed=None,
              deterministic=False, attention_chunk=0, want_dbias=False, *, shift=None, philox_offset=0,
              doc_shift=None, delta=None):
    """The backward into dq, dk, dv, dsinks, dbias (fresh buffers shaped as
    _attention_bwd_impl makes them; dsinks / dbias may be None where no sinks
    / no dbias are wanted).  want_dbias: already resolved (a float bias whose
    gradient is wanted).  delta: the kernels' rowsum(dO * O) buffer laid out
    like lse, made here if None (the backward plans pass their own).  A 4-D
    lse (and dlse): the compensated LSE (module doc)."""
    varlen = cu_seqlens_q is not None
    lse, lse_lo = _split_lse(lse)
    if lse_lo is not None and dlse is not None:
        # plane 0's gradient only (lo is a rounding residual), laid out like lse2's view
        dlse = torch.empty_strided(lse.shape, lse.stride(), dtype=torch.float32,
                                   device=lse.device).copy_(dlse[:, :, 0])
    if dq.numel() == 0 or dk.numel() == 0:  # no query or no key: nothing flows back
        if sinks is not None and dlse is not None and dq.numel() > 0:
            # no key: lse2 = sink * log2(e), so d sink = log2(e) * sum of d lse2 over the rows
            rows = (dlse.float() * LOG2E).sum(-1)
            dsinks.copy_(rows if varlen else rows.sum(0))
        dq.zero_(), dk.zero_(), dv.zero_()
        return
    if dout.stride(-1) != 1:  # e.g. the expanded gradient of out.sum()
        dout = dout.contiguous()
    if dlse is not None and lse_lo is None:  # (with lse_lo: laid out above)
        dlse = dlse.to(torch.float32).contiguous()
        if dlse.stride() != lse.stride():
            dlse = dlse.as_strided(lse.shape, lse.stride()).copy_(dlse)
    window = (window_left, window_right)
    qh, kh, vh, oh, doh, dqh, dkh, dvh = (_bhnd(t, varlen) for t in (q, k, v, out, dout, dq, dk, dv))
    lh = _lse_bhn(lse, varlen)
    dlh = None if dlse is None else _lse_bhn(dlse, varlen)
    dbias_full = None
    if want_dbias:
        shape = (q.shape[0], q.shape[2], q.shape[1], k.shape[1])
        # tiles outside the band or the chunks are skipped
        windowed = window_left >= 0 or window_right >= 0 or attention_chunk > 0
        dbias_full = (torch.zeros(shape, dtype=torch.float32, device=q.device) if windowed
                      else _new(shape, q, torch.float32))
    compile_only = fastlaunch.compile_only_device() is not None  # a backward prefetch (_prefetch.py)
    kernels_ran = use_triton(q) or compile_only
    if kernels_ran:
        if _prefetch.pending() and not compile_only:
            _prefetch.wait_pending()  # its compiles fill the cache that this backward reads
        if _kernels.forward is None:
            _kernels.load()
        attention_backward = _kernels.backward  # (load also installed the direct launches)
        if delta is None:
            delta = torch.empty_strided(lse.shape, lse.stride(), dtype=lse.dtype, device=lse.device)
        deltah = _lse_bhn(delta, varlen)
        with _device_guard(q):
            if varlen:
                batch = cu_seqlens_q.shape[0] - 1
                mods = _kernel_mods(softcap, _alibi_bh(alibi_slopes, batch, q.shape[1]), None, None,
                                    dropout_p, rng_seed, philox_offset)
                mul, add = doc_shift or (0, 0)
                chunks = list(_varlen_chunks(cu_seqlens_q, cu_seqlens_k, q.shape[1]))
                hopper_varlen = (len(chunks) == 1 and doc_shift is None and lse_lo is None and not compile_only
                                 and not has_variants(softcap, alibi_slopes, None, None, dropout_p)
                                 and use_hopper_varlen_backward(q, v, window, deterministic, attention_chunk))
                for b, cu in chunks:
                    # each chunk writes the delta of its own rows
                    attention_backward(doh, qh, kh, vh, oh, lh, dqh, dkh, dvh, softmax_scale, add,
                                       window_bounds(*window), dlh, cu, (max_seqlen_q, max_seqlen_k),
                                       mods.chunk(b, 0), delta=deltah, split_group=len(chunks) == 1,
                                       shift_mul=mul, chunk=attention_chunk, hopper_varlen=hopper_varlen)
            else:
                offset = (_causal_offset(q.shape[1], k.shape[1], bottom_right) if shift is None
                          else shift - (k.shape[1] - q.shape[1]))
                mods = _kernel_mods(softcap, _alibi_bh(alibi_slopes, q.shape[0], q.shape[2]), None,
                                    attn_bias, dropout_p, rng_seed, philox_offset)
                per_entry = q.shape[2] * q.shape[1] * k.shape[1]
                chunks = _batch_chunks(q.shape[0], q.shape[2])
                # sinks reach the kernels only through the LSE (dsinks is computed below), so
                # the tier is chosen as for the call without them
                hopper = ((not has_variants(softcap, alibi_slopes, None, attn_bias, dropout_p)
                           or hopper_takes_variants(softcap, alibi_slopes, None, attn_bias, dropout_p, window,
                                                    backward=True))
                          and use_hopper_backward(fastlaunch.compile_only_device() if compile_only else q.device,
                                                  window, deterministic, max(q.shape[1], k.shape[1]), q.shape[-1],
                                                  v.shape[-1], attention_chunk=attention_chunk))
                if len(chunks) == 1:  # one launch: the views themselves (what slicing would give)
                    attention_backward(doh, qh, kh, vh, oh, lh, dqh, dkh, dvh, softmax_scale, offset,
                                       window_bounds(*window), dlh, mods=mods, dbias=dbias_full,
                                       delta=deltah, hopper=hopper, chunk=attention_chunk,
                                       **({} if lse_lo is None else {"lse_lo": lse_lo}))
                    chunks = []
                for b in chunks:
                    attention_backward(
                        doh[b], qh[b], kh[b], vh[b], oh[b], lh[b], dqh[b], dkh[b], dvh[b],
                        softmax_scale, offset, window_bounds(*window),
                        None if dlh is None else dlh[b], mods=mods.chunk(b, per_entry),
                        dbias=None if dbias_full is None else dbias_full[b], delta=deltah[b],
                        hopper=hopper, chunk=attention_chunk, **({} if lse_lo is None else {"lse_lo": lse_lo[b]}))
    else:
        with torch.autocast(q.device.type, enabled=False):  # the math is fixed by the dtypes
            delta, dbias_blk = _blockwise_bwd(doh, qh, kh, vh, oh, lh, dlh, dqh, dkh, dvh, lse,
                                              cu_seqlens_q, cu_seqlens_k, max_seqlen_k, softmax_scale,
                                              window, bottom_right, softcap, alibi_slopes, attn_bias,
                                              dropout_p, rng_seed, want_dbias, shift, philox_offset,
                                              doc_shift, lse_lo, attention_chunk)
        if want_dbias:
            dbias_full = dbias_blk
    if sinks is not None and kernels_ran:
        _kernels.bwd.sinks_grad(dsinks, sinks, lse, delta, lse_lo)
    elif sinks is not None:
        reference.sinks_grad_torch(dsinks, sinks, lse, delta, lse_lo)
    if want_dbias:
        dbias.copy_(_reduce_to(dbias_full, attn_bias.shape))


def _blockwise_bwd(doh, qh, kh, vh, oh, lh, dlh, dqh, dkh, dvh, lse, cu_seqlens_q, cu_seqlens_k,
                   max_seqlen_k, softmax_scale, window, bottom_right, softcap, alibi_slopes, attn_bias,
                   dropout_p, rng_seed, want_dbias, shift=None, philox_offset=0, doc_shift=None, lse_lo=None,
                   chunk=0):
    """The blockwise PyTorch backward; returns (delta laid out like lse, dbias (B, Hq, Nq, Nk) or None).
    lse_lo: the compensated LSE's residual plane (dense), or None; chunk: attention_chunk."""
    if cu_seqlens_q is not None:
        dkh.zero_()
        dvh.zero_()
        dqh.zero_()
        delta = torch.zeros_like(lse)
        deltah = _lse_bhn(delta, True)
        seqs = list(zip(_seq_slices(cu_seqlens_q), _seq_slices(cu_seqlens_k)))
        alibi = _alibi_bh(alibi_slopes, len(seqs), qh.shape[1])
        mul, add = doc_shift or (0, 0)
        for i, ((q0, q1), (k0, k1)) in enumerate(seqs):
            if q1 == q0 or k1 == k0:
                if q1 > q0 and dlh is not None:  # rows with no key: O = 0
                    deltah[:, :, q0:q1] = -dlh[:, :, q0:q1] * LOG2E
                continue
            mods = BlockMods(softcap, None if alibi is None else alibi[i:i + 1], None, None,
                             dropout_p, rng_seed, qh.shape[2], max_seqlen_k, q0, philox_offset)
            grads = reference.blockwise_attention_bwd(
                doh[:, :, q0:q1], qh[:, :, q0:q1], kh[:, :, k0:k1], vh[:, :, k0:k1], oh[:, :, q0:q1],
                lh[:, :, q0:q1], softmax_scale, (k1 - k0) - (q1 - q0) + mul * (k1 - k0) + add, window,
                None if dlh is None else dlh[:, :, q0:q1], mods=mods, chunk=chunk)
            dqh[:, :, q0:q1].copy_(grads[0])
            dkh[:, :, k0:k1].copy_(grads[1])
            dvh[:, :, k0:k1].copy_(grads[2])
            deltah[:, :, q0:q1] = grads[3]
        return delta, None
    n_q, n_k = qh.shape[2], kh.shape[2]
    if shift is None:
        shift = n_k - n_q + _causal_offset(n_q, n_k, bottom_right)
    mods = BlockMods(softcap, _alibi_bh(alibi_slopes, qh.shape[0], qh.shape[1]), None, attn_bias,
                     dropout_p, rng_seed, rng_offset=philox_offset)
    grads = reference.blockwise_attention_bwd(doh, qh, kh, vh, oh, lh, softmax_scale, shift,
                                              window, dlh, mods=mods, want_dbias=want_dbias, lse2_lo=lse_lo,
                                              chunk=chunk)
    for dst, src in zip((dqh, dkh, dvh), grads):
        dst.copy_(src)
    return grads[3], grads[4]


@attention_bwd.register_fake
def _(dout, q, k, v, out, lse, dlse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
      softmax_scale, window_left, window_right, bottom_right, softcap=0.0, alibi_slopes=None,
      sinks=None, attn_bias=None, dropout_p=0.0, rng_seed=None, want_dbias=False, deterministic=False,
      attention_chunk=0):
    want_dbias = want_dbias and attn_bias is not None and attn_bias.is_floating_point()
    dsinks = (q.new_empty(sinks.shape, dtype=torch.float32) if sinks is not None
              else q.new_empty(0, dtype=torch.float32))
    dbias = (q.new_empty(attn_bias.shape, dtype=attn_bias.dtype) if want_dbias
             else q.new_empty(0, dtype=torch.float32))
    # contiguous, as _attention_bwd_impl makes them (not empty_like: a transposed q
    # would give dq its strides, which inductor then asserts against the real ones)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dsinks, dbias


# ---------------------------------------------------------------------------
# Autograd: one registration for every entry point
# ---------------------------------------------------------------------------

_OPTION_NAMES = ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "softmax_scale",
                 "window_left", "window_right", "bottom_right", "softcap", "alibi_slopes", "sinks",
                 "attn_bias", "dropout_p", "rng_seed", "deterministic", "attention_chunk")
_SINKS = 3 + _OPTION_NAMES.index("sinks")
_BIAS = 3 + _OPTION_NAMES.index("attn_bias")
# Options that a call plan takes from each call (FwdPlan.extras): their index among the options.
OPT_CU_Q = _OPTION_NAMES.index("cu_seqlens_q")
OPT_CU_K = _OPTION_NAMES.index("cu_seqlens_k")
OPT_ALIBI = _OPTION_NAMES.index("alibi_slopes")
OPT_SINKS = _OPTION_NAMES.index("sinks")
OPT_SEED = _OPTION_NAMES.index("rng_seed")


def save_with_options(ctx, tensors: tuple, options) -> None:
    """ctx.save_for_backward(*tensors) and every tensor among options: the
    backward re-reads the options (sinks, ALiBi slopes, the mask or bias,
    cu_seqlens), so autograd's version check on unpacking must cover them
    too: one modified in place after the forward raises, as q / k / v do,
    instead of silently giving other gradients.  Unpack with
    ctx.saved_tensors[:len(tensors)]."""
    ctx.save_for_backward(*tensors, *[t for t in options if isinstance(t, torch.Tensor)])


def _setup_context(ctx, inputs, output):
    q, k, v = inputs[:3]
    out, lse = output
    ctx.options = tuple(inputs[3:]) + (None,) * (3 + len(_OPTION_NAMES) - len(inputs))
    ctx.n_options = len(inputs) - 3
    bias = inputs[_BIAS] if len(inputs) > _BIAS else None
    ctx.want_dbias = bool(bias is not None and bias.is_floating_point()
                          and ctx.needs_input_grad[_BIAS])
    save_with_options(ctx, (q, k, v, out, lse), ctx.options)


def _with_defaults(options) -> list:
    """The op's options with the schema defaults where a call left the
    variants out (None): softcap and dropout_p 0.0, deterministic False,
    attention_chunk 0."""
    options = list(options)
    for i, default in ((8, 0.0), (12, 0.0), (14, False), (15, 0)):
        if options[i] is None:
            options[i] = default
    return options


def _backward_with(bwd, ctx, dout, dlse, saved=None):
    """saved: ctx.saved_tensors if already unpacked (a saved-tensor hook unpacks on each access)."""
    q, k, v, out, lse = (ctx.saved_tensors if saved is None else saved)[:5]
    if dout is None:  # only the LSE was differentiated
        dout = torch.zeros_like(out)
    options = _with_defaults(ctx.options)
    dq, dk, dv, dsinks, dbias = bwd(dout, q, k, v, out, lse, dlse, *options[:14], want_dbias=ctx.want_dbias,
                                    deterministic=options[14], attention_chunk=options[15])
    grads = [None] * ctx.n_options
    if options[_SINKS - 3] is not None:
        grads[_SINKS - 3] = dsinks
    if ctx.want_dbias:
        grads[_BIAS - 3] = dbias
    # (the inputs that get gradients: differentiating those again must raise)
    return no_double_backward((dq, dk, dv, *grads), (q, k, v, options[_SINKS - 3], options[_BIAS - 3]))


class _DoubleBackwardError(torch.autograd.Function):
    """Identity on the gradients, whose own backward raises: a gradient taken
    with create_graph=True stays usable as a value, and differentiating it
    (a gradient penalty, a Hessian product) raises instead of silently
    treating the backward as constant."""

    @staticmethod
    def forward(ctx, n_grads, *tensors):
        """tensors: the gradients, then the inputs they depend on (so that
        the outputs join the graph of those that require grad)."""
        # detach(), not view_as(): a view made inside a Function that returns
        # several outputs may not be modified in place, so view_as() made
        # torch.autograd.grad(..., create_graph=True)[0].mul_(2) raise; the
        # gradients are fresh buffers, so an alias of them is safe to return.
        return tuple(g.detach() if g is not None else None for g in tensors[:n_grads])

    @staticmethod
    def backward(ctx, *ggrads):
        raise NotImplementedError(
            "flashattn_triton attention has no double backward: a gradient taken with "
            "create_graph=True was differentiated again (gradient penalty, Hessian-vector product)")


def no_double_backward(grads: tuple, inputs: tuple) -> tuple:
    """grads as they are, unless the backward runs with create_graph=True
    (grad mode on) in eager mode and an input requires grad: then routed
    through _DoubleBackwardError.  Under torch.compile, AOTAutograd traces
    the backward and itself declines double backward through a compiled
    region."""
    if not torch.is_grad_enabled() or torch.compiler.is_compiling():
        return grads
    if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
        return grads
    return _DoubleBackwardError.apply(len(grads), *grads, *inputs)


def _backward(ctx, dout, dlse):
    return _backward_with(attention_bwd, ctx, dout, dlse)


attention_fwd.register_autograd(_backward, setup_context=_setup_context)


class _EagerAttention(torch.autograd.Function):
    """The same forward, backward and autograd rule as the custom ops above,
    entered without the dispatcher's Python custom-op machinery, which costs
    60-200 us of host time per call (measured: bench_overhead.py).  Used in
    eager mode only; torch.compile traces the custom ops."""

    @staticmethod
    def forward(ctx, q, k, v, alibi_slopes, sinks, attn_bias, options, plan=None):
        """options: the op's options (_OPTION_NAMES, all of them); the three
        tensors among them that may require grad also come as inputs of their
        own, so that autograd sees them (fewer inputs than one per option: the
        Function's per-input cost is host time).  plan: the call's FwdPlan, if any."""
        want_dbias = bool(attn_bias is not None and attn_bias.is_floating_point()
                          and ctx.needs_input_grad[5])
        # compile the backward's kernels meanwhile (first CUDA call of a signature);
        # a plan knows its prefetch key: once it is in _seen, maybe_prefetch does nothing
        if plan is None or plan.prefetch is None or plan.prefetch not in _prefetch._seen:
            _prefetch.maybe_prefetch(_attention_bwd_impl, q, k, v, options, want_dbias)
        if plan is None:
            out, lse = _attention_fwd_impl(q, k, v, *options)
        else:
            out, lse = plan_forward(plan, q, k, v, extras=tuple([options[i] for i in plan.extras]))
        ctx.options = options
        ctx.n_options = len(options)
        ctx.want_dbias = want_dbias
        ctx.plan = plan
        save_with_options(ctx, (q, k, v, out, lse), options)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        plan, saved = ctx.plan, None
        if plan is not None and BWD_PLANS and PLANS_ENABLED:
            grads, saved = plan_backward(plan.backward, ctx, dout, dlse, plan.extras)
            if grads is not None:  # (dq, dk, dv, dsinks or None)
                dq, dk, dv, dsinks = no_double_backward(tuple(grads), (*saved[:3], ctx.options[OPT_SINKS]))
                return dq, dk, dv, None, dsinks, None, None, None
        grads = _backward_with(_attention_bwd_impl, ctx, dout, dlse, saved)
        return grads[:3] + (None, grads[_SINKS], grads[_BIAS], None, None)


# ---------------------------------------------------------------------------
# Forward plans: what the calls of one signature run (api.py makes and keys them)
# ---------------------------------------------------------------------------

# FLASHATTN_TRITON_FAST_LAUNCH=0 also turns the call plans off (read at import;
# PLANS_ENABLED switches them at run time).
PLANS_ENABLED = os.environ.get(fastlaunch.ENV_FAST_LAUNCH, "").strip() != "0"  # (checked by fastlaunch)
MAX_RECORD_TRIES = 3  # first calls of a signature that try to record its launches


class FwdPlan:
    """The forward of one call signature: shapes, strides, dtypes, device,
    16-byte alignment and requires_grad of q, k, v, and options without
    tensors (api.py keys the calls, validates the first one, then makes the
    plan).  Holds the op's options, the output shapes, the backward prefetch's
    key and, once a call recorded them, the launches to replay
    (kernels/fastlaunch.py): later calls allocate the outputs and replay.
    The replay is used only while the op layer's dispatch is what it was
    when it was recorded (_world); otherwise, and wherever nothing could be
    recorded (CPU paths, the interpreter, chunked launches, autotuning), a
    planned call runs the op's own forward.  ``backward``: the BwdPlan of
    the calls' backward.  ``extras``: the indices (OPT_CU_Q, OPT_CU_K,
    OPT_ALIBI, OPT_SINKS, OPT_SEED) of the tensor options that each call
    brings its own of (the key holds their layouts; the dropout seed is
    drawn per call): planned calls pass them (``extras`` values, in that
    order), the recorded launches read them as roles after q, k, v, out,
    lse (by address, as those), and ``options`` holds the first call's only
    as a template.  ``shared_cu``: a packed batch whose cu_seqlens_q and
    cu_seqlens_k are one tensor (self-attention; the key says so): one role,
    OPT_CU_Q, for both, since a replay tells its roles apart by address."""

    __slots__ = ("options", "out_shape", "lse_shape", "grad", "prefetch", "replay", "world", "tries", "backward",
                 "extras", "shared_cu")

    def __init__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, options: tuple) -> None:
        self.options = tuple(options)
        cu_q, cu_k = options[OPT_CU_Q], options[OPT_CU_K]
        self.shared_cu = cu_q is not None and cu_k is not None and cu_q.data_ptr() == cu_k.data_ptr()
        self.extras = tuple(i for i in (OPT_CU_Q, OPT_CU_K, OPT_ALIBI, OPT_SINKS, OPT_SEED)
                            if options[i] is not None and not (i == OPT_CU_K and self.shared_cu))
        self.out_shape = q.shape[:-1] + (v.shape[-1],)
        self.lse_shape = lse_shape(q, options[0] is not None)
        # as _needs_autograd: a tensor that requires grad sends the call through
        # the op's autograd (slopes too: they get no gradient, but the output
        # requires grad, as on the full path, and the blockwise CPU code must
        # not record a graph through them)
        self.grad = _requires_grad(q, k, v, options[OPT_SINKS], options[OPT_ALIBI])
        try:
            self.prefetch = _prefetch._key(q, k, v, self.options)
        except Exception:  # noqa: BLE001 - then maybe_prefetch decides on every call
            self.prefetch = None
        self.replay: Optional[fastlaunch.Replay] = None
        self.world: Optional[tuple] = None
        self.tries = 0
        self.backward = BwdPlan(self.options)

    def with_extras(self, extras: tuple) -> tuple:
        """The options of a call that brings ``extras`` (values of the
        options at self.extras, in that order)."""
        options = list(self.options)
        for i, t in zip(self.extras, extras):
            options[i] = t
        if self.shared_cu:
            options[OPT_CU_K] = options[OPT_CU_Q]
        return tuple(options)


class BwdPlan:
    """The backward of a planned call (_EagerAttention with a FwdPlan): its
    first backward calls (at most MAX_RECORD_TRIES) record the launches of
    _bwd_into with dq, dk, dv and delta allocated outside the recording
    (roles by address, as the forward's; scratch buffers such as GQA's
    float32 partials are made anew by each replay); once one recording is
    clean, later backwards whose dout, dlse and saved tensors have the
    recorded layouts, in the recorded dispatch world (_bwd_world) and with
    no backward prefetch pending, allocate the four buffers and replay.  A
    recording that saw a PyTorch operation (a dout made contiguous, the
    Hopper backward's torch dQ copy without
    DQ_CONVERT_KERNEL, ...) is not kept; every call that cannot replay runs
    today's backward (_attention_bwd_impl)."""

    __slots__ = ("args", "replay", "key", "world", "tries")

    def __init__(self, options: tuple) -> None:
        self.args = _bwd_args(options)
        self.replay: Optional[fastlaunch.Replay] = None
        self.key: Optional[tuple] = None
        self.world: Optional[tuple] = None
        self.tries = 0


def _bwd_args(options) -> tuple:
    """_bwd_into's arguments after the buffers for a call's options: the
    options (schema defaults for None, as _backward_with), deterministic,
    attention_chunk, want_dbias (False: planned calls have no bias)."""
    args = _with_defaults(options)
    return tuple(args[:14]) + (bool(args[14]), int(args[15]), False)


_FWD_IMPL = _attention_fwd_impl


def _world() -> tuple:
    """What a replay's launches were chosen by, besides the call's options and
    the environment switches of api.PLAN_ENV (tests and tools replace these;
    the dispatch tables are compared by value, so a table is replaced, not
    changed in place)."""
    d = _dispatch
    return (_attention_fwd_impl, _fwd_into, use_triton, use_hopper_forward, use_hopper_varlen_forward, MAX_GRID_Y,
            d.INTERPRET, _kernels.forward, _kernels.hopper_forward, d.HOPPER_FWD_WINDOW_DEFAULT,
            d.HOPPER_SPLIT_QK_DEFAULT, d.HOPPER_DROPOUT_DEFAULT, d.HOPPER_DROPOUT_FWD_MIN_N, d.HOPPER_SINKS_DEFAULT,
            d.HOPPER_SINKS_DIMS, d.HOPPER_FWD_SHORT, d.HOPPER_VARLEN_DEFAULT, d.HOPPER_VARLEN_SHORT)


def plan_forward(plan: FwdPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bhnd: bool = False,
                 extras: tuple = ()):
    """(out, lse2) of a planned call, without autograd.  bhnd: q, k, v are the
    (B, H, N, d) transposes of the op's inputs (the SDPA layout): a replay
    reads their addresses only, the other paths transpose them back.
    extras: the call's own tensor options (FwdPlan.extras)."""
    options = plan.with_extras(extras) if plan.extras else plan.options
    replay = plan.replay
    if replay is not None and plan.world == _world():
        out = _new(plan.out_shape, q)
        lse = _new(plan.lse_shape, q, torch.float32)
        if replay((q, k, v, out, lse) + extras):
            return out, lse
        if bhnd:
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        _fwd_into(q, k, v, out, lse, *options)  # declined: the op's own path, same buffers
        return out, lse
    if bhnd:
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if (plan.tries < MAX_RECORD_TRIES and fastlaunch.ENABLED and _attention_fwd_impl is _FWD_IMPL
            and use_triton(q)):  # (a replaced _attention_fwd_impl must see the call)
        plan.tries += 1
        out = _new(plan.out_shape, q)
        lse = _new(plan.lse_shape, q, torch.float32)
        with fastlaunch.recording() as rec:
            _fwd_into(q, k, v, out, lse, *options)
        replay = rec.replay((q, k, v, out, lse) + extras)
        if replay is not None:
            plan.replay, plan.world = replay, _world()
        return out, lse
    return _attention_fwd_impl(q, k, v, *options)


# The backward plans (BwdPlan) of planned calls; False: every backward runs
# _attention_bwd_impl.  Off with the forward plans too (PLANS_ENABLED).  On
# since session 19 call 1-2 (benchmarks/history/gpu_next_bwd_plan.sh on the H200: 69
# GPU tests passed; off/replay 0.99-1.50x over 8 short rows, d = 128 N = 512
# 1.50x causal and 1.20x non-causal, the rest 0.99-1.04x).
BWD_PLANS = True
# Environment switches that the backward's launches depend on (read per call).
BWD_PLAN_ENV = ("FLASHATTN_TRITON_BACKEND", "FLASHATTN_TRITON_HOPPER_BWD", "FLASHATTN_TRITON_HOPPER_WINDOW",
                "FLASHATTN_TRITON_HOPPER_SPLIT_QK", "FLASHATTN_TRITON_HOPPER_DROPOUT",
                "FLASHATTN_TRITON_HOPPER_BWD_UNVERIFIED", "FLASHATTN_TRITON_AUTOTUNE",
                "FLASHATTN_TRITON_CONFIG_BWD_DKDV", "FLASHATTN_TRITON_CONFIG_BWD_DQ",
                "FLASHATTN_TRITON_CONFIG_BWD_ONE", "FLASHATTN_TRITON_HOPPER_VARLEN_BWD",
                "FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE")
_BWD_IMPL = _attention_bwd_impl


def _bwd_world() -> tuple:
    """What a backward replay's launches were chosen by, besides the call's
    options and dout's layout (tests and tools replace these functions)."""
    bwd, d = _kernels.bwd, _dispatch  # (kernels/bwd.py once loaded)
    return (_attention_bwd_impl, _bwd_into, use_triton, use_hopper_backward, use_hopper_varlen_backward,
            d.hopper_backward_pays, d._hopper_tier, d.INTERPRET, d.HOPPER_BWD_WINDOW_MIN_LEFT,
            d.HOPPER_BWD_WINDOW_DEFAULT, d.HOPPER_SPLIT_QK_DEFAULT, d.HOPPER_DROPOUT_BWD_DEFAULT,
            d.HOPPER_VARLEN_BWD_DEFAULT, MAX_GRID_Y, _kernels.backward,
            torch.are_deterministic_algorithms_enabled(),
            None if bwd is None else (bwd.DQ_CONVERT_KERNEL, bwd.SPLIT_QK, bwd.SPLIT_QK_MIN_PAD,
                                      bwd.GROUP_SPLIT_BYTES, bwd._launch_dkdv, bwd._launch_dq,
                                      repr(bwd.ONE_LAUNCH), repr(bwd.WHOLE_Q_TILES),
                                      bwd._launch_one,
                                      bwd._bwd_dq_convert, bwd._bwd_dq_convert_flat,
                                      getattr(_kernels.hopper, "hopper_attention_backward", None),
                                      _hopper_bwd_tables()),
            env_snapshot(BWD_PLAN_ENV))


def _hopper_bwd_tables() -> Optional[tuple]:
    """The Hopper backward's module tables that shape its launches (its own
    plans are cached per signature; a replay must not outlive a change)."""
    hbwd = sys.modules.get("flashattn_triton.kernels.hopper.bwd")
    if hbwd is None:
        return None
    return (hbwd.DQ_ACC_LIKE_DQ, hbwd.NAMED_BAR_BY_SHAPE, hbwd.HOPPER_BWD_GROUP_SPLIT_DEFAULT, hbwd.CONFIGS,
            hbwd.HOPPER_BWD_NAMED_BAR_DEFAULT, hbwd.GROUP_PARTIALS_16BIT)


def _layouts(*tensors) -> tuple:
    return tuple([(t.dtype, t.shape, t.stride()) for t in tensors])


def plan_backward(bp: BwdPlan, ctx, dout: Optional[torch.Tensor], dlse: Optional[torch.Tensor],
                  extras: tuple = ()) -> tuple:
    """((dq, dk, dv, dsinks), saved) of a planned call's backward (dsinks
    None without sinks), or (None, saved) where it takes today's path
    (_backward_with); saved: ctx.saved_tensors if unpacked here, else None.
    extras: the plan's FwdPlan.extras: the call's tensors at those options
    (ctx.options) are roles of the replay after the buffers, then dsinks."""
    if dout is None or _prefetch._pending:  # (a pending prefetch: today's path waits for it)
        return None, None
    replay = bp.replay
    if replay is None and (bp.tries >= MAX_RECORD_TRIES or not fastlaunch.ENABLED
                           or _attention_bwd_impl is not _BWD_IMPL or ctx.want_dbias):
        return None, None
    saved = ctx.saved_tensors
    q, k, v, out, lse = saved[:5]
    # (autograd gives dout and dlse the outputs' shapes and dtypes; the saved
    # tensors are keyed too, as a saved-tensor hook may unpack another layout)
    key = (dout.stride(), None if dlse is None else dlse.stride(), _layouts(q, k, v, out, lse))
    if replay is None:
        if not use_triton(q):
            return None, saved
        bp.tries += 1
    elif key != bp.key or bp.world != _bwd_world():
        return None, saved
    dq, dk, dv = _new(q.shape, q), _new(k.shape, k), _new(v.shape, v)
    delta = torch.empty_strided(lse.shape, lse.stride(), dtype=torch.float32, device=lse.device)
    roles: Tuple[torch.Tensor, ...] = (dout, q, k, v, out, lse, dq, dk, dv, delta) if dlse is None else (
        dout, q, k, v, out, lse, dq, dk, dv, delta, dlse)
    args, dsinks = bp.args, None
    if extras:  # this call's tensor options, and a fresh dsinks where it has sinks
        options = ctx.options
        args = _bwd_args(options)
        roles += tuple([options[i] for i in extras])
        sinks = options[OPT_SINKS]
        if sinks is not None:
            dsinks = torch.zeros(sinks.shape, dtype=torch.float32, device=q.device)
            roles += (dsinks,)
    if replay is not None:
        if not replay(roles):  # declined: the same launches through the host code, same buffers
            _bwd_into(dout, q, k, v, out, lse, dlse, dq, dk, dv, dsinks, None, *args, delta=delta)
        return (dq, dk, dv, dsinks), saved
    with fastlaunch.recording() as rec:
        _bwd_into(dout, q, k, v, out, lse, dlse, dq, dk, dv, dsinks, None, *args, delta=delta)
    replay = rec.replay(roles)
    if replay is not None:
        bp.replay, bp.key, bp.world = replay, key, _bwd_world()
    return (dq, dk, dv, dsinks), saved


def attention_planned(plan: FwdPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      extras: tuple = ()) -> Tuple[torch.Tensor, torch.Tensor]:
    """attention_base2 for a planned call: the caller (api.py) has checked
    that no compile, forward-AD level or functorch transform is active.
    extras: the call's own tensor options (FwdPlan.extras)."""
    if plan.grad and torch.is_grad_enabled():
        if not plan.extras:
            return _EagerAttention.apply(q, k, v, None, None, None, plan.options, plan)
        options = plan.with_extras(extras)
        return _EagerAttention.apply(q, k, v, options[OPT_ALIBI], options[OPT_SINKS], None, options, plan)
    return plan_forward(plan, q, k, v, extras=extras)


# ---------------------------------------------------------------------------
# Entry used by the public functions, and raw helpers
# ---------------------------------------------------------------------------

def attention_base2(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    params: AttnParams) -> Tuple[torch.Tensor, torch.Tensor]:
    """(out, lse2): the forward op with autograd; lse2 in base 2 (see module doc).
    Differentiable in q, k, v, lse2 and, when given, sinks and a float attn_bias."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing() or not eager_tensors(q, k, v):
        # (torch.jit.trace records the op as one node, not the launches inside it)
        return attention_fwd(q, k, v, *params.op_args())
    if transforms_active():
        _reject_transforms(q, k, v, params)  # (returns for a dual level with no dual input)
    elif not _needs_autograd(q, k, v, params):  # no graph to record: skip the Function's cost
        return _attention_fwd_impl(q, k, v, *params.op_args())
    return _EagerAttention.apply(q, k, v, params.alibi_slopes, params.sinks, params.attn_bias, params.op_args())


def _reject_transforms(q, k, v, params: AttnParams) -> None:
    """Say plainly what is not supported, instead of autograd.Function's
    errors about setup_context / jvp: functorch transforms, and forward-mode
    AD with a dual input.  (A dual level with no dual input runs as usual.)"""
    if torch._C._are_functorch_transforms_active():
        raise NotImplementedError(
            "flashattn_triton attention does not support torch.func transforms (vmap, grad, vjp, jvp, "
            "jacrev, functionalize); call it outside the transform (torch.autograd computes its gradients)")
    tensors = [q, k, v, params.alibi_slopes, params.sinks, params.attn_bias]
    if any(t is not None and _fwd_ad.unpack_dual(t).tangent is not None for t in tensors):
        raise NotImplementedError("flashattn_triton attention has no forward-mode AD (jvp): "
                                  "an input is a dual tensor of torch.autograd.forward_ad")


def layout_key(t) -> Optional[tuple]:
    """What the checks read of a tensor argument, for the call plans' keys
    (api.py's tensor options, _kvcache.py's arguments): its shape, strides,
    dtype, device, requires_grad and 16-byte alignment; () for None; None
    (no plan) for anything but a plain tensor without a negation bit."""
    if t is None:
        return ()
    if t.__class__ is not torch.Tensor or t.is_neg():
        return None
    try:
        return (t.shape, t.stride(), t.dtype, t.device, t.requires_grad, t.data_ptr() & 15)
    except Exception:  # noqa: BLE001 - sparse, storage-less ...: the full path says what is wrong
        return None


def eager_tensors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether q, k, v can take the direct eager path (the impls and the
    autograd Function below, which launch kernels): plain tensors with data.
    Meta tensors and tensor subclasses (FakeTensorMode's, tracers') go through
    the custom op instead, whose dispatcher gives them the fake implementation
    (shapes only) or the subclass's own handling."""
    return (q.__class__ is torch.Tensor and k.__class__ is torch.Tensor and v.__class__ is torch.Tensor
            and not (q.is_meta or k.is_meta or v.is_meta))


def _needs_autograd(q, k, v, params: AttnParams) -> bool:
    """Whether the call must go through the autograd Function: grad mode on
    and a tensor input that requires grad (the caller has dealt with a
    forward-AD level or functorch transform, which always takes it)."""
    if not torch.is_grad_enabled():
        return False
    return _requires_grad(q, k, v, params.alibi_slopes, params.sinks, params.attn_bias)


def _requires_grad(*tensors: Optional[torch.Tensor]) -> bool:
    """Whether any of the tensors (None for an absent option) requires grad."""
    return any(t is not None and t.requires_grad for t in tensors)


def transforms_active() -> bool:
    """A forward-AD level or a functorch transform (vmap, grad, ...) is active."""
    return _fwd_ad._current_level >= 0 or torch._C._are_functorch_transforms_active()


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              params: AttnParams) -> Tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) with lse in natural log; differentiable as attention_base2."""
    out, lse2 = attention_base2(q, k, v, params)
    return out, lse2 * LN2


def dropout_pattern(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, params: AttnParams) -> torch.Tensor:
    """The attention probabilities of a call with dropout, negated where the
    dropout dropped them (flash-attn's ``return_attn_probs`` encoding), float32,
    from a dense PyTorch recomputation with the call's Philox seed (testing
    aid: O(Nq * Nk) memory).  Dense calls: (B, Hq, Nq, Nk); packed calls:
    (B, Hq, max_seqlen_q, max_seqlen_k), zero beyond each sequence.
    P is exp(s - lse) before dropout (flash-attn's may differ by scaling)."""
    with torch.no_grad():
        kw: Dict[str, Any] = dict(softcap=params.softcap, sinks=params.sinks, attention_chunk=params.attention_chunk)
        if not params.varlen:
            qh, kh, vh = (t.transpose(1, 2).float() for t in (q, k, v))
            n_q, n_k = qh.shape[2], kh.shape[2]
            offset = _causal_offset(n_q, n_k, params.bottom_right)
            bias = params.attn_bias
            _, _, p = reference.attention_ref(
                qh, kh, vh, params.softmax_scale, None, window=(params.window_left, params.window_right),
                shift=n_k - n_q + offset, alibi_slopes=params.alibi_slopes,
                attn_mask=None if bias is None else (bias if bias.dtype == torch.bool else bias.float()),
                return_probs=True, **kw)
            keep = reference.dropout_keep_mask(cast(torch.Tensor, params.rng_seed), params.dropout_p, *p.shape)
            return torch.where(keep, p, -p)
        cq, ck = cast(torch.Tensor, params.cu_seqlens_q).tolist(), cast(torch.Tensor, params.cu_seqlens_k).tolist()
        batch, heads = len(cq) - 1, q.shape[1]
        pattern = torch.zeros(batch, heads, params.max_seqlen_q, params.max_seqlen_k,
                              dtype=torch.float32, device=q.device)
        keeps = reference.varlen_dropout_keep_mask(cast(torch.Tensor, params.rng_seed), params.dropout_p, heads, cq, ck,
                                                   params.max_seqlen_k)
        alibi = _alibi_bh(params.alibi_slopes, batch, heads)
        for b in range(batch):
            qs, ks, vs = (t[None, r0:r1].transpose(1, 2).float() for t, (r0, r1) in
                          ((q, cq[b:b + 2]), (k, ck[b:b + 2]), (v, ck[b:b + 2])))
            if qs.shape[2] == 0 or ks.shape[2] == 0:
                continue
            _, _, p = reference.attention_ref(
                qs, ks, vs, params.softmax_scale, None, window=(params.window_left, params.window_right),
                alibi_slopes=None if alibi is None else alibi[b:b + 1], return_probs=True, **kw)
            n_q, n_k = p.shape[2], p.shape[3]
            pattern[b, :, :n_q, :n_k] = torch.where(keeps[b], p[0], -p[0])
        return pattern


def _check_raw(q, k, v, varlen: bool, grads: Optional[tuple] = None) -> None:
    """The raw ops' layout checks (the public functions' q, k, v checks, and
    for a backward the shapes of dout, out and the LSE), so that a wrong shape
    raises instead of reading or writing out of bounds.  Values (window,
    shift, cu_seqlens) stay the caller's."""
    from ._validate import check_qkv
    rank, heads = (3, 1) if varlen else (4, 2)
    check_qkv(("q", "k", "v"), (q, k, v), "(total, H, d)" if varlen else "(B, N, H, d)", rank, heads)
    if grads is None:
        return
    dout, out, lse = grads
    want = tuple(q.shape[:-1]) + (v.shape[-1],)
    lse_want = (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])
    for name, t, shape in (("dout", dout, want), ("out", out, want), ("lse", lse, lse_want)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
        if t.device != q.device:
            raise ValueError(f"{name} must be on {q.device} like q, got {t.device}")
    for name, t in (("dout", dout), ("out", out)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {t.dtype}")
        if t.stride(-1) != 1 and t.shape[-1] != 1:
            raise ValueError(f"{name} must have stride 1 in its last dimension, got strides {tuple(t.stride())}")


def flash_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, causal: bool,
              window_size: Tuple[int, int] = (-1, -1),
              softcap: float = 0.0, *, shift: Optional[int] = None,
              alibi_slopes: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
              rng_seed: Optional[torch.Tensor] = None,
              philox_offset: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Raw forward, no autograd: (out, lse natural log (B, Hq, Nq)).

    Keyword arguments for blocks of a longer sequence (ring attention):
    shift: the mask's and ALiBi's diagonal given explicitly: row i sees key j
    iff i + shift - left <= j <= i + shift + right (causal: right = 0), ALiBi
    adds -slope * |i + shift - j|; None: bottom-right alignment
    (shift = Nk - Nq).  A block of global rows q0 + i and keys k0 + j of a
    sequence aligned with global shift S takes shift = q0 - k0 + S.
    alibi_slopes (Hq,) / (B, Hq) float32; dropout_p with rng_seed ((1,) int64)
    and philox_offset, added to every dropout counter (kernels/score.py), so
    that blocks drawn with one seed and disjoint counter ranges get
    independent masks.  The layouts are checked (as the public functions');
    values (window, shift, dropout) are the caller's."""
    _check_raw(q, k, v, False)
    left, right = window_size
    right = 0 if causal else right
    if shift is None and philox_offset == 0:
        out, lse2 = attention_fwd(q, k, v, None, None, 0, 0, float(softmax_scale), left, right, True,
                                  float(softcap), alibi_slopes, None, None, float(dropout_p), rng_seed)
    else:
        out, lse2 = _attention_fwd_impl(q, k, v, None, None, 0, 0, float(softmax_scale), left, right, True,
                                        float(softcap), alibi_slopes, None, None, float(dropout_p), rng_seed,
                                        shift=shift, philox_offset=int(philox_offset))
    return out, lse2 * LN2


def flash_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
              lse: torch.Tensor, softmax_scale: float, causal: bool,
              window_size: Tuple[int, int] = (-1, -1),
              softcap: float = 0.0, *, shift: Optional[int] = None,
              alibi_slopes: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
              rng_seed: Optional[torch.Tensor] = None,
              philox_offset: int = 0, deterministic: bool = False) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Raw backward, no autograd: (dq, dk, dv) given the row LSE (natural
    log); the keyword arguments as in flash_fwd (the same values regenerate
    the forward's dropout mask); deterministic as flash_attn_func's (True:
    no atomics, bit-identical run to run)."""
    _check_raw(q, k, v, False, (dout, out, lse))
    left, right = window_size
    right = 0 if causal else right
    lse2 = (lse.float() * LOG2E).contiguous()
    if shift is None and philox_offset == 0:
        return attention_bwd(dout, q, k, v, out, lse2, None, None, None, 0, 0, float(softmax_scale),
                             left, right, True, float(softcap), alibi_slopes, None, None,
                             float(dropout_p), rng_seed, deterministic=bool(deterministic))[:3]
    return _attention_bwd_impl(dout, q, k, v, out, lse2, None, None, None, 0, 0, float(softmax_scale),
                               left, right, True, float(softcap), alibi_slopes, None, None, float(dropout_p),
                               rng_seed, shift=shift, philox_offset=int(philox_offset),
                               deterministic=bool(deterministic))[:3]


def flash_varlen_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
                     causal: bool, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0, *,
                     doc_shift: Optional[Tuple[int, int]] = None, alibi_slopes: Optional[torch.Tensor] = None,
                     dropout_p: float = 0.0, rng_seed: Optional[torch.Tensor] = None,
                     philox_offset: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Raw packed forward, no autograd: (out, lse natural log (Hq, total_q)).

    doc_shift = (mul, add): the diagonal of sequence b given relative to its
    bottom-right alignment, shift_b = n_k_b - n_q_b + mul * n_k_b + add (row
    i of the sequence sees key j iff i + shift_b - left <= j <= i + shift_b +
    right, ALiBi -slope * |i + shift_b - j|); None = (0, 0).  A block of
    chunks of equal length c_b of longer documents, query chunk A and key
    chunk B, takes (A - B, 0).  alibi_slopes (Hq,) / (B, Hq); dropout as in
    flash_fwd (the counters of a packed call: kernels/score.py).  Layouts
    checked; cu_seqlens values unchecked."""
    _check_raw(q, k, v, True)
    left, right = window_size
    right = 0 if causal else right
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, float(softmax_scale), left, right,
            True, float(softcap), alibi_slopes, None, None, float(dropout_p), rng_seed)
    if doc_shift is None and philox_offset == 0:
        out, lse2 = attention_fwd(*args)
    else:
        out, lse2 = _attention_fwd_impl(*args, doc_shift=doc_shift, philox_offset=int(philox_offset))
    return out, lse2 * LN2


def flash_varlen_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                     lse: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                     max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float, causal: bool,
                     window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0, *,
                     doc_shift: Optional[Tuple[int, int]] = None, alibi_slopes: Optional[torch.Tensor] = None,
                     dropout_p: float = 0.0, rng_seed: Optional[torch.Tensor] = None,
                     philox_offset: int = 0, deterministic: bool = False,
                     ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Raw packed backward, no autograd: (dq, dk, dv) given the rows' LSE
    (natural log, (Hq, total_q)); keywords as in flash_varlen_fwd;
    deterministic as in flash_bwd."""
    _check_raw(q, k, v, True, (dout, out, lse))
    left, right = window_size
    right = 0 if causal else right
    lse2 = (lse.float() * LOG2E).contiguous()
    args = (dout, q, k, v, out, lse2, None, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
            float(softmax_scale), left, right, True, float(softcap), alibi_slopes, None, None, float(dropout_p),
            rng_seed)
    if doc_shift is None and philox_offset == 0:
        return attention_bwd(*args, deterministic=bool(deterministic))[:3]
    return _attention_bwd_impl(*args, doc_shift=doc_shift, philox_offset=int(philox_offset),
                               deterministic=bool(deterministic))[:3]


__all__ = ["attention", "attention_base2", "attention_fwd", "attention_bwd", "dropout_pattern", "flash_fwd", "flash_bwd",
           "flash_varlen_fwd", "flash_varlen_bwd"]
