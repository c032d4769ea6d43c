"""Bad input raises a clear error naming the argument and the values seen."""

import pytest
import torch

from flashattn_triton import flash_attn_func, scaled_dot_product_attention


def qkv(device, b=1, n_q=8, n_k=8, h_q=2, h_kv=2, d=16, dtype=torch.float16):
    return (torch.randn(b, n_q, h_q, d, device=device).to(dtype),
            torch.randn(b, n_k, h_kv, d, device=device).to(dtype),
            torch.randn(b, n_k, h_kv, d, device=device).to(dtype))


def test_wrong_dtype(device):
    q, k, v = qkv(device)
    with pytest.raises(TypeError, match=r"q must be float16, bfloat16 or float32, got torch.float64"):
        flash_attn_func(q.double(), k, v)
    with pytest.raises(TypeError, match=r"k must be .*got torch.int32"):
        flash_attn_func(q, k.int(), v)


def test_mixed_dtypes(device):
    q, k, v = qkv(device)
    with pytest.raises(TypeError, match=r"share one dtype, got torch.float16, torch.bfloat16, torch.float16"):
        flash_attn_func(q, k.bfloat16(), v)


def test_mixed_devices(device):
    q, k, v = qkv(device)
    with pytest.raises(ValueError, match=r"one device, got .*meta"):
        flash_attn_func(q, k, v.to("meta"))


def test_not_a_tensor(device):
    q, k, v = qkv(device)
    with pytest.raises(TypeError, match=r"v must be a torch.Tensor, got list"):
        flash_attn_func(q, k, [1, 2])


@pytest.mark.parametrize("layout", ["strided", "jagged"])
def test_nested_tensors_raise_type_error(device, layout):
    """A nested tensor raises TypeError naming the argument (before: PyTorch's
    internal errors on reading its shape)."""
    nt = torch.nested.nested_tensor([torch.randn(3, 2, 16), torch.randn(5, 2, 16)],
                                    layout=getattr(torch, layout), device=device)
    with pytest.raises(TypeError, match=r"q must be a dense \(strided\) tensor, got a nested tensor"):
        flash_attn_func(nt, nt, nt)
    with pytest.raises(TypeError, match=r"query must be a dense \(strided\) tensor, got a nested tensor"):
        scaled_dot_product_attention(nt, nt, nt)


def test_varlen_max_seqlen_bound(device):
    """max_seqlen past 2**31 - 1 raises ValueError naming it (the kernels'
    lengths are 32-bit; before, the grid grew with the bound: a hang or a
    failed launch)."""
    from flashattn_triton import flash_attn_varlen_func
    q = torch.randn(3, 2, 16, device=device)
    cu = torch.tensor([0, 3], dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=r"max_seqlen_k=1099511627776 exceeds the largest supported"):
        flash_attn_varlen_func(q, q, q, cu, cu, 3, 2 ** 40)


def test_wrong_rank(device):
    q, k, v = qkv(device)
    with pytest.raises(ValueError, match=r"q must be 4-D \(batch, seqlen, nheads, headdim\), got shape \(8, 2, 16\)"):
        flash_attn_func(q[0], k, v)
    with pytest.raises(ValueError, match=r"query, key, value must have the same number of dims, got 3, 4, 4"):
        scaled_dot_product_attention(q[0], k, v)
    with pytest.raises(ValueError, match=r"query must have at least 3 dims"):
        scaled_dot_product_attention(q[0, 0], k[0, 0], v[0, 0])


def test_heads_not_multiple(device):
    q, k, v = qkv(device, h_q=3, h_kv=2)
    with pytest.raises(ValueError, match=r"query heads \(q.shape\[2\]=3\) must be a multiple .* \(k.shape\[2\]=2\)"):
        flash_attn_func(q, k, v)


def test_sdpa_gqa_needs_flag(device):
    q, k, v = (t.transpose(1, 2) for t in qkv(device, h_q=4, h_kv=2))
    with pytest.raises(ValueError, match=r"query has 4 heads and key/value have 2: pass enable_gqa=True"):
        scaled_dot_product_attention(q, k, v)


