"""Chunked attention (``attention_chunk``, Llama 4's local layers), as a spec.

With chunk size C > 0 the keys are cut into chunks [c C, (c + 1) C) and
query row i, at key position p = i + Nk - Nq (bottom-right, per sequence in
packed batches), sees key j only if j // C == p // C (floor division; rows
with p < 0 see nothing: zeros, LSE -inf), intersected with the causal /
window rule.  C = 0 is off.  The kernels skip the key (query) tiles outside
a tile's chunks instead of masking them (kernels/tiles.py), mask the tiles a
chunk boundary crosses, and never run on the Hopper tier; where that tier
runs, a call whose queries (and cache, if any) are whole chunks is instead
reshaped to one sequence per chunk (forced here by
_dispatch.CHUNKS_AS_SEQUENCES).

Every comparison is against the float64 reference (reference.py's chunk
rule) within the usual tolerance (testing.py: 2x / 3x PyTorch's own error in
the input dtype), on the kernels (the interpreter on CPU, whose tiles are
32 query rows x 16 keys) and, where it says so, on the blockwise CPU path.
Chunk sizes: 16 (a multiple of the key tiles, not the query tiles), 37 (a
multiple of neither), 64 (of both), 1 and sizes past the sequence.
"""

import pytest
import torch
import triton
import triton.language as tl

from flashattn_triton import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                              flash_attn_varlen_func, ops)
from flashattn_triton.kernels.tiles import kv_tile_range, q_tile_range
from flashattn_triton.reference import attention_ref, visible_mask
from flashattn_triton.testing import (alibi_slopes, assert_close, flash_attention_ref, leaf, make_qkv, rand,
                                      random_cu_seqlens, varlen_attention_ref)
from _utils import ON_GPU, fake_launch, path  # noqa: F401  (path: a fixture)




def _run(fn, inputs, do, dlse):
    """(out, lse, grads) of fn on leaves ``inputs``, the loss weighing out by do and lse by dlse."""
    out, lse = fn(*inputs)
    loss = (out.float() * do.float()).sum() + (torch.where(torch.isinf(lse), 0.0, lse).float() * dlse).sum()
    return out.detach(), lse.detach(), torch.autograd.grad(loss, inputs)


def _check(q, k, v, chunk, causal=True, window=(-1, -1), **variants):
    """flash_attn_func with attention_chunk=chunk against the float64 reference:
    out and LSE within 2x, dq, dk, dv within 3x PyTorch's error in the
    input dtype.  Returns (ours, reference)."""
    dtype = q.dtype
    do = rand(q.shape[:-1] + (v.shape[-1],), dtype, q.device)
    dlse = rand((q.shape[0], q.shape[2], q.shape[1]), torch.float32, q.device)
    got = _run(lambda *t: flash_attn_func(*t, causal=causal, window_size=window, return_lse=True,
                                          attention_chunk=chunk, **variants),
               [leaf(t) for t in (q, k, v)], do, dlse)
    ref = _run(lambda *t: flash_attention_ref(*t, causal, window_size=window, attention_chunk=chunk, **variants),
               [leaf(t, torch.float64) for t in (q, k, v)], do, dlse)
    base = _run(lambda *t: flash_attention_ref(*t, causal, dtype=dtype, window_size=window, attention_chunk=chunk,
                                               **variants),
                [leaf(t) for t in (q, k, v)], do, dlse)
    assert_close("out", got[0], ref[0], base[0], 2.0, dtype)
    assert_close("lse", got[1], ref[1], base[1], 2.0, torch.float32)
    for name, g, r, b in zip(("dq", "dk", "dv"), got[2], ref[2], base[2]):
        assert_close(name, g, r, b, 3.0, dtype)
    return got, ref


# ---------------------------------------------------------------------------
# The rule
# ---------------------------------------------------------------------------

# (Nq, Nk, C, causal, the visible pairs drawn row by row: 1 = attended)
DRAWINGS = [
    # Nq < Nk: p = i + 4; row 0 (p = 4) in chunk [3, 6) up to itself, row 2 (p = 6) opens chunk [6, 9)
    (3, 7, 3, True, ["0001100",
                     "0001110",
                     "0000001"]),
    # Nq > Nk: p = i - 2; rows 0, 1 lie before key 0 and see nothing
    (5, 3, 2, True, ["000",
                     "000",
                     "100",
                     "110",
                     "001"]),
    # not causal: each row sees its whole chunk, the last one ragged (keys 4, 5 of [4, 8))
    (6, 6, 4, False, ["111100",
                      "111100",
                      "111100",
                      "111100",
                      "000011",
                      "000011"]),
]


def _drawing(rows) -> torch.Tensor:
    return torch.tensor([[c == "1" for c in r] for r in rows])


@pytest.mark.parametrize("n_q,n_k,chunk,causal,rows", DRAWINGS)
def test_rule_drawn(device, n_q, n_k, chunk, causal, rows):
    """The reference's mask and the kernels' attention both follow the
    drawings: with q = 0 every row attends its visible keys uniformly, and
    one-hot values (v[j] = e_j) make out[i, j] > 0 exactly where i sees j."""
    want = _drawing(rows)
    mask = visible_mask(n_q, n_k, n_k - n_q, (-1, 0 if causal else -1), chunk=chunk)
    assert torch.equal(mask, want)
    q = torch.zeros(1, n_q, 1, 16, device=device)
    k = rand((1, n_k, 1, 16), torch.float32, device)
    v = torch.eye(n_k, device=device)[None, :, None, :]
    out, lse = flash_attn_func(q, k, v, causal=causal, attention_chunk=chunk, return_lse=True)
    assert torch.equal(out[0, :, 0].cpu() > 0, want)
    counts = want.sum(1).double()
    assert_close("uniform weights", out[0, :, 0].double().cpu(), want.double() / counts.clamp(min=1)[:, None],
                 atol=1e-6)
    empty = counts == 0
    assert torch.isinf(lse[0, 0].cpu()[empty]).all() and torch.isfinite(lse[0, 0].cpu()[~empty]).all()


