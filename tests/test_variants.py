"""Attention variants, forward and gradients, against float64 references:
softcap, ALiBi, learnable sinks, dropout (same Philox mask in the reference),
SDPA masks and biases, value head dim != query head dim, head dims up to 512,
sliding windows, and their combinations.

Every CPU test runs twice: on the Triton kernels (interpreter, or compiled
with FLASHATTN_TRITON_TEST_DEVICE=cuda) and on the blockwise PyTorch path.
Tolerance (testing.py): at most 2x (outputs) / 3x (gradients) the error of
plain PyTorch computing the same attention in the input dtype.
"""

import math

import pytest
import torch
import triton
import triton.language as tl

import flashattn_triton as fat
from flashattn_triton import ops
from flashattn_triton._params import draw_dropout_seed
from flashattn_triton.kernels.score import dropout_keep, tanh
from flashattn_triton.reference import attention_ref, philox_randint, philox_randint4x, visible_mask
from flashattn_triton.kernels.score import KernelMods
from flashattn_triton.reference import dropout_keep as ref_dropout_keep
from flashattn_triton.reference import dropout_scale, dropout_threshold
from flashattn_triton.testing import (capture_graph, alibi_slopes, assert_close, check_sink_only_rows, dropout_mask,
                                      flash_attention_ref, leaf, make_qkv, rand, random_cu_seqlens,
                                      varlen_attention_ref, varlen_dropout_masks)
from _utils import path  # noqa: F401,E402  (a fixture: the kernels and the blockwise CPU path)



