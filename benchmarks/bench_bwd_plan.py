"""The backward of planned calls with its launches replayed (ops.BwdPlan) or not.

    python benchmarks/bench_bwd_plan.py [--head-dims 64,128] [--seqlens 512,1024] [--tokens 16384]
                                        [--dtype bf16] [--out DIR]

Per row (B = tokens / N, H = 2048 / d, causal and not): one planned
flash_attn_func forward with grad-requiring inputs, then
``out.backward(dout, retain_graph=True)`` timed as triton.testing.do_bench
times it (CUDA events, q / k / v .grad reset between calls), with
ops.BWD_PLANS on ("replay") and off ("off"), alternated over ``--repeats``
rounds (median of each).  ratio = off / replay (above 1: the replay is
faster).  host_us: wall time per backward call of 40 back-to-back calls
without synchronizing (the host's time while the GPU queue fills).
Writes bench_bwd_plan.json (rows) and prints one line per row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))


def _host_us(fn, n=40):
    import torch
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def row(d, n, causal, tokens, dtype, repeats, rep_ms):
    import torch
    import triton.testing
    import flashattn_triton as fat
    from flashattn_triton import api, ops
    b, h = max(1, tokens // n), 2048 // d
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=dtype).requires_grad_() for _ in range(3))
    api.clear_plans()
    for _ in range(2):  # the first call makes the plan, the second replays the forward
        out = fat.flash_attn_func(q, k, v, causal=causal)
    dout = torch.randn_like(out)
    bp = next(iter(api._PLANS.values())).op.backward

    def step():
        out.backward(dout, retain_graph=True)

    for _ in range(4):  # compiles, records (ops.MAX_RECORD_TRIES at most)
        step()
    torch.cuda.synchronize()
    times = {"replay": [], "off": []}
    host = {"replay": [], "off": []}
    try:
        for _ in range(repeats):
            for mode in ("off", "replay"):
                ops.BWD_PLANS = mode == "replay"
                times[mode].append(triton.testing.do_bench(step, grad_to_none=[q, k, v], rep=rep_ms))
                host[mode].append(_host_us(lambda: [setattr(t, "grad", None) for t in (q, k, v)] and step()))
    finally:
        ops.BWD_PLANS = True
    med = {m: statistics.median(t) for m, t in times.items()}
    return dict(b=b, h=h, n=n, d=d, causal=causal, dtype=str(dtype).replace("torch.", ""),
                recorded=bp.replay is not None, ms_replay=med["replay"], ms_off=med["off"],
                ratio=med["off"] / med["replay"],
                host_us_replay=statistics.median(host["replay"]), host_us_off=statistics.median(host["off"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--seqlens", default="512,1024")
    ap.add_argument("--tokens", type=int, default=16384, help="B * N (default 16384)")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--repeats", type=int, default=3, help="alternated off / replay rounds per row")
    ap.add_argument("--rep-ms", type=int, default=60, help="do_bench's rep (ms) per timing")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    import torch
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    rows = []
    for d in map(int, args.head_dims.split(",")):
        for n in map(int, args.seqlens.split(",")):
            for causal in (True, False):
                r = row(d, n, causal, args.tokens, dtype, args.repeats, args.rep_ms)
                rows.append(r)
                print(f"d={d} N={n} B={r['b']} H={r['h']} causal={causal}: replay {r['ms_replay'] * 1e3:.0f} us, "
                      f"off {r['ms_off'] * 1e3:.0f} us, ratio {r['ratio']:.3f} (recorded {r['recorded']}); "
                      f"host us/call replay {r['host_us_replay']:.0f}, off {r['host_us_off']:.0f}", flush=True)
                if args.out:  # after every row: a run cut short keeps what it measured
                    os.makedirs(args.out, exist_ok=True)
                    with open(os.path.join(args.out, "bench_bwd_plan.json"), "w") as f:
                        json.dump(dict(torch=torch.__version__, gpu=torch.cuda.get_device_name(), rows=rows), f,
                                  indent=1)


if __name__ == "__main__":
    main()
