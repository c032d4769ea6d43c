"""Tile helpers shared by the forward, backward and decode kernels.

* ``seq_bounds``: where a batch entry's rows start and how many there are,
  for dense batches and for packed (varlen) ones read from cu_seqlens.
* ``kv_tile_range`` / ``q_tile_range``: which key tiles a query tile visits
  (forward, dQ) and which query tiles a key tile visits (dK/dV), split into a
  masked head, an unmasked middle and a masked tail.
* ``load_tile`` / ``store_tile``: row-checked, column-padded tile access.
* ``page_numbers`` / ``paged_tile_ptrs``: key tiles of a paged K / V pool
  through a block table (the decode kernel, the forward's PAGED switch).
* ``mma``: the dot product, with the interpreter's bfloat16 workaround.

Visibility of key j to query row i (all kernels):
    j < n_k,  and  j <= i + shift + window_right   (if MASK_RIGHT; causal is right = 0),
              and  j >= i + shift - window_left    (if MASK_LEFT),
              and  j // chunk == (i + shift) // chunk,  i + shift >= 0   (if MASK_CHUNK),
with shift = n_k - n_q + causal_offset (bottom-right alignment for
causal_offset = 0; the SDPA entry passes n_q - n_k for top-left), plus
shift_mul * n_k in packed batches (0 but for blocks of ring attention,
whose diagonal is proportional to each document's chunk length).

Chunked attention (MASK_CHUNK, Llama 4's attention_chunk): the keys are cut
into chunks [c * chunk, (c + 1) * chunk) and row i, at key position
p = i + shift, sees only keys of p's own chunk (floor division; a row with
p < 0 lies before key 0 and sees nothing).  It intersects with the rules
above.  The kernels never divide a negative number (Triton's integer `//`
truncates toward zero on the GPU, which is not the floor there): positions
are clamped at 0 first and rows with p < 0 are removed by a comparison of
their own (chunk_start, score.visible).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def seq_bounds(off_z, CU_SEQLENS_Q, CU_SEQLENS_K, N_Q, N_K, IS_VARLEN: tl.constexpr):
    """(first query row, query count, first key row, key count) of batch entry off_z.

    Dense batches index rows from 0 with the lengths given; packed batches read
    the offsets of entry z from cu_seqlens (the grid was sized by max_seqlen)."""
    if IS_VARLEN:
        q_start = tl.load(CU_SEQLENS_Q + off_z)
        n_q = tl.load(CU_SEQLENS_Q + off_z + 1) - q_start
        k_start = tl.load(CU_SEQLENS_K + off_z)
        n_k = tl.load(CU_SEQLENS_K + off_z + 1) - k_start
        q_start = q_start.to(tl.int64)
        k_start = k_start.to(tl.int64)
    else:
        q_start = 0
        n_q = N_Q
        k_start = 0
        n_k = N_K
    return q_start, n_q, k_start, n_k


@triton.jit
def chunk_start(pos, chunk):
    """First key of the chunk that holds key position pos >= 0 (pos // chunk
    is the floor for pos >= 0; callers clamp negative positions first)."""
    return (pos // chunk) * chunk


@triton.jit
def chunk_end(start, chunk, bound):
    """min(start + chunk, bound), the end of the chunk at ``start`` held at
    ``bound``, without forming start + chunk (chunks of up to 2^30 keys
    after a start near 2^31 would overflow int32)."""
    return start + tl.minimum(chunk, bound - start)


@triton.jit
def kv_tile_range(start_m, n_q, n_k, shift, window_left, window_right, chunk,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr, MASK_CHUNK: tl.constexpr):
    """Key range of query tile [start_m, start_m + BLOCK_M) as (lo, full_lo, full_hi, hi).

    Tiles in [lo, full_lo) and [full_hi, hi) need the mask; tiles in
    [full_lo, full_hi) are whole and visible to every valid row of the tile.
    lo, full_lo, full_hi are multiples of BLOCK_N (or equal to hi, where
    nothing is left); hi is exact (the last tile may be ragged).  The first row bounds the right edge of the unmasked part
    (its right limit is the smallest), the last valid row its left edge.
    Key tiles outside [lo, hi) are skipped: with MASK_CHUNK, every tile
    outside the chunks of the tile's rows."""
    last_row = tl.minimum(start_m + BLOCK_M, n_q) - 1
    hi = n_k
    full_hi = n_k
    lo = 0
    full_lo = 0
    if MASK_RIGHT:
        hi = tl.minimum(n_k, last_row + shift + window_right + 1)
        full_hi = tl.minimum(n_k, start_m + shift + window_right + 1)
    if MASK_LEFT:
        lo = tl.maximum(start_m + shift - window_left, 0)
        full_lo = tl.maximum(last_row + shift - window_left, 0)
    if MASK_CHUNK:
        # Row positions p grow with the row, and so do their chunks: the rows
        # see keys from the first row's chunk start (the first row with
        # p >= 0 has p = 0 when the first row's p is negative) to the last
        # row's chunk end, and every row sees the keys from the last row's
        # chunk start to the first row's chunk end (none when the tile spans
        # two chunks: full_lo >= full_hi).  Rows with p < 0 see nothing: a
        # tile of such rows only has an empty range (hi = 0), a tile with
        # some no unmasked middle (full_hi = 0).
        p_first = start_m + shift
        p_last = last_row + shift
        first_chunk = chunk_start(tl.maximum(p_first, 0), chunk)
        last_chunk = chunk_start(tl.maximum(p_last, 0), chunk)
        lo = tl.maximum(lo, first_chunk)
        full_lo = tl.maximum(full_lo, last_chunk)
        hi = tl.where(p_last < 0, 0, tl.minimum(hi, chunk_end(last_chunk, chunk, n_k)))
        full_hi = tl.where(p_first < 0, 0, tl.minimum(full_hi, chunk_end(first_chunk, chunk, n_k)))
    hi = tl.maximum(hi, 0)
    lo = tl.minimum((lo // BLOCK_N) * BLOCK_N, hi)
    full_lo = tl.minimum(tl.maximum(tl.cdiv(full_lo, BLOCK_N) * BLOCK_N, lo), hi)
    full_hi = tl.maximum((tl.maximum(full_hi, 0) // BLOCK_N) * BLOCK_N, full_lo)
    return lo, full_lo, full_hi, hi


@triton.jit
def q_tile_range(start_n, n_q, n_k, shift, window_left, window_right, chunk,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr, MASK_CHUNK: tl.constexpr):
    """Query range of key tile [start_n, start_n + BLOCK_N) as (lo, full_lo, full_hi, hi),
    the mirror of kv_tile_range: row i sees key j for
    j - shift - right <= i <= j - shift + left, and with MASK_CHUNK for
    chunk_start(j) - shift <= i < chunk_start(j) + chunk - shift.  A ragged
    key tile (keys past n_k) is masked whole; the unmasked part also stops at
    the last whole query tile."""
    last_key = tl.minimum(start_n + BLOCK_N, n_k) - 1
    lo = 0
    full_lo = 0
    hi = n_q
    full_hi = n_q
    if MASK_RIGHT:
        lo = tl.maximum(start_n - shift - window_right, 0)
        full_lo = tl.maximum(last_key - shift - window_right, 0)
    if MASK_LEFT:
        hi = tl.minimum(n_q, last_key - shift + window_left + 1)
        full_hi = tl.minimum(n_q, start_n - shift + window_left + 1)
    if MASK_CHUNK:
        # The rows of the first key's chunk start the range, those of the
        # last key's chunk end it; every row of the last key's chunk start to
        # the first key's chunk end sees the whole tile (none when the tile
        # spans two chunks).  Keys are >= 0: no negative division.
        first_rows = chunk_start(start_n, chunk) - shift
        last_rows = chunk_start(last_key, chunk) - shift
        lo = tl.maximum(lo, first_rows)
        full_lo = tl.maximum(full_lo, last_rows)
        hi = tl.minimum(hi, chunk_end(last_rows, chunk, n_q))
        full_hi = tl.minimum(full_hi, chunk_end(first_rows, chunk, n_q))
    hi = tl.maximum(hi, 0)
    lo = tl.minimum((lo // BLOCK_M) * BLOCK_M, hi)
    full_lo = tl.minimum(tl.maximum(tl.cdiv(full_lo, BLOCK_M) * BLOCK_M, lo), hi)
    full_hi = tl.maximum((tl.maximum(full_hi, 0) // BLOCK_M) * BLOCK_M, full_lo)
    if start_n + BLOCK_N > n_k:
        full_hi = full_lo
    return lo, full_lo, full_hi, hi


@triton.jit
def aligned_start(start, BLOCK: tl.constexpr):
    """start itself, for a loop's tile start that is a multiple of BLOCK (the
    ranges above guarantee it): a no-op the compiler can read, so loads
    indexed by start + arange(BLOCK) (mask / bias tiles) vectorize."""
    return (start // BLOCK) * BLOCK


@triton.jit
def load_tile(ptrs, rows, n_rows, offs_d, HEAD_DIM: tl.constexpr,
              CHECK_ROWS: tl.constexpr, EVEN_D: tl.constexpr):
    """Load a (rows, HEAD_DIM_PAD) tile; out-of-range rows and padded
    columns read as 0 (padded columns then add 0 to every dot)."""
    if CHECK_ROWS:
        if EVEN_D:
            x = tl.load(ptrs, mask=rows[:, None] < n_rows, other=0.0)
        else:
            x = tl.load(ptrs, mask=(rows[:, None] < n_rows) & (offs_d[None, :] < HEAD_DIM), other=0.0)
    else:
        if EVEN_D:
            x = tl.load(ptrs)
        else:
            x = tl.load(ptrs, mask=offs_d[None, :] < HEAD_DIM, other=0.0)
    return x


@triton.jit
def store_tile(ptrs, x, rows, n_rows, offs_d, HEAD_DIM: tl.constexpr, EVEN_D: tl.constexpr):
    if EVEN_D:
        tl.store(ptrs, x, mask=rows[:, None] < n_rows)
    else:
        tl.store(ptrs, x, mask=(rows[:, None] < n_rows) & (offs_d[None, :] < HEAD_DIM))


@triton.jit
def head_row_tile(pid_n, pid_zh, H, N, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr):
    """Row tile pid_n of (batch, head) number pid_zh, heads H per batch, N rows:
    the batch and head (int64), the rows as an int64 column, the columns and
    the mask of rows < N and columns < HEAD_DIM (of HEAD_DIM_PAD)."""
    off_z = (pid_zh // H).to(tl.int64)
    off_h = (pid_zh % H).to(tl.int64)
    offs_n = pid_n * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask = (offs_n < N)[:, None] & (offs_d < HEAD_DIM)[None, :]
    return off_z, off_h, offs_n.to(tl.int64)[:, None], offs_d, mask


@triton.jit
def tile_ptrs(BASE, row0, stride_row, stride_col, BLOCK: tl.constexpr, offs_d):
    """Pointers to rows [row0, row0 + BLOCK) x columns offs_d of a matrix at BASE.
    row0 may be int64 (the large part of the offset); in-tile offsets stay 32-bit."""
    return (BASE + row0 * stride_row
            + tl.arange(0, BLOCK)[:, None] * stride_row + offs_d[None, :] * stride_col)


@triton.jit
def page_numbers(bt, stride_btn, start, offs_n, end_col, kv_lo, kv_end,
                 PAGE_SIZE: tl.constexpr, TILE_IN_PAGE: tl.constexpr):
    """int64 page numbers of the tile of keys [start, start + BLOCK_N) from the
    block-table row ``bt``: a scalar when the tile lies in one page, else one
    per key.  Only entries of pages holding keys [0, kv_end) are read (a tile
    past the end reads the last one; per-key entries outside [kv_lo, kv_end)
    give 0)."""
    if TILE_IN_PAGE:
        last = tl.maximum(kv_end - 1, 0) // PAGE_SIZE
        page = tl.load(bt + tl.minimum(start // PAGE_SIZE, last) * stride_btn)
    else:
        cols = start + offs_n
        ok = (cols >= kv_lo) & (cols < kv_end) & (cols < end_col)
        page = tl.load(bt + (cols // PAGE_SIZE) * stride_btn, mask=ok, other=0)
    return page.to(tl.int64)


@triton.jit
def paged_tile_ptrs(BASE, page, cols, stride_page, stride_row, stride_col, offs_d, PAGE_SIZE: tl.constexpr):
    """Pointers to the keys ``cols`` (logical positions of one sequence) x
    columns offs_d of a paged pool at BASE: key j lies in page ``page``
    (page_numbers: a scalar or one per key), row j % PAGE_SIZE."""
    rows = page * stride_page + (cols % PAGE_SIZE).to(tl.int64) * stride_row
    return BASE + rows[:, None] + offs_d[None, :] * stride_col


@triton.jit
def qk_columns(HEAD_DIM_PAD: tl.constexpr, SPLIT_QK: tl.constexpr):
    """Column offsets of the Q K^T operands: with SPLIT_QK (fwd.split_qk) the
    chunks [0, PAD/2) and [PAD/2, 3 PAD/4), the first always within HEAD_DIM;
    otherwise all PAD columns, returned twice."""
    if SPLIT_QK:
        offs_d = tl.arange(0, HEAD_DIM_PAD // 2)
        offs_d_hi = HEAD_DIM_PAD // 2 + tl.arange(0, HEAD_DIM_PAD // 4)
    else:
        offs_d = tl.arange(0, HEAD_DIM_PAD)
        offs_d_hi = offs_d
    return offs_d, offs_d_hi


@triton.jit
def load_qk_operand(BASE, row0, stride_row, stride_col, BLOCK: tl.constexpr, rows, n_rows,
                    offs_d, offs_d_hi, HEAD_DIM: tl.constexpr, EVEN: tl.constexpr,
                    SPLIT_QK: tl.constexpr):
    """A Q or K tile of Q K^T as (lo, hi) over the columns of qk_columns:
    with SPLIT_QK two tiles, the first whole and EVEN saying whether the
    second is; otherwise one tile (EVEN: EVEN_D), returned twice."""
    if SPLIT_QK:
        lo = load_tile(tile_ptrs(BASE, row0, stride_row, stride_col, BLOCK, offs_d),
                       rows, n_rows, offs_d, HEAD_DIM, True, True)
        hi = load_tile(tile_ptrs(BASE, row0, stride_row, stride_col, BLOCK, offs_d_hi),
                       rows, n_rows, offs_d_hi, HEAD_DIM, True, EVEN)
    else:
        lo = load_tile(tile_ptrs(BASE, row0, stride_row, stride_col, BLOCK, offs_d),
                       rows, n_rows, offs_d, HEAD_DIM, True, EVEN)
        hi = lo
    return lo, hi


@triton.jit
def mma(a, b, acc, DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr):
    """acc + a @ b with float32 accumulation.

    Triton's interpreter stores bfloat16 as raw uint16 and multiplies those
    bits, so interpreted runs upcast the operands first (products of two
    16-bit floats are exact in float32, so the result is what the GPU gives)."""
    if INTERPRET:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision=DOT_PRECISION)
