"""Attention modules on flashattn_triton's kernels.

* :class:`MultiheadAttention` -- a drop-in for ``torch.nn.MultiheadAttention``:
  the same constructor arguments, parameters and state-dict keys, the same
  outputs for the same weights.  Attention weights are never materialised
  (``need_weights`` must be False, which is the default here).
* :class:`Attention` -- a compact self-attention block for new models: one
  fused qkv projection, grouped-query attention (``n_kv_heads``), optional
  rotary position embedding, causal or not, optional sliding window, packed
  variable-length batches, output projection.
* :class:`RotaryEmbedding` -- rotary position embedding (RoPE), the
  rotate-half (GPT-NeoX / Llama) or the interleaved (GPT-J) convention.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Dict, Optional, Tuple, Union, cast

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import check_dropout, check_flag, check_offsets, check_scale, check_window
from .api import _sdpa, flash_attn_func, flash_attn_varlen_func, scaled_dot_product_attention

__all__ = ["MultiheadAttention", "Attention", "RotaryEmbedding"]


# ---------------------------------------------------------------------------
# torch.nn.MultiheadAttention drop-in
# ---------------------------------------------------------------------------

def _size(name: str, value, minimum: int = 1) -> int:
    """A module size argument: an int (TypeError) of at least minimum (ValueError)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def _module_dropout(dropout) -> float:
    """The modules' dropout probability, checked when the module is built
    (the functions' check, under the module's argument name)."""
    try:
        return check_dropout(dropout)
    except (TypeError, ValueError) as e:
        raise type(e)(str(e).replace("dropout_p", "dropout", 1)) from None


