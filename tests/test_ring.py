"""Ring attention (flashattn_triton.distributed) against single-device attention.

* The schedule: for every rank count and sharding, the blocks of all ranks and
  steps cover each attended (query, key) pair of the global mask exactly once,
  and under zigzag every step costs every rank the same.
* The sharding helpers: round trips and position ids.
* Exactness on CPU with the gloo backend: worlds of 2 and 4 processes
  (spawned once per world, in bounded time) run every case; each rank saves
  its shards of out, dq, dk, dv; the test reassembles the full sequence and
  compares with float64 attention on the gathered inputs, at the tolerance of
  test_attention.py: 2x (output) / 3x (gradients) the error of plain PyTorch in
  the input dtype.  The workers use the blockwise CPU path (TRITON_INTERPRET
  unset); one small world runs the Triton kernels in the interpreter.
* The varlen ring (packed documents, each sharded on its own) in the same
  worlds, against float64 attention on the gathered packed batch; its
  schedule, sharding helpers and argument checks.

The same comparison on 2 GPUs with NCCL:
``torchrun --nproc_per_node=2 -m flashattn_triton.distributed.check``.
"""

from __future__ import annotations

import datetime
import os
import tempfile
import time
import traceback
from pathlib import Path
from typing import NamedTuple, Optional

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from flashattn_triton.distributed import (gather_sequence, gather_varlen, local_cu_seqlens, position_ids,
                                          ring_flash_attn_func, ring_flash_attn_varlen_func, ring_schedule,
                                          ring_varlen_schedule, shard_sequence, shard_varlen, unshard_sequence,
                                          unshard_varlen, varlen_position_ids, zigzag_position_ids, zigzag_shard,
                                          zigzag_unshard)
from flashattn_triton._params import draw_dropout_seed
from flashattn_triton import ops
from flashattn_triton.distributed.ring import (ring_dropout_keep_mask, ring_positional_schedule,
                                               ring_varlen_dropout_keep_mask, ring_varlen_positional_schedule)
from flashattn_triton.reference import (attention_ref, dropout_scale, dropout_threshold, flash_attention_ref,
                                        varlen_dropout_keep_mask)
from _utils import assert_close, random_cu_seqlens, varlen_attention_ref

WORLD_TIMEOUT_S = 300  # per spawned world, start to finish (2 slow cores, shared)


# ---------------------------------------------------------------------------
# The schedule (no processes needed)
# ---------------------------------------------------------------------------