@triton.jit
def _tanh_kernel(X, Y, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(Y + offs, tanh(tl.load(X + offs), False))


@triton.jit
def _randint_kernel(SEED, OFFS, OUT, N: tl.constexpr):
    i = tl.arange(0, N)
    r = tl.randint(tl.load(SEED), tl.load(OFFS + i))
    tl.store(OUT + i, (r >> 1).to(tl.int32, bitcast=True))


@triton.jit
def _randint4x_kernel(SEED, OFFS, OUT, N: tl.constexpr):
    i = tl.arange(0, N)
    r0, r1, r2, r3 = tl.randint4x(tl.load(SEED), tl.load(OFFS + i))
    tl.store(OUT + i, (r0 >> 1).to(tl.int32, bitcast=True))
    tl.store(OUT + N + i, (r1 >> 1).to(tl.int32, bitcast=True))
    tl.store(OUT + 2 * N + i, (r2 >> 1).to(tl.int32, bitcast=True))
    tl.store(OUT + 3 * N + i, (r3 >> 1).to(tl.int32, bitcast=True))


@triton.jit
def _dropout_keep_kernel(SEED, KEEP, KEEP_T, rng_base, rng_cols, dropout_thresh, row0, col0,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Both orientations of kernels.score.dropout_keep for one tile."""
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    seed = tl.load(SEED)
    keep = dropout_keep(seed, rng_base, row0, col0, rng_cols, dropout_thresh, BLOCK_M, BLOCK_N, False)
    tl.store(KEEP + offs_m[:, None] * BLOCK_N + offs_n[None, :], keep.to(tl.int8))
    keep_t = dropout_keep(seed, rng_base, row0, col0, rng_cols, dropout_thresh, BLOCK_M, BLOCK_N, True)
    tl.store(KEEP_T + offs_n[:, None] * BLOCK_M + offs_m[None, :], keep_t.to(tl.int8))



def compare(ours, ref, inputs, names, dtype, with_lse=True, factor=(2.0, 3.0)):
    """Run ours(*leaves) -> (out, lse) against ref(*leaves, dtype=...) in float64
    (the truth) and in ``dtype`` (the baseline error), with random cotangents
    for out and the LSE; compare out, lse and the gradient of every input."""
    cot = {}

    def run(fn, leaves):
        out, lse = fn(*leaves)
        if not cot:  # cotangents drawn once, after the first call (its seed is the test's)
            cot["do"] = rand(out.shape, torch.float32, out.device).double()
            cot["dlse"] = rand(lse.shape, torch.float32, out.device).double() if with_lse else None
        loss = (out.double() * cot["do"]).sum()
        if cot["dlse"] is not None:
            loss = loss + (torch.where(torch.isinf(lse), 0.0, lse).double() * cot["dlse"]).sum()
        return out.detach(), lse.detach(), torch.autograd.grad(loss, leaves)

    got = run(ours, [leaf(t) for t in inputs])
    truth = run(lambda *a: ref(*a, dtype=torch.float64), [leaf(t, torch.float64) for t in inputs])
    base = run(lambda *a: ref(*a, dtype=dtype), [leaf(t) for t in inputs])
    assert_close("out", got[0], truth[0], base[0], factor[0], dtype)
    assert_close("lse", got[1], truth[1], base[1], factor[0], torch.float32)
    for name, g, r, b in zip(names, got[2], truth[2], base[2]):
        assert_close(f"d{name}", g, r, b, factor[1], dtype)
    return got, truth


def check_flash(q, k, v, causal=False, window=(-1, -1), scale=None, extras=None, ref_only=None,
                dropout=None, **kw):
    """flash_attn_func with keyword variants ``kw`` (fixed) and ``extras``
    (differentiated, e.g. sinks), against flash_attention_ref; ``ref_only``:
    reference-side arguments; dropout = (p, torch_seed)."""
    extras = extras or {}
    ref_kw = dict(ref_only or {})
    if dropout is not None:
        p, ts = dropout
        kw["dropout_p"] = p
        ref_kw.update(dropout_p=p, dropout_mask=dropout_mask(ts, p, q.shape[0], q.shape[2], q.shape[1],
                                                             k.shape[1], q.device))
    names = list(extras)

    def ours(q_, k_, v_, *ex):
        if dropout is not None:
            torch.manual_seed(dropout[1])
        return fat.flash_attn_func(q_, k_, v_, softmax_scale=scale, causal=causal, window_size=window,
                                   return_lse=True, **kw, **dict(zip(names, ex)))

    def ref(q_, k_, v_, *ex, dtype):
        rk = dict(kw, **ref_kw)
        return flash_attention_ref(q_, k_, v_, causal, scale, dtype, window, **rk, **dict(zip(names, ex)))

    return compare(ours, ref, [q, k, v, *extras.values()], ["q", "k", "v", *names], q.dtype)


# ---------------------------------------------------------------------------
# softcap
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,causal,softcap,std", [
    (torch.float16, True, 30.0, 1.0),    # Gemma 2's cap, mild scores
    (torch.bfloat16, False, 5.0, 3.0),   # scores far beyond the cap: tanh saturates
    (torch.float32, True, 2.0, 1.0),
    (torch.float32, False, 50.0, 0.3),   # scores << cap: tanh's small-argument branch
])
def test_softcap(device, path, dtype, causal, softcap, std):
    q, k, v = make_qkv(1, 45, 70, 4, 2, 32, dtype, device, scale=std, requires_grad=False)
    check_flash(q, k, v, causal=causal, softcap=softcap)


def test_softcap_tanh_accuracy(device):
    """The kernels' float32 tanh (no tanh in Triton's interpreter): within a few ulps everywhere."""
    x = torch.cat([torch.linspace(-12, 12, 4001), torch.linspace(-0.45, 0.45, 4001),
                   torch.tensor([0.0, 1e-30, -1e-8, 0.39999, 0.40001, 50.0, -1e4])]).to(device)
    x = torch.nn.functional.pad(x, (0, 8192 - x.numel()))
    y = torch.empty_like(x)
    _tanh_kernel[(1,)](x, y, N=8192)
    exact = torch.tanh(x.double())
    rel = ((y.double() - exact).abs() / exact.abs().clamp_min(1e-30)).max().item()
    assert rel < 4 * torch.finfo(torch.float32).eps, f"tanh relative error {rel:.2e}"


# ---------------------------------------------------------------------------
# ALiBi
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("per_batch,causal,n_q,n_k,dtype", [
    (False, True, 60, 60, torch.float16),
    (True, False, 37, 90, torch.bfloat16),   # Nq < Nk: distances aligned bottom-right
    (False, False, 90, 33, torch.float32),
])
def test_alibi(device, path, per_batch, causal, n_q, n_k, dtype):
    b = 2 if per_batch else 1
    q, k, v = make_qkv(b, n_q, n_k, 4, 2, 32, dtype, device, requires_grad=False)
    slopes = alibi_slopes(4, device)
    if per_batch:
        slopes = torch.stack([slopes, slopes.flip(0) * 0.5])
    check_flash(q, k, v, causal=causal, alibi_slopes=slopes)


def test_alibi_varlen(device, path):
    lens_q, lens_k = [30, 1, 45], [50, 7, 45]
    cu_q, cu_k = random_cu_seqlens(lens_q, device), random_cu_seqlens(lens_k, device)
    q = rand((sum(lens_q), 4, 16), torch.float16, device)
    k = rand((sum(lens_k), 2, 16), torch.float16, device)
    v = rand((sum(lens_k), 2, 16), torch.float16, device)
    slopes = torch.rand(3, 4, device=device)  # (batch, nheads)

    def ours(q_, k_, v_):
        return fat.flash_attn_varlen_func(q_, k_, v_, cu_q, cu_k, 45, 50, causal=True,
                                          alibi_slopes=slopes, return_lse=True)

    def ref(q_, k_, v_, dtype):
        return varlen_attention_ref(q_, k_, v_, cu_q, cu_k, True, dtype=dtype,
                                    alibi_slopes=slopes.to(dtype))

    compare(ours, ref, [q, k, v], "qkv", torch.float16)


# ---------------------------------------------------------------------------
# Learnable sinks
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,causal,n_q,n_k,sink_scale", [
    (torch.float32, False, 40, 60, 1.0),
    (torch.bfloat16, True, 48, 48, 3.0),    # sinks that dominate some rows
    (torch.float16, True, 64, 30, 1.0),     # Nq > Nk: rows with no key see only the sink
])
def test_sinks(device, path, dtype, causal, n_q, n_k, sink_scale):
    q, k, v = make_qkv(2, n_q, n_k, 2, 1, 32, dtype, device, requires_grad=False)
    sinks = torch.randn(2, device=device) * sink_scale
    got, truth = check_flash(q, k, v, causal=causal, extras={"sinks": sinks})
    if causal:
        check_sink_only_rows(got[0], got[1], sinks, n_q - n_k)


@pytest.mark.parametrize("form", ["qkvpacked", "kvpacked"])
def test_packed_wrappers_take_sinks_and_return_lse(device, form):
    """The packed forms pass ``sinks=`` and ``return_lse=`` through: the same
    output, LSE and gradients (q / k / v through the packed tensor, and the
    sinks') as flash_attn_func on the slices, which test_sinks checks against
    the float64 reference."""
    torch.manual_seed(0)
    q, k, v = make_qkv(2, 37, 37, 2, 2, 24, torch.float16, device, requires_grad=False)
    sinks = torch.randn(2, device=device)
    outs = []
    for packed in (True, False):
        qkv = torch.stack([q, k, v], dim=2).requires_grad_()
        s = sinks.clone().requires_grad_()
        qs, ks, vs = qkv.unbind(2)
        if not packed:
            out, lse = fat.flash_attn_func(qs, ks, vs, causal=True, return_lse=True, sinks=s)
        elif form == "qkvpacked":
            out, lse = fat.flash_attn_qkvpacked_func(qkv, causal=True, return_lse=True, sinks=s)
        else:
            out, lse = fat.flash_attn_kvpacked_func(qs, qkv[:, :, 1:], causal=True, return_lse=True, sinks=s)
        (out.float().square().sum() + lse.sum()).backward()
        outs.append((out, lse, qkv.grad, s.grad))
    for name, got, want in zip(("out", "lse", "dqkv", "dsinks"), *outs):
        assert got is not None and want is not None, name
        assert torch.equal(got, want), f"{form} {name}: max |diff| {(got.float() - want.float()).abs().max():.3g}"
    assert outs[0][3].abs().sum() > 0, "the sinks got no gradient"


@pytest.mark.parametrize("dtype,causal,n_q,n_k,sink_scale,window", [
    (torch.bfloat16, True, 48, 48, 3.0, (-1, -1)),    # sinks that dominate some rows
    (torch.float16, True, 64, 30, 1.0, (-1, -1)),     # Nq > Nk: rows that see only the sink
    (torch.float32, False, 40, 60, 1.0, (-1, -1)),
    (torch.bfloat16, True, 50, 70, 1.0, (16, -1)),    # with a left window (gpt-oss' local layers)
])
def test_sinks_folded_after_a_forward_without_them(device, monkeypatch, dtype, causal, n_q, n_k, sink_scale,
                                                   window):
    """FLASHATTN_TRITON_HOPPER_SINKS=1: a dense call whose only kernel-side
    variant would be its sinks takes the Hopper forward without them, and
    ops._fold_sinks folds each head's sink into O and the base-2 LSE in place
    (kernels/combine.py, one part).  A stand-in for the Hopper forward writes
    the float64 attention without sinks, rounded to the dtype (the portable
    forward with sinks never runs); output, LSE and the gradients (the
    portable backward reads the folded LSE) match the reference with sinks."""
    from flashattn_triton import _dispatch
    from flashattn_triton.reference import LOG2E
    monkeypatch.setattr(_dispatch, "_hopper_tier", lambda device: True)
    monkeypatch.setattr(_dispatch, "HOPPER_FWD_SHORT", {})
    monkeypatch.setattr(ops, "use_hopper_backward", lambda *a, **kw: False)
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_SINKS", "1")
    if ops._kernels.forward is None:
        ops._kernels.load()
    calls = []

    def hopper_stand_in(q, k, v, out, lse, scale, diagonal, left, *rest, **kw):
        # ops passes (B, N, H, d) views; the stand-in is exact, then rounded
        assert not rest and not kw, "sinks alone: no dropout or mask reaches the forward"
        calls.append((diagonal, left))
        o64, l64 = flash_attention_ref(q.detach(), k.detach(), v.detach(), causal, scale, torch.float64, window)
        out.copy_(o64.to(out.dtype))
        lse.copy_(l64 * LOG2E)
        return True

    def forbidden(*a, **kw):
        raise AssertionError("the portable forward ran")
    monkeypatch.setattr(ops._kernels, "hopper_forward", hopper_stand_in)
    monkeypatch.setattr(ops._kernels, "forward", forbidden)
    q, k, v = make_qkv(2, n_q, n_k, 4, 2, 32, dtype, device, requires_grad=False)
    sinks = torch.randn(4, device=device) * sink_scale
    got, truth = check_flash(q, k, v, causal=causal, window=window, extras={"sinks": sinks})
    diagonal = n_k - n_q  # bottom-right alignment
    assert calls == [(diagonal if causal else None, (window[0], diagonal) if window[0] >= 0 else None)], calls
    if causal:
        check_sink_only_rows(got[0], got[1], sinks, n_q - n_k)
    with pytest.raises(AssertionError, match="portable forward ran"):  # sinks with another variant
        fat.flash_attn_func(q, k, v, causal=causal, window_size=window, sinks=sinks, softcap=20.0)
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_SINKS", "0")
    with pytest.raises(AssertionError, match="portable forward ran"):
        fat.flash_attn_func(q, k, v, causal=causal, window_size=window, sinks=sinks)


def test_sinks_fold_default_by_head_dim(monkeypatch):
    """With FLASHATTN_TRITON_HOPPER_SINKS unset the fold is on for the head
    dims in HOPPER_SINKS_DIMS and HOPPER_SINKS_DEFAULT elsewhere; the
    variable overrides both; varlen calls and calls without sinks never fold."""
    from flashattn_triton import _dispatch
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_SINKS", raising=False)
    monkeypatch.setattr(_dispatch, "HOPPER_SINKS_DIMS", frozenset({128}))
    monkeypatch.setattr(_dispatch, "HOPPER_SINKS_DEFAULT", "0")
    fold = _dispatch.sinks_after_hopper_forward
    assert [fold(True, False, d) for d in (64, 128, 256, None)] == [False, True, False, False]
    assert not fold(None, False, 128) and not fold(True, True, 128)
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_SINKS", "0")
    assert not fold(True, False, 128)
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_SINKS", "1")
    assert fold(True, False, 64)


def test_sinks_strided(device, path):
    """A strided sinks view (a column of a parameter) gives the output and
    the sinks gradient of its contiguous copy."""
    q, k, v = make_qkv(1, 24, 24, 3, 3, 16, torch.float32, device, requires_grad=False)
    table = torch.randn(3, 2, device=device, requires_grad=True)
    flat = table.detach()[:, 1].clone().requires_grad_()
    out_s = fat.flash_attn_func(q, k, v, causal=True, sinks=table[:, 1])
    out_c = fat.flash_attn_func(q, k, v, causal=True, sinks=flat)
    assert torch.equal(out_s, out_c), f"strided sinks changed the output by {(out_s - out_c).abs().max()}"
    (g_s,) = torch.autograd.grad(out_s.sum(), table)
    (g_c,) = torch.autograd.grad(out_c.sum(), flat)
    assert torch.equal(g_s[:, 1], g_c) and not g_s[:, 0].any()


def test_sinks_gradient_formula(device):
    """d sink_h = -sum_i P_sink,i * delta_i (delta_i = rowsum(dO * O) - dlse_i):
    the op's dsinks equals that expression evaluated from float64 quantities."""
    q, k, v = make_qkv(1, 33, 41, 2, 2, 16, torch.float32, device, requires_grad=False)
    sinks = torch.randn(2, device=device, requires_grad=True)
    out, lse = fat.flash_attn_func(q, k, v, sinks=sinks, return_lse=True)
    do, dlse = torch.randn_like(out), torch.randn_like(lse)
    (ds,) = torch.autograd.grad((out * do).sum() + (lse * dlse).sum(), sinks)
    o64, l64 = flash_attention_ref(q, k, v, False, sinks=sinks.detach())
    delta = (do.double() * o64).sum(-1).transpose(1, 2) - dlse.double()  # (B, H, Nq)
    p_sink = torch.exp(sinks.detach().double()[None, :, None] - l64)
    assert_close("dsinks", ds, -(p_sink * delta).sum((0, 2)), atol=1e-5)


@pytest.mark.parametrize("layout", ["dense", "packed", "strided", "rows_without_keys"])
def test_sinks_grad_kernel(device, layout):
    """kernels/bwd.py sinks_grad (one kernel of per-block partial sums, then
    one reduction) against the float64 expression -sum_r exp2(sink2 - lse2_r)
    * delta_r over every row of each head, with more rows than one block
    (1024), ragged; rows whose lse2 is -inf contribute nothing; lse / delta
    that are not row-contiguous take the torch expression."""
    from flashattn_triton.kernels.bwd import sinks_grad
    heads = 3
    shape = {"dense": (2, heads, 777), "packed": (heads, 1500), "strided": (2, heads, 300),
             "rows_without_keys": (1, heads, 1100)}[layout]
    lse = torch.randn(shape, device=device) * 3
    if layout == "strided":  # (B, H, N) values stored (B, N, H): last stride H
        lse = torch.randn(2, 300, heads, device=device).transpose(1, 2)
    if layout == "rows_without_keys":
        lse[..., ::7] = float("-inf")
    delta = torch.randn(lse.shape, device=device).as_strided(lse.shape, lse.stride())
    sinks = torch.randn(heads, device=device)
    dsinks = torch.full((heads,), float("nan"), device=device)
    sinks_grad(dsinks, sinks, lse, delta)
    l64 = lse.double() if lse.dim() == 3 else lse.double()[None]
    d64 = delta.double() if delta.dim() == 3 else delta.double()[None]
    p = torch.where(torch.isinf(l64), 0.0, torch.exp2(sinks.double()[None, :, None] * math.log2(math.e) - l64))
    # the baseline: the same expression in float32 with torch (the op's CPU path)
    l32, d32 = l64.float(), d64.float()
    p32 = torch.where(torch.isinf(l32), 0.0, torch.exp2(sinks[None, :, None] * math.log2(math.e) - l32))
    assert_close("dsinks", dsinks, -(p * d64).sum((0, 2)), baseline=-(p32 * d32).sum((0, 2)))


def test_sinks_no_keys(device):
    """No key at all: out = 0, lse = sink, and d sink = sum over rows of d lse."""
    q = rand((2, 5, 3, 16), torch.float16, device)
    k = v = rand((2, 0, 3, 16), torch.float16, device)
    sinks = torch.randn(3, device=device, requires_grad=True)
    out, lse = fat.flash_attn_func(q, k, v, sinks=sinks, return_lse=True)
    assert torch.equal(out, torch.zeros_like(out))
    assert_close("lse", lse, sinks.detach()[None, :, None].double().expand(2, 3, 5), atol=1e-6)
    dlse = torch.randn_like(lse)
    (ds,) = torch.autograd.grad((lse * dlse).sum(), sinks)
    assert_close("dsinks", ds, dlse.double().sum((0, 2)), atol=1e-5)


def test_sinks_varlen(device, path):
    lens = [20, 0, 37]
    cu = random_cu_seqlens(lens, device)
    q = rand((sum(lens), 4, 32), torch.bfloat16, device)
    k = rand((sum(lens), 1, 32), torch.bfloat16, device)
    v = rand((sum(lens), 1, 32), torch.bfloat16, device)
    sinks = torch.randn(4, device=device)

    def ours(q_, k_, v_, s_):
        return fat.flash_attn_varlen_func(q_, k_, v_, cu, cu, 37, 37, causal=True,
                                          window_size=(9, 0), sinks=s_, return_lse=True)

    def ref(q_, k_, v_, s_, dtype):
        return varlen_attention_ref(q_, k_, v_, cu, cu, True, dtype=dtype, window_size=(9, 0), sinks=s_)

    compare(ours, ref, [q, k, v, sinks], ["q", "k", "v", "sinks"], torch.bfloat16)


# ---------------------------------------------------------------------------
# Dropout
# ---------------------------------------------------------------------------

def test_philox_matches_triton(device):
    """reference.philox_randint reproduces tl.randint bit for bit (counters
    past 2^32 included): the blockwise path and the testing hook see the
    kernels' dropout mask."""
    seed = torch.tensor([0x1234_5678_9ABC_DEF], dtype=torch.int64, device=device)
    offs = torch.cat([torch.arange(512), torch.randint(0, 2 ** 40, (512,))]).to(device)
    out = torch.empty(1024, dtype=torch.int32, device=device)
    _randint_kernel[(1,)](seed, offs, out, N=1024)
    assert torch.equal(out.long(), philox_randint(seed, offs) >> 1)


def test_philox4x_matches_triton(device):
    """reference.philox_randint4x reproduces all four words of tl.randint4x."""
    seed = torch.tensor([0x0FED_CBA9_8765_4321], dtype=torch.int64, device=device)
    offs = torch.cat([torch.arange(256), torch.randint(0, 2 ** 40, (256,))]).to(device)
    out = torch.empty(4, 512, dtype=torch.int32, device=device)
    _randint4x_kernel[(1,)](seed, offs, out, N=512)
    assert torch.equal(out.long(), torch.stack(philox_randint4x(seed, offs)) >> 1)


def test_dropout_rounds_env_checked(monkeypatch):
    """FLASHATTN_TRITON_DROPOUT_ROUNDS: unset gives 10 (tl.randint4x's
    default), 7-10 are taken, anything else is a ValueError naming the
    variable and the value."""
    from flashattn_triton import reference
    monkeypatch.delenv(reference.ENV_DROPOUT_ROUNDS, raising=False)
    assert reference._dropout_rounds() == 10
    for value in ("7", " 9 "):
        monkeypatch.setenv(reference.ENV_DROPOUT_ROUNDS, value)
        assert reference._dropout_rounds() == int(value)
    for value in ("6", "11", "ten"):
        monkeypatch.setenv(reference.ENV_DROPOUT_ROUNDS, value)
        with pytest.raises(ValueError, match=f"FLASHATTN_TRITON_DROPOUT_ROUNDS={value!r}"):
            reference._dropout_rounds()


def test_dropout_rounds_switch():
    """With FLASHATTN_TRITON_DROPOUT_ROUNDS=7 (read at import, so in a fresh
    process) the kernels draw 7-round Philox words: the Gluon helper equals
    tl.randint4x(..., 7) and the reference's 7-round words, its tiles the
    reference's 7-round masks, and the masks the portable forward, dK/dV and
    dQ passes apply equal the testing hook's (itself 7-round; the 10-round
    mask differs from it, checked here), on this test's device."""
    import os
    import subprocess
    import sys
    seed = torch.tensor([1234], dtype=torch.int64)
    offs = torch.arange(64, dtype=torch.int64)
    assert not torch.equal(torch.stack(philox_randint4x(seed, offs, 7)), torch.stack(philox_randint4x(seed, offs)))
    tests = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, FLASHATTN_TRITON_DROPOUT_ROUNDS="7")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                          os.path.join(tests, "test_variants.py"), os.path.join(tests, "test_hopper_dropout.py"),
                          "-k", "dropout_kernel_masks_exact and window or philox_helper or tile_keep_matches "
                          "or dropout_keep_mask_is_the_portable_one or mixed_tiers_agree or rounds_in_child"],
                         capture_output=True, text=True, env=env, timeout=900, cwd=os.path.dirname(tests))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert " passed" in res.stdout and "failed" not in res.stdout, res.stdout[-2000:]


