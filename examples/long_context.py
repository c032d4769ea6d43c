"""Forward + backward of causal attention at long context, with memory used.

    python examples/long_context.py --device cuda    # 64k and 128k tokens, bf16; eager attention runs out of memory
    python examples/long_context.py                  # CPU: 512 and 1024 tokens (PyTorch blockwise path)

flashattn_triton never stores the (N, N) score matrix: the forward keeps the
output and one log-sum-exp per row, and the backward recomputes the scores
tile by tile, so the extra memory of attention grows linearly in N.  Standard
("eager") attention materialises the scores and the probabilities, N^2 per
head: at 64k tokens and 16 heads that is 128 GiB in bf16 for the scores alone.
"""

import argparse
import time

import torch

from flashattn_triton import flash_attn_func

GIB = 1024 ** 3


def eager_attention(q, k, v):
    """(B, N, H, d) -> (B, N, H, d), scores materialised."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    n = s.shape[-1]
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return (torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype) @ v).transpose(1, 2)


def sdpa_attention(q, k, v):
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True)
    return out.transpose(1, 2)


def ours_attention(q, k, v):
    return flash_attn_func(q, k, v, causal=True)


def run(name, fn, n, heads, kv_heads, d, dtype, device):
    """One forward + backward; returns (seconds, extra peak GiB beyond q, k, v and their grads) or an error."""
    torch.manual_seed(0)
    q = torch.randn(1, n, heads, d, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(1, n, kv_heads, d, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(1, n, kv_heads, d, device=device, dtype=dtype, requires_grad=True)
    cuda = device.type == "cuda"
    if cuda:
        # inputs and gradients are the same for every method: count what the method adds
        base = torch.cuda.memory_allocated() + sum(t.numel() * t.element_size() for t in (q, k, v))
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    try:
        out = fn(q, k, v)
        out.backward(torch.ones_like(out))
        if cuda:
            torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError:
        seconds = None
    else:
        seconds = time.perf_counter() - t0
    peak = (torch.cuda.max_memory_allocated() - base) / GIB if cuda and seconds is not None else None
    q = k = v = out = None  # free before the next run
    if cuda:
        torch.cuda.empty_cache()
    return seconds, peak


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--lengths", type=int, nargs="+", help="default: 65536 131072 on GPU, 512 1024 on CPU")
    ap.add_argument("--heads", type=int, help="query heads (default 16 GPU, 4 CPU)")
    ap.add_argument("--kv-heads", type=int, help="key/value heads (default: --heads)")
    ap.add_argument("--head-dim", type=int, help="default 128 GPU, 32 CPU")
    ap.add_argument("--skip-eager", action="store_true", help="do not try eager attention")
    args = ap.parse_args()
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    lengths = args.lengths or ([65536, 131072] if gpu else [512, 1024])
    heads = args.heads or (16 if gpu else 4)
    kv_heads = args.kv_heads or heads
    d = args.head_dim or (128 if gpu else 32)
    dtype = torch.bfloat16 if gpu else torch.float32
    methods = [("flashattn_triton", ours_attention), ("torch SDPA", sdpa_attention)]
    if not args.skip_eager:
        methods.append(("eager", eager_attention))
    if gpu:
        total = torch.cuda.get_device_properties(device).total_memory / GIB
        print(f"{torch.cuda.get_device_name(device)}, {total:.0f} GiB")
    print(f"causal attention, batch 1, {heads} query / {kv_heads} KV heads, head dim {d}, {dtype}, "
          f"forward + backward\n")
    print(f"{'tokens':>8}  {'method':<18} {'time':>9}  {'extra peak memory':>18}  "
          f"{'the N x N scores alone would take':>34}")
    for n in lengths:
        scores_gib = heads * n * n * torch.finfo(dtype).bits / 8 / GIB
        for name, fn in methods:
            if not gpu and name == "eager" and scores_gib > 1:
                print(f"{n:>8}  {name:<18} {'skipped on CPU':>9}")
                continue
            if name != "eager":  # compile (Triton JIT / kernel selection) outside the timed call
                run(name, fn, n, heads, kv_heads, d, dtype, device)
            seconds, peak = run(name, fn, n, heads, kv_heads, d, dtype, device)
            if seconds is None:
                print(f"{n:>8}  {name:<18} {'out of memory':>29}  {scores_gib:>32.1f} GiB")
                continue
            mem = f"{peak:.2f} GiB" if peak is not None else "n/a on CPU"
            print(f"{n:>8}  {name:<18} {seconds:>8.2f}s  {mem:>18}  {scores_gib:>32.1f} GiB")


if __name__ == "__main__":
    main()
