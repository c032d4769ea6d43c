"""flash_attn_with_kvcache: decoding against a contiguous or paged KV cache.

Every case runs ours, a float64 reference written here (one sequence at a
time, from the logical cache) and the same reference in the input dtype; our
error against float64 may be at most 2x that of the in-dtype baseline (see
_utils.assert_close).  On CPU the kernels run in Triton's interpreter with
32-key tiles, so a 16-token page exercises the per-row page lookup and a
32/64-token page the per-tile one.
"""

import math

import pytest
import torch

import flashattn_triton._kvcache as kvc
import flashattn_triton.kernels.decode as decode
from flashattn_triton._kvcache import flash_attn_with_kvcache
from flashattn_triton.kernels.combine import combine_attention_states, merge_attention_states
from _utils import DTYPES, assert_close


# ---------------------------------------------------------------------------
# Reference
# ---------------------------------------------------------------------------

def rope_ref(x, cos, sin, pos, interleaved):
    """x (N, H, d) rotated at positions pos (N,) as complex products, in x's dtype."""
    rd = 2 * cos.shape[1]
    c = cos[pos].to(x.dtype)[:, None, :]
    s = sin[pos].to(x.dtype)[:, None, :]
    xr = x[..., :rd]
    if interleaved:
        zc = torch.complex(xr[..., 0::2], xr[..., 1::2]) * torch.complex(c, s)
        rot = torch.stack((zc.real, zc.imag), dim=-1).flatten(-2)
    else:
        zc = torch.complex(xr[..., : rd // 2], xr[..., rd // 2:]) * torch.complex(c, s)
        rot = torch.cat((zc.real, zc.imag), dim=-1)
    return torch.cat((rot, x[..., rd:]), dim=-1)


def logical_cache(cache, b, seq_rows, block_table):
    """The (capacity, Hkv, d) keys of sequence b (a copy); NaN in the pages of
    table entries that name no page (-1, past the pool)."""
    if block_table is None:
        return cache[seq_rows[b]].clone()
    idx = block_table[b].long()
    none = (idx < 0) | (idx >= cache.shape[0])
    pages = cache[idx.clamp(0, cache.shape[0] - 1)].clone()
    pages[none] = float("nan")
    return pages.flatten(0, 1)


def write_cache(cache, b, seq_rows, block_table, pos, values):
    """Store values (N, Hkv, d) at logical positions pos (N,) of sequence b."""
    if block_table is None:
        cache[seq_rows[b], pos] = values
    else:
        page = cache.shape[1]
        cache[block_table[b].long()[pos // page], pos % page] = values


def reference(q, k_cache, v_cache, k=None, v=None, cos=None, sin=None, seqlens=None, batch_idx=None,
              leftpad=None, block_table=None, scale=None, causal=False, window=(-1, -1), softcap=0.0,
              alibi=None, interleaved=True, sinks=None, chunk=0, dtype=torch.float64):
    """Returns out, lse, and the caches after the append (copies, cache dtype).

    Computes in ``dtype``; rotations of the inputs are rounded to the input
    dtype as flash-attn stores them (float32 math when ``dtype`` is 16-bit).
    sinks (Hq,): one more score column per head, sinks[h], whose value is 0.
    chunk > 0 (attention_chunk): key j is kept only if (j - lp) // chunk
    equals (p - lp) // chunk, p the query's key position and lp the row's
    leftpad (floor: chunks count from the first key; nothing for p < lp)."""
    batch, n_q, h_q, d = q.shape
    h_kv = k_cache.shape[2]
    scale = scale if scale is not None else d ** -0.5
    rot_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    kc, vc = k_cache.clone(), v_cache.clone()
    seq_rows = batch_idx.tolist() if batch_idx is not None else list(range(batch))
    cap = (block_table.shape[1] * k_cache.shape[1]) if block_table is not None else k_cache.shape[1]
    seqlens = [cap] * batch if seqlens is None else (
        [seqlens] * batch if isinstance(seqlens, int) else seqlens.tolist())
    n_new = 0 if k is None else k.shape[1]
    local = causal or tuple(window) != (-1, -1) or chunk > 0
    outs, lses = [], []
    dev = q.device
    for b in range(batch):
        start = seqlens[b]
        qb = q[b].to(rot_dtype)
        if n_new:
            pos = torch.arange(start, start + n_new, device=dev)
            kn = k[b].to(rot_dtype)
            if cos is not None:
                kn = rope_ref(kn, cos.to(rot_dtype), sin.to(rot_dtype), pos, interleaved)
            write_cache(kc, b, seq_rows, block_table, pos, kn.to(kc.dtype))
            write_cache(vc, b, seq_rows, block_table, pos, v[b])
        K, V = logical_cache(kc, b, seq_rows, block_table), logical_cache(vc, b, seq_rows, block_table)
        if cos is not None:
            qpos = (torch.arange(start, start + n_q, device=dev) if local
                    else torch.full((n_q,), start, device=dev))
            qb = rope_ref(qb, cos.to(rot_dtype), sin.to(rot_dtype), qpos, interleaved).to(q.dtype)
        kv_end = start + n_new
        lo = 0 if leftpad is None else int(leftpad[b])
        K[:lo], V[:lo] = 0, 0  # never attended (and may be garbage)
        Kb = K[:kv_end].to(dtype).repeat_interleave(h_q // h_kv, dim=1)
        Vb = V[:kv_end].to(dtype).repeat_interleave(h_q // h_kv, dim=1)
        s = torch.einsum("qhd,khd->hqk", qb.to(dtype), Kb) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(n_q, device=dev)[:, None] + kv_end - n_q  # key position of query token i
        j = torch.arange(kv_end, device=dev)[None, :]
        if alibi is not None:
            slope = (alibi[b] if alibi.dim() == 2 else alibi).to(dtype)
            s = s - slope[:, None, None] * (i - j).abs().to(dtype)
        keep = j >= lo
        if causal:
            keep = keep & (j <= i)
        if window[0] >= 0:
            keep = keep & (j >= i - window[0])
        if window[1] >= 0:
            keep = keep & (j <= i + window[1])
        if chunk > 0:
            floor = lambda x: torch.div(x, chunk, rounding_mode="floor")  # noqa: E731
            keep = keep & (floor(j - lo) == floor(i - lo)) & (i >= lo)
        s = s.masked_fill(~keep, float("-inf"))
        if sinks is not None:
            s = torch.cat((s, sinks.to(dtype)[:, None, None].expand(h_q, n_q, 1)), dim=-1)
            Vb = torch.cat((Vb, Vb.new_zeros(1, h_q, d)))
        if s.shape[-1] == 0:
            lses.append(torch.full((h_q, n_q), float("-inf"), dtype=dtype, device=dev))
            outs.append(torch.zeros(n_q, h_q, d, dtype=dtype, device=dev))
            continue
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
        outs.append(torch.einsum("hqk,khd->qhd", p.to(Vb.dtype), Vb))
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses), kc, vc


def rnd(device, dtype, *shape, scale=1.0):
    return (torch.randn(*shape, device=device) * scale).to(dtype)


def make_cache(device, batch, cap, h_kv, d, dtype, page=None, batch_cache=None):
    """Random caches: contiguous (batch_cache, cap, Hkv, d), or paged with a
    shuffled block table (more pages than needed, so page numbers are sparse)."""
    if page is None:
        shape = (batch_cache or batch, cap, h_kv, d)
        return rnd(device, dtype, *shape), rnd(device, dtype, *shape), None
    n_blocks = math.ceil(cap / page)
    total = batch * n_blocks + 3
    table = torch.randperm(total)[: batch * n_blocks].view(batch, n_blocks).to(device, torch.int32)
    shape = (total, page, h_kv, d)
    return rnd(device, dtype, *shape), rnd(device, dtype, *shape), table


def ints(device, values):
    return torch.tensor(values, dtype=torch.int32, device=device)


def check(q, k_cache, v_cache, dtype, **kw):
    """Run ours and both references; compare out, LSE and the caches."""
    ref_kw = {key: kw[key] for key in ("k", "v", "cos", "sin", "seqlens", "batch_idx", "leftpad",
                                       "block_table", "scale", "causal", "window", "softcap", "alibi",
                                       "interleaved", "sinks", "chunk") if key in kw}
    ref = reference(q, k_cache, v_cache, **ref_kw)
    base = reference(q, k_cache, v_cache, **ref_kw, dtype=dtype)
    kc, vc = k_cache.clone(), v_cache.clone()
    out, lse = flash_attn_with_kvcache(
        q, kc, vc, k=kw.get("k"), v=kw.get("v"), rotary_cos=kw.get("cos"), rotary_sin=kw.get("sin"),
        cache_seqlens=kw.get("seqlens"), cache_batch_idx=kw.get("batch_idx"),
        cache_leftpad=kw.get("leftpad"), block_table=kw.get("block_table"),
        softmax_scale=kw.get("scale"), causal=kw.get("causal", False),
        window_size=kw.get("window", (-1, -1)), softcap=kw.get("softcap", 0.0),
        rotary_interleaved=kw.get("interleaved", True), alibi_slopes=kw.get("alibi"),
        num_splits=kw.get("num_splits", 1), return_softmax_lse=True, sinks=kw.get("sinks"),
        attention_chunk=kw.get("chunk", 0))
    assert out.dtype == q.dtype and out.shape == q.shape
    assert lse.dtype == torch.float32 and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    assert_close("out", out, ref[0], base[0], 2.0, dtype)
    assert_close("lse", lse, ref[1], base[1].float(), 2.0, torch.float32)
    if kw.get("k") is not None:
        # Appended keys: rotated in float32 and rounded, like the baseline's.
        # (NaN marks cache entries a test filled with garbage: they must stay.)
        nan = torch.isnan(ref[2])
        assert torch.equal(torch.isnan(kc), nan), "k_cache: garbage entries were overwritten"
        assert_close("k_cache", kc.masked_fill(nan, 0), ref[2].masked_fill(nan, 0), base[2].masked_fill(nan, 0),
                     2.0, dtype)
        assert torch.equal(vc.nan_to_num(nan=7.0), ref[3].nan_to_num(nan=7.0)), "v_cache after the append differs"
    else:
        assert torch.equal(kc, k_cache) and torch.equal(vc, v_cache), "the cache changed without k/v"
    return out, lse, kc, vc


# ---------------------------------------------------------------------------
# Contiguous and paged caches
# ---------------------------------------------------------------------------

# (B, Nq, Hq, Hkv, d, capacity, cache_seqlens, n_new, causal, dtype, page, num_splits)
CASES = [
    (2, 1, 4, 2, 64, 100, [37, 100], 0, False, "bf16", None, 1),  # GQA, one token, ragged incl. full
    (2, 1, 4, 2, 64, 100, [37, 100], 0, False, "bf16", 16, 3),    # same, paged, per-row page lookup
    (3, 1, 4, 1, 32, 90, [0, 45, 90], 0, True, "fp16", 32, 2),    # MQA, empty cache -> zeros, per-tile page
    (2, 1, 2, 2, 40, 77, [10, 76], 1, True, "fp32", None, 2),     # MHA, odd head dim, append one, to full
    (2, 1, 2, 2, 40, 77, [10, 76], 1, True, "fp32", 16, 1),
    (2, 4, 8, 2, 64, 130, [60, 126], 4, True, "bf16", 32, 2),     # speculative: Nq = 4 appended, causal
    (2, 4, 8, 2, 64, 130, [60, 126], 4, True, "bf16", None, 1),
    (2, 3, 4, 2, 32, 64, [0, 61], 3, True, "fp16", 16, 2),        # append into an empty cache, to full
    (1, 5, 4, 2, 32, 50, [2], 0, True, "fp16", None, 1),          # Nq > cache length: first rows see nothing
    (2, 2, 6, 3, 24, 70, [33, 5], 2, False, "bf16", 16, 1),       # non-causal, Nq > 1, G = 2
]


def _id(c):
    layout = "contiguous" if c[10] is None else f"page{c[10]}"
    return (f"B{c[0]}-q{c[1]}-h{c[2]}/{c[3]}-d{c[4]}-cap{c[5]}-new{c[7]}-{'causal' if c[8] else 'full'}"
            f"-{c[9]}-{layout}-s{c[11]}")


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_against_reference(case, device):
    batch, n_q, h_q, h_kv, d, cap, lens, n_new, causal, dtype, page, splits = case
    dtype = DTYPES[dtype]
    q = rnd(device, dtype, batch, n_q, h_q, d)
    k_cache, v_cache, table = make_cache(device, batch, cap, h_kv, d, dtype, page)
    kw = dict(seqlens=ints(device, lens), causal=causal, block_table=table, num_splits=splits)
    if n_new:
        kw.update(k=rnd(device, dtype, batch, n_new, h_kv, d), v=rnd(device, dtype, batch, n_new, h_kv, d))
    out, lse, _, _ = check(q, k_cache, v_cache, dtype, **kw)
    empty = torch.tensor(lens, device=device) + n_new == 0
    assert torch.equal(out[empty], torch.zeros_like(out[empty])), "an empty cache must give zeros"
    assert torch.isneginf(lse[empty]).all(), "an empty cache must give lse = -inf"


@pytest.mark.parametrize("page,block_n", [(16, 32), (48, 32), (64, 32), (32, 16)],
                         ids=["page16-lookup-per-row", "page48-lookup-per-row", "page64-per-tile",
                              "page32-per-tile"])
def test_paged_equals_contiguous(page, block_n, device, monkeypatch):
    """The same logical cache stored contiguously and in shuffled pages gives
    bit-identical results (same tiles, same order), appends included."""
    monkeypatch.setenv(decode.ENV_CONFIG, f"BLOCK_N={block_n}")
    batch, n_q, h_q, h_kv, d, cap, dtype = 2, 2, 4, 2, 32, 3 * page, torch.bfloat16
    q = rnd(device, dtype, batch, n_q, h_q, d)
    kp, vp, table = make_cache(device, batch, cap, h_kv, d, dtype, page)
    kcont = kp[table.long()].flatten(1, 2).clone()  # (B, cap, Hkv, d)
    vcont = vp[table.long()].flatten(1, 2).clone()
    k, v = rnd(device, dtype, batch, 2, h_kv, d), rnd(device, dtype, batch, 2, h_kv, d)
    lens = ints(device, [page - 1, cap - 2])  # the appends straddle a page boundary / fill the cache
    got_p = flash_attn_with_kvcache(q, kp, vp, k, v, cache_seqlens=lens, block_table=table, causal=True,
                                    num_splits=3, return_softmax_lse=True)
    got_c = flash_attn_with_kvcache(q, kcont, vcont, k, v, cache_seqlens=lens, causal=True,
                                    num_splits=3, return_softmax_lse=True)
    assert torch.equal(got_p[0], got_c[0]), "paged and contiguous outputs differ"
    assert torch.equal(got_p[1], got_c[1]), "paged and contiguous LSEs differ"
    assert torch.equal(kp[table.long()].flatten(1, 2), kcont), "paged and contiguous appends differ"
    assert torch.equal(vp[table.long()].flatten(1, 2), vcont)
    # The caches now hold the appended tokens: attend over cache_seqlens + 2 keys.
    ref = reference(q, kcont, vcont, seqlens=lens + 2, causal=True)
    base = reference(q, kcont, vcont, seqlens=lens + 2, causal=True, dtype=dtype)
    assert_close("out", got_p[0], ref[0], base[0], 2.0, dtype)


# ---------------------------------------------------------------------------
# Split-KV
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("combine", ["fused", "separate", "gathered"])
def test_splits_agree(combine, dtype, device, monkeypatch):
    """1 split (direct write), several, more splits than the longest sequence
    has key tiles (empty splits) and the automatic count all match the
    reference and each other; the partials merged by the last split inside the
    decode kernel (fused) or by a combine kernel (separate, gathered).  float32 too:
    bfloat16's tolerance (~1e-2) would let a split weighted 0.7 % off pass."""
    monkeypatch.setenv(decode.ENV_CONFIG, "BLOCK_N=16")
    monkeypatch.setenv(decode.ENV_COMBINE, combine)
    q = rnd(device, dtype, 2, 2, 4, 32)
    k_cache, v_cache, _ = make_cache(device, 2, 120, 2, 32, dtype)
    lens = ints(device, [120, 9])
    ref = reference(q, k_cache, v_cache, seqlens=lens, causal=True)
    base = reference(q, k_cache, v_cache, seqlens=lens, causal=True, dtype=dtype)
    outs = {}
    for splits in (1, 2, 3, 8, 0):
        out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, causal=True,
                                           num_splits=splits, return_softmax_lse=True)
        assert_close(f"out with num_splits={splits}", out, ref[0], base[0], 2.0, dtype)
        assert_close(f"lse with num_splits={splits}", lse, ref[1], base[1].float(), 2.0, torch.float32)
        outs[splits] = out.float()
    for splits, out in outs.items():  # a few bf16 roundings apart at most
        assert_close(f"num_splits={splits} vs 1", out, outs[1], atol=2 ** -6 * outs[1].abs().max().item())


def test_default_merge_by_batch(device, monkeypatch):
    """Without FLASHATTN_TRITON_DECODE_COMBINE the plan's merge is the one
    launched: the gathered combine kernel at the split rule's small batch
    (4 x programs < SMs; 64 SMs stand in for a GPU's), the fused merge in
    the decode kernel (no combine launch) at a larger one; both match the
    reference."""
    monkeypatch.delenv(decode.ENV_COMBINE, raising=False)
    monkeypatch.setenv(decode.ENV_CONFIG, "BLOCK_N=16")
    monkeypatch.setattr(decode, "sm_count", lambda device: 64)
    monkeypatch.setattr(decode, "DEFAULT_COMBINE_SMALL", "gathered")
    monkeypatch.setattr(decode, "DEFAULT_COMBINE", "fused")
    gathers = []
    combine = decode.combine_partials
    monkeypatch.setattr(decode, "combine_partials",
                        lambda *a, **kw: (gathers.append(kw["gather"]), combine(*a, **kw))[1])
    dtype = torch.float32
    for batch, want in [(1, [True]), (16, [])]:  # 2 and 32 programs: 8 < 64, 128 >= 64
        gathers.clear()
        q = rnd(device, dtype, batch, 1, 4, 32)
        k_cache, v_cache, _ = make_cache(device, batch, 96, 2, 32, dtype)
        lens = ints(device, [96 - 5 * (i % 8) for i in range(batch)])
        ref = reference(q, k_cache, v_cache, seqlens=lens)
        base = reference(q, k_cache, v_cache, seqlens=lens, dtype=dtype)
        out = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, num_splits=3)
        assert_close(f"B={batch}", out, ref[0], base[0], 2.0, dtype)
        if kvc._use_triton(q):
            assert gathers == want, f"B={batch}: combine launches (gather=) {gathers}, expected {want}"


def test_split_counters_reset(device, monkeypatch):
    """The fused merge's counters come from a buffer kept per stream: every
    launch leaves them at 0 (no memset per call), so repeated calls with
    different split counts and shapes keep matching the reference; a removed
    reset would make the next call merge before all partials are written."""
    monkeypatch.setenv(decode.ENV_CONFIG, "BLOCK_N=16")
    monkeypatch.setenv(decode.ENV_COMBINE, "fused")
    dtype = torch.bfloat16
    for rep, (batch, n_cap, splits) in enumerate([(2, 120, 3), (3, 100, 5), (2, 120, 3), (1, 64, 4)]):
        q = rnd(device, dtype, batch, 1, 4, 32)
        k_cache, v_cache, _ = make_cache(device, batch, n_cap, 2, 32, dtype)
        lens = ints(device, [n_cap - 7 * i for i in range(batch)])
        ref = reference(q, k_cache, v_cache, seqlens=lens)
        base = reference(q, k_cache, v_cache, seqlens=lens, dtype=dtype)
        out = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, num_splits=splits)
        assert_close(f"call {rep} (B={batch}, splits={splits})", out, ref[0], base[0], 2.0, dtype)
        if kvc._use_triton(q):
            buf = decode.split_counters(1, q.device)._base
            assert buf is not None and int(buf.count_nonzero()) == 0, f"counters left set after call {rep}"


def test_split_counters_buffer_per_device_and_stream(monkeypatch):
    """The counters' buffer is kept per (CUDA device, stream), and every
    device's default stream has handle 0, so the key holds the device index:
    two GPUs' default streams never share one buffer.  A size asked for again
    gets the same view of that buffer (no slice per call); a larger size
    makes a new zeroed buffer, and a discarded buffer is made anew."""
    monkeypatch.setattr(decode, "current_stream_handle", lambda index: 0)  # both devices on their default stream
    assert decode._counters_key(torch.device("cuda", 0)) != decode._counters_key(torch.device("cuda", 1))
    monkeypatch.setattr(decode, "_COUNTERS", {})
    cpu = torch.device("cpu")
    a = decode.split_counters(8, cpu)
    assert decode.split_counters(8, cpu) is a and a.numel() == 8
    big = decode.split_counters(5000, cpu)
    assert big.numel() == 5000 and big._base is not a._base and int(big.count_nonzero()) == 0
    again = decode.split_counters(8, cpu)
    assert again._base is big._base and again.numel() == 8
    decode.discard_split_counters(cpu)
    assert decode.split_counters(8, cpu)._base is not big._base


def test_interrupted_launch_leaves_no_counters_set(device, monkeypatch):
    """A decode launch that stops part-way (here: a stand-in that counts one
    split in and raises, as an interrupt of the interpreter can) must not
    make later calls merge early: they match the reference."""
    monkeypatch.setenv(decode.ENV_CONFIG, "BLOCK_N=16")
    monkeypatch.setenv(decode.ENV_COMBINE, "fused")
    dtype = torch.float32
    q = rnd(device, dtype, 2, 1, 4, 32)
    k_cache, v_cache, _ = make_cache(device, 2, 96, 2, 32, dtype)
    lens = ints(device, [96, 70])
    ref = reference(q, k_cache, v_cache, seqlens=lens)
    base = reference(q, k_cache, v_cache, seqlens=lens, dtype=dtype)
    if not kvc._use_triton(q):
        pytest.skip("the blockwise path has no split counters")
    real = decode._decode_fwd

    class _StopsPartWay:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                args[7].add_(1)  # the counters: as if one split of each tile had finished
                raise KeyboardInterrupt
            return launch

    monkeypatch.setattr(decode, "_decode_fwd", _StopsPartWay())
    with pytest.raises(KeyboardInterrupt):
        flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, num_splits=4)
    monkeypatch.setattr(decode, "_decode_fwd", real)
    for rep in range(2):
        out = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, num_splits=4)
        assert_close(f"call {rep} after the interrupted one", out, ref[0], base[0], 2.0, dtype)


