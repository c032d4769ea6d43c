"""flashattn_triton.nn: MultiheadAttention against torch.nn.MultiheadAttention
with the same weights (its state dict), RotaryEmbedding against complex
rotation, Attention against a float64 PyTorch composition of the same steps.

Pass mark: max error against the float64 run at most 2x (outputs) / 3x
(gradients) that of the PyTorch module in the test dtype, plus one ulp.
"""

import pytest
import torch

from flashattn_triton.nn import Attention, MultiheadAttention, RotaryEmbedding
from _utils import DTYPES, assert_close

E, H = 32, 4


@pytest.fixture(autouse=True)
def _on_test_device(device):
    """Everything a test creates lands on the test device (the GPU with
    FLASHATTN_TRITON_TEST_DEVICE=cuda, else the CPU and Triton's interpreter)."""
    torch.set_default_device(device)
    yield
    torch.set_default_device("cpu")


def _pair(dtype, **kw):
    """(ours, torch in dtype, torch in float64), ours loaded from torch's state dict."""
    ref = torch.nn.MultiheadAttention(E, H, **kw).double()
    for p in ref.parameters():  # non-zero biases, so the bias paths are exercised
        torch.nn.init.normal_(p, std=0.3)
    base = torch.nn.MultiheadAttention(E, H, **kw)
    base.load_state_dict(ref.state_dict())
    ours = MultiheadAttention(E, H, **kw)
    missing, unexpected = ours.load_state_dict(ref.state_dict(), strict=True)
    assert not missing and not unexpected
    return ours.to(dtype), base.to(dtype), ref


def _inputs(dtype, b=2, n_q=10, n_k=10, kdim=E, vdim=E, batch_first=True, same="self"):
    """same: "self" (query is key is value), "kv" (key is value), "none"."""
    def make(n, f):
        shape = (b, n, f) if batch_first else (n, b, f)
        return torch.randn(shape, dtype=torch.float64)
    q = make(n_q, E)
    if same == "self":
        return (q, q, q)
    k = make(n_k, kdim)
    return (q, k, k) if same == "kv" else (q, k, make(n_k, vdim))


def _run(module, inputs, dtype, grad, **kw):
    # float masks are additive: cast them to the dtype of the run, as callers do
    kw = {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in kw.items()}
    xs = [x.detach().to(dtype).requires_grad_(grad) for x in inputs]
    if inputs[0] is inputs[1]:
        xs[1] = xs[0]
    if inputs[1] is inputs[2]:
        xs[2] = xs[1]
    out, weights = module(*xs, need_weights=False, **kw)
    assert weights is None
    grads = None
    if grad:
        w = torch.randn_like(out, dtype=torch.float64)
        (out.double() * w).sum().backward(inputs=[xs[0]] + list(module.parameters()))
        grads = [xs[0].grad] + [p.grad for p in module.parameters()]
    return out, grads


def _check(name, ours, base, ref, inputs, dtype, grad=False, ref_kw=None, **kw):
    got, g_got = _run(ours, inputs, dtype, grad, **kw)
    want, g_want = _run(ref, inputs, torch.float64, grad, **(ref_kw or kw))
    bl, g_bl = _run(base, inputs, dtype, grad, **(ref_kw or kw))
    assert_close(f"{name} out", got.double(), want, baseline=bl.double(), dtype=dtype)
    if grad:
        names = ["input"] + [n for n, _ in ours.named_parameters()]
        for n, a, r, bb in zip(names, g_got, g_want, g_bl):
            assert_close(f"{name} grad {n}", a.double(), r, baseline=bb.double(), factor=3.0, dtype=dtype)


# ---------------------------------------------------------------------------
# MultiheadAttention
# ---------------------------------------------------------------------------

def test_state_dict_keys_match_torch():
    for kw in ({}, {"bias": False}, {"kdim": 16, "vdim": 24}, {"add_bias_kv": True}):
        theirs = torch.nn.MultiheadAttention(E, H, batch_first=True, **kw)
        ours = MultiheadAttention(E, H, batch_first=True, **kw)
        assert list(ours.state_dict()) == list(theirs.state_dict()), kw
        for key, t in theirs.state_dict().items():
            assert ours.state_dict()[key].shape == t.shape, (kw, key)
    # and the other way round: a model trained with ours loads into torch's
    torch.nn.MultiheadAttention(E, H).load_state_dict(MultiheadAttention(E, H).state_dict())


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_self_attention_matches_torch(dtype):
    dtype = DTYPES[dtype]
    ours, base, ref = _pair(dtype, batch_first=True)
    _check("self", ours, base, ref, _inputs(dtype), dtype, grad=True)


