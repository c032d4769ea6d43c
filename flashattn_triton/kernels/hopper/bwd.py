"""Hopper (sm_90) attention backward in Gluon: dK, dV and dQ in one kernel.

One program owns ``BLOCK_N`` keys of one (batch, KV head) and streams the
query tiles of every query head of its group (GQA), so dK and dV are summed
in registers and written once.  Its partitions:

* a 1-warp *producer* loads K and V once, then Q and dO tiles into a
  ``NUM_STAGES``-deep shared-memory ring (TMA, mbarriers);
* ``NUM_CONSUMERS`` consumer warpgroups, each owning ``BLOCK_N /
  NUM_CONSUMERS`` (= 64) of the keys.  Per query tile a consumer computes,
  with the keys as the wgmma M dimension (so P^T and dS^T come out of the
  accumulators in the layout that the next products take as register
  operands):

      S^T  = K_c Q^T             P^T = exp2(S^T * scale * log2 e - lse2)
      dP^T = V_c dO^T            dS^T = P^T * (dP^T - delta) * scale
      dV_c += P^T dO             dK_c += dS^T Q

  and writes dS^T to shared memory; once every consumer has written its
  part, consumer c computes ``dQ[:, cols_c] = dS K[:, cols_c]`` for its share
  of the head dim (all BLOCK_N keys) and adds it into a float32 dQ buffer
  with a TMA bulk reduce-add (``cp.reduce.async.bulk.tensor``): five tile
  products per score tile, one exponential.

``SPLIT_D`` (d = 256, where a warpgroup cannot hold dK and dV of 64 keys x
256 columns: 2 x 128 registers per thread) divides the work the other way,
as FlashAttention-3 does at this head dim: a program owns BLOCK_N = 64 keys;
consumer c computes the scores of keys [32c, 32c + 32) with the query rows as
the wgmma M dimension,

      S = Q K_c^T,  dP = dO V_c^T,  P, dS as above (row statistics per M row),

and writes P^T and dS^T (transposed stores, ``stmatrix.trans``) into shared
tiles; after the barrier it owns head-dim columns cols_c = [128c, 128c + 128)
of every product, taking P^T / dS^T from shared memory as the A operand:

      dV[:, cols_c] += P^T dO[:, cols_c]     dK[:, cols_c] += dS^T Q[:, cols_c]
      dQ[:, cols_c]  = dS K[:, cols_c]       (DQ_CHUNK columns at a time)

so per thread dK and dV take 64 registers each, S and dP 16 each.  The same
five products, no score computed twice, no partial sums exchanged.

d = 192 with dv = 128 (DeepSeek MLA; ``HEAD_DIM_V``, as the forward's split
Q K^T) runs the SPLIT_D scheme with Q and K in two column chunks of 128
and 64 (register tensors have power-of-two shapes), each with its own TMA
descriptor and buffer (``q1_desc`` / ``k1_desc``; None, no parameters, for
d = dv): consumer c computes S = Q0 K0_c^T + Q1 K1_c^T (two wgmmas into one
accumulator) and dP = dO V_c^T, and then owns columns [64c, + 64) of dV and
of dK's first chunk, [128 + 32c, + 32) of dK's second, and the same dQ
columns in 32-column pieces (_attn_bwd_step_qk1).  No window or dropout
there (declined).

The softmax scale is folded into dS, so dK and dQ need no rescaling; the LSE
is the forward's base-2 ``lse2`` (``p = exp2(s * scale * log2 e - lse2)``),
and a row with no visible key (lse2 = -inf) is read as +inf, giving P = 0.
Keys past N_K (zero-filled by TMA) and, when causal, keys after a row's
diagonal are masked in every tile that can hold one; query rows past N_Q
get lse2 = +inf and delta = 0, so their P and dS are 0.

``PERSISTENT`` (off by default: PERSISTENT_DEFAULT) launches min(#SMs,
work tiles) programs on a 1-D grid; each walks its work tiles (key block,
batch * KV head; _bwd_work_tile: dealt in a snake, a head's key blocks
adjacent, or with HEADS_FIRST key block 0 of every head first) in all three
partitions.  The ring counter and every barrier phase run on across work
tiles (no re-init); a kv_empty barrier, arrived by both consumers after the
tile's last step (whose dQ product is the last reader of K), lets the
producer load the next tile's K and V, after first queueing that tile's
first NUM_STAGES query tiles; so the consumers' dK / dV stores of one tile
overlap the next tile's loads, and the prologue is paid once per program.

``GROUP_SPLIT`` = S > 1 (GQA; causal calls by default: HOPPER_BWD_GROUP_SPLIT_DEFAULT) cuts
each KV head's group of G query heads into S slices of G / S heads, one
program per (key block, batch, slice): the kernel sees H_KV * S "KV heads"
(slice h reads K and V of head h // S) with groups of G / S query heads
(slice h's are h * G / S + g, the query heads of its KV head), and writes
partial dK / dV of shape (B, H_KV * S, N_K, d) (float32, or q's dtype with
GROUP_PARTIALS_16BIT); the portable
backward's group-sum kernel (kernels/bwd.py _sum_group_partials) adds each
group's S slices into dk, dv.  S = 1 is the kernel without the split
(GROUP_SPLIT only selects code; the SASS is the same).  Both the 2-D grid
and the persistent form take it.

``NAMED_BAR`` (by default NAMED_BAR_BY_SHAPE: 2 at d = 128 causal, else 0; not SPLIT_D)
= 1 replaces the ds_ready mbarrier of the dS^T exchange by one hardware
barrier of both consumer warpgroups' 256 threads (_named_bar): per query
tile a warpgroup then skips one mbarrier arrival (and the bar.sync Gluon
puts before it) and one polled wait.  = 2 (not persistent) also hands dQ
to the producer warp: a consumer waits for the staging buffer to be free,
stores dQ and signals it with named barriers of 288 threads; the producer
issues both halves' reduce-adds (_retire_dq), which also tells it that the
tile's Q / dO slot is free (qdo_empty unused).

``DROPOUT_SHARED_CALLS`` (built in session 21; DROPOUT_CONFIGS at d = 64 /
128 since session 22's H200 runs) changes how the keys x queries path
draws dropout's keep mask: key bit 0 of an S^T tile lies across a lane pair,
so without it both lanes make every Philox call and keep their halves (two
calls per eight scores); with it each lane makes the calls of one of its two
query groups, packs each call's eight keep flags into one register and a
layout conversion (a warp shuffle per call) hands the partner its calls
(dropout.tile_keep_keys_first_shared).  The SPLIT_D path (dropout at
d = 256) draws queries x keys tiles, one call per eight scores, and does
not read it.  ``DROPOUT_RNG_WARPS`` (built in session 38; the default at
d = 64 / 128 since session 39's H200 runs: DROPOUT_RNG_CONFIGS) moves the
draws off the consumers: a fourth partition of four warps (RNG_NUM_WARPS;
_attn_bwd_rng, the registers the others leave: 24, 40 at d = 64 with its
consumers at 232) makes every Philox call of each step's keys x queries
tile once and writes each call's eight keep bits to a two-slot shared ring
(keep_ready; a slot is free again at the step's qdo_empty arrivals, as its
Q and dO are), and each consumer, after its dP^T wait, tests each score's
bit where it lies (one LOP3 to a predicate) and uses the predicate in one
select, P^T Z, with dV's keep scale applied once per key block
(DROPOUT_RNG_WARPS = 4, the default since session 43: 1.06 / 1.13x over
the forms before it at d = 64 / 128).  Those forms, = 1 (a byte per
score), = 2 (the consumers expand each call's bits as the shared calls'
path does) and = 3 (the bits applied late as a predicate per score), were
removed in sessions 41 and 45 (benchmarks/history/gpu_next_dropout_rng.sh,
gpu_next_dropout_late.sh, gpu_next_dropout_inplace.sh).  Builds that cannot take it
(a window, SPLIT_D, persistent) draw as before.

The dQ adds arrive in an order that varies run to run (float32 sums in
another order): this is the non-deterministic form; a deterministic
backward runs the portable kernels (kernels/bwd.py).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Optional, Union

import torch
import triton
from triton.experimental import gluon
import triton.language as tl
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                               warpgroup_mma, warpgroup_mma_wait)

from .. import fastlaunch
from ..launch import env_choice, env_switch
from ._build import LAUNCH_ERRORS, is_build_failure
from ._compat import NOINLINE_OK, cta_barrier, reinterpret, tma_load, tma_reduce_add
from .dropout import (kept_keys_first_from_call_bits, negate_dropped, philox_keys, select_kept, select_nonzero,
                      tile_call_bits_rng, tile_halves_keys_first, tile_halves_rows_first, tile_keep_keys_first_shared)
from .fwd import (_descriptor, _named_bar, _named_bar_at, _store_tile_tma, _zero_rows_from, _zero_rows_from_call,
                  dropout_args, lower_diagonal, packed_key, packed_reason, packed_window_lo, varlen_isolate)
from .schedule import packed_sequence, snake_count, snake_tile

LOG2E = 1.4426950408889634


# Touch every name the kernel uses (see fwd.py).
_REQUIRED = (gl.warp_specialize, gl.NVMMADistributedLayout, gl.DotOperandLayout, gl.SliceLayout,
             gl.NVMMASharedLayout.get_default_for, gl.allocate_shared_memory, gl.convert_layout,
             gl.exp2, mbarrier.init, mbarrier.expect, mbarrier.wait, mbarrier.arrive,
             tma_load, tma_reduce_add, tma.store_wait, fence_async_shared)


@gluon.jit
def _bwd_work_tile(i, pid, n_programs, n_kb, n_bh, HEADS_FIRST: gl.constexpr):
    """(key block, batch * KV head) of the i-th work tile of program pid,
    dealt in a snake (schedule.py).  Tile numbers t run over a head's key
    blocks fastest (they share its Q and dO in L2), or with HEADS_FIRST over
    the heads fastest, key block 0 (with a causal mask the one with most
    query tiles) of every head first."""
    t = snake_tile(i, pid, n_programs)
    if HEADS_FIRST:
        pid_n = t // n_bh
        pid_bh = t % n_bh
    else:
        pid_n = t % n_kb
        pid_bh = t // n_kb
    return pid_n, pid_bh


@gluon.jit
def _query_end(start_n, m_lo, n_mb, N_K, window_lo,
               BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HAS_WINDOW: gl.constexpr):
    """End of the query tiles of key block [start_n, + BLOCK_N): n_mb, or
    with HAS_WINDOW (row i sees keys j >= i + window_lo) the tile after the
    last row that sees the block's last key (rows i <= j - window_lo see key
    j), at least m_lo: a block that no row sees visits no query tile and
    writes dK = dV = 0.  Tiles past it are neither loaded nor visited."""
    if HAS_WINDOW:
        last = gl.minimum(start_n + BLOCK_N, N_K)  # one past the block's last key
        return gl.maximum(gl.minimum(gl.cdiv(gl.maximum(last - window_lo, 0), BLOCK_M), n_mb), m_lo)
    else:
        return n_mb


@gluon.jit
def _bwd_tile_coords(pid_n, pid_bh, H_KV, n_mb, N_K, causal_shift, window_lo,
                     BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, IS_CAUSAL: gl.constexpr,
                     HAS_WINDOW: gl.constexpr):
    """(batch, KV head, first key, first query tile, end of the query tiles)
    of a work tile (as the non-persistent program decode computes them)."""
    off_b = pid_bh // H_KV
    off_hkv = pid_bh % H_KV
    start_n = pid_n * BLOCK_N
    if IS_CAUSAL:
        m_lo = gl.minimum(gl.maximum(start_n - causal_shift, 0) // BLOCK_M, n_mb)
    else:
        m_lo = 0
    m_hi = _query_end(start_n, m_lo, n_mb, N_K, window_lo, BLOCK_M, BLOCK_N, HAS_WINDOW)
    return off_b, off_hkv, start_n, m_lo, m_hi


@gluon.jit
def _load_kv_block(k_desc, v_desc, k_smem, v_smem, kv_ready, off_b, off_hkv, start_n,
                   BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, GROUP_SPLIT: gl.constexpr = 1,
                   k1_desc=None, k1_smem=None, QK1: gl.constexpr = 0):
    """K and V of the key block [start_n, + BLOCK_N) into their buffers, one
    expect-tx arrival on kv_ready for both.  With GROUP_SPLIT > 1, off_hkv
    is a slice of a KV head's group (KV head off_hkv // GROUP_SPLIT).
    HEAD_DIM: V's width and K's first column chunk; QK1 > 0 (split Q K^T):
    K's columns [HEAD_DIM, HEAD_DIM + QK1) go to k1_smem on the same
    arrival."""
    kv_box: gl.constexpr = [1, 1, BLOCK_N, HEAD_DIM]
    if GROUP_SPLIT > 1:
        off_hkv = off_hkv // GROUP_SPLIT
    if QK1 > 0:
        mbarrier.expect(kv_ready, k_desc.block_type.nbytes + k1_desc.block_type.nbytes + v_desc.block_type.nbytes)
        k1_box: gl.constexpr = [1, 1, BLOCK_N, QK1]
        tma_load(k1_desc, [off_b, off_hkv, start_n, HEAD_DIM], kv_ready,
                 reinterpret(k1_smem, k1_desc.dtype, k1_box, k1_desc.layout))
    else:
        mbarrier.expect(kv_ready, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma_load(k_desc, [off_b, off_hkv, start_n, 0], kv_ready,
             reinterpret(k_smem, k_desc.dtype, kv_box, k_desc.layout))
    tma_load(v_desc, [off_b, off_hkv, start_n, 0], kv_ready,
             reinterpret(v_smem, v_desc.dtype, kv_box, v_desc.layout))


@gluon.jit
def _load_qdo(q_desc, do_desc, LSE, DELTA, q_bufs, do_bufs, stat_bufs, q_ready, do_ready, qdo_empty,
              off_b, off_hq, mb, it, stride_lz, stride_lh, stride_dz, stride_dh, N_Q, sm_scale,
              BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, NUM_STAGES: gl.constexpr,
              q1_desc=None, q1_bufs=None, QK1: gl.constexpr = 0, WAIT_EMPTY: gl.constexpr = True, q_row0=0):
    """Query tile mb of head off_hq into ring slot it % NUM_STAGES: the rows'
    lse2 and scaled delta (loaded here, stored to shared memory before the
    tile's Q is requested, so that the consumers read them from shared
    memory when they need them instead of holding two row vectors in
    registers across the products), then Q and dO by TMA.  HEAD_DIM: dO's
    width and Q's first column chunk; QK1 > 0 (split Q K^T): Q's columns
    [HEAD_DIM, HEAD_DIM + QK1) go to q1_bufs on q_ready.  WAIT_EMPTY False:
    the caller knows the slot is free (NAMED_BAR = 2: _retire_dq).  q_row0:
    a packed sequence's first row (IS_VARLEN; LSE and DELTA already point at
    it), added to the TMA rows."""
    stat_layout: gl.constexpr = gl.BlockedLayout([BLOCK_M // 32], [32], [1], [0])
    q_box: gl.constexpr = [1, 1, BLOCK_M, HEAD_DIM]
    s = it % NUM_STAGES
    rows = mb * BLOCK_M + gl.arange(0, BLOCK_M, layout=stat_layout)
    in_q = rows < N_Q
    lse_row = LSE + off_b.to(gl.int64) * stride_lz + off_hq.to(gl.int64) * stride_lh
    delta_row = DELTA + off_b.to(gl.int64) * stride_dz + off_hq.to(gl.int64) * stride_dh
    lse2 = gl.load(lse_row + rows, mask=in_q, other=float("inf"))
    lse2 = gl.where(lse2 == float("-inf"), float("inf"), lse2)  # no visible key: P = 0
    delta = gl.load(delta_row + rows, mask=in_q, other=0.0) * sm_scale
    # A slot is free once every consumer released its previous use; the
    # first pass waits on the parity before a fresh barrier's phase 0.
    if WAIT_EMPTY:
        mbarrier.wait(qdo_empty.index(s), ((it // NUM_STAGES) & 1) ^ 1)
    stat_bufs.index(2 * s).store(lse2)
    stat_bufs.index(2 * s + 1).store(delta)
    # The arrival below (expect) releases these stores to the consumers.
    if QK1 > 0:
        mbarrier.expect(q_ready.index(s), q_desc.block_type.nbytes + q1_desc.block_type.nbytes)
        q1_box: gl.constexpr = [1, 1, BLOCK_M, QK1]
        tma_load(q1_desc, [off_b, off_hq, q_row0 + mb * BLOCK_M, HEAD_DIM], q_ready.index(s),
                 reinterpret(q1_bufs.index(s), q1_desc.dtype, q1_box, q1_desc.layout))
    else:
        mbarrier.expect(q_ready.index(s), q_desc.block_type.nbytes)
    tma_load(q_desc, [off_b, off_hq, q_row0 + mb * BLOCK_M, 0], q_ready.index(s),
             reinterpret(q_bufs.index(s), q_desc.dtype, q_box, q_desc.layout))
    mbarrier.expect(do_ready.index(s), do_desc.block_type.nbytes)
    tma_load(do_desc, [off_b, off_hq, q_row0 + mb * BLOCK_M, 0], do_ready.index(s),
             reinterpret(do_bufs.index(s), do_desc.dtype, q_box, do_desc.layout))


@gluon.jit
def _attn_bwd_load_persistent(q_desc, k_desc, v_desc, do_desc, LSE, DELTA, k_smem, v_smem, q_bufs, do_bufs,
                              stat_bufs, kv_ready, kv_empty, q_ready, do_ready, qdo_empty,
                              n_mb, GROUP, H_KV, n_kb, n_bh,
                              stride_lz, stride_lh, stride_dz, stride_dh, N_Q, N_K, sm_scale, causal_shift,
                              window_lo,
                              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                              NUM_STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, HEADS_FIRST: gl.constexpr,
                              HAS_WINDOW: gl.constexpr, GROUP_SPLIT: gl.constexpr,
                              q1_desc, k1_desc, q1_bufs, k1_smem, QK1: gl.constexpr):
    """Producer partition of the persistent form: per work tile the first
    NUM_STAGES query tiles (their slots are freed by the previous work
    tile's steps), then K and V once the consumers released the previous
    tile's (kv_empty: after their last dQ product), then the other query
    tiles.  Ring slot and phase follow one counter over all tiles."""
    pid = gl.program_id(0)
    n_programs = gl.num_programs(0)
    it = 0
    for i in range(snake_count(pid, n_programs, n_kb * n_bh)):
        pid_n, pid_bh = _bwd_work_tile(i, pid, n_programs, n_kb, n_bh, HEADS_FIRST)
        off_b, off_hkv, start_n, m_lo, m_hi = _bwd_tile_coords(pid_n, pid_bh, H_KV, n_mb, N_K, causal_shift,
                                                               window_lo, BLOCK_M, BLOCK_N, IS_CAUSAL, HAS_WINDOW)
        n_m = m_hi - m_lo
        total = GROUP * n_m
        n_first = gl.minimum(total, NUM_STAGES)
        for j in range(n_first):
            _load_qdo(q_desc, do_desc, LSE, DELTA, q_bufs, do_bufs, stat_bufs, q_ready, do_ready, qdo_empty,
                      off_b, off_hkv * GROUP + j // n_m, m_lo + j % n_m, it + j,
                      stride_lz, stride_lh, stride_dz, stride_dh, N_Q, sm_scale, BLOCK_M, HEAD_DIM, NUM_STAGES,
                      q1_desc, q1_bufs, QK1)
        mbarrier.wait(kv_empty, (i & 1) ^ 1)
        _load_kv_block(k_desc, v_desc, k_smem, v_smem, kv_ready, off_b, off_hkv, start_n, BLOCK_N, HEAD_DIM,
                       GROUP_SPLIT, k1_desc, k1_smem, QK1)
        for j in range(n_first, total):
            _load_qdo(q_desc, do_desc, LSE, DELTA, q_bufs, do_bufs, stat_bufs, q_ready, do_ready, qdo_empty,
                      off_b, off_hkv * GROUP + j // n_m, m_lo + j % n_m, it + j,
                      stride_lz, stride_lh, stride_dz, stride_dh, N_Q, sm_scale, BLOCK_M, HEAD_DIM, NUM_STAGES,
                      q1_desc, q1_bufs, QK1)
        it += total


@gluon.jit
def _retire_dq(t, dq_desc, dq_bufs, off_b, off_hkv, m_lo, n_m, GROUP, BLOCK_M: gl.constexpr,
               DQ_COLS: gl.constexpr, q_row0=0):
    """NAMED_BAR = 2, producer: wait until both consumers have staged dQ of
    their ring step t (query tile m_lo + t % n_m of group head t // n_m) and
    add both halves into the float32 dQ buffer (TMA reduce-add).  Their
    arrival also means that every product of step t is done: its Q / dO
    slot is free.  q_row0: a packed sequence's first row (IS_VARLEN)."""
    _named_bar(_DQ_FULL_SYNC)
    off_hq = off_hkv * GROUP + t // n_m
    start_m = q_row0 + (m_lo + t % n_m) * BLOCK_M
    box: gl.constexpr = [1, 1, BLOCK_M, DQ_COLS]
    for c in gl.static_range(2):
        tma_reduce_add(dq_desc, [off_b, off_hq, start_m, c * DQ_COLS],
                       reinterpret(dq_bufs.index(c), gl.float32, box, dq_desc.layout))


@gluon.jit
def _release_dq_stage(t, total):
    """NAMED_BAR = 2, producer, after _retire_dq(t): once the reduce-adds
    have read the staging buffers, let the consumers stage step t + 1 (the
    last step has no successor: no arrival)."""
    tma.store_wait(0)
    if t + 1 < total:
        _named_bar(_DQ_EMPTY_ARRIVE)


@gluon.jit
def _attn_bwd_load(q_desc, k_desc, v_desc, do_desc, LSE, DELTA, k_smem, v_smem, q_bufs, do_bufs, stat_bufs,
                   kv_ready, q_ready, do_ready, qdo_empty,
                   off_b, off_hkv, start_n, m_lo, m_hi, GROUP,
                   stride_lz, stride_lh, stride_dz, stride_dh, N_Q, sm_scale,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                   NUM_STAGES: gl.constexpr, GROUP_SPLIT: gl.constexpr,
                   q1_desc, k1_desc, q1_bufs, k1_smem, QK1: gl.constexpr,
                   dq_desc=None, dq_bufs=None, NAMED_BAR: gl.constexpr = 0, q_row0=0, k_row0=0):
    """Producer partition (1 warp): K and V once, then Q, dO and the rows'
    statistics of query tiles [m_lo, m_hi) of every query head of the group
    (_load_qdo; with GROUP_SPLIT > 1 the group is the program's slice).
    NAMED_BAR = 2: before loading ring step it >= NUM_STAGES it retires step
    it - NUM_STAGES (_retire_dq: its slot is then free), after the load it
    releases the dQ staging buffers; the last steps are retired at the end.
    NAMED_BAR = 2 with QK1 > 0 (the 128-row step, Q_HALVES): the Q / dO
    slots are freed by qdo_empty as without it, and after loading step it
    the producer retires step it - 1's dQ pieces (_retire_dq_pieces; the
    consumers stage them after their qdo_empty arrival), the last step's
    after the loop.  q_row0, k_row0: a packed sequence's first query and key
    rows (IS_VARLEN: the keys-as-M step; 0 otherwise)."""
    _load_kv_block(k_desc, v_desc, k_smem, v_smem, kv_ready, off_b, off_hkv, k_row0 + start_n, BLOCK_N, HEAD_DIM,
                   GROUP_SPLIT, k1_desc, k1_smem, QK1)
    n_m = m_hi - m_lo
    total = GROUP * n_m
    DQ_COLS: gl.constexpr = HEAD_DIM // 2
    PIECES: gl.constexpr = NAMED_BAR == 2 and QK1 > 0
    if PIECES:
        N_PIECES: gl.constexpr = (HEAD_DIM + QK1) // dq_bufs.shape[2]
        _free_dq_slots(total * N_PIECES, dq_bufs.shape[0] // 2)
        prev_hq = off_hkv * GROUP
        prev_m = m_lo * BLOCK_M
        it = 0
        for g in range(GROUP):
            for mb in range(m_lo, m_hi):
                off_hq = off_hkv * GROUP + g
                _load_qdo(q_desc, do_desc, LSE, DELTA, q_bufs, do_bufs, stat_bufs, q_ready, do_ready, qdo_empty,
                          off_b, off_hq, mb, it,
                          stride_lz, stride_lh, stride_dz, stride_dh, N_Q, sm_scale, BLOCK_M, HEAD_DIM, NUM_STAGES,
                          q1_desc, q1_bufs, QK1)
                if it > 0:
                    _retire_dq_pieces(it - 1, total * N_PIECES, dq_desc, dq_bufs, off_b, prev_hq, prev_m, N_PIECES)
                prev_hq = off_hq
                prev_m = mb * BLOCK_M
                it += 1
        if total > 0:
            _retire_dq_pieces(total - 1, total * N_PIECES, dq_desc, dq_bufs, off_b, prev_hq, prev_m, N_PIECES)
    else:
        if NAMED_BAR == 2:
            if total > 0:
                _named_bar(_DQ_EMPTY_ARRIVE)  # the staging buffers start free
        it = 0
        for g in range(GROUP):
            for mb in range(m_lo, m_hi):
                if NAMED_BAR == 2:
                    if it >= NUM_STAGES:
                        _retire_dq(it - NUM_STAGES, dq_desc, dq_bufs, off_b, off_hkv, m_lo, n_m, GROUP, BLOCK_M,
                                   DQ_COLS, q_row0)
                _load_qdo(q_desc, do_desc, LSE, DELTA, q_bufs, do_bufs, stat_bufs, q_ready, do_ready, qdo_empty,
                          off_b, off_hkv * GROUP + g, mb, it,
                          stride_lz, stride_lh, stride_dz, stride_dh, N_Q, sm_scale, BLOCK_M, HEAD_DIM, NUM_STAGES,
                          q1_desc, q1_bufs, QK1, NAMED_BAR != 2, q_row0)
                if NAMED_BAR == 2:
                    if it >= NUM_STAGES:
                        _release_dq_stage(it - NUM_STAGES, total)
                it += 1
        if NAMED_BAR == 2:
            for t in range(gl.maximum(total - NUM_STAGES, 0), total):
                _retire_dq(t, dq_desc, dq_bufs, off_b, off_hkv, m_lo, n_m, GROUP, BLOCK_M, DQ_COLS, q_row0)
                _release_dq_stage(t, total)


@gluon.jit
def _visible(keys, rows, N_K, causal_shift, window_lo, IS_CAUSAL: gl.constexpr, HAS_WINDOW: gl.constexpr,
             ROW_BOUND: gl.constexpr = False):
    """Which (key, row) pairs of a score tile are kept: the key exists and,
    when causal, row i sees key j <= i + causal_shift, with HAS_WINDOW only
    keys j >= i + window_lo (keys, rows: broadcast index tensors).  ROW_BOUND
    (causal, no window): the same as one compare per score, each key's first
    row j - causal_shift, set past every row for keys past N_K."""
    if IS_CAUSAL and ROW_BOUND and not HAS_WINDOW:
        return rows >= gl.where(keys < N_K, keys - causal_shift, 2147483647)
    keep = keys < N_K
    if IS_CAUSAL:
        keep = keep & (keys <= rows + causal_shift)
    if HAS_WINDOW:
        keep = keep & (keys >= rows + window_lo)
    return keep


@gluon.jit
def _dropout_block(drop, off_b, GROUP, key0):
    """A key block's dropout state from the kernel's arguments (SEED,
    philox_offset, threshold, scale, H_KV, RNG_ROWS, RNG_COLS): the Philox
    key, the counter of (row 0, key 0) of query head 0 of batch entry off_b
    (kernels/score.py), a head's counter stride, the row stride, the
    threshold t << 16 (select_kept), the scale and this warpgroup's first
    score key."""
    seed_ptr, philox_offset, thresh, scale, h_kv, rng_rows, rng_cols = drop
    k0, k1 = philox_keys(gl.load(seed_ptr))
    rows_cols = rng_rows.to(gl.int64) * rng_cols
    base_b = philox_offset + (off_b * h_kv * GROUP).to(gl.int64) * rows_cols
    return k0, k1, base_b, rows_cols, rng_cols, thresh.to(gl.uint32) << 16, scale, key0


@gluon.jit
def _reduce_dq(dq, dq_stage, dq_desc, off_b, off_hq, start_m, col, BLOCK_M: gl.constexpr, COLS: gl.constexpr,
               PENDING: gl.constexpr = 0, kept=0, ZERO_TAIL: gl.constexpr = False):
    """This warpgroup's dQ piece (BLOCK_M rows, COLS columns from col) into
    the staging buffer and reduced (added) into dQ by TMA.  PENDING: how many
    of this warpgroup's latest reduce-adds may still be reading their own
    staging buffers (0 with one buffer; with B buffers used in turn, B - 1).
    ZERO_TAIL: rows from `kept` on are zeroed in the staging buffer first
    (_zero_dq_tail)."""
    tma.store_wait(PENDING)  # the reduce that last used this buffer has read it
    dq_stage.store(dq)
    if ZERO_TAIL:
        _zero_dq_tail(dq_stage, kept)
    fence_async_shared()
    tma_reduce_add(dq_desc, [off_b, off_hq, start_m, col],
                   reinterpret(dq_stage, gl.float32, [1, 1, BLOCK_M, COLS], dq_desc.layout))


@gluon.jit
def _reduce_dq_piece(dq, dq_bufs, dq_desc, off_b, off_hq, start_m, col, it, j: gl.constexpr, N_PIECES: gl.constexpr,
                     CONSUMER: gl.constexpr, STAGE_BUFS: gl.constexpr, BLOCK_M: gl.constexpr, COLS: gl.constexpr,
                     kept=0, ZERO_TAIL: gl.constexpr = False):
    """_reduce_dq of piece j of ring step it (N_PIECES per step) through this
    warpgroup's STAGE_BUFS staging buffers of dq_bufs (DQ_STAGE_BUFS per
    consumer), taken in turn by piece number it * N_PIECES + j."""
    if N_PIECES % STAGE_BUFS == 0:
        slot = CONSUMER * STAGE_BUFS + j % STAGE_BUFS  # (it * N_PIECES) % STAGE_BUFS = 0: a constant
    else:
        slot = CONSUMER * STAGE_BUFS + (it * N_PIECES + j) % STAGE_BUFS
    _reduce_dq(dq, dq_bufs.index(slot), dq_desc, off_b, off_hq, start_m, col, BLOCK_M, COLS, STAGE_BUFS - 1,
               kept, ZERO_TAIL)


@gluon.jit
def _probs(s_tok, stat_bufs, s, start_m, keys, N_K, qk_scale, causal_shift, window_lo, BLOCK_M: gl.constexpr,
           Q_DIM: gl.constexpr, MASKED: gl.constexpr, IS_CAUSAL: gl.constexpr, HAS_WINDOW: gl.constexpr,
           ROW_BOUND: gl.constexpr = False):
    """P = exp2(S * qk_scale - lse2) of a score tile once its wgmma group is
    done (the one after it, dP, may still run), masked when MASKED: the
    query rows [start_m, + BLOCK_M) along dim Q_DIM (0: queries x keys,
    SPLIT_D; 1: keys x queries, S^T), this warpgroup's keys along the other."""
    sc = warpgroup_mma_wait(1, deps=(s_tok,))
    q_layout: gl.constexpr = gl.SliceLayout(1 - Q_DIM, sc.type.layout)
    lse2 = stat_bufs.index(2 * s).load(q_layout)
    p = gl.exp2(sc * qk_scale - gl.expand_dims(lse2, 1 - Q_DIM))
    if MASKED:
        rows = start_m + gl.arange(0, BLOCK_M, layout=q_layout)
        p = gl.where(_visible(gl.expand_dims(keys, Q_DIM), gl.expand_dims(rows, 1 - Q_DIM), N_K, causal_shift,
                              window_lo, IS_CAUSAL, HAS_WINDOW, ROW_BOUND), p, 0.0)
    return p


# NAMED_BAR: hardware (named) barriers.  Triton 3.6's warp specialization
# takes barrier 0 for the default partition (consumer 0), 1 for the
# partition switch and 2 + i for worker partition i (consumer 1: 2, the
# producer: 3); 8-10 are free.  CONSUMERS_BAR_ID: the two consumer
# warpgroups' 256 threads (the dS^T exchange); with NAMED_BAR = 2 also
# DQ_FULL_BAR_ID / DQ_EMPTY_BAR_ID: those and the producer warp's 32 (dQ
# staged by both consumers / the staging buffers read by the producer's
# reduce-adds).
CONSUMERS_BAR_ID, DQ_FULL_BAR_ID, DQ_EMPTY_BAR_ID = 8, 9, 10
_CONSUMERS_SYNC = gl.constexpr(f"bar.sync {CONSUMERS_BAR_ID}, 256;\n\tmov.u32 $0, 0;")
_DQ_FULL_ARRIVE = gl.constexpr(f"bar.arrive {DQ_FULL_BAR_ID}, 288;\n\tmov.u32 $0, 0;")
_DQ_FULL_SYNC = gl.constexpr(f"bar.sync {DQ_FULL_BAR_ID}, 288;\n\tmov.u32 $0, 0;")
_DQ_EMPTY_ARRIVE = gl.constexpr(f"bar.arrive {DQ_EMPTY_BAR_ID}, 288;\n\tmov.u32 $0, 0;")
_DQ_EMPTY_SYNC = gl.constexpr(f"bar.sync {DQ_EMPTY_BAR_ID}, 288;\n\tmov.u32 $0, 0;")


# NAMED_BAR = 2 on the 128-row split Q K^T step (Q_HALVES): dQ pieces through
# the producer warp, per consumer c and staging slot k the dQ-full barrier
# DQ_PIECE_BAR_BASE + 6 c + 2 k and the dQ-empty barrier one above, 160
# threads each (that consumer warpgroup and the producer warp): ids 4-7 and
# 10-13 for two slots, around CONSUMERS_BAR_ID (8: the TMA_DKV epilogue's
# sync of both consumers, which may run while the producer has yet to sync
# on a consumer's last dQ-full arrival) and above Triton's 0-3 (two worker
# partitions; this build has no third).  The ids are a register operand
# (bar.sync a, b takes a = 0-15 as an immediate or a register,
# warp-uniform): the slot of a piece is a run-time value.
DQ_PIECE_BAR_BASE = gl.constexpr(4)
_PIECE_SYNC = gl.constexpr("bar.sync $1, 160;\n\tmov.u32 $0, 0;")
_PIECE_ARRIVE = gl.constexpr("bar.arrive $1, 160;\n\tmov.u32 $0, 0;")


@gluon.jit
def _piece_full_bar(CONSUMER: gl.constexpr, slot):
    """The dQ-full barrier id of a consumer's staging slot (its dQ-empty one: + 1)."""
    return DQ_PIECE_BAR_BASE + 6 * CONSUMER + 2 * slot


@gluon.jit
def _stage_dq_piece(dq, dq_bufs, piece, CONSUMER: gl.constexpr):
    """NAMED_BAR = 2 on the 128-row step, consumer: this warpgroup's dQ piece
    number `piece` (counted over its steps) into its staging slot piece %
    STAGE_BUFS once the producer has read that slot's previous piece (the
    dQ-empty sync), then the dQ-full arrival, which does not wait: the
    producer issues the reduce-add (_retire_dq_pieces).  No TMA issue, no
    store_wait and no warpgroup barrier before an issue in the consumer."""
    STAGE_BUFS: gl.constexpr = dq_bufs.shape[0] // 2
    slot = piece % STAGE_BUFS
    bar = _piece_full_bar(CONSUMER, slot)
    _named_bar_at(_PIECE_SYNC, bar + 1)
    dq_bufs.index(CONSUMER * STAGE_BUFS + slot).store(dq)
    fence_async_shared()
    _named_bar_at(_PIECE_ARRIVE, bar)


@gluon.jit
def _free_dq_slots(total_pieces, STAGE_BUFS: gl.constexpr):
    """NAMED_BAR = 2 on the 128-row step, producer: the staging slots start
    free (one dQ-empty arrival per consumer and slot that a piece will use)."""
    for k in gl.static_range(STAGE_BUFS):
        if k < total_pieces:
            for c in gl.static_range(2):
                _named_bar_at(_PIECE_ARRIVE, gl.to_tensor(_piece_full_bar(c, k) + 1))


@gluon.jit
def _retire_dq_pieces(t, total_pieces, dq_desc, dq_bufs, off_b, off_hq, start_m, N_PIECES: gl.constexpr):
    """NAMED_BAR = 2 on the 128-row step, producer: the N_PIECES dQ pieces of
    ring step t (query head off_hq, rows from start_m; consumer c's rows
    [start_m + 64 c, + 64), piece j's columns [j DQW, + DQW)): per piece and
    consumer the dQ-full sync, the reduce-add from that consumer's slot;
    then the wait for both reads and, where a later piece takes the slot,
    the dQ-empty arrivals.  Each barrier's arrivals and syncs alternate: a
    consumer's full arrival for a slot's next piece follows its empty sync
    for it, which needs this arrival, which follows this full sync."""
    STAGE_BUFS: gl.constexpr = dq_bufs.shape[0] // 2
    HALF: gl.constexpr = dq_bufs.shape[1]
    DQW: gl.constexpr = dq_bufs.shape[2]
    box: gl.constexpr = [1, 1, HALF, DQW]
    for j in gl.static_range(N_PIECES):
        piece = t * N_PIECES + j
        slot = piece % STAGE_BUFS
        for c in gl.static_range(2):
            _named_bar_at(_PIECE_SYNC, _piece_full_bar(c, slot))
            tma_reduce_add(dq_desc, [off_b, off_hq, start_m + c * HALF, j * DQW],
                           reinterpret(dq_bufs.index(c * STAGE_BUFS + slot), gl.float32, box, dq_desc.layout))
        tma.store_wait(0)
        if piece + STAGE_BUFS < total_pieces:
            for c in gl.static_range(2):
                _named_bar_at(_PIECE_ARRIVE, _piece_full_bar(c, slot) + 1)


@gluon.jit
def _share_pt_ds(it, p, ds, pt_bufs, ds_bufs, ds_ready, CONSUMER: gl.constexpr, SUB_N: gl.constexpr,
                 DS_BUFS: gl.constexpr):
    """SPLIT_D: P^T and dS^T of this warpgroup's SUB_N keys (p, ds: queries
    x keys) into the shared tiles of buffer b = it % DS_BUFS (every product
    after it needs every key: dV and dK take them as the A operand with the
    keys as M, dQ takes dS^T transposed), then the wait on ds_ready[b] for
    the other warpgroup's; returns b."""
    b = it % DS_BUFS
    if DS_BUFS == 1:
        # Both warpgroups have finished reading the previous tile's (ds_ready[1]).
        mbarrier.wait(ds_ready.index(1), (it & 1) ^ 1)
    pt_bufs.index(b).slice(CONSUMER * SUB_N, SUB_N, dim=0).store(gl.permute(p.to(pt_bufs.dtype), [1, 0]))
    ds_bufs.index(b).slice(CONSUMER * SUB_N, SUB_N, dim=0).store(gl.permute(ds, [1, 0]))
    fence_async_shared()
    mbarrier.arrive(ds_ready.index(b))
    mbarrier.wait(ds_ready.index(b), (it // DS_BUFS) & 1)
    return b


@gluon.jit
def _attn_bwd_step(it, mb, k_c, v_c, k_cols, q_bufs, do_bufs, ds_bufs, dq_bufs, stat_bufs,
                   q_ready, do_ready, qdo_empty, ds_ready, dk, dv, keys, dq_desc,
                   off_b, off_hq, N_Q, N_K, qk_scale, sm_scale, causal_shift, window_lo,
                   CONSUMER: gl.constexpr, NUM_STAGES: gl.constexpr, BLOCK_M: gl.constexpr,
                   SUB_N: gl.constexpr, HEAD_DIM: gl.constexpr, DQ_COLS: gl.constexpr,
                   MASKED: gl.constexpr, IS_CAUSAL: gl.constexpr, HAS_WINDOW: gl.constexpr,
                   drop, DROPOUT: gl.constexpr, NAMED_BAR: gl.constexpr = 0, ROW_BOUND: gl.constexpr = False,
                   DQ_STAGE_BUFS: gl.constexpr = 1, rng=None, OWN_FIRST: gl.constexpr = False, q_row0=0,
                   ZERO_TAIL: gl.constexpr = False):
    """One query tile [mb * BLOCK_M, + BLOCK_M) against this warpgroup's keys
    (q_row0: a packed sequence's first row, IS_VARLEN, for dQ's reduce-add;
    ZERO_TAIL, IS_VARLEN: the tile's rows past N_Q are zeroed first).
    drop: the block's dropout state (_dropout_block; DROPOUT only).  rng
    (DROPOUT 4 - 6): the RNG warps' keep bits and their ready barriers
    (_attn_bwd_rng; a slot is free again with the step's qdo_empty arrival).
    NAMED_BAR >= 1: the dS^T exchange through a hardware barrier of both
    consumer warpgroups instead of the ds_ready mbarrier; 2: dQ also handed
    to the producer warp through named barriers (_retire_dq), which also
    frees the Q / dO slot (no qdo_empty arrival, no TMA in the consumers).
    dq_bufs: every consumer's DQ_STAGE_BUFS dQ staging buffers; more than
    one only with NAMED_BAR < 2 (step it stages in this warpgroup's buffer
    it % DQ_STAGE_BUFS)."""
    t_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                      instr_shape=[16, BLOCK_M, 16])
    kv_layout: gl.constexpr = dk.type.layout
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kv_layout, k_width=2)
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, DQ_COLS, 16])
    dtype: gl.constexpr = q_bufs.dtype
    s = it % NUM_STAGES
    ph = (it // NUM_STAGES) & 1
    start_m = mb * BLOCK_M
    q_s = q_bufs.index(s)
    do_s = do_bufs.index(s)
    mbarrier.wait(q_ready.index(s), ph)
    if ZERO_TAIL:
        # A packed sequence's last query tile holds the next sequence's first
        # rows.  They get weight 0, but 0 * NaN is NaN: Q's and dO's rows
        # past N_Q become 0 first (S^T = 0 there, so P^T = exp2(0 - inf) = 0
        # with their lse2 of +inf, dP^T is finite, and dV += P^T dO, dK +=
        # dS^T Q add exact zeros), each consumer zeroing half of the passes.
        if start_m + BLOCK_M > N_Q:
            mbarrier.wait(do_ready.index(s), ph)
            _zero_pair_rows_from(q_s, do_s, N_Q - start_m, CONSUMER)
            _named_bar(_CONSUMERS_SYNC)
    st_tok = warpgroup_mma(k_c, q_s.permute((1, 0)), gl.zeros([SUB_N, BLOCK_M], gl.float32, t_layout),
                           use_acc=False, is_async=True)
    mbarrier.wait(do_ready.index(s), ph)
    dpt_tok = warpgroup_mma(v_c, do_s.permute((1, 0)), gl.zeros([SUB_N, BLOCK_M], gl.float32, t_layout),
                            use_acc=False, is_async=True)
    col_layout: gl.constexpr = gl.SliceLayout(0, t_layout)
    pt = _probs(st_tok, stat_bufs, s, start_m, keys, N_K, qk_scale, causal_shift, window_lo, BLOCK_M, 1, MASKED,
                IS_CAUSAL, HAS_WINDOW, ROW_BOUND)
    if DROPOUT:
        # The keep mask of this tile (keys x queries), drawn while dP^T runs.
        k0, k1, base_b, rows_cols, rng_cols, t_hi, scale, key0 = drop
        rng_head = base_b + off_hq.to(gl.int64) * rows_cols
        # P^T with the dropped scores negated: no register set more than
        # P^T itself through the wait for dP^T (the mask's 32-64 registers
        # on top of dK, dV, S^T and dP^T spilled 2 KB at d = 128).
        if DROPOUT >= 3:  # the RNG warps' keep bits of this warpgroup's keys, tested after the dP^T wait
            # (the slot is released with Q and dO's, qdo_empty, at the step's end)
            keep_bufs, keep_ready = rng
            mbarrier.wait(keep_ready.index(s), ph)
            bits_smem = keep_bufs.index(s).slice(CONSUMER * (SUB_N // 16), SUB_N // 16, dim=0)
        elif DROPOUT == 2:  # keep flags (0 / 1) compared against 1
            keep = tile_keep_keys_first_shared(k0, k1, rng_head, start_m, key0, rng_cols, t_hi, SUB_N, BLOCK_M, 4)
            pt = negate_dropped(pt, gl.convert_layout(keep, t_layout, assert_trivial=True), 1)
        else:
            halves = tile_halves_keys_first(k0, k1, rng_head, start_m, key0, rng_cols, SUB_N, BLOCK_M, 4)
            pt = negate_dropped(pt, gl.convert_layout(halves, t_layout, assert_trivial=True), t_hi)
    dpt = warpgroup_mma_wait(0, deps=(dpt_tok,))
    delta = stat_bufs.index(2 * s + 1).load(col_layout)
    if DROPOUT == 6:
        # Each keep flag tested in its bit (one LOP3 to a predicate) and used
        # once, by one select: P^T Z; then dS^T = P^T Z dP^T r - P^T delta, a
        # product and an FMA on top of the plain step's; dV's keep scale r is
        # applied once to the block's sum (_attn_bwd_compute).
        pzt = select_nonzero(pt, gl.convert_layout(kept_keys_first_from_call_bits(bits_smem, SUB_N, BLOCK_M, 4),
                                                   t_layout, assert_trivial=True))
        dst = ((pzt * dpt) * (sm_scale * scale) - pt * gl.expand_dims(delta, 0)).to(dtype)
        pt = pzt
    elif DROPOUT:
        # dV = (P Z r)^T dO and dP = Z r (dO V^T) (kernels/bwd.py); delta is
        # still rowsum(dO * O) (the forward's O is the dropped one).
        dst = (gl.abs(pt) * (gl.where(pt >= 0.0, dpt * (sm_scale * scale), 0.0) - gl.expand_dims(delta, 0)))
        dst = dst.to(dtype)
        pt = gl.maximum(pt, 0.0) * scale
    else:
        dst = (pt * (dpt * sm_scale - gl.expand_dims(delta, 0))).to(dtype)
    dv_tok = warpgroup_mma(gl.convert_layout(pt.to(dtype), op_layout), do_s, dv, is_async=True)
    dk_tok = warpgroup_mma(gl.convert_layout(dst, op_layout), q_s, dk, is_async=True)
    # dS^T of this warpgroup's keys into the shared tile; dQ needs every key.
    b = it % 2
    ds_bufs.index(b).slice(CONSUMER * SUB_N, SUB_N, dim=0).store(dst)
    fence_async_shared()
    if NAMED_BAR >= 1:
        gl.static_assert(not OWN_FIRST, "OWN_FIRST: the exchange through ds_ready")
        _named_bar(_CONSUMERS_SYNC)  # every consumer's rows of buffer b written
    else:
        mbarrier.arrive(ds_ready.index(b))
    if OWN_FIRST:
        # dQ = dS K as two products over the key halves: this warpgroup's
        # half (written by it, visible after the bar.sync that precedes its
        # arrival) while the other warpgroup's is awaited, then that one.
        gl.static_assert(ds_bufs.shape[1] == 2 * SUB_N, "OWN_FIRST: two warpgroups' keys")
        dq_tok = warpgroup_mma(ds_bufs.index(b).slice(CONSUMER * SUB_N, SUB_N, dim=0).permute((1, 0)),
                               k_cols.slice(CONSUMER * SUB_N, SUB_N, dim=0),
                               gl.zeros([BLOCK_M, DQ_COLS], gl.float32, dq_layout), use_acc=False, is_async=True)
        mbarrier.wait(ds_ready.index(b), (it // 2) & 1)
        dq_tok = warpgroup_mma(ds_bufs.index(b).slice((1 - CONSUMER) * SUB_N, SUB_N, dim=0).permute((1, 0)),
                               k_cols.slice((1 - CONSUMER) * SUB_N, SUB_N, dim=0), dq_tok, is_async=True)
    else:
        if NAMED_BAR == 0:
            mbarrier.wait(ds_ready.index(b), (it // 2) & 1)
        dq_tok = warpgroup_mma(ds_bufs.index(b).permute((1, 0)), k_cols,
                               gl.zeros([BLOCK_M, DQ_COLS], gl.float32, dq_layout), use_acc=False, is_async=True)
    dv, dk, dq = warpgroup_mma_wait(0, deps=(dv_tok, dk_tok, dq_tok))
    if NAMED_BAR == 2:
        # The producer warp adds dQ into the buffer (_retire_dq): wait until
        # it has read the last one, stage this one, and signal (no wait)
        # that it is staged and that Q and dO of slot s are no longer read.
        _named_bar(_DQ_EMPTY_SYNC)
        dq_bufs.index(CONSUMER).store(dq)
        if ZERO_TAIL:
            _zero_dq_tail(dq_bufs.index(CONSUMER), N_Q - start_m)
        fence_async_shared()
        _named_bar(_DQ_FULL_ARRIVE)
    else:
        mbarrier.arrive(qdo_empty.index(s))
        _reduce_dq_piece(dq, dq_bufs, dq_desc, off_b, off_hq, q_row0 + start_m, CONSUMER * DQ_COLS, it, 0, 1,
                         CONSUMER, DQ_STAGE_BUFS, BLOCK_M, DQ_COLS, N_Q - start_m, ZERO_TAIL)
    return dk, dv


@gluon.jit
def _attn_bwd_step_split(it, mb, k_smem, v_smem, q_bufs, do_bufs, pt_bufs, ds_bufs, dq_bufs, stat_bufs,
                         q_ready, do_ready, qdo_empty, ds_ready, dk, dv, keys, dq_desc,
                         off_b, off_hq, N_Q, N_K, qk_scale, sm_scale, causal_shift, window_lo,
                         CONSUMER: gl.constexpr, NUM_STAGES: gl.constexpr, BLOCK_M: gl.constexpr,
                         SUB_N: gl.constexpr, DQ_COLS: gl.constexpr, DS_BUFS: gl.constexpr,
                         DQ_CHUNK: gl.constexpr, MASKED: gl.constexpr, IS_CAUSAL: gl.constexpr,
                         HAS_WINDOW: gl.constexpr, drop, DROPOUT: gl.constexpr, ROW_BOUND: gl.constexpr = False):
    """SPLIT_D: one query tile.  This warpgroup's scores are those of its
    SUB_N keys, with the query rows as the wgmma M dim (S = Q K_c^T); P^T and
    dS^T go through shared memory, and its dK, dV and dQ are the head-dim
    columns [CONSUMER * DQ_COLS, + DQ_COLS) of all keys / rows, dQ made and
    reduced DQ_CHUNK columns at a time (one staging buffer)."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                      instr_shape=[16, SUB_N, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, DQ_CHUNK, 16])
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    dtype: gl.constexpr = q_bufs.dtype
    s = it % NUM_STAGES
    ph = (it // NUM_STAGES) & 1
    start_m = mb * BLOCK_M
    col0: gl.constexpr = CONSUMER * DQ_COLS
    # z is 0 (N_Q >= 0) but neither constant nor loop-invariant to the
    # compiler: the operand descriptors of every k-step (Q, dO and the
    # resident K and V; 76 64-bit values at d = 256) are then made inside
    # the loop instead of being hoisted out of it into live registers.
    z = it & (N_Q >> 31)
    q_s = q_bufs.index(s + z)
    do_s = do_bufs.index(s + z)
    kv_shape: gl.constexpr = [1, k_smem.shape[0], k_smem.shape[1]]
    k_all = reinterpret(k_smem, dtype, kv_shape, k_smem.layout).index(z)
    v_all = reinterpret(v_smem, dtype, kv_shape, v_smem.layout).index(z)
    mbarrier.wait(q_ready.index(s), ph)
    s_tok = warpgroup_mma(q_s, k_all.slice(CONSUMER * SUB_N, SUB_N, dim=0).permute((1, 0)),
                          gl.zeros([BLOCK_M, SUB_N], gl.float32, s_layout), use_acc=False, is_async=True)
    mbarrier.wait(do_ready.index(s), ph)
    dp_tok = warpgroup_mma(do_s, v_all.slice(CONSUMER * SUB_N, SUB_N, dim=0).permute((1, 0)),
                           gl.zeros([BLOCK_M, SUB_N], gl.float32, s_layout), use_acc=False, is_async=True)
    p = _probs(s_tok, stat_bufs, s, start_m, keys, N_K, qk_scale, causal_shift, window_lo, BLOCK_M, 0, MASKED,
               IS_CAUSAL, HAS_WINDOW, ROW_BOUND)
    if DROPOUT:
        # This warpgroup's scores are queries x keys here: the forward's draw.
        k0, k1, base_b, rows_cols, rng_cols, t_hi, scale, key0 = drop
        halves = tile_halves_rows_first(k0, k1, base_b + off_hq.to(gl.int64) * rows_cols, start_m, key0, rng_cols,
                                        BLOCK_M, SUB_N, 4)
        p = negate_dropped(p, gl.convert_layout(halves, s_layout, assert_trivial=True), t_hi)
    dp = warpgroup_mma_wait(0, deps=(dp_tok,))
    delta = stat_bufs.index(2 * s + 1).load(row_layout)
    if DROPOUT:
        # (as _attn_bwd_step: p carries the keep mask in its sign)
        ds = (gl.abs(p) * (gl.where(p >= 0.0, dp * (sm_scale * scale), 0.0) - gl.expand_dims(delta, 1))).to(dtype)
        p = gl.maximum(p, 0.0) * scale
    else:
        ds = (p * (dp * sm_scale - gl.expand_dims(delta, 1))).to(dtype)
    # P^T and dS^T of this warpgroup's keys through the shared tiles.
    b = _share_pt_ds(it, p, ds, pt_bufs, ds_bufs, ds_ready, CONSUMER, SUB_N, DS_BUFS)
    ds_t = ds_bufs.index(b)
    dv_tok = warpgroup_mma(pt_bufs.index(b), do_s.slice(col0, DQ_COLS, dim=1), dv, is_async=True)
    dk_tok = warpgroup_mma(ds_t, q_s.slice(col0, DQ_COLS, dim=1), dk, is_async=True)
    dq_tok = warpgroup_mma(ds_t.permute((1, 0)), k_all.slice(col0, DQ_CHUNK, dim=1),
                           gl.zeros([BLOCK_M, DQ_CHUNK], gl.float32, dq_layout), use_acc=False, is_async=True)
    # Q and dO are free once dV and dK are done: the next tile loads under dQ.
    dv, dk = warpgroup_mma_wait(1, deps=(dv_tok, dk_tok))
    mbarrier.arrive(qdo_empty.index(s))
    for j in gl.static_range(DQ_COLS // DQ_CHUNK):
        dq = warpgroup_mma_wait(0, deps=(dq_tok,))
        if j + 1 < DQ_COLS // DQ_CHUNK:
            # The next chunk's product runs while this one is staged.
            dq_tok = warpgroup_mma(ds_t.permute((1, 0)), k_all.slice(col0 + (j + 1) * DQ_CHUNK, DQ_CHUNK, dim=1),
                                   gl.zeros([BLOCK_M, DQ_CHUNK], gl.float32, dq_layout), use_acc=False,
                                   is_async=True)
        elif DS_BUFS == 1:
            mbarrier.arrive(ds_ready.index(1))
        _reduce_dq_piece(dq, dq_bufs, dq_desc, off_b, off_hq, start_m, col0 + j * DQ_CHUNK, it, j,
                         DQ_COLS // DQ_CHUNK, CONSUMER, 1, BLOCK_M, DQ_CHUNK)
    return dk, dv


@gluon.jit
def _attn_bwd_any_step(it, mb, k_smem, v_smem, k_c, v_c, k_cols, q_bufs, do_bufs, pt_bufs, ds_bufs, dq_bufs,
                       stat_bufs, q_ready, do_ready, qdo_empty, ds_ready, dk, dv, keys, dq_desc,
                       off_b, off_hq, N_Q, N_K, qk_scale, sm_scale, causal_shift, window_lo,
                       CONSUMER: gl.constexpr, NUM_STAGES: gl.constexpr, BLOCK_M: gl.constexpr,
                       SUB_N: gl.constexpr, HEAD_DIM: gl.constexpr, DQ_COLS: gl.constexpr,
                       SPLIT_D: gl.constexpr, DS_BUFS: gl.constexpr, DQ_CHUNK: gl.constexpr,
                       MASKED: gl.constexpr, IS_CAUSAL: gl.constexpr, HAS_WINDOW: gl.constexpr,
                       drop, DROPOUT: gl.constexpr, NAMED_BAR: gl.constexpr = 0, ROW_BOUND: gl.constexpr = False,
                       DQ_STAGE_BUFS: gl.constexpr = 1, rng=None, OWN_FIRST: gl.constexpr = False, q_row0=0,
                       ZERO_TAIL: gl.constexpr = False):
    """One query tile through the path the configuration takes
    (_attn_bwd_step_split when SPLIT_D, else _attn_bwd_step; NAMED_BAR
    only there)."""
    if SPLIT_D:
        dk, dv = _attn_bwd_step_split(it, mb, k_smem, v_smem, q_bufs, do_bufs, pt_bufs, ds_bufs, dq_bufs,
                                      stat_bufs, q_ready, do_ready, qdo_empty, ds_ready, dk, dv,
                                      keys, dq_desc, off_b, off_hq, N_Q, N_K, qk_scale, sm_scale,
                                      causal_shift, window_lo, CONSUMER, NUM_STAGES, BLOCK_M, SUB_N, DQ_COLS,
                                      DS_BUFS, DQ_CHUNK, MASKED, IS_CAUSAL, HAS_WINDOW, drop, DROPOUT, ROW_BOUND)
    else:
        dk, dv = _attn_bwd_step(it, mb, k_c, v_c, k_cols, q_bufs, do_bufs, ds_bufs, dq_bufs, stat_bufs,
                                q_ready, do_ready, qdo_empty, ds_ready, dk, dv, keys, dq_desc,
                                off_b, off_hq, N_Q, N_K, qk_scale, sm_scale, causal_shift, window_lo,
                                CONSUMER, NUM_STAGES, BLOCK_M, SUB_N, HEAD_DIM, DQ_COLS, MASKED, IS_CAUSAL,
                                HAS_WINDOW, drop, DROPOUT, NAMED_BAR, ROW_BOUND, DQ_STAGE_BUFS, rng,
                                OWN_FIRST=OWN_FIRST, q_row0=q_row0, ZERO_TAIL=ZERO_TAIL)
    return dk, dv


@gluon.jit
def _attn_bwd_producer(q_desc, k_desc, v_desc, do_desc, LSE, DELTA, k_smem, v_smem, q_bufs, do_bufs, stat_bufs,
                       kv_ready, kv_empty, q_ready, do_ready, qdo_empty,
                       off_b, off_hkv, start_n, m_lo, m_hi, n_mb, GROUP, H_KV, n_kb, n_bh,
                       stride_lz, stride_lh, stride_dz, stride_dh, N_Q, N_K, sm_scale, causal_shift, window_lo,
                       BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                       NUM_STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, PERSISTENT: gl.constexpr,
                       HEADS_FIRST: gl.constexpr, HAS_WINDOW: gl.constexpr, GROUP_SPLIT: gl.constexpr,
                       q1_desc, k1_desc, q1_bufs, k1_smem, QK1: gl.constexpr,
                       dq_desc=None, dq_bufs=None, NAMED_BAR: gl.constexpr = 0, q_row0=0, k_row0=0):
    """The producer partition of either form (HEAD_DIM: V's width; QK1 > 0:
    split Q K^T, Q's and K's columns [HEAD_DIM, + QK1) in q1_bufs, k1_smem;
    NAMED_BAR = 2, not persistent: the dQ reduce-adds too)."""
    if PERSISTENT:
        _attn_bwd_load_persistent(q_desc, k_desc, v_desc, do_desc, LSE, DELTA, k_smem, v_smem, q_bufs, do_bufs,
                                  stat_bufs, kv_ready, kv_empty, q_ready, do_ready, qdo_empty,
                                  n_mb, GROUP, H_KV, n_kb, n_bh,
                                  stride_lz, stride_lh, stride_dz, stride_dh, N_Q, N_K, sm_scale, causal_shift,
                                  window_lo, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, IS_CAUSAL, HEADS_FIRST,
                                  HAS_WINDOW, GROUP_SPLIT, q1_desc, k1_desc, q1_bufs, k1_smem, QK1)
    else:
        _attn_bwd_load(q_desc, k_desc, v_desc, do_desc, LSE, DELTA, k_smem, v_smem, q_bufs, do_bufs, stat_bufs,
                       kv_ready, q_ready, do_ready, qdo_empty, off_b, off_hkv, start_n, m_lo, m_hi, GROUP,
                       stride_lz, stride_lh, stride_dz, stride_dh, N_Q, sm_scale,
                       BLOCK_M, BLOCK_N, HEAD_DIM, NUM_STAGES, GROUP_SPLIT, q1_desc, k1_desc, q1_bufs, k1_smem, QK1,
                       dq_desc, dq_bufs, NAMED_BAR, q_row0, k_row0)


@gluon.jit
def _attn_bwd_rng(keep_bufs, keep_ready, qdo_empty, drop, off_b, off_hkv, start_n, m_lo, m_hi, GROUP):
    """RNG partition (RNG_NUM_WARPS warps, 4 or 2; DROPOUT_RNG_WARPS, not persistent): the keep
    bits of every step's keys x queries tile (each Philox call's eight,
    call_keep_bits; 1 kept), both
    consumers' keys, into slot it % NUM_STAGES of keep_bufs, in the steps'
    order (the producer's: every query head of the group, query tiles
    [m_lo, m_hi)).  Each Philox call is made once, one per thread per
    16-key slab, on warps that are otherwise idle; the consumers read their
    rows (_attn_bwd_step, DROPOUT 6) in place of drawing them between their
    products.  A slot is refilled once both consumers are done with the
    step that read it: their qdo_empty arrivals, which also free its Q and
    dO (no arrival of their own, no bar.sync more per step).  (The
    tile sizes come from keep_bufs' shape, (NUM_STAGES, BLOCK_N / 16, 4, 1,
    BLOCK_M / 16, 8): a constexpr in a conditionally added partition's
    arguments arrives as a plain int, which the partition call cannot take.
    The byte-per-score form, DROPOUT_RNG_WARPS = 1, lost in session 39 and
    was removed in session 41.)"""
    NUM_STAGES: gl.constexpr = keep_bufs.shape[0]
    BLOCK_N: gl.constexpr = keep_bufs.shape[1] * 16
    BLOCK_M: gl.constexpr = keep_bufs.shape[4] * 16
    RNG_W: gl.constexpr = gl.num_warps()  # this partition's (RNG_NUM_WARPS)
    k0, k1, base_b, rows_cols, rng_cols, t_hi, scale, key0 = _dropout_block(drop, off_b, GROUP, start_n)
    it = 0
    for g in range(GROUP):
        rng_head = base_b + (off_hkv * GROUP + g).to(gl.int64) * rows_cols
        for mb in range(m_lo, m_hi):
            s = it % NUM_STAGES
            mbarrier.wait(qdo_empty.index(s), ((it // NUM_STAGES) & 1) ^ 1)
            for c in gl.static_range(BLOCK_N // 16):
                bits = tile_call_bits_rng(k0, k1, rng_head, mb * BLOCK_M, key0 + 16 * c, rng_cols, t_hi,
                                          16, BLOCK_M, RNG_W)
                keep_bufs.index(s).slice(c, 1, dim=0).store(bits)
            mbarrier.arrive(keep_ready.index(s))  # (a partition-wide bar.sync, then one thread's arrive)
            it += 1


@gluon.jit
def _zero_dq_tail(dq_stage, kept):
    """ZERO_TAIL: a packed sequence's last query tile (kept < its rows) has
    its staged dQ rows from `kept` on, the next sequence's, zeroed before the
    reduce-add adds the whole tile into dQ: exact zeros there, also where
    this sequence's own K or V hold a NaN (its dS is then 0 * NaN).  The
    barrier first: the pass that holds row `kept` is read back, and other
    threads of the warpgroup stored it."""
    if kept < dq_stage.shape[0]:
        cta_barrier()
        _zero_rows_from_call(dq_stage, kept)


@gluon.jit(noinline=NOINLINE_OK)
def _zero_pair_rows_from(a, b, first, CONSUMER: gl.constexpr):
    """Rows [first, rows) of tiles a and b set to 0, this consumer's half
    of the passes of each (_zero_rows_from; the caller's barrier of both
    consumers completes it), in a call of its own: inlined, its registers
    made ptxas spill in the step loops (compile_check); inlined on Triton
    3.8 all the same (_compat.NOINLINE_OK)."""
    _zero_rows_from(a, first, CONSUMER, 2)
    _zero_rows_from(b, first, CONSUMER, 2)


@gluon.jit
def _attn_bwd_block(DK, DV, dq_desc, k_smem, v_smem, q_bufs, do_bufs, pt_bufs, ds_bufs, dq_bufs, stat_bufs,
                    kv_ready, kv_empty, q_ready, do_ready, qdo_empty, ds_ready,
                    off_b, off_hkv, start_n, m_lo, m_hi, n_mb, GROUP, it, kv_phase,
                    stride_dkz, stride_dkh, stride_dkn, stride_dvz, stride_dvh, stride_dvn,
                    N_Q, N_K, qk_scale, sm_scale, causal_shift, window_lo,
                    CONSUMER: gl.constexpr, NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr,
                    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                    IS_CAUSAL: gl.constexpr, SPLIT_D: gl.constexpr, DS_BUFS: gl.constexpr,
                    DQ_CHUNK: gl.constexpr, RELEASE_KV: gl.constexpr, HAS_WINDOW: gl.constexpr,
                    drop, DROPOUT: gl.constexpr, NAMED_BAR: gl.constexpr = 0, ROW_BOUND: gl.constexpr = False,
                    DQ_STAGE_BUFS: gl.constexpr = 1, dk_desc=None, dv_desc=None,
                    TMA_DKV: gl.constexpr = False, rng=None, OWN_FIRST: gl.constexpr = False, q_row0=0,
                    IS_VARLEN: gl.constexpr = False, NO_LICM: gl.constexpr = False):
    """One key block of a consumer warpgroup: the scores of keys [start_n +
    CONSUMER * SUB_N, + SUB_N); dK and dV of those keys, or with SPLIT_D of
    all BLOCK_N keys in head-dim columns [CONSUMER * DQ_COLS, + DQ_COLS).
    Query tiles [m_lo, m_hi) of every head of the group (m_hi = n_mb
    without a window; with GROUP_SPLIT > 1 off_hkv and GROUP are the
    program's slice of a group, DK / DV its partials: 16-bit with
    GROUP_PARTIALS_16BIT, else float32).  it: ring steps before this block; returns it after
    it.  RELEASE_KV (persistent): arrive on kv_empty once K and V are no
    longer read.  drop: the kernel's dropout arguments (DROPOUT only).
    TMA_DKV (not persistent; SPLIT_D at d = 256 here, the split Q K^T in
    _attn_bwd_block_qk1): dK / dV leave through
    shared memory and a TMA store (dk_desc, dv_desc: their descriptors)
    instead of gl.store.  IS_VARLEN 2 (a packed batch, fwd.varlen_isolate):
    the rows past the sequence that the key block and each head's last query
    tile hold are zeroed first."""
    SUB_N: gl.constexpr = BLOCK_N // NUM_CONSUMERS
    DQ_COLS: gl.constexpr = HEAD_DIM // NUM_CONSUMERS
    k_c = k_smem.slice(CONSUMER * SUB_N, SUB_N, dim=0)
    v_c = v_smem.slice(CONSUMER * SUB_N, SUB_N, dim=0)
    k_cols = k_smem.slice(CONSUMER * DQ_COLS, DQ_COLS, dim=1)
    key0 = start_n + CONSUMER * SUB_N
    if DROPOUT:
        drop = _dropout_block(drop, off_b, GROUP, key0)
    if SPLIT_D:
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                          instr_shape=[16, SUB_N, 16])
        kv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, DQ_COLS, 16])
        keys = key0 + gl.arange(0, SUB_N, layout=gl.SliceLayout(0, s_layout))
        dk = gl.zeros([BLOCK_N, DQ_COLS], gl.float32, kv_layout)
        dv = gl.zeros([BLOCK_N, DQ_COLS], gl.float32, kv_layout)
        out_key0 = start_n
        out_col0 = CONSUMER * DQ_COLS
    else:
        t_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                          instr_shape=[16, BLOCK_M, 16])
        kv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, HEAD_DIM, 16])
        keys = key0 + gl.arange(0, SUB_N, layout=gl.SliceLayout(1, t_layout))
        dk = gl.zeros([SUB_N, HEAD_DIM], gl.float32, kv_layout)
        dv = gl.zeros([SUB_N, HEAD_DIM], gl.float32, kv_layout)
        out_key0 = key0
        out_col0 = 0

    # Query tiles [m_lo, m_full) may hold a masked (key, row) pair for this
    # warpgroup's score keys: the ragged end of K, or when causal a row i
    # with i + causal_shift < key.  Row i sees all of keys [key0, key0 +
    # SUB_N) when i >= key0 + SUB_N - 1 - causal_shift.
    if key0 + SUB_N > N_K:
        m_full = n_mb
    elif IS_CAUSAL:
        m_full = gl.minimum(gl.maximum(gl.cdiv(key0 + SUB_N - 1 - causal_shift, BLOCK_M), m_lo), n_mb)
    else:
        m_full = m_lo

    mbarrier.wait(kv_ready, kv_phase)
    if IS_VARLEN == 2:
        # A key block that reaches past the sequence's keys: K's and V's rows
        # from N_K on (the next sequence's) become 0, so that dS^T (whose P^T
        # is 0 there) stays finite and dQ += dS K adds exact zeros for them.
        gl.static_assert(NUM_CONSUMERS == 2, "packed batches: two consumer warpgroups (_CONSUMERS_SYNC)")
        if (start_n + BLOCK_N > N_K) & (start_n < N_K):
            _zero_pair_rows_from(k_smem, v_smem, N_K - start_n, CONSUMER)
            _named_bar(_CONSUMERS_SYNC)
    if HAS_WINDOW:
        # Row i sees all of keys [key0, key0 + SUB_N) on the window's side
        # when i <= key0 - window_lo: the tiles from m_wide on hold a row
        # past that (the window's edge) and are masked too.  Per head two
        # passes over one masked and one unmasked loop, in the producer's
        # order: the diagonal's masked tiles [m_lo, m_full) and the whole
        # ones [m_full, m_wide), then the window edge's masked tiles
        # [m_wide, m_hi) (and no whole one); as in the forward, one masked
        # loop instance for both edges.
        m_full = gl.minimum(m_full, m_hi)
        m_wide = gl.minimum(gl.maximum(gl.maximum(key0 - window_lo + 1, 0) // BLOCK_M, m_full), m_hi)
        for g in range(GROUP):
            off_hq = off_hkv * GROUP + g
            for edge in range(2):
                masked_lo = m_lo if edge == 0 else m_wide
                masked_hi = m_full if edge == 0 else m_hi
                whole_hi = m_wide if edge == 0 else m_full
                for mb in tl.range(masked_lo, masked_hi, disable_licm=NO_LICM):
                    dk, dv = _attn_bwd_any_step(it, mb, k_smem, v_smem, k_c, v_c, k_cols, q_bufs, do_bufs, pt_bufs,
                                                ds_bufs, dq_bufs, stat_bufs, q_ready, do_ready, qdo_empty, ds_ready,
                                                dk, dv, keys, dq_desc, off_b, off_hq, N_Q, N_K, qk_scale, sm_scale,
                                                causal_shift, window_lo, CONSUMER, NUM_STAGES, BLOCK_M, SUB_N,
                                                HEAD_DIM, DQ_COLS, SPLIT_D, DS_BUFS, DQ_CHUNK, True, IS_CAUSAL,
                                                HAS_WINDOW, drop, DROPOUT, NAMED_BAR, ROW_BOUND, DQ_STAGE_BUFS, rng,
                                                OWN_FIRST=OWN_FIRST, q_row0=q_row0, ZERO_TAIL=IS_VARLEN == 2)
                    it += 1
                for mb in tl.range(m_full, whole_hi, disable_licm=NO_LICM):
                    dk, dv = _attn_bwd_any_step(it, mb, k_smem, v_smem, k_c, v_c, k_cols, q_bufs, do_bufs, pt_bufs,
                                                ds_bufs, dq_bufs, stat_bufs, q_ready, do_ready, qdo_empty, ds_ready,
                                                dk, dv, keys, dq_desc, off_b, off_hq, N_Q, N_K, qk_scale, sm_scale,
                                                causal_shift, window_lo, CONSUMER, NUM_STAGES, BLOCK_M, SUB_N,
                                                HEAD_DIM, DQ_COLS, SPLIT_D, DS_BUFS, DQ_CHUNK, False, IS_CAUSAL,
                                                HAS_WINDOW, drop, DROPOUT, NAMED_BAR, ROW_BOUND, DQ_STAGE_BUFS, rng,
                                                OWN_FIRST=OWN_FIRST, q_row0=q_row0, ZERO_TAIL=IS_VARLEN == 2)
                    it += 1
    else:
        for g in range(GROUP):
            off_hq = off_hkv * GROUP + g
            for mb in tl.range(m_lo, m_full, disable_licm=NO_LICM):
                dk, dv = _attn_bwd_any_step(it, mb, k_smem, v_smem, k_c, v_c, k_cols, q_bufs, do_bufs, pt_bufs,
                                            ds_bufs, dq_bufs, stat_bufs, q_ready, do_ready, qdo_empty, ds_ready, dk,
                                            dv, keys, dq_desc, off_b, off_hq, N_Q, N_K, qk_scale, sm_scale,
                                            causal_shift, window_lo, CONSUMER, NUM_STAGES, BLOCK_M, SUB_N, HEAD_DIM,
                                            DQ_COLS, SPLIT_D, DS_BUFS, DQ_CHUNK, True, IS_CAUSAL, HAS_WINDOW,
                                            drop, DROPOUT, NAMED_BAR, ROW_BOUND, DQ_STAGE_BUFS, rng,
                                            OWN_FIRST=OWN_FIRST, q_row0=q_row0, ZERO_TAIL=IS_VARLEN == 2)
                it += 1
            for mb in tl.range(m_full, n_mb, disable_licm=NO_LICM):
                dk, dv = _attn_bwd_any_step(it, mb, k_smem, v_smem, k_c, v_c, k_cols, q_bufs, do_bufs, pt_bufs,
                                            ds_bufs, dq_bufs, stat_bufs, q_ready, do_ready, qdo_empty, ds_ready, dk,
                                            dv, keys, dq_desc, off_b, off_hq, N_Q, N_K, qk_scale, sm_scale,
                                            causal_shift, window_lo, CONSUMER, NUM_STAGES, BLOCK_M, SUB_N, HEAD_DIM,
                                            DQ_COLS, SPLIT_D, DS_BUFS, DQ_CHUNK, False, IS_CAUSAL, HAS_WINDOW,
                                            drop, DROPOUT, NAMED_BAR, ROW_BOUND, DQ_STAGE_BUFS, rng,
                                            OWN_FIRST=OWN_FIRST, q_row0=q_row0, ZERO_TAIL=IS_VARLEN == 2)
                it += 1
    if RELEASE_KV:
        # Every step waited for its wgmma groups (the dQ product, the last
        # reader of K, included): the next work tile's K and V may load.
        mbarrier.arrive(kv_empty)

    # dK already carries the scale (through dS); rows past N_K are dropped.
    if DROPOUT == 6:
        # dV summed (P Z)^T dO: the keep scale r = 1 / (1 - p) once here
        _k0, _k1, _base_b, _rows_cols, _rng_cols, _t_hi, drop_scale, _key0 = drop
        dv = dv * drop_scale
    if TMA_DKV:
        # Once both consumers are here no product reads a (Q, dO) slot any
        # more (each step waited for its wgmmas, and the producer loads no
        # tile past the last): this consumer's dK goes to its part of the Q
        # ring, dV of dO's (_dkv_stages), a TMA store each writes them (the descriptor's
        # bounds drop keys past N_K).  gl.store's form below writes 16-bit
        # elements one by one, each behind a branch of its own.
        _named_bar(_CONSUMERS_SYNC)
        dk_stage, dv_stage = _dkv_stages(q_bufs, do_bufs, dk, CONSUMER, NUM_CONSUMERS, NUM_STAGES, SPLIT_D)
        _store_tile_tma(dk, dk_stage, dk_desc, off_b, off_hkv, out_key0, out_col0)
        _store_tile_tma(dv, dv_stage, dv_desc, off_b, off_hkv, out_key0, out_col0)
        return it
    rows = out_key0 + gl.arange(0, dk.shape[0], layout=gl.SliceLayout(1, kv_layout))
    dcols = out_col0 + gl.arange(0, dk.shape[1], layout=gl.SliceLayout(0, kv_layout))
    keep = gl.expand_dims(rows < N_K, 1)
    rows64 = gl.expand_dims(rows.to(gl.int64), 1)
    dk_ptrs = DK + off_b.to(gl.int64) * stride_dkz + off_hkv.to(gl.int64) * stride_dkh \
        + rows64 * stride_dkn + gl.expand_dims(dcols, 0)
    dv_ptrs = DV + off_b.to(gl.int64) * stride_dvz + off_hkv.to(gl.int64) * stride_dvh \
        + rows64 * stride_dvn + gl.expand_dims(dcols, 0)
    # (a group slice's partials with GROUP_SPLIT > 1: q's dtype with
    # GROUP_PARTIALS_16BIT (the default), else float32; unsplit: q's dtype)
    gl.store(dk_ptrs, dk.to(DK.dtype.element_ty), mask=keep)
    gl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=keep)
    return it


@gluon.jit
def _issue_dq_piece(ds_t, k_all, k1_all, j: gl.constexpr, BLOCK_M: gl.constexpr, VC: gl.constexpr,
                    K1C: gl.constexpr, DQ_CHUNK: gl.constexpr, CONSUMER: gl.constexpr, dq_layout: gl.constexpr):
    """Split Q K^T: the j-th dQ piece of this warpgroup, dS K[:, cols] over
    DQ_CHUNK of its columns: pieces [0, VC / DQ_CHUNK) from K's first chunk
    (columns CONSUMER * VC + ...), the others from its second (k1_all,
    columns CONSUMER * K1C + ... of the chunk)."""
    N0: gl.constexpr = VC // DQ_CHUNK
    if j < N0:
        src = k_all.slice(CONSUMER * VC + j * DQ_CHUNK, DQ_CHUNK, dim=1)
    else:
        src = k1_all.slice(CONSUMER * K1C + (j - N0) * DQ_CHUNK, DQ_CHUNK, dim=1)
    return warpgroup_mma(ds_t.permute((1, 0)), src, gl.zeros([BLOCK_M, DQ_CHUNK], gl.float32, dq_layout),
                         use_acc=False, is_async=True)


@gluon.jit
def _qk1_operands(it, s, N_Q, q_bufs, q1_bufs, do_bufs, k_smem, k1_smem, v_smem):
    """The split Q K^T steps' operands of ring slot s: Q's two chunks, dO,
    and K's two chunks and V as rank-2 views.  z = 0, opaque to the
    compiler (see _attn_bwd_step_split): the operand descriptors are made
    per step instead of being hoisted into registers."""
    dtype: gl.constexpr = q_bufs.dtype
    z = it & (N_Q >> 31)
    return (q_bufs.index(s + z), q1_bufs.index(s + z), do_bufs.index(s + z),
            reinterpret(k_smem, dtype, [1, k_smem.shape[0], k_smem.shape[1]], k_smem.layout).index(z),
            reinterpret(k1_smem, dtype, [1, k1_smem.shape[0], k1_smem.shape[1]], k1_smem.layout).index(z),
            reinterpret(v_smem, dtype, [1, v_smem.shape[0], v_smem.shape[1]], v_smem.layout).index(z))


@gluon.jit
def _attn_bwd_step_qk1(it, mb, k_smem, k1_smem, v_smem, q_bufs, q1_bufs, do_bufs, pt_bufs, ds_bufs, dq_bufs,
                       stat_bufs, q_ready, do_ready, qdo_empty, ds_ready, dk, dk1, dv, keys, dq_desc,
                       off_b, off_hq, N_Q, N_K, qk_scale, sm_scale, causal_shift,
                       CONSUMER: gl.constexpr, NUM_STAGES: gl.constexpr, BLOCK_M: gl.constexpr,
                       SUB_N: gl.constexpr, HEAD_DIM: gl.constexpr, QK1: gl.constexpr, DS_BUFS: gl.constexpr,
                       DQ_CHUNK: gl.constexpr, MASKED: gl.constexpr, IS_CAUSAL: gl.constexpr,
                       ROW_BOUND: gl.constexpr = False, DQ_STAGE_BUFS: gl.constexpr = 1):
    """SPLIT_D with a split Q K^T (d = HEAD_DIM + QK1 for Q and K, HEAD_DIM
    for V, O and dO; d = 192 = 128 + 64): one query tile, as
    _attn_bwd_step_split but every product that has Q or K in it comes in
    two column chunks.  The scores of this warpgroup's SUB_N keys

        S = Q0 K0_c^T + Q1 K1_c^T     (two wgmmas into one accumulator)
        dP = dO V_c^T

    and, from the shared P^T / dS^T of all keys, its columns of the
    products: VC = HEAD_DIM / 2 of V's (and of Q's and K's first chunk),
    K1C = QK1 / 2 of the second chunk,

        dV[:, c VC + (0..VC)]       += P^T dO[:, c VC + ...]
        dK[:, c VC + (0..VC)]       += dS^T Q0[:, c VC + ...]
        dK[:, HEAD_DIM + c K1C + ...] += dS^T Q1[:, c K1C + ...]
        dQ: the same columns of dS K0 and dS K1, DQ_CHUNK at a time.

    Both warpgroups hold the same shapes (VC + VC + K1C accumulator columns
    of BLOCK_N keys each).  No dropout and no window here (declined).
    The pieces take this warpgroup's DQ_STAGE_BUFS staging buffers of
    dq_bufs in turn (_reduce_dq_piece), so a piece waits only for the
    reduce-add issued DQ_STAGE_BUFS pieces before it to have read its buffer."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                      instr_shape=[16, SUB_N, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, DQ_CHUNK, 16])
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    VC: gl.constexpr = HEAD_DIM // 2
    K1C: gl.constexpr = QK1 // 2
    N_PIECES: gl.constexpr = VC // DQ_CHUNK + K1C // DQ_CHUNK
    dtype: gl.constexpr = q_bufs.dtype
    s = it % NUM_STAGES
    ph = (it // NUM_STAGES) & 1
    start_m = mb * BLOCK_M
    q_s, q1_s, do_s, k_all, k1_all, v_all = _qk1_operands(it, s, N_Q, q_bufs, q1_bufs, do_bufs, k_smem, k1_smem,
                                                          v_smem)
    mbarrier.wait(q_ready.index(s), ph)
    s_tok = warpgroup_mma(q_s, k_all.slice(CONSUMER * SUB_N, SUB_N, dim=0).permute((1, 0)),
                          gl.zeros([BLOCK_M, SUB_N], gl.float32, s_layout), use_acc=False, is_async=True)
    # the second column chunk accumulates into S (a wgmma group of its own)
    s_tok = warpgroup_mma(q1_s, k1_all.slice(CONSUMER * SUB_N, SUB_N, dim=0).permute((1, 0)), s_tok,
                          is_async=True)
    mbarrier.wait(do_ready.index(s), ph)
    dp_tok = warpgroup_mma(do_s, v_all.slice(CONSUMER * SUB_N, SUB_N, dim=0).permute((1, 0)),
                           gl.zeros([BLOCK_M, SUB_N], gl.float32, s_layout), use_acc=False, is_async=True)
    # Groups retire in issue order: with only dP left, both of S's are done.
    p = _probs(s_tok, stat_bufs, s, start_m, keys, N_K, qk_scale, causal_shift, 0, BLOCK_M, 0, MASKED, IS_CAUSAL,
               False, ROW_BOUND)
    dp = warpgroup_mma_wait(0, deps=(dp_tok,))
    delta = stat_bufs.index(2 * s + 1).load(row_layout)
    ds = (p * (dp * sm_scale - gl.expand_dims(delta, 1))).to(dtype)
    b = _share_pt_ds(it, p, ds, pt_bufs, ds_bufs, ds_ready, CONSUMER, SUB_N, DS_BUFS)
    ds_t = ds_bufs.index(b)
    dv_tok = warpgroup_mma(pt_bufs.index(b), do_s.slice(CONSUMER * VC, VC, dim=1), dv, is_async=True)
    dk_tok = warpgroup_mma(ds_t, q_s.slice(CONSUMER * VC, VC, dim=1), dk, is_async=True)
    dk1_tok = warpgroup_mma(ds_t, q1_s.slice(CONSUMER * K1C, K1C, dim=1), dk1, is_async=True)
    dq_tok = _issue_dq_piece(ds_t, k_all, k1_all, 0, BLOCK_M, VC, K1C, DQ_CHUNK, CONSUMER, dq_layout)
    # Q and dO are free once dV and dK are done: the next tile loads under dQ.
    dv, dk, dk1 = warpgroup_mma_wait(1, deps=(dv_tok, dk_tok, dk1_tok))
    mbarrier.arrive(qdo_empty.index(s))
    for j in gl.static_range(N_PIECES):
        dq = warpgroup_mma_wait(0, deps=(dq_tok,))
        if j + 1 < N_PIECES:
            # The next piece's product runs while this one is staged.
            dq_tok = _issue_dq_piece(ds_t, k_all, k1_all, j + 1, BLOCK_M, VC, K1C, DQ_CHUNK, CONSUMER, dq_layout)
        elif DS_BUFS == 1:
            mbarrier.arrive(ds_ready.index(1))
        # the piece's dQ columns: in the first chunk, or past HEAD_DIM in the second
        dq_col = CONSUMER * VC + j * DQ_CHUNK if j < VC // DQ_CHUNK else \
            HEAD_DIM + CONSUMER * K1C + (j - VC // DQ_CHUNK) * DQ_CHUNK
        _reduce_dq_piece(dq, dq_bufs, dq_desc, off_b, off_hq, start_m, dq_col, it, j, N_PIECES, CONSUMER,
                         DQ_STAGE_BUFS, BLOCK_M, DQ_CHUNK)
    return dk, dk1, dv


@gluon.jit
def _attn_bwd_step_qk1_halves(it, mb, k_smem, k1_smem, v_smem, q_bufs, q1_bufs, do_bufs, pt_bufs, ds_bufs, dq_bufs,
                              stat_bufs, q_ready, do_ready, qdo_empty, ds_ready, dk, dk1, dv, keys, dq_desc,
                              off_b, off_hq, N_Q, N_K, qk_scale, sm_scale, causal_shift,
                              CONSUMER: gl.constexpr, NUM_STAGES: gl.constexpr, BLOCK_M: gl.constexpr,
                              BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, QK1: gl.constexpr,
                              DS_BUFS: gl.constexpr, DQ_STAGE_BUFS: gl.constexpr, DQ_CHUNK: gl.constexpr,
                              MASKED: gl.constexpr, IS_CAUSAL: gl.constexpr, ROW_BOUND: gl.constexpr = False,
                              Q_HALVES: gl.constexpr = 1, OWN_FIRST: gl.constexpr = False,
                              NAMED_BAR: gl.constexpr = 0):
    """Q_HALVES (split Q K^T, d = 192 / dv = 128; the default since session 35): a query
    tile of BLOCK_M = 128 rows, consumer c owning rows [64 c, + 64) for the
    scores and dQ and columns for dK / dV, every product at least 64 wide:

        S_c = Q0_c K0^T + Q1_c K1^T,  dP_c = dO_c V^T      (64 rows x BLOCK_N keys)
        P^T_c, dS^T_c into half c of the shared P^T / dS^T tiles
        dV[:, c VC + ...]   += P^T_0 dO_0[:, c VC + ...] + P^T_1 dO_1[...]
        dK[:, c VC + ...]   += dS^T_0 Q0_0[...] + dS^T_1 Q0_1[...]
        dK[:, 128 + c K1C + ...] += dS^T_0 Q1_0[...] + dS^T_1 Q1_1[...]
        dQ_c = dS_c K      (dS_c from registers; pieces of DQ_CHUNK columns,
                            K0's then K1's: 2 + 1 at 64, 4 + 2 at 32, each
                            reduce-added into dQ rows [start_m + 64 c, + 64)
                            from a staging buffer)

    The accumulators are _attn_bwd_step_qk1's (dV, dK's two chunks by
    columns over all BLOCK_N keys); the pieces take this warpgroup's
    DQ_STAGE_BUFS staging buffers of dq_bufs in turn (_reduce_dq_piece).
    With one P^T / dS^T buffer this warpgroup frees it (ds_ready[1]) once
    its column products are done, or with Q_HALVES = 2 after the first dQ
    piece's reduce-add is issued (later, so as safe: an override whose build
    ptxas spills 36-40 B with 0-1 local accesses per tile instead of 96-116 B
    with 17-21, for one more bar.sync per tile; Triton 3.6).  (Q_HALVES = 3
    / 4, the exchange through hardware barriers, read 0.994 / 1.004x on the
    H200 in session 36 and were removed in session 41.)  OWN_FIRST (an
    override, Q_HALVES 1 / 2): the column products over this warpgroup's
    own half are issued right after its arrival on ds_ready, the wait for
    the other half only before that half's (the wgmma pipe busy during the
    exchange wait).  NAMED_BAR = 2 (an override): the pieces go to the
    producer warp through named barriers (_stage_dq_piece), which issues
    their reduce-adds."""
    HALF: gl.constexpr = BLOCK_M // 2
    VC: gl.constexpr = HEAD_DIM // 2
    K1C: gl.constexpr = QK1 // 2
    LATE_FREE: gl.constexpr = Q_HALVES == 2  # 'free' after the first dQ piece
    DQW: gl.constexpr = DQ_CHUNK  # dQ piece width, dividing both chunks
    N_K0: gl.constexpr = HEAD_DIM // DQW  # K0's pieces, then K1's
    N_PIECES: gl.constexpr = N_K0 + QK1 // DQW
    gl.static_assert(HEAD_DIM % DQW == 0 and QK1 % DQW == 0 and HALF == 64,
                     "Q_HALVES: 128-row tiles, dQ pieces dividing both chunks")
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                      instr_shape=[16, BLOCK_N, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, DQW, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dq_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    dtype: gl.constexpr = q_bufs.dtype
    s = it % NUM_STAGES
    ph = (it // NUM_STAGES) & 1
    start_m = mb * BLOCK_M
    q_s, q1_s, do_s, k_all, k1_all, v_all = _qk1_operands(it, s, N_Q, q_bufs, q1_bufs, do_bufs, k_smem, k1_smem,
                                                          v_smem)
    mbarrier.wait(q_ready.index(s), ph)
    s_tok = warpgroup_mma(q_s.slice(CONSUMER * HALF, HALF, dim=0), k_all.permute((1, 0)),
                          gl.zeros([HALF, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
    s_tok = warpgroup_mma(q1_s.slice(CONSUMER * HALF, HALF, dim=0), k1_all.permute((1, 0)), s_tok, is_async=True)
    mbarrier.wait(do_ready.index(s), ph)
    dp_tok = warpgroup_mma(do_s.slice(CONSUMER * HALF, HALF, dim=0), v_all.permute((1, 0)),
                           gl.zeros([HALF, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
    # Groups retire in issue order: with only dP left, both of S's are done.
    sc = warpgroup_mma_wait(1, deps=(s_tok,))
    lse2 = stat_bufs.index(2 * s).slice(CONSUMER * HALF, HALF).load(row_layout)
    p = gl.exp2(sc * qk_scale - gl.expand_dims(lse2, 1))
    if MASKED:
        rows = start_m + CONSUMER * HALF + gl.arange(0, HALF, layout=row_layout)
        p = gl.where(_visible(gl.expand_dims(keys, 0), gl.expand_dims(rows, 1), N_K, causal_shift, 0,
                              IS_CAUSAL, False, ROW_BOUND), p, 0.0)
    dp = warpgroup_mma_wait(0, deps=(dp_tok,))
    delta = stat_bufs.index(2 * s + 1).slice(CONSUMER * HALF, HALF).load(row_layout)
    ds = (p * (dp * sm_scale - gl.expand_dims(delta, 1))).to(dtype)
    # P^T and dS^T of this half (keys x rows) into buffer b's half CONSUMER.
    b = it % DS_BUFS
    if DS_BUFS == 1:
        # Both warpgroups have finished reading the previous tile's (ds_ready[1]).
        mbarrier.wait(ds_ready.index(1), (it & 1) ^ 1)
    pt_bufs.index(2 * b + CONSUMER).store(gl.permute(p.to(dtype), [1, 0]))
    ds_bufs.index(2 * b + CONSUMER).store(gl.permute(ds, [1, 0]))
    fence_async_shared()
    mbarrier.arrive(ds_ready.index(b))
    if not OWN_FIRST:
        mbarrier.wait(ds_ready.index(b), (it // DS_BUFS) & 1)
    # dV, dK, dK1: this warpgroup's columns, over both halves' rows (K = 64
    # each).  OWN_FIRST: this half's products first (the arrival above came
    # after a bar.sync of this warpgroup, so its own writes are visible to
    # its wgmmas), the wait for the other half's only before that half's.
    dv_tok = dv
    dk_tok = dk
    dk1_tok = dk1
    FIRST: gl.constexpr = CONSUMER if OWN_FIRST else 0
    for j in gl.static_range(FIRST, FIRST + 2):  # half j % 2 (constexpr only inline)
        if OWN_FIRST and j > FIRST:
            mbarrier.wait(ds_ready.index(b), (it // DS_BUFS) & 1)
        pt_h = pt_bufs.index(2 * b + j % 2)
        ds_h = ds_bufs.index(2 * b + j % 2)
        dv_tok = warpgroup_mma(pt_h, do_s.slice(j % 2 * HALF, HALF, dim=0).slice(CONSUMER * VC, VC, dim=1), dv_tok,
                               is_async=True)
        dk_tok = warpgroup_mma(ds_h, q_s.slice(j % 2 * HALF, HALF, dim=0).slice(CONSUMER * VC, VC, dim=1), dk_tok,
                               is_async=True)
        dk1_tok = warpgroup_mma(ds_h, q1_s.slice(j % 2 * HALF, HALF, dim=0).slice(CONSUMER * K1C, K1C, dim=1),
                                dk1_tok, is_async=True)
    # dQ of this half's rows from dS in registers: its first piece runs with
    # the column products; Q and dO are free once those are done.
    ds_op = gl.convert_layout(ds, op_layout)
    dq_tok = warpgroup_mma(ds_op, k_all.slice(0, DQW, dim=1), gl.zeros([HALF, DQW], gl.float32, dq_layout),
                           use_acc=False, is_async=True)
    dv, dk, dk1 = warpgroup_mma_wait(1, deps=(dv_tok, dk_tok, dk1_tok))
    mbarrier.arrive(qdo_empty.index(s))
    if DS_BUFS == 1 and not LATE_FREE:
        mbarrier.arrive(ds_ready.index(1))  # this warpgroup's products have read the one buffer
    for j in gl.static_range(N_PIECES):
        dq = warpgroup_mma_wait(0, deps=(dq_tok,))
        if j + 1 < N_PIECES:
            if j + 1 < N_K0:
                src = k_all.slice((j + 1) * DQW, DQW, dim=1)
            elif QK1 == DQW:
                src = k1_all
            else:
                src = k1_all.slice((j + 1 - N_K0) * DQW, DQW, dim=1)
            dq_tok = warpgroup_mma(ds_op, src, gl.zeros([HALF, DQW], gl.float32, dq_layout), use_acc=False,
                                   is_async=True)
        # the piece's dQ columns: K0's [j DQW, + DQW), then K1's from HEAD_DIM
        dq_col = j * DQW
        if NAMED_BAR == 2:
            _stage_dq_piece(dq, dq_bufs, it * N_PIECES + j, CONSUMER)
        else:
            _reduce_dq_piece(dq, dq_bufs, dq_desc, off_b, off_hq, start_m + CONSUMER * HALF, dq_col, it, j,
                             N_PIECES, CONSUMER, DQ_STAGE_BUFS, HALF, DQW)
        if DS_BUFS == 1 and LATE_FREE and j == 0:
            mbarrier.arrive(ds_ready.index(1))  # (read by the products, long done)
    return dk, dk1, dv


@gluon.jit
def _attn_bwd_block_qk1(DK, DV, dq_desc, k_smem, k1_smem, v_smem, q_bufs, q1_bufs, do_bufs, pt_bufs, ds_bufs,
                        dq_bufs, stat_bufs, kv_ready, kv_empty, q_ready, do_ready, qdo_empty, ds_ready,
                        off_b, off_hkv, start_n, m_lo, n_mb, GROUP, it, kv_phase,
                        stride_dkz, stride_dkh, stride_dkn, stride_dvz, stride_dvh, stride_dvn,
                        N_Q, N_K, qk_scale, sm_scale, causal_shift,
                        CONSUMER: gl.constexpr, NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr,
                        BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, QK1: gl.constexpr,
                        IS_CAUSAL: gl.constexpr, DS_BUFS: gl.constexpr, DQ_CHUNK: gl.constexpr,
                        RELEASE_KV: gl.constexpr, ROW_BOUND: gl.constexpr = False,
                        DQ_STAGE_BUFS: gl.constexpr = 1, Q_HALVES: gl.constexpr = False,
                        dk_desc=None, dv_desc=None, dk1_desc=None, TMA_DKV: gl.constexpr = False,
                        OWN_FIRST: gl.constexpr = False, NAMED_BAR: gl.constexpr = 0,
                        NO_LICM: gl.constexpr = False):
    """_attn_bwd_block for a split Q K^T (SPLIT_D only; no window, no
    dropout): the query tiles [m_lo, n_mb) of every head of the group
    through _attn_bwd_step_qk1, then this warpgroup's columns of dK (two
    chunks) and dV of all BLOCK_N keys; with TMA_DKV (not persistent) by
    TMA stores through the free (Q, dO) and Q1 rings (dk_desc, dk1_desc:
    dK's blocks of the two chunks' widths, dv_desc: dV's)."""
    SUB_N: gl.constexpr = BLOCK_N // NUM_CONSUMERS
    VC: gl.constexpr = HEAD_DIM // NUM_CONSUMERS
    K1C: gl.constexpr = QK1 // NUM_CONSUMERS
    # the keys of this warpgroup's scores: its SUB_N, or with Q_HALVES all BLOCK_N
    # (for its half of the query rows)
    KEYS: gl.constexpr = BLOCK_N if Q_HALVES else SUB_N
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                      instr_shape=[16, KEYS, 16])
    kv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, VC, 16])
    k1_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, K1C, 16])
    key0 = start_n if Q_HALVES else start_n + CONSUMER * SUB_N
    keys = key0 + gl.arange(0, KEYS, layout=gl.SliceLayout(0, s_layout))
    dk = gl.zeros([BLOCK_N, VC], gl.float32, kv_layout)
    dk1 = gl.zeros([BLOCK_N, K1C], gl.float32, k1_layout)
    dv = gl.zeros([BLOCK_N, VC], gl.float32, kv_layout)
    # Masked query tiles [m_lo, m_full): as _attn_bwd_block.
    if key0 + KEYS > N_K:
        m_full = n_mb
    elif IS_CAUSAL:
        m_full = gl.minimum(gl.maximum(gl.cdiv(key0 + KEYS - 1 - causal_shift, BLOCK_M), m_lo), n_mb)
    else:
        m_full = m_lo
    mbarrier.wait(kv_ready, kv_phase)
    for g in range(GROUP):
        off_hq = off_hkv * GROUP + g
        # the masked tiles [m_lo, m_full), then the whole ones [m_full, n_mb)
        for whole in gl.static_range(2):
            for mb in tl.range(m_full if whole else m_lo, n_mb if whole else m_full, disable_licm=NO_LICM):
                if Q_HALVES:
                    dk, dk1, dv = _attn_bwd_step_qk1_halves(
                        it, mb, k_smem, k1_smem, v_smem, q_bufs, q1_bufs, do_bufs, pt_bufs, ds_bufs, dq_bufs,
                        stat_bufs, q_ready, do_ready, qdo_empty, ds_ready, dk, dk1, dv, keys, dq_desc, off_b, off_hq,
                        N_Q, N_K, qk_scale, sm_scale, causal_shift, CONSUMER, NUM_STAGES, BLOCK_M, BLOCK_N, HEAD_DIM,
                        QK1, DS_BUFS, DQ_STAGE_BUFS, DQ_CHUNK, whole == 0, IS_CAUSAL, ROW_BOUND, Q_HALVES,
                        OWN_FIRST=OWN_FIRST, NAMED_BAR=NAMED_BAR)
                else:
                    dk, dk1, dv = _attn_bwd_step_qk1(
                        it, mb, k_smem, k1_smem, v_smem, q_bufs, q1_bufs, do_bufs, pt_bufs, ds_bufs, dq_bufs,
                        stat_bufs, q_ready, do_ready, qdo_empty, ds_ready, dk, dk1, dv, keys, dq_desc, off_b, off_hq,
                        N_Q, N_K, qk_scale, sm_scale, causal_shift, CONSUMER, NUM_STAGES, BLOCK_M, SUB_N, HEAD_DIM,
                        QK1, DS_BUFS, DQ_CHUNK, whole == 0, IS_CAUSAL, ROW_BOUND, DQ_STAGE_BUFS)
                it += 1
    if RELEASE_KV:
        mbarrier.arrive(kv_empty)

    # dK in two column ranges (c VC of the first chunk, HEAD_DIM + c K1C of
    # the second), dV in one; rows past N_K are dropped.
    if TMA_DKV:
        # As _attn_bwd_block's: once both consumers are here no product
        # reads the rings; each consumer stages its dK / dV tiles in its part
        # of the Q / dO ring and dK's second chunk in its part of Q1's (the
        # descriptors' bounds drop keys past N_K).
        _named_bar(_CONSUMERS_SYNC)
        dk_stage, dv_stage = _dkv_stages(q_bufs, do_bufs, dk, CONSUMER, NUM_CONSUMERS, NUM_STAGES, True)
        dk1_stage, _same = _dkv_stages(q1_bufs, q1_bufs, dk1, CONSUMER, NUM_CONSUMERS, NUM_STAGES, True)  # (Q1's twice)
        _store_tile_tma(dk, dk_stage, dk_desc, off_b, off_hkv, start_n, CONSUMER * VC)
        _store_tile_tma(dk1, dk1_stage, dk1_desc, off_b, off_hkv, start_n, HEAD_DIM + CONSUMER * K1C)
        _store_tile_tma(dv, dv_stage, dv_desc, off_b, off_hkv, start_n, CONSUMER * VC)
        return it
    rows = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, kv_layout))
    rows1 = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, k1_layout))
    cols = CONSUMER * VC + gl.arange(0, VC, layout=gl.SliceLayout(0, kv_layout))
    cols1 = HEAD_DIM + CONSUMER * K1C + gl.arange(0, K1C, layout=gl.SliceLayout(0, k1_layout))
    dk_head = DK + off_b.to(gl.int64) * stride_dkz + off_hkv.to(gl.int64) * stride_dkh
    dv_head = DV + off_b.to(gl.int64) * stride_dvz + off_hkv.to(gl.int64) * stride_dvh
    gl.store(dk_head + gl.expand_dims(rows.to(gl.int64), 1) * stride_dkn + gl.expand_dims(cols, 0),
             dk.to(DK.dtype.element_ty), mask=gl.expand_dims(rows < N_K, 1))
    gl.store(dk_head + gl.expand_dims(rows1.to(gl.int64), 1) * stride_dkn + gl.expand_dims(cols1, 0),
             dk1.to(DK.dtype.element_ty), mask=gl.expand_dims(rows1 < N_K, 1))
    gl.store(dv_head + gl.expand_dims(rows.to(gl.int64), 1) * stride_dvn + gl.expand_dims(cols, 0),
             dv.to(DV.dtype.element_ty), mask=gl.expand_dims(rows < N_K, 1))
    return it


@gluon.jit
def _attn_bwd_compute(DK, DV, dq_desc, k_smem, v_smem, q_bufs, do_bufs, pt_bufs, ds_bufs, dq_bufs, stat_bufs,
                      kv_ready, kv_empty, q_ready, do_ready, qdo_empty, ds_ready,
                      off_b, off_hkv, start_n, m_lo, m_hi, n_mb, GROUP, H_KV, n_kb, n_bh,
                      stride_dkz, stride_dkh, stride_dkn, stride_dvz, stride_dvh, stride_dvn,
                      N_Q, N_K, qk_scale, sm_scale, causal_shift, window_lo,
                      CONSUMER: gl.constexpr, NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr,
                      BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                      IS_CAUSAL: gl.constexpr, SPLIT_D: gl.constexpr, DS_BUFS: gl.constexpr,
                      DQ_CHUNK: gl.constexpr, PERSISTENT: gl.constexpr, HEADS_FIRST: gl.constexpr,
                      HAS_WINDOW: gl.constexpr, drop, DROPOUT: gl.constexpr,
                      k1_smem, q1_bufs, QK1: gl.constexpr, NAMED_BAR: gl.constexpr = 0,
                      ROW_BOUND: gl.constexpr = False, DQ_STAGE_BUFS: gl.constexpr = 1,
                      Q_HALVES: gl.constexpr = False, dk_desc=None, dv_desc=None, dk1_desc=None,
                      TMA_DKV: gl.constexpr = False, rng=None, OWN_FIRST: gl.constexpr = False, q_row0=0,
                      IS_VARLEN: gl.constexpr = False, NO_LICM: gl.constexpr = False):
    """Consumer warpgroup: the program's key block, or when PERSISTENT each
    of its work tiles in turn (_bwd_work_tile), ring and barrier phases
    continuing across them; the dK / dV stores of one tile run while the
    producer loads the next one's K and V.  QK1 > 0 (split Q K^T; HEAD_DIM
    is then V's width): _attn_bwd_block_qk1."""
    if PERSISTENT:
        pid = gl.program_id(0)
        n_programs = gl.num_programs(0)
        it = 0
        for i in range(snake_count(pid, n_programs, n_kb * n_bh)):
            pid_n, pid_bh = _bwd_work_tile(i, pid, n_programs, n_kb, n_bh, HEADS_FIRST)
            t_b, t_hkv, t_n, t_lo, t_hi = _bwd_tile_coords(pid_n, pid_bh, H_KV, n_mb, N_K, causal_shift, window_lo,
                                                           BLOCK_M, BLOCK_N, IS_CAUSAL, HAS_WINDOW)
            if QK1 > 0:
                it = _attn_bwd_block_qk1(DK, DV, dq_desc, k_smem, k1_smem, v_smem, q_bufs, q1_bufs, do_bufs,
                                         pt_bufs, ds_bufs, dq_bufs, stat_bufs, kv_ready, kv_empty, q_ready, do_ready,
                                         qdo_empty, ds_ready, t_b, t_hkv, t_n, t_lo, n_mb, GROUP, it, i & 1,
                                         stride_dkz, stride_dkh, stride_dkn, stride_dvz, stride_dvh, stride_dvn,
                                         N_Q, N_K, qk_scale, sm_scale, causal_shift,
                                         CONSUMER, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, HEAD_DIM, QK1,
                                         IS_CAUSAL, DS_BUFS, DQ_CHUNK, True, ROW_BOUND, DQ_STAGE_BUFS, Q_HALVES,
                                         OWN_FIRST=OWN_FIRST, NO_LICM=NO_LICM)
            else:
                it = _attn_bwd_block(DK, DV, dq_desc, k_smem, v_smem, q_bufs, do_bufs, pt_bufs, ds_bufs, dq_bufs,
                                     stat_bufs, kv_ready, kv_empty, q_ready, do_ready, qdo_empty, ds_ready,
                                     t_b, t_hkv, t_n, t_lo, t_hi, n_mb, GROUP, it, i & 1,
                                     stride_dkz, stride_dkh, stride_dkn, stride_dvz, stride_dvh, stride_dvn,
                                     N_Q, N_K, qk_scale, sm_scale, causal_shift, window_lo,
                                     CONSUMER, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, HEAD_DIM, IS_CAUSAL,
                                     SPLIT_D, DS_BUFS, DQ_CHUNK, True, HAS_WINDOW, drop, DROPOUT, NAMED_BAR, ROW_BOUND,
                                     DQ_STAGE_BUFS, OWN_FIRST=OWN_FIRST, NO_LICM=NO_LICM)
    elif QK1 > 0:
        _attn_bwd_block_qk1(DK, DV, dq_desc, k_smem, k1_smem, v_smem, q_bufs, q1_bufs, do_bufs, pt_bufs, ds_bufs,
                            dq_bufs, stat_bufs, kv_ready, kv_empty, q_ready, do_ready, qdo_empty, ds_ready,
                            off_b, off_hkv, start_n, m_lo, n_mb, GROUP, gl.to_tensor(0), 0,
                            stride_dkz, stride_dkh, stride_dkn, stride_dvz, stride_dvh, stride_dvn,
                            N_Q, N_K, qk_scale, sm_scale, causal_shift,
                            CONSUMER, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, HEAD_DIM, QK1,
                            IS_CAUSAL, DS_BUFS, DQ_CHUNK, False, ROW_BOUND, DQ_STAGE_BUFS, Q_HALVES,
                            dk_desc, dv_desc, dk1_desc, TMA_DKV, OWN_FIRST=OWN_FIRST, NAMED_BAR=NAMED_BAR,
                            NO_LICM=NO_LICM)
    else:
        _attn_bwd_block(DK, DV, dq_desc, k_smem, v_smem, q_bufs, do_bufs, pt_bufs, ds_bufs, dq_bufs, stat_bufs,
                        kv_ready, kv_empty, q_ready, do_ready, qdo_empty, ds_ready,
                        off_b, off_hkv, start_n, m_lo, m_hi, n_mb, GROUP, gl.to_tensor(0), 0,
                        stride_dkz, stride_dkh, stride_dkn, stride_dvz, stride_dvh, stride_dvn,
                        N_Q, N_K, qk_scale, sm_scale, causal_shift, window_lo,
                        CONSUMER, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, HEAD_DIM, IS_CAUSAL,
                        SPLIT_D, DS_BUFS, DQ_CHUNK, False, HAS_WINDOW, drop, DROPOUT, NAMED_BAR, ROW_BOUND,
                        DQ_STAGE_BUFS, dk_desc, dv_desc, TMA_DKV, rng, OWN_FIRST=OWN_FIRST, q_row0=q_row0,
                        IS_VARLEN=IS_VARLEN, NO_LICM=NO_LICM)
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["stride_lz", "stride_lh", "stride_dz", "stride_dh", "stride_dkz", "stride_dkh",
                              "stride_dkn", "stride_dvz", "stride_dvh", "stride_dvn", "H_KV", "N_Q", "N_K",
                              "GROUP", "causal_shift", "N_BH", "window_lo", "philox_offset", "dropout_thresh",
                              "RNG_ROWS", "RNG_COLS"])
def _attn_bwd_hopper(
    # descriptors (rank 4 over (B, H, N, d)) and pointers
    # q1_desc, k1_desc: Q's and K's columns [HEAD_DIM_V, HEAD_DIM) when they
    # differ (split Q K^T, d = 192 with dv = 128), else None (no parameters)
    # dk_desc, dv_desc: with TMA_DKV the descriptors of DK, DV (else None);
    # dk1_desc: with TMA_DKV and a split Q K^T, DK's second chunk's (else None)
    q_desc, k_desc, v_desc, do_desc, dq_desc, q1_desc, k1_desc, dk_desc, dv_desc, dk1_desc, LSE, DELTA, DK, DV,
    # strides
    stride_lz, stride_lh, stride_dz, stride_dh,
    stride_dkz, stride_dkh, stride_dkn, stride_dvz, stride_dvh, stride_dvn,
    # shapes
    H_KV, N_Q, N_K, GROUP,
    # scalars
    qk_scale, sm_scale, causal_shift,
    # batch * KV heads (the persistent form's work tiles; unused otherwise)
    N_BH,
    # HAS_WINDOW only: row i sees only keys j >= i + window_lo (a left window bound)
    window_lo,
    # HAS_DROPOUT only: the Philox seed ((1,) int64), the counter offset, the
    # 16-bit threshold, the scale of kept probabilities and the counters'
    # row / column strides (kernels/score.py; else any pointer, unused)
    SEED, philox_offset, dropout_thresh, dropout_scale, RNG_ROWS, RNG_COLS,
    # IS_VARLEN only: a packed batch (the descriptors' batch entry 0 holds
    # every sequence; N_Q / N_K are the longest lengths): sequence b's rows
    # are [CU_SEQLENS_Q[b], CU_SEQLENS_Q[b + 1]), its keys likewise (else any
    # pointer, unused)
    CU_SEQLENS_Q, CU_SEQLENS_K,
    # meta-parameters
    HEAD_DIM: gl.constexpr, HEAD_DIM_V: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
    NUM_STAGES: gl.constexpr, NUM_CONSUMERS: gl.constexpr, IS_CAUSAL: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, HEADS_FIRST: gl.constexpr,
    SPLIT_D: gl.constexpr, DS_BUFS: gl.constexpr, DQ_CHUNK: gl.constexpr,
    PERSISTENT: gl.constexpr = False, HAS_WINDOW: gl.constexpr = False, HAS_DROPOUT: gl.constexpr = False,
    GROUP_SPLIT: gl.constexpr = 1, NAMED_BAR: gl.constexpr = 0, DROPOUT_SHARED_CALLS: gl.constexpr = 0,
    ROW_BOUND: gl.constexpr = False, DQ_STAGE_BUFS: gl.constexpr = 1, SLICES_FIRST: gl.constexpr = False,
    Q_HALVES: gl.constexpr = False, TMA_DKV: gl.constexpr = False, DROPOUT_RNG_WARPS: gl.constexpr = False,
    RNG_REGS: gl.constexpr = 0,  # 0: what the consumers and the producer leave (kernel_meta passes it)
    RNG_NUM_WARPS: gl.constexpr = 4,  # the RNG partition's warps, 4 or 2 (kernel_meta passes it)
    OWN_FIRST: gl.constexpr = False,  # this consumer's half of a product before the exchange wait (kernel_meta)
    IS_VARLEN: gl.constexpr = False,  # a packed batch (hopper_backward_varlen; the keys-as-M step only)
    NO_LICM: gl.constexpr = False,  # the consumers' query-tile loops keep their invariants inside (kernel_meta)
):
    # Split Q K^T (d = 192, dv = 128; SPLIT_D only): HEAD_DIM is Q's and K's
    # width, VDIM = HEAD_DIM_V that of V, O, dO (and of Q's and K's first
    # column chunk, held in q_bufs / k_smem), QK1 = HEAD_DIM - VDIM their
    # second chunk's (q1_bufs / k1_smem), each a power of two.  With
    # HEAD_DIM_V = HEAD_DIM, QK1 = 0: the kernel of before.
    VDIM: gl.constexpr = HEAD_DIM_V
    QK1: gl.constexpr = HEAD_DIM - HEAD_DIM_V
    n_mb = gl.cdiv(N_Q, BLOCK_M)
    if PERSISTENT:
        gl.static_assert(not IS_VARLEN, "packed batches: the grid of one program per key block")
        # A 1-D grid of at most one program per SM; each partition walks the
        # same work tiles (_bwd_work_tile) and decodes them itself.
        n_kb = gl.cdiv(N_K, BLOCK_N)
        off_b = 0
        off_hkv = 0
        start_n = 0
        m_lo = 0
        m_hi = 0
        q_row0: gl.constexpr = 0  # (constexpr: no value for the partitions to capture)
        k_row0: gl.constexpr = 0
    else:
        n_kb = 0
        if HEADS_FIRST:
            # Heads vary fastest: with a causal mask every head's first key
            # block (the one with most query tiles) starts in the first wave.
            pid_bh = gl.program_id(0)
            pid_n = gl.program_id(1)
        elif SLICES_FIRST:
            # GROUP_SPLIT > 1: the slices of a KV head's group vary fastest
            # (they read the same K and V), then its key blocks (a slice's
            # share its Q and dO), then the heads: grid (key blocks *
            # GROUP_SPLIT, B * KV heads), slice h * GROUP_SPLIT + s of the
            # kernel's H_KV = KV heads * GROUP_SPLIT.
            pid_n = gl.program_id(0) // GROUP_SPLIT
            pid_bh = gl.program_id(1) * GROUP_SPLIT + gl.program_id(0) % GROUP_SPLIT
        else:
            # A head's key blocks run together and share its Q and dO in L2.
            pid_n = gl.program_id(0)
            pid_bh = gl.program_id(1)
        off_b = pid_bh // H_KV
        off_hkv = pid_bh % H_KV
        start_n = pid_n * BLOCK_N
        if IS_VARLEN:
            gl.static_assert(not SPLIT_D and GROUP_SPLIT == 1 and not TMA_DKV and not HAS_DROPOUT,
                             "packed batches: the keys-as-M step, whole groups, dK / dV by gl.store, no dropout")
            # Packed batch: this program's sequence, its lengths and first
            # rows, its bottom-right diagonal (shift n_k - n_q) and window
            # bound (window_lo holds -left, at least -(longest n_q + n_k): as
            # the forward, clamped as lower_diagonal does).  The descriptors
            # take batch entry 0 and the rows from q_row0 / k_row0; LSE,
            # delta, dK and dV point at the sequence's first row (their batch
            # strides are 0).  A key block past the sequence's keys visits no
            # query tile and stores nothing (its rows are >= N_K).
            q_row0, N_Q, k_row0, N_K, causal_shift, window_lo = packed_sequence(
                CU_SEQLENS_Q, CU_SEQLENS_K, off_b, window_lo)
            n_mb = gl.cdiv(N_Q, BLOCK_M)
            LSE = LSE + q_row0
            DELTA = DELTA + q_row0
            DK = DK + k_row0.to(gl.int64) * stride_dkn
            DV = DV + k_row0.to(gl.int64) * stride_dvn
            off_b = 0
        else:
            q_row0: gl.constexpr = 0  # (constexpr: no value for the partitions to capture)
            k_row0: gl.constexpr = 0
        # First query tile with a row that sees key start_n (row i sees keys
        # j <= i + causal_shift); n-block 0, the one with most tiles, runs first.
        if IS_CAUSAL:
            m_lo = gl.minimum(gl.maximum(start_n - causal_shift, 0) // BLOCK_M, n_mb)
        else:
            m_lo = 0
        # Past the last row that sees the block with a window (n_mb without).
        m_hi = _query_end(start_n, m_lo, n_mb, N_K, window_lo, BLOCK_M, BLOCK_N, HAS_WINDOW)
        if IS_VARLEN:  # a key block past the sequence's keys: no query tile (the loops run to n_mb)
            m_lo = gl.where(start_n < N_K, m_lo, n_mb)
            m_hi = gl.where(start_n < N_K, m_hi, n_mb)

    dtype: gl.constexpr = q_desc.dtype
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, VDIM], dtype)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, VDIM], dtype)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype)
    if SPLIT_D:
        DQ_STAGE: gl.constexpr = DQ_CHUNK  # dQ columns staged at a time per consumer
        N_DS: gl.constexpr = DS_BUFS
    else:
        DQ_STAGE: gl.constexpr = VDIM // NUM_CONSUMERS
        N_DS: gl.constexpr = 2
    DQ_ROWS: gl.constexpr = BLOCK_M // 2 if Q_HALVES else BLOCK_M  # rows of one staged dQ piece
    dq_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([DQ_ROWS, DQ_STAGE], gl.float32)
    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, VDIM], kv_layout)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, VDIM], kv_layout)
    q_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, VDIM], q_layout)
    do_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, VDIM], q_layout)
    if QK1 > 0:
        gl.static_assert(SPLIT_D, "split Q K^T: the SPLIT_D path only")
        gl.static_assert(not HAS_WINDOW and not HAS_DROPOUT, "split Q K^T: no window, no dropout")
        gl.static_assert(QK1 <= VDIM, "split Q K^T: the second chunk is the narrower one")
        # (Q_HALVES: each consumer's dQ rows over every column, in pieces dividing QK1)
        gl.static_assert((QK1 // NUM_CONSUMERS) % DQ_CHUNK == 0 or (Q_HALVES and QK1 % DQ_CHUNK == 0),
                         "DQ_CHUNK divides QK1 / NUM_CONSUMERS (Q_HALVES: QK1)")
        k1_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, QK1],
                                            gl.NVMMASharedLayout.get_default_for([BLOCK_N, QK1], dtype))
        q1_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, QK1],
                                            gl.NVMMASharedLayout.get_default_for([BLOCK_M, QK1], dtype))
    else:
        k1_smem = k_smem  # not used
        q1_bufs = q_bufs
    if Q_HALVES:
        # Q_HALVES (split Q K^T only): P^T / dS^T as two halves of BLOCK_M / 2
        # query rows per buffer, and dQ staged per 64-row half
        gl.static_assert(QK1 > 0 and BLOCK_M == 128, "Q_HALVES: the split Q K^T step with 128-row tiles")
        half_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M // 2], dtype)
        ds_bufs = gl.allocate_shared_memory(dtype, [2 * N_DS, BLOCK_N, BLOCK_M // 2], half_layout)
        pt_bufs = gl.allocate_shared_memory(dtype, [2 * N_DS, BLOCK_N, BLOCK_M // 2], half_layout)
    else:
        ds_bufs = gl.allocate_shared_memory(dtype, [N_DS, BLOCK_N, BLOCK_M], ds_layout)
        if SPLIT_D:
            pt_bufs = gl.allocate_shared_memory(dtype, [N_DS, BLOCK_N, BLOCK_M], ds_layout)
        else:
            pt_bufs = ds_bufs  # not used: P^T stays in registers
    # DQ_STAGE_BUFS staging buffers per consumer, used in turn (more than
    # one: the split Q K^T step, whose three dQ pieces per tile follow each
    # other closely, and the keys-as-M step when the consumers issue the
    # reduce-adds, NAMED_BAR < 2)
    gl.static_assert(DQ_STAGE_BUFS <= 1 or QK1 > 0 or (not SPLIT_D and NAMED_BAR < 2),
                     "DQ_STAGE_BUFS > 1: the split Q K^T step, or the keys-as-M one with NAMED_BAR < 2")
    dq_bufs = gl.allocate_shared_memory(gl.float32, [NUM_CONSUMERS * DQ_STAGE_BUFS, DQ_ROWS, DQ_STAGE],
                                        dq_smem_layout)
    # Per ring slot: lse2 and scale * delta of the tile's rows.
    stat_bufs = gl.allocate_shared_memory(gl.float32, [2 * NUM_STAGES, BLOCK_M],
                                          gl.SwizzledSharedLayout(1, 1, 1, order=[0]))

    bar_layout: gl.constexpr = mbarrier.MBarrierLayout()
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], bar_layout)
    if PERSISTENT:
        # Both consumers are done with K and V (their last dQ product).
        kv_empty = gl.allocate_shared_memory(gl.int64, [1], bar_layout)
    else:
        kv_empty = kv_ready  # not used
    q_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    do_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    qdo_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
    # ds_ready[b]: every consumer's rows of P^T / dS^T buffer b are written;
    # with one buffer, ds_ready[1]: every consumer is done reading it.
    ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], bar_layout)
    mbarrier.init(kv_ready, count=1)
    if PERSISTENT:
        mbarrier.init(kv_empty, count=NUM_CONSUMERS)
    for s in gl.static_range(NUM_STAGES):
        mbarrier.init(q_ready.index(s), count=1)
        mbarrier.init(do_ready.index(s), count=1)
        mbarrier.init(qdo_empty.index(s), count=NUM_CONSUMERS)  # each consumer releases each slot
    for b in gl.static_range(2):
        mbarrier.init(ds_ready.index(b), count=NUM_CONSUMERS)

    gl.static_assert(NUM_CONSUMERS == 2, "two consumer warpgroups")
    gl.static_assert(NAMED_BAR == 0 or not SPLIT_D or (NAMED_BAR == 2 and Q_HALVES > 0),
                     "NAMED_BAR: the keys-as-M path, or 2 on the 128-row split Q K^T step")
    gl.static_assert(not (QK1 > 0 and NAMED_BAR == 2) or (DQ_STAGE_BUFS >= 1 and DQ_STAGE_BUFS <= 2),
                     "NAMED_BAR = 2 on the 128-row step: one or two staging slots per consumer (barriers 4-7, 10-13)")
    gl.static_assert(NAMED_BAR < 2 or not PERSISTENT, "NAMED_BAR = 2: not persistent")
    if SPLIT_D:
        gl.static_assert(BLOCK_M % 64 == 0, "SPLIT_D: query rows are the wgmma M dim")
        gl.static_assert(BLOCK_N % 64 == 0, "SPLIT_D: keys are the M dim of dK, dV")
        gl.static_assert((VDIM // NUM_CONSUMERS) % DQ_CHUNK == 0 or (Q_HALVES and VDIM % DQ_CHUNK == 0),
                         "DQ_CHUNK divides dv / NUM_CONSUMERS (Q_HALVES: dv)")
        gl.static_assert(DS_BUFS == 1 or DS_BUFS == 2, "one or two P^T / dS^T buffers")
    # The consumers' dropout mode: 0 none, 1 dropout, 2 dropout whose keys x
    # queries draws make each Philox call once per lane pair
    # (DROPOUT_SHARED_CALLS; dropout.tile_keep_keys_first_shared), 6 dropout
    # whose keep bits RNG warps draw into shared memory, each bit tested in
    # place after the dP^T wait and used by one select, dV's keep scale once
    # per block (DROPOUT_RNG_WARPS 4, DROPOUT_RNG_CONFIGS; _attn_bwd_rng).
    # (DROPOUT_RNG_WARPS 1 / 2 / 3, modes 3 / 4 / 5, were removed in
    # sessions 41 and 45.)
    DRAWS: gl.constexpr = 2 + DROPOUT_RNG_WARPS if DROPOUT_RNG_WARPS else 2 if DROPOUT_SHARED_CALLS else 1
    DROPOUT: gl.constexpr = DRAWS if HAS_DROPOUT else 0
    if DROPOUT >= 3:
        gl.static_assert(not SPLIT_D and not PERSISTENT and BLOCK_M == 64 and NAMED_BAR < 2,
                         "DROPOUT_RNG_WARPS: the keys-as-M step, not persistent, 64-row query tiles, qdo_empty")
        gl.static_assert(DROPOUT == 6, "DROPOUT_RNG_WARPS: 4")
        # each call's eight keep bits, the calls shaped (c, e, 1, a, r)
        keep_bufs = gl.allocate_shared_memory(gl.uint32, [NUM_STAGES, BLOCK_N // 16, 4, 1, BLOCK_M // 16, 8],
                                              gl.SwizzledSharedLayout(1, 1, 1, order=[4, 3, 2, 1, 0]))
        keep_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], bar_layout)
        for s in gl.static_range(NUM_STAGES):
            mbarrier.init(keep_ready.index(s), count=1)
        rng = (keep_bufs, keep_ready)
        # The RNG warps' registers: by default what the consumers (NUM_CONSUMERS
        # x 128 threads) and the producer warp (24) leave of the SM's 65,536,
        # in steps of 8 (24 with consumers at 240, 40 at 232).  Triton sets
        # registers per warpgroup of four warps (the largest request of the
        # partitions in it; AllocateWarpGroups) and gives the first consumer,
        # the default partition, what the warpgroups leave: with four RNG
        # warps the CTA's 13 warps are padded to 16, the producer's warpgroup
        # (with three padding warps) and the RNG one take 24 x 128 each or
        # more, and that consumer gets 224 at 240 and 216 at 232 (setmaxnreg
        # in the SASS); RNG_REGS = 24 at 232 gives both consumers 232.  With
        # RNG_NUM_WARPS = 2 the RNG warps, the producer and one padding warp
        # make one warpgroup: RNG_REGS = 24 at 240 gives both consumers 240
        # (each RNG thread then makes two Philox calls per 16-key slab), and
        # that is its default: 12 warps get maxnreg 168, 168 x 384 threads =
        # 504 x 128, so the first consumer gets 504 - 240 - RNG_REGS (at most 240).
        if RNG_REGS:
            rng_regs: gl.constexpr = RNG_REGS
        elif RNG_NUM_WARPS == 2:
            rng_regs: gl.constexpr = 24
        else:
            rng_regs: gl.constexpr = ((65536 - NUM_CONSUMERS * 128 * CONSUMER_REGS - 32 * 24) // (32 * RNG_NUM_WARPS)
                                      // 8 * 8)
        gl.static_assert(rng_regs >= 24, "DROPOUT_RNG_WARPS: no registers left for the RNG warps")
    else:
        rng = (stat_bufs, kv_ready)  # not used (None does not pass through a partition's arguments)
    # Partition arguments inline (a named tuple loses constexpr-ness in 3.6).
    gl.warp_specialize([
        (_attn_bwd_compute, (DK, DV, dq_desc, k_smem, v_smem, q_bufs, do_bufs, pt_bufs, ds_bufs, dq_bufs,
                             stat_bufs,
                             kv_ready, kv_empty, q_ready, do_ready, qdo_empty, ds_ready,
                             off_b, off_hkv, start_n, m_lo, m_hi, n_mb, GROUP, H_KV, n_kb, N_BH,
                             stride_dkz, stride_dkh, stride_dkn, stride_dvz, stride_dvh, stride_dvn,
                             N_Q, N_K, qk_scale, sm_scale, causal_shift, window_lo,
                             0, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, VDIM, IS_CAUSAL, SPLIT_D,
                             DS_BUFS, DQ_CHUNK, PERSISTENT, HEADS_FIRST, HAS_WINDOW,
                             (SEED, philox_offset, dropout_thresh, dropout_scale, H_KV, RNG_ROWS, RNG_COLS),
                             DROPOUT, k1_smem, q1_bufs, QK1, NAMED_BAR, ROW_BOUND, DQ_STAGE_BUFS, Q_HALVES,
                             dk_desc, dv_desc, dk1_desc, TMA_DKV, rng, OWN_FIRST, q_row0, IS_VARLEN, NO_LICM)),
        (_attn_bwd_compute, (DK, DV, dq_desc, k_smem, v_smem, q_bufs, do_bufs, pt_bufs, ds_bufs, dq_bufs,
                             stat_bufs,
                             kv_ready, kv_empty, q_ready, do_ready, qdo_empty, ds_ready,
                             off_b, off_hkv, start_n, m_lo, m_hi, n_mb, GROUP, H_KV, n_kb, N_BH,
                             stride_dkz, stride_dkh, stride_dkn, stride_dvz, stride_dvh, stride_dvn,
                             N_Q, N_K, qk_scale, sm_scale, causal_shift, window_lo,
                             1, NUM_CONSUMERS, NUM_STAGES, BLOCK_M, BLOCK_N, VDIM, IS_CAUSAL, SPLIT_D,
                             DS_BUFS, DQ_CHUNK, PERSISTENT, HEADS_FIRST, HAS_WINDOW,
                             (SEED, philox_offset, dropout_thresh, dropout_scale, H_KV, RNG_ROWS, RNG_COLS),
                             DROPOUT, k1_smem, q1_bufs, QK1, NAMED_BAR, ROW_BOUND, DQ_STAGE_BUFS, Q_HALVES,
                             dk_desc, dv_desc, dk1_desc, TMA_DKV, rng, OWN_FIRST, q_row0, IS_VARLEN, NO_LICM)),
        (_attn_bwd_producer, (q_desc, k_desc, v_desc, do_desc, LSE, DELTA, k_smem, v_smem, q_bufs, do_bufs,
                              stat_bufs, kv_ready, kv_empty, q_ready, do_ready, qdo_empty,
                              off_b, off_hkv, start_n, m_lo, m_hi, n_mb, GROUP, H_KV, n_kb, N_BH,
                              stride_lz, stride_lh, stride_dz, stride_dh, N_Q, N_K, sm_scale, causal_shift,
                              window_lo, BLOCK_M, BLOCK_N, VDIM, NUM_STAGES, IS_CAUSAL, PERSISTENT, HEADS_FIRST,
                              HAS_WINDOW, GROUP_SPLIT, q1_desc, k1_desc, q1_bufs, k1_smem, QK1, dq_desc, dq_bufs,
                              NAMED_BAR, q_row0, k_row0)),
    ] + ([(_attn_bwd_rng, (keep_bufs, keep_ready, qdo_empty,
                           (SEED, philox_offset, dropout_thresh, dropout_scale, H_KV, RNG_ROWS, RNG_COLS),
                           off_b, off_hkv, start_n, m_lo, m_hi, GROUP))]
         if DROPOUT >= 3 else []),
        [4, 1, RNG_NUM_WARPS] if DROPOUT >= 3 else [4, 1],
        [CONSUMER_REGS, 24, rng_regs] if DROPOUT >= 3 else [CONSUMER_REGS, 24])


@gluon.jit
def _dkv_stages(q_bufs, do_bufs, x, CONSUMER: gl.constexpr, NUM_CONSUMERS: gl.constexpr, NUM_STAGES: gl.constexpr,
                SPLIT_D: gl.constexpr):
    """TMA_DKV (_attn_bwd_block, every product done): where consumer CONSUMER
    stages its dK and dV tiles (x's shape) in the free (Q, dO) ring: its own
    slot of each, or with SPLIT_D (d = 256: one slot of 64 x 256) tile
    CONSUMER of the whole ring seen as tiles of x's shape (Triton 3.8 takes
    only views of a buffer's size), in the swizzle of x's width
    (_store_tile_tma stages in it; a 32-column bf16 tile, d = 192's dK1, is
    too narrow for the ring's 128-byte swizzle, which Triton 3.9 refuses)."""
    if SPLIT_D:
        tiles: gl.constexpr = q_bufs.shape[0] * q_bufs.shape[1] * q_bufs.shape[2] // (x.shape[0] * x.shape[1])
        gl.static_assert(tiles >= NUM_CONSUMERS and tiles * x.shape[0] * x.shape[1] ==
                         q_bufs.shape[0] * q_bufs.shape[1] * q_bufs.shape[2],
                         "TMA_DKV: the ring holds every consumer's dK / dV tile")
        shape: gl.constexpr = [tiles, x.shape[0], x.shape[1]]
        layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([x.shape[0], x.shape[1]], q_bufs.dtype)
        return (reinterpret(q_bufs, q_bufs.dtype, shape, layout).index(CONSUMER),
                reinterpret(do_bufs, do_bufs.dtype, shape, layout).index(CONSUMER))
    else:
        gl.static_assert(NUM_STAGES >= NUM_CONSUMERS, "TMA_DKV: a ring slot per consumer")
        return q_bufs.index(CONSUMER), do_bufs.index(CONSUMER)


# ---------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------

_GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}

