"""KV-cache decoding: ``flash_attn_with_kvcache`` and its custom op.

The public function validates its arguments on the host (shapes, dtypes,
devices; never tensor values, so nothing waits for the GPU), then calls the
custom op ``torch.ops.flashattn_triton.kvcache_fwd``.  The op appends the new
keys/values to the cache in place (declared as a mutation of k_cache and
v_cache) and runs split-KV attention (kernels/decode.py) with the combine
kernel (kernels/combine.py); a call without new keys/values takes
``kvcache_attn``, the same computation declared with no mutation.  Being one
opaque op with a fake (meta) implementation, it traces under
``torch.compile(fullgraph=True)``, and since it never synchronises it can be
captured in a CUDA graph.  Eager calls without gradients call the op's
implementation directly (DIRECT), and a repeated eager signature replays its
recorded launches without the checks (the call plans, PLANS).

CPU tensors run the Triton kernels under Triton's interpreter
(``TRITON_INTERPRET=1``), otherwise a dense PyTorch implementation of the same
semantics (``_kvcache_torch``).
"""

import contextlib
import numbers
from typing import Literal, Optional, Tuple, Union, cast, overload

import torch

from . import ops
from ._validate import (autocast_active, autocast_inputs, check_alibi, check_attention_chunk, check_flag, check_scale,
                        check_sinks, check_softcap, check_window, sinks_for_kernels)
from .kernels import fastlaunch
from .kernels.launch import INTERPRET
from .reference import chunk_mask

__all__ = ["flash_attn_with_kvcache"]

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256
PAGE_MULTIPLE = 16
_INDEX_DTYPE = torch.int32


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------

