"""Sequence sharding for context parallelism: which tokens each rank holds.

Two layouts of a sequence of ``N`` tokens over ``P`` ranks:

* ``"contiguous"``: rank ``r`` holds tokens ``[r N/P, (r+1) N/P)``.  Simple, but
  with a causal mask rank ``P-1`` attends ``P`` times as many keys as rank 0.
* ``"zigzag"``: the sequence is cut into ``2P`` chunks of ``c = N / (2P)``
  tokens; rank ``r`` holds chunk ``r`` followed by chunk ``2P-1-r``.  For
  ``P = 4`` (chunks 0..7)::

      rank 0: [0 | 7]   rank 1: [1 | 6]   rank 2: [2 | 5]   rank 3: [3 | 4]

  Every rank then holds one early and one late chunk, so under a causal mask
  each rank attends the same number of (query, key) pairs.

Position ids must follow the tokens (RoPE and friends use global positions):
shard ``torch.arange(N)`` the same way, or call :func:`zigzag_position_ids`.

Packed batches (varlen, ``cu_seqlens``): every document is sharded on its own,
in one of the two layouts above, and each rank packs its parts of the
documents in document order.  So every rank holds ``L_b / P`` tokens of
document ``b``, and the local offsets ``cu_seqlens // P``
(:func:`local_cu_seqlens`) are the same on every rank.  Each document's length
must be a multiple of ``2P`` (zigzag) or ``P`` (contiguous).  Position ids
restart at 0 in every document (:func:`varlen_position_ids`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

import torch

from .._validate import check_offsets

if TYPE_CHECKING:
    import torch.distributed as dist

SHARDINGS = ("zigzag", "contiguous")


def _check_split(name: str, n: int, parts: int, what: str) -> int:
    if n % parts != 0:
        raise ValueError(f"{name} has {n} tokens along the sequence dim, not divisible into {parts} "
                         f"{what} chunks")
    return n // parts


def _check_rank(rank: int, world_size: int) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")


def check_sharding(sharding: str) -> str:
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding must be one of {SHARDINGS}, got {sharding!r}")
    return sharding


def zigzag_shard(x: torch.Tensor, rank: int, world_size: int, dim: int = 1) -> torch.Tensor:
    """The part of a full sequence that ``rank`` holds under zigzag sharding.

    Arguments:
        x: a full sequence, e.g. (batch_size, seqlen, nheads, headdim) with
            ``dim=1``, or position ids (seqlen,) with ``dim=0``.  ``seqlen``
            must be divisible by ``2 * world_size``.
        rank, world_size: the rank's index in the context-parallel group and
            the group's size.
        dim: the sequence dimension.
    Returns:
        a new contiguous tensor with ``seqlen / world_size`` entries along
        ``dim``: chunk ``rank`` then chunk ``2 * world_size - 1 - rank``.
    """
    _check_rank(rank, world_size)
    c = _check_split("x", x.shape[dim], 2 * world_size, "zigzag")
    first = x.narrow(dim, rank * c, c)
    second = x.narrow(dim, (2 * world_size - 1 - rank) * c, c)
    return torch.cat([first, second], dim=dim)


def zigzag_unshard(shards: Sequence[torch.Tensor], dim: int = 1) -> torch.Tensor:
    """Inverse of :func:`zigzag_shard`: the full sequence from every rank's shard.

    Arguments:
        shards: ``world_size`` tensors in rank order (e.g. the list filled by
            ``torch.distributed.all_gather``), each with an even length
            ``2c`` along ``dim``.
        dim: the sequence dimension.
    Returns:
        the full sequence, ``2c * world_size`` long along ``dim``.
    """
    shards = list(shards)
    if not shards:
        raise ValueError("shards must hold one tensor per rank, got an empty sequence")
    n_local = shards[0].shape[dim]
    for r, s in enumerate(shards):
        if s.shape != shards[0].shape:
            raise ValueError(f"shards must share one shape, got {tuple(shards[0].shape)} (rank 0) "
                             f"and {tuple(s.shape)} (rank {r})")
    if n_local % 2 != 0:
        raise ValueError(f"each zigzag shard holds two equal chunks, got an odd length {n_local} "
                         f"along dim {dim}")
    c = n_local // 2
    firsts = [s.narrow(dim, 0, c) for s in shards]
    seconds = [s.narrow(dim, c, c) for s in shards]
    return torch.cat(firsts + seconds[::-1], dim=dim)


def zigzag_position_ids(seqlen: int, rank: int, world_size: int,
                        device: Optional[torch.device] = None) -> torch.Tensor:
    """Global positions (int64, shape (seqlen / world_size,)) of the tokens
    ``rank`` holds under zigzag sharding of a ``seqlen``-token sequence."""
    return zigzag_shard(torch.arange(seqlen, device=device), rank, world_size, dim=0)


def shard_sequence(x: torch.Tensor, rank: int, world_size: int, dim: int = 1,
                   sharding: str = "zigzag") -> torch.Tensor:
    """The part of ``x`` (a full sequence along ``dim``) that ``rank`` holds,
    under ``sharding`` ("zigzag" or "contiguous"); a new contiguous tensor."""
    check_sharding(sharding)
    if sharding == "zigzag":
        return zigzag_shard(x, rank, world_size, dim)
    _check_rank(rank, world_size)
    n = _check_split("x", x.shape[dim], world_size, "contiguous")
    return x.narrow(dim, rank * n, n).contiguous()


def unshard_sequence(shards: Sequence[torch.Tensor], dim: int = 1,
                     sharding: str = "zigzag") -> torch.Tensor:
    """Inverse of :func:`shard_sequence` from the shards of every rank, in rank order."""
    check_sharding(sharding)
    if sharding == "zigzag":
        return zigzag_unshard(shards, dim)
    shards = list(shards)
    for r, s in enumerate(shards):  # (as zigzag_unshard: every rank holds an equal part)
        if s.shape != shards[0].shape:
            raise ValueError(f"shards must share one shape, got {tuple(shards[0].shape)} (rank 0) "
                             f"and {tuple(s.shape)} (rank {r})")
    return torch.cat(shards, dim=dim)


def position_ids(seqlen: int, rank: int, world_size: int, sharding: str = "zigzag",
                 device: Optional[torch.device] = None) -> torch.Tensor:
    """Global positions of the tokens ``rank`` holds under ``sharding``."""
    return shard_sequence(torch.arange(seqlen, device=device), rank, world_size, 0, sharding)


def gather_sequence(x: torch.Tensor, group: Optional["dist.ProcessGroup"] = None, dim: int = 1,
                    sharding: str = "zigzag") -> torch.Tensor:
    """All-gather every rank's shard and reassemble the full sequence (on every rank).

    Not differentiable; meant for evaluation, logging and tests.  Every rank
    must call it with a shard of the same shape."""
    import torch.distributed as dist

    check_sharding(sharding)
    world_size = dist.get_world_size(group)
    x = x.contiguous()
    shards: List[torch.Tensor] = [torch.empty_like(x) for _ in range(world_size)]
    dist.all_gather(shards, x, group=group)
    return unshard_sequence(shards, dim, sharding)


# ---------------------------------------------------------------------------
# Packed batches (varlen): every document sharded on its own
# ---------------------------------------------------------------------------

def _doc_offsets(cu_seqlens: torch.Tensor, world_size: int, sharding: str) -> List[int]:
    """The global offsets on the host, checked: int32 1-D from 0, non-decreasing,
    every document's length divisible by 2P (zigzag) or P (contiguous)."""
    check_sharding(sharding)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    check_offsets("cu_seqlens", cu_seqlens)
    offs = cu_seqlens.tolist()
    if offs[0] != 0:
        raise ValueError(f"cu_seqlens[0] must be 0, got {offs[0]}")
    parts = 2 * world_size if sharding == "zigzag" else world_size
    for b, (a, e) in enumerate(zip(offs[:-1], offs[1:])):
        if e < a:
            raise ValueError(f"cu_seqlens must be non-decreasing, got {offs}")
        if (e - a) % parts:
            raise ValueError(f"document {b} of cu_seqlens has {e - a} tokens, not divisible into {parts} "
                             f"{sharding} chunks (every document's length must be a multiple of "
                             f"{'2 * world_size' if sharding == 'zigzag' else 'world_size'} = {parts})")
    return offs


