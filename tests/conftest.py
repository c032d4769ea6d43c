"""Test setup.

By default the tests run on the CPU through Triton's interpreter: this file
sets TRITON_INTERPRET=1 *before* flashattn_triton (and so triton.jit) is
imported.  With FLASHATTN_TRITON_TEST_DEVICE=cuda the same tests run compiled
on the GPU, and the tests marked ``gpu`` (realistic sizes) run too.

Tests marked ``bigmem`` need several GiB of GPU memory at once (dense float64
references or large tensors at realistic sizes: test_realistic 25-70 GiB,
the int64-offsets test over 17 GiB, test_gpu_variants about 4 GiB).  Several of them in
parallel pytest-xdist workers ran a 140 GiB H200 out of memory, so they run
one at a time across the workers of a run: each holds an exclusive file lock
(tests/_filelock.py) in the run's temporary folder while it runs, then
returns the memory it used to the driver (torch's CUDA cache emptied, and a
failure's traceback, which pytest keeps, stripped of its tensors).  Tests
without the mark still run in parallel next to them.  Mark a test ``bigmem``
when its peak exceeds about 2 GiB (torch.cuda.max_memory_allocated() after
one run; the marks so far come from the peak resident memory of each
``gpu`` test run on the CPU, its float64 references included).
"""

import gc
import os
import sys
import traceback

DEVICE = os.environ.get("FLASHATTN_TRITON_TEST_DEVICE", "cpu")
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from _filelock import file_lock  # noqa: E402
import _utils  # noqa: E402,F401  (its snapshot of triton.language, before any kernel runs)

BIGMEM_LOCK = "flashattn-triton-bigmem.lock"
# Tests marked ``committed_results`` read runs committed under benchmarks/results.  A
# checkout without that folder (the device recipe strips it to keep the carry small)
# skips them; with the folder, a missing file is a failure like any other.
RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "results")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: realistic sizes, needs CUDA (FLASHATTN_TRITON_TEST_DEVICE=cuda)")
    config.addinivalue_line("markers", "bigmem: needs several GiB of GPU memory; one such test at a time "
                            "across xdist workers (module doc)")
    config.addinivalue_line("markers", "committed_results: reads benchmarks/results; skipped in a "
                            "checkout without that folder")
    if os.environ.get("TRITON_INTERPRET") == "1":
        _check_interpreter()


def _check_interpreter():
    """Stop the run with a clear message when this Triton's interpreter cannot
    run the kernels (flashattn_triton.testing.interpreter_problem)."""
    from flashattn_triton.testing import interpreter_problem
    problem = interpreter_problem()
    if problem:
        pytest.exit(problem, returncode=4)


def pytest_collection_modifyitems(config, items):
    on_gpu = DEVICE == "cuda" and torch.cuda.is_available()
    no_gpu = pytest.mark.skip(reason="needs FLASHATTN_TRITON_TEST_DEVICE=cuda and a GPU")
    no_results = pytest.mark.skip(reason=f"reads committed runs; {RESULTS} is absent in this checkout")
    for item in items:
        if "gpu" in item.keywords and not on_gpu:
            item.add_marker(no_gpu)
        if "committed_results" in item.keywords and not os.path.isdir(RESULTS):
            item.add_marker(no_results)


def bigmem_lock_path(tmp_path_factory):
    """The lock file of a run's bigmem tests.  An xdist worker's base temp is
    <the run's base temp>/<worker id>, so its parent is one folder per run,
    shared by the run's workers.  Without xdist it is the parent of the run's
    base temp (pytest-of-<user>), so concurrent runs of one user take turns too."""
    return tmp_path_factory.getbasetemp().parent / BIGMEM_LOCK


def free_cuda_memory():
    """Give the memory a finished test held back to the driver, for the other
    workers.  On a failure pytest keeps the traceback (sys.last_traceback,
    for post-mortem debugging) and with it the test's frames and tensors:
    clear those frames (the report is already written), collect, then empty
    torch's CUDA cache."""
    if getattr(sys, "last_traceback", None) is not None:
        traceback.clear_frames(sys.last_traceback)
    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


@pytest.fixture(autouse=True)
def bigmem_one_at_a_time(request):
    """Tests marked bigmem run under the run's lock, then free their memory (module doc)."""
    if request.node.get_closest_marker("bigmem") is None:
        yield
        return
    with file_lock(bigmem_lock_path(request.getfixturevalue("tmp_path_factory"))):
        try:
            yield
        finally:
            free_cuda_memory()


@pytest.fixture
def device():
    if DEVICE == "cuda" and not torch.cuda.is_available():
        pytest.skip("FLASHATTN_TRITON_TEST_DEVICE=cuda but no GPU is visible")
    return torch.device(DEVICE)


@pytest.fixture(autouse=True)
def poison_outputs(monkeypatch):
    """Every buffer the library allocates for a kernel to fill starts as NaN."""
    from flashattn_triton.kernels import fastlaunch
    monkeypatch.setattr(fastlaunch, "POISON", True)  # outputs, partial sums, split partials


@pytest.fixture(autouse=True)
def fresh_seed(request):
    """A different seed per test (stable per test id, so failures replay)."""
    import zlib
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
