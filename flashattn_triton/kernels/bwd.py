"""Backward kernels: recompute the probability tiles from Q, K and the LSE.

With s = scale * q k^T, P = exp(s - lse), O = P V:
    dV = P^T dO,  dP = dO V^T,  dS = P * (dP - delta),  dQ = scale * dS K,
    dK = scale * dS^T Q,  where delta_i = sum_d dO_id O_id  (= rowsum(P * dP)).
If the caller also differentiates the returned LSE, d lse_i / d s_ij = P_ij
adds P * dLSE to dS, i.e. delta_i becomes delta_i - dLSE_i.

Three launches, no atomics (so the result is deterministic):
  1. _bwd_preprocess: delta per query row.
  2. _bwd_dkdv: a program owns a K/V tile of one KV head and loops over every
     query tile of every query head of its GQA group.
  3. _bwd_dq: a program owns a Q tile and loops over the K/V tiles.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from .launch import (INTERPRET, Launcher, dot_precision, head_dim_pad, load_tile,
                      make_configs, mma, seq_bucket, store_tile)


def dkdv_configs():
    return make_configs([
        # BLOCK_M (query loop), BLOCK_N (owned keys), num_warps, num_stages
        (64, 128, 8, 3),
        (64, 128, 8, 2),
        (32, 64, 4, 2),
        (64, 128, 4, 2),
        (64, 64, 4, 3),
        (32, 64, 8, 2),
        (16, 32, 4, 2),
    ])


def dq_configs():
    return make_configs([
        # BLOCK_M (owned queries), BLOCK_N (key loop), num_warps, num_stages
        (128, 64, 8, 3),
        (64, 64, 4, 3),
        (128, 32, 8, 3),
        (128, 64, 4, 2),
        (128, 32, 8, 2),
        (64, 32, 4, 2),
        (32, 32, 4, 2),
    ])


@triton.jit(do_not_specialize=["N_Q"])
def _bwd_preprocess(
    # pointers
    O, DO, DLSE, DELTA,
    # strides
    stride_oz, stride_oh, stride_om, stride_ok,
    stride_dz, stride_dh, stride_dm, stride_dk,
    # shapes
    H_Q, N_Q,
    # meta-parameters
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, EVEN_D: tl.constexpr,
    HAS_DLSE: tl.constexpr, BLOCK_M: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    off_z = (pid_bh // H_Q).to(tl.int64)
    off_h = (pid_bh % H_Q).to(tl.int64)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    rows = tl.arange(0, BLOCK_M)[:, None]
    o = load_tile(O + off_z * stride_oz + off_h * stride_oh + start_m.to(tl.int64) * stride_om
                  + rows * stride_om + offs_d[None, :] * stride_ok,
                  offs_m, N_Q, offs_d, HEAD_DIM, True, EVEN_D)
    do = load_tile(DO + off_z * stride_dz + off_h * stride_dh + start_m.to(tl.int64) * stride_dm
                   + rows * stride_dm + offs_d[None, :] * stride_dk,
                   offs_m, N_Q, offs_d, HEAD_DIM, True, EVEN_D)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    row_off = pid_bh.to(tl.int64) * N_Q + offs_m  # DLSE, DELTA: contiguous (B, H_Q, N_Q)
    if HAS_DLSE:
        delta -= tl.load(DLSE + row_off, mask=offs_m < N_Q, other=0.0)
    tl.store(DELTA + row_off, delta, mask=offs_m < N_Q)


@triton.jit
def _load_row_stats(LSE, DELTA, rows, N_Q, CHECK_ROWS: tl.constexpr):
    """LSE in base 2 and delta for a set of query rows.

    Rows that saw no key have LSE = -inf; they (and rows past N_Q) get +inf
    so that exp2(s - lse) = 0 for every key, with no NaN."""
    if CHECK_ROWS:
        lse = tl.load(LSE + rows, mask=rows < N_Q, other=float("inf"))
        delta = tl.load(DELTA + rows, mask=rows < N_Q, other=0.0)
    else:
        lse = tl.load(LSE + rows)
        delta = tl.load(DELTA + rows)
    lse = tl.where(lse == float("-inf"), float("inf"), lse)
    return lse * 1.4426950408889634, delta


@triton.jit
def _dkdv_q_loop(dk, dv, k, v, q_ptrs, do_ptrs, LSE, DELTA, stride_qm, stride_dom,
                 offs_n, offs_d, start_m, end_m, N_Q, qk_scale, causal_shift,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                 CAUSAL_MASK: tl.constexpr, CHECK_ROWS: tl.constexpr, EVEN_D: tl.constexpr,
                 DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr):
    """Accumulate dK, dV of the owned keys over query tiles [start_m, end_m).

    Works on the transposed scores s^T (keys x queries) so that dV += P^T dO
    and dK += dS^T Q need no transposed accumulator.  q_ptrs / do_ptrs point
    at the tile starting at query row start_m; LSE / DELTA at row 0."""
    offs_m = tl.arange(0, BLOCK_M)
    for start in range(start_m, end_m, BLOCK_M):
        rows = start + offs_m
        q = load_tile(q_ptrs, rows, N_Q, offs_d, HEAD_DIM, CHECK_ROWS, EVEN_D)
        lse2, delta = _load_row_stats(LSE, DELTA, rows, N_Q, CHECK_ROWS)
        s_t = mma(k, tl.trans(q), None, DOT_PRECISION, INTERPRET) * qk_scale
        if CAUSAL_MASK:  # mask before exp2: masked scores may exceed the LSE
            s_t = tl.where(offs_n[:, None] <= rows[None, :] + causal_shift, s_t, float("-inf"))
        p_t = tl.math.exp2(s_t - lse2[None, :])
        do = load_tile(do_ptrs, rows, N_Q, offs_d, HEAD_DIM, CHECK_ROWS, EVEN_D)
        dv = mma(p_t.to(do.dtype), do, dv, DOT_PRECISION, INTERPRET)
        dp_t = mma(v, tl.trans(do), None, DOT_PRECISION, INTERPRET)
        ds_t = p_t * (dp_t - delta[None, :])
        dk = mma(ds_t.to(q.dtype), q, dk, DOT_PRECISION, INTERPRET)
        q_ptrs += BLOCK_M * stride_qm
        do_ptrs += BLOCK_M * stride_dom
    return dk, dv


@triton.jit(do_not_specialize=["N_Q", "N_K", "causal_shift"])
def _bwd_dkdv(
    # pointers
    Q, K, V, DO, LSE, DELTA, DK, DV,
    # strides
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_doz, stride_doh, stride_dom, stride_dok,
    stride_dkz, stride_dkh, stride_dkn, stride_dkk,
    stride_dvz, stride_dvh, stride_dvn, stride_dvk,
    # shapes
    H_Q, H_KV, N_Q, N_K, GROUP_SIZE,
    # scalars
    sm_scale, causal_shift, SEQ_BUCKET,
    # meta-parameters
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, IS_CAUSAL: tl.constexpr,
    EVEN_D: tl.constexpr, DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    off_z = (pid_bh // H_KV).to(tl.int64)
    off_hkv = (pid_bh % H_KV).to(tl.int64)
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    tile_n = tl.arange(0, BLOCK_N)[:, None]

    k = load_tile(K + off_z * stride_kz + off_hkv * stride_kh + start_n.to(tl.int64) * stride_kn
                  + tile_n * stride_kn + offs_d[None, :] * stride_kk,
                  offs_n, N_K, offs_d, HEAD_DIM, True, EVEN_D)
    v = load_tile(V + off_z * stride_vz + off_hkv * stride_vh + start_n.to(tl.int64) * stride_vn
                  + tile_n * stride_vn + offs_d[None, :] * stride_vk,
                  offs_n, N_K, offs_d, HEAD_DIM, True, EVEN_D)
    dk = tl.zeros([BLOCK_N, HEAD_DIM_PAD], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM_PAD], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634

    # Query range: key j is seen by rows i >= j - causal_shift.  Query tiles
    # in [start_m, diag_end) straddle the diagonal of this key tile and are
    # masked; from diag_end on every row sees every owned key.  Tiles up to
    # full_end are whole; the last ragged tile, if any, checks its rows.
    full_end = (N_Q // BLOCK_M) * BLOCK_M
    if IS_CAUSAL:
        first_row = tl.maximum(start_n - causal_shift, 0)
        start_m = tl.minimum((first_row // BLOCK_M) * BLOCK_M, N_Q)
        all_rows = tl.maximum(start_n + BLOCK_N - 1 - causal_shift, 0)  # first row seeing every key
        diag_end = tl.minimum(tl.cdiv(all_rows, BLOCK_M) * BLOCK_M, tl.cdiv(N_Q, BLOCK_M) * BLOCK_M)
        diag_end = tl.maximum(diag_end, start_m)
    else:
        start_m = 0
        diag_end = tl.full([], 0, dtype=tl.int32)
    tail_start = tl.maximum(full_end, diag_end)

    offs_m = tl.arange(0, BLOCK_M)
    for g in range(0, GROUP_SIZE):
        off_h = off_hkv * GROUP_SIZE + g  # the query heads that read this KV head
        q_ptrs = (Q + off_z * stride_qz + off_h * stride_qh
                  + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk)
        do_ptrs = (DO + off_z * stride_doz + off_h * stride_doh
                   + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dok)
        row_base = (off_z * H_Q + off_h) * N_Q
        lse_ptr = LSE + row_base
        delta_ptr = DELTA + row_base
        if IS_CAUSAL:
            dk, dv = _dkdv_q_loop(dk, dv, k, v,
                                  q_ptrs + start_m.to(tl.int64) * stride_qm,
                                  do_ptrs + start_m.to(tl.int64) * stride_dom,
                                  lse_ptr, delta_ptr, stride_qm, stride_dom,
                                  offs_n, offs_d, start_m, diag_end, N_Q, qk_scale, causal_shift,
                                  HEAD_DIM, BLOCK_M, True, True, EVEN_D, DOT_PRECISION, INTERPRET)
        dk, dv = _dkdv_q_loop(dk, dv, k, v,
                              q_ptrs + diag_end.to(tl.int64) * stride_qm,
                              do_ptrs + diag_end.to(tl.int64) * stride_dom,
                              lse_ptr, delta_ptr, stride_qm, stride_dom,
                              offs_n, offs_d, diag_end, full_end, N_Q, qk_scale, causal_shift,
                              HEAD_DIM, BLOCK_M, False, False, EVEN_D, DOT_PRECISION, INTERPRET)
        dk, dv = _dkdv_q_loop(dk, dv, k, v,
                              q_ptrs + tail_start.to(tl.int64) * stride_qm,
                              do_ptrs + tail_start.to(tl.int64) * stride_dom,
                              lse_ptr, delta_ptr, stride_qm, stride_dom,
                              offs_n, offs_d, tail_start, N_Q, N_Q, qk_scale, causal_shift,
                              HEAD_DIM, BLOCK_M, False, True, EVEN_D, DOT_PRECISION, INTERPRET)

    dk_ptrs = (DK + off_z * stride_dkz + off_hkv * stride_dkh + start_n.to(tl.int64) * stride_dkn
               + tile_n * stride_dkn + offs_d[None, :] * stride_dkk)
    dv_ptrs = (DV + off_z * stride_dvz + off_hkv * stride_dvh + start_n.to(tl.int64) * stride_dvn
               + tile_n * stride_dvn + offs_d[None, :] * stride_dvk)
    store_tile(dk_ptrs, (dk * sm_scale).to(DK.dtype.element_ty), offs_n, N_K, offs_d, HEAD_DIM, EVEN_D)
    store_tile(dv_ptrs, dv.to(DV.dtype.element_ty), offs_n, N_K, offs_d, HEAD_DIM, EVEN_D)


@triton.jit
def _dq_kv_loop(dq, q, do, lse2, delta, k_ptrs, v_ptrs, stride_kn, stride_vn,
                offs_m, offs_d, start_n, end_n, N_K, qk_scale, causal_shift,
                HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                IS_CAUSAL: tl.constexpr, EVEN_D: tl.constexpr,
                DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr):
    """Accumulate dQ of the owned rows over K/V tiles [start_n, end_n); the
    tile split is the forward's (see _attn_fwd)."""
    offs_n = tl.arange(0, BLOCK_N)
    for start in range(start_n, end_n, BLOCK_N):
        cols = start + offs_n
        k = load_tile(k_ptrs, cols, N_K, offs_d, HEAD_DIM, MASKED, EVEN_D)
        v = load_tile(v_ptrs, cols, N_K, offs_d, HEAD_DIM, MASKED, EVEN_D)
        s = mma(q, tl.trans(k), None, DOT_PRECISION, INTERPRET) * qk_scale
        if MASKED:  # mask before exp2: masked scores may exceed the LSE
            keep = cols[None, :] < N_K
            if IS_CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None] + causal_shift)
            s = tl.where(keep, s, float("-inf"))
        p = tl.math.exp2(s - lse2[:, None])
        dp = mma(do, tl.trans(v), None, DOT_PRECISION, INTERPRET)
        ds = p * (dp - delta[:, None])
        dq = mma(ds.to(k.dtype), k, dq, DOT_PRECISION, INTERPRET)
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    return dq