def _coverage(world_size, n_local, causal, sharding, backward):
    """How many times each global (query, key) pair is attended by the schedule."""
    n = n_local * world_size
    pos = [position_ids(n, r, world_size, sharding) for r in range(world_size)]
    cover = torch.zeros(n, n, dtype=torch.int64)
    for r in range(world_size):
        for s, blocks in enumerate(ring_schedule(r, world_size, n_local, n_local, causal, sharding, backward)):
            src = (r - s) % world_size  # the backward's extra last step is the rank's own shard again
            for b in blocks:
                nq, nk = b.q1 - b.q0, b.k1 - b.k0
                seen = torch.ones(nq, nk, dtype=torch.int64)
                if b.causal:
                    seen = torch.tril(seen, diagonal=nk - nq)
                gq, gk = pos[r][b.q0:b.q1], pos[src][b.k0:b.k1]
                cover[gq[:, None], gk[None, :]] += seen
    return cover


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("sharding", ["zigzag", "contiguous"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_schedule_attends_each_pair_once(world_size, causal, sharding, backward):
    n_local = 6
    cover = _coverage(world_size, n_local, causal, sharding, backward)
    n = cover.shape[0]
    want = torch.ones(n, n, dtype=torch.int64)
    if causal:
        want = torch.tril(want)
    bad = (cover != want).nonzero()
    assert len(bad) == 0, (f"{len(bad)} (query, key) pairs attended the wrong number of times, first "
                           f"{tuple(bad[0].tolist())}: {cover[tuple(bad[0])].item()} times, want "
                           f"{want[tuple(bad[0])].item()}")


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("world_size", [2, 3, 4, 8])
def test_zigzag_steps_are_balanced(world_size, backward):
    """Under zigzag + causal, at every step every rank attends the same number of pairs."""
    c = 5
    per_step = [[sum(b.pairs() for b in step)
                 for step in ring_schedule(r, world_size, 2 * c, 2 * c, True, "zigzag", backward)]
                for r in range(world_size)]
    for s, work in enumerate(zip(*per_step)):
        assert len(set(work)) == 1, f"step {s}: pairs per rank {work} differ"
    assert all(w == 2 * c * c for w in per_step[0][1:world_size]), per_step[0]


def test_contiguous_causal_is_unbalanced():
    """The reason for zigzag: with contiguous shards the last rank does P times the work of the first."""
    n, world_size = 8, 4
    total = [sum(b.pairs() for step in ring_schedule(r, world_size, n, n, True, "contiguous") for b in step)
             for r in range(world_size)]
    diag = n * (n + 1) // 2
    assert total == [diag + r * n * n for r in range(world_size)]


def test_schedule_rejects_bad_lengths():
    with pytest.raises(ValueError, match="odd local length 5"):
        ring_schedule(0, 2, 5, 5, True, "zigzag")
    with pytest.raises(ValueError, match="equal local query and key lengths"):
        ring_schedule(0, 2, 4, 6, True, "contiguous")
    with pytest.raises(ValueError, match="sharding must be one of"):
        ring_schedule(0, 2, 4, 4, True, "striped")


def _band(n_q, n_k, window, causal):
    """Global visibility under flash-attn's bottom-right alignment (shift n_k - n_q)."""
    left, right = window
    if causal:
        right = 0
    i, j = torch.arange(n_q)[:, None] + (n_k - n_q), torch.arange(n_k)[None, :]
    keep = torch.ones(n_q, n_k, dtype=torch.bool)
    if right >= 0:
        keep &= j <= i + right
    if left >= 0:
        keep &= j >= i - left
    return keep


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("sharding", ["zigzag", "contiguous"])
@pytest.mark.parametrize("window,causal", [((-1, -1), True), ((2, 0), True), ((3, 5), False), ((9, -1), False),
                                           ((-1, 4), False), ((0, 0), False)])
@pytest.mark.parametrize("world_size,n_q,n_k", [(1, 6, 6), (2, 6, 6), (3, 4, 4), (4, 6, 6), (2, 4, 8)])
def test_positional_schedule_covers_band_once(world_size, n_q, n_k, window, causal, sharding, backward):
    """The blocks' shifts are the global diagonal: each visible global pair is
    attended once, no invisible pair is, no block is empty under its mask,
    and every block pair has its own dropout counters."""
    if causal and n_q != n_k:
        pytest.skip("causal needs equal lengths")
    win = (window[0], 0) if causal else window
    nq, nk = n_q * world_size, n_k * world_size
    cover = torch.zeros(nq, nk, dtype=torch.int64)
    pairs = {}
    for r in range(world_size):
        pos_q = position_ids(nq, r, world_size, sharding)
        steps = ring_positional_schedule(r, world_size, n_q, n_k, win, sharding, True, backward)
        assert len(steps) == world_size + (backward and world_size > 1)
        for s, blocks in enumerate(steps):
            pos_k = position_ids(nk, (r - s) % world_size, world_size, sharding)
            for b in blocks:
                i = torch.arange(b.q1 - b.q0)[:, None] + b.shift
                j = torch.arange(b.k1 - b.k0)[None, :]
                seen = torch.ones(i.shape[0], j.shape[1], dtype=torch.bool)
                if win[1] >= 0:
                    seen &= j <= i + win[1]
                if win[0] >= 0:
                    seen &= j >= i - win[0]
                assert seen.any(), f"rank {r} step {s}: block {b} attends no pair"
                gq, gk = pos_q[b.q0:b.q1], pos_k[b.k0:b.k1]
                cover[gq[:, None], gk[None, :]] += seen.long()
                assert pairs.setdefault(b.pair, (r, s, b.q0, b.k0)) == (r, s, b.q0, b.k0) or backward
    want = _band(nq, nk, win, False).long()
    bad = (cover != want).nonzero()
    assert len(bad) == 0, f"pair {tuple(bad[0].tolist())} attended {cover[tuple(bad[0])].item()} times"


def test_ring_dropout_mask_statistics():
    """The ring's dropout masks (as rebuilt from the seeds, which the exactness
    tests show the ring uses): keep rate 1 - p' with p' = t / 2^16, unbiased
    after the 1 / (1 - p') scale, and no correlation between block pairs, nor
    between two ranks' seeds."""
    p, batch, heads, n, world_size = 0.3, 2, 4, 128, 4
    seeds = [torch.tensor([11 + r], dtype=torch.int64) for r in range(world_size)]
    keep = ring_dropout_keep_mask(seeds, p, batch, heads, n, n, causal=True).double()
    rate = 1 - dropout_threshold(p) / 65536
    sigma = (rate * (1 - rate) / keep.numel()) ** 0.5
    assert abs(keep.mean().item() - rate) < 5 * sigma, (keep.mean().item(), rate)
    scaled = (keep * dropout_scale(p)).mean().item()
    assert abs(scaled - 1) < 5 * sigma * dropout_scale(p), scaled
    c = n // (2 * world_size)  # zigzag chunk
    blocks = [keep[:, :, a * c:(a + 1) * c, b * c:(b + 1) * c].flatten() for a in range(3) for b in range(3)]
    limit = 5 / blocks[0].numel() ** 0.5
    for x in range(len(blocks)):
        for y in range(x):
            corr = torch.corrcoef(torch.stack([blocks[x], blocks[y]]))[0, 1].item()
            assert abs(corr) < limit, f"chunk pairs {x} and {y}: correlation {corr:.3f}"
    same = ring_dropout_keep_mask(seeds, p, batch, heads, n, n, causal=True)
    assert torch.equal(same.double(), keep)
    other = ring_dropout_keep_mask([torch.tensor([99])] + seeds[1:], p, batch, heads, n, n, causal=True)
    rows0 = position_ids(n, 0, world_size)  # rank 0's queries take rank 0's seed
    assert not torch.equal(other[:, :, rows0], same[:, :, rows0])
    rows1 = position_ids(n, 1, world_size)
    assert torch.equal(other[:, :, rows1], same[:, :, rows1])


_ROWS = {"all": lambda n: (0, n), "first": lambda n: (0, n // 2), "second": lambda n: (n // 2, n)}


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("sharding", ["zigzag", "contiguous"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_varlen_schedule_attends_each_pair_once(world_size, causal, sharding, backward):
    """Within one document (local length n_local per rank), the varlen blocks'
    row sets cover each attended pair exactly once."""
    n_local = 6
    n = n_local * world_size
    pos = [position_ids(n, r, world_size, sharding) for r in range(world_size)]
    cover = torch.zeros(n, n, dtype=torch.int64)
    for r in range(world_size):
        steps = ring_varlen_schedule(r, world_size, causal, sharding, backward)
        assert len(steps) == world_size + (backward and world_size > 1)
        for s, blocks in enumerate(steps):
            src = (r - s) % world_size
            for b in blocks:
                (q0, q1), (k0, k1) = _ROWS[b.q_rows](n_local), _ROWS[b.k_rows](n_local)
                seen = torch.ones(q1 - q0, k1 - k0, dtype=torch.int64)
                if b.causal:
                    seen = torch.tril(seen, diagonal=(k1 - k0) - (q1 - q0))
                cover[pos[r][q0:q1][:, None], pos[src][k0:k1][None, :]] += seen
    want = torch.tril(torch.ones(n, n, dtype=torch.int64)) if causal else torch.ones(n, n, dtype=torch.int64)
    assert torch.equal(cover, want)


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("sharding", ["zigzag", "contiguous"])
@pytest.mark.parametrize("window", [(-1, 0), (1, 0), (3, 0), (2, 5), (0, 0), (-1, 2), (-1, -1)])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_varlen_positional_schedule_covers_band_once(world_size, window, sharding, backward):
    """For documents of every chunk length c (1..3 tokens per chunk), the
    blocks with diagonal shift_mul * c attend each visible pair of the
    document's global band once (the schedule cannot know c, so it keeps
    every block that some c needs), and block pairs have their own counters."""
    parts = 2 if sharding == "zigzag" else 1
    for c in (1, 2, 3):
        n_local = parts * c
        n = n_local * world_size
        pos = [position_ids(n, r, world_size, sharding) for r in range(world_size)]
        cover = torch.zeros(n, n, dtype=torch.int64)
        pairs = {}
        for r in range(world_size):
            steps = ring_varlen_positional_schedule(r, world_size, window, sharding, True, backward)
            assert len(steps) == world_size + (backward and world_size > 1)
            for s, blocks in enumerate(steps):
                src = (r - s) % world_size
                for b in blocks:
                    (q0, q1), (k0, k1) = _ROWS[b.q_rows](n_local), _ROWS[b.k_rows](n_local)
                    i = torch.arange(q1 - q0)[:, None] + b.shift_mul * c
                    j = torch.arange(k1 - k0)[None, :]
                    seen = torch.ones(i.shape[0], j.shape[1], dtype=torch.bool)
                    if window[1] >= 0:
                        seen &= j <= i + window[1]
                    if window[0] >= 0:
                        seen &= j >= i - window[0]
                    cover[pos[r][q0:q1][:, None], pos[src][k0:k1][None, :]] += seen.long()
                    assert pairs.setdefault(b.pair, (r, s, b.q_rows, b.k_rows)) == (r, s, b.q_rows, b.k_rows) \
                        or backward
        want = _band(n, n, window, False).long()
        bad = (cover != want).nonzero()
        assert len(bad) == 0, f"c={c}: pair {tuple(bad[0].tolist())} attended {cover[tuple(bad[0])].item()} times"


def test_varlen_positional_schedule_skips_hidden_blocks():
    """Causal: no block of future key chunks; a window of 1: only neighbouring chunks."""
    for r in range(4):
        for step in ring_varlen_positional_schedule(r, 4, (-1, 0), "zigzag"):
            assert all(b.shift_mul >= 0 for b in step)
        for step in ring_varlen_positional_schedule(r, 4, (1, 1), "zigzag"):
            assert all(abs(b.shift_mul) <= 1 for b in step)


# ---------------------------------------------------------------------------
# The packed raw ops with a per-document diagonal and a dropout counter offset
# ---------------------------------------------------------------------------

_CU_Q = (0, 8, 13, 29)  # three sequences, query and key lengths that differ
_CU_K = (0, 8, 20, 30)


def _packed_block(dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(n, h, 16, generator=gen).to(dtype) for n, h in ((29, 2), (30, 1), (30, 1), (29, 2)))
    return (q, k, v, do, torch.tensor(_CU_Q, dtype=torch.int32), torch.tensor(_CU_K, dtype=torch.int32),
            torch.rand(3, 2, generator=gen))


def _raw_varlen(q, k, v, do, cu_q, cu_k, **kw):
    out, lse = ops.flash_varlen_fwd(q, k, v, cu_q, cu_k, 16, 12, 0.3, False, **kw)
    return (out, lse) + ops.flash_varlen_bwd(do, q, k, v, out, lse, cu_q, cu_k, 16, 12, 0.3, False, **kw)


@pytest.mark.parametrize("variants", ["plain", "all"])
def test_varlen_doc_shift_default_is_bit_identical(variants):
    """doc_shift=(0, 0) with philox_offset=0 (the op layer's own functions) gives
    the default call's bits: out, lse, dq, dk, dv."""
    q, k, v, do, cu_q, cu_k, slopes = _packed_block()
    kw = {} if variants == "plain" else dict(window_size=(3, 2), softcap=5.0, alibi_slopes=slopes, dropout_p=0.2,
                                             rng_seed=torch.tensor([7], dtype=torch.int64))
    base = _raw_varlen(q, k, v, do, cu_q, cu_k, **kw)
    again = _raw_varlen(q, k, v, do, cu_q, cu_k, doc_shift=(0, 0), philox_offset=0, **kw)
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), base, again):
        assert torch.equal(a, b), name


def _doc_reference(q, k, v, do, cu_q, cu_k, mul, add, window, slopes=None, masks=None, p=0.0):
    """float64 attention per sequence with shift_b = n_k - n_q + mul * n_k + add."""
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    outs, lses = [], []
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for b in range(len(cq) - 1):
        qs, ks, vs = (t[None, r0:r1].transpose(1, 2) for t, (r0, r1) in
                      ((leaves[0], cq[b:b + 2]), (leaves[1], ck[b:b + 2]), (leaves[2], ck[b:b + 2])))
        n_q, n_k = qs.shape[2], ks.shape[2]
        o, l = attention_ref(qs, ks, vs, 0.3, window=window, shift=n_k - n_q + mul * n_k + add,
                             alibi_slopes=None if slopes is None else slopes[b:b + 1].double(),
                             dropout_mask=None if masks is None else masks[b][None], dropout_p=p)
        outs.append(o[0].transpose(0, 1))
        lses.append(l[0])
    out = torch.cat(outs)
    return (out.detach(), torch.cat(lses, 1).detach()) + torch.autograd.grad(out, leaves, do.double())


@pytest.mark.parametrize("doc_shift,window,dropout", [((1, -3), (-1, 1), False), ((-1, 2), (2, -1), False),
                                                      ((2, 0), (-1, 4), True)])
def test_varlen_doc_shift_matches_reference(doc_shift, window, dropout):
    """A per-sequence diagonal (window and ALiBi) and a dropout counter offset
    against float64 attention with the diagonal and mask they describe."""
    q, k, v, do, cu_q, cu_k, slopes = _packed_block()
    kw: dict = dict(window_size=window, alibi_slopes=slopes, doc_shift=doc_shift)
    masks, p = None, 0.0
    if dropout:
        p, seed, offset = 0.25, torch.tensor([5], dtype=torch.int64), 3 * 2 * 29 * 12
        kw.update(dropout_p=p, rng_seed=seed, philox_offset=offset)
        masks = varlen_dropout_keep_mask(seed, p, 2, cu_q, cu_k, 12, offset=offset)
        plain = varlen_dropout_keep_mask(seed, p, 2, cu_q, cu_k, 12)
        assert not all(torch.equal(a, b) for a, b in zip(masks, plain))
    got = _raw_varlen(q, k, v, do, cu_q, cu_k, **kw)
    ref = _doc_reference(q, k, v, do, cu_q, cu_k, *doc_shift, window, slopes, masks, p)
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), got, ref):
        assert (a.double() - b).abs().max() < 2e-5, name


# ---------------------------------------------------------------------------
# Sharding helpers
# ---------------------------------------------------------------------------

def test_zigzag_position_ids():
    assert zigzag_position_ids(8, 0, 2).tolist() == [0, 1, 6, 7]
    assert zigzag_position_ids(8, 1, 2).tolist() == [2, 3, 4, 5]
    assert zigzag_position_ids(16, 3, 4).tolist() == [6, 7, 8, 9]
    assert position_ids(8, 1, 2, "contiguous").tolist() == [4, 5, 6, 7]


@pytest.mark.parametrize("sharding", ["zigzag", "contiguous"])
@pytest.mark.parametrize("world_size,dim", [(1, 1), (2, 1), (3, 0), (4, 2)])
def test_shard_unshard_round_trip(world_size, dim, sharding):
    shape = [3, 5, 2]
    shape[dim] = 4 * world_size
    x = torch.randn(shape)
    shards = [shard_sequence(x, r, world_size, dim, sharding) for r in range(world_size)]
    assert all(s.is_contiguous() and s.shape[dim] == 4 for s in shards)
    assert torch.equal(unshard_sequence(shards, dim, sharding), x)
    if sharding == "zigzag":
        assert torch.equal(zigzag_unshard([zigzag_shard(x, r, world_size, dim) for r in range(world_size)], dim), x)
    # The shards hold the tokens their position ids name.
    pos = [position_ids(x.shape[dim], r, world_size, sharding) for r in range(world_size)]
    for r in range(world_size):
        assert torch.equal(shards[r], x.index_select(dim, pos[r]))


def test_shard_errors():
    x = torch.randn(1, 10, 2, 4)
    with pytest.raises(ValueError, match="10 tokens .* not divisible into 4 zigzag chunks"):
        zigzag_shard(x, 0, 2)
    with pytest.raises(ValueError, match=r"rank must be an int in \[0, 2\), got 2"):
        zigzag_shard(x, 2, 2)
    with pytest.raises(ValueError, match="odd length 3"):
        zigzag_unshard([torch.randn(1, 3), torch.randn(1, 3)])
    with pytest.raises(ValueError, match="share one shape"):
        zigzag_unshard([torch.randn(1, 4), torch.randn(1, 6)])
    with pytest.raises(ValueError, match="share one shape"):  # (contiguous shards were joined as they came)
        unshard_sequence([torch.randn(1, 4), torch.randn(1, 6)], 1, "contiguous")
    with pytest.raises(ValueError, match=r"rank must be an int in \[0, 2\), got True"):
        shard_sequence(x, True, 2, 1, "contiguous")


@pytest.mark.parametrize("sharding", ["zigzag", "contiguous"])
@pytest.mark.parametrize("world_size,dim", [(1, 0), (2, 0), (3, 1), (4, 0)])
def test_varlen_shard_unshard_round_trip(world_size, dim, sharding):
    lengths = [4 * world_size, 0, 10 * world_size, 2 * world_size]
    cu = random_cu_seqlens(lengths, "cpu")
    shape = [3, 2]
    shape.insert(dim, sum(lengths))
    x = torch.randn(shape)
    shards = [shard_varlen(x, cu, r, world_size, sharding, dim) for r in range(world_size)]
    local = local_cu_seqlens(cu, world_size, sharding)
    assert local.dtype == torch.int32 and local.tolist() == [c // world_size for c in cu.tolist()]
    assert all(sh.is_contiguous() and sh.shape[dim] == local[-1] for sh in shards)
    assert torch.equal(unshard_varlen(shards, cu, sharding, dim), x)
    offs = cu.tolist()
    for r in range(world_size):
        pos = varlen_position_ids(cu, r, world_size, sharding)
        # Each document's part is shard_sequence of that document, with its own positions.
        for b, (a, e) in enumerate(zip(offs[:-1], offs[1:])):
            l0, l1 = local[b].item(), local[b + 1].item()
            assert torch.equal(shards[r].narrow(dim, l0, l1 - l0),
                               shard_sequence(x.narrow(dim, a, e - a), r, world_size, dim, sharding))
            assert torch.equal(pos[l0:l1], position_ids(e - a, r, world_size, sharding))


def test_varlen_position_ids():
    cu = torch.tensor([0, 8, 12], dtype=torch.int32)
    assert varlen_position_ids(cu, 0, 2).tolist() == [0, 1, 6, 7, 0, 3]
    assert varlen_position_ids(cu, 1, 2).tolist() == [2, 3, 4, 5, 1, 2]
    assert varlen_position_ids(cu, 1, 2, "contiguous").tolist() == [4, 5, 6, 7, 2, 3]


def test_varlen_shard_errors():
    cu = torch.tensor([0, 8, 14], dtype=torch.int32)  # document 1 has 6 tokens
    x = torch.randn(14, 2)
    with pytest.raises(ValueError, match="document 1 of cu_seqlens has 6 tokens, not divisible into 4 zigzag"):
        shard_varlen(x, cu, 0, 2)
    with pytest.raises(ValueError, match="document 1 of cu_seqlens has 6 tokens, not divisible into 4 contiguous"):
        local_cu_seqlens(cu, 4, "contiguous")
    assert local_cu_seqlens(cu, 2, "contiguous").tolist() == [0, 4, 7]
    with pytest.raises(ValueError, match=r"x has 12 rows along dim 0, but cu_seqlens\[-1\] = 14"):
        shard_varlen(x[:12], cu, 0, 2, "contiguous")
    with pytest.raises(TypeError, match="cu_seqlens must be int32"):
        shard_varlen(x, cu.long(), 0, 2, "contiguous")
    with pytest.raises(ValueError, match=r"cu_seqlens\[0\] must be 0"):
        varlen_position_ids(cu + 2, 0, 2, "contiguous")
    with pytest.raises(ValueError, match=r"rank must be an int in \[0, 2\), got 2"):
        shard_varlen(x, cu, 2, 2, "contiguous")
    with pytest.raises(ValueError, match="share one shape"):
        unshard_varlen([torch.randn(7, 2), torch.randn(6, 2)], cu, "contiguous")
    with pytest.raises(ValueError, match=r"each shard has 6 rows along dim 0, but cu_seqlens\[-1\] = 14 "
                                         r"\(/ 2 ranks = 7\)"):
        unshard_varlen([torch.randn(6, 2), torch.randn(6, 2)], cu, "contiguous")


# ---------------------------------------------------------------------------
# Argument checks (raise before any communication) and the fake implementation
# ---------------------------------------------------------------------------

def _qkv(n=8, h_q=4, h_kv=2, d=16, dtype=torch.float32):
    return torch.randn(1, n, h_q, d, dtype=dtype), *(torch.randn(1, n, h_kv, d, dtype=dtype) for _ in range(2))


@pytest.mark.parametrize("mutate,kwargs,err,match", [
    (lambda q, k, v: (q.half(), k, v), {}, TypeError, "share one dtype"),
    (lambda q, k, v: (q, k, v[:, :4]), {}, ValueError, "k and v must have the same shape"),
    (lambda q, k, v: (q[:, :, :3], k, v), {}, ValueError, r"multiple of the number of key/value heads"),
    (lambda q, k, v: (q[0], k, v), {}, ValueError, "must be 4-D"),
    (lambda q, k, v: (q.double(), k.double(), v.double()), {}, TypeError, "float16, bfloat16 or float32"),
    (lambda q, k, v: (q[:, :7], k[:, :7], v[:, :7]), dict(causal=True), ValueError, "must be even; got q.shape"),
    (lambda q, k, v: (q[:, :6], k, v), dict(causal=True, sharding="contiguous"), ValueError, "one length"),
    (lambda q, k, v: (q, k, v), dict(sharding="ring"), ValueError, "sharding must be one of"),
    (lambda q, k, v: (q, k, v), dict(window_size=(4, -2)), ValueError, "window_size right must be >= -1"),
    (lambda q, k, v: (q, k, v), dict(window_size=4), TypeError, "window_size must be a pair"),
    (lambda q, k, v: (q, k, v), dict(dropout_p=1.0), ValueError, r"dropout_p must be in \[0, 1\), got 1.0"),
    (lambda q, k, v: (q, k, v), dict(alibi_slopes=torch.ones(3)), ValueError, r"alibi_slopes must have shape \(4,\)"),
    (lambda q, k, v: (q, k, v), dict(alibi_slopes=torch.ones(4).double()), TypeError, "alibi_slopes must be float32"),
    (lambda q, k, v: (q[:, :7], k[:, :7], v[:, :7]), dict(window_size=(2, 2)), ValueError,
     r"length must be even; got q.shape\[1\]=7"),
    (lambda q, k, v: (q, k, v), dict(softcap=-1.0), ValueError, "softcap must be finite and >= 0"),
    (lambda q, k, v: (q, k, v), dict(softcap=float("inf")), ValueError, "softcap must be finite and >= 0"),
    (lambda q, k, v: (q, k, v), dict(softcap="5"), TypeError, "softcap must be a Python float"),
    (lambda q, k, v: (q, k, v), dict(softmax_scale=float("nan")), ValueError, "softmax_scale must be finite"),
    (lambda q, k, v: (q, k, v), dict(causal=1), TypeError, "causal must be a bool"),
])
def test_bad_arguments(mutate, kwargs, err, match):
    q, k, v = mutate(*_qkv())
    with pytest.raises(err, match=match):
        ring_flash_attn_func(q, k, v, **kwargs)


def test_needs_initialized_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    with pytest.raises(RuntimeError, match="init_process_group"):
        ring_flash_attn_func(*_qkv())


def test_fake_implementation_shapes():
    """torch.compile traces the ring as one opaque op with these output shapes."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q, k, _ = _qkv(n=12, h_q=6, h_kv=2, dtype=torch.bfloat16)
        v = torch.empty(1, 12, 2, 8, dtype=torch.bfloat16)  # head dim of v: 8, of q and k: 16
        out, lse = torch.ops.flashattn_triton.ring_attn_fwd(q, k, v, "0", 0.25, True, "zigzag")
        dq, dk, dv = torch.ops.flashattn_triton.ring_attn_bwd(out, q, k, v, out, lse, "0", 0.25, True, "zigzag")
        out_c, _ = torch.ops.flashattn_triton.ring_attn_fwd(q, k, v, "0", 0.25, True, "zigzag", 5.0)
        dq_c, _, _ = torch.ops.flashattn_triton.ring_attn_bwd(out, q, k, v, out, lse, "0", 0.25, True, "zigzag", 5.0)
    assert (out_c.shape, dq_c.shape) == (out.shape, dq.shape)
    assert (out.shape, out.dtype, lse.shape, lse.dtype) == ((1, 12, 6, 8), q.dtype, (1, 6, 12), torch.float32)
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)


class _OneRank:
    """A ring of one rank (no communication): the ring's steps on this process alone."""
    rank, world_size = 0, 1

    def exchange(self, tensors):
        raise AssertionError("a ring of one rank sends nothing")


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "varlen"])
def test_deterministic_reaches_every_block(monkeypatch, deterministic, packed):
    """The ring backward passes deterministic to each block's backward
    (ops.flash_bwd / flash_varlen_bwd: True keeps the Hopper backward's atomic
    dQ out), and its gradients are the raw backward's for a ring of one rank."""
    from flashattn_triton.distributed import ring
    name = "flash_varlen_bwd" if packed else "flash_bwd"
    real, seen = getattr(ops, name), []

    def spy(*args, **kwargs):
        seen.append(kwargs.get("deterministic"))
        return real(*args, **kwargs)
    monkeypatch.setattr(ops, name, spy)
    if packed:
        q, k, v, cu = _packed()
        out, lse = ops.flash_varlen_fwd(q, k, v, cu, cu, 8, 8, 0.25, True)
        do = torch.randn_like(out)
        grads = ring.ring_varlen_attention_backward(do, q, k, v, out, lse, cu, 8, _OneRank(), 0.25, True,
                                                    deterministic=deterministic)
        want = real(do, q, k, v, out, lse, cu, cu, 8, 8, 0.25, True)
    else:
        q, k, v = _qkv()
        out, lse = ops.flash_fwd(q, k, v, 0.25, True)
        do = torch.randn_like(out)
        grads = ring.ring_attention_backward(do, q, k, v, out, lse, _OneRank(), 0.25, True,
                                             deterministic=deterministic)
        want = real(do, q, k, v, out, lse, 0.25, True)
    assert seen and all(d is deterministic for d in seen), seen
    for name_, g, w in zip("qkv", grads, want):
        assert_close("d" + name_, g, w.float(), atol=1e-5)


@pytest.mark.parametrize("packed", [False, True], ids=["dense", "varlen"])
def test_double_backward_raises(packed):
    """As the single-device functions: a gradient taken with create_graph=True
    stays in the graph, and differentiating it again raises NotImplementedError
    (before, it was silently a constant).  A gloo group of one rank, in process."""
    import torch.distributed as dist
    from flashattn_triton.distributed import ring_flash_attn_func, ring_flash_attn_varlen_func
    if dist.is_initialized() or not dist.is_gloo_available():
        pytest.skip("needs a fresh gloo process group")
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        q, k, v = (t.requires_grad_() for t in _qkv())
        if packed:
            cu = torch.tensor([0, 3, 8], dtype=torch.int32)
            out = ring_flash_attn_varlen_func(q[0], k[0], v[0], cu, 5, causal=True)
        else:
            out = ring_flash_attn_func(q, k, v, causal=True)
        g, = torch.autograd.grad(out.sum(), q, create_graph=True)
        assert g.requires_grad, "the gradient left the graph"
        with pytest.raises(NotImplementedError, match="no double backward"):
            (out.sum() + (g ** 2).sum()).backward()
    finally:
        dist.destroy_process_group()


def test_deterministic_must_be_a_bool():
    """ring_flash_attn_func(deterministic=...) and its varlen form check the
    flag like flash_attn_func (before asking for a process group)."""
    from flashattn_triton.distributed import ring_flash_attn_func, ring_flash_attn_varlen_func
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="deterministic must be a bool"):
        ring_flash_attn_func(q, k, v, deterministic="yes")
    q, k, v, cu = _packed()
    with pytest.raises(TypeError, match="deterministic must be a bool"):
        ring_flash_attn_varlen_func(q, k, v, cu, 8, deterministic=1)


