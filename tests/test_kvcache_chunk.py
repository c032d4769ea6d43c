"""flash_attn_with_kvcache(attention_chunk=C): chunked attention (Llama 4)
against a KV cache.

Query token i sits at cache position p = i + kv_end - Nq (kv_end: the
sequence's length after the append) and attends key j only if
(j - lp) // C == (p - lp) // C (floor; chunks counted from the sequence's
first key lp = cache_leftpad[b], 0 without; nothing when p < lp), intersected
with causal and the window.  Every case runs ours against test_kvcache's float64 reference (one
sequence at a time from the logical cache, its own chunk rule) and its
in-dtype baseline; the float64 reference is itself checked against
flashattn_triton.reference.attention_ref(attention_chunk=).  On CPU the
decode kernel runs in Triton's interpreter with 32-key tiles (16 where a test
sets it), so chunks of 16 / 32 / 64 fall on tile edges and 1 / 20 / 23 / 24 /
48 do not.
"""

import itertools
import math

import pytest
import torch

import flashattn_triton._kvcache as kvc
import flashattn_triton.kernels.decode as decode
from flashattn_triton._kvcache import flash_attn_with_kvcache
from flashattn_triton.reference import attention_ref
from _utils import DTYPES, assert_close
from test_chunk import BAD_CHUNKS
from test_kvcache import (check, check_compiled_step, check_fallback_paged, ints, logical_cache, make_cache,
                          reference, rnd, write_cache)


def sees_nothing(lens, n_new, n_q):
    """(B, Nq) bool: query tokens before cache position 0 (p < 0): with
    chunks they attend no key, causal or not."""
    kv_end = torch.tensor(lens)[:, None] + n_new
    return torch.arange(n_q)[None, :] + kv_end - n_q < 0


def check_attention_ref(q, kc, vc, lens_after, table, causal, window, chunk):
    """test_kvcache's float64 reference (its own chunk rule) equals
    reference.attention_ref(attention_chunk=) on the caches after the append
    (no left padding)."""
    batch, n_q = q.shape[:2]
    rows = list(range(batch))
    ours = reference(q, kc, vc, seqlens=ints(q.device, lens_after), block_table=table, causal=causal,
                     window=window, chunk=chunk)
    for b in range(batch):
        n = lens_after[b]
        k = logical_cache(kc, b, rows, table)[:n].double().transpose(0, 1)[None]  # (1, Hkv, n, d)
        v = logical_cache(vc, b, rows, table)[:n].double().transpose(0, 1)[None]
        left, right = window
        out, lse = attention_ref(q[b:b + 1].double().transpose(1, 2), k, v,
                                 causal_shift=n - n_q if causal else None, window=(left, right),
                                 attention_chunk=chunk)
        assert_close(f"reference vs attention_ref (sequence {b}): out", ours[0][b],
                     out[0].transpose(0, 1), atol=1e-10)
        seen = torch.isfinite(lse[0])
        assert torch.equal(seen, torch.isfinite(ours[1][b])), "reference vs attention_ref: rows that see no key"
        assert_close(f"reference vs attention_ref (sequence {b}): lse", ours[1][b][seen], lse[0][seen],
                     atol=1e-10)


# ---------------------------------------------------------------------------
# Against the reference
# ---------------------------------------------------------------------------

