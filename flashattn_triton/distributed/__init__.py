"""Context parallelism: attention over a sequence sharded across ranks.

* :func:`ring_flash_attn_func` -- ring attention over ``torch.distributed``
  (NCCL on GPUs, gloo on CPU), forward and backward, GQA.
* Sharding helpers: :func:`zigzag_shard`, :func:`zigzag_unshard`,
  :func:`zigzag_position_ids`, and their ``sharding=``-generic forms
  :func:`shard_sequence`, :func:`unshard_sequence`, :func:`position_ids`,
  :func:`gather_sequence`.

See docs/distributed.md.
"""

from .sharding import (gather_sequence, position_ids, shard_sequence, unshard_sequence, zigzag_position_ids,
                       zigzag_shard, zigzag_unshard)
from .ring import ring_flash_attn_func, ring_schedule

__all__ = [
    "ring_flash_attn_func",
    "ring_schedule",
    "zigzag_shard",
    "zigzag_unshard",
    "zigzag_position_ids",
    "shard_sequence",
    "unshard_sequence",
    "position_ids",
    "gather_sequence",
]
