"""Merging partial attentions by their log-sum-exp.

Attention over a key set split into parts A and B is recovered exactly from
the parts' outputs and LSEs (natural log):
    lse = log(exp(lse_a) + exp(lse_b)),   out = exp(lse_a - lse) out_a + exp(lse_b - lse) out_b.
A part that saw no key has lse = -inf and weight 0; if both saw none the
result is out = 0, lse = -inf.  Split-KV decoding and ring attention both
use this rule.
"""

from __future__ import annotations

import torch


def merge_attention_states(out_a: torch.Tensor, lse_a: torch.Tensor,
                           out_b: torch.Tensor, lse_b: torch.Tensor):
    """Merge two partial results.

    out_*: (..., N, H, d) in flash layout; lse_*: (..., H, N) float32 natural log.
    Returns (out float32, lse float32) of the same shapes."""
    lse = torch.logaddexp(lse_a, lse_b)
    # Rows with lse = -inf on both sides: use 0 as the reference so weights are exp(-inf) = 0.
    ref = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    w_a = torch.exp(lse_a - ref).transpose(-1, -2).unsqueeze(-1)  # (..., N, H, 1)
    w_b = torch.exp(lse_b - ref).transpose(-1, -2).unsqueeze(-1)
    out = out_a.float() * w_a + out_b.float() * w_b
    return out, lse
