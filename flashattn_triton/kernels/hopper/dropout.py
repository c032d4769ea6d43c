"""Dropout for the Hopper kernels: kernels/score.py's keep mask, bit for bit,
drawn in the layouts of the wgmma accumulators.

The rule (score.py's module doc): score (b, h, i, j) reads half j0 of word
2 * i3 + j3 (xn: bit n of x) of one Philox 4x32 call (PHILOX_ROUNDS
rounds, 10 by default; Triton's ``tl.randint4x``) on the counter

    philox_offset + ((b * Hq + h) * rng_rows + (i & ~8)) * rng_cols + (j & ~9)

and is kept iff that half is >= t (the 16-bit threshold); kept
probabilities are scaled by 2^16 / (2^16 - t).  Eight scores share a call:
rows {i, i ^ 8} x keys {j, j ^ 1, j ^ 8, j ^ 9}.

Three parts:

* ``philox4x32`` and ``philox_keys`` / ``philox_counter_words``: plain
  ``triton.jit`` functions of the exact operations of ``tl.randint4x``
  (same constants, rounds, key schedule and counter split), layout-agnostic:
  a Gluon kernel that calls them compiles them in Gluon mode on tensors of
  its own layouts, and the CPU tests run the same functions in Triton's
  interpreter against ``tl.randint4x`` (tests/test_hopper_dropout.py).
* The tile assembly, also plain ``triton.jit`` (tested the same way, with
  plain aranges): ``tile_words_rows_first`` / ``halves_rows_first`` and
  ``tile_halves_keys_first_from``: one call per eight scores (rows first)
  or per four (keys first), each score's 16-bit half moved to the high
  bits, so that keep = halves >= t << 16 (one unsigned compare).
* ``tile_halves_rows_first`` / ``tile_halves_keys_first`` (Gluon): the
  aranges of those in layouts chosen so that the halves land in the wgmma
  accumulator's registers without data movement (``gl.convert_layout(...,
  assert_trivial=True)`` checks it at compile time).  Rows first
  (queries x keys tiles: the forward's S, SPLIT_D's S of the backward): an
  accumulator thread holds rows {r, r + 8} and key pairs {2e, 2e + 1}
  every 8 keys, i.e. whole Philox groups.  Keys first (keys x queries
  tiles: the backward's S^T): key bit 0 lies across lanes (lane bit 2),
  so each call is made by both lanes of the pair (two calls per eight
  scores, no exchange) and each lane keeps the half of its key parity.
  ``tile_keep_keys_first_shared`` (the backward's DROPOUT_SHARED_CALLS)
  makes each call once per pair instead: ``call_keep_bits`` packs a call's
  eight keep flags into one register, a layout conversion hands each lane
  its partner's calls, and ``keep_keys_first_from_bits`` reads the bits of
  the lane's key parity (tested in the interpreter without the layouts).
  ``tile_call_bits_rng`` makes a 16-key slab's calls once each, for the
  backward's RNG warps (DROPOUT_RNG_WARPS; the default at d = 64 / 128),
  and stops at each call's eight keep bits, which the RNG warps hand to the
  consumers through shared memory and the consumers test in place
  (``kept_keys_first_from_call_bits``).
  ``select_kept`` / ``negate_dropped`` apply the mask (asm blocks).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ...reference import DROPOUT_ROUNDS

# tl.randint4x's Philox 4x32 constants (triton/language/random.py, 32-bit state).
PHILOX_KEY_A: tl.constexpr = tl.constexpr(0x9E3779B9)
PHILOX_KEY_B: tl.constexpr = tl.constexpr(0xBB67AE85)
PHILOX_ROUND_A: tl.constexpr = tl.constexpr(0xD2511F53)
PHILOX_ROUND_B: tl.constexpr = tl.constexpr(0xCD9E8D57)
# Rounds: reference.DROPOUT_ROUNDS, as kernels/score.py draws (10 unless
# FLASHATTN_TRITON_DROPOUT_ROUNDS says otherwise).
PHILOX_ROUNDS: tl.constexpr = tl.constexpr(DROPOUT_ROUNDS)


@triton.jit
def philox_keys(seed):
    """(k0, k1) uint32 of an int64 seed (>= 0), as tl.philox splits it."""
    seed = seed.to(tl.uint64)
    return (seed & 0xFFFFFFFF).to(tl.uint32), ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)


@triton.jit
def philox_counter_words(offs):
    """(c0, c1) uint32 of int64 counters: the low and high words, as
    tl.randint4x splits its offsets."""
    return offs.to(tl.uint32), (offs >> 32).to(tl.uint32)


@triton.jit
def philox4x32(c0, c1, k0, k1):
    """The four uint32 words of Philox 4x32 (PHILOX_ROUNDS rounds) on counter
    (c0, c1, 0, 0) with key (k0, k1): tl.randint4x's rounds (tl.philox_impl) operation for
    operation.  c0, c1: uint32 tensors of any layout; k0, k1: uint32."""
    c2 = c0 * 0
    c3 = c2
    for _ in tl.static_range(PHILOX_ROUNDS):
        _c0 = c0
        _c2 = c2
        c0 = tl.umulhi(PHILOX_ROUND_B, _c2) ^ c1 ^ k0
        c2 = tl.umulhi(PHILOX_ROUND_A, _c0) ^ c3 ^ k1
        c1 = tl.mul(PHILOX_ROUND_B, _c2, sanitize_overflow=False)
        c3 = tl.mul(PHILOX_ROUND_A, _c0, sanitize_overflow=False)
        k0 = tl.add(k0, PHILOX_KEY_A, sanitize_overflow=False)
        k1 = tl.add(k1, PHILOX_KEY_B, sanitize_overflow=False)
    return c0, c1, c2, c3


@triton.jit
def randint4x(seed, offs):
    """tl.randint4x(seed, offs, PHILOX_ROUNDS) through philox4x32 (the tests
    compare them)."""
    k0, k1 = philox_keys(seed)
    c0, c1 = philox_counter_words(offs)
    return philox4x32(c0, c1, k0, k1)


@triton.jit
def halves_rows_first(w0, w1, w2, w3, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """(BLOCK_M, BLOCK_N) uint32 whose high 16 bits are each score's 16-bit
    half, from the words of the calls of a queries x keys tile shaped
    (a, r, c, e): the call of rows 16a + r and 16a + r + 8, keys 16c + 2e +
    {0, 1, 8, 9} (score.py's dropout_keep, rows first).  A low half moves up
    (w << 16); a high half is the word itself: either is >= t * 2^16
    (unsigned) iff the half is >= t, so keep = halves >= t << 16."""
    h = tl.join(tl.join(tl.join(w0 << 16, w0), tl.join(w1 << 16, w1)),
                tl.join(tl.join(w2 << 16, w2), tl.join(w3 << 16, w3)))
    # (a, r, c, e, k0, k3, q3) -> queries 16a + 8q3 + r, keys 16c + 8k3 + 2e + k0
    return tl.reshape(tl.permute(h, (0, 6, 1, 2, 5, 3, 4)), (BLOCK_M, BLOCK_N))


@triton.jit
def halves_keys_first(w0, w1, w2, w3, k0_shift, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    """halves_rows_first transposed, (BLOCK_N, BLOCK_M) (keys x queries),
    from the words of the calls shaped (c, e, 1, a, r) (the call of keys
    16c + 2e + {0, 1, 8, 9}, rows 16a + r, 16a + r + 8); k0_shift, shaped
    (1, 1, 2, 1, 1), is 16 for key bit 0 clear and 0 for it set: the half
    of each word a key reads, in the high bits (the keys' dim 2 is
    broadcast to it)."""
    return keys_first_tile(w0 << k0_shift, w1 << k0_shift, w2 << k0_shift, w3 << k0_shift, BLOCK_N, BLOCK_M)


@triton.jit
def keys_first_tile(x0, x1, x2, x3, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    """The (BLOCK_N, BLOCK_M) keys x queries tile of the per-call values
    x_i (word i of each call, shaped (c, e, k0, a, r)): word i = k3 + 2 q3."""
    h = tl.join(tl.join(x0, x1), tl.join(x2, x3))
    # (c, e, k0, a, r, k3, q3) -> keys 16c + 8k3 + 2e + k0, queries 16a + 8q3 + r
    return tl.reshape(tl.permute(h, (0, 5, 1, 2, 3, 6, 4)), (BLOCK_N, BLOCK_M))


@triton.jit
def key_parity_dim(i0):
    """The key bit 0 index i0 (an arange of 2) shaped (1, 1, 2, 1, 1), uint32."""
    return tl.expand_dims(tl.expand_dims(tl.expand_dims(tl.expand_dims(i0, 0), 1), 3), 4).to(tl.uint32)


@triton.jit
def call_words(k0, k1, rng_base, rows, keys, rng_cols):
    """The four words of the Philox calls on counters rng_base + rows *
    rng_cols + keys (rows, keys: broadcastable int32 tensors of each call's
    first row and key, i & ~8 and j & ~9; rng_base int64)."""
    offs = rng_base + rows.to(tl.int64) * rng_cols + keys
    c0, c1 = philox_counter_words(offs)
    return philox4x32(c0, c1, k0, k1)


@triton.jit
def tile_words_rows_first(k0, k1, rng_base, row0, col0, rng_cols, ia, ir, ic, ie):
    """The words of the calls of query rows [row0, row0 + 16 A) x keys
    [col0, col0 + 16 C) shaped (a, r, c, e) (halves_rows_first); ia, ir, ic,
    ie: aranges of A, 8, C and 4 whose layouts (Gluon) expand to that shape
    (ia, ir along dims 0, 1 of a tensor expanded at 2 and 3, ic, ie along
    dims 0, 1 of one expanded twice at 0)."""
    rows = row0 + tl.expand_dims(ia, 1) * 16 + tl.expand_dims(ir, 0)  # (a, r)
    keys = col0 + tl.expand_dims(ic, 1) * 16 + tl.expand_dims(ie, 0) * 2  # (c, e)
    return call_words(k0, k1, rng_base, tl.expand_dims(tl.expand_dims(rows, 2), 3),
                      tl.expand_dims(tl.expand_dims(keys, 0), 0), rng_cols)


@triton.jit
def tile_words_keys_first(k0, k1, rng_base, row0, col0, rng_cols, ic, ie, ia, ir):
    """The words of the calls of keys [col0, col0 + 16 C) x query rows [row0,
    row0 + 16 A) shaped (c, e, 1, a, r); ic, ie, ia, ir: aranges of C, 4, A
    and 8 whose layouts (Gluon) expand so."""
    keys = col0 + tl.expand_dims(ic, 1) * 16 + tl.expand_dims(ie, 0) * 2  # (c, e)
    rows = row0 + tl.expand_dims(ia, 1) * 16 + tl.expand_dims(ir, 0)  # (a, r)
    return call_words(k0, k1, rng_base, tl.expand_dims(tl.expand_dims(tl.expand_dims(rows, 0), 0), 0),
                      tl.expand_dims(tl.expand_dims(tl.expand_dims(keys, 2), 3), 4), rng_cols)


@triton.jit
def tile_halves_keys_first_from(k0, k1, rng_base, row0, col0, rng_cols, ic, ie, ia, ir, i0,
                                BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    """halves_keys_first of keys [col0, col0 + BLOCK_N) x query rows [row0,
    row0 + BLOCK_M): the calls shaped (c, e, 1, a, r) and the key bit 0 index
    i0 (an arange of 2) shaped (1, 1, 2, 1, 1); ic, ie, ia, ir, i0: aranges
    whose layouts (Gluon) expand so."""
    w0, w1, w2, w3 = tile_words_keys_first(k0, k1, rng_base, row0, col0, rng_cols, ic, ie, ia, ir)
    k0_shift = tl.expand_dims(tl.expand_dims(tl.expand_dims(tl.expand_dims((1 - i0) * 16, 0), 1), 3), 4)
    return halves_keys_first(w0, w1, w2, w3, k0_shift.to(tl.uint32), BLOCK_N, BLOCK_M)


@triton.jit
def call_keep_bits(w0, w1, w2, w3, t_hi):
    """A call's eight keep flags in one uint32: bit 2 i + h is set iff half h
    (0: low, 1: high) of word i is >= t (t_hi = t << 16; the half moved to
    the high bits as in halves_rows_first, compared unsigned)."""
    bits = ((w0 << 16) >= t_hi).to(tl.uint32) | ((w0 >= t_hi).to(tl.uint32) << 1)
    bits = bits | (((w1 << 16) >= t_hi).to(tl.uint32) << 2) | ((w1 >= t_hi).to(tl.uint32) << 3)
    bits = bits | (((w2 << 16) >= t_hi).to(tl.uint32) << 4) | ((w2 >= t_hi).to(tl.uint32) << 5)
    return bits | (((w3 << 16) >= t_hi).to(tl.uint32) << 6) | ((w3 >= t_hi).to(tl.uint32) << 7)


@triton.jit
def keep_keys_first_from_bits(bits, i0, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    """(BLOCK_N, BLOCK_M) uint32 keep flags (1 kept, 0 dropped), keys x
    queries, from call_keep_bits of the calls shaped (c, e, 1, a, r) and the
    key bit 0 index i0 (an arange of 2) shaped (1, 1, 2, 1, 1): key parity
    k0 and word i = k3 + 2 q3 read bit 2 i + k0, joined and permuted as
    halves_keys_first."""
    k0 = key_parity_dim(i0)
    return keys_first_tile((bits >> k0) & 1, (bits >> (k0 + 2)) & 1, (bits >> (k0 + 4)) & 1, (bits >> (k0 + 6)) & 1,
                           BLOCK_N, BLOCK_M)


@triton.jit
def kept_keys_first_from_bits(bits, i0, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    """keep_keys_first_from_bits with each flag left in its bit: nonzero
    where kept, zero where dropped.  Each word is shifted once by the key
    parity k0 (one shift per call, not per score), then its bits 0, 2, 4,
    6 masked in place, so that a score's test != 0 is one LOP3 with a
    predicate result instead of a shift, a mask and a compare."""
    w = bits >> key_parity_dim(i0)
    return keys_first_tile(w & 1, w & 4, w & 16, w & 64, BLOCK_N, BLOCK_M)


# ---------------------------------------------------------------------------
# Gluon: the aranges of a tile in the layouts above
# ---------------------------------------------------------------------------

@gluon.jit
def tile_halves_rows_first(k0, k1, rng_base, row0, col0, rng_cols,
                           BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, NUM_WARPS: gl.constexpr):
    """halves_rows_first of query rows [row0, row0 + BLOCK_M) x keys [col0,
    col0 + BLOCK_N) (multiples of 16) of one (batch entry, head), whose
    (row 0, key 0) counter is rng_base (int64), in a layout that converts to
    the NVMMA accumulator (warps_per_cta [NUM_WARPS, 1]) of that tile
    without data movement: calls (a, r, c, e) with r, e on the lanes (lane
    = 4r + e), a on the warps (BLOCK_M = 16 * NUM_WARPS) and c in registers."""
    gl.static_assert(BLOCK_M == 16 * NUM_WARPS, "one 16-row slab per warp")
    gl.static_assert(BLOCK_N % 16 == 0, "key tiles of multiples of 16")
    L: gl.constexpr = gl.BlockedLayout([1, 1, 1, 1], [1, 8, 1, 4], [NUM_WARPS, 1, 1, 1], [3, 2, 1, 0])
    rows_l: gl.constexpr = gl.SliceLayout(2, gl.SliceLayout(3, L))  # (a, r)
    keys_l: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(0, L))  # (c, e)
    w0, w1, w2, w3 = tile_words_rows_first(
        k0, k1, rng_base, row0, col0, rng_cols,
        gl.arange(0, BLOCK_M // 16, layout=gl.SliceLayout(1, rows_l)),
        gl.arange(0, 8, layout=gl.SliceLayout(0, rows_l)),
        gl.arange(0, BLOCK_N // 16, layout=gl.SliceLayout(1, keys_l)),
        gl.arange(0, 4, layout=gl.SliceLayout(0, keys_l)))
    return halves_rows_first(w0, w1, w2, w3, BLOCK_M, BLOCK_N)


@gluon.constexpr_function
def _keys_first_layout(num_warps):
    """The 5-d layout of a keys x queries tile's calls (c, e, k0, a, r) whose
    flags convert to the NVMMA accumulator (keys as the wgmma M dim,
    warps_per_cta [num_warps, 1]) without data movement: k0 a broadcast dim
    on lane bit 2, e on lane bits 3-4, r as one register bit and lane bits
    0-1, c on the warps, a in registers (tile_halves_keys_first)."""
    return gl.BlockedLayout([1, 1, 1, 1, 2], [1, 4, 2, 1, 4], [num_warps, 1, 1, 1, 1], [4, 2, 1, 3, 0])


@gluon.jit
def _keys_first_aranges(L: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr):
    """The aranges (ic, ie, ia, ir) of a keys x queries tile's calls
    (c, e, ., a, r) in the 5-d layout L (tile_words_keys_first's)."""
    keys_l: gl.constexpr = gl.SliceLayout(2, gl.SliceLayout(3, gl.SliceLayout(4, L)))  # (c, e)
    rows_l: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(0, gl.SliceLayout(0, L)))  # (a, r)
    return (gl.arange(0, BLOCK_N // 16, layout=gl.SliceLayout(1, keys_l)),
            gl.arange(0, 4, layout=gl.SliceLayout(0, keys_l)),
            gl.arange(0, BLOCK_M // 16, layout=gl.SliceLayout(1, rows_l)),
            gl.arange(0, 8, layout=gl.SliceLayout(0, rows_l)))


@gluon.jit
def _key_parity(L: gl.constexpr):
    """The arange of key bit 0 (k0, dim 2 of the 5-d layout L)."""
    return gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, gl.SliceLayout(4, L)))))


