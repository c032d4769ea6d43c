"""The two forms of the backward (kernels/bwd.py): the deterministic one
(separate dQ kernel, no atomics) and the fused one (dQ added from the dK/dV
kernel through float32 atomics, FLASHATTN_TRITON_FUSED_DQ=1).  Both must
give the float64 reference's gradients within the usual tolerance, on the
same shapes that stress tile edges: ragged lengths, GQA / MQA, odd head
dims, windows, packed batches and the score variants."""

import pytest
import torch

from flashattn_triton import flash_attn_func
from flashattn_triton.kernels.bwd import ENV_FUSED_DQ, use_fused_dq
from flashattn_triton.testing import alibi_slopes, make_qkv, rand
from test_attention import check_against_reference
from test_varlen import _check_varlen


@pytest.fixture(params=["separate", "fused"])
def form(request, monkeypatch):
    monkeypatch.setenv(ENV_FUSED_DQ, "1" if request.param == "fused" else "0")
    return request.param


@pytest.mark.parametrize("n_q,n_k,h_q,h_kv,d,causal,dtype", [
    (67, 67, 4, 4, 64, True, torch.bfloat16),     # ragged, MHA
    (45, 131, 6, 2, 40, True, torch.float16),     # Nq < Nk (bottom-right), GQA, odd d
    (130, 33, 4, 1, 72, True, torch.float32),     # Nq > Nk: rows that see no key, MQA
    (96, 80, 2, 2, 128, False, torch.bfloat16),   # not causal
])
def test_backward_matches_reference(device, form, n_q, n_k, h_q, h_kv, d, causal, dtype):
    q, k, v = make_qkv(2, n_q, n_k, h_q, h_kv, d, dtype, device, requires_grad=False)
    check_against_reference(q, k, v, causal)


@pytest.mark.parametrize("window", [(16, 0), (20, 7)])
def test_backward_window(device, form, window):
    q, k, v = make_qkv(1, 77, 90, 4, 2, 64, torch.float16, device, requires_grad=False)
    check_against_reference(q, k, v, causal=window[1] == 0, window_size=window)


def test_backward_varlen(device, form):
    _check_varlen([0, 1, 37, 70], [5, 1, 37, 90], 4, 2, 64, True, torch.bfloat16, device)


def test_fused_equals_separate_with_variants(device, monkeypatch):
    """Dropout, softcap, ALiBi and sinks in one call: both forms give the same
    gradients (the same dS, summed in another order)."""
    q, k, v = make_qkv(2, 70, 70, 4, 2, 64, torch.float32, device, requires_grad=False)
    sinks = rand((4,), torch.float32, device)
    do = rand(q.shape, torch.float32, device)
    grads = {}
    for f in ("0", "1"):
        monkeypatch.setenv(ENV_FUSED_DQ, f)
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v, sinks)]
        torch.manual_seed(7)  # the dropout seed is drawn from torch's generator
        out = flash_attn_func(*leaves[:3], dropout_p=0.2, causal=True, softcap=5.0,
                              alibi_slopes=alibi_slopes(4, device), sinks=leaves[3])
        grads[f] = torch.autograd.grad(out, leaves, do)
    for name, a, b in zip(("dq", "dk", "dv", "dsinks"), grads["0"], grads["1"]):
        err = (a - b).abs().max().item()
        assert err <= 1e-5 * max(1.0, a.abs().max().item()), f"{name}: fused vs separate differ by {err:.3g}"


def test_fused_form_choice(monkeypatch):
    monkeypatch.setenv(ENV_FUSED_DQ, "1")
    assert use_fused_dq(deterministic=False, has_dbias=False)
    assert not use_fused_dq(deterministic=True, has_dbias=False)
    assert not use_fused_dq(deterministic=False, has_dbias=True)  # dS itself is an output then
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert not use_fused_dq(deterministic=False, has_dbias=False)
    finally:
        torch.use_deterministic_algorithms(previous)
    monkeypatch.setenv(ENV_FUSED_DQ, "0")
    assert not use_fused_dq(deterministic=False, has_dbias=False)


def test_default_backward_is_bitwise_reproducible(device, monkeypatch):
    """The default (separate) backward has no atomics: two runs give the same bits
    (on the GPU the programs' order varies from run to run; on CPU it cannot)."""
    monkeypatch.delenv(ENV_FUSED_DQ, raising=False)
    n = 1000 if device.type == "cuda" else 40  # the interpreter is slow; the claim is for GPUs
    q, k, v = make_qkv(2, n, n, 8, 2, 64, torch.bfloat16, device, requires_grad=False)
    do = rand(q.shape, torch.bfloat16, device)
    runs = []
    for _ in range(2):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out = flash_attn_func(*leaves, causal=True, deterministic=True)
        runs.append(torch.autograd.grad(out, leaves, do))
    for name, a, b in zip(("dq", "dk", "dv"), *runs):
        assert torch.equal(a, b), f"{name}: two runs differ at {(a != b).sum().item()} elements"
