"""Hopper (sm_90) attention forward in Gluon: TMA, warp specialization, async wgmma.

The FlashAttention-3 structure, written with Triton's Gluon dialect:

* one program owns ``NUM_CONSUMERS * BLOCK_M`` query rows of one (batch, query
  head) and streams the K/V tiles of the matching KV head;
* a 1-warp *producer* partition issues TMA loads: the Q tile of each consumer
  once, then K and V tiles into a ``NUM_STAGES``-deep shared-memory ring
  guarded by ready/empty mbarriers (K and V have separate barriers, so
  ``Q K^T`` can start before V has landed);
* ``NUM_CONSUMERS`` consumer warpgroups (the default partition and
  ``NUM_CONSUMERS - 1`` 4-warp workers), each owning ``BLOCK_M`` (= 64) rows,
  run asynchronous wgmma: ``S = Q K^T`` from shared memory, ``O += P V`` with
  P in registers;
* inside a warpgroup the next ``Q K_j^T`` and the previous ``P_{j-1} V_{j-1}``
  are issued together and the softmax of ``S_j`` runs while ``P V`` is on the
  tensor cores (FA3's intra-warpgroup overlap);
* with ``PINGPONG`` the consumers take turns issuing their GEMMs (a ring of
  mbarriers), so one warpgroup's softmax overlaps another's GEMMs (FA3's
  inter-warpgroup schedule).

Masks: none, causal (row i sees keys j <= i + causal_shift) and, with
``HAS_WINDOW``, a left window bound (row i sees keys j >= i + window_lo;
flash-attn's window (left, 0 or -1) around the diagonal shift is window_lo =
shift - left).  A work tile visits key tiles [lo_tile, n_tiles): the ones
before its first row's window are neither loaded nor visited, and its ring
uses and turns count from lo_tile (_key_start).  Inside it, tiles that
straddle a bound (the left edge, the diagonal, the ragged end of K) are
masked, the rest run unmasked; with ``SKIP_TILES`` each warpgroup releases
unread the tiles wholly outside its own rows' band (_attn_fwd_skip).
Builds without the window are those of before it (compile_check --sass).
With ``HAS_MASK`` a caller's boolean mask also drops scores in every tile:
each consumer loads its mask bytes in the S accumulator's layout at the top
of a step (_mask_tile, _mask_load, _mask_select; docs/hopper.md "Masks").

Descriptors are rank 4 over the (B, H, N, d)-indexed views, with the block
``[1, 1, rows, d]``: a tile can never read or write another head's or
batch's rows (TMA zero-fills loads past N and clips stores), whatever N is.

Scores stay in base 2 with the scale folded into one multiply-add:
``p = exp2(s * scale * log2(e) - m * scale * log2(e))`` with ``m`` the running
max of the raw scores (valid because the launcher only accepts scale > 0).
LSE is written in natural log, ``(m * scale * log2 e + log2 l) * ln 2``; rows
that see no key give O = 0 and LSE = -inf, as in the portable kernel.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Optional, Tuple

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                               warpgroup_mma, warpgroup_mma_wait)

from ... import reference
from .. import fastlaunch
from ..launch import env_switch_or
from ._build import LAUNCH_ERRORS, is_build_failure
from ._compat import NOINLINE_OK, cta_barrier, reinterpret, tma_load, tma_store
from .dropout import philox_keys, select_kept, tile_halves_rows_first
from .schedule import packed_sequence, snake_count, snake_tile

# Touch every name the kernel uses, so that a Triton whose Gluon API moved
# fails here (and the tier reports itself unavailable) rather than at launch.
_REQUIRED = (gl.warp_specialize, gl.NVMMADistributedLayout, gl.DotOperandLayout, gl.SliceLayout,
             gl.NVMMASharedLayout.get_default_for, gl.allocate_shared_memory, gl.convert_layout,
             gl.exp2, gl.log2, gl.static_range, mbarrier.MBarrierLayout, mbarrier.init, mbarrier.expect,
             mbarrier.wait, mbarrier.arrive, tma_load, tma_store, tma.store_wait, cta_barrier, gl.BlockedLayout,
             gl.full, fence_async_shared)

LOG2E = 1.4426950408889634

# Packed batches: "1" zeroes the rows past a sequence that its last tiles
# load (the next sequence's), so that a NaN or infinity in one sequence
# cannot reach another through a product with weight 0; the kernels then
# take IS_VARLEN = 2 (1: packed without it).  Read per call (api.PLAN_ENV,
# ops.BWD_PLAN_ENV key the plans on it).  Off by default: on an H100 it cost
# 3-16 % of forward + backward on short documents (docs/api.md "Packed
# batches"; benchmarks/results/h100/session70).
ENV_VARLEN_ISOLATE = "FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE"
VARLEN_ISOLATE_DEFAULT = False


def varlen_isolate() -> bool:
    """Whether packed batches zero their tiles' rows past each sequence
    (FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE, VARLEN_ISOLATE_DEFAULT when unset)."""
    return bool(env_switch_or(ENV_VARLEN_ISOLATE, VARLEN_ISOLATE_DEFAULT))


@gluon.jit
def _work_tile(i, pid, n_programs, n_m, n_bh, HEADS_FIRST: gl.constexpr, M_BAND: gl.constexpr,
               HEAD_SECTION: gl.constexpr):
    """(m-block, batch * head) of the i-th work tile of program pid, dealt
    in a snake (schedule.py), numbered as _dynamic_tile."""
    return _dynamic_tile(snake_tile(i, pid, n_programs), n_m, n_bh, HEADS_FIRST, M_BAND, HEAD_SECTION)


@gluon.jit
def _dynamic_tile(t, n_m, n_bh, HEADS_FIRST: gl.constexpr, M_BAND: gl.constexpr, HEAD_SECTION: gl.constexpr):
    """(m-block, batch * head) of work tile number t: what _work_tile deals
    out in its snake order, and the DYNAMIC schedule hands out in order
    t = 0, 1, ... as programs ask.

    Without HEADS_FIRST a head's m-blocks are adjacent (the programs running
    at once share its K/V in L2).  With HEADS_FIRST the m-blocks come from
    the bottom (longest causal block) up, longest first, and the heads
    fastest: M_BAND <= 1 takes one m-block of every head at a time, so the
    132 programs in flight hold 132 different heads' K/V (the H200 profile
    of d = 128 causal N = 2k: 13.7% L2 hits, DRAM 76% busy).  M_BAND > 1
    takes bands of M_BAND neighbouring m-blocks per head (every head's band,
    then the next band up): lengths within a band differ by at most
    M_BAND - 1 m-blocks' worth of key tiles, and the programs in flight
    share each head's K/V prefix M_BAND ways (tests/hopper_model.py's L2
    model: hit rate 0.11 -> 0.5 / 0.7 with bands of 2 / 4 at d = 128
    N = 2k, balance unchanged).  HEAD_SECTION > 0 (M_BAND unused) orders
    the (batch, head)s in sections of HEAD_SECTION, one section after the
    other, and within a section as HEADS_FIRST alone (longest m-block first,
    heads fastest): the programs in flight share the K/V of one or two
    sections, which the host sizes to fit in L2 (section_heads)."""
    if HEADS_FIRST:
        if HEAD_SECTION > 0:
            per_section = HEAD_SECTION * n_m
            section = t // per_section
            base = section * HEAD_SECTION
            width = gl.minimum(n_bh - base, HEAD_SECTION)  # the last section may be partial
            r = t - section * per_section
            pid_m = n_m - 1 - r // width
            pid_bh = base + r % width
        elif M_BAND > 1:
            per_band = M_BAND * n_bh
            band = t // per_band
            r = t - band * per_band
            top = n_m - 1 - band * M_BAND  # the band's longest m-block
            width = gl.minimum(top + 1, M_BAND)  # the last band may be partial
            pid_bh = r // width
            pid_m = top - r % width
        else:
            pid_m = n_m - 1 - t // n_bh
            pid_bh = t % n_bh
    else:
        pid_m = t % n_m
        pid_bh = t // n_m
    return pid_m, pid_bh


@gluon.jit
def _tile_coords(pid_m, pid_bh, H_Q, GROUP_SIZE, N_Q, N_K, causal_shift,
                 ROWS: gl.constexpr, BLOCK_N: gl.constexpr, IS_CAUSAL: gl.constexpr):
    """(batch, query head, KV head, first row, number of key tiles) of a work tile."""
    off_b = pid_bh // H_Q
    off_hq = pid_bh % H_Q
    off_hkv = off_hq // GROUP_SIZE  # GQA: query head h reads KV head h // G
    start_m = pid_m * ROWS
    # Key tiles this block visits: row i sees keys j <= i + causal_shift.
    if IS_CAUSAL:
        last_row = gl.minimum(start_m + ROWS, N_Q) - 1
        end_n = gl.maximum(gl.minimum(N_K, last_row + causal_shift + 1), 0)
    else:
        end_n = N_K
    # At least one tile, so that a block with no visible key still runs
    # through the masked path and writes O = 0, LSE = -inf.
    n_tiles = gl.maximum(gl.cdiv(end_n, BLOCK_N), 1)
    return off_b, off_hq, off_hkv, start_m, n_tiles


@gluon.jit
def _key_start(start_m, n_tiles, window_lo, BLOCK_N: gl.constexpr, HAS_WINDOW: gl.constexpr):
    """First key tile of the work tile whose rows start at start_m: 0, or
    with HAS_WINDOW (row i sees keys j >= i + window_lo) the tile of its
    first row's first key, whose bound is the smallest.  At most
    n_tiles - 1, so that a work tile whose rows all see no key still runs
    one (masked) tile.  Tiles before it are neither loaded nor visited:
    the work tile's ring uses and turns count from it."""
    if HAS_WINDOW:
        return gl.minimum(gl.maximum(start_m + window_lo, 0) // BLOCK_N, n_tiles - 1)
    else:
        return 0


@gluon.jit
def _load_q(q_desc, q_smem, q1_desc, q1_smem, q_ready, q_empty, off_b, off_hq, start_m, q_phase,
            BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, QK1: gl.constexpr, NUM_CONSUMERS: gl.constexpr,
            WAIT_EMPTY: gl.constexpr):
    """The Q tile of each consumer; with WAIT_EMPTY, once that consumer has
    stored the previous tile's O from the same buffer (q_empty).  With
    QK1 > 0 (split Q K^T) Q's columns [HEAD_DIM, HEAD_DIM + QK1) go to
    q1_smem on the same barrier."""
    q_box: gl.constexpr = [1, 1, BLOCK_M, HEAD_DIM]
    q1_box: gl.constexpr = [1, 1, BLOCK_M, QK1]
    for c in gl.static_range(NUM_CONSUMERS):
        if WAIT_EMPTY:
            mbarrier.wait(q_empty.index(c), q_phase ^ 1)
        if QK1 > 0:
            mbarrier.expect(q_ready.index(c), q_desc.block_type.nbytes + q1_desc.block_type.nbytes)
        else:
            mbarrier.expect(q_ready.index(c), q_desc.block_type.nbytes)
        tma_load(
            q_desc, [off_b, off_hq, start_m + c * BLOCK_M, 0], q_ready.index(c),
            reinterpret(q_smem.index(c), q_desc.dtype, q_box, q_desc.layout))
        if QK1 > 0:
            tma_load(
                q1_desc, [off_b, off_hq, start_m + c * BLOCK_M, HEAD_DIM], q_ready.index(c),
                reinterpret(q1_smem.index(c), q1_desc.dtype, q1_box, q1_desc.layout))


@gluon.jit
def _load_kv(k_desc, v_desc, k1_desc, k_bufs, v_bufs, k1_bufs, k_ready, k_empty, v_ready, v_empty, off_b, off_hkv,
             j, k_row0, g, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, QK1: gl.constexpr,
             NUM_STAGES: gl.constexpr):
    """K and V tile j of the current work tile into ring slot g % NUM_STAGES
    (g counts the program's K/V tiles over all its work tiles): rows
    k_row0 + j * BLOCK_N on (0 for a dense call; a packed call's sequence
    start, IS_VARLEN).  With QK1 > 0, K's columns [HEAD_DIM, HEAD_DIM + QK1)
    go to k1_bufs on K's barrier."""
    kv_box: gl.constexpr = [1, 1, BLOCK_N, HEAD_DIM]
    s = g % NUM_STAGES
    # Slot s is free once every consumer released its previous use; the
    # first pass waits on the parity before a fresh barrier's phase 0.
    ph = ((g // NUM_STAGES) & 1) ^ 1
    mbarrier.wait(k_empty.index(s), ph)
    if QK1 > 0:
        mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes + k1_desc.block_type.nbytes)
    else:
        mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
    tma_load(
        k_desc, [off_b, off_hkv, k_row0 + j * BLOCK_N, 0], k_ready.index(s),
        reinterpret(k_bufs.index(s), k_desc.dtype, kv_box, k_desc.layout))
    if QK1 > 0:
        k1_box: gl.constexpr = [1, 1, BLOCK_N, QK1]
        tma_load(
            k1_desc, [off_b, off_hkv, k_row0 + j * BLOCK_N, HEAD_DIM], k_ready.index(s),
            reinterpret(k1_bufs.index(s), k1_desc.dtype, k1_box, k1_desc.layout))
    mbarrier.wait(v_empty.index(s), ph)
    mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
    tma_load(
        v_desc, [off_b, off_hkv, k_row0 + j * BLOCK_N, 0], v_ready.index(s),
        reinterpret(v_bufs.index(s), v_desc.dtype, kv_box, v_desc.layout))


@gluon.jit
def _load_work_tile(q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q1_desc, k1_desc, q1_smem, k1_bufs,
                    q_ready, q_empty, k_ready, k_empty, v_ready, v_empty,
                    pid_m, pid_bh, i, g, H_Q, GROUP_SIZE, N_Q, N_K, causal_shift, window_lo,
                    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, QK1: gl.constexpr,
                    NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
                    HAS_WINDOW: gl.constexpr):
    """The loads of a persistent program's i-th work tile (m-block pid_m of
    head pid_bh); g: K/V tiles the program loaded before it.  Returns g plus
    this tile's.  The first K/V tiles (as many as the ring holds) go before
    Q: their slots are freed by the previous tile's GEMMs, while the Q
    buffers are free only once the consumers have stored that tile's O from
    them; so the ring is full when Q is waited for.  Key tiles [t_lo, t_n)
    (_key_start: t_lo = 0 without a window) go to ring uses g, g + 1, ..."""
    t_b, t_hq, t_hkv, t_m, t_n = _tile_coords(pid_m, pid_bh, H_Q, GROUP_SIZE, N_Q, N_K, causal_shift,
                                              BLOCK_M * NUM_CONSUMERS, BLOCK_N, IS_CAUSAL)
    t_lo = _key_start(t_m, t_n, window_lo, BLOCK_N, HAS_WINDOW)
    n_first = gl.minimum(t_n - t_lo, NUM_STAGES)
    for j in range(n_first):
        _load_kv(k_desc, v_desc, k1_desc, k_bufs, v_bufs, k1_bufs, k_ready, k_empty, v_ready, v_empty, t_b, t_hkv,
                 t_lo + j, 0, g + j, BLOCK_N, HEAD_DIM, QK1, NUM_STAGES)
    _load_q(q_desc, q_smem, q1_desc, q1_smem, q_ready, q_empty, t_b, t_hq, t_m, i & 1,
            BLOCK_M, HEAD_DIM, QK1, NUM_CONSUMERS, True)
    for j in range(n_first, t_n - t_lo):
        _load_kv(k_desc, v_desc, k1_desc, k_bufs, v_bufs, k1_bufs, k_ready, k_empty, v_ready, v_empty, t_b, t_hkv,
                 t_lo + j, 0, g + j, BLOCK_N, HEAD_DIM, QK1, NUM_STAGES)
    return g + (t_n - t_lo)


@gluon.jit
def _attn_fwd_load(q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q1_desc, k1_desc, q1_smem, k1_bufs,
                   q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, tile_idx, tile_ready, TILE_COUNTER,
                   off_b, off_hq, off_hkv, start_m, n_tiles,
                   H_Q, GROUP_SIZE, N_Q, N_K, causal_shift, window_lo, n_m, n_bh, q_row0, k_row0,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, QK1: gl.constexpr,
                   NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
                   PERSISTENT: gl.constexpr, HEADS_FIRST: gl.constexpr, M_BAND: gl.constexpr,
                   HEAD_SECTION: gl.constexpr, DYNAMIC: gl.constexpr, HAS_WINDOW: gl.constexpr,
                   IS_VARLEN: gl.constexpr):
    """Producer partition (1 warp): Q once per consumer, then the K/V ring;
    when PERSISTENT, for each work tile of this program in turn (with
    DYNAMIC, the tiles it claims from TILE_COUNTER, published to the
    consumers through tile_idx / tile_ready).  IS_VARLEN: the sequence's
    rows start at q_row0 / k_row0 of batch entry 0, and a block past the
    sequence's N_Q rows loads nothing."""
    if DYNAMIC:
        pid = gl.program_id(0)
        n_programs = gl.num_programs(0)
        n_work = n_m * n_bh
        idx_layout: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
        t = pid  # the grid has at most n_work programs: the first tile needs no claim
        i = 0
        g = 0
        while t < n_work:
            pid_m, pid_bh = _dynamic_tile(t, n_m, n_bh, HEADS_FIRST, M_BAND, HEAD_SECTION)
            g = _load_work_tile(q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q1_desc, k1_desc, q1_smem, k1_bufs,
                                q_ready, q_empty, k_ready, k_empty, v_ready, v_empty,
                                pid_m, pid_bh, i, g, H_Q, GROUP_SIZE, N_Q, N_K, causal_shift, window_lo,
                                BLOCK_M, BLOCK_N, HEAD_DIM, QK1, NUM_CONSUMERS, NUM_STAGES, IS_CAUSAL, HAS_WINDOW)
            # Every load of tile i is issued: claim the next tile (programs
            # [0, G) took tiles [0, G) without a claim) and publish it in
            # slot i % 2.  That slot last held the tile of iteration i - 1,
            # which every consumer read before starting it, hence before the
            # q_empty arrival of it that _load_q waited for above.  A value
            # >= n_work ends both loops.
            t = n_programs + gl.atomic_add(TILE_COUNTER, 1, sem="relaxed")
            tile_idx.index(i % 2).store(gl.full([1], t, gl.int32, idx_layout))
            cta_barrier()
            mbarrier.arrive(tile_ready.index(i % 2))
            i += 1
    elif PERSISTENT:
        pid = gl.program_id(0)
        n_programs = gl.num_programs(0)
        g = 0
        for i in range(snake_count(pid, n_programs, n_m * n_bh)):
            pid_m, pid_bh = _work_tile(i, pid, n_programs, n_m, n_bh, HEADS_FIRST, M_BAND, HEAD_SECTION)
            g = _load_work_tile(q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q1_desc, k1_desc, q1_smem, k1_bufs,
                                q_ready, q_empty, k_ready, k_empty, v_ready, v_empty,
                                pid_m, pid_bh, i, g, H_Q, GROUP_SIZE, N_Q, N_K, causal_shift, window_lo,
                                BLOCK_M, BLOCK_N, HEAD_DIM, QK1, NUM_CONSUMERS, NUM_STAGES, IS_CAUSAL, HAS_WINDOW)
    elif IS_VARLEN:
        if start_m < N_Q:
            _load_q(q_desc, q_smem, q1_desc, q1_smem, q_ready, q_empty, 0, off_hq, q_row0 + start_m, 0,
                    BLOCK_M, HEAD_DIM, QK1, NUM_CONSUMERS, False)
            lo = _key_start(start_m, n_tiles, window_lo, BLOCK_N, HAS_WINDOW)
            for j in range(lo, n_tiles):
                _load_kv(k_desc, v_desc, k1_desc, k_bufs, v_bufs, k1_bufs, k_ready, k_empty, v_ready, v_empty, 0,
                         off_hkv, j, k_row0, j - lo, BLOCK_N, HEAD_DIM, QK1, NUM_STAGES)
    else:
        _load_q(q_desc, q_smem, q1_desc, q1_smem, q_ready, q_empty, off_b, off_hq, start_m, 0,
                BLOCK_M, HEAD_DIM, QK1, NUM_CONSUMERS, False)
        lo = _key_start(start_m, n_tiles, window_lo, BLOCK_N, HAS_WINDOW)
        for j in range(lo, n_tiles):
            _load_kv(k_desc, v_desc, k1_desc, k_bufs, v_bufs, k1_bufs, k_ready, k_empty, v_ready, v_empty, off_b,
                     off_hkv, j, 0, j - lo, BLOCK_N, HEAD_DIM, QK1, NUM_STAGES)


@gluon.jit
def _zero_rows_from(buf, first, PART: gl.constexpr = 0, PARTS: gl.constexpr = 1):
    """Rows [first, rows) of the shared tile buf (rows x cols; 16-bit, or the
    backward's float32 dQ staging) set to 0 by the calling warpgroup (4
    warps), 2048 elements a pass (16 per thread: few registers on top of the
    caller's accumulators); with PARTS > 1 this warpgroup takes passes PART,
    PART + PARTS, ...  Ends with the
    fence that makes the stores visible to wgmma and TMA; the caller's
    barrier (of every warpgroup that took a part) completes the hand-over.

    Why: a packed sequence's last tile is loaded by TMA as whole rows, so
    its rows past the sequence are the next sequence's.  They get weight 0,
    but 0 * NaN is NaN, so an operand that a product with weight 0 reads
    must hold finite values there (IS_VARLEN; docs/api.md)."""
    COLS: gl.constexpr = buf.shape[1]
    R: gl.constexpr = 2048 // COLS
    # Vectors of 8 elements along a row (16 bytes at 16 bits: one swizzle unit).
    TPW_C: gl.constexpr = COLS // 8 if COLS < 256 else 32
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_C, TPW_C], [4, 1], [1, 0])
    for c in gl.static_range(PART, buf.shape[0] // R, PARTS):
        part = buf.slice(c * R, R, dim=0)
        if first <= c * R:  # wholly past `first`: zeros, nothing to read
            part.store(gl.full([R, COLS], 0.0, buf.dtype, layout))
        elif first < (c + 1) * R:  # the pass that holds `first`
            rows = c * R + gl.arange(0, R, layout=gl.SliceLayout(1, layout))
            part.store(gl.where(gl.expand_dims(rows < first, 1), part.load(layout),
                                gl.full([R, COLS], 0.0, buf.dtype, layout)))
    fence_async_shared()


# The forward's only named barrier (IS_VARLEN = 2: the consumers that reach
# a sequence's last key tile), above the ids Triton 3.6's warp
# specialization takes (0: the default partition, 1: the partition switch,
# 2 + i: worker partition i; at most 4 here).  The hardware barriers
# (_named_bar, _named_bar_at) are shared with bwd.py's NAMED_BAR protocols.
VARLEN_TAIL_BAR_ID = 8
# Its thread count is a run-time operand: 128 per consumer that reaches the tile.
_VARLEN_TAIL_SYNC = gl.constexpr(f"bar.sync {VARLEN_TAIL_BAR_ID}, $1;\n\tmov.u32 $0, 0;")


@gluon.jit
def _named_bar(ASM: gl.constexpr):
    """One bar.sync / bar.arrive (ASM) by every thread of the partition.  A
    barrier completes when its thread count has arrived; bar.sync waits for
    that, bar.arrive does not; either orders the caller's memory accesses
    before it for every thread that waits on that completion (the caller's
    fence_async_shared extends that to the async proxy: wgmma, TMA).  The
    parties must reach it equally often, and an arrival for the next
    completion must not come before this one's (the protocols that use it
    alternate so).  Gluon's mbarrier.arrive is one thread's arrival after a
    bar.sync of its warpgroup, and its wait polls; this is one instruction."""
    gl.inline_asm_elementwise(ASM, "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _named_bar_at(ASM: gl.constexpr, operand):
    """_named_bar with one run-time scalar operand (ASM's $1): a barrier id
    (bwd.py's dQ pieces) or a thread count (VARLEN_TAIL_BAR_ID's sync)."""
    gl.inline_asm_elementwise(ASM, "=r,r", [operand], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _own_tiles(row0, N_K, lo_tile, n_tiles, causal_shift, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
               IS_CAUSAL: gl.constexpr, SKIP_TILES: gl.constexpr):
    """The key tiles [lo_tile, n_own) that the consumer warpgroup of rows
    [row0, + BLOCK_M) computes: with SKIP_TILES and a causal mask up to its
    last row's diagonal (at least one), else the work tile's n_tiles.  Grows
    with row0: the work tile's last consumer has the most."""
    if IS_CAUSAL and SKIP_TILES:
        n_own = gl.cdiv(gl.minimum(gl.maximum(row0 + BLOCK_M + causal_shift, 0), N_K), BLOCK_N)
        n_own = gl.maximum(gl.minimum(n_own, n_tiles), lo_tile + 1)
    else:
        n_own = n_tiles
    return n_own


@gluon.jit(noinline=NOINLINE_OK)
def _zero_rows_from_call(buf, first):
    """_zero_rows_from as a call of its own (noinline): inlined, its
    registers made ptxas spill around it (compile_check).  Inlined on
    Triton 3.8, which cannot lower such a call in a partition (_compat)."""
    _zero_rows_from(buf, first)


@gluon.jit
def _store_tile_tma(x, buf, desc, off_b, off_h, row, col):
    """x (rows, cols; float32) in desc's dtype through the free shared buffer buf (at least
    as large) to rows [row, + rows), columns [col, + cols) of head off_h of batch entry
    off_b by a TMA store (its completion: the caller's store_wait).  The forward's O and
    the backward's dK / dV (TMA_DKV) leave this way.  The staged tile takes the swizzle of
    its own width, not buf's: a 32-column bf16 tile (SPLIT_D's dK / dV at d = 64) is 64
    bytes wide, too narrow for a 128-byte swizzle.  Both views are of buf itself (Triton 3.8
    takes no view of a view: _compat.reinterpret)."""
    stage = reinterpret(buf, desc.dtype, [x.shape[0], x.shape[1]],
                        gl.NVMMASharedLayout.get_default_for([x.shape[0], x.shape[1]], desc.dtype))
    stage.store(x.to(desc.dtype))
    fence_async_shared()
    tma_store(desc, [off_b, off_h, row, col],
              reinterpret(buf, desc.dtype, [1, 1, x.shape[0], x.shape[1]], desc.layout))


@gluon.jit
def _store_rows(x, O, stride_om, stride_oh, off_h, row_base, row0, N_Q, layout: gl.constexpr,
                ROWS: gl.constexpr, COLS: gl.constexpr):
    """x (ROWS, COLS; float32, in layout) in O's dtype to rows row_base +
    [row0, row0 + ROWS) of head off_h of O (row stride stride_om, head
    stride stride_oh, unit column stride), the rows < N_Q only: a packed
    sequence's last block, whose further rows belong to the next sequence
    (a TMA store clips only at the end of the whole tensor)."""
    rows = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims((row_base + rows).to(gl.int64) * stride_om, 1) + gl.expand_dims(cols, 0)
    keep = gl.expand_dims(rows < N_Q, 1) & gl.expand_dims(cols < COLS, 0)
    gl.store(O + off_h.to(gl.int64) * stride_oh + offs, x.to(O.dtype.element_ty), mask=keep)


@gluon.jit
def _softmax_update(s, m_i, l_i, rows, start_n, N_K, qk_scale, causal_shift, window_lo,
                    MASKED: gl.constexpr, IS_CAUSAL: gl.constexpr, HAS_WINDOW: gl.constexpr,
                    mbits=None, HAS_MASK: gl.constexpr = False, ROW_BOUND: gl.constexpr = False):
    """Fold the score tile of keys [start_n, start_n + BLOCK_N) into the
    running (max, sum); returns p (fp32) and alpha.  A masked tile keeps
    key j of row i where j < N_K, j <= i + causal_shift (IS_CAUSAL) and
    j >= i + window_lo (HAS_WINDOW); with HAS_MASK every tile also drops
    the scores whose byte of the user's boolean mask (mbits, _mask_load) is
    0."""
    if HAS_MASK:
        s = _mask_select(s, mbits)
    if MASKED:
        # Column indices are made here, not passed in: a loop-invariant
        # vector would hold BLOCK_N / 4 registers through the unmasked loop.
        cols = gl.arange(0, s.shape[1], layout=gl.SliceLayout(0, s.type.layout))
        if IS_CAUSAL and ROW_BOUND:
            # c < N_K - start_n and c <= i + causal_shift - start_n as one
            # compare per score, against the row's last visible column.
            last = gl.minimum(rows + (causal_shift - start_n), N_K - 1 - start_n)
            keep = gl.expand_dims(cols, 0) <= gl.expand_dims(last, 1)
        else:
            keep = gl.expand_dims(cols, 0) < N_K - start_n
            if IS_CAUSAL:
                keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1) + (causal_shift - start_n))
        if HAS_WINDOW:
            keep = keep & (gl.expand_dims(cols, 0) >= gl.expand_dims(rows, 1) + (window_lo - start_n))
        s = gl.where(keep, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1))
    if MASKED or HAS_MASK:
        # A row that has seen no key yet keeps m = -inf: subtract 0 instead,
        # so exp2(-inf - 0) = 0 rather than exp2(-inf + inf) = NaN.  (With a
        # user mask any tile may leave a row without a key.)
        m_ref = gl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_ref = m_new
    m_scaled = m_ref * qk_scale
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_scaled, 1))
    alpha = gl.exp2(m_i * qk_scale - m_scaled)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_i