def _tensor(name: str, t, ndim: int, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D {what}, got shape {tuple(t.shape)}")
    return t


def _index_tensor(name: str, t, shape: Tuple[int, ...], device, what: str) -> None:
    _tensor(name, t, len(shape), what)
    if t.dtype != _INDEX_DTYPE:
        raise TypeError(f"{name} must be torch.int32, got {t.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {what} = {tuple(shape)}, got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} must be on the device of q ({device}), got {t.device}")


def _last_stride_one(name: str, t: torch.Tensor) -> None:
    if t.stride(-1) != 1 and t.shape[-1] != 1:
        raise ValueError(f"{name} must have stride 1 in its last dimension, got strides "
                         f"{tuple(t.stride())}; call .contiguous() on it first")


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _validate(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
              cache_leftpad, block_table, softmax_scale, causal, window_size, softcap,
              rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse):
    """Raise TypeError / ValueError / NotImplementedError naming the argument;
    return (scale, window_left, window_right, softcap, n_cap)."""
    _tensor("q", q, 4, "(batch_size, seqlen, nheads, headdim)")
    paged = block_table is not None
    cache_what = ("(num_blocks, page_block_size, nheads_k, headdim)" if paged
                  else "(batch_size_cache, seqlen_cache, nheads_k, headdim)")
    _tensor("k_cache", k_cache, 4, cache_what)
    _tensor("v_cache", v_cache, 4, cache_what)
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} must be float16, bfloat16 or float32, got {t.dtype}")
    if not (q.dtype == k_cache.dtype == v_cache.dtype):
        raise TypeError(f"q, k_cache, v_cache must share one dtype, got {q.dtype}, {k_cache.dtype}, "
                        f"{v_cache.dtype}")
    if not (q.device == k_cache.device == v_cache.device):
        raise ValueError(f"q, k_cache, v_cache must be on one device, got {q.device}, {k_cache.device}, "
                         f"{v_cache.device}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache and v_cache must have the same shape, got {tuple(k_cache.shape)} "
                         f"and {tuple(v_cache.shape)}")
    batch, n_q, h_q, d = q.shape
    h_kv = k_cache.shape[2]
    if k_cache.shape[3] != d:
        raise ValueError(f"head dims differ: q.shape[3]={d}, k_cache.shape[3]={k_cache.shape[3]}")
    if d < 1:
        raise ValueError(f"q.shape[3] (the head dim) must be at least 1, got {d}")
    if d > MAX_HEAD_DIM:
        raise NotImplementedError(f"head dim {d} (from q.shape[3]) is not supported; supported: 1..{MAX_HEAD_DIM}")
    if h_kv == 0 or h_q % h_kv != 0:
        raise ValueError(f"the number of query heads (q.shape[2]={h_q}) must be a multiple of the "
                         f"number of key/value heads (k_cache.shape[2]={h_kv})")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        _last_stride_one(name, t)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        # The kernels read and write raw memory; a resolved copy would not be the caller's cache.
        if not torch.compiler.is_compiling() and t.is_neg():
            raise ValueError(f"{name} has PyTorch's lazy negation bit set (a negated view): pass "
                             f"{name}.resolve_neg(), a cache whose memory holds its values")
        if k is not None:
            shared = [i for i in range(3) if t.stride(i) == 0 and t.shape[i] > 1]
            if shared:
                raise ValueError(f"{name} has stride 0 in dim {shared[0]} (an expanded tensor, "
                                 f"stride {tuple(t.stride())}): appending k, v would write one memory "
                                 "location for several sequences; pass a cache with memory of its own")

    if paged:
        _tensor("block_table", block_table, 2, "(batch_size, max_num_blocks_per_seq)")
        _index_tensor("block_table", block_table, (batch, block_table.shape[1]), q.device,
                      "(batch_size, max_num_blocks_per_seq)")
        page = k_cache.shape[1]
        if page == 0 or page % PAGE_MULTIPLE != 0:
            raise ValueError(f"page_block_size (k_cache.shape[1]={page}) must be a positive multiple "
                             f"of {PAGE_MULTIPLE}")
        if cache_batch_idx is not None:
            raise ValueError("cache_batch_idx cannot be combined with block_table (a paged cache is "
                             "indexed through block_table)")
        n_cap = block_table.shape[1] * page
    else:
        n_cap = k_cache.shape[1]
        if cache_batch_idx is not None:
            _index_tensor("cache_batch_idx", cache_batch_idx, (batch,), q.device, "(batch_size,)")
        elif k_cache.shape[0] < batch:
            raise ValueError(f"k_cache holds {k_cache.shape[0]} sequences (k_cache.shape[0]) but q has "
                             f"batch_size {batch}; pass cache_batch_idx to pick cache rows")

    if cache_seqlens is not None:
        if _is_int(cache_seqlens):
            if not 0 <= cache_seqlens <= n_cap:
                raise ValueError(f"cache_seqlens={cache_seqlens} must be in [0, {n_cap}] (the cache "
                                 "capacity)")
        elif isinstance(cache_seqlens, torch.Tensor):
            _index_tensor("cache_seqlens", cache_seqlens, (batch,), q.device, "(batch_size,)")
        else:
            raise TypeError(f"cache_seqlens must be an int, a torch.int32 tensor or None, got "
                            f"{type(cache_seqlens).__name__}")
    if cache_leftpad is not None:
        _index_tensor("cache_leftpad", cache_leftpad, (batch,), q.device, "(batch_size,)")

    if (k is None) != (v is None):
        raise ValueError(f"k and v must be given together, got k={'None' if k is None else 'a tensor'} "
                         f"and v={'None' if v is None else 'a tensor'}")
    if k is not None:
        for name, t in (("k", k), ("v", v)):
            _tensor(name, t, 4, "(batch_size, seqlen_new, nheads_k, headdim)")
            if t.dtype != q.dtype:
                raise TypeError(f"{name} must have the dtype of q ({q.dtype}), got {t.dtype}")
            if t.device != q.device:
                raise ValueError(f"{name} must be on the device of q ({q.device}), got {t.device}")
            _last_stride_one(name, t)
        if k.shape != v.shape:
            raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
        if (k.shape[0], k.shape[2], k.shape[3]) != (batch, h_kv, d):
            raise ValueError(f"k must have shape (batch_size, seqlen_new, nheads_k, headdim) = "
                             f"({batch}, seqlen_new, {h_kv}, {d}), got {tuple(k.shape)}")
        if cache_seqlens is None:
            raise ValueError("cache_seqlens is required when k and v are given (it says where to "
                             "append them)")
        if k.shape[1] > n_cap:
            raise ValueError(f"k has {k.shape[1]} new tokens (k.shape[1]) but the cache holds only {n_cap}")
        if _is_int(cache_seqlens) and cache_seqlens + k.shape[1] > n_cap:
            raise ValueError(f"cache_seqlens={cache_seqlens} plus {k.shape[1]} new tokens exceeds the "
                             f"cache capacity {n_cap}")

    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError("rotary_cos and rotary_sin must be given together")
    if rotary_cos is not None:
        if k is None:
            raise ValueError("rotary_cos/rotary_sin need the new k and v (rotary embedding is applied "
                             "to q and to the appended keys)")
        for name, t in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
            _tensor(name, t, 2, "(seqlen_ro, rotary_dim / 2)")
            if t.dtype not in SUPPORTED_DTYPES:
                raise TypeError(f"{name} must be float16, bfloat16 or float32, got {t.dtype}")
            if t.device != q.device:
                raise ValueError(f"{name} must be on the device of q ({q.device}), got {t.device}")
            _last_stride_one(name, t)
        if rotary_cos.shape != rotary_sin.shape:
            raise ValueError(f"rotary_cos and rotary_sin must have the same shape, got "
                             f"{tuple(rotary_cos.shape)} and {tuple(rotary_sin.shape)}")
        rotary_dim = 2 * rotary_cos.shape[1]
        if not 2 <= rotary_dim <= d:
            raise ValueError(f"rotary_dim = 2 * rotary_cos.shape[1] = {rotary_dim} must be in [2, headdim={d}]")
        if rotary_cos.shape[0] < n_cap:
            raise ValueError(f"rotary_cos has {rotary_cos.shape[0]} positions (rotary_cos.shape[0]); "
                             f"at least the cache capacity {n_cap} are needed")
    if not isinstance(rotary_interleaved, bool):
        raise TypeError(f"rotary_interleaved must be a bool, got {type(rotary_interleaved).__name__}")

    check_alibi(alibi_slopes, q, batch, h_q)

    scale = check_scale(softmax_scale, "softmax_scale", d)
    check_flag(causal, "causal")
    window_left, window_right = check_window(window_size, causal)
    softcap = check_softcap(softcap)
    if not _is_int(num_splits):
        raise TypeError(f"num_splits must be an int (0: chosen automatically), got {type(num_splits).__name__} "
                        f"{num_splits!r}")
    if num_splits < 0:
        raise ValueError(f"num_splits must be >= 0 (0: chosen automatically), got {num_splits}")
    if not isinstance(return_softmax_lse, bool):
        raise TypeError(f"return_softmax_lse must be a bool, got {type(return_softmax_lse).__name__}")
    return scale, window_left, window_right, float(softcap), n_cap


# ---------------------------------------------------------------------------
# Implementations
# ---------------------------------------------------------------------------

def _use_triton(t: torch.Tensor) -> bool:
    return t.is_cuda or (INTERPRET and t.device.type == "cpu")


