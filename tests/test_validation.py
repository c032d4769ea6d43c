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


def test_wrong_rank(device):
    q, k, v = qkv(device)
    with pytest.raises(ValueError, match=r"q must be 4-D \(batch, seqlen, nheads, headdim\), got shape \(8, 2, 16\)"):
        flash_attn_func(q[0], k, v)
    with pytest.raises(ValueError, match=r"query must be 4-D \(batch, nheads, seqlen, headdim\)"):
        scaled_dot_product_attention(q[0], k, v)


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
    q, k, v = qkv(device, d=264)
    with pytest.raises(NotImplementedError, match=r"head dim 264 .*supported: 1..256"):
        flash_attn_func(q, k, v)


def test_last_dim_stride(device):
    q, k, v = qkv(device)
    q_t = q.transpose(-1, -2).contiguous().transpose(-1, -2)
    with pytest.raises(ValueError, match=r"q must have stride 1 in its last dimension, got strides"):
        flash_attn_func(q_t, k, v)


@pytest.mark.parametrize("kwargs,name", [
    (dict(dropout_p=0.1), "dropout_p=0.1"),
    (dict(window_size=(4, 0)), r"window_size=\(4, 0\)"),
    (dict(softcap=30.0), "softcap=30.0"),
    (dict(alibi_slopes=torch.ones(2)), "alibi_slopes"),
])
def test_unimplemented_features(device, kwargs, name):
    q, k, v = qkv(device)
    with pytest.raises(NotImplementedError, match=name + r".* not supported yet"):
        flash_attn_func(q, k, v, **kwargs)


def test_sdpa_unimplemented(device):
    q, k, v = (t.transpose(1, 2) for t in qkv(device))
    with pytest.raises(NotImplementedError, match=r"attn_mask"):
        scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(8, 8, dtype=torch.bool))
    with pytest.raises(NotImplementedError, match=r"dropout_p=0.5"):
        scaled_dot_product_attention(q, k, v, dropout_p=0.5)


def test_bad_scale(device):
    q, k, v = qkv(device)
    with pytest.raises(TypeError, match=r"softmax_scale must be a Python float or None, got Tensor"):
        flash_attn_func(q, k, v, softmax_scale=torch.tensor(0.1))
    with pytest.raises(ValueError, match=r"softmax_scale must be finite, got nan"):
        flash_attn_func(q, k, v, softmax_scale=float("nan"))


def test_too_many_heads(device):
    q, k, v = qkv(device, n_q=1, n_k=1, h_q=65536, h_kv=1, d=8)
    with pytest.raises(NotImplementedError, match=r"q has 65536 heads \(q.shape\[2\]\); at most 65535"):
        flash_attn_func(q, k, v)