def _packed(n=12, h_q=4, h_kv=2, d=16):
    cu = torch.tensor([0, 4, n], dtype=torch.int32)
    return torch.randn(n, h_q, d), torch.randn(n, h_kv, d), torch.randn(n, h_kv, d), cu


@pytest.mark.parametrize("mutate,kwargs,err,match", [
    (lambda q, k, v, cu: (q[:, None], k, v, cu), {}, ValueError, "must be 3-D"),
    (lambda q, k, v, cu: (q[:10], k, v, cu), {}, ValueError, "same number of packed rows"),
    (lambda q, k, v, cu: (q, k, v, cu.long()), {}, TypeError, "cu_seqlens must be int32"),
    (lambda q, k, v, cu: (q, k, v, cu[None]), {}, ValueError, "cu_seqlens must be 1-D"),
    (lambda q, k, v, cu: (q, k, v, cu[:1]), {}, ValueError, "holds no document"),
    (lambda q, k, v, cu: (q, k, v, [0, 4, 12]), {}, TypeError, "cu_seqlens must be a torch.Tensor"),
    (lambda q, k, v, cu: (q, k, v, cu), dict(max_seqlen=8.0), TypeError, "max_seqlen must be an int"),
    (lambda q, k, v, cu: (q, k, v, cu), dict(max_seqlen=0), ValueError, "max_seqlen must be positive"),
    (lambda q, k, v, cu: (q[:11], k[:11], v[:11], cu), dict(causal=True), ValueError,
     r"local packed length must be even; got q.shape\[0\]=11"),
    # A document of 5 local rows (global length 10 on 2 ranks, not a multiple of 2P = 4).
    (lambda q, k, v, cu: (q[:10], k[:10], v[:10], torch.tensor([0, 5, 10], dtype=torch.int32)),
     dict(causal=True, check_inputs=True), ValueError, "document 0 has 5 local rows, an odd number"),
    (lambda q, k, v, cu: (q, k, v, cu), dict(check_inputs=True, max_seqlen=4), ValueError,
     "local document of 8 rows exceeds max_seqlen=4"),
    (lambda q, k, v, cu: (q, k, v, torch.tensor([0, 4, 10], dtype=torch.int32)), dict(check_inputs=True),
     ValueError, r"cu_seqlens\[-1\]=10 must equal"),
    (lambda q, k, v, cu: (q, k, v, cu), dict(sharding="ring"), ValueError, "sharding must be one of"),
    (lambda q, k, v, cu: (q, k, v, cu), dict(window_size=(4, -3)), ValueError, "window_size right must be >= -1"),
    (lambda q, k, v, cu: (q, k, v, cu), dict(dropout_p=1.0), ValueError, r"dropout_p must be in \[0, 1\), got 1.0"),
    (lambda q, k, v, cu: (q, k, v, cu), dict(alibi_slopes=torch.ones(3, 4)), ValueError,
     r"alibi_slopes must have shape \(4,\) or \(2, 4\)"),
    (lambda q, k, v, cu: (q, k, v, cu), dict(alibi_slopes=torch.ones(4).half()), TypeError, "alibi_slopes must be float32"),
    (lambda q, k, v, cu: (q[:11], k[:11], v[:11], cu), dict(window_size=(2, 2)), ValueError,
     r"local packed length must be even; got q.shape\[0\]=11"),
    (lambda q, k, v, cu: (q, k, v, cu), dict(softcap=-0.5), ValueError, "softcap must be finite and >= 0"),
    (lambda q, k, v, cu: (q, k, v, cu), dict(softcap=True), TypeError, "softcap must be a Python float"),
])
def test_varlen_bad_arguments(mutate, kwargs, err, match):
    q, k, v, cu = mutate(*_packed())
    kwargs = dict(kwargs)
    max_seqlen = kwargs.pop("max_seqlen", 8)
    with pytest.raises(err, match=match):
        ring_flash_attn_varlen_func(q, k, v, cu, max_seqlen, **kwargs)