@gluon.jit
def tile_halves_keys_first(k0, k1, rng_base, row0, col0, rng_cols,
                           BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, NUM_WARPS: gl.constexpr):
    """halves_keys_first: keys [col0, col0 + BLOCK_N) x query rows [row0,
    row0 + BLOCK_M) (multiples of 16), in a layout that converts to the
    NVMMA accumulator of a keys x queries tile (keys as the wgmma M dim,
    warps_per_cta [NUM_WARPS, 1]) without data movement.  There a thread
    holds keys {k, k + 8} of one key parity k0 (lane bit 2) and queries
    {2l, 2l + 1} (+ 8, + 16, ...): calls (c, e, k0, a, r) with k0 a
    broadcast dim on lane bit 2 (both lanes of a pair make the same call
    and keep its half k0: two calls per eight scores), e on lane bits 3-4,
    r as one register bit and lane bits 0-1, c on the warps (BLOCK_N = 16 *
    NUM_WARPS), a in registers."""
    gl.static_assert(BLOCK_N == 16 * NUM_WARPS, "one 16-key slab per warp")
    gl.static_assert(BLOCK_M % 16 == 0, "query tiles of multiples of 16")
    L: gl.constexpr = _keys_first_layout(NUM_WARPS)
    ic, ie, ia, ir = _keys_first_aranges(L, BLOCK_N, BLOCK_M)
    return tile_halves_keys_first_from(k0, k1, rng_base, row0, col0, rng_cols, ic, ie, ia, ir, _key_parity(L),
                                       BLOCK_N, BLOCK_M)


