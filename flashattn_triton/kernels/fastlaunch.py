"""Launching a compiled kernel without Triton's per-call binding work, and
compile-only runs of the launch code.

``kernel[grid](*args, **kwargs)`` on a ``triton.jit`` function binds every
argument, specializes it (dtype and 16-byte alignment of pointers, integers
equal to 1 or divisible by 16), builds a cache key from the result, checks
the kernel's globals, then launches: tens of microseconds for kernels with
~70 arguments, most of the host time of a small attention call.

``install(kernel)`` gives a kernel an instance-level ``run`` that, once a
call has been compiled and launched by Triton's own path, launches later
calls with the same *signature* directly through the compiled kernel's
launcher, with the same argument list Triton would pass.  The signature is
stricter than Triton's specialization, so a fast launch always runs the
specialization Triton would pick:

* positional arguments: the type of each; integers, floats, bools, None and
  strings by value; tensors by dtype and ``data_ptr() % 16 == 0``; Gluon
  tensor descriptors by dtype, block shape and layout object (Triton keys
  them on dtype, block shape and the layout's value);
* keyword arguments (constexprs and launch options) by name and value;
* the current device, and the Triton settings that enter its cache key
  (debug, instrumentation mode).

Anything else (tuples, Triton-side hooks, asynchronous compilation, an
unknown Triton version) takes Triton's path, which is always correct; so
does every call when ``FLASHATTN_TRITON_FAST_LAUNCH=0`` (read at import;
``fastlaunch.ENABLED`` switches it at run time).  Not checked on
the fast path: that the globals a kernel reads are unchanged since it was
compiled (Triton raises if they are; the library's are constants).

``compile_only(device)`` is a context in which launches through an
installed kernel compile (or load from Triton's cache) without launching:
the backward prefetch (_prefetch.py) runs the backward's host code on meta
tensors inside it to compile its kernels ahead of the first backward, then
builds their host launchers (``build_launcher``).
"""

from __future__ import annotations

import contextlib
import contextvars
import operator
import os
from typing import Any, Dict, Optional

import torch
import triton

# As kernels/launch.py (not imported from there: launch.py imports this module).
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

ENV_FAST_LAUNCH = "FLASHATTN_TRITON_FAST_LAUNCH"  # "0": always Triton's launch path

# Triton releases whose JITFunction.run this module mirrors (binder, cache,
# the launcher call); any other version takes Triton's path.
TESTED_TRITON = ("3.6", "3.9")
_VERSION = ".".join(triton.__version__.split(".")[:2])

try:  # the pieces of Triton the fast path uses; missing ones disable it
    from triton import knobs as _knobs
    from triton.runtime import _async_compile
    from triton.runtime.driver import driver as _driver
    from triton.runtime.jit import JITFunction
    _IMPORTED = True
except ImportError:  # pragma: no cover - older Triton
    _IMPORTED = False
    JITFunction = None

try:
    from triton.knobs import HookChain as _HookChain
except ImportError:  # pragma: no cover - another hook type: always pass the hooks on
    _HookChain = None

try:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as _GluonDescriptor
except Exception:  # noqa: BLE001 - Gluon missing or moved: no descriptors on the fast path
    _GluonDescriptor = None

SUPPORTED = _IMPORTED and _VERSION in TESTED_TRITON and not INTERPRET
MAX_ENTRIES = 4096  # signatures per kernel before the table is cleared

_COMPILE_ONLY: contextvars.ContextVar = contextvars.ContextVar("flashattn_triton_compile_only", default=None)


# Read once: the fast path is on the critical path of every launch.
ENABLED = SUPPORTED and os.environ.get(ENV_FAST_LAUNCH, "1") != "0"


def enabled() -> bool:
    return ENABLED


def compile_only_device() -> Optional[torch.device]:
    """The device of the active compile_only() context, else None."""
    state = _COMPILE_ONLY.get()
    return None if state is None else state[0]


