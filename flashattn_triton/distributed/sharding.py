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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence

import torch

if TYPE_CHECKING:
    import torch.distributed as dist

SHARDINGS = ("zigzag", "contiguous")


def _check_split(name: str, n: int, parts: int, what: str) -> int:
    if n % parts != 0:
        raise ValueError(f"{name} has {n} tokens along the sequence dim, not divisible into {parts} "
                         f"{what} chunks")
    return n // parts


def _check_rank(rank: int, world_size: int) -> None:
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not isinstance(rank, int) or not 0 <= rank < world_size:
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
    return torch.cat(list(shards), dim=dim)


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
