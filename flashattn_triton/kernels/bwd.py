"""Portable backward kernels: recompute the probability tiles from Q, K and the LSE.

With s = scale * q k^T, P = exp(s - lse), O = P V:
    dV = P^T dO,  dP = dO V^T,  dS = P * (dP - delta),  dQ = scale * dS K,
    dK = scale * dS^T Q,  where delta_i = sum_d dO_id O_id  (= rowsum(P * dP)).
The forward saved lse2 = lse * log2(e) (base 2), and the backward forms the
exponent exactly as the forward did: P = exp2(s2 - lse2) with s2 from
kernels/score.py's score_tile.
If the caller also differentiates lse2, d lse2_i / d s_ij = P_ij * log2(e)
adds P * dlse2 * log2(e) to dS, i.e. delta_i becomes delta_i - dlse2_i * log2(e).

Variants (compile-time switches, as in the forward):
* softcap: s = c tanh(scale qk / c), so dS is multiplied by 1 - tanh^2
  before it meets Q or K.
* ALiBi and the mask / bias add constants: dS is unchanged; the gradient of
  a float bias is dS itself (HAS_DBIAS: the dQ kernel writes it, the op layer
  sums it over the dims where the bias broadcasts).
* dropout with keep mask Z and Pd = P * Z * r, r = 2^16 / (2^16 - t) (t the
  16-bit threshold of kernels/score.py): dV = Pd^T dO and
  dP = Z * (dO V^T) * r; delta = rowsum(dO * O) still equals
  rowsum(P * dP).  Z is regenerated from the same Philox counters.
* LSE_LO (the op layer passes it with a float bias: ops.py's compensated
  LSE): the forward's residual lo = (m - lse2) + log2(l) lies Nq elements
  past each row's lse2, and every kernel here forms P = exp2((s2 - lse2) - lo)
  (at m ~ -1.4e9, a bias row of -1e9, lse2 == m in float32 and exp2(s2 - lse2)
  would be 1, not 1 / l).  Off: the builds are those without the switch.
* sinks: P (and so dQ, dK, dV) comes from the LSE, which includes the sink;
  d sink_h = -sum_i exp(sink_h - lse_i) * delta_i is formed from the delta
  this module returns by sinks_grad (_bwd_sinks_grad's per-block partial
  sums, added in a fixed order by _bwd_sinks_grad_sum).

Deterministic form, three launches and no atomics:
  1. _bwd_preprocess: delta per query row.
  2. _bwd_dkdv: a program owns a K/V tile of one KV head and loops over every
     query tile of the query heads of its slice of the GQA group (group_split);
     with more than one slice, _bwd_group_sum then adds the slices' float32
     partials, in a fixed order, into dK and dV.
  3. _bwd_dq: a program owns a Q tile and loops over the K/V tiles.
  With ONE_LAUNCH (on at d = 128 without a causal mask), 2 and 3 are one
  launch of _bwd_dkdv_dq for dense calls without a bias gradient: a 1-D
  grid of _bwd_dkdv's and _bwd_dq's programs, by (batch, KV head)
  (programs that read the same Q, K, V and dO run together),
  each running the same program body (_dkdv_program, _dq_program) with its
  own tiles, so the gradients are the same.  One launch has one num_warps
  and num_stages (launch.PairLauncher: the table's BWD_ONE entry, tuned by
  benchmarks/tune.py --kernels BWD_ONE, else the parts' configs combined);
  at d = 64 the combined config makes the dQ programs hold the dK/dV
  programs' registers (one block per SM instead of two).
(A fused form, _bwd_dkdv also adding dQ's share of each tile into a float32
buffer by atomics, measured 0.71-0.84x of this on the H200 in session 7 and
was removed in session 51: docs/performance.md.)
Head dims with a quarter of the padded width unused (kernels/fwd.py split_qk,
here from d_pad = 256 up, use_split_qk) hold Q, K, dQ and dK as two column
chunks of d_pad/2 and d_pad/4, and sum Q K^T in the forward's chunk order.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import triton
import triton.language as tl

from ..reference import sinks_grad_torch
from . import fastlaunch
from .combine import cast_rtne
from .fwd import check_lse_lo, split_qk
from .launch import (COMPILE_OPTIONS, INTERPRET, Launcher, PairLauncher, autotune_enabled, cdiv, dot_precision,
                     env_switch_or, head_dim_pad, seq_bucket, variant_tag)
from .score import NO_MODS, dropout_keep, score_tile
from .tiles import (aligned_start, head_row_tile, kv_tile_range, load_qk_operand, load_tile, mma, q_tile_range,
                    qk_columns, seq_bounds, store_tile, tile_ptrs)

# Q K^T, dK and dQ in the forward's two power-of-two column chunks where
# fwd.split_qk allows it and the padded width is at least SPLIT_QK_MIN_PAD
# (False: one chunk of HEAD_DIM_PAD columns).  Read at each
# attention_backward call (a backward plan's replay checks it: ops._bwd_world).
# H200 (session 10, gpu_split_qk.sh): the split backward was 1.10x faster at
# d = 96 (d_pad 128), 1.12-1.27x at d = 160 and 192/128; d_pad 64 (d = 40)
# is not measured and stays unsplit.
SPLIT_QK = True
SPLIT_QK_MIN_PAD = 128


def use_split_qk(d: int, d_pad: int) -> bool:
    """Whether the dK/dV and dQ kernels take Q, K, dQ, dK as two column chunks."""
    return SPLIT_QK and d_pad >= SPLIT_QK_MIN_PAD and split_qk(d, d_pad)


@triton.jit(do_not_specialize=["N_Q"])
def _bwd_preprocess(
    # pointers
    O, DO, DLSE, DELTA, CU_SEQLENS_Q,
    # strides
    stride_oz, stride_oh, stride_om, stride_ok,
    stride_doz, stride_doh, stride_dom, stride_dok,
    stride_lz, stride_lh,
    # shapes
    H_Q, N_Q,
    # meta-parameters
    HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr, EVEN_DV: tl.constexpr,
    IS_VARLEN: tl.constexpr, HAS_DLSE: tl.constexpr, BLOCK_M: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    off_z = pid_bh // H_Q
    off_h = (pid_bh % H_Q).to(tl.int64)
    q_start, n_q, _, _ = seq_bounds(off_z, CU_SEQLENS_Q, CU_SEQLENS_Q, N_Q, N_Q, IS_VARLEN)
    start_m = pid_m * BLOCK_M
    if start_m >= n_q:
        return
    off_z = off_z.to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_dv = tl.arange(0, HEAD_DIM_V_PAD)
    O += off_z * stride_oz + off_h * stride_oh + q_start * stride_om
    DO += off_z * stride_doz + off_h * stride_doh + q_start * stride_dom
    o = load_tile(tile_ptrs(O, start_m.to(tl.int64), stride_om, stride_ok, BLOCK_M, offs_dv),
                  offs_m, n_q, offs_dv, HEAD_DIM_V, True, EVEN_DV)
    do = load_tile(tile_ptrs(DO, start_m.to(tl.int64), stride_dom, stride_dok, BLOCK_M, offs_dv),
                   offs_m, n_q, offs_dv, HEAD_DIM_V, True, EVEN_DV)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    row_off = off_z * stride_lz + off_h * stride_lh + q_start + offs_m
    if HAS_DLSE:
        delta -= tl.load(DLSE + row_off, mask=offs_m < n_q, other=0.0) * 1.4426950408889634
    tl.store(DELTA + row_off, delta, mask=offs_m < n_q)


@triton.jit
def _load_row_stats(LSE, DELTA, rows, n_q, CHECK_ROWS: tl.constexpr):
    """Base-2 LSE and delta of a set of query rows.

    Rows that saw no key have lse2 = -inf; they (and rows past n_q) get +inf
    so that exp2(s - lse2) = 0 for every key, with no NaN."""
    if CHECK_ROWS:
        lse2 = tl.load(LSE + rows, mask=rows < n_q, other=float("inf"))
        delta = tl.load(DELTA + rows, mask=rows < n_q, other=0.0)
    else:
        lse2 = tl.load(LSE + rows)
        delta = tl.load(DELTA + rows)
    lse2 = tl.where(lse2 == float("-inf"), float("inf"), lse2)
    return lse2, delta


@triton.jit
def _load_lse_lo(LSE, rows, n_q, CHECK_ROWS: tl.constexpr):
    """The compensated LSE's residual lo of a set of query rows (LSE_LO: dense
    calls with a float bias), n_q elements past their lse2 (the op layer's
    (B, Hq, 2, Nq) buffer); 0 past n_q.  P = exp2((s2 - lse2) - lo)."""
    if CHECK_ROWS:
        lse_lo = tl.load(LSE + n_q + rows, mask=rows < n_q, other=0.0)
    else:
        lse_lo = tl.load(LSE + n_q + rows)
    return lse_lo


@triton.jit
def _head_mods(ALIBI, BIAS, SEED, off_z, off_h, q_start, stride_az, stride_ah, stride_bz, stride_bh,
               H_Q, RNG_ROWS, N_K, philox_offset,
               IS_VARLEN: tl.constexpr, HAS_ALIBI: tl.constexpr, HAS_DROPOUT: tl.constexpr):
    """Per-(batch entry, query head) variant state: (alibi slope * log2(e),
    bias pointer, Philox seed, counter of (row 0, col 0)) as in the forward."""
    alibi2 = 0.0
    if HAS_ALIBI:
        alibi2 = tl.load(ALIBI + off_z * stride_az + off_h * stride_ah).to(tl.float32) * 1.4426950408889634
    seed = 0
    rng_base = philox_offset
    if HAS_DROPOUT:
        seed = tl.load(SEED)
        rng_bh = off_h if IS_VARLEN else off_z * H_Q + off_h
        rng_base = philox_offset + (rng_bh * RNG_ROWS + q_start) * N_K
    return alibi2, BIAS + off_z * stride_bz + off_h * stride_bh, seed, rng_base


@triton.jit
def _dkdv_q_loop(dk, dk_hi, dv, start_m, end_m, keys, queries, scores,
                 HEAD_DIM: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_M: tl.constexpr,
                 MASKED: tl.constexpr, CHECK_ROWS: tl.constexpr, MASK_LEFT: tl.constexpr,
                 MASK_RIGHT: tl.constexpr, MASK_CHUNK: tl.constexpr,
                 EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, SPLIT_QK: tl.constexpr,
                 HAS_SOFTCAP: tl.constexpr, FAST_TANH: tl.constexpr, HAS_ALIBI: tl.constexpr,
                 HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, HAS_DROPOUT: tl.constexpr,
                 DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr, LSE_LO: tl.constexpr = False):
    """Accumulate dK, dV of the owned keys over query tiles [start_m, end_m).

    Works on the transposed scores s^T (keys x queries) so that dV += P^T dO
    and dK += dS^T Q need no transposed accumulator.  Q, DO, LSE, DELTA point
    at query row 0 of this (batch entry, query head).  MASKED tiles apply
    the visibility mask; CHECK_ROWS tiles check rows against n_q (off when
    every tile is whole: the checks of Q, dO, LSE and delta cost the masked
    loop a third of its instructions and most of its spills at 64 x 128
    tiles).  SPLIT_QK: k, dk hold
    the head-dim columns offs_d (all within HEAD_DIM), k_hi, dk_hi the
    columns offs_d_hi (EVEN_D: all within HEAD_DIM); otherwise k, dk hold
    offs_d and k_hi, dk_hi, offs_d_hi are unused.

    The arguments that do not change from one call to the next come in
    tuples: keys (the owned key tile), queries (one query head's tensors and
    strides) and scores (score_tile's and the dropout's, as _dq_kv_loop
    takes them)."""
    k, k_hi, v, offs_n, offs_d, offs_d_hi, offs_dv = keys
    Q, DO, LSE, DELTA, stride_qm, stride_qk, stride_dom, stride_dok = queries
    (n_q, n_k, qk_scale, shift, window_left, window_right, chunk, softcap2, alibi2, BIAS, stride_bm, stride_bn,
     seed, rng_base, rng_cols, dropout_thresh, dropout_scale) = scores
    offs_m = tl.arange(0, BLOCK_M)
    q_ptrs = tile_ptrs(Q, start_m.to(tl.int64), stride_qm, stride_qk, BLOCK_M, offs_d)
    if SPLIT_QK:
        q_hi_ptrs = tile_ptrs(Q, start_m.to(tl.int64), stride_qm, stride_qk, BLOCK_M, offs_d_hi)
    do_ptrs = tile_ptrs(DO, start_m.to(tl.int64), stride_dom, stride_dok, BLOCK_M, offs_dv)
    for start in range(start_m, end_m, BLOCK_M):
        start = aligned_start(start, BLOCK_M)
        rows = start + offs_m
        if SPLIT_QK:
            q = load_tile(q_ptrs, rows, n_q, offs_d, HEAD_DIM, CHECK_ROWS, True)
            q_hi = load_tile(q_hi_ptrs, rows, n_q, offs_d_hi, HEAD_DIM, CHECK_ROWS, EVEN_D)
        else:
            q = load_tile(q_ptrs, rows, n_q, offs_d, HEAD_DIM, CHECK_ROWS, EVEN_D)
        lse2, delta = _load_row_stats(LSE, DELTA, rows, n_q, CHECK_ROWS)
        qk_t = mma(k, tl.trans(q), None, DOT_PRECISION, INTERPRET)
        if SPLIT_QK:  # the forward's two chunks, in its order (second into the first)
            qk_t = mma(k_hi, tl.trans(q_hi), qk_t, DOT_PRECISION, INTERPRET)
        # masked before exp2: masked scores may exceed the LSE
        s_t, t_t = score_tile(qk_t, rows[None, :], offs_n[:, None], n_q, n_k, shift, window_left,
                              window_right, chunk, qk_scale, softcap2, alibi2, BIAS, stride_bm, stride_bn,
                              MASKED, MASK_LEFT, MASK_RIGHT, MASK_CHUNK, HAS_SOFTCAP, FAST_TANH, HAS_ALIBI,
                              HAS_MASK, MASK_BOOL, q.dtype == tl.float32)
        if LSE_LO:  # the compensated LSE (_load_lse_lo)
            lse_lo = _load_lse_lo(LSE, rows, n_q, CHECK_ROWS)
            p_t = tl.math.exp2((s_t - lse2[None, :]) - lse_lo[None, :])
        else:
            p_t = tl.math.exp2(s_t - lse2[None, :])
        do = load_tile(do_ptrs, rows, n_q, offs_dv, HEAD_DIM_V, CHECK_ROWS, EVEN_DV)
        dp_t = mma(v, tl.trans(do), None, DOT_PRECISION, INTERPRET)
        if HAS_DROPOUT:
            # the owned key tile starts at min(offs_n), a multiple of BLOCK_N
            keep_t = dropout_keep(seed, rng_base, start, tl.min(offs_n, 0), rng_cols,
                                  dropout_thresh, BLOCK_M, offs_n.shape[0], True)
            dv = mma(tl.where(keep_t, p_t * dropout_scale, 0.0).to(do.dtype), do, dv,
                     DOT_PRECISION, INTERPRET)
            dp_t = tl.where(keep_t, dp_t * dropout_scale, 0.0)
        else:
            dv = mma(p_t.to(do.dtype), do, dv, DOT_PRECISION, INTERPRET)
        ds_t = p_t * (dp_t - delta[None, :])
        if HAS_SOFTCAP:
            ds_t = ds_t * (1.0 - t_t * t_t)
        ds_t = ds_t.to(q.dtype)
        dk = mma(ds_t, q, dk, DOT_PRECISION, INTERPRET)
        if SPLIT_QK:
            dk_hi = mma(ds_t, q_hi, dk_hi, DOT_PRECISION, INTERPRET)
        q_ptrs += BLOCK_M * stride_qm
        if SPLIT_QK:
            q_hi_ptrs += BLOCK_M * stride_qm
        do_ptrs += BLOCK_M * stride_dom
    return dk, dk_hi, dv


@triton.jit
def _dkdv_program(
    pid_n, pid_bh,
    # _bwd_dkdv's arguments of the same names in the groups that both programs
    # take: inputs (pointers), their strides, shapes and scalars.  The kernels
    # pass them as tuple literals: a tuple assigned to a name in a kernel turns
    # its constexpr elements (e.g. the unit strides the JIT specializes) into
    # runtime values, and the loads of the one-launch kernel lost their
    # vectorization when it did so.
    inputs, strides, shapes, scalars,
    # outputs
    DK, DV,
    stride_dkz, stride_dkh, stride_dkn, stride_dkk,
    stride_dvz, stride_dvh, stride_dvn, stride_dvk,
    H_KV, GROUP_SPLIT,
    # meta-parameters
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, EVEN_D: tl.constexpr, HEAD_DIM_V: tl.constexpr,
    HEAD_DIM_V_PAD: tl.constexpr, EVEN_DV: tl.constexpr, SPLIT_QK: tl.constexpr, IS_VARLEN: tl.constexpr,
    MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr, HAS_SOFTCAP: tl.constexpr, FAST_TANH: tl.constexpr,
    HAS_ALIBI: tl.constexpr, HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    HEADS_PER_PROGRAM: tl.constexpr, EVEN_M: tl.constexpr,
    DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    LSE_LO: tl.constexpr = False, MASK_CHUNK: tl.constexpr = False,
):
    # The work of one _bwd_dkdv program: key tile pid_n of (batch, KV head,
    # slice of its query-head group) pid_bh.
    # With GROUP_SPLIT > 1 each program sums dK/dV over GROUP_SIZE / GROUP_SPLIT
    # query heads and writes a partial (DK/DV then have H_KV * GROUP_SPLIT
    # heads, reduced by the launcher): more programs, and short per-head loops
    # are no longer nested in a loop over the whole group.  HEADS_PER_PROGRAM
    # (= GROUP_SIZE / GROUP_SPLIT) is a compile-time constant so that at 1 the
    # head loop folds away and the query-tile loops are outermost (pipelined).
    Q, K, V, DO, LSE, DELTA, CU_SEQLENS_Q, CU_SEQLENS_K, ALIBI, BIAS, SEED = inputs
    (stride_qz, stride_qh, stride_qm, stride_qk, stride_kz, stride_kh, stride_kn, stride_kk,
     stride_vz, stride_vh, stride_vn, stride_vk, stride_doz, stride_doh, stride_dom, stride_dok,
     stride_lz, stride_lh, stride_az, stride_ah, stride_bz, stride_bh, stride_bm, stride_bn) = strides
    N_Q, N_K, GROUP_SIZE, RNG_ROWS = shapes
    (sm_scale, causal_offset, shift_mul, window_left, window_right,
     softcap, dropout_scale, dropout_thresh, philox_offset, chunk) = scalars
    off_z = pid_bh // (H_KV * GROUP_SPLIT)
    off_out = pid_bh % (H_KV * GROUP_SPLIT)  # head of DK/DV this program writes
    off_hkv = off_out // GROUP_SPLIT
    g_lo = (off_out % GROUP_SPLIT) * HEADS_PER_PROGRAM
    q_start, n_q, k_start, n_k = seq_bounds(off_z, CU_SEQLENS_Q, CU_SEQLENS_K, N_Q, N_K, IS_VARLEN)
    start_n = pid_n * BLOCK_N
    if start_n >= n_k:
        return
    shift = n_k - n_q + causal_offset
    if IS_VARLEN:  # per-document diagonal, as in the forward
        shift += shift_mul * n_k
    off_z = off_z.to(tl.int64)
    off_hkv = off_hkv.to(tl.int64)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_dv = tl.arange(0, HEAD_DIM_V_PAD)

    K += off_z * stride_kz + off_hkv * stride_kh + k_start * stride_kn
    V += off_z * stride_vz + off_hkv * stride_vh + k_start * stride_vn
    # K and dK as columns [0, PAD/2) and [PAD/2, 3 PAD/4) when split, as the
    # forward's Q K^T (fwd.split_qk: the first chunk is whole).
    if SPLIT_QK:
        even_lo = True
        even_hi = HEAD_DIM == HEAD_DIM_PAD // 2 + HEAD_DIM_PAD // 4
    else:
        even_lo = EVEN_D
        even_hi = EVEN_D
    offs_d, offs_d_hi = qk_columns(HEAD_DIM_PAD, SPLIT_QK)
    k, k_hi = load_qk_operand(K, start_n.to(tl.int64), stride_kn, stride_kk, BLOCK_N, offs_n, n_k,
                              offs_d, offs_d_hi, HEAD_DIM, even_hi, SPLIT_QK)
    dk = tl.zeros([BLOCK_N, offs_d.shape[0]], dtype=tl.float32)
    if SPLIT_QK:
        dk_hi = tl.zeros([BLOCK_N, HEAD_DIM_PAD // 4], dtype=tl.float32)
    else:
        dk_hi = dk
    v = load_tile(tile_ptrs(V, start_n.to(tl.int64), stride_vn, stride_vk, BLOCK_N, offs_dv),
                  offs_n, n_k, offs_dv, HEAD_DIM_V, True, EVEN_DV)
    dv = tl.zeros([BLOCK_N, HEAD_DIM_V_PAD], dtype=tl.float32)
    if HAS_SOFTCAP:
        qk_scale = sm_scale / softcap
    else:
        qk_scale = sm_scale * 1.4426950408889634
    softcap2 = softcap * 1.4426950408889634

    lo, full_lo, full_hi, hi = q_tile_range(start_n, n_q, n_k, shift, window_left, window_right, chunk,
                                            BLOCK_M, BLOCK_N, MASK_LEFT, MASK_RIGHT, MASK_CHUNK)
    # EVEN_M: N_Q is a multiple of 128, so of BLOCK_M where BLOCK_M divides 128:
    # no query tile has rows past n_q and the masked loops skip the row checks.
    check_rows: tl.constexpr = not (EVEN_M and 128 % BLOCK_M == 0)
    keys = (k, k_hi, v, offs_n, offs_d, offs_d_hi, offs_dv)
    for g in range(0, HEADS_PER_PROGRAM):
        off_h = off_hkv * GROUP_SIZE + g_lo + g  # the query heads that read this KV head
        Qh = Q + off_z * stride_qz + off_h * stride_qh + q_start * stride_qm
        DOh = DO + off_z * stride_doz + off_h * stride_doh + q_start * stride_dom
        row_base = off_z * stride_lz + off_h * stride_lh + q_start
        alibi2, BIASh, seed, rng_base = _head_mods(ALIBI, BIAS, SEED, off_z, off_h, q_start,
                                                   stride_az, stride_ah, stride_bz, stride_bh,
                                                   H_KV * GROUP_SIZE, RNG_ROWS, N_K, philox_offset,
                                                   IS_VARLEN, HAS_ALIBI, HAS_DROPOUT)
        queries = (Qh, DOh, LSE + row_base, DELTA + row_base, stride_qm, stride_qk, stride_dom, stride_dok)
        scores = (n_q, n_k, qk_scale, shift, window_left, window_right, chunk, softcap2, alibi2, BIASh,
                  stride_bm, stride_bn, seed, rng_base, N_K, dropout_thresh, dropout_scale)
        # Masked head (diagonal / right window edge, the keys' chunk start),
        # unmasked middle, masked tail (left window edge, chunk end, ragged end of Q).
        dk, dk_hi, dv = _dkdv_q_loop(dk, dk_hi, dv, lo, full_lo, keys, queries, scores,
                                     HEAD_DIM, HEAD_DIM_V, BLOCK_M, True, check_rows, MASK_LEFT, MASK_RIGHT,
                                     MASK_CHUNK, even_hi, EVEN_DV, SPLIT_QK, HAS_SOFTCAP, FAST_TANH, HAS_ALIBI,
                                     HAS_MASK, MASK_BOOL, HAS_DROPOUT, DOT_PRECISION, INTERPRET, LSE_LO)
        dk, dk_hi, dv = _dkdv_q_loop(dk, dk_hi, dv, full_lo, full_hi, keys, queries, scores,
                                     HEAD_DIM, HEAD_DIM_V, BLOCK_M, False, False, MASK_LEFT, MASK_RIGHT,
                                     MASK_CHUNK, even_hi, EVEN_DV, SPLIT_QK, HAS_SOFTCAP, FAST_TANH, HAS_ALIBI,
                                     HAS_MASK, MASK_BOOL, HAS_DROPOUT, DOT_PRECISION, INTERPRET, LSE_LO)
        dk, dk_hi, dv = _dkdv_q_loop(dk, dk_hi, dv, full_hi, hi, keys, queries, scores,
                                     HEAD_DIM, HEAD_DIM_V, BLOCK_M, True, check_rows, MASK_LEFT, MASK_RIGHT,
                                     MASK_CHUNK, even_hi, EVEN_DV, SPLIT_QK, HAS_SOFTCAP, FAST_TANH, HAS_ALIBI,
                                     HAS_MASK, MASK_BOOL, HAS_DROPOUT, DOT_PRECISION, INTERPRET, LSE_LO)

    off_out = off_out.to(tl.int64)
    DK += off_z * stride_dkz + off_out * stride_dkh + k_start * stride_dkn
    DV += off_z * stride_dvz + off_out * stride_dvh + k_start * stride_dvn
    store_tile(tile_ptrs(DK, start_n.to(tl.int64), stride_dkn, stride_dkk, BLOCK_N, offs_d),
               (dk * sm_scale).to(DK.dtype.element_ty), offs_n, n_k, offs_d, HEAD_DIM, even_lo)
    if SPLIT_QK:
        store_tile(tile_ptrs(DK, start_n.to(tl.int64), stride_dkn, stride_dkk, BLOCK_N, offs_d_hi),
                   (dk_hi * sm_scale).to(DK.dtype.element_ty), offs_n, n_k, offs_d_hi, HEAD_DIM, even_hi)
    store_tile(tile_ptrs(DV, start_n.to(tl.int64), stride_dvn, stride_dvk, BLOCK_N, offs_dv),
               dv.to(DV.dtype.element_ty), offs_n, n_k, offs_dv, HEAD_DIM_V, EVEN_DV)


@triton.jit(do_not_specialize=["N_Q", "N_K", "causal_offset", "shift_mul", "window_left", "window_right",
                               "RNG_ROWS", "philox_offset", "dropout_thresh", "chunk"])
def _bwd_dkdv(
    # pointers (DQ and its strides are unused: the launches pass dK's buffer
    # and strides, as the removed fused form's placeholder, which keeps the
    # kernel's parameter list and so its machine code as before)
    Q, K, V, DO, LSE, DELTA, DK, DV, DQ, CU_SEQLENS_Q, CU_SEQLENS_K, ALIBI, BIAS, SEED,
    # strides
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_doz, stride_doh, stride_dom, stride_dok,
    stride_dkz, stride_dkh, stride_dkn, stride_dkk,
    stride_dvz, stride_dvh, stride_dvn, stride_dvk,
    stride_dqz, stride_dqh, stride_dqm, stride_dqk,
    stride_lz, stride_lh,
    stride_az, stride_ah,
    stride_bz, stride_bh, stride_bm, stride_bn,
    # shapes
    H_KV, N_Q, N_K, GROUP_SIZE, GROUP_SPLIT, RNG_ROWS,
    # scalars
    sm_scale, causal_offset, shift_mul, window_left, window_right, SEQ_BUCKET,
    softcap, dropout_scale, dropout_thresh, philox_offset, chunk,
    # meta-parameters
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, EVEN_D: tl.constexpr,
    HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr, EVEN_DV: tl.constexpr,
    SPLIT_QK: tl.constexpr, IS_VARLEN: tl.constexpr, MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, FAST_TANH: tl.constexpr, HAS_ALIBI: tl.constexpr,
    HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    HEADS_PER_PROGRAM: tl.constexpr, EVEN_M: tl.constexpr,
    DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LSE_LO: tl.constexpr = False,
    MASK_CHUNK: tl.constexpr = False,
):
    # One program per (key tile, batch, KV head, slice of its query-head group).
    _dkdv_program(tl.program_id(0), tl.program_id(1),
                  (Q, K, V, DO, LSE, DELTA, CU_SEQLENS_Q, CU_SEQLENS_K, ALIBI, BIAS, SEED),
                  (stride_qz, stride_qh, stride_qm, stride_qk, stride_kz, stride_kh, stride_kn, stride_kk,
                   stride_vz, stride_vh, stride_vn, stride_vk, stride_doz, stride_doh, stride_dom, stride_dok,
                   stride_lz, stride_lh, stride_az, stride_ah, stride_bz, stride_bh, stride_bm, stride_bn),
                  (N_Q, N_K, GROUP_SIZE, RNG_ROWS),
                  (sm_scale, causal_offset, shift_mul, window_left, window_right,
                   softcap, dropout_scale, dropout_thresh, philox_offset, chunk),
                  DK, DV, stride_dkz, stride_dkh, stride_dkn, stride_dkk, stride_dvz, stride_dvh, stride_dvn,
                  stride_dvk, H_KV, GROUP_SPLIT,
                  HEAD_DIM, HEAD_DIM_PAD, EVEN_D, HEAD_DIM_V, HEAD_DIM_V_PAD, EVEN_DV, SPLIT_QK, IS_VARLEN,
                  MASK_LEFT, MASK_RIGHT, HAS_SOFTCAP, FAST_TANH, HAS_ALIBI, HAS_MASK, MASK_BOOL, HAS_DROPOUT,
                  HEADS_PER_PROGRAM, EVEN_M, DOT_PRECISION, INTERPRET, BLOCK_M, BLOCK_N, LSE_LO, MASK_CHUNK)


@triton.jit
def _dq_kv_loop(dq, dq_hi, start_n, end_n, rows, kv, scores,
                HEAD_DIM: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_N: tl.constexpr,
                MASKED: tl.constexpr, MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr, MASK_CHUNK: tl.constexpr,
                EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, SPLIT_QK: tl.constexpr,
                HAS_SOFTCAP: tl.constexpr, FAST_TANH: tl.constexpr, HAS_ALIBI: tl.constexpr,
                HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, HAS_DROPOUT: tl.constexpr,
                HAS_DBIAS: tl.constexpr,
                DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr, LSE_LO: tl.constexpr = False):
    """Accumulate dQ of the owned rows over K/V tiles [start_n, end_n); the
    tile split is the forward's (kv_tile_range).  With HAS_DBIAS, dS (the
    gradient of the additive bias) is stored to DBIAS (row stride stride_dbm,
    columns contiguous).  SPLIT_QK: q, dq hold the head-dim columns offs_d
    (all within HEAD_DIM), q_hi, dq_hi the columns offs_d_hi (EVEN_D: all
    within HEAD_DIM); otherwise q, dq hold offs_d and q_hi, dq_hi, offs_d_hi
    are unused.  As in _dkdv_q_loop, the arguments that do not change from one
    call to the next come in tuples: rows (the owned query rows), kv (K and V)
    and scores.  LSE_LO: rows also holds the compensated LSE's residual
    (_load_lse_lo), P = exp2((s2 - lse2) - lo)."""
    if LSE_LO:
        q, q_hi, do, lse2, delta, offs_m, offs_d, offs_d_hi, offs_dv, DBIAS, stride_dbm, lse_lo = rows
    else:
        q, q_hi, do, lse2, delta, offs_m, offs_d, offs_d_hi, offs_dv, DBIAS, stride_dbm = rows
    K, V, stride_kn, stride_kk, stride_vn, stride_vk = kv
    (n_q, n_k, qk_scale, shift, window_left, window_right, chunk, softcap2, alibi2, BIAS, stride_bm, stride_bn,
     seed, rng_base, rng_cols, dropout_thresh, dropout_scale) = scores
    offs_n = tl.arange(0, BLOCK_N)
    k_ptrs = tile_ptrs(K, start_n.to(tl.int64), stride_kn, stride_kk, BLOCK_N, offs_d)
    if SPLIT_QK:
        k_hi_ptrs = tile_ptrs(K, start_n.to(tl.int64), stride_kn, stride_kk, BLOCK_N, offs_d_hi)
    v_ptrs = tile_ptrs(V, start_n.to(tl.int64), stride_vn, stride_vk, BLOCK_N, offs_dv)
    for start in range(start_n, end_n, BLOCK_N):
        start = aligned_start(start, BLOCK_N)
        cols = start + offs_n
        if SPLIT_QK:
            k = load_tile(k_ptrs, cols, n_k, offs_d, HEAD_DIM, MASKED, True)
            k_hi = load_tile(k_hi_ptrs, cols, n_k, offs_d_hi, HEAD_DIM, MASKED, EVEN_D)
        else:
            k = load_tile(k_ptrs, cols, n_k, offs_d, HEAD_DIM, MASKED, EVEN_D)
        v = load_tile(v_ptrs, cols, n_k, offs_dv, HEAD_DIM_V, MASKED, EVEN_DV)
        qk = mma(q, tl.trans(k), None, DOT_PRECISION, INTERPRET)
        if SPLIT_QK:  # the forward's two chunks, in its order (second into the first)
            qk = mma(q_hi, tl.trans(k_hi), qk, DOT_PRECISION, INTERPRET)
        # masked before exp2: masked scores may exceed the LSE
        s, t = score_tile(qk, offs_m[:, None], cols[None, :], n_q, n_k, shift, window_left,
                          window_right, chunk, qk_scale, softcap2, alibi2, BIAS, stride_bm, stride_bn,
                          MASKED, MASK_LEFT, MASK_RIGHT, MASK_CHUNK, HAS_SOFTCAP, FAST_TANH, HAS_ALIBI,
                          HAS_MASK, MASK_BOOL, q.dtype == tl.float32)
        if LSE_LO:
            p = tl.math.exp2((s - lse2[:, None]) - lse_lo[:, None])
        else:
            p = tl.math.exp2(s - lse2[:, None])
        dp = mma(do, tl.trans(v), None, DOT_PRECISION, INTERPRET)
        if HAS_DROPOUT:
            keep = dropout_keep(seed, rng_base, tl.min(offs_m, 0), start, rng_cols, dropout_thresh,
                                offs_m.shape[0], BLOCK_N, False)
            dp = tl.where(keep, dp * dropout_scale, 0.0)
        ds = p * (dp - delta[:, None])
        if HAS_DBIAS:
            tl.store(DBIAS + offs_m.to(tl.int64)[:, None] * stride_dbm + cols[None, :], ds,
                     mask=(offs_m[:, None] < n_q) & (cols[None, :] < n_k))
        if HAS_SOFTCAP:
            ds = ds * (1.0 - t * t)
        ds = ds.to(k.dtype)
        dq = mma(ds, k, dq, DOT_PRECISION, INTERPRET)
        k_ptrs += BLOCK_N * stride_kn
        if SPLIT_QK:
            dq_hi = mma(ds, k_hi, dq_hi, DOT_PRECISION, INTERPRET)
            k_hi_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    return dq, dq_hi


@triton.jit
def _dq_program(
    pid_m, pid_bh,
    # the groups of _dkdv_program
    inputs, strides, shapes, scalars,
    # outputs
    DQ, DBIAS,
    stride_dqz, stride_dqh, stride_dqm, stride_dqk,
    stride_dbz, stride_dbh, stride_dbm,
    H_Q,
    # meta-parameters
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, EVEN_D: tl.constexpr, HEAD_DIM_V: tl.constexpr,
    HEAD_DIM_V_PAD: tl.constexpr, EVEN_DV: tl.constexpr, SPLIT_QK: tl.constexpr, IS_VARLEN: tl.constexpr,
    MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr, HAS_SOFTCAP: tl.constexpr, FAST_TANH: tl.constexpr,
    HAS_ALIBI: tl.constexpr, HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    HAS_DBIAS: tl.constexpr, DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LSE_LO: tl.constexpr = False,
    MASK_CHUNK: tl.constexpr = False,
):
    # The work of one _bwd_dq program: query tile pid_m of (batch, query head) pid_bh.
    Q, K, V, DO, LSE, DELTA, CU_SEQLENS_Q, CU_SEQLENS_K, ALIBI, BIAS, SEED = inputs
    (stride_qz, stride_qh, stride_qm, stride_qk, stride_kz, stride_kh, stride_kn, stride_kk,
     stride_vz, stride_vh, stride_vn, stride_vk, stride_doz, stride_doh, stride_dom, stride_dok,
     stride_lz, stride_lh, stride_az, stride_ah, stride_bz, stride_bh, stride_bm, stride_bn) = strides
    N_Q, N_K, GROUP_SIZE, RNG_ROWS = shapes
    (sm_scale, causal_offset, shift_mul, window_left, window_right,
     softcap, dropout_scale, dropout_thresh, philox_offset, chunk) = scalars
    off_z = pid_bh // H_Q
    off_h = pid_bh % H_Q
    off_hkv = off_h // GROUP_SIZE
    q_start, n_q, k_start, n_k = seq_bounds(off_z, CU_SEQLENS_Q, CU_SEQLENS_K, N_Q, N_K, IS_VARLEN)
    start_m = pid_m * BLOCK_M
    if start_m >= n_q:
        return
    shift = n_k - n_q + causal_offset
    if IS_VARLEN:  # per-document diagonal, as in the forward
        shift += shift_mul * n_k
    off_z = off_z.to(tl.int64)
    off_h = off_h.to(tl.int64)
    off_hkv = off_hkv.to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_dv = tl.arange(0, HEAD_DIM_V_PAD)

    Q += off_z * stride_qz + off_h * stride_qh + q_start * stride_qm
    DO += off_z * stride_doz + off_h * stride_doh + q_start * stride_dom
    DQ += off_z * stride_dqz + off_h * stride_dqh + q_start * stride_dqm
    K += off_z * stride_kz + off_hkv * stride_kh + k_start * stride_kn
    V += off_z * stride_vz + off_hkv * stride_vh + k_start * stride_vn
    DBIAS += off_z * stride_dbz + off_h * stride_dbh
    row_base = off_z * stride_lz + off_h * stride_lh + q_start
    # Q and dQ as columns [0, PAD/2) and [PAD/2, 3 PAD/4) when split, as the
    # forward's Q K^T (fwd.split_qk: the first chunk is whole).
    if SPLIT_QK:
        even_lo = True
        even_hi = HEAD_DIM == HEAD_DIM_PAD // 2 + HEAD_DIM_PAD // 4
    else:
        even_lo = EVEN_D
        even_hi = EVEN_D
    offs_d, offs_d_hi = qk_columns(HEAD_DIM_PAD, SPLIT_QK)
    q, q_hi = load_qk_operand(Q, start_m.to(tl.int64), stride_qm, stride_qk, BLOCK_M, offs_m, n_q,
                              offs_d, offs_d_hi, HEAD_DIM, even_hi, SPLIT_QK)
    dq = tl.zeros([BLOCK_M, offs_d.shape[0]], dtype=tl.float32)
    if SPLIT_QK:
        dq_hi = tl.zeros([BLOCK_M, HEAD_DIM_PAD // 4], dtype=tl.float32)
    else:
        dq_hi = dq
    do = load_tile(tile_ptrs(DO, start_m.to(tl.int64), stride_dom, stride_dok, BLOCK_M, offs_dv),
                   offs_m, n_q, offs_dv, HEAD_DIM_V, True, EVEN_DV)
    lse2, delta = _load_row_stats(LSE + row_base, DELTA + row_base, offs_m, n_q, True)
    if HAS_SOFTCAP:
        qk_scale = sm_scale / softcap
    else:
        qk_scale = sm_scale * 1.4426950408889634
    softcap2 = softcap * 1.4426950408889634
    alibi2, BIAS, seed, rng_base = _head_mods(ALIBI, BIAS, SEED, off_z, off_h, q_start,
                                              stride_az, stride_ah, stride_bz, stride_bh,
                                              H_Q, RNG_ROWS, N_K, philox_offset,
                                              IS_VARLEN, HAS_ALIBI, HAS_DROPOUT)

    lo, full_lo, full_hi, hi = kv_tile_range(start_m, n_q, n_k, shift, window_left, window_right, chunk,
                                             BLOCK_M, BLOCK_N, MASK_LEFT, MASK_RIGHT, MASK_CHUNK)
    if LSE_LO:
        rows = (q, q_hi, do, lse2, delta, offs_m, offs_d, offs_d_hi, offs_dv, DBIAS, stride_dbm,
                _load_lse_lo(LSE + row_base, offs_m, n_q, True))
    else:
        rows = (q, q_hi, do, lse2, delta, offs_m, offs_d, offs_d_hi, offs_dv, DBIAS, stride_dbm)
    kv = (K, V, stride_kn, stride_kk, stride_vn, stride_vk)
    scores = (n_q, n_k, qk_scale, shift, window_left, window_right, chunk, softcap2, alibi2, BIAS, stride_bm,
              stride_bn, seed, rng_base, N_K, dropout_thresh, dropout_scale)
    if MASK_LEFT or MASK_CHUNK:  # the masked head: left window edge, chunk start
        dq, dq_hi = _dq_kv_loop(dq, dq_hi, lo, full_lo, rows, kv, scores,
                                HEAD_DIM, HEAD_DIM_V, BLOCK_N, True, MASK_LEFT, MASK_RIGHT, MASK_CHUNK,
                                even_hi, EVEN_DV, SPLIT_QK, HAS_SOFTCAP, FAST_TANH, HAS_ALIBI,
                                HAS_MASK, MASK_BOOL, HAS_DROPOUT, HAS_DBIAS, DOT_PRECISION, INTERPRET, LSE_LO)
    dq, dq_hi = _dq_kv_loop(dq, dq_hi, full_lo, full_hi, rows, kv, scores,
                            HEAD_DIM, HEAD_DIM_V, BLOCK_N, False, MASK_LEFT, MASK_RIGHT, MASK_CHUNK,
                            even_hi, EVEN_DV, SPLIT_QK, HAS_SOFTCAP, FAST_TANH, HAS_ALIBI,
                            HAS_MASK, MASK_BOOL, HAS_DROPOUT, HAS_DBIAS, DOT_PRECISION, INTERPRET, LSE_LO)
    dq, dq_hi = _dq_kv_loop(dq, dq_hi, full_hi, hi, rows, kv, scores,
                            HEAD_DIM, HEAD_DIM_V, BLOCK_N, True, MASK_LEFT, MASK_RIGHT, MASK_CHUNK,
                            even_hi, EVEN_DV, SPLIT_QK, HAS_SOFTCAP, FAST_TANH, HAS_ALIBI,
                            HAS_MASK, MASK_BOOL, HAS_DROPOUT, HAS_DBIAS, DOT_PRECISION, INTERPRET, LSE_LO)

    store_tile(tile_ptrs(DQ, start_m.to(tl.int64), stride_dqm, stride_dqk, BLOCK_M, offs_d),
               (dq * sm_scale).to(DQ.dtype.element_ty), offs_m, n_q, offs_d, HEAD_DIM, even_lo)
    if SPLIT_QK:
        store_tile(tile_ptrs(DQ, start_m.to(tl.int64), stride_dqm, stride_dqk, BLOCK_M, offs_d_hi),
                   (dq_hi * sm_scale).to(DQ.dtype.element_ty), offs_m, n_q, offs_d_hi, HEAD_DIM, even_hi)


@triton.jit(do_not_specialize=["N_Q", "N_K", "causal_offset", "shift_mul", "window_left", "window_right",
                               "RNG_ROWS", "philox_offset", "dropout_thresh", "chunk"])
def _bwd_dq(
    # pointers
    Q, K, V, DO, LSE, DELTA, DQ, CU_SEQLENS_Q, CU_SEQLENS_K, ALIBI, BIAS, SEED, DBIAS,
    # strides
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_doz, stride_doh, stride_dom, stride_dok,
    stride_dqz, stride_dqh, stride_dqm, stride_dqk,
    stride_lz, stride_lh,
    stride_az, stride_ah,
    stride_bz, stride_bh, stride_bm, stride_bn,
    stride_dbz, stride_dbh, stride_dbm,
    # shapes
    H_Q, N_Q, N_K, GROUP_SIZE, RNG_ROWS,
    # scalars
    sm_scale, causal_offset, shift_mul, window_left, window_right, SEQ_BUCKET,
    softcap, dropout_scale, dropout_thresh, philox_offset, chunk,
    # meta-parameters
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, EVEN_D: tl.constexpr,
    HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr, EVEN_DV: tl.constexpr,
    SPLIT_QK: tl.constexpr, IS_VARLEN: tl.constexpr, MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, FAST_TANH: tl.constexpr, HAS_ALIBI: tl.constexpr,
    HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    HAS_DBIAS: tl.constexpr,
    DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LSE_LO: tl.constexpr = False,
    MASK_CHUNK: tl.constexpr = False,
):
    _dq_program(tl.program_id(0), tl.program_id(1),
                (Q, K, V, DO, LSE, DELTA, CU_SEQLENS_Q, CU_SEQLENS_K, ALIBI, BIAS, SEED),
                (stride_qz, stride_qh, stride_qm, stride_qk, stride_kz, stride_kh, stride_kn, stride_kk,
                 stride_vz, stride_vh, stride_vn, stride_vk, stride_doz, stride_doh, stride_dom, stride_dok,
                 stride_lz, stride_lh, stride_az, stride_ah, stride_bz, stride_bh, stride_bm, stride_bn),
                (N_Q, N_K, GROUP_SIZE, RNG_ROWS),
                (sm_scale, causal_offset, shift_mul, window_left, window_right,
                 softcap, dropout_scale, dropout_thresh, philox_offset, chunk),
                DQ, DBIAS, stride_dqz, stride_dqh, stride_dqm, stride_dqk, stride_dbz, stride_dbh, stride_dbm, H_Q,
                HEAD_DIM, HEAD_DIM_PAD, EVEN_D, HEAD_DIM_V, HEAD_DIM_V_PAD, EVEN_DV, SPLIT_QK, IS_VARLEN,
                MASK_LEFT, MASK_RIGHT, HAS_SOFTCAP, FAST_TANH, HAS_ALIBI, HAS_MASK, MASK_BOOL, HAS_DROPOUT,
                HAS_DBIAS, DOT_PRECISION, INTERPRET, BLOCK_M, BLOCK_N, LSE_LO, MASK_CHUNK)


@triton.jit(do_not_specialize=["N_BATCH", "N_Q", "N_K", "causal_offset", "shift_mul", "window_left",
                               "window_right", "RNG_ROWS", "philox_offset", "dropout_thresh",
                               "chunk"])
def _bwd_dkdv_dq(
    # pointers
    Q, K, V, DO, LSE, DELTA, DK, DV, DQ, CU_SEQLENS_Q, CU_SEQLENS_K, ALIBI, BIAS, SEED,
    # strides
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_doz, stride_doh, stride_dom, stride_dok,
    stride_dkz, stride_dkh, stride_dkn, stride_dkk,
    stride_dvz, stride_dvh, stride_dvn, stride_dvk,
    stride_dqz, stride_dqh, stride_dqm, stride_dqk,
    stride_lz, stride_lh,
    stride_az, stride_ah,
    stride_bz, stride_bh, stride_bm, stride_bn,
    # shapes
    N_BATCH, H_KV, N_Q, N_K, GROUP_SIZE, GROUP_SPLIT, RNG_ROWS,
    # scalars
    sm_scale, causal_offset, shift_mul, window_left, window_right, SEQ_BUCKET,
    softcap, dropout_scale, dropout_thresh, philox_offset, chunk,
    # meta-parameters
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, EVEN_D: tl.constexpr,
    HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr, EVEN_DV: tl.constexpr,
    SPLIT_QK: tl.constexpr, IS_VARLEN: tl.constexpr, MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, FAST_TANH: tl.constexpr, HAS_ALIBI: tl.constexpr,
    HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    HEADS_PER_PROGRAM: tl.constexpr, EVEN_M: tl.constexpr,
    DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr, BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr,
    LSE_LO: tl.constexpr = False, MASK_CHUNK: tl.constexpr = False,
):
    # _bwd_dkdv's and _bwd_dq's programs in one launch (ONE_LAUNCH), on a 1-D
    # grid (dense batches only: N_Q, N_K are every sequence's lengths).
    # BLOCK_M1 / BLOCK_N1: the dK/dV tiles, BLOCK_M2 / BLOCK_N2: the dQ tiles.
    # By (batch, KV head): each KV head's dK/dV programs (key tile fastest:
    # with a causal mask key tile 0, the longest, leads) and then the dQ
    # programs of its query heads, so the programs that read the same Q, K,
    # V and dO run at about the same time and share them in L2.  (Every
    # dK/dV program first, "by kind", read 0.96-0.99x of this on the H200 in
    # session 20 and was removed: docs/performance.md.)
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N_K, BLOCK_N1)
    tiles_m = tl.cdiv(N_Q, BLOCK_M2)
    per_kv = tiles_n * GROUP_SPLIT  # dK/dV programs of one (batch, KV head)
    unit = pid // (per_kv + tiles_m * GROUP_SIZE)  # batch * H_KV + KV head
    pid -= unit * (per_kv + tiles_m * GROUP_SIZE)
    is_dkdv = pid < per_kv
    if is_dkdv:
        pid_n = pid % tiles_n
        pid_bh = unit * GROUP_SPLIT + pid // tiles_n
    else:
        pid -= per_kv
        pid_n = pid % tiles_m  # the Q tile
        pid_bh = unit * GROUP_SIZE + pid // tiles_m  # batch * H_Q + query head
    if is_dkdv:
        _dkdv_program(pid_n, pid_bh,
                      (Q, K, V, DO, LSE, DELTA, CU_SEQLENS_Q, CU_SEQLENS_K, ALIBI, BIAS, SEED),
                      (stride_qz, stride_qh, stride_qm, stride_qk, stride_kz, stride_kh, stride_kn, stride_kk,
                       stride_vz, stride_vh, stride_vn, stride_vk, stride_doz, stride_doh, stride_dom, stride_dok,
                       stride_lz, stride_lh, stride_az, stride_ah, stride_bz, stride_bh, stride_bm, stride_bn),
                      (N_Q, N_K, GROUP_SIZE, RNG_ROWS),
                      (sm_scale, causal_offset, shift_mul, window_left, window_right,
                       softcap, dropout_scale, dropout_thresh, philox_offset, chunk),
                      DK, DV, stride_dkz, stride_dkh, stride_dkn, stride_dkk, stride_dvz, stride_dvh,
                      stride_dvn, stride_dvk, H_KV, GROUP_SPLIT,
                      HEAD_DIM, HEAD_DIM_PAD, EVEN_D, HEAD_DIM_V, HEAD_DIM_V_PAD, EVEN_DV, SPLIT_QK, IS_VARLEN,
                      MASK_LEFT, MASK_RIGHT, HAS_SOFTCAP, FAST_TANH, HAS_ALIBI, HAS_MASK, MASK_BOOL, HAS_DROPOUT,
                      HEADS_PER_PROGRAM, EVEN_M, DOT_PRECISION, INTERPRET, BLOCK_M1, BLOCK_N1, LSE_LO, MASK_CHUNK)
    else:
        # no bias gradient (HAS_DBIAS False): LSE stands in for DBIAS
        _dq_program(pid_n, pid_bh,
                    (Q, K, V, DO, LSE, DELTA, CU_SEQLENS_Q, CU_SEQLENS_K, ALIBI, BIAS, SEED),
                    (stride_qz, stride_qh, stride_qm, stride_qk, stride_kz, stride_kh, stride_kn, stride_kk,
                     stride_vz, stride_vh, stride_vn, stride_vk, stride_doz, stride_doh, stride_dom, stride_dok,
                     stride_lz, stride_lh, stride_az, stride_ah, stride_bz, stride_bh, stride_bm, stride_bn),
                    (N_Q, N_K, GROUP_SIZE, RNG_ROWS),
                    (sm_scale, causal_offset, shift_mul, window_left, window_right,
                     softcap, dropout_scale, dropout_thresh, philox_offset, chunk),
                    DQ, LSE, stride_dqz, stride_dqh, stride_dqm, stride_dqk, 0, 0, 0, H_KV * GROUP_SIZE,
                    HEAD_DIM, HEAD_DIM_PAD, EVEN_D, HEAD_DIM_V, HEAD_DIM_V_PAD, EVEN_DV, SPLIT_QK, IS_VARLEN,
                    MASK_LEFT, MASK_RIGHT, HAS_SOFTCAP, FAST_TANH, HAS_ALIBI, HAS_MASK, MASK_BOOL, HAS_DROPOUT,
                    False, DOT_PRECISION, INTERPRET, BLOCK_M2, BLOCK_N2, LSE_LO, MASK_CHUNK)


@triton.jit(do_not_specialize=["N"])
def _bwd_group_sum(
    # pointers
    P, OUT,
    # strides
    stride_pz, stride_ph, stride_pn,
    stride_oz, stride_oh, stride_on, stride_ok,
    # shapes
    H_KV, N,
    # meta-parameters
    GROUP_SPLIT: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # OUT[z, h] = sum over s of P[z, h * GROUP_SPLIT + s] (partials of dK or
    # dV, last stride 1), summed in float32 in s order and cast once: one pass over
    # the partials, written straight into the caller's strided gradient.
    off_z, off_h, rows, offs_d, mask = head_row_tile(tl.program_id(0), tl.program_id(1), H_KV, N,
                                                     BLOCK_N, HEAD_DIM, HEAD_DIM_PAD)
    part = P + off_z * stride_pz + off_h * GROUP_SPLIT * stride_ph + rows * stride_pn + offs_d[None, :]
    acc = tl.zeros([BLOCK_N, HEAD_DIM_PAD], dtype=tl.float32)
    for s in tl.static_range(GROUP_SPLIT):
        acc += tl.load(part + s * stride_ph, mask=mask, other=0.0).to(tl.float32)
    out = OUT + off_z * stride_oz + off_h * stride_oh + rows * stride_on + offs_d[None, :] * stride_ok
    tl.store(out, acc.to(OUT.dtype.element_ty), mask=mask)


_GROUP_SUM_BLOCK_N = 64


def _sum_group_partials(out: torch.Tensor, part: torch.Tensor, h_kv: int, split: int) -> None:
    """out (B, H_KV, N, d), any strides <- the sum over each group of ``split``
    consecutive heads of part (B, H_KV * split, N, d) contiguous, float32 (or
    16-bit: the Hopper backward's GROUP_PARTIALS_16BIT), added in float32."""
    b, _, n, d = part.shape
    _bwd_group_sum[(cdiv(n, _GROUP_SUM_BLOCK_N), b * h_kv)](
        part, out,
        part.stride(0), part.stride(1), part.stride(2), *out.stride(),
        h_kv, n,
        GROUP_SPLIT=split, HEAD_DIM=d, HEAD_DIM_PAD=head_dim_pad(d), BLOCK_N=_GROUP_SUM_BLOCK_N,
        num_warps=4, **COMPILE_OPTIONS,
    )


@triton.jit(do_not_specialize=["N", "ROWS"])
def _bwd_sinks_grad(
    # pointers
    SINKS, LSE, DELTA, PART,
    # strides
    stride_lz, stride_lh,
    # shapes
    H_Q, N, ROWS,
    # meta-parameters
    BLOCK: tl.constexpr, LSE_LO: tl.constexpr = False,
):
    # d sink_h = -sum over the rows r of head h of P_sink[r] * delta[r], where
    # P_sink[r] = exp2(sink_h * log2(e) - lse2[r]) is the sink's share of row
    # r's softmax (the sink takes no value, so its only path to the loss is
    # through the other probabilities' normalisation), 0 where lse2 = -inf.
    # Rows are the flattened (batch, query) pairs, r = z * N + m; program
    # (i, h) writes minus the sum over rows [i * BLOCK, (i + 1) * BLOCK) into
    # PART[i, h], which _bwd_sinks_grad_sum adds over i (a fixed order:
    # deterministic).  LSE_LO: the compensated LSE's residual lo lies N
    # elements past each row's lse2 (kernels/bwd.py _load_lse_lo), and
    # P_sink[r] = exp2((sink_h * log2(e) - lse2[r]) - lo[r]).
    pid = tl.program_id(0)
    off_h = tl.program_id(1).to(tl.int64)
    rows = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    valid = rows < ROWS
    z = rows // N
    off = z * stride_lz + off_h * stride_lh + (rows - z * N)
    lse = tl.load(LSE + off, mask=valid, other=float("-inf"))
    delta = tl.load(DELTA + off, mask=valid, other=0.0)
    # the rounded product, as the forward's row max holds it: a plain product
    # may be contracted with the `- lse` below into one FMA of the exact one,
    # which at a sink of -1e9 is off by up to 64 (GPU builds only)
    s2 = tl.fma(tl.load(SINKS + off_h), 1.4426950408889634, 0.0)
    if LSE_LO:
        lse_lo = tl.load(LSE + N + off, mask=valid, other=0.0)
        p = tl.where(lse == float("-inf"), 0.0, tl.exp2((s2 - lse) - lse_lo))
    else:
        p = tl.where(lse == float("-inf"), 0.0, tl.exp2(s2 - lse))
    tl.store(PART + pid * H_Q + off_h, -tl.sum(p * delta, 0))


@triton.jit(do_not_specialize=["BLOCKS"])
def _bwd_sinks_grad_sum(
    # pointers
    PART, DSINKS,
    # shapes
    H_Q, BLOCKS,
    # meta-parameters
    BLOCK: tl.constexpr,
):
    # DSINKS[h] = sum over i of PART[i, h]: one program per head, BLOCK
    # partials at a time, always in the same order.
    off_h = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, BLOCKS, BLOCK):
        i = start + tl.arange(0, BLOCK)
        acc += tl.load(PART + i.to(tl.int64) * H_Q + off_h, mask=i < BLOCKS, other=0.0)
    tl.store(DSINKS + off_h, tl.sum(acc, 0))