def test_strided_index_vectors(device):
    """cache_seqlens, cache_batch_idx and cache_leftpad given as strided views
    give the results of their contiguous copies."""
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 1, 4, 16, generator=gen).to(device)
    kc, vc = (torch.randn(4, 48, 2, 16, generator=gen).to(device) for _ in range(2))

    def strided(values):
        t = torch.tensor(values, dtype=torch.int32, device=device)
        return torch.stack([t, t + 1], 1)[:, 0]  # stride 2

    plain = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=torch.tensor([40, 17], dtype=torch.int32, device=device),
                                     cache_batch_idx=torch.tensor([3, 1], dtype=torch.int32, device=device),
                                     cache_leftpad=torch.tensor([2, 5], dtype=torch.int32, device=device))
    views = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=strided([40, 17]), cache_batch_idx=strided([3, 1]),
                                    cache_leftpad=strided([2, 5]))
    assert torch.equal(plain, views), f"strided index vectors changed the output by {(plain - views).abs().max()}"


def test_choose_num_splits():
    """Host-only heuristic: small batches spread over the SMs, large ones do not split."""
    # B=1, 8 KV heads, 128k cache, 64-key tiles on 132 SMs: about one program per SM.
    s = decode.choose_num_splits(programs=8, n_keys=131072, block_n=64, n_sm=132)
    assert 12 <= s and 8 * s <= 132, s
    # a short cache splits less (each split's partial costs the merge a read)
    assert decode.choose_num_splits(programs=8, n_keys=1024, block_n=64, n_sm=132) < s
    # B=8: two programs per SM, a few splits each
    s8 = decode.choose_num_splits(programs=64, n_keys=131072, block_n=64, n_sm=132)
    assert 2 <= s8 and 64 * s8 <= 2 * 132, s8
    assert decode.choose_num_splits(programs=512, n_keys=131072, block_n=64, n_sm=132) == 1
    assert decode.choose_num_splits(programs=8, n_keys=64, block_n=64, n_sm=132) == 1  # one tile
    assert decode.choose_num_splits(programs=1, n_keys=10 ** 7, block_n=64, n_sm=1000) <= decode.MAX_AUTO_SPLITS
    assert decode.sm_count(torch.device("cpu")) == decode.CPU_SM_COUNT


# ---------------------------------------------------------------------------
# Rotary, batch index, left padding, variants
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("interleaved", [True, False], ids=["interleaved", "neox"])
@pytest.mark.parametrize("causal,rot_frac,page", [(True, 1.0, None), (False, 0.5, 16)],
                         ids=["causal-full-rot-contiguous", "full-half-rot-page16"])
