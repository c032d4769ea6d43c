"""Session 57: where the chunked row with a shorter last chunk spends its time
(bench_variants: N 5000 forward 0.264 ms against 0.108 ms at N 5120, H100).
For each N: eager forward (do_bench), host time per call (back-to-back calls,
no sync), both also with the offsets rebuilt every call, the forward replayed in a CUDA graph (device time), the varlen call
alone with prebuilt cu_seqlens, and the kernels one call launches."""
import os
import sys

import torch
import triton.testing

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import common as C  # noqa: E402

from flashattn_triton import api, flash_attn_func, flash_attn_varlen_func  # noqa: E402


class NoStore(dict):
    """api._CHUNK_OFFSETS that keeps nothing: every call builds its offsets (as before session 57's cache)."""
    def __setitem__(self, key, value):
        pass


def host_ms(fn, n=200):
    return C.host_us(fn, calls=n, warmup=1) / 1e3


def graph_ms(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn(); fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return triton.testing.do_bench(g.replay, rep=200)


for n in (5000, 5120):
    torch.manual_seed(0)
    q = torch.randn(2, n, 16, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, n, 4, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    fn = lambda: flash_attn_func(q, k, v, causal=True, attention_chunk=1024)
    row = {"eager": triton.testing.do_bench(fn, rep=200), "host": host_ms(fn), "graph": graph_ms(fn)}
    if n % 1024:
        kept, api._CHUNK_OFFSETS = api._CHUNK_OFFSETS, NoStore()
        row.update({"eager rebuilt": triton.testing.do_bench(fn, rep=200), "host rebuilt": host_ms(fn)})
        api._CHUNK_OFFSETS = kept
    if n % 1024:
        per_row = -(-n // 1024)
        starts = [r * n + j * 1024 for r in range(2) for j in range(per_row)] + [2 * n]
        cu = torch.tensor(starts, dtype=torch.int32, device="cuda")
        qp, kp, vp = q.reshape(-1, 16, 128), k.reshape(-1, 4, 128), v.reshape(-1, 4, 128)
        vfn = lambda: flash_attn_varlen_func(qp, kp, vp, cu, cu, 1024, 1024, causal=True)
        row.update({"varlen eager": triton.testing.do_bench(vfn, rep=200), "varlen host": host_ms(vfn),
                    "varlen graph": graph_ms(vfn)})
        # session 58: the alternative of two dense calls, whole chunks as (b * m, 1024) sequences and the
        # shorter tail as (b, n - m * 1024), with and without the cat that joins their outputs
        m = n // 1024
        head = lambda: flash_attn_func(q[:, :m * 1024].reshape(2 * m, 1024, 16, 128),
                                       k[:, :m * 1024].reshape(2 * m, 1024, 4, 128),
                                       v[:, :m * 1024].reshape(2 * m, 1024, 4, 128), causal=True)
        tail = lambda: flash_attn_func(q[:, m * 1024:], k[:, m * 1024:], v[:, m * 1024:], causal=True)
        two = lambda: (head(), tail())
        joined = lambda: torch.cat((head().reshape(2, m * 1024, 16, 128), tail()), dim=1)
        row.update({"two dense eager": triton.testing.do_bench(two, rep=200), "two dense host": host_ms(two),
                    "two dense+cat eager": triton.testing.do_bench(joined, rep=200),
                    "two dense graph": graph_ms(two)})
    print(f"N {n}: " + ", ".join(f"{key} {val:.3f} ms" for key, val in row.items()), flush=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA,
                                            torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25, max_name_column_width=60), flush=True)
sys.exit(0)