def test_chunk_zero_is_off_and_past_the_keys_changes_nothing(device):
    """attention_chunk=0 (the default) and any chunk that holds every key
    (C >= Nk) give the call without chunks, bit for bit (the same tiles, the
    chunk test true everywhere)."""
    q, k, v = make_qkv(1, 50, 70, 2, 1, 32, torch.bfloat16, device, requires_grad=False)
    plain = flash_attn_func(q, k, v, causal=True)
    assert torch.equal(flash_attn_func(q, k, v, causal=True, attention_chunk=0), plain)
    for chunk in (70, 71, 1 << 20, 1 << 40):  # (sizes from 2^30 on are held at 2^30)
        assert torch.equal(flash_attn_func(q, k, v, causal=True, attention_chunk=chunk), plain), chunk


def test_chunk_of_one_key(device):
    """C = 1: each row sees only the key at its own position (causal or not)."""
    q, k, v = make_qkv(1, 20, 30, 2, 2, 16, torch.float32, device, requires_grad=False)
    for causal in (True, False):
        out = flash_attn_func(q, k, v, causal=causal, attention_chunk=1)
        assert_close("out", out, v[:, 10:], atol=1e-6)


# ---------------------------------------------------------------------------
# Forward and backward against float64
# ---------------------------------------------------------------------------

CASES = [
    # (Nq, Nk, Hq, Hkv, d, C, causal, window, dtype)
    pytest.param(96, 96, 2, 2, 64, 16, True, (-1, -1), torch.bfloat16, id="square-C16-causal-bf16"),
    pytest.param(70, 113, 4, 2, 40, 37, True, (-1, -1), torch.float16, id="nq<nk-C37-causal-gqa-fp16"),
    pytest.param(100, 60, 3, 1, 32, 64, True, (-1, -1), torch.float32, id="nq>nk-C64-causal-mqa-fp32"),
    pytest.param(75, 90, 4, 2, 32, 37, False, (-1, -1), torch.bfloat16, id="nq<nk-C37-full-gqa-bf16"),
    pytest.param(90, 50, 2, 2, 16, 16, False, (-1, -1), torch.float32, id="nq>nk-C16-full-fp32"),
    pytest.param(96, 96, 2, 1, 32, 37, True, (20, 0), torch.float16, id="window20-C37-causal-fp16"),
    pytest.param(80, 99, 2, 2, 32, 64, False, (40, 9), torch.bfloat16, id="window40,9-C64-bf16"),
    pytest.param(128, 128, 2, 1, 64, 64, True, (-1, -1), torch.bfloat16, id="whole-q-tiles-C64-causal"),
]


@pytest.mark.parametrize("n_q,n_k,h_q,h_kv,d,chunk,causal,window,dtype", CASES)
def test_matches_reference(device, n_q, n_k, h_q, h_kv, d, chunk, causal, window, dtype):
    """out, LSE and gradients (the LSE's too); Nq > Nk puts rows before key 0
    (zeros, LSE -inf, no gradient), GQA / MQA sum dK, dV over the group;
    128 queries take the dK/dV kernel's whole-query-tile build (EVEN_M)."""
    q, k, v = make_qkv(1, n_q, n_k, h_q, h_kv, d, dtype, device, requires_grad=False)
    got, _ = _check(q, k, v, chunk, causal, window)
    if n_q > n_k:
        rows = n_q - n_k  # p < 0
        assert torch.equal(got[0][:, :rows], torch.zeros_like(got[0][:, :rows]))
        assert torch.isinf(got[1][:, :, :rows]).all()
        assert torch.equal(got[2][0][:, :rows], torch.zeros_like(got[2][0][:, :rows]))


@pytest.mark.parametrize("chunk,causal", [(37, True), (16, False)])
def test_blockwise_path_matches_reference(device, path, chunk, causal):
    """The CPU path without the interpreter (and the kernels) take the chunks too."""
    q, k, v = make_qkv(2, 70, 90, 2, 1, 32, torch.float16, device, requires_grad=False)
    _check(q, k, v, chunk, causal)


def test_variants_combine(device):
    """softcap, ALiBi (distances from the same diagonal) and sinks (rows
    before key 0 see only the sink: zeros, LSE = the sink) with chunks."""
    q, k, v = make_qkv(1, 60, 45, 2, 1, 32, torch.float32, device, requires_grad=False)
    sinks = torch.randn(2, device=device)
    got, _ = _check(q, k, v, 16, True, softcap=20.0, alibi_slopes=alibi_slopes(2, device), sinks=sinks)
    assert torch.equal(got[0][:, :15], torch.zeros_like(got[0][:, :15]))
    assert_close("sink-only LSE", got[1][0, :, :15], sinks[:, None].expand(2, 15), atol=1e-6)