def test_rotary(interleaved, causal, rot_frac, page, device):
    """q rotated at cache_seqlens + i (causal) or at cache_seqlens (not
    causal); new keys rotated at cache_seqlens + i before they are stored."""
    dtype, d, cap = torch.float16, 32, 64
    rd = int(d * rot_frac)
    q = rnd(device, dtype, 2, 3, 4, d)
    k_cache, v_cache, table = make_cache(device, 2, cap, 2, d, dtype, page)
    angle = torch.rand(cap, rd // 2, device=device) * 2 * math.pi
    check(q, k_cache, v_cache, dtype, k=rnd(device, dtype, 2, 3, 2, d), v=rnd(device, dtype, 2, 3, 2, d),
          cos=torch.cos(angle).to(dtype), sin=torch.sin(angle).to(dtype), seqlens=ints(device, [0, 40]),
          block_table=table, causal=causal, interleaved=interleaved, num_splits=2)


def test_rotary_float32_tables_bf16(device):
    dtype = torch.bfloat16
    q = rnd(device, dtype, 1, 1, 2, 16)
    k_cache, v_cache, _ = make_cache(device, 1, 40, 2, 16, dtype)
    angle = torch.rand(40, 8, device=device) * 2 * math.pi
    check(q, k_cache, v_cache, dtype, k=rnd(device, dtype, 1, 1, 2, 16), v=rnd(device, dtype, 1, 1, 2, 16),
          cos=torch.cos(angle), sin=torch.sin(angle), seqlens=17, interleaved=False)


@pytest.mark.parametrize("strided", ["sin", "cos"])
def test_rotary_tables_with_different_row_strides(device, strided):
    """cos and sin slices of wider tables, each with a row stride of its own
    (the kernels take one row stride): the same as contiguous tables, for
    the appended keys written to the cache and for the output."""
    dtype = torch.float16
    q = rnd(device, dtype, 2, 2, 4, 32)
    k_cache, v_cache, _ = make_cache(device, 2, 48, 2, 32, dtype)
    angle = torch.rand(48, 16, device=device) * 2 * math.pi
    wide = torch.full((48, 24), float("nan"), device=device, dtype=dtype)
    wide[:, :16] = (torch.sin if strided == "sin" else torch.cos)(angle).to(dtype)
    cos = wide[:, :16] if strided == "cos" else torch.cos(angle).to(dtype)
    sin = wide[:, :16] if strided == "sin" else torch.sin(angle).to(dtype)
    check(q, k_cache, v_cache, dtype, k=rnd(device, dtype, 2, 2, 2, 32), v=rnd(device, dtype, 2, 2, 2, 32),
          cos=cos, sin=sin, seqlens=ints(device, [5, 30]), causal=True, num_splits=2)


def test_backward_raises_a_clear_error(device):
    """No backward (an inference op): a backward through its output says so,
    and under no_grad the output needs none."""
    q = rnd(device, torch.float32, 2, 1, 4, 16).requires_grad_()
    caches = [rnd(device, torch.float32, 2, 32, 2, 16) for _ in range(2)]
    out = flash_attn_with_kvcache(q, *caches, cache_seqlens=5)
    with pytest.raises(NotImplementedError, match="flash_attn_with_kvcache has no backward"):
        out.sum().backward()
    with torch.no_grad():
        assert not flash_attn_with_kvcache(q, *caches, cache_seqlens=5).requires_grad


def test_cache_batch_idx(device):
    """Sequences read (and append to) the cache rows named by cache_batch_idx;
    other rows are left untouched."""
    dtype = torch.bfloat16
    q = rnd(device, dtype, 2, 1, 4, 32)
    k_cache, v_cache, _ = make_cache(device, 2, 80, 2, 32, dtype, batch_cache=5)
    _, _, kc, vc = check(q, k_cache, v_cache, dtype, batch_idx=ints(device, [4, 1]),
                         seqlens=ints(device, [79, 30]), k=rnd(device, dtype, 2, 1, 2, 32),
                         v=rnd(device, dtype, 2, 1, 2, 32), num_splits=2)
    for row in (0, 2, 3):
        assert torch.equal(kc[row], k_cache[row]) and torch.equal(vc[row], v_cache[row]), f"row {row} changed"


@pytest.mark.parametrize("page", [None, 32], ids=["contiguous", "page32"])
def test_leftpad(page, device):
    dtype = torch.float16
    q = rnd(device, dtype, 3, 2, 4, 32)
    k_cache, v_cache, table = make_cache(device, 3, 96, 2, 32, dtype, page)
    check(q, k_cache, v_cache, dtype, block_table=table, seqlens=ints(device, [90, 40, 5]),
          leftpad=ints(device, [33, 0, 5]), k=rnd(device, dtype, 3, 2, 2, 32),
          v=rnd(device, dtype, 3, 2, 2, 32), causal=True, num_splits=2)


@pytest.mark.parametrize("window,causal", [((20, 0), False), ((7, -1), True), ((-1, 3), False), ((10, 5), False)],
                         ids=["left20-right0", "left7-causal", "right3", "left10-right5"])
def test_window(window, causal, device):
    dtype = torch.bfloat16
    q = rnd(device, dtype, 2, 4, 4, 32)
    k_cache, v_cache, _ = make_cache(device, 2, 100, 2, 32, dtype)
    check(q, k_cache, v_cache, dtype, seqlens=ints(device, [100, 45]), window=window, causal=causal,
          num_splits=3)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_softcap_and_alibi(dtype, device):
    dtype = DTYPES[dtype]
    q = rnd(device, dtype, 2, 2, 4, 32, scale=3.0)
    k_cache, v_cache, table = make_cache(device, 2, 96, 2, 32, dtype, 16)
    lens = ints(device, [96, 50])
    check(q, k_cache, v_cache, dtype, block_table=table, seqlens=lens, softcap=5.0, causal=True, num_splits=2)
    check(q, k_cache, v_cache, dtype, block_table=table, seqlens=lens,
          alibi=torch.rand(2, 4, device=device) * 0.5)
    check(q, k_cache, v_cache, dtype, block_table=table, seqlens=lens,
          alibi=torch.rand(4, device=device) * 0.5, causal=True, softcap=8.0)


def test_seqlens_int_and_none(device):
    dtype = torch.float16
    q = rnd(device, dtype, 2, 1, 2, 16)
    k_cache, v_cache, _ = make_cache(device, 2, 48, 2, 16, dtype)
    check(q, k_cache, v_cache, dtype, seqlens=30)
    check(q, k_cache, v_cache, dtype, scale=0.3)  # None: the whole cache
    out = flash_attn_with_kvcache(q, k_cache, v_cache)  # out only, automatic splits
    ref = reference(q, k_cache, v_cache)
    assert_close("out", out, ref[0], reference(q, k_cache, v_cache, dtype=dtype)[0], 2.0, dtype)


@pytest.mark.parametrize("page", [None, 16, 32], ids=["contiguous", "page16", "page32"])
@pytest.mark.parametrize("fallback", [False, True], ids=["kernel", "torch-fallback"])
def test_garbage_outside_valid_range_is_not_read(page, fallback, device, monkeypatch):
    """Cache entries before cache_leftpad or past the valid length hold NaN,
    and block-table entries past a sequence's pages are -1 or a page number
    far past the pool: never read (the PyTorch fallback indexed the pool
    through them: IndexError)."""
    if fallback:
        monkeypatch.setattr(kvc, "INTERPRET", False)
        device = torch.device("cpu")
    dtype = torch.float16
    lens, pad, n_new = [20, 50], [5, 0], 2
    q = rnd(device, dtype, 2, 2, 4, 32)
    k_cache, v_cache, table = make_cache(device, 2, 96, 2, 32, dtype, page)
    for b in range(2):  # NaN outside [pad_b, lens_b + n_new)
        bad = [j for j in range(96) if j < pad[b] or j >= lens[b] + n_new]
        pos = torch.tensor(bad, device=device)
        write_cache(k_cache, b, [0, 1], table, pos, float("nan"))
        write_cache(v_cache, b, [0, 1], table, pos, float("nan"))
    if table is not None:
        used = [math.ceil((n + n_new) / page) for n in lens]
        for b in range(2):
            table[b, used[b]:] = -1 if b == 0 else 10**6
    check(q, k_cache, v_cache, dtype, block_table=table, seqlens=ints(device, lens), leftpad=ints(device, pad),
          k=rnd(device, dtype, 2, n_new, 2, 32), v=rnd(device, dtype, 2, n_new, 2, 32), causal=True,
          num_splits=2)


def test_large_group_several_row_tiles(device, monkeypatch):
    """More rows (tokens x heads of a group) than one tile holds."""
    monkeypatch.setenv(decode.ENV_CONFIG, "BLOCK_M=16")
    dtype = torch.bfloat16
    q = rnd(device, dtype, 1, 3, 16, 16)  # 3 tokens x 8 heads per group = 24 rows
    k_cache, v_cache, _ = make_cache(device, 1, 50, 2, 16, dtype)
    check(q, k_cache, v_cache, dtype, seqlens=47, k=rnd(device, dtype, 1, 3, 2, 16),
          v=rnd(device, dtype, 1, 3, 2, 16), causal=True)


def test_empty_batch_and_query(device):
    dtype = torch.float16
    k_cache, v_cache, _ = make_cache(device, 2, 32, 2, 16, dtype)
    out, lse = flash_attn_with_kvcache(rnd(device, dtype, 0, 1, 4, 16), k_cache, v_cache,
                                       cache_seqlens=3, return_softmax_lse=True)
    assert out.shape == (0, 1, 4, 16) and lse.shape == (0, 4, 1)
    out, lse = flash_attn_with_kvcache(rnd(device, dtype, 2, 0, 4, 16), k_cache, v_cache,
                                       cache_seqlens=3, return_softmax_lse=True)
    assert out.shape == (2, 0, 4, 16) and lse.shape == (2, 4, 0)


def check_fallback_paged(n_q, **options):
    """check() on the CPU of a paged step (16-token pages, 2 sequences of 0
    and 50 cached tokens, left padding 0 / 7, n_q tokens appended and rotated,
    Hq 4 / Hkv 2, d 32, float32) with ``options``; the caller has turned the
    interpreter off, so the PyTorch fallback runs."""
    cpu, dtype = torch.device("cpu"), torch.float32
    q = rnd(cpu, dtype, 2, n_q, 4, 32)
    k_cache, v_cache, table = make_cache(cpu, 2, 64, 2, 32, dtype, 16)
    angle = torch.rand(64, 8) * 2 * math.pi
    check(q, k_cache, v_cache, dtype, block_table=table, seqlens=ints(cpu, [0, 50]),
          k=rnd(cpu, dtype, 2, 2, 2, 32), v=rnd(cpu, dtype, 2, 2, 2, 32), cos=torch.cos(angle),
          sin=torch.sin(angle), leftpad=ints(cpu, [0, 7]), **options)


def test_torch_fallback(monkeypatch):
    """CPU without Triton's interpreter: the PyTorch path has the same semantics."""
    monkeypatch.setattr(kvc, "INTERPRET", False)
    cpu = torch.device("cpu")
    check_fallback_paged(2, interleaved=False, causal=True, softcap=4.0, alibi=torch.rand(4) * 0.3,
                         window=(20, -1))
    q = rnd(cpu, torch.bfloat16, 2, 1, 4, 32)
    k_cache, v_cache, _ = make_cache(cpu, 3, 40, 2, 32, torch.bfloat16)
    check(q, k_cache, v_cache, torch.bfloat16, batch_idx=ints(cpu, [2, 0]), seqlens=ints(cpu, [40, 11]))


# ---------------------------------------------------------------------------
# Attention sinks (gpt-oss)
# ---------------------------------------------------------------------------

def sees_no_key(lens, n_new, n_q, causal):
    """(B, Nq) bool: query tokens that attend no key (without window or left padding)."""
    kv_end = torch.tensor(lens)[:, None] + n_new
    pos = torch.arange(n_q)[None, :] + kv_end - n_q  # key position of query token i
    return (kv_end == 0) | (causal & (pos < 0))


# (B, Nq, Hq, Hkv, d, capacity, cache_seqlens, n_new, causal, dtype, page, num_splits, combine)
SINK_CASES = [
    (3, 1, 4, 2, 32, 70, [0, 33, 70], 0, False, "bf16", None, 1, "fused"),      # GQA, ragged incl. 0 and full
    (3, 1, 4, 2, 32, 70, [0, 33, 70], 0, False, "bf16", 16, 3, "fused"),        # paged, merged in the kernel
    (2, 3, 4, 1, 32, 64, [0, 40], 3, True, "fp16", 32, 2, "separate"),          # MQA, append 3, causal, combine kernel
    (1, 5, 4, 2, 32, 50, [2], 0, True, "fp16", None, 3, "fused"),               # first rows see no key, split
    (1, 5, 4, 2, 32, 50, [2], 0, True, "fp16", 16, 2, "separate"),
    (2, 3, 4, 1, 32, 64, [0, 40], 3, True, "fp16", 32, 2, "gathered"),          # the gathered combine kernel
    (1, 5, 4, 2, 32, 50, [2], 0, True, "bf16", None, 7, "gathered"),            # two passes (4 parts per load)
    (2, 2, 4, 4, 40, 77, [10, 75], 2, True, "fp32", 16, 3, "gathered"),         # odd head dim: 2 column blocks
    (2, 2, 4, 4, 40, 77, [10, 75], 2, True, "fp32", 16, 1, "fused"),            # MHA, odd head dim, append to full
]


def _sink_id(c):
    layout = "contiguous" if c[10] is None else f"page{c[10]}"
    return f"B{c[0]}-q{c[1]}-h{c[2]}/{c[3]}-new{c[7]}-{'causal' if c[8] else 'full'}-{c[9]}-{layout}-s{c[11]}-{c[12]}"


@pytest.mark.parametrize("case", SINK_CASES, ids=[_sink_id(c) for c in SINK_CASES])
def test_sinks_against_reference(case, device, monkeypatch):
    """The sink joins each head's denominator once (after the split-KV merge,
    in the kernel or in the combine kernel); rows that see no key give 0 and
    LSE = sink."""
    batch, n_q, h_q, h_kv, d, cap, lens, n_new, causal, dtype, page, splits, combine = case
    monkeypatch.setenv(decode.ENV_COMBINE, combine)
    dtype = DTYPES[dtype]
    q = rnd(device, dtype, batch, n_q, h_q, d)
    k_cache, v_cache, table = make_cache(device, batch, cap, h_kv, d, dtype, page)
    sinks = torch.randn(h_q, device=device) * 2
    sinks[0] = 8.0  # outweighs every key: the output shrinks towards 0
    kw = dict(seqlens=ints(device, lens), causal=causal, block_table=table, num_splits=splits, sinks=sinks)
    if n_new:
        kw.update(k=rnd(device, dtype, batch, n_new, h_kv, d), v=rnd(device, dtype, batch, n_new, h_kv, d))
    out, lse, _, _ = check(q, k_cache, v_cache, dtype, **kw)
    empty = sees_no_key(lens, n_new, n_q, causal).to(device)
    assert torch.equal(out[empty], torch.zeros_like(out[empty])), "a row that sees no key must give zeros"
    got = lse.transpose(1, 2)[empty]  # (rows, Hq)
    assert_close("lse of rows that see no key", got, sinks.expand_as(got), atol=1e-6)


def test_sinks_with_variants(device):
    """Softcap, sliding window, ALiBi, left padding and rotary with sinks; bf16
    sinks (any float dtype, used in float32) that are not contiguous."""
    dtype = torch.bfloat16
    q = rnd(device, dtype, 2, 2, 4, 32, scale=3.0)
    k_cache, v_cache, table = make_cache(device, 2, 96, 2, 32, dtype, 16)
    angle = torch.rand(96, 8, device=device) * 2 * math.pi
    sinks = (torch.randn(8, device=device) * 2).to(dtype)[::2]
    check(q, k_cache, v_cache, dtype, block_table=table, seqlens=ints(device, [90, 30]),
          leftpad=ints(device, [0, 4]), k=rnd(device, dtype, 2, 2, 2, 32), v=rnd(device, dtype, 2, 2, 2, 32),
          cos=torch.cos(angle), sin=torch.sin(angle), softcap=5.0, window=(40, -1), causal=True,
          alibi=torch.rand(2, 4, device=device) * 0.5, num_splits=2, sinks=sinks)


@pytest.mark.parametrize("splits", [1, 3])
def test_sinks_equal_flash_attn_func(splits, device):
    """A full cache gives what flash_attn_func gives with the same sinks on the
    same keys (causal: both bottom-right aligned)."""
    from flashattn_triton import flash_attn_func
    dtype = torch.float16
    q = rnd(device, dtype, 2, 3, 4, 64)
    k_cache, v_cache, _ = make_cache(device, 2, 80, 2, 64, dtype)
    sinks = torch.randn(4, device=device)
    out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, causal=True, num_splits=splits, sinks=sinks,
                                       return_softmax_lse=True)
    ref_out, ref_lse = flash_attn_func(q, k_cache, v_cache, causal=True, sinks=sinks, return_lse=True)
    assert_close("out vs flash_attn_func", out.float(), ref_out.float(), atol=2 ** -9)
    assert_close("lse vs flash_attn_func", lse, ref_lse, atol=1e-5)
    # And without sinks the two differ by exactly the sink's share.
    plain, plain_lse = flash_attn_with_kvcache(q, k_cache, v_cache, causal=True, num_splits=splits,
                                               return_softmax_lse=True)
    assert_close("lse = logaddexp(lse without sinks, sink)", lse,
                 torch.logaddexp(plain_lse, sinks[None, :, None]), atol=1e-5)
    share = torch.sigmoid(plain_lse - sinks[None, :, None]).transpose(1, 2)[..., None]
    assert_close("out = out without sinks * sigmoid(lse - sink)", out.float(), plain.float() * share,
                 atol=2 ** -9)


def test_sinks_torch_fallback_and_no_room(device, monkeypatch):
    """The PyTorch path (CPU without the interpreter) has the same semantics;
    a cache without room gives out 0 and LSE = sink on every path."""
    sinks = torch.randn(4) * 2
    for fallback in (True, False):
        if fallback:
            monkeypatch.setattr(kvc, "INTERPRET", False)
            dev = torch.device("cpu")
        else:
            monkeypatch.setattr(kvc, "INTERPRET", decode.INTERPRET)
            dev = device
        dtype = torch.float32
        q = rnd(dev, dtype, 2, 3, 4, 32)
        k_cache, v_cache, table = make_cache(dev, 2, 64, 2, 32, dtype, 16)
        check(q, k_cache, v_cache, dtype, block_table=table, seqlens=ints(dev, [0, 50]),
              k=rnd(dev, dtype, 2, 1, 2, 32), v=rnd(dev, dtype, 2, 1, 2, 32), causal=True,
              alibi=torch.rand(4, device=dev) * 0.3, window=(20, -1), sinks=sinks.to(dev), num_splits=2)
        empty = torch.empty(2, 0, 2, 32, device=dev)
        out, lse = flash_attn_with_kvcache(q, empty, empty.clone(), sinks=sinks.to(dev), return_softmax_lse=True)
        assert torch.equal(out, torch.zeros_like(out))
        assert torch.equal(lse, sinks.to(dev)[None, :, None].expand_as(lse))


# ---------------------------------------------------------------------------
# Combine
# ---------------------------------------------------------------------------

