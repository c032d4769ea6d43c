"""Forward, LSE and gradients against a float64 reference.

Tolerance: our max error vs float64 may be at most 2x (outputs) / 3x
(gradients) the error of the same attention computed by plain PyTorch in the
input dtype (plus one ulp, for cases where that baseline is exact).
"""

import itertools

import pytest
import torch

from flashattn_triton import flash_attn_func, scaled_dot_product_attention
from flashattn_triton.reference import flash_attention_ref as flash_ref
from _utils import ON_GPU, DTYPES, assert_close, assert_rel, call_spy, cpu_covering, leaf, make_qkv, rand

SEQ_PAIRS = [(1, 1), (1, 77), (113, 203), (200, 64), (64, 200), (96, 96)]
HEADS = [(2, 2), (4, 2), (3, 1)]  # MHA, GQA, MQA
HEAD_DIMS = [16, 40, 64, 24, 128, 80]


def _cases():
    """Every (Nq, Nk) pair x causal x dtype; heads and head dim rotate through
    their lists so each pair meets MHA, GQA and MQA and several head dims."""
    cases = []
    for i, ((n_q, n_k), causal, dtype) in enumerate(
            itertools.product(SEQ_PAIRS, (False, True), DTYPES)):
        h_q, h_kv = HEADS[i % len(HEADS)]
        d = HEAD_DIMS[(i // 2) % len(HEAD_DIMS)]
        cases.append(pytest.param(n_q, n_k, h_q, h_kv, d, causal, dtype,
                                  id=f"{n_q}x{n_k}-h{h_q}/{h_kv}-d{d}-{'causal' if causal else 'full'}-{dtype}"))
    return cases


# On the CPU half of the grid, each (Nq, Nk) pair once per dtype: bf16 causal
# and fp16 / fp32 full for the pairs below, the other way round for the rest.
# Either way a pair still meets both causal flags, every dtype (so MHA, GQA,
# MQA) and its three head dims; with both ways on pairs of each head-dim
# triple every pair of values of two dimensions of the full grid is met
# (_utils.cpu_covering checks it).  The GPU runs the whole grid.
BF16_CAUSAL_PAIRS = [(1, 1), (1, 77), (64, 200)]
FLASH_CASES = cpu_covering(
    _cases(),
    lambda n_q, n_k, h_q, h_kv, d, causal, dtype: causal == ((dtype == "bf16") == ((n_q, n_k) in BF16_CAUSAL_PAIRS)),
    dims={"seq": lambda n_q, n_k, *_: (n_q, n_k), "heads": lambda n_q, n_k, h_q, h_kv, *_: (h_q, h_kv),
          "d": lambda *v: v[4], "causal": lambda *v: v[5], "dtype": lambda *v: v[6]})


def check_against_reference(q, k, v, causal, softmax_scale=None, with_lse_grad=True, window_size=(-1, -1),
                            grad_factor=3.0):
    """Run ours (flash layout), float64 and in-dtype PyTorch; compare all outputs and grads
    (gradients within grad_factor times PyTorch's error)."""
    dtype = q.dtype
    do = rand(q.shape[:-1] + (v.shape[-1],), dtype, q.device)
    dlse = rand(q.shape[:1] + (q.shape[2], q.shape[1]), torch.float32, q.device) if with_lse_grad else None

    def ours(q_, k_, v_):
        return flash_attn_func(q_, k_, v_, softmax_scale=softmax_scale, causal=causal,
                               window_size=window_size, return_lse=True)

    def run(fn, inputs):
        out, lse = fn(*inputs)
        loss = (out.float() * do.float()).sum()
        if dlse is not None:
            loss = loss + (torch.where(torch.isinf(lse), 0.0, lse).float() * dlse).sum()
        grads = torch.autograd.grad(loss, inputs)
        return out.detach(), lse.detach(), grads

    got = run(ours, [leaf(t) for t in (q, k, v)])
    ref = run(lambda *a: flash_ref(*a, causal, softmax_scale, window_size=window_size),
              [leaf(t, torch.float64) for t in (q, k, v)])
    base = run(lambda *a: flash_ref(*a, causal, softmax_scale, dtype=dtype, window_size=window_size),
               [leaf(t) for t in (q, k, v)])

    assert_close("out", got[0], ref[0], base[0], 2.0, dtype)
    assert_close("lse", got[1], ref[1], base[1], 2.0, torch.float32)
    for name, g, r, b in zip(("dq", "dk", "dv"), got[2], ref[2], base[2]):
        assert_close(name, g, r, b, grad_factor, dtype)
    return got, ref


# The causal diagonal of a query tile's last row lands on the first key of a
# key tile only when n_k - n_q = 1 (mod BLOCK_N), or n_k = 1 (mod BLOCK_N) for
# a ragged last query tile; the size grids meet that phase rarely.  Every phase
# of a key tile (16 keys in the interpreter's tiles; every offset up to 128 on
# the GPU) for a whole and a ragged query tile (40 rows: 32 + 8; 200 on the GPU).
@pytest.mark.parametrize("extra", range(129) if ON_GPU else range(16), ids=lambda s: f"nk=nq+{s}")
def test_causal_diagonal_every_key_tile_phase(device, extra):
    n_q = 200 if ON_GPU else 40
    q, k, v = make_qkv(1, n_q, n_q + extra, 1, 1, 16, torch.float32, device, requires_grad=False)
    check_against_reference(q, k, v, causal=True)


@pytest.mark.parametrize("n_q,n_k,h_q,h_kv,d,causal,dtype", FLASH_CASES)
def test_flash_attn_func(device, n_q, n_k, h_q, h_kv, d, causal, dtype):
    q, k, v = make_qkv(2, n_q, n_k, h_q, h_kv, d, DTYPES[dtype], device, requires_grad=False)
    check_against_reference(q, k, v, causal)


@pytest.mark.parametrize("d", [8, 33, 72, 96, 112, 160, 192, 256])
def test_head_dims(device, d):
    dtype = [torch.float16, torch.bfloat16, torch.float32][d % 3]
    q, k, v = make_qkv(1, 37, 45, 2, 1, d, dtype, device, requires_grad=False)
    check_against_reference(q, k, v, causal=d % 2 == 0)


# Q K^T in two column chunks (kernels/fwd.py split_qk): d=96 -> 64 + 32,
# d=160 -> 128 + 64 (32 padded), d=192 -> 128 + 64, d=40 -> 32 + 16 (8 padded).
@pytest.mark.parametrize("split", [True, False], ids=["split", "nosplit"])
@pytest.mark.parametrize("d,d_v,h_q,h_kv,causal,dtype,softcap", [
    (96, 96, 4, 2, False, torch.bfloat16, 0.0),
    (160, 160, 3, 1, True, torch.float16, 0.0),
    (192, 128, 4, 2, True, torch.bfloat16, 0.0),
    (192, 128, 2, 2, False, torch.float16, 5.0),
    (96, 96, 4, 1, True, torch.float32, 8.0),
    (40, 40, 4, 2, True, torch.float16, 0.0),
])
def test_split_qk_forward(device, monkeypatch, split, d, d_v, h_q, h_kv, causal, dtype, softcap):
    """Forward output and LSE with the split on and off against float64 (odd lengths, GQA).
    q and k are views of NaN-padded rows: a padded column read unmasked shows."""
    from flashattn_triton import ops
    from flashattn_triton.kernels import fwd
    monkeypatch.setattr(fwd, "SPLIT_QK", split)
    # the portable kernel's split: on an H200 d = 192 / dv = 128 takes the Hopper forward
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "portable")
    monkeypatch.setattr(ops, "PLANS_ENABLED", False)  # a plan would replay the other split's launch
    launched = call_spy(monkeypatch, fwd, "_launch_fwd", lambda *a, **kw: kw["SPLIT_QK"])
    q, k, v = make_qkv(2, 37, 83, h_q, h_kv, d, dtype, device, requires_grad=False, d_v=d_v)
    q, k = (torch.cat([t, torch.full_like(t[..., :64], float("nan"))], -1)[..., :d] for t in (q, k))
    with torch.no_grad():
        out, lse = flash_attn_func(q, k, v, causal=causal, softcap=softcap, return_lse=True)
        ref_out, ref_lse = flash_ref(q, k, v, causal, softcap=softcap)
        base_out, base_lse = flash_ref(q, k, v, causal, dtype=dtype, softcap=softcap)
    assert launched and set(launched) == {split}
    assert_close("out", out, ref_out, base_out, 2.0, dtype)
    assert_close("lse", lse, ref_lse, base_lse, 2.0, torch.float32)


def test_split_qk_choice():
    """The split serves head dims with a quarter or more of the padded reduction unused."""
    from flashattn_triton.kernels import fwd
    from flashattn_triton.kernels.launch import head_dim_pad
    split = {d for d in range(1, 513) if fwd.split_qk(d, head_dim_pad(d))}
    for d in (40, 48, 80, 96, 160, 192, 320, 384):
        assert d in split, d
    for d in (16, 24, 32, 64, 100, 112, 128, 200, 256, 512):
        assert d not in split, d
    for d in split:  # chunks PAD/2 (whole) + PAD/4 (at least 16 wide) cover d
        d_pad = head_dim_pad(d)
        assert d_pad // 2 < d <= d_pad // 2 + d_pad // 4 and d_pad // 4 >= 16


@pytest.mark.parametrize("causal", [False, True])
def test_fp32_is_not_tf32(device, causal):
    q, k, v = make_qkv(1, 150, 130, 2, 2, 64, torch.float32, device, requires_grad=False)
    got, ref = check_against_reference(q, k, v, causal)
    assert_rel("out (fp32)", got[0], ref[0], 1e-5)
    for name, g, r in zip(("dq", "dk", "dv"), got[2], ref[2]):
        assert_rel(f"{name} (fp32)", g, r, 1e-5)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_large_scores(device, dtype):
    """Scores of magnitude ~1e3: the online softmax must not overflow."""
    d = 64
    q, k, v = make_qkv(1, 70, 90, 2, 2, d, DTYPES[dtype], device, scale=12.0, requires_grad=False)
    s = (q.double().transpose(1, 2) @ k.double().transpose(1, 2).transpose(-1, -2)) / d ** 0.5
    assert s.abs().max() > 500, "test inputs should give scores of order 1e3"
    check_against_reference(q, k, v, causal=True)


def test_softmax_scale(device):
    q, k, v = make_qkv(2, 50, 70, 4, 2, 32, torch.float16, device, requires_grad=False)
    check_against_reference(q, k, v, causal=True, softmax_scale=0.37)


def test_fully_masked_rows(device):
    """Causal with Nq > Nk (bottom-right): the first Nq - Nk rows see no key."""
    n_q, n_k = 90, 30
    q, k, v = make_qkv(2, n_q, n_k, 2, 1, 32, torch.bfloat16, device, requires_grad=True)
    out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True)
    masked = n_q - n_k
    assert torch.equal(out[:, :masked], torch.zeros_like(out[:, :masked])), "masked rows must be exactly 0"
    assert torch.isneginf(lse[:, :, :masked]).all(), "masked rows must have lse = -inf"
    assert torch.isfinite(lse[:, :, masked:]).all()
    out.sum().backward()  # d(out) with stride 0 everywhere
    for name, t in (("dq", q), ("dk", k), ("dv", v)):
        assert torch.isfinite(t.grad).all(), f"{name} has non-finite values"
    assert torch.equal(q.grad[:, :masked], torch.zeros_like(q.grad[:, :masked]))
    check_against_reference(q.detach(), k.detach(), v.detach(), causal=True)