def test_dropout_rounds_in_child():
    """In test_dropout_rounds_switch's child: the rounds the reference and
    the kernels read are the environment's."""
    import os
    from flashattn_triton import reference
    from flashattn_triton.kernels import score
    want = int(os.environ.get(reference.ENV_DROPOUT_ROUNDS, "10"))
    assert reference.DROPOUT_ROUNDS == want and score.PHILOX_ROUNDS.value == want


@pytest.mark.parametrize("row0,col0,rng_cols,p,block_m,block_n", [
    (48, 0, 13, 0.37, 32, 16),
    (16, 48, 70, 0.7, 16, 64),  # threshold * 2^16 >= 2^31: the high-half compare must be unsigned
    (0, 16, 4099, 0.93, 64, 32),
])
def test_dropout_keep_tile_matches_reference(device, row0, col0, rng_cols, p, block_m, block_n):
    """kernels.score.dropout_keep, queries x keys and keys x queries, is
    reference.dropout_keep's mask of the tile (one Philox call per 8 scores:
    score (i, j) reads half j0 of word 2 * i3 + j3 of the counter of
    (i & ~8, j & ~9)); counters past 2^32; the tile's keep rate is 1 - p."""
    seed = torch.tensor([987_654_321_987], dtype=torch.int64, device=device)
    rng_base = 3 * 2 ** 32 + 11
    keep = torch.empty(block_m, block_n, dtype=torch.int8, device=device)
    keep_t = torch.empty(block_n, block_m, dtype=torch.int8, device=device)
    thresh = dropout_threshold(p)
    _dropout_keep_kernel[(1,)](seed, keep, keep_t, rng_base, rng_cols, thresh, row0, col0,
                               BLOCK_M=block_m, BLOCK_N=block_n)
    ref = ref_dropout_keep(seed, p, 1, 1, range(row0, row0 + block_m), col0, col0 + block_n, 1,
                           rng_cols, offset=rng_base)[0, 0]
    assert torch.equal(keep.bool(), ref), "queries x keys tile differs from the reference"
    assert torch.equal(keep_t.bool(), ref.T), "keys x queries tile differs from the reference"
    sigma = math.sqrt(p * (1 - p) / ref.numel())
    assert abs(ref.float().mean().item() - (1 - p)) < 5 * sigma


def test_dropout_threshold_and_scale():
    """16-bit thresholds: t = round(p * 2^16), at most 2^16 - 1 (p < 1 keeps
    some scores); the scale is the exact inverse of the quantised keep
    probability, and the kernels receive exactly these two numbers."""
    assert [dropout_threshold(p) for p in (0.1, 0.5, 1 / 3, 0.25 + 0.5 / 65536)] == [6554, 32768, 21845, 16385]
    assert dropout_threshold(7e-6) == 0 and dropout_threshold(8e-6) == 1  # 2^-17 = 7.63e-6 rounds up
    assert dropout_threshold(1 - 1e-9) == 65535 and dropout_threshold(0.0) == 0
    for p in (1e-7, 1e-4, 0.1, 1 / 3, 0.9, 1 - 1e-9):
        t = dropout_threshold(p)
        assert abs(t / 65536 - p) <= 2 ** -17 or t == 65535, p
        assert dropout_scale(p) == 65536 / (65536 - t) and abs(dropout_scale(p) * (1 - t / 65536) - 1) < 1e-15
        _, scale, thresh, _ = KernelMods(dropout_p=p).scalars()
        assert (scale, thresh) == (dropout_scale(p), t)
    assert dropout_scale(1e-7) == 1.0


