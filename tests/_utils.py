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
