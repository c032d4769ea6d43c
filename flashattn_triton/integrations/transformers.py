"""Hugging Face Transformers backend: run a model's attention on flashattn_triton.

    from transformers import AutoModelForCausalLM
    from flashattn_triton.integrations.transformers import register

    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=register())

``register(name="triton_attention")`` adds two entries under ``name``:

* an attention function in ``transformers.AttentionInterface``.  Transformers
  calls it from every attention layer as
  ``fn(module, query, key, value, attention_mask, dropout=..., scaling=..., **kwargs)``
  with query (B, Hq, Nq, d) and key, value (B, Hkv, Nk, d), and expects
  ``(out (B, Nq, Hq, d), attn_weights or None)``;
* a mask builder in ``transformers.masking_utils.AttentionMaskInterface``,
  called once per forward to turn the model's 2-D padding mask into what the
  attention function receives.  Without it, Transformers would pass no mask at
  all to a custom implementation and padding would be silently ignored.

How each case is computed:

==========================================  =====================================================
case                                        path
==========================================  =====================================================
no padding (mask builder returns None)      ``flash_attn_func`` (causal bottom-right, so a decode
                                            step with Nq = 1 or a chunk Nq < Nk after a cache
                                            attends the right keys), GQA without repeating K/V
padding (a 2-D (B, Nk) boolean mask)        ``flash_attn_varlen_func`` on the packed tokens
                                            (:func:`unpad` / :func:`pad`, no host sync)
documents packed in rows (position_ids      ``flash_attn_varlen_func`` over the documents, which
restarting; no padding, no cache)           the 4-D mask carries; one host read per model forward.
                                            The mask is left unbuilt unless an op reads it.
                                            Chunked layers too, where positions are remapped per
                                            document and each starts at a multiple of the chunk
any other pattern (or/and mask overlays,    the 4-D boolean mask of Transformers' SDPA builder,
a user 4-D mask, packed documents under     given to ``scaled_dot_product_attention(attn_mask=)``
compile, chunked attention after a
sliding cache dropped keys), and a
materialised mask asked for
(``allow_is_causal_skip=False``)
sliding window (``sliding_window`` kwarg)   ``window_size=(W - 1, 0)`` causal, ``(W, W)`` not
chunked attention (Llama 4's layers of      ``attention_chunk=config.attention_chunk_size``
type "chunked_attention")                   (dense or padded as above) while the keys start at
                                            position 0 (no sliding-cache offset)
softcap (``softcap`` kwarg)                 ``softcap`` (also with a 4-D mask)
attention sinks (``s_aux`` kwarg, gpt-oss)  ``sinks`` (every mask form)
dropout (``dropout`` kwarg, training)       ``dropout_p``
==========================================  =====================================================

A layer argument that changes the result and that flashattn_triton does not
take raises ``NotImplementedError``: ``position_bias`` (T5's relative-position
bias), ``indices`` (the sparse indexer's top-k selection of DeepSeek-V3.2,
GLM-MoE-DSA, Mistral-Large-4 and kin), ``block_indices`` (MiniMax-M3) and
``sinks`` (Inkling-2's per-token sinks); nothing is silently dropped.
``output_attentions`` returns ``None`` weights (they are never materialised).

A model that asks for a materialised mask (``allow_is_causal_skip=False``,
e.g. Doge, Falcon with ALiBi, the sparse indexers, T5Gemma2) gets the 4-D mask
in every forward, decode steps included, as does a decode step against a
static cache; it then takes the 4-D path above.

The registered name must not contain "flash": Transformers 5.x sends any such
name to its flash-attn / hub-kernel loader, which fails without the
``flash_attn`` package and a network.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Optional, Tuple

import torch

__all__ = ["register", "attention_forward", "attention_mask", "unpad", "pad", "DEFAULT_NAME"]

DEFAULT_NAME = "triton_attention"

# Names Transformers treats specially: built-in implementations we must not
# overwrite globally.
_RESERVED = ("eager", "sdpa", "flex_attention")


def _check_name(name: Any) -> None:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if not name or name != name.strip():
        raise ValueError(f"name must be a non-empty string without surrounding spaces, got {name!r}")
    if "flash" in name.lower():
        raise ValueError(f"name={name!r} contains 'flash': Transformers routes such names to its "
                         "flash-attn / hub-kernel loader; choose another (default: 'triton_attention')")
    for ch in "|/:":
        if ch in name:
            raise ValueError(f"name={name!r} contains {ch!r}, which Transformers parses "
                             "(paged| prefixes, hub kernel repos)")
    if name in _RESERVED:
        raise ValueError(f"name={name!r} is a built-in Transformers implementation; choose another")


def register(name: str = DEFAULT_NAME) -> str:
    """Register flashattn_triton as a Transformers attention implementation.

    Arguments:
        name: the implementation name, used as
            ``attn_implementation=name`` (``from_pretrained``, ``from_config``,
            ``model.set_attn_implementation``).  Must not contain "flash",
            "|", "/" or ":" and must not be "eager", "sdpa" or
            "flex_attention".  Registering the same name again is harmless.

    Returns:
        ``name``.

    Example::

        name = register()
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation=name)
    """
    _check_name(name)
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("flashattn_triton.integrations.transformers needs the `transformers` package "
                          "(pip install 'transformers>=5.0')") from e
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, attention_mask)
    return name


# ---------------------------------------------------------------------------
# Mask builder (called once per model forward by Transformers)
# ---------------------------------------------------------------------------

def attention_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function: Optional[Callable[..., Any]] = None,
    attention_mask: Optional[torch.Tensor] = None,
    local_size: Optional[int] = None,
    allow_is_causal_skip: bool = True,
    use_vmap: bool = False,
    **kwargs,
) -> Optional[torch.Tensor]:
    """The mask builder registered in ``AttentionMaskInterface``.

    Returns ``None`` when the pattern is plain causal / bidirectional / sliding
    window without padding (the attention function then takes ``is_causal``
    from the module and the window from its ``sliding_window`` argument) and,
    if causal, the keys end at the last query (bottom-right alignment; not so
    at a static cache's prefill); the (B, kv_length) boolean padding mask
    (True = real token) when there is padding; and Transformers' 4-D boolean
    SDPA mask (B, 1, q_length, kv_length) for every other pattern (mask
    overlays, ...).  Documents packed in rows by position_ids get a 4-D mask
    that carries them, unbuilt (:class:`_UnbuiltMask`) until an op reads it.

    ``allow_is_causal_skip=False`` (for a bidirectional pattern,
    ``allow_is_bidirectional_skip=False``) always gets the 4-D mask, as from
    Transformers' SDPA builder, at every q_length, decode steps (q_length 1)
    included: models ask for it because they add to the mask or index it as
    4-D (Doge's dynamic mask, Falcon's ALiBi, the sparse indexers of
    DeepSeek-V3.2 and kin, T5Gemma2's merged self/cross mask), and Transformers
    asks for it at a decode step against a static (compileable) cache, whose
    unfilled slots the mask hides.  Neither can be told from the other here.

    Checking whether a padding mask is all ones costs one host sync per
    model forward (not per layer).
    """
    from transformers import masking_utils as mu

    if mask_function is mu.bidirectional_mask_function:
        # create_bidirectional_mask always passes allow_is_causal_skip=False;
        # its own switch is allow_is_bidirectional_skip (older Transformers
        # do not pass it: the pattern then stays skippable, as before).
        skip = bool(kwargs.get("allow_is_bidirectional_skip", True))
    else:
        skip = bool(allow_is_causal_skip)
    standard = skip and not use_vmap and (
        mask_function is None
        or mask_function is mu.causal_mask_function
        or mask_function is mu.bidirectional_mask_function
        # A sliding-window pattern.  local_size also comes with chunked
        # attention (Llama 4), which no window expresses: it is a pattern of
        # its own (the layer passes attention_chunk) where its chunks start at
        # key 0 of the rows' real tokens, which is the case without a cache
        # offset (kv_offset = 0; a sliding cache past its size has one).
        or (local_size is not None and _is_sliding_window_causal(mask_function, mu))
        or (_chunked_causal_size(mask_function, mu) is not None and not isinstance(kv_offset, torch.Tensor)
            and kv_offset == 0)
    )
    if mask_function is None:
        mask_function = mu.causal_mask_function
    documents = _position_documents(mask_function, mu, q_length, kv_length, q_offset, kv_offset, attention_mask)
    if documents is not None:
        # Documents packed in rows, told by position_ids restarting (Transformers'
        # packed_sequence_mask).  The mask carries the documents; attention_forward
        # runs the varlen kernel on them when it gets the very same tensor (an
        # altered mask is a new tensor without them).  The mask is left unbuilt
        # (_UnbuiltMask: the (B, 1, Nq, Nk) booleans are made only if an op reads
        # them, so a model that adds to it or indexes it gets Transformers' own).
        # (Transformers asks for packed documents' mask materialised,
        # allow_is_causal_skip=False, whatever the model: that flag tells nothing here.)
        def build():
            return mu.sdpa_mask(
                batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask,
                local_size=local_size, allow_is_causal_skip=False, use_vmap=use_vmap, **kwargs)

        device = kwargs.get("device") or documents["cu_seqlens"].device
        unbuilt = _UnbuiltMask((batch_size, 1, q_length, kv_length), torch.device(device), build)
        setattr(unbuilt, _DOCUMENTS, documents)
        return unbuilt
    # None (and the 2-D padding mask) mean the kernels' own causal masking,
    # aligned bottom-right: right when the keys end at the last query, not
    # against a static cache's kv_length slots with unfilled ones at the end.
    aligned = standard and not isinstance(kv_offset, torch.Tensor) and (
        mask_function is mu.bidirectional_mask_function
        or _bottom_right(q_length, kv_length, q_offset, kv_offset))
    if aligned and attention_mask is not None:
        # Transformers reads the 2-D mask at absolute key positions kv_offset + j,
        # zeros past its end (masking_utils.prepare_padding_mask): a mask made
        # longer than the keys (up to a cache's size) has its tail past them.
        mask = attention_mask[:, kv_offset:kv_offset + kv_length]
        if mask.dtype != torch.bool:
            mask = mask.bool()
        if mask.shape[1] < kv_length:
            mask = torch.nn.functional.pad(mask, (0, kv_length - mask.shape[1]), value=False)
        all_ones, one_run = _padding_pattern(mask, windowed=local_size is not None)
        if all_ones:
            return None
        if one_run:
            return mask
        # A window with padding inside a row: Transformers counts the window
        # over positions, the varlen path over the real tokens it packs.
    elif aligned:
        return None
    return mu.sdpa_mask(
        batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
        kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask,
        local_size=local_size, allow_is_causal_skip=False, use_vmap=use_vmap, **kwargs)


def _padding_pattern(mask: torch.Tensor, windowed: bool) -> Tuple[bool, bool]:
    """(every entry is True, each row's True entries form one run), read in
    one host sync; rows with padding inside them matter only to a window."""
    if not windowed:
        return bool(mask.all()), True
    starts = mask[:, :1].sum(1) + (mask[:, 1:] & ~mask[:, :-1]).sum(1)
    all_ones, one_run = torch.stack((mask.all(), (starts <= 1).all())).tolist()
    return bool(all_ones), bool(one_run)


def _bottom_right(q_length: int, kv_length: int, q_offset, kv_offset) -> bool:
    """Whether Transformers' causal pattern (query q_offset + i sees key
    kv_offset + j iff kv_offset + j <= q_offset + i) is flash-attn's
    bottom-right one (j <= i + kv_length - q_length).  True for a dynamic
    cache, False for a static cache's prefill (kv_length = its size).  Static
    caches keep q_offset in a tensor: False without reading it (a host sync,
    and a graph break under compile), since the 4-D mask is right either way."""
    shift = q_offset - kv_offset
    if isinstance(shift, torch.Tensor):
        return False
    return shift == kv_length - q_length


def _and_mask_parts(mask_function, mu) -> tuple:
    """The mask functions that Transformers' and_masks(*fns) combined, () for
    any other function (read from the closure: and_masks keeps them in a tuple)."""
    if getattr(mask_function, "__qualname__", "") != f"{mu.and_masks.__name__}.<locals>.and_mask":
        return ()
    return next((cell.cell_contents for cell in mask_function.__closure__ or ()
                 if isinstance(cell.cell_contents, tuple)), ())


def _qualname_is(fn, factory: str) -> bool:
    """Whether fn is the inner_mask closure made by masking_utils' factory."""
    return getattr(fn, "__qualname__", "") == f"{factory}.<locals>.inner_mask"


def _closure_value(fn, name: str):
    """The value of closure variable `name` of fn, None if it has none."""
    names = getattr(getattr(fn, "__code__", None), "co_freevars", ())
    cells = getattr(fn, "__closure__", None) or ()
    if name not in names or len(cells) != len(names):
        return None
    return cells[names.index(name)].cell_contents


def _closure_int(fn, name: str) -> Optional[int]:
    """Closure variable `name` of fn if it is a positive int (a chunk size, a
    window), else None."""
    value = _closure_value(fn, name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _chunked_causal_size(mask_function, mu) -> Optional[int]:
    """The chunk size C if mask_function is Transformers'
    chunked_causal_mask_function(C, left_padding): and_masks(chunked_overlay(C,
    left_padding), causal_mask_function), else None.  Its rule, key kv_idx
    visible from query q_idx iff (kv_idx - lp) // C == (q_idx - lp) // C with
    lp the row's left padding, is attention_chunk=C over each row's real
    tokens counted from the first (the varlen path packs them from 0)."""
    parts = _and_mask_parts(mask_function, mu)
    if len(parts) != 2 or parts[1] is not mu.causal_mask_function:
        return None
    return _closure_int(parts[0], "chunk_size") if _qualname_is(parts[0], "chunked_overlay") else None


def _is_sliding_window_causal(mask_function, mu) -> bool:
    """Whether mask_function is Transformers' sliding_window_causal_mask_function(W):
    and_masks(sliding_window_overlay(W), causal_mask_function), recognised by the
    functions it combines.  Anything else (chunked attention's overlay, which
    _chunked_causal_size recognises, overlays a model adds) is not a window."""
    parts = _and_mask_parts(mask_function, mu)
    return (len(parts) == 2 and parts[1] is mu.causal_mask_function
            and _qualname_is(parts[0], "sliding_window_overlay"))


# The attribute of a 4-D mask from attention_mask() that carries its packed documents.
_DOCUMENTS = "_flashattn_triton_documents"


class _UnbuiltMask(torch.Tensor):
    """The 4-D boolean mask (B, 1, Nq, Nk) of documents packed in rows, not
    built: shape, dtype and device read as the real mask's, and the first op
    that reads its values (an index, an add, a where, a copy) builds the mask
    with Transformers' SDPA builder, keeps it and runs on it, so a model that
    alters the mask gets what it would from SDPA's builder.  Its layers run
    the varlen kernel from the documents it carries and never build it: no
    B * Nq * Nk bytes per model forward (4 GiB at one row of 64k tokens)."""

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]  # plain results
    _build: Callable[[], Any]
    _built: Optional[torch.Tensor]

    @staticmethod
    def __new__(cls, shape, device: torch.device, build: Callable[[], Any]):
        mask = torch.Tensor._make_wrapper_subclass(cls, shape, dtype=torch.bool, device=device)
        mask._build, mask._built = build, None
        return mask

    def built(self) -> torch.Tensor:
        """The mask's values, built on the first call."""
        if self._built is None:
            mask = self._build()
            if not isinstance(mask, torch.Tensor) or mask.shape != self.shape or mask.dtype != torch.bool:
                raise RuntimeError(f"Transformers' sdpa_mask gave {type(mask).__name__} "
                                   f"{tuple(getattr(mask, 'shape', ()))} for the packed documents' mask, "
                                   f"expected a boolean tensor of shape {tuple(self.shape)}")
            self._built = mask
        return self._built

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return f"_UnbuiltMask(shape={tuple(self.shape)}, device={self.device}, built={self._built is not None})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def real(x):
            return x.built() if isinstance(x, _UnbuiltMask) else x
        args, kwargs = torch.utils._pytree.tree_map(real, (args, kwargs or {}))
        return func(*args, **kwargs)


def _position_documents(mask_function, mu, q_length: int, kv_length: int, q_offset, kv_offset,
                        attention_mask) -> Optional[dict]:
    """The documents of a pattern that Transformers built from position_ids
    restarting inside rows (and no padding mask, no cache):
    and_masks(remap_positions_for_packed_sequence(base, position_ids),
    packed_sequence_mask_function(doc)) with base plain causal, bidirectional,
    a causal sliding window or (positions remapped, Transformers 5.25 on)
    Llama 4's chunked causal pattern.  Key j is then visible from query i iff
    doc[i] == doc[j] and base holds for their positions; positions rise by one
    inside a document (a new one starts wherever they do not), so base holds
    for the positions iff it holds for the indices in the document, which is
    flash_attn_varlen_func over the documents (chunks: when every document
    starts at a multiple of C).  Returns {"cu_seqlens": int32 (documents + 1,)
    over the rows laid end to end, "max_seqlen", "batch", "seqlen", "causal",
    "window": Transformers' W or None, "chunk": C or 0}; None for any other
    pattern, and while compiling (finding the documents reads them on the host:
    one sync per model forward, the same as Transformers' own packing check)."""
    if attention_mask is not None or q_length != kv_length:
        return None
    if isinstance(q_offset, torch.Tensor) or isinstance(kv_offset, torch.Tensor) or q_offset != 0 or kv_offset != 0:
        return None
    parts = _and_mask_parts(mask_function, mu)
    if len(parts) != 2 or not _qualname_is(parts[1], "packed_sequence_mask_function"):
        return None
    doc = _closure_value(parts[1], "packed_sequence_mask")
    base, positions = parts[0], None
    if _qualname_is(base, "remap_positions_for_packed_sequence"):
        base, positions = _closure_value(base, "mask_function"), _closure_value(base, "position_ids")
    chunk = 0
    if base is mu.causal_mask_function:
        causal, window = True, None
    elif base is mu.bidirectional_mask_function:
        causal, window = False, None
    elif base is not None and _is_sliding_window_causal(base, mu):
        causal, window = True, _closure_int(_and_mask_parts(base, mu)[0], "sliding_window")
        if window is None:
            return None
    elif base is not None and isinstance(positions, torch.Tensor) and (size := _chunked_causal_size(base, mu)):
        # Chunked attention (Llama 4) over the remapped positions: key and query
        # share a chunk iff position // C agrees (no padding: left_padding 0),
        # which is attention_chunk=C counted from each document's first token
        # when every document starts at a position that is a multiple of C
        # (checked below, in the same host read).
        causal, window, chunk = True, None, size
        if positions.shape != getattr(doc, "shape", None):
            return None
    else:
        return None
    if not isinstance(doc, torch.Tensor) or doc.dim() != 2 or doc.shape[1] != q_length:
        return None
    if torch.compiler.is_compiling():
        return None
    batch, seqlen = doc.shape
    # A document starts at each row's first token and wherever the id changes.
    starts = torch.ones(doc.shape, dtype=torch.bool, device=doc.device)
    starts[:, 1:] = doc[:, 1:] != doc[:, :-1]
    first = starts.reshape(-1).nonzero().reshape(-1)
    if chunk and isinstance(positions, torch.Tensor):
        misaligned = (starts & (positions % chunk != 0)).any().reshape(1).to(first.dtype)
        first = torch.cat((first, misaligned))
    first = first.cpu()  # the one host read (nonzero's size aside)
    if chunk:
        first, misaligned = first[:-1], first[-1]
        if misaligned:
            return None
    cu = torch.cat((first, torch.tensor([batch * seqlen], device="cpu"))).to(torch.int32)
    return {"cu_seqlens": cu.to(doc.device, non_blocking=True), "max_seqlen": int(torch.diff(cu).max()),
            "batch": batch, "seqlen": seqlen, "causal": causal, "window": window, "chunk": chunk}


# ---------------------------------------------------------------------------
# Packing padded batches for the varlen kernel, without host sync
# ---------------------------------------------------------------------------

def unpad(x: torch.Tensor, keep: Optional[torch.Tensor]
          ) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """Pack a padded batch for ``flash_attn_varlen_func``.

    Arguments:
        x: (batch, seqlen, nheads, headdim).
        keep: (batch, seqlen) bool, True for real tokens; ``None`` = all real.

    Returns:
        packed: (batch * seqlen, nheads, headdim).  Each row is reordered so that
            its real tokens come first, in their original order, then its
            padding tokens.
        cu_seqlens: (2 * batch + 1,) int32.  Sequence ``2b`` is row b's real
            tokens, sequence ``2b + 1`` its padding (possibly empty): every
            token of ``packed`` belongs to exactly one sequence.
        order: (batch, seqlen) int64 permutation applied to each row (``None``
            when ``keep`` is None: no reordering).

    The sizes are fixed by the shapes (no ``nonzero``), so nothing waits for the
    device.  Keeping the original order within a row means causal masking among
    the real tokens is unchanged, and bottom-right alignment of a query chunk
    against a longer key row (a KV cache) still lines up, because the real
    queries are the last real tokens of their row.
    """
    batch, seqlen = x.shape[0], x.shape[1]
    order, cu_seqlens = _segments(keep, batch, seqlen, x.device)
    return _gather(x, order), cu_seqlens, order


def _segments(keep, batch: int, seqlen: int, device):
    if keep is None:
        lens = torch.full((batch,), seqlen, dtype=torch.int32, device=device)
        order = None
    else:
        if tuple(keep.shape) != (batch, seqlen):
            raise ValueError(f"keep must have shape (batch, seqlen) = {(batch, seqlen)}, got {tuple(keep.shape)}")
        order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)
        lens = keep.sum(dim=1, dtype=torch.int32)
    segments = torch.stack((lens, seqlen - lens), dim=1).reshape(-1)
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(segments, 0, dtype=torch.int32), (1, 0))
    return order, cu_seqlens


