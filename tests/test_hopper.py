"""The Hopper (Gluon, sm_90) forward tier: flashattn_triton/kernels/hopper/.

On CPU (CI) only the import guard and the declining paths run; everything
that launches the kernel needs FLASHATTN_TRITON_TEST_DEVICE=cuda on an sm_90
GPU with a Triton whose Gluon API the tier supports (else it is skipped).
"""

import math
import os

import pytest
import torch

from flashattn_triton.kernels import hopper
from flashattn_triton.reference import attention_ref
from flashattn_triton.testing import assert_close, max_abs_err

LN2 = math.log(2.0)


def _hopper_gpu():
    if os.environ.get("FLASHATTN_TRITON_TEST_DEVICE", "cpu") != "cuda" or not torch.cuda.is_available():
        return "needs FLASHATTN_TRITON_TEST_DEVICE=cuda and a GPU"
    if torch.cuda.get_device_capability() != (9, 0):
        return "needs an sm_90 GPU"
    if not hopper.AVAILABLE:
        return f"Hopper tier unavailable: {hopper.REASON}"
    return ""


needs_hopper = pytest.mark.skipif(bool(_hopper_gpu()), reason=_hopper_gpu() or "-")


# --------------------------------------------------------------------------- everywhere

def test_import_guard_reports_a_reason():
    """The package imports with any Triton; an unavailable tier says why and declines."""
    assert isinstance(hopper.AVAILABLE, bool)
    if not hopper.AVAILABLE:
        assert hopper.REASON, "unavailable without a reason"
    import triton
    if not triton.__version__.startswith("3.6.") and os.environ.get("FLASHATTN_TRITON_HOPPER_ANY_TRITON") != "1":
        assert not hopper.AVAILABLE and "Triton" in hopper.REASON


def test_declines_cpu_tensors_and_writes_nothing():
    q = torch.randn(1, 2, 16, 64, dtype=torch.bfloat16)
    o = torch.zeros_like(q)
    lse = torch.zeros(1, 2, 16)
    assert hopper.hopper_attention_forward(q, q, q, o, lse, 0.125, None) is False
    assert not o.any() and not lse.any()


# --------------------------------------------------------------------------- GPU

def _inputs(b, hq, hkv, nq, nk, d, dtype, layout, pad=0):
    """(B, H, N, d)-indexed views in one of the layouts callers pass; with pad,
    the rows past N of each head hold NaN (inputs) / 7 (output)."""
    dev = "cuda"

    def rnd(*s):
        return torch.randn(*s, device=dev, dtype=torch.float32).to(dtype)

    if layout == "flash":  # (B, N, H, d) storage, as flash_attn_func passes it
        q, k, v = (rnd(b, n, h, d).transpose(1, 2) for n, h in ((nq, hq), (nk, hkv), (nk, hkv)))
        o = torch.full((b, nq, hq, d), float("nan"), device=dev, dtype=dtype).transpose(1, 2)
    elif layout == "qkv":  # slices of one packed (B, N, Hq + 2 Hkv, d) tensor
        assert nq == nk
        qkv = rnd(b, nq, hq + 2 * hkv, d).transpose(1, 2)
        q, k, v = qkv[:, :hq], qkv[:, hq:hq + hkv], qkv[:, hq + hkv:]
        o = torch.full((b, hq, nq, d), float("nan"), device=dev, dtype=dtype)
    else:  # "padded": (B, H, N + pad, d) storage
        pad = pad or 40

        def padded(h, n, fill):
            t = torch.full((b, h, n + pad, d), fill, device=dev, dtype=dtype)
            t[:, :, :n] = rnd(b, h, n, d)
            return t[:, :, :n]
        q, k, v = padded(hq, nq, float("nan")), padded(hkv, nk, float("nan")), padded(hkv, nk, float("nan"))
        o = torch.full((b, hq, nq + pad, d), 7.0, device=dev, dtype=dtype)[:, :, :nq]
    lse = torch.full((b, hq, nq), float("nan"), device=dev, dtype=torch.float32)
    return q, k, v, o, lse


def _check(q, k, v, o, lse, scale, shift):
    o_ref, lse_ref = attention_ref(q.double(), k.double(), v.double(), scale, shift)
    o_low, _ = attention_ref(q, k, v, scale, shift)
    assert_close("O", o, o_ref, baseline=o_low)
    # LSE in base 2, like the portable kernel; -inf where a row sees no key.
    lse2_ref = lse_ref / LN2
    finite = torch.isfinite(lse2_ref)
    assert torch.equal(torch.isinf(lse), ~finite), "LSE -inf rows differ from the reference's"
    err = max_abs_err(lse[finite], lse2_ref[finite]) if finite.any() else 0.0
    bound = 1e-3 * max(1.0, lse2_ref[finite].abs().max().item()) if finite.any() else 0.0
    assert err <= bound, f"LSE (base 2) error {err:.3e} > {bound:.3e}"
    if (~finite).any():
        assert (o[~finite] == 0).all(), "a row with no visible key is not zero"


