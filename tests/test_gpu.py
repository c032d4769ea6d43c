"""Realistic sizes on the GPU (marked ``gpu``; skipped on CPU runs)."""

import pytest
import torch

from flashattn_triton import flash_attn_func
from flashattn_triton.reference import flash_attention_ref as flash_ref
from _utils import assert_close, leaf, make_qkv, rand
from test_attention import check_against_reference

# bigmem (conftest.py): each test here peaks at 2-70 GiB (test_realistic's
# float64 score matrices take 4-8 GiB each, several alive at once; the
# 1000 x 3001 ragged case about 2 GiB; the int64-offsets test's bf16 q, out,
# do and dq 4.3 GiB each).
pytestmark = [pytest.mark.gpu, pytest.mark.bigmem]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("h_q,h_kv", [(16, 16), (32, 8)])
def test_realistic(device, dtype, causal, h_q, h_kv):
    q, k, v = make_qkv(2, 4096, 4096, h_q, h_kv, 128, dtype, device, requires_grad=False)
    check_against_reference(q, k, v, causal)


@pytest.mark.parametrize("d", [64, 96, 256])
@pytest.mark.parametrize("n_q,n_k", [(1000, 3001), (2049, 1023), (1, 4096)])
def test_ragged_lengths(device, d, n_q, n_k):
    q, k, v = make_qkv(2, n_q, n_k, 8, 2, d, torch.bfloat16, device, requires_grad=False)
    check_against_reference(q, k, v, causal=True)


def test_offsets_beyond_int32(device):
    """q, out and dq with more than 2**31 elements: rows far into the sequence
    must be read and written at the right place (int64 offsets)."""
    n_q, h, d, n_k = 140_000, 128, 128, 64
    assert n_q * h * d > 2 ** 31
    q = rand((1, n_q, h, d), torch.bfloat16, device, requires_grad=True)
    k = rand((1, n_k, h, d), torch.bfloat16, device, requires_grad=True)
    v = rand((1, n_k, h, d), torch.bfloat16, device, requires_grad=True)
    out = flash_attn_func(q, k, v)
    do = rand(out.shape, torch.bfloat16, device)
    out.backward(do)
    rows = slice(n_q - 300, n_q)  # the far end, past 2**31 elements
    q_tail = leaf(q[:, rows], torch.float64)
    ref = flash_ref(q_tail, k, v, causal=False)[0]
    base = flash_ref(q[:, rows], k, v, causal=False, dtype=torch.bfloat16)[0]
    assert_close("out (tail rows)", out[:, rows], ref, base, 2.0, torch.bfloat16)
    ref.backward(do[:, rows].double())
    base_q = leaf(q[:, rows])
    flash_ref(base_q, k, v, causal=False, dtype=torch.bfloat16)[0].backward(do[:, rows])
    assert_close("dq (tail rows)", q.grad[:, rows], q_tail.grad, base_q.grad, 3.0, torch.bfloat16)

