"""Where the sinks row's backward time goes (issue 10's variant table).

Session 28's variant table timed the backward of the causal GQA call with
learnable sinks at 1.430 ms against 0.922 ms without them (B = 2, N = 4k,
Hq 16 / Hkv 4, d = 128, bf16), where session 23 call 8 had 0.986 ms: the
kernels read sinks only through the LSE, so the backward should be the plain
one plus dsinks' few small torch operations.  This script times the same
call in several settings, each on fresh tensors:

  plain               no sinks (the call plans replay its backward)
  plain, plans off    no sinks, ops.PLANS_ENABLED = False (today's host path)
  sinks               sinks requiring grad (the variant table's row)
  sinks, no grad      sinks that do not require grad
  sinks, no fold      FLASHATTN_TRITON_HOPPER_SINKS=0 (the forward takes
                      the sinks inside its kernel)
  sinks, torch dQ     kernels/bwd.py DQ_CONVERT_KERNEL = False
  dropout             dropout_p = 0.1, no sinks (no call plan either: the
                      Hopper dropout backward through today's host path)

and prints, per setting: the backward's do_bench median (out.backward(dout,
retain_graph=True); leaves' grads reset, and accumulating as the variant
table runs it), the host time per backward call
(20 calls back to back, no synchronisation inside), and torch.profiler's
CUDA kernels per backward call.  A record, no decision.

--host-probe (session 29 call 2) instead, for plain, plain with the plans
off, sinks and dropout: one backward under
torch.cuda.set_sync_debug_mode("error") (any host-device synchronisation on
that path raises and is printed with the frames that made it), then
cProfile's tables (tottime and cumulative) over 20 backwards (Python 3.12's
cProfile sees the autograd worker thread too); into host_bwd_probe.txt.

    PYTHONPATH=. python benchmarks/bench_sinks_bwd.py [--host-probe] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import traceback
from pathlib import Path

import common as C


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="", help="directory for bench_sinks_bwd.json")
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--host-probe", action="store_true", help="the sync check and cProfile (module doc)")
    args = ap.parse_args()
    C.require_cuda("bench_sinks_bwd.py")
    import torch

    import flashattn_triton as fat
    from flashattn_triton import ops
    from flashattn_triton.kernels import bwd as kbwd

    b, n, hq, hkv, d = 2, args.seqlen, 16, 4, 128
    gen = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device="cuda", generator=gen).to(dtype)

    def setting(name):
        """(undo, kwargs of the call) for a setting."""
        undo = []
        if name.endswith("plans off"):
            old = ops.PLANS_ENABLED
            ops.PLANS_ENABLED = False
            undo.append(lambda: setattr(ops, "PLANS_ENABLED", old))
        if name.endswith("no fold"):
            old_env = os.environ.get("FLASHATTN_TRITON_HOPPER_SINKS")
            os.environ["FLASHATTN_TRITON_HOPPER_SINKS"] = "0"
            undo.append(lambda: os.environ.pop("FLASHATTN_TRITON_HOPPER_SINKS") if old_env is None
                        else os.environ.__setitem__("FLASHATTN_TRITON_HOPPER_SINKS", old_env))
        if name.endswith("torch dQ"):
            old_conv = kbwd.DQ_CONVERT_KERNEL
            kbwd.DQ_CONVERT_KERNEL = False
            undo.append(lambda: setattr(kbwd, "DQ_CONVERT_KERNEL", old_conv))
        kw = {}
        if name == "dropout":
            kw["dropout_p"] = 0.1
        if name.startswith("sinks"):
            kw["sinks"] = randn(hq, dtype=torch.float32).requires_grad_(not name.endswith("no grad"))
        return undo, kw

    if args.host_probe:
        lines = []

        def say(text=""):
            print(text, flush=True)
            lines.append(text)
        for name in ("plain", "plain, plans off", "sinks", "dropout"):
            undo, kw = setting(name)
            try:
                q, k, v = (randn(b, n, h, d).requires_grad_() for h in (hq, hkv, hkv))
                dout = randn(b, n, hq, d)
                out = fat.flash_attn_func(q, k, v, causal=True, **kw)

                def bwd():
                    out.backward(dout, retain_graph=True)
                for _ in range(3):
                    bwd()
                torch.cuda.synchronize()
                say(f"== {name}")
                host_probe(torch, bwd, say)
            except Exception as exc:  # noqa: BLE001 - recorded, the other settings still run
                say(f"{name}: ERROR {C.short_error(exc)}")
            finally:
                for u in undo:
                    u()
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / "host_bwd_probe.txt").write_text("\n".join(lines) + "\n")
        return

    rows = []
    for name in ("plain", "plain, plans off", "dropout", "sinks", "sinks, no grad", "sinks, no fold",
                 "sinks, torch dQ"):
        undo, kw = setting(name)
        try:
            q, k, v = (randn(b, n, h, d).requires_grad_() for h in (hq, hkv, hkv))
            dout = randn(b, n, hq, d)
            leaves = [q, k, v] + [t for t in kw.values() if isinstance(t, torch.Tensor) and t.requires_grad]
            out = fat.flash_attn_func(q, k, v, causal=True, **kw)

            def bwd():
                out.backward(dout, retain_graph=True)
            bwd()
            ms = C.bench_ms(bwd, grad_to_none=leaves)
            acc_ms = C.bench_ms(bwd)  # as the variant table times it: the leaves' grads accumulate
            for t in leaves:
                t.grad = None
            host_us = C.host_us(bwd, calls=20)
            kernels = C.kernel_us(bwd, calls=10)
            row = dict(setting=name, bwd_ms=ms, bwd_acc_ms=acc_ms, host_us=host_us,
                       kernel_sum_us=sum(kernels.values()), kernels=dict(list(kernels.items())[:8]))
        except Exception as exc:  # noqa: BLE001 - recorded, the other settings still run
            row = dict(setting=name, error=C.short_error(exc))
        finally:
            for u in undo:
                u()
        rows.append(row)
        if "error" in row:
            print(f"{name}: ERROR {row['error']}", flush=True)
        else:
            top = ", ".join(f"{k_[:36]} {us:.0f}" for k_, us in row["kernels"].items())
            print(f"{name}: bwd {row['bwd_ms']:.3f} ms (grads accumulating {row['bwd_acc_ms']:.3f}), "
                  f"host {row['host_us']:.0f} us/call, "
                  f"kernels {row['kernel_sum_us']:.0f} us/call ({top})", flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        C.write_json(Path(args.out) / "bench_sinks_bwd.json", dict(env=C.collect_env(), rows=rows))


def host_probe(torch, bwd, say) -> None:
    """--host-probe's sync check and cProfile tables of one setting's backward."""
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


if __name__ == "__main__":
    main()