def _split_attention(device, parts, n_k=17, b=2, n=3, h=4, d=40):
    """float64 attention over parts * n_k keys, and its parts' outputs and LSEs
    (float32): row (0, 0, 0) sees no key, part 2 none of batch entry 1."""
    q = torch.randn(b, n, h, d, dtype=torch.float64, device=device)
    k = torch.randn(b, parts * n_k, h, d, dtype=torch.float64, device=device)
    v = torch.randn_like(k)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)
    s[0, 0, 0, :] = float("-inf")  # a row that sees nothing
    s[1, :, :, 2 * n_k:3 * n_k] = float("-inf")  # part 2 sees nothing for batch 1
    lse_full = torch.logsumexp(s, -1)
    out_full = torch.einsum("bhqk,bkhd->bqhd", torch.exp(s - lse_full.nan_to_num(neginf=0)[..., None]), v)
    o_parts, l_parts = [], []
    for p in range(parts):
        sp = s[..., p * n_k:(p + 1) * n_k]
        lp = torch.logsumexp(sp, -1)
        o_parts.append(torch.einsum("bhqk,bkhd->bqhd", torch.exp(sp - lp.nan_to_num(neginf=0)[..., None]),
                                    v[:, p * n_k:(p + 1) * n_k]))
        l_parts.append(lp)
    return out_full, lse_full, torch.stack(o_parts).float(), torch.stack(l_parts).float()


def test_combine_kernel(device):
    """Triton combine of S parts = attention over the union; parts that saw no
    key (lse = -inf) weigh 0; rows no part saw give 0 and -inf."""
    out_full, lse_full, o_parts, l_parts = _split_attention(device, 5)
    out, lse = combine_attention_states(o_parts, l_parts, torch.bfloat16)
    assert out.dtype == torch.bfloat16
    assert_close("combined out", out.float(), out_full, atol=2 ** -7 * out_full.abs().max().item())
    assert_close("combined lse", lse, lse_full, atol=1e-5 * lse_full[torch.isfinite(lse_full)].abs().max().item())
    assert torch.isneginf(lse[0, 0, 0]) and torch.equal(out[0, 0, 0], torch.zeros_like(out[0, 0, 0]))
    # Two parts: same as merge_attention_states.
    o2, l2 = combine_attention_states(o_parts[:2], l_parts[:2])
    o_m, l_m = merge_attention_states(o_parts[0], l_parts[0], o_parts[1], l_parts[1])
    assert_close("vs merge_attention_states", o2, o_m, atol=1e-6)
    assert_close("lse vs merge_attention_states", l2, l_m, atol=1e-6)
    # Bad input: a clear error naming the argument.
    with pytest.raises(TypeError, match="lse_parts must be float32.*int32"):
        combine_attention_states(o_parts, l_parts.int())
    with pytest.raises(TypeError, match="lse_parts must be float32.*float16"):
        combine_attention_states(o_parts, l_parts.half())
    with pytest.raises(TypeError, match="out_parts must be a floating-point tensor"):
        combine_attention_states(o_parts.int(), l_parts)
    with pytest.raises(ValueError, match="lse_parts must have shape"):
        combine_attention_states(o_parts, l_parts[:, :, :1])


@pytest.mark.parametrize("parts", [3, 7], ids=["one-load", "two-passes"])
@pytest.mark.parametrize("base2", [False, True], ids=["natural", "base2"])
@pytest.mark.parametrize("sinks", [False, True], ids=["no-sinks", "sinks"])
def test_gather_kernel(device, parts, base2, sinks):
    """combine_partials(gather=True) (the gathered merge: all parts of a tile in
    one load; on CPU 4 parts per load, so 7 parts take two passes) against
    float64: LSEs in either base, an optional sink per head (one more logit
    with output 0), rows no part saw give 0 and -inf (or the sink)."""
    from flashattn_triton.kernels.combine import combine_partials
    if device.type == "cpu" and not decode.INTERPRET:
        pytest.skip("a Triton kernel: needs the interpreter or a GPU")
    out_full, lse_full, o_parts, l_parts = _split_attention(device, parts)
    b, n, h, d = out_full.shape
    sink = torch.randn(h, device=device, dtype=torch.float64) if sinks else None
    if sinks:  # the sink joins each head's denominator with value 0
        lse_tot = torch.logaddexp(lse_full, sink[None, :, None].expand_as(lse_full))
        out_full = out_full * torch.exp(lse_full - lse_tot).transpose(1, 2)[..., None]
        lse_full = lse_tot
    scale = 1.4426950408889634 if base2 else 1.0
    out = torch.full((b, n, h, d), float("nan"), device=device, dtype=torch.bfloat16)
    lse = torch.full((b, h, n), float("nan"), device=device, dtype=torch.float32)
    combine_partials(o_parts.transpose(2, 3), l_parts * scale, out.transpose(1, 2), lse,
                     sinks=sink.float() if sinks else None, base2=base2, gather=True)
    assert_close("gathered out", out.float(), out_full, atol=2 ** -7 * out_full.abs().max().item())
    finite = torch.isfinite(lse_full)
    assert_close("gathered lse", lse[finite], (lse_full * scale)[finite],
                 atol=1e-5 * lse_full[finite].abs().max().item())
    assert torch.equal(torch.isneginf(lse), ~finite), "rows that saw no key (and no sink) must give LSE -inf"
    assert torch.equal(out[0, 0, 0], torch.zeros_like(out[0, 0, 0])), "a row that saw no key must give 0"


# ---------------------------------------------------------------------------
# torch.compile, validation
# ---------------------------------------------------------------------------

def check_compiled_step(device, n_q, lens, chunk=0):
    """A causal decode step on a 16-token-page cache (2 sequences of lengths
    ``lens`` before the append, n_q new tokens, Hq 4 / Hkv 2, d 16, fp16)
    compiled with torch.compile(fullgraph=True) (aot_eager): one graph (no
    break), the eager call within the tolerance rule of the float64
    reference, and the compiled call equal to it, with the append visible in
    the caller's cache."""
    import torch._dynamo
    torch._dynamo.reset()
    dtype = torch.float16
    q = rnd(device, dtype, 2, n_q, 4, 16)
    k_cache, v_cache, table = make_cache(device, 2, 64, 2, 16, dtype, 16)
    k, v = rnd(device, dtype, 2, n_q, 2, 16), rnd(device, dtype, 2, n_q, 2, 16)
    lens = ints(device, lens)

    def step(q, kc, vc, k, v, lens, table):
        return flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, block_table=table, causal=True,
                                       return_softmax_lse=True, attention_chunk=chunk)

    kc_e, vc_e = k_cache.clone(), v_cache.clone()
    out_e, lse_e = step(q, kc_e, vc_e, k, v, lens, table)
    ref = reference(q, k_cache, v_cache, k, v, seqlens=lens, block_table=table, causal=True, chunk=chunk)
    base = reference(q, k_cache, v_cache, k, v, seqlens=lens, block_table=table, causal=True, chunk=chunk,
                     dtype=dtype)
    assert_close("out", out_e, ref[0], base[0], 2.0, dtype)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    kc_c, vc_c = k_cache.clone(), v_cache.clone()
    out_c, lse_c = compiled(q, kc_c, vc_c, k, v, lens, table)
    assert torch.equal(out_c, out_e) and torch.equal(lse_c, lse_e)
    assert torch.equal(kc_c, kc_e) and torch.equal(vc_c, vc_e), "the compiled call did not append in place"


def test_torch_compile_fullgraph(device):
    """One graph (no break) with the append visible in the caller's cache."""
    check_compiled_step(device, 1, [10, 40])


def test_custom_op_registered(device):
    op = torch.ops.flashattn_triton.kvcache_fwd.default
    schema = str(op._schema)
    assert "Tensor(a1!) k_cache" in schema and "Tensor(a2!) v_cache" in schema, schema
    r = lambda *shape: torch.randn(*shape, device=device)  # noqa: E731
    torch.library.opcheck(
        torch.ops.flashattn_triton.kvcache_fwd,
        (r(1, 1, 2, 16), r(1, 32, 1, 16), r(1, 32, 1, 16), r(1, 1, 1, 16), r(1, 1, 1, 16), None, None,
         ints(device, [5]),
         None, None, None, None, 0.25, True, -1, 0, 0.0, True, 0),
        test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(
        torch.ops.flashattn_triton.kvcache_fwd,
        (r(1, 1, 2, 16), r(1, 32, 1, 16), r(1, 32, 1, 16), None, None, None, None, ints(device, [5]),
         None, None, None, None, 0.25, True, -1, 0, 0.0, True, 2, r(2)),
        test_utils=("test_schema", "test_faketensor"))


def test_read_only_op_registered(device):
    """A call without k / v goes through an op that declares no mutation, so
    it leaves the caches' version counters alone: a cache an earlier autograd
    op saved stays usable for that op's backward."""
    schema = str(torch.ops.flashattn_triton.kvcache_attn.default._schema)
    assert "!" not in schema, schema
    r = lambda *shape: torch.randn(*shape, device=device)  # noqa: E731
    torch.library.opcheck(
        torch.ops.flashattn_triton.kvcache_attn,
        (r(1, 1, 2, 16), r(1, 32, 1, 16), r(1, 32, 1, 16), None, None, None, None, ints(device, [5]),
         None, None, None, None, 0.25, True, -1, 0, 0.0, True, 2),
        test_utils=("test_schema", "test_faketensor"))
    p = torch.randn(2, 32, 2, 16, device=device, requires_grad=True)
    cache = p * 1.0
    w = torch.randn(32, device=device, requires_grad=True)
    y = (cache * w[None, :, None, None]).sum()  # saves cache for w's gradient
    version = cache._version
    with torch.no_grad():
        flash_attn_with_kvcache(torch.randn(2, 1, 2, 16, device=device), cache.detach(), cache.detach(),
                                cache_seqlens=ints(device, [5, 9]))
    assert cache._version == version, "a read-only call bumped the cache's version counter"
    y.backward()
    assert_close("dw", w.grad, p.detach().sum((0, 2, 3)), atol=1e-4)


@pytest.mark.parametrize("append", [False, True], ids=["read only", "append"])
def test_eager_calls_skip_the_op_with_the_same_result(device, monkeypatch, append):
    """An eager call without gradients runs the op's implementation directly
    (kvc.DIRECT: no dispatcher cost) and gives bit for bit what the call
    through the op gives (kvc.DIRECT = False): output, LSE and the caches
    after an append, whose version counters it bumps as the op does (and
    leaves alone without one).  A call whose q requires grad, or one under
    a forward-AD level, still takes the op; under no_grad requires_grad does
    not matter.  (kvc._direct's answers are recorded: True is the direct call.)"""
    direct_taken = []
    real_direct = kvc._direct
    monkeypatch.setattr(kvc, "_direct", lambda args: (direct_taken.append(real_direct(args)), direct_taken[-1])[1])

    def call(direct, q, caches):
        monkeypatch.setattr(kvc, "DIRECT", direct)
        k_cache, v_cache = caches
        versions = (k_cache._version, v_cache._version)
        extra = dict(k=k_new, v=v_new) if append else {}
        out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=ints(device, [5, 30]), causal=True,
                                           return_softmax_lse=True, **extra)
        bumped = (k_cache._version > versions[0], v_cache._version > versions[1])
        return out, lse, k_cache, v_cache, bumped

    torch.manual_seed(0)
    q = torch.randn(2, 2, 4, 16, device=device)
    k_new, v_new = torch.randn(2, 2, 2, 16, device=device), torch.randn(2, 2, 2, 16, device=device)
    caches = (torch.randn(2, 40, 2, 16, device=device), torch.randn(2, 40, 2, 16, device=device))
    direct = call(True, q, tuple(t.clone() for t in caches))
    assert direct_taken == [True], "an eager call must take the direct path"
    via_op = call(False, q, tuple(t.clone() for t in caches))
    assert direct_taken == [True], "DIRECT = False: through the op"
    for i, (a, b) in enumerate(zip(direct[:4], via_op[:4])):
        assert torch.equal(a, b), (append, i, (a - b).abs().max().item())
    assert direct[4] == via_op[4] == (append, append), (direct[4], via_op[4])
    call(True, q.clone().requires_grad_(), tuple(t.clone() for t in caches))
    assert direct_taken[-1] is False, "q requiring grad takes the op"
    with torch.autograd.forward_ad.dual_level():
        call(True, q, tuple(t.clone() for t in caches))
    assert direct_taken[-1] is False, "a forward-AD level takes the op"
    with torch.no_grad():
        call(True, q.clone().requires_grad_(), tuple(t.clone() for t in caches))
    assert direct_taken[-1] is True, "under no_grad, requires_grad does not matter"


@pytest.mark.parametrize("which", ["leaf", "non_leaf"])
def test_append_into_a_cache_that_requires_grad_raises(device, which):
    """The append writes the caches in place and has no backward: with grad
    enabled and a cache that requires grad it raises (a non-leaf cache would
    otherwise keep its old grad_fn: wrong gradients through it later, as
    PyTorch's own index_put_ would not give); under no_grad it appends."""
    b, n, h, d = 2, 32, 2, 16
    p = torch.randn(b, n, h, d, device=device, requires_grad=True)
    k_cache = p if which == "leaf" else p * 1.0
    v_cache = torch.zeros(b, n, h, d, device=device)
    q, k, v = (torch.randn(b, 1, h, d, device=device) for _ in range(3))
    with pytest.raises(RuntimeError, match=r"k_cache.requires_grad=True.*torch.no_grad\(\)"):
        flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=ints(device, [3, 7]))
    assert torch.equal(k_cache.detach(), p.detach()), "the refused call wrote the cache"
    with torch.no_grad():
        flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=ints(device, [3, 7]))
    assert torch.equal(k_cache[0, 3].detach(), k[0, 0]) and torch.equal(v_cache[1, 7], v[1, 0])


def test_append_into_one_cache_for_k_and_v_raises(device):
    """k_cache and v_cache starting at the same memory: the appended v would
    overwrite the appended k, so an append refuses it; the two halves of a
    packed (..., 2, nheads_k, headdim) cache are two caches and append."""
    b, n, h, d = 2, 32, 2, 16
    q, k, v = (torch.randn(b, 1, h, d, device=device) for _ in range(3))
    cache = torch.randn(b, n, h, d, device=device)
    with pytest.raises(ValueError, match="k_cache and v_cache start at the same memory"):
        flash_attn_with_kvcache(q, cache, cache, k, v, cache_seqlens=ints(device, [3, 7]))
    flash_attn_with_kvcache(q, cache, cache, cache_seqlens=ints(device, [3, 7]))  # read-only: fine
    packed = torch.randn(b, n, 2, h, d, device=device)
    flash_attn_with_kvcache(q, packed[:, :, 0], packed[:, :, 1], k, v, cache_seqlens=ints(device, [3, 7]))
    assert torch.equal(packed[0, 3, 0], k[0, 0]) and torch.equal(packed[0, 3, 1], v[0, 0])