_SINKS_GRAD_BLOCK = 1024
_SINKS_SUM_BLOCK = 256


def sinks_grad(dsinks: torch.Tensor, sinks: torch.Tensor, lse: torch.Tensor, delta: torch.Tensor,
               lse_lo: Optional[torch.Tensor] = None) -> None:
    """dsinks (Hq,) float32 <- the gradient of the sinks, given the forward's
    base-2 LSE and the preprocess's delta (rowsum(dO * O), less dlse when the
    LSE is differentiated), both laid out alike: (B, Hq, N) or packed
    (Hq, total), the last stride 1.  One kernel writes per-block partial sums
    and a second kernel adds them (two launches, both recordable by the call
    plans' backward: ops.plan_backward), where the torch expression takes
    about ten launches.  lse_lo: None, or the compensated LSE's residual laid
    out as kernels.fwd.attention_forward takes it (dense calls with a float bias)."""
    check_lse_lo(lse, lse_lo, None)
    if lse.stride(-1) != 1 or delta.stride() != lse.stride() or lse.numel() == 0:
        sinks_grad_torch(dsinks, sinks, lse, delta, lse_lo)  # rows not contiguous: the torch expression
        return
    if lse.dim() == 2:  # packed rows: one "batch" of all of them
        lse, delta = lse.unsqueeze(0), delta.unsqueeze(0)
    z, h, n = lse.shape
    blocks = cdiv(z * n, _SINKS_GRAD_BLOCK)
    part = fastlaunch.empty_scratch((blocks, h), torch.float32, lse.device)  # (a scratch buffer of a recording)
    _bwd_sinks_grad[(blocks, h)](
        sinks.float().contiguous(), lse, delta, part,
        lse.stride(0), lse.stride(1),
        h, n, z * n,
        BLOCK=_SINKS_GRAD_BLOCK, **({"LSE_LO": True} if lse_lo is not None else {}),
        num_warps=4, **COMPILE_OPTIONS,
    )
    _bwd_sinks_grad_sum[(h,)](part, dsinks, h, blocks, BLOCK=_SINKS_SUM_BLOCK, num_warps=4, **COMPILE_OPTIONS)


