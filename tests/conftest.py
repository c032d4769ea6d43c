"""Test setup.

By default the tests run on the CPU through Triton's interpreter: this file
sets TRITON_INTERPRET=1 *before* flashattn_triton (and so triton.jit) is
imported.  With FLASHATTN_TRITON_TEST_DEVICE=cuda the same tests run compiled
on the GPU, and the tests marked ``gpu`` (realistic sizes) run too.
"""

import os

DEVICE = os.environ.get("FLASHATTN_TRITON_TEST_DEVICE", "cpu")
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: realistic sizes, needs CUDA (FLASHATTN_TRITON_TEST_DEVICE=cuda)")


def pytest_collection_modifyitems(config, items):
    if DEVICE == "cuda" and torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs FLASHATTN_TRITON_TEST_DEVICE=cuda and a GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device():
    if DEVICE == "cuda" and not torch.cuda.is_available():
        pytest.skip("FLASHATTN_TRITON_TEST_DEVICE=cuda but no GPU is visible")
    return torch.device(DEVICE)


@pytest.fixture(autouse=True)
def poison_outputs(monkeypatch):
    """Every buffer the library allocates for a kernel to fill starts as NaN."""
    import flashattn_triton.ops as ops
    monkeypatch.setattr(ops, "_POISON", True)


@pytest.fixture(autouse=True)
def fresh_seed(request):
    """A different seed per test (stable per test id, so failures replay)."""
    import zlib
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
