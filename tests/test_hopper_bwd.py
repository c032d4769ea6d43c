"""The Hopper (Gluon, sm_90) backward: flashattn_triton/kernels/hopper/bwd.py.

Everything here launches the kernel, so it needs FLASHATTN_TRITON_TEST_DEVICE=cuda
on an sm_90 GPU with a Triton whose Gluon API the tier supports (else skipped);
on CPU only the declining path runs.  Gradients are compared with float64
autograd through the reference, with a tolerance of 3x the error of the same
reference in the input dtype (flashattn_triton.testing).
"""

import os

import pytest
import torch

from flashattn_triton.kernels import hopper
from flashattn_triton.reference import attention_ref
from flashattn_triton.testing import assert_close

from test_hopper import _hopper_gpu

needs_hopper = pytest.mark.skipif(bool(_hopper_gpu()), reason=_hopper_gpu() or "-")


def test_declines_cpu_tensors_and_writes_nothing():
    q = torch.randn(1, 2, 16, 64, dtype=torch.bfloat16)
    lse = torch.zeros(1, 2, 16)
    grads = [torch.zeros_like(q) for _ in range(3)]
    assert hopper.hopper_attention_backward(q, q, q, q, lse, lse, *grads, 0.125, None) is False
    assert not any(g.any() for g in grads)


def _padded(b, h, n, d, dtype, pad, fill=float("nan")):
    """(B, H, N, d) view of (B, H, N + pad, d) storage whose rows past N hold fill."""
    t = torch.full((b, h, n + pad, d), fill, device="cuda", dtype=dtype)
    t[:, :, :n] = torch.randn(b, h, n, d, device="cuda").to(dtype)
    return t[:, :, :n]


def _flash_view(b, h, n, d, dtype):
    """(B, H, N, d) view of (B, N, H, d) storage, as flash_attn_func passes it."""
    return torch.randn(b, n, h, d, device="cuda").to(dtype).transpose(1, 2)


def _reference_grads(q, k, v, do, scale, shift, dtype=None):
    """(dq, dk, dv) by autograd through attention_ref in float64 (dtype None) or in dtype."""
    leaves = [t.detach().to(dtype or torch.float64).requires_grad_() for t in (q, k, v)]
    o, _ = attention_ref(*leaves, scale, shift)
    o.backward(do.to(o.dtype))
    return [t.grad for t in leaves]


def _run(q, k, v, do, scale, shift, **overrides):
    """Forward (Hopper tier) for lse2 and O, delta in torch, then the Hopper backward."""
    b, hq, nq, d = q.shape
    o = torch.empty_like(q)
    lse = torch.full((b, hq, nq), float("nan"), device="cuda")
    assert hopper.hopper_attention_forward(q, k, v, o, lse, scale, shift)
    delta = (do.float() * o.float()).sum(-1)
    dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
    took = hopper.hopper_attention_backward(do, q, k, v, lse, delta, dq, dk, dv, scale, shift, **overrides)
    assert took, f"declined {overrides} (build errors: {hopper.bwd._BROKEN})"
    return dq, dk, dv


def _check(q, k, v, do, scale, shift, **overrides):
    got = _run(q, k, v, do, scale, shift, **overrides)
    ref = _reference_grads(q, k, v, do, scale, shift)
    low = _reference_grads(q, k, v, do, scale, shift, dtype=q.dtype)
    for name, g, r, lo in zip(("dq", "dk", "dv"), got, ref, low):
        assert_close(name, g, r, baseline=lo, factor=3.0, dtype=q.dtype)


CASES = [
    # b, hq, hkv, nq, nk, causal ("br" bottom-right, "tl" top-left), layout
    (2, 4, 4, 1000, 1000, None, "flash"),      # ragged N, batch > 1
    (2, 4, 4, 1000, 1000, "br", "flash"),
    (2, 8, 2, 333, 1201, "br", "flash"),       # GQA, Nq < Nk
    (2, 8, 2, 333, 1201, "tl", "padded"),      # NaN past N in every input
    (1, 4, 1, 700, 130, "br", "flash"),        # MQA, Nq > Nk: 570 rows see no key
    (3, 2, 2, 1, 517, "br", "flash"),          # a single query row
    (2, 6, 3, 515, 515, None, "padded"),
    (2, 4, 4, 128, 256, "br", "flash"),        # whole tiles
    (1, 2, 2, 77, 1000, None, "flash"),        # keys past the last 64-key half
]


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_matches_reference(dtype, d, case):
    b, hq, hkv, nq, nk, causal, layout = case
    if layout == "padded":
        q, do = _padded(b, hq, nq, d, dtype, 40), _padded(b, hq, nq, d, dtype, 40)
        k, v = _padded(b, hkv, nk, d, dtype, 40), _padded(b, hkv, nk, d, dtype, 40)
    else:
        q, do = _flash_view(b, hq, nq, d, dtype), _flash_view(b, hq, nq, d, dtype)
        k, v = _flash_view(b, hkv, nk, d, dtype), _flash_view(b, hkv, nk, d, dtype)
    shift = None if causal is None else (nk - nq if causal == "br" else 0)
    _check(q, k, v, do, d ** -0.5, shift)


