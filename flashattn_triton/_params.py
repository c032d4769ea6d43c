"""The parameter record: every option of an attention call, built once by the
public function and flattened only where the op and the kernels are called.

Conventions shared by every layer:
* window_left / window_right: -1 = unbounded.  Query row i sees key j iff
  i + shift - left <= j <= i + shift + right, shift = n_k - n_q for
  bottom-right alignment (flash-attn) and 0 for top-left (SDPA).  causal is
  window_right = 0.
* cu_seqlens_q / cu_seqlens_k: int32 (B + 1,) offsets of packed sequences,
  None for dense batches; max_seqlen_* then size the grid.
* Variants (kernels/score.py has their order and math), all off by default:
  softcap > 0; alibi_slopes float32 (Hq,) or (B, Hq); sinks float32 (Hq,);
  attn_bias, 4-D broadcastable to (B, Hq, Nq, Nk) with every dim of size 1 or
  full, bool (True = attend) or float (added to the scores); dropout_p with
  rng_seed, a (1,) int64 tensor on the device drawn per call (see
  draw_dropout_seed).
* deterministic: the backward adds dQ without atomics (never the Hopper
  backward: _dispatch.use_hopper_backward).
* attention_chunk: chunked attention (Llama 4), 0 = off.  With C > 0, row i
  (key position p = i + shift) sees key j only if j // C == p // C (floor;
  p < 0 sees nothing), on top of the window rule above.  The portable
  kernels only (_dispatch.use_hopper_forward / use_hopper_backward).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

# The seed's range: Philox takes a 64-bit key; 2^62 keeps it positive in int64.
_SEED_RANGE = 2 ** 62


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
    softcap: float = 0.0
    alibi_slopes: Optional[torch.Tensor] = None
    sinks: Optional[torch.Tensor] = None
    attn_bias: Optional[torch.Tensor] = None
    dropout_p: float = 0.0
    rng_seed: Optional[torch.Tensor] = None
    deterministic: bool = False  # the backward never uses the Hopper backward (dQ by atomics)
    attention_chunk: int = 0  # chunked attention's chunk size, 0 = off (module doc)

    @property
    def causal(self) -> bool:
        return self.window_right == 0

    @property
    def varlen(self) -> bool:
        return self.cu_seqlens_q is not None

    def op_args(self):
        """The flat argument list of the custom ops, after (q, k, v) / (dout, q, k, v, out, lse, dlse)."""
        return (self.cu_seqlens_q, self.cu_seqlens_k, self.max_seqlen_q, self.max_seqlen_k,
                self.softmax_scale, self.window_left, self.window_right, self.bottom_right,
                self.softcap, self.alibi_slopes, self.sinks, self.attn_bias, self.dropout_p,
                self.rng_seed, self.deterministic, self.attention_chunk)


def has_variants(softcap: float, alibi_slopes, sinks, attn_bias, dropout_p: float) -> bool:
    """Whether any score modification, sink or dropout is on."""
    return (softcap > 0 or alibi_slopes is not None or sinks is not None or attn_bias is not None
            or dropout_p > 0)


def compensated_lse(attn_bias, varlen: bool = False) -> bool:
    """Whether a call's forward returns the compensated LSE (ops.py module
    doc): dense calls with a floating-point attn_bias, whose rows of one huge
    finite value (-1e9, finfo.min) need the residual in the backward."""
    return attn_bias is not None and not varlen and attn_bias.is_floating_point()


def lse_shape(q: torch.Tensor, varlen: bool, attn_bias=None) -> tuple:
    """The forward op's lse2 for q (B, Nq, Hq, d), packed (total_q, Hq, d):
    (B, Hq, Nq), packed (Hq, total_q); with a float attn_bias the compensated
    LSE's (B, Hq, 2, Nq) (ops.py module doc)."""
    if compensated_lse(attn_bias, varlen):
        return (q.shape[0], q.shape[2], 2, q.shape[1])
    return (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])


def draw_dropout_seed(device: torch.device) -> torch.Tensor:
    """The Philox seed of one call: a (1,) int64 tensor drawn from torch's
    default generator of `device` (so torch.manual_seed makes calls
    reproducible).  Drawn on the device itself: no host-device sync, and under
    CUDA-graph capture each replay draws a fresh seed through PyTorch's
    graph-safe generator; the kernels read it from memory."""
    return torch.randint(0, _SEED_RANGE, (1,), dtype=torch.int64, device=device)


def window_bounds(window_left: int, window_right: int):
    """(left, right) for the kernels: None where unbounded."""
    return (None if window_left < 0 else window_left, None if window_right < 0 else window_right)