@contextlib.contextmanager
def compile_only(device: torch.device, compiled: Optional[list] = None):
    """Launches through installed kernels compile for ``device`` (the current
    CUDA device must be it) and return without running anything.  What each
    compile returns (a compiled kernel, or a pending one under Triton's
    asynchronous compile mode) is appended to ``compiled`` if given."""
    token = _COMPILE_ONLY.set((device, compiled))
    try:
        yield
    finally:
        _COMPILE_ONLY.reset(token)


_SCALAR_TYPES = (int, float, bool, str, type(None))


class _Layout:
    """Which positional arguments are tensors / descriptors / scalars, for one
    tuple of argument types, and the launches recorded for that tuple."""

    __slots__ = ("tensor_pos", "desc_pos", "scalars", "entries")

    def __init__(self, types):
        self.tensor_pos = tuple(i for i, t in enumerate(types) if issubclass(t, torch.Tensor))
        self.desc_pos = tuple(i for i, t in enumerate(types)
                              if _GluonDescriptor is not None and t is _GluonDescriptor)
        scalar_pos = tuple(i for i, t in enumerate(types) if t in _SCALAR_TYPES)
        if len(self.tensor_pos) + len(self.desc_pos) + len(scalar_pos) != len(types):
            raise TypeError("an argument type the fast path does not key on")
        # itemgetter of one index returns the item, of none raises: normalise to tuples
        if len(scalar_pos) > 1:
            self.scalars = operator.itemgetter(*scalar_pos)
        elif scalar_pos:
            i = scalar_pos[0]
            self.scalars = lambda args: (args[i],)
        else:
            self.scalars = lambda args: ()
        self.entries: Dict[tuple, "_Entry"] = {}

    def key(self, args, kwargs, device):
        """The rest of the signature (the argument types select this layout)."""
        tensors = tuple([(args[i].dtype, not args[i].data_ptr() & 15) for i in self.tensor_pos])
        # Layouts by identity (their dataclass hash is slow): the entry keeps
        # the objects alive, so an id in a stored key cannot be reused.
        descs = tuple([(args[i].base.dtype, tuple(args[i].block_shape), id(args[i].layout))
                       for i in self.desc_pos]) if self.desc_pos else ()
        return (self.scalars(args), tensors, descs, tuple(kwargs), tuple(kwargs.values()), device,
                _knobs.runtime.debug, _knobs.compilation.instrumentation_mode)


class _Entry:
    __slots__ = ("compiled", "tail", "refs")

    def __init__(self, compiled, tail, refs):
        self.compiled = compiled
        self.tail = tail
        self.refs = refs  # objects keyed by identity