def _gather(x: torch.Tensor, order: Optional[torch.Tensor]) -> torch.Tensor:
    batch, seqlen = x.shape[0], x.shape[1]
    if order is not None:
        x = x[torch.arange(batch, device=x.device)[:, None], order]
    return x.reshape(batch * seqlen, *x.shape[2:])


def pad(packed: torch.Tensor, order: Optional[torch.Tensor], keep: Optional[torch.Tensor],
        batch: int, seqlen: int) -> torch.Tensor:
    """Inverse of :func:`unpad`: (batch * seqlen, nheads, headdim) ->
    (batch, seqlen, nheads, headdim), with zeros at padding positions."""
    x = packed.reshape(batch, seqlen, *packed.shape[1:])
    if order is None:
        return x
    if keep is None:
        raise ValueError("pad: keep (the (batch, seqlen) mask of real tokens) is required when order is given")
    rows = torch.arange(batch, device=x.device)[:, None]
    x = x[rows, torch.argsort(order, dim=1)]
    return x.masked_fill(~keep[:, :, None, None], 0.0)


# ---------------------------------------------------------------------------
# The attention function
# ---------------------------------------------------------------------------

def _window(sliding_window: Optional[int], causal: bool, n_k: int) -> Tuple[int, int]:
    """Transformers' sliding_window W -> flash-attn window_size.

    Causal: key j is visible from query i iff i - W < j <= i, i.e. (W - 1, 0).
    Bidirectional: |i - j| <= W, i.e. (W, W).  A window that covers every key
    is dropped (it cannot mask anything)."""
    if sliding_window is None:
        return (-1, -1)
    w = int(sliding_window)
    if w <= 0:
        raise ValueError(f"sliding_window must be a positive int or None, got {sliding_window!r}")
    if causal:
        return (-1, -1) if w >= n_k else (w - 1, 0)
    return (-1, -1) if w >= n_k - 1 else (w, w)