@triton.jit(do_not_specialize=["N_Q", "N_K", "causal_shift"])
def _bwd_dq(
    # pointers
    Q, K, V, DO, LSE, DELTA, DQ,
    # strides
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_doz, stride_doh, stride_dom, stride_dok,
    stride_dqz, stride_dqh, stride_dqm, stride_dqk,
    # shapes
    H_Q, N_Q, N_K, GROUP_SIZE,
    # scalars
    sm_scale, causal_shift, SEQ_BUCKET,
    # meta-parameters
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, IS_CAUSAL: tl.constexpr,
    EVEN_D: tl.constexpr, DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    off_z = (pid_bh // H_Q).to(tl.int64)
    off_h = pid_bh % H_Q
    off_hkv = (off_h // GROUP_SIZE).to(tl.int64)
    off_h = off_h.to(tl.int64)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    tile_m = tl.arange(0, BLOCK_M)[:, None]

    q = load_tile(Q + off_z * stride_qz + off_h * stride_qh + start_m.to(tl.int64) * stride_qm
                  + tile_m * stride_qm + offs_d[None, :] * stride_qk,
                  offs_m, N_Q, offs_d, HEAD_DIM, True, EVEN_D)
    do = load_tile(DO + off_z * stride_doz + off_h * stride_doh + start_m.to(tl.int64) * stride_dom
                   + tile_m * stride_dom + offs_d[None, :] * stride_dok,
                   offs_m, N_Q, offs_d, HEAD_DIM, True, EVEN_D)
    row_base = pid_bh.to(tl.int64) * N_Q
    lse2, delta = _load_row_stats(LSE + row_base, DELTA + row_base, offs_m, N_Q, True)
    k_ptrs = (K + off_z * stride_kz + off_hkv * stride_kh
              + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kk)
    v_ptrs = (V + off_z * stride_vz + off_hkv * stride_vh
              + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vk)
    dq = tl.zeros([BLOCK_M, HEAD_DIM_PAD], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634

    if IS_CAUSAL:
        last_row = tl.minimum(start_m + BLOCK_M, N_Q) - 1
        end_n = tl.maximum(tl.minimum(N_K, last_row + causal_shift + 1), 0)
        full_end = tl.maximum(tl.minimum(N_K, start_m + causal_shift + 1), 0)
        full_end = (full_end // BLOCK_N) * BLOCK_N
    else:
        end_n = N_K
        full_end = (N_K // BLOCK_N) * BLOCK_N

    dq = _dq_kv_loop(dq, q, do, lse2, delta, k_ptrs, v_ptrs, stride_kn, stride_vn,
                     offs_m, offs_d, 0, full_end, N_K, qk_scale, causal_shift,
                     HEAD_DIM, BLOCK_N, False, IS_CAUSAL, EVEN_D, DOT_PRECISION, INTERPRET)
    dq = _dq_kv_loop(dq, q, do, lse2, delta, k_ptrs + full_end.to(tl.int64) * stride_kn,
                     v_ptrs + full_end.to(tl.int64) * stride_vn, stride_kn, stride_vn,
                     offs_m, offs_d, full_end, end_n, N_K, qk_scale, causal_shift,
                     HEAD_DIM, BLOCK_N, True, IS_CAUSAL, EVEN_D, DOT_PRECISION, INTERPRET)

    dq_ptrs = (DQ + off_z * stride_dqz + off_h * stride_dqh + start_m.to(tl.int64) * stride_dqm
               + tile_m * stride_dqm + offs_d[None, :] * stride_dqk)
    store_tile(dq_ptrs, (dq * sm_scale).to(DQ.dtype.element_ty), offs_m, N_Q, offs_d, HEAD_DIM, EVEN_D)


_launch_dkdv = Launcher(
    _bwd_dkdv, "BWD_DKDV", dkdv_configs(), ("BLOCK_N", 2, 2),  # K, V resident; dK, dV
    interpret_config=triton.Config({"BLOCK_M": 16, "BLOCK_N": 32}, num_warps=4, num_stages=1),
    preferred={64: (32, 64, 4, 2)})  # H200 sweep: the best at d = 64
_launch_dq = Launcher(
    _bwd_dq, "BWD_DQ", dq_configs(), ("BLOCK_M", 2, 1),  # Q, dO resident; dQ
    interpret_config=triton.Config({"BLOCK_M": 32, "BLOCK_N": 16}, num_warps=4, num_stages=1),
    preferred={64: (64, 64, 4, 3)})  # H200 sweep: the best at d = 64

_PREPROCESS_BLOCK_M = 64


def attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       o: torch.Tensor, lse: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor,
                       dv: torch.Tensor, sm_scale: float, causal_shift: Optional[int],
                       dlse: Optional[torch.Tensor] = None) -> None:
    """Launch the three backward kernels on (B, H, N, d)-indexed views.

    do, o, dq like q (B, Hq, Nq, d); dk, dv like k (B, Hkv, Nk, d); lse and the
    optional dlse contiguous float32 (B, Hq, Nq).  dq, dk, dv are written in place.
    """
    batch, h_q, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    d_pad = head_dim_pad(d)
    even_d = d == d_pad
    shift = 0 if causal_shift is None else causal_shift
    bucket = seq_bucket(max(n_q, n_k))
    meta = dict(HEAD_DIM=d, HEAD_DIM_PAD=d_pad, IS_CAUSAL=causal_shift is not None,
                EVEN_D=even_d, DOT_PRECISION=dot_precision(q.dtype), INTERPRET=INTERPRET)

    delta = torch.empty_like(lse)
    _bwd_preprocess[(triton.cdiv(n_q, _PREPROCESS_BLOCK_M), batch * h_q)](
        o, do, dlse if dlse is not None else delta, delta,
        *o.stride(), *do.stride(),
        h_q, n_q,
        HEAD_DIM=d, HEAD_DIM_PAD=d_pad, EVEN_D=even_d, HAS_DLSE=dlse is not None,
        BLOCK_M=_PREPROCESS_BLOCK_M,
    )

    _launch_dkdv(
        lambda m: (triton.cdiv(n_k, m["BLOCK_N"]), batch * h_kv),
        q, k, v, do, lse, delta, dk, dv,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dk.stride(), *dv.stride(),
        h_q, h_kv, n_q, n_k, h_q // h_kv,
        sm_scale, shift, bucket,
        **meta,
    )
    _launch_dq(
        lambda m: (triton.cdiv(n_q, m["BLOCK_M"]), batch * h_q),
        q, k, v, do, lse, delta, dq,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride(),
        h_q, n_q, n_k, h_q // h_kv,
        sm_scale, shift, bucket,
        **meta,
    )


__all__ = ["attention_backward", "dkdv_configs", "dq_configs"]
