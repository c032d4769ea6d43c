"""Kernels per decoding call, and their time, for ours and SDPA's backends (issue 11's
batch-1 gap at short caches: B = 1 2k reads 0.90x cuDNN, session 33).

For each (B, N): torch.profiler's CUDA kernel time per call by kernel name over CALLS eager
calls, each on the next of enough cache copies that no call finds its cache in L2 (as
bench_decode.py cycles them), for ours at the automatic split count and at --splits, and for
SDPA flash and cuDNN. Hq = 32, Hkv = 8, d = 128, bf16, one query token, contiguous caches.
The table tells whether a peer runs one kernel or two and how long its kernels take against
ours; the bench's CUDA-graph figures add the launch gaps.

    PYTHONPATH=. python benchmarks/decode_kernels.py --shapes 1:2048,1:4096,1:8192,8:8192
"""
import argparse
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_decode as BD  # noqa: E402
from common import kernel_us  # noqa: E402

CALLS = 40


def main(argv=None):
    import torch

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="1:2048,1:4096,1:8192,8:8192", help="comma list of B:N")
    p.add_argument("--splits", default="8", help="comma list of fixed split counts for ours (beside auto)")
    p.add_argument("--out", type=Path, help="JSON of the tables")
    args = p.parse_args(argv)
    h_q, h_kv, d, dtype = 32, 8, 128, torch.bfloat16
    results = []
    for spec in args.shapes.split(","):
        b, n = (int(x) for x in spec.split(":"))
        copies = max(2, int(256e6 // BD.kv_bytes(b, n, h_kv, d)) + 1)
        copies = min(copies, CALLS)
        caches = BD.make_caches(b, n, h_kv, d, dtype, "contiguous", copies)
        qs = [torch.randn(b, 1, h_q, d, dtype=dtype, device="cuda") for _ in range(copies)]
        lens = torch.full((b,), n, dtype=torch.int32, device="cuda")
        runs = {"ours auto": [BD.our_call(q, c, lens, 0) for q, c in zip(qs, caches)]}
        for s in (int(x) for x in args.splits.split(",") if x):
            runs[f"ours s={s}"] = [BD.our_call(q, c, lens, s) for q, c in zip(qs, caches)]
        for peer in ("sdpa_flash", "sdpa_cudnn"):
            runs[peer] = [BD.peer_call(peer, q.transpose(1, 2), c) for q, c in zip(qs, caches)]
        for name, fns in runs.items():
            for fn in fns[:3]:
                fn()
            calls = itertools.cycle(fns)
            per = kernel_us(lambda: next(calls)(), CALLS)
            total = sum(per.values())
            gbps = BD.kv_bytes(b, n, h_kv, d) / (total * 1e-6) / 1e9
            results.append(dict(batch=b, seqlen=n, run=name, kernels=per, total_us=total, gbps=gbps))
            print(f"B={b} N={n} {name}: {total:.2f} us of kernels per call ({gbps:.0f} GB/s), "
                  f"{len(per)} kernel(s)", flush=True)
            for k, us in per.items():
                print(f"    {us:8.2f} us  {k}", flush=True)
        del caches, qs
        torch.cuda.empty_cache()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
