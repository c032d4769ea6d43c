"""Ring attention: exact attention over a sequence sharded across ranks.

Each of the ``P`` ranks of a process group holds a shard of the queries and of
the keys/values of one sequence.  The K/V shards travel around the ring
(rank ``r`` sends to ``r+1`` and receives from ``r-1``) with
``torch.distributed`` point-to-point ops; while shard ``s+1`` is in flight,
rank ``r`` attends its queries to shard ``s``, the one in hand.  At step ``s``
rank ``r`` holds the K/V shard of rank ``j = (r - s) mod P``.

Forward: every block gives a partial output and its LSE; the partials are
merged exactly in float32 by their LSE (``kernels.combine.merge_attention_states``).
Backward: the same blocks are recomputed with the *final* LSE (``ops.flash_bwd``
takes the LSE of the whole row, so P = exp(s - lse) is already
normalised); dQ accumulates locally in float32, and each K/V shard's dK/dV
accumulator (float32) travels around the ring behind the K/V shard, collecting
every rank's contribution, and ends at the shard's owner.

Softcap (s -> softcap * tanh(s / softcap)) acts on each score alone, so every
block applies it to its own scores: the block LSEs are those of the capped
scores, the merge stays exact, and each block's backward multiplies its dS by
the cap's derivative.

Sliding windows and ALiBi depend on global positions, dropout on a random
stream that must not repeat across blocks; with any of them the ring runs
:func:`ring_positional_schedule`: every block is one chunk of queries
(global positions ``g_q + i``) against one chunk of keys (``g_k + j``), so
the raw op gets the block's global diagonal as one number,
``shift = g_q - g_k + (N_k - N_q)`` (``ops.flash_fwd(..., shift=)``; the
kernels take it as their causal offset, ``shift - (n_k - n_q)``), and masks
``i + shift - left <= j <= i + shift + right`` and adds
``-slope * |i + shift - j|`` exactly as the single-device call on the full
sequence does.  Block pairs that the window / causal mask hides entirely are
not computed (the K/V shard still travels).  Dropout: each rank draws one
Philox seed per call from its torch generator; block pair ``(A, B)``
(query chunk A, key chunk B of the U chunks of the sequence, ``pair = A U + B``)
uses that seed with the counters of a single call on the block shifted by
``pair * batch * Hq * rows * keys``: disjoint counter ranges, so independent
masks, and the backward, which runs the same blocks with the same counters,
regenerates them exactly (``ring_dropout_keep_mask`` rebuilds the mask of
the whole sequence).  The varlen ring does the same per document
(:func:`ring_varlen_positional_schedule`): a block is one chunk of every
document's queries against one chunk of its keys, and document d's chunks
hold c_d tokens, so its diagonal is ``(A - B) c_d`` (query chunk A, key
chunk B), which the packed raw op takes as one pair
(``ops.flash_varlen_fwd(..., doc_shift=(A - B, 0))``; the kernels add
``(A - B) * n_k`` to each sequence's bottom-right diagonal, n_k = c_d); its
dropout counters are shifted by ``pair * Hq * T * m`` (T packed query rows
of the block, m its longest key chunk).

Blocks of one step (local coordinates; ``c`` = chunk length, see sharding.py):

==========  ===========================  ================================  =================
sharding    source rank ``j``             block (queries x keys)            pairs attended
==========  ===========================  ================================  =================
zigzag      ``j == r`` (step 0)           all 2c x all 2c, causal           2c^2 + c
zigzag      ``j < r``                     all 2c x first c, full            2c^2
zigzag      ``j > r``                     last c x all 2c, full             2c^2
contiguous  ``j == r`` (step 0)           n x n, causal                     n(n+1)/2
contiguous  ``j < r``                     n x n, full                       n^2
contiguous  ``j > r``                     nothing (future keys)             0
no mask     any                           all x all, full                   n_q n_k
==========  ===========================  ================================  =================

Why zigzag works: rank ``r`` holds chunks ``r`` and ``2P-1-r``.  A source
``j < r`` has chunk ``j`` before both of ours and chunk ``2P-1-j`` after both,
so all our queries see its first half only.  A source ``j > r`` has both its
chunks after our chunk ``r`` and before our chunk ``2P-1-r``, so only our
second half sees it, all of it.  Each step costs every rank the same
(2c^2 pairs; step 0 adds the c diagonal pairs), so no rank waits on another.

The backward splits the step-0 diagonal block in two by query rows (first
half ``[0, h)`` x keys ``[0, h)`` causal, then ``[h, n)`` x ``[0, n)`` causal,
bottom-right aligned); the first part runs while the first K/V shard is in
flight, the second after the last step, while the finished dK/dV return to
their owners.  So the backward has ``P + 1`` steps and no exposed transfer
but the per-step latencies.

Packed batches (``ring_flash_attn_varlen_func``): every document is sharded
on its own, so each rank's shard is a packed batch with the same local
offsets ``cu_seqlens`` on every rank, and the steps are those above with each
block applied per document.  A block is (query rows, key rows, causal), each
row set "all" rows, or the "first" / "second" half of every document's local
rows (zigzag: chunk ``r`` / chunk ``2P-1-r`` of the document); the dense
schedule on a shard of two units gives them (``ring_varlen_schedule``).  Half
row sets are gathered with index tensors built once per call on the device
from ``cu_seqlens`` (no host sync), fed to the raw varlen op with halved
offsets, and merged / accumulated back through the same indices.  The varlen
op aligns causal masks bottom-right within each document, the mask the split
diagonal needs.  The varlen backward splits the diagonal block only under
zigzag + causal; otherwise it ends with a step without compute, in which the
finished dK/dV return to their owners (that last hop is exposed).
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from .. import ops
from .._params import draw_dropout_seed
from .._validate import (check_alibi, check_dropout, check_flag, check_offsets, check_qkv, check_scale,
                         check_softcap, check_window, offset_values)
from ..kernels.combine import merge_attention_states
from ..reference import LN2, LOG2E
from .sharding import check_sharding

__all__ = ["ring_flash_attn_func", "ring_flash_attn_varlen_func", "ring_schedule", "ring_varlen_schedule",
           "ring_positional_schedule", "ring_dropout_keep_mask", "ring_varlen_positional_schedule",
           "ring_varlen_dropout_keep_mask",
           "Block", "VarlenBlock", "RingComm", "ring_attention_forward", "ring_attention_backward",
           "ring_varlen_attention_forward", "ring_varlen_attention_backward"]

# ---------------------------------------------------------------------------
# Schedule: which block each rank computes at each step
# ---------------------------------------------------------------------------

class Block(NamedTuple):
    """Queries ``[q0, q1)`` of the local shard against keys ``[k0, k1)`` of the
    K/V shard in hand; ``causal`` is the bottom-right-aligned mask of the raw op
    (``ops.flash_fwd``).  Blocks of :func:`ring_positional_schedule` carry
    ``shift`` instead (``causal`` False): local query ``i`` and key ``j`` are
    global positions ``g_q + i`` and ``g_k + j`` with
    ``shift = g_q - g_k + (N_k - N_q)``, the diagonal of the global window
    and ALiBi; and ``pair``, the global (query chunk, key chunk) index that
    selects the block's dropout counters."""
    q0: int
    q1: int
    k0: int
    k1: int
    causal: bool
    shift: Optional[int] = None
    pair: int = -1

    def pairs(self) -> int:
        """Number of (query, key) pairs the block attends (blocks without ``shift``)."""
        n_q, n_k = self.q1 - self.q0, self.k1 - self.k0
        if not self.causal:
            return n_q * n_k
        # Row i sees keys j <= i + n_k - n_q.
        return sum(min(n_k, max(0, i + n_k - n_q + 1)) for i in range(n_q))


def _diagonal(n_q: int, n_k: int, causal: bool) -> Block:
    return Block(0, n_q, 0, n_k, causal)


def _split_diagonal(n_q: int, n_k: int, causal: bool) -> Tuple[Block, Block]:
    """The diagonal block cut by query rows at h = n_q // 2 (exact: the two
    parts attend disjoint rows, and bottom-right alignment keeps the mask)."""
    h = n_q // 2
    if causal:
        return Block(0, h, 0, h, True), Block(h, n_q, 0, n_k, True)
    return Block(0, h, 0, n_k, False), Block(h, n_q, 0, n_k, False)