def test_varlen_needs_initialized_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    with pytest.raises(RuntimeError, match="init_process_group"):
        ring_flash_attn_varlen_func(*_packed(), 8, check_inputs=True)


def test_varlen_fake_implementation_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q, k, _, cu = _packed(n=12, h_q=6, h_kv=2)
        q, k = q.bfloat16(), k.bfloat16()
        v = torch.empty(12, 2, 8, dtype=torch.bfloat16)
        out, lse = torch.ops.flashattn_triton.ring_attn_varlen_fwd(q, k, v, cu, 8, "0", 0.25, True, "zigzag")
        dq, dk, dv = torch.ops.flashattn_triton.ring_attn_varlen_bwd(out, q, k, v, out, lse, cu, 8, "0", 0.25,
                                                                    True, "zigzag")
        out_c, _ = torch.ops.flashattn_triton.ring_attn_varlen_fwd(q, k, v, cu, 8, "0", 0.25, True, "zigzag", 30.0)
    assert out_c.shape == out.shape
    assert (out.shape, out.dtype, lse.shape, lse.dtype) == ((12, 6, 8), q.dtype, (6, 12), torch.float32)
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)


# ---------------------------------------------------------------------------
# Exactness over gloo: the cases and the spawned worlds
# ---------------------------------------------------------------------------


