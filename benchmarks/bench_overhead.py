"""First-call latency (fresh process, empty / warm Triton cache) and host
overhead per call, ours next to PyTorch SDPA (GPU only).

    python benchmarks/bench_overhead.py --out DIR

First call: B=4, H=16, N=4096, d=128, fp16, causal; each measurement runs in
a fresh Python process (so nothing is loaded yet) with TRITON_CACHE_DIR
pointing at an empty directory ("cold") or at the one the cold run filled
("warm").  Host overhead: B=1, H=8, N=128, d=64; the mean wall time of many
back-to-back calls with no synchronisation in between (the GPU work of such a
call is a few microseconds, so the host side dominates).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time, torch
prov = sys.argv[1]
t0 = time.perf_counter()
import flashattn_triton as fat
import torch.nn.functional as F
t_import = time.perf_counter() - t0
q, k, v = (torch.randn(4, 4096, 16, 128, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
do = torch.randn_like(q)
def fwd():
    if prov == "ours":
        return fat.flash_attn_func(q, k, v, causal=True)
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
torch.cuda.synchronize()
t0 = time.perf_counter(); out = fwd(); torch.cuda.synchronize(); t_fwd = time.perf_counter() - t0
t0 = time.perf_counter(); out.backward(do); torch.cuda.synchronize(); t_bwd = time.perf_counter() - t0
import triton.testing
def step():
    q.grad = k.grad = v.grad = None
    fwd().backward(do)
ms = triton.testing.do_bench(step, warmup=25, rep=100, return_mode="median")
print(json.dumps(dict(import_s=t_import, first_fwd_s=t_fwd, first_bwd_s=t_bwd, steady_fwd_bwd_ms=ms)))
"""


def first_call(provider: str, cache_dir: str) -> dict:
    env = dict(os.environ, TRITON_CACHE_DIR=cache_dir)
    if provider == "ours-portable":
        provider, env["FLASHATTN_TRITON_BACKEND"] = "ours", "portable"
    res = subprocess.run([sys.executable, "-c", CHILD, provider], env=env, capture_output=True, text=True,
                         timeout=600)
    if res.returncode != 0:
        return dict(error=res.stderr[-1500:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def host_overhead(n_calls: int = 2000) -> dict:
    import torch
    import torch.nn.functional as F
    import flashattn_triton as fat
    q, k, v = (torch.randn(1, 128, 8, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    calls = {
        "ours flash_attn_func": lambda: fat.flash_attn_func(q, k, v, causal=True),
        "ours scaled_dot_product_attention": lambda: fat.scaled_dot_product_attention(qt, kt, vt, is_causal=True),
        "torch SDPA": lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True),
        "ours flash_attn_func, inputs require grad": lambda: fat.flash_attn_func(qg, kg, vg, causal=True),
        "torch SDPA, inputs require grad": lambda: F.scaled_dot_product_attention(
            qg.transpose(1, 2), kg.transpose(1, 2), vg.transpose(1, 2), is_causal=True),
    }
    out = {}
    for name, fn in calls.items():
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n_calls):
            fn()
        torch.cuda.synchronize()
        out[name] = (time.perf_counter() - t0) / n_calls * 1e6
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import triton
    results = dict(env=dict(torch=torch.__version__, triton=triton.__version__,
                            gpu=torch.cuda.get_device_name(), commit=os.environ.get("GIT_COMMIT", "")))
    for prov in ("ours", "ours-portable", "sdpa"):
        cache = tempfile.mkdtemp(prefix=f"triton-cache-{prov}-")
        results[f"{prov} cold"] = first_call(prov, cache)
        results[f"{prov} warm"] = first_call(prov, cache)
    results["host_overhead_us"] = host_overhead()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_overhead.json"), "w") as f:
        json.dump(results, f, indent=1)
    lines = ["| run | import s | first fwd s | first bwd s | first total s | steady fwd+bwd ms |",
             "|---|---|---|---|---|---|"]
    for key, r in results.items():
        if key in ("env", "host_overhead_us"):
            continue
        if "error" in r:
            lines.append(f"| {key} | error: {r['error'][-200:]!r} | | | | |")
            continue
        lines.append(f"| {key} | {r['import_s']:.2f} | {r['first_fwd_s']:.2f} | {r['first_bwd_s']:.2f} | "
                     f"{r['first_fwd_s'] + r['first_bwd_s']:.2f} | {r['steady_fwd_bwd_ms']:.2f} |")
    lines += ["", "| call (B=1, H=8, N=128, d=64, fp16, causal) | host time per call, us |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in results["host_overhead_us"].items()]
    text = "\n".join(lines)
    with open(os.path.join(args.out, "bench_overhead.md"), "w") as f:
        f.write(f"Environment: {results['env']}\n\n{text}\n")
    print(text)


if __name__ == "__main__":
    main()
