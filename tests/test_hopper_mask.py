"""Boolean masks in the Hopper (Gluon, sm_90) forward: the HAS_MASK path of
kernels/hopper/fwd.py (on by default since session 16; FLASHATTN_TRITON_HOPPER_MASK=0
opts out).

On CPU: the dispatch (the switch decides the forward's tier; a masked call's
backward never asks for the Hopper kernel), the mask checks and launch
arguments; with Triton 3.6, the mask plans compile through the real JIT path
on a fake driver.  On an H200 (FLASHATTN_TRITON_TEST_DEVICE=cuda): the
kernel against float64 with the mask applied by reference.attention_ref, on
NaN-poisoned outputs: mask shapes (B, 1, N, N), (1, H, N, N), (B, H, N, N),
(1, 1, 1, Nk), rows with no key, rows whose first tiles are all masked, GQA,
ragged N, row-padded masks, causal and windowed calls with a mask, d = 192
with dv = 128, and the SDPA entry with the opt-in (forward on the Hopper tier, backward portable).
"""

import pytest
import torch

from flashattn_triton.kernels import hopper
from flashattn_triton.reference import attention_ref
from flashattn_triton.testing import assert_close

from _utils import fake_launch, forward_tier_calls, hopper_gpu_reason, hopper_module
from test_hopper import LN2, _inputs, max_abs_err

needs_hopper = pytest.mark.skipif(bool(hopper_gpu_reason()), reason=hopper_gpu_reason() or "-")
OPT_IN = "FLASHATTN_TRITON_HOPPER_MASK"


# --------------------------------------------------------------------------- everywhere

def _mask_call(monkeypatch, opt_in, attn_bias, window=(-1, -1), softcap=0.0, dropout_p=0.0, n_q=300, n_k=500):
    """_fwd_into of a dense masked call with both tiers stubbed: which one
    ran (the portable kernel's entry carries the mask it got)."""
    seed = torch.tensor([5], dtype=torch.int64) if dropout_p else None
    return forward_tier_calls(monkeypatch, OPT_IN, opt_in, portable=lambda mods: mods.bias, window=window,
                              softcap=softcap, attn_bias=attn_bias, dropout_p=dropout_p, seed=seed, n_q=n_q, n_k=n_k)


@pytest.mark.parametrize("window", [(-1, -1), (-1, 0), (100, 0)], ids=["full", "causal", "window"])
def test_dispatch_takes_a_bool_mask_unless_opted_out(monkeypatch, window):
    """A boolean mask alone takes the Hopper forward with
    FLASHATTN_TRITON_HOPPER_MASK unset (HOPPER_MASK_DEFAULT) or "1", which
    gets it as mask= (and no dropout argument); "0", a float mask, or a mask
    with another variant: the portable kernel, with the mask."""
    mask = torch.rand(1, 1, 300, 500) > 0.5
    for opt_in in (None, "0", "1"):
        calls = _mask_call(monkeypatch, opt_in, mask, window)
        if opt_in != "0":
            assert len(calls) == 1 and calls[0][0] == "hopper", calls
            args, kw = calls[0][1], calls[0][2]
            assert kw.keys() == {"mask"} and kw["mask"] is mask and len(args) == 2, calls
            assert args[0] == (200 if window[1] == 0 else None)  # the diagonal Nk - Nq
            assert args[1] == (None if window[0] < 0 else (100, 200))
        else:
            assert len(calls) == 1 and calls[0][0] == "portable" and calls[0][1] is mask, (opt_in, calls)
    bias = torch.randn(1, 1, 300, 500)
    assert _mask_call(monkeypatch, "1", bias, window)[0][0] == "portable", "a float mask stays portable"
    assert _mask_call(monkeypatch, "1", mask, window, softcap=30.0)[0][0] == "portable", "with a softcap"
    calls = _mask_call(monkeypatch, "1", mask, window, dropout_p=0.2)
    assert calls[0][0] == "portable", "a mask with dropout stays portable"