@gluon.jit
def tile_keep_keys_first_shared(k0, k1, rng_base, row0, col0, rng_cols, t_hi,
                                BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, NUM_WARPS: gl.constexpr):
    """keep_keys_first_from_bits of the tile of tile_halves_keys_first (1
    kept, 0 dropped; t_hi = t << 16), each Philox call made once per lane
    pair: the calls (c, e, 1, a, r) are drawn with bit 0 of a on lane bit 2
    (each lane of the pair draws one of two 16-query groups), reduced to
    their eight keep bits (call_keep_bits) and converted to the layout of
    tile_halves_keys_first's calls, where lane bit 2 is the broadcast key
    parity (one warp shuffle per call: each lane gets its partner's calls);
    each lane then reads the bits of its parity.  Half the Philox rounds,
    and one register per call in place of four halves (BLOCK_M >= 32)."""
    gl.static_assert(BLOCK_N == 16 * NUM_WARPS, "one 16-key slab per warp")
    gl.static_assert(BLOCK_M % 32 == 0, "query tiles of pairs of 16-row groups")
    LW: gl.constexpr = gl.BlockedLayout([1, 1, 1, 1, 2], [1, 4, 1, 2, 4], [NUM_WARPS, 1, 1, 1, 1], [4, 3, 1, 2, 0])
    L: gl.constexpr = _keys_first_layout(NUM_WARPS)
    ic, ie, ia, ir = _keys_first_aranges(LW, BLOCK_N, BLOCK_M)
    w0, w1, w2, w3 = tile_words_keys_first(k0, k1, rng_base, row0, col0, rng_cols, ic, ie, ia, ir)
    bits = gl.convert_layout(call_keep_bits(w0, w1, w2, w3, t_hi), L)
    return keep_keys_first_from_bits(bits, _key_parity(L), BLOCK_N, BLOCK_M)