# Per head dim.  Shared memory (16-bit): K and V (2 * BLOCK_N * d), the
# (Q, dO) ring (2 * NUM_STAGES * BLOCK_M * d), dS^T double-buffered
# (2 * BLOCK_N * BLOCK_M), plus the float32 dQ staging (BLOCK_M * d * 4).
# Registers per consumer thread: dK and dV (SUB_N * d / 64 each), S^T and
# dP^T (SUB_N * BLOCK_M / 128 each), dQ (BLOCK_M * d / 256).
#
# d = 256 takes the SPLIT_D path (_attn_bwd_step_split): 64 keys per program,
# 64-row query tiles; per consumer thread dK and dV 64 registers each (64
# keys x 128 columns), S and dP 16 each (64 rows x 32 keys), dQ DQ_CHUNK / 2.
# Shared memory: K, V 64 KB; the (Q, dO) ring 64 KB per stage; P^T and dS^T
# 16 KB per buffer (DS_BUFS); dQ staging 2 * 64 * DQ_CHUNK * 4.  One stage
# with double P^T / dS^T buffers and whole 128-column dQ halves (224 KB)
# measured 1.25-1.33x the two-stage form (one buffer, dQ staged 32 columns
# at a time) on the H200 (session 10 call 7) and is the default.
CONFIGS = {
    64: dict(BLOCK_M=128, BLOCK_N=128, NUM_STAGES=2, NUM_CONSUMERS=2, CONSUMER_REGS=240),
    128: dict(BLOCK_M=64, BLOCK_N=128, NUM_STAGES=2, NUM_CONSUMERS=2, CONSUMER_REGS=240),
    256: dict(BLOCK_M=64, BLOCK_N=64, NUM_STAGES=1, NUM_CONSUMERS=2, CONSUMER_REGS=240,
              SPLIT_D=True, DS_BUFS=2, DQ_CHUNK=128),
    # d = 192 with dv = 128 (DeepSeek MLA, HEAD_DIM_V; split Q K^T as in the
    # forward): the SPLIT_D path with Q and K in 128 + 64 columns
    # (_attn_bwd_step_qk1).  64 keys per program, 64-row query tiles; per
    # consumer thread dK 32 + 16 registers (64 keys x 64 + 32 columns), dV 32
    # (64 x 64), S and dP 16 each (64 rows x 32 keys), dQ 16 per 32-column
    # piece (DQ_CHUNK = 32: two pieces of K's first chunk and one of its
    # second per consumer).  Shared memory (16-bit): K 24 KB + V 16 KB, the
    # (Q, dO) ring 40 KB per stage, P^T and dS^T 8 KB each per buffer, dQ
    # staging 2 x 64 x 32 x 4 per staging buffer: 168 KB with two stages and
    # one staging buffer (three stages: 208 KB; two stages and three staging
    # buffers, the default: 200 KB).  No
    # window and no dropout at d = 192 (declined: _make_plan).  In CONFIGS
    # since session 15 (H200: its GPU tests passed, 1.16-1.29x the portable
    # backward through the API, benchmarks/history/gpu_next_bwd192.sh).  A third ring
    # stage (0.99x) and the persistent grid (0.76x on a causal GQA row) lost
    # in session 24 (gpu_next_bwd192_cfg.sh).  Three dQ staging buffers per
    # consumer (DQ_STAGE_BUFS, one per piece; 206,336 B) since session 34:
    # each piece waited for the previous piece's reduce-add to read the one
    # buffer; kernel-only 1.076-1.114x on 5 rows, geomean 1.096, two
    # buffers 1.078 (gpu_next_dq_stage.sh, its rule met).
    # Since session 35 the 128-row step (Q_HALVES, _attn_bwd_step_qk1_halves):
    # each consumer scores its own 64 query rows against all 64 keys (S and
    # dP wgmmas at N = 64 instead of N = 32), dV and dK by columns over both
    # halves, its rows' dQ from dS in registers in three 64-column pieces
    # (two staging buffers): 56 wgmmas per 128 rows against 88, one ring
    # stage and one P^T / dS^T buffer, 222,720 B.  Kernel-only 1.095-1.174x
    # the three-buffer entry above on the 5 rows of gpu_next_q_halves.sh
    # (geomean 1.142, two repeats, its rule met); the entry above stays
    # reachable as an override (Q_HALVES=False, BLOCK_M=64, NUM_STAGES=2,
    # DS_BUFS=2, DQ_CHUNK=32, DQ_STAGE_BUFS=3).  32-column pieces (DQ_CHUNK=32
    # with DS_BUFS=2, or with DQ_STAGE_BUFS=4: same shared memory, 24-40 B
    # spilled instead of 96-116) read 0.956x geomean (gpu_next_q_halves2.sh).
    192: dict(BLOCK_M=128, BLOCK_N=64, NUM_STAGES=1, NUM_CONSUMERS=2, CONSUMER_REGS=240,
              SPLIT_D=True, DS_BUFS=1, DQ_CHUNK=64, DQ_STAGE_BUFS=2, Q_HALVES=True),
}
# Head dims whose configuration compiles (AOT, sm_90) but has not run on a
# GPU yet: taken only when a call passes UNVERIFIED=True or the environment
# sets FLASHATTN_TRITON_HOPPER_BWD_UNVERIFIED=1 (tests, the probe).  None
# now: d = 256 (session 10) and d = 192 / dv = 128 (session 15) passed on
# the H200 and moved to CONFIGS.
CONFIGS_UNVERIFIED: dict = {}
# The value head dim of a Q / K head dim where it is not d itself (split
# Q K^T: Q and K as HEAD_DIM_V + (d - HEAD_DIM_V) columns), as the forward's.
HEAD_DIM_V = {192: 128}
UNVERIFIED_ENV = "FLASHATTN_TRITON_HOPPER_BWD_UNVERIFIED"
# Meta-parameters of the SPLIT_D path (the others ignore them).
SPLIT_DEFAULTS = dict(SPLIT_D=False, DS_BUFS=2, DQ_CHUNK=0, DQ_STAGE_BUFS=1, Q_HALVES=False)
# Per head dim, entries replacing CONFIGS' for windowed calls (HAS_WINDOW, a
# left window bound); none: the window builds take CONFIGS (compile_check
# --hopper-bwd --window, docs/hopper.md "Sliding windows" of the backward).
WINDOW_CONFIGS: dict = {}
# Per head dim, entries replacing CONFIGS' for calls with dropout
# (HAS_DROPOUT).  d = 64 / 128 since session 22: the keys x queries path
# (BLOCK_M 64, 128 keys per program) with DROPOUT_SHARED_CALLS (each Philox
# call made once per lane pair, its keep flags packed and handed over;
# ptxas spills d = 64 388 / 648 -> 32 / 48 B, d = 128 1,680 / 1,864 -> 272 /
# 496 B; compile_check --hopper-bwd --dropout).  On the H200, kernel-only
# against the entry they replace: d = 64 1.09-1.17x on the four MHA rows of
# gpu_next_dropout_shared.sh (its rule met) and 1.05x on a causal GQA row
# (gpu_next_dropout_gqa.sh, two repeats); d = 128 1.01-1.14x, geomean 1.08,
# best of two repeats on six rows (gpu_next_dropout_shared128.sh, its rule
# met).  Before: the SPLIT_D path (64 keys and 64 query rows per step, scores
# queries x keys, one Philox call per 8 scores, dK / dV split by head-dim
# columns; GPU-validated in session 13), since the keys x queries path with
# each lane making its own calls spilled; d = 256 keeps SPLIT_D, its default
# path (docs/hopper.md "Dropout").
DROPOUT_CONFIGS: dict = {
    64: dict(SPLIT_D=False, BLOCK_M=64, BLOCK_N=128, NUM_STAGES=2, DQ_CHUNK=0, DROPOUT_SHARED_CALLS=True),
    128: dict(SPLIT_D=False, BLOCK_M=64, BLOCK_N=128, NUM_STAGES=2, DQ_CHUNK=0, DROPOUT_SHARED_CALLS=True),
}
# The dropout RNG warps (DROPOUT_RNG_WARPS = 4: a fourth partition draws
# each call's eight keep bits into shared memory, the consumers test them),
# per head dim, added by kernel_meta where the call's build can take them (no
# window, the keys-as-M step with 64-row query tiles, not persistent,
# NAMED_BAR < 2; an override of DROPOUT_RNG_WARPS wins).  Session 39's H200
# run (benchmarks/history/gpu_next_dropout_rng.sh, two repeats, six rows per d,
# against the shared-calls entry above; rule: every row >= 0.99x and geomean
# >= 1.02): d = 64 with 232 consumer registers (40 left for the RNG warps)
# 1.080-1.097x, geomean 1.090 (1.050-1.095x / 1.077 at 240); d = 128
# 1.007-1.059x, geomean 1.034 (0.78-0.84x at 232).  The byte-per-score form
# (= 1) was slower at both (0.886-0.910x / 0.958-0.992x).  Then the same bits
# applied late (= 3: a predicate per score after the dP^T wait, dV's keep
# scale once per block; benchmarks/history/gpu_next_dropout_late.sh, same rule,
# against = 2): d = 64 at 232 registers 1.016-1.035x, geomean 1.026 (adopted;
# 1.025 at 240); d = 128 0.992-1.029x, geomean 1.019 (not met: stays = 2).
# Session 43 (benchmarks/history/gpu_next_dropout_inplace.sh, same rule, against
# those): = 4 (each loaded word shifted once by the lane's key parity, a
# score's test one LOP3 in place) at d = 64 with 232 consumer registers and
# RNG_REGS 24 1.052-1.073x, geomean 1.061 (= 4 at 240: 1.054); d = 128 at 240
# 1.075-1.154x, geomean 1.126 (at 232 with RNG_REGS 24: 1.117).  Two RNG
# warps (RNG_NUM_WARPS = 2) lost at both: 0.66-0.83x.  = 2 and = 3, which
# = 4 replaced at both head dims, were removed in session 45.
DROPOUT_RNG_CONFIGS: dict = {
    64: dict(DROPOUT_RNG_WARPS=4, CONSUMER_REGS=232, RNG_REGS=24),
    128: dict(DROPOUT_RNG_WARPS=4),
}


