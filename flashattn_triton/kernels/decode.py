"""Split-KV decoding ("flash-decoding") over a contiguous or a paged KV cache.

Decoding attends a few query tokens against a long cache: the work is bound by
reading K and V once, so the kernel is organised around that read.

* GQA read once.  One program owns one (batch, KV head) and a tile of rows;
  row r is query token ``r // G`` of query head ``h_kv * G + r % G`` (G query
  heads per KV head).  All G heads and all Nq tokens of a group sit in one
  tile, so every K/V tile is loaded once for all of them.
* Split-KV.  The key range of a sequence is cut into NUM_SPLITS contiguous
  runs of BLOCK_N tiles (grid axis 1); each split writes a float32 partial
  output and its LSE, and the last split of a tile to finish (an atomic
  counter per tile) merges them exactly by their LSEs, inside the same launch,
  and sets its counter back to 0: the counters live in a buffer kept per
  (device, stream), zeroed once when made, so a call launches no memset.
  (FLASHATTN_TRITON_DECODE_COMBINE=separate leaves the merge to the combine
  kernel of combine.py instead.)  With one split the kernel writes the final
  output directly.
* Paged cache.  Logical key j of sequence b lives in page
  ``block_table[b, j // PAGE_SIZE]`` at row ``j % PAGE_SIZE``.  When PAGE_SIZE
  is a multiple of BLOCK_N a tile never straddles pages and one page number is
  read per tile; otherwise (e.g. 16-token pages under 64-key tiles, or 48-token
  pages) the page is looked up per key row.
* Everything per-sequence (cache length, left padding, batch index, page
  table) is read on the device; the host never waits.

Key positions are absolute cache indices.  Sequence b sees keys
[leftpad_b, kv_end_b) with kv_end_b = cache_seqlens_b + N_NEW (the appended
tokens included), and query token i sits at key position
``i + kv_end_b - N_Q`` (flash-attn's bottom-right alignment), which anchors the
causal mask, the sliding window, the chunks of chunked attention (counted
from the sequence's first key leftpad_b: key j is in chunk
(j - leftpad_b) // chunk) and the ALiBi distance.
Scores are kept in base 2 (``s * scale * log2(e)``, exponentials by exp2);
LSEs leave the kernel in natural log.

``append_kv`` writes new K/V (rotated, for K, when cos/sin are given) into the
cache before the attention reads it; ``rotary_rows`` is the shared rotary
helper (interleaved pairs (0,1), (2,3), ... or GPT-NeoX halves (i, i + R/2)).
"""

from __future__ import annotations

import functools
import os
import threading
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

try:  # programmatic dependent launch (variant "pdl"); absent from some Triton releases
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    HAVE_GDC = True
except ImportError:  # pragma: no cover - depends on the installed Triton
    gdc_launch_dependents = gdc_wait = None
    HAVE_GDC = False

from . import fastlaunch
from .combine import cast_rtne, combine_partials, merge_init, merge_part
from .launch import (COMPILE_OPTIONS, INTERPRET, SMEM_BUDGET, cdiv, cuda_index, current_stream_handle,
                     dot_precision, env_snapshot, head_dim_pad, next_power_of_2, smem_budget)
from .tiles import chunk_end, chunk_start, mma, page_numbers

# Environment override of the launch config, read at call time, e.g.
# FLASHATTN_TRITON_CONFIG_DECODE="BLOCK_N=64,num_warps=4,num_stages=3" (BLOCK_M optional).
ENV_CONFIG = "FLASHATTN_TRITON_CONFIG_DECODE"
# "fused": the last split to finish merges the partials inside the decode
# kernel; "separate": a second kernel (combine.py's running merge) does;
# "gathered": a second kernel that loads every partial of its tile at once
# (combine.py's gathered merge), launched with PDL where it compiles.
ENV_COMBINE = "FLASHATTN_TRITON_DECODE_COMBINE"
COMBINE_MODES = ("fused", "separate", "gathered")
# The merge without ENV_COMBINE: at the split rule's small batch (4 x programs
# < SMs, decode_plan) and at any other batch.  Session 65 (H100, bench_decode,
# B = 1 / 8, N 1k-16k, two repeats): gathered over fused 1.07-1.26x at batch 1
# (geomean 1.15), 0.978-1.005x at batch 8 (docs/decode.md "The gathered merge").
DEFAULT_COMBINE_SMALL = "gathered"
DEFAULT_COMBINE = "fused"
# Variants for small-batch decoding (docs/decode.md, "Batch 1 on the H200"):
# DEFAULT_VARIANTS unless FLASHATTN_TRITON_DECODE_VARIANT names others, a comma
# list of VARIANTS ("deep,pdl"; "default" in it stands for the defaults),
# "default" or "none".  "deep" and "fill" act only on launches of one
# program per SM (4 x programs < SMs, the split rule's small batch); "pdl" too,
# and only on sm_90 and later.
#   deep: 5 pipeline stages of 64-key tiles (three K+V tiles in flight, 96 KiB,
#         instead of one);
#   fill: the split count of least modelled cost, not the smallest within 10%
#         of it (16 splits instead of 15 at batch 1 from 4k keys on 132 SMs:
#         128 programs instead of 120);
#   pdl:  programmatic dependent launch: the grid may be scheduled while the
#         previous kernel on the stream finishes; it reads and writes global
#         memory only after griddepcontrol.wait.
#   reserve: a decode call captured in a CUDA graph takes its merge counters
#         from a reserve zeroed by an earlier eager call, instead of a fresh
#         torch.zeros captured with it (one kernel node less per call).
# Candidate after session 16 (off by default; docs/decode.md, "Batch 1 on the H200"):
#   pair: two programs per SM at small batch: 64-key tiles over 4 stages (two
#         fit in an SM's shared memory) and the split rule counts two per SM.
# Candidates of session 32, default since session 33 (two processes each on the H200,
# docs/decode.md "Large batches" and "Paged caches at small batch"):
#   longpages: "pair" (two programs per SM, the split rule counting two per SM, its
#         split count without "fill") at small batch for caches of LONGPAGES_FROM keys
#         or more in pages smaller than a tile (per-row page lookups), whose tiles each
#         wait on a block-table load (docs/decode.md "Paged caches at small batch").
#   spread: when the split rule leaves a launch unsplit although the batch alone
#         makes 1-3 waves of SPREAD_PER_SM programs per SM with a last wave at
#         most half full, split it into at least SPREAD_WAVES waves (spread_splits).
# Candidate of session 66 and a default since then (H100 sweeps; docs/decode.md "Mid batches: one program per SM"):
#   solo: past the small batch, while the batch alone makes at most one program per SM
#         (SMs / 4 <= programs <= SMs: batch 5-16 with 8 KV heads on 132 SMs), the split
#         rule counts one program per SM, as at small batch, instead of two, where that
#         takes fewer splits; for contiguous caches only (16-token pages read 0.91-0.98x
#         so from 4k keys at batch 5, 6, 8 and 16; 256-token pages 0.88-1.31x, within the
#         15 % their timings move with the order they are taken in, so no verdict; pages of
#         256+ tokens since session 68: "solopages" below).
# Candidate of session 67 and a default since then (docs/decode.md "Batch 1, long caches:
# 128-key tiles"):
#   longtiles: at small batch and d = 97-128, for contiguous caches of LONGTILES_FROM keys or
#         more (and no window or chunk narrowing the keys a row sees below that), 128-key tiles over 3 stages
#         (two K+V tiles of 64 KiB each in shared memory at d = 128) instead of "deep"'s
#         64-key tiles over 5.
# Candidate of session 67 and a default since session 68 (docs/decode.md "Paged caches at mid batches"):
#   solopages: "solo" for paged caches of SOLOPAGES_MIN_PAGE tokens per page or more. Its first
#         form (pages of whole key tiles, 64+ tokens) missed its rule on an H100 (session 67
#         call 3: 64-token pages at batch 8 / 16 from 8k keys 0.980-0.990x in both repeats;
#         256-token pages 0.995-1.137x); this form met its own (session 68, H100: 256- and
#         1024-token pages at batch 5-16, 1k-32k keys, 46 re-planned rows, geomean 1.041).
# Measured slower on the H200 and removed in session 45 (last in commit 385b20b;
# docs/decode.md "Batch 1 on the H200"): "merge", "prefetch", "gather" (the fused
# merge's depth, L2 hints before the PDL wait, the merge as one gathered load) and
# "tma" (tiles read by tensor descriptors); in session 51 "wide" (128-key tiles
# over 3 stages, a candidate of session 16 that lost to "deep"; still in commit
# 0f7d7f6).
ENV_VARIANT = "FLASHATTN_TRITON_DECODE_VARIANT"
VARIANTS = ("deep", "fill", "pdl", "reserve", "pair", "spread", "longpages", "solo", "longtiles", "solopages")
# Removed variants -> the session that removed them (named so by the ValueError).
REMOVED_VARIANTS = {"merge": 45, "prefetch": 45, "gather": 45, "tma": 45, "wide": 51}
MERGE_STAGES = 3  # the fused merge's loop stages (two partials in flight)
LONGPAGES_FROM = 65536  # variant "longpages": cache capacities (keys) from which it acts
LONGTILES_FROM = 32768  # variant "longtiles": keys a row may see, from which it acts
SOLOPAGES_MIN_PAGE = 256  # variant "solopages": the smallest page size (tokens) it acts on
SPREAD_WAVES = 5  # variant "spread": waves of resident programs to aim for,
SPREAD_PER_SM = 3  # programs resident per SM (3 stages of 64-key tiles at d = 128: 64 KiB each),
SPREAD_MIN_TILES = 8  # the fewest key tiles a split keeps,
SPREAD_MAX_WAVES = 3  # and the most waves of an unsplit launch it acts on
# "reserve": int32 counters set aside per device for captured calls (4 MiB).
RESERVE_COUNTERS = 1 << 20
# Streaming multiprocessors assumed by the split heuristic for CPU tensors
# (interpreter): the heuristic must not depend on the machine running the tests.
CPU_SM_COUNT = 8
MAX_AUTO_SPLITS = 128
MAX_ROWS_PER_TILE = 64