class MultiheadAttention(nn.Module):
    """Multi-head attention with the interface of ``torch.nn.MultiheadAttention``.

    Arguments (as in PyTorch):
        embed_dim: model dimension E; the output has it too.
        num_heads: H; E must be a multiple of H (head dim E / H, 1..256).
        dropout: attention dropout probability, applied in training mode
            (regenerated in the backward; see docs/variants.md).
        bias: biases in the input and output projections.
        add_bias_kv: append a learned key and value token to every sequence.
        add_zero_attn: append a zero key and value token to every sequence.
        kdim, vdim: feature sizes of key and value inputs (default E).  When
            they differ from E the input projection is stored as separate
            ``q_proj_weight``, ``k_proj_weight``, ``v_proj_weight`` (as PyTorch).
        batch_first: inputs and outputs are (batch, seq, feature) if True,
            (seq, batch, feature) if False (PyTorch's default).
        device, dtype: factory arguments of the parameters.

    Parameters and state-dict keys are PyTorch's: ``in_proj_weight`` (3E, E) or
    ``q_proj_weight`` (E, E), ``k_proj_weight`` (E, kdim), ``v_proj_weight``
    (E, vdim); ``in_proj_bias`` (3E,); ``out_proj.weight``, ``out_proj.bias``;
    ``bias_k``, ``bias_v`` (1, 1, E).  So ``load_state_dict`` works both ways.

    Differences from PyTorch:

    * ``need_weights`` defaults to False, and True raises NotImplementedError:
      the (L, S) probability matrix is never formed.  The second output is None.
    * ``is_causal=True`` needs no ``attn_mask``: it applies the causal mask
      (query i attends keys j <= i, aligned top-left as in PyTorch).  An
      ``attn_mask`` passed with it is, as in PyTorch, a mask that the hint
      says is causal: with no ``key_padding_mask`` and no appended tokens it
      is not read (the causal kernel runs); otherwise it is used as given
      (merged with ``key_padding_mask``), and no causal mask is added to it.
      A wrong hint (a mask that is not causal) is undefined in PyTorch; here
      the mask is then ignored in the first case and applied in the second.
    * With ``add_bias_kv`` / ``add_zero_attn``, ``is_causal=True`` masks the
      real keys causally and every query attends the appended tokens: the
      result of PyTorch's default ``need_weights=True`` path, and of
      ``is_causal=False`` with the causal ``attn_mask``.  PyTorch's
      ``need_weights=False`` path instead applies its causal hint to the keys
      *with* the appended tokens, so that query i < S does not attend them.
    * A query that may attend no key outputs zeros (PyTorch: NaN with its
      default need_weights=True and on its inference fast path (eval, no
      grad), zeros otherwise with need_weights=False).
    * ``key_padding_mask`` / ``attn_mask`` are merged into one mask and go
      through ``flashattn_triton.scaled_dot_product_attention(attn_mask=...)``
      (boolean when both are boolean, else additive float, in float32 when a
      float mask's dtype is not the query's): an ``attn_mask`` with a
      ``key_padding_mask``, or ``is_causal`` with appended tokens, becomes one
      (B, 1 or H, L, S) mask; ``is_causal`` with a ``key_padding_mask`` alone
      passes the (B, 1, 1, S) padding mask and the kernels' causal mask (O(N)).
    * float16, bfloat16 and float32 only (PyTorch's module also runs float64);
      arguments are checked when the module is built, and more strictly
      (``dropout`` in [0, 1), ``batch_first`` a bool, sizes >= 1); masks of
      another float dtype than the query are accepted (PyTorch refuses some);
      ``torch.jit.script`` is not supported (``torch.compile`` is).
    * Inside ``torch.nn.TransformerEncoderLayer`` / ``TransformerEncoder``, the
      inference fast path (eval, no grad) calls :meth:`merge_masks` and then
      PyTorch's fused kernel with this module's weights: those calls do not
      run this library's kernels.
    """

    __constants__ = ["batch_first"]

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: Optional[int] = None,
                 vdim: Optional[int] = None, batch_first: bool = False,
                 device: Optional[Union[str, torch.device]] = None, dtype: Optional[torch.dtype] = None) -> None:
        for name, size in (("embed_dim", embed_dim), ("num_heads", num_heads)):
            if isinstance(size, bool) or not isinstance(size, numbers.Integral):
                raise TypeError(f"{name} must be an int, got {type(size).__name__} {size!r}")
        for name, other in (("kdim", kdim), ("vdim", vdim)):
            if other is not None:
                _size(name, other)
        dropout = _module_dropout(dropout)
        check_flag(batch_first, "batch_first")
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} "
                             f"and num_heads={num_heads}")
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        factory: Dict[str, Any] = {"device": device, "dtype": dtype}
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self._qkv_same_embed_dim:
            self.in_proj_weight = nn.Parameter(torch.empty((3 * embed_dim, embed_dim), **factory))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = nn.Parameter(torch.empty((embed_dim, embed_dim), **factory))
            self.k_proj_weight = nn.Parameter(torch.empty((embed_dim, self.kdim), **factory))
            self.v_proj_weight = nn.Parameter(torch.empty((embed_dim, self.vdim), **factory))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = nn.Parameter(torch.empty(3 * embed_dim, **factory))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.bias_k: Optional[nn.Parameter]
        self.bias_v: Optional[nn.Parameter]
        if add_bias_kv:
            self.bias_k = nn.Parameter(torch.empty((1, 1, embed_dim), **factory))
            self.bias_v = nn.Parameter(torch.empty((1, 1, embed_dim), **factory))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """PyTorch's initialisation."""
        if self._qkv_same_embed_dim:
            nn.init.xavier_uniform_(self.in_proj_weight)
        else:
            nn.init.xavier_uniform_(self.q_proj_weight)
            nn.init.xavier_uniform_(self.k_proj_weight)
            nn.init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            nn.init.constant_(self.in_proj_bias, 0.0)
            nn.init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None and self.bias_v is not None:
            nn.init.xavier_normal_(self.bias_k)
            nn.init.xavier_normal_(self.bias_v)

    def _project(self, query, key, value, self_attn: bool, kv_same: bool):
        """(B, L, E), (B, S, kdim), (B, S, vdim) -> q (B, L, E), k, v (B, S, E)."""
        e = self.embed_dim
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            if self_attn:  # one matmul; q, k, v are strided views of its output
                return F.linear(query, w, b).chunk(3, dim=-1)
            q = F.linear(query, w[:e], bq)
            if kv_same:
                k, v = F.linear(key, w[e:], None if b is None else b[e:]).chunk(2, dim=-1)
                return q, k, v
            return q, F.linear(key, w[e:2 * e], bk), F.linear(value, w[2 * e:], bv)
        return (F.linear(query, self.q_proj_weight, bq), F.linear(key, self.k_proj_weight, bk),
                F.linear(value, self.v_proj_weight, bv))

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                key_padding_mask: Optional[torch.Tensor] = None, need_weights: bool = False,
                attn_mask: Optional[torch.Tensor] = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> Tuple[torch.Tensor, None]:
        """
        Arguments:
            query: (B, L, E) if batch_first else (L, B, E); or (L, E) unbatched.
            key: (B, S, kdim) / (S, B, kdim) / (S, kdim).
            value: (B, S, vdim) / (S, B, vdim) / (S, vdim).
            key_padding_mask: (B, S) or (S,); bool (True = ignore this key) or
                float (added to the scores).
            need_weights: must be False.
            attn_mask: (L, S) or (B * num_heads, L, S); bool (True = not
                allowed) or float (added to the scores).
            average_attn_weights: ignored (no weights are returned).
            is_causal: causal attention, query i attends keys j <= i (and the
                appended bias / zero tokens).  A hint about ``attn_mask``
                when one is given (see the class doc).

        Returns:
            (attn_output, None): attn_output shaped like query with E features.
        """
        if need_weights:
            raise NotImplementedError("need_weights=True: flashattn_triton never materialises the attention "
                                      "weights; call with need_weights=False (the default here, not in PyTorch)")
        if query.dim() not in (2, 3):
            raise ValueError(f"query must be 3-D (batched) or 2-D (unbatched), got shape {tuple(query.shape)}")
        batched = query.dim() == 3
        for name, t in (("key", key), ("value", value)):
            if t.dim() != query.dim():
                raise ValueError(f"query is {query.dim()}-D but {name} is {t.dim()}-D (shape {tuple(t.shape)})")
        self_attn = query is key and key is value
        kv_same = key is value
        if not batched:
            query, key, value = (t.unsqueeze(0) for t in (query, key, value))
            if key_padding_mask is not None and key_padding_mask.dim() == 1:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        bsz, n_q, e = query.shape
        if e != self.embed_dim:
            raise ValueError(f"query has {e} features, expected embed_dim={self.embed_dim}")
        if key.shape[:2] != value.shape[:2] or key.shape[0] != bsz:
            raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} must share batch and "
                             f"sequence sizes with each other and the batch size {bsz} of query")
        if key.shape[-1] != self.kdim or value.shape[-1] != self.vdim:
            raise ValueError(f"key / value have {key.shape[-1]} / {value.shape[-1]} features, expected "
                             f"kdim={self.kdim} / vdim={self.vdim}")

        q, k, v = self._project(query, key, value, self_attn, kv_same)
        extra = 0  # key columns appended after the projection
        if self.bias_k is not None and self.bias_v is not None:
            k = torch.cat([k, self.bias_k.expand(bsz, 1, e)], dim=1)
            v = torch.cat([v, self.bias_v.expand(bsz, 1, e)], dim=1)
            extra += 1
        if self.add_zero_attn:
            k = torch.cat([k, k.new_zeros(bsz, 1, e)], dim=1)
            v = torch.cat([v, v.new_zeros(bsz, 1, e)], dim=1)
            extra += 1
        n_k = k.shape[1]
        h, d = self.num_heads, self.head_dim
        q, k, v = q.view(bsz, n_q, h, d), k.view(bsz, n_k, h, d), v.view(bsz, n_k, h, d)
        dropout_p = self.dropout if self.training else 0.0

        if is_causal and key_padding_mask is None and not extra:
            attn_mask = None  # PyTorch's reading of the is_causal hint: the mask is causal, not read
        if attn_mask is None and key_padding_mask is None and not (is_causal and extra):
            if not is_causal or n_q == n_k:  # top-left == bottom-right alignment when square
                out = flash_attn_func(q, k, v, dropout_p=dropout_p, causal=is_causal)
            else:
                out = scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                   dropout_p=dropout_p, is_causal=True).transpose(1, 2)
        elif is_causal and attn_mask is None and not extra:
            # The padding mask (B, 1, 1, S) with the kernels' own causal mask (top-left):
            # no dense (B, 1, L, S) mask built from O(N) inputs.
            mask = _merge_masks(None, key_padding_mask, False, bsz, h, n_q, n_k, 0, q.dtype, q.device)
            out = _sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask, dropout_p, True, None,
                        False, causal_and_mask=True).transpose(1, 2)
        else:
            mask = _merge_masks(attn_mask, key_padding_mask, is_causal, bsz, h, n_q, n_k - extra, extra,
                                q.dtype, q.device)
            out = scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               attn_mask=mask, dropout_p=dropout_p).transpose(1, 2)
        out = self.out_proj(out.reshape(bsz, n_q, e))
        if not batched:
            return out.squeeze(0), None
        # (L, B, E) in memory too, as PyTorch's module returns it (out.view(L * B, E) works)
        return (out if self.batch_first else out.transpose(0, 1).contiguous()), None

    def merge_masks(self, attn_mask: Optional[torch.Tensor], key_padding_mask: Optional[torch.Tensor],
                    query: torch.Tensor) -> Tuple[Optional[torch.Tensor], Optional[int]]:
        """PyTorch's ``MultiheadAttention.merge_masks`` (the same arguments and
        result), which ``torch.nn.TransformerEncoderLayer``'s inference fast
        path calls on its ``self_attn``."""
        return nn.MultiheadAttention.merge_masks(self, attn_mask, key_padding_mask, query)  # type: ignore[arg-type]


