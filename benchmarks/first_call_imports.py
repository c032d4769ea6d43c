"""Which modules a first call imports, and from where (GPU).

    python benchmarks/first_call_imports.py [--prefetch 0|1]

Runs the first forward + backward of bench_overhead.py's shape (B=4, H=16,
N=4096, d=128, fp16, causal) in fresh processes, cold then warm Triton cache,
with an import hook that records every module imported during the call: the
time spent importing and, for the heavy roots (torch._dynamo, sympy,
torch.distributed, torch._inductor, torch._higher_order_ops, ...), the stack
that imported them (frames outside importlib).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, time, traceback
import torch
import flashattn_triton as fat
HEAVY = ("torch._dynamo", "sympy", "torch.distributed", "torch._inductor", "torch._higher_order_ops",
         "torch._functorch", "torch._decomp", "torch._prims", "torch._subclasses", "torch.fx", "torch._library",
         "torch.testing", "torch.utils._sympy", "triton.experimental", "torch._refs", "numpy")
seen = {}
class Hook:
    def find_spec(self, name, path=None, target=None):
        if name not in sys.modules and name not in seen:
            root = next((h for h in HEAVY if name == h or name.startswith(h + ".")), None)
            if root and root not in seen:
                stack = [f"{f.filename}:{f.lineno} {f.name}" for f in traceback.extract_stack()[:-1]
                         if "importlib" not in f.filename]
                seen[root] = (time.perf_counter() - T0, stack[-14:])
        return None
q, k, v = (torch.randn(4, 4096, 16, 128, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
do = torch.randn_like(q)
torch.cuda.synchronize()
n0 = len(sys.modules)
sys.meta_path.insert(0, Hook())
disabled = {}
def prof(frame, event, arg):
    # torch._compile._disable_dynamo's wrapper imports torch._dynamo at its first call: name what it wraps
    if event == "call" and frame.f_code.co_name == "inner" and frame.f_code.co_filename.endswith("_compile.py"):
        fn = frame.f_locals.get("fn")
        key = getattr(fn, "__qualname__", repr(fn))
        if key not in disabled:
            disabled[key] = (getattr(fn, "__module__", "?"), f"{frame.f_back.f_code.co_filename}:{frame.f_back.f_lineno}")
sys.setprofile(prof)
T0 = time.perf_counter()
out = fat.flash_attn_func(q, k, v, causal=True); torch.cuda.synchronize()
t_fwd = time.perf_counter() - T0
n1 = len(sys.modules)
t1 = time.perf_counter(); out.backward(do); torch.cuda.synchronize()
t_bwd = time.perf_counter() - t1
sys.setprofile(None)
for root, (t, stack) in sorted(seen.items(), key=lambda kv: kv[1][0]):
    print(f"--- {root} first imported at +{t:.2f} s from:")
    for line in stack[-8:]:
        print("    " + line)
for key, (mod, caller) in disabled.items():
    print(f"_disable_dynamo wrapper called: {mod}.{key} from {caller}")
print(f"first fwd {t_fwd:.2f} s ({n1 - n0} modules imported), first bwd {t_bwd:.2f} s ({len(sys.modules) - n1} modules)")
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefetch", default="1")
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="triton-cache-")
    env = dict(os.environ, TRITON_CACHE_DIR=cache, FLASHATTN_TRITON_PREFETCH_BWD=args.prefetch)
    for kind in ("cold", "warm"):
        print(f"===== {kind} cache, prefetch={args.prefetch}", flush=True)
        res = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
        print(res.stdout[-20000:], res.stderr[-3000:] if res.returncode else "", flush=True)


if __name__ == "__main__":
    main()