def _off_diagonal(rank: int, src: int, n_q: int, n_k: int, causal: bool, sharding: str) -> List[Block]:
    if not causal:
        return [Block(0, n_q, 0, n_k, False)]
    if sharding == "contiguous":
        return [Block(0, n_q, 0, n_k, False)] if src < rank else []
    c = n_q // 2
    if src < rank:
        return [Block(0, n_q, 0, c, False)]
    return [Block(c, n_q, 0, n_k, False)]


def ring_schedule(rank: int, world_size: int, n_q: int, n_k: int, causal: bool,
                  sharding: str = "zigzag", backward: bool = False) -> List[List[Block]]:
    """Blocks that ``rank`` computes at each step of the ring.

    Step ``s`` of the forward uses the K/V shard of rank ``(rank - s) mod
    world_size`` (``world_size`` steps).  The backward (``world_size + 1``
    steps when ``world_size > 1``) runs the first half of the diagonal block at
    step 0, steps 1..P-1 as in the forward, and the second half of the
    diagonal block at step P (K/V shard of ``rank`` again).  Empty blocks are
    dropped.  With ``causal``, ``n_q`` must equal ``n_k`` (and be even for zigzag).
    """
    check_sharding(sharding)
    if causal and n_q != n_k:
        raise ValueError(f"causal ring attention needs equal local query and key lengths, got "
                         f"{n_q} and {n_k}")
    if causal and sharding == "zigzag" and n_q % 2:
        raise ValueError(f"zigzag shards hold two equal chunks, got an odd local length {n_q}")
    src = [(rank - s) % world_size for s in range(world_size)]
    middle = [_off_diagonal(rank, j, n_q, n_k, causal, sharding) for j in src[1:]]
    if not backward or world_size == 1:
        steps = [[_diagonal(n_q, n_k, causal)]] + middle
    else:
        first, last = _split_diagonal(n_q, n_k, causal)
        steps = [[first]] + middle + [[last]]
    return [[b for b in step if b.q1 > b.q0 and b.k1 > b.k0] for step in steps]


def _units(rank: int, world_size: int, n: int, sharding: str, chunked: bool) -> List[Tuple[int, int, int]]:
    """(local start, local end, global chunk index) of the chunks of ``rank``'s
    shard of local length ``n``.  Chunk ``g`` of length ``c`` holds global
    positions ``[g c, (g + 1) c)``.  Without ``chunked`` the whole shard is one
    unit (positions then play no part)."""
    if not chunked or sharding == "contiguous":
        return [(0, n, rank)]
    c = n // 2
    return [(0, c, rank), (c, n, 2 * world_size - 1 - rank)]


def _band_visible(n_q: int, n_k: int, shift: int, window: Tuple[int, int]) -> bool:
    """Whether some row i < n_q sees some key j < n_k, i.e. i + shift - left <= j <= i + shift + right
    (-1 = unbounded).  Row i sees a key iff i >= -shift - right and i <= n_k - 1 - shift + left
    (left + right >= 0, so each row's band holds an integer)."""
    left, right = window
    lo = 0 if right < 0 else max(0, -shift - right)
    hi = n_q - 1 if left < 0 else min(n_q - 1, n_k - 1 - shift + left)
    return n_q > 0 and n_k > 0 and lo <= hi


def ring_positional_schedule(rank: int, world_size: int, n_q: int, n_k: int, window: Tuple[int, int],
                             sharding: str = "zigzag", chunked: bool = True,
                             backward: bool = False) -> List[List[Block]]:
    """Blocks of global positions: the schedule of windows, ALiBi and dropout.

    Every block is one chunk of this rank's queries against one chunk of the
    K/V shard in hand (zigzag: two chunks per shard; contiguous, or without
    ``chunked``: the whole shard), so that local positions map to global
    ones by one offset, the block's ``shift`` (see :class:`Block`; global
    alignment bottom-right, N_k - N_q = P (n_k - n_q)).  ``window`` = (left,
    right), causal already folded in as right = 0.  A block whose chunks hold
    no visible (query, key) pair is left out (the K/V shard still travels).
    ``pair = A * U + B`` for query chunk A and key chunk B of the U chunks of
    the sequence.  The backward (``world_size > 1``) runs the own shard's
    blocks of the first query chunk at step 0 and those of the second at the
    extra step P (none under contiguous sharding)."""
    check_sharding(sharding)
    chunked = chunked and sharding == "zigzag"
    if chunked and (n_q % 2 or n_k % 2):
        raise ValueError(f"zigzag shards hold two equal chunks, got local lengths {n_q} and {n_k}")
    n_units = 2 * world_size if chunked else world_size
    base = world_size * (n_k - n_q)
    steps = []
    for s in range(world_size):
        src = (rank - s) % world_size
        blocks = []
        for a0, a1, qa in _units(rank, world_size, n_q, sharding, chunked):
            for b0, b1, kb in _units(src, world_size, n_k, sharding, chunked):
                shift = qa * (a1 - a0) - kb * (b1 - b0) + base
                if _band_visible(a1 - a0, b1 - b0, shift, window):
                    blocks.append(Block(a0, a1, b0, b1, False, shift, qa * n_units + kb))
        steps.append(blocks)
    if backward and world_size > 1:
        diag = steps[0]
        steps = [[b for b in diag if b.q0 == 0]] + steps[1:] + [[b for b in diag if b.q0 > 0]]
    return steps


def ring_dropout_keep_mask(seeds: Sequence[torch.Tensor], dropout_p: float, batch: int, heads: int,
                           seqlen_q: int, seqlen_k: int, causal: bool = False,
                           window_size: Tuple[int, int] = (-1, -1), alibi: bool = False,
                           sharding: str = "zigzag") -> torch.Tensor:
    """The keep mask (batch, heads, seqlen_q, seqlen_k), global positions,
    True = kept, of a ``ring_flash_attn_func`` call with dropout on
    ``P = len(seqlens)`` ranks, given each rank's seed (``seeds[r]``: the (1,)
    int64 tensor ``draw_dropout_seed`` gave rank r, i.e. the first draw from
    its torch generator in the call).  Testing aid, O(N^2) memory.

    The derivation: every block of :func:`ring_positional_schedule` (query
    chunk A x key chunk B, pair = A U + B) is computed, forward and
    backward, on the rank that holds chunk A, with that rank's seed and the
    Philox counters of a single call on the block shifted by
    ``pair * batch * heads * rows * keys``; so the counter ranges of the block
    pairs are disjoint and their masks independent.  ``causal``,
    ``window_size`` and ``alibi`` only pick the chunking, as the call did."""
    from ..reference import dropout_keep
    from .sharding import position_ids
    world_size = len(seeds)
    left, right = window_size
    if causal:
        right = 0
    chunked = (left, right) != (-1, -1) or alibi
    n_q, n_k = seqlen_q // world_size, seqlen_k // world_size
    keep = torch.zeros(batch, heads, seqlen_q, seqlen_k, dtype=torch.bool)
    steps_of = {r: ring_positional_schedule(r, world_size, n_q, n_k, (-1, -1), sharding, chunked)
                for r in range(world_size)}  # no window: every block pair, visible or not
    for r, steps in steps_of.items():
        pos_q = position_ids(seqlen_q, r, world_size, sharding)
        for s, blocks in enumerate(steps):
            pos_k = position_ids(seqlen_k, (r - s) % world_size, world_size, sharding)
            for b in blocks:
                rows, cols = b.q1 - b.q0, b.k1 - b.k0
                m = dropout_keep(seeds[r].cpu(), dropout_p, batch, heads, range(rows), 0, cols, rows, cols,
                                 offset=b.pair * batch * heads * rows * cols)
                keep[:, :, pos_q[b.q0:b.q1, None], pos_k[None, b.k0:b.k1]] = m.cpu()
    return keep


# ---------------------------------------------------------------------------
# Communication
# ---------------------------------------------------------------------------

class _Pending:
    def __init__(self, works, sent, received):
        self._works, self._sent, self._received = works, sent, received

    def wait(self) -> List[torch.Tensor]:
        """Block until the exchange is done (on CUDA: make the current stream
        wait; the host goes on) and return the received tensors."""
        for w in self._works:
            w.wait()
        self._works, self._sent = [], []
        return self._received