def test_dispatch_rule():
    from flashattn_triton import _dispatch
    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(OPT_IN, raising=False)
        assert _dispatch.HOPPER_MASK_DEFAULT == "1"
        assert _dispatch.hopper_forward_takes_mask(0.0, None, None, mask, 0.0), "on by default"
        mp.setenv(OPT_IN, "0")
        assert not _dispatch.hopper_forward_takes_mask(0.0, None, None, mask, 0.0), "opted out"
        mp.setenv(OPT_IN, "1")
        assert _dispatch.hopper_forward_takes_mask(0.0, None, None, mask, 0.0)
        assert not _dispatch.hopper_forward_takes_mask(0.0, None, None, None, 0.0), "no mask: not asked"
        assert not _dispatch.hopper_forward_takes_mask(0.0, None, None, mask.float(), 0.0), "float mask"
        assert not _dispatch.hopper_forward_takes_mask(2.0, None, None, mask, 0.0), "softcap"
        one = torch.ones(2)
        assert not _dispatch.hopper_forward_takes_mask(0.0, one, None, mask, 0.0), "ALiBi"
        assert not _dispatch.hopper_forward_takes_mask(0.0, None, one, mask, 0.0), "sinks"
        assert not _dispatch.hopper_forward_takes_mask(0.0, None, None, mask, 0.1), "dropout"
        # the backward's rule never takes a mask
        assert not _dispatch.hopper_takes_variants(0.0, None, None, mask, 0.0, (-1, -1))


def test_backward_of_a_masked_call_stays_portable(monkeypatch, device):
    """attention_backward is never asked to try the Hopper kernel for a
    masked call, opt-in or not."""
    from flashattn_triton import _dispatch, ops
    monkeypatch.setattr(_dispatch, "_hopper_tier", lambda device: True)
    monkeypatch.setattr(ops, "use_triton", lambda t: True)
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper")
    monkeypatch.setenv(OPT_IN, "1")
    if ops._kernels.forward is None:
        ops._kernels.load()
    seen = []
    monkeypatch.setattr(ops._kernels, "backward", lambda *a, **kw: seen.append(kw["hopper"]) or kw["delta"])
    q = torch.randn(1, 64, 2, 64, dtype=torch.bfloat16, device=device)
    o, lse = torch.randn_like(q), torch.zeros(1, 2, 64, device=device)
    mask = torch.rand(1, 1, 64, 64, device=device) > 0.5
    ops._attention_bwd_impl(o, q, q, q, o, lse, None, None, None, 64, 64, 0.125, -1, -1,
                            True, 0.0, None, None, mask, 0.0, None)
    assert seen == [False], seen


def test_mask_checks_and_arguments():
    """mask_unsupported_reason names what it declines; mask_args passes the
    bytes and zero strides on broadcast dims (any stride a size-1 dim has)."""
    hf = hopper_module("fwd")
    q = torch.zeros(2, 4, 100, 64, dtype=torch.bfloat16)
    k = torch.zeros(2, 2, 130, 64, dtype=torch.bfloat16)
    ok = torch.ones(2, 4, 100, 130, dtype=torch.bool)
    assert hf.mask_unsupported_reason(ok, q, k) == ""
    for shape in ((1, 4, 100, 130), (2, 1, 100, 130), (1, 1, 1, 130), (2, 4, 1, 130)):
        assert hf.mask_unsupported_reason(torch.ones(shape, dtype=torch.bool), q, k) == "", shape
    assert "dtype" in hf.mask_unsupported_reason(ok.float(), q, k)
    assert "shape" in hf.mask_unsupported_reason(ok[..., :1], q, k), "broadcast keys"
    assert "shape" in hf.mask_unsupported_reason(ok[:, :2], q, k), "2 heads of 4"
    assert "shape" in hf.mask_unsupported_reason(ok[0], q, k), "3-D"
    wide = torch.ones(2, 4, 100, 260, dtype=torch.bool)
    assert "key stride" in hf.mask_unsupported_reason(wide[..., ::2], q, k)
    assert hf.mask_unsupported_reason(wide[..., :130], q, k) == "", "row-padded: any row stride"
    assert "torch.Tensor" in hf.mask_unsupported_reason([[True]], q, k)
    with pytest.raises(TypeError, match="mask must be"):
        hf.hopper_attention_forward(q, k, k, q, torch.zeros(2, 4, 100), 0.125, None, mask=[[True]])
    args = hf.mask_args(ok, None)
    assert args[0].dtype == torch.uint8 and args[0].data_ptr() == ok.data_ptr()
    assert args[1:] == (4 * 100 * 130, 100 * 130, 130)
    odd = torch.ones(1, 4, 1, 130, dtype=torch.bool).as_strided((1, 4, 1, 130), (999, 130, 777, 1))
    assert hf.mask_args(odd, None)[1:] == (0, 130, 0)
    unused = torch.zeros(1)
    assert hf.mask_args(None, unused) == (unused, 0, 0, 0)