def test_append_into_an_inference_cache_outside_inference_mode_raises(device):
    """As PyTorch's in-place ops: a cache made under inference_mode takes an
    append only inside inference_mode (the kernels would write it silently)."""
    b, n, h, d = 1, 32, 2, 16
    with torch.inference_mode():
        k_cache, v_cache = torch.zeros(b, n, h, d, device=device), torch.zeros(b, n, h, d, device=device)
    q, k, v = (torch.randn(b, 1, h, d, device=device) for _ in range(3))
    with pytest.raises(RuntimeError, match="k_cache is an inference tensor"):
        flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=ints(device, [3]))
    with torch.inference_mode():
        flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=ints(device, [3]))
    assert torch.equal(k_cache[0, 3], k[0, 0])


def _args():
    q = torch.randn(2, 1, 4, 16, dtype=torch.float16)
    kc = torch.randn(2, 32, 2, 16, dtype=torch.float16)
    return q, kc, kc.clone()


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(q="x"), TypeError, r"q must be a torch.Tensor, got str"),
    (dict(q=torch.randn(2, 4, 16)), ValueError, r"q must be 4-D \(batch_size, seqlen, nheads, headdim\)"),
    (dict(k_cache=torch.randn(2, 32, 2, 16)), TypeError, r"share one dtype, got torch.float16, torch.float32"),
    (dict(q=torch.randn(2, 1, 3, 16).half()), ValueError, r"query heads \(q.shape\[2\]=3\) must be a multiple"),
    (dict(cache_seqlens=torch.tensor([1, 2])), TypeError, r"cache_seqlens must be torch.int32, got torch.int64"),
    (dict(cache_seqlens=torch.tensor([1], dtype=torch.int32)), ValueError,
     r"cache_seqlens must have shape \(batch_size,\) = \(2,\), got \(1,\)"),
    (dict(cache_seqlens=40), ValueError, r"cache_seqlens=40 must be in \[0, 32\]"),
    (dict(cache_seqlens=1.5), TypeError, r"cache_seqlens must be an int, a torch.int32 tensor or None, got float"),
    (dict(k=torch.randn(2, 1, 2, 16).half()), ValueError, r"k and v must be given together"),
    (dict(k=torch.randn(2, 1, 2, 16).half(), v=torch.randn(2, 1, 2, 16).half()), ValueError,
     r"cache_seqlens is required when k and v are given"),
    (dict(k=torch.randn(2, 1, 2, 16).half(), v=torch.randn(2, 1, 2, 16).half(), cache_seqlens=32), ValueError,
     r"cache_seqlens=32 plus 1 new tokens exceeds the cache capacity 32"),
    (dict(k=torch.randn(2, 1, 1, 16).half(), v=torch.randn(2, 1, 1, 16).half(), cache_seqlens=3), ValueError,
     r"k must have shape .* = \(2, seqlen_new, 2, 16\), got \(2, 1, 1, 16\)"),
    (dict(rotary_cos=torch.ones(32, 4), rotary_sin=torch.ones(32, 4)), ValueError,
     r"rotary_cos/rotary_sin need the new k and v"),
    (dict(k=torch.randn(2, 1, 2, 16).half(), v=torch.randn(2, 1, 2, 16).half(), cache_seqlens=3,
          rotary_cos=torch.ones(32, 9), rotary_sin=torch.ones(32, 9)), ValueError,
     r"rotary_dim = 2 \* rotary_cos.shape\[1\] = 18 must be in \[2, headdim=16\]"),
    (dict(k=torch.randn(2, 1, 2, 16).half(), v=torch.randn(2, 1, 2, 16).half(), cache_seqlens=3,
          rotary_cos=torch.ones(20, 4), rotary_sin=torch.ones(20, 4)), ValueError,
     r"rotary_cos has 20 positions .* the cache capacity 32"),
    (dict(block_table=torch.zeros(2, 2)), TypeError, r"block_table must be torch.int32, got torch.float32"),
    (dict(k_cache=torch.randn(2, 24, 2, 16).half(), v_cache=torch.randn(2, 24, 2, 16).half(),
          block_table=torch.zeros(2, 2, dtype=torch.int32)), ValueError,
     r"page_block_size \(k_cache.shape\[1\]=24\) must be a positive multiple of 16"),
    (dict(block_table=torch.zeros(2, 1, dtype=torch.int32), cache_batch_idx=torch.zeros(2, dtype=torch.int32)),
     ValueError, r"cache_batch_idx cannot be combined with block_table"),
    (dict(k_cache=torch.randn(1, 32, 2, 16).half(), v_cache=torch.randn(1, 32, 2, 16).half()), ValueError,
     r"k_cache holds 1 sequences .* batch_size 2"),
    (dict(window_size=(-2, 0)), ValueError, r"window_size left must be >= -1"),
    (dict(window_size=5), TypeError, r"window_size must be a pair \(left, right\) of ints"),
    (dict(softcap=-1.0), ValueError, r"softcap must be finite and >= 0 \(0 = off\), got -1.0"),
    (dict(softcap=float("inf")), ValueError, r"softcap must be finite and >= 0 \(0 = off\), got inf"),
    (dict(softcap="1"), TypeError, r"softcap must be a Python float, got str"),
    (dict(alibi_slopes=torch.ones(3)), ValueError, r"alibi_slopes must have shape \(4,\) or \(2, 4\)"),
    (dict(alibi_slopes=torch.ones(4, dtype=torch.float16)), TypeError, r"alibi_slopes must be float32"),
    (dict(num_splits=-1), ValueError, r"num_splits must be >= 0 \(0: chosen automatically\), got -1"),
    (dict(num_splits=2.5), TypeError, r"num_splits must be an int \(0: chosen automatically\), got float 2.5"),
    (dict(num_splits=None), TypeError, r"num_splits must be an int .*got NoneType None"),
    (dict(softmax_scale=float("nan")), ValueError, r"softmax_scale must be finite"),
    (dict(causal=1), TypeError, r"causal must be a bool"),
    (dict(q=torch.randn(2, 1, 4, 300).half(), k_cache=torch.randn(2, 32, 2, 300).half(),
          v_cache=torch.randn(2, 32, 2, 300).half()), NotImplementedError, r"head dim 300"),
    (dict(q=torch.randn(2, 1, 4, 0).half(), k_cache=torch.randn(2, 32, 2, 0).half(),
          v_cache=torch.randn(2, 32, 2, 0).half()), ValueError, r"q.shape\[3\] \(the head dim\) must be at least 1, got 0"),
    (dict(k_cache=torch.randn(2, 16, 32, 2).half().transpose(1, 3)), ValueError, r"k_cache and v_cache must have the same shape"),
    (dict(q=torch.randn(2, 1, 16, 4).half().transpose(-1, -2)),
     ValueError, r"q must have stride 1 in its last dimension"),
    (dict(sinks=torch.ones(3)), ValueError, r"sinks must have shape \(nheads,\) = \(4,\), got \(3,\)"),
    (dict(sinks=torch.ones(1, 4)), ValueError, r"sinks must have shape \(nheads,\) = \(4,\), got \(1, 4\)"),
    (dict(sinks=torch.ones(4, dtype=torch.int32)), TypeError, r"sinks must be a floating-point tensor, got torch.int32"),
    (dict(sinks=torch.ones(4, device="meta")), ValueError, r"sinks must be on cpu like q, got meta"),
    (dict(sinks=[0.0] * 4), TypeError, r"sinks must be a torch.Tensor, got list"),
], ids=lambda x: None)
def test_validation(kwargs, exc, match):
    q, kc, vc = _args()
    args = dict(q=q, k_cache=kc, v_cache=vc)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        flash_attn_with_kvcache(**args)


# ---------------------------------------------------------------------------
# Small-batch variants (decode.ENV_VARIANT; decode.DEFAULT_VARIANTS when unset)
# ---------------------------------------------------------------------------

DEFAULTS = "deep,fill,pdl,reserve,spread,longpages,solo,longtiles,solopages"


def defaults_but(name):
    """The default variants less ``name``, as a FLASHATTN_TRITON_DECODE_VARIANT list."""
    assert name in DEFAULTS.split(","), name
    return ",".join(v for v in DEFAULTS.split(",") if v != name)


DEFAULTS_BUT_LONGPAGES = defaults_but("longpages")


def test_decode_plan_merge(monkeypatch):
    """Without FLASHATTN_TRITON_DECODE_COMBINE a plan merges its partials as
    DEFAULT_COMBINE_SMALL at the split rule's small batch (4 x programs < SMs:
    batch 1-4 with 8 KV heads on 132 SMs) and as DEFAULT_COMBINE otherwise; the
    variable, when set, holds at every batch; a bad value names itself."""
    monkeypatch.setattr(decode, "sm_count", lambda device: 132)
    monkeypatch.setattr(decode, "INTERPRET", False)
    monkeypatch.delenv(decode.ENV_COMBINE, raising=False)
    meta, bf16 = torch.device("meta"), torch.bfloat16

    def merges():
        return [decode.decode_plan(b, 4, 8, 128, 8192, bf16, meta).merge for b in (1, 4, 5, 8)]

    for small, other in [("gathered", "fused"), ("fused", "separate"), ("separate", "gathered")]:
        monkeypatch.setattr(decode, "DEFAULT_COMBINE_SMALL", small)
        monkeypatch.setattr(decode, "DEFAULT_COMBINE", other)
        assert merges() == [small, small, other, other]  # 4 x 32 programs < 132 SMs at batch 4; 4 x 40 not
        monkeypatch.setenv(decode.ENV_COMBINE, "fused")
        assert merges() == ["fused"] * 4
        monkeypatch.delenv(decode.ENV_COMBINE)
    monkeypatch.setenv(decode.ENV_COMBINE, "tree")
    with pytest.raises(ValueError, match="FLASHATTN_TRITON_DECODE_COMBINE='tree'"):
        decode.decode_plan(1, 4, 8, 128, 8192, bf16, meta)


