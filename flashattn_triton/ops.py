"""Op layer (being built): raw forward/backward used by every entry point.

Stable raw interface (flash layout (B, N, H, d), LSE natural log (B, Hq, Nq) float32):
    flash_fwd(q, k, v, softmax_scale, causal, window_size=(-1, -1)) -> (out, lse)
    flash_bwd(dout, q, k, v, out, lse, softmax_scale, causal, window_size=(-1, -1)) -> (dq, dk, dv)
No autograd at this level.  `lse` given to flash_bwd is the LSE of the whole
row (it may come from merging partial attentions), so P = exp(s - lse).
"""

from __future__ import annotations

import torch


def flash_fwd(q, k, v, softmax_scale: float, causal: bool, window_size=(-1, -1)):
    from .interface import _forward, _SEQ_DIM_FLASH
    if tuple(window_size) != (-1, -1):
        raise NotImplementedError("window_size is not implemented yet")
    shift = k.shape[1] - q.shape[1] if causal else None
    return _forward(q, k, v, softmax_scale, shift, _SEQ_DIM_FLASH)


def flash_bwd(dout, q, k, v, out, lse, softmax_scale: float, causal: bool, window_size=(-1, -1)):
    from .interface import _backward, _SEQ_DIM_FLASH
    if tuple(window_size) != (-1, -1):
        raise NotImplementedError("window_size is not implemented yet")
    shift = k.shape[1] - q.shape[1] if causal else None
    return _backward(dout, None, q, k, v, out, lse, softmax_scale, shift, _SEQ_DIM_FLASH)