def _varlen_rows(offs: List[int], rank: int, world_size: int, sharding: str,
                 device: Optional[torch.device]) -> Tuple[torch.Tensor, torch.Tensor]:
    """(global rows, positions within their documents) of the tokens ``rank``
    holds, in local order, both int64 of length ``offs[-1] / world_size``."""
    _check_rank(rank, world_size)
    rows, pos = [], []
    for a, e in zip(offs[:-1], offs[1:]):
        p = position_ids(e - a, rank, world_size, sharding, device)
        pos.append(p)
        rows.append(p + a)
    if not rows:
        empty = torch.zeros(0, dtype=torch.int64, device=device)
        return empty, empty
    return torch.cat(rows), torch.cat(pos)


def _check_total(x: torch.Tensor, dim: int, total: int, what: str, world_size: int = 1) -> None:
    """x holds total / world_size rows along dim (total: cu_seqlens[-1])."""
    if x.shape[dim] != total // world_size:
        per_rank = "" if world_size == 1 else f" (/ {world_size} ranks = {total // world_size})"
        raise ValueError(f"{what} has {x.shape[dim]} rows along dim {dim}, but cu_seqlens[-1] = {total}{per_rank}")


def local_cu_seqlens(cu_seqlens: torch.Tensor, world_size: int, sharding: str = "zigzag") -> torch.Tensor:
    """The offsets of the local packed layout: ``cu_seqlens // world_size``
    (int32, same device), the same on every rank.

    ``cu_seqlens``: (B + 1,) int32 offsets of the full packed batch; each
    document's length must be a multiple of ``2 * world_size`` (zigzag) or
    ``world_size`` (contiguous), else ValueError.  Reads the offsets on the host."""
    _doc_offsets(cu_seqlens, world_size, sharding)
    return torch.div(cu_seqlens, world_size, rounding_mode="floor").to(torch.int32)


