"""flashattn_triton: exact FlashAttention in Triton kernels.

Public entry points (all in :mod:`flashattn_triton.api`, all thin wrappers
over the custom ops of :mod:`flashattn_triton.ops`):

* :func:`flash_attn_func` -- layout (batch, seqlen, nheads, headdim), call-compatible
  with ``flash_attn.flash_attn_func``; causal aligned bottom-right.
* :func:`flash_attn_varlen_func` -- packed variable-length batches (cu_seqlens).
* :func:`flash_attn_qkvpacked_func`, :func:`flash_attn_kvpacked_func`, and their varlen forms
  :func:`flash_attn_varlen_qkvpacked_func`, :func:`flash_attn_varlen_kvpacked_func`.
* :func:`flash_attn_with_kvcache` -- decoding against a KV cache (contiguous or paged),
  split-KV, appends new keys/values in place.
* :func:`scaled_dot_product_attention` -- layout (..., nheads, seqlen, headdim), the
  semantics of ``torch.nn.functional.scaled_dot_product_attention``.
"""

from ._validate import MAX_HEAD_DIM, SUPPORTED_DTYPES
from ._kvcache import flash_attn_with_kvcache
from .api import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                  flash_attn_varlen_func, flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func,
                  scaled_dot_product_attention)

__version__ = "0.2.0"

from ._prefetch import start_key_warmup as _start_key_warmup  # noqa: E402

_start_key_warmup()

__all__ = [
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "scaled_dot_product_attention",
    "SUPPORTED_DTYPES",
    "MAX_HEAD_DIM",
    "__version__",
]