def _merge_masks(attn_mask, key_padding_mask, is_causal, bsz, heads, n_q, n_k, extra, dtype, device):
    """PyTorch MHA masks (True / -inf = masked) -> one SDPA mask (B, 1 or H, L, S + extra):
    boolean (True = attend) when both are boolean, else additive float."""
    parts = []
    for name, m in (("attn_mask", attn_mask), ("key_padding_mask", key_padding_mask)):
        if m is not None and not isinstance(m, torch.Tensor):
            raise TypeError(f"{name} must be a tensor or None, got {type(m).__name__}")
        if m is not None and m.dtype != torch.bool and not m.is_floating_point():
            raise TypeError(f"{name} must be a bool (True = masked) or floating (added) tensor, got {m.dtype}")
    if attn_mask is not None:
        if attn_mask.dim() == 2:
            if tuple(attn_mask.shape) != (n_q, n_k):
                raise ValueError(f"attn_mask must be (L, S) = {(n_q, n_k)}, got {tuple(attn_mask.shape)}")
            parts.append(attn_mask.view(1, 1, n_q, n_k))
        elif attn_mask.dim() == 3:
            if tuple(attn_mask.shape) != (bsz * heads, n_q, n_k):
                raise ValueError(f"attn_mask must be (B * num_heads, L, S) = {(bsz * heads, n_q, n_k)}, "
                                 f"got {tuple(attn_mask.shape)}")
            parts.append(attn_mask.view(bsz, heads, n_q, n_k))
        else:
            raise ValueError(f"attn_mask must be 2-D or 3-D, got shape {tuple(attn_mask.shape)}")
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (bsz, n_k):
            raise ValueError(f"key_padding_mask must be (B, S) = {(bsz, n_k)}, got {tuple(key_padding_mask.shape)}")
        parts.append(key_padding_mask.view(bsz, 1, 1, n_k))
    if is_causal and attn_mask is None:  # a given attn_mask is used as given (PyTorch); else build it
        parts.append(torch.ones(n_q, n_k, dtype=torch.bool, device=device).triu(1).view(1, 1, n_q, n_k))
    if all(p.dtype == torch.bool for p in parts):
        blocked = parts[0]
        for p in parts[1:]:
            blocked = blocked | p
        keep = ~blocked
        return F.pad(keep, (0, extra), value=True) if extra else keep
    # A float mask is added in float32 unless every float mask already has the
    # query's dtype: cast to float16 / bfloat16, a row of one finite large
    # value (-1e5, finfo(float32).min) became -inf, and zeros instead of
    # PyTorch's uniform attention.
    if any(p.is_floating_point() and p.dtype != dtype for p in parts):
        dtype = torch.float32
    bias = None
    for p in parts:
        p = torch.zeros(p.shape, dtype=dtype, device=device).masked_fill(p, float("-inf")) \
            if p.dtype == torch.bool else p.to(dtype)
        bias = p if bias is None else bias + p
    return F.pad(bias, (0, extra), value=0.0) if extra else bias