@triton.jit(do_not_specialize=["N"])
def _bwd_dq_convert(
    # pointers
    ACC, DQ,
    # strides
    stride_az, stride_ah, stride_am, stride_ak,
    stride_qz, stride_qh, stride_qm, stride_qk,
    # shapes
    H, N,
    # scalars
    scale,
    # meta-parameters
    BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr,
):
    # DQ[z, h, m] = (ACC[z, h, m] * scale) cast to DQ's dtype, one
    # [BLOCK_M, HEAD_DIM] tile of one (z, h) per program: a single pass over
    # the float32 buffer whatever DQ's row stride.
    off_z, off_h, rows, offs_d, mask = head_row_tile(tl.program_id(0), tl.program_id(1), H, N,
                                                     BLOCK_M, HEAD_DIM, BLOCK_D)
    acc = tl.load(ACC + off_z * stride_az + off_h * stride_ah + rows * stride_am + offs_d[None, :] * stride_ak,
                  mask=mask, other=0.0)
    tl.store(DQ + off_z * stride_qz + off_h * stride_qh + rows * stride_qm + offs_d[None, :] * stride_qk,
             cast_rtne(acc * scale, DQ.dtype.element_ty, INTERPRET), mask=mask)


@triton.jit(do_not_specialize=["N"])
def _bwd_dq_convert_flat(
    # pointers
    ACC, DQ,
    # shapes
    N,
    # scalars
    scale,
    # meta-parameters
    BLOCK: tl.constexpr, INTERPRET: tl.constexpr,
):
    # _bwd_dq_convert for ACC and DQ of one dense layout (the same strides,
    # no gaps: the Hopper backward's buffer in dq's memory order): element i
    # of one is element i of the other, so the pass runs over N elements as a
    # flat array, each program a BLOCK of consecutive addresses.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    acc = tl.load(ACC + offs, mask=mask, other=0.0)
    tl.store(DQ + offs, cast_rtne(acc * scale, DQ.dtype.element_ty, INTERPRET), mask=mask)