def own_first_fits(meta: dict) -> bool:
    """Whether a build of meta can take OWN_FIRST: two consumers exchanging
    through ds_ready, on the 128-row split Q K^T step (Q_HALVES) or on the
    keys-as-M step with NAMED_BAR 0."""
    return meta["NUM_CONSUMERS"] == 2 and bool(meta["Q_HALVES"] or (not meta["SPLIT_D"] and meta["NAMED_BAR"] == 0))


def rng_warps_fit(meta: dict, dropped: bool, windowed: bool) -> bool:
    """Whether a build of meta can take DROPOUT_RNG_WARPS: dropout without a
    window on the keys-as-M step (not SPLIT_D) with 64-row query tiles, not
    persistent, the consumers at most 240 registers and NAMED_BAR < 2 (its =
    2 form has no qdo_empty arrivals, which free the flags' slots)."""
    return bool(dropped and not windowed and not meta["SPLIT_D"] and not meta["PERSISTENT"]
                and meta["BLOCK_M"] == 64 and meta["CONSUMER_REGS"] <= 240 and meta["NAMED_BAR"] < 2)


# Head dims whose dropout build is declined (the portable kernels run):
# the split Q K^T step (_attn_bwd_step_qk1) has no dropout, as the
# forward's has none; windows are declined there too (_make_plan).
DROPOUT_DECLINE: dict = {192: "dropout with the split Q K^T (d = 192) is not built"}
WINDOW_DECLINE: dict = {192: "a window with the split Q K^T (d = 192) is not built"}
# Grid order per causal flag (module doc of _attn_bwd_hopper's program decode).
SCHEDULE = {False: dict(HEADS_FIRST=False, SLICES_FIRST=False), True: dict(HEADS_FIRST=False, SLICES_FIRST=False)}
# SLICES_FIRST (an override; benchmarks/history/gpu_next_slices_first.sh): with
# GROUP_SPLIT > 1 the S programs of a key block first (as HEADS_FIRST has
# them), then the same slices' next key block, then the next head.  Session
# 35 against the heads-first default at d = 128: 0.89-1.03x (geomean 0.98,
# its rule not met); d = 192 1.03 / 1.10x on two rows of the old 64-row
# step (not ruled on).
# Per head dim, the key length from which a causal call whose GQA group is
# split across programs (GROUP_SPLIT S > 1; no window, not persistent; with
# dropout the table below) runs heads first: the S programs of one key block, which read
# the same K / V, start together, and every head's longest key block is in
# the first waves.  d = 128 since session 34 (benchmarks/
# gpu_next_gqa_heads_first.sh, its rule met): 1.046-1.076x kernel-only on
# the five causal GQA rows with S = 2-8 from N = 4k (geomean 1.062); at 2k
# 0.97x, so not there.  d = 192: on the 64-row step 1.09-1.11x at 4k but
# 0.92x at 2k and 0.98x at 8k (calls 5-6 of that session), on the 128-row
# step 0.98-1.00x (session 35 call 6): not taken.  d = 64 since session 35
# (benchmarks/history/gpu_next_gqa_heads_first2.sh, its rule met): 1.078-1.098x on
# the four rows with S = 2-8 from 4k (geomean 1.088), 1.047x at 2k (not
# ruled on).  An override HEADS_FIRST takes precedence.
HEADS_FIRST_GQA_SPLIT_MIN_N = {64: 4096, 128: 4096}
# The same for calls with dropout (their own table: the Philox draws make
# longer programs).  Since session 35 (gpu_next_gqa_heads_first2.sh, its
# rule met): d = 128 1.078-1.098x on five rows from 4k (geomean 1.089), d =
# 64 1.119-1.125x on three (geomean 1.123); 2k rows not ruled on.
HEADS_FIRST_GQA_SPLIT_MIN_N_DROPOUT = {64: 4096, 128: 4096}
# Per head dim, the key length from which a causal GQA call whose group is
# NOT split (S = 1: one program per key block holds the whole group) runs
# heads first, without dropout.  d = 64 since session 36 (benchmarks/
# gpu_next_gqa_unsplit_heads_first.sh, its rule met at 2048): 0.992-1.092x
# kernel-only on six rows from 2k (geomean 1.052); 1k 0.89x (not there),
# MHA rows 0.80-0.87x (not GQA: the table does not apply).  d = 128: 0.957-
# 1.076x (geomean 1.014 from 2k, 1.007 from 4k), its rule not met.
HEADS_FIRST_GQA_UNSPLIT_MIN_N = {64: 2048}
# Head dims whose causal calls with a split GQA group (GROUP_SPLIT > 1; no
# window, no dropout, not persistent, no heads-first table or override of
# the order) run slices first (SLICES_FIRST: the S programs of a KV head's
# key block adjacent in the grid).  Empty: on d = 192's 128-row step it read
# 0.922-1.067x (geomean 1.011; session 46, H100, history/gpu_next_d192_slices.sh,
# rule >= 0.99 per row and 1.02 geomean not met).
SLICES_FIRST_GQA_SPLIT_DIMS: frozenset = frozenset()
# PERSISTENT per head dim, (not causal, causal): one program per SM looping
# over the work tiles (_bwd_work_tile), K / V of the next tile loading under
# the dK / dV stores of the last.  Off: correct on the H200 but no faster
# (session 11 call 1: 0.70-1.02x the default, docs/hopper.md); the overrides NUM_SMS (grid
# size, not a kernel parameter) and PERSISTENT=True select it.
PERSISTENT_DEFAULT = {64: (False, False), 128: (False, False), 256: (False, False), 192: (False, False)}
# GROUP_SPLIT (module doc): a GQA group's query heads over S programs, float32
# partial dK / dV per slice, summed per group after the kernel.  Per causal:
# True takes group_split's S, False S = 1 unless the overrides set GROUP_SPLIT
# = S (the largest divisor of the group not above S; 0: the rule).  On for
# causal since session 15: through the cached plans, as a user's call runs
# (benchmarks/history/gpu_next_gqa_split.sh, two repeats, its rule met), the rule's S
# gave 1.13-2.38x the unsplit kernel on the 9 causal GQA rows where S > 1
# and 0.99-1.02x where S = 1 (causal MHA: unchanged); session 14 measured
# 0.89-1.00x on non-causal rows, so non-causal stays off; docs/hopper.md,
# "GQA groups across programs".
HOPPER_BWD_GROUP_SPLIT_DEFAULT = {False: False, True: True}
# GROUP_SPLIT's partial dK / dV in q's dtype instead of float32: half the
# bytes that the kernel writes and the group sum reads (the group sum still
# adds in float32 and rounds once; each partial is rounded once before it).
# Session 29's profile of the causal GQA row: our group sums 2 x 22 us over
# float32 partials, cuDNN's 2 x 12 us over 16-bit ones.  CPU estimate of the
# error (float64 per-head gradients, bf16, S = 2-8): dK's max error 1.1-2.2x
# that of float32 partials, 0.29-0.49x plain PyTorch bf16's (tests: 3x).
# True: every split; an int S0 > 1: splits of S0 slices or more (the sum
# reads S partials per output, so large splits gain most); False: never.
# On since session 31: gpu_next_partials16d.sh (6 alternated probe
# processes, per-row medians, rule fixed before the run) read 0.999-1.057x
# on the 14 causal GQA rows with S > 1 (geomean 1.023; S >= 8: 1.032), its
# three S = 1 gauges 0.989-0.997 (docs/hopper.md "16-bit partials").
GROUP_PARTIALS_16BIT: Union[bool, int] = True


