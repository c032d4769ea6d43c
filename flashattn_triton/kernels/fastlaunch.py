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

``recording()`` records the launches that some host code makes through
installed kernels; ``Recording.replay(roles)`` turns them into a ``Replay``
that launches the same compiled kernels with the same grids and arguments,
the tensors among them replaced by the ones of a later call (the op layer's
per-signature forward plans, ops.py).  A recording is replayable only if
every launch went through this module with a recorded kernel, no other
Triton launch happened meanwhile (counted by a launch hook), no PyTorch
operation but views ran (a dispatch mode watches), and each tensor argument
is one of the roles (by address) or a buffer made by ``zeroed_scratch()``
or ``empty_scratch()`` inside the recording (each replay allocates, and
zeroes, its own, in the same order: the Hopper forward's tile counter, the
backward's float32 partials).  A replay declines (returns False, having
launched nothing) when the fast path is off, the current device, the
16-byte alignment of a role, Triton's debug or instrumentation settings
differ from the recording, a launch hook or a pre-run hook is set, or inside
compile_only().

With Triton 3.6 the compiled kernel's C launcher is called directly (``_Direct``):
without the Python wrapper around it and, for kernels with tensor
descriptor (TMA) arguments, with the expanded descriptors (the CUtensorMap
that Triton's wrapper encodes on every call, plus shape and strides) taken
from a cache keyed on the descriptor's slot, address, shape, strides and
padding; the encoding depends on nothing else (dtype, block, swizzle and
layout belong to the slot), so a new address encodes a new map.  Other
Triton versions call the compiled kernel's launcher as ``kernel[grid]``
does, and replays of descriptor arguments decline.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import operator
import os
import types
from typing import Any, Dict, List, Optional, Sequence

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

try:  # Triton 3.6's descriptor expansion, called on a cache miss (_Direct)
    from triton.backends.nvidia.driver import make_tensordesc_arg as _make_tensordesc_arg
except Exception:  # noqa: BLE001 - not Triton's NVIDIA backend: no direct launches
    _make_tensordesc_arg = None

try:
    from torch.utils._python_dispatch import TorchDispatchMode as _DispatchMode
except ImportError:  # pragma: no cover - no dispatch modes: recordings never replay
    _DispatchMode = None

SUPPORTED = _IMPORTED and _VERSION in TESTED_TRITON and not INTERPRET
# Direct calls of the C launcher: the launcher layout of Triton 3.6 only.
DIRECT = SUPPORTED and _VERSION == "3.6" and _make_tensordesc_arg is not None
MAX_ENTRIES = 4096  # signatures per kernel before the table is cleared

_COMPILE_ONLY: contextvars.ContextVar = contextvars.ContextVar("flashattn_triton_compile_only", default=None)
_RECORD: contextvars.ContextVar = contextvars.ContextVar("flashattn_triton_record", default=None)


# Read once: the fast path is on the critical path of every launch.
_FAST_LAUNCH = os.environ.get(ENV_FAST_LAUNCH, "").strip()
if _FAST_LAUNCH not in ("", "0", "1"):  # (launch.parse_switch's rule; launch imports this module)
    raise ValueError(f"{ENV_FAST_LAUNCH}={os.environ[ENV_FAST_LAUNCH]!r}: must be 0 (off) or 1 (on), or unset")
ENABLED = SUPPORTED and _FAST_LAUNCH != "0"


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
    __slots__ = ("compiled", "tail", "refs", "direct")

    def __init__(self, compiled, tail, refs):
        self.compiled = compiled
        self.tail = tail
        self.refs = refs  # objects keyed by identity
        self.direct = _Direct.of(compiled)


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
        rec = _RECORD.get()
        if not ENABLED or self.kernel.pre_run_hooks:
            if rec is not None:
                rec.broken = True
            return self.jit_run(*args, grid=grid, warmup=False, **kwargs)
        device = _driver.active.get_current_device()
        types_ = tuple(map(type, args))
        layout = self.layouts.get(types_, False)
        if layout is False:
            try:
                layout = _Layout(types_)
            except TypeError:
                layout = None
            self.layouts[types_] = layout
        entry = key = None
        if layout is not None:
            try:
                key = layout.key(args, kwargs, device)
                entry = layout.entries.get(key)
            except (TypeError, AttributeError):  # unhashable or unexpected values
                key = None
        if entry is None:
            compiled = self.jit_run(*args, grid=grid, warmup=False, **kwargs)
            recorded = False
            if key is not None and _recordable(compiled):
                try:
                    tail = self._tail(len(args), kwargs)
                except TypeError:
                    tail = None
                if tail is not None:
                    if self.n_entries >= MAX_ENTRIES:
                        for lay in self.layouts.values():
                            if lay is not None:
                                lay.entries.clear()
                        self.n_entries = 0
                    refs = tuple(args[i].layout for i in layout.desc_pos)
                    entry = layout.entries[key] = _Entry(compiled, tail, refs)
                    self.n_entries += 1
                    if rec is not None:
                        rec.add(self, entry, args + tail, _grid3(self._grid(grid, kwargs, args + tail)), device)
                        recorded = True
            if rec is not None and not recorded:
                rec.broken = True
            return compiled
        compiled = entry.compiled
        params = args + entry.tail
        grid = self._grid(grid, kwargs, params)
        grid3 = _grid3(grid)
        stream = _driver.active.get_current_stream(device)
        runtime = _knobs.runtime
        enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
        if _no_hooks(enter) and _no_hooks(leave):
            # The launcher calls the hooks with the metadata and nothing else
            # reads it: with no hook registered, skip building it.
            metadata = enter = leave = None
            direct = entry.direct
        else:
            metadata = compiled.launch_metadata(grid, stream, *params)
            direct = None
        if direct is not None:
            direct.launch(grid3, stream, compiled, direct.expand(params))
        else:
            compiled.run(grid3[0], grid3[1], grid3[2], stream, compiled.function, compiled.packed_metadata,
                         metadata, enter, leave, *params)
        if rec is not None:
            rec.add(self, entry, params, grid3, device)
        return compiled

    def _grid(self, grid, kwargs, params):
        """The launch grid (a tuple), evaluated if it is a callable."""
        if callable(grid):
            try:
                return grid(kwargs)
            except KeyError:  # the grid reads a positional argument: give it all of them
                return grid(dict(zip(self.names, params)))
        return grid


def _grid3(grid) -> tuple:
    n = len(grid)
    return (grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1)


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


# ---------------------------------------------------------------------------
# Direct launches (Triton 3.6) and the cache of expanded tensor descriptors
# ---------------------------------------------------------------------------

_UIDS = itertools.count()
# (descriptor slot, address, ...) -> the launcher arguments Triton's wrapper
# makes of one descriptor: [CUtensorMap, *shape, *strides] (module doc).
_TMA_CACHE: Dict[tuple, list] = {}
MAX_TMA_ENTRIES = 8192


class _PtrDescriptor:
    """What Triton's make_tensordesc_arg reads of a descriptor, with the base
    given by its address."""

    __slots__ = ("ptr", "shape", "strides", "padding")

    def __init__(self, ptr: int, shape, strides, padding):
        self.ptr, self.shape, self.strides, self.padding = ptr, list(shape), list(strides), padding

    @property
    def base(self):
        return self

    def data_ptr(self) -> int:
        return self.ptr


def _tma_args(key: tuple, ptr: int, shape, strides, padding, meta) -> list:
    """The launcher arguments of one descriptor, from the cache or encoded now."""
    hit = _TMA_CACHE.get(key)
    if hit is None:
        if len(_TMA_CACHE) >= MAX_TMA_ENTRIES:
            _TMA_CACHE.clear()
        hit = _TMA_CACHE[key] = list(_make_tensordesc_arg(_PtrDescriptor(ptr, shape, strides, padding), meta))
    return hit


class _Direct:
    """One compiled kernel launched through the C entry point of its Triton 3.6
    launcher (what ``CudaLauncher.__call__`` calls once it has allocated the
    scratch buffers, none here, and expanded the descriptors, cached here)."""

    __slots__ = ("raw", "head", "desc_pos", "metas", "uid")

    @classmethod
    def of(cls, compiled) -> Optional["_Direct"]:
        if not DIRECT:
            return None
        try:
            return cls(compiled)
        except Exception:  # noqa: BLE001 - another launcher layout: its own __call__
            return None

    def __init__(self, compiled):
        launcher = compiled.run
        if launcher.global_scratch_size or launcher.profile_scratch_size:
            raise ValueError("scratch buffers are allocated per launch")
        fn = launcher.launch
        desc_pos: tuple = ()
        metas: tuple = ()
        if isinstance(fn, types.FunctionType):  # Triton's wrapper that expands the descriptors
            cells = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__)))
            fn = cells["launcher"]
            desc_pos = tuple(sorted(cells["tensordesc_indices"]))
            metas = tuple(cells["tensordesc_meta"])
            if len(metas) != len(desc_pos) or isinstance(fn, types.FunctionType):
                raise ValueError("unexpected launcher wrapper")
        self.raw = fn
        self.head = (launcher.launch_cooperative_grid, launcher.launch_pdl, None, None)
        self.desc_pos, self.metas = desc_pos, metas
        self.uid = next(_UIDS)

    def expand(self, params) -> Sequence:
        """params with each tensor descriptor replaced by its launcher arguments."""
        if not self.desc_pos:
            return params
        out: List[Any] = []
        start = 0
        for j, i in enumerate(self.desc_pos):
            out.extend(params[start:i])
            d = params[i]
            ptr, shape, strides = d.base.data_ptr(), tuple(d.shape), tuple(d.strides)
            out.extend(_tma_args((self.uid, j, ptr, shape, strides, d.padding), ptr, shape, strides, d.padding,
                                 self.metas[j]))
            start = i + 1
        out.extend(params[start:])
        return out

    def launch(self, grid3, stream, compiled, args) -> None:
        self.raw(grid3[0], grid3[1], grid3[2], stream, compiled.function, *self.head, compiled.packed_metadata,
                 None, None, None, *args)