def test_tiles_wider_than_a_chunk(device, monkeypatch):
    """Tiles that span several chunks (64 keys over chunks of 16, 64 rows
    over chunks of 16) and chunks that span several tiles, in every kernel:
    the forward, the dK/dV and dQ kernels and the one-launch backward."""
    from flashattn_triton.kernels import bwd
    q, k, v = make_qkv(1, 100, 130, 2, 1, 32, torch.bfloat16, device, requires_grad=False)
    monkeypatch.setenv("FLASHATTN_TRITON_CONFIG_FWD", "BLOCK_M=16,BLOCK_N=64,num_warps=4,num_stages=1")
    monkeypatch.setenv("FLASHATTN_TRITON_CONFIG_BWD_DKDV", "BLOCK_M=64,BLOCK_N=16,num_warps=4,num_stages=1")
    monkeypatch.setenv("FLASHATTN_TRITON_CONFIG_BWD_DQ", "BLOCK_M=16,BLOCK_N=64,num_warps=4,num_stages=1")
    _check(q, k, v, 16, True)
    monkeypatch.setattr(bwd, "ONE_LAUNCH", True)  # _bwd_dkdv_dq: both backward kernels, one launch
    _check(q, k, v, 23, False)


def test_deterministic_backward_is_portable_and_matches(device):
    q, k, v = make_qkv(1, 64, 64, 2, 2, 32, torch.float16, device, requires_grad=False)
    do = rand(q.shape, torch.float16, device)
    grads = []
    for _ in range(2):
        leaves = [leaf(t) for t in (q, k, v)]
        out = flash_attn_func(*leaves, causal=True, deterministic=True, attention_chunk=16)
        grads.append(torch.autograd.grad(out, leaves, do))
    for a, b in zip(*grads):
        assert torch.equal(a, b)


# ---------------------------------------------------------------------------
# Packed batches: chunks counted from each sequence's first key
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("lens_q,lens_k,chunk,causal,dtype", [
    ([37, 1, 0, 70], [37, 5, 3, 90], 16, True, torch.bfloat16),  # an empty sequence, Nq < Nk
    ([40, 12, 33], [12, 50, 33], 37, False, torch.float16),       # Nq > Nk: rows before key 0
])
def test_varlen_matches_reference(device, path, lens_q, lens_k, chunk, causal, dtype):
    cu_q, cu_k = random_cu_seqlens(lens_q, device), random_cu_seqlens(lens_k, device)
    q = rand((sum(lens_q), 4, 32), dtype, device)
    k = rand((sum(lens_k), 2, 32), dtype, device)
    v = rand((sum(lens_k), 2, 32), dtype, device)
    do = rand(q.shape, dtype, device)
    dlse = rand((4, sum(lens_q)), torch.float32, device)
    max_q, max_k = max(lens_q), max(lens_k)
    got = _run(lambda *t: flash_attn_varlen_func(*t, cu_q, cu_k, max_q, max_k, causal=causal, return_lse=True,
                                                 attention_chunk=chunk),
               [leaf(t) for t in (q, k, v)], do, dlse)
    ref = _run(lambda *t: varlen_attention_ref(*t, cu_q, cu_k, causal, attention_chunk=chunk),
               [leaf(t, torch.float64) for t in (q, k, v)], do, dlse)
    base = _run(lambda *t: varlen_attention_ref(*t, cu_q, cu_k, causal, dtype=dtype, attention_chunk=chunk),
                [leaf(t) for t in (q, k, v)], do, dlse)
    assert_close("out", got[0], ref[0], base[0], 2.0, dtype)
    assert_close("lse", got[1], ref[1], base[1], 2.0, torch.float32)
    for name, g, r, b in zip(("dq", "dk", "dv"), got[2], ref[2], base[2]):
        assert_close(name, g, r, b, 3.0, dtype)


def test_packed_wrappers_pass_it_on(device):
    """flash_attn_qkvpacked_func / kvpacked / varlen_qkvpacked take the keyword as flash_attn_func does."""
    import flashattn_triton as fat
    qkv = rand((1, 40, 3, 2, 16), torch.float16, device)
    q, k, v = qkv.unbind(2)
    want = flash_attn_func(q, k, v, causal=True, attention_chunk=16)
    assert torch.equal(flash_attn_qkvpacked_func(qkv, causal=True, attention_chunk=16), want)
    assert torch.equal(flash_attn_kvpacked_func(q, qkv[:, :, 1:], causal=True, attention_chunk=16), want)
    cu = random_cu_seqlens([40], device)
    got = fat.flash_attn_varlen_qkvpacked_func(qkv[0], cu, 40, causal=True, attention_chunk=16)
    assert torch.equal(got, want[0])
    got = fat.flash_attn_varlen_kvpacked_func(q[0], qkv[0, :, 1:], cu, cu, 40, 40, causal=True, attention_chunk=16)
    assert torch.equal(got, want[0])


# ---------------------------------------------------------------------------
# Tiles outside the chunks are skipped, not masked
# ---------------------------------------------------------------------------

@triton.jit
def _tile_ranges_kernel(OUT, n_q, n_k, shift, window_left, window_right, chunk,
                        KEY_RANGES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        MASK_LEFT: tl.constexpr, MASK_RIGHT: tl.constexpr, MASK_CHUNK: tl.constexpr):
    """(lo, full_lo, full_hi, hi) of tile program_id(0): kv_tile_range of a
    query tile (KEY_RANGES) or q_tile_range of a key tile."""
    pid = tl.program_id(0)
    if KEY_RANGES:
        lo, full_lo, full_hi, hi = kv_tile_range(pid * BLOCK_M, n_q, n_k, shift, window_left, window_right, chunk,
                                                 BLOCK_M, BLOCK_N, MASK_LEFT, MASK_RIGHT, MASK_CHUNK)
    else:
        lo, full_lo, full_hi, hi = q_tile_range(pid * BLOCK_N, n_q, n_k, shift, window_left, window_right, chunk,
                                                BLOCK_M, BLOCK_N, MASK_LEFT, MASK_RIGHT, MASK_CHUNK)
    tl.store(OUT + pid * 4 + 0, lo)
    tl.store(OUT + pid * 4 + 1, full_lo)
    tl.store(OUT + pid * 4 + 2, full_hi)
    tl.store(OUT + pid * 4 + 3, hi)