def partials_16bit(split: int) -> bool:
    """Whether a launch split GROUP_SPLIT = split ways writes 16-bit partials."""
    setting = GROUP_PARTIALS_16BIT
    if setting is True or setting is False:
        return setting and split > 1
    return split > 1 and split >= int(setting)


# Programs wanted per SM by group_split: 4 since session 23 (2 before).
# benchmarks/history/gpu_next_dropout_split.sh, rule fixed before the run, best of
# two repeats on 5 causal GQA rows (d 64 / 128, N 2k-8k): 4 waves gave
# 1.012-1.051x the 2-wave rule without dropout (geomean 1.030) and
# 1.052-1.078x with dropout 0.1 (geomean 1.064); 8 waves failed without
# dropout (0.954x on B=8 N=2k).
GROUP_SPLIT_WAVES = 4
# The same for calls with dropout (their programs are longer: the Philox
# draws); a separate knob because its best may differ.  That run measured
# 8 waves at 1.055x geomean against 4's 1.064x, so 4 as well.
GROUP_SPLIT_WAVES_DROPOUT = 4
# The float32 dQ buffer in dq's memory order (dq_acc_strides), not (B, H,
# N, d): its final conversion into dq becomes a dense copy.  Off: on the
# H200 (session 15 call 1, benchmarks/history/gpu_next_dq_layout.sh, two repeats)
# it was 1.007-1.042x the contiguous buffer on 7 of 8 rows (mean 1.021x)
# but 0.996x / 0.988x at N = 8k d = 128 causal, below the rule's 0.99x
# floor; True takes it (its GPU tests passed).  A bool or {causal: bool}
# (kernels/bwd.py by_causal).  With it the buffer and dq share one dense
# layout, which kernels/bwd.py convert_dq turns into a flat pass
# (_bwd_dq_convert_flat) when DQ_CONVERT_KERNEL is on.
DQ_ACC_LIKE_DQ: Any = False
# NAMED_BAR (a constexpr 0, 1 or 2; the keys-as-M path, d = 64 / 128, window
# included): 1, the two consumer warpgroups exchange dS^T through one
# hardware barrier of their 256 threads instead of the ds_ready mbarrier
# (per warpgroup a bar.sync, one thread's arrive, a bar.sync and a polled
# wait); 2, also dQ through the producer warp (named barriers; the producer
# issues the reduce-adds and learns from them that the Q / dO slot is free:
# no qdo_empty arrival, TMA wait or TMA issue in the consumers; not with
# PERSISTENT, which takes 1).  The SPLIT_D paths keep the mbarriers (0).
# The default level per head dim, (not causal, causal), for calls with no
# window and no dropout (NAMED_BAR_BY_SHAPE; other head dims and the window /
# dropout builds: 0).  On the H200 (session 17 call 2, gpu_next_bwd_sync.sh,
# two repeats, MHA, N 2k-8k; docs/hopper.md "Named barriers") the causal rows
# gained at both levels and the non-causal ones did not (d = 64 0.92-0.99x);
# the by-shape default then had a run of its own (call 6,
# gpu_next_bwd_sync2.sh, with a GQA row): d = 128 causal level 2 1.02-1.07x,
# kept; d = 64 causal level 1 1.00-1.04x, below its rule's 1.02 mean, so 0.
# HOPPER_BWD_NAMED_BAR_DEFAULT (None: the table; 0 / 1 / 2 for every call,
# e.g. from FLASHATTN_TRITON_HOPPER_BWD_NAMED_BAR read at import) and the
# override NAMED_BAR take precedence, in that order reversed.
NAMED_BAR_ENV = "FLASHATTN_TRITON_HOPPER_BWD_NAMED_BAR"
NAMED_BAR_BY_SHAPE = {128: (0, 2)}
_NAMED_BAR = env_choice(NAMED_BAR_ENV, ("0", "1", "2"))
HOPPER_BWD_NAMED_BAR_DEFAULT: Optional[int] = None if _NAMED_BAR is None else int(_NAMED_BAR)
# TMA_DKV per head dim, (not causal, causal): dK / dV written through the
# free (Q, dO) ring slots and TMA stores (_store_tile_tma) instead of
# gl.store, whose build writes 16-bit elements one at a time, each behind a
# branch: in session 36's warp-state sampling (benchmarks/gpu_ncu_source.sh,
# d = 128 N = 2k) those two gl.store lines held 9-12 % of the kernel's
# samples, 89-91 % of them long-scoreboard waits.  The keys-as-M step (d =
# 64 / 128) and d = 256's SPLIT_D step (both consumers' 64 x 128 tiles staged in
# the one 64 x 256 ring slot, _dkv_stages), not persistent, 16-bit outputs with TMA-compatible strides
# (_make_plan turns it off otherwise); for calls without a window or
# dropout by this table (the others: TMA_DKV_DROPOUT / TMA_DKV_WINDOW).  Session
# 36 call 4 (benchmarks/history/gpu_next_tma_dkv.sh, rule per class in its header),
# kernel-only TMA_DKV / gl.store, N 2k / 4k / 8k, B*N = 16k: d = 64 causal
# 1.146 / 1.092 / 1.025x, full 1.121 / 1.054 / 1.027x; d = 128 full 1.119 /
# 1.048 / 1.045x (adopted); d = 128 causal 1.147 / 1.049 / 0.984x (its 8k
# row under the rule's 0.99: not adopted).  d = 256 since session 37 call 2
# (benchmarks/history/gpu_next_tma_dkv256.sh, 13 GPU tests passed): causal 1.155 /
# 1.054 / 1.018x (geomean 1.074), full 1.172 / 1.030 / 1.036x (1.077), a
# causal GQA row at 4k 1.098x.  d = 192 / dv = 128 (the split Q K^T; dK's two
# chunks and dV through three descriptors) since session 40 call 1
# (benchmarks/history/gpu_next_tma_dkv192.sh, 18 GPU tests passed): causal 1.151 /
# 1.079 / 1.054x at 2k / 4k / 8k, causal GQA 16/4 at 4k 1.049x, full 4k
# 1.055x (geomean 1.077).
TMA_DKV_DEFAULT = {64: (True, True), 128: (True, False), 256: (True, True), 192: (True, True)}
# Per head dim, the longest key length up to which a causal call takes
# TMA_DKV where TMA_DKV_DEFAULT leaves it off (same conditions; an override
# TMA_DKV takes precedence).  d = 128 since session 36 call 6
# (benchmarks/history/gpu_next_tma_dkv2.sh, its rule met at its 4096 tier): 1.021-
# 1.145x on four causal rows from 2k to 4k (MHA and GQA, geomean 1.086);
# longer rows 1.015x (6k), 1.051x (8k; 0.984x in call 4), 0.939x (16k).
TMA_DKV_CAUSAL_MAX_N = {128: 4096}
# TMA_DKV for calls with dropout (with or without a window) and for windowed
# calls without dropout, per head dim, (not causal, causal).  Session 37 call 2
# (benchmarks/history/gpu_next_tma_dkv_variants.sh, rule in its header, 37 GPU tests
# passed), kernel-only TMA_DKV / gl.store at B*N = 16k: dropout d = 64 causal
# 1.014-1.069x (geomean 1.034, 2k-8k, a GQA row among them), full 1.060 /
# 1.023x (2k / 8k); d = 128 causal 1.042-1.109x (1.074), full 1.100 / 1.045x.
# Causal windows of 256 / 1024 keys at 2k / 8k, two processes each: d = 64
# 1.145-1.234x (geomean 1.200), d = 128 1.161-1.330x (1.250).  Windows that
# are not causal were not timed (off).
TMA_DKV_DROPOUT = {64: (True, True), 128: (True, True)}
TMA_DKV_WINDOW = {64: (False, True), 128: (False, True)}
SMEM_LIMIT = 227 * 1024
_BROKEN = {}  # compile key -> error text, for configs that failed to build here


