"""First-call latency (fresh process, empty / warm Triton cache) and host
overhead per call, ours next to PyTorch SDPA (GPU only).

    python benchmarks/bench_overhead.py --out DIR
    python benchmarks/bench_overhead.py --out DIR --diagnose   # + where the first backward's time goes

First call: B=4, H=16, N=4096, d=128, fp16, causal; each measurement runs in
a fresh Python process (so nothing is loaded yet) with TRITON_CACHE_DIR
pointing at an empty directory ("cold") or at the one the cold run filled
("warm").  Rows:
  * ours: the default (backward prefetch on: the first forward compiles the
    backward's kernels in background threads, flashattn_triton/_prefetch.py);
  * ours, no prefetch: FLASHATTN_TRITON_PREFETCH_BWD=0 (the previous behaviour);
  * ours-portable: FLASHATTN_TRITON_BACKEND=portable (no Hopper forward);
  * "autograd pre-warmed": the child first runs a trivial CUDA backward
    ((x * 2).sum().backward()) and reports its time separately, to tell the
    process-wide cost of a first backward from ours.
With --diagnose, each child also profiles its first backward (torch.profiler,
CPU and CUDA) and the table of its top operators is written to
first_bwd_profile_<run>.txt; with --cprofile, cProfile's cumulative table of
the first forward and of the first backward (main thread) goes to
first_call_<run>.cprof.txt.  --only picks runs (e.g. "ours, no prefetch").

Host overhead: B=1, H=8, N=128, d=64 (also as a packed batch of 4 sequences
of 32 rows, and with attention_chunk=48, whose chunks are not whole: the
packed form, and one query token against those rows as a KV cache); the
median over 5 runs of the mean wall
time of many back-to-back calls with no synchronisation in between (the GPU
work of such a call is a few microseconds, so the host side dominates), with
the fast paths on (default: the call plans and the launch fast path) and
off (ops.PLANS_ENABLED = False and kernels/fastlaunch.py off, as
FLASHATTN_TRITON_FAST_LAUNCH=0: every call validated and launched through
Triton's own path; decoding through its custom op, _kvcache.DIRECT = False), for the Hopper and the portable forward.  benchmarks/profile_host.py breaks it down
by section.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
prov, prewarm, diagnose = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
t0 = time.perf_counter()
import torch
t_torch = time.perf_counter() - t0
t0 = time.perf_counter()
import flashattn_triton as fat
import torch.nn.functional as F
t_import = time.perf_counter() - t0
res = {}
if prewarm:
    x = torch.randn(1024, device="cuda", requires_grad=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter(); (x * 2).sum().backward(); torch.cuda.synchronize()
    res["trivial_bwd_s"] = time.perf_counter() - t0
q, k, v = (torch.randn(4, 4096, 16, 128, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
do = torch.randn_like(q)
def fwd():
    if prov == "ours":
        return fat.flash_attn_func(q, k, v, causal=True)
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
torch.cuda.synchronize()
if diagnose.endswith(".cprof.txt"):
    # cProfile (main thread only) of the first forward and the first backward,
    # to see where a first call's host time goes (compiles, cache loads, driver set-up)
    import cProfile, io, pstats
    report = io.StringIO()
    pr = cProfile.Profile(); pr.enable()
    t0 = time.perf_counter(); out = fwd(); torch.cuda.synchronize(); t_fwd = time.perf_counter() - t0
    pr.disable(); pstats.Stats(pr, stream=report).sort_stats("cumulative").print_stats(45)
    report.write("\n\n==== first backward ====\n")
    pr = cProfile.Profile(); pr.enable()
    t0 = time.perf_counter(); out.backward(do); torch.cuda.synchronize(); t_bwd = time.perf_counter() - t0
    pr.disable(); pstats.Stats(pr, stream=report).sort_stats("cumulative").print_stats(45)
    with open(diagnose, "w") as f:
        f.write(report.getvalue())
    diagnose = ""
else:
    t0 = time.perf_counter(); out = fwd(); torch.cuda.synchronize(); t_fwd = time.perf_counter() - t0
if diagnose:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter(); out.backward(do); torch.cuda.synchronize(); t_bwd = time.perf_counter() - t0
    with open(diagnose, "w") as f:
        f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
elif "t_bwd" not in globals():
    t0 = time.perf_counter(); out.backward(do); torch.cuda.synchronize(); t_bwd = time.perf_counter() - t0
import triton.testing
def step():
    q.grad = k.grad = v.grad = None
    fwd().backward(do)
ms = triton.testing.do_bench(step, warmup=25, rep=100, return_mode="median")
res.update(torch_import_s=t_torch, import_s=t_import, first_fwd_s=t_fwd, first_bwd_s=t_bwd, steady_fwd_bwd_ms=ms)
print(json.dumps(res))
"""