def _layer_chunk(module: torch.nn.Module) -> int:
    """attention_chunk for a layer of Transformers' type "chunked_attention"
    (config.layer_types[layer_idx], Llama 4): config.attention_chunk_size;
    0 for every other layer.  Used only when the mask builder returned None or
    a padding mask, which for a chunked layer it does only where the kernels'
    chunks are Transformers' (attention_mask: kv_offset = 0); a 4-D mask
    already holds the chunks."""
    config = getattr(module, "config", None)
    types = getattr(config, "layer_types", None)
    idx = getattr(module, "layer_idx", None)
    if not isinstance(idx, int) or not isinstance(types, (list, tuple)) or not 0 <= idx < len(types):
        return 0
    if types[idx] != "chunked_attention":
        return 0
    size = getattr(config, "attention_chunk_size", None)
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise ValueError(f"layer {idx} is a chunked_attention layer but config.attention_chunk_size is {size!r}; "
                         "expected a positive int")
    return size


_warned_weights = False

# Layer arguments that change the result and that flashattn_triton does not
# take: (keyword, what it is, the implementation to use instead).  The models
# fold them into the mask only for 'eager' / 'sdpa'; others get them as
# arguments, so ignoring them would silently compute dense attention.
_UNSUPPORTED = (
    ("position_bias", "an additive relative-position bias: T5 and kin", "'sdpa'"),
    ("indices", "a sparse indexer's top-k key selection: DeepSeek-V3.2, GLM-MoE-DSA, Mistral-Large-4 and "
     "kin", "'sdpa' or 'eager'"),
    ("block_indices", "a sparse indexer's top-k key-block selection: MiniMax-M3", "'sdpa' or 'eager'"),
    ("sinks", "per-token attention-sink logits: Inkling-2", "'eager'"),
)


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    is_causal: Optional[bool] = None,
    sliding_window: Optional[int] = None,
    softcap: Optional[float] = None,
    **kwargs,
) -> Tuple[torch.Tensor, None]:
    """The function registered in ``AttentionInterface``.

    Arguments:
        module: the calling attention layer; ``module.is_causal`` (default True)
            is used when ``is_causal`` is not given.
        query: (batch, nheads, seqlen_q, headdim)
        key, value: (batch, nheads_k, seqlen_k, headdim); nheads a multiple of
            nheads_k (GQA: K/V are not repeated).
        attention_mask: what :func:`attention_mask` built: None, a (batch,
            seqlen_k) boolean padding mask, or a (batch, 1 or nheads, seqlen_q,
            seqlen_k) mask (boolean True = attend, or additive float).
        dropout: attention dropout probability (Transformers passes 0.0 in eval).
        scaling: softmax scale; default 1/sqrt(headdim).
        is_causal: overrides ``module.is_causal``.  Causal masking is aligned
            bottom-right, so the queries of a decode step or of a chunk after a
            KV cache see every cached key.
        sliding_window: Transformers' window size W (see :func:`_window`).
        softcap: logit soft-capping ``softcap * tanh(s / softcap)``.
        s_aux (keyword, gpt-oss): None or (nheads,) learnable attention
            sinks, one extra logit per head in each row's softmax
            denominator (flash_attn_func's ``sinks``).
        position_bias, indices, block_indices, sinks (keywords): raise
            ``NotImplementedError`` when not None (they change the result and
            no kernel argument takes them).
        cu_seq_lens_q / _k, max_length_q / _k (keywords, the flash kwargs of
            DataCollatorWithFlattening): with no mask and one row whose
            queries are its keys, the row holds documents packed end to end
            and each attends within itself (``flash_attn_varlen_func``), as
            with flash_attention_2.  Other keywords Transformers passes
            (position_ids, output_attentions, ...) repeat what the mask
            already says, or ask for nothing that changes the output.

    Returns:
        (out, None): out (batch, seqlen_q, nheads, headdim), the layout
        Transformers reshapes to (batch, seqlen_q, nheads * headdim).
    """
    import flashattn_triton as fat

    global _warned_weights
    if kwargs.get("output_attentions") and not _warned_weights:
        warnings.warn("flashattn_triton never materialises attention weights: output_attentions "
                      "returns None for them", stacklevel=2)
        _warned_weights = True
    for name, what, use in _UNSUPPORTED:
        if kwargs.get(name) is not None:
            raise NotImplementedError(f"{name} ({what}) is not supported by the flashattn_triton attention "
                                      f"implementation; use attn_implementation={use}")
    # gpt-oss: one learnable logit per head in each row's softmax denominator.
    sinks = kwargs.get("s_aux")
    if query.dim() != 4 or key.dim() != 4:
        raise ValueError(f"query and key must be 4-D (batch, nheads, seqlen, headdim), got shapes "
                         f"{tuple(query.shape)} and {tuple(key.shape)}")
    causal = bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)
    batch, _, n_q, _ = query.shape
    n_k = key.shape[2]
    window = _window(sliding_window, causal, n_k)
    cap = 0.0 if softcap is None else float(softcap)
    dropout_p = float(dropout)
    # Transformers' (B, H, N, d) tensors as flash-layout views (no copy; the
    # last dimension keeps stride 1).
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))

    if attention_mask is None:
        packed = _packed_documents(kwargs, batch, n_q, n_k)
        if packed is not None:
            # One row of documents packed end to end (DataCollatorWithFlattening's
            # flash kwargs): each attends within itself, as flash_attention_2 does,
            # though no mask says so (Transformers detects packing from position_ids
            # only without a cache, and not in every model).
            cu_q, cu_k, max_q, max_k = packed
            out = fat.flash_attn_varlen_func(q[0], k[0], v[0], cu_q, cu_k, max_q, max_k, dropout_p=dropout_p,
                                             softmax_scale=scaling, causal=causal, window_size=window,
                                             softcap=cap, sinks=sinks, attention_chunk=_layer_chunk(module))
            return out[None], None
        out = fat.flash_attn_func(q, k, v, dropout_p=dropout_p, softmax_scale=scaling, causal=causal,
                                  window_size=window, softcap=cap, sinks=sinks, attention_chunk=_layer_chunk(module))
        return out, None

    # (len(shape), not dim(): torch.compile traces the shape of an _UnbuiltMask, a
    # user-defined object to it, but not its methods)
    if len(attention_mask.shape) == 2:
        return _padded_attention(q, k, v, attention_mask, dropout_p, scaling, causal, window, cap, sinks,
                                 _layer_chunk(module)), None

    if len(attention_mask.shape) == 4:
        documents = getattr(attention_mask, _DOCUMENTS, None)
        if documents is not None and _documents_apply(documents, batch, n_q, n_k, causal, sliding_window,
                                                      _layer_chunk(module)):
            # Rows of documents packed by position_ids: each attends within itself.
            h_q, h_k = q.shape[2], k.shape[2]
            total = batch * n_q
            out = fat.flash_attn_varlen_func(
                q.reshape(total, h_q, q.shape[3]), k.reshape(total, h_k, k.shape[3]),
                v.reshape(total, h_k, v.shape[3]), documents["cu_seqlens"], documents["cu_seqlens"],
                documents["max_seqlen"], documents["max_seqlen"], dropout_p=dropout_p, softmax_scale=scaling,
                causal=causal, window_size=window, softcap=cap, sinks=sinks, attention_chunk=documents["chunk"])
            return out.reshape(batch, n_q, h_q, out.shape[-1]), None
        # The 4-D mask already holds causality and any window.
        from flashattn_triton.api import _sdpa
        if isinstance(attention_mask, _UnbuiltMask):
            attention_mask = attention_mask.built()
        out = _sdpa(query, key, value, attention_mask, dropout_p, False, scaling, query.shape[1] != key.shape[1],
                    softcap=cap, sinks=sinks)
        return out.transpose(1, 2), None

    raise ValueError(f"attention_mask must be None, 2-D (batch, seqlen_k) or 4-D, got shape "
                     f"{tuple(attention_mask.shape)}")