def _tile_ranges(n_q, n_k, window, chunk, block_m, block_n, key_ranges):
    """The ranges of every query tile (key_ranges) or key tile, as a list of 4-tuples."""
    left, right = window
    tiles = -(-(n_q if key_ranges else n_k) // (block_m if key_ranges else block_n))
    out = torch.full((tiles, 4), -7, dtype=torch.int32, device="cuda" if ON_GPU else "cpu")
    _tile_ranges_kernel[(tiles,)](out, n_q, n_k, n_k - n_q, max(left, 0), max(right, 0), chunk,
                                  KEY_RANGES=key_ranges, BLOCK_M=block_m, BLOCK_N=block_n,
                                  MASK_LEFT=left >= 0, MASK_RIGHT=right >= 0, MASK_CHUNK=chunk > 0)
    return [tuple(r) for r in out.tolist()]


RANGE_CASES = [
    # (Nq, Nk, window, C, BLOCK_M, BLOCK_N)
    (200, 200, (-1, 0), 16, 32, 16),
    (200, 200, (-1, 0), 37, 32, 64),
    (150, 230, (-1, -1), 37, 64, 32),
    (230, 150, (-1, 0), 50, 16, 32),     # Nq > Nk: query tiles before key 0
    (230, 150, (-1, -1), 64, 64, 64),
    (300, 300, (40, 0), 64, 32, 32),     # chunk and left window
    (300, 280, (45, 7), 23, 32, 16),     # chunk and a two-sided window
    (100, 100, (-1, 0), 1000, 32, 16),   # one chunk: the causal ranges
    (64, 90, (-1, -1), 1, 16, 16),       # chunks of one key
]


@pytest.mark.parametrize("n_q,n_k,window,chunk,block_m,block_n", RANGE_CASES)
def test_tile_ranges_skip_tiles_outside_the_chunks(n_q, n_k, window, chunk, block_m, block_n):
    """kv_tile_range / q_tile_range against brute force over the visibility
    matrix: every visible pair of a tile lies in its range (nothing lost),
    every tile of the range holds one (tiles outside the chunks are skipped:
    the work is O(N C) with causal chunks), and the unmasked middle holds
    only whole tiles that every row of the tile sees whole (a tile that a
    chunk boundary crosses is masked)."""
    vis = visible_mask(n_q, n_k, n_k - n_q, window, chunk=chunk)
    visited = needed = 0
    for t, (lo, full_lo, full_hi, hi) in enumerate(_tile_ranges(n_q, n_k, window, chunk, block_m, block_n, True)):
        rows = vis[t * block_m:(t + 1) * block_m]
        cols = rows.any(0).nonzero().flatten().tolist()
        assert 0 <= lo <= full_lo <= full_hi <= hi <= n_k
        assert all(x % block_n == 0 or x == hi for x in (lo, full_lo, full_hi))  # (== hi: nothing left)
        assert not cols or (lo <= cols[0] and cols[-1] < hi), (t, lo, hi, cols[:1], cols[-1:])
        assert rows[:, full_lo:full_hi].all(), (t, full_lo, full_hi)
        tiles = range(lo, hi, block_n)
        assert all(rows[:, s:s + block_n].any() for s in tiles), (t, lo, hi)
        visited += len(tiles)
        needed += sum(rows[:, s:s + block_n].any().item() for s in range(0, n_k, block_n))
    assert visited == needed
    for u, (lo, full_lo, full_hi, hi) in enumerate(_tile_ranges(n_q, n_k, window, chunk, block_m, block_n, False)):
        keys = vis[:, u * block_n:(u + 1) * block_n]
        rows = keys.any(1).nonzero().flatten().tolist()
        assert 0 <= lo <= full_lo <= full_hi <= hi <= n_q
        assert all(x % block_m == 0 or x == hi for x in (lo, full_lo, full_hi))
        assert not rows or (lo <= rows[0] and rows[-1] < hi), (u, lo, hi, rows[:1], rows[-1:])
        assert keys[full_lo:full_hi].all() and (full_lo == full_hi or (u + 1) * block_n <= n_k), (u, full_lo, full_hi)
        assert all(keys[s:s + block_m].any() for s in range(lo, hi, block_m)), (u, lo, hi)


def test_causal_chunks_visit_tiles_in_proportion_to_the_chunk():
    """Causal, N = 1024, C = 64, 32 x 32 tiles: each query tile visits the
    key tiles of its chunk up to the diagonal (at most C / 32 = 2), 48 in
    all instead of the 528 of plain causal attention."""
    ranges = _tile_ranges(1024, 1024, (-1, 0), 64, 32, 32, True)
    assert sum(len(range(lo, hi, 32)) for lo, _, _, hi in ranges) == 48
    plain = _tile_ranges(1024, 1024, (-1, 0), 0, 32, 32, True)
    assert sum(len(range(lo, hi, 32)) for lo, _, _, hi in plain) == 528


# ---------------------------------------------------------------------------
# Plumbing: validation, plans, the op schema, the tiers
# ---------------------------------------------------------------------------

# Bad chunk sizes and what every entry that takes attention_chunk says of them
# (also test_kvcache_chunk.py's flash_attn_with_kvcache).
BAD_CHUNKS = [
    (-1, ValueError, r"attention_chunk must be >= 0 \(0 = off\), got -1"),
    (16.0, TypeError, r"attention_chunk must be an int \(the chunk size, 0 = off\), got float 16.0"),
    (True, TypeError, r"attention_chunk must be an int .*, got bool True"),
    ("16", TypeError, r"attention_chunk must be an int .*, got str '16'"),
    (None, TypeError, r"attention_chunk must be an int .*, got NoneType None"),
]


@pytest.mark.parametrize("chunk,exc,msg", BAD_CHUNKS)
def test_bad_attention_chunk(device, chunk, exc, msg):
    q, k, v = make_qkv(1, 8, 8, 2, 2, 16, torch.float16, device, requires_grad=False)
    with pytest.raises(exc, match=msg):
        flash_attn_func(q, k, v, attention_chunk=chunk)
    cu = random_cu_seqlens([8], device)
    with pytest.raises(exc, match=msg):
        flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 8, 8, attention_chunk=chunk)