@gluon.jit
def _dropout_tile(drop, off_b, off_hq, row0):
    """A work tile's dropout state from the kernel's arguments (SEED,
    philox_offset, threshold, scale, H_Q, RNG_ROWS, RNG_COLS): the Philox key,
    the counter of (row0, key 0) of this (batch, query head)
    (kernels/score.py), the row stride, the threshold t << 16 (select_kept)
    and the scale."""
    seed_ptr, philox_offset, thresh, scale, h_q, rng_rows, rng_cols = drop
    k0, k1 = philox_keys(gl.load(seed_ptr))
    base = philox_offset + ((off_b * h_q + off_hq).to(gl.int64) * rng_rows + row0) * rng_cols
    return k0, k1, base, rng_cols, thresh.to(gl.uint32) << 16, scale


@gluon.jit
def _dropout_drop(p, drop, col0, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """p (a BLOCK_M x BLOCK_N tile of probabilities in the S accumulator's
    layout, keys from col0) with the scores that dropout drops set to 0;
    kept ones are not scaled here (the epilogue scales O).  The row sum l
    and the LSE take p before this, as kernels/fwd.py."""
    k0, k1, base, rng_cols, t_hi, scale = drop
    halves = tile_halves_rows_first(k0, k1, base, 0, col0, rng_cols, BLOCK_M, BLOCK_N, 4)
    return select_kept(p, gl.convert_layout(halves, p.type.layout, assert_trivial=True), t_hi)


@gluon.jit
def _dropout_scale(drop):
    """The scale of kept probabilities of a work tile's dropout state."""
    k0, k1, base, rng_cols, t_hi, scale = drop
    return scale


@gluon.jit
def _mask_tile(mask, off_b, off_hq, rows, N_Q):
    """A warpgroup's mask rows from the kernel's arguments (MASK, stride_mz,
    stride_mh, stride_mm; strides 0 on broadcast dims, the key stride 1):
    the address of key 0 of each of its rows, in the layout of the S
    accumulator's rows (two per thread).  Rows past N_Q read row N_Q - 1
    instead (their results are never stored), so that no load needs a row
    bound.  GQA: the query head indexes the mask, as in kernels/fwd.py."""
    MASK, stride_mz, stride_mh, stride_mm = mask
    base = MASK + off_b.to(gl.int64) * stride_mz + off_hq.to(gl.int64) * stride_mh
    return base + gl.minimum(rows, N_Q - 1).to(gl.int64) * stride_mm


@gluon.jit
def _mask_select(s, mbits):
    """s where its mask byte (mbits, uint8 in s's layout) is nonzero, else
    -inf.  Four scores per asm block, their bytes packed in one register
    (element k in byte k): one bit test into a predicate and one select per
    score.  A plain where() on the bytes costs twice that (LLVM widens each
    byte: and, shift, compare, select)."""
    return gl.inline_asm_elementwise(
        "{ .reg .pred p<4>; .reg .b32 b<4>;"
        " and.b32 b0, $8, 255; setp.ne.b32 p0, b0, 0; selp.f32 $0, $4, 0fFF800000, p0;"
        " and.b32 b1, $8, 65280; setp.ne.b32 p1, b1, 0; selp.f32 $1, $5, 0fFF800000, p1;"
        " and.b32 b2, $8, 16711680; setp.ne.b32 p2, b2, 0; selp.f32 $2, $6, 0fFF800000, p2;"
        " and.b32 b3, $8, -16777216; setp.ne.b32 p3, b3, 0; selp.f32 $3, $7, 0fFF800000, p3; }",
        "=r,=r,=r,=r,r,r,r,r,r", [s, mbits], dtype=gl.float32, is_pure=True, pack=4)


@gluon.jit
def _mask_load(mtile, start_n, N_K, s_layout: gl.constexpr, BLOCK_N: gl.constexpr, MASKED: gl.constexpr):
    """The mask bytes of keys [start_n, start_n + BLOCK_N) of the warpgroup's
    rows (mtile: _mask_tile's row addresses), loaded straight into the S
    accumulator's layout (uint8; on masked tiles 0 for keys past N_K, which
    the kernel masks anyway).  A thread holds rows {r, r + 8} and key pairs
    {2e, 2e + 1} every 8 keys: 2-byte loads (a quad of lanes reads 8
    consecutive bytes of a row) at constant offsets from two row addresses,
    so no per-element address is kept.  Issued at the top of a step, before
    its barrier waits and Q K^T, so that their latency hides under those
    (the bytes hold BLOCK_N / 4 registers meanwhile).  Unmasked tiles hold
    whole key tiles: no bound at all, no zero-filling."""
    cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    ptrs = gl.expand_dims(mtile, 1) + gl.expand_dims(start_n + cols, 0)
    if MASKED:
        return gl.load(ptrs, mask=gl.expand_dims(cols < N_K - start_n, 0), other=0)
    else:
        return gl.load(ptrs)


@gluon.jit
def _attn_fwd_step(j, g0, t0, q, k_bufs, v_bufs, q1, k1_bufs, k_ready, k_empty, v_ready, v_empty, turn,
                   acc, p, m_i, l_i, rows, N_K, qk_scale, causal_shift, window_lo,
                   CONSUMER: gl.constexpr, NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, QK1: gl.constexpr,
                   MASKED: gl.constexpr, IS_CAUSAL: gl.constexpr, PINGPONG: gl.constexpr,
                   HAS_WINDOW: gl.constexpr, drop, HAS_DROPOUT: gl.constexpr,
                   mtile=None, HAS_MASK: gl.constexpr = False, ROW_BOUND: gl.constexpr = False):
    """Iteration j (a tile after the first): issue S_j = Q K_j^T and
    O += P_{j-1} V_{j-1}, softmax S_j under P V.

    g0: ring uses before this work tile (K/V slot and phase of tile j come
    from g0 + j); t0: ping-pong turns before this work tile.  QK1 > 0: Q K^T
    is split in two column chunks, (q, k_bufs) of HEAD_DIM_V columns and
    (q1, k1_bufs) of QK1 (d = 192 = 128 + 64), two wgmmas into one S.  drop:
    the work tile's dropout state (_dropout_tile; HAS_DROPOUT only); mtile:
    the warpgroup's mask rows (_mask_tile; HAS_MASK only)."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                      instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = acc.type.layout
    p_layout: gl.constexpr = p.type.layout
    if HAS_MASK:  # first, so that the loads' latency hides under the waits and Q K^T
        mbits = _mask_load(mtile, j * BLOCK_N, N_K, s_layout, BLOCK_N, MASKED)
    else:
        mbits = None
    gk = g0 + j
    sk = gk % NUM_STAGES
    sv = (gk - 1) % NUM_STAGES
    mbarrier.wait(k_ready.index(sk), (gk // NUM_STAGES) & 1)
    mbarrier.wait(v_ready.index(sv), ((gk - 1) // NUM_STAGES) & 1)
    if PINGPONG:
        mbarrier.wait(turn.index(CONSUMER), (t0 + j) & 1)
    s_tok = warpgroup_mma(q, k_bufs.index(sk).permute((1, 0)),
                          gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
    if QK1 > 0:  # split Q K^T: the second column chunk accumulates into S (its own wgmma group)
        s_tok = warpgroup_mma(q1, k1_bufs.index(sk).permute((1, 0)), s_tok, is_async=True)
    o_tok = warpgroup_mma(p, v_bufs.index(sv), acc, is_async=True)
    if PINGPONG:
        mbarrier.arrive(turn.index((CONSUMER + 1) % NUM_CONSUMERS))
    # Groups retire in issue order: with at most one (P V) left, S is complete
    # (both of its groups when split).
    s = warpgroup_mma_wait(1, deps=(s_tok,))
    mbarrier.arrive(k_empty.index(sk))
    p_new, alpha, m_i, l_i = _softmax_update(s, m_i, l_i, rows, j * BLOCK_N, N_K, qk_scale,
                                             causal_shift, window_lo, MASKED, IS_CAUSAL, HAS_WINDOW,
                                             mbits, HAS_MASK, ROW_BOUND)
    if HAS_DROPOUT:
        p_new = _dropout_drop(p_new, drop, j * BLOCK_N, BLOCK_M, BLOCK_N)
    # The next P is packed to 16 bits while P V still runs (fresh registers:
    # the current P is still being read by the tensor cores).
    p_next = gl.convert_layout(p_new.to(p.dtype), p_layout)
    acc, p = warpgroup_mma_wait(0, deps=(o_tok, p))
    mbarrier.arrive(v_empty.index(sv))
    alpha_o = gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))
    acc = acc * gl.expand_dims(alpha_o, 1)
    return acc, p_next, m_i, l_i


@gluon.jit
def _attn_fwd_loop(lo, hi, g0, t0, q, k_bufs, v_bufs, q1, k1_bufs, k_ready, k_empty, v_ready, v_empty, turn,
                   acc, p, m_i, l_i, rows, N_K, qk_scale, causal_shift, window_lo,
                   CONSUMER: gl.constexpr, NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, QK1: gl.constexpr,
                   MASKED: gl.constexpr, IS_CAUSAL: gl.constexpr, PINGPONG: gl.constexpr,
                   PAIRED: gl.constexpr, HAS_WINDOW: gl.constexpr, drop, HAS_DROPOUT: gl.constexpr,
                   mtile=None, HAS_MASK: gl.constexpr = False, ROW_BOUND: gl.constexpr = False):
    """Iterations [lo, hi), two per trip when PAIRED.

    P is loop-carried; were it rewritten every trip, the register allocator
    would put the next P in the registers the in-flight P V wgmma still
    reads and so wait for P V before the softmax.  With two steps per trip
    the step that runs under an in-flight read of the carried P writes a
    fresh P, and the overlap survives."""
    if not PAIRED:
        for j in range(lo, hi):
            acc, p, m_i, l_i = _attn_fwd_step(j, g0, t0, q, k_bufs, v_bufs, q1, k1_bufs, k_ready, k_empty, v_ready,
                                              v_empty, turn,
                                              acc, p, m_i, l_i, rows, N_K, qk_scale, causal_shift, window_lo,
                                              CONSUMER, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, QK1,
                                              MASKED, IS_CAUSAL, PINGPONG, HAS_WINDOW, drop,
                                              HAS_DROPOUT, mtile, HAS_MASK, ROW_BOUND)
        return acc, p, m_i, l_i
    n = gl.maximum(hi - lo, 0)
    for j in range(lo, lo + n - 1, 2):
        acc, p_odd, m_i, l_i = _attn_fwd_step(j, g0, t0, q, k_bufs, v_bufs, q1, k1_bufs, k_ready, k_empty, v_ready,
                                              v_empty, turn,
                                              acc, p, m_i, l_i, rows, N_K, qk_scale, causal_shift, window_lo,
                                              CONSUMER, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, QK1,
                                              MASKED, IS_CAUSAL, PINGPONG, HAS_WINDOW, drop,
                                              HAS_DROPOUT, mtile, HAS_MASK, ROW_BOUND)
        acc, p, m_i, l_i = _attn_fwd_step(j + 1, g0, t0, q, k_bufs, v_bufs, q1, k1_bufs, k_ready, k_empty, v_ready,
                                          v_empty, turn,
                                          acc, p_odd, m_i, l_i, rows, N_K, qk_scale, causal_shift, window_lo,
                                          CONSUMER, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, QK1,
                                          MASKED, IS_CAUSAL, PINGPONG, HAS_WINDOW, drop,
                                          HAS_DROPOUT, mtile, HAS_MASK, ROW_BOUND)
    if n % 2 == 1:
        acc, p, m_i, l_i = _attn_fwd_step(lo + n - 1, g0, t0, q, k_bufs, v_bufs, q1, k1_bufs, k_ready, k_empty,
                                          v_ready, v_empty,
                                          turn, acc, p, m_i, l_i, rows, N_K, qk_scale, causal_shift, window_lo,
                                          CONSUMER, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, QK1,
                                          MASKED, IS_CAUSAL, PINGPONG, HAS_WINDOW, drop,
                                          HAS_DROPOUT, mtile, HAS_MASK, ROW_BOUND)
    return acc, p, m_i, l_i


@gluon.jit
def _attn_fwd_skip(lo, hi, g0, t0, k_ready, k_empty, v_ready, v_empty, turn,
                   CONSUMER: gl.constexpr, NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr,
                   PINGPONG: gl.constexpr, HEAD: gl.constexpr):
    """Release K/V tiles [lo, hi) unread and pass their ping-pong turns on.

    Every warpgroup still takes each ring use (the empty barriers count one
    arrival per consumer) and one turn per key tile plus one per work tile
    (the turn barriers' phases); it waits for each load first, so that its
    arrival counts toward that use's release and not an earlier one.

    The tail (the tiles past this warpgroup's diagonal) runs after the last
    P V has completed and released its V slot: the loads waited for here
    never need a slot this warpgroup still holds; tile j's turn is
    t0 + j + 1 (the last P V took t0 + n_own).  The HEAD (with a window, the
    tiles before this warpgroup's first key) runs before its first S_j,
    holding no slot; tile j's turn is t0 + j, passed before the wait for
    the load: with one stage, loading V_j needs V_{j-1} released by every
    warpgroup, which one that reads it does in its GEMM turn t0 + j."""
    for j in range(lo, hi):
        gk = g0 + j
        sk = gk % NUM_STAGES
        if PINGPONG and HEAD:
            mbarrier.wait(turn.index(CONSUMER), (t0 + j) & 1)
            mbarrier.arrive(turn.index((CONSUMER + 1) % NUM_CONSUMERS))
        mbarrier.wait(k_ready.index(sk), (gk // NUM_STAGES) & 1)
        mbarrier.arrive(k_empty.index(sk))
        mbarrier.wait(v_ready.index(sk), (gk // NUM_STAGES) & 1)
        mbarrier.arrive(v_empty.index(sk))
        if PINGPONG and not HEAD:
            mbarrier.wait(turn.index(CONSUMER), (t0 + j + 1) & 1)
            mbarrier.arrive(turn.index((CONSUMER + 1) % NUM_CONSUMERS))


@gluon.jit
def _attn_fwd_tile(o_desc, LSE, q_smem, k_bufs, v_bufs, q1_smem, k1_bufs,
                   q_ready, k_ready, k_empty, v_ready, v_empty, turn,
                   off_b, off_hq, stride_lz, stride_lh, start_m, lo_tile, n_tiles, g0, t0, q_phase,
                   N_Q, N_K, qk_scale, causal_shift, window_lo,
                   CONSUMER: gl.constexpr, NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, QK1: gl.constexpr,
                   IS_CAUSAL: gl.constexpr, PINGPONG: gl.constexpr, PAIRED: gl.constexpr,
                   SKIP_TILES: gl.constexpr, HAS_WINDOW: gl.constexpr, drop, HAS_DROPOUT: gl.constexpr,
                   mask=None, HAS_MASK: gl.constexpr = False, ROW_BOUND: gl.constexpr = False,
                   packed=None, IS_VARLEN: gl.constexpr = False):
    """One work tile of a consumer warpgroup: rows [start_m + CONSUMER *
    BLOCK_M, + BLOCK_M), key tiles [lo_tile, n_tiles) (_key_start).  g0:
    K/V ring uses and t0: ping-pong turns of this warpgroup before the tile
    (they continue from tile to tile); q_phase: the parity of this tile's Q
    load.  HEAD_DIM: the width of V, O and Q / K's first column chunk; QK1 > 0:
    Q / K's second chunk (q1_smem, k1_bufs; split Q K^T), else none (q1_smem
    and k1_bufs are None).  drop: the kernel's dropout arguments (HAS_DROPOUT
    only); mask: its boolean mask's (HAS_MASK only); packed: (O, stride_om,
    stride_oh, q_row0) of a packed sequence (IS_VARLEN only: its rows start
    at q_row0 of batch entry 0; LSE already points at its first row)."""
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                      instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                      instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)

    row0 = start_m + CONSUMER * BLOCK_M
    rows = row0 + gl.arange(0, BLOCK_M, layout=row_layout)
    if HAS_DROPOUT:
        drop = _dropout_tile(drop, off_b, off_hq, row0)
    if HAS_MASK:
        mtile = _mask_tile(mask, off_b, off_hq, rows, N_Q)
    else:
        mtile = None
    # Tiles [0, n_full) are seen whole on the right by every row of this
    # warpgroup; the rest (the diagonal, the ragged end of K) are masked.
    # SKIP_TILES: tiles [n_own, n_tiles) lie wholly above this warpgroup's
    # diagonal (the work tile's n_tiles is set by its last warpgroup): they
    # are released unread (_attn_fwd_skip), at d = 64 (192-row work tiles,
    # 128-key tiles) about 5% of the tiles at N = 2k, 10% at 1k.
    if IS_CAUSAL:
        n_full = gl.minimum(gl.maximum(row0 + causal_shift + 1, 0), N_K) // BLOCK_N
    else:
        n_full = N_K // BLOCK_N
    n_own = _own_tiles(row0, N_K, lo_tile, n_tiles, causal_shift, BLOCK_M, BLOCK_N, IS_CAUSAL, SKIP_TILES)
    n_full = gl.minimum(n_full, n_own)
    # With a window (row i sees keys j >= i + window_lo) the work tile's key
    # tiles are [lo_tile, n_tiles) and its ring uses and turns count from
    # lo_tile: g0 and t0 are moved back by lo_tile, so that key tile j is
    # still use g0 + j and takes turn t0 + j below.  This warpgroup starts
    # at tile first: its first row's first key (the smallest bound) with
    # SKIP_TILES, the tiles [lo_tile, first) lying wholly before its window
    # are released unread; without, lo_tile (those tiles are computed and
    # masked away).  Tiles before full_lo hold keys left of its last row's
    # bound (the largest) and are masked too: [first, full_lo) masked,
    # [full_lo, n_full) whole, [n_full, n_own) masked.
    if HAS_WINDOW:
        g0 = g0 - lo_tile
        t0 = t0 - lo_tile
        if SKIP_TILES:
            first = gl.minimum(gl.maximum(gl.maximum(row0 + window_lo, 0) // BLOCK_N, lo_tile), n_own - 1)
        else:
            first = lo_tile
        full_lo = gl.cdiv(gl.maximum(row0 + BLOCK_M - 1 + window_lo, 0), BLOCK_N)
        full_lo = gl.minimum(gl.maximum(full_lo, first + 1), n_own)
    else:
        first = 0

    q = q_smem.index(CONSUMER)
    if QK1 > 0:
        q1 = q1_smem.index(CONSUMER)
    else:
        q1 = q1_smem
    mbarrier.wait(q_ready.index(CONSUMER), q_phase)
    if HAS_WINDOW and SKIP_TILES:
        _attn_fwd_skip(lo_tile, first, g0, t0, k_ready, k_empty, v_ready, v_empty, turn,
                       CONSUMER, NUM_CONSUMERS, NUM_STAGES, PINGPONG, True)

    # The first tile, always masked (harmless when it is full): S and its softmax.
    if HAS_MASK:
        mbits = _mask_load(mtile, first * BLOCK_N, N_K, s_layout, BLOCK_N, True)
    else:
        mbits = None
    g_first = g0 + first
    s0 = g_first % NUM_STAGES
    mbarrier.wait(k_ready.index(s0), (g_first // NUM_STAGES) & 1)
    if PINGPONG:
        mbarrier.wait(turn.index(CONSUMER), (t0 + first) & 1)
    s_tok = warpgroup_mma(q, k_bufs.index(s0).permute((1, 0)),
                          gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
    if QK1 > 0:
        s_tok = warpgroup_mma(q1, k1_bufs.index(s0).permute((1, 0)), s_tok, is_async=True)
    if PINGPONG:
        mbarrier.arrive(turn.index((CONSUMER + 1) % NUM_CONSUMERS))
    s = warpgroup_mma_wait(0, deps=(s_tok,))
    mbarrier.arrive(k_empty.index(s0))
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_layout)
    l_i = gl.zeros([BLOCK_M], gl.float32, row_layout)
    p0, alpha, m_i, l_i = _softmax_update(s, m_i, l_i, rows, first * BLOCK_N, N_K, qk_scale, causal_shift,
                                          window_lo, True, IS_CAUSAL, HAS_WINDOW, mbits, HAS_MASK, ROW_BOUND)
    if HAS_DROPOUT:
        p0 = _dropout_drop(p0, drop, first * BLOCK_N, BLOCK_M, BLOCK_N)
    p = gl.convert_layout(p0.to(dtype), p_layout)
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)

    if HAS_WINDOW:
        # Two passes over one masked and one unmasked loop: the left edge's
        # masked tiles [first + 1, full_lo) and the whole ones [full_lo,
        # n_full), then the right edge's masked tiles [n_full, n_own) (and
        # no whole one).  A third loop instance (a masked loop before the
        # unmasked one, as the portable kernel has) made ptxas carry P in
        # other registers than the wgmma's (32 PRMT more per unmasked step
        # at d = 128) and spill (compile_check --window).
        n_full = gl.maximum(n_full, full_lo)
        for edge in range(2):
            masked_lo = first + 1 if edge == 0 else n_full
            masked_hi = full_lo if edge == 0 else n_own
            whole_hi = n_full if edge == 0 else full_lo
            acc, p, m_i, l_i = _attn_fwd_loop(masked_lo, masked_hi, g0, t0, q, k_bufs, v_bufs, q1, k1_bufs, k_ready,
                                              k_empty,
                                              v_ready, v_empty, turn, acc, p, m_i, l_i, rows, N_K, qk_scale,
                                              causal_shift, window_lo, CONSUMER, NUM_CONSUMERS, NUM_STAGES,
                                              BLOCK_M, BLOCK_N, QK1, True, IS_CAUSAL, PINGPONG, PAIRED, HAS_WINDOW, drop,
                                              HAS_DROPOUT, mtile, HAS_MASK, ROW_BOUND)
            acc, p, m_i, l_i = _attn_fwd_loop(full_lo, whole_hi, g0, t0, q, k_bufs, v_bufs, q1, k1_bufs, k_ready,
                                              k_empty,
                                              v_ready, v_empty, turn, acc, p, m_i, l_i, rows, N_K, qk_scale,
                                              causal_shift, window_lo, CONSUMER, NUM_CONSUMERS, NUM_STAGES,
                                              BLOCK_M, BLOCK_N, QK1, False, IS_CAUSAL, PINGPONG, PAIRED, HAS_WINDOW, drop,
                                              HAS_DROPOUT, mtile, HAS_MASK, ROW_BOUND)
    else:
        acc, p, m_i, l_i = _attn_fwd_loop(1, n_full, g0, t0, q, k_bufs, v_bufs, q1, k1_bufs, k_ready, k_empty,
                                          v_ready, v_empty,
                                          turn, acc, p, m_i, l_i, rows, N_K, qk_scale, causal_shift, window_lo,
                                          CONSUMER, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, QK1,
                                          False, IS_CAUSAL, PINGPONG, PAIRED, HAS_WINDOW, drop,
                                          HAS_DROPOUT, mtile, HAS_MASK, ROW_BOUND)
        acc, p, m_i, l_i = _attn_fwd_loop(gl.maximum(n_full, 1), n_own, g0, t0, q, k_bufs, v_bufs, q1, k1_bufs, k_ready,
                                          k_empty, v_ready, v_empty, turn, acc, p, m_i, l_i, rows, N_K, qk_scale,
                                          causal_shift, window_lo, CONSUMER, NUM_CONSUMERS, NUM_STAGES, BLOCK_M,
                                          BLOCK_N, QK1, True, IS_CAUSAL, PINGPONG, PAIRED, HAS_WINDOW, drop,
                                          HAS_DROPOUT, mtile, HAS_MASK, ROW_BOUND)

    # Last tile's P V.
    sv = (g0 + n_own - 1) % NUM_STAGES
    mbarrier.wait(v_ready.index(sv), ((g0 + n_own - 1) // NUM_STAGES) & 1)
    if IS_VARLEN == 2:
        # Only the last tile can reach past the sequence's keys: its V rows
        # from N_K on (the next sequence's) become 0 (K's need nothing: their
        # scores are replaced by -inf above).  The tile is past N_K - BLOCK_N
        # only when n_own is the work tile's n_tiles, and n_own grows with
        # the consumer's rows, so the last consumer reaches it whenever any
        # does: it zeroes the slot alone, and the consumers that reach it
        # (n_reach, the same count in each) meet at one named barrier after
        # its stores and fence, before any of them issues P V.  No other
        # consumer writes the slot (session 72: when each zeroed it itself,
        # racecheck reported the consumers' stores racing).
        tail = N_K - (n_own - 1) * BLOCK_N
        if tail < BLOCK_N:
            n_reach = gl.to_tensor(0)
            for c in gl.static_range(NUM_CONSUMERS):
                c_own = _own_tiles(start_m + c * BLOCK_M, N_K, lo_tile, n_tiles, causal_shift, BLOCK_M, BLOCK_N,
                                   IS_CAUSAL, SKIP_TILES)
                n_reach += (c_own == n_own).to(gl.int32)
            if CONSUMER == NUM_CONSUMERS - 1:
                _zero_rows_from_call(v_bufs.index(sv), tail)
            if n_reach > 1:
                _named_bar_at(_VARLEN_TAIL_SYNC, n_reach * 128)
            else:
                cta_barrier()
    if PINGPONG:
        mbarrier.wait(turn.index(CONSUMER), (t0 + n_own) & 1)
    o_tok = warpgroup_mma(p, v_bufs.index(sv), acc, is_async=True)
    if PINGPONG:
        mbarrier.arrive(turn.index((CONSUMER + 1) % NUM_CONSUMERS))
    acc, p = warpgroup_mma_wait(0, deps=(o_tok, p))
    mbarrier.arrive(v_empty.index(sv))
    if IS_CAUSAL and SKIP_TILES:
        _attn_fwd_skip(n_own, n_tiles, g0, t0, k_ready, k_empty, v_ready, v_empty, turn,
                       CONSUMER, NUM_CONSUMERS, NUM_STAGES, PINGPONG, False)

    # Rows that saw no key: l = 0 -> O = 0 and LSE = -inf.
    empty = l_i == 0.0
    l_safe = gl.where(empty, 1.0, l_i)
    lse2 = gl.where(empty, float("-inf"), m_i * qk_scale + gl.log2(l_safe))
    if HAS_DROPOUT:
        # Kept probabilities are scaled by the inverse keep rate here, once
        # per row (as kernels/fwd.py): P V summed the unscaled kept ones.
        inv_l = gl.convert_layout(_dropout_scale(drop) / l_safe, gl.SliceLayout(1, o_layout))
    else:
        inv_l = gl.convert_layout(1.0 / l_safe, gl.SliceLayout(1, o_layout))
    o_tile = acc * gl.expand_dims(inv_l, 1)
    lse_ptrs = LSE + off_b.to(gl.int64) * stride_lz + off_hq.to(gl.int64) * stride_lh + rows
    gl.store(lse_ptrs, lse2, mask=rows < N_Q)

    # Q's buffer is free now (the last wgmma reading it has completed): stage
    # O there and store it with TMA, which clips rows past N_Q.  A packed
    # sequence's rows past N_Q are the next sequence's: a block that reaches
    # past them stores its rows < N_Q from registers instead.
    if IS_VARLEN:
        O, stride_om, stride_oh, q_row0 = packed
        if row0 + BLOCK_M <= N_Q:
            _store_tile_tma(o_tile, q, o_desc, 0, off_hq, q_row0 + row0, 0)
            tma.store_wait(0)
        else:
            _store_rows(o_tile, O, stride_om, stride_oh, off_hq, q_row0, row0, N_Q, o_layout, BLOCK_M, HEAD_DIM)
    else:
        _store_tile_tma(o_tile, q, o_desc, off_b, off_hq, row0, 0)
        tma.store_wait(0)


@gluon.jit
def _attn_fwd_compute(o_desc, LSE, q_smem, k_bufs, v_bufs, q1_smem, k1_bufs,
                      q_ready, q_empty, k_ready, k_empty, v_ready, v_empty, turn, tile_idx, tile_ready,
                      off_b, off_hq, start_m, n_tiles,
                      H_Q, GROUP_SIZE, n_m, n_bh, stride_lz, stride_lh, N_Q, N_K, qk_scale, causal_shift, window_lo,
                      CONSUMER: gl.constexpr, NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr,
                      BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, QK1: gl.constexpr,
                      IS_CAUSAL: gl.constexpr, PINGPONG: gl.constexpr, PAIRED: gl.constexpr, SKIP_TILES: gl.constexpr,
                      PERSISTENT: gl.constexpr, HEADS_FIRST: gl.constexpr, M_BAND: gl.constexpr,
                      HEAD_SECTION: gl.constexpr, DYNAMIC: gl.constexpr, HAS_WINDOW: gl.constexpr, drop,
                      HAS_DROPOUT: gl.constexpr,
                      mask, HAS_MASK: gl.constexpr, ROW_BOUND: gl.constexpr, packed, IS_VARLEN: gl.constexpr):
    """Consumer warpgroup: the program's one block, or when PERSISTENT each
    of its work tiles in the producer's order (with DYNAMIC, as the producer
    publishes them: the consumers never touch the tile counter).  IS_VARLEN:
    packed = (O, stride_om, stride_oh, q_row0), the sequence's rows from
    q_row0 on; a block past its N_Q rows does nothing."""
    if DYNAMIC:
        pid = gl.program_id(0)
        n_work = n_m * n_bh
        idx_layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        t = pid
        i = 0
        g = 0
        while t < n_work:
            pid_m, pid_bh = _dynamic_tile(t, n_m, n_bh, HEADS_FIRST, M_BAND, HEAD_SECTION)
            t_b, t_hq, t_hkv, t_m, t_n = _tile_coords(pid_m, pid_bh, H_Q, GROUP_SIZE, N_Q, N_K, causal_shift,
                                                      BLOCK_M * NUM_CONSUMERS, BLOCK_N, IS_CAUSAL)
            t_lo = _key_start(t_m, t_n, window_lo, BLOCK_N, HAS_WINDOW)
            _attn_fwd_tile(o_desc, LSE, q_smem, k_bufs, v_bufs, q1_smem, k1_bufs, q_ready, k_ready, k_empty, v_ready,
                           v_empty, turn,
                           t_b, t_hq, stride_lz, stride_lh, t_m, t_lo, t_n, g, g + i, i & 1,
                           N_Q, N_K, qk_scale, causal_shift, window_lo, CONSUMER, NUM_CONSUMERS, NUM_STAGES,
                           BLOCK_M, BLOCK_N, HEAD_DIM, QK1, IS_CAUSAL, PINGPONG, PAIRED, SKIP_TILES, HAS_WINDOW, drop,
                           HAS_DROPOUT, mask, HAS_MASK, ROW_BOUND)
            mbarrier.arrive(q_empty.index(CONSUMER))
            g += t_n - t_lo
            # The next tile, as the producer claimed it (published once per
            # iteration: parity (i // 2) & 1 of slot i % 2).
            mbarrier.wait(tile_ready.index(i % 2), (i // 2) & 1)
            t = gl.max(tile_idx.index(i % 2).load(idx_layout), 0)
            i += 1
    elif PERSISTENT:
        pid = gl.program_id(0)
        n_programs = gl.num_programs(0)
        g = 0
        for i in range(snake_count(pid, n_programs, n_m * n_bh)):
            pid_m, pid_bh = _work_tile(i, pid, n_programs, n_m, n_bh, HEADS_FIRST, M_BAND, HEAD_SECTION)
            t_b, t_hq, t_hkv, t_m, t_n = _tile_coords(pid_m, pid_bh, H_Q, GROUP_SIZE, N_Q, N_K, causal_shift,
                                                      BLOCK_M * NUM_CONSUMERS, BLOCK_N, IS_CAUSAL)
            t_lo = _key_start(t_m, t_n, window_lo, BLOCK_N, HAS_WINDOW)
            # A tile takes t_n - t_lo ring uses and one turn more (its first
            # S, then a GEMM pair per further key tile, the last P V alone),
            # so g + i turns came before.
            _attn_fwd_tile(o_desc, LSE, q_smem, k_bufs, v_bufs, q1_smem, k1_bufs, q_ready, k_ready, k_empty, v_ready,
                           v_empty, turn,
                           t_b, t_hq, stride_lz, stride_lh, t_m, t_lo, t_n, g, g + i, i & 1,
                           N_Q, N_K, qk_scale, causal_shift, window_lo, CONSUMER, NUM_CONSUMERS, NUM_STAGES,
                           BLOCK_M, BLOCK_N, HEAD_DIM, QK1, IS_CAUSAL, PINGPONG, PAIRED, SKIP_TILES, HAS_WINDOW, drop,
                           HAS_DROPOUT, mask, HAS_MASK, ROW_BOUND)
            # O has left this consumer's Q buffer (store_wait): the producer
            # may load the next tile's Q there.
            mbarrier.arrive(q_empty.index(CONSUMER))
            g += t_n - t_lo
    elif IS_VARLEN:
        if start_m < N_Q:
            lo_tile = _key_start(start_m, n_tiles, window_lo, BLOCK_N, HAS_WINDOW)
            _attn_fwd_tile(o_desc, LSE + packed[3], q_smem, k_bufs, v_bufs, q1_smem, k1_bufs, q_ready, k_ready,
                           k_empty, v_ready, v_empty, turn,
                           off_b, off_hq, stride_lz, stride_lh, start_m, lo_tile, n_tiles, 0, 0, 0,
                           N_Q, N_K, qk_scale, causal_shift, window_lo, CONSUMER, NUM_CONSUMERS, NUM_STAGES,
                           BLOCK_M, BLOCK_N, HEAD_DIM, QK1, IS_CAUSAL, PINGPONG, PAIRED, SKIP_TILES, HAS_WINDOW, drop,
                           HAS_DROPOUT, mask, HAS_MASK, ROW_BOUND, packed, IS_VARLEN)
    else:
        lo_tile = _key_start(start_m, n_tiles, window_lo, BLOCK_N, HAS_WINDOW)
        _attn_fwd_tile(o_desc, LSE, q_smem, k_bufs, v_bufs, q1_smem, k1_bufs, q_ready, k_ready, k_empty, v_ready,
                       v_empty, turn,
                       off_b, off_hq, stride_lz, stride_lh, start_m, lo_tile, n_tiles, 0, 0, 0,
                       N_Q, N_K, qk_scale, causal_shift, window_lo, CONSUMER, NUM_CONSUMERS, NUM_STAGES,
                       BLOCK_M, BLOCK_N, HEAD_DIM, QK1, IS_CAUSAL, PINGPONG, PAIRED, SKIP_TILES, HAS_WINDOW, drop,
                       HAS_DROPOUT, mask, HAS_MASK, ROW_BOUND)


@gluon.jit(do_not_specialize=["stride_lz", "stride_lh", "BATCH", "H_Q", "N_Q", "N_K", "GROUP_SIZE", "causal_shift",
                              "window_lo", "philox_offset", "dropout_thresh", "RNG_ROWS", "RNG_COLS",
                              "stride_om", "stride_oh"])
def _attn_fwd_hopper(
    # descriptors (rank 4 over (B, H, N, d)) and pointers; q1_desc, k1_desc:
    # the second column chunk of Q and K when HEAD_DIM != HEAD_DIM_V (split
    # Q K^T), else None
    q_desc, k_desc, v_desc, o_desc, q1_desc, k1_desc, LSE,
    # strides
    stride_lz, stride_lh,
    # shapes
    BATCH, H_Q, N_Q, N_K, GROUP_SIZE,
    # scalars
    qk_scale, causal_shift,
    # int32 tile counter, zero at launch (DYNAMIC only; else any pointer, unused)
    TILE_COUNTER,
    # HAS_WINDOW only: row i sees only keys j >= i + window_lo (a left window bound)
    window_lo,
    # HAS_DROPOUT only: the Philox seed ((1,) int64), the counter offset, the
    # 16-bit threshold, the scale of kept probabilities and the counters'
    # row / column strides (kernels/score.py; else any pointer, unused)
    SEED, philox_offset, dropout_thresh, dropout_scale, RNG_ROWS, RNG_COLS,
    # HAS_MASK only: the boolean mask as bytes (nonzero = attend) of score
    # (b, h, i, j) at MASK + b * stride_mz + h * stride_mh + i * stride_mm + j,
    # strides 0 on broadcast dims (else any pointer, unused)
    MASK, stride_mz, stride_mh, stride_mm,
    # IS_VARLEN only: a packed batch (BATCH sequences in batch entry 0 of the
    # descriptors, N_Q / N_K their longest lengths): sequence b's queries are
    # rows [CU_SEQLENS_Q[b], CU_SEQLENS_Q[b + 1]), its keys likewise, and O
    # (16-bit, rows stride_om, heads stride_oh) takes the rows of a block
    # that reaches past its sequence (else any pointer and 0, unused)
    CU_SEQLENS_Q, CU_SEQLENS_K, O, stride_om, stride_oh,
    # meta-parameters
    HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
    NUM_STAGES: gl.constexpr, NUM_CONSUMERS: gl.constexpr, IS_CAUSAL: gl.constexpr,
    PINGPONG: gl.constexpr, PAIRED: gl.constexpr, HEADS_FIRST: gl.constexpr, CONSUMER_REGS: gl.constexpr,
    PERSISTENT: gl.constexpr, DYNAMIC: gl.constexpr, SKIP_TILES: gl.constexpr, M_BAND: gl.constexpr,
    HAS_WINDOW: gl.constexpr, HEAD_DIM_V: gl.constexpr, HAS_DROPOUT: gl.constexpr = False,
    HAS_MASK: gl.constexpr = False, HEAD_SECTION: gl.constexpr = 0,
    ROW_BOUND: gl.constexpr = False, IS_VARLEN: gl.constexpr = False,
):
    ROWS: gl.constexpr = BLOCK_M * NUM_CONSUMERS
    # Split Q K^T (d = 192, dv = 128): Q and K are held as two column chunks,
    # HEAD_DIM_V (the width of V and O, whose buffer Q's first chunk is) and
    # QK1 = HEAD_DIM - HEAD_DIM_V, each a power of two; S = Q0 K0^T + Q1 K1^T.
    # With HEAD_DIM == HEAD_DIM_V, QK1 = 0: the kernel of before.
    QK1: gl.constexpr = HEAD_DIM - HEAD_DIM_V
    if PERSISTENT:
        gl.static_assert(not IS_VARLEN, "packed batches run on the grid of one program per block")
        # A 1-D grid of at most one program per SM; each program loops over
        # the work tiles that _work_tile deals it (in both partitions).
        n_m = gl.cdiv(N_Q, ROWS)
        n_bh = BATCH * H_Q
        off_b = 0
        off_hq = 0
        off_hkv = 0
        start_m = 0
        n_tiles = 0
        q_row0: gl.constexpr = 0  # (constexpr: no value for the partitions to capture)
        k_row0: gl.constexpr = 0
    else:
        if HEADS_FIRST:
            # Heads vary fastest and the longest (bottom) query blocks go first:
            # the causal schedule's long tiles do not end up in the last wave.
            pid_bh = gl.program_id(0)
            pid_m = gl.num_programs(1) - 1 - gl.program_id(1)
        else:
            pid_m = gl.program_id(0)
            pid_bh = gl.program_id(1)
        if IS_VARLEN:
            # Packed batch: this program's sequence, its lengths and start
            # rows; the diagonal is bottom-right per sequence (shift n_k - n_q),
            # as is the window's left bound (window_lo holds -left, at least
            # -(longest n_q + n_k): the sum stays in int32; clamped as
            # lower_diagonal does).  Blocks past the sequence's rows do nothing
            # (the grid is sized by the longest one).
            q_row0, N_Q, k_row0, N_K, causal_shift, window_lo = packed_sequence(
                CU_SEQLENS_Q, CU_SEQLENS_K, pid_bh // H_Q, window_lo)
        else:
            q_row0: gl.constexpr = 0  # (constexpr: no value for the partitions to capture)
            k_row0: gl.constexpr = 0
        off_b, off_hq, off_hkv, start_m, n_tiles = _tile_coords(pid_m, pid_bh, H_Q, GROUP_SIZE, N_Q, N_K,
                                                                causal_shift, ROWS, BLOCK_N, IS_CAUSAL)
        n_m = 0
        n_bh = 0

    dtype: gl.constexpr = q_desc.dtype
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, HEAD_DIM_V], dtype)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_DIM_V], dtype)
    q_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, BLOCK_M, HEAD_DIM_V], q_layout)
    k_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_DIM_V], kv_layout)
    v_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_DIM_V], kv_layout)
    if QK1 > 0:
        gl.static_assert(QK1 <= HEAD_DIM_V, "split Q K^T: the second chunk is the narrower one")
        q1_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, QK1], dtype)
        k1_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, QK1], dtype)
        q1_smem = gl.allocate_shared_memory(dtype, [NUM_CONSUMERS, BLOCK_M, QK1], q1_layout)
        k1_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, QK1], k1_layout)
    else:  # (constexpr: no value for the partitions to capture)
        q1_smem: gl.constexpr = None
        k1_bufs: gl.constexpr = None

    bar_layout: gl.constexpr = mbarrier.MBarrierLayout()
    q_ready = gl.allocate_shared_memory(gl.int64, [NUM_CONSUMERS, 1], bar_layout)
    q_empty = gl.allocate_shared_memory(gl.int64, [NUM_CONSUMERS, 1], bar_layout)
    turn = gl.allocate_shared_memory(gl.int64, [NUM_CONSUMERS, 1], bar_layout)
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    k_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    v_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    for c in gl.static_range(NUM_CONSUMERS):
        mbarrier.init(q_ready.index(c), count=1)
        mbarrier.init(q_empty.index(c), count=1)
        mbarrier.init(turn.index(c), count=1)
    for s in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(s), count=1)
        mbarrier.init(v_ready.index(s), count=1)
        # Each consumer warpgroup releases every slot once.
        mbarrier.init(k_empty.index(s), count=NUM_CONSUMERS)
        mbarrier.init(v_empty.index(s), count=NUM_CONSUMERS)
    if PINGPONG:
        mbarrier.arrive(turn.index(0))  # consumer 0 issues first
    if DYNAMIC:
        gl.static_assert(PERSISTENT, "DYNAMIC is a schedule of the persistent grid")
        # The next-tile ring: the producer publishes each claimed tile index
        # in slot i % 2 and arrives on tile_ready[i % 2] (count 1).
        tile_idx = gl.allocate_shared_memory(gl.int32, [2, 1], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
        tile_ready = gl.allocate_shared_memory(gl.int64, [2, 1], bar_layout)
        for s in gl.static_range(2):
            mbarrier.init(tile_ready.index(s), count=1)
    else:
        tile_idx = q_ready  # not used
        tile_ready = q_ready

    # Partition arguments are written out inline: in Triton 3.6 a tuple bound
    # to a name (or concatenated) does not keep its constexpr elements constexpr.
    if NUM_CONSUMERS == 1:
        gl.warp_specialize([
            (_attn_fwd_compute, (o_desc, LSE, q_smem, k_bufs, v_bufs, q1_smem, k1_bufs, q_ready, q_empty, k_ready,
                                 k_empty, v_ready,
                                 v_empty, turn, tile_idx, tile_ready, off_b, off_hq, start_m, n_tiles, H_Q,
                                 GROUP_SIZE, n_m, n_bh,
                                 stride_lz, stride_lh, N_Q, N_K, qk_scale, causal_shift, window_lo,
                                 0, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, HEAD_DIM_V, QK1, IS_CAUSAL, PINGPONG,
                                 PAIRED, SKIP_TILES, PERSISTENT, HEADS_FIRST, M_BAND, HEAD_SECTION, DYNAMIC, HAS_WINDOW,
                                 (SEED, philox_offset, dropout_thresh, dropout_scale, H_Q, RNG_ROWS, RNG_COLS),
                                 HAS_DROPOUT, (MASK, stride_mz, stride_mh, stride_mm), HAS_MASK, ROW_BOUND,
                                 (O, stride_om, stride_oh, q_row0), IS_VARLEN)),
            (_attn_fwd_load, (q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q1_desc, k1_desc, q1_smem, k1_bufs,
                              q_ready, q_empty, k_ready, k_empty,
                              v_ready, v_empty, tile_idx, tile_ready, TILE_COUNTER, off_b, off_hq, off_hkv, start_m,
                              n_tiles, H_Q, GROUP_SIZE, N_Q, N_K, causal_shift, window_lo, n_m, n_bh, q_row0, k_row0,
                              BLOCK_M, BLOCK_N, HEAD_DIM_V, QK1, NUM_CONSUMERS, NUM_STAGES, IS_CAUSAL,
                              PERSISTENT, HEADS_FIRST, M_BAND, HEAD_SECTION, DYNAMIC, HAS_WINDOW, IS_VARLEN)),
        ], [1], [24])
    elif NUM_CONSUMERS == 2:
        gl.warp_specialize([
            (_attn_fwd_compute, (o_desc, LSE, q_smem, k_bufs, v_bufs, q1_smem, k1_bufs, q_ready, q_empty, k_ready,
                                 k_empty, v_ready,
                                 v_empty, turn, tile_idx, tile_ready, off_b, off_hq, start_m, n_tiles, H_Q,
                                 GROUP_SIZE, n_m, n_bh,
                                 stride_lz, stride_lh, N_Q, N_K, qk_scale, causal_shift, window_lo,
                                 0, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, HEAD_DIM_V, QK1, IS_CAUSAL, PINGPONG,
                                 PAIRED, SKIP_TILES, PERSISTENT, HEADS_FIRST, M_BAND, HEAD_SECTION, DYNAMIC, HAS_WINDOW,
                                 (SEED, philox_offset, dropout_thresh, dropout_scale, H_Q, RNG_ROWS, RNG_COLS),
                                 HAS_DROPOUT, (MASK, stride_mz, stride_mh, stride_mm), HAS_MASK, ROW_BOUND,
                                 (O, stride_om, stride_oh, q_row0), IS_VARLEN)),
            (_attn_fwd_compute, (o_desc, LSE, q_smem, k_bufs, v_bufs, q1_smem, k1_bufs, q_ready, q_empty, k_ready,
                                 k_empty, v_ready,
                                 v_empty, turn, tile_idx, tile_ready, off_b, off_hq, start_m, n_tiles, H_Q,
                                 GROUP_SIZE, n_m, n_bh,
                                 stride_lz, stride_lh, N_Q, N_K, qk_scale, causal_shift, window_lo,
                                 1, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, HEAD_DIM_V, QK1, IS_CAUSAL, PINGPONG,
                                 PAIRED, SKIP_TILES, PERSISTENT, HEADS_FIRST, M_BAND, HEAD_SECTION, DYNAMIC, HAS_WINDOW,
                                 (SEED, philox_offset, dropout_thresh, dropout_scale, H_Q, RNG_ROWS, RNG_COLS),
                                 HAS_DROPOUT, (MASK, stride_mz, stride_mh, stride_mm), HAS_MASK, ROW_BOUND,
                                 (O, stride_om, stride_oh, q_row0), IS_VARLEN)),
            (_attn_fwd_load, (q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q1_desc, k1_desc, q1_smem, k1_bufs,
                              q_ready, q_empty, k_ready, k_empty,
                              v_ready, v_empty, tile_idx, tile_ready, TILE_COUNTER, off_b, off_hq, off_hkv, start_m,
                              n_tiles, H_Q, GROUP_SIZE, N_Q, N_K, causal_shift, window_lo, n_m, n_bh, q_row0, k_row0,
                              BLOCK_M, BLOCK_N, HEAD_DIM_V, QK1, NUM_CONSUMERS, NUM_STAGES, IS_CAUSAL,
                              PERSISTENT, HEADS_FIRST, M_BAND, HEAD_SECTION, DYNAMIC, HAS_WINDOW, IS_VARLEN)),
        ], [4, 1], [CONSUMER_REGS, 24])
    else:
        gl.static_assert(NUM_CONSUMERS == 3, "1, 2 or 3 consumer warpgroups")
        gl.warp_specialize([
            (_attn_fwd_compute, (o_desc, LSE, q_smem, k_bufs, v_bufs, q1_smem, k1_bufs, q_ready, q_empty, k_ready,
                                 k_empty, v_ready,
                                 v_empty, turn, tile_idx, tile_ready, off_b, off_hq, start_m, n_tiles, H_Q,
                                 GROUP_SIZE, n_m, n_bh,
                                 stride_lz, stride_lh, N_Q, N_K, qk_scale, causal_shift, window_lo,
                                 0, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, HEAD_DIM_V, QK1, IS_CAUSAL, PINGPONG,
                                 PAIRED, SKIP_TILES, PERSISTENT, HEADS_FIRST, M_BAND, HEAD_SECTION, DYNAMIC, HAS_WINDOW,
                                 (SEED, philox_offset, dropout_thresh, dropout_scale, H_Q, RNG_ROWS, RNG_COLS),
                                 HAS_DROPOUT, (MASK, stride_mz, stride_mh, stride_mm), HAS_MASK, ROW_BOUND,
                                 (O, stride_om, stride_oh, q_row0), IS_VARLEN)),
            (_attn_fwd_compute, (o_desc, LSE, q_smem, k_bufs, v_bufs, q1_smem, k1_bufs, q_ready, q_empty, k_ready,
                                 k_empty, v_ready,
                                 v_empty, turn, tile_idx, tile_ready, off_b, off_hq, start_m, n_tiles, H_Q,
                                 GROUP_SIZE, n_m, n_bh,
                                 stride_lz, stride_lh, N_Q, N_K, qk_scale, causal_shift, window_lo,
                                 1, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, HEAD_DIM_V, QK1, IS_CAUSAL, PINGPONG,
                                 PAIRED, SKIP_TILES, PERSISTENT, HEADS_FIRST, M_BAND, HEAD_SECTION, DYNAMIC, HAS_WINDOW,
                                 (SEED, philox_offset, dropout_thresh, dropout_scale, H_Q, RNG_ROWS, RNG_COLS),
                                 HAS_DROPOUT, (MASK, stride_mz, stride_mh, stride_mm), HAS_MASK, ROW_BOUND,
                                 (O, stride_om, stride_oh, q_row0), IS_VARLEN)),
            (_attn_fwd_compute, (o_desc, LSE, q_smem, k_bufs, v_bufs, q1_smem, k1_bufs, q_ready, q_empty, k_ready,
                                 k_empty, v_ready,
                                 v_empty, turn, tile_idx, tile_ready, off_b, off_hq, start_m, n_tiles, H_Q,
                                 GROUP_SIZE, n_m, n_bh,
                                 stride_lz, stride_lh, N_Q, N_K, qk_scale, causal_shift, window_lo,
                                 2, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, HEAD_DIM_V, QK1, IS_CAUSAL, PINGPONG,
                                 PAIRED, SKIP_TILES, PERSISTENT, HEADS_FIRST, M_BAND, HEAD_SECTION, DYNAMIC, HAS_WINDOW,
                                 (SEED, philox_offset, dropout_thresh, dropout_scale, H_Q, RNG_ROWS, RNG_COLS),
                                 HAS_DROPOUT, (MASK, stride_mz, stride_mh, stride_mm), HAS_MASK, ROW_BOUND,
                                 (O, stride_om, stride_oh, q_row0), IS_VARLEN)),
            (_attn_fwd_load, (q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q1_desc, k1_desc, q1_smem, k1_bufs,
                              q_ready, q_empty, k_ready, k_empty,
                              v_ready, v_empty, tile_idx, tile_ready, TILE_COUNTER, off_b, off_hq, off_hkv, start_m,
                              n_tiles, H_Q, GROUP_SIZE, N_Q, N_K, causal_shift, window_lo, n_m, n_bh, q_row0, k_row0,
                              BLOCK_M, BLOCK_N, HEAD_DIM_V, QK1, NUM_CONSUMERS, NUM_STAGES, IS_CAUSAL,
                              PERSISTENT, HEADS_FIRST, M_BAND, HEAD_SECTION, DYNAMIC, HAS_WINDOW, IS_VARLEN)),
        ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, 24])


# ---------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------

_GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}

# Per head dim: BLOCK_M (rows per consumer warpgroup), BLOCK_N, NUM_STAGES,
# NUM_CONSUMERS, CONSUMER_REGS, PAIRED.  Shared memory: NUM_CONSUMERS * BLOCK_M
# * d (Q, reused for O) + 2 * NUM_STAGES * BLOCK_N * d (the K/V ring), 16-bit.
# Registers per consumer thread: S (BLOCK_N / 2), O (d / 2), P (BLOCK_N / 4,
# twice when PAIRED) in a 240-register budget with two consumer warpgroups.
# Chosen from the H200 runs in docs/hopper.md: a third stage pays at d = 128;
# at d = 64 three 160-register consumers (192 rows per program) beat two
# PAIRED ones by 1.04-1.16x (session 10, call 4), at d >= 128 PAIRED's second
# P makes ptxas spill.  SKIP_TILES (causal only: each warpgroup releases the
# key tiles past its own diagonal unread): at d = 64, A/B in one process
# (session 12, calls 3-4, three repeats), 1.06x at N = 1k, 1.02-1.05x at 2k,
# 1.01-1.02x at 8k, 0.92-1.01x at 4k (the previous kernel itself varied by
# 8% there); at d = 128 (no tile to skip with shift 0) and d = 256 (3% of the
# tiles at 2k) the extra loop-carried scalars cost uniform registers (UMOVs
# between the QK^T wgmmas): 0.88-0.97x at N = 4k-8k, so off there.
CONFIGS = {
    64: dict(BLOCK_M=64, BLOCK_N=128, NUM_STAGES=3, NUM_CONSUMERS=3, CONSUMER_REGS=160, PAIRED=False,
             SKIP_TILES=True),
    128: dict(BLOCK_M=64, BLOCK_N=128, NUM_STAGES=3, NUM_CONSUMERS=2, CONSUMER_REGS=240, PAIRED=False,
              SKIP_TILES=False),
    256: dict(BLOCK_M=64, BLOCK_N=64, NUM_STAGES=2, NUM_CONSUMERS=2, CONSUMER_REGS=240, PAIRED=False,
              SKIP_TILES=False),
    # DeepSeek MLA (d = 192, dv = 128, HEAD_DIM_V): Q K^T split in 128 + 64
    # columns (two wgmmas into one S), V / O 128 wide.  Shared memory: Q 2 x
    # 64 x 192, K 2 stages x 128 x 192, V 2 x 128 x 128 (16-bit): 208 KiB, so
    # two stages of 128 keys (three fit with 64: the "bn64" probe variant).
    # Registers as at d = 128 with 128-key tiles (S 64, O 64, P 32). Not
    # GPU-validated yet (docs/hopper.md "Split Q K^T").
    192: dict(BLOCK_M=64, BLOCK_N=128, NUM_STAGES=2, NUM_CONSUMERS=2, CONSUMER_REGS=240, PAIRED=False,
              SKIP_TILES=False),
}
# The value head dim that a Q / K head dim of CONFIGS takes where it is not
# d itself: split Q K^T (HEAD_DIM_V < HEAD_DIM; Q and K as HEAD_DIM_V +
# (HEAD_DIM - HEAD_DIM_V) columns, both powers of two).
HEAD_DIM_V = {192: 128}
# Entries of CONFIGS replaced for causal calls (empty: CONFIGS as they are).
# The candidate is d = 64 with two 240-register consumers: three
# 160-register ones spill 108 B in the causal build (20 local loads /
# stores in the masked step's GEMM loop), two none (compile_check --hopper);
# Nsight counted 424-430 thousand local-memory requests per call at d = 64
# causal (docs/performance.md, "Session 17 profile").  Session 10 measured
# two consumers on the persistent grid at 325 TFLOP/s against three's 309 at
# N = 2k, before the dynamic scheduler.  Session 24 (gpu_next_nc2_causal.sh,
# through the cached plans): 0.89-0.97x the three consumers at N 2k-8k
# (1.11x at 1k, a length the portable forward takes), 0.89-1.02x with 16 MiB
# head sections: its rule not met, so none.
CAUSAL_CONFIGS: dict = {}
# Entries of CONFIGS replaced for plain calls (no window, dropout or mask) of
# at most n_max query rows, per (d, causal): (n_max, entries), applied after
# CAUSAL_CONFIGS.  The candidate is d = 64 non-causal at short lengths on two
# 240-register consumers (128 rows per program): three consumers' 192-row
# programs cover N = 1024 in 6 m-blocks of which the last is a third full
# (1152 rows computed for 1024), and session 25's Nsight profile of that row
# (fwd d = 64 full 1k, the forward's one row under FlexAttention, 0.99x) has
# our kernel +20 us over Flex's, whose tiles are 128 rows.  Session 24 timed
# two consumers at causal N = 1k at 1.11x three.  Compile facts (Triton 3.6,
# sm_90, bf16, compile_check --hopper --d 64 --cases full): three consumers
# 6,264 SASS instructions, 12 B spilled (none in the GEMM loops); two 0 B,
# 4,208.  Session 28 (benchmarks/history/gpu_next_short64.sh, rule in its header):
# two consumers read 0.95-0.98x three's TFLOP/s at N 512 / 1k and 0.84-0.88x at
# 1.5k / 2k in both repeats (the rule asked >= 1.02), so it stays empty.
SHORT_CONFIGS: dict = {}
# Head dims whose causal calls build the masked step with ROW_BOUND: the
# bound on a score's key column, c < N_K - start_n and c <= i + causal_shift
# - start_n, as one compare against the row's last visible column (the min
# of the two) instead of two compares and an and.  Compile facts (Triton
# 3.6, sm_90, bf16): the masked step 792 -> 698 SASS instructions at d = 64
# (spills 108 -> 84 B, local loads / stores in the GEMM loops 20 -> 10), 762
# -> 671 at d = 128 (unmasked step 457 / 496); whole causal kernels 7-8%
# shorter at d = 64 / 128 / 192.  d = 128 since session 25
# (benchmarks/history/gpu_next_row_bound.sh, its rule met: 1.017 / 1.010
# geomean; docs/hopper.md "One compare per score in the masked causal step").
ROW_BOUND_DIMS: frozenset = frozenset({128})
# Entries of CONFIGS replaced for calls with a window (HAS_WINDOW; not yet
# measured on a GPU): at d = 64 three 160-register consumers spill 20 local
# loads / stores per masked step with the window's third compare (against
# 10 causal without it), two 240-register ones none (compile_check --window).
WINDOW_CONFIGS = {64: dict(NUM_CONSUMERS=2, CONSUMER_REGS=240)}
# Entries of CONFIGS replaced for calls with dropout (HAS_DROPOUT; not yet
# measured on a GPU), and head dims whose dropout build is declined (the
# portable kernels run): see docs/hopper.md "Dropout".
# d = 64: two 240-register consumers, as for windows: three 160-register
# ones spill 440 / 1,012 B (109 / 305 local loads / stores in the GEMM
# loops, full / causal) with the Philox calls, two none / 24 B (none in the
# loops; compile_check --hopper --dropout).
DROPOUT_CONFIGS: dict = {64: dict(NUM_CONSUMERS=2, CONSUMER_REGS=240)}
# d = 192 (dv = 128, split Q K^T): the two switches were written apart and
# their combination is neither compiled nor tested: declined.
DROPOUT_DECLINE: dict = {192: "dropout with the split Q K^T (d = 192) is not built"}
# Entries of CONFIGS replaced for calls with a boolean mask (HAS_MASK; not
# yet measured on a GPU): see docs/hopper.md "Masks".  d = 64: two
# 240-register consumers, as for windows and dropout (compile_check
# --hopper --mask).
MASK_CONFIGS: dict = {64: dict(NUM_CONSUMERS=2, CONSUMER_REGS=240)}
# Head dims whose mask build is declined (the portable kernel runs).
MASK_DECLINE: dict = {}
# Schedule switches, per causal flag (longest blocks first when causal).
SCHEDULE = {
    False: dict(PINGPONG=True, HEADS_FIRST=False, M_BAND=0),
    True: dict(PINGPONG=True, HEADS_FIRST=True, M_BAND=0),
}
# PERSISTENT per head dim, (not causal, causal): one program per SM looping
# over the work tiles (_work_tile).  On where the H200 measured >= 1.02x at
# both N = 2k and 8k (benchmarks/history/gpu_hopper_persistent.sh, session 10 call 4):
# d = 128 causal 1.03x / 1.13x; elsewhere mixed or below (docs/hopper.md).
PERSISTENT_DEFAULT = {64: (False, False), 128: (False, True), 256: (False, False), 192: (False, False)}
# DYNAMIC per head dim, (not causal, causal): the persistent grid with tiles
# handed out by an atomic counter instead of the static snake (greedy, in the
# longest-first order when causal); DYNAMIC implies PERSISTENT.  On where
# the H200 met the rule of benchmarks/history/gpu_hopper_dynamic.sh (session 11 call
# 1, docs/hopper.md "Dynamic tile scheduler"): d = 64 causal 1.054x / 1.033x
# the default at N = 2k / 8k, d = 128 not causal 1.039x / 1.048x; elsewhere
# below the rule.  Each launch zeroes a fresh int32 counter from the caching
# allocator on the launching stream (one memset before the kernel): stream
# ordered, so concurrent launches on other streams get their own counter,
# and captured into CUDA graphs as a memset node that every replay repeats.
DYNAMIC_DEFAULT = {64: (False, True), 128: (True, True), 256: (False, False), 192: (False, False)}
# SECTION_MB per head dim, (not causal, causal): with the DYNAMIC scheduler
# and HEADS_FIRST, the causal tiles go in sections of (batch, head)s whose
# K and V fill about this many MiB of L2 (HEAD_SECTION; 0: one section of
# all heads, the order of before).  The Nsight profile of session 17 showed
# the causal forward moving 3.7-6.2x cuDNN's DRAM bytes with 10-39% L2 hits
# (docs/performance.md, "Session 17 profile"); tests/hopper_model.py's L2
# model gives 0.01-0.10 -> 0.84-0.88 at N = 2k with 16 MiB sections and the
# dynamic scheduler's balance unchanged, while the static snake loses its
# balance over sections (1.25-1.67x the ideal at d = 128), hence DYNAMIC
# only.  On at d = 128 causal with 16 MiB since session 18 call 1
# (benchmarks/history/gpu_next_sections.sh through the cached plans: geometric mean
# 1.091 / 1.059 over its 5 causal rows in two repeats, none below 0.98; with
# DYNAMIC_DEFAULT[128] causal on; d = 64 gained 1.01-1.02, under the rule's
# 1.03, and stays off).  The override SECTION_MB=n (with DYNAMIC) takes it.
SECTION_MB_DEFAULT: dict = {128: (0, 16)}
SMEM_LIMIT = 227 * 1024
_BROKEN = {}  # compile key -> error text, for configs that failed to build here


def section_heads(mb: int, n_k: int, d: int, dv: int, elem: int, group: int) -> int:
    """(batch, head)s per HEAD_SECTION section: the query heads whose K and V
    (n_k rows of d + dv columns of elem bytes per KV head, shared by group
    query heads) fill mb MiB, rounded down to a power of two (few builds)."""
    heads = max(1, (mb << 20) // (n_k * (d + dv) * elem)) * group
    return 1 << (heads.bit_length() - 1)


@functools.lru_cache(maxsize=None)
def _sm_count(index):
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device) -> int:
    """Streaming multiprocessors of a CUDA device (132 on an H200), cached."""
    return _sm_count(torch.device(device).index if torch.device(device).index is not None
                     else torch.cuda.current_device())


def smem_bytes(head_dim, BLOCK_M, BLOCK_N, NUM_STAGES, NUM_CONSUMERS, head_dim_v=None, **_):
    """Shared memory of a build (16-bit Q, K, V; Q's first chunk also stages
    O): head_dim the Q / K width, head_dim_v V's (default: head_dim)."""
    dv = head_dim if head_dim_v is None else head_dim_v
    return (2 * (head_dim * NUM_CONSUMERS * BLOCK_M + (head_dim + dv) * NUM_STAGES * BLOCK_N)
            + 64 * (NUM_CONSUMERS + NUM_STAGES))