@pytest.mark.parametrize("case", [
    dict(kw={}, n_k=7, same="kv"),                                   # cross-attention, L != S
    dict(kw={}, n_k=10, same="none"),                                # three different inputs
    dict(kw={"kdim": 16, "vdim": 24}, n_k=13, same="none"),          # separate q/k/v_proj_weight
    dict(kw={"bias": False}, n_k=10, same="self"),
    dict(kw={"add_bias_kv": True}, n_k=10, same="self"),
    dict(kw={"add_zero_attn": True}, n_k=6, same="kv"),
    dict(kw={"batch_first": False}, n_k=9, same="kv"),               # (seq, batch, feature)
], ids=["cross", "qkv", "kdim_vdim", "no_bias", "bias_kv", "zero_attn", "seq_first"])
def test_variants_match_torch(case):
    kw = {"batch_first": True, **case["kw"]}
    ours, base, ref = _pair(torch.float32, **kw)
    inputs = _inputs(torch.float32, n_k=case["n_k"], kdim=kw.get("kdim", E), vdim=kw.get("vdim", E),
                     batch_first=kw["batch_first"], same=case["same"])
    _check(str(case["kw"]), ours, base, ref, inputs, torch.float32, grad=case["same"] != "self")


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_is_causal_matches_torch(dtype):
    """PyTorch needs the causal attn_mask with its is_causal hint; ours does not."""
    dtype = DTYPES[dtype]
    ours, base, ref = _pair(dtype, batch_first=True)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(10, dtype=torch.bool)
    _check("causal", ours, base, ref, _inputs(dtype), dtype, grad=True, is_causal=True,
           ref_kw={"is_causal": True, "attn_mask": mask})


def test_is_causal_cross_attention_is_top_left():
    """L != S: query i attends keys j <= i (PyTorch's alignment, not flash-attn's)."""
    ours, base, ref = _pair(torch.float32, batch_first=True)
    mask = torch.ones(6, 10, dtype=torch.bool).triu(1)
    _check("causal L<S", ours, base, ref, _inputs(torch.float32, n_q=6, n_k=10, same="kv"), torch.float32,
           is_causal=True, ref_kw={"is_causal": True, "attn_mask": mask})


def test_unbatched_input():
    ours, base, ref = _pair(torch.float32, batch_first=True)
    x = torch.randn(10, E, dtype=torch.float64)
    _check("unbatched", ours, base, ref, (x, x, x), torch.float32)


def test_need_weights_and_bad_input_raise():
    mha = MultiheadAttention(E, H, batch_first=True)
    x = torch.randn(2, 5, E)
    with pytest.raises(NotImplementedError, match="need_weights=True"):
        mha(x, x, x, need_weights=True)
    with pytest.raises(ValueError, match="embed_dim \\(30\\) must be divisible by num_heads \\(4\\)"):
        MultiheadAttention(30, 4)
    with pytest.raises(ValueError, match="query has 16 features, expected embed_dim=32"):
        mha(torch.randn(2, 5, 16), x, x)
    with pytest.raises(ValueError, match="key / value have 32 / 32 features, expected kdim=16"):
        MultiheadAttention(E, H, kdim=16, vdim=16, batch_first=True)(x, x, x)


def test_integer_masks_raise():
    """Masks that are neither bool nor floating are refused (as torch's MHA
    does) rather than added to the scores as a float bias."""
    mha = MultiheadAttention(E, H, batch_first=True)
    x = torch.randn(2, 6, E)
    with pytest.raises(TypeError, match="attn_mask must be a bool .* got torch.int32"):
        mha(x, x, x, attn_mask=torch.zeros(6, 6, dtype=torch.int32))
    with pytest.raises(TypeError, match="key_padding_mask must be a bool .* got torch.uint8"):
        mha(x, x, x, key_padding_mask=torch.zeros(2, 6, dtype=torch.uint8))
    with pytest.raises(TypeError, match="attn_mask must be a tensor or None, got list"):
        mha(x, x, x, attn_mask=[[True] * 6] * 6)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_key_padding_mask_matches_torch(kind):
    ours, base, ref = _pair(torch.float32, batch_first=True)
    kpm = torch.zeros(2, 10, dtype=torch.bool)
    kpm[0, 6:] = True
    kpm[1, :2] = True
    if kind == "float":
        kpm = torch.zeros(2, 10).masked_fill(kpm, float("-inf"))
    _check("kpm", ours, base, ref, _inputs(torch.float32), torch.float32, key_padding_mask=kpm)


