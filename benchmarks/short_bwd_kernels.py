"""Kernel time per backward call at the short rows still below FlexAttention (session 19 call 5):
bf16, B*N = 16k tokens, H = 2048/d, d = 128, N = 512 (causal and not) and causal N = 1k.

For each shape: the library's backward by default (the call plans on), with the portable and
with the Hopper backward forced, and FlexAttention's backward (torch.compile'd); per provider
torch.profiler's CUDA kernel time per call by kernel name over 20 back-to-back calls, the sum,
and the CUDA-event time of those 20 calls.  The table tells kernel time from launch gaps and
which of the library's kernels (preprocess, main loop, dQ conversion) holds the gap to Flex.

    PYTHONPATH=. python benchmarks/short_bwd_kernels.py
"""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import kernel_us  # noqa: E402 (benchmarks/common.py; it puts the repository on the path)
from flashattn_triton import flash_attn_func  # noqa: E402
from flashattn_triton.bench.common import compiled_flex  # noqa: E402

CALLS = 20


def ours(n, causal, backend):
    """A backward callable of the library at (n, causal); backend None, 'portable' or 'hopper'."""
    if backend:
        os.environ["FLASHATTN_TRITON_HOPPER_BWD"] = "0" if backend == "portable" else "1"
    else:
        os.environ.pop("FLASHATTN_TRITON_HOPPER_BWD", None)
    if backend == "hopper":
        os.environ["FLASHATTN_TRITON_BACKEND"] = "hopper"
    else:
        os.environ.pop("FLASHATTN_TRITON_BACKEND", None)
    b, h, d = 16384 // n, 16, 128
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    o = flash_attn_func(q, k, v, causal=causal)
    do = torch.randn_like(o)
    return lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)


def flex(n, causal):
    from torch.nn.attention.flex_attention import create_block_mask
    b, h, d = 16384 // n, 16, 128
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    mask = (create_block_mask(lambda b_, h_, i, j: i >= j, None, None, n, n, device="cuda")
            if causal else None)
    o = compiled_flex()(q, k, v, block_mask=mask)
    do = torch.randn_like(o)
    return lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)


def measure(fn):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(CALLS):
        fn()
    end.record()
    torch.cuda.synchronize()
    event_us = start.elapsed_time(end) * 1e3 / CALLS
    per = kernel_us(fn, CALLS, width=70)
    return event_us, per


def main():
    for n, causal in ((512, False), (512, True), (1024, True)):
        flops = 2.5 * 4 * 16384 * 16 * n * 128 / (2 if causal else 1)
        for name, make in (("ours", lambda: ours(n, causal, None)),
                           ("ours-portable", lambda: ours(n, causal, "portable")),
                           ("ours-hopper", lambda: ours(n, causal, "hopper")),
                           ("flex", lambda: flex(n, causal))):
            try:
                event_us, per = measure(make())
            except Exception as exc:  # noqa: BLE001 (a row that fails is reported, the rest run)
                print(f"N={n} causal={causal} {name}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            total = sum(per.values())
            print(f"N={n} causal={causal} {name}: event {event_us:.0f} us/call "
                  f"({flops / event_us / 1e6:.0f} TFLOP/s), kernels {total:.0f} us/call "
                  f"({flops / total / 1e6:.0f} TFLOP/s)")
            for k, t in sorted(per.items(), key=lambda kv: -kv[1])[:6]:
                print(f"    {t:7.1f} us  {k}")
        os.environ.pop("FLASHATTN_TRITON_HOPPER_BWD", None)
        os.environ.pop("FLASHATTN_TRITON_BACKEND", None)


if __name__ == "__main__":
    main()