class RingComm:
    """Sends to the next rank of ``group`` and receives from the previous one.

    ``exchange(tensors)`` posts one ``batch_isend_irecv`` (sends of
    ``tensors`` to rank+1, receives of same-shaped tensors from rank-1) and
    returns at once; ``.wait()`` on the result gives the received tensors.
    The benchmark substitutes objects with the same two methods (no
    communication, or timed waits)."""

    def __init__(self, group=None):
        self.group = group if group is not None else dist.distributed_c10d._get_default_group()
        self.rank = dist.get_rank(self.group)
        self.world_size = dist.get_world_size(self.group)
        self.next = dist.get_global_rank(self.group, (self.rank + 1) % self.world_size)
        self.prev = dist.get_global_rank(self.group, (self.rank - 1) % self.world_size)

    def exchange(self, tensors: Sequence[torch.Tensor]) -> _Pending:
        sent = [t.contiguous() for t in tensors]
        received = [torch.empty_like(t) for t in sent]
        if not sent:
            return _Pending([], [], [])
        ops_ = [dist.P2POp(dist.isend, t, self.next, self.group) for t in sent]
        ops_ += [dist.P2POp(dist.irecv, t, self.prev, self.group) for t in received]
        return _Pending(dist.batch_isend_irecv(ops_), sent, received)


# ---------------------------------------------------------------------------
# Forward and backward over the ring (no autograd)
# ---------------------------------------------------------------------------

def _rows(x: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """Sequence rows [a, b) of a (B, N, H, d) tensor (a view)."""
    return x[:, a:b]


def _lse_rows(lse: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """Rows [a, b) of a (B, H, N) LSE, contiguous as the kernels expect."""
    return lse[:, :, a:b].contiguous()


class _Variants(NamedTuple):
    """Options of the positional schedule, as every block passes them to the raw ops."""
    window: Tuple[int, int]  # causal folded in (right = 0)
    alibi_slopes: Optional[torch.Tensor]
    dropout_p: float
    rng_seed: Optional[torch.Tensor]

    def block_kwargs(self, b: Block, batch: int, heads: int) -> Dict[str, Any]:
        # Block pair `pair` owns the dropout counters [pair * C, (pair + 1) * C),
        # C = B * Hq * rows * keys, the counters a single call on the block uses.
        return dict(shift=b.shift, alibi_slopes=self.alibi_slopes, dropout_p=self.dropout_p,
                    rng_seed=self.rng_seed, philox_offset=b.pair * batch * heads * (b.q1 - b.q0) * (b.k1 - b.k0))


def _variants(causal: bool, window, alibi_slopes, dropout_p: float, rng_seed) -> Optional[_Variants]:
    """The options when the positional schedule is needed (a window, ALiBi or dropout), else None."""
    left, right = window
    if causal:
        right = 0
    plain = (left, right) == (-1, -1) or (causal and left == -1)  # what ring_schedule covers
    if plain and alibi_slopes is None and not dropout_p > 0:
        return None
    if dropout_p > 0 and rng_seed is None:
        raise ValueError("dropout_p > 0 needs rng_seed, the call's (1,) int64 Philox seed")
    return _Variants((left, right), alibi_slopes, float(dropout_p), rng_seed)


def _steps(rank: int, world_size: int, n_q: int, n_k: int, causal: bool, sharding: str,
           var: Optional[_Variants], backward: bool) -> List[List[Block]]:
    if var is None:
        return ring_schedule(rank, world_size, n_q, n_k, causal, sharding, backward)
    # Positions matter under a mask or ALiBi; dropout alone needs only distinct block pairs.
    chunked = var.window != (-1, -1) or var.alibi_slopes is not None
    return ring_positional_schedule(rank, world_size, n_q, n_k, var.window, sharding, chunked, backward)


def _block_fwd(q, k, v, b: Block, softmax_scale, softcap, var: Optional[_Variants]):
    qb, kb, vb = _rows(q, b.q0, b.q1), _rows(k, b.k0, b.k1), _rows(v, b.k0, b.k1)
    if b.shift is None:
        return ops.flash_fwd(qb, kb, vb, softmax_scale, b.causal, softcap=softcap)
    assert var is not None
    return ops.flash_fwd(qb, kb, vb, softmax_scale, False, var.window, softcap,
                         **var.block_kwargs(b, q.shape[0], q.shape[2]))


def ring_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, comm,
                           softmax_scale: float, causal: bool, sharding: str = "zigzag",
                           softcap: float = 0.0, *, window: Tuple[int, int] = (-1, -1),
                           alibi_slopes: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                           rng_seed: Optional[torch.Tensor] = None):
    """Ring forward on local shards; returns (out in q's dtype, lse float32 (B, Hq, Nq)).

    q: (B, Nq_local, Hq, d); k, v: (B, Nk_local, Hkv, d), the same shape on
    every rank.  ``comm``: a :class:`RingComm` (or a stand-in with its interface).
    ``softcap`` (0 = off) acts on each score alone, so every block applies it.
    ``window`` (global positions), ``alibi_slopes`` and ``dropout_p`` with
    ``rng_seed`` ((1,) int64) switch to :func:`ring_positional_schedule`."""
    world_size, rank = comm.world_size, comm.rank
    n_q, n_k = q.shape[1], k.shape[1]
    var = _variants(causal, window, alibi_slopes, dropout_p, rng_seed)
    steps = _steps(rank, world_size, n_q, n_k, causal, sharding, var, False)
    kv = [k, v]
    out: Any = None  # set by the first block
    lse: Any = None
    for s, blocks in enumerate(steps):
        # Post the transfer of the next shard before computing on this one.
        pending = comm.exchange(kv) if s + 1 < world_size else None
        for b in blocks:
            o_b, lse_b = _block_fwd(q, kv[0], kv[1], b, softmax_scale, softcap, var)
            if out is None:
                if b.q0 == 0 and b.q1 == n_q:  # the whole diagonal block covers every row
                    out, lse = o_b, lse_b
                    continue
                out = torch.zeros(q.shape[:3] + (v.shape[3],), dtype=torch.float32, device=q.device)
                lse = torch.full((q.shape[0], q.shape[2], n_q), float("-inf"), dtype=torch.float32,
                                 device=q.device)
            o_m, lse_m = merge_attention_states(_rows(out, b.q0, b.q1), lse[:, :, b.q0:b.q1], o_b, lse_b)
            if b.q0 == 0 and b.q1 == n_q:
                out, lse = o_m, lse_m
            else:
                if out.dtype != torch.float32:
                    out = out.float()
                out[:, b.q0:b.q1] = o_m
                lse[:, :, b.q0:b.q1] = lse_m
        if pending is not None:
            kv = pending.wait()
    if out is None:  # no block on this rank (every local query hidden by a window, or no keys):
        # rows that see no key give zeros and LSE -inf, as flash_attn_func's do
        out = torch.zeros(q.shape[:3] + (v.shape[3],), dtype=q.dtype, device=q.device)
        lse = torch.full((q.shape[0], q.shape[2], n_q), float("-inf"), dtype=torch.float32, device=q.device)
    return out.to(q.dtype).contiguous(), lse.contiguous()


def ring_attention_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            out: torch.Tensor, lse: torch.Tensor, comm, softmax_scale: float,
                            causal: bool, sharding: str = "zigzag", softcap: float = 0.0, *,
                            window: Tuple[int, int] = (-1, -1), alibi_slopes: Optional[torch.Tensor] = None,
                            dropout_p: float = 0.0, rng_seed: Optional[torch.Tensor] = None,
                            deterministic: bool = False):
    """Ring backward on local shards; returns (dq, dk, dv) in the input dtypes.

    ``out`` and ``lse`` are the local rows of the *merged* forward results.
    dQ and the owner's own dK/dV contribution accumulate in float32 on the
    rank; the other ranks' dK/dV contributions travel with the K/V shard in a
    float32 accumulator and arrive at the owner after the last step.  The
    variants as in :func:`ring_attention_forward`: the same blocks with the
    same dropout counters regenerate the forward's masks.  deterministic:
    each block's backward on the deterministic kernels (ops.flash_bwd; the
    ring's own sums run in a fixed order)."""
    world_size, rank = comm.world_size, comm.rank
    n_q, n_k = q.shape[1], k.shape[1]
    var = _variants(causal, window, alibi_slopes, dropout_p, rng_seed)
    steps = _steps(rank, world_size, n_q, n_k, causal, sharding, var, True)
    dout = dout.contiguous()
    f32: Dict[str, Any] = dict(dtype=torch.float32, device=q.device)
    dq = torch.zeros(q.shape, **f32)
    dk_own = torch.zeros(k.shape, **f32)
    dv_own = torch.zeros(v.shape, **f32)
    kv = [k, v]
    acc: Any = None  # [dk, dv] of the shard in hand: contributions of the ranks it has visited
    last = len(steps) - 1
    for s, blocks in enumerate(steps):
        # Step s sends K/V for step s+1 (while s+1 < P) and the accumulator
        # finished at step s-1 (from step 2 on, and at the extra step P).
        send = []
        if s + 1 < world_size:
            send += kv
        if s >= 2:
            send += acc
        pending = comm.exchange(send) if send else None
        own = s == 0 or s == last  # the diagonal block: K/V shard of this rank
        k_s, v_s = (k, v) if own else kv
        contrib = []
        for b in blocks:
            args = (_rows(dout, b.q0, b.q1), _rows(q, b.q0, b.q1), _rows(k_s, b.k0, b.k1),
                    _rows(v_s, b.k0, b.k1), _rows(out, b.q0, b.q1), _lse_rows(lse, b.q0, b.q1), softmax_scale)
            if b.shift is None:
                dq_b, dk_b, dv_b = ops.flash_bwd(*args, b.causal, softcap=softcap, deterministic=deterministic)
            else:
                assert var is not None
                dq_b, dk_b, dv_b = ops.flash_bwd(*args, False, var.window, softcap, deterministic=deterministic,
                                                 **var.block_kwargs(b, q.shape[0], q.shape[2]))
            dq[:, b.q0:b.q1] += dq_b
            if own:
                dk_own[:, b.k0:b.k1] += dk_b
                dv_own[:, b.k0:b.k1] += dv_b
            else:
                contrib.append((b, dk_b, dv_b))
        received = pending.wait() if pending is not None else []
        if s + 1 < world_size:
            kv, received = received[:2], received[2:]
        if 1 <= s < world_size:
            # The accumulator of the shard in hand: from the previous rank, or new at step 1.
            acc = received if s >= 2 else [torch.zeros(k.shape, **f32), torch.zeros(v.shape, **f32)]
            for b, dk_b, dv_b in contrib:
                acc[0][:, b.k0:b.k1] += dk_b
                acc[1][:, b.k0:b.k1] += dv_b
        elif s == last and world_size > 1:
            dk_own += received[0]
            dv_own += received[1]
    return dq.to(q.dtype), dk_own.to(k.dtype), dv_own.to(v.dtype)


