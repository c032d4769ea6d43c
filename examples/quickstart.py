"""flashattn_triton in five minutes: the three entry points and the modules.

    python examples/quickstart.py                 # CPU (PyTorch blockwise path), small sizes
    python examples/quickstart.py --device cuda   # GPU (Triton kernels), realistic sizes

Each result is checked against torch.nn.functional.scaled_dot_product_attention.
"""

import argparse

import torch
import torch.nn.functional as F

import flashattn_triton
from flashattn_triton import flash_attn_func, flash_attn_varlen_func, scaled_dot_product_attention
from flashattn_triton.nn import Attention, MultiheadAttention


def report(name, got, want):
    err = (got.float() - want.float()).abs().max().item()
    print(f"{name:<46} shape {str(tuple(got.shape)):<22} max |diff| vs torch SDPA {err:.1e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    dev = torch.device(args.device)
    gpu = dev.type == "cuda"
    dtype = torch.bfloat16 if gpu else torch.float32
    batch, seqlen, heads, kv_heads, d = (2, 4096, 32, 8, 128) if gpu else (2, 256, 8, 2, 64)
    print(f"flashattn_triton {flashattn_triton.__version__} on {dev}, {dtype}")
    torch.manual_seed(0)

    # 1. flash-attn layout (batch, seqlen, nheads, headdim); GQA: 8 query heads share each KV head pair.
    q = torch.randn(batch, seqlen, heads, d, device=dev, dtype=dtype, requires_grad=True)
    k = torch.randn(batch, seqlen, kv_heads, d, device=dev, dtype=dtype, requires_grad=True)
    v = torch.randn(batch, seqlen, kv_heads, d, device=dev, dtype=dtype, requires_grad=True)
    out = flash_attn_func(q, k, v, causal=True)
    out.sum().backward()  # dq, dk, dv from the recomputing backward
    want = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                          is_causal=True, enable_gqa=True).transpose(1, 2)
    report("flash_attn_func(causal=True), GQA", out, want)

    # the log-sum-exp of each row, e.g. to merge partial attentions
    out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True)
    print(f"{'  ... return_lse=True':<46} lse {tuple(lse.shape)} {lse.dtype}")

    # sliding window: each query sees itself and the 127 keys before it
    out = flash_attn_func(q, k, v, causal=True, window_size=(127, 0))
    idx = torch.arange(seqlen, device=dev)
    band = (idx[None, :] <= idx[:, None]) & (idx[None, :] >= idx[:, None] - 127)
    want = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                          attn_mask=band, enable_gqa=True).transpose(1, 2)
    report("flash_attn_func(window_size=(127, 0))", out, want)

    # 2. SDPA layout (batch, nheads, seqlen, headdim): a drop-in for F.scaled_dot_product_attention
    qt, kt, vt = (t.detach().transpose(1, 2) for t in (q, k, v))
    out = scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)
    report("scaled_dot_product_attention(is_causal=True)", out,
           F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True))

    # 3. variable-length batch: three sequences packed without padding
    lens = [seqlen // 2, seqlen // 4, seqlen // 8]
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], device=dev, dtype=torch.int32)
    qp = torch.randn(sum(lens), heads, d, device=dev, dtype=dtype)
    kp = torch.randn(sum(lens), kv_heads, d, device=dev, dtype=dtype)
    vp = torch.randn(sum(lens), kv_heads, d, device=dev, dtype=dtype)
    out = flash_attn_varlen_func(qp, kp, vp, cu, cu, max(lens), max(lens), causal=True)
    want = torch.cat([F.scaled_dot_product_attention(
        qp[a:b].transpose(0, 1), kp[a:b].transpose(0, 1), vp[a:b].transpose(0, 1),
        is_causal=True, enable_gqa=True).transpose(0, 1) for a, b in zip(cu[:-1].tolist(), cu[1:].tolist())])
    report("flash_attn_varlen_func, 3 packed sequences", out, want)

    # 4. modules: torch.nn.MultiheadAttention drop-in (same state dict), and a compact block
    dim = heads * d
    theirs = torch.nn.MultiheadAttention(dim, heads, batch_first=True, device=dev, dtype=dtype)
    ours = MultiheadAttention(dim, heads, batch_first=True, device=dev, dtype=dtype)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(batch, seqlen // 4, dim, device=dev, dtype=dtype)
    with torch.no_grad():
        report("nn.MultiheadAttention(x, x, x)", ours(x, x, x)[0], theirs(x, x, x, need_weights=False)[0])
    block = Attention(dim, heads, kv_heads, causal=True, rotary=True).to(dev, dtype)
    y = block(x)
    print(f"{'nn.Attention (fused qkv, GQA, rotary)':<46} shape {tuple(y.shape)}")


if __name__ == "__main__":
    main()