_DQ_CONVERT_BLOCK_M = 64
_DQ_CONVERT_FLAT_BLOCK = 4096
_MAX_GRID_Y = 65535

ENV_DQ_CONVERT = "FLASHATTN_TRITON_DQ_CONVERT"  # "1" / "0": DQ_CONVERT_KERNEL on / off for every call
# The float32 dQ buffer's final scale and cast into dq (the Hopper backward's,
# kernels/hopper/bwd.py _launch) by _bwd_dq_convert in one
# pass (convert_dq) instead of torch's multiply and strided copy.  A bool, or
# {causal: bool} per causal flag (by_causal); read at each call.  On for
# non-causal calls since session 18 call 9 (benchmarks/history/gpu_next_dq_convert2.sh:
# 0.990-1.044x the default on the 6 non-causal rows, geometric means 1.026 /
# 1.013 over two repeats).  On for causal calls too since session 27: that
# run's causal rows had 0.977 / 0.984 in one repeat, but session 18 call 1
# read causal 1.005-1.096x, session 20 (gpu_next_dq_convert3.sh, 3 alternated
# rounds) wall off / on 1.014-1.051x on all 7 causal rows (its rule failed
# only on a profiler kernel-sum floor, itself noisy: rounds 0.978-1.054), and
# session 27's Nsight Compute profiles of causal rows time torch's strided
# copy at 94 us where this kernel takes 46 us on the same buffer (B*N = 16k,
# H = 16, d = 128).  With it the causal Hopper backward's recording is clean,
# so its backward plans replay (ops.BwdPlan).
_DQ_CONVERT_DEFAULT = {False: True, True: True}
DQ_CONVERT_KERNEL: Any = env_switch_or(ENV_DQ_CONVERT, _DQ_CONVERT_DEFAULT)


