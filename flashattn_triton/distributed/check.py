"""Check ring attention against single-device attention on the gathered sequence.

Run one process per GPU (NCCL) or per CPU worker (gloo):

    PYTHONPATH=. torchrun --nproc_per_node=2 -m flashattn_triton.distributed.check

Every rank draws the same full inputs, keeps its shard, runs
``ring_flash_attn_func`` (or, for the packed cases, ``ring_flash_attn_varlen_func``
with every document sharded on its own) forward and backward, and the shards
of out, dq, dk, dv are gathered.  Rank 0 compares them with float64 attention on the full
sequence (and, for the long case, with our single-GPU kernels in float32,
since float64 attention of 128k tokens does not fit), at the library's pass
mark: max error at most 2x (out) / 3x (gradients) that of the baseline, plain
PyTorch in the input dtype (our single-GPU kernels in the input dtype for the
long case), plus one ulp.  It prints one PASS/FAIL line per case and exits
non-zero on any failure.

NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1 are set before the process group starts).
"""

from __future__ import annotations

import os

# Before torch.distributed creates any communicator.
NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(NVLS_OFF)

import argparse  # noqa: E402
import datetime  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import List, NamedTuple, Union  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


class Case(NamedTuple):
    batch: int
    seqlen: int  # whole sequence
    h_q: int
    h_kv: int
    d: int
    causal: bool
    dtype: torch.dtype
    sharding: str = "zigzag"
    reference: str = "float64"  # or "ours-fp32": our single-device kernels in float32
    softcap: float = 0.0
    amp: float = 1.0  # q drawn as amp * randn, so that scores reach the softcap's saturation
    window: tuple = (-1, -1)  # window_size over global positions
    alibi: bool = False  # per-head ALiBi slopes (_slopes)

    def describe(self, world_size: int) -> str:
        dt = str(self.dtype).replace("torch.", "")
        mask = f"causal {self.sharding}" if self.causal else "full"
        if self.window != (-1, -1):
            mask += f" window={self.window}" + ("" if self.causal else f" {self.sharding}")
        cap = f" softcap={self.softcap} q*{self.amp}" if self.softcap else ""
        alibi = " alibi" if self.alibi else ""
        return (f"P={world_size} B={self.batch} N={self.seqlen} h={self.h_q}/{self.h_kv} d={self.d} "
                f"{dt} {mask}{cap}{alibi}")


    def fits(self, world_size: int) -> bool:
        return self.seqlen % (2 * world_size) == 0


class VarlenCase(NamedTuple):
    """A packed batch of documents (global lengths), each sharded on its own."""
    lengths: tuple
    h_q: int
    h_kv: int
    d: int
    causal: bool
    dtype: torch.dtype
    sharding: str = "zigzag"
    reference: str = "float64"  # or "ours-fp32"
    window: tuple = (-1, -1)  # window_size over each document's global positions
    alibi: bool = False  # per-head ALiBi slopes (_slopes)

    @property
    def seqlen(self) -> int:  # the longest document (what --quick looks at)
        return max(self.lengths)

    def fits(self, world_size: int) -> bool:
        parts = 2 * world_size if self.sharding == "zigzag" else world_size
        return all(n % parts == 0 for n in self.lengths)

    def describe(self, world_size: int) -> str:
        dt = str(self.dtype).replace("torch.", "")
        mask = f"causal {self.sharding}" if self.causal else "full"
        if self.window != (-1, -1):
            mask += f" window={self.window}" + ("" if self.causal else f" {self.sharding}")
        alibi = " alibi" if self.alibi else ""
        return (f"P={world_size} varlen L={'+'.join(map(str, self.lengths))} h={self.h_q}/{self.h_kv} "
                f"d={self.d} {dt} {mask}{alibi}")


BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
GPU_CASES: List[Union[Case, VarlenCase]] = [
    Case(1, 8192, 16, 4, 128, True, BF16),
    Case(1, 8192, 16, 16, 128, True, F16),
    Case(1, 8192, 16, 4, 128, False, BF16),
    Case(2, 4000, 8, 8, 64, True, BF16, "contiguous"),  # shard lengths not multiples of any tile
    Case(2, 4000, 8, 2, 96, True, BF16),
    Case(2, 2048, 8, 2, 64, True, F32),
    Case(1, 2048, 8, 8, 256, True, F16),
    Case(1, 4096, 8, 2, 128, True, BF16, softcap=30.0, amp=32.0),  # Gemma-2-style cap, many scores beyond it
    # Windows and ALiBi over global positions (the ring's positional schedule).
    Case(1, 8192, 16, 4, 128, True, BF16, window=(256, 0)),  # window inside a zigzag chunk
    Case(1, 8192, 8, 8, 64, False, BF16, "contiguous", window=(3000, 3000)),  # spans shards
    Case(1, 8192, 16, 4, 128, True, F16, alibi=True),
    Case(2, 4000, 8, 2, 96, False, BF16, alibi=True),
    Case(1, 4096, 8, 2, 128, True, BF16, "contiguous", softcap=30.0, amp=32.0, window=(700, 0), alibi=True),
    Case(1, 131072, 8, 2, 128, True, BF16, reference="ours-fp32"),
    # Packed documents of 2k-16k tokens (float64 attention of a 16k document does not fit).
    VarlenCase((4096, 16384, 2048, 6144), 16, 4, 128, True, BF16, reference="ours-fp32"),
    # Windows and ALiBi over each document's global positions (per-document diagonals).
    VarlenCase((1024, 4096, 512, 2048), 16, 4, 128, True, BF16, window=(300, 0), alibi=True),
    VarlenCase((2048, 1024, 3072), 8, 2, 64, False, BF16, "contiguous", window=(700, 700)),
]
CPU_CASES: List[Union[Case, VarlenCase]] = [
    Case(1, 256, 4, 2, 32, True, BF16),
    Case(2, 128, 4, 4, 16, True, F32, "contiguous"),
    Case(1, 192, 4, 1, 32, False, F16),
    Case(1, 128, 4, 2, 32, True, F32, softcap=5.0, amp=6.0),
    Case(1, 128, 4, 2, 32, True, F32, window=(20, 0), alibi=True),
    Case(1, 128, 4, 1, 16, False, BF16, "contiguous", window=(9, 40)),
    VarlenCase((64, 128, 32), 4, 2, 32, True, BF16),
    VarlenCase((64, 128, 32), 4, 2, 32, True, F32, window=(20, 0), alibi=True),
]


def _slopes(case, device):
    """ALiBi slopes (H,) float32 of a case, or None."""
    return torch.linspace(0.02, 0.5, case.h_q, device=device) if case.alibi else None


def _reference(case, q, k, v, do, dtype):
    """Single-device out and grads on the full sequence, computed in ``dtype``."""
    from flashattn_triton import flash_attn_func
    from flashattn_triton.reference import flash_attention_ref

    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    kw = dict(softcap=case.softcap, window_size=case.window, alibi_slopes=_slopes(case, q.device))
    if case.reference == "ours-fp32":
        out = flash_attn_func(*leaves, causal=case.causal, **kw)
    else:
        out, _ = flash_attention_ref(*leaves, case.causal, dtype=dtype, **kw)
    grads = torch.autograd.grad(out, leaves, do.to(dtype))
    return [out.detach(), *grads]


def _varlen_reference(case, q, k, v, do, cu, dtype):
    """Single-device out and grads on the full packed batch, computed in ``dtype``."""
    from flashattn_triton import flash_attn_varlen_func
    from flashattn_triton.testing import varlen_attention_ref

    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    kw = dict(window_size=case.window, alibi_slopes=_slopes(case, q.device))
    if case.reference == "ours-fp32":
        out = flash_attn_varlen_func(*leaves, cu, cu, case.seqlen, case.seqlen, causal=case.causal, **kw)
    else:
        out, _ = varlen_attention_ref(*leaves, cu, cu, case.causal, dtype=dtype, **kw)
    grads = torch.autograd.grad(out, leaves, do.to(dtype))
    return [out.detach(), *grads]


