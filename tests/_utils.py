"""The tests' helpers live in flashattn_triton.testing (shared with the self-check
and the benchmarks); this module re-exports them for the test files."""

from flashattn_triton.testing import *  # noqa: F401,F403
from flashattn_triton.testing import DTYPES, assert_close, assert_rel, leaf, make_qkv, rand  # noqa: F401