def test_keyword_comes_last():
    """attention_chunk is keyword-only, after the existing parameters:
    positional calls keep flash-attn's order."""
    import inspect
    import flashattn_triton as fat
    for fn in (fat.flash_attn_func, fat.flash_attn_varlen_func, fat.flash_attn_qkvpacked_func,
               fat.flash_attn_kvpacked_func, fat.flash_attn_varlen_qkvpacked_func,
               fat.flash_attn_varlen_kvpacked_func):
        params = list(inspect.signature(fn).parameters.values())
        assert params[-1].name == "attention_chunk" and params[-1].kind is inspect.Parameter.KEYWORD_ONLY
        assert params[-1].default == 0, fn.__name__


def test_planned_calls_key_the_chunk(device):
    """A call's plan (api.py) is keyed by attention_chunk: the same inputs
    with another chunk are another call."""
    q, k, v = make_qkv(1, 48, 48, 2, 2, 16, torch.float32, device, requires_grad=False)
    for chunk in (16, 32, 16, 0):
        got = flash_attn_func(q, k, v, causal=True, attention_chunk=chunk)
        ref, _ = flash_attention_ref(q, k, v, True, attention_chunk=chunk)
        assert_close(f"out C={chunk}", got, ref, atol=1e-5)


def test_op_schema(device):
    """flashattn_triton::fwd / ::bwd take attention_chunk (last; default 0):
    torch.library.opcheck's schema, fake-tensor and autograd checks."""
    q, k, v = make_qkv(1, 9, 13, 2, 1, 16, torch.float16, device)
    args = (q, k, v, None, None, 0, 0, 0.25, -1, 0, True)
    torch.library.opcheck(ops.attention_fwd, args, {"attention_chunk": 4})
    out, lse = ops.attention_fwd(*args, attention_chunk=4)
    want, _ = flash_attention_ref(q, k, v, True, softmax_scale=0.25, attention_chunk=4)
    assert_close("out", out, want.to(out.dtype), atol=2e-3)
    bwd_args = (torch.randn_like(out), q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(),
                torch.randn_like(lse)) + args[3:]
    torch.library.opcheck(ops.attention_bwd, bwd_args, {"attention_chunk": 4})


def test_return_attn_probs_show_the_chunks(device):
    """With dropout, S_dmask (the probabilities before dropout, negated where
    dropped) is zero outside each row's chunk."""
    q, k, v = make_qkv(1, 40, 40, 2, 2, 16, torch.float32, device, requires_grad=False)
    _, _, probs = flash_attn_func(q, k, v, dropout_p=0.1, causal=True, return_attn_probs=True, attention_chunk=16)
    vis = visible_mask(40, 40, 0, (-1, 0), chunk=16)
    assert (probs[0, :, ~vis] == 0).all() and (probs[0, :, vis] != 0).all()
    _, _, p = attention_ref(q.transpose(1, 2).double(), k.transpose(1, 2).double(), v.transpose(1, 2).double(),
                            causal_shift=0, attention_chunk=16, return_probs=True)
    assert_close("|S_dmask|", probs.abs().double(), p, atol=1e-5)


# ---------------------------------------------------------------------------
# Chunks as sequences: seqlen_k - seqlen_q a multiple of C, the call reshaped
# to one sequence per chunk (seqlen_q a multiple of C) or packed with each
# row's shorter last chunk (not) (_dispatch.CHUNKS_AS_SEQUENCES; automatic
# only where the Hopper tier runs, forced here)
# ---------------------------------------------------------------------------

def _spy_sequences(monkeypatch):
    """Force the reshape; [(chunk,)] for every call that took it."""
    from flashattn_triton import _dispatch, api
    monkeypatch.setattr(_dispatch, "CHUNKS_AS_SEQUENCES", True)
    taken: list = []
    real = api._chunks_as_sequences

    def spy(*args):
        taken.append(args[-1])
        return real(*args)

    monkeypatch.setattr(api, "_chunks_as_sequences", spy)
    return taken