@pytest.mark.parametrize("p", [0.1, 0.7, 3e-4])
def test_dropout_keep_rate_and_independence(device, p):
    """Over 2^20 scores of the reference mask (the kernels' mask bit for bit,
    test above): the keep rate is 1 - t / 2^16, and so is the joint keep rate
    of each pair of scores that share a Philox call (the two halves of one
    word: keys j, j ^ 1; two words: rows i, i ^ 8 and keys j, j ^ 8) squared,
    all within 4.5 sigma.  A 15-bit or shifted half, a signed compare or two
    decisions read from the same bits would fail."""
    seed = torch.tensor([2024], dtype=torch.int64, device=device)
    n_q, n_k = 512, 2048
    keep = ref_dropout_keep(seed, p, 1, 1, range(n_q), 0, n_k, n_q, n_k)[0, 0].double()
    q = 1 - dropout_threshold(p) / 65536
    for name, x, rate in [
        ("keep", keep, q),
        ("halves j, j^1", keep[:, 0::2] * keep[:, 1::2], q * q),
        ("words j, j^8", keep.view(n_q, -1, 2, 8)[:, :, 0] * keep.view(n_q, -1, 2, 8)[:, :, 1], q * q),
        ("words i, i^8", keep.view(-1, 2, 8, n_k)[:, 0] * keep.view(-1, 2, 8, n_k)[:, 1], q * q),
    ]:
        sigma = math.sqrt(rate * (1 - rate) / x.numel())
        assert abs(x.mean().item() - rate) < 4.5 * sigma, f"{name}: rate {x.mean().item():.6f}, expected {rate:.6f}"


def test_reference_dropout_keep_any_key_range(device):
    """reference.dropout_keep of keys [k0, k1) is that slice of the row's mask
    for any k0 (groups of 4 cut at either end), batches, heads and offsets."""
    seed = torch.tensor([42], dtype=torch.int64, device=device)
    rows, n_k = range(3, 9), 23
    full = ref_dropout_keep(seed, 0.5, 2, 3, rows, 0, n_k, 10, n_k, row0=1, offset=7)
    assert full.shape == (2, 3, 6, n_k)
    for k0, k1 in [(0, 4), (1, 2), (3, 9), (5, 23), (22, 23), (7, 7)]:
        part = ref_dropout_keep(seed, 0.5, 2, 3, rows, k0, k1, 10, n_k, row0=1, offset=7)
        assert torch.equal(part, full[..., k0:k1]), (k0, k1)