def value_head_dim(d: int) -> Optional[int]:
    """The value head dim the Hopper forward takes with Q / K head dim d
    (d itself, or HEAD_DIM_V's for split Q K^T); None if d has no config."""
    return HEAD_DIM_V.get(d, d) if d in CONFIGS else None


def unsupported_reason(q, k, v, o, lse, sm_scale) -> str:
    """Why the Hopper forward cannot take this call ('' if it can)."""
    if not q.is_cuda:
        return "not a CUDA tensor"
    if torch.cuda.get_device_capability(q.device) != (9, 0):
        return "not an sm_90 GPU"
    if q.dtype not in _GL_DTYPES or any(t.dtype != q.dtype for t in (k, v, o)):
        return f"dtype {q.dtype} (float16/bfloat16 only, all alike)"
    if lse.dtype != torch.float32 or lse.stride(-1) != 1:
        return "lse must be float32 with last stride 1"
    d = q.shape[-1]
    dv = value_head_dim(d)
    if dv is None or k.shape[-1] != d or v.shape[-1] != dv or o.shape[-1] != dv:
        return (f"head dims q {d}, k {k.shape[-1]}, v {v.shape[-1]} (d = dv in "
                f"{sorted(x for x in CONFIGS if x not in HEAD_DIM_V)}, or d/dv "
                f"{', '.join(f'{a}/{b}' for a, b in sorted(HEAD_DIM_V.items()))})")
    if not sm_scale > 0:
        return f"softmax scale {sm_scale} (the kernel folds it assuming > 0)"
    batch, h_q, n_q, _ = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    if n_q == 0 or n_k == 0 or batch == 0 or h_q == 0:
        return "empty tensor"
    if h_q % h_kv != 0 or v.shape[:3] != k.shape[:3] or o.shape[:3] != q.shape[:3]:
        return "shapes"
    for t in (q, k, v, o):
        # TMA: 16-byte aligned base and strides, unit last stride.
        if t.stride(-1) != 1 or t.data_ptr() % 16 != 0 or any((s * t.element_size()) % 16 for s in t.stride()[:-1]):
            return "strides or base not 16-byte aligned for TMA"
        if max(t.shape) >= 2 ** 31:
            return "dimension too large"
    return ""


