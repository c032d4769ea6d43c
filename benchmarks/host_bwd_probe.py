"""Why an unplanned backward's host time reaches its kernels' time (issue 10's sinks row).

benchmarks/bench_sinks_bwd.py (session 29 call 1) timed the variant table's
causal GQA backward (B = 2, N = 4k, Hq 16 / Hkv 4, d = 128, bf16): the kernels
take the same ~910 us per backward with and without sinks, but the host time per
backward of the paths without a call plan (sinks, plain with the plans off)
reads 800-1100 us against 516 us for the planned plain call, so those backwards
are host-bound.  For each setting this script
  1. runs one backward under torch.cuda.set_sync_debug_mode("error"): any
     host-device synchronisation on that path raises, and is printed with the
     frames that made it;
  2. prints cProfile's table (tottime and cumulative) over 20 backwards (Python
     3.12's cProfile sees the autograd worker thread too).
A record, no decision.

    PYTHONPATH=. python benchmarks/host_bwd_probe.py [--out DIR]
"""

from __future__ import annotations

import argparse
import traceback
from pathlib import Path

import common as C


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="", help="directory for host_bwd_probe.txt")
    ap.add_argument("--seqlen", type=int, default=4096)
    args = ap.parse_args()
    C.require_cuda("host_bwd_probe.py")
    import torch

    import flashattn_triton as fat
    from flashattn_triton import ops

    b, n, hq, hkv, d = 2, args.seqlen, 16, 4, 128
    gen = torch.Generator(device="cuda").manual_seed(0)
    lines = []

    def say(text=""):
        print(text, flush=True)
        lines.append(text)

    def randn(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device="cuda", generator=gen).to(dtype)

    for name in ("plain", "plain, plans off", "sinks", "dropout"):
        old = ops.PLANS_ENABLED
        ops.PLANS_ENABLED = name != "plain, plans off"
        try:
            kw = {}
            if name == "sinks":
                kw["sinks"] = randn(hq, dtype=torch.float32).requires_grad_()
            if name == "dropout":
                kw["dropout_p"] = 0.1
            q, k, v = (randn(b, n, h, d).requires_grad_() for h in (hq, hkv, hkv))
            dout = randn(b, n, hq, d)
            out = fat.flash_attn_func(q, k, v, causal=True, **kw)

            def bwd():
                out.backward(dout, retain_graph=True)
            for _ in range(3):
                bwd()
            torch.cuda.synchronize()
            say(f"== {name}")
            torch.cuda.set_sync_debug_mode("error")
            try:
                bwd()
                say("sync check: no synchronisation in one backward")
            except RuntimeError as exc:
                say(f"sync check: {str(exc)[:300]}")
                for fr in traceback.extract_tb(exc.__traceback__)[-8:]:
                    say(f"    {fr.filename.split('flashattn_triton/')[-1]}:{fr.lineno} {fr.name}")
            finally:
                torch.cuda.set_sync_debug_mode(0)
            torch.cuda.synchronize()
            for sort in ("tottime", "cumulative"):
                say(C.host_profile(bwd, calls=20, sort=sort, lines=22))
        except Exception as exc:  # noqa: BLE001 - recorded, the other settings still run
            say(f"{name}: ERROR {C.short_error(exc)}")
        finally:
            ops.PLANS_ENABLED = old
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "host_bwd_probe.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