@gluon.jit
def tile_call_bits_rng(k0, k1, rng_base, row0, col0, rng_cols, t_hi,
                       CHUNK_N: gl.constexpr, BLOCK_M: gl.constexpr, NUM_WARPS: gl.constexpr):
    """The Philox calls of keys [col0, col0 + CHUNK_N) x query rows [row0,
    row0 + BLOCK_M), each made once and reduced to its eight keep bits
    (call_keep_bits; t_hi = t << 16), for the backward's RNG warps
    (DROPOUT_RNG_WARPS): shaped (c, e, 1, a, r) = (1, 4, 1, BLOCK_M / 16,
    8), e and r on the lanes, a on the NUM_WARPS warps, one call per thread
    per 16 NUM_WARPS rows (a 16-row group per warp, the groups wrapping over
    the warps).  The bits go to shared memory, so no layout has to match an
    accumulator."""
    gl.static_assert(CHUNK_N == 16, "one 16-key slab per chunk")
    gl.static_assert(BLOCK_M % (16 * NUM_WARPS) == 0, "16-row groups spread evenly over the warps")
    L: gl.constexpr = gl.BlockedLayout([1, 1, 1, 1, 1], [1, 4, 1, 1, 8], [1, 1, 1, NUM_WARPS, 1], [4, 1, 3, 2, 0])
    ic, ie, ia, ir = _keys_first_aranges(L, CHUNK_N, BLOCK_M)
    w0, w1, w2, w3 = tile_words_keys_first(k0, k1, rng_base, row0, col0, rng_cols, ic, ie, ia, ir)
    return call_keep_bits(w0, w1, w2, w3, t_hi)


