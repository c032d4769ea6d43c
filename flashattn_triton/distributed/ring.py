"""Ring attention: exact attention over a sequence sharded across ranks.

Each of the ``P`` ranks of a process group holds a shard of the queries and of
the keys/values of one sequence.  The K/V shards travel around the ring
(rank ``r`` sends to ``r+1`` and receives from ``r-1``) with
``torch.distributed`` point-to-point ops; while shard ``s+1`` is in flight,
rank ``r`` attends its queries to shard ``s``, the one in hand.  At step ``s``
rank ``r`` holds the K/V shard of rank ``j = (r - s) mod P``.

Forward: every block gives a partial output and its LSE; the partials are
merged exactly in float32 by their LSE (``kernels.combine.merge_attention_states``).
Backward: the same blocks are recomputed with the *final* LSE (``flash_bwd``
takes the LSE of the whole row, so P = exp(s - lse) is already normalised);
dQ accumulates locally in float32, and each K/V shard's dK/dV accumulator
(float32) travels around the ring behind the K/V shard, collecting every
rank's contribution, and ends at the shard's owner.

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
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from .. import ops
from .._validate import check_flag, check_qkv, check_scale
from ..kernels.combine import merge_attention_states
from .sharding import check_sharding

__all__ = ["ring_flash_attn_func", "ring_schedule", "Block", "RingComm",
           "ring_attention_forward", "ring_attention_backward"]

# ---------------------------------------------------------------------------
# Schedule: which block each rank computes at each step
# ---------------------------------------------------------------------------

class Block(NamedTuple):
    """Queries ``[q0, q1)`` of the local shard against keys ``[k0, k1)`` of the
    K/V shard in hand; ``causal`` is the bottom-right-aligned mask of ``flash_fwd``."""
    q0: int
    q1: int
    k0: int
    k1: int
    causal: bool

    def pairs(self) -> int:
        """Number of (query, key) pairs the block attends."""
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


def ring_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, comm,
                           softmax_scale: float, causal: bool, sharding: str = "zigzag"):
    """Ring forward on local shards; returns (out in q's dtype, lse float32 (B, Hq, Nq)).

    q: (B, Nq_local, Hq, d); k, v: (B, Nk_local, Hkv, d), the same shape on
    every rank.  ``comm``: a :class:`RingComm` (or a stand-in with its interface)."""
    world_size, rank = comm.world_size, comm.rank
    n_q, n_k = q.shape[1], k.shape[1]
    steps = ring_schedule(rank, world_size, n_q, n_k, causal, sharding)
    kv = [k, v]
    out: Any = None  # both set at step 0
    lse: Any = None
    for s, blocks in enumerate(steps):
        # Post the transfer of the next shard before computing on this one.
        pending = comm.exchange(kv) if s + 1 < world_size else None
        for b in blocks:
            o_b, lse_b = ops.flash_fwd(_rows(q, b.q0, b.q1), _rows(kv[0], b.k0, b.k1),
                                       _rows(kv[1], b.k0, b.k1), softmax_scale, b.causal)
            if out is None:  # step 0: the diagonal block covers every row
                out, lse = o_b, lse_b
                continue
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
    return out.to(q.dtype).contiguous(), lse.contiguous()


def ring_attention_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            out: torch.Tensor, lse: torch.Tensor, comm, softmax_scale: float,
                            causal: bool, sharding: str = "zigzag"):
    """Ring backward on local shards; returns (dq, dk, dv) in the input dtypes.

    ``out`` and ``lse`` are the local rows of the *merged* forward results.
    dQ and the owner's own dK/dV contribution accumulate in float32 on the
    rank; the other ranks' dK/dV contributions travel with the K/V shard in a
    float32 accumulator and arrive at the owner after the last step."""
    world_size, rank = comm.world_size, comm.rank
    n_q, n_k = q.shape[1], k.shape[1]
    steps = ring_schedule(rank, world_size, n_q, n_k, causal, sharding, backward=True)
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
            dq_b, dk_b, dv_b = ops.flash_bwd(
                _rows(dout, b.q0, b.q1), _rows(q, b.q0, b.q1), _rows(k_s, b.k0, b.k1),
                _rows(v_s, b.k0, b.k1), _rows(out, b.q0, b.q1), _lse_rows(lse, b.q0, b.q1),
                softmax_scale, b.causal)
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
                   softmax_scale: float, causal: bool, sharding: str) -> Tuple[torch.Tensor, torch.Tensor]:
    comm = RingComm(_resolve_group(group_name))
    return ring_attention_forward(q, k, v, comm, softmax_scale, causal, sharding)


@_ring_attn_fwd.register_fake
def _(q, k, v, group_name, softmax_scale, causal, sharding):
    b, n, h, _ = q.shape
    return q.new_empty((b, n, h, v.shape[3])), q.new_empty((b, h, n), dtype=torch.float32)


@torch.library.custom_op("flashattn_triton::ring_attn_bwd", mutates_args=())
def _ring_attn_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   out: torch.Tensor, lse: torch.Tensor, group_name: str, softmax_scale: float,
                   causal: bool, sharding: str) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    comm = RingComm(_resolve_group(group_name))
    return ring_attention_backward(dout, q, k, v, out, lse, comm, softmax_scale, causal, sharding)


@_ring_attn_bwd.register_fake
def _(dout, q, k, v, out, lse, group_name, softmax_scale, causal, sharding):
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))


def _setup_context(ctx, inputs, output):
    q, k, v, group_name, softmax_scale, causal, sharding = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.args = (group_name, softmax_scale, causal, sharding)
    # The ring backward has no LSE-gradient term: keep the LSE out of autograd
    # rather than drop a gradient silently.
    ctx.mark_non_differentiable(lse)


def _backward(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(out)
    dq, dk, dv = _ring_attn_bwd(dout, q, k, v, out, lse, *ctx.args)
    return dq, dk, dv, None, None, None, None


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


def _not_implemented(name: str, value) -> None:
    raise NotImplementedError(f"{name}={value!r} is not supported by ring attention yet; "
                              "only the default value is accepted")


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
    ``flash_attn_func(Q, K, V, causal=causal)`` on the full sequence.

    Arguments:
        q: (batch_size, seqlen / P, nheads, headdim), this rank's queries.
        k: (batch_size, seqlen_k / P, nheads_k, headdim), this rank's keys.
        v: (batch_size, seqlen_k / P, nheads_k, headdim_v), this rank's values.
            float16, bfloat16 or float32, one dtype and one device (CUDA with
            NCCL; CPU with gloo); last dimension with stride 1; head dims 1..256.
            GQA: nheads a multiple of nheads_k, as in flash_attn_func.
        group: the context-parallel process group (P ranks); default: the
            default (world) group.
        causal: causal mask over the *global* positions: a query attends the
            keys at or before its own position.  Needs seqlen_k == seqlen.
        softmax_scale: default 1/sqrt(headdim).
        window_size, dropout_p, softcap, alibi_slopes: must keep their defaults
            (NotImplementedError otherwise).
        deterministic: accepted; the ring backward is deterministic.
        sharding: how the sequence was split (only matters when causal):
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
    if tuple(window_size) != (-1, -1):
        _not_implemented("window_size", tuple(window_size))
    if dropout_p != 0.0:
        _not_implemented("dropout_p", dropout_p)
    if softcap != 0.0:
        _not_implemented("softcap", softcap)
    if alibi_slopes is not None:
        _not_implemented("alibi_slopes", "<tensor>")
    scale = check_scale(softmax_scale, "softmax_scale", q.shape[3])
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("ring_flash_attn_func needs torch.distributed: call "
                           "torch.distributed.init_process_group first")
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    if dist.get_rank(group) < 0:
        raise ValueError(f"this process (global rank {dist.get_rank()}) is not a member of group")
    out, _ = _ring_attn_fwd(q, k, v, group.group_name, scale, causal, sharding)
    return out