def _kernel_dropout_masks(lens_q, lens_k, h_q, h_kv, p, torch_seed, window, device, varlen):
    """The keep masks that the forward, the dK/dV and the dQ pass applied,
    read back exactly through the public API, per sequence (h_q, n_q, n_k),
    with the visibility mask of each sequence.

    Scores are all 0 (q = 0), so P = 1 / (visible keys of the row); with
    the keep scale r = dropout_scale(p) (1 / (1 - p) up to quantisation):
    Forward: V = identity over keys, so out[i, h, j] = keep * P * r.
    dK/dV: dO = identity over (group member, query), so dV[j, g * Nq + i] of
    KV head h // G is (query head h's) keep * P * r.
    dQ: K = identity over keys, V = dO = ones (width c), scale 1, so
    dQ[i, j] = dS_ij = P (keep * c * r - delta_i), delta_i = dO_i . O_i:
    keep = (dS / P + delta) / (c r), an exact 0 or 1 up to rounding."""
    group, b = h_q // h_kv, len(lens_q)
    mq, mk = max(lens_q), max(lens_k)
    d_v = max(mk, group * mq)
    shifts = [nk - nq for nq, nk in zip(lens_q, lens_k)]
    vis = [visible_mask(nq, nk, s, window, device) for nq, nk, s in zip(lens_q, lens_k, shifts)]

    def pack(x, lens):  # (B, max_n, H, D) -> dense as is, or packed rows (total, H, D)
        return torch.cat([x[i, :n] for i, n in enumerate(lens)]) if varlen else x

    def unpack(x, lens):  # inverse of pack, sequence by sequence: [(n, H, D)]
        if not varlen:
            return [x[i, :n] for i, n in enumerate(lens)]
        offs = [0] + torch.tensor(lens).cumsum(0).tolist()
        return [x[offs[i]:offs[i + 1]] for i in range(len(lens))]

    cu_q, cu_k = random_cu_seqlens(lens_q, device), random_cu_seqlens(lens_k, device)

    def call(q, k, v):
        torch.manual_seed(torch_seed)
        if varlen:
            return fat.flash_attn_varlen_func(q, k, v, cu_q, cu_k, mq, mk, dropout_p=p, softmax_scale=1.0,
                                              window_size=window)
        return fat.flash_attn_func(q, k, v, dropout_p=p, softmax_scale=1.0, window_size=window)

    assert varlen or (len(set(lens_q)) == 1 and len(set(lens_k)) == 1)
    eye_k = torch.eye(mk, device=device)[None, :, None, :]  # (1, mk, 1, mk): key j -> unit vector j
    # forward and dK/dV
    q = torch.zeros(b, mq, h_q, 16, device=device)
    k = torch.randn(b, mk, h_kv, 16, device=device)
    v = torch.zeros(b, mk, h_kv, d_v, device=device)
    v[..., :mk] = eye_k
    do = torch.zeros(b, mq, h_q, d_v, device=device)
    for h in range(h_q):
        do[:, :, h, (h % group) * mq:(h % group + 1) * mq] = torch.eye(mq, device=device)
    v = pack(v, lens_k).requires_grad_(True)
    out = call(pack(q, lens_q), pack(k, lens_k), v)
    (dv,) = torch.autograd.grad(out, v, pack(do, lens_q))
    fwd = [o[:, :, :nk].permute(1, 0, 2) != 0 for o, nk in zip(unpack(out, lens_q), lens_k)]
    dkdv = []
    for g, nq in zip(unpack(dv, lens_k), lens_q):  # g: (nk, h_kv, d_v)
        per_head = [g[:, h // group, (h % group) * mq:(h % group) * mq + nq].T for h in range(h_q)]
        dkdv.append(torch.stack(per_head) != 0)
    # dQ
    c = 16
    q = torch.zeros(b, mq, h_q, mk, device=device)
    k = eye_k.expand(b, mk, h_kv, mk).contiguous()
    v = torch.ones(b, mk, h_kv, c, device=device)
    q = pack(q, lens_q).requires_grad_(True)
    out = call(q, pack(k, lens_k), pack(v, lens_k))
    ones = torch.ones_like(out)
    (dq,) = torch.autograd.grad(out, q, ones)
    dqs = []
    for ds, o, nk, vm in zip(unpack(dq, lens_q), unpack(out.detach(), lens_q), lens_k, vis):
        ds = ds[:, :, :nk].permute(1, 0, 2)  # (h_q, nq, nk)
        delta = o.sum(-1).T[:, :, None]  # dO_i . O_i with dO = ones: (h_q, nq, 1)
        prob = (vm / vm.sum(-1, keepdim=True).clamp_min(1)).expand_as(ds)
        est = torch.where(vm, (ds / prob.clamp_min(1e-30) + delta) / (c * dropout_scale(p)), 0.0)
        assert torch.all((est - est.round()).abs() < 0.05), "dQ does not decode to a 0/1 mask"
        dqs.append(est.round() == 1)
    return fwd, dkdv, dqs, vis


@pytest.mark.parametrize("case", ["ragged_gqa", "window", "chunked", "varlen"])
def test_dropout_kernel_masks_exact(device, path, case, monkeypatch):
    """The masks the forward, dK/dV and dQ passes apply are exactly the
    testing hook's (reference.dropout_keep_mask / varlen_dropout_keep_mask)
    on every visible score: ragged lengths (key tiles past Nk, Nk not a
    multiple of 4), GQA, a sliding window (blockwise key ranges that start
    mid-group), batches launched in chunks, packed sequences."""
    p, ts = 0.3, 21
    window, varlen = (-1, -1), case == "varlen"
    if case == "ragged_gqa":  # (keys: past a 64-key tile on the GPU; three of the interpreter's 16)
        lens_q, lens_k, h_q, h_kv = [45, 45], [70, 70] if device.type == "cuda" else [38, 38], 4, 2
    elif case == "window":
        lens_q, lens_k, h_q, h_kv, window = [37], [50], 2, 1, (6, 3)
    elif case == "chunked":
        lens_q, lens_k, h_q, h_kv = [20] * 3, [27] * 3, 2, 2
        monkeypatch.setattr(ops, "MAX_GRID_Y", h_q)  # one batch entry per launch
    else:
        lens_q, lens_k, h_q, h_kv = [25, 0, 19], [31, 12, 22], 2, 1
    masks = _kernel_dropout_masks(lens_q, lens_k, h_q, h_kv, p, ts, window, device, varlen)
    if varlen:
        cu_q, cu_k = random_cu_seqlens(lens_q, device), random_cu_seqlens(lens_k, device)
        refs = varlen_dropout_masks(ts, p, h_q, cu_q, cu_k, max(lens_k), device)
    else:
        refs = list(dropout_mask(ts, p, len(lens_q), h_q, lens_q[0], lens_k[0], device))
    seen = 0
    for s, (ref, vis) in enumerate(zip(refs, masks[3])):
        for name, got in zip(("forward", "dK/dV", "dQ"), (m[s] for m in masks[:3])):
            assert got.shape == ref.shape, f"{name}, sequence {s}: shape {tuple(got.shape)}"
            bad = (got != ref) & vis
            assert not bad.any(), f"{name}, sequence {s}: {int(bad.sum())} scores differ from the hook's mask"
        seen += int(vis.sum()) * h_q
    assert seen > 500


@pytest.mark.parametrize("dtype,causal,p", [
    (torch.float16, True, 0.17),
    (torch.float32, False, 1 / 3),  # scale 2^16 / 43691, 2.5e-5 from 1 / (1 - p): float32 sees it
])
def test_dropout_same_mask_as_reference(device, path, dtype, causal, p):
    """Forward and gradients equal the reference computed with the mask the
    call used (regenerated in the backward: dq, dk, dv match too); two batch
    entries, so a mask repeated across the batch fails."""
    q, k, v = make_qkv(2, 45, 70, 4, 2, 32, dtype, device, requires_grad=False)
    check_flash(q, k, v, causal=causal, dropout=(p, 1234))


def test_dropout_pattern_and_keep_rate(device, path):
    """return_attn_probs=True returns P with the dropped entries negated
    (flash-attn's encoding); its signs are the testing hook's mask, and the
    keep rate is 1 - p (quantised: 1 - t / 2^16) within 4 standard deviations."""
    b, n_q, n_k, h, p = 2, 64, 96, 2, 0.3
    q, k, v = make_qkv(b, n_q, n_k, h, h, 16, torch.float32, device, requires_grad=False)
    torch.manual_seed(7)
    out, lse, pattern = fat.flash_attn_func(q, k, v, dropout_p=p, return_attn_probs=True)
    keep = dropout_mask(7, p, b, h, n_q, n_k, device)
    assert pattern.shape == (b, h, n_q, n_k)
    assert torch.equal(pattern < 0, ~keep), "pattern signs differ from the dropout mask"
    ref_out, ref_lse = flash_attention_ref(q, k, v, False)
    assert_close("|pattern| = P", pattern.abs(), torch.softmax(
        (q.double().transpose(1, 2) @ k.double().permute(0, 2, 3, 1)) / 4.0, -1), atol=1e-6)
    assert_close("lse (dropout leaves it unchanged)", lse, ref_lse, atol=1e-5)
    rate, n, q_keep = keep.float().mean().item(), keep.numel(), 1 - dropout_threshold(p) / 65536
    sigma = math.sqrt(q_keep * (1 - q_keep) / n)
    assert abs(rate - q_keep) < 4 * sigma, f"keep rate {rate:.4f}, expected {q_keep} +- {4 * sigma:.4f}"


def test_dropout_unbiased(device):
    """E[out] over seeds is the attention without dropout (kept probabilities
    are scaled by the inverse keep probability dropout_scale(p)): the mean of
    100 draws is within 4.5 standard errors of it, elementwise."""
    q, k, v = make_qkv(1, 8, 16, 1, 1, 16, torch.float32, device, requires_grad=False)
    p, draws = 0.4, 100
    outs = torch.stack([fat.flash_attn_func(q, k, v, dropout_p=p) for _ in range(draws)]).double()
    exact, _ = flash_attention_ref(q, k, v, False)
    stderr = outs.std(0) / math.sqrt(draws)
    z = ((outs.mean(0) - exact).abs() / stderr).max().item()
    assert z < 4.5, f"mean of {draws} dropout draws is {z:.1f} standard errors from the exact output"


def test_dropout_tiny_p(device, path):
    """A p whose 16-bit threshold rounds to 0 (p < 2^-17) keeps every score
    with scale 1: the output and gradients are those without dropout up to
    float32 rounding (the variant kernels round a few ulps differently; one
    dropped score would move a row by ~1/40, a scale of 1 / (1 - p) by 5e-6);
    the smallest p that drops (threshold 1) matches the reference with the
    hook's mask."""
    q, k, v = make_qkv(1, 40, 40, 2, 2, 16, torch.float32, device, requires_grad=True)
    runs = []
    for p in (5e-6, 0.0):
        torch.manual_seed(3)
        out = fat.flash_attn_func(q, k, v, dropout_p=p, causal=True)
        runs.append((out,) + torch.autograd.grad(out.sum(), (q, k, v)))
    for name, a, b in zip(("out", "dq", "dk", "dv"), *runs):
        torch.testing.assert_close(a, b, rtol=2e-7, atol=1e-6, msg=f"{name}: p = 5e-6 (threshold 0) "
                                   "differs from no dropout")
    check_flash(q.detach(), k.detach(), v.detach(), causal=True, dropout=(1e-5, 4))


def test_dropout_reproducible(device, path):
    q, k, v = make_qkv(1, 30, 40, 2, 2, 16, torch.float16, device, requires_grad=True)
    runs = []
    for seed in (5, 5, 6):
        torch.manual_seed(seed)
        out = fat.flash_attn_func(q, k, v, dropout_p=0.2, causal=True)
        runs.append((out,) + torch.autograd.grad(out.float().sum(), (q, k, v)))
    for name, a, b in zip(("out", "dq", "dk", "dv"), runs[0], runs[1]):
        assert torch.equal(a, b), f"{name} differs for the same torch.manual_seed"
    assert not torch.equal(runs[0][0], runs[2][0]), "another seed must give another mask"


def test_dropout_varlen(device, path):
    lens_q, lens_k = [25, 0, 40], [31, 12, 40]
    cu_q, cu_k = random_cu_seqlens(lens_q, device), random_cu_seqlens(lens_k, device)
    q = rand((sum(lens_q), 2, 16), torch.float16, device)
    k = rand((sum(lens_k), 2, 16), torch.float16, device)
    v = rand((sum(lens_k), 2, 16), torch.float16, device)
    p = 0.25
    masks = varlen_dropout_masks(3, p, 2, cu_q, cu_k, 40, device)

    def ours(q_, k_, v_):
        torch.manual_seed(3)
        return fat.flash_attn_varlen_func(q_, k_, v_, cu_q, cu_k, 40, 40, dropout_p=p, causal=True,
                                          return_lse=True)

    def ref(q_, k_, v_, dtype):
        return varlen_attention_ref(q_, k_, v_, cu_q, cu_k, True, dtype=dtype, dropout_p=p,
                                    dropout_masks=masks)

    compare(ours, ref, [q, k, v], "qkv", torch.float16)


def test_dropout_batch_chunks(device, monkeypatch):
    """Batches launched in chunks (grid-axis cap) draw the same mask as one launch."""
    q, k, v = make_qkv(3, 20, 24, 4, 2, 16, torch.float16, device, requires_grad=True)
    torch.manual_seed(11)
    whole = fat.flash_attn_func(q, k, v, dropout_p=0.3)
    g_whole = torch.autograd.grad(whole.float().sum(), (q, k, v))
    monkeypatch.setattr(ops, "MAX_GRID_Y", 4)  # 4 heads -> 1 batch entry per launch
    torch.manual_seed(11)
    chunked = fat.flash_attn_func(q, k, v, dropout_p=0.3)
    g_chunked = torch.autograd.grad(chunked.float().sum(), (q, k, v))
    for name, a, b in zip(("out", "dq", "dk", "dv"), (whole,) + g_whole, (chunked,) + g_chunked):
        assert torch.equal(a, b), f"{name}: chunked launch differs"


def test_dropout_without_probs_returns_none(device):
    q, k, v = make_qkv(1, 8, 8, 1, 1, 16, torch.float16, device, requires_grad=False)
    assert fat.flash_attn_func(q, k, v, return_attn_probs=True)[2] is None


# ---------------------------------------------------------------------------
# SDPA masks and biases
# ---------------------------------------------------------------------------

def sdpa_compare(q, k, v, mask, dropout=None, gqa=False, mask_grad=False):
    """Ours against torch's SDPA (float64 and in-dtype); a float mask that
    requires grad is differentiated too."""
    dtype = q.dtype
    inputs = [q, k, v] + ([mask] if mask_grad else [])

    def ours(*a):
        m = a[3] if mask_grad else mask
        if dropout is not None:
            torch.manual_seed(dropout[1])
        out = fat.scaled_dot_product_attention(*a[:3], attn_mask=m, enable_gqa=gqa,
                                               dropout_p=0.0 if dropout is None else dropout[0])
        return out, out.new_zeros(())  # SDPA returns no LSE

    keep = None
    if dropout is not None:
        keep = dropout_mask(dropout[1], dropout[0], q.shape[0], q.shape[1], q.shape[2], k.shape[2],
                            q.device)

    def ref(*a, dtype):
        m = a[3] if mask_grad else (mask if mask is None or mask.dtype == torch.bool else mask.to(dtype))
        if keep is None:
            out = torch.nn.functional.scaled_dot_product_attention(*a[:3], attn_mask=m, enable_gqa=gqa)
        else:
            qh, kh, vh = a[:3]
            out, _ = attention_ref(qh, kh, vh, shift=0, attn_mask=m, dropout_mask=keep,
                                                 dropout_p=dropout[0])
        return out, out.new_zeros(())

    return compare(ours, ref, inputs, ["q", "k", "v", "mask"], dtype, with_lse=False)


@pytest.mark.parametrize("shape,dtype", [
    ("nq nk", torch.float16),
    ("b 1 1 nk", torch.bfloat16),     # key padding mask
    ("1 h nq nk", torch.float32),
    ("b h nq nk", torch.float16),
])
def test_sdpa_bool_mask(device, path, shape, dtype):
    b, h, n_q, n_k = 2, 2, 40, 56
    sizes = {"b": b, "h": h, "nq": n_q, "nk": n_k, "1": 1}
    q = rand((b, h, n_q, 32), dtype, device)
    k, v = (rand((b, 1, n_k, 32), dtype, device) for _ in range(2))
    mask = torch.rand([sizes[s] for s in shape.split()], device=device) > 0.3
    sdpa_compare(q, k, v, mask, gqa=True)


@pytest.mark.parametrize("shape,dtype", [
    ("b h nq nk", torch.float32),
    ("1 h 1 nk", torch.bfloat16),    # gradient summed over the batch and the query rows
    ("nq nk", torch.float16),
])
def test_sdpa_float_bias_with_grad(device, path, shape, dtype):
    b, h, n_q, n_k = 2, 2, 40, 57
    sizes = {"b": b, "h": h, "nq": n_q, "nk": n_k, "1": 1}
    q, k, v = (rand((b, h, n, 32), dtype, device) for n in (n_q, n_k, n_k))
    bias = rand([sizes[s] for s in shape.split()], dtype, device, scale=2.0)
    sdpa_compare(q, k, v, bias, mask_grad=True)


def test_sdpa_mask_never_expanded(device, monkeypatch):
    """A mask broadcast over batch and heads reaches the kernels with stride 0,
    and an expanded view (stride 0, no memory) is accepted as is."""
    b, h, n = 2, 3, 24
    q, k, v = (rand((b, h, n, 16), torch.float16, device) for _ in range(3))
    base = torch.rand(1, 1, n, n, device=device) > 0.5
    seen = []
    real = ops._attention_fwd_impl

    def spy(*args):
        seen.append(args[14])  # attn_bias
        return real(*args)

    monkeypatch.setattr(ops, "_attention_fwd_impl", spy)
    out_a = fat.scaled_dot_product_attention(q, k, v, attn_mask=base)
    out_b = fat.scaled_dot_product_attention(q, k, v, attn_mask=base.expand(b, h, n, n))
    assert seen[0].shape == (1, 1, n, n) and seen[0].data_ptr() == base.data_ptr()
    assert seen[1].stride()[:2] == (0, 0) and seen[1].data_ptr() == base.data_ptr()
    assert torch.equal(out_a, out_b)


@pytest.mark.parametrize("kind", ["bool", "-inf"])
def test_sdpa_fully_masked_rows_are_zero(device, path, kind):
    """Rows whose mask removes every key output 0 and pass zero gradients, as
    PyTorch's SDPA does today (not NaN)."""
    q, k, v = (rand((2, 2, 30, 16), torch.float32, device, requires_grad=True) for _ in range(3))
    if kind == "bool":
        mask = torch.rand(2, 1, 30, 30, device=device) > 0.5
        mask[:, :, 4] = False
        mask[1, :, 17] = False
    else:
        mask = torch.zeros(2, 1, 30, 30, device=device)
        mask[:, :, 4] = float("-inf")
        mask[1, :, 17] = float("-inf")
    out = fat.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                           attn_mask=mask if kind == "bool" else mask.double())
    assert torch.equal(ref[:, :, 4], torch.zeros_like(ref[:, :, 4])), "PyTorch's semantics changed"
    assert torch.equal(out[:, :, 4], torch.zeros_like(out[:, :, 4]))
    assert torch.equal(out[1, :, 17], torch.zeros_like(out[1, :, 17]))
    assert_close("out", out, ref, atol=1e-5)
    dq, dk, dv = torch.autograd.grad(out.sum(), (q, k, v))
    for name, g in (("dq", dq), ("dk", dk), ("dv", dv)):
        assert torch.isfinite(g).all(), f"{name} has NaN/inf"
    assert torch.equal(dq[:, :, 4], torch.zeros_like(dq[:, :, 4]))


def test_sdpa_finfo_min_rows_attend_uniformly(device, path):
    """A row masked with finfo.min (finite, as Hugging Face builds masks) is
    not empty: PyTorch attends it uniformly, and so do we."""
    q, k, v = (rand((1, 2, 20, 16), torch.float32, device) for _ in range(3))
    mask = torch.zeros(1, 1, 20, 20, device=device)
    mask[..., 3, :] = torch.finfo(torch.float32).min
    mask[..., 5, 7:] = torch.finfo(torch.float32).min
    out = fat.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                           attn_mask=mask.double())
    assert_close("out", out, ref, atol=1e-5)