class FastRun:
    """The instance-level ``run`` of an installed kernel."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.jit_run = type(kernel).run.__get__(kernel)  # Triton's own path
        self.layouts: Dict[tuple, Optional[_Layout]] = {}
        self.n_entries = 0
        self.names = [p.name for p in kernel.params]
        self.defaults = [p.default for p in kernel.params]

    def _tail(self, n_args, kwargs):
        """Values of the parameters after the positional ones, in signature order."""
        tail = []
        for name, default in zip(self.names[n_args:], self.defaults[n_args:]):
            if name in kwargs:
                tail.append(kwargs[name])
            elif default is not _EMPTY:
                tail.append(default)
            else:
                raise TypeError(f"missing argument {name}")
        return tuple(tail)

    def __call__(self, *args, grid, warmup, **kwargs):
        """Triton's ``JITFunction.run`` signature."""
        if _COMPILE_ONLY.get() is not None:
            return self._compile(args, kwargs, grid)
        if warmup:
            return self.jit_run(*args, grid=grid, warmup=True, **kwargs)
        return self.launch(args, kwargs, grid)

    def _compile(self, args, kwargs, grid):
        kernel = self.jit_run(*args, grid=grid, warmup=True, **kwargs)
        sink = _COMPILE_ONLY.get()[1]
        if sink is not None and kernel is not None:
            sink.append(kernel)
        return kernel

    def launch(self, args: tuple, kwargs: dict, grid):
        """``kernel[grid](*args, **kwargs)``, the fast way when this signature has
        been launched before."""
        if _COMPILE_ONLY.get() is not None:
            return self._compile(args, kwargs, grid)
        if not ENABLED or self.kernel.pre_run_hooks:
            return self.jit_run(*args, grid=grid, warmup=False, **kwargs)
        device = _driver.active.get_current_device()
        types = tuple(map(type, args))
        layout = self.layouts.get(types, False)
        if layout is False:
            try:
                layout = _Layout(types)
            except TypeError:
                layout = None
            self.layouts[types] = layout
        entry = key = None
        if layout is not None:
            try:
                key = layout.key(args, kwargs, device)
                entry = layout.entries.get(key)
            except (TypeError, AttributeError):  # unhashable or unexpected values
                key = None
        if entry is None:
            compiled = self.jit_run(*args, grid=grid, warmup=False, **kwargs)
            if key is not None and _recordable(compiled):
                try:
                    tail = self._tail(len(args), kwargs)
                except TypeError:
                    return compiled
                if self.n_entries >= MAX_ENTRIES:
                    for lay in self.layouts.values():
                        if lay is not None:
                            lay.entries.clear()
                    self.n_entries = 0
                refs = tuple(args[i].layout for i in layout.desc_pos)
                layout.entries[key] = _Entry(compiled, tail, refs)
                self.n_entries += 1
            return compiled
        compiled = entry.compiled
        params = args + entry.tail
        if callable(grid):
            try:
                grid = grid(kwargs)
            except KeyError:  # the grid reads a positional argument: give it all of them
                grid = grid(dict(zip(self.names, params)))
        n = len(grid)
        stream = _driver.active.get_current_stream(device)
        runtime = _knobs.runtime
        enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
        if _no_hooks(enter) and _no_hooks(leave):
            # The launcher calls the hooks with the metadata and nothing else
            # reads it: with no hook registered, skip building it.
            metadata = enter = leave = None
        else:
            metadata = compiled.launch_metadata(grid, stream, *params)
        compiled.run(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, stream,
                     compiled.function, compiled.packed_metadata, metadata, enter, leave, *params)
        return compiled


_EMPTY = __import__("inspect").Parameter.empty


def _no_hooks(hook) -> bool:
    """None, or one of Triton's hook chains with nothing in it."""
    return hook is None or (type(hook) is _HookChain and not hook.calls)


def _recordable(compiled) -> bool:
    """A compiled kernel that Triton just launched (not a pending asynchronous
    compile, not a hook's stand-in)."""
    return (compiled is not None and not hasattr(compiled, "result")
            and hasattr(compiled, "function") and hasattr(compiled, "packed_metadata")
            and _async_compile.active_mode.get() is None
            and getattr(_knobs.runtime, "add_stages_inspection_hook", None) is None)


def install(kernel) -> Any:
    """Give a ``triton.jit`` (or Gluon) kernel the fast launch and compile-only
    behaviour; returns the kernel.  A no-op under the interpreter, for other
    objects, and for Triton versions this module does not mirror."""
    if not SUPPORTED or JITFunction is None or not isinstance(kernel, JITFunction):
        return kernel
    if not isinstance(kernel.__dict__.get("run"), FastRun):
        kernel.run = FastRun(kernel)
    return kernel


def fast_run(kernel) -> Optional[FastRun]:
    """The installed fast path of a kernel (tests, benchmarks), or None."""
    run = getattr(kernel, "__dict__", {}).get("run")
    return run if isinstance(run, FastRun) else None


def build_launcher(compiled) -> None:
    """Build (or find in Triton's cache) the host launcher of a compiled kernel
    without loading the kernel: with Triton 3.6 a C extension compiled by the
    system compiler per kernel signature (about half a second), otherwise done
    at its first launch.  No CUDA call; the launch then finds it in the cache."""
    if getattr(compiled, "module", None) is None and hasattr(compiled, "src"):
        _driver.active.launcher_cls(compiled.src, compiled.metadata)


__all__ = ["ENV_FAST_LAUNCH", "build_launcher", "compile_only", "compile_only_device", "enabled", "fast_run",
           "install"]