def _variant_id_parts(case) -> list:
    """The window / ALiBi / dropout parts of a case's test id."""
    parts = []
    if case.window != (-1, -1):
        parts.append("window{}_{}".format(*case.window))
    if case.alibi:
        parts.append("alibi-" + case.alibi)
    if case.dropout_p:
        parts.append(f"dropout{case.dropout_p}")
    return parts

class Case(NamedTuple):
    batch: int
    seqlen_q: int  # whole sequence, all ranks together
    seqlen_k: int
    h_q: int
    h_kv: int
    d: int
    causal: bool
    dtype: torch.dtype
    sharding: str = "zigzag"
    scale: Optional[float] = None
    subgroups: bool = False  # 4 ranks as two rings {0, 2} and {1, 3}
    compiled: bool = False  # through torch.compile(fullgraph=True, backend="aot_eager")
    d_v: Optional[int] = None  # head dim of v, default d
    softcap: float = 0.0
    amp: float = 1.0  # q is drawn as amp * randn, so that scores reach the softcap's saturation
    window: tuple = (-1, -1)  # window_size over global positions
    alibi: str = ""  # "h": slopes (H,), "bh": slopes (B, H) (see _slopes)
    dropout_p: float = 0.0  # compared with the mask rebuilt from each rank's seed

    @property
    def positional(self) -> bool:
        return self.causal or self.window != (-1, -1) or bool(self.alibi)

    @property
    def id(self) -> str:
        heads = "mha" if self.h_q == self.h_kv else ("mqa" if self.h_kv == 1 else "gqa")
        lens = f"{self.seqlen_q}" if self.seqlen_q == self.seqlen_k else f"{self.seqlen_q}x{self.seqlen_k}"
        parts = [f"B{self.batch}", f"N{lens}", f"{heads}{self.h_q}/{self.h_kv}", f"d{self.d}",
                 "causal" if self.causal else "full", str(self.dtype).replace("torch.", "")]
        if self.d_v is not None:
            parts.insert(4, f"dv{self.d_v}")
        if self.positional:
            parts.append(self.sharding)
        parts += _variant_id_parts(self)
        if self.scale is not None:
            parts.append(f"scale{self.scale}")
        if self.subgroups:
            parts.append("subgroups")
        if self.softcap:
            parts.append(f"softcap{self.softcap}-amp{self.amp}")
        if self.compiled:
            parts.append("compiled")
        return "-".join(parts)