# (B, Nq, Hq, Hkv, d, capacity, cache_seqlens, n_new, causal, window, chunk, dtype, page, num_splits)
CASES = [
    # one token, GQA: the last key of chunk 0 / the first of chunk 1 / deep in chunk 5
    (3, 1, 4, 2, 32, 100, [16, 17, 95], 0, True, (-1, -1), 16, "bf16", None, 1),
    # chunks that do not divide the 32-key tile, per-row page lookups, 3 splits
    (3, 1, 4, 2, 32, 100, [23, 24, 100], 0, True, (-1, -1), 23, "bf16", 16, 3),
    # speculative decoding, 4 appended tokens, the first sequence's cross position 64
    (2, 4, 8, 2, 64, 130, [62, 122], 4, True, (-1, -1), 32, "bf16", 32, 2),
    (2, 4, 8, 2, 64, 130, [62, 122], 4, True, (-1, -1), 32, "bf16", None, 1),
    # non-causal, 3 appended tokens crossing position 20: the last sees only itself
    (2, 3, 4, 2, 32, 96, [18, 57], 3, False, (-1, -1), 20, "fp16", 16, 3),
    # Nq > kv_end: tokens before position 0 see nothing (causal or not)
    (1, 5, 4, 2, 32, 50, [2], 0, False, (-1, -1), 4, "fp16", None, 1),
    (1, 8, 4, 2, 32, 50, [6], 0, True, (-1, -1), 4, "fp16", None, 2),
    # causal + window: the chunk binds at position 96, the window at 41-44
    (2, 4, 4, 2, 32, 100, [100, 45], 0, True, (10, -1), 24, "bf16", None, 3),
    # a two-sided window with chunks
    (2, 2, 4, 2, 32, 96, [96, 40], 0, False, (10, 5), 16, "bf16", 64, 2),
    # chunks of one key: each token sees its own position only
    (2, 1, 2, 2, 40, 77, [10, 76], 1, True, (-1, -1), 1, "fp32", 16, 2),
    # MQA, 48-key chunks over 32-key tiles, an empty cache appended to, more splits than tiles
    (4, 2, 4, 1, 32, 96, [0, 46, 47, 90], 2, True, (-1, -1), 48, "fp16", 32, 8),
    # 64-key chunks, a longer cache, automatic split count
    (2, 1, 8, 2, 64, 200, [64, 200], 0, False, (-1, -1), 64, "bf16", None, 0),
]


def _id(c):
    layout = "contiguous" if c[12] is None else f"page{c[12]}"
    win = "" if c[9] == (-1, -1) else f"-win{c[9][0]}_{c[9][1]}"
    return (f"B{c[0]}-q{c[1]}-h{c[2]}/{c[3]}-new{c[7]}-{'causal' if c[8] else 'full'}{win}-C{c[10]}"
            f"-{c[11]}-{layout}-s{c[13]}")


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_chunk_against_reference(case, device):
    batch, n_q, h_q, h_kv, d, cap, lens, n_new, causal, window, chunk, dtype, page, splits = case
    dtype = DTYPES[dtype]
    q = rnd(device, dtype, batch, n_q, h_q, d)
    k_cache, v_cache, table = make_cache(device, batch, cap, h_kv, d, dtype, page)
    kw = dict(seqlens=ints(device, lens), causal=causal, window=window, chunk=chunk, block_table=table,
              num_splits=splits)
    if n_new:
        kw.update(k=rnd(device, dtype, batch, n_new, h_kv, d), v=rnd(device, dtype, batch, n_new, h_kv, d))
    out, lse, kc, vc = check(q, k_cache, v_cache, dtype, **kw)
    empty = sees_nothing(lens, n_new, n_q).to(device)
    assert torch.equal(out[empty], torch.zeros_like(out[empty])), "a token before position 0 must give zeros"
    assert torch.isneginf(lse.transpose(1, 2)[empty]).all(), "a token before position 0 must give lse = -inf"
    # The chunks change the result: the same call without them differs (each
    # case has a token whose chunk starts after key 0).
    plain = flash_attn_with_kvcache(q, kc.clone(), vc.clone(), cache_seqlens=ints(device, [n + n_new for n in lens]),
                                    block_table=table, causal=causal, window_size=window, num_splits=splits)
    assert not torch.equal(plain, out), "attention_chunk had no effect"
    check_attention_ref(q, kc, vc, [n + n_new for n in lens], table, causal, window if not causal else
                        (window[0], 0), chunk)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("combine", ["fused", "separate", "gathered"])
def test_chunk_splits_agree(combine, dtype, device, monkeypatch):
    """1 split, several, more than the chunk has key tiles (empty splits) and
    the automatic count match the reference: the splits share out the
    narrowed key range; both merges."""
    monkeypatch.setenv(decode.ENV_CONFIG, "BLOCK_N=16")
    monkeypatch.setenv(decode.ENV_COMBINE, combine)
    q = rnd(device, dtype, 3, 2, 4, 32)
    k_cache, v_cache, _ = make_cache(device, 3, 120, 2, 32, dtype)
    lens = ints(device, [120, 49, 9])  # positions 118-119, 47-48 (crossing 48), 7-8
    for splits in (1, 2, 3, 8, 0):
        check(q, k_cache, v_cache, dtype, seqlens=lens, causal=True, chunk=24, num_splits=splits)


