"""Context parallelism: attention over a sequence sharded across ranks.

* :func:`ring_flash_attn_func` -- ring attention over ``torch.distributed``
  (NCCL on GPUs, gloo on CPU), forward and backward, GQA.
* :func:`ring_flash_attn_varlen_func` -- the same over a packed batch of
  documents (cu_seqlens), every document sharded on its own.
* Sharding helpers: :func:`zigzag_shard`, :func:`zigzag_unshard`,
  :func:`zigzag_position_ids`, and their ``sharding=``-generic forms
  :func:`shard_sequence`, :func:`unshard_sequence`, :func:`position_ids`,
  :func:`gather_sequence`; for packed batches :func:`shard_varlen`,
  :func:`unshard_varlen`, :func:`local_cu_seqlens`, :func:`varlen_position_ids`,
  :func:`gather_varlen`.

See docs/distributed.md.
"""

from .sharding import (gather_sequence, gather_varlen, local_cu_seqlens, position_ids, shard_sequence, shard_varlen,
                       unshard_sequence, unshard_varlen, varlen_position_ids, zigzag_position_ids, zigzag_shard,
                       zigzag_unshard)
from .ring import ring_flash_attn_func, ring_flash_attn_varlen_func, ring_schedule, ring_varlen_schedule

__all__ = [
    "ring_flash_attn_func",
    "ring_schedule",
    "ring_flash_attn_varlen_func",
    "ring_varlen_schedule",
    "zigzag_shard",
    "zigzag_unshard",
    "zigzag_position_ids",
    "shard_sequence",
    "unshard_sequence",
    "position_ids",
    "gather_sequence",
    "shard_varlen",
    "unshard_varlen",
    "local_cu_seqlens",
    "varlen_position_ids",
    "gather_varlen",
]
