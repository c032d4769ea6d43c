"""Offline tuning of the launch-config table (GPU only; not part of the tests).

For every (kernel, dtype, head dim, causal, length bucket) key, times each
candidate config of kernels/launch.py that fits the shared-memory/register
model and writes the fastest to flashattn_triton/kernels/configs/sm<cc>.json,
the table the library reads at call time (no tuning in user calls).

Compiling dominates a sweep, so a first phase compiles every (kernel, head
dim, causal, config) in parallel worker processes (filling Triton's on-disk
cache); the timing phase then runs in this one process.

    python benchmarks/tune.py --out flashattn_triton/kernels/configs/sm90.json \
        [--head-dims 64,128,256] [--seqlens 1024,4096,16384] [--dtype bfloat16] [--jobs 12]
        [--variants mask,dropout,softcap,alibi,window] [--merge]

--head-dims entries are d, or d:dv for a value head dim of its own (MLA's
192:128 tunes the keys "d256v128", kernels/launch.py table_key).

--variants tunes the keys of those variant tags (kernels/launch.py
variant_tag) instead of the plain ones: a (B, 1, N, N) bool mask, dropout
0.1, softcap 30, ALiBi, a 512-key left window, or a packed batch ("varlen":
32k tokens in documents of 64..N tokens, log-uniform, one of exactly N, as
benchmarks/bench_varlen.py draws them).  --merge adds the new entries
to an existing table instead of replacing it.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import itertools
import json
import os
import time

import torch

DEV = "cuda"  # a CPU smoke test of the plumbing sets "cpu" (with TRITON_INTERPRET=1)

def cfg_str(c):
    return f"BLOCK_M={c[0]},BLOCK_N={c[1]},num_warps={c[2]},num_stages={c[3]}"


def _inputs(b, h, n, d, dtype, dv=None):
    q, k, v, do = (torch.randn(b, h, n, w, device=DEV, dtype=dtype) for w in (d, d, dv or d, dv or d))
    return q, k, v, do


def _packed(n, h, d, dtype, tokens=32768, seed=0, dv=None):
    """q, k, v, do as packed (1, H, total, d) views, K and V with H / 4 heads
    (grouped-query, as the models that pack batches have), and (cu_seqlens,
    max_seqlen): one document of n tokens, the rest log-uniform in 64..n."""
    import math
    import random
    rng, lens = random.Random(seed), [n]
    while sum(lens) < max(tokens, 2 * n):
        lens.append(int(math.exp(rng.uniform(math.log(64), math.log(n)))))
    cu = torch.tensor([0, *itertools.accumulate(lens)], device=DEV, dtype=torch.int32)
    total = int(sum(lens))
    qkvd = [torch.randn(total, heads, w, device=DEV, dtype=dtype).transpose(0, 1).unsqueeze(0)
            for heads, w in ((h, d), (max(1, h // 4), d), (max(1, h // 4), dv or d), (h, dv or d))]
    return qkvd, ((cu, cu), (n, n))


def _mods(tag, q, causal):
    """(KernelMods, window) of a variant tag, on inputs like q (B, H, N, d)."""
    from flashattn_triton.kernels.score import KernelMods
    b, h, n, _ = q.shape
    window = (512 if tag == "window" else None, 0 if causal else None)
    if tag == "mask":
        keep = torch.rand(b, 1, n, n, device=q.device) > 0.2
        keep |= torch.eye(n, dtype=torch.bool, device=q.device)  # no empty row
        return KernelMods(bias=keep), window
    if tag == "dropout":
        return KernelMods(dropout_p=0.1, seed=torch.tensor([1234], device=q.device)), window
    if tag == "softcap":
        return KernelMods(softcap=30.0), window
    if tag == "alibi":
        slopes = torch.rand(h, device=q.device, dtype=torch.float32)
        return KernelMods(alibi=slopes.expand(b, h)), window
    return KernelMods(), window


def _runner(kernel, q, k, v, do, causal, tag="", packed=None):
    """packed: (cu_seqlens, max_seqlen) when q, k, v, do are packed (1, H, total, d) views."""
    from flashattn_triton.kernels.bwd import attention_backward
    from flashattn_triton.kernels.fwd import attention_forward
    o = q.new_empty(q.shape[:3] + v.shape[3:])
    lse = torch.empty(q.shape[:3], device=DEV, dtype=torch.float32)
    scale = q.shape[-1] ** -0.5
    mods, window = _mods(tag, q, causal)
    var = dict(cu_seqlens=packed[0], max_seqlen=packed[1]) if packed else {}
    attention_forward(q, k, v, o, lse, scale, 0, window, mods=mods, **var)
    if kernel == "FWD":
        return lambda: attention_forward(q, k, v, o, lse, scale, 0, window, mods=mods, **var)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    fused = kernel == "BWD_FUSED"  # the dK/dV kernel that also adds dQ (no dQ kernel)
    return lambda: attention_backward(do, q, k, v, o, lse, dq, dk, dv, scale, 0, window, mods=mods,
                                      fused_dq=fused, **var)


def _compile_job(job):
    """Worker: run one (kernel, (d, dv), causal, tag, config) once on a small input (compiles it)."""
    kernel, (d, dv), causal, tag, cfg, dtype = job
    os.environ["FLASHATTN_TRITON_CONFIG_" + kernel] = cfg_str(cfg)
    try:
        if tag == "varlen":
            (q, k, v, do), packed = _packed(256, 2, d, getattr(torch, dtype), tokens=512, dv=dv)
        else:
            (q, k, v, do), packed = _inputs(1, 2, 256, d, getattr(torch, dtype), dv), None
        _runner(kernel, q, k, v, do, causal, tag, packed)()
        torch.cuda.synchronize()
        return None
    except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory
        return f"{type(exc).__name__}: {str(exc)[:120]}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dims", default="64,128,256", help="comma-separated d or d:dv")
    ap.add_argument("--seqlens", default="1024,4096,16384")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--log", default=None)
    ap.add_argument("--variants", default="", help="comma-separated variant tags to tune instead")
    ap.add_argument("--kernels", default="FWD,BWD_DKDV,BWD_DQ,BWD_FUSED")
    ap.add_argument("--causal", default="both", choices=("both", "causal", "full"))
    ap.add_argument("--merge", action="store_true", help="add to the existing table at --out")
    args = ap.parse_args()
    import triton
    import triton.testing
    from flashattn_triton.kernels.launch import (CANDIDATES, RESIDENT, fits, head_dim_pad, seq_bucket,
                                                 table_key)

    dtype = getattr(torch, args.dtype)
    elem = torch.tensor([], dtype=dtype).element_size()
    head_dims = [(int(d), int(dv or d)) for d, _, dv in (x.partition(":") for x in args.head_dims.split(","))]
    tags = args.variants.split(",") if args.variants else [""]
    kernels = [k for k in CANDIDATES if k in args.kernels.split(",")]
    causals = {"both": (False, True), "causal": (True,), "full": (False,)}[args.causal]
    keys = list(itertools.product(kernels, head_dims, causals, tags))
    jobs = [(kern, d, causal, tag, c, args.dtype) for kern, d, causal, tag in keys
            for c in CANDIDATES[kern]
            if fits(c, RESIDENT[kern], head_dim_pad(d[0]), elem, head_dim_pad(d[1]))]
    t0 = time.time()
    ctx = __import__("multiprocessing").get_context("spawn")
    with cf.ProcessPoolExecutor(args.jobs, mp_context=ctx) as pool:
        errors = dict(zip(jobs, pool.map(_compile_job, jobs)))
    print(f"compiled {len(jobs)} kernels in {time.time() - t0:.0f} s "
          f"({sum(e is not None for e in errors.values())} failed)", flush=True)

    table, log = {}, []
    for kern, (d, dv), causal, tag in keys:
        for n in (int(x) for x in args.seqlens.split(",")):
            b, h = max(1, 16384 // n), 2048 // d
            if tag == "varlen":
                (q, k, v, do), packed = _packed(n, h, d, dtype, dv=dv)
                lens = packed[0][0].diff().tolist()
                flops = sum(2 * h * m * m * (d + dv) for m in lens) / (2 if causal else 1) * (1.0 if kern == "FWD" else 2.5)
            else:
                (q, k, v, do), packed = _inputs(b, h, n, d, dtype, dv), None
                flops = 2 * b * h * n * n * (d + dv) / (2 if causal else 1) * (1.0 if kern == "FWD" else 2.5)
            timed = []
            for c in CANDIDATES[kern]:
                if errors.get((kern, (d, dv), causal, tag, c, args.dtype), "unfit") is not None:
                    continue
                os.environ["FLASHATTN_TRITON_CONFIG_" + kern] = cfg_str(c)
                try:
                    fn = _runner(kern, q, k, v, do, causal, tag, packed)
                    ms = triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")
                    timed.append((ms, c))
                except Exception as exc:  # noqa: BLE001
                    log.append(dict(kernel=kern, d=d, dv=dv, causal=causal, n=n, config=c, error=str(exc)[:200]))
                finally:
                    del os.environ["FLASHATTN_TRITON_CONFIG_" + kern]
            timed.sort()
            if not timed:
                continue
            key = table_key(kern, dtype, head_dim_pad(d), causal, seq_bucket(n), tag, head_dim_pad(dv))
            table[key] = list(timed[0][1])
            log.append(dict(kernel=kern, d=d, dv=dv, causal=causal, n=n, variant=tag,
                            ranking=[(c, round(ms, 4), round(flops / ms * 1e-9)) for ms, c in timed]))
            print(f"{key:<40} best {timed[0][1]} {timed[0][0]:.3f} ms "
                  f"({flops / timed[0][0] * 1e-9:.0f} TFLOP/s); first candidate "
                  f"{[ms for ms, c in timed if c == CANDIDATES[kern][0]][:1]}", flush=True)
            del q, k, v, do
    env = dict(torch=torch.__version__, triton=triton.__version__, gpu=torch.cuda.get_device_name(),
               capability=list(torch.cuda.get_device_capability()), date=time.strftime("%Y-%m-%d"),
               note="bwd kernels timed as the whole backward with the other kernel at its default")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    if args.merge and os.path.exists(args.out):
        with open(args.out) as f:
            old = json.load(f)
        table = {**old["configs"], **table}
        env = dict(old.get("env", {}), merged=env)
    with open(args.out, "w") as f:
        json.dump(dict(env=env, configs=table), f, indent=1, sort_keys=True)
    if args.log:
        with open(args.log, "w") as f:
            json.dump(dict(env=env, results=log), f, indent=1)
    print(f"wrote {len(table)} entries to {args.out} in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