def by_causal(switch: Any, causal: bool, d_pad: Optional[int] = None) -> bool:
    """A switch that is a bool, {causal flag: bool} or {(padded head dim,
    causal flag): bool} (absent keys: off), for a call's causal flag and
    padded head dim."""
    if not isinstance(switch, dict):
        return bool(switch)
    if any(isinstance(key, tuple) for key in switch):
        return bool(switch.get((d_pad, causal), False))
    return bool(switch[causal])


def _dq_convert_launches(dq: torch.Tensor) -> bool:
    """Whether _bwd_dq_convert can run on dq's device: CUDA, the interpreter, or
    meta tensors inside fastlaunch.compile_only() (a compile, no launch)."""
    if dq.is_meta:
        return fastlaunch.compile_only_device() is not None and fastlaunch.fast_run(_bwd_dq_convert) is not None
    return dq.is_cuda or INTERPRET


def _dq_convert_order(dq: torch.Tensor, acc: torch.Tensor):
    """The permutation of the dims of dq and acc (4-D) that _bwd_dq_convert runs
    on, the largest of the first three dims third (the one tiled by BLOCK_M
    rows); None where the torch expression runs instead: a last dim of stride
    > 1, two devices, more than _MAX_GRID_Y (z, h) pairs, or a device the
    kernel cannot run on."""
    if (dq.dim() != 4 or dq.stride(3) != 1 or acc.stride(3) != 1 or acc.device != dq.device
            or not _dq_convert_launches(dq)):
        return None
    rows = max(range(3), key=dq.shape.__getitem__)
    others = [i for i in range(3) if i != rows]
    if dq.shape[others[0]] * dq.shape[others[1]] > _MAX_GRID_Y:
        return None
    return (*others, rows, 3)


