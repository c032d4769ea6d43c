"""Where the backward's time goes: per-kernel CUDA time (torch.profiler) of
flashattn_triton's backward for a few shapes, and the backward time of the
grouped-query case under alternative tile configs (FLASHATTN_TRITON_CONFIG_*).

    PYTHONPATH=. python benchmarks/profile_bwd.py --out benchmarks/results/h200/profile
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C  # noqa: E402

CASES = {
    "gqa B2 N4k H16/4 d128 causal": dict(b=2, n=4096, hq=16, hkv=4, d=128, causal=True),
    "mha B2 N4k H16 d128 causal": dict(b=2, n=4096, hq=16, hkv=16, d=128, causal=True),
    # bench_variants.py's sinks and dropout rows (session 22's variant table: sinks backward
    # 1.57 ms against the plain row's 0.96, 1.24 in session 20)
    "gqa B2 N4k H16/4 d128 causal sinks": dict(b=2, n=4096, hq=16, hkv=4, d=128, causal=True, sinks=True),
    "gqa B2 N4k H16/4 d128 causal dropout": dict(b=2, n=4096, hq=16, hkv=4, d=128, causal=True, dropout_p=0.1),
    "gqa B1 N16k H16/4 d128 window128": dict(b=1, n=16384, hq=16, hkv=4, d=128, causal=True, window=128),
    "mha B16 N1k H12 d64 causal": dict(b=16, n=1024, hq=12, hkv=12, d=64, causal=True),
    # bench_varlen.py's first batch: 32k tokens in documents of 64..8192 tokens
    "varlen 32k docs H32/8 d128 causal": dict(varlen=32768, seed=0, hq=32, hkv=8, d=128, causal=True),
}


def run_varlen(c, fat, torch):
    from bench_varlen import doc_lengths
    lens = doc_lengths(c["varlen"], c["seed"])
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], device="cuda", dtype=torch.int32)
    total = int(cu[-1])
    q = torch.randn(total, c["hq"], c["d"], device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(total, c["hkv"], c["d"], device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)
    out = fat.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=c["causal"])
    do = torch.randn_like(out)
    flops = sum(C.attn_flops(1, c["hq"], n, n, c["d"], c["causal"], "bwd") for n in lens)
    return (lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)), flops


def run_case(c, fat, torch):
    if "varlen" in c:
        return run_varlen(c, fat, torch)[0]
    q = torch.randn(c["b"], c["n"], c["hq"], c["d"], device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(c["b"], c["n"], c["hkv"], c["d"], device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)
    w = (c.get("window", -1), 0 if c.get("window") else -1)
    kw = dict(dropout_p=c.get("dropout_p", 0.0))
    leaves = [q, k, v]
    if c.get("sinks"):  # learnable sinks, as bench_variants.py's row (their gradient too)
        kw["sinks"] = torch.randn(c["hq"], device="cuda", dtype=torch.float32, requires_grad=True)
        leaves.append(kw["sinks"])
    out = fat.flash_attn_func(q, k, v, causal=c["causal"], window_size=w, **kw)
    do = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)


def kernel_times(fn, torch, reps=10):
    from torch.profiler import ProfilerActivity, profile
    fn(); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    rows = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t > 0:
            rows[e.key[:60]] = round(t / reps / 1e3, 4)
    return dict(sorted(rows.items(), key=lambda kv: -kv[1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sweep", default="64,128,8,3;64,128,8,2;64,64,4,3;32,128,8,2;64,128,4,2;128,128,8,2;32,64,4,3",
                    help="configs BLOCK_M,BLOCK_N,warps,stages of --sweep-kernel for --sweep-case ('none': none)")
    ap.add_argument("--sweep-case", default="gqa B2 N4k H16/4 d128 causal", choices=sorted(CASES))
    ap.add_argument("--sweep-kernel", default="BWD_DKDV", choices=["BWD_DKDV", "BWD_DQ"])
    ap.add_argument("--cases", help="comma-separated substrings: profile only the cases whose name holds one")
    args = ap.parse_args()
    C.require_cuda("profile_bwd.py")
    import torch
    import flashattn_triton as fat
    args.out.mkdir(parents=True, exist_ok=True)
    res = dict(env=C.collect_env(), cases={}, sweep={})
    for name, c in CASES.items():
        if args.cases and not any(part in name for part in args.cases.split(",")):
            continue
        fn = run_case(c, fat, torch)
        ms = C.bench_ms(fn)
        flops = run_varlen(c, fat, torch)[1] if "varlen" in c else \
            C.attn_flops(c["b"], c["hq"], c["n"], c["n"], c["d"], c["causal"], "bwd")
        res["cases"][name] = dict(ms=ms, tflops=C.tflops(flops, ms), kernels_ms=kernel_times(fn, torch))
        print(name, json.dumps(res["cases"][name]), flush=True)
    gqa = run_case(CASES[args.sweep_case], fat, torch)
    env = f"FLASHATTN_TRITON_CONFIG_{args.sweep_kernel}"
    res["sweep_case"], res["sweep_kernel"] = args.sweep_case, args.sweep_kernel
    for cfg in filter(None, args.sweep.split(";")) if args.sweep != "none" else ():
        bm, bn, w, st = cfg.split(",")
        os.environ[env] = f"BLOCK_M={bm},BLOCK_N={bn},num_warps={w},num_stages={st}"
        try:
            res["sweep"][cfg] = dict(ms=C.bench_ms(gqa), kernels_ms=kernel_times(gqa, torch, 3))
        except Exception as exc:  # a config that does not compile or fit
            res["sweep"][cfg] = dict(error=C.short_error(exc))
        print(args.sweep_kernel, cfg, json.dumps(res["sweep"][cfg]), flush=True)
    os.environ.pop(env, None)
    C.write_json(args.out / "profile_bwd.json", res)


if __name__ == "__main__":
    main()