def test_non_contiguous_packed_qkv(device):
    """q, k, v as slices of one packed (B, N, 3, H, d) tensor, no copies."""
    b, n, h, d = 2, 75, 3, 40
    qkv = rand((b, n, 3, h, d), torch.float16, device)
    q, k, v = qkv.unbind(2)
    assert not q.is_contiguous()
    check_against_reference(q, k, v, causal=True)


def test_non_contiguous_transposed_heads(device):
    """Inputs stored (B, H, N, d) and viewed as (B, N, H, d)."""
    q = rand((2, 4, 60, 32), torch.bfloat16, device).transpose(1, 2)
    k = rand((2, 2, 81, 32), torch.bfloat16, device).transpose(1, 2)
    v = rand((2, 81, 2, 64), torch.bfloat16, device)[..., ::2].contiguous()  # different storage again
    check_against_reference(q, k, v, causal=False)


def test_backward_deterministic(device):
    q, k, v = make_qkv(1, 80, 100, 4, 1, 32, torch.float16, device, requires_grad=True)
    do = rand(q.shape, torch.float16, device)
    grads = []
    for _ in range(2):
        out = flash_attn_func(q, k, v, causal=True)
        grads.append(torch.autograd.grad(out, (q, k, v), do))
    for name, a, b in zip(("dq", "dk", "dv"), *grads):
        assert torch.equal(a, b), f"{name} differs between two identical backward passes"