class VarlenCase(NamedTuple):
    lengths: tuple  # global document lengths (multiples of 2P, or of P for contiguous)
    h_q: int
    h_kv: int
    d: int
    causal: bool
    dtype: torch.dtype
    sharding: str = "zigzag"
    compiled: bool = False
    d_v: Optional[int] = None
    subgroups: bool = False  # (the whole world is one ring)
    softcap: float = 0.0
    amp: float = 1.0  # q is drawn as amp * randn
    window: tuple = (-1, -1)  # window_size over each document's global positions
    alibi: str = ""  # "h": slopes (H,), "bh": slopes (documents, H) (see _slopes)
    dropout_p: float = 0.0  # compared with the masks rebuilt from each rank's seed
    extra_max: int = 0  # max_seqlen passed above the longest local document (it moves the dropout counters)

    @property
    def batch(self) -> int:
        return len(self.lengths)

    @property
    def id(self) -> str:
        heads = "mha" if self.h_q == self.h_kv else ("mqa" if self.h_kv == 1 else "gqa")
        parts = ["varlen", "L" + "+".join(map(str, self.lengths)), f"{heads}{self.h_q}/{self.h_kv}", f"d{self.d}",
                 "causal" if self.causal else "full", str(self.dtype).replace("torch.", "")]
        if self.d_v is not None:
            parts.insert(4, f"dv{self.d_v}")
        if self.causal or self.window != (-1, -1) or self.alibi:
            parts.append(self.sharding)
        parts += _variant_id_parts(self)
        if self.softcap:
            parts.append(f"softcap{self.softcap}-amp{self.amp}")
        if self.compiled:
            parts.append("compiled")
        if self.extra_max:
            parts.append(f"max+{self.extra_max}")
        return "-".join(parts)


F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16

COMMON = [
    Case(2, 96, 96, 4, 4, 32, True, F32),
    Case(1, 96, 96, 4, 2, 40, True, BF16),
    Case(2, 64, 64, 3, 1, 16, True, F16),
    Case(1, 80, 80, 4, 2, 32, True, F32, "contiguous"),
    Case(2, 64, 64, 2, 2, 64, True, BF16, "contiguous"),
    Case(1, 96, 96, 4, 2, 32, False, F32, scale=0.3),
    Case(2, 64, 64, 2, 2, 24, False, BF16),
    Case(1, 48, 80, 4, 1, 32, False, BF16),  # cross-attention: query and key shards of different lengths
    Case(1, 64, 64, 4, 2, 32, True, BF16, d_v=16),  # v's head dim differs from q's and k's
]
# Packed batches: documents of different lengths (multiples of 8 = 2P for P = 4).
VARLEN = [
    VarlenCase((24, 8, 40), 4, 2, 32, True, BF16),
    VarlenCase((24, 8, 40), 4, 4, 16, True, F32, "contiguous"),
    VarlenCase((16, 0, 48, 8), 4, 1, 32, False, F16),  # an empty document
    VarlenCase((40, 16), 2, 2, 16, True, F32, d_v=8),
]
# Softcap: q scaled (amp) so that many scores lie beyond the cap, where tanh saturates.
SOFTCAP = [
    Case(1, 64, 64, 4, 2, 32, True, BF16, softcap=5.0, amp=6.0),
    Case(1, 64, 64, 4, 4, 16, True, F32, "contiguous", softcap=30.0, amp=32.0),
    Case(1, 48, 64, 4, 1, 32, False, F16, softcap=5.0, amp=6.0),
    VarlenCase((24, 8, 40), 4, 2, 16, True, BF16, softcap=5.0, amp=6.0),
    VarlenCase((16, 8, 24), 2, 2, 16, True, F32, "contiguous", softcap=30.0, amp=32.0),
    VarlenCase((16, 0, 24), 4, 1, 16, False, F32, softcap=5.0, amp=6.0),
]
# Windows, ALiBi and dropout over global positions.  Shards of 32 (P = 2) or 16
# (P = 4) tokens, zigzag chunks of 16 / 8: windows inside a chunk, across
# chunks and across shards, with and without causal; ALiBi slopes (H,) and
# (B, H); combined with GQA / MQA and softcap.
POSITIONAL = [
    Case(1, 64, 64, 4, 2, 16, True, F32, window=(5, 0)),
    Case(1, 64, 64, 4, 2, 16, True, BF16, "contiguous", window=(40, 0)),
    Case(2, 64, 64, 4, 4, 16, False, F32, window=(3, 9)),
    Case(1, 64, 64, 4, 1, 16, False, F16, "contiguous", window=(20, 20)),
    Case(1, 64, 64, 2, 2, 16, False, F32, window=(-1, 6)),
    Case(2, 64, 64, 4, 2, 16, True, F32, alibi="h"),
    Case(2, 64, 64, 4, 2, 16, False, BF16, alibi="bh"),
    Case(1, 64, 64, 4, 2, 16, True, F32, "contiguous", alibi="bh"),
    Case(2, 64, 64, 4, 1, 16, True, BF16, window=(12, 0), alibi="bh", softcap=5.0, amp=6.0),
    Case(1, 64, 64, 4, 2, 16, False, F32, "contiguous", window=(7, 3), alibi="h", softcap=5.0, amp=6.0),
    # more queries than keys, bottom-right aligned: every query of a rank sees no key,
    # so that rank has no block to compute (zeros, LSE -inf; it raised before)
    Case(1, 64, 32, 2, 1, 16, False, F32, "contiguous", window=(-1, 0)),
    Case(1, 64, 16, 2, 1, 16, False, F32, window=(-1, 0)),
]
# Dropout: the reference uses the ring's own mask (ring_dropout_keep_mask).
DROPOUT = [
    Case(1, 32, 32, 2, 1, 16, True, F32, dropout_p=0.3),
    Case(2, 32, 32, 2, 2, 16, False, F32, dropout_p=0.2),
    Case(1, 32, 32, 4, 2, 16, True, F32, "contiguous", window=(6, 0), alibi="h", dropout_p=0.25),
    Case(1, 32, 32, 4, 2, 16, False, BF16, window=(4, 4), softcap=5.0, amp=6.0, dropout_p=0.1),
]
# Packed documents with windows, ALiBi and dropout over each document's global
# positions: zigzag chunks of 6, 2 and 10 tokens (P = 2) for L = 24, 8, 40, so
# one window hides some documents of a block and not others.
VARLEN_POSITIONAL = [
    VarlenCase((24, 8, 40), 4, 2, 16, True, F32, window=(5, 0)),
    VarlenCase((24, 8, 40), 4, 2, 16, False, BF16, window=(3, 9)),
    VarlenCase((16, 0, 40), 4, 1, 16, False, F32, "contiguous", window=(12, 12)),  # spans shards
    VarlenCase((24, 8, 40), 4, 2, 16, True, F32, alibi="h"),
    VarlenCase((24, 8, 40), 4, 2, 16, False, BF16, "contiguous", alibi="bh"),
    VarlenCase((16, 24), 4, 1, 16, True, BF16, window=(12, 0), alibi="bh", softcap=5.0, amp=6.0),
]
VARLEN_DROPOUT = [
    VarlenCase((16, 8, 24), 2, 1, 16, True, F32, dropout_p=0.3),
    VarlenCase((16, 24), 2, 2, 16, False, F32, dropout_p=0.2),  # no mask: whole shards as blocks
    VarlenCase((16, 8), 4, 2, 16, True, F32, "contiguous", window=(6, 0), alibi="h", dropout_p=0.25),
    # max_seqlen above the longest local document: the helper rebuilds the call's counters
    VarlenCase((8, 16), 2, 1, 16, True, F32, dropout_p=0.3, extra_max=4),
]
WORLDS = {
    # name: (processes, TRITON_INTERPRET, cases)
    "gloo2": (2, False, COMMON + [Case(1, 32, 32, 4, 2, 16, True, F32, compiled=True),
                                  Case(1, 32, 32, 4, 2, 16, True, F32, compiled=True, softcap=5.0, amp=6.0)]
              + VARLEN + SOFTCAP + [
        VarlenCase((12, 20), 4, 2, 16, True, F32, compiled=True),
        VarlenCase((12, 4, 20), 2, 1, 16, True, BF16, "contiguous"),  # odd local lengths
    ] + POSITIONAL + DROPOUT + VARLEN_POSITIONAL + VARLEN_DROPOUT),
    "gloo4": (4, False, COMMON + POSITIONAL[:2] + POSITIONAL[5:6] + POSITIONAL[8:] + DROPOUT[::2] + [
        Case(1, 8, 8, 2, 1, 16, True, F32),  # one token per zigzag chunk
        Case(1, 4, 4, 2, 2, 16, True, BF16, "contiguous"),  # one token per rank
        Case(1, 64, 64, 4, 2, 32, True, BF16, subgroups=True),
    ] + VARLEN + SOFTCAP + [VarlenCase((8, 24, 8), 2, 1, 16, True, F32)]  # one token per zigzag chunk of two documents
        + [VarlenCase((24, 8, 40), 4, 2, 16, True, F32, window=(5, 0)),
           VarlenCase((16, 32), 4, 2, 16, False, BF16, window=(3, 9), alibi="bh"),
           VarlenCase((16, 8, 24), 2, 1, 16, True, F32, "contiguous", alibi="h", dropout_p=0.2)]),  # one token per zigzag chunk of two documents
    # The Triton kernels themselves (interpreted) on strided slices of the shards,
    # and the varlen kernels on the gathered halves.
    "gloo2-interpret": (2, True, [Case(2, 64, 64, 2, 1, 16, True, BF16),
                                  VarlenCase((16, 4, 28), 2, 1, 16, True, BF16),
                                  Case(1, 32, 32, 2, 1, 16, True, BF16, softcap=5.0, amp=6.0),
                                  VarlenCase((16, 8), 2, 1, 16, True, F32, softcap=5.0, amp=6.0),
                                  Case(1, 32, 32, 2, 1, 16, True, F32, window=(6, 0), alibi="bh"),
                                  Case(1, 32, 32, 2, 2, 16, False, F32, window=(5, 3), dropout_p=0.2),
                                  # (the kernels' dropout offsets: test_varlen_doc_shift_matches_reference)
                                  VarlenCase((8, 16), 2, 1, 16, True, F32, "contiguous", window=(6, 0),
                                             alibi="bh")]),
}