@gluon.jit
def kept_keys_first_from_call_bits(bits_smem, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
                                   NUM_WARPS: gl.constexpr):
    """The (BLOCK_N, BLOCK_M) keep flags of a keys x queries tile from its
    calls' keep bits in shared memory (shaped (c, e, 1, a, r), as
    tile_call_bits_rng writes them), loaded in tile_keep_keys_first_shared's
    layout (both lanes of a pair read each call, lane bit 2 the key parity)
    so that the flags convert to the accumulator without data movement, in
    kept_keys_first_from_bits' form: nonzero where kept, zero where dropped."""
    L: gl.constexpr = _keys_first_layout(NUM_WARPS)
    return kept_keys_first_from_bits(bits_smem.load(L), _key_parity(L), BLOCK_N, BLOCK_M)


@gluon.jit
def select_kept(x, halves, t_hi):
    """x (float32) where its score is kept, i.e. halves >= t_hi = t << 16
    (unsigned; t the 16-bit threshold), else 0; halves in x's layout.  One
    compare and one select per element, in an asm block: a plain select
    that is then converted to 16 bits, LLVM rewrites into a select of the
    converted values, which on packed pairs costs two byte permutes more per
    pair (the H200 build of the forward: 86 PRMT more per 64 x 128 tile)."""
    t = gl.full(x.shape, 0, gl.uint32, x.type.layout) + t_hi
    return gl.inline_asm_elementwise(
        "{ .reg .pred keep; setp.hs.u32 keep, $2, $3; selp.f32 $0, $1, 0f00000000, keep; }",
        "=r,r,r,r", [x, halves, t], dtype=gl.float32, is_pure=True, pack=1)


