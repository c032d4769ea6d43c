"""Gluon builtins whose names moved between Triton releases, resolved once.

The Hopper kernels (fwd.py, bwd.py) are written and GPU-tested against
Triton 3.6's Gluon.  Later releases renamed builtins they use; each name
here is the installed release's own:

==========================  =====================================  ==========================
used here                   Triton 3.6                             renamed in
==========================  =====================================  ==========================
``tma_load``                ``tma.async_copy_global_to_shared``    3.8: ``tma.async_load``
``tma_store``               ``tma.async_copy_shared_to_global``    3.8: ``tma.async_store``
``cta_barrier``             ``gl.thread_barrier``                  3.7: ``gl.barrier``
``reinterpret(buf, ...)``   ``buf._reinterpret(...)``              3.9: ``buf.reinterpret``
``tma_reduce_add``          (the builder's op, no wrapper)         3.8: ``tma.async_atomic_add``
==========================  =====================================  ==========================

(3.9 keeps the old TMA names only to raise.)  Where 3.6 has no builtin, or
a method is renamed, a builtin of ours makes the same call, so a Triton 3.6
build emits the same IR as before: the PTX of the 49 builds of
benchmarks/gluon_sweep.py, line information aside, is unchanged.  Triton
3.8 also takes no view of a different size than its buffer and no noinline
call inside a warp-specialized partition; ``reinterpret`` and
``NOINLINE_OK`` work around both there.  Triton 3.7, 3.8 and 3.9 compile
every build of the sweep for sm_90 (checked on CPU), but the tier stays
off on them unless FLASHATTN_TRITON_HOPPER_ANY_TRITON=1 (``TESTED_TRITON``
in this package's ``__init__``; ``COMPILE_CHECKED`` there lists the
releases checked): they have not run on a GPU.
"""

from __future__ import annotations

import math

from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import _unwrap_if_constexpr, builtin, shared_memory_descriptor
from triton.experimental.gluon.language.nvidia.hopper import tma

from . import TRITON_RELEASE

# The newer name first: 3.8 has both, 3.9's old ones raise when called.
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
# A bar.sync of the whole CTA (both lower to the same debug barrier).
cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier

_METHOD = "reinterpret" if hasattr(shared_memory_descriptor, "reinterpret") else "_reinterpret"
# Triton 3.8's warp-specialization lowering fails on a noinline call inside a
# partition ("function missing 'ws_num_warps' attribute"); there the zeroing
# helpers that are noinline elsewhere (_zero_rows_from_call,
# _zero_pair_rows_from: IS_VARLEN = 2) are inlined.
NOINLINE_OK = TRITON_RELEASE != "3.8"
# Triton 3.8 (not 3.6, 3.7 or 3.9) refuses a view whose size differs from its
# buffer's; the kernels view the start of a larger buffer (_store_tile_tma,
# _dkv_stages), which on 3.8 is taken as a slice of a view of the whole.
_SAME_SIZE_VIEWS = TRITON_RELEASE == "3.8"


@builtin
def reinterpret(buf, dtype, shape, layout, _semantic=None):
    """The shared buffer ``buf`` viewed with another dtype, shape and layout
    (no data moves): the release's own method, given the same arguments (on
    3.8, a view smaller than ``buf``, in a layout of the view's rank, as the
    first dims[0] of a view of all of ``buf`` with a longer first dim)."""
    method = getattr(buf, _METHOD)
    if _SAME_SIZE_VIEWS:
        dims = [int(_unwrap_if_constexpr(n)) for n in shape]
        view_bits = math.prod(dims) * _unwrap_if_constexpr(dtype).primitive_bitwidth
        buf_bits = math.prod(int(_unwrap_if_constexpr(n)) for n in buf.shape) * buf.dtype.primitive_bitwidth
        rank = getattr(_unwrap_if_constexpr(layout), "rank", len(dims))
        if view_bits < buf_bits and buf_bits % view_bits == 0 and rank == len(dims):
            whole = method(dtype, [dims[0] * (buf_bits // view_bits)] + dims[1:], layout, _semantic=_semantic)
            return whole.slice(0, dims[0], dim=0, _semantic=_semantic)
    return method(dtype, shape, layout, _semantic=_semantic)


@builtin
def _reduce_add_36(tensor_desc, coord, src, _semantic=None):
    """``tensor_desc[coord] += src`` (shared -> global, float32 add in L2),
    asynchronous like a TMA store: ``tma.store_wait`` before reusing src.
    Triton 3.6's Gluon builder has the op but no Python wrapper for it."""
    from triton._C.libtriton import ir
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                              src.handle)


tma_reduce_add = getattr(tma, "async_atomic_add", None) or _reduce_add_36
