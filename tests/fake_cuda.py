"""A stand-in for Triton's CUDA driver, for host-side work without a GPU.

With ``FakeCudaDriver`` active, ``kernel[grid](...)`` on CPU tensors runs
Triton's real JIT path (binding, specialization, cache key, an ahead-of-time
compile for sm_90 with the bundled ptxas) up to the launch, which it records
instead of running.  Used by the host-overhead profile
(benchmarks/profile_host.py) and by the launch fast-path tests.  Never
imported by the library.
"""

from __future__ import annotations

import collections
import contextlib

import torch

from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver


class _Utils:
    def get_device_properties(self, device):
        # H200 values that the runtime reads (shared memory per block, SMs).
        return {"max_shared_mem": 232448, "multiprocessor_count": 132, "max_num_regs": 65536,
                "warpSize": 32, "sm_clock_rate": 1980000, "mem_clock_rate": 3201000, "mem_bus_width": 5120}

    def load_binary(self, name, kernel, shared, device):
        # (module, function, n_regs, n_spills, n_max_threads)
        return 1, 1, 0, 0, 1024

    def fill_tma_descriptor(self, *args):
        return ("tma", args)


class FakeLauncher:
    """Records launches: (grid, stream, args after the launch metadata).

    Shaped like Triton 3.6's CudaLauncher where that is the installed
    version: ``launch`` is the (recording) C entry point, wrapped by Triton's
    own ``wrap_handle_tensordesc`` when the kernel takes tensor descriptors,
    so their expansion (fill_tma_descriptor, faked above) runs as on a GPU and
    the recorded arguments are what the C launcher would get.  Like the C
    launcher, it calls the launch enter hook when one is passed."""

    def __init__(self, src, metadata):
        self.src = src
        self.launches = collections.deque(maxlen=64)
        self.launch = self._launch
        self.global_scratch_size = getattr(metadata, "global_scratch_size", 0)
        self.profile_scratch_size = getattr(metadata, "profile_scratch_size", 0)
        self.launch_cooperative_grid = getattr(metadata, "launch_cooperative_grid", False)
        self.launch_pdl = getattr(metadata, "launch_pdl", False)
        signature = dict(getattr(src, "signature", {}))
        # the type of each recorded argument (Triton's signature, descriptors expanded as the wrapper does)
        self.kinds = list(signature.values())
        if _WRAP is not None and signature:
            metas = getattr(metadata, "tensordesc_meta", None)
            self.launch = _WRAP(self._launch, signature, metas)
            self.kinds = _expanded_kinds(self.kinds, metas)

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        # args: packed metadata, launch metadata, enter hook, exit hook, kernel args
        self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, self.launch_pdl,
                    None, None, *args)

    def _launch(self, gridX, gridY, gridZ, stream, function, cooperative, pdl, global_scratch, profile_scratch,
                packed_metadata, launch_metadata, enter_hook, exit_hook, *args):
        if enter_hook is not None:
            enter_hook(launch_metadata)
        if RECORD:
            self.launches.append(((gridX, gridY, gridZ), stream, args))
            LAUNCHES.append((self, (gridX, gridY, gridZ), args))
        if exit_hook is not None:
            exit_hook(launch_metadata)


def _expanded_kinds(kinds, metas):
    out, j = [], 0
    for kind in kinds:
        if not (isinstance(kind, str) and kind.startswith("tensordesc")):
            out.append(kind)
            continue
        meta = metas[j] if metas else None
        j += 1
        ndim = kind[kind.index("[") + 1:kind.index("]")].count(",") + 1
        if meta is None:
            out += ["*desc"] + ["i64"] * (2 * ndim) + ["i1"]
        else:
            out.append("nvTmaDesc")
        out += ["i32"] * ndim + ["i64"] * ndim
    return out


try:  # Triton 3.6's launcher layout (the fast path calls its C entry point directly there)
    import triton
    if triton.__version__.startswith("3.6"):
        from triton.backends.nvidia.driver import wrap_handle_tensordesc as _WRAP
    else:
        _WRAP = None
except ImportError:
    _WRAP = None


# False: launches are not recorded (host-time measurements: a launch costs a call).
RECORD = True

# The latest recorded launches in order: (launcher, grid, kernel args); one
# launcher per compiled kernel, so the launcher tells which specialization ran.
LAUNCHES = collections.deque(maxlen=256)


class FakeCudaDriver:
    """Enough of Triton's GPU driver for the JIT to compile (for sm_90) and
    'launch' on CPU tensors."""

    def __init__(self, capability: int = 90):
        self.target = GPUTarget("cuda", capability, 32)
        self.utils = _Utils()
        self.launcher_cls = FakeLauncher

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def set_current_device(self, device):
        pass

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        import torch
        return torch.device("cpu")

    def map_python_to_cpp_type(self, ty):
        return ty

    def get_device_interface(self):
        raise RuntimeError("no device interface under the fake driver")

    def get_benchmarker(self):
        raise RuntimeError("no benchmarker under the fake driver")

    @staticmethod
    def is_active():
        return False


@contextlib.contextmanager
def fake_cuda(capability: int = 90):
    """Make a FakeCudaDriver Triton's active driver inside the block."""
    previous = driver._active if hasattr(driver, "_active") else None
    fake = FakeCudaDriver(capability)
    driver.set_active(fake)
    try:
        yield fake
    finally:
        if previous is None:
            driver._active = None
        else:
            driver.set_active(previous)


def describe(args, kinds, names: dict) -> list:
    """A recorded launch's arguments for comparing two calls: scalars as
    (type name, value); pointers (tensors, or ints where the launcher's
    signature ``kinds`` says pointer) as ("ptr", name): names maps an
    address to its role, and an address first seen gets n<i> in order of
    first use (the buffers a call makes itself)."""
    out = []
    for a, kind in zip(args, kinds or [None] * len(args)):
        if isinstance(a, torch.Tensor):
            a = a.data_ptr()
        elif not (isinstance(kind, str) and kind.startswith("*") and type(a) is int):
            out.append((type(a).__name__, a))
            continue
        out.append(("ptr", names.setdefault(a, f"n{len(names)}")))
    return out


def count_replays() -> list:
    """Patch fastlaunch.Replay.__call__ to append (replay, launched) to the
    returned list on every call (the launch-test scripts' subprocesses)."""
    from flashattn_triton.kernels import fastlaunch
    calls: list = []
    real = fastlaunch.Replay.__call__

    def counting(self, roles):
        ok = real(self, roles)
        calls.append((self, ok))
        return ok

    fastlaunch.Replay.__call__ = counting
    return calls
