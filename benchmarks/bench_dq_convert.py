"""A dQ conversion switch on against off, through the library's backward: --switch
kernel (default), the conversion kernel after the Hopper backward for causal calls
(kernels/bwd.py DQ_CONVERT_KERNEL[True]); --switch one-launch, the portable backward's
dK/dV and dQ programs in one launch (kernels/bwd.py ONE_LAUNCH[(padded head dim, causal)]
of each row; rows that take the Hopper backward do not reach it: run with
FLASHATTN_TRITON_HOPPER_BWD=0); --switch whole-q, the dK/dV kernel built without the masked
loops' row checks for query lengths that are multiples of 128 (kernels/bwd.py
WHOLE_Q_TILES[causal]; portable rows).

    python benchmarks/bench_dq_convert.py [--switch kernel|one-launch|whole-q]
        [--causal causal|full|both]
        [--head-dims 64,128] [--seqlens 2048,4096,8192]
        [--gqa 128:4096:4] [--tokens 16384] [--dtype bf16] [--repeats 3] [--rep-ms 40]
        [--calls 10] [--out DIR] [--dry-run]

Rows: causal (--causal: also or only not causal), B = tokens / N, H = 2048 / d, for every d of --head-dims and N of
--seqlens, then the GQA rows of --gqa (';'-separated d:N:Hkv, Hq = 2048 / d). Timed per
row: ``out.backward(dout, retain_graph=True)`` of a planned flash_attn_func call with
grad-requiring inputs, with the switch's causal entry on and off (its non-causal entry
as it is), the two settings alternated over --repeats rounds (off first in even
rounds, on first in odd ones). Each setting starts from a fresh call plan and forward
whose backward runs until its plan has recorded or given up (ops.MAX_RECORD_TRIES + 1
calls), as in a process that starts with that setting: on, the Hopper backward's
recording is clean and later backwards replay it (``replayed``); off, torch's dQ copy
breaks the recording and each backward runs the op layer's host code. Each round and
setting gives (a) ``wall``: triton.testing.do_bench's median (CUDA events, L2 flushed,
q / k / v .grad reset between calls) and (b) ``kernel``: torch.profiler's CUDA kernel time
summed over --calls back-to-back backward calls, per call. Ratios are off / on of
the medians over the rounds (above 1: the conversion kernel is faster). Each
setting's kernels of the last round are kept by name, and ``convert_ran`` says
whether the switch reached the row's backward: with --switch kernel, the on setting
launched a _bwd_dq_convert kernel and the off one did not; with --switch
one-launch, the on setting launched _bwd_dkdv_dq and the off one did not; with whole-q,
both launched a portable dK/dV kernel.

Writes bench_dq_convert.json (after every row) and prints one line per row.
--dry-run prints the rows and exits (no GPU needed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C  # noqa: E402


CAUSAL = {"causal": (True,), "full": (False,), "both": (True, False)}


def parse_rows(head_dims: str, seqlens: str, gqa: str, tokens: int, causal: str = "causal") -> list[dict]:
    """The rows to time: dicts of d, n, b, hq, hkv, causal."""
    rows = []
    for d in C.parse_list(head_dims, int, what="head dim") or []:
        for n in C.parse_list(seqlens, int, what="seqlen") or []:
            rows.append(dict(d=d, n=n, b=max(1, tokens // n), hq=2048 // d, hkv=2048 // d))
    for spec in filter(None, (s.strip() for s in gqa.split(";"))):
        try:
            d, n, hkv = (int(x) for x in spec.split(":"))
        except ValueError:
            raise ValueError(f"--gqa: {spec!r} is not d:N:Hkv") from None
        if (2048 // d) % hkv:
            raise ValueError(f"--gqa: Hkv {hkv} does not divide Hq {2048 // d} (d = {d})")
        rows.append(dict(d=d, n=n, b=max(1, tokens // n), hq=2048 // d, hkv=hkv))
    return [dict(r, causal=c) for c in CAUSAL[causal] for r in rows]


def switch_value(base, on: bool, causal: bool = True) -> dict:
    """A new {causal: bool} with the entry of ``causal`` ``on`` and the other one of
    ``base`` (a new object each time: the backward plans compare it)."""
    from flashattn_triton.kernels import bwd
    return {c: on if c == causal else bwd.by_causal(base, c) for c in (False, True)}


class Switch:
    """The module attribute a --switch sets, and whether it reached a backward."""

    def __init__(self, name: str):
        from flashattn_triton.kernels import bwd
        self.name = name
        self.module = bwd
        self.attr, self.kernel = {"kernel": ("DQ_CONVERT_KERNEL", "_bwd_dq_convert"),
                                  "one-launch": ("ONE_LAUNCH", "_bwd_dkdv_dq"),
                                  # dense calls with whole query tiles: EVEN_M builds of the dK/dV kernel
                                  "whole-q": ("WHOLE_Q_TILES", None)}[name]
        self.base = getattr(self.module, self.attr)

    def set(self, on: bool, causal: bool, d: int):
        """The switch on or off for rows of this causal flag and head dim d."""
        if self.name == "one-launch":  # the row's entry only (what its backward reads)
            from flashattn_triton.kernels.launch import head_dim_pad
            self.module.ONE_LAUNCH = {(head_dim_pad(d), causal): on}
            return
        setattr(self.module, self.attr, switch_value(self.base, on, causal))

    def restore(self):
        setattr(self.module, self.attr, self.base)

    def reached(self, names: dict) -> bool:
        """The on setting launched the switch's kernel and the off one did not
        (whole-q: both launched a portable dK/dV program, which the kernel
        names do not tell apart)."""
        if self.name == "whole-q":
            return all(any("_bwd_dkdv" in name for name in names.get(m, {})) for m in ("on", "off"))
        ran = lambda m: any(self.kernel in name for name in names.get(m, {}))  # noqa: E731
        return ran("on") and not ran("off")


def time_row(r: dict, dtype, repeats: int, rep_ms: int, calls: int, switch: Switch) -> dict:
    import torch
    import flashattn_triton as fat
    from flashattn_triton import api, ops
    q = torch.randn(r["b"], r["n"], r["hq"], r["d"], device="cuda", dtype=dtype).requires_grad_()
    k, v = (torch.randn(r["b"], r["n"], r["hkv"], r["d"], device="cuda", dtype=dtype).requires_grad_()
            for _ in range(2))
    dout = torch.randn_like(q)
    causal = r["causal"]

    def setting(on: bool):
        """The switch set, then a fresh call plan and forward, and its backward run until
        its plan has recorded (or given up), as in a process that starts with it."""
        switch.set(on, causal, r["d"])
        api.clear_plans()
        for _ in range(2):  # the first call makes the plan, the second replays the forward
            out = fat.flash_attn_func(q, k, v, causal=causal)
        plan = next(iter(api._PLANS.values()), None)

        def step():
            out.backward(dout, retain_graph=True)

        def fresh_step():
            for t in (q, k, v):
                t.grad = None
            step()

        for _ in range(ops.MAX_RECORD_TRIES + 1):
            fresh_step()
        torch.cuda.synchronize()
        return step, fresh_step, plan is not None and plan.op.backward.replay is not None

    wall = {"on": [], "off": []}
    kern = {"on": [], "off": []}
    names, replayed = {}, {}
    try:
        for i in range(repeats):
            for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
                step, fresh_step, replayed[mode] = setting(mode == "on")
                wall[mode].append(C.bench_ms(step, warmup=10, rep=rep_ms, grad_to_none=[q, k, v]))
                per = C.kernel_us(fresh_step, calls)
                kern[mode].append(sum(per.values()))
                names[mode] = {name: round(us, 1) for name, us in list(per.items())[:6]}
    finally:
        switch.restore()
        api.clear_plans()
    med_wall = {m: statistics.median(t) for m, t in wall.items()}
    med_kern = {m: statistics.median(t) for m, t in kern.items()}
    return dict(r, switch=switch.name, dtype=str(dtype).replace("torch.", ""),
                wall_ms=wall, kernel_us=kern, wall_ms_med=med_wall, kernel_us_med=med_kern,
                ratio_wall=med_wall["off"] / med_wall["on"], ratio_kernel=med_kern["off"] / med_kern["on"],
                ratio_wall_rounds=[a / b for a, b in zip(wall["off"], wall["on"])],
                ratio_kernel_rounds=[a / b for a, b in zip(kern["off"], kern["on"])],
                kernels=names, replayed=replayed, convert_ran=switch.reached(names))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--switch", choices=("kernel", "one-launch", "whole-q"), default="kernel")
    ap.add_argument("--causal", choices=tuple(CAUSAL), default="causal")
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--seqlens", default="2048,4096,8192")
    ap.add_argument("--gqa", default="128:4096:4", help="';'-separated d:N:Hkv rows ('' for none)")
    ap.add_argument("--tokens", type=int, default=16384, help="B * N (default 16384)")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--repeats", type=int, default=3, help="alternated off / on rounds per row")
    ap.add_argument("--rep-ms", type=int, default=40, help="do_bench's rep (ms) per timing")
    ap.add_argument("--calls", type=int, default=10, help="backward calls per profiler window")
    ap.add_argument("--out", default="")
    ap.add_argument("--dry-run", action="store_true", help="print the rows and exit")
    args = ap.parse_args()
    try:
        rows = parse_rows(args.head_dims, args.seqlens, args.gqa, args.tokens, args.causal)
    except ValueError as exc:
        ap.error(str(exc))
    if args.dry_run:
        for r in rows:
            print(r)
        return
    C.require_cuda("bench_dq_convert.py")
    for env in ("FLASHATTN_TRITON_DQ_CONVERT", "FLASHATTN_TRITON_BWD_ONE_LAUNCH"):
        if os.environ.get(env):
            print(f"note: {env} is set; the module switch is set per setting all the same")
    import torch
    dtype = C.torch_dtype(args.dtype)
    done = []
    switch = Switch(args.switch)
    for r in rows:
        res = time_row(r, dtype, args.repeats, args.rep_ms, args.calls, switch)
        done.append(res)
        print(f"d={r['d']} N={r['n']} B={r['b']} Hq={r['hq']} Hkv={r['hkv']} "
              f"{'causal' if r['causal'] else 'not causal'}: "
              f"wall off {res['wall_ms_med']['off'] * 1e3:.0f} / on {res['wall_ms_med']['on'] * 1e3:.0f} us "
              f"(off/on {res['ratio_wall']:.3f}; rounds " + " ".join(f"{x:.3f}" for x in res["ratio_wall_rounds"])
              + f"), kernels off {res['kernel_us_med']['off']:.0f} / on {res['kernel_us_med']['on']:.0f} us "
              f"(off/on {res['ratio_kernel']:.3f}; rounds " + " ".join(f"{x:.3f}" for x in res["ratio_kernel_rounds"])
              + f"); convert_ran {res['convert_ran']}, plan replayed off {res['replayed'].get('off')} "
              f"on {res['replayed'].get('on')}", flush=True)
        if args.out:  # after every row: a run cut short keeps what it measured
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "bench_dq_convert.json"), "w") as f:
                json.dump(dict(torch=torch.__version__, gpu=torch.cuda.get_device_name(), args=vars(args),
                               rows=done), f, indent=1)


if __name__ == "__main__":
    main()