def _rotate_torch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pos: torch.Tensor,
                  interleaved: bool) -> torch.Tensor:
    """x (B, N, H, d) rotated at positions pos (B, N); float32 result."""
    rd = 2 * cos.shape[1]
    # Positions outside the tables are not rotated (as in the kernel): an extra
    # row with cos = 1, sin = 0 serves them.
    n_ro = cos.shape[0]
    pos = torch.where((pos >= 0) & (pos < n_ro), pos, torch.full_like(pos, n_ro)).long()
    c = torch.cat((cos.float(), cos.new_ones(1, cos.shape[1]).float()))[pos].unsqueeze(2)  # (B, N, 1, rd/2)
    s = torch.cat((sin.float(), sin.new_zeros(1, sin.shape[1]).float()))[pos].unsqueeze(2)
    x = x.float()
    xr, rest = x[..., :rd], x[..., rd:]
    if interleaved:
        a, b = xr[..., 0::2], xr[..., 1::2]
        rot = torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)
    else:
        a, b = xr[..., : rd // 2], xr[..., rd // 2:]
        rot = torch.cat((a * c - b * s, a * s + b * c), dim=-1)
    return torch.cat((rot, rest), dim=-1)


def _kvcache_torch(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                   cache_leftpad, block_table, alibi_slopes, scale, window_left, window_right,
                   softcap, rotary_interleaved, rotary_q_per_token, out, lse, sinks=None, attention_chunk=0):
    """Dense PyTorch version of the op (CPU without Triton's interpreter)."""
    batch, n_q, h_q, d = q.shape
    h_kv = k_cache.shape[2]
    dev = q.device
    paged = block_table is not None
    page = k_cache.shape[1]
    n_cap = block_table.shape[1] * page if paged else k_cache.shape[1]
    rows = (cache_batch_idx.long() if cache_batch_idx is not None
            else torch.arange(batch, device=dev))
    seqlens = (cache_seqlens.long() if cache_seqlens is not None
               else torch.full((batch,), n_cap, dtype=torch.long, device=dev))
    n_new = 0 if k is None else k.shape[1]

    def locate(pos):  # logical positions (B, N) -> (cache row or page, offset)
        if paged:
            blk = block_table.long().gather(1, (pos // page).clamp(0, block_table.shape[1] - 1))
            return blk, pos % page
        return rows[:, None].expand_as(pos), pos

    if n_new:
        pos = seqlens[:, None] + torch.arange(n_new, device=dev)
        ok = pos < n_cap
        k_new = (_rotate_torch(k, rotary_cos, rotary_sin, pos, rotary_interleaved)
                 if rotary_cos is not None else k)
        where, off = locate(pos.clamp(max=n_cap - 1))
        k_cache[where[ok], off[ok]] = k_new[ok].to(k_cache.dtype)
        v_cache[where[ok], off[ok]] = v[ok].to(v_cache.dtype)

    qr = q
    if rotary_cos is not None:
        qpos = seqlens[:, None] + (torch.arange(n_q, device=dev) if rotary_q_per_token else 0)
        qpos = qpos.expand(batch, n_q)
        qr = _rotate_torch(q, rotary_cos, rotary_sin, qpos, rotary_interleaved).to(q.dtype)
    kv_end = (seqlens + n_new).clamp(max=n_cap)
    cols = torch.arange(n_cap, device=dev)
    valid = cols < kv_end[:, None]
    if cache_leftpad is not None:
        valid = valid & (cols >= cache_leftpad.long()[:, None])
    where, off = locate(cols.expand(batch, n_cap))
    # Only the valid positions are read, as the kernels do: the cache outside
    # them may be garbage (even NaN), and block-table entries no sequence
    # reaches may name no page at all.
    kk = k_cache.new_zeros(batch, n_cap, h_kv, d, dtype=torch.float32)  # (B, n_cap, Hkv, d)
    vv = v_cache.new_zeros(batch, n_cap, h_kv, v_cache.shape[-1], dtype=torch.float32)
    kk[valid] = k_cache[where[valid], off[valid]].float()
    vv[valid] = v_cache[where[valid], off[valid]].float()
    group = h_q // h_kv
    kk = kk.repeat_interleave(group, dim=2)
    vv = vv.repeat_interleave(group, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", qr.float(), kk) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    diag = torch.arange(n_q, device=dev)[None, :] + (kv_end - n_q)[:, None]  # (B, Nq)
    if alibi_slopes is not None:
        slopes = alibi_slopes.float().expand(batch, h_q) if alibi_slopes.dim() == 2 else \
            alibi_slopes.float()[None].expand(batch, h_q)
        dist = (diag[:, None, :, None] - cols).abs().float()
        s = s - slopes[:, :, None, None] * dist
    keep = valid[:, None, :].expand(batch, n_q, n_cap)
    if window_left >= 0:
        keep = keep & (cols >= diag[..., None] - window_left)
    if window_right >= 0:
        keep = keep & (cols <= diag[..., None] + window_right)
    if attention_chunk > 0:  # chunks counted from each sequence's first key
        lp = (cache_leftpad.long()[:, None, None] if cache_leftpad is not None
              else torch.zeros(batch, 1, 1, dtype=torch.long, device=dev))
        keep = keep & chunk_mask(diag[..., None] - lp, cols - lp, attention_chunk)
    s = s.masked_fill(~keep[:, None], float("-inf"))
    row_lse = torch.logsumexp(s, dim=-1)
    if sinks is not None:  # one more logit per head, without a value
        row_lse = torch.logaddexp(row_lse, sinks.float()[None, :, None])
    safe = torch.where(torch.isneginf(row_lse), torch.zeros_like(row_lse), row_lse)
    p = torch.exp(s - safe[..., None])
    out.copy_(torch.einsum("bhqk,bkhd->bqhd", p, vv).to(out.dtype))
    lse.copy_(row_lse)


def _kvcache_impl(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                  cache_leftpad, block_table, alibi_slopes, softmax_scale, causal, window_left,
                  window_right, softcap, rotary_interleaved, num_splits, sinks, attention_chunk=0):
    out = fastlaunch.empty_like(q)  # NaN under fastlaunch.POISON (tests)
    lse = fastlaunch.empty((q.shape[0], q.shape[2], q.shape[1]), torch.float32, q.device)
    _kvcache_into(out, lse, q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                  cache_leftpad, block_table, alibi_slopes, softmax_scale, causal, window_left, window_right,
                  softcap, rotary_interleaved, num_splits, sinks, attention_chunk)
    return out, lse


def _kvcache_into(out, lse, q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                  cache_leftpad, block_table, alibi_slopes, softmax_scale, causal, window_left, window_right,
                  softcap, rotary_interleaved, num_splits, sinks, attention_chunk) -> None:
    """_kvcache_impl into given out (q's layout) and lse (B, Hq, Nq) float32."""
    batch, n_q, h_q, d = q.shape
    if sinks is not None:
        sinks = sinks.float().contiguous()
    if batch == 0 or n_q == 0 or h_q == 0:
        if k is not None and _use_triton(q):  # still append the new tokens
            from .kernels.decode import append_kv
            append_kv(k, v, k_cache, v_cache, cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
                      block_table=block_table, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                      rotary_interleaved=rotary_interleaved)
        return
    # flash-attn: q is rotated at cache_seqlens + i when causal or local (a
    # window, or chunks as FlashAttention-3 counts them), else every query
    # token at cache_seqlens.
    rotary_q_per_token = causal or window_left >= 0 or window_right >= 0 or attention_chunk > 0
    if not _use_triton(q):
        _kvcache_torch(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                       cache_leftpad, block_table, alibi_slopes, softmax_scale, window_left,
                       window_right, softcap, rotary_interleaved, rotary_q_per_token, out, lse, sinks,
                       attention_chunk)
        return
    from .kernels.decode import append_kv, decode_attention
    # (the device guard only where q is not on the current device: entering it costs host time)
    switch = q.is_cuda and q.device.index is not None and q.device.index != torch.cuda.current_device()
    with torch.cuda.device(q.device) if switch else contextlib.nullcontext():
        if k is not None:
            append_kv(k, v, k_cache, v_cache, cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
                      block_table=block_table, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                      rotary_interleaved=rotary_interleaved)
        decode_attention(q, k_cache, v_cache, out, lse, cache_seqlens=cache_seqlens,
                         cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad,
                         block_table=block_table, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                         rotary_interleaved=rotary_interleaved, rotary_q_per_token=rotary_q_per_token,
                         alibi_slopes=alibi_slopes, n_new=0 if k is None else k.shape[1],
                         softmax_scale=softmax_scale, window_left=window_left,
                         window_right=window_right, softcap=softcap, num_splits=num_splits, sinks=sinks,
                         attention_chunk=attention_chunk)


# ---------------------------------------------------------------------------
# The custom op
# ---------------------------------------------------------------------------

@torch.library.custom_op("flashattn_triton::kvcache_fwd", mutates_args=("k_cache", "v_cache"))
def kvcache_fwd(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                k: Optional[torch.Tensor], v: Optional[torch.Tensor],
                rotary_cos: Optional[torch.Tensor], rotary_sin: Optional[torch.Tensor],
                cache_seqlens: Optional[torch.Tensor], cache_batch_idx: Optional[torch.Tensor],
                cache_leftpad: Optional[torch.Tensor], block_table: Optional[torch.Tensor],
                alibi_slopes: Optional[torch.Tensor], softmax_scale: float, causal: bool,
                window_left: int, window_right: int, softcap: float, rotary_interleaved: bool,
                num_splits: int, sinks: Optional[torch.Tensor] = None,
                attention_chunk: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Append k/v to the cache (in place), then attend.  Arguments are those of
    flash_attn_with_kvcache after validation: cache_seqlens is a tensor or
    None, softmax_scale resolved, window_right = 0 when causal, sinks (Hq,)
    in a float dtype or None, attention_chunk >= 0 (0: no chunks).
    Returns (out (B, Nq, Hq, d) in q's dtype, lse (B, Hq, Nq) float32)."""
    return _kvcache_impl(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                         cache_batch_idx, cache_leftpad, block_table, alibi_slopes, softmax_scale,
                         causal, window_left, window_right, softcap, rotary_interleaved, num_splits, sinks,
                         attention_chunk)


@kvcache_fwd.register_fake
def _kvcache_fwd_fake(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                      cache_leftpad, block_table, alibi_slopes, softmax_scale, causal, window_left,
                      window_right, softcap, rotary_interleaved, num_splits, sinks=None, attention_chunk=0):
    batch, n_q, h_q, _ = q.shape
    return torch.empty_like(q), q.new_empty((batch, h_q, n_q), dtype=torch.float32)


@torch.library.custom_op("flashattn_triton::kvcache_attn", mutates_args=())
def kvcache_attn(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 k: Optional[torch.Tensor], v: Optional[torch.Tensor],
                 rotary_cos: Optional[torch.Tensor], rotary_sin: Optional[torch.Tensor],
                 cache_seqlens: Optional[torch.Tensor], cache_batch_idx: Optional[torch.Tensor],
                 cache_leftpad: Optional[torch.Tensor], block_table: Optional[torch.Tensor],
                 alibi_slopes: Optional[torch.Tensor], softmax_scale: float, causal: bool,
                 window_left: int, window_right: int, softcap: float, rotary_interleaved: bool,
                 num_splits: int, sinks: Optional[torch.Tensor] = None,
                 attention_chunk: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """kvcache_fwd without k / v (k and v must be None): attends, writes nothing."""
    if k is not None or v is not None:
        raise ValueError("kvcache_attn writes nothing: k and v must be None (kvcache_fwd appends them)")
    return _kvcache_impl(q, k_cache, v_cache, None, None, rotary_cos, rotary_sin, cache_seqlens,
                         cache_batch_idx, cache_leftpad, block_table, alibi_slopes, softmax_scale,
                         causal, window_left, window_right, softcap, rotary_interleaved, num_splits, sinks,
                         attention_chunk)


kvcache_attn.register_fake(_kvcache_fwd_fake)


def _check_append_target(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    """The caches that an append writes in place: no autograd history to
    corrupt, and no memory shared between them."""
    if torch.is_grad_enabled() and (k_cache.requires_grad or v_cache.requires_grad):
        # As PyTorch's in-place ops on a tensor that requires grad, which this op
        # (no autograd formula: it cannot rebase the cache's history) would
        # otherwise write silently: a leaf raises there, and a non-leaf cache
        # would keep its old grad_fn, giving wrong gradients through it later.
        raise RuntimeError(
            "flash_attn_with_kvcache appends k, v into k_cache / v_cache in place and has no backward, but "
            f"k_cache.requires_grad={k_cache.requires_grad}, v_cache.requires_grad={v_cache.requires_grad}: "
            "call it under torch.no_grad() / torch.inference_mode(), or pass caches that do not require grad")
    # Plain tensors with data only (meta / fake tensors have no addresses to compare).
    plain = all(t.__class__ is torch.Tensor and not t.is_meta for t in (k_cache, v_cache))
    if plain and not torch.compiler.is_compiling():
        if k_cache.numel() and k_cache.data_ptr() == v_cache.data_ptr():
            raise ValueError("k_cache and v_cache start at the same memory (the same tensor, or two views of "
                             "one): appending v would overwrite the appended k; pass two caches, or the two "
                             "halves of a packed (..., 2, nheads_k, headdim) cache")
        for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
            if t.is_inference() and not torch.is_inference_mode_enabled():
                # what PyTorch's own in-place ops (and the blockwise CPU path) raise
                raise RuntimeError(f"{name} is an inference tensor and k, v would be appended to it in place "
                                   "outside InferenceMode, which PyTorch does not allow; call this under "
                                   "torch.inference_mode() or make the cache outside it")


# Eager calls skip the custom op's dispatcher machinery (about 16 us of host
# time per call on CPU, torch 2.13) and call its implementation directly, as
# ops._EagerAttention does for attention: only plain tensors with data, no
# torch.compile / jit trace / functorch transform / forward-AD level, and no
# input that requires grad while grad mode is on (the op path then marks the
# outputs as having no backward).  The same kernels and buffers either way;
# an append bumps the caches' version counters as the op's declared mutation
# does.  False: every call through the op (tests compare the two).
DIRECT = True


def _eager_mode() -> bool:
    """No torch.compile, jit trace, forward-AD level or functorch transform."""
    return not (torch.compiler.is_compiling() or torch.jit.is_tracing() or ops.transforms_active())


def _direct(args: tuple) -> bool:
    if not _eager_mode():
        return False
    grad = torch.is_grad_enabled()
    for t in args:
        if isinstance(t, torch.Tensor) and (t.__class__ is not torch.Tensor or t.is_meta or (grad and t.requires_grad)):
            return False
    return True


def _no_backward(grad):
    raise NotImplementedError("flash_attn_with_kvcache has no backward (it is for inference, as flash-attn's); "
                              "call it under torch.no_grad() / torch.inference_mode(), or use flash_attn_func "
                              "for a step that needs gradients")


# ---------------------------------------------------------------------------
# Call plans of eager calls
# ---------------------------------------------------------------------------
# An eager call (as DIRECT takes it) whose signature repeats skips the checks
# and the launch code: the key holds everything the checks and the kernels'
# choices read (the layouts, dtypes, devices, 16-byte alignment,
# requires_grad and inference flags of every tensor, the options, grad and
# inference mode), so a call that finds a plan would have passed them.  Its
# first calls (at most ops.MAX_RECORD_TRIES) record the launches of
# _kvcache_into (kernels/fastlaunch.py); later calls allocate out / lse and
# replay them with their own tensors in the same roles (the split partials
# as scratch, the fused merge's counters from decode.split_counters per
# call), while the dispatch world (_world) is the recorded one.  A call that
# cannot replay (nothing recorded: the CPU paths, the interpreter, a cache
# without room, rotary tables copied to one row stride; another device is
# current; launch hooks) runs _kvcache_into, still without the checks.
# ops.PLANS_ENABLED (FLASHATTN_TRITON_FAST_LAUNCH=0) turns them off with
# flash_attn_func's.  Not planned: an int cache_seqlens (made a tensor per
# call), non-contiguous per-sequence vectors, autocast, and everything
# DIRECT leaves to the op.

PLANS: dict = {}
MAX_PLANS = 1024
_NUMBER = (float, int)  # exact classes, as api.py's keys


def clear_plans() -> None:
    """Forget every decode call plan (tests, benchmarks)."""
    PLANS.clear()


def _layout(t) -> Optional[tuple]:
    """A tensor argument's part of the key: ops.layout_key and whether it is
    an inference tensor (an append into one outside inference mode raises);
    None (no plan) for a meta tensor too."""
    if t is not None and t.__class__ is torch.Tensor and t.is_meta:
        return None
    key = ops.layout_key(t)
    return key + (t.is_inference(),) if key else key


def _plan_key(q, k_cache, v_cache, optional: tuple, softmax_scale, causal, window_size, softcap,
              rotary_interleaved, num_splits, return_softmax_lse, attention_chunk) -> Optional[tuple]:
    """The call's plan key, None if it cannot be planned.  optional: (k, v,
    rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad,
    block_table, alibi_slopes, sinks) as given; a replay's roles are q,
    k_cache, v_cache, out, lse, the split counters if any, then the given
    ones of these in this order."""
    if not (DIRECT and ops.PLANS_ENABLED) or not _eager_mode():  # (first: dynamo must not trace the rest)
        return None
    if not (causal.__class__ is bool and rotary_interleaved.__class__ is bool
            and return_softmax_lse.__class__ is bool and num_splits.__class__ is int
            and attention_chunk.__class__ is int and window_size.__class__ is tuple and len(window_size) == 2
            and window_size[0].__class__ is int and window_size[1].__class__ is int
            and softcap.__class__ in _NUMBER and (softmax_scale is None or softmax_scale.__class__ in _NUMBER)):
        return None
    seqlens = optional[4]
    if seqlens is not None and seqlens.__class__ is not torch.Tensor:
        return None  # (an int becomes a tensor per call)
    if autocast_active():
        return None
    layouts = tuple([() if t is None else _layout(t) for t in (q, k_cache, v_cache) + optional])
    if None in layouts:
        return None
    grad = torch.is_grad_enabled()
    if grad and any(t[4] for t in layouts if t):
        return None  # (the op path, as _direct)
    for t in optional[4:7]:  # the per-sequence vectors, which the full path makes contiguous
        if t is not None and not t.is_contiguous():
            return None
    return (layouts, grad, torch.is_inference_mode_enabled(), k_cache.data_ptr() == v_cache.data_ptr(),
            softmax_scale, causal, window_size, softcap, rotary_interleaved, num_splits, return_softmax_lse,
            attention_chunk)


def _world() -> tuple:
    """What a replay's launches were chosen by besides the key (tests and
    tools replace these; decode._plan_world holds the environment switches,
    ENV_COMBINE's among them)."""
    from .kernels import decode
    return (decode._plan_world(), decode.MERGE_STAGES, decode.decode_attention,
            decode.append_kv, decode.split_counters, _use_triton, _kvcache_into, fastlaunch.POISON)


class _DecodePlan:
    """A planned signature: the checked options of its first call (softmax_scale
    .. num_splits and attention_chunk as the op takes them), its recorded
    launches once a call recorded them, and what their replays ask for."""

    __slots__ = ("options", "chunk", "lse_shape", "replay", "world", "tries", "counters")

    def __init__(self, args: tuple):
        q = args[0]
        # softmax_scale, causal, window_left, window_right, softcap, rotary_interleaved, num_splits
        self.options = args[12:19]
        self.chunk = args[20]  # attention_chunk
        self.lse_shape = (q.shape[0], q.shape[2], q.shape[1])
        self.replay: Optional[fastlaunch.Replay] = None
        self.world: Optional[tuple] = None
        self.tries = 0
        self.counters = 0  # the split counters' numel each replay passes as a role (0: none)

    def __call__(self, q, k_cache, v_cache, optional: tuple):
        """(out, lse) of the call; optional: as _plan_key's, sinks as given."""
        k, v, cos, sin, seqlens, batch_idx, leftpad, table, alibi, sinks = optional
        if sinks is not None:
            sinks = sinks_for_kernels(sinks)
            optional = optional[:-1] + (sinks,)
        out = fastlaunch.empty_like(q)
        lse = fastlaunch.empty(self.lse_shape, torch.float32, q.device)
        roles: Tuple[torch.Tensor, ...] = (q, k_cache, v_cache, out, lse)
        given = tuple(t for t in optional if t is not None)
        call = ((out, lse, q, k_cache, v_cache, k, v, cos, sin, seqlens, batch_idx, leftpad, table, alibi)
                + self.options + (sinks, self.chunk))
        replay = self.replay
        if replay is not None and self.world == _world():
            if self.counters:
                from .kernels.decode import split_counters
                roles += (split_counters(self.counters, q.device),)
            if not replay(roles + given):  # declined (another device current, launch hooks, ...)
                _kvcache_into(*call)
            return out, lse
        if self.tries < ops.MAX_RECORD_TRIES and fastlaunch.ENABLED and _use_triton(q):
            self.tries += 1
            with fastlaunch.recording() as rec:
                _kvcache_into(*call)
            noted = rec.notes.get("split_counters")
            if noted is not None:
                roles += (noted[1],)
            recorded = rec.replay(roles + given)
            if recorded is not None:
                self.replay, self.world, self.counters = recorded, _world(), noted[0] if noted else 0
            return out, lse
        _kvcache_into(*call)
        return out, lse


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------

@overload
def flash_attn_with_kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            k: Optional[torch.Tensor] = ..., v: Optional[torch.Tensor] = ...,
                            rotary_cos: Optional[torch.Tensor] = ..., rotary_sin: Optional[torch.Tensor] = ...,
                            cache_seqlens: Optional[Union[int, torch.Tensor]] = ...,
                            cache_batch_idx: Optional[torch.Tensor] = ...,
                            cache_leftpad: Optional[torch.Tensor] = ...,
                            block_table: Optional[torch.Tensor] = ..., softmax_scale: Optional[float] = ...,
                            causal: bool = ..., window_size: Tuple[int, int] = ..., softcap: float = ...,
                            rotary_interleaved: bool = ..., alibi_slopes: Optional[torch.Tensor] = ...,
                            num_splits: int = ..., return_softmax_lse: Literal[False] = ..., *,
                            sinks: Optional[torch.Tensor] = ..., attention_chunk: int = ...) -> torch.Tensor: ...
@overload
def flash_attn_with_kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            k: Optional[torch.Tensor] = ..., v: Optional[torch.Tensor] = ...,
                            rotary_cos: Optional[torch.Tensor] = ..., rotary_sin: Optional[torch.Tensor] = ...,
                            cache_seqlens: Optional[Union[int, torch.Tensor]] = ...,
                            cache_batch_idx: Optional[torch.Tensor] = ...,
                            cache_leftpad: Optional[torch.Tensor] = ...,
                            block_table: Optional[torch.Tensor] = ..., softmax_scale: Optional[float] = ...,
                            causal: bool = ..., window_size: Tuple[int, int] = ..., softcap: float = ...,
                            rotary_interleaved: bool = ..., alibi_slopes: Optional[torch.Tensor] = ...,
                            num_splits: int = ..., *, return_softmax_lse: Literal[True],
                            sinks: Optional[torch.Tensor] = ..., attention_chunk: int = ...
                            ) -> Tuple[torch.Tensor, torch.Tensor]: ...
@overload
def flash_attn_with_kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            k: Optional[torch.Tensor] = ..., v: Optional[torch.Tensor] = ...,
                            rotary_cos: Optional[torch.Tensor] = ..., rotary_sin: Optional[torch.Tensor] = ...,
                            cache_seqlens: Optional[Union[int, torch.Tensor]] = ...,
                            cache_batch_idx: Optional[torch.Tensor] = ...,
                            cache_leftpad: Optional[torch.Tensor] = ...,
                            block_table: Optional[torch.Tensor] = ..., softmax_scale: Optional[float] = ...,
                            causal: bool = ..., window_size: Tuple[int, int] = ..., softcap: float = ...,
                            rotary_interleaved: bool = ..., alibi_slopes: Optional[torch.Tensor] = ...,
                            num_splits: int = ..., return_softmax_lse: bool = ..., *,
                            sinks: Optional[torch.Tensor] = ..., attention_chunk: int = ...
                            ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]: ...
def flash_attn_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: Optional[torch.Tensor] = None,
    v: Optional[torch.Tensor] = None,
    rotary_cos: Optional[torch.Tensor] = None,
    rotary_sin: Optional[torch.Tensor] = None,
    cache_seqlens: Optional[Union[int, torch.Tensor]] = None,
    cache_batch_idx: Optional[torch.Tensor] = None,
    cache_leftpad: Optional[torch.Tensor] = None,
    block_table: Optional[torch.Tensor] = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    rotary_interleaved: bool = True,
    alibi_slopes: Optional[torch.Tensor] = None,
    num_splits: int = 0,
    return_softmax_lse: bool = False,
    *,
    sinks: Optional[torch.Tensor] = None,
    attention_chunk: int = 0,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Attention of a few new query tokens against a KV cache, call-compatible
    with ``flash_attn.flash_attn_with_kvcache``; no backward.

    If k and v are given they are first written into the cache *in place*,
    sequence b at positions cache_seqlens[b], cache_seqlens[b] + 1, ...; the
    attention then covers the cache including them.  The cache must have room:
    positions at or past its capacity are dropped, not written.

    Rotary embedding (rotary_cos/sin given, which needs k and v): the new keys
    are rotated at positions cache_seqlens[b] + i before they are stored.  The
    query is rotated at cache_seqlens[b] + i when causal or local (window_size
    != (-1, -1), or attention_chunk > 0), otherwise every query token at
    position cache_seqlens[b].

    Sequence b attends to the keys at positions [cache_leftpad[b], kv_end_b)
    with kv_end_b = cache_seqlens[b] + seqlen_new.  With causal=True the mask
    is aligned to the bottom-right corner of that range: query token i attends
    key position j iff j <= i + kv_end_b - seqlen_q (speculative decoding: the
    Nq new tokens see the cache and each other causally).  For seqlen_q = 2
    and kv_end = 5 (1 = attended)::

        1 1 1 1 0
        1 1 1 1 1

    A query row that attends no key (cache_seqlens = 0 and nothing appended,
    causal with seqlen_q > kv_end, or a chunked row before the first key)
    outputs zeros and its LSE is -inf (sinks[h] when sinks are given).

    GQA / MQA: nheads must be a multiple of nheads_k; query head h reads KV
    head h // (nheads // nheads_k).  The heads of a group are processed
    together: each K/V tile is read once for all of them and all Nq tokens.

    Arguments:
        q: (batch_size, seqlen, nheads, headdim); float16, bfloat16 or float32;
            headdim 1..256; last dimension with stride 1 (as for every tensor here).
        k_cache: (batch_size_cache, seqlen_cache, nheads_k, headdim) without
            block_table, or (num_blocks, page_block_size, nheads_k, headdim) with
            block_table (a paged cache); page_block_size any positive multiple of 16.
            Same dtype and device as q.  Written in place when k is given.
        v_cache: like k_cache.
        k [optional]: (batch_size, seqlen_new, nheads_k, headdim), appended at cache_seqlens.
        v [optional]: (batch_size, seqlen_new, nheads_k, headdim), like k.
        rotary_cos [optional]: (seqlen_ro, rotary_dim / 2), seqlen_ro >= the cache
            capacity (seqlen_cache, or max_num_blocks_per_seq * page_block_size);
            rotary_dim even and <= headdim (any even value; flash-attn asks for
            multiples of 16).
        rotary_sin [optional]: (seqlen_ro, rotary_dim / 2), like rotary_cos.
        cache_seqlens: int, or (batch_size,) torch.int32: the position one past
            the last cached token of each sequence, before appending (the number of
            cached tokens when cache_leftpad is 0).  None means a full cache (and
            forbids k/v).  Values are not checked on the host (that
            would synchronise): they must lie in [0, capacity - seqlen_new].
        cache_batch_idx [optional]: (batch_size,) torch.int32, the row of the
            (non-paged) cache of each sequence; default 0..batch_size-1.  With
            duplicate indices and k/v given, which append wins is unspecified.
            Values are not checked (no sync): each must lie in [0, batch_size_cache).
        cache_leftpad [optional]: (batch_size,) torch.int32, index of the first
            valid key of each sequence (keys before it are ignored); default 0.
        block_table [optional]: (batch_size, max_num_blocks_per_seq) torch.int32:
            logical page p of sequence b is physical page block_table[b, p].
            Entries a sequence reads or appends to must lie in [0, num_blocks)
            (not checked: an entry outside reads or writes out of bounds).
        softmax_scale: scaling of q k^T before the softmax; default 1/sqrt(headdim).
        causal: causal mask, bottom-right aligned (see above).
        window_size: (left, right); not (-1, -1) restricts query i to key positions
            [i + kv_end - seqlen_q - left, i + kv_end - seqlen_q + right] (-1: unbounded
            on that side; causal sets right = 0).
        softcap: > 0 replaces each score s by softcap * tanh(s / softcap).
        rotary_interleaved: rotate dimension pairs (0, 1), (2, 3), ... if True, else
            (i, i + rotary_dim / 2) (GPT-NeoX style).
        alibi_slopes [optional]: (nheads,) or (batch_size, nheads) float32; adds
            -slope * |i + kv_end - seqlen_q - j| to the score of query i and key j.
        num_splits: split each sequence's keys over this many programs, merged
            exactly afterwards; 0 picks a count from batch size, KV heads and the
            number of SMs (never from tensor values).  Results agree for every count.
        return_softmax_lse: also return the LSE.
        sinks: keyword-only.  None, or a float tensor of shape (nheads,) on q's
            device: learnable attention sinks (gpt-oss), as in flash_attn_func.
            Head h's softmax gets one extra logit sinks[h] in its denominator
            that carries no value:
            P_ij = exp(s_ij) / (exp(sinks[h]) + sum_j' exp(s_ij')).  Used in
            float32, not scaled by softmax_scale, added once after the split-KV
            merge.  The LSE includes it; a row that sees no key outputs zeros
            and has LSE = sinks[h].  No gradient (this function has no backward).
        attention_chunk: keyword-only.  Chunked attention (Llama 4's local
            layers, FlashAttention-3's attention_chunk): an int >= 0, 0 (the
            default) for none.  C > 0 cuts the cache into chunks of C key
            positions counted from each sequence's first key lp =
            cache_leftpad[b] (0 without cache_leftpad, as FlashAttention-3
            and this library's varlen path count them): query token i, at key
            position p = i + kv_end - seqlen_q, attends key j only if
            (j - lp) // C == (p - lp) // C (and nothing when p < lp),
            intersected with causal / window_size.
            The key tiles outside the chunks are skipped (also by each split).

    Under ``torch.autocast``, q, k and v are cast to the autocast dtype; the caches
    are not (they are written in place) and must already have it.

    Returns:
        out: (batch_size, seqlen, nheads, headdim), the dtype of q.
        softmax_lse [if return_softmax_lse]: (batch_size, nheads, seqlen) float32,
            natural-log log-sum-exp of each row of the (scaled, capped, biased) scores
            (and of the sink logit, if given).
    """
    optional = (k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad, block_table,
                alibi_slopes, sinks)
    key = _plan_key(q, k_cache, v_cache, optional, softmax_scale, causal, window_size, softcap, rotary_interleaved,
                    num_splits, return_softmax_lse, attention_chunk)
    if key is not None:
        plan = PLANS.get(key)
        if plan is not None:  # a signature checked before: no checks, its launches replayed
            out, lse = plan(q, k_cache, v_cache, optional)
            if k is not None:
                torch.autograd.graph.increment_version((k_cache, v_cache))
            return (out, lse) if return_softmax_lse else out
    # Under autocast, q and the new k, v take the autocast dtype; the caches are
    # state written in place, never cast, so they must already have it.
    q, k, v = autocast_inputs(q, k, v)
    scale, window_left, window_right, softcap, _ = _validate(
        q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
        cache_leftpad, block_table, softmax_scale, causal, window_size, softcap,
        rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse)
    sinks = check_sinks(sinks, q, q.shape[2])
    attention_chunk = check_attention_chunk(attention_chunk)
    if k is not None:
        _check_append_target(k_cache, v_cache)
    # The kernels read these per-sequence vectors at PTR + b (a strided view would be misread).
    if isinstance(cache_seqlens, torch.Tensor):
        cache_seqlens = cache_seqlens.contiguous()
    if cache_batch_idx is not None:
        cache_batch_idx = cache_batch_idx.contiguous()
    if cache_leftpad is not None:
        cache_leftpad = cache_leftpad.contiguous()
    if _is_int(cache_seqlens):
        cache_seqlens = torch.full((q.shape[0],), int(cast(int, cache_seqlens)), dtype=_INDEX_DTYPE,
                                   device=q.device)
    args = (q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
            cache_leftpad, block_table, alibi_slopes, scale, causal, window_left, window_right, softcap,
            rotary_interleaved, min(int(num_splits), 2 ** 30), sinks,  # (splits past the key tiles: one per tile)
            attention_chunk)
    if DIRECT and _direct(args):
        if key is not None:  # the first call of a plannable signature, checked: its plan
            plan = _DecodePlan(args)
            out, lse = plan(q, k_cache, v_cache, args[3:12] + (sinks,))
            if len(PLANS) >= MAX_PLANS:
                PLANS.clear()
            PLANS[key] = plan
        else:
            out, lse = _kvcache_impl(*args)
        if k is not None:  # what the op's declared mutation does in eager mode (none for inference tensors)
            torch.autograd.graph.increment_version((k_cache, v_cache))
        return (out, lse) if return_softmax_lse else out
    # Only a call that appends mutates the caches: a read-only call goes through
    # an op that declares no mutation, so it leaves their version counters alone
    # (a cache saved by an earlier autograd op stays usable) and torch.compile
    # need not functionalize a whole-cache copy for it.
    op = torch.ops.flashattn_triton.kvcache_fwd if k is not None else torch.ops.flashattn_triton.kvcache_attn
    out, lse = op(*args)
    if out.requires_grad and not torch.compiler.is_compiling():
        # A backward through the outputs says what it is instead of autograd's
        # "no autograd formula was registered" (a mutating op cannot have one).
        out.register_hook(_no_backward)
        lse.register_hook(_no_backward)
    return (out, lse) if return_softmax_lse else out
