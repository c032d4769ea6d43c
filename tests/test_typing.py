"""Every public function and method carries complete type hints (mypy checks
them in CI: pyproject [tool.mypy], .ci/run); a new public name without hints
fails here, on any machine, without mypy installed."""

import importlib
import inspect

import pytest

PUBLIC_MODULES = ["flashattn_triton", "flashattn_triton.nn", "flashattn_triton.integrations.transformers",
                  "flashattn_triton.distributed", "flashattn_triton.ops"]
METHODS = ("__init__", "forward", "rotate", "attend")


def _public_callables():
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if inspect.isclass(obj):
                for method in METHODS:
                    if method in vars(obj):
                        yield f"{name}.{attr}.{method}", vars(obj)[method]
            elif inspect.isfunction(obj):  # not constants, nor torch.library custom-op objects
                yield f"{name}.{attr}", obj


CALLABLES = dict(_public_callables())


def test_the_public_surface_is_found():
    assert {"flashattn_triton.flash_attn_func", "flashattn_triton.flash_attn_with_kvcache",
            "flashattn_triton.nn.MultiheadAttention.forward", "flashattn_triton.distributed.ring_flash_attn_func",
            "flashattn_triton.integrations.transformers.register", "flashattn_triton.ops.flash_bwd"} <= set(CALLABLES)


@pytest.mark.parametrize("name", sorted(CALLABLES))
def test_public_callable_is_annotated(name):
    sig = inspect.signature(CALLABLES[name])
    missing = [p.name for p in sig.parameters.values()
               if p.annotation is inspect.Parameter.empty and p.name not in ("self", "cls")
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert not missing, f"{name}: parameters without a type hint: {missing}"
    assert sig.return_annotation is not inspect.Signature.empty, f"{name}: no return type hint"