def test_sdpa_extreme_finite_mask_values_as_pytorch(device, path):
    """Finite mask values at the ends of float32 keep their meaning, as in
    PyTorch's math SDPA: a key at finfo.max takes its row alone (before: the
    base-2 scaling overflowed to +inf and the row was NaN), and values below
    -6.9e37 stay ordered (before: all were clamped to one value, so a row of
    finfo.min and finfo.min / 2 attended every key instead of the latter)."""
    f32 = torch.finfo(torch.float32)
    q, k, v = (rand((1, 2, 6, 16), torch.float32, device).requires_grad_() for _ in range(3))
    mask = 0.5 * rand((1, 1, 6, 6), torch.float32, device)
    mask[..., 1, 2] = f32.max
    mask[..., 2, :] = f32.min
    mask[..., 2, 4:] = f32.min / 2
    mask[..., 3, :3] = -1e38
    mask[..., 3, 3:] = -2e38
    do = rand((1, 2, 6, 16), torch.float32, device)
    out = fat.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    grads = torch.autograd.grad(out, (q, k, v), do)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        ref_grads = torch.autograd.grad(ref, (q, k, v), do)
    assert torch.isfinite(out).all(), "a finite mask gave a non-finite output"
    assert_close("out", out, ref, atol=1e-5)
    for name, g, r in zip(("dq", "dk", "dv"), grads, ref_grads):
        assert_close(name, g, r, atol=1e-5)