_FAKE_LAUNCH_MASK = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda, LAUNCHES
from flashattn_triton.kernels.hopper import fwd as hf
hf.unsupported_reason = lambda *a: ""   # CPU tensors stand for CUDA ones
hf.sm_count = lambda device: 132
names = hf._attn_fwd_hopper.arg_names
for d, causal, mshape in [(64, False, (2, 1, 1000, 1200)), (128, False, (1, 4, 1000, 1200)),
                          (128, True, (2, 4, 1000, 1200)), (256, False, (1, 1, 1, 1200)),
                          (128, False, None)]:
    q = torch.randn(2, 4, 1000, d).to(torch.bfloat16)
    k = torch.randn(2, 2, 1200, d).to(torch.bfloat16)
    o, lse = torch.empty_like(q), torch.empty(2, 4, 1000)
    mask = None if mshape is None else torch.rand(mshape) > 0.5
    with fake_cuda():
        ok = hf.hopper_attention_forward(q, k, k, o, lse, 0.125, 200 if causal else None, mask=mask)
    assert ok, (hf._BROKEN, [p for p in hf._PLANS.values() if isinstance(p, str)])
    launcher, grid, args = LAUNCHES[-1]
    consts = launcher.src.constants
    def arg(name):  # one launch argument per parameter after the descriptors: count back from the end
        return args[len(args) - (len(names) - names.index(name))]
    ptr = arg("MASK")
    same = mask is not None and ptr.data_ptr() == mask.data_ptr() and ptr.dtype == torch.uint8
    print(d, consts.get((names.index("HAS_MASK"),)), consts.get((names.index("NUM_CONSUMERS"),)),
          same, arg("stride_mz"), arg("stride_mh"), arg("stride_mm"))
