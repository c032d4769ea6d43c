"""The tests' helpers live in flashattn_triton.testing (shared with the self-check
and the benchmarks); this module re-exports them for the test files."""

import os

import pytest

from flashattn_triton.testing import *  # noqa: F401,F403
from flashattn_triton.testing import DTYPES, assert_close, assert_rel, leaf, make_qkv, rand  # noqa: F401


# Where the kernels run (conftest.py): the GPU with FLASHATTN_TRITON_TEST_DEVICE=cuda,
# else the CPU through Triton's interpreter, about 1000x slower per case.
ON_GPU = os.environ.get("FLASHATTN_TRITON_TEST_DEVICE", "cpu") == "cuda"


def cpu_covering(cases, keep, dims):
    """The parametrize list of a grid test: every case of ``cases``
    (pytest.param objects) on the GPU; on the CPU the cases whose values
    ``keep(*values)`` accepts.  ``dims`` names the dimensions the test
    specifies (name -> function of a case's values): the CPU subset must
    meet every value of each and every pair of values of two of them that
    the whole list meets (a pairwise covering), else collection fails with
    the pairs it lost.  Gives the full list on the GPU, so GPU coverage is
    the grid itself."""
    full = [tuple(c.values) for c in cases]
    kept = [c for c in cases if keep(*c.values)]
    missing = sorted(_value_pairs(full, dims) - _value_pairs([tuple(c.values) for c in kept], dims), key=str)
    if missing:
        raise ValueError(f"the CPU subset lost {len(missing)} pairs of values, e.g. {missing[:5]}")
    return list(cases) if ON_GPU else kept


def _value_pairs(cases, dims) -> set:
    """Every (dim, value) and every pair of (dim, value) of two dims that one of ``cases`` meets."""
    pairs = set()
    names = list(dims)
    for values in cases:
        point = [(name, repr(dims[name](*values))) for name in names]
        pairs.update((p,) for p in point)
        pairs.update((a, b) for i, a in enumerate(point) for b in point[i + 1:])
    return pairs


def _language_namespaces():
    import triton.language as tl
    return (tl, tl.core, tl.math, tl.tensor, tl.core.tensor_descriptor_base)


# triton.language as imported, before any interpreted kernel ran (conftest
# imports this module first): Triton's interpreter patches these namespaces
# while it runs a kernel and does not always put everything back (3.9: the
# tensor class's operators and triton.language.core's builtins stay patched
# after an interpreted run), which breaks a later compile for a real target
# in the same process (tests/test_fastlaunch.py).
_LANGUAGE = [(space, dict(vars(space))) for space in _language_namespaces()]


def restore_language() -> None:
    """Put triton.language back as it was imported (_LANGUAGE)."""
    for space, attrs in _LANGUAGE:
        for name in [n for n in vars(space) if n not in attrs]:
            delattr(space, name)
        for name, value in attrs.items():
            if vars(space).get(name) is not value:
                setattr(space, name, value)


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


def hopper_gpu_reason() -> str:
    """Why the Hopper tier's GPU tests cannot run here ('' if they can): they
    need FLASHATTN_TRITON_TEST_DEVICE=cuda, an sm_90 GPU and a Triton whose
    Gluon API the tier supports."""
    import torch
    from flashattn_triton.kernels import hopper
    if os.environ.get("FLASHATTN_TRITON_TEST_DEVICE", "cpu") != "cuda" or not torch.cuda.is_available():
        return "needs FLASHATTN_TRITON_TEST_DEVICE=cuda and a GPU"
    if torch.cuda.get_device_capability() != (9, 0):
        return "needs an sm_90 GPU"
    if not hopper.AVAILABLE:
        return f"Hopper tier unavailable: {hopper.REASON}"
    return ""