def test_head_dim_mismatch(device):
    q, k, v = qkv(device)
    with pytest.raises(ValueError, match=r"head dims differ: q.shape\[3\]=16, k.shape\[3\]=32"):
        flash_attn_func(q, torch.cat([k, k], -1), torch.cat([v, v], -1))


def test_kv_shape_mismatch(device):
    q, k, v = qkv(device)
    with pytest.raises(ValueError, match=r"k and v must have the same shape"):
        flash_attn_func(q, k, v[:, :4])


def test_batch_mismatch(device):
    q, k, v = qkv(device, b=2)
    with pytest.raises(ValueError, match=r"batch sizes differ: q.shape\[0\]=2, k.shape\[0\]=1"):
        flash_attn_func(q, k[:1], v[:1])


def test_unsupported_head_dim(device):
    q, k, v = qkv(device, d=520)
    with pytest.raises(NotImplementedError, match=r"head dim 520 .*supported: 1..512"):
        flash_attn_func(q, k, v)


def test_last_dim_stride(device):
    q, k, v = qkv(device)
    q_t = q.transpose(-1, -2).contiguous().transpose(-1, -2)
    with pytest.raises(ValueError, match=r"q must have stride 1 in its last dimension, got strides"):
        flash_attn_func(q_t, k, v)


def test_no_variant_is_unimplemented(device):
    """Every variant of flash-attn's signature runs (none raises NotImplementedError)."""
    q, k, v = qkv(device, h_q=2, h_kv=1)
    flash_attn_func(q, k, v, dropout_p=0.1, softcap=30.0, alibi_slopes=torch.ones(2, device=device),
                    window_size=(3, 1), sinks=torch.zeros(2, device=device))
    qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))
    scaled_dot_product_attention(qs, ks, vs, attn_mask=torch.ones(8, 8, dtype=torch.bool, device=device),
                                 dropout_p=0.5, enable_gqa=True)


@pytest.mark.parametrize("kwargs,exc,msg", [
    (dict(softcap=-1.0), ValueError, r"softcap must be finite and >= 0 \(0 = off\), got -1.0"),
    (dict(softcap=float("inf")), ValueError, r"softcap must be finite"),
    (dict(softcap="30"), TypeError, r"softcap must be a Python float, got str"),
    (dict(dropout_p=1.0), ValueError, r"dropout_p must be in \[0, 1\), got 1.0"),
    (dict(dropout_p=-0.1), ValueError, r"dropout_p must be in \[0, 1\), got -0.1"),
    (dict(dropout_p=torch.tensor(0.1)), TypeError, r"dropout_p must be a Python float, got Tensor"),
    (dict(alibi_slopes=torch.ones(3)), ValueError,
     r"alibi_slopes must have shape \(2,\) or \(1, 2\) \(nheads,\) / \(batch, nheads\), got \(3,\)"),
    (dict(alibi_slopes=torch.ones(2, dtype=torch.float16)), TypeError,
     r"alibi_slopes must be float32, got torch.float16"),
    (dict(alibi_slopes=[1.0, 1.0]), TypeError, r"alibi_slopes must be a torch.Tensor, got list"),
    (dict(sinks=torch.ones(1, 2)), ValueError, r"sinks must have shape \(nheads,\) = \(2,\), got \(1, 2\)"),
    (dict(sinks=torch.ones(2, dtype=torch.int32)), TypeError,
     r"sinks must be a floating-point tensor, got torch.int32"),
])
def test_bad_variant_arguments(device, kwargs, exc, msg):
    q, k, v = qkv(device)
    kwargs = {n: t.to(device) if isinstance(t, torch.Tensor) and t.dim() else t for n, t in kwargs.items()}
    with pytest.raises(exc, match=msg):
        flash_attn_func(q, k, v, **kwargs)


def test_variant_tensors_on_wrong_device(device):
    q, k, v = qkv(device)
    with pytest.raises(ValueError, match=r"sinks must be on .* like q, got meta"):
        flash_attn_func(q, k, v, sinks=torch.ones(2, device="meta"))


