"""Portable forward kernel: tiled attention with online softmax.

One program owns a BLOCK_M tile of query rows of one (batch entry, query
head) and streams the K/V tiles of the matching KV head through on-chip
memory.  Scores are kept in base 2: s2 = (q . k) * scale * log2(e), so that
exp(s - m) becomes exp2(s2 - m2).  The running max m2 and running sum l are
float32 per row; the accumulator is rescaled by exp2(m2_old - m2_new)
whenever the max grows.  Only O and the base-2 LSE, lse2 = m2 + log2(l), are
written (the op layer converts it to natural log at the API boundary; the
backward reuses lse2 as is, so it recomputes exactly the forward's exponent).
With LSE_LO (dense calls with a float bias) it also writes the residual
lo = (m2 - lse2) + log2(l) that rounding lse2 dropped, Nq elements after lse2
(the op layer's compensated LSE, ops.py module doc).

Works for dense batches (B, N, H, d) and packed ones (cu_seqlens), causal or
sliding-window masks, GQA, value head dims that differ from the query's, and
the variants of kernels/score.py as compile-time switches: softcap, ALiBi, a
boolean or additive mask, learnable sinks (an extra logit per head in the
denominator: the running max and sum start at (sink, 1) instead of (-inf, 0))
and dropout (kept probabilities feed P V, the normaliser l sums all of them,
out = acc / l * 2^16 / (2^16 - t), t the 16-bit threshold of kernels/score.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import (INTERPRET, Launcher, cdiv, dot_precision, head_dim_pad, seq_bucket,
                     variant_tag)
from .score import NO_MODS, dropout_keep, score_tile
from .tiles import (aligned_start, kv_tile_range, load_qk_operand, load_tile, mma, page_numbers, paged_tile_ptrs,
                    qk_columns, seq_bounds, store_tile, tile_ptrs)

LOG2E = 1.4426950408889634  # exp(x) == exp2(x * LOG2E)

# Q K^T in two power-of-two column chunks where split_qk allows it (False:
# one chunk of HEAD_DIM_PAD columns).  Read by attention_forward, so not by
# calls that replay recorded launches (ops.py's plans): set it before a
# signature's first call, or with ops.PLANS_ENABLED = False.
SPLIT_QK = True


def split_qk(d: int, d_pad: int) -> bool:
    """Whether Q K^T can reduce over d_pad/2 + d_pad/4 columns instead of
    d_pad (d_pad = head_dim_pad(d)): d <= 3/4 d_pad, so at most a quarter of
    the padded reduction is dropped (d=96: 64+32, d=160: 128+64, 192: 128+64),
    and d_pad >= 64, so the second chunk is at least 16 wide (a dot's minimum K)."""
    return d_pad >= 64 and 4 * d <= 3 * d_pad


@triton.jit
def _fwd_kv_loop(acc, l_i, m_i, q, q_hi, K, V, stride_kn, stride_kk, stride_vn, stride_vk,
                 offs_m, offs_d, offs_d_hi, offs_dv, start_n, end_n, n_q, n_k, qk_scale,
                 shift, window_left, window_right, chunk,
                 softcap2, alibi2, BIAS, stride_bm, stride_bn,
                 seed, rng_base, rng_cols, dropout_thresh, BT, stride_btn, stride_kz, stride_vz,
                 HEAD_DIM: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_N: tl.constexpr,
                 MASKED: tl.constexpr, MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr,
                 MASK_CHUNK: tl.constexpr,
                 EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, SPLIT_QK: tl.constexpr,
                 HAS_SOFTCAP: tl.constexpr, FAST_TANH: tl.constexpr, HAS_ALIBI: tl.constexpr,
                 HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, HAS_DROPOUT: tl.constexpr,
                 DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr,
                 PAGED: tl.constexpr = False, PAGE_SIZE: tl.constexpr = 0):
    """Fold K/V tiles [start_n, end_n) into (acc, l_i, m_i).

    MASKED tiles may hold keys past n_k or keys outside the causal / window
    band or the rows' chunks (MASK_CHUNK); unmasked tiles are whole and
    visible to every row of the tile (up to a user mask, HAS_MASK).  K, V point at key row 0 of this
    (batch entry, KV head).  SPLIT_QK: q holds query columns offs_d (all
    within HEAD_DIM), q_hi columns offs_d_hi (EVEN_D: all within HEAD_DIM);
    otherwise q holds offs_d and q_hi, offs_d_hi are unused.

    PAGED: K / V are pools of pages (stride_kz / stride_vz apart) and key j
    of this sequence lies in page BT[j // PAGE_SIZE], row j % PAGE_SIZE; each
    tile's pointers come from its page numbers (one per tile when the tile
    lies in one page) instead of stepping through contiguous rows."""
    offs_n = tl.arange(0, BLOCK_N)
    k_ptrs = tile_ptrs(K, start_n.to(tl.int64), stride_kn, stride_kk, BLOCK_N, offs_d)
    if SPLIT_QK:
        k_hi_ptrs = tile_ptrs(K, start_n.to(tl.int64), stride_kn, stride_kk, BLOCK_N, offs_d_hi)
    v_ptrs = tile_ptrs(V, start_n.to(tl.int64), stride_vn, stride_vk, BLOCK_N, offs_dv)
    if PAGED:
        page = page_numbers(BT, stride_btn, start_n, offs_n, n_k, 0, n_k, PAGE_SIZE, PAGE_SIZE % BLOCK_N == 0)
    else:
        page = 0
    for start in range(start_n, end_n, BLOCK_N):
        start = aligned_start(start, BLOCK_N)
        cols = start + offs_n
        if PAGED:
            k_ptrs = paged_tile_ptrs(K, page, cols, stride_kz, stride_kn, stride_kk, offs_d, PAGE_SIZE)
            if SPLIT_QK:
                k_hi_ptrs = paged_tile_ptrs(K, page, cols, stride_kz, stride_kn, stride_kk, offs_d_hi, PAGE_SIZE)
            v_ptrs = paged_tile_ptrs(V, page, cols, stride_vz, stride_vn, stride_vk, offs_dv, PAGE_SIZE)
        if SPLIT_QK:
            k = load_tile(k_ptrs, cols, n_k, offs_d, HEAD_DIM, MASKED, True)
            k_hi = load_tile(k_hi_ptrs, cols, n_k, offs_d_hi, HEAD_DIM, MASKED, EVEN_D)
            qk = mma(q, tl.trans(k), None, DOT_PRECISION, INTERPRET)
            qk = mma(q_hi, tl.trans(k_hi), qk, DOT_PRECISION, INTERPRET)
            k_hi_ptrs += BLOCK_N * stride_kn
        else:
            k = load_tile(k_ptrs, cols, n_k, offs_d, HEAD_DIM, MASKED, EVEN_D)
            qk = mma(q, tl.trans(k), None, DOT_PRECISION, INTERPRET)
        s, _ = score_tile(qk, offs_m[:, None], cols[None, :], n_q, n_k, shift, window_left,
                          window_right, chunk, qk_scale, softcap2, alibi2, BIAS, stride_bm, stride_bn,
                          MASKED, MASK_LEFT, MASK_RIGHT, MASK_CHUNK, HAS_SOFTCAP, FAST_TANH, HAS_ALIBI,
                          HAS_MASK, MASK_BOOL, q.dtype == tl.float32)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        if MASKED or HAS_MASK:
            # A row may have seen no key yet (m_new = -inf): subtract 0 instead,
            # so exp2(-inf - 0) = 0 rather than exp2(-inf + inf) = NaN.
            m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_ref = m_new
        p = tl.math.exp2(s - m_ref[:, None])
        alpha = tl.math.exp2(m_i - m_ref)
        l_i = l_i * alpha + tl.sum(p, 1)
        if HAS_DROPOUT:
            keep = dropout_keep(seed, rng_base, tl.min(offs_m, 0), start, rng_cols, dropout_thresh,
                                offs_m.shape[0], BLOCK_N, False)
            p = tl.where(keep, p, 0.0)
        v = load_tile(v_ptrs, cols, n_k, offs_dv, HEAD_DIM_V, MASKED, EVEN_DV)
        acc = mma(p.to(v.dtype), v, acc * alpha[:, None], DOT_PRECISION, INTERPRET)
        m_i = m_new
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
        if PAGED:  # the next tile's pages, a step ahead
            page = page_numbers(BT, stride_btn, start + BLOCK_N, offs_n, n_k, 0, n_k, PAGE_SIZE,
                                PAGE_SIZE % BLOCK_N == 0)
    return acc, l_i, m_i


# Lengths, window, chunk, shift and the dropout counters stay runtime values:
# no specialisation on 1 or on divisibility, so one binary serves every length.
@triton.jit(do_not_specialize=["N_Q", "N_K", "causal_offset", "shift_mul", "window_left", "window_right",
                               "RNG_ROWS", "philox_offset", "dropout_thresh", "chunk"])
def _attn_fwd(
    # pointers
    Q, K, V, O, LSE, CU_SEQLENS_Q, CU_SEQLENS_K, ALIBI, SINKS, BIAS, SEED,
    # strides
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_oz, stride_oh, stride_om, stride_ok,
    stride_lz, stride_lh,
    stride_az, stride_ah,
    stride_bz, stride_bh, stride_bm, stride_bn,
    # shapes
    H_Q, N_Q, N_K, GROUP_SIZE, RNG_ROWS,
    # scalars
    sm_scale, causal_offset, shift_mul, window_left, window_right, SEQ_BUCKET,
    softcap, dropout_scale, dropout_thresh, philox_offset, chunk,
    # paged K / V (PAGED; last, so the other arguments keep their places)
    BLOCK_TABLE, stride_btz, stride_btn,
    # meta-parameters
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, EVEN_D: tl.constexpr,
    HEAD_DIM_V: tl.constexpr, HEAD_DIM_V_PAD: tl.constexpr, EVEN_DV: tl.constexpr,
    SPLIT_QK: tl.constexpr, IS_VARLEN: tl.constexpr, MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, FAST_TANH: tl.constexpr, HAS_ALIBI: tl.constexpr,
    HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, HAS_SINKS: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
    REVERSE_M: tl.constexpr, DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LSE_LO: tl.constexpr = False,
    MASK_CHUNK: tl.constexpr = False, PAGED: tl.constexpr = False, PAGE_SIZE: tl.constexpr = 0,
):
    # Causal programs run longest first: query tile order reversed.
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0) if REVERSE_M else tl.program_id(0)
    pid_bh = tl.program_id(1)
    off_z = pid_bh // H_Q
    off_h = pid_bh % H_Q
    off_hkv = off_h // GROUP_SIZE  # GQA: query head h reads KV head h // G
    q_start, n_q, k_start, n_k = seq_bounds(off_z, CU_SEQLENS_Q, CU_SEQLENS_K, N_Q, N_K, IS_VARLEN)
    start_m = pid_m * BLOCK_M
    if start_m >= n_q:  # packed batches: the grid covers the longest sequence
        return
    shift = n_k - n_q + causal_offset
    if IS_VARLEN:  # a per-document diagonal (blocks of longer documents: ring attention)
        shift += shift_mul * n_k

    # Batch/head/row offsets in int64; the in-tile part stays 32-bit.
    off_z = off_z.to(tl.int64)
    off_h = off_h.to(tl.int64)
    off_hkv = off_hkv.to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_dv = tl.arange(0, HEAD_DIM_V_PAD)
    Q += off_z * stride_qz + off_h * stride_qh + q_start * stride_qm
    if PAGED:  # K / V: pools of pages; this sequence's pages from its block-table row
        K += off_hkv * stride_kh
        V += off_hkv * stride_vh
    else:
        K += off_z * stride_kz + off_hkv * stride_kh + k_start * stride_kn
        V += off_z * stride_vz + off_hkv * stride_vh + k_start * stride_vn
    BT = BLOCK_TABLE + off_z * stride_btz
    O += off_z * stride_oz + off_h * stride_oh + q_start * stride_om
    LSE += off_z * stride_lz + off_h * stride_lh + q_start
    BIAS += off_z * stride_bz + off_h * stride_bh

    # Q K^T reduces over columns [0, PAD/2) and [PAD/2, 3 PAD/4) when split
    # (split_qk: HEAD_DIM <= 3 PAD/4 < PAD, so the first chunk is whole);
    # even_qk then says whether the second chunk is.
    if SPLIT_QK:
        even_qk = HEAD_DIM == HEAD_DIM_PAD // 2 + HEAD_DIM_PAD // 4
    else:
        even_qk = EVEN_D
    offs_d, offs_d_hi = qk_columns(HEAD_DIM_PAD, SPLIT_QK)
    q, q_hi = load_qk_operand(Q, start_m.to(tl.int64), stride_qm, stride_qk, BLOCK_M, offs_m, n_q,
                              offs_d, offs_d_hi, HEAD_DIM, even_qk, SPLIT_QK)
    if HAS_SOFTCAP:  # tanh takes natural-unit scores over the cap
        qk_scale = sm_scale / softcap
    else:
        qk_scale = sm_scale * 1.4426950408889634  # scale * log2(e): scores in base 2
    softcap2 = softcap * 1.4426950408889634
    alibi2 = 0.0
    if HAS_ALIBI:
        alibi2 = tl.load(ALIBI + off_z * stride_az + off_h * stride_ah).to(tl.float32) * 1.4426950408889634
    seed = 0
    rng_base = philox_offset
    if HAS_DROPOUT:
        seed = tl.load(SEED)
        rng_bh = off_h if IS_VARLEN else off_z * H_Q + off_h
        rng_base = philox_offset + (rng_bh * RNG_ROWS + q_start) * N_K

    if HAS_SINKS:  # the sink's logit is the first term of the running softmax
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) + tl.load(SINKS + off_h).to(tl.float32) * 1.4426950408889634
        l_i = tl.full([BLOCK_M], 1.0, dtype=tl.float32)
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_V_PAD], dtype=tl.float32)

    lo, full_lo, full_hi, hi = kv_tile_range(start_m, n_q, n_k, shift, window_left, window_right, chunk,
                                             BLOCK_M, BLOCK_N, MASK_LEFT, MASK_RIGHT, MASK_CHUNK)
    # Masked head (left window edge, chunk start), unmasked middle, masked
    # tail (diagonal, right window edge, chunk end, ragged end of K).
    if MASK_LEFT or MASK_CHUNK:
        acc, l_i, m_i = _fwd_kv_loop(acc, l_i, m_i, q, q_hi, K, V, stride_kn, stride_kk, stride_vn, stride_vk,
                                     offs_m, offs_d, offs_d_hi, offs_dv, lo, full_lo, n_q, n_k, qk_scale,
                                     shift, window_left, window_right, chunk,
                                     softcap2, alibi2, BIAS, stride_bm, stride_bn,
                                     seed, rng_base, N_K, dropout_thresh, BT, stride_btn, stride_kz, stride_vz,
                                     HEAD_DIM, HEAD_DIM_V, BLOCK_N, True, MASK_LEFT, MASK_RIGHT, MASK_CHUNK,
                                     even_qk, EVEN_DV, SPLIT_QK, HAS_SOFTCAP, FAST_TANH, HAS_ALIBI,
                                     HAS_MASK, MASK_BOOL, HAS_DROPOUT, DOT_PRECISION, INTERPRET, PAGED, PAGE_SIZE)
    acc, l_i, m_i = _fwd_kv_loop(acc, l_i, m_i, q, q_hi, K, V, stride_kn, stride_kk, stride_vn, stride_vk,
                                 offs_m, offs_d, offs_d_hi, offs_dv, full_lo, full_hi, n_q, n_k, qk_scale,
                                 shift, window_left, window_right, chunk,
                                 softcap2, alibi2, BIAS, stride_bm, stride_bn,
                                 seed, rng_base, N_K, dropout_thresh, BT, stride_btn, stride_kz, stride_vz,
                                 HEAD_DIM, HEAD_DIM_V, BLOCK_N, False, MASK_LEFT, MASK_RIGHT, MASK_CHUNK,
                                 even_qk, EVEN_DV, SPLIT_QK, HAS_SOFTCAP, FAST_TANH, HAS_ALIBI,
                                 HAS_MASK, MASK_BOOL, HAS_DROPOUT, DOT_PRECISION, INTERPRET, PAGED, PAGE_SIZE)
    acc, l_i, m_i = _fwd_kv_loop(acc, l_i, m_i, q, q_hi, K, V, stride_kn, stride_kk, stride_vn, stride_vk,
                                 offs_m, offs_d, offs_d_hi, offs_dv, full_hi, hi, n_q, n_k, qk_scale,
                                 shift, window_left, window_right, chunk,
                                 softcap2, alibi2, BIAS, stride_bm, stride_bn,
                                 seed, rng_base, N_K, dropout_thresh, BT, stride_btn, stride_kz, stride_vz,
                                 HEAD_DIM, HEAD_DIM_V, BLOCK_N, True, MASK_LEFT, MASK_RIGHT, MASK_CHUNK,
                                 even_qk, EVEN_DV, SPLIT_QK, HAS_SOFTCAP, FAST_TANH, HAS_ALIBI,
                                 HAS_MASK, MASK_BOOL, HAS_DROPOUT, DOT_PRECISION, INTERPRET, PAGED, PAGE_SIZE)

    # Rows that saw no key (and no sink): l = 0 -> output 0 and LSE = -inf.
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    if HAS_DROPOUT:
        out = acc * (dropout_scale / l_safe)[:, None]
    else:
        out = acc / l_safe[:, None]
    lse2 = tl.where(empty, float("-inf"), m_i + tl.math.log2(l_safe))
    store_tile(tile_ptrs(O, start_m.to(tl.int64), stride_om, stride_ok, BLOCK_M, offs_dv),
               out.to(O.dtype.element_ty), offs_m, n_q, offs_dv, HEAD_DIM_V, EVEN_DV)
    tl.store(LSE + offs_m, lse2, mask=offs_m < n_q)
    if LSE_LO:
        # The compensated LSE's residual (dense calls with a float bias): what
        # rounding lse2 = fl(m + log2(l)) dropped, lo = (m - lse2) + log2(l)
        # (m - lse2 is exact), 0 for rows that saw no key; stored N_Q elements
        # after lse2.  At m ~ -1.4e9 (a row of bias -1e9) lse2 == m and lo =
        # log2(l): the backward's P = exp2((s - lse2) - lo) is 1 / l there.
        lse_lo = tl.where(empty, 0.0, (m_i - lse2) + tl.math.log2(l_safe))
        tl.store(LSE + N_Q + offs_m, lse_lo, mask=offs_m < n_q)