@pytest.mark.parametrize("batch,n,n_k,h_q,h_kv,d,chunk,causal,window,dtype,layout", [
    pytest.param(2, 96, 96, 4, 2, 32, 32, True, (-1, -1), torch.float16, "contiguous", id="C32-causal-gqa-fp16"),
    pytest.param(1, 64, 64, 2, 1, 40, 16, False, (5, 3), torch.bfloat16, "contiguous",
                 id="C16-window5,3-mqa-bf16"),
    pytest.param(2, 75, 75, 2, 2, 16, 25, True, (7, 0), torch.float32, "bhnd", id="C25-causal-window7-bhnd-fp32"),
    pytest.param(1, 32, 80, 2, 1, 32, 16, True, (-1, -1), torch.float16, "contiguous",
                 id="after-a-cache-C16-causal-fp16"),
    pytest.param(2, 48, 96, 2, 2, 16, 48, False, (-1, -1), torch.bfloat16, "bhnd",
                 id="after-a-cache-one-chunk-full-bf16"),
    # each row's last chunk shorter: the packed form
    pytest.param(2, 100, 100, 4, 2, 32, 32, True, (-1, -1), torch.float16, "contiguous",
                 id="packed-C32-n100-causal-gqa-fp16"),
    pytest.param(2, 45, 45, 2, 1, 24, 16, False, (5, 3), torch.bfloat16, "bhnd",
                 id="packed-C16-n45-window5,3-mqa-bhnd-bf16"),
    pytest.param(1, 70, 134, 2, 2, 16, 32, True, (9, 0), torch.float32, "contiguous",
                 id="packed-after-a-cache-C32-n70-causal-window9-fp32"),
    pytest.param(2, 20, 20, 2, 2, 16, 32, True, (-1, -1), torch.float16, "contiguous",
                 id="packed-one-short-chunk-fp16"),
    # a cache that is not whole chunks: the first query's chunk starts inside it
    pytest.param(2, 20, 75, 4, 2, 16, 16, True, (-1, -1), torch.float16, "contiguous",
                 id="packed-cache-55-C16-causal-gqa-fp16"),
    pytest.param(1, 30, 70, 2, 1, 24, 32, False, (6, 4), torch.bfloat16, "bhnd",
                 id="packed-cache-40-C32-window6,4-mqa-bhnd-bf16"),
    pytest.param(2, 1, 50, 2, 2, 16, 16, True, (-1, -1), torch.float32, "contiguous",
                 id="packed-one-query-after-49-C16-fp32"),
    pytest.param(1, 40, 104, 2, 2, 16, 32, True, (20, 0), torch.float32, "contiguous",
                 id="packed-cache-64-whole-queries-40-window20-fp32"),
])
def test_chunks_as_sequences_match_reference(device, monkeypatch, batch, n, n_k, h_q, h_kv, d, chunk, causal, window,
                                            dtype, layout):
    """The reshaped (or packed) call gives the chunked attention: out, LSE
    (back in (B, Hq, N) order) and gradients against the float64 reference,
    also for q, k, v viewed from (B, H, N, d) (the reshape copies them), and
    for queries after a cache (the keys before the first query's chunk get
    no gradient)."""
    taken = _spy_sequences(monkeypatch)
    q, k, v = make_qkv(batch, n, n_k, h_q, h_kv, d, dtype, device, requires_grad=False)
    if layout == "bhnd":
        q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
        assert not q.is_contiguous()
    _check(q, k, v, chunk, causal, window)
    assert taken and set(taken) == {chunk}


def test_chunks_as_sequences_with_variants(device, monkeypatch):
    """softcap, sinks and (batch, Hq) ALiBi slopes (each row's repeated for
    its chunks) through the reshape, against the reference."""
    taken = _spy_sequences(monkeypatch)
    q, k, v = make_qkv(2, 48, 48, 2, 1, 32, torch.float32, device, requires_grad=False)
    slopes = torch.stack([alibi_slopes(2, device), 0.5 * alibi_slopes(2, device)])
    _check(q, k, v, 16, True, softcap=20.0, alibi_slopes=slopes, sinks=torch.randn(2, device=device))
    assert taken == [16]
    q, k, v = (t[:, :41] for t in (q, k, v))   # the packed form: 16 + 16 + 9 rows a row
    _check(q, k, v, 16, True, softcap=20.0, alibi_slopes=slopes, sinks=torch.randn(2, device=device))
    assert taken == [16, 16]


@pytest.mark.parametrize("n", [64, 72], ids=["whole", "packed"])
def test_chunks_as_sequences_return_forms(device, monkeypatch, n):
    """The plain, return_lse and return_attn_probs forms keep their shapes
    (S_dmask None without dropout) and agree with the chunk mask's."""
    from flashattn_triton import _dispatch
    q, k, v = make_qkv(2, n, n, 2, 2, 16, torch.float32, device, requires_grad=False)
    want = flash_attn_func(q, k, v, causal=True, return_lse=True, attention_chunk=16)
    monkeypatch.setattr(_dispatch, "CHUNKS_AS_SEQUENCES", True)
    out = flash_attn_func(q, k, v, causal=True, attention_chunk=16)
    out2, lse = flash_attn_func(q, k, v, causal=True, return_lse=True, attention_chunk=16)
    out3, lse3, probs = flash_attn_func(q, k, v, causal=True, return_attn_probs=True, attention_chunk=16)
    assert out.shape == q.shape and lse.shape == (2, 2, n) and probs is None
    for name, got, ref in (("out", out, want[0]), ("out", out2, want[0]), ("lse", lse, want[1]),
                           ("out", out3, want[0]), ("lse", lse3, want[1])):
        assert_close(name, got, ref, atol=1e-5)


@pytest.mark.parametrize("n", [64, 72], ids=["whole", "packed"])
def test_chunks_as_sequences_compile(device, monkeypatch, n):
    """torch.compile(fullgraph=True) traces the reshape or the packed form
    (the rule reads the Hopper tier's availability as a constant; the packed
    offsets are made on the device): the same output as eager."""
    _spy_sequences(monkeypatch)
    q, k, v = make_qkv(2, n, n, 2, 1, 16, torch.float32, device, requires_grad=False)
    torch._dynamo.reset()
    fn = torch.compile(lambda q, k, v: flash_attn_func(q, k, v, causal=True, attention_chunk=16),
                       fullgraph=True, backend="eager")
    assert_close("compiled out", fn(q, k, v), flash_attn_func(q, k, v, causal=True, attention_chunk=16), atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1024, 1000], ids=["whole", "packed"])
