"""Hopper (sm_90) tier: FA3-style forward (fwd.py) and backward (bwd.py) in Gluon.

Gluon is experimental and its API moves between Triton releases, so this
package never fails to import: if Triton is not a tested version, or any
Gluon name the kernel needs is missing, ``AVAILABLE`` is False, ``REASON``
says why, and ``hopper_attention_forward`` returns False (the caller then
runs the portable kernel).  FLASHATTN_TRITON_HOPPER_ANY_TRITON=1 skips the
version check (to try a newer Triton: 3.7-3.9 compile the kernels, through
_compat.py's names, but they have not run on a GPU; docs/hopper.md).
"""

from __future__ import annotations

import os

import triton

TESTED_TRITON = ("3.6",)
# Releases on which every build of benchmarks/gluon_sweep.py compiles for sm_90
# (session 71, through _compat.py's names; not run on a GPU but for 3.6).  The
# CPU test test_gluon_kernels_compile_for_sm90_on_this_triton builds two of them
# on these releases and skips others.
COMPILE_CHECKED = ("3.6", "3.7", "3.8", "3.9")

AVAILABLE = False
REASON = ""

# The installed release as "major.minor", the form of the lists above.
TRITON_RELEASE = ".".join(triton.__version__.split(".")[:2])
if TRITON_RELEASE not in TESTED_TRITON and os.environ.get("FLASHATTN_TRITON_HOPPER_ANY_TRITON") != "1":
    REASON = f"Triton {triton.__version__}: the Gluon kernel is tested with Triton {', '.join(TESTED_TRITON)} only"
    if TRITON_RELEASE in COMPILE_CHECKED:
        REASON += (" (it compiles on this release; FLASHATTN_TRITON_HOPPER_ANY_TRITON=1 turns it on, "
                   "not tested on a GPU)")
else:
    try:
        from .fwd import (hopper_attention_forward, hopper_forward_flash, hopper_forward_varlen,  # noqa: F401
                          unsupported_reason)
        from .bwd import hopper_attention_backward, hopper_backward_varlen  # noqa: F401
        AVAILABLE = True
    except Exception as exc:  # noqa: BLE001 - any import problem means: not available
        REASON = f"Gluon API not usable: {type(exc).__name__}: {exc}"

if not AVAILABLE:
    def hopper_attention_forward(q, k, v, o, lse, sm_scale, causal_shift, window=None, dropout=None,
                                 **overrides) -> bool:
        """The Hopper tier is unavailable here (see REASON): always declines."""
        return False

    def hopper_forward_flash(q, k, v, o, lse, sm_scale, causal_shift, window=None, dropout=None) -> bool:
        """The Hopper tier is unavailable here (see REASON): always declines."""
        return False

    def hopper_forward_varlen(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sm_scale,
                              causal, window_left=-1) -> bool:
        """The Hopper tier is unavailable here (see REASON): always declines."""
        return False

    def hopper_attention_backward(do, q, k, v, lse, delta, dq, dk, dv, sm_scale, causal_shift, window=None,
                                  dropout=None, **overrides) -> bool:
        """The Hopper tier is unavailable here (see REASON): always declines."""
        return False

    def hopper_backward_varlen(do, q, k, v, lse, delta, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                               max_seqlen_k, sm_scale, causal, window_left=-1) -> bool:
        """The Hopper tier is unavailable here (see REASON): always declines."""
        return False

    def unsupported_reason(q, k, v, o, lse, sm_scale) -> str:
        return REASON


__all__ = ["AVAILABLE", "COMPILE_CHECKED", "REASON", "TESTED_TRITON", "TRITON_RELEASE",
           "hopper_attention_backward", "hopper_attention_forward", "hopper_forward_flash",
           "hopper_forward_varlen", "hopper_backward_varlen", "unsupported_reason"]