# ---------------------------------------------------------------------------
# Recording and replaying the launches of some host code
# ---------------------------------------------------------------------------

class Recording:
    """The launches made inside one recording() block (module doc)."""

    def __init__(self):
        self.launches: List[tuple] = []  # (FastRun, entry, params, grid, device)
        self.broken = False  # something happened that a replay would not repeat
        self.hooked = 0  # launches seen by the launch hook
        self.count = self._count  # one bound method, to add and remove it
        self.scratch: List[torch.Tensor] = []  # zeroed_scratch() / empty_scratch() buffers, made again by each replay
        self.zeroed: List[bool] = []  # per scratch buffer: zero-filled
        self.quiet = False  # inside zeroed_scratch(): its own operations are expected
        self.notes: Dict[str, Any] = {}  # note(): what the recorded code tells its caller

    def _count(self, *args, **kwargs) -> None:
        self.hooked += 1

    def add(self, run: "FastRun", entry: _Entry, params: tuple, grid: tuple, device) -> None:
        self.launches.append((run, entry, params, grid, device))

    def replay(self, roles: Sequence[torch.Tensor]) -> Optional["Replay"]:
        """A Replay of the recorded launches with the tensors ``roles`` (by
        address) as parameters, or None if they cannot be replayed."""
        if self.broken or not self.launches or self.hooked != len(self.launches):
            return None
        if len({launch[4] for launch in self.launches}) != 1:
            return None
        ptrs = [t.data_ptr() for t in roles]
        # The scratch buffers are roles after the caller's, allocated anew by each replay.
        steps = [_Step.build(run, entry, params, grid, ptrs + [t.data_ptr() for t in self.scratch])
                 for run, entry, params, grid, _ in self.launches]
        if any(step is None for step in steps):
            return None
        scratch = [(t.numel(), t.dtype) for t in self.scratch]
        return Replay(steps, self.launches[0][4], [not p & 15 for p in ptrs], scratch, self.zeroed)


