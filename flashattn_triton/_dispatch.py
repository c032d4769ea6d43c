"""Which implementation runs a call.

* CUDA tensors: the Triton kernels.  On Hopper (sm_90) the forward may take
  the Hopper tier (kernels/hopper/) where it supports the case; elsewhere, and
  whenever it declines, the portable kernels run.
* CPU tensors: the portable kernels in Triton's interpreter when
  TRITON_INTERPRET=1 (set by the tests, never by the library), else the
  blockwise PyTorch path of reference.py.

FLASHATTN_TRITON_BACKEND=portable|hopper|auto (default auto) forces a tier,
for tests and benchmarks; "hopper" raises if the Hopper tier cannot run.
"""

from __future__ import annotations

import functools
import os

import torch

from .kernels.launch import INTERPRET, env_value

ENV_BACKEND = "FLASHATTN_TRITON_BACKEND"
BACKENDS = ("auto", "portable", "hopper")


def backend() -> str:
    value = env_value(ENV_BACKEND)
    name = "auto" if value is None else value.lower()
    if name not in BACKENDS:
        raise ValueError(f"{ENV_BACKEND}={name!r}: expected one of {', '.join(BACKENDS)}")
    return name


def use_triton(t: torch.Tensor) -> bool:
    """CUDA tensors, and CPU tensors when Triton's interpreter is enabled."""
    return t.is_cuda or (INTERPRET and t.device.type == "cpu")


@functools.lru_cache(maxsize=None)
def hopper_available(device_index: int) -> bool:
    if INTERPRET or torch.cuda.get_device_capability(device_index) != (9, 0):
        return False
    try:
        from .kernels.hopper import AVAILABLE
    except Exception:  # noqa: BLE001 - any import problem means: not available
        return False
    return bool(AVAILABLE)


ENV_HOPPER_BWD = "FLASHATTN_TRITON_HOPPER_BWD"  # "0": the portable backward even where Hopper runs


def use_hopper_backward(device: torch.device, window, deterministic: bool) -> bool:
    """Whether to try the Hopper backward (kernels/hopper/bwd.py; it may still
    decline a case) for tensors on ``device`` (the real device also for the
    backward prefetch's meta tensors): the Hopper tier is chosen (as for the
    forward), the call is not deterministic (its dQ adds arrive in a varying
    order), the mask is none or causal, and FLASHATTN_TRITON_HOPPER_BWD is not "0"."""
    if deterministic or torch.are_deterministic_algorithms_enabled():
        return False
    if os.environ.get(ENV_HOPPER_BWD, "1") == "0":
        return False
    return _hopper_tier(device) and window[0] < 0 and window[1] in (-1, 0)


def use_hopper_forward(q, k, v, window, causal_offset) -> bool:
    """Whether to try the Hopper forward (it may still decline a case)."""
    return _hopper_tier(q.device) and window[0] < 0 and window[1] in (-1, 0)


def _hopper_tier(device: torch.device) -> bool:
    """The Hopper tier is chosen for this device (FLASHATTN_TRITON_BACKEND) and
    available; raises if it is forced but unavailable."""
    choice = backend()
    if choice == "portable" or device.type != "cuda":
        return False
    ok = hopper_available(device.index if device.index is not None else torch.cuda.current_device())
    if choice == "hopper" and not ok:
        raise RuntimeError(f"{ENV_BACKEND}=hopper but the Hopper tier is not available on this "
                           "GPU / Triton version")
    return ok