# ---------------------------------------------------------------------------
# Custom ops (opaque to torch.compile) and autograd
# ---------------------------------------------------------------------------

def _resolve_group(group_name: Any):  # torch's own annotation of the name varies by version
    return dist.distributed_c10d._resolve_process_group(group_name)


@torch.library.custom_op("flashattn_triton::ring_attn_fwd", mutates_args=())
def _ring_attn_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group_name: str,
                   softmax_scale: float, causal: bool, sharding: str,
                   softcap: float = 0.0, window_left: int = -1, window_right: int = -1,
                   alibi_slopes: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                   rng_seed: Optional[torch.Tensor] = None, deterministic: bool = False,
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
    # (deterministic concerns the backward: kept in the inputs for it)
    comm = RingComm(_resolve_group(group_name))
    return ring_attention_forward(q, k, v, comm, softmax_scale, causal, sharding, softcap,
                                  window=(window_left, window_right), alibi_slopes=alibi_slopes,
                                  dropout_p=dropout_p, rng_seed=rng_seed)


@_ring_attn_fwd.register_fake
def _(q, k, v, group_name, softmax_scale, causal, sharding, softcap=0.0, window_left=-1, window_right=-1,
      alibi_slopes=None, dropout_p=0.0, rng_seed=None, deterministic=False):
    b, n, h, _ = q.shape
    return q.new_empty((b, n, h, v.shape[3])), q.new_empty((b, h, n), dtype=torch.float32)


@torch.library.custom_op("flashattn_triton::ring_attn_bwd", mutates_args=())
def _ring_attn_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   out: torch.Tensor, lse: torch.Tensor, group_name: str, softmax_scale: float,
                   causal: bool, sharding: str,
                   softcap: float = 0.0, window_left: int = -1, window_right: int = -1,
                   alibi_slopes: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                   rng_seed: Optional[torch.Tensor] = None, deterministic: bool = False,
                   ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    comm = RingComm(_resolve_group(group_name))
    return ring_attention_backward(dout, q, k, v, out, lse, comm, softmax_scale, causal, sharding, softcap,
                                   window=(window_left, window_right), alibi_slopes=alibi_slopes,
                                   dropout_p=dropout_p, rng_seed=rng_seed, deterministic=deterministic)


@_ring_attn_bwd.register_fake
def _(dout, q, k, v, out, lse, group_name, softmax_scale, causal, sharding, softcap=0.0, window_left=-1,
      window_right=-1, alibi_slopes=None, dropout_p=0.0, rng_seed=None, deterministic=False):
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))


def _setup_context(ctx, inputs, output):
    q, k, v = inputs[:3]
    out, lse = output
    ops.save_with_options(ctx, (q, k, v, out, lse), inputs[3:])
    # group name, scale, causal, sharding, then the variants (alibi_slopes and
    # rng_seed are inputs the backward reads, never differentiated)
    ctx.args = tuple(inputs[3:])
    # The ring backward has no LSE-gradient term: keep the LSE out of autograd
    # rather than drop a gradient silently.
    ctx.mark_non_differentiable(lse)