@pytest.mark.parametrize("mask,kwargs,exc,msg", [
    (lambda d: torch.ones(8, 9, dtype=torch.bool, device=d), {}, ValueError,
     r"attn_mask of shape \(8, 9\) is not broadcastable to \(1, 2, 8, 8\)"),
    (lambda d: torch.ones(2, 1, 2, 8, 8, dtype=torch.bool, device=d), {}, ValueError,
     r"attn_mask of shape \(2, 1, 2, 8, 8\) is not broadcastable"),
    (lambda d: torch.ones(8, 8, dtype=torch.int64, device=d), {}, TypeError,
     r"attn_mask must be bool or float16/bfloat16/float32, got torch.int64"),
    (lambda d: torch.ones(8, 8, dtype=torch.bool, device=d), dict(is_causal=True), ValueError,
     r"attn_mask and is_causal=True cannot be combined"),
    (lambda d: [[True]], {}, TypeError, r"attn_mask must be a torch.Tensor or None, got list"),
])
def test_sdpa_bad_mask(device, mask, kwargs, exc, msg):
    q, k, v = (t.transpose(1, 2) for t in qkv(device))
    with pytest.raises(exc, match=msg):
        scaled_dot_product_attention(q, k, v, attn_mask=mask(device), **kwargs)


def test_sdpa_bad_dropout(device):
    q, k, v = (t.transpose(1, 2) for t in qkv(device))
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got 1.5"):
        scaled_dot_product_attention(q, k, v, dropout_p=1.5)


def test_bad_scale(device):
    q, k, v = qkv(device)
    with pytest.raises(TypeError, match=r"softmax_scale must be a Python float or None, got Tensor"):
        flash_attn_func(q, k, v, softmax_scale=torch.tensor(0.1))
    with pytest.raises(ValueError, match=r"softmax_scale must be finite, got nan"):
        flash_attn_func(q, k, v, softmax_scale=float("nan"))
    # an int too large for a float: ValueError (float() would raise OverflowError)
    with pytest.raises(ValueError, match=r"softmax_scale must be finite, got 100000.*\(401 characters\)"):
        flash_attn_func(q, k, v, softmax_scale=10 ** 400)
    with pytest.raises(ValueError, match=r"softcap must be finite and >= 0 \(0 = off\), got 100000"):
        flash_attn_func(q, k, v, softcap=10 ** 400)
    # past float32 once scaled by log2(e) (base-2 scores), or a float32 denormal
    with pytest.raises(ValueError, match=r"softmax_scale=1e\+39 is too large: .* < 2.359e\+38"):
        flash_attn_func(q, k, v, softmax_scale=1e39)
    with pytest.raises(ValueError, match=r"scale=-3e\+38 is too large"):
        scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=-3e38)
    for cap in (1e-40, 3e38):
        with pytest.raises(ValueError, match=r"softcap=.* is outside what the kernels' float32 arithmetic holds"):
            flash_attn_func(q, k, v, softcap=cap)
    from flashattn_triton import flash_attn_with_kvcache
    with pytest.raises(ValueError, match=r"softcap=1e-40 is outside"):
        flash_attn_with_kvcache(q, k, v, softcap=1e-40)
    with pytest.raises(ValueError, match=r"softmax_scale=1e\+39 is too large"):
        flash_attn_with_kvcache(q, k, v, softmax_scale=1e39)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_denormal_scale_is_uniform_attention(device, dtype):
    """A scale below float32's smallest normal makes every score 0 to float
    precision: the output is the mean of the visible values (it was computed
    in float64 by the interpreter, whose bf16 cast of P then went wrong)."""
    q, k, v = qkv(device, n_q=7, n_k=20, dtype=dtype)
    got = flash_attn_func(q, k, v, softmax_scale=1e-40, causal=True)
    visible = torch.arange(7, device=device)[:, None] + 13 >= torch.arange(20, device=device)[None]
    want = (visible[None, :, None, :, None] * v.double()[:, None].transpose(2, 3)).sum(3) / visible.sum(1)[
        None, :, None, None]
    err = (got.double() - want).abs().max().item()
    assert err < 2e-2 if dtype == torch.bfloat16 else err < 1e-5, f"max |out - mean of the visible values| = {err:.3g}"


