"""The parameter record: every option of an attention call, built once by the
public function and flattened only where the op and the kernels are called.

Conventions shared by every layer:
* window_left / window_right: -1 = unbounded.  Query row i sees key j iff
  i + shift - left <= j <= i + shift + right, shift = n_k - n_q for
  bottom-right alignment (flash-attn) and 0 for top-left (SDPA).  causal is
  window_right = 0.
* cu_seqlens_q / cu_seqlens_k: int32 (B + 1,) offsets of packed sequences,
  None for dense batches; max_seqlen_* then size the grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass(frozen=True)
class AttnParams:
    softmax_scale: float
    window_left: int = -1
    window_right: int = -1
    bottom_right: bool = True
    cu_seqlens_q: Optional[torch.Tensor] = None
    cu_seqlens_k: Optional[torch.Tensor] = None
    max_seqlen_q: int = 0
    max_seqlen_k: int = 0

    @property
    def causal(self) -> bool:
        return self.window_right == 0

    @property
    def varlen(self) -> bool:
        return self.cu_seqlens_q is not None

    def op_args(self):
        """The flat argument list of the custom ops, after (q, k, v) / (dout, q, k, v, out, lse, dlse)."""
        return (self.cu_seqlens_q, self.cu_seqlens_k, self.max_seqlen_q, self.max_seqlen_k,
                self.softmax_scale, self.window_left, self.window_right, self.bottom_right)


def window_bounds(window_left: int, window_right: int):
    """(left, right) for the kernels: None where unbounded."""
    return (None if window_left < 0 else window_left, None if window_right < 0 else window_right)
