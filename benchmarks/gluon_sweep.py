"""Build the Hopper (Gluon) kernels for sm_90 on the installed Triton, no GPU needed.

One line per build: the sha256 (16 hex digits) of its PTX without line information
(`.loc` / `.file` lines, comments, the debug sections), its SASS instruction count, local
loads and stores (LDL / STL), shared memory and the SASS hash (compile_check.sass_hash), or
the innermost error of a build that fails.  Equal PTX hashes on one Triton mean the same IR
lowered the same way, also where an edit moved source lines (which can reorder a SASS
listing: compile_check.sass_hash's doc); across Triton releases the counts compare.

    PYTHONPATH=. python benchmarks/gluon_sweep.py [fwd|bwd] [KEY=VALUE ...] > sweep.txt

KEY=VALUE pairs (Python literals) are overrides added to every build of the kind named, e.g.
`bwd NO_LICM=True` (session 73: results/compile/session73/).

The builds: forward and backward at d = 64 / 128 / 256 / 192:128, full and causal, padded
and packed (IS_VARLEN 1 and 2; the packed d = 256 / 192 backward is declined by design);
the forward at d = 128 causal with a window, dropout, a mask, persistent, dynamic; the
backward there with a window, dropout, GROUP_SPLIT = 2, persistent.  Session 71 ran it on
Triton 3.6-3.9 (benchmarks/results/compile/session71/).
"""

import hashlib
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("FLASHATTN_TRITON_HOPPER_ANY_TRITON", "1")  # build on any release

import compile_check as cc  # noqa: E402


def ptx_hash(compiled) -> str:
    ptx = re.sub(r"\n\s*\.section\s+\.debug.*", "", compiled.asm["ptx"], flags=re.S)
    keep = [ln for ln in ptx.splitlines() if not ln.strip().startswith((".loc", ".file", "$L__tmp", "//"))]
    return hashlib.sha256("\n".join(keep).encode()).hexdigest()[:16]


def builds():
    out = []
    for d in ("64", "128", "256", "192:128"):
        for causal in (False, True):
            for ov in ({}, {"IS_VARLEN": 1}, {"IS_VARLEN": 2}):
                out.append(("fwd", d, causal, ov))
                out.append(("bwd", d, causal, ov))
    for ov in ({"HAS_WINDOW": True}, {"HAS_DROPOUT": True}, {"HAS_MASK": True}, {"PERSISTENT": True},
               {"DYNAMIC": True}):
        out.append(("fwd", "128", True, ov))
    for ov in ({"HAS_WINDOW": True}, {"HAS_DROPOUT": True}, {"GROUP_SPLIT": 2}, {"PERSISTENT": True}):
        out.append(("bwd", "128", True, ov))
    return out


def main() -> int:
    import triton
    import ast
    only = sys.argv[1] if len(sys.argv) > 1 else ""
    extra = {k: ast.literal_eval(v) for k, v in (a.split("=", 1) for a in sys.argv[2:])}
    if extra and not only:
        raise SystemExit("overrides need the kind: gluon_sweep.py fwd|bwd KEY=VALUE ...")
    print(f"# Triton {triton.__version__}" + (f", every build with {extra}" if extra else ""), flush=True)
    for kind, d, causal, ov in builds():
        if only and only != kind:
            continue
        dd, dv = (int(x) for x in d.split(":")) if ":" in d else (int(d), int(d))
        label = f"{kind} d={d} {'causal' if causal else 'full'} {ov}"
        t0 = time.time()
        try:
            build = cc.compile_hopper if kind == "fwd" else cc.compile_hopper_bwd
            k, _meta = build(dd, causal, dict(ov, **extra), 90, "bf16", dv)
            ops = cc.sass_ops(k)
            local = sum(1 for _, op, _ in ops if op.startswith(("LDL", "STL")))
            print(f"{label}: ptx {ptx_hash(k)} sass {len(ops)} local {local} smem {k.metadata.shared} "
                  f"sasshash {cc.sass_hash(k)} ({time.time() - t0:.0f} s)", flush=True)
        except Exception as exc:  # noqa: BLE001 - report the innermost cause and go on
            e = exc
            while e.__cause__ or e.__context__:
                e = e.__cause__ or e.__context__
            print(f"{label}: FAILED {type(e).__name__}: {str(e)[-200:]!r}", flush=True)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
