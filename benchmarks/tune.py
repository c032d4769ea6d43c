"""Offline tuning of the launch-config table (GPU only; not part of the tests).

For every (kernel, dtype, head dim, causal, length bucket) key, times each
candidate config of kernels/launch.py that fits the shared-memory/register
model and writes the fastest to flashattn_triton/kernels/configs/sm<cc>.json,
the table the library reads at call time (no tuning in user calls).

Compiling dominates a sweep, so a first phase compiles every (kernel, head
dim, causal, config) in parallel worker processes (filling Triton's on-disk
cache; --jobs 0: in this process); the timing phase then runs in this one
process.  Both phases run the kernels with H = 2048 / d heads: the head
count is an argument that Triton specializes (divisible by 16 or not), and
a compile for another count would not serve the timed calls.

    python benchmarks/tune.py --out flashattn_triton/kernels/configs/sm90.json \
        [--head-dims 64,128,256] [--seqlens 1024,4096,16384] [--dtype bfloat16] [--jobs 12]
        [--variants mask,dropout,softcap,alibi,window] [--kernels FWD,BWD_DKDV,BWD_DQ] [--merge]

--kernels BWD_ONE tunes the one-launch backward (kernels/bwd.py _bwd_dkdv_dq,
ONE_LAUNCH on for its timed calls only): its candidates pair a BWD_DKDV
candidate's tiles with a BWD_DQ candidate's of the same num_warps, at 2 or 3
stages where both parts fit the model (launch.PairLauncher.pair_candidates;
the count per key is printed), and its entries hold six fields
[BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2, num_warps, num_stages].  Its line
per key also gives the time of the config the library derives from the
BWD_DKDV and BWD_DQ entries without a BWD_ONE entry (``derived``).  Dense
batches only (no "varlen" variant).

--head-dims entries are d, or d:dv for a value head dim of its own (MLA's
192:128 tunes the keys "d256v128", kernels/launch.py table_key).

--variants tunes the keys of those variant tags (kernels/launch.py
variant_tag) instead of the plain ones: a (B, 1, N, N) bool mask, dropout
0.1, softcap 30, ALiBi, a 512-key left window, or a packed batch ("varlen":
32k tokens in documents of 64..N tokens, log-uniform, one of exactly N, as
benchmarks/bench_varlen.py draws them).  --merge adds the new entries
to an existing table instead of replacing it.  The table (and --log) is
written after every key: a run cut short keeps the keys it finished.

A CPU smoke run of the plumbing (tests/test_configs.py): DEV = "cpu" with
TRITON_INTERPRET=1, small TOKENS and HEADS, --jobs 0; times are host times.
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
TOKENS = 16384  # the timed inputs: B = TOKENS / N sequences
HEADS = 2048  # and H = HEADS / d heads (the compile phase too)


def cfg_str(kernel, c):
    """FLASHATTN_TRITON_CONFIG_<kernel> of a table entry."""
    from flashattn_triton.kernels.launch import entry_fields
    return ",".join(f"{name}={value}" for name, value in zip(entry_fields(kernel), c))


def candidates(kernel, d, dv, elem):
    """The configs of ``kernel`` that fit the model at head dims d, dv."""
    from flashattn_triton.kernels.bwd import _launch_one
    from flashattn_triton.kernels.launch import CANDIDATES, RESIDENT, fits, head_dim_pad
    if kernel == _launch_one.name:
        return _launch_one.pair_candidates(head_dim_pad(d), elem, head_dim_pad(dv))
    return [c for c in CANDIDATES[kernel] if fits(c, RESIDENT[kernel], head_dim_pad(d), elem, head_dim_pad(dv))]


def _time_ms(fn):
    """Median milliseconds of fn (on the CPU, the host time of one call)."""
    if DEV == "cpu":
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    import triton.testing
    return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")


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
    """packed: (cu_seqlens, max_seqlen) when q, k, v, do are packed (1, H, total, d) views.
    Backward kernels run in their own form: BWD_ONE's one launch, the others' two."""
    from flashattn_triton.kernels import bwd
    from flashattn_triton.kernels.bwd import attention_backward
    from flashattn_triton.kernels.fwd import attention_forward
    from flashattn_triton.kernels.launch import head_dim_pad
    bwd.ONE_LAUNCH = kernel == bwd._launch_one.name
    if bwd.ONE_LAUNCH and not bwd.use_one_launch(causal, packed is not None, False, head_dim_pad(q.shape[-1])):
        raise RuntimeError(f"{kernel}: this backward would not take the one launch (packed, or autotuning on)")
    o = q.new_empty(q.shape[:3] + v.shape[3:])
    lse = torch.empty(q.shape[:3], device=DEV, dtype=torch.float32)
    scale = q.shape[-1] ** -0.5
    mods, window = _mods(tag, q, causal)
    var = dict(cu_seqlens=packed[0], max_seqlen=packed[1]) if packed else {}
    attention_forward(q, k, v, o, lse, scale, 0, window, mods=mods, **var)
    if kernel == "FWD":
        return lambda: attention_forward(q, k, v, o, lse, scale, 0, window, mods=mods, **var)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    return lambda: attention_backward(do, q, k, v, o, lse, dq, dk, dv, scale, 0, window, mods=mods, **var)


def _compile_job(job):
    """Worker: run one (kernel, (d, dv), causal, tag, config) once on a small input (compiles it)."""
    kernel, (d, dv), causal, tag, cfg, dtype = job
    os.environ["FLASHATTN_TRITON_CONFIG_" + kernel] = cfg_str(kernel, cfg)
    n = min(256, TOKENS)
    try:
        if tag == "varlen":
            (q, k, v, do), packed = _packed(n, HEADS // d, d, getattr(torch, dtype), tokens=2 * n, dv=dv)
        else:
            (q, k, v, do), packed = _inputs(1, HEADS // d, n, d, getattr(torch, dtype), dv), None
        _runner(kernel, q, k, v, do, causal, tag, packed)()
        if DEV == "cuda":
            torch.cuda.synchronize()
        return None
    except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory
        return f"{type(exc).__name__}: {str(exc)[:120]}"
    finally:
        del os.environ["FLASHATTN_TRITON_CONFIG_" + kernel]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dims", default="64,128,256", help="comma-separated d or d:dv")
    ap.add_argument("--seqlens", default="1024,4096,16384")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=12, help="compile workers (0: compile in this process)")
    ap.add_argument("--log", default=None)
    ap.add_argument("--variants", default="", help="comma-separated variant tags to tune instead")
    ap.add_argument("--kernels", default="FWD,BWD_DKDV,BWD_DQ",
                    help="comma-separated, of FWD, BWD_DKDV, BWD_DQ, BWD_ONE")
    ap.add_argument("--causal", default="both", choices=("both", "causal", "full"))
    ap.add_argument("--merge", action="store_true", help="add to the existing table at --out")
    args = ap.parse_args()
    import triton
    from flashattn_triton.kernels.bwd import _launch_one
    from flashattn_triton.kernels.launch import CANDIDATES, check_entry, head_dim_pad, seq_bucket, table_key

    dtype = getattr(torch, args.dtype)
    elem = torch.tensor([], dtype=dtype).element_size()
    head_dims = [(int(d), int(dv or d)) for d, _, dv in (x.partition(":") for x in args.head_dims.split(","))]
    tags = args.variants.split(",") if args.variants else [""]
    kernels = args.kernels.split(",")
    unknown = set(kernels) - {*CANDIDATES, _launch_one.name}
    if unknown:
        ap.error(f"--kernels: unknown {sorted(unknown)}")
    if _launch_one.name in kernels and "varlen" in tags:
        ap.error(f"--kernels {_launch_one.name}: the one launch takes dense batches only (no varlen)")
    causals = {"both": (False, True), "causal": (True,), "full": (False,)}[args.causal]
    keys = list(itertools.product(kernels, head_dims, causals, tags))
    cands = {(kern, d): candidates(kern, *d, elem) for kern, d in itertools.product(kernels, head_dims)}
    for kern, d in cands:
        print(f"{kern} d={d[0]}{f'/{d[1]}' if d[1] != d[0] else ''}: {len(cands[kern, d])} candidates per key",
              flush=True)
    jobs = [(kern, d, causal, tag, c, args.dtype) for kern, d, causal, tag in keys for c in cands[kern, d]]
    t0 = time.time()
    if args.jobs > 0:
        ctx = __import__("multiprocessing").get_context("spawn")
        with cf.ProcessPoolExecutor(args.jobs, mp_context=ctx) as pool:
            errors = dict(zip(jobs, pool.map(_compile_job, jobs)))
    else:
        errors = {job: _compile_job(job) for job in jobs}
    print(f"compiled {len(jobs)} kernels in {time.time() - t0:.0f} s "
          f"({sum(e is not None for e in errors.values())} failed)", flush=True)

    gpu = DEV == "cuda"
    env = dict(torch=torch.__version__, triton=triton.__version__,
               gpu=torch.cuda.get_device_name() if gpu else DEV,
               capability=list(torch.cuda.get_device_capability()) if gpu else None,
               date=time.strftime("%Y-%m-%d"),
               note="bwd kernels timed as the whole backward with the other kernel at its default")
    old = {}
    if args.merge and os.path.exists(args.out):
        with open(args.out) as f:
            old = json.load(f)
        env = dict(old.get("env", {}), merged=env)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    def save():
        """The table (and log) so far: a run cut short keeps the keys it finished."""
        with open(args.out, "w") as f:
            json.dump(dict(env=env, configs={**old.get("configs", {}), **table}), f, indent=1, sort_keys=True)
        if args.log:
            with open(args.log, "w") as f:
                json.dump(dict(env=env, results=log), f, indent=1)

    table, log = {}, []
    for kern, (d, dv), causal, tag in keys:
        for n in (int(x) for x in args.seqlens.split(",")):
            b, h, t_key = max(1, TOKENS // n), HEADS // d, time.time()
            if tag == "varlen":
                (q, k, v, do), packed = _packed(n, h, d, dtype, dv=dv)
                lens = packed[0][0].diff().tolist()
                flops = sum(2 * h * m * m * (d + dv) for m in lens) / (2 if causal else 1) * (1.0 if kern == "FWD" else 2.5)
            else:
                (q, k, v, do), packed = _inputs(b, h, n, d, dtype, dv), None
                flops = 2 * b * h * n * n * (d + dv) / (2 if causal else 1) * (1.0 if kern == "FWD" else 2.5)
            timed = []
            for c in cands[kern, (d, dv)]:
                if errors.get((kern, (d, dv), causal, tag, c, args.dtype), "unfit") is not None:
                    continue
                os.environ["FLASHATTN_TRITON_CONFIG_" + kern] = cfg_str(kern, c)
                try:
                    fn = _runner(kern, q, k, v, do, causal, tag, packed)
                    timed.append((_time_ms(fn), c))
                except Exception as exc:  # noqa: BLE001
                    log.append(dict(kernel=kern, d=d, dv=dv, causal=causal, n=n, config=c, error=str(exc)[:200]))
                finally:
                    del os.environ["FLASHATTN_TRITON_CONFIG_" + kern]
            timed.sort()
            if not timed:
                continue
            key = table_key(kern, dtype, head_dim_pad(d), causal, seq_bucket(n), tag, head_dim_pad(dv))
            table[key] = list(check_entry(key, timed[0][1]))
            if kern == _launch_one.name:  # what the library takes without this entry
                parts = (p.config(torch.device(DEV), dtype, head_dim_pad(d), causal, seq_bucket(n), tag,
                                  head_dim_pad(dv)) for p in _launch_one.parts)
                ref = ("derived", _launch_one.combine(*parts, head_dim_pad(d), elem, head_dim_pad(dv)))
            else:
                ref = ("first candidate", CANDIDATES[kern][0])
            ref_ms = [ms for ms, c in timed if c == ref[1]][:1]
            log.append(dict(kernel=kern, d=d, dv=dv, causal=causal, n=n, variant=tag, reference=ref,
                            ranking=[(c, round(ms, 4), round(flops / ms * 1e-9)) for ms, c in timed]))
            print(f"{key:<40} best {timed[0][1]} {timed[0][0]:.3f} ms "
                  f"({flops / timed[0][0] * 1e-9:.0f} TFLOP/s); {ref[0]} {ref[1]} "
                  f"{f'{ref_ms[0]:.3f} ms' if ref_ms else 'not timed'}; {len(timed)} timed in "
                  f"{time.time() - t_key:.0f} s", flush=True)
            del q, k, v, do
            save()
    save()
    print(f"wrote {len(table)} entries ({len({**old.get('configs', {}), **table})} in all) to {args.out} "
          f"in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
