"""The tests' helpers live in flashattn_triton.testing (shared with the self-check
and the benchmarks); this module re-exports them for the test files."""

from flashattn_triton.testing import *  # noqa: F401,F403
from flashattn_triton.testing import DTYPES, assert_close, assert_rel, leaf, make_qkv, rand  # noqa: F401


def call_spy(monkeypatch, owner, name, record=None) -> list:
    """Replace ``owner.<name>`` (undone at the test's end) with a wrapper that
    calls through and appends ``record(*args, **kwargs)`` (default: 1) to
    the returned list, once per call."""
    seen: list = []
    real = getattr(owner, name)

    def spy(*args, **kwargs):
        seen.append(1 if record is None else record(*args, **kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    return seen


def fake_launch(script: str, timeout: int = 600) -> str:
    """Run ``script`` (python -c) in a subprocess without Triton's
    interpreter (its triton.jit functions do not compile), with this tests
    folder as argv[1] and the repository as working directory, as the
    fake-CUDA-driver launch tests do (tests/fake_cuda.py); returns its stdout
    and fails the test with its stderr if it exits non-zero."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, TRITON_INTERPRET="0")
    tests = os.path.dirname(os.path.abspath(__file__))
    res = subprocess.run([sys.executable, "-c", script, tests], capture_output=True, text=True, env=env,
                         timeout=timeout, cwd=os.path.dirname(tests))
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def window_shifts(case):
    """(causal shift or None, window (left, wshift)) of a WINDOW_CASES entry
    (tests/test_hopper.py, tests/test_hopper_bwd.py: batch, Hq, Hkv, Nq, Nk,
    "br" / "tl" / None, left, layout):
    flash-attn's window around the bottom-right diagonal Nk - Nq (top-left: 0)."""
    _, _, _, nq, nk, causal, left, _ = case
    wshift = 0 if causal == "tl" else nk - nq
    return (None if causal is None else wshift), (left, wshift)
