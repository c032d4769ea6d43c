"""One Hopper-backward case against float64 (a quick GPU smoke test, and the
program that compute-sanitizer runs): B=2, Hq=8, Hkv=2, Nq=333, Nk=1201, d=128
(or --d), bf16, causal bottom-right and not.  Prints the worst error of dq, dk,
dv as a fraction of the tolerance (flashattn_triton.testing, 3x the error of
the same reference in bf16) and exits 1 if any is above 1 or the kernel declined.
Head dims of CONFIGS_UNVERIFIED (configs not yet run on a GPU) are taken
(UNVERIFIED=True); --variant passes CONFIGS overrides (KEY=VALUE joined by '+')."""
import argparse
import sys

import torch

from flashattn_triton.kernels import hopper
from flashattn_triton.reference import attention_ref
from flashattn_triton.testing import max_abs_err, tolerance


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--shape", default="2,8,2,333,1201")
    ap.add_argument("--variant", default="")
    args = ap.parse_args()
    from common import parse_overrides  # benchmarks/ is this script's directory
    over = parse_overrides(args.variant)
    b, hq, hkv, nq, nk = map(int, args.shape.split(","))
    d, dt = args.d, torch.bfloat16
    bad = 0
    for shift in (None, nk - nq):
        torch.manual_seed(0)
        q, do = (torch.randn(b, nq, hq, d, device="cuda").to(dt).transpose(1, 2) for _ in range(2))
        k, v = (torch.randn(b, nk, hkv, d, device="cuda").to(dt).transpose(1, 2) for _ in range(2))
        scale = d ** -0.5
        o = torch.empty_like(q)
        lse = torch.full((b, hq, nq), float("nan"), device="cuda")
        assert hopper.hopper_attention_forward(q, k, v, o, lse, scale, shift)
        delta = (do.float() * o.float()).sum(-1)
        got = [torch.full_like(t, float("nan")) for t in (q, k, v)]
        took = hopper.hopper_attention_backward(do, q, k, v, lse, delta, *got, scale, shift, UNVERIFIED=True,
                                                **over)
        torch.cuda.synchronize()
        if not took:
            print("declined:", getattr(hopper, "bwd", None) and hopper.bwd._BROKEN)
            return 1
        refs = []
        for dtype in (torch.float64, dt):
            leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
            out, _ = attention_ref(*leaves, scale, shift)
            out.backward(do.to(dtype))
            refs.append([t.grad for t in leaves])
        for name, g, r, lo in zip(("dq", "dk", "dv"), got, *refs):
            err = max_abs_err(g, r)
            tol = tolerance(max_abs_err(lo, r), r, dt, 3.0)
            bad += not err <= tol
            nan = int(torch.isnan(g).sum())
            print(f"d={d} shift={shift} {name}: err {err:.3e} tol {tol:.3e} ({err / tol:.2f} of tol)"
                  + (f" NaN {nan}" if nan else ""), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