def configs(unverified: bool = False) -> dict:
    """CONFIGS, with CONFIGS_UNVERIFIED's head dims added when unverified
    (or the UNVERIFIED_ENV variable is 1)."""
    if unverified or env_switch(UNVERIFIED_ENV) is True:
        return {**CONFIGS_UNVERIFIED, **CONFIGS}
    return CONFIGS


# Head dims whose causal calls build the masked steps with ROW_BOUND: key j of
# a score tile kept for rows i >= j - causal_shift when j < N_K (one compare
# per score against each key's first row, that bound set past every row for
# keys past N_K) instead of two compares and an and (_visible); windows keep
# _visible.  Compile facts (Triton 3.6, sm_90, bf16): the masked loop 575 ->
# 448 SASS instructions at d = 128 (unmasked 374), 1,035 -> 744 at d = 64
# (588; its spill loads / stores in the GEMM loops 32 -> 17), 425 -> 402 at
# d = 256, 475 -> 451 at d = 192; with dropout at d = 128 the spills grow
# (496 -> 596 B), so dropout calls keep _visible.  Empty: timed in session
# 25 (benchmarks/history/gpu_next_row_bound.sh) at 0.999 / 0.998 geomean, not
# adopted (docs/hopper.md "One compare per score in the masked steps").
ROW_BOUND_DIMS: frozenset = frozenset()
# NO_LICM: the consumers' query-tile loops built with LLVM's loop-invariant
# code motion off (tl.range(..., disable_licm=True)).  The shared-memory
# descriptors of the block's K and V (and K1) tiles, one 64-bit value per
# wgmma k-step, do not change over those loops, so LICM computes them all
# before the loop and they stay live across it: 4,304 SASS instructions and
# 43 local loads / stores at d = 192 / dv = 128 causal, Triton 3.6 (Triton
# 3.9 forms each as its own 64-bit value: 175 in the d = 128 full build,
# whose local accesses are 159 there against 19 on 3.6).  Left in the loop, each is one add next to its wgmma and
# ptxas spills less: d = 192 causal 3,848 / 8, d = 128 causal 4,056 / 12,
# d = 64 causal 4,352 / 18 (from 4,600 / 89); 3.9 d = 128 full: no spill
# (results/compile/session73/).  Head dims whose calls take it by default;
# the override NO_LICM, then FLASHATTN_TRITON_HOPPER_BWD_NO_LICM (read at
# import, 0 / 1 for every call) stand on any.  Empty until timed on the GPU.
NO_LICM_DIMS: frozenset = frozenset()
NO_LICM_ENV = "FLASHATTN_TRITON_HOPPER_BWD_NO_LICM"
HOPPER_BWD_NO_LICM_DEFAULT: Optional[bool] = env_switch(NO_LICM_ENV)