def _slopes(case) -> Optional[torch.Tensor]:
    """ALiBi slopes of a case: (H,) or (B, H) float32, the same on every rank."""
    if not case.alibi:
        return None
    s = torch.linspace(0.05, 0.6, case.h_q)
    return s if case.alibi == "h" else s[None] * torch.linspace(1.0, 0.5, case.batch)[:, None]


def _variant_kwargs(case) -> dict:
    """The ring call's softcap / window_size / alibi_slopes / dropout_p of a case."""
    kw = dict(softcap=case.softcap) if case.softcap else {}
    if case.window != (-1, -1):
        kw["window_size"] = case.window
    if case.alibi:
        kw["alibi_slopes"] = _slopes(case)
    if case.dropout_p:
        kw["dropout_p"] = case.dropout_p
    return kw


def _results(case, run, r, device) -> dict:
    """out, dq, dk, dv of run(torch seed) on rank r; with dropout also the
    ring's seed (its first draw from the generator) and whether the same
    torch seed repeats the results bit for bit and another one changes them."""
    seed = 1000 + r  # a different generator state on every rank
    res = dict(zip(("out", "dq", "dk", "dv"), run(seed)))
    if case.dropout_p:
        torch.manual_seed(seed)
        res["seed"] = draw_dropout_seed(device)  # the ring's first draw
        again, other = run(seed), run(seed + 100)
        res["repeat_equal"] = all(torch.equal(a, res[n]) for a, n in zip(again, ("out", "dq", "dk", "dv")))
        res["other_seed_differs"] = [not torch.equal(a, res[n]) for a, n in zip(other, ("out", "dq", "dk", "dv"))]
    return res


def _dense_on_rank(case, full, group, r, size):
    q, k, v, do = (shard_sequence(t, r, size, 1, case.sharding) for t in full)
    fn = ring_flash_attn_func
    if case.compiled:  # the ring is one opaque custom op: no graph break
        fn = torch.compile(ring_flash_attn_func, backend="aot_eager", fullgraph=True)
    kw = _variant_kwargs(case)

    def run(torch_seed):
        torch.manual_seed(torch_seed)
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        out = fn(*leaves, group=group, causal=case.causal, softmax_scale=case.scale, sharding=case.sharding, **kw)
        out.backward(do)
        return [out.detach()] + [t.grad for t in leaves]

    res = _results(case, run, r, q.device)
    if not case.subgroups:
        res["gathered_out"] = gather_sequence(res["out"], None, 1, case.sharding)
    return res


def _varlen_on_rank(case, full, group, r, size):
    cu = full[4]  # the global offsets
    q, k, v, do = (shard_varlen(t, cu, r, size, case.sharding) for t in full[:4])
    cu_local, max_local = local_cu_seqlens(cu, size, case.sharding), max(case.lengths) // size + case.extra_max
    kw = _variant_kwargs(case)

    def run(torch_seed):
        torch.manual_seed(torch_seed)
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        if case.compiled:  # one opaque custom op: no graph break
            fn = torch.compile(ring_flash_attn_varlen_func, backend="aot_eager", fullgraph=True)
            out = fn(*leaves, cu_local, max_local, group, case.causal, sharding=case.sharding, **kw)
        else:
            out = ring_flash_attn_varlen_func(*leaves, cu_local, max_local, group, case.causal,
                                              sharding=case.sharding, check_inputs=True, **kw)
        out.backward(do)
        return [out.detach()] + [t.grad for t in leaves]

    res = _results(case, run, r, q.device)
    res["gathered_out"] = gather_varlen(res["out"], cu, group, case.sharding)
    return res


def _worker(rank: int, world_size: int, workdir: str) -> None:
    torch.set_num_threads(1)
    from flashattn_triton.kernels import fastlaunch
    fastlaunch.POISON = True  # buffers the kernels should fill start as NaN
    dist.init_process_group("gloo", init_method=f"file://{workdir}/store", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=WORLD_TIMEOUT_S))
    try:
        # new_group is collective: every rank creates both rings, in one order.
        rings = [dist.new_group([0, 2]), dist.new_group([1, 3])] if world_size == 4 else None
        results = {}
        for name, (case, full) in torch.load(Path(workdir) / "cases.pt", weights_only=False).items():
            group, size, r = None, world_size, rank
            if case.subgroups:
                group, size, r = rings[rank % 2], 2, rank // 2
            try:
                res = (_varlen_on_rank if isinstance(case, VarlenCase) else _dense_on_rank)(case, full, group, r, size)
            except Exception:  # reported by the test of this case
                res = dict(error=traceback.format_exc())
            results[name] = dict(res, group_rank=r, group_size=size)
        torch.save(results, Path(workdir) / f"rank{rank}.pt")
        # Every rank done before any tears gloo down: a rank that destroys its group while a
        # peer still talks to it can abort the peer (seen once in CI: "terminate called
        # without an active exception", SIGABRT in rank 1).
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _run_world(world_size: int, interpret: bool, cases, workdir: Path):
    """Spawn the world, wait at most WORLD_TIMEOUT_S, return {case id: [per-rank results]}."""
    inputs = {}
    for case in cases:
        if isinstance(case, VarlenCase):
            total, d_v = sum(case.lengths), case.d_v or case.d
            q, k, v, do = (torch.randn(total, h, dim).to(case.dtype) for h, dim in
                           ((case.h_q, case.d), (case.h_kv, case.d), (case.h_kv, d_v), (case.h_q, d_v)))
            q = (q.float() * case.amp).to(case.dtype)
            inputs[case.id] = (case, (q, k, v, do, random_cu_seqlens(case.lengths, "cpu")))
            continue
        q = (case.amp * torch.randn(case.batch, case.seqlen_q, case.h_q, case.d)).to(case.dtype)
        k = torch.randn(case.batch, case.seqlen_k, case.h_kv, case.d).to(case.dtype)
        v = torch.randn(case.batch, case.seqlen_k, case.h_kv, case.d_v or case.d).to(case.dtype)
        do = torch.randn(case.batch, case.seqlen_q, case.h_q, case.d_v or case.d).to(case.dtype)
        inputs[case.id] = (case, (q, k, v, do))
    torch.save(inputs, workdir / "cases.pt")
    saved = os.environ.pop("TRITON_INTERPRET", None)
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        ctx = mp.start_processes(_worker, args=(world_size, str(workdir)), nprocs=world_size, join=False,
                                 start_method="spawn")
    finally:
        os.environ.pop("TRITON_INTERPRET", None)
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved
    deadline = time.monotonic() + WORLD_TIMEOUT_S
    try:
        while not ctx.join(timeout=5):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the {world_size}-process gloo world did not finish in {WORLD_TIMEOUT_S} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    per_rank = [torch.load(workdir / f"rank{r}.pt", weights_only=False) for r in range(world_size)]
    return {cid: [res[cid] for res in per_rank] for cid in inputs}, inputs