def test_packed_arguments(device):
    """The packed entries: a non-tensor is a TypeError, a wrong layout a ValueError."""
    from flashattn_triton import flash_attn_kvpacked_func, flash_attn_qkvpacked_func
    q, k, v = qkv(device)
    with pytest.raises(TypeError, match=r"qkv must be a torch.Tensor \(batch, seqlen, 3, nheads, headdim\), got list"):
        flash_attn_qkvpacked_func([[1.0]])
    with pytest.raises(TypeError, match=r"kv must be a torch.Tensor .*got NoneType"):
        flash_attn_kvpacked_func(q, None)
    with pytest.raises(ValueError, match=r"qkv must be a 5-D tensor .*got shape \(1, 8, 2, 2, 16\)"):
        flash_attn_qkvpacked_func(torch.stack([q, k], dim=2))
    with pytest.raises(ValueError, match=r"kv must be a 5-D tensor .*got shape \(1, 8, 2, 16\)"):
        flash_attn_kvpacked_func(q, k)
    from flashattn_triton import flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func
    cu = torch.tensor([0, 8], dtype=torch.int32, device=device)
    with pytest.raises(TypeError, match=r"qkv must be a torch.Tensor \(total, 3, nheads, headdim\), got list"):
        flash_attn_varlen_qkvpacked_func([[1.0]], cu, 8)
    with pytest.raises(ValueError, match=r"qkv must be a 4-D tensor .*got shape \(8, 2, 2, 16\)"):
        flash_attn_varlen_qkvpacked_func(torch.stack([q[0], k[0]], dim=1), cu, 8)
    with pytest.raises(ValueError, match=r"kv must be a 4-D tensor \(total_k, 2, nheads_k, headdim\), got shape "
                                         r"\(1, 8, 2, 2, 16\)"):
        flash_attn_varlen_kvpacked_func(q[0], torch.stack([k, v], dim=2), cu, cu, 8, 8)


def test_too_many_heads(device):
    q, k, v = qkv(device, n_q=1, n_k=1, h_q=65536, h_kv=1, d=8)
    with pytest.raises(NotImplementedError, match=r"q has 65536 heads \(q.shape\[2\]\); at most 65535"):
        flash_attn_func(q, k, v)


@pytest.mark.parametrize("kwargs,name", [
    (dict(causal="False"), "causal must be a bool, got str 'False'"),
    (dict(causal=torch.tensor(True)), "causal must be a bool, got torch.Tensor"),
    (dict(causal=__import__("numpy").bool_(True)), r"causal must be a bool, got numpy\.bool_? (np\.)?True"),
    (dict(return_lse="no"), "return_lse must be a bool, got str"),
    (dict(deterministic=1), "deterministic must be a bool, got int"),
])
def test_flags_must_be_bool(device, kwargs, name):
    q, k, v = qkv(device)
    with pytest.raises(TypeError, match=name):
        flash_attn_func(q, k, v, **kwargs)


def test_sdpa_flags_must_be_bool(device):
    q, k, v = (t.transpose(1, 2) for t in qkv(device))
    with pytest.raises(TypeError, match="is_causal must be a bool, got int"):
        scaled_dot_product_attention(q, k, v, is_causal=1)


@pytest.mark.parametrize("window,exc,msg", [
    (None, TypeError, r"window_size must be a pair \(left, right\) of ints, got None"),
    ((1, 2, 3), TypeError, r"window_size must be a pair"),
    ((1.5, 0), TypeError, r"window_size left must be an int, got float"),
    ((4, -2), ValueError, r"window_size right must be >= -1 \(-1 = unbounded\), got -2"),
])
def test_bad_window(device, window, exc, msg):
    q, k, v = qkv(device)
    with pytest.raises(exc, match=msg):
        flash_attn_func(q, k, v, window_size=window)


def test_zero_head_dim(device):
    q, k, v = qkv(device, d=0)
    with pytest.raises(ValueError, match=r"q.shape\[3\] \(the head dim\) must be at least 1, got 0"):
        flash_attn_func(q, k, v)