@pytest.mark.parametrize("page,block_n", [(16, 32), (64, 32)], ids=["page16-lookup-per-row", "page64-per-tile"])
def test_chunk_paged_equals_contiguous(page, block_n, device, monkeypatch):
    """One logical cache, stored contiguously and in shuffled pages, gives
    bit-identical chunked results, appends included."""
    monkeypatch.setenv(decode.ENV_CONFIG, f"BLOCK_N={block_n}")
    batch, n_q, h_q, h_kv, d, cap, dtype = 2, 3, 4, 2, 32, 3 * page, torch.bfloat16
    q = rnd(device, dtype, batch, n_q, h_q, d)
    kp, vp, table = make_cache(device, batch, cap, h_kv, d, dtype, page)
    kcont = kp[table.long()].flatten(1, 2).clone()
    vcont = vp[table.long()].flatten(1, 2).clone()
    k, v = rnd(device, dtype, batch, n_q, h_kv, d), rnd(device, dtype, batch, n_q, h_kv, d)
    lens = ints(device, [page - 2, cap - 3])
    got_p = flash_attn_with_kvcache(q, kp, vp, k, v, cache_seqlens=lens, block_table=table, causal=True,
                                    num_splits=3, return_softmax_lse=True, attention_chunk=20)
    got_c = flash_attn_with_kvcache(q, kcont, vcont, k, v, cache_seqlens=lens, causal=True,
                                    num_splits=3, return_softmax_lse=True, attention_chunk=20)
    assert torch.equal(got_p[0], got_c[0]) and torch.equal(got_p[1], got_c[1]), "paged and contiguous differ"
    assert torch.equal(kp[table.long()].flatten(1, 2), kcont) and torch.equal(vp[table.long()].flatten(1, 2), vcont)
    ref = reference(q, kcont, vcont, seqlens=lens + n_q, causal=True, chunk=20)
    base = reference(q, kcont, vcont, seqlens=lens + n_q, causal=True, chunk=20, dtype=dtype)
    assert_close("out", got_p[0], ref[0], base[0], 2.0, dtype)