if _DispatchMode is not None:
    class _OpWatch(_DispatchMode):
        """Marks a recording broken at any PyTorch operation that is not a view."""

        def __init__(self, rec: Recording):
            super().__init__()
            self.rec = rec

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # Otherwise torch wraps __torch_dispatch__ in torch._disable_dynamo,
            # whose first call imports torch._dynamo (seconds of a first call;
            # session 11). A recording never runs under torch.compile.
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not getattr(func, "is_view", False) and not self.rec.quiet:
                self.rec.broken = True
            return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def recording():
    """Record the launches of the block (module doc); yields the Recording."""
    rec = Recording()
    chain = _knobs.runtime.launch_enter_hook if _IMPORTED else None
    if not ENABLED or _DispatchMode is None or _HookChain is None or type(chain) is not _HookChain \
            or _COMPILE_ONLY.get() is not None or _RECORD.get() is not None:
        rec.broken = True
        yield rec
        return
    chain.add(rec.count)
    token = _RECORD.set(rec)
    try:
        with _OpWatch(rec):
            yield rec
    finally:
        _RECORD.reset(token)
        chain.remove(rec.count)


def zeroed_scratch(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """A fresh zero-filled contiguous buffer of ``shape`` (an int or a tuple)
    for one launch (e.g. a tile counter), from the caching allocator on the
    current stream.  Inside a recording it becomes a role of its own: each
    replay allocates and zeroes a new one of as many elements (its launches
    then read it by address like the caller's roles)."""
    return _scratch(shape, dtype, device, True)


def empty_scratch(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """As zeroed_scratch, not zero-filled (a buffer the launches write before
    they read it, e.g. partial sums)."""
    return _scratch(shape, dtype, device, False)


# Tests set POISON: buffers the kernels must fill completely (the op layer's
# outputs, empty / empty_like, and empty_scratch) then start as NaN, so a
# program that skips part of its writes fails a comparison instead of passing
# on leftover memory.
POISON = False


def empty(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """torch.empty, or NaN-filled under POISON (tests): a buffer the kernels
    write completely before anything reads it (shape: a tuple or an int, as
    the replays of recorded scratch buffers pass it; integer buffers are not
    poisoned, having no NaN)."""
    if POISON and dtype.is_floating_point:
        return torch.full((shape,) if isinstance(shape, int) else shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def empty_like(t: torch.Tensor) -> torch.Tensor:
    """torch.empty_like (t's layout), or NaN-filled under POISON (tests)."""
    return torch.full_like(t, float("nan")) if POISON else torch.empty_like(t)


def _scratch(shape, dtype: torch.dtype, device, zeroed: bool) -> torch.Tensor:
    make = torch.zeros if zeroed else empty
    rec = _RECORD.get()
    if rec is None:
        return make(shape, dtype=dtype, device=device)
    rec.quiet = True
    try:
        t = make(shape, dtype=dtype, device=device)
    finally:
        rec.quiet = False
    rec.scratch.append(t)
    rec.zeroed.append(zeroed)
    return t


def note(name: str, value: Any) -> None:
    """Tell an active recording (its ``notes``) something its caller needs to
    replay it, e.g. the size of a buffer that each replay must pass as a role
    (the decode kernel's split counters); nothing outside a recording."""
    rec = _RECORD.get()
    if rec is not None:
        rec.notes[name] = value


def not_replayable() -> None:
    """Tell an active recording that the block launches in a way it cannot see."""
    rec = _RECORD.get()
    if rec is not None:
        rec.broken = True


class _Step:
    """One launch of a Replay: the compiled kernel, its grid, and its arguments
    with slots for the roles' tensors (pointers) and descriptors."""

    __slots__ = ("run", "compiled", "grid", "direct", "tmpl", "ptr_slots", "desc_slots")

    @classmethod
    def build(cls, run: "FastRun", entry: _Entry, params: tuple, grid: tuple, ptrs: List[int]) -> Optional["_Step"]:
        role_of: Dict[int, int] = {}
        for j, p in enumerate(ptrs):
            role_of[p] = -1 if p in role_of else j  # -1: two roles at one address, ambiguous
        direct = entry.direct
        step = cls()
        step.run, step.compiled, step.grid, step.direct = run, entry.compiled, grid, direct
        tmpl: List[Any] = []
        ptr_slots, desc_slots = [], []
        for a in params:
            if isinstance(a, torch.Tensor):
                role = role_of.get(a.data_ptr(), -1)
                if role < 0:
                    return None
                ptr_slots.append((len(tmpl), role))
                tmpl.append(None)
            elif _GluonDescriptor is not None and isinstance(a, _GluonDescriptor):
                role = role_of.get(a.base.data_ptr(), -1)
                if role < 0 or direct is None:
                    return None
                j = len(desc_slots)
                meta = direct.metas[j]
                desc = (next(_UIDS), tuple(a.shape), tuple(a.strides), a.padding, meta)
                width = len(_tma_args((desc[0], ptrs[role]), ptrs[role], *desc[1:]))
                desc_slots.append((len(tmpl), len(tmpl) + width, role, desc))
                tmpl.extend([None] * width)
            elif type(a) in _SCALAR_TYPES:
                tmpl.append(a)
            else:
                return None
        step.tmpl, step.ptr_slots, step.desc_slots = tmpl, tuple(ptr_slots), tuple(desc_slots)
        return step

    def launch(self, stream, roles, ptrs) -> None:
        args = self.tmpl.copy()
        direct = self.direct
        if direct is not None:  # addresses as ints: the launcher takes them as they are
            for i, role in self.ptr_slots:
                args[i] = ptrs[role]
            for i, end, role, (uid, shape, strides, padding, meta) in self.desc_slots:
                ptr = ptrs[role]
                hit = _TMA_CACHE.get((uid, ptr))
                args[i:end] = hit if hit is not None else _tma_args((uid, ptr), ptr, shape, strides, padding, meta)
            direct.launch(self.grid, stream, self.compiled, args)
            return
        for i, role in self.ptr_slots:
            args[i] = roles[role]
        compiled = self.compiled
        grid = self.grid
        compiled.run(grid[0], grid[1], grid[2], stream, compiled.function, compiled.packed_metadata,
                     None, None, None, *args)


class Replay:
    """Launches recorded once, repeated with other tensors in the same roles:
    ``replay(roles)`` launches and returns True, or declines and returns False
    (module doc).  The caller guarantees that the roles have the dtypes,
    shapes and strides of the recorded ones (a call plan's signature)."""

    def __init__(self, steps: List[_Step], device, aligned: List[bool], scratch: Sequence[tuple] = (),
                 zeroed: Sequence[bool] = ()):
        self.steps = steps
        self.scratch = tuple(scratch)  # (numel, dtype) of each scratch buffer of the recording
        self.makers = tuple(torch.zeros if z else empty for z in (tuple(zeroed) or (True,) * len(scratch)))
        self.kernels = [step.run.kernel for step in steps]
        self.device = device
        self.aligned = aligned
        self.all_aligned = all(aligned)
        self.debug = _knobs.runtime.debug
        self.instrumentation = _knobs.compilation.instrumentation_mode

    def __call__(self, roles: Sequence[torch.Tensor]) -> bool:
        if not ENABLED or _COMPILE_ONLY.get() is not None or _RECORD.get() is not None:
            return False
        ptrs = [t.data_ptr() for t in roles]
        if self.all_aligned:
            if functools.reduce(operator.or_, ptrs) & 15:
                return False
        elif [not p & 15 for p in ptrs] != self.aligned:
            return False
        runtime = _knobs.runtime
        enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
        if ((enter is not None and (type(enter) is not _HookChain or enter.calls))
                or (leave is not None and (type(leave) is not _HookChain or leave.calls))
                or runtime.debug != self.debug
                or _knobs.compilation.instrumentation_mode != self.instrumentation):
            return False
        for kernel in self.kernels:
            if kernel.pre_run_hooks:
                return False
        device = _driver.active.get_current_device()
        if device != self.device:
            return False
        stream = _driver.active.get_current_stream(device)
        if self.scratch:  # fresh buffers, alive until the launches are queued (stream-ordered reuse)
            extra = [make(n, dtype=dt, device=roles[0].device) for make, (n, dt) in zip(self.makers, self.scratch)]
            roles = tuple(roles) + tuple(extra)
            ptrs = ptrs + [t.data_ptr() for t in extra]
        for step in self.steps:
            step.launch(stream, roles, ptrs)
        return True


def build_launcher(compiled) -> None:
    """Build (or find in Triton's cache) the host launcher of a compiled kernel
    without loading the kernel: with Triton 3.6 a C extension compiled by the
    system compiler per kernel signature (about half a second), otherwise done
    at its first launch.  No CUDA call; the launch then finds it in the cache."""
    if getattr(compiled, "module", None) is None and hasattr(compiled, "src"):
        _driver.active.launcher_cls(compiled.src, compiled.metadata)


__all__ = ["ENV_FAST_LAUNCH", "Recording", "Replay", "build_launcher", "compile_only", "compile_only_device",
           "empty_scratch", "enabled", "fast_run", "install", "not_replayable", "note", "recording", "zeroed_scratch"]
