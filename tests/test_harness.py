"""The test harness itself: the lock that runs ``bigmem`` tests one at a time
across processes (conftest.py, _filelock.py), and the CPU subsets of grid
tests (_utils.cpu_covering)."""

import os
import subprocess
import sys

import pytest

from _filelock import HAVE_LOCK

HOLD_S = 0.3

# A process that, once told "go" on stdin, holds the lock (or not) for HOLD_S
# and prints the monotonic times (system-wide on Linux) it entered and left.
_HOLDER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from _filelock import file_lock
import contextlib
lock = file_lock(sys.argv[2]) if sys.argv[3] == "lock" else contextlib.nullcontext()
print("ready", flush=True)
sys.stdin.readline()
with lock:
    enter = time.monotonic()
    time.sleep(float(sys.argv[4]))
    leave = time.monotonic()
print(enter, leave, flush=True)
"""


def _hold_together(path, mode: str):
    """Two holders started together; their (enter, leave) intervals, sorted."""
    tests = os.path.dirname(os.path.abspath(__file__))
    procs = [subprocess.Popen([sys.executable, "-c", _HOLDER, tests, str(path), mode, str(HOLD_S)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:  # both started (imports done) before either asks for the lock
        assert p.stdout.readline().strip() == "ready"
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    spans = []
    for p in procs:
        out, _ = p.communicate(timeout=30)
        assert p.returncode == 0
        spans.append(tuple(map(float, out.split())))
    return sorted(spans)


@pytest.mark.skipif(not HAVE_LOCK, reason="no fcntl: the lock is a no-op on this system")
def test_bigmem_lock_serializes_processes(tmp_path):
    (enter_a, leave_a), (enter_b, leave_b) = _hold_together(tmp_path / "bigmem.lock", "lock")
    assert leave_a <= enter_b, "two holders of the lock overlapped"
    # The control: without the lock the same two processes do overlap, so the
    # check above can fail.
    (enter_a, leave_a), (enter_b, leave_b) = _hold_together(tmp_path / "unused.lock", "none")
    assert enter_b < leave_a, "the holders never overlapped even without the lock"


@pytest.mark.skipif(not HAVE_LOCK, reason="no fcntl: the lock is a no-op on this system")
@pytest.mark.bigmem
def test_bigmem_test_runs_under_the_lock(tmp_path_factory):
    """The fixture holds the run's lock during a bigmem test: another flock
    on the file (a separate open file, so a separate lock) would wait."""
    import fcntl
    from conftest import bigmem_lock_path

    fd = os.open(bigmem_lock_path(tmp_path_factory), os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_cpu_covering_keeps_every_pair():
    """_utils.cpu_covering: the CPU subset of a grid must meet every pair of
    values the grid meets (else collection fails); the GPU gets the grid."""
    import _utils
    grid = [pytest.param(a, b, c, id=f"{a}-{b}-{c}") for a in (0, 1) for b in (0, 1) for c in (0, 1)]
    dims = {"a": lambda a, b, c: a, "b": lambda a, b, c: b, "c": lambda a, b, c: c}
    half = _utils.cpu_covering(grid, lambda a, b, c: c == a ^ b, dims)  # the 4-case pairwise covering
    assert len(half) == (8 if _utils.ON_GPU else 4)
    with pytest.raises(ValueError, match="lost 3 pairs"):  # a = b = 1, a = 1 & c = 0, b = 1 & c = 0
        _utils.cpu_covering(grid, lambda a, b, c: (a, b, c) != (1, 1, 0) and c == a ^ b, dims)
    with pytest.raises(ValueError, match="lost"):
        _utils.cpu_covering(grid, lambda a, b, c: c == 0, dims)


def test_assert_close_names_the_largest_error_past_equal_infinities():
    """A failure message names where the largest error is: positions where
    got and ref hold the same infinity (fully masked rows' LSE) are no error
    and must not be reported as the place of one."""
    import torch
    from flashattn_triton.testing import assert_close
    got = torch.tensor([-float("inf"), 1.0, 2.0])
    ref = torch.tensor([-float("inf"), 1.0, 2.5])
    with pytest.raises(AssertionError, match=r"at index \(2,\) \(got 2, ref 2.5\) exceeds tolerance 1.000e-01 \(5.00x\)"):
        assert_close("lse", got, ref, atol=0.1)
    assert_close("lse", got, got.clone(), atol=0.0)