def _one_dense_layout(dq: torch.Tensor, acc: torch.Tensor) -> bool:
    """dq and acc have the same strides and those cover their elements with
    no gap (some permutation of the dims is contiguous)."""
    if dq.stride() != acc.stride():
        return False
    expect = 1
    for stride, size in sorted((st, n) for st, n in zip(dq.stride(), dq.shape) if n > 1):
        if stride != expect:
            return False
        expect *= size
    return True


def convert_dq(dq: torch.Tensor, acc: torch.Tensor, scale: float) -> None:
    """dq <- (acc * scale) cast to dq's dtype, as ``dq.copy_(acc * scale)``
    (bit for bit: one float32 multiply, one rounding), in one kernel pass.

    dq, acc: one 4-D shape, e.g. (B, H, N, d)-indexed views, or a packed 3-D
    (T, H, d) one (taken as (1, T, H, d)); any strides, but the last dim of
    stride 1 in both, else (or off CUDA) the torch expression runs
    (_dq_convert_order).  Both views are permuted alike (the map is
    elementwise) so that the largest of the first three dims is tiled; when
    both have one dense layout (_one_dense_layout, as the Hopper backward's
    buffer and dq), _bwd_dq_convert_flat runs over them as flat arrays."""
    if dq.shape != acc.shape:
        raise ValueError(f"convert_dq: dq {tuple(dq.shape)} and acc {tuple(acc.shape)} differ in shape")
    if dq.dim() == 3:
        dq, acc = dq.unsqueeze(0), acc.unsqueeze(0)
    if dq.numel() == 0:
        return
    order = _dq_convert_order(dq, acc)
    if order is None:
        dq.copy_(acc if scale == 1 else acc.mul(scale))
        return
    if _one_dense_layout(dq, acc):
        n = dq.numel()
        _bwd_dq_convert_flat[(cdiv(n, _DQ_CONVERT_FLAT_BLOCK),)](
            acc, dq,
            n,
            float(scale),
            BLOCK=_DQ_CONVERT_FLAT_BLOCK, INTERPRET=INTERPRET,
            num_warps=8, **COMPILE_OPTIONS,
        )
        return
    dq, acc = dq.permute(order), acc.permute(order)
    z, h, n, d = dq.shape
    _bwd_dq_convert[(cdiv(n, _DQ_CONVERT_BLOCK_M), z * h)](
        acc, dq,
        *acc.stride(), *dq.stride(),
        h, n,
        float(scale),
        BLOCK_M=_DQ_CONVERT_BLOCK_M, HEAD_DIM=d, BLOCK_D=triton.next_power_of_2(d), INTERPRET=INTERPRET,
        num_warps=4, **COMPILE_OPTIONS,
    )


