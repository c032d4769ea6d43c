"""Backward prefetch: compile the backward's kernels while the forward runs.

The first forward of a new signature (_key) that needs gradients (eager mode, CUDA)
starts a background thread that runs the backward's host code on meta
tensors shaped, strided and aligned like the real ones (``dout`` predicted
contiguous, as autograd usually delivers it, and ``dlse`` present, as the
eager Function materializes it) in kernels/fastlaunch.py's
compile-only mode: every launch becomes a compile (or a load from Triton's
disk cache) of exactly the specialization the real backward will launch,
with the same config.  Inside, Triton's asynchronous compile mode puts each
kernel's compile on its own thread: Triton's MLIR passes, LLVM and ptxas
release the GIL, so the backward kernels and the forward kernel (compiled
meanwhile by the calling thread) build in parallel.  Then each kernel's host
launcher is built (Triton 3.6 compiles a small C extension per kernel
signature with the system compiler, about half a second each).  The first backward
waits for the prefetch to finish (it would otherwise compile the same
kernels a second time) and then finds them in Triton's cache.

Nothing here changes a result: the prefetch only fills Triton's kernel
cache, and a kernel it did not build (an unforeseen layout of ``dout``, a
failed compile, a prefetch still running after WAIT_S seconds) is compiled
by the backward itself as before.  Compiling does not call the CUDA driver,
so a CUDA graph being captured meanwhile is unaffected.  Softcap calls are
not prefetched (their fast-tanh switch depends on the device, which the meta
tensors cannot show).  FLASHATTN_TRITON_PREFETCH_BWD=0 turns it off.

At interpreter exit a prefetch still running is waited for (at most WAIT_S;
_wait_at_exit): ended mid-compile, the process would abort (see there).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
from typing import Any, List, Sequence

import torch

from ._params import lse_shape
from .kernels import fastlaunch
from .kernels.launch import autotune_enabled, env_switch

ENV_PREFETCH = "FLASHATTN_TRITON_PREFETCH_BWD"  # "0": off
ENV_WARM_KEY = "FLASHATTN_TRITON_WARM_KEY"  # "0": off
MAX_KEYS = 256  # distinct call signatures prefetched per process
WAIT_S = 120.0  # longest the backward waits for a prefetch

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_seen: set = set()
_pending: List[threading.Event] = []
_PREFETCH_THREAD = "flashattn-triton-prefetch"  # thread names (_wait_at_exit joins them)
_COMPILE_THREAD = "flashattn-triton-compile"

try:
    from triton.runtime._async_compile import AsyncCompileMode
except ImportError:  # pragma: no cover - Triton without asynchronous compiles: one thread
    AsyncCompileMode = None


def _after_fork_in_child() -> None:
    # The prefetch threads do not exist in a forked child: nothing to wait for.
    global _lock
    _lock = threading.Lock()
    _pending.clear()
    _seen.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _hash_triton() -> None:
    try:
        from triton.runtime.cache import triton_key
        triton_key()
    except Exception:  # noqa: BLE001 - another Triton layout: the first compile computes it as before
        _log.debug("Triton key warm-up failed", exc_info=True)


def start_key_warmup() -> bool:
    """At import: compute Triton's compiler cache key in a background thread.

    Triton's first kernel lookup in a process hashes its own compiler sources
    and its multi-hundred-MB native library (``triton_key``, cached per
    process): about 0.3 s of a warm-cache first call's 0.4 s host time (CPU
    emulation, benchmarks/profile_host.py's driver stand-in).  Hashing
    releases the GIL, so it runs while the user builds the model.  Only
    with a GPU visible and outside the interpreter (nothing is compiled
    otherwise); FLASHATTN_TRITON_WARM_KEY=0 turns it off.  Returns whether a
    thread was started."""
    if env_switch(ENV_WARM_KEY) is False or os.environ.get("TRITON_INTERPRET", "0") == "1":
        return False
    if not torch.cuda.is_available():
        return False
    threading.Thread(target=_hash_triton, name="flashattn-triton-key", daemon=True).start()
    return True


def enabled() -> bool:
    switch = env_switch(ENV_PREFETCH)  # (checked on every machine)
    return fastlaunch.SUPPORTED and switch is not False and not autotune_enabled()


def _on_gpu(t: torch.Tensor) -> bool:
    return t.is_cuda  # benchmarks/profile_host.py --check replaces this to run on CPU


def pending() -> bool:
    return bool(_pending)


def wait_pending() -> None:
    """Block until every running prefetch is done (at most WAIT_S each)."""
    with _lock:
        events = list(_pending)
    for event in events:
        event.wait(WAIT_S)


# Option positions in the op's argument list after (q, k, v) (ops._OPTION_NAMES).
_SOFTCAP = 8
_DETERMINISTIC = 14
_CHUNK = 15


def _key(q, k, v, options):
    """The signature a prefetch is done once for: what picks the backward's
    kernels and configs (dtype, head dims, group size, length bucket, masks,
    which variants, deterministic: never the Hopper backward, chunked or
    not: its own kernels, MASK_CHUNK), not the exact
    shapes.  A later call of another shape whose strides or alignment happen
    to need other specializations compiles those on demand, as without the
    prefetch."""
    o = options
    varlen = o[0] is not None
    n = max(o[2], o[3]) if varlen else max(q.shape[-3], k.shape[-3])
    return (q.device, q.dtype, q.shape[-1], v.shape[-1], q.shape[-2] // max(k.shape[-2], 1),
            int(n).bit_length(), varlen, o[5], o[6], o[7],
            o[9] is None, o[10] is None, o[11] is None or (o[11].dtype, o[11].dim()), o[12] > 0,
            bool(o[_DETERMINISTIC]), len(o) > _CHUNK and bool(o[_CHUNK]))


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor with t's dtype, shape, strides and data_ptr() % 16."""
    elem = t.element_size()
    misaligned = t.data_ptr() % 16
    offset = misaligned // elem if misaligned % elem == 0 else 0
    extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0)
    base = torch.empty(offset + max(extent, 1), dtype=t.dtype, device="meta")
    return base.as_strided(t.shape, t.stride(), offset)


