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
    (dict(causal=torch.tensor(True)), "causal must be a bool, got Tensor"),
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
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[-1\]=8 must equal the 10 packed rows"):
        flash_attn_varlen_func(q, k, v, short, cu, 6, 6, check_inputs=True)
    bad = torch.tensor([0, 7, 4], dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=r"cu_seqlens_k must be non-decreasing"):
        flash_attn_varlen_func(q, k, v, cu, bad, 6, 7, check_inputs=True)
    with pytest.raises(ValueError, match=r"q must be 3-D \(total_tokens, nheads, headdim\)"):
        flash_attn_varlen_func(q[None], k, v, cu, cu, 6, 6)