def _huge_rows_mask(b, n_q, n_k, device):
    """A moderate float mask with rows of one huge finite value: -1e9,
    finfo(float32).min, and a row mixing -1e9 and -2e9 (PyTorch attends its
    -1e9 keys only), in each batch entry at other rows."""
    mask = 0.5 * rand((b, 1, n_q, n_k), torch.float32, device)
    for i in range(b):
        mask[i, :, 3 + i] = -1e9
        mask[i, :, 5 + i] = torch.finfo(torch.float32).min
        mask[i, :, 9 + i, :n_k // 3] = -1e9
        mask[i, :, 9 + i, n_k // 3:] = -2e9
    mask[..., 12, 7:] = torch.finfo(torch.float32).min  # (an ordinary row: finfo.min masks some keys)
    return mask


@pytest.mark.parametrize("form", ["dbias", "separate", "one_launch", "chunked", "hooks"])
def test_sdpa_huge_finite_mask_rows_exact_gradients(device, path, form, monkeypatch):
    """Rows that a float mask fills with one huge finite value (-1e9,
    finfo.min; or -1e9 and -2e9: the -1e9 keys only) attend uniformly, and
    their gradients dq, dk, dv and d(mask) are PyTorch's (float32 math SDPA),
    not seqlen_k times too large: the float32 LSE m + log2(l) rounds to m at
    such scores, and the backward takes its residual (the compensated LSE,
    ops.py module doc) from the forward.  Every backward form a float mask
    reaches: with the mask's gradient (dK/dV and dQ kernels), without it
    (separate kernels, one launch), in batch chunks, and through
    saved-tensor hooks that copy the LSE into another layout."""
    if path == "blockwise" and form not in ("dbias", "separate", "hooks"):
        pytest.skip("kernel forms")
    from flashattn_triton.kernels import bwd
    monkeypatch.setattr(bwd, "ONE_LAUNCH", form == "one_launch")
    if form == "chunked":
        monkeypatch.setattr(ops, "MAX_GRID_Y", 2)  # one batch entry per launch
    b, h, n_q, n_k = 2, 2, 20, 24
    q = rand((b, h, n_q, 16), torch.float32, device)
    k, v = (rand((b, h, n_k, 16), torch.float32, device) for _ in range(2))
    mask = _huge_rows_mask(b, n_q, n_k, device)
    do = rand((b, h, n_q, 16), torch.float32, device)
    mask_grad = form in ("dbias", "chunked", "hooks")

    def run(fn, hooks=False):
        ins = [t.clone().requires_grad_(i < 3 or mask_grad) for i, t in enumerate((q, k, v, mask))]
        if hooks:  # the compensated LSE (B, Hq, 2, Nq) comes back in another layout
            def pack(t):
                return t.transpose(-1, -2).contiguous().transpose(-1, -2) if t.shape == (b, h, 2, n_q) else t
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out = fn(*ins[:3], attn_mask=ins[3])
        else:
            out = fn(*ins[:3], attn_mask=ins[3])
        grads = torch.autograd.grad(out, ins if mask_grad else ins[:3], do)
        return (out,) + grads

    got = run(fat.scaled_dot_product_attention, hooks=form == "hooks")
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        want = run(torch.nn.functional.scaled_dot_product_attention)
    # PyTorch's semantics: the -1e9 / finfo.min rows attend uniformly
    uniform = want[0][0, :, 3] - v[0].mean(-2)
    assert uniform.abs().max() < 1e-5, "PyTorch's semantics changed"
    for name, g, r in zip(("out", "dq", "dk", "dv", "dmask"), got, want):
        assert_close(name, g, r.double(), atol=2e-5 * max(1.0, r.abs().max().item()))


def test_sdpa_huge_finite_mask_rows_with_sinks(device, path):
    """With sinks (the Transformers integration's _sdpa(..., sinks=...)):
    a head whose sink is -1e9 shares the -1e9 rows evenly between its keys and
    the sink, and d sinks, dq, dk, dv and d(mask) match a float64 reference of
    PyTorch's rounding (scores and mask added in float32); the other head's
    moderate sink takes those rows whole."""
    from flashattn_triton.api import _sdpa
    b, h, n_q, n_k = 2, 2, 20, 24
    scale = 0.25
    q = rand((b, h, n_q, 16), torch.float32, device)
    k, v = (rand((b, h, n_k, 16), torch.float32, device) for _ in range(2))
    mask = _huge_rows_mask(b, n_q, n_k, device)
    sinks = torch.tensor([0.5, -1e9], device=device)
    do = rand((b, h, n_q, 16), torch.float32, device)
    ins = [t.clone().requires_grad_(True) for t in (q, k, v, mask, sinks)]
    out = _sdpa(*ins[:4], 0.0, False, None, False, sinks=ins[4])
    got = (out,) + torch.autograd.grad(out, ins, do)

    # reference: logits rounded as PyTorch's float32 math, the rest in float64
    s = ((q @ k.transpose(-1, -2)) * scale + mask).double()
    logits = torch.cat([s, sinks.double()[None, :, None, None].expand(b, h, n_q, 1)], -1)
    p_all = torch.softmax(logits, -1)
    p, p_sink = p_all[..., :n_k], p_all[..., n_k]
    qd, kd, vd, dod = q.double(), k.double(), v.double(), do.double()
    o = p @ vd
    dp = dod @ vd.transpose(-1, -2)
    delta = (dod * o).sum(-1)
    ds = p * (dp - delta[..., None])
    want = (o, scale * ds @ kd, scale * ds.transpose(-1, -2) @ qd, p.transpose(-1, -2) @ dod,
            ds.sum(1, keepdim=True), -(p_sink * delta).sum((0, 2)))
    assert abs(p_sink[0, 1, 3].item() - 1 / (n_k + 1)) < 1e-12, "reference: -1e9 row and sink not even"
    for name, g, r in zip(("out", "dq", "dk", "dv", "dmask", "dsinks"), got, want):
        assert_close(name, g, r, atol=2e-5 * max(1.0, r.abs().max().item()))


def test_sdpa_nan_in_float_mask_gives_nan_rows(device, path):
    """A NaN in an additive mask makes its row NaN, as in PyTorch (a NaN
    bias is a bug upstream; it is not silently read as a mask), and leaves
    the other rows as they are."""
    q, k, v = (rand((1, 2, 20, 16), torch.float32, device) for _ in range(3))
    mask = torch.randn(1, 1, 20, 20, device=device)
    mask[..., 3, 5] = float("nan")
    mask[..., 9, :] = float("nan")
    out = fat.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                           attn_mask=mask.double())
    nan_rows = torch.isnan(ref).any(-1)
    assert nan_rows[..., [3, 9]].all() and nan_rows.sum() == 4, "PyTorch's semantics changed"
    assert torch.equal(torch.isnan(out).any(-1), nan_rows), \
        f"NaN rows {torch.isnan(out).any(-1).nonzero().tolist()}, PyTorch's {nan_rows.nonzero().tolist()}"
    clean = [i for i in range(20) if i not in (3, 9)]
    assert_close("out (rows without NaN)", out[:, :, clean], ref[:, :, clean], atol=1e-5)


def test_sdpa_mask_and_dropout(device, path):
    q = rand((2, 2, 40, 16), torch.float16, device)
    k, v = (rand((2, 2, 52, 16), torch.float16, device) for _ in range(2))
    mask = torch.rand(2, 1, 40, 52, device=device) > 0.2
    sdpa_compare(q, k, v, mask, dropout=(0.2, 21))


@pytest.mark.parametrize("rank", [3, 5])
def test_sdpa_mask_other_ranks(device, rank):
    """3-D (batch, seqlen, d) inputs take a (batch, nq, nk) mask; 5-D inputs
    a mask broadcast over the leading dims."""
    if rank == 3:
        q, k, v = (rand((3, n, 16), torch.float32, device) for n in (20, 30, 30))
        mask = torch.rand(3, 20, 30, device=device) > 0.3
    else:
        q, k, v = (rand((2, 3, 2, n, 16), torch.float32, device) for n in (20, 30, 30))
        mask = torch.rand(3, 1, 20, 30, device=device) > 0.3
    out = fat.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                           attn_mask=mask)
    assert_close("out", out, ref, atol=1e-5)


# ---------------------------------------------------------------------------
# Head dims: value head dim != query head dim, up to 512
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("d,d_v,dtype", [
    (48, 16, torch.float16),      # MLA-like d > d_v (192/128 at scale)
    (24, 64, torch.bfloat16),     # d_v > d
    (512, 512, torch.float16),    # Gemma-style global layers
    (320, 192, torch.float32),    # pads to 512 / 256
])
def test_head_dims(device, path, d, d_v, dtype):
    q, k, v = make_qkv(1, 33, 47, 2, 1, d, dtype, device, requires_grad=False, d_v=d_v)
    check_flash(q, k, v, causal=True)


# ---------------------------------------------------------------------------
# Combinations
# ---------------------------------------------------------------------------

def test_causal_window_gqa(device, path):
    q, k, v = make_qkv(1, 60, 75, 6, 2, 32, torch.bfloat16, device, requires_grad=False)
    check_flash(q, k, v, causal=True, window=(17, -1))


@pytest.mark.parametrize("big", [2 ** 30, 2 ** 31 - 1, 2 ** 63 - 1, 2 ** 70])
def test_window_sentinels_mean_unbounded(device, path, big):
    """A window side past any sequence (2**31 - 1 and sys.maxsize are common
    "infinite" sentinels) is the unbounded side: the same results as -1 in
    every entry, not a 32-bit wrap-around that masks every key."""
    q, k, v = make_qkv(1, 19, 13, 2, 1, 16, torch.float16, device, requires_grad=False)
    cu = torch.tensor([0, 6, 13], dtype=torch.int32, device=device)
    for causal, window, same in ((False, (big, big), (-1, -1)), (False, (-1, big), (-1, -1)),
                                 (True, (big, 0), (-1, -1)), (False, (big, 3), (-1, 3))):
        got = fat.flash_attn_func(q, k, v, causal=causal, window_size=window)
        want = fat.flash_attn_func(q, k, v, causal=causal, window_size=same)
        assert torch.equal(got, want), f"flash_attn_func window {window} causal={causal}"
        got = fat.flash_attn_varlen_func(k[0], k[0], v[0], cu, cu, 7, 7, causal=causal, window_size=window)
        want = fat.flash_attn_varlen_func(k[0], k[0], v[0], cu, cu, 7, 7, causal=causal, window_size=same)
        assert torch.equal(got, want), f"flash_attn_varlen_func window {window} causal={causal}"
        got = fat.flash_attn_with_kvcache(q[:, :3], k, v, cache_seqlens=11, causal=causal, window_size=window)
        want = fat.flash_attn_with_kvcache(q[:, :3], k, v, cache_seqlens=11, causal=causal, window_size=same)
        assert torch.equal(got, want), f"flash_attn_with_kvcache window {window} causal={causal}"
    ref = flash_attention_ref(q, k, v, False)[0]
    assert_close("out, window (big, big)", fat.flash_attn_func(q, k, v, window_size=(big, big)), ref)


def test_alibi_causal_softcap(device, path):
    q, k, v = make_qkv(1, 64, 64, 4, 4, 32, torch.float16, device, scale=2.0, requires_grad=False)
    check_flash(q, k, v, causal=True, softcap=10.0, alibi_slopes=alibi_slopes(4, device))


def test_softcap_dropout(device, path):
    q, k, v = make_qkv(1, 40, 56, 4, 2, 32, torch.float32, device, scale=2.0, requires_grad=False)
    check_flash(q, k, v, softcap=5.0, dropout=(0.2, 99))


def test_sinks_window(device, path):
    q, k, v = make_qkv(1, 80, 80, 4, 2, 32, torch.bfloat16, device, requires_grad=False)
    check_flash(q, k, v, causal=True, window=(20, 0), extras={"sinks": torch.randn(4, device=device)})


def test_mask_gqa_dv(device, path):
    b, h, h_kv, n_q, n_k = 2, 4, 2, 40, 50
    q = rand((b, h, n_q, 32), torch.float16, device)
    k = rand((b, h_kv, n_k, 32), torch.float16, device)
    v = rand((b, h_kv, n_k, 16), torch.float16, device)
    bias = rand((b, 1, n_q, n_k), torch.float16, device)
    sdpa_compare(q, k, v, bias, gqa=True, mask_grad=True)


def test_everything_at_once(device, path):
    """softcap + ALiBi + sinks + dropout + window + GQA + d_v != d in one call."""
    q, k, v = make_qkv(2, 50, 66, 4, 2, 32, torch.float32, device, requires_grad=False, d_v=16)
    check_flash(q, k, v, causal=True, window=(25, -1), softcap=8.0,
                alibi_slopes=torch.rand(2, 4, device=device), dropout=(0.1, 5),
                extras={"sinks": torch.randn(4, device=device)})