def _stand_ins(q, k, v, options, want_dbias: bool):
    """The backward op's arguments, as meta tensors (see the module doc)."""
    opts = [_meta_like(o) if isinstance(o, torch.Tensor) else o for o in options]
    varlen = opts[0] is not None
    out = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device="meta")
    lse = torch.empty(lse_shape(q, varlen, opts[11]), dtype=torch.float32, device="meta")
    # torch.empty, not empty_like: empty_like on meta tensors runs a Python
    # reference (torch._refs) whose first use imports sympy and the symbolic
    # shapes machinery, seconds of a first call (session 11 call 2).
    dout = torch.empty(out.shape, dtype=out.dtype, device="meta")
    # The eager Function materializes the gradient of an unused lse as zeros,
    # so the backward always gets a dlse (float32, laid out like lse).
    dlse = torch.empty(lse.shape, dtype=torch.float32, device="meta")
    return (dout, _meta_like(q), _meta_like(k), _meta_like(v), out, lse, dlse, *opts, want_dbias)


class _DaemonExecutor:
    """concurrent.futures-style submit() on daemon threads (no executor to
    shut down; a prefetch still running at exit is waited for by
    _wait_at_exit, which joins these threads too)."""

    def submit(self, fn, *args, **kwargs):
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run():
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiter
                future.set_exception(exc)

        threading.Thread(target=run, daemon=True, name=_COMPILE_THREAD).start()
        return future


def _finished(kernel):
    """The compiled kernel of a compile that the asynchronous mode ran, None if it failed."""
    if not hasattr(kernel, "result"):
        return kernel
    try:
        return kernel.result(ignore_errors=True)
    except Exception:  # noqa: BLE001 - e.g. asked again after a failure
        return None


def _run(bwd_impl, device: torch.device, args: Sequence[Any], done: threading.Event) -> None:
    try:
        executor = _DaemonExecutor()
        parallel = (AsyncCompileMode(executor, ignore_errors=True) if AsyncCompileMode is not None
                    else contextlib.nullcontext())
        on_device = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
        compiled: List[Any] = []
        with on_device:
            with fastlaunch.compile_only(device, compiled), parallel:
                bwd_impl(*args)
            # and their host launchers, also one thread each
            kernels = [_finished(k) for k in compiled]
            builds = [executor.submit(fastlaunch.build_launcher, k) for k in kernels if k is not None]
            for build in builds:
                build.exception()  # wait; a failed build is redone (and reported) at the launch
    except Exception as exc:  # noqa: BLE001 - the backward compiles on demand instead
        _log.debug("backward prefetch failed: %s: %s", type(exc).__name__, exc)
    finally:
        with _lock:
            if done in _pending:
                _pending.remove(done)
        done.set()


def _wait_at_exit() -> None:
    """atexit: wait for the prefetches still running.  CPython (3.12 here)
    ends a daemon thread that retakes the GIL after finalization has begun
    by unwinding its stack; a thread inside Triton's compiler (its MLIR
    passes release the GIL) is then unwound through C++ code that does not
    let the unwind pass, and the process aborts ("terminate called after
    throwing an instance of ''", "FATAL: exception not rethrown", exit
    status 134): seen on an H100 in session 58, a script that exited while
    a forward's prefetch still compiled the packed Hopper backward.  atexit
    callbacks run before that point, while the threads still run."""
    deadline = time.monotonic() + WAIT_S  # one bound for all of it
    with _lock:
        events = list(_pending)
    if events:
        _log.debug("waiting for %d backward prefetch(es) before exit", len(events))
    for event in events:
        event.wait(max(deadline - time.monotonic(), 0.0))
    # then for the threads themselves to end: one that has set its event but
    # not yet ended would be cut off the same way (seen on CPU, Triton 3.6);
    # listed after the waits, which the compile threads were started during
    for thread in threading.enumerate():
        if thread.name in (_PREFETCH_THREAD, _COMPILE_THREAD):
            thread.join(max(deadline - time.monotonic(), 0.0))


atexit.register(_wait_at_exit)  # (nothing to wait for, unless a prefetch started)


def maybe_prefetch(bwd_impl, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, options: Sequence[Any],
                   want_dbias: bool) -> None:
    """Start the prefetch for this call's backward unless one ran for its
    signature (_key) already.  bwd_impl: ops._attention_bwd_impl; options:
    all of the op's options (ops._OPTION_NAMES)."""
    if not _on_gpu(q) or options[_SOFTCAP]:
        return
    try:
        key = _key(q, k, v, options)
    except (TypeError, IndexError, AttributeError):
        return
    if key in _seen or len(_seen) >= MAX_KEYS or not enabled():
        return
    with _lock:
        if key in _seen:
            return
        _seen.add(key)
    try:
        args = _stand_ins(q, k, v, options, want_dbias)
    except Exception:  # noqa: BLE001 - an exotic layout: no prefetch
        return
    done = threading.Event()
    with _lock:
        _pending.append(done)
    threading.Thread(target=_run, args=(bwd_impl, q.device, args, done), daemon=True,
                     name=_PREFETCH_THREAD).start()


__all__ = ["ENV_PREFETCH", "ENV_WARM_KEY", "enabled", "maybe_prefetch", "pending", "start_key_warmup",
           "wait_pending"]