class _Plan:
    """What a call needs besides its data pointers, for one signature (see
    _signature): grid, descriptor blocks and layouts, the scalar arguments
    that follow the descriptors, and the meta-parameters."""

    __slots__ = ("key", "grid", "dims", "blocks", "layouts", "tail", "kwargs", "validated", "dynamic", "split",
                 "varlen")


def _signature(q, k, v, o, lse, causal, windowed, dropout=False, mask=None):
    """Everything the checks and the launch set-up depend on, but the
    pointers (of which only the 16-byte alignment), the scale and the
    shifts (causal, windowed: whether there is a diagonal, a left window;
    dropout: whether there is dropout; mask: the boolean mask, by shape,
    strides and dtype)."""
    sig = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), o.shape, o.stride(),
           lse.shape, lse.stride(), q.dtype, k.dtype, v.dtype, o.dtype, lse.dtype, q.device, causal, windowed,
           (q.data_ptr() | k.data_ptr() | v.data_ptr() | o.data_ptr()) & 15, dropout)
    if mask is not None:
        if not isinstance(mask, torch.Tensor):
            raise TypeError(f"mask must be a boolean torch.Tensor or None, got {type(mask).__name__}")
        sig += (mask.shape, mask.stride(), mask.dtype, mask.device)
    return sig


