"""flashattn_triton: exact FlashAttention in Triton kernels.

Public entry points:

* :func:`flash_attn_func` -- layout (batch, seqlen, nheads, headdim), call-compatible
  with ``flash_attn.flash_attn_func``; causal aligned bottom-right.
* :func:`scaled_dot_product_attention` -- layout (batch, nheads, seqlen, headdim),
  the semantics of ``torch.nn.functional.scaled_dot_product_attention``.
"""

from .interface import MAX_HEAD_DIM, SUPPORTED_DTYPES, flash_attn_func, scaled_dot_product_attention

__version__ = "0.1.0"

__all__ = [
    "flash_attn_func",
    "scaled_dot_product_attention",
    "SUPPORTED_DTYPES",
    "MAX_HEAD_DIM",
    "__version__",
]