def test_gpu_chunks_as_sequences_automatic(device, n):
    """On the GPU, the automatic rule (the Hopper tier present): a Llama-4-like
    causal call, C = 256 over 1024 keys (or 1000: the packed form), bf16,
    d = 128, GQA, eager and under torch.compile(fullgraph=True) (the probe
    read as a constant), against the float64 reference; where the Hopper
    tier runs it takes the reshape."""
    from flashattn_triton import _dispatch
    q, k, v = make_qkv(2, n, n, 8, 2, 128, torch.bfloat16, device, requires_grad=False)
    assert _dispatch.CHUNKS_AS_SEQUENCES is None
    taken = _dispatch.chunks_as_sequences(q, k, v, 256, 0.0, None)
    assert taken == _dispatch._hopper_runs(q.device.index)
    _check(q, k, v, 256, True)
    torch._dynamo.reset()
    fn = torch.compile(lambda q, k, v: flash_attn_func(q, k, v, causal=True, attention_chunk=256), fullgraph=True)
    assert_close("compiled out", fn(q, k, v), flash_attn_func(q, k, v, causal=True, attention_chunk=256),
                 atol=0)


def test_hopper_probe_is_a_compile_constant():
    """The rule's Hopper probe carries what torch.compiler.assume_constant_result
    sets on a function (set by hand: the decorator imports torch._dynamo),
    so torch.compile reads it as a constant instead of tracing the probe."""
    from flashattn_triton import _dispatch

    def probe():
        return True

    torch.compiler.assume_constant_result(probe)
    marks = vars(probe)
    assert marks and all(getattr(_dispatch._hopper_runs, name, None) == value for name, value in marks.items())


def test_when_chunks_become_sequences(monkeypatch):
    """The rule (_dispatch.chunks_as_sequences): queries after a cache (none
    or more; whole chunks or not), no dropout, ALiBi slopes of a known
    shape; automatic only on a CUDA device with the Hopper tier and C >= 128,
    never when switched off."""
    from flashattn_triton import _dispatch
    q = torch.empty(2, 256, 4, 16)
    kv = torch.empty(2, 256, 2, 16)
    rule = _dispatch.chunks_as_sequences
    monkeypatch.setattr(_dispatch, "CHUNKS_AS_SEQUENCES", True)
    assert rule(q, kv, kv, 64, 0.0, None) and rule(q, kv, kv, 128, 0, torch.ones(2, 4))
    assert not rule(q, kv, kv, 0, 0.0, None)                      # no chunks
    assert rule(q, kv, kv, 256, 0.0, None)                        # one chunk: a call without it
    assert rule(q[:, :128], kv, kv, 64, 0.0, None)                # after a cache of two chunks
    assert rule(q[:, :96], kv[:, :96], kv[:, :96], 64, 0.0, None)   # queries not whole chunks: packed
    assert rule(q[:, :96], kv[:, :160], kv[:, :160], 64, 0.0, None)   # so, after a cache of one chunk
    assert rule(q, kv, kv, 96, 0.0, None)                         # 96 + 96 + 64 rows a row: packed
    assert rule(q[:, :96], kv, kv, 64, 0.0, None)                 # a cache not whole chunks: packed
    assert rule(q[:, :1], kv[:, :161], kv[:, :161], 64, 0.0, None)   # one query after 160 keys
    assert not rule(q, kv[:, :128], kv[:, :128], 64, 0.0, None)   # seqlen_q > seqlen_k
    assert not rule(q, kv, kv, 64, 0.1, None)                     # dropout
    assert not rule(q, kv, kv, 64, 0.0, torch.ones(3, 4))         # slopes of another batch: the checks say so
    assert not rule(q, kv, kv, True, 0.0, None)                   # (a bool is no chunk size)
    monkeypatch.setattr(_dispatch, "CHUNKS_AS_SEQUENCES", None)
    assert not rule(q, kv, kv, 128, 0.0, None)                    # automatic: CPU tensors keep the chunk mask
    auto, cuda = _dispatch.chunks_as_sequences_auto, torch.device("cuda", 0)
    monkeypatch.setattr(_dispatch, "_hopper_runs", lambda index: True)
    assert auto(cuda, 128, 256) and not auto(torch.device("cpu"), 128, 256)
    assert not auto(cuda, 64, 256)                                # a chunk below one 128-row tile
    assert not auto(cuda, 128, 100)                               # fewer queries than one tile (decode)
    monkeypatch.setattr(_dispatch, "_hopper_runs", lambda index: False)
    assert not auto(cuda, 128, 256)                               # no Hopper tier
    monkeypatch.setattr(_dispatch, "CHUNKS_AS_SEQUENCES", False)
    assert not rule(q, kv, kv, 64, 0.0, None)