def shard_varlen(x: torch.Tensor, cu_seqlens: torch.Tensor, rank: int, world_size: int,
                 sharding: str = "zigzag", dim: int = 0) -> torch.Tensor:
    """The part of a packed batch ``x`` that ``rank`` holds: each document
    sharded on its own (see :func:`shard_sequence`), the parts packed in
    document order.

    Arguments:
        x: the full packed batch, e.g. (total, nheads, headdim) with ``dim=0``,
            or token ids (total,); ``x.shape[dim] == cu_seqlens[-1]``.
        cu_seqlens: (B + 1,) int32, the GLOBAL offsets of the documents.
        rank, world_size, sharding: as in :func:`shard_sequence`.
    Returns:
        a new contiguous tensor with ``total / world_size`` rows along ``dim``,
        laid out by ``local_cu_seqlens(cu_seqlens, world_size)``.
    """
    offs = _doc_offsets(cu_seqlens, world_size, sharding)
    _check_total(x, dim, offs[-1], "x")
    rows, _ = _varlen_rows(offs, rank, world_size, sharding, x.device)
    return x.index_select(dim, rows)


def unshard_varlen(shards: Sequence[torch.Tensor], cu_seqlens: torch.Tensor, sharding: str = "zigzag",
                   dim: int = 0) -> torch.Tensor:
    """Inverse of :func:`shard_varlen`: the full packed batch from every rank's
    shard (``world_size`` tensors in rank order), given the GLOBAL ``cu_seqlens``."""
    shards = list(shards)
    if not shards:
        raise ValueError("shards must hold one tensor per rank, got an empty sequence")
    for r, s in enumerate(shards):
        if s.shape != shards[0].shape:
            raise ValueError(f"shards must share one shape, got {tuple(shards[0].shape)} (rank 0) "
                             f"and {tuple(s.shape)} (rank {r})")
    world_size = len(shards)
    offs = _doc_offsets(cu_seqlens, world_size, sharding)
    _check_total(shards[0], dim, offs[-1], "each shard", world_size)
    shape = list(shards[0].shape)
    shape[dim] = offs[-1]
    full = shards[0].new_empty(shape)
    for r, s in enumerate(shards):
        rows, _ = _varlen_rows(offs, r, world_size, sharding, s.device)
        full.index_copy_(dim, rows, s)
    return full


def varlen_position_ids(cu_seqlens: torch.Tensor, rank: int, world_size: int, sharding: str = "zigzag",
                        device: Optional[torch.device] = None) -> torch.Tensor:
    """Positions within their own documents (int64, ``total / world_size``) of
    the tokens ``rank`` holds, e.g. for RoPE: ``shard_varlen`` of each
    document's ``arange(L_b)``.  ``device``: default that of ``cu_seqlens``."""
    offs = _doc_offsets(cu_seqlens, world_size, sharding)
    _, pos = _varlen_rows(offs, rank, world_size, sharding, device if device is not None else cu_seqlens.device)
    return pos


def gather_varlen(x: torch.Tensor, cu_seqlens: torch.Tensor, group: Optional["dist.ProcessGroup"] = None,
                  sharding: str = "zigzag", dim: int = 0) -> torch.Tensor:
    """All-gather every rank's packed shard and reassemble the full packed batch
    (on every rank), given the GLOBAL ``cu_seqlens``.  Not differentiable."""
    import torch.distributed as dist

    world_size = dist.get_world_size(group)
    _doc_offsets(cu_seqlens, world_size, sharding)  # fail before the collective
    x = x.contiguous()
    shards: List[torch.Tensor] = [torch.empty_like(x) for _ in range(world_size)]
    dist.all_gather(shards, x, group=group)
    return unshard_varlen(shards, cu_seqlens, sharding, dim)