class DecodeConfig(NamedTuple):
    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    num_stages: int


# ---------------------------------------------------------------------------
# Device helpers
# ---------------------------------------------------------------------------

@triton.jit
def tanh_f32(x):
    """tanh from exp2 (no tanh in tl across Triton versions or the interpreter)."""
    e = tl.math.exp2(-2.8853900817779268 * tl.abs(x))  # exp(-2|x|), 2 * log2(e) = 2.885...
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def rotary_rows(row_ptrs, row_mask, COS, SIN, pos, N_RO, stride_cs, offs_d,
                HEAD_DIM: tl.constexpr, ROTARY_DIM: tl.constexpr, INTERLEAVED: tl.constexpr):
    """Rows of x (pointers to element 0 of each row, last stride 1) rotated by
    the angles of row ``pos`` of the (seqlen_ro, ROTARY_DIM / 2) tables; float32.

    Pair (a, b) of a row becomes (a cos - b sin, a sin + b cos); the pairs are
    (2c, 2c+1) when INTERLEAVED, else (c, c + ROTARY_DIM/2), c < ROTARY_DIM/2.
    Columns from ROTARY_DIM on pass through, and so do rows whose position is
    outside the tables [0, N_RO)."""
    in_rot = offs_d < ROTARY_DIM
    if INTERLEAVED:
        partner = offs_d ^ 1
        c = offs_d // 2
        first = (offs_d % 2) == 0
    else:
        half = ROTARY_DIM // 2
        first = offs_d < half
        partner = tl.where(first, offs_d + half, offs_d - half)
        c = tl.where(first, offs_d, offs_d - half)
    partner = tl.where(in_rot, partner, offs_d)
    c = tl.where(in_rot, c, 0)
    x = tl.load(row_ptrs[:, None] + offs_d[None, :],
                mask=row_mask[:, None] & (offs_d[None, :] < HEAD_DIM), other=0.0).to(tl.float32)
    rot_mask = (row_mask & (pos >= 0) & (pos < N_RO))[:, None] & in_rot[None, :]
    xp = tl.load(row_ptrs[:, None] + partner[None, :], mask=rot_mask, other=0.0).to(tl.float32)
    cs_off = pos.to(tl.int64)[:, None] * stride_cs + c[None, :]
    cos = tl.load(COS + cs_off, mask=rot_mask, other=1.0).to(tl.float32)
    sin = tl.load(SIN + cs_off, mask=rot_mask, other=0.0).to(tl.float32)
    sin = tl.where(first[None, :], -sin, sin)
    return x * cos + xp * sin