def kernel_meta(head_dim: int, causal: bool, overrides=None, unverified: bool = False,
                windowed: bool = False, dropout: bool = False) -> dict:
    """Every meta-parameter of _attn_bwd_hopper but HEAD_DIM, HEAD_DIM_V and IS_CAUSAL;
    windowed: HAS_WINDOW, with WINDOW_CONFIGS' entries; dropout: HAS_DROPOUT,
    with DROPOUT_CONFIGS' entries and, where the build can take them
    (rng_warps_fit), DROPOUT_RNG_CONFIGS'; NAMED_BAR (0, 1, 2; True counts as 1): the
    override, else HOPPER_BWD_NAMED_BAR_DEFAULT when set, else NAMED_BAR_BY_SHAPE
    (0 with a window or dropout); 0 with SPLIT_D (an override 2 stands on the
    128-row split Q K^T step, Q_HALVES, not persistent), at most 1 with PERSISTENT;
    TMA_DKV from TMA_DKV_DROPOUT, TMA_DKV_WINDOW or TMA_DKV_DEFAULT by the
    call's variant (_make_plan adds TMA_DKV_CAUSAL_MAX_N and the conditions)."""
    meta = dict(SPLIT_DEFAULTS, PERSISTENT=PERSISTENT_DEFAULT.get(head_dim, (False, False))[causal],
                HAS_WINDOW=windowed, HAS_DROPOUT=dropout, DROPOUT_SHARED_CALLS=False, DROPOUT_RNG_WARPS=False,
                RNG_REGS=0,  # (always passed: left at its default it failed to build as a constexpr, Triton 3.6)
                RNG_NUM_WARPS=4, OWN_FIRST=False,  # (likewise)
                TMA_DKV=(TMA_DKV_DROPOUT if dropout else TMA_DKV_WINDOW if windowed else TMA_DKV_DEFAULT).get(
                    head_dim, (False, False))[causal])
    window_part = WINDOW_CONFIGS.get(head_dim, {}) if windowed else {}
    dropout_part = DROPOUT_CONFIGS.get(head_dim, {}) if dropout else {}
    for part in (configs(unverified)[head_dim], window_part, dropout_part, SCHEDULE[causal], overrides or {}):
        meta.update(part)
    if meta["SPLIT_D"] and not meta["DQ_CHUNK"]:
        meta["DQ_CHUNK"] = head_dim // meta["NUM_CONSUMERS"]
    level = meta.get("NAMED_BAR", HOPPER_BWD_NAMED_BAR_DEFAULT)
    if level is None:
        level = 0 if windowed or dropout else NAMED_BAR_BY_SHAPE.get(head_dim, (0, 0))[causal]
    if level not in (0, 1, 2):  # (True / False compare equal to 1 / 0)
        raise ValueError(f"NAMED_BAR must be 0, 1 or 2, got {level!r}")
    # (the SPLIT_D paths have no named-barrier form, one build for any
    # setting, but the 128-row split Q K^T step's dQ pieces through the
    # producer: 2 from an override or a CONFIGS entry, not the environment
    # or NAMED_BAR_BY_SHAPE, and not persistent)
    if meta["SPLIT_D"]:
        taken = meta["Q_HALVES"] and not meta["PERSISTENT"] and meta.get("NAMED_BAR") == 2
        meta["NAMED_BAR"] = 2 if taken else 0
    else:
        meta["NAMED_BAR"] = min(int(level), 1 if meta["PERSISTENT"] else 2)
    # Always passed, as the forward's (a build left to the kernel's default is
    # not the build of before in compile_check's direct compile); causal only,
    # and by default not with dropout (its d = 128 build spills more with it).
    default = head_dim in ROW_BOUND_DIMS and not dropout
    meta["ROW_BOUND"] = bool(meta.get("ROW_BOUND", default)) and causal
    default = head_dim in NO_LICM_DIMS if HOPPER_BWD_NO_LICM_DEFAULT is None else HOPPER_BWD_NO_LICM_DEFAULT
    meta["NO_LICM"] = bool(meta.get("NO_LICM", default))  # (always passed, as ROW_BOUND)
    # The RNG warps where this build can take them, unless overridden (an
    # override of CONSUMER_REGS also stands).
    rng_part = DROPOUT_RNG_CONFIGS.get(head_dim, {}) if dropout else {}
    if rng_part and "DROPOUT_RNG_WARPS" not in (overrides or {}):
        taken = dict(meta, **{k: v for k, v in rng_part.items() if k not in (overrides or {})})
        if rng_warps_fit(taken, dropout, windowed):
            meta = taken
    # A table's OWN_FIRST stands only where the build can take it (an
    # override of it stands, and the plan declines where it cannot).
    if meta["OWN_FIRST"] and "OWN_FIRST" not in (overrides or {}) and not own_first_fits(meta):
        meta["OWN_FIRST"] = False
    return meta


