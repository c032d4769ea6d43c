"""Shared helpers: inputs, float64 references and error checks."""

from __future__ import annotations

import torch

from flashattn_triton.check import max_abs_err, tolerance

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def rand(shape, dtype, device, scale=1.0, requires_grad=False):
    x = (torch.randn(shape, dtype=torch.float32, device=device) * scale).to(dtype)
    return x.requires_grad_(requires_grad)


def make_qkv(batch, n_q, n_k, h_q, h_kv, d, dtype, device, scale=1.0, requires_grad=True):
    """Random q (B, Nq, Hq, d), k, v (B, Nk, Hkv, d): flash-attn layout."""
    q = rand((batch, n_q, h_q, d), dtype, device, scale, requires_grad)
    k = rand((batch, n_k, h_kv, d), dtype, device, scale, requires_grad)
    v = rand((batch, n_k, h_kv, d), dtype, device, 1.0, requires_grad)
    return q, k, v


def leaf(t, dtype=None):
    """A detached copy (optionally cast) that requires grad."""
    return t.detach().to(dtype or t.dtype).clone().requires_grad_(True)


def assert_close(name, got, ref, baseline=None, factor=2.0, dtype=None, atol=None):
    """|got - ref|_max must be <= flashattn_triton.check.tolerance(...):
    factor * (baseline error + floor), floor = one ulp of the dtype and 8
    float32 ulps of the largest reference value.  The floor matters only where
    the baseline happens to be exact, e.g. with a single key, where PyTorch's
    softmax is exactly 1 and its backward cancels exactly."""
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} != reference {tuple(ref.shape)}"
    n_nan = torch.isnan(got).sum().item()
    assert n_nan == 0, f"{name}: {n_nan} NaN of {got.numel()} (first at {_first(torch.isnan(got))})"
    err = max_abs_err(got, ref)
    if atol is None:
        base = max_abs_err(baseline, ref) if baseline is not None else 0.0
        atol = tolerance(base, ref, dtype or got.dtype, factor)
    if not err <= atol:
        diff = (got.double() - ref.double()).abs().nan_to_num(nan=float("inf"))
        i = int(torch.argmax(diff.flatten()).item())
        where = tuple(int(x) for x in torch.unravel_index(torch.tensor(i), got.shape))
        raise AssertionError(
            f"{name}: max |err| {err:.3e} at index {where} (got {got.flatten()[i].item():.6g}, "
            f"ref {ref.flatten()[i].item():.6g}) exceeds tolerance {atol:.3e}")


def assert_rel(name, got, ref, rtol):
    """Relative error in norm: ||got - ref|| / ||ref||."""
    rel = ((got.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-300)).item()
    assert rel <= rtol, f"{name}: relative error {rel:.3e} > {rtol:.1e}"


def _first(mask):
    idx = mask.nonzero()
    return tuple(idx[0].tolist()) if len(idx) else None