@gluon.jit
def select_nonzero(x, flags):
    """x (float32) where flags (uint32, x's layout) is nonzero, else 0: one
    bit test with a predicate result and one select per element, in an asm
    block so that the select stays on the float32 value (as select_kept)."""
    return gl.inline_asm_elementwise(
        "{ .reg .pred keep; setp.ne.u32 keep, $2, 0; selp.f32 $0, $1, 0f00000000, keep; }",
        "=r,r,r", [x, flags], dtype=gl.float32, is_pure=True, pack=1)


@gluon.jit
def negate_dropped(x, halves, t_hi):
    """x (float32, >= 0) negated where its score is dropped (halves < t_hi;
    halves in x's layout): flash-attn's S_dmask encoding, so that one
    register set carries both P and the keep mask (kept iff x >= 0, a
    dropped 0 reading as kept changes nothing: its P is 0)."""
    t = gl.full(x.shape, 0, gl.uint32, x.type.layout) + t_hi
    return gl.inline_asm_elementwise(
        "{ .reg .pred keep; .reg .f32 neg; setp.hs.u32 keep, $2, $3; neg.f32 neg, $1; selp.f32 $0, $1, neg, keep; }",
        "=r,r,r,r", [x, halves, t], dtype=gl.float32, is_pure=True, pack=1)
