"""The one-pass float32 -> dq conversion (kernels/bwd.py convert_dq,
_bwd_dq_convert): bit for bit the torch expression ``dq.copy_(acc * scale)``
on NaN-poisoned outputs, whatever the layouts.  The Hopper backward's use
of it is a GPU test of tests/test_hopper_bwd.py (``-k dq_convert``)."""

import pytest
import torch

from flashattn_triton import ops
from flashattn_triton.kernels import bwd
from flashattn_triton.kernels.bwd import convert_dq

_INT = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


class _Counted:
    """Stands in for the kernels: records the grids they are launched on
    (``grids``; ``flat``: those of the flat form)."""

    def __init__(self, kernel, flat_kernel):
        self.kernel, self.flat_kernel, self.grids, self.flat = kernel, flat_kernel, [], []

    def __getitem__(self, grid):
        self.grids.append(grid)
        return self.kernel[grid]

    def flat_launch(self, grid):
        self.grids.append(grid)
        self.flat.append(grid)
        return self.flat_kernel[grid]


class _Flat:
    def __init__(self, counted):
        self.counted = counted

    def __getitem__(self, grid):
        return self.counted.flat_launch(grid)


def count_launches(monkeypatch) -> _Counted:
    """kernels/bwd.py's _bwd_dq_convert and _bwd_dq_convert_flat replaced by a
    _Counted of them, once the op layer has given them the launch fast path
    (ops._install_direct_launches looks the kernels up by name, once per process)."""
    ops._install_direct_launches()
    counted = _Counted(bwd._bwd_dq_convert, bwd._bwd_dq_convert_flat)
    monkeypatch.setattr(bwd, "_bwd_dq_convert", counted)
    monkeypatch.setattr(bwd, "_bwd_dq_convert_flat", _Flat(counted))
    return counted


@pytest.fixture
def kernel(monkeypatch):
    return count_launches(monkeypatch)


def _expected(dq, acc, scale):
    want = torch.full_like(dq, float("nan"))
    return want.copy_(acc if scale == 1 else acc * scale)


def _bits(t):
    return t.view(_INT[t.dtype])


def _poisoned(shape, dtype, device, layout):
    """A NaN-filled dq of ``shape`` (B, H, N, d): "flash" (and "flash-same",
    whose acc shares the layout), the (B, H, N, d) view of (B, N, H, d)
    storage; "padded", rows past N in the storage (its base returned too);
    "bhnd", contiguous."""
    b, h, n, d = shape
    if layout in ("flash", "flash-same"):
        t = torch.full((b, n, h, d), float("nan"), dtype=dtype, device=device)
        return t.transpose(1, 2), t
    if layout == "padded":
        t = torch.full((b, h, n + 5, d), float("nan"), dtype=dtype, device=device)
        return t[:, :, :n], t
    t = torch.full(shape, float("nan"), dtype=dtype, device=device)
    return t, t


SHAPES = [
    # (B, H, N, d), dq's layout; N not a multiple of BLOCK_M, odd d
    ((2, 3, 70, 72), "flash"),
    ((1, 4, 130, 40), "padded"),
    ((2, 2, 64, 128), "bhnd"),
    ((67, 2, 5, 24), "flash"),  # B the largest dim: B is tiled
    ((1, 90, 3, 8), "flash"),   # H the largest dim
    ((2, 3, 70, 72), "flash-same"),  # acc in dq's layout (the Hopper backward's buffer): flat
]


@pytest.mark.parametrize("scale", [1.0, 0.08838834764831845], ids=["scale1", "scale"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32],
                         ids=lambda t: str(t).split(".")[1])
@pytest.mark.parametrize("shape,layout", SHAPES, ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else x)
def test_matches_the_torch_expression(device, kernel, shape, layout, dtype, scale):
    dq, base = _poisoned(shape, dtype, device, layout)
    acc = torch.randn(shape, device=device) * 30
    if layout == "flash-same":
        acc = torch.randn(base.shape, device=device).transpose(1, 2) * 30
    want = _expected(dq, acc, scale)
    convert_dq(dq, acc, scale)
    assert len(kernel.grids) == 1
    if layout in ("flash-same", "bhnd"):  # one dense layout: the flat form
        assert kernel.flat == [(-(-dq.numel() // bwd._DQ_CONVERT_FLAT_BLOCK),)], kernel.flat
    else:
        rows = max(shape[:3])
        assert kernel.grids[0] == (-(-rows // bwd._DQ_CONVERT_BLOCK_M), shape[0] * shape[1] * shape[2] // rows)
    assert torch.equal(_bits(dq), _bits(want))
    if layout == "padded":
        assert base[:, :, shape[2]:].isnan().all(), "rows past N were written"


def test_varlen_and_non_contiguous_acc(device, kernel):
    """A packed (T, H, d) shape; acc a (T, H, d) view of (H, T, d) storage
    with padded rows (neither contiguous nor dq's layout)."""
    t, h, d = 101, 3, 72
    acc = torch.randn(h, t, d + 8, device=device)[:, :, :d].transpose(0, 1)
    assert not acc.is_contiguous() and acc.stride(-1) == 1
    dq = torch.full((t, h, d), float("nan"), dtype=torch.bfloat16, device=device)
    want = _expected(dq, acc, 0.125)
    convert_dq(dq, acc, 0.125)
    assert len(kernel.grids) == 1
    assert torch.equal(_bits(dq), _bits(want))


def test_other_layouts_take_the_torch_expression(device, kernel):
    """A last dim of stride > 1, or more (z, h) pairs than a grid axis holds,
    falls back to the torch expression (same result); empty and meta tensors
    launch nothing; shapes must agree."""
    for acc in (torch.randn(2, 3, 40, 16, device=device).transpose(2, 3),  # d of stride 16
                torch.randn(256, 257, 258, 1, device=device)):  # 256 * 257 > 65535
        dq = torch.full(acc.shape, float("nan"), dtype=torch.float16, device=device)
        want = _expected(dq, acc, 0.5)
        convert_dq(dq, acc, 0.5)
        assert torch.equal(_bits(dq), _bits(want))
    for dev in (device, "meta"):  # (meta outside fastlaunch.compile_only: nothing to compile)
        convert_dq(torch.empty(2, 0, 5, 8, dtype=torch.bfloat16, device=dev), torch.empty(2, 0, 5, 8, device=dev),
                   1.0)
        convert_dq(torch.empty(2, 3, 5, 8, dtype=torch.bfloat16, device="meta"),
                   torch.empty(2, 3, 5, 8, device="meta"), 1.0)
    assert kernel.grids == []
    with pytest.raises(ValueError, match="shape"):
        convert_dq(torch.empty(2, 3, 5, 8, device=device), torch.empty(2, 3, 6, 8, device=device), 1.0)