def test_varlen_cu_seqlens_checks(device):
    from flashattn_triton import flash_attn_varlen_func
    q, k, v = (t[0] for t in qkv(device, n_q=10, n_k=10))
    cu = torch.tensor([0, 4, 10], dtype=torch.int32, device=device)
    with pytest.raises(TypeError, match="cu_seqlens_q must be int32, got torch.int64"):
        flash_attn_varlen_func(q, k, v, cu.long(), cu, 6, 6)
    with pytest.raises(ValueError, match=r"cu_seqlens_q and cu_seqlens_k must have the same length"):
        flash_attn_varlen_func(q, k, v, cu, cu[:2], 6, 6)
    with pytest.raises(ValueError, match="max_seqlen_k must be positive, got 0"):
        flash_attn_varlen_func(q, k, v, cu, cu, 6, 0)
    with pytest.raises(ValueError, match=r"a sequence of 6 rows exceeds max_seqlen_q=5"):
        flash_attn_varlen_func(q, k, v, cu, cu, 5, 6, check_inputs=True)
    short = torch.tensor([0, 4, 8], dtype=torch.int32, device=device)  # 2 trailing rows in no sequence
    past = torch.tensor([0, 4, 11], dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=r"cu_seqlens_k\[-1\]=11 must equal the 10 packed rows: it points past"):
        flash_attn_varlen_func(q, k, v, cu, past, 6, 7, check_inputs=True)
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[-1\]=8 must equal the 10 packed rows"):
        flash_attn_varlen_func(q, k, v, short, cu, 6, 6, check_inputs=True)
    bad = torch.tensor([0, 7, 4], dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=r"cu_seqlens_k must be non-decreasing"):
        flash_attn_varlen_func(q, k, v, cu, bad, 6, 7, check_inputs=True)
    with pytest.raises(ValueError, match=r"q must be 3-D \(total_tokens, nheads, headdim\)"):
        flash_attn_varlen_func(q[None], k, v, cu, cu, 6, 6)


def _negated(t):
    """A tensor whose values are -t held as t's memory with PyTorch's lazy
    negation bit (what `z.conj().imag` of a complex z gives)."""
    n = torch._neg_view(t.neg())
    assert n.is_neg() and torch.equal(n, t)
    return n


def test_negated_views_are_read_as_their_values(device):
    """Tensors with the lazy negation bit set mean their values, not their
    memory: every entry point gives what the same values without the bit give
    (forward and gradients; twice, so a call plan's replay is checked too)."""
    from flashattn_triton import flash_attn_varlen_func
    from flashattn_triton.kernels.combine import combine_attention_states
    q, k, v = qkv(device, n_q=9, n_k=13, h_q=4, h_kv=2)
    slopes = torch.rand(4, device=device)
    sinks = torch.randn(4, device=device)
    for _ in range(2):
        for neg in range(3):
            args = [q, k, v]
            args[neg] = _negated(args[neg])
            leaves = [a.detach().requires_grad_() for a in args]
            out = flash_attn_func(*leaves, causal=True, alibi_slopes=_negated(slopes), sinks=_negated(sinks))
            out.float().square().sum().backward()
            plain = [a.detach().clone().requires_grad_() for a in (q, k, v)]
            want = flash_attn_func(*plain, causal=True, alibi_slopes=slopes, sinks=sinks)
            want.float().square().sum().backward()
            assert torch.equal(out, want), f"input {'qkv'[neg]} negated: max |diff| {(out - want).abs().max():.3g}"
            for name, g, w in zip("qkv", leaves, plain):
                assert torch.equal(g.grad, w.grad), f"input {'qkv'[neg]} negated: d{name} differs"
    mask = torch.randn(1, 1, 9, 13, device=device)
    t = lambda x: x.transpose(1, 2)  # noqa: E731
    got = scaled_dot_product_attention(t(_negated(q)), t(k), t(v), attn_mask=_negated(mask), enable_gqa=True)
    want = scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=mask, enable_gqa=True)
    assert torch.equal(got, want), "SDPA with a negated query and mask"
    cu = torch.tensor([0, 4, 9], dtype=torch.int32, device=device)
    got = flash_attn_varlen_func(_negated(q[0]), k[0, :9], v[0, :9], cu, cu, 5, 5)
    assert torch.equal(got, flash_attn_varlen_func(q[0], k[0, :9], v[0, :9], cu, cu, 5, 5)), "varlen"
    parts = torch.randn(2, 1, 9, 4, 16, device=device)
    lses = torch.randn(2, 1, 4, 9, device=device)
    got = combine_attention_states(_negated(parts), _negated(lses))
    want = combine_attention_states(parts, lses)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), "combine_attention_states"