CASES = [
    # b, hq, hkv, nq, nk, causal ("br" bottom-right, "tl" top-left), layout
    (2, 4, 4, 1000, 1000, None, "flash"),      # ragged N, batch > 1
    (2, 4, 4, 1000, 1000, "br", "flash"),
    (2, 8, 2, 333, 1201, "br", "flash"),       # GQA, Nq < Nk
    (2, 8, 2, 333, 1201, "tl", "padded"),
    (1, 4, 1, 700, 130, "br", "flash"),        # Nq > Nk: 570 rows see no key
    (3, 2, 2, 1, 517, "br", "flash"),          # a single query row
    (2, 6, 3, 515, 515, None, "qkv"),          # strided slices of packed qkv
    (2, 4, 2, 300, 900, None, "padded"),       # NaN past N: a read past N would show
    (2, 4, 4, 128, 256, "br", "flash"),        # whole tiles
]


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_matches_reference(dtype, d, case):
    b, hq, hkv, nq, nk, causal, layout = case
    q, k, v, o, lse = _inputs(b, hq, hkv, nq, nk, d, dtype, layout)
    shift = None if causal is None else (nk - nq if causal == "br" else 0)
    scale = d ** -0.5
    assert hopper.hopper_attention_forward(q, k, v, o, lse, scale, shift), \
        f"declined: {hopper.unsupported_reason(q, k, v, o, lse, scale)}"
    _check(q, k, v, o, lse, scale, shift)
    if layout == "padded":
        tail = o.as_strided((b, hq, 40, d), o.stride(), o.storage_offset() + nq * o.stride(2))
        assert (tail == 7.0).all(), "the kernel wrote rows past N_Q"


@needs_hopper
@pytest.mark.parametrize("variant", [dict(PAIRED=True), dict(PINGPONG=False), dict(NUM_CONSUMERS=1),
                                     dict(NUM_CONSUMERS=3, CONSUMER_REGS=160, NUM_STAGES=2), dict(HEADS_FIRST=True),
                                     dict(NUM_STAGES=2)],
                         ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()))
@pytest.mark.parametrize("causal", [None, "br"])
def test_schedule_variants(variant, causal):
    """Every schedule switch computes the same attention."""
    q, k, v, o, lse = _inputs(2, 8, 2, 777, 1500, 128, torch.bfloat16, "flash")
    shift = None if causal is None else 1500 - 777
    from flashattn_triton.kernels.hopper import fwd as hopper_fwd
    assert hopper.hopper_attention_forward(q, k, v, o, lse, 0.09, shift, **variant), \
        f"declined {variant}: {hopper.unsupported_reason(q, k, v, o, lse, 0.09)!r}, build errors {hopper_fwd._BROKEN}"
    _check(q, k, v, o, lse, 0.09, shift)


@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_long_sequence(causal):
    q, k, v, o, lse = _inputs(2, 16, 4, 4096, 4096, 128, torch.bfloat16, "flash")
    shift = 0 if causal else None
    assert hopper.hopper_attention_forward(q, k, v, o, lse, 128 ** -0.5, shift)
    _check(q, k, v, o, lse, 128 ** -0.5, shift)


@needs_hopper
def test_declines_what_it_cannot_run():
    """Each unsupported case returns False and leaves the outputs alone."""
    dev = "cuda"

    def run(q, k=None, v=None, scale=0.125, dtype_o=None):
        k = q if k is None else k
        v = k if v is None else v
        o = torch.zeros(q.shape[:3] + (v.shape[-1],), device=dev, dtype=dtype_o or q.dtype)
        lse = torch.zeros(q.shape[:3], device=dev)
        took = hopper.hopper_attention_forward(q, k, v, o, lse, scale, None)
        return took or bool(o.any()) or bool(lse.any())

    base = torch.randn(2 * 4 * 64 * 64 + 1, device=dev, dtype=torch.bfloat16)
    assert not run(base[1:].view(2, 4, 64, 64)), "a base not 16-byte aligned must be declined"
    assert not run(torch.randn(1, 2, 64, 96, device=dev, dtype=torch.bfloat16)), "d = 96 has no config"
    assert not run(torch.randn(1, 2, 64, 64, device=dev)), "float32"
    q = torch.randn(1, 2, 64, 64, device=dev, dtype=torch.bfloat16)
    assert not run(q, v=torch.randn(1, 2, 64, 128, device=dev, dtype=torch.bfloat16)), "dv != d"
    assert not run(q, scale=-0.1), "a negative scale"
    odd = torch.randn(1, 2, 64, 65, device=dev, dtype=torch.bfloat16)[..., :64]
    assert not run(odd), "a row stride that is not a multiple of 16 bytes"


@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_api_with_hopper_backend(monkeypatch, causal):
    """flash_attn_func routed to the Hopper tier (FLASHATTN_TRITON_BACKEND=hopper)."""
    from flashattn_triton import flash_attn_func
    from flashattn_triton.reference import flash_attention_ref
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper")
    q = torch.randn(2, 1000, 8, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 1234, 2, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(2, 1234, 2, 128, device="cuda", dtype=torch.bfloat16)
    out, lse = flash_attn_func(q, k, v, causal=causal, return_lse=True)
    o_ref, lse_ref = flash_attention_ref(q, k, v, causal)
    o_low, _ = flash_attention_ref(q, k, v, causal, dtype=torch.bfloat16)
    assert_close("out", out, o_ref, baseline=o_low)
    assert max_abs_err(lse, lse_ref) <= 1e-3 * lse_ref.abs().max().item()