def mask_unsupported_reason(mask, q, k) -> str:
    """Why the Hopper forward cannot take this boolean mask ('' if it can),
    for (B, H, N, d)-indexed q, k: a bool tensor on q's device, 4-D and
    broadcastable as (B or 1, Hq or 1, Nq or 1, Nk) (the op layer's attn_bias,
    _validate.check_attn_mask), the key dim whole with stride 1 (the loads
    take key offsets as constants from a row's address)."""
    if not isinstance(mask, torch.Tensor):
        return f"mask must be a torch.Tensor, got {type(mask).__name__}"
    if mask.dtype != torch.bool:
        return f"mask dtype {mask.dtype} (boolean masks only)"
    if mask.device != q.device:
        return f"mask on {mask.device}, query on {q.device}"
    target = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    if mask.dim() != 4 or any(m not in (1, t) for m, t in zip(mask.shape[:3], target[:3])) \
            or mask.shape[3] != target[3]:
        return f"mask shape {tuple(mask.shape)} (4-D, (B or 1, Hq or 1, Nq or 1, Nk) for {target})"
    if mask.stride(3) != 1:
        return f"mask key stride {mask.stride(3)} (1 only)"
    return ""


def default_meta(d: int, causal: bool, windowed: bool = False, dropout: bool = False, masked: bool = False,
                 n_q: Optional[int] = None) -> dict:
    """The launch switches of a call without overrides: CONFIGS[d] and
    SCHEDULE[causal], the per-(d, causal) defaults (PERSISTENT, DYNAMIC),
    then the entries that replace CONFIGS' for causal calls, for
    plain calls of at most SHORT_CONFIGS' n_max query rows (n_q given), a
    window, dropout and a mask, in that order (later ones win)."""
    meta = dict(CONFIGS[d], **SCHEDULE[causal], PERSISTENT=PERSISTENT_DEFAULT[d][causal],
                DYNAMIC=DYNAMIC_DEFAULT[d][causal])
    n_max, short = SHORT_CONFIGS.get((d, causal), (-1, {}))
    plain_short = n_q is not None and n_q <= n_max and not (windowed or dropout or masked)
    for on, entries in ((causal, CAUSAL_CONFIGS.get(d, {})), (plain_short, short),
                        (windowed, WINDOW_CONFIGS.get(d, {})), (dropout, DROPOUT_CONFIGS.get(d, {})),
                        (masked, MASK_CONFIGS.get(d, {}))):
        if on:
            meta.update(entries)
    meta["ROW_BOUND"] = causal and d in ROW_BOUND_DIMS
    return meta