@needs_hopper
@pytest.mark.parametrize("variant", [dict(HEADS_FIRST=True), dict(HEADS_FIRST=False), dict(NUM_STAGES=3),
                                     dict(BLOCK_M=64), dict(BLOCK_M=128)],
                         ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()))
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [None, "br"])
def test_variants(variant, d, causal):
    """Every CONFIGS / SCHEDULE switch computes the same gradients (those
    whose shared memory does not fit at this d are skipped)."""
    from flashattn_triton.kernels.hopper import bwd as hbwd
    if hbwd.smem_bytes(d, **dict(hbwd.CONFIGS[d], **variant)) > hbwd.SMEM_LIMIT:
        pytest.skip("does not fit in shared memory")
    q, do = (_flash_view(2, 8, 777, d, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(2, 2, 1500, d, torch.bfloat16) for _ in range(2))
    _check(q, k, v, do, 0.09, None if causal is None else 1500 - 777, **variant)


@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_long_sequence(causal):
    q, do = (_flash_view(2, 16, 2048, 128, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(2, 4, 2048, 128, torch.bfloat16) for _ in range(2))
    _check(q, k, v, do, 128 ** -0.5, 0 if causal else None)


@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_api_uses_it_and_deterministic_does_not(monkeypatch, causal):
    """flash_attn_func's backward takes the Hopper kernel by default on sm_90
    (the forced tier here), matches float64, and deterministic=True takes the
    portable kernels and is bit-identical run to run."""
    from flashattn_triton import flash_attn_func
    from flashattn_triton.kernels.hopper import bwd as hbwd
    from flashattn_triton.reference import flash_attention_ref
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper")
    monkeypatch.setenv("FLASHATTN_TRITON_PREFETCH_BWD", "0")  # count the real backwards only
    calls = []
    real = hbwd.hopper_attention_backward

    def spy(*a, **kw):
        calls.append(real(*a, **kw))
        return calls[-1]
    monkeypatch.setattr(hbwd, "hopper_attention_backward", spy)
    monkeypatch.setattr(hopper, "hopper_attention_backward", spy)
    q = torch.randn(2, 1000, 8, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, 1234, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, 1234, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    do = torch.randn(2, 1000, 8, 128, device="cuda", dtype=torch.bfloat16)

    def grads(deterministic):
        out = flash_attn_func(q, k, v, causal=causal, deterministic=deterministic)
        return torch.autograd.grad(out, (q, k, v), do)

    got = grads(False)
    assert calls == [True], calls
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o_ref = flash_attention_ref(*leaves, causal)[0]
    ref = torch.autograd.grad(o_ref, leaves, do.double())
    low_leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    o_low = flash_attention_ref(*low_leaves, causal, dtype=torch.bfloat16)[0]
    low = torch.autograd.grad(o_low, low_leaves, do)
    for name, g, r, lo in zip(("dq", "dk", "dv"), got, ref, low):
        assert_close(name, g, r, baseline=lo, factor=3.0, dtype=torch.bfloat16)
    calls.clear()
    first, second = grads(True), grads(True)
    assert calls == [], "deterministic=True must not take the Hopper backward (atomic dQ adds)"
    for name, a, b in zip(("dq", "dk", "dv"), first, second):
        assert torch.equal(a, b), f"{name}: deterministic backward differs run to run"
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_BWD", "0")
    grads(False)
    assert calls == [], "FLASHATTN_TRITON_HOPPER_BWD=0 must keep the portable backward"
    assert os.environ["FLASHATTN_TRITON_HOPPER_BWD"] == "0"


@needs_hopper
def test_declines_what_it_cannot_run():
    dev = "cuda"

    def run(q, k=None, scale=0.125, **kw):
        k = q if k is None else k
        lse = torch.zeros(q.shape[:3], device=dev)
        grads = [torch.zeros_like(t) for t in (q, k, k)]
        took = hopper.hopper_attention_backward(q, q, k, k, lse, lse, *grads, scale, None)
        return took or any(bool(g.any()) for g in grads)

    assert not run(torch.randn(1, 2, 64, 96, device=dev, dtype=torch.bfloat16)), "d = 96 has no config"
    assert not run(torch.randn(1, 2, 64, 64, device=dev)), "float32"
    assert not run(torch.randn(1, 2, 64, 64, device=dev, dtype=torch.bfloat16), scale=-0.1), "negative scale"
    base = torch.randn(2 * 4 * 64 * 64 + 1, device=dev, dtype=torch.bfloat16)
    assert not run(base[1:].view(2, 4, 64, 64)), "a base not 16-byte aligned"


@needs_hopper
def test_prefetch_compiles_it(monkeypatch):
    """The backward prefetch (_prefetch.py) takes the Hopper backward on its
    meta tensors in compile-only mode, so the first backward finds the kernel
    built; then the real backward runs it."""
    from flashattn_triton import _prefetch, flash_attn_func
    from flashattn_triton.kernels import fastlaunch
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper")
    monkeypatch.setenv("FLASHATTN_TRITON_PREFETCH_BWD", "1")
    calls = []
    real = hopper.hopper_attention_backward

    def spy(*a, **kw):
        took = real(*a, **kw)
        calls.append((fastlaunch.compile_only_device() is not None, took))
        return took
    monkeypatch.setattr(hopper, "hopper_attention_backward", spy)
    q = torch.randn(1, 333, 4, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    k = torch.randn(1, 517, 2, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    v = torch.randn(1, 517, 2, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    out = flash_attn_func(q, k, v, causal=True)
    _prefetch.wait_pending()
    assert (True, True) in calls, f"the prefetch did not take the Hopper backward: {calls}"
    calls.clear()
    out.sum().backward()
    assert calls == [(False, True)], calls