def test_return_attn_probs(device):
    q, k, v = make_qkv(1, 20, 20, 2, 2, 16, torch.float16, device, requires_grad=False)
    out, lse, probs = flash_attn_func(q, k, v, return_attn_probs=True)
    assert probs is None
    ref_out, ref_lse = flash_ref(q, k, v, causal=False)
    assert_close("out", out, ref_out.to(out.dtype).double(), atol=1e-2)
    assert_close("lse", lse, ref_lse, atol=1e-3)


@pytest.mark.parametrize("n_q,n_k", [(0, 7), (5, 0)])
def test_sdpa_5d_empty_sequences(device, n_q, n_k):
    """The SDPA entry with two leading dims and an empty query or key length
    gives PyTorch's result: an empty output, or zeros (no key to attend)."""
    q = torch.randn(2, 3, 4, n_q, 16, device=device)
    k, v = (torch.randn(2, 3, 4, n_k, 16, device=device) for _ in range(2))
    out = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 4, n_q, 16)
    assert torch.equal(out, torch.zeros_like(out))


def test_empty_sequences(device):
    q, k, v = make_qkv(2, 0, 5, 2, 2, 16, torch.float16, device)
    out = flash_attn_func(q, k, v)
    assert out.shape == (2, 0, 2, 16)
    out.float().sum().backward()
    assert torch.equal(k.grad, torch.zeros_like(k)) and torch.equal(v.grad, torch.zeros_like(v))
    q, k, v = make_qkv(2, 4, 0, 2, 2, 16, torch.float16, device)
    out, lse = flash_attn_func(q, k, v, return_lse=True)
    assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()
    out.float().sum().backward()
    assert torch.equal(q.grad, torch.zeros_like(q))