def run_varlen_case(case: VarlenCase, device: torch.device, seed: int) -> List[str]:
    """The packed form of :func:`run_case`."""
    from flashattn_triton.distributed import (gather_varlen, local_cu_seqlens, ring_flash_attn_varlen_func,
                                              shard_varlen)
    from flashattn_triton.testing import max_abs_err, random_cu_seqlens, tolerance

    rank, world_size = dist.get_rank(), dist.get_world_size()
    gen = torch.Generator(device=device).manual_seed(seed)
    total, cu = sum(case.lengths), random_cu_seqlens(case.lengths, device)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(case.dtype)

    q, k, v, do = (randn(total, h, case.d) for h in (case.h_q, case.h_kv, case.h_kv, case.h_q))
    local = [shard_varlen(t, cu, rank, world_size, case.sharding) for t in (q, k, v, do)]
    cu_local = local_cu_seqlens(cu, world_size, case.sharding)
    ql, kl, vl = (t.requires_grad_() for t in local[:3])
    t0 = time.perf_counter()
    out = ring_flash_attn_varlen_func(ql, kl, vl, cu_local, case.seqlen // world_size, causal=case.causal,
                                      sharding=case.sharding, window_size=case.window,
                                      alibi_slopes=_slopes(case, device))
    out.backward(local[3])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - t0
    got = [gather_varlen(t.detach(), cu, None, case.sharding) for t in (out, ql.grad, kl.grad, vl.grad)]
    del out, ql, kl, vl, local
    if rank != 0:
        return []
    ref = _varlen_reference(case, q, k, v, do, cu, torch.float32 if case.reference == "ours-fp32" else torch.float64)
    # The baseline: our single-device kernels in the input dtype (and, against float64, plain PyTorch too).
    single = _varlen_reference(case._replace(reference="ours-fp32"), q, k, v, do, cu, case.dtype)
    base = single if case.reference == "ours-fp32" else _varlen_reference(case, q, k, v, do, cu, case.dtype)
    ratios, parts = [], []
    for i, name in enumerate(("out", "dq", "dk", "dv")):
        err = max_abs_err(got[i], ref[i])
        tol = tolerance(max_abs_err(base[i], ref[i]), ref[i], case.dtype, 2.0 if name == "out" else 3.0)
        ratios.append(err / tol if tol > 0 else float("inf"))
        parts.append(f"{name} {err:.2e}/{tol:.2e} (1-dev {max_abs_err(single[i], ref[i]):.2e})")
    ok = all(r <= 1.0 for r in ratios)
    worst = max(ratios) if ok else next((r for r in ratios if not r <= 1.0))
    against = "ours fp32 on 1 device" if case.reference == "ours-fp32" else "float64"
    return [f"{'PASS' if ok else 'FAIL'} ring {case.describe(world_size)} vs {against}: "
            f"worst err/tol {worst:.2f}; ring {seconds:.2f} s; " + "; ".join(parts)]