def _make_plan(q, k, v, o, lse, sm_scale, causal, windowed, overrides, dropout=False, mask=None, varlen=None):
    """A _Plan, or the reason (a string) why this case is declined.  varlen:
    (sequences, max_seqlen_q, max_seqlen_k) of a packed batch, whose views
    q, k, v, o, lse have batch 1 (hopper_forward_varlen)."""
    reason = unsupported_reason(q, k, v, o, lse, sm_scale)
    if reason:
        return reason
    batch, h_q, n_q, d = q.shape
    if varlen is not None:
        if dropout or mask is not None:
            return "packed batches with dropout or a mask are not built"
        batch, n_q, n_k_max = varlen
        if batch <= 0 or n_q <= 0 or n_k_max <= 0:
            return "empty packed batch"
    if dropout and d in DROPOUT_DECLINE:
        return DROPOUT_DECLINE[d]
    masked = mask is not None
    if masked:
        reason = mask_unsupported_reason(mask, q, k)
        if reason:
            return reason
        if dropout:
            return "a mask with dropout is not built"
        if d in MASK_DECLINE:
            return MASK_DECLINE[d]
    h_kv, n_k = k.shape[1], k.shape[2]
    if varlen is not None:
        n_k = varlen[2]
    dv = v.shape[-1]
    meta = default_meta(d, causal, windowed, dropout, masked, n_q)
    meta.update(overrides)
    # Packed batches: the grid of one program per block (sized by the
    # longest sequence; blocks past a sequence's rows return at once).
    # (IS_VARLEN 2: the rows past each sequence zeroed, varlen_isolate)
    meta["IS_VARLEN"] = False if varlen is None else (2 if varlen_isolate() else 1)
    if varlen is not None:
        meta.update(PERSISTENT=False, DYNAMIC=False, SECTION_MB=0)
    meta["HAS_WINDOW"] = windowed  # the window argument, not an override, decides it
    meta["HAS_DROPOUT"] = dropout  # and the dropout argument this one
    if masked:  # (absent otherwise: the keys and kwargs of before the mask)
        meta["HAS_MASK"] = True
    if meta["DYNAMIC"]:
        meta["PERSISTENT"] = True
    # SECTION_MB (host-only): the L2 budget of a causal persistent order by
    # head sections.  HEAD_SECTION is always passed: an explicit 0 builds the
    # SASS of before, which a build leaving it to the kernel's default did
    # not in compile_check's direct compile (Triton 3.6).
    section_mb = meta.pop("SECTION_MB", SECTION_MB_DEFAULT.get(d, (0, 0))[causal])
    meta.setdefault("HEAD_SECTION", 0)
    if section_mb and meta["DYNAMIC"] and meta["HEADS_FIRST"] and not windowed:
        heads = section_heads(section_mb, n_k, d, dv, q.element_size(), h_q // h_kv)
        meta["HEAD_SECTION"] = heads if heads < batch * h_q else 0
    if meta.get("EARLY_Q"):
        return ("EARLY_Q: the early Q release (measured 0.83-1.03x on the H200 in session 17) was removed in "
                f"session 45, not {meta['EARLY_Q']!r}")
    meta.pop("EARLY_Q", None)
    # ROW_BOUND is always passed, as HEAD_SECTION below: a build leaving it to
    # the kernel's default was not the build of before in compile_check's
    # direct compile (a runtime branch over both mask forms; Triton 3.6).
    meta["ROW_BOUND"] = bool(meta.get("ROW_BOUND")) and causal
    # Not a kernel parameter: the persistent grid's size (tests use a few
    # programs to give each several work tiles).
    n_programs = meta.pop("NUM_SMS", None)
    if meta["NUM_CONSUMERS"] == 1:
        meta["PINGPONG"] = False
    if smem_bytes(d, head_dim_v=dv, **meta) > SMEM_LIMIT:
        return "shared memory"
    rows = meta["BLOCK_M"] * meta["NUM_CONSUMERS"]
    n_m = triton.cdiv(n_q, rows)
    if meta["PERSISTENT"]:
        if n_m * batch * h_q >= 2 ** 31:
            return "grid"
        grid = (min(n_programs or sm_count(q.device), n_m * batch * h_q),)
    else:
        grid = (batch * h_q, n_m) if meta["HEADS_FIRST"] else (n_m, batch * h_q)
        if grid[1] > 65535:
            return "grid"
    gdt = _GL_DTYPES[q.dtype]
    # Blocks of dv columns: Q's and K's first chunk, V, O (with dv = d the
    # whole rows); split Q K^T adds Q's and K's columns [dv, d) as blocks of
    # their own (descriptors q1_desc, k1_desc over the same tensors).
    q_block = [1, 1, meta["BLOCK_M"], dv]
    kv_block = [1, 1, meta["BLOCK_N"], dv]
    q_layout = gl.NVMMASharedLayout.get_default_for(q_block, gdt)
    kv_layout = gl.NVMMASharedLayout.get_default_for(kv_block, gdt)
    plan = _Plan()
    plan.key = (q.dtype, d, dv, causal, tuple(sorted(meta.items())))
    plan.grid = grid
    plan.split = dv != d
    tensors = (q, k, v, o) + ((q, k) if plan.split else ())
    plan.dims = tuple((list(t.shape), list(t.stride())) for t in tensors)
    plan.blocks = (q_block, kv_block, kv_block, q_block)
    plan.layouts = (q_layout, kv_layout, kv_layout, q_layout)
    if plan.split:
        q1_block = [1, 1, meta["BLOCK_M"], d - dv]
        k1_block = [1, 1, meta["BLOCK_N"], d - dv]
        plan.blocks += (q1_block, k1_block)
        plan.layouts += (gl.NVMMASharedLayout.get_default_for(q1_block, gdt),
                         gl.NVMMASharedLayout.get_default_for(k1_block, gdt))
    # A packed batch's sequences are all in batch entry 0: stride_lz = 0.
    plan.tail = (0 if varlen else lse.stride(0), lse.stride(1), batch, h_q, n_q, n_k, h_q // h_kv)
    plan.varlen = (o.stride(2), o.stride(1)) if varlen else None
    plan.kwargs = dict(HEAD_DIM=d, HEAD_DIM_V=dv, IS_CAUSAL=causal, num_warps=4, **meta)
    plan.validated = False  # set once TensorDescriptor has checked this signature's descriptors
    plan.dynamic = bool(meta["DYNAMIC"])
    return plan


_PLANS = {}  # _signature -> _Plan or decline reason (calls without overrides)
MAX_PLANS = 1024

# The descriptor's fields, set directly on repeat calls of a signature whose
# first descriptors TensorDescriptor validated (same shapes, strides, blocks,
# layouts and alignment: the checks would pass again).  Any other layout of
# the class: always the validating constructor.
_DESC_FIELDS = ("base", "shape", "strides", "block_shape", "layout", "padding")
try:
    import dataclasses as _dc
    _DESC_FAST = (tuple(f.name for f in _dc.fields(TensorDescriptor)) == _DESC_FIELDS
                  and not TensorDescriptor.__dataclass_params__.frozen
                  and not hasattr(TensorDescriptor, "__slots__"))
except Exception:  # noqa: BLE001
    _DESC_FAST = False


def _descriptor(t, dims, block, layout, validated):
    if validated and _DESC_FAST:
        desc = object.__new__(TensorDescriptor)
        desc.__dict__.update(base=t, shape=dims[0], strides=dims[1], block_shape=block, layout=layout,
                             padding="zero")
        return desc
    return TensorDescriptor(t, list(dims[0]), list(dims[1]), block, layout)


def hopper_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                             lse: torch.Tensor, sm_scale: float, causal_shift,
                             window: Optional[Tuple[int, int]] = None, dropout=None, mask=None,
                             **overrides) -> bool:
    """Run the Hopper forward on (B, H, N, d)-indexed views; False if it cannot.

    q: (B, Hq, Nq, d); k: (B, Hkv, Nk, d), v: (B, Hkv, Nk, dv), Hq a multiple
    of Hkv; o (B, Hq, Nq, dv), written in place; lse: (B, Hq, Nq) float32, last
    stride 1, written in place in base 2 (lse2 = m2 + log2 l, as
    kernels/fwd.py); d = dv in 64, 128, 256, or d = 192 with dv = 128 (split
    Q K^T, HEAD_DIM_V);
    float16 or bfloat16; any strides that TMA accepts (16-byte aligned, last 1).
    causal_shift: None for no mask, else row i sees keys j <= i + causal_shift.
    window: None, or (left, shift) with left >= 0: row i sees only keys
    j >= i + shift - left, flash-attn's left window bound around the
    diagonal i + shift (for a causal call, shift is causal_shift; with
    causal_shift None, a window bounded on the left only).  Not validated
    on a GPU yet (docs/hopper.md, "Sliding windows").
    dropout: None, or (seed, p, philox_offset): seed a (1,) int64 tensor on
    the device, 0 < p < 1: kernels/score.py's keep mask bit for bit (the
    counters of a dense call, rng_rows = Nq, rng_cols = Nk, plus
    philox_offset); P V takes the kept probabilities, O is scaled by
    2^16 / (2^16 - t), l and the LSE are those without dropout.  Not
    validated on a GPU yet (docs/hopper.md, "Dropout").
    mask: None, or a boolean tensor (True = attend) broadcastable as
    (B or 1, Hq or 1, Nq or 1, Nk), key stride 1 (mask_unsupported_reason);
    a score it masks is -inf, and rows left without a key give O = 0 and
    LSE = -inf, as kernels/fwd.py's HAS_MASK / MASK_BOOL.  Not validated on
    a GPU yet (docs/hopper.md, "Masks").
    ``overrides`` replace entries of CONFIGS / SCHEDULE (benchmarks, tests).
    Returns False, having written nothing, when the case is not supported.

    The checks and the launch set-up are done once per signature (shapes,
    strides, dtypes, device, causal, windowed, pointer alignment) and reused
    by later calls, which build the four descriptors and launch
    (kernels/fastlaunch.py).
    """
    causal = causal_shift is not None
    windowed = window is not None
    dropped = dropout is not None
    if not sm_scale > 0:
        return False
    if overrides:
        plan = _make_plan(q, k, v, o, lse, sm_scale, causal, windowed, overrides, dropped, mask)
    else:
        sig = _signature(q, k, v, o, lse, causal, windowed, dropped, mask)
        plan = _PLANS.get(sig)
        if plan is None:
            plan = _store(sig, _make_plan(q, k, v, o, lse, sm_scale, causal, windowed, overrides, dropped, mask))
    return _launch(plan, (q, k, v, o), lse, sm_scale, causal_shift, window, dropout, mask)


def hopper_forward_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                         lse: torch.Tensor, sm_scale: float, causal_shift,
                         window: Optional[Tuple[int, int]] = None, dropout=None, mask=None) -> bool:
    """hopper_attention_forward for tensors in the flash layout: q, o (B, Nq,
    Hq, d), k, v (B, Nk, Hkv, d), lse (B, Hq, Nq); mask (if any) indexed
    (b, h, i, j) as there.  The same checks (on the
    (B, H, N, d) views, at the first call of a signature) and the same launch;
    later calls build the descriptors from the plan without making the views
    (a descriptor's base only gives the data pointer and dtype)."""
    if not sm_scale > 0:
        return False
    causal = causal_shift is not None
    windowed = window is not None
    dropped = dropout is not None
    sig = ("flash",) + _signature(q, k, v, o, lse, causal, windowed, dropped, mask)
    plan = _PLANS.get(sig)
    if plan is None:
        views = tuple(t.transpose(1, 2) for t in (q, k, v, o))
        plan = _store(sig, _make_plan(*views, lse, sm_scale, causal, windowed, {}, dropped, mask))
        return _launch(plan, views, lse, sm_scale, causal_shift, window, dropout, mask)
    return _launch(plan, (q, k, v, o), lse, sm_scale, causal_shift, window, dropout, mask)