# ---------------------------------------------------------------------------
# Key tiles outside the chunks are skipped
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("page", [None, 16, 64], ids=["contiguous", "page16", "page64"])
def test_chunk_skips_tiles_before_the_chunk(page, splits, device, monkeypatch):
    """The key tiles before the one holding the chunk's start are never read:
    the cache there holds NaN (a tile that were read would give NaN, since
    0 * NaN = NaN in P V) and its pages' block-table entries name no page
    (-1 or far past the pool), and the result equals the one from a clean
    cache bit for bit, and the reference.  As the window's left edge, this
    narrows each split's share of the tiles too."""
    dtype, block_n, chunk = torch.float16, 32, 40
    # The poisoned range ends at a 32-key tile edge: the GPU's 64-key tiles would
    # hold poisoned keys (masked, but 0 * NaN = NaN) and page entries named -1.
    monkeypatch.setenv(decode.ENV_CONFIG, f"BLOCK_N={block_n}")
    lens, n_new, n_q = [100, 130, 61], 2, 2
    kv_end = [n + n_new for n in lens]  # 102, 132, 63: positions 100-101, 130-131 (crossing 120), 61-62
    starts = [(e - n_q) // chunk * chunk for e in kv_end]  # the first token's chunk start: 80, 120, 40
    first_tile = [s // block_n * block_n for s in starts]  # 64, 96, 32
    q = rnd(device, dtype, 3, n_q, 4, 32)
    k_cache, v_cache, table = make_cache(device, 3, 144, 2, 32, dtype, page)
    k, v = rnd(device, dtype, 3, n_new, 2, 32), rnd(device, dtype, 3, n_new, 2, 32)
    kw = dict(cache_seqlens=ints(device, lens), block_table=table, causal=True, num_splits=splits,
              return_softmax_lse=True, attention_chunk=chunk)
    clean = flash_attn_with_kvcache(q, k_cache.clone(), v_cache.clone(), k, v, **kw)
    kn, vn = k_cache.clone(), v_cache.clone()
    for b in range(3):
        pos = torch.arange(first_tile[b], device=device)
        write_cache(kn, b, [0, 1, 2], table, pos, float("nan"))
        write_cache(vn, b, [0, 1, 2], table, pos, float("nan"))
    tbl = table
    if page is not None:
        tbl = table.clone()
        for b in range(3):
            tbl[b, : first_tile[b] // page] = -1 if b % 2 else 10 ** 6
        kw["block_table"] = tbl
    poisoned = flash_attn_with_kvcache(q, kn, vn, k, v, **kw)
    assert torch.isfinite(poisoned[0]).all(), "a key tile before the chunk was read"
    assert torch.equal(poisoned[0], clean[0]) and torch.equal(poisoned[1], clean[1])
    ref = reference(q, k_cache, v_cache, k, v, seqlens=ints(device, lens), block_table=table, causal=True,
                    chunk=chunk)
    base = reference(q, k_cache, v_cache, k, v, seqlens=ints(device, lens), block_table=table, causal=True,
                     chunk=chunk, dtype=dtype)
    assert_close("out", poisoned[0], ref[0], base[0], 2.0, dtype)
    assert_close("lse", poisoned[1], ref[1], base[1].float(), 2.0, torch.float32)


@pytest.mark.parametrize("splits", [1, 3])
def test_chunk_visits_only_the_chunks_tiles(splits, device, monkeypatch):
    """The key tiles each row tile visits (its calls of tile_softmax, counted
    in the interpreter): those of its tokens' chunks only, on both ends.
    Non-causal, 32-key tiles and chunks, 3 tokens x 8 heads over 16-row
    tiles (tokens 0-1 | 2): sequence 0 (kv_end 1) has positions -2, -1 | 0,
    so its first row tile visits nothing; sequence 1 (kv_end 97) has 94, 95 |
    96, so its first row tile stops at key 96 (where kv_end would let it read
    one more tile) and its second starts there.  Without chunks: 10 tiles."""
    if device.type != "cpu":
        pytest.skip("counts the calls of the interpreted kernel")
    monkeypatch.setenv(decode.ENV_CONFIG, "BLOCK_M=16,BLOCK_N=32")
    visited = []
    real = decode.tile_softmax

    def spy(q, k, cols, *args):
        visited.append(int(cols.handle.data[0]))
        return real(q, k, cols, *args)

    monkeypatch.setattr(decode, "tile_softmax", spy)
    dtype = torch.float32
    q = rnd(device, dtype, 2, 3, 8, 16)
    k_cache, v_cache, _ = make_cache(device, 2, 128, 1, 16, dtype)
    for chunk, expected in ((0, [0] * 2 + [0, 32, 64, 96] * 2), (32, [0, 64, 96])):
        visited.clear()
        check(q, k_cache, v_cache, dtype, seqlens=ints(device, [1, 97]), chunk=chunk, num_splits=splits)
        assert sorted(visited) == sorted(expected), f"attention_chunk={chunk}: visited tiles {visited}"


@pytest.mark.parametrize("n_q", [1, 4, 33, 34])
def test_local_span(n_q):
    """decode.local_span, the most keys n_q consecutive query tokens can see
    (from the lowest first key to the highest last one, as the kernel narrows
    a row tile's range), against a brute force over start positions, windows
    and chunks: equal to the widest run (0 when nothing bounds it)."""
    for left, right, chunk in itertools.product([-1, 0, 3, 40], [-1, 0, 2], [0, 1, 7, 16, 32]):
        firsts, lasts = [], []
        widest = 0
        for p0 in range(4 * max(chunk, 8) + 3):
            pos = torch.arange(p0, p0 + n_q)
            first = pos - left if left >= 0 else torch.full_like(pos, -10 ** 6)
            last = pos + right if right >= 0 else torch.full_like(pos, 10 ** 6)
            if chunk:
                first = torch.maximum(first, pos // chunk * chunk)
                last = torch.minimum(last, pos // chunk * chunk + chunk - 1)
            widest = max(widest, int(last.max() - first.min()) + 1)
        want = 0 if widest > 10 ** 5 else widest
        got = decode.local_span(n_q, left, right, chunk)
        assert got == want, f"local_span(n_q={n_q}, left={left}, right={right}, chunk={chunk}) = {got}, brute force {want}"


def test_chunk_plans_splits_over_its_chunk(monkeypatch):
    """Host-side plan on 132 SMs, batch 1, 8 KV heads, a 128k cache: with a
    chunk of 1024 keys (or a 1024-key window) the automatic split count is
    the one for the chunk's tiles, fewer than for the whole capacity, and a
    chunk of one tile never gets more splits than the two tiles it can
    straddle."""
    monkeypatch.setattr(decode, "sm_count", lambda device: 132)
    monkeypatch.setattr(decode, "INTERPRET", False)
    meta, bf16 = torch.device("meta"), torch.bfloat16
    whole = decode.decode_plan(1, 4, 8, 128, 131072, bf16, meta)
    span = decode.local_span(1, -1, 0, 1024)
    chunked = decode.decode_plan(1, 4, 8, 128, 131072, bf16, meta, span=span)
    block_n = chunked.config.BLOCK_N
    tiles = (span + 2 * block_n - 2) // block_n
    assert chunked.num_splits < whole.num_splits, (chunked.num_splits, whole.num_splits)
    assert chunked.num_splits == decode.choose_num_splits(8, tiles * block_n, block_n, 132, tolerance=1.0)
    assert decode.decode_plan(1, 4, 8, 128, 131072, bf16, meta, span=decode.local_span(1, 1023, 0, 0)) == chunked
    small = decode.decode_plan(1, 4, 8, 128, 131072, bf16, meta, span=decode.local_span(1, -1, 0, block_n))
    assert small.num_splits <= 2, small.num_splits
    assert decode.decode_plan(1, 4, 8, 128, 131072, bf16, meta, span=10 ** 9) == whole


def test_chunk_auto_splits_on_a_long_cache(device, monkeypatch):
    """num_splits=0 with a 16-key chunk over a 512-key cache (32-key tiles):
    the decode launch plans at most two splits (the tiles one chunk can
    straddle, where the capacity alone gives more) and the result is right."""
    if device.type != "cpu":
        pytest.skip("the interpreter's plan (8 SMs); the GPU sizes run in test_gpu_chunk_llama4")
    monkeypatch.setenv(decode.ENV_CONFIG, "BLOCK_N=32")
    used = []
    real = decode.decode_attention

    def spy(*args, **kwargs):
        used.append(real(*args, **kwargs))
        return used[-1]

    monkeypatch.setattr(decode, "decode_attention", spy)
    dtype = torch.bfloat16
    q = rnd(device, dtype, 1, 1, 4, 32)
    k_cache, v_cache, _ = make_cache(device, 1, 512, 1, 32, dtype)
    check(q, k_cache, v_cache, dtype, seqlens=ints(device, [300]), causal=True, chunk=16, num_splits=0)
    check(q, k_cache, v_cache, dtype, seqlens=ints(device, [300]), causal=True, num_splits=0)
    assert used[0] <= 2 < used[1], f"splits with / without the chunk: {used}"


def test_chunk_holding_every_key_changes_nothing(device):
    """A chunk at least as long as the cache (or past CHUNK_MAX, held there)
    gives the result without chunks bit for bit: the same tiles, the same
    splits."""
    dtype = torch.bfloat16
    q = rnd(device, dtype, 2, 3, 4, 32)
    k_cache, v_cache, table = make_cache(device, 2, 96, 2, 32, dtype, 16)
    kw = dict(cache_seqlens=ints(device, [96, 40]), block_table=table, causal=True, num_splits=3,
              return_softmax_lse=True)
    plain = flash_attn_with_kvcache(q, k_cache, v_cache, **kw)
    for chunk in (96, 2 ** 40):
        got = flash_attn_with_kvcache(q, k_cache, v_cache, attention_chunk=chunk, **kw)
        assert torch.equal(got[0], plain[0]) and torch.equal(got[1], plain[1]), f"attention_chunk={chunk}"


# ---------------------------------------------------------------------------
# With the other options
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("page", [None, 32], ids=["contiguous", "page32"])
def test_chunk_with_leftpad_counts_from_first_key(page, device):
    """cache_leftpad hides the keys before it and the chunks count from it
    (as FlashAttention-3 and the varlen path do): with leftpad 13 the chunks
    are [13, 29), [29, 45), ...; 13 and 5 are no multiples of 16, so chunks
    counted from position 0 fail this test."""
    dtype = torch.float16
    q = rnd(device, dtype, 3, 2, 4, 32)
    k_cache, v_cache, table = make_cache(device, 3, 96, 2, 32, dtype, page)
    check(q, k_cache, v_cache, dtype, block_table=table, seqlens=ints(device, [40, 20, 5]),
          leftpad=ints(device, [13, 5, 0]), k=rnd(device, dtype, 3, 2, 2, 32), v=rnd(device, dtype, 3, 2, 2, 32),
          causal=True, chunk=16, num_splits=2)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_chunk_with_rotary(causal, device):
    """Rotary embedding with chunks: chunked attention is local, so the query
    is rotated per token (cache_seqlens + i) even without causal, as
    FlashAttention-3 does."""
    dtype = torch.bfloat16
    q = rnd(device, dtype, 2, 3, 4, 32)
    k_cache, v_cache, table = make_cache(device, 2, 64, 2, 32, dtype, 16)
    angle = torch.rand(64, 8, device=device) * 2 * math.pi
    check(q, k_cache, v_cache, dtype, block_table=table, seqlens=ints(device, [14, 50]),
          k=rnd(device, dtype, 2, 3, 2, 32), v=rnd(device, dtype, 2, 3, 2, 32), cos=torch.cos(angle),
          sin=torch.sin(angle), causal=causal, chunk=16, num_splits=2)


def test_chunk_with_sinks_softcap_alibi(device, monkeypatch):
    """Sinks (rows that see no key: out 0, LSE = sink), softcap and ALiBi with
    chunks, merged by the combine kernel."""
    monkeypatch.setenv(decode.ENV_COMBINE, "separate")
    dtype = torch.float16
    q = rnd(device, dtype, 2, 4, 4, 32, scale=3.0)
    k_cache, v_cache, table = make_cache(device, 2, 96, 2, 32, dtype, 16)
    sinks = torch.randn(4, device=device)
    lens = [1, 70]  # sequence 0: positions -3..0 (three tokens before position 0)
    out, lse, _, _ = check(q, k_cache, v_cache, dtype, block_table=table, seqlens=ints(device, lens),
                           softcap=5.0, alibi=torch.rand(2, 4, device=device) * 0.5, sinks=sinks, chunk=24,
                           num_splits=3)
    empty = sees_nothing(lens, 0, 4).to(device)
    assert torch.equal(out[empty], torch.zeros_like(out[empty]))
    got = lse.transpose(1, 2)[empty]
    assert_close("lse of rows that see no key", got, sinks.expand_as(got), atol=1e-6)


def test_chunk_several_row_tiles(device, monkeypatch):
    """A GQA group of more rows than a tile (3 tokens x 8 heads, 16-row tiles):
    the first row tile's tokens lie in one chunk, the second's in the next, and
    each tile narrows its own key range."""
    monkeypatch.setenv(decode.ENV_CONFIG, "BLOCK_M=16")
    dtype = torch.bfloat16
    q = rnd(device, dtype, 1, 3, 16, 16)
    k_cache, v_cache, _ = make_cache(device, 1, 80, 2, 16, dtype)
    check(q, k_cache, v_cache, dtype, seqlens=46, k=rnd(device, dtype, 1, 3, 2, 16),
          v=rnd(device, dtype, 1, 3, 2, 16), causal=True, chunk=16, num_splits=2)  # positions 46, 47 | 48


def test_chunk_torch_fallback(monkeypatch):
    """CPU without Triton's interpreter: the PyTorch path has the same chunks."""
    monkeypatch.setattr(kvc, "INTERPRET", False)
    cpu, dtype = torch.device("cpu"), torch.float32
    check_fallback_paged(3, window=(20, -1), causal=True, chunk=16, sinks=torch.randn(4))
    q = rnd(cpu, dtype, 2, 3, 4, 32)
    k_cache, v_cache, _ = make_cache(cpu, 2, 64, 2, 32, dtype)
    check(q, k_cache, v_cache, dtype, seqlens=ints(cpu, [1, 50]), chunk=23)  # positions -2..0 and 47..49


# ---------------------------------------------------------------------------
# API: validation, op schema, torch.compile
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("chunk,exc,match", BAD_CHUNKS)
def test_chunk_validation(chunk, exc, match):
    q = torch.randn(2, 1, 4, 16, dtype=torch.float16)
    kc = torch.randn(2, 32, 2, 16, dtype=torch.float16)
    with pytest.raises(exc, match=match):
        flash_attn_with_kvcache(q, kc, kc.clone(), cache_seqlens=5, attention_chunk=chunk)


def test_chunk_is_keyword_only():
    q = torch.randn(1, 1, 2, 16)
    kc = torch.randn(1, 32, 1, 16)
    with pytest.raises(TypeError):
        flash_attn_with_kvcache(q, kc, kc.clone(), None, None, None, None, 5, None, None, None, None, False,
                                (-1, -1), 0.0, True, None, 0, False, None, 16)


def test_chunk_in_op_schemas(device):
    for op in (torch.ops.flashattn_triton.kvcache_fwd, torch.ops.flashattn_triton.kvcache_attn):
        schema = str(op.default._schema)
        assert "Tensor? sinks=None, SymInt attention_chunk=0) ->" in schema, schema
    r = lambda *shape: torch.randn(*shape, device=device)  # noqa: E731
    torch.library.opcheck(
        torch.ops.flashattn_triton.kvcache_fwd,
        (r(1, 2, 2, 16), r(1, 32, 1, 16), r(1, 32, 1, 16), r(1, 2, 1, 16), r(1, 2, 1, 16), None, None,
         ints(device, [15]), None, None, None, None, 0.25, True, -1, 0, 0.0, True, 2, None, 16),
        test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(
        torch.ops.flashattn_triton.kvcache_attn,
        (r(1, 2, 2, 16), r(1, 32, 1, 16), r(1, 32, 1, 16), None, None, None, None, ints(device, [17]),
         None, None, None, None, 0.25, False, -1, -1, 0.0, True, 2, r(2), 16),
        test_utils=("test_schema", "test_faketensor"))


def test_chunk_torch_compile_fullgraph(device):
    """The chunk passes through torch.compile(fullgraph=True) (aot_eager)."""
    check_compiled_step(device, 2, [14, 40], chunk=16)


# ---------------------------------------------------------------------------
# GPU, realistic sizes
# ---------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("page", [None, 16], ids=["contiguous", "page16"])
def test_gpu_chunk_llama4(device, page):
    """Llama 4's local layers: 8192-key chunks, Hq=40, Hkv=8, d=128, bf16, an
    10k cache at batch 4 with lengths around the chunk edge, one appended
    token, rotary, causal, automatic split count; against float64."""
    dtype, batch, h_q, h_kv, d, cap = torch.bfloat16, 4, 40, 8, 128, 10240
    q = rnd(device, dtype, batch, 1, h_q, d)
    k_cache, v_cache, table = make_cache(device, batch, cap, h_kv, d, dtype, page)
    angle = torch.rand(cap, d // 2) * 2 * math.pi
    check(q, k_cache, v_cache, dtype, k=rnd(device, dtype, batch, 1, h_kv, d), v=rnd(device, dtype, batch, 1, h_kv, d),
          cos=torch.cos(angle).to(device, dtype), sin=torch.sin(angle).to(device, dtype),
          seqlens=ints(device, [8190, 8191, 8192, 10000]), block_table=table, causal=True, num_splits=0, chunk=8192)