def test_attn_mask_and_causal_padding_match_torch():
    ours, base, ref = _pair(torch.float32, batch_first=True)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(10, dtype=torch.bool)
    kpm = torch.zeros(2, 10, dtype=torch.bool)
    kpm[0, 7:] = True
    _check("attn_mask", ours, base, ref, _inputs(torch.float32), torch.float32,
           attn_mask=torch.randn(2 * H, 10, 10))
    _check("causal+kpm", ours, base, ref, _inputs(torch.float32), torch.float32, key_padding_mask=kpm,
           is_causal=True, ref_kw={"key_padding_mask": kpm, "attn_mask": causal, "is_causal": True})


# ---------------------------------------------------------------------------
# RotaryEmbedding
# ---------------------------------------------------------------------------

def _rope_complex(x, positions, dim, base, interleaved):
    """float64 reference: pairs as complex numbers times exp(i * pos * theta_k)."""
    x = x.double()
    rot, rest = x[..., :dim], x[..., dim:]
    if interleaved:
        z = torch.complex(rot[..., 0::2], rot[..., 1::2])
    else:
        z = torch.complex(rot[..., :dim // 2], rot[..., dim // 2:])
    theta = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angle = positions.double()[..., None, None] * theta
    z = z * torch.polar(torch.ones_like(angle), angle)
    out = torch.stack((z.real, z.imag), -1).flatten(-2) if interleaved else torch.cat((z.real, z.imag), -1)
    return torch.cat((out, rest), -1)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dim, head_dim", [(16, 16), (8, 24)])
def test_rotary_matches_complex_rotation(interleaved, dim, head_dim):
    rope = RotaryEmbedding(dim, base=500.0, interleaved=interleaved)
    q, k = torch.randn(2, 9, 3, head_dim), torch.randn(2, 9, 1, head_dim)
    rq, rk = rope(q, k, offset=5)
    pos = torch.arange(5, 14)
    torch.testing.assert_close(rq.double(), _rope_complex(q, pos, dim, 500.0, interleaved), rtol=0, atol=1e-5)
    torch.testing.assert_close(rk.double(), _rope_complex(k, pos, dim, 500.0, interleaved), rtol=0, atol=1e-5)
    # per-row positions (B, N)
    pos2 = torch.randint(0, 100, (2, 9))
    torch.testing.assert_close(rope.rotate(q, pos2).double(), _rope_complex(q, pos2, dim, 500.0, interleaved),
                               rtol=0, atol=1e-4)


def test_rotary_scores_depend_on_relative_position():
    rope = RotaryEmbedding(16)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
    scores = [(rope.rotate(q, torch.tensor([m])) * rope.rotate(k, torch.tensor([m - 3]))).sum()
              for m in (3, 10, 50)]
    torch.testing.assert_close(torch.stack(scores), scores[0].expand(3), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# Attention block
# ---------------------------------------------------------------------------

def _attention_ref(block, x, dtype, positions=None, base=None):
    """The block's computation in plain PyTorch (dtype), K/V heads repeated;
    RoPE at ``base`` when given (the constructor's argument, not the value the
    module stored), else at block.rotary.base."""
    x = x.to(dtype)
    wq = block.qkv.weight.to(dtype)
    bq = None if block.qkv.bias is None else block.qkv.bias.to(dtype)
    b, n, _ = x.shape
    h, g, d = block.n_heads, block.n_kv_heads, block.head_dim
    q, k, v = torch.nn.functional.linear(x, wq, bq).view(b, n, h + 2 * g, d).split((h, g, g), dim=2)
    if block.rotary is not None:
        pos = torch.arange(n) if positions is None else positions
        rope_base = block.rotary.base if base is None else base
        q = _rope_complex(q, pos, block.rotary.dim, rope_base, False).to(dtype)
        k = _rope_complex(k, pos, block.rotary.dim, rope_base, False).to(dtype)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    k, v = k.repeat_interleave(h // g, 1), v.repeat_interleave(h // g, 1)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=block.causal)
    out = out.transpose(1, 2).reshape(b, n, h * d)
    wo = block.out.weight.to(dtype)
    return torch.nn.functional.linear(out, wo, None if block.out.bias is None else block.out.bias.to(dtype))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("heads, causal, rotary, bias", [
    ((4, 4), True, True, False),
    ((4, 2), True, True, True),
    ((4, 1), False, False, False),
    ((6, 2), False, True, True),
], ids=["mha-causal-rope", "gqa-causal-rope-bias", "mqa-full", "gqa-full-rope-bias"])
def test_attention_block_matches_reference(dtype, heads, causal, rotary, bias):
    dtype = DTYPES[dtype]
    block = Attention(48, heads[0], heads[1], causal=causal, rotary=rotary, bias=bias)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(std=0.3)
    x = torch.randn(2, 11, 48, dtype=torch.float64)
    xin = x.to(dtype).requires_grad_(True)
    got = block.to(dtype)(xin)
    want = _attention_ref(block, x, torch.float64)
    base = _attention_ref(block, x, dtype)
    assert_close("out", got.double(), want, baseline=base.double(), dtype=dtype)
    w = torch.randn_like(want)
    (got.double() * w).sum().backward()
    xr = x.clone().requires_grad_(True)
    (_attention_ref(block.double(), xr, torch.float64) * w).sum().backward()
    xb = x.to(dtype).requires_grad_(True)
    block.float()  # the baseline's gradient in the test dtype
    (_attention_ref(block.to(dtype), xb, dtype).double() * w).sum().backward()
    assert_close("grad x", xin.grad.double(), xr.grad, baseline=xb.grad.double(), factor=3.0, dtype=dtype)


def _random_block(dtype, **kw):
    block = Attention(48, 4, 2, rotary=True, **kw)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(std=0.3)
    return block


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("base", [100.0, 1e6])
def test_attention_block_rope_base(dtype, base):
    """rope_base reaches the rotation (a base far from the default 10000:
    low and high frequencies)."""
    dtype = DTYPES[dtype]
    block = _random_block(dtype, causal=True, rope_base=base)
    assert block.rotary.base == base
    x = torch.randn(2, 11, 48, dtype=torch.float64)
    pos = torch.arange(11) * 7  # spread positions: a wrong base changes the angles a lot
    got = block.to(dtype)(x.to(dtype), positions=pos)
    want = _attention_ref(block.double(), x, torch.float64, pos, base)
    base_out = _attention_ref(block.to(dtype), x, dtype, pos, base)
    assert_close("out", got.double(), want, baseline=base_out.double(), dtype=dtype)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("causal", [True, False])
def test_attention_block_per_row_positions(dtype, causal):
    """(B, N) positions: each batch row rotated at its own positions (with
    gaps, as for packed or left-padded rows), not row 0's for all."""
    dtype = DTYPES[dtype]
    block = _random_block(dtype, causal=causal)
    x = torch.randn(3, 9, 48, dtype=torch.float64)
    pos = torch.stack([torch.arange(9), torch.arange(9) * 3 + 5, torch.randperm(40)[:9].sort().values])
    got = block.to(dtype)(x.to(dtype), positions=pos)
    want = _attention_ref(block.double(), x, torch.float64, pos)
    base_out = _attention_ref(block.to(dtype), x, dtype, pos)
    assert_close("out", got.double(), want, baseline=base_out.double(), dtype=dtype)


def test_attention_packed_sequences_match_separate_calls():
    """cu_seqlens: each packed sequence attends only to itself, rotary positions restart."""
    block = Attention(32, 4, 2, causal=True, rotary=True)
    lens = [5, 9, 3]
    xs = [torch.randn(1, n, 32) for n in lens]
    cu = torch.tensor([0, 5, 14, 17], dtype=torch.int32)
    packed = block(torch.cat([x[0] for x in xs]), cu_seqlens=cu, max_seqlen=9)
    for i, x in enumerate(xs):
        torch.testing.assert_close(packed[cu[i]:cu[i + 1]], block(x)[0], rtol=1e-5, atol=1e-5)


def test_attention_packed_with_no_tokens():
    """A packed batch of no tokens (every sequence empty) gives an empty output
    (before: the default max_seqlen, total_tokens = 0, was refused)."""
    block = Attention(32, 4, 2, causal=True, rotary=True)
    out = block(torch.randn(0, 32), cu_seqlens=torch.tensor([0, 0], dtype=torch.int32))
    assert out.shape == (0, 32)


def test_attention_bad_offsets_and_positions_raise():
    """cu_seqlens and positions are checked before the rotary embedding uses them."""
    block = Attention(32, 4, rotary=True)
    with pytest.raises(ValueError, match="cu_seqlens must be 1-D"):
        block(torch.randn(9, 32), cu_seqlens=torch.tensor([[0, 4, 9]], dtype=torch.int32))
    with pytest.raises(ValueError, match="cu_seqlens must be 1-D"):
        block(torch.randn(9, 32), cu_seqlens=torch.zeros(0, dtype=torch.int32))
    with pytest.raises(TypeError, match="cu_seqlens must be int32"):
        block(torch.randn(9, 32), cu_seqlens=torch.tensor([0, 4, 9]))
    with pytest.raises(ValueError, match="positions of shape \\(6,\\) do not broadcast"):
        block(torch.randn(2, 5, 32), positions=torch.arange(6))
    with pytest.raises(ValueError, match="positions of shape \\(4,\\) do not broadcast"):
        RotaryEmbedding(8).rotate(torch.randn(1, 3, 2, 8), torch.arange(4))


def test_attention_bad_heads():
    with pytest.raises(ValueError, match="n_heads \\(6\\) must be a positive multiple of n_kv_heads \\(4\\)"):
        Attention(48, 6, 4)


# ---------------------------------------------------------------------------
# Contract edges (fuzzing pass, session 48)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("kw, n_k, same", [
    ({"add_bias_kv": True}, 10, "self"),
    ({"add_zero_attn": True}, 7, "kv"),                        # L > S: top-left over the real keys
    ({"add_bias_kv": True, "add_zero_attn": True}, 10, "self"),
], ids=["bias_kv", "zero_attn_cross", "both"])
def test_is_causal_with_appended_tokens_matches_torch(kw, n_k, same):
    """is_causal=True with add_bias_kv / add_zero_attn, with or without the
    causal attn_mask: the causal mask covers the real keys and every query
    attends the appended tokens, as torch.nn.MultiheadAttention computes it
    with the causal attn_mask and need_weights=True (its default) or
    is_causal=False."""
    ours, base, ref = _pair(torch.float32, batch_first=True, **kw)
    inputs = _inputs(torch.float32, n_k=n_k, same=same)
    causal = torch.ones(10, n_k, dtype=torch.bool).triu(1)
    # the reference reading: PyTorch's need_weights=True path equals is_causal=False with the mask
    q, k, v = (t.detach() for t in inputs)
    want_nw = ref(q, k, v, attn_mask=causal, is_causal=True, need_weights=True)[0]
    torch.testing.assert_close(want_nw, ref(q, k, v, attn_mask=causal, need_weights=False)[0], rtol=0, atol=1e-12)
    _check("causal+mask", ours, base, ref, inputs, torch.float32, grad=True, is_causal=True, attn_mask=causal,
           ref_kw={"attn_mask": causal})
    _check("causal, no mask", ours, base, ref, inputs, torch.float32, is_causal=True,
           ref_kw={"attn_mask": causal})


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_is_causal_hint_with_key_padding_mask_uses_attn_mask_as_given(kind):
    """With a key_padding_mask, an attn_mask passed with is_causal=True is used
    as given (is_causal is a hint, as in PyTorch): no causal mask is added to it."""
    ours, base, ref = _pair(torch.float32, batch_first=True)
    kpm = torch.zeros(2, 10, dtype=torch.bool)
    kpm[0, 7:] = True
    kpm[1, :2] = True
    if kind == "bool":
        attn_mask = torch.zeros(10, 10, dtype=torch.bool)   # attend everything: not causal
    else:
        attn_mask = torch.randn(10, 10, dtype=torch.float64)
        kpm = torch.zeros(2, 10, dtype=torch.float64).masked_fill(kpm, float("-inf"))
    _check("kpm+mask+hint", ours, base, ref, _inputs(torch.float32), torch.float32, grad=True,
           key_padding_mask=kpm, attn_mask=attn_mask, is_causal=True)


@pytest.mark.parametrize("dim", [8, 4], ids=["full", "partial"])
def test_rotary_positions_must_broadcast_to_x_leading_dims(dim):
    """positions must broadcast *to* x.shape[:-2]: positions that would make
    the output larger than x raise a ValueError naming both shapes."""
    rope = RotaryEmbedding(dim)
    x = torch.randn(1, 5, 2, 8)
    msg = r"positions of shape \(3, 5\) do not broadcast to x's leading dims \(1, 5\) \(x: \(1, 5, 2, 8\)\)"
    with pytest.raises(ValueError, match=msg):
        rope.rotate(x, torch.arange(5).expand(3, 5))
    with pytest.raises(ValueError, match=msg):
        rope(x, x, positions=torch.arange(5).expand(3, 5))
    # what does broadcast to x's leading dims is fine, and keeps x's shape
    assert rope.rotate(x, torch.arange(5)).shape == x.shape
    assert rope.rotate(x, torch.arange(5)[None]).shape == x.shape


def test_attention_packed_max_seqlen_is_checked_with_check_inputs():
    """max_seqlen is an upper bound the caller guarantees, as in
    flash_attn_varlen_func: check_inputs=True checks it (and cu_seqlens)
    against the values of cu_seqlens (a host sync) and raises when it is too
    small; a larger bound gives the same output as the default."""
    block = Attention(16, 2, causal=False)
    x = torch.randn(9, 16)
    cu = torch.tensor([0, 2, 9], dtype=torch.int32)   # lengths 2 and 7
    with pytest.raises(ValueError, match="a sequence of 7 rows exceeds max_seqlen"):
        block(x, cu_seqlens=cu, max_seqlen=2, check_inputs=True)
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[0\] must be 0"):
        block(x, cu_seqlens=torch.tensor([1, 2, 9], dtype=torch.int32), check_inputs=True)
    want = block(x, cu_seqlens=cu)
    for m in (7, 8):
        torch.testing.assert_close(block(x, cu_seqlens=cu, max_seqlen=m, check_inputs=True), want,
                                   rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("build,exc,match", [
    (lambda: MultiheadAttention(16, 2, dropout=1.5), ValueError, r"dropout must be in \[0, 1\), got 1.5"),
    (lambda: MultiheadAttention(16, 2, dropout="0.1"), TypeError, r"dropout must be a Python float, got str"),
    (lambda: MultiheadAttention(8.0, 2), TypeError, r"embed_dim must be an int, got float 8.0"),
    (lambda: MultiheadAttention(16, 2, kdim=0), ValueError, r"kdim must be at least 1, got 0"),
    (lambda: MultiheadAttention(16, 2, batch_first=1), TypeError, r"batch_first must be a bool, got int"),
    (lambda: Attention(16, 4, head_dim=-2), ValueError, r"head_dim must be at least 1, got -2"),
    (lambda: Attention(16, 2, dropout=-0.1), ValueError, r"dropout must be in \[0, 1\), got -0.1"),
    (lambda: Attention(16, 2, window_size=(-3, 0)), ValueError, r"window_size left must be >= -1"),
    (lambda: Attention(16, 2, softmax_scale=float("nan")), ValueError, r"softmax_scale must be finite"),
    (lambda: Attention(16, 2, causal=1), TypeError, r"causal must be a bool, got int"),
    (lambda: Attention(16, 2, rotary=True, rope_base=-1.0), ValueError,
     r"rope_base must be a finite positive float, got -1.0"),
    (lambda: RotaryEmbedding(8, base=0.0), ValueError, r"base must be finite and positive"),
    (lambda: RotaryEmbedding(4.0), TypeError, r"dim must be an int, got float 4.0"),
    (lambda: RotaryEmbedding(8, interleaved=1), TypeError, r"interleaved must be a bool, got int"),
], ids=lambda x: None)
def test_bad_constructor_arguments_raise(build, exc, match):
    """Bad module arguments are refused when the module is built, named as
    the constructor names them (not at the first forward, under the
    functions' names, nor silently: a base of 0 gave NaN rotations)."""
    with pytest.raises(exc, match=match):
        build()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_float32_mask_on_a_half_module(dtype):
    """A float32 key_padding_mask given to a float16 / bfloat16 module is
    added in float32, as PyTorch's module does: a row masked by one finite
    large value attends uniformly (cast to the module's dtype it became -inf
    and the row gave zeros, 0.25-0.32 off)."""
    torch.manual_seed(0)
    ref_mod = torch.nn.MultiheadAttention(16, 2, batch_first=True).double()
    mod = MultiheadAttention(16, 2, batch_first=True)
    mod.load_state_dict(ref_mod.state_dict())
    x = torch.randn(2, 5, 16)
    fill = -1e5 if dtype == torch.float16 else torch.finfo(torch.float32).min
    kpm = torch.zeros(2, 5)
    kpm[1] = fill
    want = ref_mod(x.double(), x.double(), x.double(), key_padding_mask=kpm.double(), need_weights=False)[0]
    mod = mod.to(dtype)
    got = mod(x.to(dtype), x.to(dtype), x.to(dtype), key_padding_mask=kpm)[0]
    err = (got.double() - want).abs().max().item()
    assert err < 1e-2, f"{dtype}: max |ours - float64 PyTorch| = {err:.3g}"


def test_seq_first_output_is_contiguous_and_transformer_fast_path_runs():
    """batch_first=False returns (L, B, E) in memory, as PyTorch (out.view(L * B, E)
    works); torch's TransformerEncoderLayer runs with this module as its
    self_attn, in training and on its inference fast path (merge_masks)."""
    torch.manual_seed(0)
    mod = MultiheadAttention(16, 2)
    x = torch.randn(5, 3, 16)
    out = mod(x, x, x)[0]
    assert out.shape == (5, 3, 16) and out.is_contiguous()
    out.view(15, 16)
    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
    want_layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
    want_layer.load_state_dict(layer.state_dict())
    ours = MultiheadAttention(16, 2, batch_first=True)
    ours.load_state_dict(layer.self_attn.state_dict())
    layer.self_attn = ours
    src = torch.randn(2, 6, 16)
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    for train in (True, False):
        layer.train(train)
        want_layer.train(train)
        with torch.set_grad_enabled(train):
            got = layer(src, src_key_padding_mask=pad)
            want = want_layer(src, src_key_padding_mask=pad)
        # (the fast path gives padded rows as zeros in a nested layout; compare the real rows)
        keep = ~pad
        assert torch.allclose(got[keep], want[keep], atol=1e-5), f"train={train}"


def test_attention_packed_all_empty_with_a_zero_bound():
    """A packed batch whose sequences are all empty, with max_seqlen=0 (a valid bound)."""
    attn = Attention(16, 2)
    out = attn(torch.randn(0, 16), cu_seqlens=torch.zeros(3, dtype=torch.int32), max_seqlen=0)
    assert out.shape == (0, 16)


def test_causal_padding_mask_stays_o_of_n(monkeypatch):
    """is_causal with a key_padding_mask: the kernels get the (B, 1, 1, S)
    padding mask and apply the causal mask themselves (a dense (B, 1, L, S)
    mask was built from O(N) inputs), top-left as PyTorch's when L != S."""
    import flashattn_triton.nn as fnn
    seen = []
    real = fnn._sdpa

    def spy(q, k, v, mask, *args, **kwargs):
        seen.append(tuple(mask.shape))
        return real(q, k, v, mask, *args, **kwargs)
    monkeypatch.setattr(fnn, "_sdpa", spy)
    torch.manual_seed(0)
    ref_mod = torch.nn.MultiheadAttention(16, 2, batch_first=True).double()
    mod = MultiheadAttention(16, 2, batch_first=True)
    mod.load_state_dict(ref_mod.state_dict())
    q, kv = torch.randn(2, 6, 16), torch.randn(2, 9, 16)
    kpm = torch.zeros(2, 9, dtype=torch.bool)
    kpm[1, 3:5] = True
    got = mod(q, kv, kv, key_padding_mask=kpm, is_causal=True)[0]
    causal = torch.ones(6, 9, dtype=torch.bool).triu(1)  # top-left: query i sees keys j <= i
    want = ref_mod(q.double(), kv.double(), kv.double(), key_padding_mask=kpm, attn_mask=causal,
                   need_weights=False)[0]
    assert seen == [(2, 1, 1, 9)], seen
    assert torch.allclose(got.double(), want, atol=1e-5), (got.double() - want).abs().max()