def _packed_documents(kwargs, batch: int, n_q: int, n_k: int):
    """(cu_seqlens_q, cu_seqlens_k int32, max_seqlen_q, max_seqlen_k) from the
    flash kwargs (cu_seq_lens_q / _k, max_length_q / _k) of a single packed
    row whose queries are its keys (training, a prefill), else None.  The
    maxima are taken as given when ints; a tensor one is replaced by the row
    length, an upper bound (reading it would be a host sync)."""
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if batch != 1 or n_q != n_k or not isinstance(cu_q, torch.Tensor) or not isinstance(cu_k, torch.Tensor):
        return None
    if cu_q.dim() != 1 or cu_k.shape != cu_q.shape:
        raise ValueError(f"cu_seq_lens_q and cu_seq_lens_k must be 1-D of one length (documents + 1), got "
                         f"shapes {tuple(cu_q.shape)} and {tuple(cu_k.shape)}")
    maxima = []
    for name, n in (("max_length_q", n_q), ("max_length_k", n_k)):
        m = kwargs.get(name)
        maxima.append(int(m) if isinstance(m, int) and 0 < m <= n else n)
    return cu_q.to(torch.int32), cu_k.to(torch.int32), maxima[0], maxima[1]


def _documents_apply(documents: dict, batch: int, n_q: int, n_k: int, causal: bool, sliding_window,
                     chunk: int) -> bool:
    """Whether the layer's own pattern (causal, window, chunks) is the one the
    mask's documents were found for; if not, the 4-D mask is read instead."""
    window = documents["window"]
    return (documents["batch"] == batch and documents["seqlen"] == n_q == n_k and documents["causal"] == causal
            and chunk == documents["chunk"] and (sliding_window is None if window is None else sliding_window == window))