_launch_dkdv = Launcher(_bwd_dkdv, "BWD_DKDV")
_launch_dq = Launcher(_bwd_dq, "BWD_DQ")
_launch_one = PairLauncher(_bwd_dkdv_dq, "BWD_ONE", _launch_dkdv, _launch_dq)  # both, one launch

ENV_ONE_LAUNCH = "FLASHATTN_TRITON_BWD_ONE_LAUNCH"  # "1" / "0": ONE_LAUNCH on / off for every call
# The deterministic form's dK/dV and dQ programs in one launch (_bwd_dkdv_dq)
# instead of two, for dense calls without a bias gradient and not autotuned
# (use_one_launch); the others keep the two launches.  A bool, {causal:
# bool} per causal flag (by_causal), or {(padded head dim, causal): bool}
# (absent keys: off); read at each call.  On at d = 128 non-causal only:
# on the H200 (session 20, benchmarks/history/gpu_next_one_launch2.sh, bf16, N 512-2k)
# it took 1.046-1.058x there (grid by head), but 0.52-0.98x at d = 64 and
# 0.57-0.65x at causal d = 128 N <= 1k (configs of the parts that differ in
# num_warps or tile shape there; one launch runs both with one setting).
ONE_LAUNCH: Any = env_switch_or(ENV_ONE_LAUNCH, {(128, False): True})


def use_one_launch(causal: bool, varlen: bool, has_dbias: bool, d_pad: int) -> bool:
    """Whether the separate form's dK/dV and dQ kernels run as one launch
    (ONE_LAUNCH, for this causal flag and padded head dim): dense batches
    without a bias gradient, and no autotuning (the one-launch kernel takes
    the parts' configs, it is not tuned itself)."""
    return (not varlen and not has_dbias and by_causal(ONE_LAUNCH, causal, d_pad)
            and not autotune_enabled())


ENV_WHOLE_Q_TILES = "FLASHATTN_TRITON_BWD_WHOLE_Q"  # "1" / "0": WHOLE_Q_TILES on / off for every call
# Dense calls whose query length is a multiple of 128 build the dK/dV kernel
# without the row checks of its masked loops (EVEN_M).  compile_check, sm_90:
# the causal masked loop 995 -> 718 SASS instructions and 612 -> 204 B of
# spills at 64 x 128 tiles (d = 128), 467 -> 361 and 20 -> 8 B at 32 x 64.
# A bool or {causal: bool} (by_causal), read at each call.  On for causal
# calls since session 21 (benchmarks/history/gpu_next_whole_q.sh on the H200: wall
# off/on 1.009-1.060 on the 6 causal rows, geomean 1.030; the non-causal
# rows, which have no masked query tile, read 0.988-1.049 and stay off).
WHOLE_Q_TILES: Any = env_switch_or(ENV_WHOLE_Q_TILES, {False: False, True: True})

_PREPROCESS_BLOCK_M = 64