# ---------------------------------------------------------------------------
# SDPA-compatible entry
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("n_q,n_k,h_q,h_kv,is_causal,dtype", [
    (50, 50, 2, 2, True, torch.float32),
    (40, 90, 4, 2, True, torch.float16),   # Nq < Nk: top-left alignment
    (90, 40, 4, 1, True, torch.bfloat16),  # Nq > Nk: rows >= Nk see every key
    (33, 65, 3, 3, False, torch.float16),
])
def test_sdpa_matches_torch(device, n_q, n_k, h_q, h_kv, is_causal, dtype):
    d = 32
    q = rand((2, h_q, n_q, d), dtype, device, requires_grad=True)
    k = rand((2, h_kv, n_k, d), dtype, device, requires_grad=True)
    v = rand((2, h_kv, n_k, d), dtype, device, requires_grad=True)
    do = rand(q.shape, dtype, device)
    gqa = h_q != h_kv

    out = scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=gqa)
    grads = torch.autograd.grad(out, (q, k, v), do)

    def torch_sdpa(inputs, cast):
        inputs = [leaf(t, cast) for t in inputs]
        o = torch.nn.functional.scaled_dot_product_attention(*inputs, is_causal=is_causal, enable_gqa=gqa)
        return o, torch.autograd.grad(o, inputs, do.to(cast))

    ref_out, ref_grads = torch_sdpa((q, k, v), torch.float64)
    base_out, base_grads = torch_sdpa((q, k, v), dtype)
    assert_close("out", out, ref_out, base_out, 2.0, dtype)
    for name, g, r, b in zip(("dq", "dk", "dv"), grads, ref_grads, base_grads):
        assert_close(name, g, r, b, 3.0, dtype)


def test_sdpa_default_scale_and_custom_scale(device):
    q, k, v = (rand((1, 2, 30, 24), torch.float32, device) for _ in range(3))
    for scale in (None, 0.5):
        out = scaled_dot_product_attention(q, k, v, scale=scale)
        ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=scale)
        assert_rel(f"out scale={scale}", out, ref, 1e-5)


# ---------------------------------------------------------------------------
# CPU path without the interpreter
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_blockwise_cpu_path(monkeypatch, causal):
    """Plain-PyTorch blockwise path that serves CPU tensors without TRITON_INTERPRET."""
    import flashattn_triton._dispatch as dispatch
    import flashattn_triton.reference as reference
    monkeypatch.setattr(dispatch, "INTERPRET", False)
    monkeypatch.setattr(reference, "_CPU_BLOCK", 32)
    q, k, v = make_qkv(2, 113, 70, 4, 2, 24, torch.bfloat16, torch.device("cpu"), requires_grad=False)
    check_against_reference(q, k, v, causal)


def test_batch_chunks_for_grid_limit(device, monkeypatch):
    """batch x heads beyond CUDA's 65535-program grid axis: launched in batch chunks."""
    import flashattn_triton.ops as interface
    monkeypatch.setattr(interface, "MAX_GRID_Y", 8)  # 4 heads -> 2 batch entries per launch
    # (CPU: 33 x 20, still two of the interpreter's 32-row and 16-key tiles each way)
    n_q, n_k = (40, 56) if device.type == "cuda" else (33, 20)
    q, k, v = make_qkv(5, n_q, n_k, 4, 2, 16, torch.float16, device, requires_grad=False)
    assert len(interface._batch_chunks(5, 4)) == 3
    check_against_reference(q, k, v, causal=True)