def dq_block_cols(head_dim, NUM_CONSUMERS, SPLIT_D=False, DQ_CHUNK=0, **_):
    """Columns of one dQ reduce-add (the dQ descriptor's block)."""
    return DQ_CHUNK if SPLIT_D else head_dim // NUM_CONSUMERS


def dq_block_rows(BLOCK_M, Q_HALVES=False, **_):
    """Rows of one dQ reduce-add: the query tile's, or with Q_HALVES a
    consumer's half of it (the kernel's DQ_ROWS)."""
    return BLOCK_M // 2 if Q_HALVES else BLOCK_M


def dkv_block(head_dim, BLOCK_N, NUM_CONSUMERS, SPLIT_D=False, **_):
    """The TMA_DKV descriptors' block (1, 1, rows, cols): a consumer's dK /
    dV tile, its keys x d, or with SPLIT_D every key x its d / 2 columns."""
    if SPLIT_D:
        return [1, 1, BLOCK_N, head_dim // NUM_CONSUMERS]
    return [1, 1, BLOCK_N // NUM_CONSUMERS, head_dim]


def smem_bytes(head_dim, BLOCK_M, BLOCK_N, NUM_STAGES, NUM_CONSUMERS=2, SPLIT_D=False, DS_BUFS=2,
               DQ_CHUNK=0, PERSISTENT=False, head_dim_v=None, DQ_STAGE_BUFS=1, Q_HALVES=False,
               DROPOUT_RNG_WARPS=0, **_):
    """K, V, the (Q, dO) ring, dS^T (and P^T when SPLIT_D; 16-bit), the
    float32 dQ staging, the per-slot lse2 / delta rows and the barriers (the
    compiler may add a few hundred bytes of alignment: a config that still
    does not fit fails to build and is declined; DROPOUT_RNG_WARPS: the RNG
    warps' keep bits per slot, 4 bytes per Philox call of 8 scores).  head_dim: Q's and K's width,
    head_dim_v V's and dO's (default head_dim)."""
    dv = head_dim if head_dim_v is None else head_dim_v
    n_ds = DS_BUFS if SPLIT_D else 2
    dq_cols = NUM_CONSUMERS * dq_block_cols(dv, NUM_CONSUMERS, SPLIT_D, DQ_CHUNK)
    return (2 * (BLOCK_N * (head_dim + dv) + NUM_STAGES * BLOCK_M * (head_dim + dv)
                 + (2 if SPLIT_D else 1) * n_ds * BLOCK_N * BLOCK_M)
            + 4 * dq_block_rows(BLOCK_M, Q_HALVES) * dq_cols * DQ_STAGE_BUFS + 4 * 2 * NUM_STAGES * BLOCK_M
            + 8 * (1 + 3 * NUM_STAGES + 2 + bool(PERSISTENT))
            # the RNG warps' keep bits (4 bytes per call of 8 scores) and barriers
            + (NUM_STAGES * (BLOCK_N * BLOCK_M // 2 + 8) if DROPOUT_RNG_WARPS else 0))


@functools.lru_cache(maxsize=None)
def _sm_count(index):
    return triton.runtime.driver.active.utils.get_device_properties(index)["multiprocessor_count"]


def sm_count(device) -> int:
    """Streaming multiprocessors of a CUDA device (132 on an H200), cached.
    Read through Triton's driver (the device the launch goes to; the
    host-side tests' stand-in driver answers it too)."""
    device = torch.device(device)
    index = device.index if device.index is not None else triton.runtime.driver.active.get_current_device()
    return _sm_count(index)


def group_split(group: int, n_programs: int, sms: int, part_bytes: int, waves: Optional[int] = None) -> int:
    """Slices S of each KV head's query-head group: the smallest divisor of
    group with n_programs * S >= waves * sms (n_programs: key blocks x batch
    x KV heads, the grid without a split; waves: GROUP_SPLIT_WAVES unless
    given), group if none reaches it; at most the largest divisor whose
    float32 partials (S x part_bytes) fit the portable backward's
    GROUP_SPLIT_BYTES."""
    from ..bwd import GROUP_SPLIT_BYTES
    waves = GROUP_SPLIT_WAVES if waves is None else waves
    fits = [s for s in range(1, group + 1) if group % s == 0 and (s == 1 or s * part_bytes <= GROUP_SPLIT_BYTES)]
    for s in fits:
        if n_programs * s >= waves * sms:
            return s
    return fits[-1]


def resolve_group_split(request, causal: bool, group: int, n_programs: int, part_bytes: int, sms,
                        dropout: bool = False) -> int:
    """The S of a call: request is the GROUP_SPLIT override (None: the
    default of HOPPER_BWD_GROUP_SPLIT_DEFAULT[causal]; 0: group_split's rule,
    with GROUP_SPLIT_WAVES_DROPOUT for a call with dropout; S >= 1:
    split_divisor's), always 1 for MHA (group 1).  sms() gives the device's
    SM count, asked only by the rule."""
    if request is None:
        request = 0 if HOPPER_BWD_GROUP_SPLIT_DEFAULT[bool(causal)] else 1
    if group == 1:
        return 1
    if request == 0:
        return group_split(group, n_programs, sms(), part_bytes,
                           GROUP_SPLIT_WAVES_DROPOUT if dropout else GROUP_SPLIT_WAVES)
    return split_divisor(request, group)


def split_divisor(request: int, group: int) -> int:
    """An explicit GROUP_SPLIT = S: the largest divisor of group not above S
    (1 for MHA, so one override serves GQA and MHA rows alike)."""
    return max(s for s in range(1, min(int(request), group) + 1) if group % s == 0)


def _tma_ok(t: torch.Tensor) -> bool:
    return (t.stride(-1) == 1 and t.data_ptr() % 16 == 0
            and all((s * t.element_size()) % 16 == 0 for s in t.stride()[:-1]))


def unsupported_reason(do, q, k, v, lse, delta, dq, dk, dv, sm_scale, unverified=False) -> str:
    """Why the Hopper backward cannot take this call ('' if it can).  Meta
    tensors count as tensors of the device of an active compile-only context
    (the backward prefetch compiles this kernel so).  unverified: see
    configs()."""
    device = fastlaunch.compile_only_device() if q.is_meta else q.device
    if device is None or device.type != "cuda":
        return "not a CUDA tensor"
    if torch.cuda.get_device_capability(device) != (9, 0):
        return "not an sm_90 GPU"
    if q.dtype not in _GL_DTYPES or any(t.dtype != q.dtype for t in (k, v, do, dq, dk, dv)):
        return f"dtype {q.dtype} (float16/bfloat16 only, all alike)"
    if lse.dtype != torch.float32 or delta.dtype != torch.float32 or lse.stride(-1) != 1 or delta.stride(-1) != 1:
        return "lse and delta must be float32 with last stride 1"
    d = q.shape[-1]
    table = configs(unverified)
    if d not in table or k.shape[-1] != d or v.shape[-1] != HEAD_DIM_V.get(d, d):
        pairs = ", ".join(f"{a}/{b}" for a, b in sorted(HEAD_DIM_V.items()) if a in table)
        return (f"head dims q {d}, k {k.shape[-1]}, v {v.shape[-1]} (d = dv in "
                f"{sorted(x for x in table if x not in HEAD_DIM_V)}{', or d/dv ' + pairs if pairs else ''})")
    if not sm_scale > 0:
        return f"softmax scale {sm_scale} (the kernel folds it assuming > 0)"
    batch, h_q, n_q, _ = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    if min(batch, h_q, n_q, n_k) == 0:
        return "empty tensor"
    if h_q % h_kv or v.shape[:3] != k.shape[:3] or do.shape != q.shape[:3] + v.shape[3:] \
            or dq.shape != q.shape or dk.shape != k.shape or dv.shape != v.shape:
        return "shapes"
    if not all(_tma_ok(t) for t in (q, k, v, do)):
        return "strides or base not 16-byte aligned for TMA"
    if dk.stride(-1) != 1 or dv.stride(-1) != 1:
        return "dk, dv need unit last stride"
    if max(max(t.shape) for t in (q, k)) >= 2 ** 31:
        return "dimension too large"
    return ""


def hopper_attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                              lse: torch.Tensor, delta: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor,
                              dv: torch.Tensor, sm_scale: float, causal_shift, window=None, UNVERIFIED=False,
                              dropout=None, **overrides) -> bool:
    """dq, dk, dv of attention on (B, H, N, d)-indexed views; False if it cannot.

    do, q, dq: (B, Hq, Nq, d); k, v, dk, dv: (B, Hkv, Nk, d), Hq a multiple of
    Hkv; lse (base 2, the forward's lse2) and delta (rowsum(dO * O), natural
    units, from the portable preprocess): float32 (B, Hq, Nq), last stride 1;
    d in CONFIGS (or CONFIGS_UNVERIFIED with UNVERIFIED); v, dv and do of
    HEAD_DIM_V[d] columns where d has one (d = 192: 128; no window or
    dropout there); float16 or bfloat16 alike; causal_shift: None for no mask,
    else row i sees keys j <= i + causal_shift.  window: None, or (left,
    shift) with left >= 0: row i sees only keys j >= i + shift - left (as
    hopper_attention_forward's: flash-attn's left bound around the diagonal
    i + shift; the kernel gets fwd.lower_diagonal's clamped window_lo).  dropout: None, or (seed, p,
    philox_offset) as hopper_attention_forward's (kernels/score.py's keep
    mask; delta stays rowsum(dO * O); docs/hopper.md, "Dropout").  dq, dk, dv are written in
    place (dq through a float32 buffer).  Returns False, having written
    nothing, when the case is not supported.  ``overrides`` replace CONFIGS
    entries (benchmarks, tests); GROUP_SPLIT=S among them splits each GQA
    group over S programs (module doc; 0: group_split's rule, the default
    where HOPPER_BWD_GROUP_SPLIT_DEFAULT[causal]).  UNVERIFIED=True also takes the
    head dims of CONFIGS_UNVERIFIED.

    The checks and the launch set-up (kernel_meta, the decline decision, the
    descriptors' blocks and layouts, the grid) are made once per signature
    (_bwd_signature: shapes, strides, dtypes, device, alignment, causal,
    windowed, dropout, unverified) and reused by later calls, which build the
    five descriptors from the plan and launch through the launch fast path
    (kernels/fastlaunch.py: the same layout objects give the same launch
    key).  Calls with overrides, and the prefetch's meta tensors, make a
    plan of their own each time.
    """
    if not sm_scale > 0:
        return False
    causal = causal_shift is not None
    windowed = window is not None
    dropped = dropout is not None
    unverified = bool(UNVERIFIED) or env_switch(UNVERIFIED_ENV) is True
    if overrides or q.is_meta:
        plan = _make_plan(do, q, k, v, lse, delta, dq, dk, dv, sm_scale, causal, windowed, dropped, unverified,
                          overrides)
    else:
        sig = _bwd_signature(do, q, k, v, lse, delta, dq, dk, dv, causal, windowed, dropped, unverified)
        plan = _PLANS.get(sig)
        if plan is None:
            if len(_PLANS) >= MAX_PLANS:
                _PLANS.clear()
            plan = _PLANS[sig] = _make_plan(do, q, k, v, lse, delta, dq, dk, dv, sm_scale, causal, windowed,
                                            dropped, unverified, overrides)
    return _launch(plan, do, q, k, v, lse, delta, dq, dk, dv, sm_scale, causal_shift, window, dropout)


class _Plan:
    """What the calls of one signature launch (hopper_attention_backward)."""

    __slots__ = ("key", "grid", "dims", "blocks", "layouts", "acc_shape", "acc_strides", "acc_numel", "tail",
                 "kwargs", "validated", "n_q", "n_k", "n_bh", "split", "h_kv", "out_shape", "qk1",
                 "dkv_dims", "dkv_blocks", "dkv_layouts", "varlen")


_PLANS: dict = {}  # _bwd_signature -> _Plan or the decline reason (calls without overrides)
MAX_PLANS = 1024


def _bwd_signature(do, q, k, v, lse, delta, dq, dk, dv, causal, windowed, dropped, unverified) -> tuple:
    """Everything the checks and the launch set-up read (not the data, the
    scale, the shifts or the dropout's values)."""
    return (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), do.shape, do.stride(),
            lse.shape, lse.stride(), delta.shape, delta.stride(), dq.shape, dk.shape, dk.stride(),
            dv.shape, dv.stride(), q.dtype, k.dtype, v.dtype, do.dtype, dq.dtype, dk.dtype, dv.dtype,
            lse.dtype, delta.dtype, q.device, causal, windowed, dropped, unverified,
            (q.data_ptr() | k.data_ptr() | v.data_ptr() | do.data_ptr()) & 15,
            (dk.data_ptr() | dv.data_ptr()) & 15)


def _make_plan(do, q, k, v, lse, delta, dq, dk, dv, sm_scale, causal, windowed, dropped, unverified, overrides,
               varlen=None):
    """A _Plan, or the reason (a string) why this case is declined.  varlen:
    (sequences, max_seqlen_q, max_seqlen_k) of a packed batch, whose views
    have batch 1 (hopper_backward_varlen)."""
    reason = unsupported_reason(do, q, k, v, lse, delta, dq, dk, dv, sm_scale, unverified)
    if reason:
        return reason
    batch, h_q, n_q, d = q.shape
    if varlen is not None:
        if dropped:
            return "packed batches with dropout are not built"
        # (not HEADS_FIRST: the dense rule reads n_k, here the longest sequence, and in
        # session 56 call 6 it made d = 64 batches of 64..4096 / 64..8192 tokens 0.82-0.92x
        # the portable backward, 1.26-1.37x without it)
        # (IS_VARLEN 2: the rows past each sequence zeroed, fwd.varlen_isolate)
        overrides = dict(overrides or {}, IS_VARLEN=2 if varlen_isolate() else 1, PERSISTENT=False,
                         GROUP_SPLIT=1, TMA_DKV=False, HEADS_FIRST=False)
    d_v = v.shape[-1]  # d itself, or HEAD_DIM_V[d] (split Q K^T)
    if dropped and d in DROPOUT_DECLINE:
        return "dropout declined at this head dim"
    if windowed and d in WINDOW_DECLINE:
        return WINDOW_DECLINE[d]
    h_kv, n_k = k.shape[1], k.shape[2]
    if windowed and n_q + n_k >= 2 ** 31 - 1024:
        return "window: int32 range"  # the kernel's int32 row / key sums with window_lo
    total_q = n_q  # the dQ buffer's rows (a packed batch's total)
    if varlen is not None:
        batch, n_q, n_k = varlen  # the grid: sequences, and their longest lengths
    meta = kernel_meta(d, causal, overrides, unverified, windowed, dropped)
    if varlen is not None and meta["SPLIT_D"]:
        return "packed batches: the keys-as-M step only (d = 64, 128), not SPLIT_D"
    n_programs = meta.pop("NUM_SMS", None)  # persistent grid size (tests), not a kernel parameter
    n_blocks = triton.cdiv(n_k, meta["BLOCK_N"])
    group = h_q // h_kv
    # (a compile-only call, on meta tensors: the device it compiles for)
    device = fastlaunch.compile_only_device() if q.is_meta else q.device
    split = resolve_group_split(meta.pop("GROUP_SPLIT", None), causal, group, n_blocks * batch * h_kv,
                                batch * h_kv * n_k * (d + d_v) * 4, lambda: sm_count(device), dropped)
    meta["GROUP_SPLIT"] = split
    if split > 1:
        min_n = (HEADS_FIRST_GQA_SPLIT_MIN_N_DROPOUT if dropped else HEADS_FIRST_GQA_SPLIT_MIN_N).get(d)
    else:  # a whole GQA group per program (no dropout table: not measured)
        min_n = HEADS_FIRST_GQA_UNSPLIT_MIN_N.get(d) if group > 1 and not dropped else None
    if (min_n is not None and causal and n_k >= min_n and not windowed
            and not meta["PERSISTENT"] and not {"HEADS_FIRST", "SLICES_FIRST"} & set(overrides or {})):
        meta["HEADS_FIRST"] = True
    if (split > 1 and d in SLICES_FIRST_GQA_SPLIT_DIMS and causal and not windowed and not dropped
            and not meta["PERSISTENT"] and not meta["HEADS_FIRST"]
            and not {"HEADS_FIRST", "SLICES_FIRST"} & set(overrides or {})):
        meta["SLICES_FIRST"] = True
    if meta["Q_HALVES"] not in (0, 1, 2):  # (True / False compare equal to 1 / 0)
        return f"Q_HALVES: 0 / False, 1 / True or 2 (the late 'free' arrival), not {meta['Q_HALVES']!r}"
    if meta["OWN_FIRST"] and not own_first_fits(meta):
        return ("OWN_FIRST: two consumers on the 128-row split Q K^T step (Q_HALVES), or on the keys-as-M "
                f"step with NAMED_BAR 0 (the exchanges through ds_ready), not Q_HALVES {meta['Q_HALVES']!r}, "
                f"SPLIT_D {meta['SPLIT_D']!r}, NAMED_BAR {meta['NAMED_BAR']!r}, "
                f"NUM_CONSUMERS {meta['NUM_CONSUMERS']!r}")
    if meta["Q_HALVES"] and (d == d_v or meta["BLOCK_M"] != 128 or meta["DQ_CHUNK"] not in (32, 64)
                             or (d - d_v) % meta["DQ_CHUNK"] or not meta["SPLIT_D"]):
        return "Q_HALVES: the split Q K^T step, BLOCK_M = 128, DQ_CHUNK 32 or 64 dividing d - dv"
    if meta["SLICES_FIRST"] and (split == 1 or meta["PERSISTENT"] or meta["HEADS_FIRST"]):
        return "SLICES_FIRST: a 2-D grid of a split group (GROUP_SPLIT > 1), not heads first"
    if meta["DQ_STAGE_BUFS"] < 1:  # (False compares equal to 0)
        return (f"DQ_STAGE_BUFS: 1 or more staging buffers per consumer, not {meta['DQ_STAGE_BUFS']!r} (0, dQ "
                "added by atomics from registers, measured 0.66-0.71x in session 43, was removed)")
    if meta["SPLIT_D"] and meta["NAMED_BAR"] == 2 and meta["DQ_STAGE_BUFS"] not in (1, 2):
        return ("NAMED_BAR = 2 on the 128-row split Q K^T step (dQ pieces through the producer, barriers 4-7 and "
                f"10-13): DQ_STAGE_BUFS 1 or 2, not {meta['DQ_STAGE_BUFS']!r}")
    if meta["DQ_STAGE_BUFS"] > 1 and d == d_v and (meta["SPLIT_D"] or meta["NAMED_BAR"] == 2):
        return "DQ_STAGE_BUFS > 1: the split Q K^T step (d != dv), or the keys-as-M one with NAMED_BAR < 2"
    if meta["DROPOUT_RNG_WARPS"] not in (0, 4):  # (False compares equal to 0)
        return ("DROPOUT_RNG_WARPS: 0 or 4 (each call's keep bits tested in place), not "
                f"{meta['DROPOUT_RNG_WARPS']!r} (1 - 3, slower on the H200, were removed in sessions 41 and 45)")
    if meta["DROPOUT_RNG_WARPS"] and not rng_warps_fit(meta, dropped, windowed):
        return ("DROPOUT_RNG_WARPS: dropout without a window on the keys-as-M step, not persistent, BLOCK_M = 64, "
                "NAMED_BAR < 2")
    rng_regs, rng_w = meta.get("RNG_REGS", 0), meta.get("RNG_NUM_WARPS", 4)
    if rng_w != 4 and (rng_w != 2 or not meta["DROPOUT_RNG_WARPS"] or not dropped):
        return f"RNG_NUM_WARPS: 4, or 2 with DROPOUT_RNG_WARPS (dropout), not {rng_w!r}"
    if rng_regs and (not (meta["DROPOUT_RNG_WARPS"] and dropped) or rng_regs % 8 or not 24 <= rng_regs <= 256
                     or 128 * meta["NUM_CONSUMERS"] * meta["CONSUMER_REGS"] + 32 * (rng_w * rng_regs + 24) > 65536):
        return ("RNG_REGS: the RNG warps' registers (DROPOUT_RNG_WARPS, dropout), a multiple of 8 from 24 that the "
                f"consumers at {meta['CONSUMER_REGS']} leave, not {rng_regs!r}")
    if smem_bytes(d, head_dim_v=d_v, **meta) > SMEM_LIMIT:
        return "shared memory"
    if (causal and not meta["TMA_DKV"] and n_k <= TMA_DKV_CAUSAL_MAX_N.get(d, -1) and not (windowed or dropped)
            and "TMA_DKV" not in (overrides or {})):
        meta["TMA_DKV"] = True
    if meta["TMA_DKV"] and (meta["PERSISTENT"]
                            or (not meta["SPLIT_D"] and meta["NUM_STAGES"] < meta["NUM_CONSUMERS"])
                            or (split > 1 and not partials_16bit(split))
                            or (split == 1 and not (_tma_ok(dk) and _tma_ok(dv)))):
        meta["TMA_DKV"] = False  # (a slot per consumer to stage in; 16-bit, TMA-aligned outputs)
    n_blocks = triton.cdiv(n_k, meta["BLOCK_N"])
    n_bh = batch * h_kv * split
    if meta["PERSISTENT"]:
        if n_blocks * n_bh >= 2 ** 31:
            return "grid"
        # (a compile-only call, on meta tensors, launches nothing)
        grid = (min(n_programs or (1 if q.is_meta else sm_count(q.device)), n_blocks * n_bh),)
    else:
        grid = ((n_bh, n_blocks) if meta["HEADS_FIRST"] else
                (n_blocks * split, batch * h_kv) if meta["SLICES_FIRST"] else (n_blocks, n_bh))
        if grid[1] > 65535:
            return "grid"
    gdt = _GL_DTYPES[q.dtype]
    # Blocks of d_v columns: Q's and K's first chunk, V, dO (with d_v = d the
    # whole rows); split Q K^T adds Q's and K's columns [d_v, d) as blocks of
    # their own (descriptors q1_desc, k1_desc over the same tensors).
    q_block = [1, 1, meta["BLOCK_M"], d_v]
    kv_block = [1, 1, meta["BLOCK_N"], d_v]
    dq_block = [1, 1, dq_block_rows(**meta), dq_block_cols(d_v, **meta)]
    q_layout = gl.NVMMASharedLayout.get_default_for(q_block, gdt)
    kv_layout = gl.NVMMASharedLayout.get_default_for(kv_block, gdt)
    dq_layout = gl.NVMMASharedLayout.get_default_for(dq_block, gl.float32)
    plan = _Plan()
    plan.key = (q.dtype, d, d_v, causal, tuple(sorted(meta.items())))
    plan.grid = grid
    plan.varlen = varlen is not None
    plan.acc_shape = (1, h_q, total_q, d) if plan.varlen else (batch, h_q, n_q, d)
    plan.acc_numel = plan.acc_shape[0] * h_q * plan.acc_shape[2] * d
    from .. import bwd as portable
    acc_strides = (dq_acc_strides(dq) if portable.by_causal(DQ_ACC_LIKE_DQ, causal)
                   else [h_q * plan.acc_shape[2] * d, plan.acc_shape[2] * d, d, 1])
    plan.acc_strides = tuple(acc_strides)
    plan.dims = tuple((list(t.shape), list(t.stride())) for t in (q, k, v, do)) + (
        (list(plan.acc_shape), acc_strides),)
    plan.blocks = (q_block, kv_block, kv_block, q_block, dq_block)
    plan.layouts = (q_layout, kv_layout, kv_layout, q_layout, dq_layout)
    plan.qk1 = d != d_v
    if plan.qk1:
        q1_block = [1, 1, meta["BLOCK_M"], d - d_v]
        k1_block = [1, 1, meta["BLOCK_N"], d - d_v]
        plan.dims += plan.dims[:2]
        plan.blocks += (q1_block, k1_block)
        plan.layouts += (gl.NVMMASharedLayout.get_default_for(q1_block, gdt),
                         gl.NVMMASharedLayout.get_default_for(k1_block, gdt))
    if split > 1:
        # Slice h of (B, H_KV * split) holds the partials (partials_16bit) of query
        # heads [h * group / split, + group / split), contiguous; every row
        # below N_K is written (_launch allocates them per call).
        out_strides = (h_kv * split * n_k * d, n_k * d, d, h_kv * split * n_k * d_v, n_k * d_v, d_v)
    else:
        out_strides = (dk.stride(0), dk.stride(1), dk.stride(2), dv.stride(0), dv.stride(1), dv.stride(2))
    if plan.varlen:  # every sequence in batch entry 0: the batch strides are 0
        out_strides = (0,) + out_strides[1:3] + (0,) + out_strides[4:]
    # a split runs as H_KV * split KV heads of group / split query heads
    plan.tail = (0 if plan.varlen else lse.stride(0), lse.stride(1), 0 if plan.varlen else delta.stride(0),
                 delta.stride(1)) + out_strides + (h_kv * split, n_q, n_k, group // split)
    plan.kwargs = dict(HEAD_DIM=d, HEAD_DIM_V=d_v, IS_CAUSAL=causal, num_warps=4, **meta)
    plan.validated = False  # set once TensorDescriptor has checked this signature's descriptors
    plan.n_q, plan.n_k, plan.n_bh = n_q, n_k, batch * h_kv * split
    plan.split, plan.h_kv = split, h_kv
    plan.out_shape = ((batch, h_kv * split, n_k, d), (batch, h_kv * split, n_k, d_v))  # dK's, dV's partials
    if meta["TMA_DKV"]:
        plan.dkv_dims = tuple((list(shape), list(out_strides[3 * i:3 * i + 3]) + [1])
                              for i, shape in enumerate(plan.out_shape))
        if plan.qk1:  # dK's first chunk, dV, dK's second chunk (dk1_desc: over dK too)
            plan.dkv_dims += plan.dkv_dims[:1]
            plan.dkv_blocks = (dkv_block(d_v, **meta), dkv_block(d_v, **meta), dkv_block(d - d_v, **meta))
        else:
            plan.dkv_blocks = (dkv_block(d, **meta), dkv_block(d, **meta))
        plan.dkv_layouts = tuple(gl.NVMMASharedLayout.get_default_for(b, gdt) for b in plan.dkv_blocks)
    return plan


def _launch(plan, do, q, k, v, lse, delta, dq, dk, dv, sm_scale, causal_shift, window, dropout,
            varlen=None) -> bool:
    """Launch a plan (False if it is a decline reason or its build failed);
    dq gets the float32 buffer's sums.  varlen: (cu_seqlens_q, cu_seqlens_k,
    window_lo) of a packed batch (hopper_backward_varlen)."""
    if plan.__class__ is str or plan.key in _BROKEN:
        return False
    if varlen is not None:
        window_lo = varlen[2]
    else:
        window_lo = lower_diagonal(window, plan.n_q, plan.n_k)  # in [-n_q, n_k]; 0 without a window
    validated = plan.validated
    # zeroed per call on the current stream (a role of its own in a recording)
    dq_acc = fastlaunch.zeroed_scratch(plan.acc_numel, torch.float32, q.device)
    tensors = (q, k, v, do, dq_acc, q, k) if plan.qk1 else (q, k, v, do, dq_acc)
    args = tuple(_descriptor(t, dims, block, layout, validated)
                 for t, dims, block, layout in zip(tensors, plan.dims, plan.blocks, plan.layouts))
    if not plan.qk1:
        args += (None, None)  # q1_desc, k1_desc: constexpr None, no kernel parameters
    if plan.split > 1:
        part_dtype = q.dtype if partials_16bit(plan.split) else torch.float32
        dk_out, dv_out = (fastlaunch.empty_scratch(shape, part_dtype, q.device) for shape in plan.out_shape)
    else:
        dk_out, dv_out = dk, dv
    if plan.kwargs["TMA_DKV"]:
        args += tuple(_descriptor(t, dims, block, layout, validated)
                      for t, dims, block, layout in zip((dk_out, dv_out, dk_out), plan.dkv_dims, plan.dkv_blocks,
                                                        plan.dkv_layouts))
        if not plan.qk1:
            args += (None,)  # dk1_desc
    else:
        args += (None, None, None)  # dk_desc, dv_desc, dk1_desc
    args += (lse, delta, dk_out, dv_out) + plan.tail + (
        sm_scale * LOG2E, sm_scale, 0 if causal_shift is None else causal_shift, plan.n_bh, window_lo,
        *dropout_args(dropout, plan.n_q, plan.n_k, lse))
    args += (varlen[0], varlen[1]) if varlen is not None else (lse, lse)  # CU_SEQLENS_Q / _K (else unused)
    switch = q.is_cuda and q.device.index != torch.cuda.current_device()
    try:
        with torch.cuda.device(q.device) if switch else _NO_SWITCH:
            _run.launch(args, plan.kwargs, plan.grid)
    except LAUNCH_ERRORS as exc:
        if not is_build_failure(exc):
            raise
        _BROKEN[plan.key] = f"{type(exc).__name__}: {exc}"[:2000]
        return False
    plan.validated = True
    from .. import bwd as portable
    if plan.split > 1 and not q.is_meta:  # (a compile-only call has nothing to sum)
        with torch.cuda.device(q.device) if switch else _NO_SWITCH:
            portable._sum_group_partials(dk, dk_out, plan.h_kv, plan.split)
            portable._sum_group_partials(dv, dv_out, plan.h_kv, plan.split)
    acc = dq_acc.as_strided(plan.acc_shape, plan.acc_strides)
    if portable.by_causal(portable.DQ_CONVERT_KERNEL, plan.key[3]):  # (a compile-only call compiles it)
        with torch.cuda.device(q.device) if switch else _NO_SWITCH:
            portable.convert_dq(dq, acc, 1.0)
    else:
        dq.copy_(acc)
    return True


def hopper_backward_varlen(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           lse: torch.Tensor, delta: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor,
                           dv: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                           max_seqlen_q: int, max_seqlen_k: int, sm_scale: float, causal: bool,
                           window_left: int = -1) -> bool:
    """dq, dk, dv of a packed batch on its (1, H, total, d)-indexed views
    (q, do, dq: (1, Hq, total_q, d); k, v, dk, dv: (1, Hkv, total_k, d); lse,
    delta: (1, Hq, total_q) float32, the forward's lse2 and the portable
    preprocess's delta), cu_seqlens int32 (batch + 1,) on the device, the
    mask per sequence as hopper_forward_varlen's (bottom-right diagonal, a
    left window).  d = 64 or 128 (the keys-as-M step), no dropout; whole GQA
    groups per program, dK / dV by gl.store with the sequence's row bound.
    Returns False, having written nothing, when the case is not supported.
    On by default since session 56 (_dispatch.use_hopper_varlen_backward)."""
    if not sm_scale > 0:
        return False
    windowed = window_left >= 0
    sig = packed_key(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k) + _bwd_signature(
        do, q, k, v, lse, delta, dq, dk, dv, causal, windowed, False, False) + (varlen_isolate(),)
    plan = _PLANS.get(sig)
    if plan is None:
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()
        plan = packed_reason(cu_seqlens_q, cu_seqlens_k, q.device) or (
            "views of batch 1" if q.shape[0] != 1 else
            _make_plan(do, q, k, v, lse, delta, dq, dk, dv, sm_scale, causal, windowed, False, False, {},
                       varlen=(cu_seqlens_q.shape[0] - 1, max_seqlen_q, max_seqlen_k)))
        _PLANS[sig] = plan
    lo = packed_window_lo(window_left, max_seqlen_q, max_seqlen_k)
    return _launch(plan, do, q, k, v, lse, delta, dq, dk, dv, sm_scale, 0 if causal else None, None, None,
                   varlen=(cu_seqlens_q, cu_seqlens_k, lo))


def dq_acc_strides(dq: torch.Tensor) -> list:
    """Strides of the dense float32 dQ buffer, (B, H, N, d) indexed, laid out
    in dq's memory order: its dims sorted by dq's strides (larger outer,
    ties in index order), d innermost.  With dq a view of the flash layout
    (B, N, H, d) the buffer is (B, N, H, d) in memory too, so the final
    dq.copy_ walks both tensors in one order: a vectorized dense copy, where
    a (B, H, N, d) buffer made it a strided elementwise one (about 2x the
    time on the H200, session 14 call 3's profile)."""
    order = sorted(range(3), key=lambda i: -dq.stride(i))  # outer to inner, d last
    strides = [0, 0, 0, 1]
    step = dq.shape[3]
    for i in reversed(order):
        strides[i] = step
        step *= dq.shape[i]
    return strides


_NO_SWITCH = contextlib.nullcontext()


class _JitLaunch:
    """``kernel[grid](*args, **kwargs)`` where the fast path is not installed."""

    def __init__(self, kernel):
        self.kernel = kernel

    def launch(self, args, kwargs, grid):
        return self.kernel[grid](*args, **kwargs)


_run = fastlaunch.fast_run(fastlaunch.install(_attn_bwd_hopper)) or _JitLaunch(_attn_bwd_hopper)


__all__ = ["hopper_attention_backward", "hopper_backward_varlen", "unsupported_reason", "configs", "kernel_meta",
           "CONFIGS",
           "CONFIGS_UNVERIFIED", "PERSISTENT_DEFAULT", "WINDOW_CONFIGS", "DROPOUT_CONFIGS", "DROPOUT_RNG_CONFIGS",
           "rng_warps_fit", "DROPOUT_DECLINE",
           "HOPPER_BWD_GROUP_SPLIT_DEFAULT", "HOPPER_BWD_NAMED_BAR_DEFAULT", "group_split", "resolve_group_split",
           "split_divisor"]