# ---------------------------------------------------------------------------
# Rotary embedding
# ---------------------------------------------------------------------------

class RotaryEmbedding(nn.Module):
    """Rotary position embedding (RoPE, Su et al. 2021).

    Feature pairs of every head are rotated by the angle ``pos * base**(-2i / dim)``
    (pair index i = 0 .. dim/2 - 1), so the score between a query at position m and a
    key at position n depends on m - n only.

    Arguments:
        dim: number of rotated features per head (even; at most the head dim;
            features past ``dim`` pass unchanged, "partial rotary").
        base: the frequency base (10000 in the paper, larger for long contexts).
        interleaved: False pairs feature i with i + dim/2 (GPT-NeoX, Llama,
            Hugging Face's ``rotate_half``); True pairs 2i with 2i + 1 (GPT-J).

    The frequencies, angles and the rotation are computed in float32 (also after
    ``module.to(torch.bfloat16)``), then cast back to the input dtype.
    """

    def __init__(self, dim: int, base: float = 10000.0, interleaved: bool = False) -> None:
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
            raise TypeError(f"dim must be an int, got {type(dim).__name__} {dim!r}")
        if dim <= 0 or dim % 2:
            raise ValueError(f"dim must be a positive even number, got {dim}")
        if isinstance(base, bool) or not isinstance(base, numbers.Real):
            raise TypeError(f"base must be a float, got {type(base).__name__} {base!r}")
        if not 0 < float(base) < math.inf:
            raise ValueError(f"base must be finite and positive (the frequencies are base**(-2i/dim)), "
                             f"got {base!r}")
        check_flag(interleaved, "interleaved")
        self.dim: int = int(dim)
        self.base: float = float(base)
        self.interleaved: bool = interleaved
        # No buffer: the frequencies are recomputed in float32 per call (dim / 2
        # values), so module.to(bfloat16) cannot round them.

    def extra_repr(self) -> str:
        return f"dim={self.dim}, base={self.base}, interleaved={self.interleaved}"

    def cos_sin(self, positions: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """positions (...,) integer -> cos, sin (..., dim // 2) float32."""
        inv_freq = self.base ** (-torch.arange(0, self.dim, 2, dtype=torch.float32, device=positions.device)
                                 / self.dim)
        angles = positions.to(torch.float32)[..., None] * inv_freq
        return angles.cos(), angles.sin()

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x (..., seqlen, nheads, headdim); positions broadcastable to x.shape[:-2]
        (the output has x's shape: positions that would broadcast it larger raise ValueError)."""
        if x.shape[-1] < self.dim:
            raise ValueError(f"head dim {x.shape[-1]} is smaller than the rotary dim {self.dim}")
        if not isinstance(positions, torch.Tensor):
            raise TypeError(f"positions must be a tensor, got {type(positions).__name__}")
        lead = tuple(x.shape[:-2])
        try:
            fits = tuple(torch.broadcast_shapes(positions.shape, lead)) == lead
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"positions of shape {tuple(positions.shape)} do not broadcast to x's leading "
                             f"dims {lead} (x: {tuple(x.shape)})")
        cos, sin = self.cos_sin(positions)
        cos, sin = cos[..., None, :], sin[..., None, :]  # broadcast over heads
        rot, rest = x[..., :self.dim].float(), x[..., self.dim:]
        if self.interleaved:
            x1, x2 = rot[..., 0::2], rot[..., 1::2]
            out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
        else:
            x1, x2 = rot.chunk(2, dim=-1)
            out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        out = out.to(x.dtype)
        return torch.cat((out, rest), dim=-1) if rest.shape[-1] else out

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions: Optional[torch.Tensor] = None,
                offset: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
        """Rotate q (B, N, Hq, d) and k (B, N, Hkv, d), flash layout.

        positions: (N,) or (B, N) integer positions; default ``offset + arange(N)``
        (offset: tokens already in a KV cache).
        """
        if positions is None:
            positions = torch.arange(offset, offset + q.shape[-3], device=q.device)
        return self.rotate(q, positions), self.rotate(k, positions)


# ---------------------------------------------------------------------------
# Compact attention block
# ---------------------------------------------------------------------------

class Attention(nn.Module):
    """Self-attention block: fused qkv projection, optional rotary embedding,
    flash attention with GQA, output projection.

    Arguments:
        dim: model dimension (input and output features).
        n_heads: query heads.
        n_kv_heads: key/value heads (GQA; n_heads must be a multiple); default n_heads.
        head_dim: default dim // n_heads.
        causal: causal self-attention (default True).
        bias: biases in the two projections.
        rotary: apply :class:`RotaryEmbedding` to q and k (default False).
        rotary_dim: rotated features per head (default head_dim).
        rope_base: RoPE frequency base.
        window_size: (left, right) sliding window, as in ``flash_attn_func``.
        softmax_scale: default 1/sqrt(head_dim).
        dropout: attention dropout probability, applied in training mode.

    Parameters: ``qkv.weight`` ((n_heads + 2 n_kv_heads) head_dim, dim), rows
    ordered [q heads | k heads | v heads]; ``out.weight`` (dim, n_heads head_dim);
    biases if ``bias``.

    Subclasses may override :meth:`attend` to run another attention kernel
    (examples/ and benchmarks/ do, for eager and SDPA baselines).
    """

    def __init__(self, dim: int, n_heads: int, n_kv_heads: Optional[int] = None, head_dim: Optional[int] = None,
                 *, causal: bool = True, bias: bool = False, rotary: bool = False,
                 rotary_dim: Optional[int] = None, rope_base: float = 10000.0,
                 window_size: Tuple[int, int] = (-1, -1), softmax_scale: Optional[float] = None,
                 dropout: float = 0.0, device: Optional[Union[str, torch.device]] = None,
                 dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        _size("dim", dim)
        _size("n_heads", n_heads, 0)
        _size("n_kv_heads", n_kv_heads, 0)
        if head_dim is not None:
            _size("head_dim", head_dim)
        if rotary_dim is not None:
            _size("rotary_dim", rotary_dim)
        for name, flag in (("causal", causal), ("bias", bias), ("rotary", rotary)):
            check_flag(flag, name)
        window_size = check_window(window_size, False)  # (causal clips the right side per call)
        if softmax_scale is not None:
            softmax_scale = check_scale(softmax_scale, "softmax_scale", 1)
        dropout = _module_dropout(dropout)
        if rotary and not (isinstance(rope_base, numbers.Real) and not isinstance(rope_base, bool)
                           and 0 < float(rope_base) < math.inf):
            raise ValueError(f"rope_base must be a finite positive float, got {rope_base!r}")
        if n_heads <= 0 or n_kv_heads <= 0 or n_heads % n_kv_heads:
            raise ValueError(f"n_heads ({n_heads}) must be a positive multiple of n_kv_heads ({n_kv_heads})")
        if head_dim is None:
            if dim % n_heads:
                raise ValueError(f"dim ({dim}) must be divisible by n_heads ({n_heads}), or pass head_dim")
            head_dim = dim // n_heads
        self.dim, self.n_heads, self.n_kv_heads, self.head_dim = dim, n_heads, n_kv_heads, head_dim
        self.causal, self.dropout = causal, dropout
        self.window_size = cast(Tuple[int, int], tuple(window_size))
        self.softmax_scale = softmax_scale
        factory: Dict[str, Any] = {"device": device, "dtype": dtype}
        self.qkv = nn.Linear(dim, (n_heads + 2 * n_kv_heads) * head_dim, bias=bias, **factory)
        self.out = nn.Linear(n_heads * head_dim, dim, bias=bias, **factory)
        self.rotary = RotaryEmbedding(rotary_dim or head_dim, rope_base) if rotary else None

    def extra_repr(self) -> str:
        return (f"n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, head_dim={self.head_dim}, "
                f"causal={self.causal}, window_size={self.window_size}")

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (B, N, Hq, d), k, v (B, N, Hkv, d) -> (B, N, Hq, d)."""
        return flash_attn_func(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                               softmax_scale=self.softmax_scale, causal=self.causal, window_size=self.window_size)

    def forward(self, x: torch.Tensor, *, positions: Optional[torch.Tensor] = None,
                cu_seqlens: Optional[torch.Tensor] = None, max_seqlen: Optional[int] = None,
                check_inputs: bool = False) -> torch.Tensor:
        """
        Arguments:
            x: (batch, seqlen, dim); or (total_tokens, dim) with ``cu_seqlens``.
            positions: rotary positions, (seqlen,) or (batch, seqlen) (or
                (total_tokens,) packed); default: 0, 1, ... within each sequence.
            cu_seqlens: (n_seqs + 1,) int32 offsets of packed sequences in x
                (flash-attn's varlen convention); each sequence attends only to itself.
            max_seqlen: an upper bound of the packed sequence lengths (an int;
                default total_tokens, always a bound).  The caller guarantees
                it, as for ``flash_attn_varlen_func``'s max_seqlen_q/k: it
                sizes the launch grid and is not checked by default, and a
                smaller value than the longest sequence leaves rows of the
                output undefined.
            check_inputs: with cu_seqlens, check the values of cu_seqlens
                (from 0, non-decreasing, ending at total_tokens, lengths <=
                max_seqlen) by passing ``check_inputs=True`` to
                ``flash_attn_varlen_func``.  This reads them on the host, a
                device sync (a graph break under torch.compile): a testing
                aid, off by default.  Without cu_seqlens there is nothing to
                check and it is ignored.

        Returns:
            the shape of x.
        """
        h, g, d = self.n_heads, self.n_kv_heads, self.head_dim
        if cu_seqlens is None:
            if x.dim() != 3:
                raise ValueError(f"x must be (batch, seqlen, dim), got shape {tuple(x.shape)}")
            b, n, _ = x.shape
            q, k, v = self.qkv(x).view(b, n, h + 2 * g, d).split((h, g, g), dim=2)
            if self.rotary is not None:
                q, k = self.rotary(q, k, positions)
            out = self.attend(q, k, v)
            return self.out(out.reshape(b, n, h * d))
        if x.dim() != 2:
            raise ValueError(f"with cu_seqlens, x must be (total_tokens, dim), got shape {tuple(x.shape)}")
        total = x.shape[0]
        check_offsets("cu_seqlens", cu_seqlens, x.device)
        q, k, v = self.qkv(x).view(total, h + 2 * g, d).split((h, g, g), dim=1)
        if self.rotary is not None:
            if positions is None:
                positions = _positions_in_sequences(cu_seqlens, total)
            q, k = self.rotary.rotate(q, positions), self.rotary.rotate(k, positions)
        # max_seqlen: the caller's upper bound, unchecked unless check_inputs (no sync by default)
        # (0 tokens, or a bound of 0 for sequences all empty: the kernels take a bound of 1)
        n_max = max(total, 1) if max_seqlen is None else max_seqlen if max_seqlen != 0 or total else 1
        out = flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, n_max, n_max,
                                     dropout_p=self.dropout if self.training else 0.0,
                                     softmax_scale=self.softmax_scale, causal=self.causal,
                                     window_size=self.window_size, check_inputs=check_inputs)
        return self.out(out.reshape(total, h * d))


def _positions_in_sequences(cu_seqlens: torch.Tensor, total: int) -> torch.Tensor:
    """Position of every packed token within its own sequence (no host sync)."""
    idx = torch.arange(total, device=cu_seqlens.device)
    seq = torch.searchsorted(cu_seqlens[1:].to(torch.int64), idx, right=True)
    return idx - cu_seqlens.to(torch.int64)[seq.clamp_max(cu_seqlens.numel() - 2)]