_launch_fwd = Launcher(_attn_fwd, "FWD")


def attention_forward(q, k, v, o, lse, sm_scale, causal_offset, window, cu_seqlens=None,
                      max_seqlen=None, mods=None, shift_mul=0, lse_lo=None, chunk=0, block_table=None):
    """Launch the forward on (B, H, N, d)-indexed views (any strides, last one 1).

    q: (B, Hq, Nq, d); k: (B, Hkv, Nk, d); v: (B, Hkv, Nk, dv); o: (B, Hq, Nq, dv),
    written in place; lse: (B, Hq, Nq) float32 base 2 with the last stride 1.
    Packed batches: q (1, Hq, total_q, d) etc. with cu_seqlens = (cu_q, cu_k)
    int32 (B+1,) and max_seqlen = (max_q, max_k); the batch size is len(cu_q) - 1.
    causal_offset: row i sees keys j <= i + (Nk - Nq + causal_offset) + right.
    shift_mul: packed batches only, adds shift_mul * Nk_b to the diagonal of
    sequence b (Nk_b its key count): shift_b = Nk_b - Nq_b + causal_offset + shift_mul * Nk_b.
    window: (left, right), each None for unbounded.
    chunk: chunked attention's chunk size (kernels/tiles.py), 0 for none:
    row i sees only keys j with j // chunk == (i + shift) // chunk (besides
    the window), a runtime value (MASK_CHUNK is the compile-time switch).
    mods: the score modifications (kernels.score.KernelMods), None for none.
    lse_lo: None, or the compensated LSE's residual (dense calls only; the op
    layer passes it with a float bias): a (B, Hq, Nq) float32 view with lse's
    strides, Nq elements after lse (lse = buf[:, :, 0], lse_lo = buf[:, :, 1]
    of a (B, Hq, 2, Nq) buffer), written with lse2 + lse_lo = m + log2(l)
    (kernels/bwd.py takes it back).
    block_table: None, or a paged K / V (packed batches only, forward only):
    k (num_blocks, Hkv, page_size, d) and v (num_blocks, Hkv, page_size, dv)
    views of the page pools, block_table (B, max_blocks) int32; key j of
    sequence b (n_k_b = cu_k[b + 1] - cu_k[b] keys, cu_k's offsets unused)
    lies in page block_table[b, j // page_size], row j % page_size.
    """
    mods = mods or NO_MODS
    check_lse_lo(lse, lse_lo, cu_seqlens)
    h_q, d, dv = q.shape[1], q.shape[3], v.shape[3]
    h_kv = k.shape[1]
    if cu_seqlens is None:
        batch, n_q, n_k = q.shape[0], q.shape[2], k.shape[2]
        cu_q = cu_k = q  # unused placeholders
        lse_strides = (lse.stride(0), lse.stride(1))
        strides = (*q.stride(), *k.stride(), *v.stride(), *o.stride())
        rng_rows = n_q
    else:
        cu_q, cu_k = cu_seqlens
        batch = cu_q.shape[0] - 1
        n_q, n_k = max_seqlen
        lse_strides = (0, lse.stride(1))
        # Packed rows: no batch stride, row offsets come from cu_seqlens;
        # page pools: the page stride in the batch stride's place.
        strides = tuple(s for t in (q, k, v, o) for s in (0, *t.stride()[1:]))
        if block_table is not None:
            strides = (*strides[:4], *k.stride(), *v.stride(), *strides[12:])
        rng_rows = q.shape[2]
    left, right = window
    d_pad, dv_pad = head_dim_pad(d), head_dim_pad(dv)

    def grid(meta):
        return (cdiv(n_q, meta["BLOCK_M"]), batch * h_q)

    bucket = seq_bucket(max(n_q, n_k))
    _launch_fwd(
        grid, (q.dtype, d_pad, right is not None, bucket,
              variant_tag(mods, left, cu_seqlens is not None, chunk), dv_pad),
        # pointers
        q, k, v, o, lse, cu_q, cu_k, *mods.pointers(q),
        # strides
        *strides, *lse_strides, *mods.strides(),
        # shapes
        h_q, n_q, n_k, h_q // h_kv, rng_rows,
        # scalars
        sm_scale, causal_offset, shift_mul, left or 0, right or 0, bucket, *mods.scalars(), chunk,
        # paged K / V
        *((q, 0, 0) if block_table is None else (block_table, *block_table.stride())),
        # meta-parameters
        HEAD_DIM=d, HEAD_DIM_PAD=d_pad, EVEN_D=d == d_pad,
        HEAD_DIM_V=dv, HEAD_DIM_V_PAD=dv_pad, EVEN_DV=dv == dv_pad,
        SPLIT_QK=SPLIT_QK and split_qk(d, d_pad),
        IS_VARLEN=cu_seqlens is not None, MASK_LEFT=left is not None, MASK_RIGHT=right is not None,
        **mods.switches(q, with_sinks=True),
        REVERSE_M=right is not None, DOT_PRECISION=dot_precision(q.dtype), INTERPRET=INTERPRET,
        **({"LSE_LO": True} if lse_lo is not None else {}), MASK_CHUNK=chunk > 0,
        **({} if block_table is None else {"PAGED": True, "PAGE_SIZE": k.shape[2]}),
    )


def check_lse_lo(lse, lse_lo, cu_seqlens) -> None:
    """lse_lo (when given) lies where the kernels read it: lse's layout, Nq
    (lse's last dim) float32 elements after lse, dense batches only."""
    if lse_lo is None:
        return
    if (cu_seqlens is not None or lse.dim() != 3 or lse_lo.shape != lse.shape or lse_lo.stride() != lse.stride()
            or lse.stride(-1) != 1 or lse_lo.dtype != torch.float32
            or lse_lo.data_ptr() != lse.data_ptr() + lse.shape[-1] * 4):
        raise ValueError("lse_lo must be the (B, Hq, Nq) float32 view buf[:, :, 1] of a (B, Hq, 2, Nq) "
                         "buffer whose buf[:, :, 0] is lse (dense calls only)")


__all__ = ["attention_forward", "check_lse_lo", "split_qk"]
