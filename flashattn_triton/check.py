"""Self-check: ``python -m flashattn_triton check`` (or ``flashattn-triton check``).

Compares the library against a float64 reference on the device at hand and
prints a pass/fail table:

* GPU: realistic shapes through the compiled kernels, then a short benchmark
  (forward and backward TFLOP/s next to PyTorch SDPA).
* CPU: the blockwise PyTorch path in this process, then the Triton kernels
  in Triton's interpreter (a child process started with TRITON_INTERPRET=1,
  because Triton reads that variable when the kernels are defined).

A case passes when the max error against float64 is at most 2x (outputs) or
3x (gradients) the error of plain PyTorch computing the same attention in
the input dtype, plus a floor of one ulp of the dtype and 8 float32 ulps of
the largest reference value.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import List, Optional, Tuple

import torch

from .api import flash_attn_func
from .testing import flash_attention_ref, max_abs_err, tolerance

# (batch, n_q, n_k, h_q, h_kv, head_dim, causal, dtype)
CPU_CASES = [
    (2, 113, 203, 4, 2, 64, True, torch.float16),
    (2, 200, 64, 4, 1, 40, True, torch.bfloat16),
    (1, 77, 77, 2, 2, 32, False, torch.float32),
]
GPU_CASES = [
    (2, 4096, 4096, 16, 16, 128, False, torch.bfloat16),
    (2, 4096, 4096, 16, 16, 128, True, torch.bfloat16),
    (2, 4096, 4096, 32, 8, 128, True, torch.float16),
    (2, 1000, 3001, 8, 2, 64, True, torch.bfloat16),
    (1, 2049, 1023, 8, 8, 256, True, torch.float16),
    (2, 1024, 1024, 8, 8, 96, False, torch.float32),
]


def _run(fn, q, k, v, do, dtype=None):
    inputs = [t.detach().to(dtype or t.dtype).requires_grad_(True) for t in (q, k, v)]
    out, lse = fn(*inputs)
    grads = torch.autograd.grad(out, inputs, do.to(out.dtype))
    return [out.detach(), lse.detach(), *grads]


def check_case(case, device) -> List[Tuple[str, float, float, bool]]:
    batch, n_q, n_k, h_q, h_kv, d, causal, dtype = case
    q = torch.randn(batch, n_q, h_q, d, device=device).to(dtype)
    k = torch.randn(batch, n_k, h_kv, d, device=device).to(dtype)
    v = torch.randn(batch, n_k, h_kv, d, device=device).to(dtype)
    do = torch.randn(batch, n_q, h_q, d, device=device).to(dtype)
    got = _run(lambda q, k, v: flash_attn_func(q, k, v, causal=causal, return_lse=True), q, k, v, do)
    ref = _run(lambda q, k, v: flash_attention_ref(q, k, v, causal), q, k, v, do, torch.float64)
    base = _run(lambda q, k, v: flash_attention_ref(q, k, v, causal, dtype=dtype), q, k, v, do)
    rows = []
    for i, name in enumerate(("out", "lse", "dq", "dk", "dv")):
        factor = 2.0 if i < 2 else 3.0
        err = max_abs_err(got[i], ref[i])
        tol = tolerance(max_abs_err(base[i], ref[i]), ref[i], torch.float32 if name == "lse" else dtype, factor)
        rows.append((name, err, tol, err <= tol))
    return rows


def _describe(case) -> str:
    batch, n_q, n_k, h_q, h_kv, d, causal, dtype = case
    return (f"B={batch} Nq={n_q} Nk={n_k} H={h_q}/{h_kv} d={d} "
            f"{'causal' if causal else 'full'} {str(dtype).replace('torch.', '')}")


def run_checks(cases, device, label: str) -> bool:
    ok_all = True
    print(f"\n[{label}] correctness vs float64 reference (max |err| / tolerance)")
    print(f"{'case':<52} {'out':>9} {'lse':>9} {'dq':>9} {'dk':>9} {'dv':>9}  result")
    for case in cases:
        rows = check_case(case, device)
        ok = all(r[3] for r in rows)
        ok_all &= ok
        cells = " ".join(f"{r[1] / r[2] if r[2] > 0 else r[1]:9.2f}" for r in rows)
        print(f"{_describe(case):<52} {cells}  {'PASS' if ok else 'FAIL'}")
    return ok_all


def benchmark(device) -> None:
    """A short speed table on the GPU (full suite: benchmarks/bench_attention.py)."""
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel

    batch, n, d = 2, 8192, 128
    heads = 2048 // d
    print(f"\n[benchmark] bf16, B={batch}, N={n}, H={heads}, d={d}; TFLOP/s (median of do_bench)")
    print(f"{'provider':<18} {'causal':<7} {'fwd':>7} {'bwd':>7}")
    for causal in (False, True):
        flops_fwd = 4 * batch * heads * n * n * d / (2 if causal else 1)
        q, k, v = (torch.randn(batch, n, heads, d, device=device, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        do = torch.randn_like(q)
        providers = [("flashattn_triton", lambda: flash_attn_func(q, k, v, causal=causal))]
        for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION),
                              ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
            def sdpa(backend=backend):
                with sdpa_kernel(backend):
                    return torch.nn.functional.scaled_dot_product_attention(
                        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
            providers.append((name, sdpa))
        for name, fn in providers:
            try:
                fn()  # compile / autotune outside the timing
                ms_fwd = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                out = fn()
                ms_bwd = triton.testing.do_bench(lambda: out.backward(do if out.shape == do.shape
                                                                      else do.transpose(1, 2),
                                                                      retain_graph=True),
                                                 warmup=25, rep=100, grad_to_none=[q, k, v],
                                                 return_mode="median")
                print(f"{name:<18} {str(causal):<7} {flops_fwd / ms_fwd * 1e-9:7.0f} "
                      f"{2.5 * flops_fwd / ms_bwd * 1e-9:7.0f}")
            except Exception as exc:  # a peer may not support this GPU
                print(f"{name:<18} {str(causal):<7} unavailable: {type(exc).__name__}: {exc}"[:120])


def run_check(no_bench: bool = False, child: bool = False) -> int:
    """The self-check; 0 when every case passes. The CLI's ``check`` command."""
    import triton
    if not child:
        print(f"flashattn_triton check: torch {torch.__version__}, triton {triton.__version__}, "
              f"{'GPU ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}")
    torch.manual_seed(0)
    if torch.cuda.is_available():
        ok = run_checks(GPU_CASES, torch.device("cuda"), "GPU, compiled Triton kernels")
        if not no_bench:
            benchmark(torch.device("cuda"))
    elif os.environ.get("TRITON_INTERPRET") == "1":
        from .testing import interpreter_problem
        problem = interpreter_problem()
        if problem:
            print(f"\nCPU, Triton kernels in the interpreter: cannot run here: {problem}")
            ok = False
        else:
            ok = run_checks(CPU_CASES, torch.device("cpu"), "CPU, Triton kernels in the interpreter")
    else:
        ok = run_checks(CPU_CASES, torch.device("cpu"), "CPU, blockwise PyTorch path")
        env = dict(os.environ, TRITON_INTERPRET="1")
        result = subprocess.run([sys.executable, "-m", "flashattn_triton", "check", "--no-bench", "--child"],
                                env=env)
        ok &= result.returncode == 0
    if not child:
        print(f"\nself-check {'PASSED' if ok else 'FAILED'}")
    return 0 if ok else 1


def main(argv: Optional[List[str]] = None) -> int:
    """The ``flashattn-triton`` command (all subcommands): see :mod:`flashattn_triton.cli`."""
    from .cli import main as cli_main
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