# run name -> (provider, extra environment, autograd pre-warmed)
RUNS = {
    "ours": ("ours", {}, False),
    "ours, no prefetch": ("ours", {"FLASHATTN_TRITON_PREFETCH_BWD": "0"}, False),
    "ours, no key warm-up": ("ours", {"FLASHATTN_TRITON_WARM_KEY": "0"}, False),
    "ours-portable": ("ours", {"FLASHATTN_TRITON_BACKEND": "portable"}, False),
    "sdpa": ("sdpa", {}, False),
}
PREWARMED = {
    "ours, autograd pre-warmed": ("ours", {}, True),
    "sdpa, autograd pre-warmed": ("sdpa", {}, True),
}


def first_call(provider: str, cache_dir: str, env_extra: dict, prewarm: bool, diagnose: str = "") -> dict:
    env = dict(os.environ, TRITON_CACHE_DIR=cache_dir, **env_extra)
    res = subprocess.run([sys.executable, "-c", CHILD, provider, "1" if prewarm else "0", diagnose], env=env,
                         capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        return dict(error=res.stderr[-1500:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def host_overhead(n_calls: int = 2000) -> dict:
    import torch
    import torch.nn.functional as F
    import flashattn_triton as fat
    from flashattn_triton import _kvcache as kvc
    from flashattn_triton import _prefetch, ops
    from flashattn_triton.kernels import fastlaunch
    q, k, v = (torch.randn(1, 128, 8, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    # the same 128 rows as a packed batch of 4 sequences of 32 (one cu_seqlens tensor for q and k)
    qp, kp, vp = (t[0] for t in (q, k, v))
    cu = torch.arange(0, 129, 32, dtype=torch.int32, device="cuda")
    q1, seqlens = q[:, :1], torch.full((1,), 128, dtype=torch.int32, device="cuda")

    def decode(*args, **kwargs):
        with torch.no_grad():
            return fat.flash_attn_with_kvcache(*args, **kwargs)

    def sdpa_no_grad(*args):
        with torch.no_grad():
            return F.scaled_dot_product_attention(*args)

    ours = {
        "flash_attn_func": lambda: fat.flash_attn_func(q, k, v, causal=True),
        "scaled_dot_product_attention": lambda: fat.scaled_dot_product_attention(qt, kt, vt, is_causal=True),
        "flash_attn_func, inputs require grad": lambda: fat.flash_attn_func(qg, kg, vg, causal=True),
        "flash_attn_varlen_func, 4 sequences": lambda: fat.flash_attn_varlen_func(qp, kp, vp, cu, cu, 32, 32,
                                                                                    causal=True),
        # 128 rows in chunks of 48: not whole chunks, so the packed form (3 sequences)
        "flash_attn_func, attention_chunk=48": lambda: fat.flash_attn_func(q, k, v, causal=True, attention_chunk=48),
        # one token against the 128 rows as a KV cache (no append; under no_grad as in serving)
        "flash_attn_with_kvcache, one token": lambda: decode(q1, k, v, cache_seqlens=seqlens),
    }
    calls = {}
    for backend in ("auto", "portable"):
        for fast in (True, False):
            for name, fn in ours.items():
                label = f"ours {name}" + ("" if backend == "auto" else " [portable]") + \
                        ("" if fast else " [fast launch off, plans off]")
                calls[label] = (fn, backend, fast)
    calls["torch SDPA"] = (lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True), "auto", True)
    q1t = q1.transpose(1, 2)
    calls["torch SDPA, one token"] = (lambda: sdpa_no_grad(q1t, kt, vt), "auto", True)
    calls["torch SDPA, inputs require grad"] = (lambda: F.scaled_dot_product_attention(
        qg.transpose(1, 2), kg.transpose(1, 2), vg.transpose(1, 2), is_causal=True), "auto", True)
    out = {}
    plans0 = ops.PLANS_ENABLED
    try:
        for name, (fn, backend, fast) in calls.items():
            os.environ["FLASHATTN_TRITON_BACKEND"] = backend
            fastlaunch.ENABLED = fast and fastlaunch.SUPPORTED
            ops.PLANS_ENABLED = fast  # off: the full path, as FLASHATTN_TRITON_FAST_LAUNCH=0
            kvc.DIRECT = fast  # off: decoding through its custom op (the dispatcher's cost)
            for _ in range(50):
                fn()
            _prefetch.wait_pending()  # a backward prefetch compiling in the background would skew the timing
            times = []
            for _ in range(5):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(n_calls):
                    fn()
                torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) / n_calls * 1e6)
            out[name] = statistics.median(times)
            print(f"{name}: {out[name]:.1f} us", flush=True)
    finally:
        os.environ.pop("FLASHATTN_TRITON_BACKEND", None)
        fastlaunch.ENABLED = fastlaunch.SUPPORTED
        ops.PLANS_ENABLED = plans0
        kvc.DIRECT = True
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--diagnose", action="store_true",
                    help="profile each child's first backward (torch.profiler) into first_bwd_profile_*.txt")
    ap.add_argument("--cprofile", action="store_true",
                    help="cProfile each child's first forward and backward (main thread) into first_call_*.cprof.txt")
    ap.add_argument("--only", default="", help="first-call runs to do, separated by ';' (default: all)")
    ap.add_argument("--skip-first-call", action="store_true", help="host overhead only")
    ap.add_argument("--skip-host", action="store_true", help="first call only")
    args = ap.parse_args()
    import torch
    import triton
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    commit = os.environ.get("GIT_COMMIT", "")
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
        except OSError:
            pass
    results = dict(env=dict(torch=torch.__version__, triton=triton.__version__,
                            gpu=torch.cuda.get_device_name(), commit=commit))
    os.makedirs(args.out, exist_ok=True)
    if not args.skip_first_call:
        only = [r.strip() for r in args.only.split(";") if r.strip()]
        ours_cache = sdpa_cache = ""
        for name, (prov, extra, prewarm) in RUNS.items():
            if only and name not in only:
                continue
            cache = tempfile.mkdtemp(prefix="triton-cache-")
            for kind in ("cold", "warm"):
                stem = f"{name.replace(', ', '_').replace(' ', '_')}_{kind}"
                diag = (os.path.join(args.out, f"first_call_{stem}.cprof.txt") if args.cprofile else
                        os.path.join(args.out, f"first_bwd_profile_{stem}.txt") if args.diagnose else "")
                results[f"{name} {kind}"] = first_call(prov, cache, extra, prewarm, diag)
                print(f"{name} {kind}: {results[f'{name} {kind}']}", flush=True)
            if prov == "ours" and not extra:
                ours_cache = cache
            elif prov == "sdpa":
                sdpa_cache = cache
        for name, (prov, extra, prewarm) in PREWARMED.items():
            cache = ours_cache if prov == "ours" else sdpa_cache
            if not cache:
                continue
            results[f"{name} warm"] = first_call(prov, cache, extra, prewarm)
            print(f"{name} warm: {results[f'{name} warm']}", flush=True)
    if not args.skip_host:
        results["host_overhead_us"] = host_overhead()
    with open(os.path.join(args.out, "bench_overhead.json"), "w") as f:
        json.dump(results, f, indent=1)
    lines = ["| run | import s | first fwd s | first bwd s | first total s | trivial bwd s | steady fwd+bwd ms |",
             "|---|---|---|---|---|---|---|"]
    for key, r in results.items():
        if key in ("env", "host_overhead_us"):
            continue
        if "error" in r:
            lines.append(f"| {key} | error: {r['error'][-200:]!r} | | | | | |")
            continue
        trivial = f"{r['trivial_bwd_s']:.2f}" if "trivial_bwd_s" in r else ""
        lines.append(f"| {key} | {r['import_s']:.2f} | {r['first_fwd_s']:.2f} | {r['first_bwd_s']:.2f} | "
                     f"{r['first_fwd_s'] + r['first_bwd_s']:.2f} | {trivial} | {r['steady_fwd_bwd_ms']:.2f} |")
    lines += ["", "| call (B=1, H=8, N=128, d=64, fp16, causal) | host time per call, us |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in results.get("host_overhead_us", {}).items()]
    text = "\n".join(lines)
    with open(os.path.join(args.out, "bench_overhead.md"), "w") as f:
        f.write(f"Environment: {results['env']}\n\n{text}\n")
    print(text)


if __name__ == "__main__":
    main()