def check_varlen(lens_q, lens_k, h_q, h_kv, d, causal, dtype, device, window=(-1, -1), d_v=None, grads=True):
    """flash_attn_varlen_func over sequences of lengths lens_q / lens_k
    against per-sequence float64 references: out and LSE within 2x, and with
    grads dq, dk, dv within 3x PyTorch's error in the input dtype."""
    import torch
    from flashattn_triton import flash_attn_varlen_func
    from flashattn_triton.testing import random_cu_seqlens, varlen_attention_ref
    cu_q, cu_k = random_cu_seqlens(lens_q, device), random_cu_seqlens(lens_k, device)
    total_q, total_k = sum(lens_q), sum(lens_k)
    q = rand((total_q, h_q, d), dtype, device)
    k = rand((total_k, h_kv, d), dtype, device)
    v = rand((total_k, h_kv, d_v or d), dtype, device)
    do = rand((total_q, h_q, d_v or d), dtype, device)
    dlse = rand((h_q, total_q), torch.float32, device)
    max_q, max_k = max(max(lens_q), 1), max(max(lens_k), 1)

    def run(fn, inputs):
        out, lse = fn(*inputs)
        if not grads:
            return out.detach(), lse.detach(), ()
        loss = (out.float() * do.float()).sum() + (torch.where(torch.isinf(lse), 0.0, lse).float() * dlse).sum()
        return out.detach(), lse.detach(), torch.autograd.grad(loss, inputs)

    got = run(lambda *t: flash_attn_varlen_func(*t, cu_q, cu_k, max_q, max_k, causal=causal,
                                                window_size=window, return_lse=True),
              [leaf(t) for t in (q, k, v)])
    ref = run(lambda *t: varlen_attention_ref(*t, cu_q, cu_k, causal, window_size=window),
              [leaf(t, torch.float64) for t in (q, k, v)])
    base = run(lambda *t: varlen_attention_ref(*t, cu_q, cu_k, causal, dtype=dtype, window_size=window),
               [leaf(t) for t in (q, k, v)])
    assert_close("out", got[0], ref[0], base[0], 2.0, dtype)
    assert_close("lse", got[1], ref[1], base[1], 2.0, torch.float32)
    for name, g, r, b in zip(("dq", "dk", "dv"), got[2], ref[2], base[2]):
        assert_close(name, g, r, b, 3.0, dtype)


def check_nan_isolation(lens, poisoned, h_q, h_kv, d, dtype, device, causal, window=(-1, -1)):
    """flash_attn_varlen_func over sequences of lengths ``lens`` with NaN in
    every row of q, k, v and dout of the sequences numbered in ``poisoned``:
    those stay NaN in the float64 reference, and every other sequence's out,
    LSE (2x PyTorch's error) and dq, dk, dv (3x) match the reference."""
    import torch
    from flashattn_triton import flash_attn_varlen_func
    from flashattn_triton.testing import random_cu_seqlens, varlen_attention_ref
    cu = random_cu_seqlens(lens, device)
    total = sum(lens)
    q, k, v = (rand((total, h_q if i == 0 else h_kv, d), dtype, device) for i in range(3))
    do = rand((total, h_q, d), dtype, device)
    nan_rows = torch.zeros(total, dtype=torch.bool, device=device)
    for b in poisoned:
        nan_rows[sum(lens[:b]):sum(lens[:b + 1])] = True
    for t in (q, k, v, do):
        t[nan_rows] = float("nan")
    keep = ~nan_rows

    def run(fn, inputs):
        out, lse = fn(*inputs)
        return out.detach(), lse.detach(), torch.autograd.grad(out, inputs, grad_outputs=do.to(out.dtype))

    n = max(lens)
    got = run(lambda *t: flash_attn_varlen_func(*t, cu, cu, n, n, causal=causal, window_size=window,
                                                return_lse=True), [leaf(t) for t in (q, k, v)])
    ref = run(lambda *t: varlen_attention_ref(*t, cu, cu, causal, window_size=window),
              [leaf(t, torch.float64) for t in (q, k, v)])
    base = run(lambda *t: varlen_attention_ref(*t, cu, cu, causal, dtype=dtype, window_size=window),
               [leaf(t) for t in (q, k, v)])
    assert torch.isnan(ref[0][nan_rows]).all()  # the poisoned sequences themselves are NaN
    assert_close("out", got[0][keep], ref[0][keep], base[0][keep], 2.0, dtype)
    assert_close("lse", got[1][:, keep], ref[1][:, keep], base[1][:, keep], 2.0, torch.float32)
    for name, g, r, b in zip(("dq", "dk", "dv"), got[2], ref[2], base[2]):
        assert_close(name, g[keep], r[keep], b[keep], 3.0, dtype)