def _backward(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors[:5]
    if dout is None:
        dout = torch.zeros_like(out)
    dq, dk, dv = _ring_attn_bwd(dout, q, k, v, out, lse, *ctx.args)
    return ops.no_double_backward((dq, dk, dv), (q, k, v)) + (None,) * len(ctx.args)


_ring_attn_fwd.register_autograd(_backward, setup_context=_setup_context)


# ---------------------------------------------------------------------------
# Public function
# ---------------------------------------------------------------------------

def _check_inputs(q, k, v, causal, sharding: str) -> None:
    check_qkv(("q", "k", "v"), (q, k, v), "(batch, seqlen_local, nheads, headdim)", 4, 2)
    check_flag(causal, "causal")
    check_sharding(sharding)
    if causal and q.shape[1] != k.shape[1]:
        raise ValueError(f"causal ring attention needs q and k shards of one length, got "
                         f"q.shape[1]={q.shape[1]} and k.shape[1]={k.shape[1]}")
    if causal and sharding == "zigzag" and q.shape[1] % 2:
        raise ValueError(f"a zigzag shard holds two equal chunks, so its length must be even; got "
                         f"q.shape[1]={q.shape[1]}")


def _ring_group(group, caller: str):
    """``group``, or the default group; this process must belong to it."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(f"{caller} needs torch.distributed: call "
                           "torch.distributed.init_process_group first")
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    if dist.get_rank(group) < 0:
        raise ValueError(f"this process (global rank {dist.get_rank()}) is not a member of group")
    return group


def ring_flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    group: Optional["dist.ProcessGroup"] = None,
    causal: bool = False,
    softmax_scale: Optional[float] = None,
    window_size: Tuple[int, int] = (-1, -1),
    *,
    sharding: str = "zigzag",
    dropout_p: float = 0.0,
    softcap: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    deterministic: bool = False,
) -> torch.Tensor:
    """Exact attention over a sequence sharded across the ranks of ``group``
    (context parallelism), differentiable; flash-attn layout.

    Every rank of ``group`` must call it at the same time with shards of the
    same shapes.  The result on each rank is its rows of
    ``flash_attn_func(Q, K, V, dropout_p, causal=causal, window_size=window_size,
    softcap=softcap, alibi_slopes=alibi_slopes)`` on the full sequence (with
    dropout: the same distribution, not the same mask).

    Arguments:
        q: (batch_size, seqlen / P, nheads, headdim), this rank's queries.
        k: (batch_size, seqlen_k / P, nheads_k, headdim), this rank's keys.
        v: (batch_size, seqlen_k / P, nheads_k, headdim_v), this rank's values.
            float16, bfloat16 or float32, one dtype and one device (CUDA with
            NCCL; CPU with gloo); last dimension with stride 1; head dims 1..512.
            GQA: nheads a multiple of nheads_k, as in flash_attn_func.
        group: the context-parallel process group (P ranks); default: the
            default (world) group.
        causal: causal mask over the *global* positions: a query attends the
            keys at or before its own position.  Needs seqlen_k == seqlen.
        softmax_scale: default 1/sqrt(headdim).
        softcap: float >= 0; > 0 maps each score s (after the scale) to
            softcap * tanh(s / softcap) before the mask and softmax, as in
            flash_attn_func; 0 (default) = off.
        window_size: (left, right) over global positions, -1 = unbounded:
            the query at global position i sees the keys at positions
            i + (Nk - N) - left .. i + (Nk - N) + right (bottom-right
            aligned as flash_attn_func; Nk == N for self-attention);
            causal sets right = 0.  Any size (inside a chunk or across
            shards); under zigzag the shard lengths must then be even.
        dropout_p: float in [0, 1), as in flash_attn_func.  Each rank draws
            one Philox seed per call from its torch generator (so
            torch.manual_seed makes the call reproducible); every (query
            chunk, key chunk) block pair reads a disjoint Philox counter
            range of that seed (module doc), so the masks of block pairs are
            independent, and the backward regenerates the forward's masks.
            ``ring_dropout_keep_mask`` rebuilds the full-sequence mask.
        alibi_slopes: None, or float32 (nheads,) / (batch_size, nheads) on
            q's device, the same on every rank: adds -slope * |i' - j'| for
            global positions (i' shifted by Nk - N as for the window).
        deterministic: False (default) lets each block's backward add dQ with
            atomics (the Hopper backward on sm_90); True runs the blocks on
            the deterministic kernels, so the whole ring backward is
            bit-identical run to run (its own sums run in a fixed order).
        sharding: how the sequence was split (matters when causal, or with
            window_size or alibi_slopes):
            "zigzag" (default): the sequence is cut into 2P chunks and rank r
                holds chunks r and 2P-1-r (use ``zigzag_shard``); every rank
                does the same work.
            "contiguous": rank r holds tokens [r N/P, (r+1) N/P); correct but
                unbalanced (rank P-1 works P times as much as rank 0).

    Returns:
        out: (batch_size, seqlen / P, nheads, headdim_v) in the dtype of q, this
            rank's rows of the output, sharded like q.
    """
    _check_inputs(q, k, v, causal, sharding)
    check_flag(deterministic, "deterministic")
    window = check_window(window_size, causal)
    dropout_p = check_dropout(dropout_p)
    softcap = check_softcap(softcap)
    alibi_slopes = check_alibi(alibi_slopes, q, q.shape[0], q.shape[2])
    positional = not (window == (-1, -1) or (causal and window[0] == -1)) or alibi_slopes is not None
    if positional and sharding == "zigzag" and (q.shape[1] % 2 or k.shape[1] % 2):
        raise ValueError(f"a zigzag shard holds two equal chunks, so with window_size={window_size!r} or "
                         f"alibi_slopes its length must be even; got q.shape[1]={q.shape[1]} and "
                         f"k.shape[1]={k.shape[1]}")
    scale = check_scale(softmax_scale, "softmax_scale", q.shape[3])
    group = _ring_group(group, "ring_flash_attn_func")
    seed = draw_dropout_seed(q.device) if dropout_p > 0 else None
    out, _ = _ring_attn_fwd(q, k, v, group.group_name, scale, causal, sharding, softcap, window[0], window[1],
                            alibi_slopes, dropout_p, seed, deterministic)
    return out


# ---------------------------------------------------------------------------
# Packed batches (varlen)
# ---------------------------------------------------------------------------

class VarlenBlock(NamedTuple):
    """In every document: the query rows ``q_rows`` of the local shard against
    the key rows ``k_rows`` of the K/V shard in hand, each "all", "first" (the
    first half of the document's local rows) or "second"; ``causal`` aligned
    bottom-right within the document.  Blocks of
    :func:`ring_varlen_positional_schedule` carry ``shift_mul`` = A - B
    instead (``causal`` False), for query chunk A and key chunk B: in a
    document whose chunks hold c tokens, local query i and key j are global
    positions A c + i and B c + j, so the block's diagonal is
    ``shift_mul * c``; and ``pair``, the (A, B) index of its dropout counters."""
    q_rows: str
    k_rows: str
    causal: bool
    shift_mul: Optional[int] = None
    pair: int = -1


_UNITS = {(0, 2): "all", (0, 1): "first", (1, 2): "second"}


def ring_varlen_schedule(rank: int, world_size: int, causal: bool, sharding: str = "zigzag",
                         backward: bool = False) -> List[List[VarlenBlock]]:
    """Blocks that ``rank`` computes at each step of the varlen ring.

    The dense :func:`ring_schedule` on a shard of two units (the two halves of
    every document).  The backward splits the diagonal block only under
    zigzag + causal (``world_size + 1`` steps); otherwise, for ``world_size >
    1``, it has a last step without blocks, in which the finished dK/dV return
    to their owners."""
    split = backward and causal and sharding == "zigzag"
    steps = ring_schedule(rank, world_size, 2, 2, causal, sharding, backward=split)
    blocks = [[VarlenBlock(_UNITS[(b.q0, b.q1)], _UNITS[(b.k0, b.k1)], b.causal) for b in step]
              for step in steps]
    if backward and not split and world_size > 1:
        blocks.append([])
    return blocks


def _varlen_units(rank: int, world_size: int, sharding: str, chunked: bool) -> List[Tuple[str, int]]:
    """(row set, global chunk index) of the chunks of every document on ``rank``."""
    if not chunked or sharding == "contiguous":
        return [("all", rank)]
    return [("first", rank), ("second", 2 * world_size - 1 - rank)]


def ring_varlen_positional_schedule(rank: int, world_size: int, window: Tuple[int, int],
                                   sharding: str = "zigzag", chunked: bool = True,
                                   backward: bool = False) -> List[List[VarlenBlock]]:
    """Blocks of global positions for packed documents: the varlen ring's
    schedule of windows, ALiBi and dropout.

    Every block is one chunk of every document's local queries against one
    chunk of its keys in the K/V shard in hand (zigzag: the "first" and
    "second" halves; contiguous, or without ``chunked``: "all" rows), with
    ``shift_mul`` = A - B (see :class:`VarlenBlock`) and ``pair = A U + B``
    (U chunks per document).  ``window`` = (left, right), causal folded in as
    right = 0.  The chunk lengths are per document and not known on the
    host, so a block is left out only when it hides every pair whatever the
    chunk length: chunks one token long are the most visible (chunk pair
    d = A - B > 0 has its nearest pair (d - 1) c + 1 positions apart), so a
    block is kept iff chunks of one token see each other; within a kept
    block the kernels skip the documents whose chunks see nothing.  The backward (``world_size > 1``)
    splits step 0 by query chunk as :func:`ring_positional_schedule` does
    under zigzag; otherwise it ends with a step without blocks, in which the
    finished dK/dV return to their owners."""
    check_sharding(sharding)
    chunked = chunked and sharding == "zigzag"
    n_units = 2 * world_size if chunked else world_size
    steps = []
    for s in range(world_size):
        src = (rank - s) % world_size
        blocks = []
        for q_rows, qa in _varlen_units(rank, world_size, sharding, chunked):
            for k_rows, kb in _varlen_units(src, world_size, sharding, chunked):
                if _band_visible(1, 1, qa - kb, window):
                    blocks.append(VarlenBlock(q_rows, k_rows, False, qa - kb, qa * n_units + kb))
        steps.append(blocks)
    if backward and world_size > 1:
        if chunked:
            diag = steps[0]
            steps = ([[b for b in diag if b.q_rows == "first"]] + steps[1:]
                     + [[b for b in diag if b.q_rows == "second"]])
        else:
            steps.append([])
    return steps


def ring_varlen_dropout_keep_mask(seeds: Sequence[torch.Tensor], dropout_p: float, heads: int,
                                  cu_seqlens: torch.Tensor, causal: bool = False,
                                  window_size: Tuple[int, int] = (-1, -1), alibi: bool = False,
                                  sharding: str = "zigzag", max_seqlen: Optional[int] = None) -> List[torch.Tensor]:
    """Per document b, the keep mask (heads, L_b, L_b) over the document's
    global positions, True = kept, of a ``ring_flash_attn_varlen_func`` call
    with dropout on ``P = len(seeds)`` ranks, given each rank's seed (the
    first draw from its torch generator in the call) and the GLOBAL offsets
    ``cu_seqlens``.  Testing aid, O(sum L_b^2) memory.

    Block pair (A, B) runs on the rank that holds query chunk A, as one
    packed call on the chunks' rows (T_A packed query rows, the longest key
    chunk m_B) with the counters shifted by ``pair * heads * T_A * m_B``
    (kernels/score.py's packed layout); ``causal``, ``window_size`` and
    ``alibi`` only pick the chunking, as the call did.  ``max_seqlen``: the
    call's (local) max_seqlen where it passed more than the longest local
    document (the counters' row length m_B follows it); None: that longest."""
    from ..reference import dropout_keep
    from .sharding import local_cu_seqlens, position_ids
    world_size = len(seeds)
    left, right = window_size
    if causal:
        right = 0
    chunked = ((left, right) != (-1, -1) or alibi) and sharding == "zigzag"
    offs = torch.as_tensor(cu_seqlens).tolist()
    lengths = [e - a for a, e in zip(offs[:-1], offs[1:])]
    local = local_cu_seqlens(torch.as_tensor(cu_seqlens, dtype=torch.int32), world_size, sharding).tolist()
    n_units = 2 * world_size if chunked else world_size
    parts = 2 if chunked else 1
    unit_cu = [x // parts for x in local]  # packed offsets of every document's chunk in a block
    total = unit_cu[-1]
    longest = max([e - a for a, e in zip(unit_cu[:-1], unit_cu[1:])], default=0)
    if max_seqlen is not None:  # as _PackedRows.max: the call's bound, halved for chunks
        longest = max_seqlen if parts == 1 else (max_seqlen + 1) // 2
    masks = [torch.zeros(heads, n, n, dtype=torch.bool) for n in lengths]
    for d, n in enumerate(lengths):
        c = n // (world_size * parts)
        if c == 0:
            continue
        pos = [position_ids(n, r, world_size, sharding) for r in range(world_size)]
        span = {"all": slice(0, c), "first": slice(0, c), "second": slice(c, 2 * c)}
        for r in range(world_size):
            for s in range(world_size):
                src = (r - s) % world_size
                for q_rows, qa in _varlen_units(r, world_size, sharding, chunked):
                    for k_rows, kb in _varlen_units(src, world_size, sharding, chunked):
                        pair = qa * n_units + kb
                        m = dropout_keep(seeds[r].cpu(), dropout_p, 1, heads, range(c), 0, c, total, longest,
                                         row0=unit_cu[d], offset=pair * heads * total * longest)
                        gq, gk = pos[r][span[q_rows]], pos[src][span[k_rows]]
                        masks[d][:, gq[:, None], gk[None, :]] = m[0].cpu()
    return masks


class _PackedRows:
    """Row sets of the local packed layout: "all", and with ``halves`` the first
    and second half of every document's local rows, as int64 index tensors
    built on the device (no host sync), with their offsets and max length.

    With ``h = cu_seqlens / 2``, half-row ``t`` of document ``b``
    (``h[b] <= t < h[b+1]``) is local row ``t + h[b]`` in the first half and
    ``t + h[b+1]`` in the second."""

    def __init__(self, cu_seqlens: torch.Tensor, max_seqlen: int, total: int, halves: bool):
        self.idx: Dict[str, Optional[torch.Tensor]] = {"all": None}
        self.cu = {"all": cu_seqlens}
        self.max = {"all": max_seqlen}
        self.total = {"all": total, "first": total // 2, "second": total // 2}  # packed rows of each set
        if halves:
            cu_half = torch.div(cu_seqlens, 2, rounding_mode="floor")
            h = cu_half.long()
            t = torch.arange(total // 2, dtype=torch.int64, device=cu_seqlens.device)
            # Clamped so that a malformed cu_seqlens gives wrong rows, not an out-of-bounds read.
            doc = torch.searchsorted(h[1:], t, right=True).clamp_(max=max(cu_seqlens.shape[0] - 2, 0))
            self.idx["first"] = t + h[doc]
            self.idx["second"] = t + h[doc + 1]
            self.cu["first"] = self.cu["second"] = cu_half.to(torch.int32).contiguous()
            self.max["first"] = self.max["second"] = (max_seqlen + 1) // 2

    def select(self, x: torch.Tensor, rows: str, dim: int = 0) -> torch.Tensor:
        idx = self.idx[rows]
        return x if idx is None else x.index_select(dim, idx)

    def add(self, dst: torch.Tensor, rows: str, src: torch.Tensor) -> None:
        """dst[rows] += src (the rows are distinct, so the sum is deterministic)."""
        idx = self.idx[rows]
        if idx is None:
            dst += src
        else:
            dst.index_add_(0, idx, src.to(dst.dtype))


def _needs_halves(steps: List[List[VarlenBlock]]) -> bool:
    return any(b.q_rows != "all" or b.k_rows != "all" for step in steps for b in step)


def _varlen_steps(rank: int, world_size: int, causal: bool, sharding: str, var: Optional[_Variants],
                  backward: bool) -> List[List[VarlenBlock]]:
    if var is None:
        return ring_varlen_schedule(rank, world_size, causal, sharding, backward)
    chunked = var.window != (-1, -1) or var.alibi_slopes is not None
    return ring_varlen_positional_schedule(rank, world_size, var.window, sharding, chunked, backward)


def _varlen_block_kwargs(b: VarlenBlock, rows: "_PackedRows", heads: int, softcap: float,
                         var: Optional[_Variants]) -> Dict[str, Any]:
    """Keyword arguments of ops.flash_varlen_fwd / _bwd for block b (after its causal flag)."""
    if b.shift_mul is None:
        return dict(softcap=softcap)
    assert var is not None
    # Block pair `pair` owns the dropout counters [pair * C, (pair + 1) * C) with
    # C = Hq * (packed query rows) * (longest key chunk), the span of one packed call.
    return dict(window_size=var.window, softcap=softcap, doc_shift=(b.shift_mul, 0),
                alibi_slopes=var.alibi_slopes, dropout_p=var.dropout_p, rng_seed=var.rng_seed,
                philox_offset=b.pair * heads * rows.total[b.q_rows] * rows.max[b.k_rows])


def ring_varlen_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                                  max_seqlen: int, comm, softmax_scale: float, causal: bool,
                                  sharding: str = "zigzag", softcap: float = 0.0, *,
                                  window: Tuple[int, int] = (-1, -1), alibi_slopes: Optional[torch.Tensor] = None,
                                  dropout_p: float = 0.0, rng_seed: Optional[torch.Tensor] = None):
    """Varlen ring forward on local packed shards; returns (out in q's dtype,
    lse float32 natural log (Hq, total_local)).

    q: (total_local, Hq, d); k, v: (total_local, Hkv, d / dv); cu_seqlens: the
    local offsets (int32 on q's device, the same on every rank, ending at
    total_local); max_seqlen: the longest local document.  ``window`` (each
    document's global positions), ``alibi_slopes`` ((Hq,) / (documents, Hq))
    and ``dropout_p`` with ``rng_seed`` switch to
    :func:`ring_varlen_positional_schedule`."""
    world_size, rank = comm.world_size, comm.rank
    var = _variants(causal, window, alibi_slopes, dropout_p, rng_seed)
    steps = _varlen_steps(rank, world_size, causal, sharding, var, False)
    rows = _PackedRows(cu_seqlens, max_seqlen, q.shape[0], _needs_halves(steps))
    q_sets = {"all": q}  # query row sets, gathered once
    kv = [k, v]
    out: Any = None  # set by the first block
    lse: Any = None
    for s, blocks in enumerate(steps):
        pending = comm.exchange(kv) if s + 1 < world_size else None
        for b in blocks:
            if b.q_rows not in q_sets:
                q_sets[b.q_rows] = rows.select(q, b.q_rows)
            o_b, lse_b = ops.flash_varlen_fwd(
                q_sets[b.q_rows], rows.select(kv[0], b.k_rows), rows.select(kv[1], b.k_rows),
                rows.cu[b.q_rows], rows.cu[b.k_rows], rows.max[b.q_rows], rows.max[b.k_rows],
                softmax_scale, b.causal, **_varlen_block_kwargs(b, rows, q.shape[1], softcap, var))
            if out is None:
                if b.q_rows == "all":
                    out, lse = o_b, lse_b
                    continue
                out, lse = _no_key_rows(q, v)
            idx = rows.idx[b.q_rows]
            if idx is None:
                out, lse = merge_attention_states(out, lse, o_b, lse_b)
                continue
            if out.dtype != torch.float32:
                out = out.float()
            o_m, lse_m = merge_attention_states(out.index_select(0, idx), lse.index_select(1, idx), o_b, lse_b)
            out.index_copy_(0, idx, o_m)
            lse.index_copy_(1, idx, lse_m)
        if pending is not None:
            kv = pending.wait()
    if out is None:  # no block on this rank: zeros and LSE -inf, as in the dense ring
        out, lse = _no_key_rows(q, v)
    return out.to(q.dtype).contiguous(), lse.contiguous()


def _no_key_rows(q: torch.Tensor, v: torch.Tensor):
    """Packed rows that have seen no key yet: float32 zeros (total_q, Hq, dv)
    and LSE -inf (Hq, total_q), what merging a block into them starts from."""
    return (torch.zeros(q.shape[:2] + (v.shape[2],), dtype=torch.float32, device=q.device),
            torch.full((q.shape[1], q.shape[0]), float("-inf"), dtype=torch.float32, device=q.device))


def ring_varlen_attention_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                   out: torch.Tensor, lse: torch.Tensor, cu_seqlens: torch.Tensor,
                                   max_seqlen: int, comm, softmax_scale: float, causal: bool,
                                   sharding: str = "zigzag", softcap: float = 0.0, *,
                                   window: Tuple[int, int] = (-1, -1), alibi_slopes: Optional[torch.Tensor] = None,
                                   dropout_p: float = 0.0, rng_seed: Optional[torch.Tensor] = None,
                                   deterministic: bool = False):
    """Varlen ring backward on local packed shards; returns (dq, dk, dv) in the
    input dtypes.  ``out`` and ``lse`` (Hq, total_local) are the merged
    forward results; accumulation as in :func:`ring_attention_backward`; the
    variants as in :func:`ring_varlen_attention_forward` (the same blocks with
    the same dropout counters regenerate the forward's masks)."""
    world_size, rank = comm.world_size, comm.rank
    var = _variants(causal, window, alibi_slopes, dropout_p, rng_seed)
    steps = _varlen_steps(rank, world_size, causal, sharding, var, True)
    rows = _PackedRows(cu_seqlens, max_seqlen, q.shape[0], _needs_halves(steps))
    q_sets: Dict[str, Tuple[torch.Tensor, ...]] = {"all": (dout.contiguous(), q, out, lse.float())}
    own_sets: Dict[str, Tuple[torch.Tensor, torch.Tensor]] = {"all": (k, v)}
    f32: Dict[str, Any] = dict(dtype=torch.float32, device=q.device)
    dq = torch.zeros(q.shape, **f32)
    dk_own = torch.zeros(k.shape, **f32)
    dv_own = torch.zeros(v.shape, **f32)
    kv = [k, v]
    acc: Any = None  # [dk, dv] of the shard in hand: contributions of the ranks it has visited
    last = len(steps) - 1
    for s, blocks in enumerate(steps):
        send = []
        if s + 1 < world_size:
            send += kv
        if s >= 2:
            send += acc
        pending = comm.exchange(send) if send else None
        own = s == 0 or s == last  # the K/V shard of this rank
        contrib = []
        for b in blocks:
            if b.q_rows not in q_sets:
                d_all, q_all, o_all, l_all = q_sets["all"]
                q_sets[b.q_rows] = (rows.select(d_all, b.q_rows), rows.select(q_all, b.q_rows),
                                    rows.select(o_all, b.q_rows), rows.select(l_all, b.q_rows, dim=1))
            if own:
                if b.k_rows not in own_sets:
                    own_sets[b.k_rows] = (rows.select(k, b.k_rows), rows.select(v, b.k_rows))
                k_b, v_b = own_sets[b.k_rows]
            else:
                k_b, v_b = rows.select(kv[0], b.k_rows), rows.select(kv[1], b.k_rows)
            do_b, q_b, o_b, l_b = q_sets[b.q_rows]
            dq_b, dk_b, dv_b = ops.flash_varlen_bwd(
                do_b, q_b, k_b, v_b, o_b, l_b, rows.cu[b.q_rows], rows.cu[b.k_rows],
                rows.max[b.q_rows], rows.max[b.k_rows], softmax_scale, b.causal, deterministic=deterministic,
                **_varlen_block_kwargs(b, rows, q.shape[1], softcap, var))
            rows.add(dq, b.q_rows, dq_b)
            if own:
                rows.add(dk_own, b.k_rows, dk_b)
                rows.add(dv_own, b.k_rows, dv_b)
            else:
                contrib.append((b, dk_b, dv_b))
        received = pending.wait() if pending is not None else []
        if s + 1 < world_size:
            kv, received = received[:2], received[2:]
        if 1 <= s < world_size:
            acc = received if s >= 2 else [torch.zeros(k.shape, **f32), torch.zeros(v.shape, **f32)]
            for b, dk_b, dv_b in contrib:
                rows.add(acc[0], b.k_rows, dk_b)
                rows.add(acc[1], b.k_rows, dv_b)
        elif s == last and world_size > 1:
            dk_own += received[0]
            dv_own += received[1]
    return dq.to(q.dtype), dk_own.to(k.dtype), dv_own.to(v.dtype)


@torch.library.custom_op("flashattn_triton::ring_attn_varlen_fwd", mutates_args=())
def _ring_attn_varlen_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                          max_seqlen: int, group_name: str, softmax_scale: float, causal: bool,
                          sharding: str, softcap: float = 0.0, window_left: int = -1, window_right: int = -1,
                          alibi_slopes: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                          rng_seed: Optional[torch.Tensor] = None, deterministic: bool = False,
                          ) -> Tuple[torch.Tensor, torch.Tensor]:
    # (deterministic concerns the backward: kept in the inputs for it)
    comm = RingComm(_resolve_group(group_name))
    return ring_varlen_attention_forward(q, k, v, cu_seqlens, max_seqlen, comm, softmax_scale, causal, sharding,
                                         softcap, window=(window_left, window_right), alibi_slopes=alibi_slopes,
                                         dropout_p=dropout_p, rng_seed=rng_seed)


@_ring_attn_varlen_fwd.register_fake
def _(q, k, v, cu_seqlens, max_seqlen, group_name, softmax_scale, causal, sharding, softcap=0.0, window_left=-1,
      window_right=-1, alibi_slopes=None, dropout_p=0.0, rng_seed=None, deterministic=False):
    t, h, _ = q.shape
    return q.new_empty((t, h, v.shape[2])), q.new_empty((h, t), dtype=torch.float32)


@torch.library.custom_op("flashattn_triton::ring_attn_varlen_bwd", mutates_args=())
def _ring_attn_varlen_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          out: torch.Tensor, lse: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int,
                          group_name: str, softmax_scale: float, causal: bool, sharding: str,
                          softcap: float = 0.0, window_left: int = -1, window_right: int = -1,
                          alibi_slopes: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                          rng_seed: Optional[torch.Tensor] = None, deterministic: bool = False,
                          ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    comm = RingComm(_resolve_group(group_name))
    return ring_varlen_attention_backward(dout, q, k, v, out, lse, cu_seqlens, max_seqlen, comm, softmax_scale,
                                          causal, sharding, softcap, window=(window_left, window_right),
                                          alibi_slopes=alibi_slopes, dropout_p=dropout_p, rng_seed=rng_seed,
                                          deterministic=deterministic)


@_ring_attn_varlen_bwd.register_fake
def _(dout, q, k, v, out, lse, cu_seqlens, max_seqlen, group_name, softmax_scale, causal, sharding, softcap=0.0,
      window_left=-1, window_right=-1, alibi_slopes=None, dropout_p=0.0, rng_seed=None, deterministic=False):
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))


def _varlen_setup_context(ctx, inputs, output):
    q, k, v, cu_seqlens = inputs[:4]
    out, lse = output
    ops.save_with_options(ctx, (q, k, v, out, lse, cu_seqlens), inputs[4:])
    # max_seqlen, group name, scale, causal, sharding, then the variants
    # (alibi_slopes and rng_seed are read, never differentiated)
    ctx.args = tuple(inputs[4:])
    ctx.mark_non_differentiable(lse)  # no LSE-gradient term, as in the dense ring


def _varlen_backward(ctx, dout, dlse):
    q, k, v, out, lse, cu_seqlens = ctx.saved_tensors[:6]
    if dout is None:
        dout = torch.zeros_like(out)
    dq, dk, dv = _ring_attn_varlen_bwd(dout, q, k, v, out, lse, cu_seqlens, *ctx.args)
    return ops.no_double_backward((dq, dk, dv), (q, k, v)) + (None,) + (None,) * len(ctx.args)


_ring_attn_varlen_fwd.register_autograd(_varlen_backward, setup_context=_varlen_setup_context)


def _check_varlen_inputs(q, k, v, cu_seqlens, max_seqlen, causal, sharding: str, check_inputs,
                         chunked: bool = False) -> None:
    """chunked: a window or ALiBi, whose blocks are chunks of every document as under causal."""
    check_qkv(("q", "k", "v"), (q, k, v), "(total_local, nheads, headdim)", 3, 1)
    check_flag(causal, "causal")
    check_flag(check_inputs, "check_inputs")
    check_sharding(sharding)
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"q and k share cu_seqlens, so they must have the same number of packed rows; got "
                         f"q.shape[0]={q.shape[0]} and k.shape[0]={k.shape[0]}")
    check_offsets("cu_seqlens", cu_seqlens, q.device)
    if cu_seqlens.shape[0] == 1 and q.shape[0] > 0:
        raise ValueError(f"cu_seqlens holds no document (shape (1,)) but q has {q.shape[0]} rows")
    if isinstance(max_seqlen, bool) or not isinstance(max_seqlen, (int, torch.SymInt)):
        raise TypeError(f"max_seqlen must be an int, got {type(max_seqlen).__name__}")
    if max_seqlen < 1:
        raise ValueError(f"max_seqlen must be positive, got {max_seqlen}")
    halves = (causal or chunked) and sharding == "zigzag"
    if halves and q.shape[0] % 2:
        raise ValueError(f"under zigzag sharding every document's local part holds two equal chunks, so the "
                         f"local packed length must be even; got q.shape[0]={q.shape[0]}")
    if check_inputs:
        offs, lengths = offset_values("cu_seqlens", cu_seqlens)
        if offs[-1] != q.shape[0]:
            raise ValueError(f"cu_seqlens[-1]={offs[-1]} must equal the number of packed rows, "
                             f"q.shape[0]={q.shape[0]}")
        if lengths and max(lengths) > max_seqlen:
            raise ValueError(f"a local document of {max(lengths)} rows exceeds max_seqlen={max_seqlen}")
        odd = [b for b, n in enumerate(lengths) if n % 2]
        if halves and odd:
            raise ValueError(f"document {odd[0]} has {lengths[odd[0]]} local rows, an odd number: under zigzag "
                             "sharding every document's length must be a multiple of 2 * world_size")