def run_case(case: Case, device: torch.device, seed: int) -> List[str]:
    """Run one case on every rank; rank 0 returns its report lines ('' on other ranks)."""
    from flashattn_triton import flash_attn_func
    from flashattn_triton.distributed import gather_sequence, ring_flash_attn_func, shard_sequence
    from flashattn_triton.testing import max_abs_err, tolerance

    rank, world_size = dist.get_rank(), dist.get_world_size()
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(case.dtype)

    q = (case.amp * torch.randn(case.batch, case.seqlen, case.h_q, case.d, generator=gen, device=device,
                                dtype=torch.float32)).to(case.dtype)
    k = randn(case.batch, case.seqlen, case.h_kv, case.d)
    v = randn(case.batch, case.seqlen, case.h_kv, case.d)
    do = randn(case.batch, case.seqlen, case.h_q, case.d)
    local = [shard_sequence(t, rank, world_size, 1, case.sharding) for t in (q, k, v, do)]
    ql, kl, vl = (t.requires_grad_() for t in local[:3])
    t0 = time.perf_counter()
    out = ring_flash_attn_func(ql, kl, vl, causal=case.causal, sharding=case.sharding, softcap=case.softcap,
                               window_size=case.window, alibi_slopes=_slopes(case, device))
    out.backward(local[3])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - t0
    got = [gather_sequence(t.detach(), None, 1, case.sharding) for t in (out, ql.grad, kl.grad, vl.grad)]
    del out, ql, kl, vl, local
    if rank != 0:
        return []

    ref_dtype = torch.float32 if case.reference == "ours-fp32" else torch.float64
    ref = _reference(case, q, k, v, do, ref_dtype)
    base_case = case if case.reference == "ours-fp32" else case._replace(reference="float64")
    base = _reference(base_case, q, k, v, do, case.dtype)
    # Context ("1-dev"): our single-device kernels on the same input (the baseline for the long case).
    single = base if case.reference == "ours-fp32" else _reference(case._replace(reference="ours-fp32"),
                                                                  q, k, v, do, case.dtype)
    ratios, parts = [], []
    for i, name in enumerate(("out", "dq", "dk", "dv")):
        err = max_abs_err(got[i], ref[i])  # NaN if the ring produced any NaN
        tol = tolerance(max_abs_err(base[i], ref[i]), ref[i], case.dtype, 2.0 if name == "out" else 3.0)
        ratios.append(err / tol if tol > 0 else float("inf"))
        parts.append(f"{name} {err:.2e}/{tol:.2e} (1-dev {max_abs_err(single[i], ref[i]):.2e})")
    ok = all(r <= 1.0 for r in ratios)  # False for NaN
    worst = max(ratios) if ok else next((r for r in ratios if not r <= 1.0))
    against = "ours fp32 on 1 device" if case.reference == "ours-fp32" else "float64"
    return [f"{'PASS' if ok else 'FAIL'} ring {case.describe(world_size)} vs {against}: "
            f"worst err/tol {worst:.2f}; ring {seconds:.2f} s; " + "; ".join(parts)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="skip the 128k-token case")
    parser.add_argument("--cases", help="comma list of case indices to run (default: all)")
    args = parser.parse_args(argv)
    if "RANK" not in os.environ:
        print("launch with torchrun, e.g.: PYTHONPATH=. torchrun --nproc_per_node=2 "
              "-m flashattn_triton.distributed.check", file=sys.stderr)
        return 2
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if use_cuda else "gloo", timeout=datetime.timedelta(minutes=10),
                            **({"device_id": device} if use_cuda else {}))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    cases = GPU_CASES if use_cuda else CPU_CASES
    if args.quick:
        cases = [c for c in cases if c.seqlen <= 16384]
    if args.cases:
        cases = [cases[int(i)] for i in args.cases.split(",")]
    cases = [c for c in cases if c.fits(world_size)]
    if rank == 0:
        name = torch.cuda.get_device_name(device) if use_cuda else "CPU"
        print(f"ring attention check: {world_size} ranks, {dist.get_backend()} on {name}, torch "
              f"{torch.__version__}; " + ", ".join(f"{k}={os.environ[k]}" for k in NVLS_OFF), flush=True)
    n_fail = 0
    for i, case in enumerate(cases):
        try:
            lines = (run_varlen_case if isinstance(case, VarlenCase) else run_case)(case, device, seed=1234 + i)
        except Exception as e:  # a failure on one rank would hang the others: stop here
            print(f"FAIL ring {case.describe(world_size)} on rank {rank}: {type(e).__name__}: {e}", flush=True)
            raise
        for line in lines:
            print(line, flush=True)
            n_fail += line.startswith("FAIL")
        if use_cuda:
            torch.cuda.empty_cache()
    verdict = [n_fail]
    dist.broadcast_object_list(verdict, src=0)
    if rank == 0:
        print(f"{'PASS' if verdict[0] == 0 else 'FAIL'}: {len(cases) - verdict[0]}/{len(cases)} ring "
              "attention cases", flush=True)
    dist.destroy_process_group()
    return 0 if verdict[0] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
