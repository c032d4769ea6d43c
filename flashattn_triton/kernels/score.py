"""What happens to a tile of scores before the softmax.

Scores arrive in base 2: s2 = (q . k) * scale * log2(e), so that the softmax
uses exp2.  This module holds the masks (sequence end, causal, sliding
window) applied to masked tiles; the score modifications of the variants
(softcap, ALiBi, ...) are added here as compile-time switches so the
forward, backward and decode kernels share them.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def visible(rows, cols, n_k, shift, window_left, window_right,
            MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr):
    """Key cols visible to query rows (rule in kernels/tiles.py).  rows and
    cols are broadcastable index tensors: rows[:, None] and cols[None, :] for
    a score tile, rows[None, :] and cols[:, None] for a transposed one."""
    keep = cols < n_k
    if MASK_RIGHT:
        keep = keep & (cols <= rows + (shift + window_right))
    if MASK_LEFT:
        keep = keep & (cols >= rows + (shift - window_left))
    return keep


@triton.jit
def mask_scores(s, rows, cols, n_k, shift, window_left, window_right,
                MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr):
    """s with invisible entries set to -inf (exp2 gives exactly 0 there);
    rows, cols broadcastable as in visible()."""
    keep = visible(rows, cols, n_k, shift, window_left, window_right, MASK_LEFT, MASK_RIGHT)
    return tl.where(keep, s, float("-inf"))