def test_decode_plan_variants(monkeypatch):
    """Host-side plans on 132 SMs (the H200): "none" is the plain plan;
    deep / fill / pdl change batch 1 only (one program per SM), not
    batch 8; unset or "default" is deep,fill,pdl,reserve,spread,longpages,solo,longtiles,
    solopages."""
    monkeypatch.setattr(decode, "sm_count", lambda device: 132)
    monkeypatch.setattr(decode, "INTERPRET", False)
    meta, bf16 = torch.device("meta"), torch.bfloat16

    def plan(batch, n_cap, variant):
        monkeypatch.setenv(decode.ENV_VARIANT, variant)
        return decode.decode_plan(batch, 4, 8, 128, n_cap, bf16, meta)

    for batch, n_cap in [(1, 1024), (1, 4096), (1, 65536), (8, 8192), (64, 4096)]:
        cfg = decode.decode_config(4, 128, bf16, meta)
        splits = min(decode.choose_num_splits(batch * 8, n_cap, cfg.BLOCK_N, 132), n_cap // cfg.BLOCK_N)
        assert plan(batch, n_cap, "none") == decode.DecodePlan(cfg, splits, 1, False, decode.DEFAULT_COMBINE_SMALL
                                                               if batch == 1 else decode.DEFAULT_COMBINE)
        assert plan(batch, n_cap, "default") == plan(batch, n_cap, "") == plan(batch, n_cap, DEFAULTS)
    # Of the defaults, "spread" alone acts at (64, 4096) (below); "longpages" needs pages.
    assert plan(64, 4096, "") == plan(64, 4096, "spread") != plan(64, 4096, "deep,fill,pdl,reserve")
    assert plan(8, 8192, "") == plan(8, 8192, "solo") != plan(8, 8192, "none")  # of the defaults, "solo" acts at B=8
    assert plan(1, 65536, "none").num_splits == 15 and plan(1, 65536, "none").config.num_stages == 3
    b1 = plan(1, 16384, "")
    assert b1.num_splits == 16 and b1.config.num_stages == 5 and b1.use_pdl
    assert plan(1, 65536, "").config == decode.DecodeConfig(16, 128, 4, 3)  # "longtiles" from 32k keys
    assert plan(1, 65536, "deep").config == decode.DecodeConfig(16, 64, 4, 5)
    assert [plan(1, n, "fill").num_splits for n in (1024, 4096, 65536)] == [8, 16, 16]
    assert plan(1, 65536, "pdl").use_pdl and not plan(1, 65536, "none").use_pdl
    assert plan(1, 65536, "reserve") == plan(1, 65536, "none")  # counters only
    assert plan(1, 65536, "deep,pair").config == decode.DecodeConfig(16, 64, 4, 4)  # pair wins over deep
    assert [plan(1, n, "fill,pair").num_splits for n in (1024, 4096, 8192, 65536)] == [8, 22, 32, 32]
    for variant in ("deep", "fill", "pdl", "pair", "spread"):  # B=8: unchanged
        assert plan(8, 8192, variant) == plan(8, 8192, "none")
    # "spread" acts on launches the split rule leaves unsplit although the batch alone makes
    # 1-3 waves of 3 programs per SM with a last wave at most half full, when 5 waves of at
    # least 8 key tiles (of 64) each fit; elsewhere the plan of "none".
    assert plan(64, 8192, "none").num_splits == 1
    for b, n in [(32, 8192), (48, 4096), (56, 16384), (64, 1024), (72, 1024), (72, 4096), (96, 16384),
                 (112, 16384), (128, 16384), (256, 16384)]:
        assert plan(b, n, "spread") == plan(b, n, "none"), (b, n)
    assert [plan(b, n, "spread").num_splits for b, n in [(56, 4096), (64, 4096), (64, 32768)]] == [5, 4, 4]
    assert plan(64, 8192, "spread").config == plan(64, 8192, "none").config
    assert plan(64, 8192, "spread,deep,pair") == plan(64, 8192, "spread")  # the small-batch ones do not act
    # "solo": from SMs / 4 to SMs programs (batch 5-16 here) the split rule counts one
    # program per SM: batch 8 takes 2 splits (128 programs) instead of 4, batch 16 none
    # instead of 2; the small batch (4) and past one program per SM (17, 32) unchanged.
    assert [plan(b, 8192, "solo").num_splits for b in (8, 16)] == [2, 1]
    assert [plan(b, 8192, "none").num_splits for b in (8, 16)] == [4, 2]
    for b in (1, 4, 17, 32):
        assert plan(b, 8192, "solo") == plan(b, 8192, "none"), b
    # never more splits than the rule of two per SM: batch 12 at 2k keys keeps 2 (not 4), takes 4 for 5 at 8k
    assert [plan(12, n, "solo").num_splits for n in (2048, 8192)] == [2, 4]
    assert [plan(12, n, "none").num_splits for n in (2048, 8192)] == [2, 5]
    assert plan(8, 8192, "solo").config == plan(8, 8192, "none").config
    # "longpages": at batch 1 from 64k keys in pages smaller than a 64-key tile, the plan of
    # "pair,pdl,reserve" (two programs per SM, no "fill"); other page sizes, lengths, batches unchanged.
    def paged(batch, n_cap, variant, page):
        monkeypatch.setenv(decode.ENV_VARIANT, variant)
        return decode.decode_plan(batch, 4, 8, 128, n_cap, bf16, meta, 0, page)

    before = DEFAULTS_BUT_LONGPAGES
    for n in (65536, 131072):
        assert paged(1, n, "", 16) == paged(1, n, "pair,pdl,reserve", 16) != paged(1, n, before, 16)
    assert paged(1, 65536, "", 16).num_splits == 29
    # "solo" re-plans contiguous caches only.
    for page in (16, 64, 256):
        assert paged(8, 8192, "solo", page) == paged(8, 8192, "none", page), page
    # "solopages" (a default since session 68): the same for pages of 256 tokens or more, not smaller ones.
    for page in (256, 1024):
        assert paged(8, 8192, "solopages", page) == plan(8, 8192, "solo"), page
    for page in (16, 64, 128):
        assert paged(8, 8192, "solopages", page) == paged(8, 8192, "none", page), page
    assert plan(8, 8192, "solopages") == plan(8, 8192, "none")
    for batch, n, page in [(1, 32768, 16), (1, 65536, 64), (1, 65536, 256), (1, 65536, 0), (8, 65536, 16)]:
        assert paged(batch, n, "", page) == paged(batch, n, before, page), (batch, n, page)
    # "longtiles" (a default since session 67): at the small batch (1-4) from 32k keys a row may see, contiguous
    # caches only, 128-key tiles over 3 stages instead of deep's 64 over 5; the split count stays.
    wide, without = decode.DecodeConfig(16, 128, 4, 3), defaults_but("longtiles")
    for b, n in [(1, 32768), (1, 131072), (4, 65536)]:
        assert plan(b, n, "").config == wide and plan(b, n, "")._replace(config=plan(b, n, without).config) == \
            plan(b, n, without), (b, n)
    for b, n in [(1, 16384), (5, 65536), (8, 32768)]:
        assert plan(b, n, "") == plan(b, n, without), (b, n)
    for page in (16, 256):
        assert paged(1, 65536, "", page) == paged(1, 65536, without, page), page
    monkeypatch.setenv(decode.ENV_VARIANT, "default")  # a window of 4k keys: unchanged
    assert decode.decode_plan(1, 4, 8, 128, 65536, bf16, meta, 0, 0, 4096).config.BLOCK_N == 64
    assert decode.decode_plan(1, 4, 8, 128, 65536, bf16, meta, 0, 0, 40000).config.BLOCK_N == 128  # one of 40k
    monkeypatch.setenv(decode.ENV_CONFIG, "num_warps=8")  # the env config still has the last word
    assert plan(1, 65536, "deep").config == decode.DecodeConfig(16, 64, 8, 5)
    monkeypatch.setenv(decode.ENV_VARIANT, "deep,bogus")
    with pytest.raises(ValueError, match="bogus"):
        decode.decode_variants()
    assert not set(decode.REMOVED_VARIANTS) & set(decode.VARIANTS)
    for removed, session in decode.REMOVED_VARIANTS.items():  # measured slower, removed: named as such
        monkeypatch.setenv(decode.ENV_VARIANT, f"deep,{removed}")
        with pytest.raises(ValueError, match=f"{removed}.*removed in session {session}"):
            decode.decode_variants()
    monkeypatch.setenv(decode.ENV_VARIANT, "default,spread")  # "default" in a list: the defaults
    assert decode.decode_variants() == decode.DEFAULT_VARIANTS | {"spread"}
    assert set(DEFAULTS.split(",")) == decode.DEFAULT_VARIANTS  # this file's list is the library's
    monkeypatch.setenv(decode.ENV_VARIANT, "none,deep")
    with pytest.raises(ValueError, match="none"):
        decode.decode_variants()


# (variants, page size, num_splits, sinks): every variant at least once, paged
# through the per-row (16) and per-tile (64) lookups, automatic and fixed splits.
VARIANT_CASES = [("deep,fill", None, 0, False), ("deep", 16, 3, True), ("fill", 64, 0, False),
                 ("deep,fill,pdl", 16, 0, True), ("pdl,reserve", None, 3, False),
                 ("deep,fill,pdl,reserve", None, 0, True), ("pair", 16, 0, False), ("pdl", None, 0, False)]


def test_decode_plans_are_kept_per_arguments_and_world(monkeypatch):
    """decode_plan computes a plan once per arguments and _plan_world (the
    environment switches, the module's constants and functions): a repeated
    call returns the kept plan, a changed switch, constant or function makes
    a new one, and every plan equals what _make_plan computes then."""
    made = []
    real = decode._make_plan
    monkeypatch.setattr(decode, "_make_plan", lambda *a: (made.append(a), real(*a))[1])
    monkeypatch.setattr(decode, "_PLANS", {})
    cpu = torch.device("cpu")
    cases = [(1, 4, 8, 128, 4096, torch.bfloat16, cpu), (8, 4, 8, 128, 65536, torch.float16, cpu, 0, 16),
             (1, 64, 2, 64, 1000, torch.float32, cpu, 3), (2, 4, 8, 128, 8192, torch.bfloat16, cpu, 0, 0, 300)]

    def check(n_made):
        for args in cases:
            full = args + (0, 0, 0)[len(args) - 7:]
            plan = decode.decode_plan(*args)
            assert plan == real(*full), args
            assert decode.decode_plan(*args) is plan, "a repeated call must return the kept plan"
        assert len(made) == n_made, (len(made), n_made)

    check(4)
    check(4)
    monkeypatch.setattr(decode, "CPU_SM_COUNT", 132)  # small batches now: other split counts
    check(8)
    monkeypatch.setenv(decode.ENV_VARIANT, "none")
    check(12)
    monkeypatch.setenv(decode.ENV_CONFIG, "num_warps=8")
    check(16)
    monkeypatch.setattr(decode, "sm_count", lambda device: 16)
    check(20)
    assert len(decode._PLANS) == 20


def test_reserve_counters(monkeypatch):
    """Variant "reserve": captured calls get disjoint zeroed slices of a
    buffer an eager call made; none before that buffer exists, or once it is
    used up (split_counters then falls back to a fresh buffer)."""
    monkeypatch.setattr(decode, "_RESERVE", {})
    monkeypatch.setattr(decode, "RESERVE_COUNTERS", 10)
    cpu = torch.device("cpu")
    assert decode.reserve_counters(4, cpu, capturing=True) is None  # no eager call yet
    assert decode.reserve_counters(4, cpu, capturing=False) is None  # makes the buffer
    a = decode.reserve_counters(4, cpu, capturing=True)
    b = decode.reserve_counters(6, cpu, capturing=True)
    assert a is not None and b is not None and a.numel() == 4 and b.numel() == 6
    assert a.data_ptr() + 4 * a.element_size() == b.data_ptr() and int(a.count_nonzero() + b.count_nonzero()) == 0
    assert decode.reserve_counters(1, cpu, capturing=True) is None  # used up
    decode.reserve_counters(4, cpu, capturing=False)  # an eager call neither resets nor remakes it
    assert decode.reserve_counters(1, cpu, capturing=True) is None


def test_reserve_counters_threads(monkeypatch):
    """Threads capturing at once (each its own graph) never get the same
    reserve slice: the hand-out is one step under a lock.  The entry's read
    of its next free counter is slowed so that, without the lock, every
    thread would read it before any advanced it."""
    import threading
    import time

    class SlowEntry(list):
        def __getitem__(self, i):
            if i == 1:
                time.sleep(0.002)
            return super().__getitem__(i)

    cpu = torch.device("cpu")
    monkeypatch.setattr(decode, "_RESERVE", {str(cpu): SlowEntry([torch.zeros(64, dtype=torch.int32), 0])})
    starts, barrier = [], threading.Barrier(4)

    def worker():
        barrier.wait()
        for _ in range(4):
            starts.append(decode.reserve_counters(2, cpu, capturing=True).data_ptr())

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(starts) == 16 and len(set(starts)) == 16, f"{16 - len(set(starts))} of 16 slices handed out twice"


@pytest.mark.parametrize("case", VARIANT_CASES, ids=lambda c: f"{c[0]}-{c[1] or 'contiguous'}-s{c[2]}"
                         + ("-sinks" if c[3] else ""))
def test_variants_against_reference(case, device, monkeypatch):
    """Batch 1 (the variants' gate: one program per SM; the CPU's assumed SM
    count is raised so that it holds under the interpreter too), GQA, one
    appended token, causal; against float64.  Under the interpreter this
    checks the tile sizes and split counts the variants pick; pipelining and
    PDL are compiled-only (the GPU run of this test)."""
    variant, page, splits, with_sinks = case
    monkeypatch.setenv(decode.ENV_VARIANT, variant)
    monkeypatch.setattr(decode, "CPU_SM_COUNT", 64)
    dtype, h_q, h_kv, d, cap = torch.bfloat16, 8, 2, 64, 320
    q = rnd(device, dtype, 1, 1, h_q, d)
    k_cache, v_cache, table = make_cache(device, 1, cap, h_kv, d, dtype, page)
    check(q, k_cache, v_cache, dtype, k=rnd(device, dtype, 1, 1, h_kv, d), v=rnd(device, dtype, 1, 1, h_kv, d),
          seqlens=ints(device, [cap - 23]), block_table=table, causal=True, num_splits=splits,
          sinks=rnd(device, torch.float32, h_q) if with_sinks else None)


# (B, Nq, Hq, Hkv, d, capacity, cache_seqlens, n_new, num_splits, extras): NaN past each
# sequence's keys, which only the masked loads of the last partial tile keep out.
NAN_TAIL_CASES = [
    (2, 1, 8, 2, 64, 200, [0, 199], 1, 3, {}),               # empty and (after the append) full caches, GQA
    (3, 1, 4, 4, 72, 150, [31, 63, 95], 1, 0, {}),            # odd d (block 128, zero-filled columns), MHA
    (2, 3, 8, 1, 64, 130, [60, 126], 3, 2, dict(window=(40, 0))),  # speculative, MQA, causal window
    (2, 1, 4, 2, 32, 100, [64, 99], 1, 1, dict(softcap=5.0, alibi=True, sinks=True)),
    (2, 1, 4, 2, 64, 96, [50, 70], 1, 2, dict(batch_idx=[2, 0])),  # cache_batch_idx into 3 caches
]


@pytest.mark.parametrize("case", NAN_TAIL_CASES, ids=lambda c: f"b{c[0]}q{c[1]}h{c[2]}-{c[3]}d{c[4]}-{c[5]}")
def test_nan_past_end_against_reference(case, device):
    """Cache entries past each sequence's keys hold NaN (as a reused or
    uninitialised cache may): a key tile read whole where it should have been
    masked, or a masked-out key given 0 x NaN, shows.  Empty and full caches,
    odd d, windows, softcap, ALiBi, sinks, a batch index; against float64."""
    batch, n_q, h_q, h_kv, d, cap, lens, n_new, splits, extra = case
    dtype = torch.bfloat16
    n_caches = 3 if "batch_idx" in extra else batch
    q = rnd(device, dtype, batch, n_q, h_q, d)
    k_cache, v_cache, _ = make_cache(device, batch, cap, h_kv, d, dtype, batch_cache=n_caches)
    idx = extra.get("batch_idx", list(range(batch)))
    for b in range(batch):  # NaN from each sequence's end (after the append) on
        end = lens[b] + n_new
        k_cache[idx[b], end:] = float("nan")
        v_cache[idx[b], end:] = float("nan")
    # (always an append: check() compares caches holding NaN only then)
    kw = dict(seqlens=ints(device, lens), causal=True, num_splits=splits,
              k=rnd(device, dtype, batch, n_new, h_kv, d), v=rnd(device, dtype, batch, n_new, h_kv, d))
    if "batch_idx" in extra:
        kw["batch_idx"] = ints(device, extra["batch_idx"])
    if "window" in extra:
        kw["window"] = extra["window"]
    if "softcap" in extra:
        kw["softcap"] = extra["softcap"]
    if extra.get("alibi"):
        kw["alibi"] = torch.rand(h_q, device=device) * 0.3
    if extra.get("sinks"):
        kw["sinks"] = rnd(device, torch.float32, h_q)
    check(q, k_cache, v_cache, dtype, **kw)


def test_spread_against_reference(device, monkeypatch):
    """Variant "spread" (a large batch split anyway): 32 programs on the CPU's
    assumed 8 SMs are 1.33 waves of three per SM, so 1024 keys in 32-key
    tiles take 4 splits; ragged lengths with an empty and a full cache, one
    appended token, GQA; against float64."""
    monkeypatch.setenv(decode.ENV_VARIANT, "spread")
    dtype, batch, h_q, h_kv, d, cap = torch.bfloat16, 8, 8, 4, 64, 1024
    q = rnd(device, dtype, batch, 1, h_q, d)
    plan = decode.decode_plan(batch, h_q // h_kv, h_kv, d, cap, dtype, q.device)
    if q.device.type == "cpu":
        assert plan.num_splits == 4
    k_cache, v_cache, _ = make_cache(device, batch, cap, h_kv, d, dtype, None)
    lens = ints(device, [0, 1, 31, 300, 511, 800, cap - 2, cap - 1])
    check(q, k_cache, v_cache, dtype, k=rnd(device, dtype, batch, 1, h_kv, d),
          v=rnd(device, dtype, batch, 1, h_kv, d), seqlens=lens, causal=True, num_splits=0)


def test_longpages_against_reference(device, monkeypatch):
    """Variant "longpages" at batch 1 on 16-token pages (its threshold lowered to
    the test's 320-key cache, the CPU's assumed SM count raised so that batch 1
    is a small batch): the split count of two programs per SM; ragged length,
    one appended token, GQA, sinks; against float64."""
    monkeypatch.setattr(decode, "CPU_SM_COUNT", 64)
    monkeypatch.setattr(decode, "LONGPAGES_FROM", 256)
    dtype, h_q, h_kv, d, cap = torch.bfloat16, 8, 2, 64, 320
    q = rnd(device, dtype, 1, 1, h_q, d)
    monkeypatch.delenv(decode.ENV_VARIANT, raising=False)  # the defaults, "longpages" among them
    plan = decode.decode_plan(1, h_q // h_kv, h_kv, d, cap, dtype, q.device, 0, 16)
    monkeypatch.setenv(decode.ENV_VARIANT, "pair,pdl,reserve")
    assert plan == decode.decode_plan(1, h_q // h_kv, h_kv, d, cap, dtype, q.device, 0, 16)
    monkeypatch.setenv(decode.ENV_VARIANT, DEFAULTS_BUT_LONGPAGES)
    before = decode.decode_plan(1, h_q // h_kv, h_kv, d, cap, dtype, q.device, 0, 16)
    assert plan != before
    if q.device.type == "cpu":  # 64 assumed SMs; on a GPU the two split counts may coincide
        assert plan.num_splits != before.num_splits
    monkeypatch.delenv(decode.ENV_VARIANT)
    k_cache, v_cache, table = make_cache(device, 1, cap, h_kv, d, dtype, 16)
    check(q, k_cache, v_cache, dtype, k=rnd(device, dtype, 1, 1, h_kv, d), v=rnd(device, dtype, 1, 1, h_kv, d),
          seqlens=ints(device, [cap - 23]), block_table=table, causal=True, num_splits=0,
          sinks=rnd(device, torch.float32, h_q))


# ---------------------------------------------------------------------------
# GPU: realistic sizes and CUDA graphs
# ---------------------------------------------------------------------------

def check_b1_rotary(device, cap, page):
    """Batch 1 at the benchmark's shape (Hq=32, Hkv=8, d=128, bf16), a cache of
    ``cap`` keys (``page``-token pages, or contiguous for None) nearly full,
    one appended token, rotary, causal, automatic split count; against float64."""
    dtype, h_q, h_kv, d = torch.bfloat16, 32, 8, 128
    q = rnd(device, dtype, 1, 1, h_q, d)
    k_cache, v_cache, table = make_cache(device, 1, cap, h_kv, d, dtype, page)
    angle = torch.rand(cap, d // 2) * 2 * math.pi
    check(q, k_cache, v_cache, dtype, k=rnd(device, dtype, 1, 1, h_kv, d), v=rnd(device, dtype, 1, 1, h_kv, d),
          cos=torch.cos(angle).to(device, dtype), sin=torch.sin(angle).to(device, dtype),
          seqlens=ints(device, [cap - 77]), block_table=table, causal=True, num_splits=0)


@pytest.mark.gpu
@pytest.mark.bigmem  # the reference's float64 K and V of a 64k cache, 0.5 GiB each
def test_gpu_longpages(device, monkeypatch):
    """Variant "longpages" (a default) where it acts: batch 1, Hq=32, Hkv=8,
    d=128, bf16, a 64k cache in 16-token pages nearly full, one appended token,
    rotary, automatic split count; against float64."""
    monkeypatch.delenv(decode.ENV_VARIANT, raising=False)
    check_b1_rotary(device, 65536, 16)


@pytest.mark.parametrize("window", [(-1, -1), (300, 0), (100, 0)], ids=["whole", "window300", "window100"])
def test_longtiles_against_reference(device, window, monkeypatch):
    """Variant "longtiles" (a default) at batch 2, d = 128, its threshold lowered to the
    test's 320-key cache and the CPU's assumed SM count raised so that batch 2 is
    a small batch: 128-key tiles for the whole cache and for a window that
    leaves a row 300 keys, the plain tile for a window of 100; ragged lengths incl.
    0, one appended token, GQA; against float64."""
    monkeypatch.setattr(decode, "CPU_SM_COUNT", 64)
    monkeypatch.delenv(decode.ENV_VARIANT, raising=False)
    dtype, h_q, h_kv, d, cap = torch.bfloat16, 8, 2, 128, 320
    # A plan made before the threshold moves must not be served after it (_plan_world).
    assert decode.decode_plan(2, 4, h_kv, d, cap, dtype, device).config.BLOCK_N != 128
    monkeypatch.setattr(decode, "LONGTILES_FROM", 256)
    for other in (64, 256):  # timed at d = 128 only: other head dims keep their tiles
        assert decode.decode_plan(2, 4, h_kv, other, cap, dtype, device).config.BLOCK_N != 128, other
    q = rnd(device, dtype, 2, 1, h_q, d)
    span = decode.local_span(1, window[0], window[1], 0) if window[0] >= 0 else 0
    plan = decode.decode_plan(2, h_q // h_kv, h_kv, d, cap, dtype, q.device, 0, 0, span)
    assert (plan.config.BLOCK_N == 128) == (window[0] != 100), plan
    k_cache, v_cache, _ = make_cache(device, 2, cap, h_kv, d, dtype)
    check(q, k_cache, v_cache, dtype, k=rnd(device, dtype, 2, 1, h_kv, d), v=rnd(device, dtype, 2, 1, h_kv, d),
          seqlens=ints(device, [0, cap - 1]), causal=True, window=window, num_splits=0)


@pytest.mark.gpu
@pytest.mark.bigmem  # batch 4: the reference's float64 K and V of four 32k caches, 1 GiB each
@pytest.mark.parametrize("batch", [1, 4])
def test_gpu_longtiles(device, batch, monkeypatch):
    """Variant "longtiles" (a default since session 67: 128-key tiles over 3
    stages at small batch from LONGTILES_FROM keys, contiguous caches) where it
    acts: Hq=32, Hkv=8, d=128, bf16, a 32k cache; batch 1 nearly full with
    rotary, batch 4 ragged with an empty and a full sequence; one appended
    token, automatic splits; against float64.  The plan must have the 128-key
    tile, or the test would not exercise the variant."""
    monkeypatch.delenv(decode.ENV_VARIANT, raising=False)
    cap = decode.LONGTILES_FROM
    assert decode.decode_plan(batch, 4, 8, 128, cap, torch.bfloat16, device).config.BLOCK_N == 128
    if batch == 1:
        check_b1_rotary(device, cap, None)
    else:
        check_ragged_step(device, batch, cap, None)


@pytest.mark.gpu
@pytest.mark.parametrize("page", [None, 16], ids=["contiguous", "page16"])
@pytest.mark.parametrize("variant", ["", "deep,fill,pdl,reserve"], ids=["default", "unsplit"])
def test_gpu_large_batch(device, variant, page, monkeypatch):
    """Batch 64 (512 programs unsplit, 1.3 waves of three per SM; 4 splits
    with the default "spread"): Hq=32, Hkv=8, d=128, bf16, a 4k cache, ragged lengths with
    an empty and a full sequence, one appended token, automatic splits;
    against float64."""
    monkeypatch.setenv(decode.ENV_VARIANT, variant)
    check_ragged_step(device, 64, 4096, page)


def check_ragged_step(device, batch, cap, page):
    """Hq=32, Hkv=8, d=128, bf16: a cache of ``cap`` keys with ragged lengths,
    an empty and a full sequence among them, one appended token, causal,
    automatic splits; against float64."""
    dtype, h_q, h_kv, d = torch.bfloat16, 32, 8, 128
    q = rnd(device, dtype, batch, 1, h_q, d)
    k_cache, v_cache, table = make_cache(device, batch, cap, h_kv, d, dtype, page)
    lens = torch.randint(0, cap, (batch,), dtype=torch.int32)
    lens[0], lens[1] = 0, cap - 1
    check(q, k_cache, v_cache, dtype, k=rnd(device, dtype, batch, 1, h_kv, d), v=rnd(device, dtype, batch, 1, h_kv, d),
          seqlens=lens.to(device), block_table=table, causal=True, num_splits=0)


@pytest.mark.gpu
@pytest.mark.bigmem  # B1-32k: the reference's float64 K and V, 1 GiB each; 2-3 GiB at the peak
@pytest.mark.parametrize("page", [None, 16, 256], ids=["contiguous", "page16", "page256"])
@pytest.mark.parametrize("batch,n_cache", [(1, 32768), (8, 8192)], ids=["B1-32k", "B8-8k"])
def test_gpu_realistic(device, batch, n_cache, page):
    """Hq=32, Hkv=8, d=128, bf16, ragged lengths, one appended token, rotary,
    automatic split count; against float64."""
    dtype, h_q, h_kv, d = torch.bfloat16, 32, 8, 128
    q = rnd(device, dtype, batch, 1, h_q, d)
    k_cache, v_cache, table = make_cache(device, batch, n_cache, h_kv, d, dtype, page)
    lens = torch.randint(0, n_cache, (batch,), dtype=torch.int32)
    lens[0] = n_cache - 1
    angle = torch.rand(n_cache, d // 2) * 2 * math.pi
    kw = dict(k=torch.randn(batch, 1, h_kv, d, device=device).to(dtype),
              v=torch.randn(batch, 1, h_kv, d, device=device).to(dtype),
              cos=torch.cos(angle).to(device, dtype), sin=torch.sin(angle).to(device, dtype),
              seqlens=lens.to(device), block_table=table, causal=True, num_splits=0)
    # The reference runs on the GPU in float64 (one sequence at a time).
    check(q, k_cache, v_cache, dtype, **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("batch,page", [(5, None), (8, None), (16, None), (5, 256), (16, 256), (5, 1024), (16, 1024)])
def test_gpu_solo_mid_batch(device, batch, page, monkeypatch):
    """Variants "solo" (contiguous caches, a default since session 66) and
    "solopages" (pages of 256 tokens or more, since session 68): the split rule
    counting one program per SM from SMs / 4 to SMs programs, at the batches it
    re-plans. Hq=32, Hkv=8, d=128, bf16, ragged lengths incl. 0 and a full
    cache, one appended token, automatic splits at the defaults; against
    float64.  The plan must differ from that of the defaults without the
    variant, or the test would not exercise it."""
    dtype, h_kv, d, cap = torch.bfloat16, 8, 128, 4096
    monkeypatch.setenv(decode.ENV_VARIANT, defaults_but("solo" if page is None else "solopages"))
    before = decode.decode_plan(batch, 4, h_kv, d, cap, dtype, device, 0, page or 0)
    monkeypatch.delenv(decode.ENV_VARIANT, raising=False)
    assert decode.decode_plan(batch, 4, h_kv, d, cap, dtype, device, 0, page or 0).num_splits != before.num_splits
    check_ragged_step(device, batch, cap, page)


@pytest.mark.gpu
@pytest.mark.parametrize("combine", ["fused", "separate", "gathered"])
@pytest.mark.parametrize("page", [None, 16], ids=["contiguous", "page16"])
def test_gpu_sinks_gpt_oss(device, page, combine, monkeypatch):
    """gpt-oss decode shapes (Hq=64, Hkv=8, d=64, bf16 sinks), a sliding
    window on one call, ragged lengths incl. 0, automatic splits; against float64."""
    monkeypatch.setenv(decode.ENV_COMBINE, combine)
    dtype, batch, h_q, h_kv, d, cap = torch.bfloat16, 4, 64, 8, 64, 8192
    q = rnd(device, dtype, batch, 1, h_q, d)
    k_cache, v_cache, table = make_cache(device, batch, cap, h_kv, d, dtype, page)
    sinks = (torch.randn(h_q, device=device) * 2).to(dtype)
    lens = ints(device, [0, 100, 4000, cap - 1])
    kw = dict(k=rnd(device, dtype, batch, 1, h_kv, d), v=rnd(device, dtype, batch, 1, h_kv, d),
              seqlens=lens, block_table=table, causal=True, num_splits=0, sinks=sinks)
    check(q, k_cache, v_cache, dtype, **kw)
    check(q, k_cache, v_cache, dtype, window=(127, 0), **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("page", [None, 16, 256], ids=["contiguous", "page16", "page256"])
@pytest.mark.parametrize("variant", ["deep", "fill", "pdl", "deep,fill,pdl", "deep,fill,pdl,reserve",
                                     "deep,fill,pdl,reserve,pair"])
def test_gpu_variants_b1(device, variant, page, monkeypatch):
    """The candidate variants compiled, at batch 1 (where they apply): Hq=32,
    Hkv=8, d=128, bf16, a 16k cache nearly full, one appended token, rotary,
    automatic split count; against float64."""
    monkeypatch.setenv(decode.ENV_VARIANT, variant)
    check_b1_rotary(device, 16384, page)


@pytest.mark.gpu
@pytest.mark.parametrize("variant,combine", [("none", "fused"), ("pdl", "fused"), ("reserve", "fused"), ("", "fused"),
                                             ("deep,fill,pdl,reserve,pair", "fused"), ("", "gathered"),
                                             ("none", "gathered")],
                         ids=["none", "pdl", "reserve", "default", "deep,fill,pdl,reserve,pair", "default-gathered",
                              "none-gathered"])
@pytest.mark.parametrize("page", [None, 16], ids=["contiguous", "page16"])
def test_gpu_cuda_graph(device, page, variant, combine, monkeypatch):
    """Capture one decode step (append + attention, automatic splits), then
    replay it with new inputs written into the captured buffers.  Batch 4 is
    a small batch on the H200 (32 programs), so the variants apply; with
    "pdl" the attention waits for the append through griddepcontrol; with
    "reserve" the counters come from the reserve an eager warm-up made; the
    gathered combine is launched with PDL behind the attention."""
    monkeypatch.setenv(decode.ENV_VARIANT, variant)
    monkeypatch.setenv(decode.ENV_COMBINE, combine)
    dtype, batch, h_q, h_kv, d, cap = torch.bfloat16, 4, 32, 8, 128, 4096
    k_cache, v_cache, table = make_cache(device, batch, cap, h_kv, d, dtype, page)
    q = torch.randn(batch, 1, h_q, d, device=device, dtype=dtype)
    k = torch.randn(batch, 1, h_kv, d, device=device, dtype=dtype)
    v = torch.randn_like(k)
    lens = torch.tensor([100, 4000, 0, 2048], dtype=torch.int32, device=device)

    def step():
        return flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens, block_table=table,
                                       causal=True, return_softmax_lse=True)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # compile and warm up outside the capture
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_g, lse_g = step()
    for it in range(3):
        q.copy_(torch.randn_like(q))
        k.copy_(torch.randn_like(k))
        v.copy_(torch.randn_like(v))
        lens.add_(1)
        kc0, vc0 = k_cache.clone(), v_cache.clone()
        graph.replay()
        torch.cuda.synchronize()
        kc1, vc1 = k_cache.clone(), v_cache.clone()
        k_cache.copy_(kc0)
        v_cache.copy_(vc0)
        out_e, lse_e = step()
        assert torch.equal(out_g, out_e), f"replay {it}: output differs from eager"
        assert torch.equal(lse_g, lse_e), f"replay {it}: LSE differs from eager"
        assert torch.equal(kc1, k_cache) and torch.equal(vc1, v_cache), f"replay {it}: append differs"


@pytest.mark.gpu
def test_gpu_torch_compile_inductor(device):
    dtype = torch.bfloat16
    k_cache, v_cache, table = make_cache(device, 2, 2048, 8, 128, dtype, 16)
    q = torch.randn(2, 1, 32, 128, device=device, dtype=dtype)
    k = torch.randn(2, 1, 8, 128, device=device, dtype=dtype)
    v = torch.randn_like(k)
    lens = torch.tensor([5, 2000], dtype=torch.int32, device=device)

    def step(q, kc, vc, k, v, lens):
        return flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, block_table=table, causal=True)

    kc_e, vc_e = k_cache.clone(), v_cache.clone()
    out_e = step(q, kc_e, vc_e, k, v, lens)
    out_c = torch.compile(step, fullgraph=True)(q, k_cache, v_cache, k, v, lens)
    assert torch.equal(out_c, out_e)
    assert torch.equal(k_cache, kc_e) and torch.equal(v_cache, vc_e)


def test_autocast_casts_new_tokens(device):
    """Under autocast, q and the new k, v are cast to the autocast dtype (the
    api.md convention); the caches are written in place, never cast: the
    result equals the call with q, k, v cast by hand, caches included."""
    dtype = torch.bfloat16 if device.type == "cpu" else torch.float16
    q = rnd(device, torch.float32, 2, 3, 4, 32)
    k_new, v_new = rnd(device, torch.float32, 2, 2, 2, 32), rnd(device, torch.float32, 2, 2, 2, 32)
    k_cache, v_cache, _ = make_cache(device, 2, 40, 2, 32, dtype)
    lens = ints(device, [17, 30])
    kc, vc = k_cache.clone(), v_cache.clone()
    with torch.autocast(device.type, dtype=dtype):
        out = flash_attn_with_kvcache(q, kc, vc, k=k_new, v=v_new, cache_seqlens=lens, causal=True)
    assert out.dtype == dtype
    kc2, vc2 = k_cache.clone(), v_cache.clone()
    want = flash_attn_with_kvcache(q.to(dtype), kc2, vc2, k=k_new.to(dtype), v=v_new.to(dtype),
                                   cache_seqlens=lens, causal=True)
    assert torch.equal(out, want), "autocast result differs from the call with q, k, v cast by hand"
    assert torch.equal(kc, kc2) and torch.equal(vc, vc2), "the appended tokens differ"
    with torch.autocast(device.type, dtype=dtype), pytest.raises(TypeError, match="dtype"):
        flash_attn_with_kvcache(q, kc.float(), vc.float(), cache_seqlens=lens)  # a cache of another dtype


_FAKE_DECODE = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda, LAUNCHES
from flashattn_triton.kernels import decode, fastlaunch

fastlaunch.ENABLED = True
SLOW = []  # launches through Triton's own path, either kernel
for kernel in (decode._decode_fwd, decode._append_kv):
    run = fastlaunch.fast_run(kernel)
    assert run is not None, "the decode kernels must have the launch fast path"
    real = run.jit_run
    run.jit_run = lambda *a, _real=real, **k: (SLOW.append(1), _real(*a, **k))[1]


def call(i, splits):
    torch.manual_seed(i)
    q = torch.randn(2, 1, 8, 64, dtype=torch.float16)
    k_cache, v_cache = torch.randn(2, 256, 2, 64, dtype=torch.float16), torch.randn(2, 256, 2, 64, dtype=torch.float16)
    k, v = torch.randn(2, 1, 2, 64, dtype=torch.float16), torch.randn(2, 1, 2, 64, dtype=torch.float16)
    seqlens = torch.tensor([100, 200], dtype=torch.int32)
    out, lse = torch.empty_like(q), torch.empty(2, 8, 1)
    LAUNCHES.clear()
    decode.append_kv(k, v, k_cache, v_cache, cache_seqlens=seqlens, cache_batch_idx=None, block_table=None,
                     rotary_cos=None, rotary_sin=None, rotary_interleaved=False)
    decode.decode_attention(q, k_cache, v_cache, out, lse, cache_seqlens=seqlens, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, rotary_cos=None, rotary_sin=None,
                            rotary_interleaved=False, rotary_q_per_token=False, alibi_slopes=None, n_new=1,
                            softmax_scale=0.125, window_left=-1, window_right=0, softcap=0.0, num_splits=splits)
    names = {t.data_ptr(): name for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("k", k),
                                                 ("v", v), ("seqlens", seqlens), ("out", out), ("lse", lse))}
    return [(id(l), g, [names.get(a.data_ptr(), "other") if isinstance(a, torch.Tensor) else a for a in args])
            for l, g, args in LAUNCHES]


with fake_cuda():
    for splits in (1, 3):
        SLOW.clear()
        first = call(0, splits)
        slow = len(SLOW)
        again = call(1, splits)
        assert len(SLOW) == slow, "a repeated signature must take the fast path"
        assert first == again and len(first) == 2, (first, again)
        print(splits, slow, len(SLOW), len(first), flush=True)
"""


def test_decode_kernels_take_the_fast_launch_on_a_fake_driver():
    """No GPU (tests/fake_cuda.py, compiled for sm_90): the append and decode
    kernels have the launch fast path, and a repeated signature launches
    through it exactly what Triton's own path launched for the first call
    (the same compiled kernels, grids and arguments, tensors by role), with
    one split and with three (the fused merge's counters)."""
    from flashattn_triton.kernels import fastlaunch
    if fastlaunch._VERSION not in fastlaunch.TESTED_TRITON:
        pytest.skip("the launch fast path does not mirror this Triton version")
    from _utils import fake_launch
    lines = fake_launch(_FAKE_DECODE, timeout=600).strip().split("\n")
    assert [line.split()[0] for line in lines] == ["1", "3"], lines


_FAKE_DECODE_PLANS = r"""
import os, sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda, LAUNCHES, count_replays, describe
import flashattn_triton as fat
from flashattn_triton import _kvcache as kvc, ops
from flashattn_triton.kernels import decode, fastlaunch

fastlaunch.ENABLED = True
kvc._use_triton = lambda t: True  # CPU tensors through the CUDA path, launches recorded
REPLAYS = count_replays()


def one_call(i, plans, splits=0, append=False, paged=False, sinks=False, rotary=False, combine="fused"):
    # one decode call with fresh tensors: its launches, pointers named by role
    ops.PLANS_ENABLED = plans
    os.environ[decode.ENV_COMBINE] = combine
    try:
        torch.manual_seed(i)
        q = torch.randn(2, 1, 8, 64, dtype=torch.float16)
        shape = (10, 64, 2, 64) if paged else (2, 256, 2, 64)
        k_cache, v_cache = torch.randn(shape, dtype=torch.float16), torch.randn(shape, dtype=torch.float16)
        kw = dict(cache_seqlens=torch.tensor([100, 200], dtype=torch.int32), causal=True, num_splits=splits,
                  return_softmax_lse=True)
        if append:
            kw.update(k=torch.randn(2, 1, 2, 64, dtype=torch.float16), v=torch.randn(2, 1, 2, 64, dtype=torch.float16))
        if paged:
            kw["block_table"] = torch.randperm(10, dtype=torch.int32)[:8].reshape(2, 4).contiguous()
        if sinks:
            kw["sinks"] = torch.randn(8, dtype=torch.float32)
        if rotary:
            kw.update(rotary_cos=torch.rand(256, 16), rotary_sin=torch.rand(256, 16))
        LAUNCHES.clear(); del REPLAYS[:]
        out, lse = fat.flash_attn_with_kvcache(q, k_cache, v_cache, **kw)
        names = {t.data_ptr(): name for name, t in [("q", q), ("k_cache", k_cache), ("v_cache", v_cache),
                                                    ("out", out), ("lse", lse)] + list(kw.items())
                 if isinstance(t, torch.Tensor)}
        got = [(id(l), g, describe(a, getattr(l, "kinds", None), names)) for l, g, a in LAUNCHES]
        return got, sum(ok for _, ok in REPLAYS)
    finally:
        ops.PLANS_ENABLED = True
        os.environ.pop(decode.ENV_COMBINE)


def check(name, **kw):
    # three planned calls record, a fifth replays: the launches of the same call without plans,
    # reading its own tensors
    kvc.clear_plans()
    for i in range(3):
        one_call(i, True, **kw)
    want, _ = one_call(4, False, **kw)
    got, replays = one_call(4, True, **kw)
    assert want and got == want, (name, got, want)
    (plan,) = kvc.PLANS.values()
    print(name.replace(" ", "_"), len(got), replays, plan.replay is not None, plan.counters > 0, flush=True)


with fake_cuda():
    check("one split", splits=1)
    check("three splits, append", splits=3, append=True)
    check("paged, append, sinks", splits=3, append=True, paged=True, sinks=True)
    check("separate combine", splits=3, combine="separate")
    check("gathered combine", splits=3, combine="gathered")
    check("rotary", splits=3, append=True, rotary=True)
"""


def test_decode_plans_replay_on_a_fake_driver():
    """No GPU (tests/fake_cuda.py, compiled for sm_90): a repeated eager
    decode signature takes its call plan, and the replay launches exactly
    what the same call launches without plans (the same kernels, scalars and
    grids, the call's own q, caches, new tokens, cache_seqlens, block table
    and sinks by role, its own new out / LSE / partials, the split counters
    of the stream), with one split, the fused merge, a paged cache, sinks,
    rotary tables and the separate and gathered combines (not the default).
    Lines: case, launches, replays, recorded, counters a role."""
    from flashattn_triton.kernels import fastlaunch
    if fastlaunch._VERSION not in fastlaunch.TESTED_TRITON:
        pytest.skip("the launch fast path does not mirror this Triton version")
    from _utils import fake_launch
    lines = [line.split() for line in fake_launch(_FAKE_DECODE_PLANS, timeout=600).strip().split("\n")]
    assert [line[0] for line in lines] == ["one_split", "three_splits,_append", "paged,_append,_sinks",
                                           "separate_combine", "gathered_combine", "rotary"], lines
    # launches: decode (+ append) (+ combine); every case replayed once, from a recording
    assert [line[1:4] for line in lines] == [["1", "1", "True"], ["2", "1", "True"], ["2", "1", "True"],
                                             ["2", "1", "True"], ["2", "1", "True"], ["2", "1", "True"]], lines
    assert [line[4] for line in lines] == ["False", "True", "True", "False", "False", "True"], lines


@pytest.mark.parametrize("case", ["read only", "append, paged, sinks"])
def test_decode_calls_are_planned(device, monkeypatch, case):
    """A repeated eager signature takes its call plan: only its first call is
    checked (kvc._validate), and every call gives bit for bit what the same
    call gives without plans (ops.PLANS_ENABLED = False): output, LSE and
    the caches after an append, whose version counters it bumps.  New
    tensors each call; what changes the key (dtype, layout) makes a new
    plan; an int cache_seqlens, a non-contiguous one, autocast and a q that
    requires grad take no plan."""
    from flashattn_triton import ops
    checked = []
    real_validate = kvc._validate
    monkeypatch.setattr(kvc, "_validate", lambda *a: (checked.append(1), real_validate(*a))[1])
    append = case != "read only"
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    kvc.clear_plans()

    def call(i, plans, dtype=dtype, seqlens=None, **over):
        monkeypatch.setattr(ops, "PLANS_ENABLED", plans)
        torch.manual_seed(i)
        q = rnd(device, dtype, 2, 1, 4, 32)
        k_cache, v_cache, table = make_cache(device, 2, 64, 2, 32, dtype, 16 if append else None)
        kw = dict(cache_seqlens=ints(device, [7, 40]) if seqlens is None else seqlens, causal=True,
                  return_softmax_lse=True)
        if append:
            kw.update(k=rnd(device, dtype, 2, 1, 2, 32), v=rnd(device, dtype, 2, 1, 2, 32), block_table=table,
                      sinks=torch.randn(4, device=device))
        kw.update(over)
        q = kw.pop("q", q)
        versions = (k_cache._version, v_cache._version)
        out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, **kw)
        bumped = (k_cache._version > versions[0], v_cache._version > versions[1])
        return out, lse, k_cache, v_cache, bumped

    for i in range(4):
        del checked[:]
        got = call(i, True)
        assert len(checked) == (1 if i == 0 else 0), f"call {i}: checked {len(checked)} times"
        want = call(i, False)
        for name, a, b in zip(("out", "lse", "k_cache", "v_cache"), got[:4], want[:4]):
            assert torch.equal(a, b), f"call {i}: {name} differs from the unplanned call"
        assert got[4] == want[4] == (append, append), (got[4], want[4])
    assert len(kvc.PLANS) == 1
    call(5, True, dtype=torch.bfloat16)
    call(6, True, q=rnd(device, dtype, 2, 4, 1, 32).transpose(1, 2))  # another q layout
    assert len(kvc.PLANS) == 3, "another dtype or layout makes another plan"
    del checked[:]
    call(7, True, seqlens=7)
    call(8, True, seqlens=ints(device, [7, 0, 40, 0])[::2])
    with torch.autocast(device.type, dtype=torch.bfloat16):
        call(9, True, dtype=torch.bfloat16, q=rnd(device, torch.float32, 2, 1, 4, 32))
    with torch.enable_grad():
        call(10, True, q=rnd(device, dtype, 2, 1, 4, 32).requires_grad_())
    assert len(kvc.PLANS) == 3 and len(checked) == 4, (len(kvc.PLANS), len(checked))
    kvc.clear_plans()


@pytest.mark.gpu
@pytest.mark.parametrize("page", [None, 16, 256], ids=["contiguous", "page16", "page256"])
@pytest.mark.parametrize("splits", [1, 0, 7], ids=["one split", "auto", "seven"])
def test_gpu_decode_plans_match_unplanned(device, monkeypatch, page, splits):
    """On the GPU a repeated eager signature replays its recorded launches
    (kvc.PLANS: a replay recorded), bit for bit what the same call gives
    without plans: output, LSE and the caches after an append with sinks,
    on the default stream and on a side stream (the split counters are per
    stream), for several calls with new values."""
    from flashattn_triton import ops
    dtype, batch, h_q, h_kv, d, cap = torch.bfloat16, 3, 16, 4, 128, 2048
    kvc.clear_plans()

    def run(plans, i):
        monkeypatch.setattr(ops, "PLANS_ENABLED", plans)
        torch.manual_seed(i)
        k_cache, v_cache, table = make_cache(device, batch, cap, h_kv, d, dtype, page)
        q = torch.randn(batch, 2, h_q, d, device=device, dtype=dtype)
        k, v = (torch.randn(batch, 2, h_kv, d, device=device, dtype=dtype) for _ in range(2))
        lens = torch.tensor([5, 1500, 0], dtype=torch.int32, device=device)
        sinks = torch.randn(h_q, device=device)
        out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens, block_table=table,
                                           causal=True, num_splits=splits, return_softmax_lse=True, sinks=sinks)
        return out, lse, k_cache, v_cache

    for stream in (torch.cuda.current_stream(), torch.cuda.Stream()):
        with torch.cuda.stream(stream):
            for i in range(4):
                got = run(True, i)
                want = run(False, i)
                for name, a, b in zip(("out", "lse", "k_cache", "v_cache"), got, want):
                    assert torch.equal(a, b), f"call {i} on {stream}: {name} differs from the unplanned call"
        torch.cuda.synchronize()
    (plan,) = kvc.PLANS.values()
    assert plan.replay is not None, "the plan recorded no replay on the GPU"
    kvc.clear_plans()


@pytest.mark.gpu
def test_gpu_two_devices_default_streams(device):
    """Decoding on two GPUs, each on its default stream (handle 0 on every
    device): each device's fused merge gets counters on its own device, and
    both match the reference, planned calls included (needs two GPUs)."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    dtype = torch.bfloat16
    kvc.clear_plans()
    for rep in range(3):
        for index in (0, 1, 0, 1):
            dev = torch.device("cuda", index)
            torch.manual_seed(10 * rep + index)
            q = torch.randn(2, 1, 8, 64, device=dev, dtype=dtype)
            k_cache, v_cache, _ = make_cache(dev, 2, 4096, 2, 64, dtype)
            lens = torch.tensor([4096, 3000], dtype=torch.int32, device=dev)
            out = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, num_splits=8)
            ref = reference(q, k_cache, v_cache, seqlens=lens)
            base = reference(q, k_cache, v_cache, seqlens=lens, dtype=dtype)
            assert_close(f"cuda:{index}, call {rep}", out, ref[0], base[0], 2.0, dtype)
    kvc.clear_plans()