# ---------------------------------------------------------------------------
# Op layer: opcheck and torch.compile with the variants
# ---------------------------------------------------------------------------

def test_opcheck_with_variants(device):
    """Schema, fake implementations and autograd registration with every
    variant on (the plain ops are checked in test_ops.py)."""
    q, k, v = make_qkv(1, 9, 13, 4, 2, 16, torch.float16, device)
    sinks = torch.randn(4, device=device, requires_grad=True)
    bias = torch.randn(1, 1, 9, 13, device=device, dtype=torch.float16, requires_grad=True)
    args = (q, k, v, None, None, 0, 0, 0.25, 5, 0, True, 4.0, torch.rand(4, device=device), sinks,
            bias, 0.1, draw_dropout_seed(device))
    torch.library.opcheck(ops.attention_fwd, args)
    out, lse = ops.attention_fwd(*args)
    plain = tuple(t.detach() if isinstance(t, torch.Tensor) else t for t in args)
    bwd_args = ((torch.randn_like(out), *plain[:3], out.detach(), lse.detach(), torch.randn_like(lse))
                + plain[3:] + (True,))
    torch.library.opcheck(ops.attention_bwd, bwd_args)


def test_compile_fullgraph_with_variants(device):
    """softcap, ALiBi, sinks (learned) and a learned SDPA bias under
    torch.compile(fullgraph=True): forward and gradients equal eager."""
    import os
    backend = os.environ.get("FLASHATTN_TRITON_TEST_COMPILE_BACKEND",
                             "inductor" if torch.cuda.is_available() else "aot_eager")
    slopes = alibi_slopes(4, device)

    def f(q, k, v, sinks, bias):
        a = fat.flash_attn_func(q, k, v, causal=True, softcap=20.0, alibi_slopes=slopes, sinks=sinks)
        b = fat.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             attn_mask=bias, enable_gqa=True)
        return a + b.transpose(1, 2)

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    q, k, v = make_qkv(2, 24, 24, 4, 2, 16, torch.float32, device)
    sinks = torch.randn(4, device=device, requires_grad=True)
    bias = torch.randn(1, 4, 24, 24, device=device, requires_grad=True)
    inputs = (q, k, v, sinks, bias)
    want = f(*inputs)
    g_want = torch.autograd.grad(want.square().sum(), inputs)
    got = compiled(*inputs)
    g_got = torch.autograd.grad(got.square().sum(), inputs)
    assert_close("out", got, want.double(), atol=1e-5)
    for name, g, r in zip(("dq", "dk", "dv", "dsinks", "dbias"), g_got, g_want):
        assert_close(name, g, r.double(), atol=1e-4 * max(1.0, r.abs().max().item()))
    # dropout: the seed is drawn inside the graph (torch.randint), no graph break
    drop = torch.compile(lambda q_, k_, v_: fat.flash_attn_func(q_, k_, v_, dropout_p=0.5), fullgraph=True,
                         backend=backend)
    out = drop(q, k, v)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(q.grad).all()
    assert not torch.equal(out, fat.flash_attn_func(q, k, v)), "dropout had no effect under compile"


def test_compile_dynamic_with_module_tensors(device):
    """torch.compile(dynamic=True) keeps a module's parameter and buffer shapes
    static while q's sizes are symbolic: a learned (H, N, N) bias and ALiBi
    slopes in a buffer must pass the shape checks (a tuple `in` test said
    "not broadcastable" / "must have shape" there) and equal eager."""
    import os
    backend = os.environ.get("FLASHATTN_TRITON_TEST_COMPILE_BACKEND",
                             "inductor" if torch.cuda.is_available() else "aot_eager")

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = torch.nn.Parameter(torch.randn(4, 12, 12, device=device))
            self.register_buffer("slopes", alibi_slopes(4, device))

        def forward(self, q, k, v, k_cache, v_cache):
            a = fat.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 attn_mask=self.bias, enable_gqa=True).transpose(1, 2)
            b = fat.flash_attn_func(q, k, v, causal=True, alibi_slopes=self.slopes)
            c = fat.flash_attn_with_kvcache(q[:, -1:].detach(), k_cache, v_cache, cache_seqlens=7,
                                            alibi_slopes=self.slopes)
            return a + b, c

    torch._dynamo.reset()
    layer = Layer()
    compiled = torch.compile(layer, fullgraph=True, dynamic=True, backend=backend)
    q, k, v = make_qkv(2, 12, 12, 4, 2, 16, torch.float32, device)
    cache = make_qkv(2, 9, 9, 2, 2, 16, torch.float32, device, requires_grad=False)[1:]
    (want, want_c), (got, got_c) = layer(q, k, v, *cache), compiled(q, k, v, *cache)
    assert_close("out", got, want.double(), atol=1e-5)
    assert_close("kvcache out", got_c, want_c.double(), atol=1e-5)
    g_want = torch.autograd.grad(want.square().sum(), (q, layer.bias))
    g_got = torch.autograd.grad(got.square().sum(), (q, layer.bias))
    for name, g, r in zip(("dq", "dbias"), g_got, g_want):
        assert_close(name, g, r.double(), atol=1e-4 * max(1.0, r.abs().max().item()))


# ---------------------------------------------------------------------------
# GPU sizes (FLASHATTN_TRITON_TEST_DEVICE=cuda)
# ---------------------------------------------------------------------------

GPU_CASES = [
    pytest.param(dict(softcap=30.0), id="softcap"),
    pytest.param(dict(alibi=True), id="alibi"),
    pytest.param(dict(sinks=True, window=(512, 0)), id="sinks+window"),
    pytest.param(dict(dropout=0.1), id="dropout"),
    pytest.param(dict(sinks=True, dropout=0.1), id="sinks+dropout"),  # the Hopper dropout backward
    pytest.param(dict(softcap=20.0, dropout=0.1, alibi=True, sinks=True), id="all"),
]


@pytest.mark.gpu
@pytest.mark.bigmem  # float64 reference: 3-4.5 GiB at its peak
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", GPU_CASES)
def test_gpu_variants(device, case, dtype):
    q, k, v = make_qkv(2, 1500, 1500, 16, 4, 128, dtype, device, requires_grad=False)
    kw = {}
    if "softcap" in case:
        kw["softcap"] = case["softcap"]
    if case.get("alibi"):
        kw["alibi_slopes"] = alibi_slopes(16, device)
    extras = {"sinks": torch.randn(16, device=device)} if case.get("sinks") else None
    dropout = (case["dropout"], 77) if "dropout" in case else None
    check_flash(q, k, v, causal=True, window=case.get("window", (-1, -1)), extras=extras,
                dropout=dropout, **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("d,d_v", [(512, 512), (192, 128), (256, 256)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gpu_head_dims(device, d, d_v, dtype):
    q, k, v = make_qkv(2, 1000, 1200, 8, 2, d, dtype, device, requires_grad=False, d_v=d_v)
    check_flash(q, k, v, causal=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_sdpa_mask(device, dtype):
    q = rand((2, 16, 1024, 128), dtype, device)
    k, v = (rand((2, 4, 1100, 128), dtype, device) for _ in range(2))
    mask = torch.rand(2, 1, 1024, 1100, device=device) > 0.1
    sdpa_compare(q, k, v, mask, gqa=True)
    bias = rand((1, 16, 1024, 1100), dtype, device)
    sdpa_compare(q, k, v, bias, gqa=True, mask_grad=True)


@pytest.mark.gpu
def test_gpu_dropout_cuda_graph_fresh_mask(device):
    """Under CUDA-graph capture the seed is drawn by the graph itself: each
    replay uses a new mask (a seed baked in at capture would repeat it)."""
    q, k, v = make_qkv(2, 512, 512, 8, 2, 64, torch.bfloat16, device)
    do = torch.randn(2, 512, 8, 64, device=device, dtype=torch.bfloat16)

    def step():
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        out = fat.flash_attn_func(*leaves, dropout_p=0.2, causal=True)
        return (out,) + torch.autograd.grad(out, leaves, do)

    graph, static = capture_graph(step)
    graph.replay()
    first = [t.clone() for t in static]
    graph.replay()
    torch.cuda.synchronize()
    for name, a, b in zip(("out", "dq", "dk", "dv"), first, static):
        assert torch.isfinite(b).all(), f"{name} not finite"
        assert not torch.equal(a, b), f"{name}: two replays used the same dropout mask"


@pytest.mark.gpu
@pytest.mark.bigmem  # the keep mask (its Philox words in int64) and the float64 reference: 2.2 GiB
def test_gpu_dropout_keep_rate(device):
    b, h, n = 2, 8, 2048
    q, k, v = make_qkv(b, n, n, h, h, 64, torch.bfloat16, device, requires_grad=False)
    torch.manual_seed(3)
    out = fat.flash_attn_func(q, k, v, dropout_p=0.1)
    keep = dropout_mask(3, 0.1, b, h, n, n, device)
    rate, q_keep = keep.float().mean().item(), 1 - dropout_threshold(0.1) / 65536
    assert abs(rate - q_keep) < 4 * math.sqrt(q_keep * (1 - q_keep) / keep.numel())
    ref, _ = flash_attention_ref(q, k, v, False, dropout_mask=keep, dropout_p=0.1)
    base, _ = flash_attention_ref(q, k, v, False, dtype=torch.bfloat16, dropout_mask=keep, dropout_p=0.1)
    assert_close("out", out, ref, base, 2.0, torch.bfloat16)