# Budget of the float32 dK/dV partials of grouped-query heads.
GROUP_SPLIT_BYTES = 1 << 30


def group_split(group: int, rows_k: int, h_kv: int, d_total: int) -> int:
    """How many slices each KV head's query-head group is cut into for dK/dV:
    one program per query head (slices = group) where the float32 partials
    (rows_k x h_kv x slices x (d + d_v) x 4 bytes) fit GROUP_SPLIT_BYTES, else
    the largest divisor of the group that fits, else 1 (no partials).
    Per-head programs keep the inner loop over query tiles unnested, which
    measured 1.6-1.8x faster on the H200 (benchmarks/results/h200/profile)."""
    for s in range(group, 1, -1):
        if group % s == 0 and rows_k * h_kv * s * d_total * 4 <= GROUP_SPLIT_BYTES:
            return s
    return 1


def _flat_strides(tensors, varlen: bool):
    """(z, h, n, d) strides of each tensor; packed tensors have no batch stride."""
    if varlen:
        return tuple(s for t in tensors for s in (0, *t.stride()[1:]))
    return tuple(s for t in tensors for s in t.stride())


def _dropout_only(mods) -> bool:
    """The variants are dropout alone (what the Hopper backward takes besides none)."""
    return (mods.dropout and not mods.softcap and mods.alibi is None and mods.sinks is None
            and mods.bias is None)


def attention_backward(do, q, k, v, o, lse, dq, dk, dv, sm_scale, causal_offset, window,
                       dlse=None, cu_seqlens=None, max_seqlen=None, mods=None, dbias=None,
                       delta=None, split_group=True, hopper=False, shift_mul=0, lse_lo=None, chunk=0,
                       hopper_varlen=False):
    """Launch the three backward kernels on (B, H, N, d)-indexed views.

    do, o: (B, Hq, Nq, dv); dq like q (B, Hq, Nq, d); dk like k, dv like v
    (B, Hkv, Nk, d / dv); lse (base 2) and the optional dlse: float32
    (B, Hq, Nq) with the same strides and last stride 1.  Packed batches,
    causal_offset, window, mods and shift_mul: as in kernels.fwd.attention_forward.
    dbias: None, or a float32 (B, Hq, Nq, Nk) buffer with contiguous columns
    that receives dS (the gradient of an additive bias, before any reduction).
    dq, dk, dv (and dbias) are written in place.  Returns delta (B, Hq, Nq)
    float32 = rowsum(dO * O) - dlse (natural units), for the gradient of
    sinks; pass ``delta`` (laid out like lse) to have it written there.
    split_group=False keeps dK/dV of grouped-query heads in one program per
    KV head (required when a packed batch is launched in several chunks, as
    the partial buffers cover every row).  hopper: try the Hopper
    backward (kernels/hopper/bwd.py) after the preprocess, for a dense call
    without variants (or with dropout alone) and with no mask or a causal
    one, either with or without a left window bound; the caller decides
    (_dispatch.use_hopper_backward), the kernel may still decline.
    lse_lo: None, or the forward's compensated-LSE residual (dense calls;
    layout: kernels.fwd.attention_forward): P = exp2((s2 - lse2) - lse_lo).
    chunk: chunked attention's chunk size, 0 for none (as the forward's);
    never the Hopper backward.
    """
    mods = mods or NO_MODS
    check_lse_lo(lse, lse_lo, cu_seqlens)
    h_q, d, d_v = q.shape[1], q.shape[3], v.shape[3]
    h_kv = k.shape[1]
    varlen = cu_seqlens is not None
    if varlen:
        cu_q, cu_k = cu_seqlens
        batch = cu_q.shape[0] - 1
        n_q, n_k = max_seqlen
        lse_strides = (0, lse.stride(1))
        rng_rows = q.shape[2]
    else:
        batch, n_q, n_k = q.shape[0], q.shape[2], k.shape[2]
        cu_q = cu_k = lse  # unused placeholders
        lse_strides = (lse.stride(0), lse.stride(1))
        rng_rows = n_q
    left, right = window
    dv_pad = head_dim_pad(d_v)
    hopper = (hopper and not varlen and dbias is None and (mods is NO_MODS or _dropout_only(mods))
              and right in (None, 0) and lse_lo is None and not chunk)
    if delta is None:
        # lse's layout (delta shares its strides); not empty_like, which on the
        # prefetch's meta tensors imports sympy (_prefetch._stand_ins).
        delta = torch.empty_strided(lse.shape, lse.stride(), dtype=lse.dtype, device=lse.device)
    _bwd_preprocess[(cdiv(n_q, _PREPROCESS_BLOCK_M), batch * h_q)](
        o, do, dlse if dlse is not None else delta, delta, cu_q,
        *_flat_strides((o, do), varlen), *lse_strides,
        h_q, n_q,
        HEAD_DIM_V=d_v, HEAD_DIM_V_PAD=dv_pad, EVEN_DV=d_v == dv_pad, IS_VARLEN=varlen,
        HAS_DLSE=dlse is not None, BLOCK_M=_PREPROCESS_BLOCK_M, **COMPILE_OPTIONS,
    )
    if (hopper_varlen and varlen and dbias is None and mods is NO_MODS and lse_lo is None and not chunk
            and right in (None, 0) and causal_offset == 0 and shift_mul == 0):
        # A packed batch without variants on the Hopper backward (on by default
        # since session 56: _dispatch.use_hopper_varlen_backward), after the
        # same preprocess; bottom-right diagonals per sequence.
        from .hopper import hopper_backward_varlen
        if hopper_backward_varlen(do, q, k, v, lse, delta, dq, dk, dv, cu_q, cu_k, n_q, n_k, sm_scale,
                                  right == 0, -1 if left is None else left):
            return delta
    if hopper:
        from .hopper import hopper_attention_backward
        diagonal = n_k - n_q + causal_offset  # row i's window is [i + diagonal - left, i + diagonal (+ right)]
        if hopper_attention_backward(do, q, k, v, lse, delta, dq, dk, dv, sm_scale,
                                     None if right is None else diagonal,
                                     None if left is None else (left, diagonal),
                                     dropout=(mods.seed, mods.dropout_p, mods.philox_offset) if mods.dropout
                                     else None):
            return delta
    # The portable kernels' set-up (after the Hopper backward, which needs none of it).
    d_pad = head_dim_pad(d)
    bucket = seq_bucket(max(n_q, n_k))
    key = (q.dtype, d_pad, right is not None, bucket, variant_tag(mods, left, varlen, chunk), dv_pad)
    scalars = (sm_scale, causal_offset, shift_mul, left or 0, right or 0, bucket, *mods.scalars(), chunk)
    meta = dict(HEAD_DIM=d, HEAD_DIM_PAD=d_pad, EVEN_D=d == d_pad,
                HEAD_DIM_V=d_v, HEAD_DIM_V_PAD=dv_pad, EVEN_DV=d_v == dv_pad,
                SPLIT_QK=use_split_qk(d, d_pad),
                IS_VARLEN=varlen, MASK_LEFT=left is not None, MASK_RIGHT=right is not None,
                **mods.switches(q, with_sinks=False),
                DOT_PRECISION=dot_precision(q.dtype), INTERPRET=INTERPRET, MASK_CHUNK=chunk > 0)
    if lse_lo is not None:
        meta["LSE_LO"] = True
    alibi, _, bias, seed = mods.pointers(lse)
    group = h_q // h_kv
    split = group_split(group, batch * n_k if not varlen else k.shape[2], h_kv, d_pad + dv_pad) \
        if split_group else 1
    if split > 1:  # float32 partials per slice of each query-head group, summed below
        dk_out, dv_out = (fastlaunch.empty_scratch((g.shape[0], h_kv * split, g.shape[2], g.shape[3]),
                                                   torch.float32, g.device) for g in (dk, dv))
    else:
        dk_out, dv_out = dk, dv
    one = use_one_launch(right == 0, varlen, dbias is not None, d_pad)
    # whole query tiles (_dkdv_program's EVEN_M), where the switch is on
    even_m = by_causal(WHOLE_Q_TILES, right == 0) and not varlen and n_q % 128 == 0
    if one:  # dK/dV programs, then dQ programs (_bwd_dkdv_dq)
        _launch_one(
            lambda m: (cdiv(n_k, m["BLOCK_N1"]) * batch * h_kv * split + cdiv(n_q, m["BLOCK_M2"]) * batch * h_q,),
            key,
            q, k, v, do, lse, delta, dk_out, dv_out, dq, cu_q, cu_k, alibi, bias, seed,
            *_flat_strides((q, k, v, do, dk_out, dv_out, dq), varlen), *lse_strides, *mods.strides(),
            batch, h_kv, n_q, n_k, group, split, rng_rows,
            *scalars,
            **meta, HEADS_PER_PROGRAM=group // split, EVEN_M=even_m,
        )
    else:
        # (dk_out in the unused DQ slot: _bwd_dkdv's pointer list)
        _launch_dkdv(
            lambda m: (cdiv(n_k, m["BLOCK_N"]), batch * h_kv * split), key,
            q, k, v, do, lse, delta, dk_out, dv_out, dk_out, cu_q, cu_k, alibi, bias, seed,
            *_flat_strides((q, k, v, do, dk_out, dv_out, dk_out), varlen), *lse_strides, *mods.strides(),
            h_kv, n_q, n_k, group, split, rng_rows,
            *scalars,
            **meta, HEADS_PER_PROGRAM=group // split, EVEN_M=even_m,
        )
    if split > 1:
        _sum_group_partials(dk, dk_out, h_kv, split)
        _sum_group_partials(dv, dv_out, h_kv, split)
    if one:
        return delta
    _launch_dq(
        lambda m: (cdiv(n_q, m["BLOCK_M"]), batch * h_q), key,
        q, k, v, do, lse, delta, dq, cu_q, cu_k, alibi, bias, seed,
        lse if dbias is None else dbias,
        *_flat_strides((q, k, v, do, dq), varlen), *lse_strides, *mods.strides(),
        *((0, 0, 0) if dbias is None else dbias.stride()[:3]),
        h_q, n_q, n_k, h_q // h_kv, rng_rows,
        *scalars,
        **meta, HAS_DBIAS=dbias is not None,
    )
    return delta


__all__ = ["attention_backward", "convert_dq", "sinks_grad"]