def _tier_calls(monkeypatch, chunk, backend="auto"):
    """ops._fwd_into and ops._bwd_into of a dense causal call (bf16, d = 128,
    N = 2048) with the Hopper tier made available and every kernel stubbed:
    [(which forward ran, chunk), (whether the backward asked for Hopper, chunk)]."""
    from flashattn_triton import _dispatch
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", backend)
    monkeypatch.setattr(_dispatch, "_hopper_tier", lambda device: True)
    monkeypatch.setattr(ops, "use_triton", lambda t: True)
    calls: list = []
    monkeypatch.setattr(ops._kernels, "forward", lambda *a, **kw: calls.append(("portable", kw["chunk"])))
    monkeypatch.setattr(ops._kernels, "hopper_forward", lambda *a, **kw: calls.append(("hopper", None)) or True)
    monkeypatch.setattr(ops._kernels, "backward", lambda *a, **kw: calls.append((kw["hopper"], kw["chunk"])))
    q = torch.randn(1, 2048, 2, 128, dtype=torch.bfloat16)
    out, lse = torch.empty_like(q), torch.empty(1, 2, 2048)
    ops._fwd_into(q, q, q, out, lse, None, None, 0, 0, 0.1, -1, 0, True, 0.0, None, None, None, 0.0, None,
                  False, chunk)
    ops._bwd_into(q, q, q, q, out, lse, None, torch.empty_like(q), torch.empty_like(q), torch.empty_like(q),
                  None, None, None, None, 0, 0, 0.1, -1, 0, True, 0.0, None, None, None, 0.0, None, False, chunk)
    return calls


def test_chunked_calls_never_take_the_hopper_tier(monkeypatch):
    """The Hopper tier has no chunk mask: chunked calls run the portable
    forward and backward (_dispatch.takes_chunk), even with
    FLASHATTN_TRITON_BACKEND=hopper; the same call without chunks takes it."""
    from flashattn_triton import _dispatch
    assert _tier_calls(monkeypatch, 0) == [("hopper", None), (True, 0)]
    assert _tier_calls(monkeypatch, 64) == [("portable", 64), (False, 64)]
    assert _tier_calls(monkeypatch, 64, backend="hopper") == [("portable", 64), (False, 64)]
    assert not _dispatch.use_hopper_backward(torch.device("cuda"), (-1, 0), False, 8192, 128, attention_chunk=8)


def test_chunk_is_a_runtime_argument():
    """Every kernel takes the chunk size as an unspecialized runtime
    argument (another size compiles nothing new) and MASK_CHUNK as the
    compile-time switch, off by default (the builds without chunks are the
    same as before it existed: benchmarks/compile_check.py's SASS hashes)."""
    script = (
        "from flashattn_triton.kernels import bwd, fwd\n"
        "for k in (fwd._attn_fwd, bwd._bwd_dkdv, bwd._bwd_dq, bwd._bwd_dkdv_dq):\n"
        "    p = {q.name: q for q in k.params}\n"
        "    assert p['chunk'].do_not_specialize and not p['chunk'].is_constexpr, k\n"
        "    assert p['MASK_CHUNK'].is_constexpr and p['MASK_CHUNK'].default is False, k\n"
        "print('ok')\n")
    assert fake_launch(script).strip() == "ok"


@pytest.mark.parametrize("b,n,n_k,chunk", [(2, 1000, 1000, 256), (1, 100, 400, 256), (2, 300, 600, 256),
                                           (3, 17, 17, 16)])
def test_packed_chunk_offsets(monkeypatch, b, n, n_k, chunk):
    """The packed form's cu_seqlens (api._chunk_offsets) against a plain
    listing: per row the keys from the first query's chunk on, cut at every
    chunk, the queries the last of them; an eager call keeps them for the
    next one, a traced call (torch.compile) neither reads nor keeps them."""
    from flashattn_triton import api
    monkeypatch.setattr(api, "_CHUNK_OFFSETS", {})
    lk = n_k - (n_k - n) // chunk * chunk
    qo = lk - n
    want_q, want_k = [], []
    for r in range(b):
        for j in range(-(-lk // chunk)):
            want_k.append(r * lk + j * chunk)
            want_q.append(r * n + max(j * chunk - qo, 0))
    want_q.append(b * n)
    want_k.append(b * lk)
    cu_q, cu_k = api._chunk_offsets(b, n, lk, chunk, torch.device("cpu"))
    assert (cu_q.tolist(), cu_k.tolist()) == (want_q, want_k), f"b {b} n {n} n_k {n_k} chunk {chunk}"
    assert cu_q.dtype == cu_k.dtype == torch.int32
    again = api._chunk_offsets(b, n, lk, chunk, torch.device("cpu"))
    assert again[0] is cu_q and again[1] is cu_k
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    traced = api._chunk_offsets(b, n, lk, chunk, torch.device("cpu"))
    assert traced[0] is not cu_q and traced[0].tolist() == want_q
    monkeypatch.setattr(api, "_CHUNK_OFFSETS", {})
    api._chunk_offsets(b, n, lk, chunk, torch.device("cpu"))
    assert not api._CHUNK_OFFSETS


@pytest.mark.gpu
def test_gpu_chunks_as_packed_in_a_cuda_graph(device, monkeypatch):
    """The packed form (N 1000, C 256) captured in a CUDA graph after eager
    calls kept their offsets: the captured call makes its own (the cache is
    neither read nor filled while capturing), and replays on new inputs give
    the eager results."""
    from flashattn_triton import api
    monkeypatch.setattr(api, "_CHUNK_OFFSETS", {})
    q, k, v = make_qkv(2, 1000, 1000, 8, 2, 128, torch.bfloat16, device, requires_grad=False)
    fn = lambda: flash_attn_func(q, k, v, causal=True, attention_chunk=256)  # noqa: E731
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    kept = dict(api._CHUNK_OFFSETS)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    assert api._CHUNK_OFFSETS == kept
    for seed in (1, 2):
        torch.manual_seed(seed)
        for t in (q, k, v):
            t.copy_(torch.randn_like(t))
        g.replay()
        torch.cuda.synchronize()
        assert_close("replayed out", out, fn(), atol=0)
