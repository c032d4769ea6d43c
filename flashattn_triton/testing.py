"""Test helpers shared by the test suite, the self-check and the benchmarks:
random inputs, float64 references in every layout, error measures and the
tolerance rule.

The tolerance rule: our max error against float64 may be at most ``factor``
times (2 for outputs, 3 for gradients) the error of plain PyTorch computing
the same attention in the input dtype, plus a floor of one ulp of the dtype
and 8 float32 ulps of the largest reference value (the floor matters where
PyTorch happens to be exact, e.g. with a single visible key).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ._params import draw_dropout_seed
from .reference import (attention_ref, dropout_keep_mask, flash_attention_ref,
                        varlen_dropout_keep_mask)

__all__ = ["DTYPES", "rand", "make_qkv", "leaf", "tolerance", "max_abs_err", "assert_close",
           "assert_rel", "flash_attention_ref", "varlen_attention_ref", "attention_ref",
           "random_cu_seqlens", "dropout_mask", "varlen_dropout_masks", "alibi_slopes", "check_sink_only_rows"]

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def rand(shape, dtype, device, scale=1.0, requires_grad=False):
    x = (torch.randn(shape, dtype=torch.float32, device=device) * scale).to(dtype)
    return x.requires_grad_(requires_grad)


def make_qkv(batch, n_q, n_k, h_q, h_kv, d, dtype, device, scale=1.0, requires_grad=True, d_v=None):
    """Random q (B, Nq, Hq, d), k (B, Nk, Hkv, d), v (B, Nk, Hkv, d_v): flash-attn layout."""
    q = rand((batch, n_q, h_q, d), dtype, device, scale, requires_grad)
    k = rand((batch, n_k, h_kv, d), dtype, device, scale, requires_grad)
    v = rand((batch, n_k, h_kv, d_v or d), dtype, device, 1.0, requires_grad)
    return q, k, v


def leaf(t, dtype=None):
    """A detached copy (optionally cast) that requires grad."""
    return t.detach().to(dtype or t.dtype).clone().requires_grad_(True)


def random_cu_seqlens(lengths: Sequence[int], device) -> torch.Tensor:
    """int32 cumulative offsets (B + 1,) of the given lengths."""
    offs = [0]
    for n in lengths:
        offs.append(offs[-1] + int(n))
    return torch.tensor(offs, dtype=torch.int32, device=device)


def alibi_slopes(heads: int, device=None) -> torch.Tensor:
    """The ALiBi paper's slopes 2^(-8 h / heads), h = 1..heads, float32 (heads,)."""
    h = torch.arange(1, heads + 1, dtype=torch.float32, device=device)
    return torch.exp2(-8.0 * h / heads)


def dropout_mask(torch_seed: int, p: float, batch: int, heads: int, n_q: int, n_k: int,
                 device) -> torch.Tensor:
    """The dropout keep mask (batch, heads, n_q, n_k) of a dense call made right
    after ``torch.manual_seed(torch_seed)`` (testing hook: the call draws its
    Philox seed from torch's generator first, _params.draw_dropout_seed)."""
    torch.manual_seed(torch_seed)
    seed = draw_dropout_seed(torch.device(device))
    return dropout_keep_mask(seed, p, batch, heads, n_q, n_k)


def varlen_dropout_masks(torch_seed: int, p: float, heads: int, cu_seqlens_q, cu_seqlens_k,
                         max_seqlen_k: int, device):
    """As dropout_mask for a packed call: one (heads, n_q_b, n_k_b) mask per sequence."""
    torch.manual_seed(torch_seed)
    seed = draw_dropout_seed(torch.device(device))
    return varlen_dropout_keep_mask(seed, p, heads, cu_seqlens_q, cu_seqlens_k, max_seqlen_k)


def varlen_attention_ref(q, k, v, cu_seqlens_q, cu_seqlens_k, causal: bool,
                         softmax_scale: Optional[float] = None, dtype=torch.float64,
                         window_size=(-1, -1), alibi_slopes=None, dropout_masks=None, **variants):
    """Packed attention as one dense call per sequence, in ``dtype``.

    q (total_q, Hq, d), k / v (total_k, Hkv, d). alibi_slopes: (Hq,) or
    (B, Hq); dropout_masks: one (Hq, n_q_b, n_k_b) keep mask per sequence
    (with dropout_p in ``variants``); other ``variants`` (softcap, sinks) as in
    flash_attention_ref.  Returns (out (total_q, Hq, dv), lse (Hq, total_q)),
    differentiable."""
    outs, lses = [], []
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        qs, ks, vs = q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]]
        if qs.shape[0] == 0:
            continue
        if ks.shape[0] == 0:
            outs.append(qs.new_zeros(qs.shape[:-1] + (v.shape[-1],)).to(dtype or q.dtype))
            lse = torch.full((q.shape[1], qs.shape[0]), float("-inf"), dtype=dtype or q.dtype,
                             device=q.device)
            if variants.get("sinks") is not None:
                lse = variants["sinks"].to(lse.dtype)[:, None].expand_as(lse)
            lses.append(lse)
            continue
        kw = dict(variants)
        if alibi_slopes is not None:
            kw["alibi_slopes"] = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b:b + 1]
        if dropout_masks is not None:
            kw["dropout_mask"] = dropout_masks[b][None]
        o, l = flash_attention_ref(qs[None], ks[None], vs[None], causal, softmax_scale, dtype,
                                   window_size, **kw)
        outs.append(o[0])
        lses.append(l[0])
    if not outs:
        return (q.new_zeros(q.shape[:-1] + (v.shape[-1],)).to(dtype or q.dtype),
                q.new_zeros(q.shape[1], 0).to(dtype or q.dtype))
    return torch.cat(outs, 0), torch.cat(lses, 1)