def hopper_forward_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                          lse: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                          max_seqlen_q: int, max_seqlen_k: int, sm_scale: float, causal: bool,
                          window_left: int = -1) -> bool:
    """The Hopper forward of a packed batch: q, o (total_q, Hq, d / dv), k, v
    (total_k, Hkv, d / dv), lse (Hq, total_q) float32 (base 2, as
    hopper_attention_forward's), cu_seqlens_q / _k (batch + 1,) int32 on the
    device, max_seqlen_q / _k at least the longest sequence's lengths (the
    grid is sized by them; no host read of the offsets).  Each sequence's
    mask is bottom-right aligned (flash-attn's varlen): with causal, row i
    of sequence b sees keys j <= i + n_k_b - n_q_b; window_left >= 0 also
    bounds it on the left, j >= i + n_k_b - n_q_b - window_left.  No
    dropout, mask or other variant (the portable kernels run those).
    Returns False, having written nothing, when the case is not supported.

    The descriptors cover the whole packed tensors as batch entry 0 of
    (1, H, total, d) views; a block reads past its sequence's rows into the
    next sequence's (or TMA's zero fill at the end), and masks those keys
    (the key bound is the sequence's n_k) and stores no such row (the last
    block of a sequence stores its rows from registers)."""
    if not sm_scale > 0:
        return False
    windowed = window_left >= 0
    sig = packed_key(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k) + _signature(
        q, k, v, o, lse, causal, windowed) + (varlen_isolate(),)
    plan = _PLANS.get(sig)
    lo = packed_window_lo(window_left, max_seqlen_q, max_seqlen_k)
    if plan is None:
        views = tuple(t.unsqueeze(0).transpose(1, 2) for t in (q, k, v, o))
        plan = packed_reason(cu_seqlens_q, cu_seqlens_k, q.device) or _make_plan(
            *views, lse.unsqueeze(0), sm_scale, causal, windowed, {},
            varlen=(cu_seqlens_q.shape[0] - 1, max_seqlen_q, max_seqlen_k))
        _store(sig, plan)
        return _launch(plan, views, lse, sm_scale, 0 if causal else None, None, None, None,
                       varlen=(cu_seqlens_q, cu_seqlens_k, o, lo))
    # (later calls: the plan's descriptor dims, the tensors only for their pointers)
    return _launch(plan, (q, k, v, o), lse, sm_scale, 0 if causal else None, None, None, None,
                   varlen=(cu_seqlens_q, cu_seqlens_k, o, lo))