def test_combine_out_dtype(device):
    from flashattn_triton.kernels.combine import combine_attention_states
    parts, lses = torch.randn(2, 1, 3, 2, 8, device=device), torch.randn(2, 1, 2, 3, device=device)
    for bad in (torch.int32, torch.bool, torch.complex64, "float16"):
        with pytest.raises(TypeError, match=r"out_dtype must be None or torch.float16 / bfloat16 / float32, got"):
            combine_attention_states(parts, lses, bad)


def test_kvcache_caches_it_cannot_write(device):
    """A negated cache view is refused (its memory is not its values); an
    expanded (stride 0) cache is refused for appends, which would write one
    location for several sequences, and read correctly otherwise."""
    from flashattn_triton import flash_attn_with_kvcache
    q = torch.randn(2, 1, 2, 16, device=device)
    k_cache, v_cache = torch.randn(2, 8, 2, 16, device=device), torch.randn(2, 8, 2, 16, device=device)
    with pytest.raises(ValueError, match=r"k_cache has PyTorch's lazy negation bit set"):
        flash_attn_with_kvcache(q, _negated(k_cache), v_cache, cache_seqlens=5)
    shared_k, shared_v = k_cache[:1].expand(2, -1, -1, -1), v_cache[:1].expand(2, -1, -1, -1)
    new = torch.randn(2, 1, 2, 16, device=device)
    with pytest.raises(ValueError, match=r"k_cache has stride 0 in dim 0 \(an expanded tensor"):
        flash_attn_with_kvcache(q, shared_k, shared_v, new, new, cache_seqlens=5)
    got = flash_attn_with_kvcache(q, shared_k, shared_v, cache_seqlens=torch.tensor([5, 8], dtype=torch.int32,
                                                                                      device=device))
    want = flash_attn_with_kvcache(q, shared_k.contiguous(), shared_v.contiguous(),
                                   cache_seqlens=torch.tensor([5, 8], dtype=torch.int32, device=device))
    assert torch.equal(got, want)


def test_raw_ops_check_layouts(device):
    """ops.flash_fwd / flash_bwd / the varlen pair check shapes as the public
    functions do (a short LSE read past its end: heap corruption on CPU)."""
    from flashattn_triton import ops
    q, k, v = qkv(device, n_q=6, n_k=10)
    with pytest.raises(ValueError, match=r"q must be 4-D \(B, N, H, d\), got shape \(6, 2, 16\)"):
        ops.flash_fwd(q[0], k, v, 0.25, False)
    out, lse = ops.flash_fwd(q, k, v, 0.25, False)
    with pytest.raises(ValueError, match=r"lse must have shape \(1, 2, 6\), got \(1, 2, 3\)"):
        ops.flash_bwd(out, q, k, v, out, lse[..., :3], 0.25, False)
    with pytest.raises(ValueError, match=r"dout must have shape \(1, 6, 2, 16\), got \(1, 5, 2, 16\)"):
        ops.flash_bwd(out[:, :5], q, k, v, out, lse, 0.25, False)
    with pytest.raises(TypeError, match=r"out must have q's dtype torch.float16, got torch.float32"):
        ops.flash_bwd(out, q, k, v, out.float(), lse, 0.25, False)
    cu = torch.tensor([0, 6], dtype=torch.int32, device=device)
    out, lse = ops.flash_varlen_fwd(q[0], k[0, :6], v[0, :6], cu, cu, 6, 6, 0.25, True)
    with pytest.raises(ValueError, match=r"lse must have shape \(2, 6\), got \(6, 2\)"):
        ops.flash_varlen_bwd(out, q[0], k[0, :6], v[0, :6], out, lse.t(), cu, cu, 6, 6, 0.25, True)