@pytest.fixture(scope="module")
def worlds():
    """Each world is spawned the first time a test asks for it."""
    cache = {}
    tmp = tempfile.TemporaryDirectory(prefix="ring_test_")

    def get(name):
        if name not in cache:
            world_size, interpret, cases = WORLDS[name]
            workdir = Path(tmp.name) / name
            workdir.mkdir()
            try:
                cache[name] = _run_world(world_size, interpret, cases, workdir)
            except Exception as e:  # every test of this world reports it
                cache[name] = e
        if isinstance(cache[name], Exception):
            raise cache[name]
        return cache[name]

    yield get
    tmp.cleanup()


def _params(varlen: bool):
    return [pytest.param(name, case.id, id=f"{name}-{case.id}")
            for name, (_, _, cases) in WORLDS.items() for case in cases
            if isinstance(case, VarlenCase) == varlen]


def _skip_on_gpu():
    if os.environ.get("FLASHATTN_TRITON_TEST_DEVICE", "cpu") != "cpu":
        pytest.skip("CPU (gloo) test; on GPUs: torchrun --nproc_per_node=2 -m flashattn_triton.distributed.check")


def _check_saturation(case, q, k, d, scale=None):
    """Softcap cases must reach tanh's flat part: some |score| > 2 softcap
    (tanh(2) = 0.96), so a ring that ignored the cap would fail.  q, k:
    (tokens, heads, d) (all pairs, masked or not: a loose but honest check)."""
    if not case.softcap:
        return
    scale = d ** -0.5 if scale is None else scale
    g = q.shape[1] // k.shape[1]
    s = scale * torch.einsum("ihd,jhd->hij", q.double(), k.double().repeat_interleave(g, dim=1))
    frac = (s.abs() > 2 * case.softcap).double().mean().item()
    assert frac > 0.01, f"only {frac:.4f} of the scores saturate the softcap {case.softcap}"


def _check_ranks(case, ranks) -> None:
    """No rank raised; with dropout, each rank's results repeat under the same
    torch seed and change under another."""
    for r, res in enumerate(ranks):
        assert "error" not in res, f"rank {r} raised:\n{res['error']}"
    if case.dropout_p:
        for r, res in enumerate(ranks):
            assert res["repeat_equal"], f"rank {r}: the same torch seed gave different outputs or gradients"
            assert all(res["other_seed_differs"]), (f"rank {r}: another torch seed left (out, dq, dk, dv) "
                                                    f"unchanged: {res['other_seed_differs']}")


@pytest.mark.parametrize("world,case_id", _params(varlen=True))
def test_ring_varlen_matches_single_device(worlds, world, case_id):
    """Each rank's rows equal those of single-device varlen attention on the gathered packed batch."""
    _skip_on_gpu()
    results, inputs = worlds(world)
    case, (q, k, v, do, cu) = inputs[case_id]
    ranks = results[case_id]
    _check_ranks(case, ranks)
    kw = {}
    if case.dropout_p:
        masks = ring_varlen_dropout_keep_mask([res["seed"] for res in ranks], case.dropout_p, case.h_q, cu,
                                              case.causal, case.window, bool(case.alibi), case.sharding,
                                              max_seqlen=max(case.lengths) // len(ranks) + case.extra_max)
        kw = dict(dropout_masks=masks, dropout_p=case.dropout_p)

    def reference(dtype):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        out, _ = varlen_attention_ref(*leaves, cu, cu, case.causal, dtype=dtype, softcap=case.softcap,
                                      window_size=case.window, alibi_slopes=_slopes(case), **kw)
        return [out.detach(), *torch.autograd.grad(out, leaves, do.to(dtype))]

    _check_saturation(case, q, k, case.d)
    ref, base = reference(torch.float64), reference(case.dtype)
    for i, name in enumerate(("out", "dq", "dk", "dv")):
        got = unshard_varlen([res[name] for res in ranks], cu, case.sharding)
        assert_close(name, got, ref[i], base[i], 2.0 if name == "out" else 3.0, case.dtype)
    full_out = unshard_varlen([res["out"] for res in ranks], cu, case.sharding)
    for r, res in enumerate(ranks):
        assert torch.equal(res["gathered_out"], full_out), f"gather_varlen on rank {r} differs"


@pytest.mark.parametrize("world,case_id", _params(varlen=False))
def test_ring_matches_single_device(worlds, world, case_id):
    _skip_on_gpu()
    results, inputs = worlds(world)
    case, (q, k, v, do) = inputs[case_id]
    ranks = results[case_id]
    _check_ranks(case, ranks)
    # Single-device attention on the gathered sequence: float64 truth and the
    # in-dtype PyTorch baseline that sets the tolerance.
    kw = {}
    if case.dropout_p:
        # The ring's mask over the whole sequence, rebuilt from each rank's seed.
        mask = ring_dropout_keep_mask([res["seed"] for res in ranks], case.dropout_p, case.batch, case.h_q,
                                      case.seqlen_q, case.seqlen_k, case.causal, case.window, bool(case.alibi),
                                      case.sharding)
        kw = dict(dropout_mask=mask, dropout_p=case.dropout_p)

    def reference(dtype):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        out, _ = flash_attention_ref(*leaves, case.causal, case.scale, dtype=dtype, softcap=case.softcap,
                                     window_size=case.window, alibi_slopes=_slopes(case), **kw)
        grads = torch.autograd.grad(out, leaves, do.to(dtype))
        return [out.detach(), *grads]

    _check_saturation(case, q.transpose(0, 1).flatten(1, 2), k.transpose(0, 1).flatten(1, 2), case.d, case.scale)
    ref, base = reference(torch.float64), reference(case.dtype)
    # One reassembly per ring: the whole world, or each of the two subgroups.
    rings = {}
    for r, res in enumerate(ranks):
        ring_id = r % 2 if case.subgroups else 0
        rings.setdefault(ring_id, {})[res["group_rank"]] = res
    for ring_id, members in rings.items():
        assert sorted(members) == list(range(len(members)))
        where = f"ring {ring_id} of {len(rings)}: " if len(rings) > 1 else ""
        for i, name in enumerate(("out", "dq", "dk", "dv")):
            got = unshard_sequence([members[g][name] for g in sorted(members)], 1, case.sharding)
            assert_close(where + name, got, ref[i], base[i], 2.0 if name == "out" else 3.0, case.dtype)
    if "gathered_out" in ranks[0]:
        full_out = unshard_sequence([res["out"] for res in ranks], 1, case.sharding)
        for r, res in enumerate(ranks):
            assert torch.equal(res["gathered_out"], full_out), f"gather_sequence on rank {r} differs"