def interpreter_problem() -> Optional[str]:
    """None when Triton's interpreter (TRITON_INTERPRET=1 before triton was
    imported) runs a loop over a runtime bound, as every kernel has; else why
    not.  The interpreters of Triton 3.4-3.6 turn a scalar argument into a
    Python int with int() of a one-element array, which NumPy 2.4 refuses
    ("only 0-dimensional arrays can be converted"); newer ones squeeze the
    array first."""
    import numpy
    import triton
    import triton.language as tl

    @triton.jit
    def count(OUT, n):
        total = 0
        for _ in range(0, n):
            total += 1
        tl.store(OUT, total)

    out = torch.zeros(1, dtype=torch.int32)
    try:
        count[(1,)](out, 3)
    except Exception as exc:  # noqa: BLE001 - any failure of the interpreter itself
        return (f"Triton {triton.__version__}'s interpreter cannot run this project's kernels with NumPy "
                f"{numpy.__version__} ({type(exc).__name__}: {str(exc)[:200]}); install numpy<2.4 or a "
                f"newer Triton")
    if out.item() != 3:
        return f"Triton {triton.__version__}'s interpreter counted {out.item()} iterations of range(0, 3)"
    return None


def tolerance(base_err: float, ref: torch.Tensor, dtype: torch.dtype, factor: float) -> float:
    """The pass mark: factor * (PyTorch's own error + floor); see module doc."""
    finite = ref[torch.isfinite(ref)]
    ref_max = finite.abs().max().item() if finite.numel() else 0.0
    floor = (torch.finfo(dtype).eps + 8 * torch.finfo(torch.float32).eps) * ref_max
    return factor * (base_err + floor)


def max_abs_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    """Max |got - ref|, NaN if got has NaN; equal infinities count as 0."""
    got, ref = got.double(), ref.double()
    same_inf = torch.isinf(got) & (got == ref)
    diff = (got - ref).abs().masked_fill(same_inf, 0.0)
    if diff.numel() == 0:
        return 0.0
    return float("nan") if torch.isnan(diff).any() else diff.max().item()


def _first(mask):
    idx = mask.nonzero()
    return tuple(idx[0].tolist()) if len(idx) else None


def assert_close(name, got, ref, baseline=None, factor=2.0, dtype=None, atol=None):
    """|got - ref|_max must be <= tolerance(...) (module doc); the message says
    where the largest error is and by how much the tolerance is exceeded."""
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} != reference {tuple(ref.shape)}"
    n_nan = torch.isnan(got).sum().item()
    assert n_nan == 0, f"{name}: {n_nan} NaN of {got.numel()} (first at {_first(torch.isnan(got))})"
    err = max_abs_err(got, ref)
    if atol is None:
        base = max_abs_err(baseline, ref) if baseline is not None else 0.0
        atol = tolerance(base, ref, dtype or got.dtype, factor)
    if not err <= atol:
        g64, r64 = got.double(), ref.double()
        # equal infinities are no error (max_abs_err): their NaN difference must not win the argmax
        diff = (g64 - r64).abs().masked_fill(torch.isinf(g64) & (g64 == r64), 0.0).nan_to_num(nan=float("inf"))
        i = int(torch.argmax(diff.flatten()).item())
        where = tuple(int(x) for x in torch.unravel_index(torch.tensor(i), got.shape))
        raise AssertionError(
            f"{name}: max |err| {err:.3e} at index {where} (got {got.flatten()[i].item():.6g}, "
            f"ref {ref.flatten()[i].item():.6g}) exceeds tolerance {atol:.3e} "
            f"({err / atol if atol > 0 else float('inf'):.2f}x)")


def assert_rel(name, got, ref, rtol):
    """Relative error in norm: ||got - ref|| / ||ref||."""
    rel = ((got.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-300)).item()
    assert rel <= rtol, f"{name}: relative error {rel:.3e} > {rtol:.1e}"


def capture_graph(step):
    """Capture ``step()`` (returning a tuple of tensors) into a CUDA graph.

    Warms up on a side stream first (compiles kernels, fills the allocator
    pool), as PyTorch's whole-network capture recipe does.  Inputs that need
    gradients should be made leaves inside ``step`` (``t.detach().requires_grad_()``):
    autograd ties a leaf's gradient accumulation to the stream the leaf was
    created on, and a leaf made on the default stream before capture would make
    the backward wait on that (legacy) stream, which capture forbids.
    Returns (graph, static outputs).
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = step()
    return graph, static


def check_sink_only_rows(out, lse, sinks, masked, atol=1e-6):
    """The first ``masked`` query rows (causal, Nq > Nk) see no key: out
    (B, Nq, H, d) exactly 0 and lse (B, H, Nq) the sink's logit."""
    if masked <= 0:
        return
    assert torch.equal(out[:, :masked], torch.zeros_like(out[:, :masked])), \
        "rows that see only the sink must output exactly 0"
    assert_close("lse of sink-only rows", lse[:, :, :masked],
                 sinks[None, :, None].double().expand(lse.shape[0], lse.shape[1], masked), atol=atol)