def hopper_module(name: str, module_level: bool = False):
    """flashattn_triton.kernels.hopper.<name>, or a skip of the test (of the
    test module with module_level) where that Gluon module does not import:
    Triton releases whose Gluon API lacks what it uses (3.4), on which the
    library runs the portable kernels (kernels/hopper/__init__.py)."""
    import importlib

    import pytest
    import triton
    try:
        return importlib.import_module(f"flashattn_triton.kernels.hopper.{name}")
    except Exception as exc:  # noqa: BLE001 - any import problem: the tier is not there
        pytest.skip(f"kernels/hopper/{name}.py does not import with Triton {triton.__version__}: "
                    f"{type(exc).__name__}: {exc}", allow_module_level=module_level)


def fake_launch(script: str, timeout: int = 600) -> str:
    """Run ``script`` (python -c) in a subprocess without Triton's
    interpreter (its triton.jit functions do not compile), with this tests
    folder as argv[1] and the repository as working directory, as the
    fake-CUDA-driver launch tests do (tests/fake_cuda.py); returns its stdout
    and fails the test with its stderr if it exits non-zero."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, TRITON_INTERPRET="0")
    tests = os.path.dirname(os.path.abspath(__file__))
    res = subprocess.run([sys.executable, "-c", script, tests], capture_output=True, text=True, env=env,
                         timeout=timeout, cwd=os.path.dirname(tests))
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def window_shifts(case):
    """(causal shift or None, window (left, wshift)) of a WINDOW_CASES entry
    (tests/test_hopper.py, tests/test_hopper_bwd.py: batch, Hq, Hkv, Nq, Nk,
    "br" / "tl" / None, left, layout):
    flash-attn's window around the bottom-right diagonal Nk - Nq (top-left: 0)."""
    _, _, _, nq, nk, causal, left, _ = case
    wshift = 0 if causal == "tl" else nk - nq
    return (None if causal is None else wshift), (left, wshift)


def forward_tier_calls(monkeypatch, env, opt_in, *, portable, window=(-1, -1), softcap=0.0, attn_bias=None,
                       dropout_p=0.0, seed=None, philox_offset=0, n_q=300, n_k=500, h_kv=2):
    """ops._fwd_into of a dense call (B = 1, H = 2, d = 64, CPU tensors; h_kv KV heads) with
    both forward tiers stubbed and the Hopper tier made available; the
    switch ``env`` set to ``opt_in`` (None: unset).  Returns the calls, each
    ("portable", portable(mods)) or ("hopper", the arguments after the scale,
    the keywords)."""
    import torch
    from flashattn_triton import _dispatch, ops
    monkeypatch.setattr(_dispatch, "_hopper_tier", lambda device: True)
    monkeypatch.setattr(_dispatch, "HOPPER_FWD_SHORT", {})  # (the length rule: test_hopper.py)
    monkeypatch.setattr(ops, "use_triton", lambda t: True)
    calls: list = []
    monkeypatch.setattr(ops._kernels, "forward", lambda *a, **kw: calls.append(("portable", portable(kw["mods"]))))
    monkeypatch.setattr(ops._kernels, "hopper_forward", lambda *a, **kw: calls.append(("hopper", a[6:], kw)) or True)
    if opt_in is None:
        monkeypatch.delenv(env, raising=False)
    else:
        monkeypatch.setenv(env, opt_in)
    q = torch.randn(1, n_q, 2, 64, dtype=torch.bfloat16)
    k = torch.randn(1, n_k, h_kv, 64, dtype=torch.bfloat16)
    out, lse = torch.empty_like(q), torch.empty(1, 2, n_q)
    ops._fwd_into(q, k, k, out, lse, None, None, n_q, n_k, 0.125, window[0], window[1], True,
                  softcap, None, None, attn_bias, dropout_p, seed, philox_offset=philox_offset)
    return calls


# The two implementations of the dense variants, for the `path` fixture (import it
# into a test module): the Triton kernels and the blockwise CPU path.
PATHS = ["kernels", "blockwise"]


@pytest.fixture(params=PATHS)
def path(request, device, monkeypatch):
    """kernels: Triton (interpreter on CPU); blockwise: the PyTorch CPU path."""
    if request.param == "blockwise":
        if device.type != "cpu":
            pytest.skip("the blockwise path serves CPU tensors")
        import flashattn_triton._dispatch as dispatch
        import flashattn_triton.reference as reference
        monkeypatch.setattr(dispatch, "INTERPRET", False)
        monkeypatch.setattr(reference, "_CPU_BLOCK", 32)  # several tiles at test sizes
    return request.param
