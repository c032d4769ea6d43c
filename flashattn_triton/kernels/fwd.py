"""Forward kernel: tiled attention with online softmax.

One program owns a BLOCK_M tile of query rows of one (batch, query head) and
streams the K/V tiles of the matching KV head through on-chip memory.  Scores
are kept in base 2: s2 = (q . k) * scale * log2(e), so that exp(s - m) becomes
exp2(s2 - m2), which is what the hardware evaluates natively.  The running
max m2 and running sum l are float32 per row; the accumulator is rescaled by
exp2(m2_old - m2_new) whenever the max grows.  Only O and the natural-log
LSE = (m2 + log2 l) * ln(2) are written.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import (INTERPRET, Launcher, dot_precision, head_dim_pad,
                      load_tile, make_configs, mma, seq_bucket, store_tile)


def fwd_configs():
    """Ordered by preference: the first valid one is the no-autotune default."""
    return make_configs([
        # BLOCK_M, BLOCK_N, num_warps, num_stages
        (128, 64, 8, 3),
        (128, 64, 8, 4),
        (128, 64, 4, 3),
        (64, 64, 4, 4),
        (128, 128, 4, 3),
        (128, 128, 8, 3),
        (64, 32, 4, 2),
        (128, 32, 8, 2),
    ])


@triton.jit
def _fwd_kv_loop(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                 offs_m, offs_n, offs_d, start_n, end_n, N_K, qk_scale, causal_shift,
                 HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                 IS_CAUSAL: tl.constexpr, EVEN_D: tl.constexpr,
                 DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr):
    """Fold K/V tiles [start_n, end_n) into (acc, l_i, m_i).

    MASKED tiles may hold keys past N_K or (causal) keys after the diagonal;
    unmasked tiles are full and entirely visible to every row of the tile.
    k_ptrs / v_ptrs point at the tile starting at key start_n."""
    for start in range(start_n, end_n, BLOCK_N):
        cols = start + offs_n
        k = load_tile(k_ptrs, cols, N_K, offs_d, HEAD_DIM, MASKED, EVEN_D)
        s = mma(q, tl.trans(k), None, DOT_PRECISION, INTERPRET) * qk_scale
        if MASKED:
            keep = cols[None, :] < N_K
            if IS_CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None] + causal_shift)
            s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        if MASKED:
            # A row may have seen no key yet (m_new = -inf): subtract 0 instead,
            # so exp2(-inf - 0) = 0 rather than exp2(-inf + inf) = NaN.
            m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_ref = m_new
        p = tl.math.exp2(s - m_ref[:, None])
        alpha = tl.math.exp2(m_i - m_ref)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = load_tile(v_ptrs, cols, N_K, offs_d, HEAD_DIM, MASKED, EVEN_D)
        acc = mma(p.to(v.dtype), v, acc * alpha[:, None], DOT_PRECISION, INTERPRET)
        m_i = m_new
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    return acc, l_i, m_i


# Lengths and the causal shift stay runtime values: no specialisation on 1 or
# on divisibility, so one binary serves every length.
@triton.jit(do_not_specialize=["N_Q", "N_K", "causal_shift"])
def _attn_fwd(
    # pointers
    Q, K, V, O, LSE,
    # strides
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_oz, stride_oh, stride_om, stride_ok,
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
    off_hkv = (off_h // GROUP_SIZE).to(tl.int64)  # GQA: query head h reads KV head h // G
    off_h = off_h.to(tl.int64)

    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)

    # Batch/head/tile offsets in int64; the in-tile part stays 32-bit.
    q_ptrs = (Q + off_z * stride_qz + off_h * stride_qh + start_m.to(tl.int64) * stride_qm
              + tl.arange(0, BLOCK_M)[:, None] * stride_qm + offs_d[None, :] * stride_qk)
    k_ptrs = (K + off_z * stride_kz + off_hkv * stride_kh
              + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kk)
    v_ptrs = (V + off_z * stride_vz + off_hkv * stride_vh
              + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vk)

    q = load_tile(q_ptrs, offs_m, N_Q, offs_d, HEAD_DIM, True, EVEN_D)
    qk_scale = sm_scale * 1.4426950408889634  # scale * log2(e): scores in base 2

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], dtype=tl.float32)

    # Key range: row i sees j <= i + causal_shift.  Tiles below full_end are
    # seen whole by every row of this tile (no mask); [full_end, end_n) holds
    # the diagonal and the ragged end of K and is masked.
    if IS_CAUSAL:
        last_row = tl.minimum(start_m + BLOCK_M, N_Q) - 1
        end_n = tl.maximum(tl.minimum(N_K, last_row + causal_shift + 1), 0)
        full_end = tl.maximum(tl.minimum(N_K, start_m + causal_shift + 1), 0)
        full_end = (full_end // BLOCK_N) * BLOCK_N
    else:
        end_n = N_K
        full_end = (N_K // BLOCK_N) * BLOCK_N

    acc, l_i, m_i = _fwd_kv_loop(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                 offs_m, offs_n, offs_d, 0, full_end, N_K, qk_scale, causal_shift,
                                 HEAD_DIM, BLOCK_N, False, IS_CAUSAL, EVEN_D, DOT_PRECISION, INTERPRET)
    acc, l_i, m_i = _fwd_kv_loop(acc, l_i, m_i, q, k_ptrs + full_end.to(tl.int64) * stride_kn,
                                 v_ptrs + full_end.to(tl.int64) * stride_vn, stride_kn, stride_vn,
                                 offs_m, offs_n, offs_d, full_end, end_n, N_K, qk_scale, causal_shift,
                                 HEAD_DIM, BLOCK_N, True, IS_CAUSAL, EVEN_D, DOT_PRECISION, INTERPRET)

    # Rows that saw no key: l = 0 -> output 0 and LSE = -inf.
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)

    o_ptrs = (O + off_z * stride_oz + off_h * stride_oh + start_m.to(tl.int64) * stride_om
              + tl.arange(0, BLOCK_M)[:, None] * stride_om + offs_d[None, :] * stride_ok)
    store_tile(o_ptrs, out.to(O.dtype.element_ty), offs_m, N_Q, offs_d, HEAD_DIM, EVEN_D)
    # LSE is a contiguous (B, H_Q, N_Q) float32 tensor.
    tl.store(LSE + pid_bh.to(tl.int64) * N_Q + offs_m, lse, mask=offs_m < N_Q)


_launch_fwd = Launcher(
    _attn_fwd, "FWD", fwd_configs(), ("BLOCK_M", 1, 1),
    interpret_config=triton.Config({"BLOCK_M": 32, "BLOCK_N": 16}, num_warps=4, num_stages=1),
    # H200 sweep (benchmarks/results/h200/tune_sweep_1.log): 4 warps win at d <= 64.
    preferred={64: (128, 64, 4, 3)})


def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                      lse: torch.Tensor, sm_scale: float, causal_shift) -> None:
    """Launch the forward on (B, H, N, d)-indexed views (any strides, last one 1).

    q: (B, Hq, Nq, d); k, v: (B, Hkv, Nk, d); o like q, written in place;
    lse: contiguous float32 (B, Hq, Nq), written in place.
    causal_shift: None for no mask, else row i sees keys j <= i + causal_shift.
    """
    batch, h_q, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    d_pad = head_dim_pad(d)

    def grid(meta):
        return (triton.cdiv(n_q, meta["BLOCK_M"]), batch * h_q)

    _launch_fwd(
        grid,
        q, k, v, o, lse,
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        h_q, n_q, n_k, h_q // h_kv,
        sm_scale, 0 if causal_shift is None else causal_shift, seq_bucket(max(n_q, n_k)),
        HEAD_DIM=d, HEAD_DIM_PAD=d_pad, IS_CAUSAL=causal_shift is not None,
        EVEN_D=d == d_pad, DOT_PRECISION=dot_precision(q.dtype), INTERPRET=INTERPRET,
    )


__all__ = ["attention_forward", "fwd_configs"]