"""


def test_mask_launch_on_a_fake_driver():
    """Triton 3.6 without a GPU: mask plans (HAS_MASK) compile for sm_90 at
    d = 64, 128 (full and causal) and 256 through the real JIT path, with
    MASK_CONFIGS at d = 64 (two consumers); the kernel gets the mask's bytes
    and its strides, 0 on broadcast dims; a call without a mask keeps
    HAS_MASK off (the kernel's default) and gets placeholders."""
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    lines = fake_launch(_FAKE_LAUNCH_MASK, timeout=1500).strip().split("\n")
    assert lines == ["64 True 2 True 1200000 0 1200",
                     "128 True 2 True 0 1200000 1200",
                     "128 True 2 True 4800000 1200000 1200",
                     "256 True 2 True 0 0 0",
                     "128 False 2 False 0 0 0"], lines


# --------------------------------------------------------------------------- GPU

def _mask(shape, seed, device="cuda", density=0.7):
    """A boolean mask of `shape` (B or 1, H or 1, Nq or 1, Nk): random, and
    where it has rows, row 3 with no key, row 5 with none in its first 300
    keys (so several whole tiles of that row are masked before any key
    counts: the unmasked loop meets rows with m = -inf), every 11th row from
    7 with every 7th key only."""
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(shape, generator=g) < density
    nq, nk = shape[2], shape[3]
    if nq > 7:
        m[:, :, 3] = False
        m[:, :, 5, :min(300, nk)] = False
        m[:, :, 7::11] &= torch.arange(nk) % 7 == 0
    return m.to(device)


def _check_masked(q, k, v, o, lse, scale, shift, mask, window=None):
    """O and LSE (base 2) against the float64 reference with the mask; rows
    that see no key: O = 0 and LSE = -inf."""
    band = {} if window is None else dict(window=(window[0], -1), shift=window[1])
    o_ref, lse_ref = attention_ref(q.double(), k.double(), v.double(), scale, shift, attn_mask=mask, **band)
    o_low, _ = attention_ref(q, k, v, scale, shift, attn_mask=mask, **band)
    assert_close("O", o, o_ref, baseline=o_low)
    lse2_ref = lse_ref / LN2
    finite = torch.isfinite(lse2_ref)
    assert torch.equal(torch.isinf(lse) & (lse < 0), ~finite), "LSE -inf rows differ from the reference's"
    if finite.any():
        err = max_abs_err(lse[finite], lse2_ref[finite])
        bound = 1e-3 * max(1.0, lse2_ref[finite].abs().max().item())
        assert err <= bound, f"LSE (base 2) error {err:.3e} > {bound:.3e}"
    if (~finite).any():
        assert (o[~finite] == 0).all(), "a row with no visible key is not zero"


MASK_CASES = [
    # b, hq, hkv, nq, nk, mask shape ("B1", "1H", "BH", "11": (1, 1, 1, Nk)), causal shift, layout, pad
    (2, 4, 4, 1000, 1000, "B1", None, "flash", 0),     # ragged N, batch > 1
    (2, 8, 2, 333, 1201, "1H", None, "flash", 0),      # GQA (by query head), Nq < Nk
    (2, 4, 1, 515, 515, "BH", None, "padded", 40),     # MQA, NaN past N, a row-padded mask
    (1, 4, 4, 700, 130, "BH", 0, "flash", 0),          # causal with a mask (top-left diagonal)
    (2, 4, 2, 1000, 1200, "B1", 200, "flash", 0),      # causal, bottom-right
    (1, 2, 2, 77, 1000, "11", None, "flash", 0),       # one mask row for all
    (2, 4, 4, 1024, 1024, "B1", None, "flash", 0),     # whole tiles only (the benchmark's kind)
]


def _mask_shape(kind, b, hq, nq, nk):
    return {"B1": (b, 1, nq, nk), "1H": (1, hq, nq, nk), "BH": (b, hq, nq, nk), "11": (1, 1, 1, nk)}[kind]


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("case", MASK_CASES, ids=lambda c: "-".join(map(str, c)))
def test_mask_matches_reference(dtype, d, case):
    """The mask plans (MASK_CONFIGS at d = 64) against float64 with the
    mask applied by attention_ref; outputs NaN-poisoned beforehand; with
    pad, the mask is a slice of a wider (row-padded) tensor whose padding
    is False (a read past Nk would mask more)."""
    from flashattn_triton.kernels.hopper import fwd as hopper_fwd
    b, hq, hkv, nq, nk, kind, shift, layout, pad = case
    q, k, v, o, lse = _inputs(b, hq, hkv, nq, nk, d, dtype, layout, pad)
    shape = _mask_shape(kind, b, hq, nq, nk)
    mask = _mask(shape, seed=d + nq)
    if pad:
        wide = torch.zeros(shape[:3] + (nk + pad,), dtype=torch.bool, device="cuda")
        wide[..., :nk] = mask
        mask = wide[..., :nk]
    scale = d ** -0.5
    assert hopper.hopper_attention_forward(q, k, v, o, lse, scale, shift, mask=mask), \
        f"declined: {hopper_fwd._PLANS}, build errors {hopper_fwd._BROKEN}"
    _check_masked(q, k, v, o, lse, scale, shift, mask)
    if layout == "padded":
        tail = o.as_strided((b, hq, pad, d), o.stride(), o.storage_offset() + nq * o.stride(2))
        assert (tail == 7.0).all(), "the kernel wrote rows past N_Q"


@needs_hopper
@pytest.mark.parametrize("case", [MASK_CASES[0], MASK_CASES[1], MASK_CASES[4]], ids=lambda c: "-".join(map(str, c)))
def test_mask_split_qk(case):
    """d = 192 with dv = 128 (the split Q K^T) with a mask."""
    b, hq, hkv, nq, nk, kind, shift, layout, pad = case
    q, k, v, o, lse = _inputs(b, hq, hkv, nq, nk, 192, torch.bfloat16, layout, pad, dv=128)
    mask = _mask(_mask_shape(kind, b, hq, nq, nk), seed=nq)
    assert hopper.hopper_attention_forward(q, k, v, o, lse, 192 ** -0.5, shift, mask=mask)
    _check_masked(q, k, v, o, lse, 192 ** -0.5, shift, mask)


@needs_hopper
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("schedule", [{}, dict(PERSISTENT=True, NUM_SMS=5), dict(DYNAMIC=True, NUM_SMS=7)],
                         ids=["default", "persistent5", "dynamic7"])
@pytest.mark.parametrize("causal", [False, True])
def test_mask_schedules(d, schedule, causal):
    """The mask path on each schedule (the persistent and dynamic grids give
    each program several work tiles: the row addresses are per tile)."""
    b, hq, hkv, nq, nk = 2, 4, 2, 1000, 900
    q, k, v, o, lse = _inputs(b, hq, hkv, nq, nk, d, torch.bfloat16, "flash")
    mask = _mask((b, 1, nq, nk), seed=11)
    shift = nk - nq if causal else None
    assert hopper.hopper_attention_forward(q, k, v, o, lse, d ** -0.5, shift, mask=mask, **schedule)
    _check_masked(q, k, v, o, lse, d ** -0.5, shift, mask)


@needs_hopper
@pytest.mark.parametrize("d", [64, 128])
def test_mask_with_a_window(d):
    """A mask and a sliding window (HAS_WINDOW) together: both bounds apply."""
    b, hq, hkv, nq, nk, left = 2, 4, 2, 1000, 1000, 300
    q, k, v, o, lse = _inputs(b, hq, hkv, nq, nk, d, torch.bfloat16, "flash")
    mask = _mask((b, hq, nq, nk), seed=3)
    assert hopper.hopper_attention_forward(q, k, v, o, lse, d ** -0.5, 0, (left, 0), mask=mask)
    _check_masked(q, k, v, o, lse, d ** -0.5, 0, mask, window=(left, 0))


@needs_hopper
def test_all_false_mask():
    """Every score masked: O = 0 and LSE = -inf everywhere (no NaN)."""
    q, k, v, o, lse = _inputs(1, 2, 2, 300, 500, 128, torch.bfloat16, "flash")
    mask = torch.zeros(1, 1, 300, 500, dtype=torch.bool, device="cuda")
    assert hopper.hopper_attention_forward(q, k, v, o, lse, 0.1, None, mask=mask)
    assert (o == 0).all() and torch.isneginf(lse).all()


@needs_hopper
@pytest.mark.parametrize("opt_in", ["1", None, "0"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sdpa_entry_with_a_mask(monkeypatch, opt_in, dtype):
    """scaled_dot_product_attention with a boolean attn_mask: the Hopper
    forward runs it unless opted out ("0"), the output matches
    float64, and the gradients (the portable backward, from the Hopper
    forward's LSE) match too."""
    from flashattn_triton import ops
    from flashattn_triton.api import scaled_dot_product_attention
    if opt_in is None:
        monkeypatch.delenv(OPT_IN, raising=False)
    else:
        monkeypatch.setenv(OPT_IN, opt_in)
    monkeypatch.setenv("FLASHATTN_TRITON_PREFETCH_BWD", "0")
    if ops._kernels.forward is None:
        ops._kernels.load()
    real, calls = ops._kernels.hopper_forward, []

    def spy(*a, **kw):
        took = real(*a, **kw)
        if "mask" in kw:
            calls.append(took)
        return took
    monkeypatch.setattr(ops._kernels, "hopper_forward", spy)
    b, h, hkv, n, d = 2, 8, 2, 1000, 128
    q = torch.randn(b, h, n, d, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(b, hkv, n, d, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(b, hkv, n, d, device="cuda", dtype=dtype, requires_grad=True)
    mask = _mask((b, 1, n, n), seed=5)
    out = scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert calls == ([] if opt_in == "0" else [True]), calls
    do = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), do)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o_ref, _ = attention_ref(*leaves, attn_mask=mask)
    ref = torch.autograd.grad(o_ref, leaves, do.double())
    low_leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    o_low, _ = attention_ref(*low_leaves, attn_mask=mask)
    low = torch.autograd.grad(o_low, low_leaves, do)
    assert_close("out", out, o_ref, baseline=o_low)
    for name, g, r, lo in zip(("dq", "dk", "dv"), grads, ref, low):
        assert torch.isfinite(g).all(), name
        assert_close(name, g, r, baseline=lo, factor=3.0, dtype=dtype)