def _store(sig, plan):
    if len(_PLANS) >= MAX_PLANS:
        _PLANS.clear()
    _PLANS[sig] = plan
    return plan


def lower_diagonal(window, n_q: int, n_k: int) -> int:
    """The kernel's window_lo for window = (left, shift): row i sees keys
    j >= i + shift - left.  Clamped to [-n_q, n_k], which changes no row's
    keys (below -n_q every row's bound is below key 0; from n_k on no row
    sees a key) and keeps the kernel's int32 sums in range; 0 without a
    window (unused)."""
    if window is None:
        return 0
    left, shift = window
    if left < 0:
        raise ValueError(f"window (left, shift) = {window}: left must be >= 0 (None for no window)")
    return min(max(shift - left, -n_q), n_k)


def packed_key(cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
               max_seqlen_k: int) -> tuple:
    """What a packed batch's launch set-up reads of its offsets and longest
    lengths (the start of its plan key; hopper_forward_varlen and
    bwd.hopper_backward_varlen)."""
    return ("varlen", cu_seqlens_q.shape, cu_seqlens_k.shape, cu_seqlens_q.dtype, cu_seqlens_k.dtype,
            cu_seqlens_q.device, cu_seqlens_k.device, max_seqlen_q, max_seqlen_k)


def packed_reason(cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, device: torch.device) -> str:
    """Why the Hopper kernels cannot take a packed batch's offsets ('' if
    they can): int32 (batch + 1,) tensors on the data's device, batch >= 1."""
    docs = cu_seqlens_q.shape[0] - 1
    if (cu_seqlens_q.dtype != torch.int32 or cu_seqlens_k.dtype != torch.int32 or cu_seqlens_q.device != device
            or cu_seqlens_k.device != device or cu_seqlens_k.shape[0] != docs + 1 or docs <= 0):
        return "cu_seqlens_q / cu_seqlens_k: int32 (batch + 1,), batch >= 1, on q's device"
    return ""


def packed_window_lo(window_left: int, max_seqlen_q: int, max_seqlen_k: int) -> int:
    """The kernels' window_lo for a packed batch with a left window bound
    (window_left >= 0; 0 without one): -left, floored at -(longest n_q +
    longest n_k), which keeps the kernels' int32 sums in range and changes
    no row's keys; each program adds its sequence's diagonal n_k - n_q and
    clamps as lower_diagonal does (schedule.packed_sequence)."""
    return -min(window_left, max_seqlen_q + max_seqlen_k) if window_left >= 0 else 0


def dropout_args(dropout, n_q: int, n_k: int, unused: torch.Tensor) -> tuple:
    """The kernels' (SEED, philox_offset, dropout_thresh, dropout_scale,
    RNG_ROWS, RNG_COLS) for dropout = (seed, p, philox_offset) of a dense
    call (kernels/score.py's counters: rng_rows = Nq, rng_cols = Nk), or
    placeholders (unused stands in for the seed) without dropout."""
    if dropout is None:
        return (unused, 0, 0, 1.0, 0, 0)
    seed, p, offset = dropout
    return (seed, int(offset), reference.dropout_threshold(p), reference.dropout_scale(p), n_q, n_k)


def mask_args(mask, unused: torch.Tensor) -> tuple:
    """The kernel's (MASK, stride_mz, stride_mh, stride_mm) for a boolean
    mask (its bytes; strides 0 on broadcast dims), or placeholders (unused
    stands in for the pointer) without one."""
    if mask is None:
        return (unused, 0, 0, 0)
    return (mask.view(torch.uint8),) + tuple(0 if n == 1 else st for n, st in zip(mask.shape[:3], mask.stride()[:3]))


def _launch(plan, tensors, lse, sm_scale, causal_shift, window=None, dropout=None, mask=None, varlen=None) -> bool:
    """Launch a plan on (q, k, v, o) (views or the flash-layout tensors: a
    descriptor's base gives only the pointer and dtype); False if the plan is
    a decline reason.  varlen: (cu_seqlens_q, cu_seqlens_k, o, window_lo)
    of a packed batch (hopper_forward_varlen)."""
    if plan.__class__ is str or plan.key in _BROKEN:
        return False
    if varlen is not None:
        lo = varlen[3]
    else:
        lo = 0 if window is None else lower_diagonal(window, plan.tail[4], plan.tail[5])
    validated = plan.validated
    if plan.split:  # q1_desc, k1_desc: Q's and K's second column chunk
        tensors = tuple(tensors) + (tensors[0], tensors[1])
    args = tuple(_descriptor(t, dims, block, layout, validated)
                 for t, dims, block, layout in zip(tensors, plan.dims, plan.blocks, plan.layouts))
    if not plan.split:
        args += (None, None)  # q1_desc, k1_desc: constexpr None, no kernel parameters
    plan.validated = True
    # DYNAMIC's tile counter: zeroed per call on the current stream (see
    # DYNAMIC_DEFAULT); other builds ignore the argument and get lse.
    counter = fastlaunch.zeroed_scratch(1, torch.int32, lse.device) if plan.dynamic else lse
    args += (lse,) + plan.tail + (sm_scale * LOG2E, 0 if causal_shift is None else causal_shift, counter, lo)
    args += dropout_args(dropout, plan.tail[4], plan.tail[5], lse)
    args += mask_args(mask, lse)
    if varlen is not None:
        args += (varlen[0], varlen[1], varlen[2]) + plan.varlen
    else:
        args += (lse, lse, lse, 0, 0)  # CU_SEQLENS_Q, CU_SEQLENS_K, O, stride_om, stride_oh: unused
    q = tensors[0]
    switch = q.is_cuda and q.device.index != torch.cuda.current_device()
    try:
        with torch.cuda.device(q.device) if switch else _NO_SWITCH:
            _run.launch(args, plan.kwargs, plan.grid)
    except LAUNCH_ERRORS as exc:
        # A build failure (e.g. a Triton whose Gluon lowering differs) makes
        # this configuration unavailable; anything at run time propagates.
        if not is_build_failure(exc):
            raise
        _BROKEN[plan.key] = f"{type(exc).__name__}: {exc}"[:2000]
        return False
    return True


class _JitLaunch:
    """``kernel[grid](*args, **kwargs)`` where the fast path is not installed."""

    def __init__(self, kernel):
        self.kernel = kernel

    def launch(self, args, kwargs, grid):
        return self.kernel[grid](*args, **kwargs)


_NO_SWITCH = contextlib.nullcontext()
_run = fastlaunch.fast_run(fastlaunch.install(_attn_fwd_hopper)) or _JitLaunch(_attn_fwd_hopper)


__all__ = ["hopper_attention_forward", "hopper_forward_flash", "hopper_forward_varlen", "unsupported_reason",
           "lower_diagonal", "CONFIGS",
           "HEAD_DIM_V", "CAUSAL_CONFIGS", "SHORT_CONFIGS", "ROW_BOUND_DIMS", "default_meta", "WINDOW_CONFIGS",
           "SCHEDULE", "PERSISTENT_DEFAULT", "DYNAMIC_DEFAULT", "value_head_dim",
           "DROPOUT_CONFIGS", "DROPOUT_DECLINE", "dropout_args", "MASK_CONFIGS", "MASK_DECLINE", "mask_args",
           "mask_unsupported_reason", "SECTION_MB_DEFAULT", "section_heads", "packed_key", "packed_reason",
           "packed_window_lo"]