@triton.jit
def kv_row_offsets(pos, pos_ok, z, kb, BLOCK_TABLE, stride_btz, stride_btn, stride_b, stride_n,
                   PAGED: tl.constexpr, PAGE_SIZE: tl.constexpr):
    """int64 offsets of logical positions ``pos`` of sequence z in a cache of
    strides (stride_b, stride_n) over (cache row or page, position): row kb of
    a contiguous cache, or the pages of the block table (entries read where
    pos_ok)."""
    if PAGED:
        page = tl.load(BLOCK_TABLE + z * stride_btz + (pos // PAGE_SIZE) * stride_btn, mask=pos_ok, other=0)
        off = page.to(tl.int64) * stride_b + (pos % PAGE_SIZE).to(tl.int64) * stride_n
    else:
        off = kb * stride_b + pos.to(tl.int64) * stride_n
    return off


# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------

@triton.jit
def chunk_rows(diag, kv_end, chunk):
    """chunk_lo: the first key of the chunk of each row's key position diag
    (chunked attention, kernels/tiles.py: the row sees keys
    chunk_lo <= j < chunk_lo + chunk), or kv_end, past every key the row may
    read, for rows before key 0 (diag < 0 sees nothing).  score.visible's
    rule with its one division per row made once per program instead of
    once per key tile: in the key loop the compiler does not hoist it (sm_90,
    d = 128, one split: 444 SASS instructions per tile, 548 with
    score.visible, 509 so)."""
    return tl.where(diag >= 0, chunk_start(tl.maximum(diag, 0), chunk), kv_end)


@triton.jit
def tile_softmax(q, k, cols, col_ok, row_ok, diag, slope, m_i, l_i, qk_scale, softcap, window_left, window_right,
                 chunk_lo, chunk,
                 HAS_SOFTCAP: tl.constexpr, HAS_ALIBI: tl.constexpr, HAS_WINDOW_LEFT: tl.constexpr,
                 HAS_WINDOW_RIGHT: tl.constexpr, MASK_CHUNK: tl.constexpr, DOT_PRECISION: tl.constexpr,
                 INTERPRET: tl.constexpr):
    """One key tile's step of the online softmax (base 2): the tile's
    probabilities p against the new running max, the factor alpha that
    rescales what came before, the new max and the new running sum.

    MASK_CHUNK: key j is kept only in the chunk of the row's key position,
    chunk_lo <= j < chunk_lo + chunk (chunk_lo from chunk_rows; tested as
    score.visible does, without forming chunk_lo + chunk: no int32 overflow)."""
    s = mma(q, tl.trans(k), None, DOT_PRECISION, INTERPRET) * qk_scale
    if HAS_SOFTCAP:
        s = softcap * tanh_f32(s)
    if HAS_ALIBI:
        s = s - slope[:, None] * tl.abs(diag[:, None] - cols[None, :]).to(tl.float32)
    keep = col_ok[None, :] & row_ok[:, None]
    if HAS_WINDOW_LEFT:
        keep = keep & (cols[None, :] >= diag[:, None] - window_left)
    if HAS_WINDOW_RIGHT:
        keep = keep & (cols[None, :] <= diag[:, None] + window_right)
    if MASK_CHUNK:
        keep = keep & (cols[None, :] >= chunk_lo[:, None]) & (cols[None, :] - chunk_lo[:, None] < chunk)
    s = tl.where(keep, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    # Rows that have seen no key yet keep m = -inf: subtract 0 instead.
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.math.exp2(s - m_ref[:, None])
    alpha = tl.math.exp2(m_i - m_ref)
    l_i = l_i * alpha + tl.sum(p, 1)
    return p, alpha, m_new, l_i


@triton.jit(do_not_specialize=["N_Q", "N_NEW", "N_CAP", "N_RO", "NUM_SPLITS", "window_left", "window_right",
                               "chunk"])
def _decode_fwd(
    # pointers
    Q, K, V, O, LSE, OP, LP, COUNTERS, SEQLENS, BATCH_IDX, LEFTPAD, BLOCK_TABLE, COS, SIN, ALIBI, SINKS,
    # strides
    stride_qz, stride_qm, stride_qh, stride_qk,
    stride_kb, stride_kn, stride_kh, stride_kk,
    stride_vb, stride_vn, stride_vh, stride_vk,
    stride_oz, stride_om, stride_oh, stride_ok,
    stride_lz, stride_lh, stride_lm,
    stride_ps, stride_pz, stride_pm, stride_ph, stride_pk,
    stride_qls, stride_qlz, stride_qlh, stride_qlm,
    stride_btz, stride_btn, stride_cs, stride_alz, stride_alh,
    # shapes
    N_Q, N_NEW, N_CAP, N_RO, H_KV, GROUP_SIZE, NUM_SPLITS,
    # scalars
    qk_scale, softcap, window_left, window_right, chunk,
    # meta-parameters
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, EVEN_D: tl.constexpr,
    PAGED: tl.constexpr, PAGE_SIZE: tl.constexpr, TILE_IN_PAGE: tl.constexpr,
    HAS_SEQLENS: tl.constexpr, HAS_BATCH_IDX: tl.constexpr, HAS_LEFTPAD: tl.constexpr,
    HAS_WINDOW_LEFT: tl.constexpr, HAS_WINDOW_RIGHT: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, HAS_ALIBI: tl.constexpr, HAS_SINKS: tl.constexpr,
    ROTARY_DIM: tl.constexpr, ROTARY_INTERLEAVED: tl.constexpr, ROTARY_Q_PER_TOKEN: tl.constexpr,
    SPLIT_MODE: tl.constexpr, DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr,
    USE_PDL: tl.constexpr, MERGE_STAGES: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    MASK_CHUNK: tl.constexpr = False,
):
    """One (batch, KV head, split, row tile).  qk_scale: scale * log2(e), or
    scale / softcap when HAS_SOFTCAP (then s2 = softcap * log2(e) * tanh(.),
    with ``softcap`` passed pre-multiplied by log2(e)).

    O (B, Nq, Hq, d) and LSE (B, Hq, Nq) receive the result.  SPLIT_MODE 0:
    one split writes them directly; 1: each split writes its float32 partial
    to OP (S, B, Nq, Hq, d) / LP (S, B, Hq, Nq), merged by the combine kernel
    afterwards; 2: the same, and the last split of each (batch, KV head, row
    tile) to finish, counted in COUNTERS (zeroed int32, one per such tile),
    merges them itself (no second launch).

    HAS_SINKS: SINKS (Hq,) float32 holds one logit per query head that joins
    the softmax denominator without a value.  It enters the final result only
    (SPLIT_MODE 0, or the merge of SPLIT_MODE 2; the combine kernel's for
    SPLIT_MODE 1): the partials stay sink-free.

    USE_PDL (launched with launch_pdl=True): the next kernel on the stream may
    be scheduled at once (it waits in its own griddepcontrol.wait for this
    grid to finish), and this one touches global memory only after its wait
    for the previous kernel (whose writes, e.g. the append or the last
    launch's counter resets, are then visible).

    MERGE_STAGES: partials in flight in the fused merge's loop, plus one."""
    if USE_PDL:
        gdc_launch_dependents()
    pid_zh = tl.program_id(0)
    split = tl.program_id(1)
    pid_m = tl.program_id(2)
    z = (pid_zh // H_KV).to(tl.int64)
    hk = pid_zh % H_KV
    if USE_PDL:
        gdc_wait()

    # Sequence bounds: keys [kv_lo, kv_end); query token i sits at key i + shift.
    if HAS_SEQLENS:
        seqlen = tl.load(SEQLENS + z)
    else:
        seqlen = N_CAP
    kv_end = tl.minimum(seqlen + N_NEW, N_CAP)
    if HAS_LEFTPAD:
        kv_lo = tl.load(LEFTPAD + z)
    else:
        kv_lo = 0
    shift = kv_end - N_Q
    if HAS_BATCH_IDX:
        kb = tl.load(BATCH_IDX + z).to(tl.int64)
    else:
        kb = z

    n_rows = N_Q * GROUP_SIZE
    row0 = pid_m * BLOCK_M
    rows = row0 + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    tok = rows // GROUP_SIZE
    head = hk * GROUP_SIZE + rows % GROUP_SIZE
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)

    # Keys any row of this tile may see, then this split's share of the tiles.
    lo = kv_lo
    hi = kv_end
    if HAS_WINDOW_LEFT:
        lo = tl.maximum(lo, row0 // GROUP_SIZE + shift - window_left)
    if HAS_WINDOW_RIGHT:
        hi = tl.minimum(hi, (tl.minimum(row0 + BLOCK_M, n_rows) - 1) // GROUP_SIZE + shift + window_right + 1)
    if MASK_CHUNK:
        # Chunked attention (kernels/tiles.py): token positions grow with the
        # row, and so do their chunks, so the tile's rows see keys from the
        # first token's chunk start to the last token's chunk end (the chunk
        # of position 0 for tokens before key 0, and nothing when every token
        # lies there); the key tiles outside are skipped, as kv_tile_range
        # does, and tile_softmax masks each row's keys of other chunks.
        # Chunks count from the sequence's first key kv_lo (cache_leftpad), so
        # positions are taken relative to it.
        p_first = row0 // GROUP_SIZE + shift - kv_lo
        p_last = (tl.minimum(row0 + BLOCK_M, n_rows) - 1) // GROUP_SIZE + shift - kv_lo
        lo = tl.maximum(lo, kv_lo + chunk_start(tl.maximum(p_first, 0), chunk))
        hi = tl.where(p_last < 0, 0, kv_lo + chunk_end(chunk_start(tl.maximum(p_last, 0), chunk), chunk, hi - kv_lo))
    lo = tl.maximum(lo, 0)
    blk_lo = lo // BLOCK_N
    blk_hi = (tl.maximum(hi, 0) + BLOCK_N - 1) // BLOCK_N
    n_blocks = (blk_hi - blk_lo) * (hi > lo).to(tl.int32)
    per_split = (n_blocks + NUM_SPLITS - 1) // NUM_SPLITS
    blk_start = blk_lo + split * per_split
    blk_end = tl.minimum(blk_start + per_split, blk_lo + n_blocks)

    # The query tile (rotated first if asked: flash-attn rotates q at position
    # cache_seqlens + i when causal or local, else every token at cache_seqlens).
    q_rows = Q + z * stride_qz + tok.to(tl.int64) * stride_qm + head.to(tl.int64) * stride_qh
    if ROTARY_DIM > 0:
        if ROTARY_Q_PER_TOKEN:
            pos = seqlen + tok
        else:
            pos = seqlen + tok * 0
        q = cast_rtne(rotary_rows(q_rows, row_ok, COS, SIN, pos, N_RO, stride_cs, offs_d,
                                  HEAD_DIM, ROTARY_DIM, ROTARY_INTERLEAVED), Q.dtype.element_ty, INTERPRET)
    else:
        if EVEN_D:
            q = tl.load(q_rows[:, None] + offs_d[None, :] * stride_qk, mask=row_ok[:, None], other=0.0)
        else:
            q = tl.load(q_rows[:, None] + offs_d[None, :] * stride_qk,
                        mask=row_ok[:, None] & (offs_d[None, :] < HEAD_DIM), other=0.0)

    diag = tok + shift
    if MASK_CHUNK:
        chunk_lo = kv_lo + chunk_rows(diag - kv_lo, kv_end - kv_lo, chunk)
    else:
        chunk_lo = diag  # unused
    if HAS_ALIBI:
        # -slope * |i + shift - j| in base 2.
        slope = tl.load(ALIBI + z * stride_alz + head * stride_alh, mask=row_ok, other=0.0)
        slope = slope.to(tl.float32) * 1.4426950408889634

    k_head = K + hk.to(tl.int64) * stride_kh
    v_head = V + hk.to(tl.int64) * stride_vh
    d_ok = offs_d[None, :] < HEAD_DIM

    # Paged caches: the page numbers of a tile are read one iteration ahead,
    # so the K/V addresses never wait on a block-table load in the same step.
    start0 = blk_start * BLOCK_N
    end_col = blk_end * BLOCK_N
    bt = BLOCK_TABLE + z * stride_btz
    if PAGED:
        page = page_numbers(bt, stride_btn, start0, offs_n, end_col, kv_lo, kv_end, PAGE_SIZE, TILE_IN_PAGE)

    # The sink is the first term of the running softmax (one split: here;
    # several: in the merge).
    m_i, l_i, acc = merge_init(SINKS, head, row_ok, HAS_SINKS and SPLIT_MODE == 0, BLOCK_M, HEAD_DIM_PAD)
    if not HAS_ALIBI:
        slope = 0.0  # unused
    for start in range(start0, end_col, BLOCK_N):
        cols = start + offs_n
        col_ok = (cols >= kv_lo) & (cols < kv_end)
        if PAGED:
            within = (cols % PAGE_SIZE).to(tl.int64)
            k_off = page * stride_kb + within * stride_kn
            v_off = page * stride_vb + within * stride_vn
            page = page_numbers(bt, stride_btn, start + BLOCK_N, offs_n, end_col, kv_lo, kv_end,
                                PAGE_SIZE, TILE_IN_PAGE)
        else:
            k_off = kb * stride_kb + cols.to(tl.int64) * stride_kn
            v_off = kb * stride_vb + cols.to(tl.int64) * stride_vn
        if EVEN_D:
            k = tl.load(k_head + k_off[:, None] + offs_d[None, :] * stride_kk,
                        mask=col_ok[:, None], other=0.0)
        else:
            k = tl.load(k_head + k_off[:, None] + offs_d[None, :] * stride_kk,
                        mask=col_ok[:, None] & d_ok, other=0.0)
        p, alpha, m_new, l_i = tile_softmax(q, k, cols, col_ok, row_ok, diag, slope, m_i, l_i, qk_scale,
                                            softcap, window_left, window_right, chunk_lo, chunk, HAS_SOFTCAP,
                                            HAS_ALIBI, HAS_WINDOW_LEFT, HAS_WINDOW_RIGHT, MASK_CHUNK,
                                            DOT_PRECISION, INTERPRET)
        if EVEN_D:
            v = tl.load(v_head + v_off[:, None] + offs_d[None, :] * stride_vk,
                        mask=col_ok[:, None], other=0.0)
        else:
            v = tl.load(v_head + v_off[:, None] + offs_d[None, :] * stride_vk,
                        mask=col_ok[:, None] & d_ok, other=0.0)
        acc = mma(p.to(v.dtype), v, acc * alpha[:, None], DOT_PRECISION, INTERPRET)
        m_i = m_new

    # Rows (or splits) that saw no key: output 0, LSE -inf (with a sink, in
    # SPLIT_MODE 0: l = 1, so output 0 and LSE = sink).
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)

    tok64 = tok.to(tl.int64)
    head64 = head.to(tl.int64)
    o_mask = row_ok[:, None] & d_ok
    if SPLIT_MODE == 0:  # one split: the final result
        o_ptrs = (O + z * stride_oz + tok64[:, None] * stride_om + head64[:, None] * stride_oh
                  + offs_d[None, :] * stride_ok)
        tl.store(o_ptrs, cast_rtne(out, O.dtype.element_ty, INTERPRET), mask=o_mask)
        tl.store(LSE + z * stride_lz + head64 * stride_lh + tok64 * stride_lm, lse, mask=row_ok)
    else:  # this split's float32 partial
        p_rows = OP + z * stride_pz + tok64 * stride_pm + head64 * stride_ph
        p_ptrs = p_rows[:, None] + offs_d[None, :] * stride_pk
        pl_ptrs = LP + z * stride_qlz + head64 * stride_qlh + tok64 * stride_qlm
        split64 = split.to(tl.int64)
        tl.store(p_ptrs + split64 * stride_ps, out, mask=o_mask)
        tl.store(pl_ptrs + split64 * stride_qls, lse, mask=row_ok)
        if SPLIT_MODE == 2:
            # The last split of this (batch, KV head, row tile) to finish merges
            # all of them: the barrier orders every thread's partial stores
            # before the counter's release, the acquire orders the reads after.
            tl.debug_barrier()
            count = tl.atomic_add(COUNTERS + pid_zh * tl.num_programs(2) + pid_m, 1, sem="acq_rel", scope="gpu")
            if count == NUM_SPLITS - 1:
                # Every split of this tile has counted: reset the counter for the
                # next launch on the stream (kernel boundaries order it after).
                tl.store(COUNTERS + pid_zh * tl.num_programs(2) + pid_m, 0)
                # The sink as one more part: lse = sink, output 0.
                m_c, l_c, acc_c = merge_init(SINKS, head, row_ok, HAS_SINKS, BLOCK_M, HEAD_DIM_PAD)
                for sp in tl.range(0, NUM_SPLITS, num_stages=MERGE_STAGES):
                    # .cg: read the other splits' partials from L2, never from a stale L1 line.
                    lse_s = tl.load(pl_ptrs + sp * stride_qls, mask=row_ok, other=float("-inf"),
                                    cache_modifier=".cg") * 1.4426950408889634
                    out_s = tl.load(p_ptrs + sp * stride_ps, mask=o_mask, other=0.0, cache_modifier=".cg")
                    m_c, l_c, acc_c = merge_part(m_c, l_c, acc_c, lse_s, out_s)
                empty_c = l_c == 0.0
                l_safe_c = tl.where(empty_c, 1.0, l_c)
                o_ptrs = (O + z * stride_oz + tok64[:, None] * stride_om + head64[:, None] * stride_oh
                          + offs_d[None, :] * stride_ok)
                tl.store(o_ptrs, cast_rtne(acc_c / l_safe_c[:, None], O.dtype.element_ty, INTERPRET), mask=o_mask)
                tl.store(LSE + z * stride_lz + head64 * stride_lh + tok64 * stride_lm,
                         tl.where(empty_c, float("-inf"), (m_c + tl.math.log2(l_safe_c)) * 0.6931471805599453),
                         mask=row_ok)


@triton.jit(do_not_specialize=["N_NEW", "N_CAP", "N_RO"])
def _append_kv(
    # pointers
    KNEW, VNEW, K, V, SEQLENS, BATCH_IDX, BLOCK_TABLE, COS, SIN,
    # strides
    stride_knz, stride_knn, stride_knh, stride_knk,
    stride_vnz, stride_vnn, stride_vnh, stride_vnk,
    stride_kb, stride_kn, stride_kh, stride_kk,
    stride_vb, stride_vn, stride_vh, stride_vk,
    stride_btz, stride_btn, stride_cs,
    # shapes
    N_NEW, N_CAP, N_RO, H_KV,
    # meta-parameters
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    PAGED: tl.constexpr, PAGE_SIZE: tl.constexpr, HAS_BATCH_IDX: tl.constexpr,
    ROTARY_DIM: tl.constexpr, ROTARY_INTERLEAVED: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    """Write new tokens t of (batch z, KV head hk) at cache position
    cache_seqlens[z] + t; K rotated at that position when ROTARY_DIM > 0.
    Positions at or past the capacity N_CAP are dropped (never written)."""
    pid_zh = tl.program_id(0)
    pid_t = tl.program_id(1)
    z = (pid_zh // H_KV).to(tl.int64)
    hk = (pid_zh % H_KV).to(tl.int64)
    seqlen = tl.load(SEQLENS + z)
    if HAS_BATCH_IDX:
        kb = tl.load(BATCH_IDX + z).to(tl.int64)
    else:
        kb = z
    t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    pos = seqlen + t
    ok = (t < N_NEW) & (pos < N_CAP) & (pos >= 0)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask = ok[:, None] & (offs_d[None, :] < HEAD_DIM)

    k_rows = KNEW + z * stride_knz + t.to(tl.int64) * stride_knn + hk * stride_knh
    if ROTARY_DIM > 0:
        k = rotary_rows(k_rows, ok, COS, SIN, pos, N_RO, stride_cs, offs_d,
                        HEAD_DIM, ROTARY_DIM, ROTARY_INTERLEAVED)
    else:
        k = tl.load(k_rows[:, None] + offs_d[None, :] * stride_knk, mask=mask, other=0.0)
    v = tl.load(VNEW + z * stride_vnz + t.to(tl.int64)[:, None] * stride_vnn + hk * stride_vnh
                + offs_d[None, :] * stride_vnk, mask=mask, other=0.0)

    k_off = kv_row_offsets(pos, ok, z, kb, BLOCK_TABLE, stride_btz, stride_btn, stride_kb, stride_kn,
                           PAGED, PAGE_SIZE)
    v_off = kv_row_offsets(pos, ok, z, kb, BLOCK_TABLE, stride_btz, stride_btn, stride_vb, stride_vn,
                           PAGED, PAGE_SIZE)
    if ROTARY_DIM > 0:
        k = cast_rtne(k, K.dtype.element_ty, INTERPRET)
    tl.store(K + hk * stride_kh + k_off[:, None] + offs_d[None, :] * stride_kk,
             k.to(K.dtype.element_ty), mask=mask)
    tl.store(V + hk * stride_vh + v_off[:, None] + offs_d[None, :] * stride_vk,
             v.to(V.dtype.element_ty), mask=mask)


# ---------------------------------------------------------------------------
# Launch
# ---------------------------------------------------------------------------

def combine_mode(small: bool = False) -> str:
    """Where a split decode merges its partials (ENV_COMBINE, one of
    COMBINE_MODES): in the decode kernel ("fused") or in a second kernel
    ("separate", "gathered").  Unset, DEFAULT_COMBINE_SMALL at the split
    rule's small batch (``small``), else DEFAULT_COMBINE."""
    mode = os.environ.get(ENV_COMBINE)
    if mode is None:
        mode = DEFAULT_COMBINE_SMALL if small else DEFAULT_COMBINE
    if mode not in COMBINE_MODES:
        raise ValueError(f"{ENV_COMBINE}={mode!r}: expected one of {', '.join(map(repr, COMBINE_MODES))}")
    return mode


def _config_from_env() -> Optional[dict]:
    text = os.environ.get(ENV_CONFIG)
    if not text:
        return None
    fields = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        try:
            fields[key.strip()] = int(value)
        except ValueError as exc:
            raise ValueError(f"{ENV_CONFIG}={text!r}: {part!r} is not NAME=INT") from exc
    unknown = set(fields) - {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages"}
    if unknown:
        raise ValueError(f"{ENV_CONFIG}={text!r}: unknown fields {sorted(unknown)}")
    return fields


def decode_config(n_rows: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> DecodeConfig:
    """Tile sizes and launch parameters.

    BLOCK_M holds all rows of a KV group (query heads x tokens), at least 16
    (the smallest dot) and at most 64 (32 in float32); more rows take more row
    tiles.  BLOCK_N = 64 keys streamed through 3 pipeline stages (a 64 x 128
    bf16 K tile and its V tile are 32 KiB per stage); 32 at head dim 256, 16
    for float32 there.  8 warps once the accumulator reaches 4096 float32.
    In bf16/fp16 these choices compile for sm_90 without register spills
    (Triton 3.6: compile_check.py --kernels DECODE,COMBINE); float32 caches
    spill in some builds (4-1076 B, docs/decode.md).  Not tuned on the H200
    yet (bench_decode.py --configs)."""
    elem = torch.finfo(dtype).bits // 8
    max_rows = MAX_ROWS_PER_TILE if elem <= 2 else MAX_ROWS_PER_TILE // 2
    block_m = max(16, next_power_of_2(min(max(n_rows, 1), max_rows)))
    d_pad = head_dim_pad(head_dim)
    if device.type == "cpu":  # the interpreter: fewer, larger steps are faster
        cfg = dict(BLOCK_M=block_m, BLOCK_N=32, num_warps=4, num_stages=1)
    else:
        block_n = 64 if d_pad <= 128 else (32 if elem <= 2 else 16)
        cfg = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=8 if block_m * d_pad >= 4096 else 4,
                   num_stages=3)
    env = _config_from_env()
    if env:
        cfg.update(env)
    for name in ("BLOCK_M", "BLOCK_N"):
        if cfg[name] < 16 or cfg[name] & (cfg[name] - 1):
            raise ValueError(f"decode config {name}={cfg[name]} must be a power of two >= 16")
    return DecodeConfig(**cfg)


def decode_smem(cfg: DecodeConfig, head_dim: int, elem: int) -> int:
    """Modelled shared memory of a decode launch (bytes): the num_stages - 1
    K + V tiles Triton's pipeliner buffers, (elem + 8) bytes per element of
    a (BLOCK_M, d) tile (the rows' tile in the cache's dtype and float32
    scratch, which Triton sizes by the largest layout change it makes), and
    1 KiB.  At least what the builds take (compile_check --kernels DECODE,
    Triton 3.6: bf16, 16-row tiles, 3 stages, 36,864 / 71,680 / 74,752 B at
    d = 64 / 128 / 256, model 44,032 / 87,040 / 107,520; 64 rows at d = 256
    132,096 with 32-key tiles and 3 stages, 132,096 with 16-key tiles and 2,
    model 230,400 / 181,248; 5 stages at d = 128 137,216, model 152,576;
    float32 at d = 128 143,424, model 156,672).  compile_check.py --kernels
    DECODE --arch 89 builds the plans for a GPU and fails a build over its
    limit."""
    d_pad = head_dim_pad(head_dim)
    return (max(cfg.num_stages - 1, 1) * cfg.BLOCK_N * 2 * d_pad * elem + cfg.BLOCK_M * d_pad * (elem + 8)
            + 1024)


def fit_decode_config(cfg: DecodeConfig, head_dim: int, elem: int, budget: int) -> DecodeConfig:
    """cfg with fewer pipeline stages (down to 2), then fewer rows per tile
    (more row tiles), then narrower key tiles (each down to 16), until
    decode_smem fits budget: 64-row tiles at d = 256 need more than the 99
    KiB of sm_86 / sm_89, the defaults at d = 128 more than sm_75's 64."""
    while decode_smem(cfg, head_dim, elem) > budget and cfg.num_stages > 2:
        cfg = cfg._replace(num_stages=cfg.num_stages - 1)
    while decode_smem(cfg, head_dim, elem) > budget and cfg.BLOCK_M > 16:
        cfg = cfg._replace(BLOCK_M=cfg.BLOCK_M // 2)
    while decode_smem(cfg, head_dim, elem) > budget and cfg.BLOCK_N > 16:
        cfg = cfg._replace(BLOCK_N=cfg.BLOCK_N // 2)
    return cfg


# The shared-memory budget from which "pair" (two programs per SM) plans:
# Hopper's 227 KiB, where it was measured; GPUs with 163 KiB or less fit one.
PAIR_MIN_BUDGET = 200 * 1024


def device_smem_budget(device: torch.device) -> int:
    """The shared-memory budget of a launch on device (launch.smem_budget for
    a CUDA device; Hopper's, launch.SMEM_BUDGET, for the meta device that
    compile_check.py compiles for, and on CPU)."""
    if device.type != "cuda":
        return SMEM_BUDGET
    return smem_budget(cuda_index(device))


@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def sm_count(device: torch.device) -> int:
    """Multiprocessors of a CUDA device (host-side properties, cached); a constant on CPU."""
    if device.type != "cuda":
        return CPU_SM_COUNT
    index = cuda_index(device)
    return _sm_count(index)


def local_span(n_q: int, window_left: int, window_right: int, chunk: int) -> int:
    """The most keys a row tile of n_q query tokens can see under a window
    (causal is window_right = 0) or chunks, 0 when unbounded.  Tokens at
    consecutive positions p_0 .. p_l = p_0 + n_q - 1 see keys from
    max(p_0 - left, chunk start of p_0) to min(p_l + right, chunk end of p_l):
    the window alone spans left + right + n_q keys, the chunks alone at most
    cdiv(n_q - 1, chunk) + 1 chunks, and one side of each together (a chunk
    starts at most chunk - 1 keys before its position, and ends at most chunk
    keys after) n_q + right + chunk - 1 or n_q + left + chunk - 1."""
    spans = []
    if window_left >= 0 and window_right >= 0:
        spans.append(window_left + window_right + n_q)
    if chunk > 0:
        spans.append((cdiv(n_q - 1, chunk) + 1) * chunk)
        spans += [n_q + side + chunk - 1 for side in (window_left, window_right) if side >= 0]
    return min(spans) if spans else 0


def choose_num_splits(programs: int, n_keys: int, block_n: int, n_sm: int,
                      max_splits: int = MAX_AUTO_SPLITS, tolerance: float = 1.1, per_sm: int = 0) -> int:
    """Split count for ``programs`` (batch x KV heads x row tiles) programs
    over at most ``n_keys`` keys (the cache capacity, or the tiles a window or
    the chunks leave a row tile, decode_plan's ``span``: lengths on the
    device are never read).

    Decoding is bound by memory bandwidth, so the aim is enough programs in
    flight to keep every SM streaming.  A program's time is taken as its
    share of the key tiles plus a fixed cost of two tiles (prologue, partial
    write), and the merge adds an eighth of a tile per split (the last split
    reads every partial); the count that minimises
    waves x (tiles per split + 2) + splits / 8 wins.  A wave is two programs
    per SM, or one when the batch is small (programs < SMs / 4): then one
    long-streaming program per SM beat two short ones on the H200 (batch 1,
    8 KV heads: 16 splits read a 4k-16k cache 1.14-1.33x faster than 29-32,
    session8/call2/bench_decode_b1_sweep.md).  Batch 1 with 8 KV heads on 132
    SMs gets 8 splits at 1k keys, 13 at 4k, 15 from 8k up; 512 programs get 1.  The
    smallest count within ``tolerance`` (10%) of the best wins (variant "fill":
    1.0, the best itself; 16 splits from 4k up at batch 1).  ``per_sm`` > 0
    sets the programs per SM of a wave instead (variant "pair": 2, "solo": 1)."""
    n_tiles = max(1, cdiv(n_keys, block_n))
    slots = (per_sm or (1 if 4 * programs < n_sm else 2)) * max(1, n_sm)
    costs = []
    for splits in range(1, max(1, min(max_splits, n_tiles)) + 1):
        waves = cdiv(programs * splits, slots)
        costs.append(waves * (cdiv(n_tiles, splits) + 2) + splits / 8)
    best = min(costs)
    return next(i + 1 for i, c in enumerate(costs) if c <= tolerance * best)


def spread_splits(programs: int, n_keys: int, block_n: int, n_sm: int) -> int:
    """Split count of variant "spread" for a launch choose_num_splits leaves
    unsplit, or 0 where it keeps it so: when the batch alone makes between one
    and SPREAD_MAX_WAVES waves of SPREAD_PER_SM resident programs per SM and
    the last wave is at most half full, the fewest splits that make
    SPREAD_WAVES waves if each keeps at least SPREAD_MIN_TILES key tiles.
    (choose_num_splits counts two resident programs per SM; at d = 128 three
    fit, so 512 programs look like two full waves to it and are 1.3.)

    Why: programs of equal length run in waves, and a last wave that is
    mostly empty streams with few programs per SM.  On the H200 (session 32,
    Hq = 32, Hkv = 8, d = 128, bf16) batch 64 (512 programs, 1.3 waves of
    three per SM) read 3830 / 3861 GB/s unsplit at 8k / 32k keys and 4296 /
    4512 with 4 splits (5.2 waves); a first form that split every launch of
    two or more programs per SM read 1.08-1.17x at batch 64 from 4k but
    0.97-0.99x at batch 48 (0.97 waves: no tail to cut) and 0.93-1.05x at
    batch 128 (2.6 waves: a tail 60 % full); a second, acting on the waves
    alone, split batch 72 and 112 too (0.92-0.99x and 0.98-1.01x: there
    choose_num_splits already splits 2 ways), and batch 64 read 1.08-1.16x
    from 4k again."""
    waves = programs / (SPREAD_PER_SM * max(1, n_sm))
    tail = waves - int(waves)
    if waves < 1 or waves >= SPREAD_MAX_WAVES or tail == 0 or tail > 0.5:
        return 0
    n_tiles = max(1, cdiv(n_keys, block_n))
    want = cdiv(SPREAD_WAVES * SPREAD_PER_SM * max(1, n_sm), programs)
    if want > min(n_tiles // SPREAD_MIN_TILES, MAX_AUTO_SPLITS):
        return 0  # too few keys for the waves (batch 72 at 1k read 0.92x with 2 splits)
    return want


# The variants on when ENV_VARIANT is unset or "default" ("none": none of them).
# Session 16 on the H200 (benchmarks/history/gpu_next_decode.sh, its rule, two repeats;
# Hq=32, Hkv=8, d=128, bf16, CUDA graphs): deep+fill+pdl+reserve read K+V at
# 1.08-1.22x the plain launch's rate at batch 1 (N = 1k..64k) and 1.00-1.08x
# at batch 8, where only "reserve" acts.  Session 33 added "spread" (B = 56-64
# at 4k-16k keys: 1.08-1.16x) and "longpages" (B = 1, 16-token pages, 64k /
# 128k keys: 1.12-1.29x); on every other row their plans are those of before.
# Session 66 added "solo" (H100, B = 5-16, 1k-32k keys, contiguous caches: the
# 50 re-planned rows 1.003-1.12x, geomean 1.055-1.056, both timing orders;
# docs/decode.md "Mid batches: one program per SM"). Session 67 added "longtiles" (H100,
# B = 1-4, contiguous, 32k-128k keys: the 9 re-planned rows 1.006-1.125x, geomean 1.020,
# both timing orders). Session 68 added "solopages" (H100, B = 5-16, 256- and 1024-token pages,
# 1k-32k keys: 46 re-planned rows, geomean 1.041, both timing orders).
DEFAULT_VARIANTS = frozenset({"deep", "fill", "pdl", "reserve", "spread", "longpages", "solo", "longtiles",
                              "solopages"})


def decode_variants() -> frozenset:
    """The small-batch variants in force: ENV_VARIANT's list, DEFAULT_VARIANTS
    when it is unset or "default", none when it is "none"."""
    return _parse_variants(os.environ.get(ENV_VARIANT, "default"))


@functools.lru_cache(maxsize=16)
def _parse_variants(text: str) -> frozenset:
    """ENV_VARIANT's value as a set of VARIANTS (parsed once per value: the
    plan and the counters read it on every decode call); "default" in a list
    stands for DEFAULT_VARIANTS ("default,spread": the defaults and spread)."""
    names = frozenset(x.strip() for x in text.split(",") if x.strip())
    if names <= {"default"}:
        return DEFAULT_VARIANTS
    if names == {"none"}:
        return frozenset()
    unknown = names - set(VARIANTS) - {"default"}
    if unknown:
        sessions = sorted({REMOVED_VARIANTS[name] for name in unknown if name in REMOVED_VARIANTS})
        note = "".join(f" ({sorted(n for n in unknown if REMOVED_VARIANTS.get(n) == s)} measured slower and "
                       f"were removed in session {s})" for s in sessions)
        raise ValueError(f"{ENV_VARIANT}={text!r}: unknown variants {sorted(unknown)}; known: {VARIANTS}{note}")
    return (names - {"default"}) | (DEFAULT_VARIANTS if "default" in names else frozenset())


@functools.lru_cache(maxsize=None)
def _capability(device_index: int) -> int:
    major, _ = torch.cuda.get_device_capability(device_index)
    return major


def _sm90_or_later(device: torch.device) -> bool:
    """A CUDA device of compute capability 9 or more, or the meta device
    (compile_check.py's stand-in for the GPU it compiles for)."""
    return device.type == "meta" or _capability(cuda_index(device)) >= 9


def pdl_supported(device: torch.device) -> bool:
    """Programmatic dependent launch: compiled code on sm_90 or later (the
    meta device stands for the GPU in compile_check.py); never interpreted."""
    if INTERPRET or device.type == "cpu" or not HAVE_GDC:
        return False
    return _sm90_or_later(device)


class DecodePlan(NamedTuple):
    config: DecodeConfig
    num_splits: int
    row_tiles: int
    use_pdl: bool
    merge: str  # combine_mode's: where the partials of a split merge


# decode_plan's results by its arguments and _plan_world(): a decode call's
# host time was about a quarter planning (session 59, H100, cProfile of
# history/host_profile_decode.py).
_PLANS: dict = {}
MAX_PLANS = 1024


_WORLD_ENV = (ENV_VARIANT, ENV_CONFIG, ENV_COMBINE)


def _plan_world() -> tuple:
    """What a plan depends on besides its arguments: the environment switches
    (raw, read in one pass: the eager call plans check this on every replay)
    and the module's tables and functions (tests and tools replace them)."""
    return (env_snapshot(_WORLD_ENV), DEFAULT_VARIANTS, DEFAULT_COMBINE_SMALL, DEFAULT_COMBINE, CPU_SM_COUNT,
            LONGPAGES_FROM, LONGTILES_FROM, SOLOPAGES_MIN_PAGE, PAIR_MIN_BUDGET, SPREAD_WAVES, SPREAD_PER_SM,
            SPREAD_MIN_TILES, SPREAD_MAX_WAVES,
            MAX_AUTO_SPLITS, MAX_ROWS_PER_TILE, INTERPRET, HAVE_GDC, decode_config, fit_decode_config, decode_smem,
            device_smem_budget, sm_count, choose_num_splits, spread_splits, pdl_supported, _sm90_or_later,
            combine_mode)


def decode_plan(batch: int, n_rows: int, h_kv: int, head_dim: int, n_cap: int, dtype: torch.dtype,
                device: torch.device, num_splits: int = 0, page_size: int = 0, span: int = 0) -> DecodePlan:
    """Launch config, split count (num_splits, or chosen when 0), PDL and merge of one
    decode launch, from host-side numbers only, with the ENV_VARIANT switches
    applied (page_size: the paged cache's page size, 0 for a contiguous cache).
    ENV_CONFIG overrides a variant's tile and pipeline choices.

    span > 0: the most keys one row tile can see (a window's or the chunks'
    width, local_span); the split count is then planned over the key tiles
    such a run touches, not over the whole capacity.

    Made once per arguments and _plan_world() (kept in _PLANS)."""
    key = (batch, n_rows, h_kv, head_dim, n_cap, dtype, device, num_splits, page_size, span, _plan_world())
    plan = _PLANS.get(key)
    if plan is None:
        plan = _make_plan(batch, n_rows, h_kv, head_dim, n_cap, dtype, device, num_splits, page_size, span)
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def _make_plan(batch: int, n_rows: int, h_kv: int, head_dim: int, n_cap: int, dtype: torch.dtype,
               device: torch.device, num_splits: int, page_size: int, span: int) -> DecodePlan:
    """decode_plan's work (see there)."""
    variants = decode_variants()
    elem = torch.finfo(dtype).bits // 8
    budget = device_smem_budget(device)
    cfg = decode_config(n_rows, head_dim, dtype, device)
    forced = _config_from_env()
    if not forced:
        cfg = fit_decode_config(cfg, head_dim, elem, budget)
    n_sm = sm_count(device)
    row_tiles = cdiv(n_rows, cfg.BLOCK_M)
    programs = batch * h_kv * row_tiles
    # The split rule's small batch: one program per SM, each streaming a long run.
    small = 4 * programs < n_sm
    # "longpages": "pair" (without "fill"'s split count) for long caches in pages smaller than a tile.
    long_pages = ("longpages" in variants and 0 < page_size < cfg.BLOCK_N and n_cap >= LONGPAGES_FROM
                  and "pair" not in variants)
    pair = small and ("pair" in variants or long_pages)
    # "solo": one program per SM in the split rule's waves while the batch fills at most one.
    # "solopages": the same for paged caches of SOLOPAGES_MIN_PAGE tokens or more per page.
    solo = not small and programs <= n_sm and ("solo" in variants and page_size == 0
                                               or "solopages" in variants and page_size >= SOLOPAGES_MIN_PAGE)
    # "longtiles": 128-key tiles for long contiguous caches (as long as a window or the chunks
    # leave a row at least LONGTILES_FROM keys), at d = 97-128, where it was timed.
    long_tiles = ("longtiles" in variants and page_size == 0 and not pair and head_dim_pad(head_dim) == 128
                  and (n_cap if span <= 0 else min(n_cap, span)) >= LONGTILES_FROM)
    if small and elem <= 2 and head_dim_pad(head_dim) <= 128 and (variants & {"deep", "pair"} or pair or long_tiles):
        if pair:
            # Three buffers of 64-key tiles (102 KiB at d = 128): two programs fit in an SM.
            tile = dict(BLOCK_N=cfg.BLOCK_N, num_stages=4)
        elif long_tiles:
            # Two buffers of 128-key K and V tiles (128 KiB at d = 128): two tiles in flight,
            # half as many loop steps (and row max / sum reductions) per key as 64-key tiles.
            tile = dict(BLOCK_N=128, num_stages=3)
        else:
            # Two more buffers of 64-key tiles (Triton keeps num_stages - 1 in
            # shared memory, 70 -> 134 KiB at d = 128): three tiles in flight.
            tile = dict(BLOCK_N=cfg.BLOCK_N, num_stages=5)
        if device.type == "cpu":  # the interpreter has no pipeline: only the tile size matters
            tile["num_stages"] = cfg.num_stages
        tile.update(forced or {})
        wider = cfg._replace(**{k: v for k, v in tile.items() if k in cfg._fields})
        # Measured on the H200 (227 KiB): where the GPU has less shared memory
        # (163 KiB on A100, 99 on sm_86 / sm_89) a tile that does not fit, or
        # a pair of programs without Hopper's room for two per SM, keeps the
        # plain plan.
        if forced or (decode_smem(wider, head_dim, elem) <= budget
                      and (not pair or budget >= PAIR_MIN_BUDGET)):
            cfg = wider
        else:
            pair = False
    # A run of `span` keys starting anywhere touches at most
    # cdiv(span + BLOCK_N - 1, BLOCK_N) key tiles.
    n_keys = n_cap if span <= 0 else min(n_cap, span + cfg.BLOCK_N - 1)
    n_tiles = max(1, cdiv(n_keys, cfg.BLOCK_N))
    if num_splits == 0:
        tolerance = 1.0 if small and "fill" in variants and not long_pages else 1.1
        num_splits = choose_num_splits(programs, n_keys, cfg.BLOCK_N, n_sm, tolerance=tolerance,
                                       per_sm=2 if pair else 0)
        if solo:  # never more splits than two per SM would take (batch 12, 2k keys: 4 instead of 2)
            num_splits = min(num_splits, choose_num_splits(programs, n_keys, cfg.BLOCK_N, n_sm, per_sm=1))
        if num_splits == 1 and "spread" in variants:
            num_splits = spread_splits(programs, n_keys, cfg.BLOCK_N, n_sm) or 1
    # More splits than key tiles would only add empty ones (and grid axis 1
    # holds at most 65535).
    num_splits = min(num_splits, n_tiles, 65535)
    # PDL only at small batch: session 16 measured it at 0.93-0.99x at B = 8.
    use_pdl = small and "pdl" in variants and pdl_supported(device)
    return DecodePlan(cfg, num_splits, row_tiles, use_pdl, combine_mode(small))


# (device index, stream) -> [int32 buffer, all zero between launches, {numel: its first numel}]
_COUNTERS: dict = {}


_RESERVE: dict = {}  # device -> [zeroed int32 buffer, first counter not handed out]
_RESERVE_LOCK = threading.Lock()  # two threads capturing at once must not get one slice


def reserve_counters(numel: int, device: torch.device, capturing: bool) -> Optional[torch.Tensor]:
    """Variant "reserve": counters for a call captured in a CUDA graph
    (``capturing``), a slice of a per-device buffer made and zeroed by an
    eager call (None when there is none, or it has no room left).  Every
    captured call gets its own slice, never handed out again, so graphs and
    eager calls never share a counter, and each replay leaves its slice at 0
    (the last split resets it).  torch.cuda.graph synchronizes the device
    before it captures, so the zeroing has finished before any replay."""
    key = str(device)
    if not capturing and key in _RESERVE:  # (every eager call after the first: no lock needed)
        return None
    with _RESERVE_LOCK:
        entry = _RESERVE.get(key)
        if not capturing:
            if entry is None:
                _RESERVE[key] = [torch.zeros(RESERVE_COUNTERS, device=device, dtype=torch.int32), 0]
            return None
        if entry is None or entry[1] + numel > entry[0].numel():
            return None
        start = entry[1]
        entry[1] += numel
        return entry[0][start:start + numel]


def split_counters(numel: int, device: torch.device) -> torch.Tensor:
    """The fused merge's per-tile counters: numel zeros, from a buffer kept
    per (device, stream) whose counters every launch leaves at 0 (the last
    split of a tile resets its own).  Launches on one stream run in order, so
    they can share it; another stream gets its own buffer.  A buffer is made
    (and zeroed) only when none is large enough; while a CUDA graph is being
    captured the counters are a fresh zeroed buffer of the graph's own (the
    memset is captured with it), so no graph holds a buffer that eager calls
    also use.  Inside a recording (fastlaunch.note) the counters are a role
    that each replay asks this function for anew (_kvcache.py's plans)."""
    counters = _split_counters(numel, device)
    fastlaunch.note("split_counters", (numel, counters))
    return counters


def _split_counters(numel: int, device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        capturing = torch.cuda.is_current_stream_capturing()
        if "reserve" in decode_variants():
            reserved = reserve_counters(numel, device, capturing)
            if reserved is not None:
                return reserved
        if capturing:
            return torch.zeros(numel, device=device, dtype=torch.int32)
    key = _counters_key(device)
    entry = _COUNTERS.get(key)
    if entry is not None:
        view = entry[1].get(numel)  # (a slice costs more host time than the lookup)
        if view is not None:
            return view
    if entry is None or entry[0].numel() < numel:
        if len(_COUNTERS) >= 64:  # streams come and go: forget old buffers (freed in stream order)
            _COUNTERS.clear()
        entry = [torch.zeros(max(numel, 1024), device=device, dtype=torch.int32), {}]
        _COUNTERS[key] = entry
    view = entry[0][:numel]
    if len(entry[1]) < 64:
        entry[1][numel] = view
    return view


def _counters_key(device: torch.device) -> object:
    """split_counters' buffer key: (device index, current stream) on CUDA
    (the index too: every device's default stream is 0), else the device type."""
    if device.type != "cuda":
        return device.type
    index = cuda_index(device)
    return index, current_stream_handle(index)


def discard_split_counters(device: torch.device) -> None:
    """Forget the current stream's counter buffer (after a launch that may
    have stopped part-way: its counters need not be 0 any more)."""
    _COUNTERS.pop(_counters_key(device), None)


def _dummy(t: torch.Tensor) -> torch.Tensor:
    """A pointer argument for a disabled feature (never dereferenced)."""
    return t


def decode_attention(q, k_cache, v_cache, out, lse, *, cache_seqlens, cache_batch_idx,
                     cache_leftpad, block_table, rotary_cos, rotary_sin, rotary_interleaved: bool,
                     rotary_q_per_token: bool, alibi_slopes, n_new: int, softmax_scale: float,
                     window_left: int, window_right: int, softcap: float, num_splits: int,
                     sinks: Optional[torch.Tensor] = None, attention_chunk: int = 0) -> int:
    """Attention of q over the cache (new tokens already appended); writes
    ``out`` (B, Nq, Hq, d) and ``lse`` (B, Hq, Nq) float32 in place.

    sinks: None or (Hq,) float32 with stride 1, one extra logit per query head
    in the softmax denominator (a row that sees no key: out 0, LSE = sink).

    window_left / window_right: -1 for unbounded (causal is window_right = 0).
    attention_chunk: chunked attention's chunk size, 0 for none: query token
    i at key position p = i + kv_end - Nq sees only keys j with
    (j - lp) // attention_chunk == (p - lp) // attention_chunk, lp the
    row's cache_leftpad (0 without; nothing for p < lp); the key tiles
    outside the chunks are skipped.
    num_splits: 0 chooses (see choose_num_splits).  Returns the split count used."""
    batch, n_q, h_q, d = q.shape
    h_kv = k_cache.shape[2]
    group = h_q // h_kv
    paged = block_table is not None
    page_size = k_cache.shape[1] if paged else 1
    n_cap = block_table.shape[1] * page_size if paged else k_cache.shape[1]
    if n_cap == 0:  # a cache without room: every row sees no key
        out.zero_()
        if sinks is None:
            lse.fill_(float("-inf"))
        else:
            lse.copy_(sinks[:, None].expand(h_q, n_q))
        return 1
    plan = decode_plan(batch, n_q * group, h_kv, d, n_cap, q.dtype, q.device, num_splits,
                       page_size if paged else 0, local_span(n_q, window_left, window_right, attention_chunk))
    cfg, num_splits, m_blocks, use_pdl, merge = plan
    d_pad = head_dim_pad(d)

    split_mode = 0 if num_splits == 1 else (2 if merge == "fused" else 1)
    if split_mode:  # (scratch: a recorded call's replays make their own)
        o_part = fastlaunch.empty_scratch((num_splits, batch, n_q, h_q, d), torch.float32, q.device)
        l_part = fastlaunch.empty_scratch((num_splits, batch, h_q, n_q), torch.float32, q.device)
    else:
        o_part, l_part = out, lse  # unused
    counters = split_counters(batch * h_kv * m_blocks, q.device) if split_mode == 2 else lse

    if softcap > 0.0:
        qk_scale, cap2 = softmax_scale / softcap, softcap * 1.4426950408889634
    else:
        qk_scale, cap2 = softmax_scale * 1.4426950408889634, 0.0
    rotary_cos, rotary_sin = same_row_stride(rotary_cos, rotary_sin)
    rotary_dim = 2 * rotary_cos.shape[1] if rotary_cos is not None else 0
    bt_strides = block_table.stride() if paged else (0, 0)
    al_strides = ((alibi_slopes.stride(0) if alibi_slopes.dim() == 2 else 0, alibi_slopes.stride(-1))
                  if alibi_slopes is not None else (0, 0))
    any_ptr = _dummy(q)

    grid = (batch * h_kv, num_splits, m_blocks)
    try:
        _decode_fwd[grid](
            q, k_cache, v_cache, out, lse, o_part, l_part, counters,
            cache_seqlens if cache_seqlens is not None else any_ptr,
            cache_batch_idx if cache_batch_idx is not None else any_ptr,
            cache_leftpad if cache_leftpad is not None else any_ptr,
            block_table if paged else any_ptr,
            rotary_cos if rotary_dim else any_ptr, rotary_sin if rotary_dim else any_ptr,
            alibi_slopes if alibi_slopes is not None else any_ptr,
            sinks if sinks is not None else any_ptr,
            *q.stride(), *k_cache.stride(), *v_cache.stride(), *out.stride(), *lse.stride(),
            *(o_part.stride() if split_mode else (0,) * 5), *(l_part.stride() if split_mode else (0,) * 4),
            *bt_strides, rotary_cos.stride(0) if rotary_dim else 0, *al_strides,
            n_q, n_new, n_cap, rotary_cos.shape[0] if rotary_dim else 0, h_kv, group, num_splits,
            qk_scale, cap2, max(window_left, 0), max(window_right, 0), attention_chunk,
            HEAD_DIM=d, HEAD_DIM_PAD=d_pad, EVEN_D=d == d_pad,
            PAGED=paged, PAGE_SIZE=page_size, TILE_IN_PAGE=paged and page_size % cfg.BLOCK_N == 0,
            HAS_SEQLENS=cache_seqlens is not None, HAS_BATCH_IDX=cache_batch_idx is not None,
            HAS_LEFTPAD=cache_leftpad is not None,
            HAS_WINDOW_LEFT=window_left >= 0, HAS_WINDOW_RIGHT=window_right >= 0,
            HAS_SOFTCAP=softcap > 0.0, HAS_ALIBI=alibi_slopes is not None, HAS_SINKS=sinks is not None,
            ROTARY_DIM=rotary_dim, ROTARY_INTERLEAVED=bool(rotary_interleaved),
            ROTARY_Q_PER_TOKEN=bool(rotary_q_per_token), SPLIT_MODE=split_mode,
            DOT_PRECISION=dot_precision(q.dtype), INTERPRET=INTERPRET, USE_PDL=use_pdl,
            MERGE_STAGES=MERGE_STAGES,
            BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
            MASK_CHUNK=attention_chunk > 0,
            **COMPILE_OPTIONS, **({"launch_pdl": True} if use_pdl else {}),
        )
    except BaseException:
        # A launch that stopped part-way (an error, or an interrupt of the
        # interpreter) may leave counters set, and the next call would merge
        # early: start the next call from a fresh, zeroed buffer.
        if split_mode == 2:
            discard_split_counters(q.device)
        raise
    if split_mode == 1:
        # (S, B, Nq, Hq, d) / (S, B, Hq, Nq) partials indexed as (S, Z, H, M, ...).
        # gathered: PDL wherever it compiles (the decode kernel triggers it early
        # with its own pdl, else the combine's launch overlaps the decode's drain).
        gather = merge == "gathered"
        combine_partials(o_part.transpose(2, 3), l_part, out.transpose(1, 2), lse, sinks=sinks, gather=gather,
                         use_pdl=gather and pdl_supported(q.device))
    return num_splits


# A decode call's host time is mostly Python (session 59, H100, one token against 128 cached
# rows: 175 us per eager call, about a quarter of it in Triton's own launch path): repeated
# signatures go straight to the compiled kernel (kernels/fastlaunch.py; a no-op under the
# interpreter and for Triton versions it does not mirror).
fastlaunch.install(_decode_fwd)
fastlaunch.install(_append_kv)


def same_row_stride(cos: Optional[torch.Tensor], sin: Optional[torch.Tensor]):
    """The rotary tables with one row stride (the kernels take one, stride_cs):
    as given when they share it, else both contiguous (a copy of two small
    tables, only for such calls)."""
    if cos is None or cos.stride(0) == sin.stride(0):
        return cos, sin
    return cos.contiguous(), sin.contiguous()


def append_kv(k, v, k_cache, v_cache, *, cache_seqlens, cache_batch_idx, block_table,
              rotary_cos, rotary_sin, rotary_interleaved: bool) -> None:
    """Write k, v (B, N_new, Hkv, d) into the cache at cache_seqlens[b] + t, in place."""
    batch, n_new, h_kv, d = k.shape
    if batch == 0 or n_new == 0:
        return
    paged = block_table is not None
    page_size = k_cache.shape[1] if paged else 1
    n_cap = block_table.shape[1] * page_size if paged else k_cache.shape[1]
    rotary_cos, rotary_sin = same_row_stride(rotary_cos, rotary_sin)
    rotary_dim = 2 * rotary_cos.shape[1] if rotary_cos is not None else 0
    block_t = 16 if n_new <= 16 else 32
    any_ptr = _dummy(k)
    grid = (batch * h_kv, cdiv(n_new, block_t))
    _append_kv[grid](
        k, v, k_cache, v_cache, cache_seqlens,
        cache_batch_idx if cache_batch_idx is not None else any_ptr,
        block_table if paged else any_ptr,
        rotary_cos if rotary_dim else any_ptr, rotary_sin if rotary_dim else any_ptr,
        *k.stride(), *v.stride(), *k_cache.stride(), *v_cache.stride(),
        *(block_table.stride() if paged else (0, 0)), rotary_cos.stride(0) if rotary_dim else 0,
        n_new, n_cap, rotary_cos.shape[0] if rotary_dim else 0, h_kv,
        HEAD_DIM=d, HEAD_DIM_PAD=head_dim_pad(d), PAGED=paged, PAGE_SIZE=page_size,
        HAS_BATCH_IDX=cache_batch_idx is not None,
        ROTARY_DIM=rotary_dim, ROTARY_INTERLEAVED=bool(rotary_interleaved), INTERPRET=INTERPRET,
        BLOCK_T=block_t,
        num_warps=4, **COMPILE_OPTIONS,
    )


__all__ = ["decode_attention", "append_kv", "choose_num_splits", "decode_config", "decode_plan",
           "decode_variants", "sm_count", "DecodeConfig", "DecodePlan"]