def _padded_attention(q, k, v, mask, dropout_p, scaling, causal, window, cap, sinks=None, chunk=0):
    """q (B, Nq, Hq, d), k, v (B, Nk, Hkv, d); mask (B, L) bool, L <= Nk (a
    static cache holds Nk slots of which the first L are filled).  Causal: L >=
    Nq, the last Nq columns being the queries' own.  Not causal the mask is the
    keys' only and Nq is free (cross-attention: a decoder longer than its
    padded encoder input)."""
    import flashattn_triton as fat

    batch, n_q = q.shape[0], q.shape[1]
    n_k = k.shape[1]
    # Causal, the mask also gives the queries' padding (its last n_q columns);
    # not causal (cross-attention: n_q need not relate to n_k), it is the keys' only.
    if mask.shape[0] != batch or mask.shape[1] > n_k or (causal and mask.shape[1] < n_q):
        raise ValueError(f"padding mask of shape {tuple(mask.shape)} does not fit batch={batch}, "
                         f"seqlen_q={n_q}, seqlen_k={n_k}")
    keep_k = mask
    if mask.shape[1] < n_k:  # unfilled cache slots are padding
        keep_k = torch.nn.functional.pad(mask, (0, n_k - mask.shape[1]), value=False)
    # Causal: a padding query is itself padding (its output is zeroed).  Not
    # causal: every query attends its row's real keys (this also holds for
    # cross-attention, where the mask belongs to the keys only).
    keep_q = mask[:, -n_q:] if causal else None
    order_q, cu_q = _segments(keep_q, batch, n_q, q.device)
    order_k, cu_k = _segments(keep_k, batch, n_k, k.device)
    q_p, k_p, v_p = _gather(q, order_q), _gather(k, order_k), _gather(v, order_k)
    # max_seqlen as upper bounds from the shapes: exact maxima would need a sync.
    out = fat.flash_attn_varlen_func(q_p, k_p, v_p, cu_q, cu_k, n_q, n_k, dropout_p=dropout_p,
                                     softmax_scale=scaling, causal=causal, window_size=window, softcap=cap,
                                     sinks=sinks, attention_chunk=chunk)
    return pad(out, order_q, keep_q, batch, n_q)