def ring_flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    group: Optional["dist.ProcessGroup"] = None,
    causal: bool = False,
    softmax_scale: Optional[float] = None,
    *,
    sharding: str = "zigzag",
    window_size: Tuple[int, int] = (-1, -1),
    dropout_p: float = 0.0,
    softcap: float = 0.0,
    alibi_slopes: Optional[torch.Tensor] = None,
    deterministic: bool = False,
    check_inputs: bool = False,
) -> torch.Tensor:
    """Ring attention over a packed batch of documents, every document sharded
    across the ranks of ``group`` (context parallelism); differentiable.

    Every document is sharded on its own (``shard_varlen``): rank ``r`` holds
    ``L_b / P`` tokens of document ``b``, packed in document order, so the
    local offsets are the same on every rank.  The result on each rank is its
    rows of ``flash_attn_varlen_func(Q, K, V, cu, cu, L_max, L_max,
    causal=causal, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
    dropout_p=dropout_p)`` on the full packed batch (with dropout: the same
    distribution, not the same mask): each document attends only to itself,
    the mask, window and ALiBi over the positions within the document.

    Arguments:
        q: (total_local, nheads, headdim), this rank's packed queries.
        k: (total_local, nheads_k, headdim); v: (total_local, nheads_k, headdim_v).
            dtypes, devices, GQA and head dims as in ``ring_flash_attn_func``.
        cu_seqlens: (batch_size + 1,) int32 on q's device: the LOCAL offsets
            (``local_cu_seqlens(global_cu_seqlens, P)``), identical on every
            rank, from 0 to total_local.
        max_seqlen: int, at least the longest local document (the longest
            document / P).
        group, causal, softmax_scale, softcap: as in ``ring_flash_attn_func``.
        sharding: how every document was split: "zigzag" (default; each
            document's length a multiple of 2P) or "contiguous" (a multiple
            of P); matters when causal, or with window_size or alibi_slopes.
        window_size: (left, right) over each document's GLOBAL positions,
            -1 = unbounded: the query at position i of a document sees its
            keys at positions i - left .. i + right (causal sets right = 0),
            as flash_attn_varlen_func on the full packed batch.  Any size
            (inside a chunk or across shards).
        alibi_slopes: None, or float32 (nheads,) / (batch_size, nheads) on
            q's device (batch_size = number of documents), the same on every
            rank: adds -slope * |i - j| for positions i, j of one document.
        dropout_p: float in [0, 1), as in ``ring_flash_attn_func``: one
            Philox seed per rank and call from its torch generator; every
            (query chunk, key chunk) block pair reads a disjoint counter
            range (module doc), the backward regenerates the masks
            (``ring_varlen_dropout_keep_mask`` rebuilds them).
        deterministic: False (default) lets each block's backward add dQ with
            atomics (the Hopper backward on sm_90); True runs the blocks on
            the deterministic kernels, so the whole ring backward is
            bit-identical run to run (its own sums run in a fixed order).
        check_inputs: also check the values of cu_seqlens (start at 0,
            non-decreasing, end at total_local, lengths <= max_seqlen, every
            local length even under zigzag with causal, a window or ALiBi).  That reads them on the
            host (a device sync); by default only shapes, dtypes and devices
            are checked.

    Returns:
        out: (total_local, nheads, headdim_v) in the dtype of q, packed like q.
    """
    check_flag(deterministic, "deterministic")
    window = check_window(window_size, causal)
    dropout_p = check_dropout(dropout_p)
    softcap = check_softcap(softcap)
    positional = not (window == (-1, -1) or (causal and window[0] == -1)) or alibi_slopes is not None
    _check_varlen_inputs(q, k, v, cu_seqlens, max_seqlen, causal, sharding, check_inputs, positional)
    cu_seqlens = cu_seqlens.contiguous()  # read as CU + b by the kernels
    alibi_slopes = check_alibi(alibi_slopes, q, cu_seqlens.shape[0] - 1, q.shape[1])
    scale = check_scale(softmax_scale, "softmax_scale", q.shape[2])
    group = _ring_group(group, "ring_flash_attn_varlen_func")
    seed = draw_dropout_seed(q.device) if dropout_p > 0 else None
    out, _ = _ring_attn_varlen_fwd(q, k, v, cu_seqlens, max_seqlen, group.group_name, scale, causal, sharding,
                                   softcap, window[0], window[1], alibi_slopes, dropout_p, seed, deterministic)
    return out
