"""Checked by mypy in CI (pyproject [tool.mypy]), never run: calls of the public API
as user code writes them, so that a wrong annotation or overload in the library
shows up as a mypy error here (reveal_type-free: each line assigns to the
type the caller expects)."""

from typing import Optional, Tuple

import torch

import flashattn_triton
from flashattn_triton import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                              flash_attn_varlen_func, flash_attn_with_kvcache, scaled_dot_product_attention)
from flashattn_triton.distributed import (gather_sequence, local_cu_seqlens, ring_flash_attn_func,
                                          ring_flash_attn_varlen_func, shard_sequence, shard_varlen)
from flashattn_triton.integrations.transformers import register
from flashattn_triton.nn import Attention, MultiheadAttention


def dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> float:
    out: torch.Tensor = flash_attn_func(q, k, v, causal=True, window_size=(128, 0), softcap=30.0)
    pair: Tuple[torch.Tensor, torch.Tensor] = flash_attn_func(q, k, v, return_lse=True)
    triple: Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]] = flash_attn_func(
        q, k, v, dropout_p=0.1, return_attn_probs=True)
    out_p, lse = flash_attn_func(q, k, v, 0.0, None, True, return_lse=True)
    sdpa: torch.Tensor = scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    packed: torch.Tensor = flash_attn_qkvpacked_func(torch.stack([q, k, v], dim=2), causal=True)
    kvp: torch.Tensor = flash_attn_kvpacked_func(q, torch.stack([k, v], dim=2))
    kvp_lse: Tuple[torch.Tensor, torch.Tensor] = flash_attn_kvpacked_func(
        q, torch.stack([k, v], dim=2), return_lse=True, sinks=torch.zeros(q.shape[2]))
    qkvp_lse: Tuple[torch.Tensor, torch.Tensor] = flash_attn_qkvpacked_func(
        torch.stack([q, k, v], dim=2), return_lse=True)
    chunked: Tuple[torch.Tensor, torch.Tensor] = flash_attn_func(q, k, v, causal=True, return_lse=True,
                                                                 attention_chunk=8192)
    return float((out + pair[1].sum() + triple[0] + out_p + lse.sum() + sdpa + packed + kvp + kvp_lse[0]
                  + qkvp_lse[1].sum() + chunked[0]).sum())


def varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = flash_attn_varlen_func(q, k, v, cu, cu, 128, 128, causal=True, attention_chunk=64)
    out2, lse = flash_attn_varlen_func(q, k, v, cu, cu, 128, 128, return_lse=True)
    out3: torch.Tensor = flashattn_triton.flash_attn_varlen_qkvpacked_func(torch.stack([q, k, v], dim=1), cu, 128)
    out4, lse4 = flashattn_triton.flash_attn_varlen_kvpacked_func(q, torch.stack([k, v], dim=1), cu, cu, 128, 128,
                                                                  return_lse=True)
    return out + out2 + lse.sum() + out3 + out4 + lse4.sum()


def decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    out = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, causal=True)
    sinks = torch.zeros(q.shape[2])
    out2: torch.Tensor = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, sinks=sinks)
    out3, lse = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, return_softmax_lse=True,
                                        sinks=sinks)
    out4: torch.Tensor = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, causal=True,
                                                 attention_chunk=8192)
    out5, lse5 = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, return_softmax_lse=True,
                                         attention_chunk=8192)
    return (out if isinstance(out, torch.Tensor) else out[0]) + out2 + out3 + lse.sum() + out4 + out5 + lse5.sum()


def ring(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    ql = shard_sequence(q, 0, 2, 1)
    out = ring_flash_attn_func(ql, shard_sequence(k, 0, 2, 1), shard_sequence(v, 0, 2, 1), causal=True)
    return gather_sequence(out, None, 1)


def ring_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor) -> torch.Tensor:
    ql, kl, vl = (shard_varlen(t, cu, 0, 2) for t in (q, k, v))
    return ring_flash_attn_varlen_func(ql, kl, vl, local_cu_seqlens(cu, 2), 1024, causal=True)


def modules(x: torch.Tensor) -> torch.Tensor:
    mha = MultiheadAttention(64, 4, batch_first=True)
    y, weights = mha(x, x, x, need_weights=False)
    block = Attention(64, 4, n_kv_heads=2, rotary=True, causal=True)
    name: str = register()
    assert weights is None and name and flashattn_triton.__version__
    return y + block(x)
