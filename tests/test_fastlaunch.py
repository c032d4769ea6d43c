"""The launch fast path (kernels/fastlaunch.py) against Triton's own launch.

No GPU: tests/fake_cuda.py makes Triton compile for sm_90 (ptxas) and record
launches.  The kernels here are built as compiled JITFunctions directly (the
test session runs with TRITON_INTERPRET=1, under which triton.jit would give
interpreted ones).  Each call is launched once through Triton's path and once
through the fast path; both must launch the same compiled kernel (the same
specialization) with the same grid and arguments.
"""

import os
import subprocess
import sys
import threading

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction

from _utils import call_spy, restore_language
from fake_cuda import LAUNCHES, FakeLauncher, fake_cuda
from flashattn_triton.kernels import fastlaunch

if not fastlaunch._IMPORTED:  # (a Triton without the JIT internals the fast path mirrors: it is off there)
    pytest.skip(f"kernels/fastlaunch.py has no fast path with Triton {triton.__version__}", allow_module_level=True)


def _copy_rows(X, Y, stride_x, stride_y, n, scale, unit, flag, BLOCK: tl.constexpr, HAS_SCALE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs * stride_x * unit, mask=offs < n)
    if HAS_SCALE:
        x = x * scale
    if flag:
        x = x + 1
    tl.store(Y + offs * stride_y, x, mask=offs < n)


@pytest.fixture(scope="module")
def kernel():
    return JITFunction(_copy_rows)


@pytest.fixture(autouse=True)
def _language_as_imported():
    """These tests compile for a real target: start from triton.language as
    imported, whatever interpreted kernels ran before in this process."""
    restore_language()


@pytest.fixture
def fast(kernel, monkeypatch):
    """The kernel with a fresh fast path, enabled whatever the environment says."""
    run = fastlaunch.FastRun(kernel)
    monkeypatch.setattr(kernel, "run", run, raising=False)
    monkeypatch.setattr(fastlaunch, "ENABLED", True)
    with fake_cuda():
        yield run


def _launch_via(path, args, kwargs, grid):
    """(launcher object, grid, args) of the launch that `path` makes."""
    n = len(LAUNCHES)
    path(args, kwargs, grid)
    assert len(LAUNCHES) == n + 1, "expected exactly one launch"
    return LAUNCHES[-1]


def _both(fast, args, kwargs, grid=(4,)):
    """Launch through Triton's path, then twice through the fast path (record, then hit)."""
    plain = _launch_via(lambda a, k, g: fast.jit_run(*a, grid=g, warmup=False, **k), args, kwargs, grid)
    first = _launch_via(fast.launch, args, kwargs, grid)
    again = _launch_via(fast.launch, args, kwargs, grid)
    return plain, first, again


def _same(a, b):
    """Same compiled kernel (launcher object), grid and arguments (tensors by identity)."""
    assert a[0] is b[0], "a different compiled kernel (specialization) was launched"
    assert a[1] == b[1]
    assert len(a[2]) == len(b[2])
    for x, y in zip(a[2], b[2]):
        assert (x is y) if isinstance(x, torch.Tensor) else (x == y and type(x) is type(y)), (x, y)


def _args(x, y, stride_x=1, stride_y=16, n=64, scale=0.5, unit=1, flag=True):
    return (x, y, stride_x, stride_y, n, scale, unit, flag)


KW = dict(BLOCK=32, HAS_SCALE=True, num_warps=4)


def test_fast_path_launches_what_triton_launches(fast):
    x, y = torch.randn(256), torch.empty(256)
    plain, first, again = _both(fast, _args(x, y), KW)
    _same(plain, first)
    _same(plain, again)
    assert sum(len(lay.entries) for lay in fast.layouts.values() if lay) == 1


@pytest.mark.parametrize("change", [
    dict(stride_x=16),            # 1 -> 16: constexpr 1 vs divisible-by-16 specialization
    dict(stride_x=3),             # 1 -> 3: plain i32
    dict(n=48),                   # 64 -> 48: still 16-divisible
    dict(n=50),                   # not 16-divisible
    dict(unit=2),                 # constexpr 1 -> i32
    dict(flag=False),             # bool value
    dict(scale=1),                # float -> int: another type
    dict(n=2 ** 40),              # i32 -> i64
    "misaligned",                 # a pointer not 16-byte aligned
    "dtype",                      # another pointer type
    dict(_kw=dict(BLOCK=64)),     # another constexpr
    dict(_kw=dict(HAS_SCALE=False)),
    dict(_kw=dict(num_warps=8)),  # another launch option
])
def test_each_specialization_property_is_keyed(fast, change):
    """After a recorded call, a call that differs in one property Triton
    specializes on must launch Triton's kernel for it, never the recorded one."""
    x, y = torch.randn(256), torch.empty(256)
    base = _args(x, y)
    _both(fast, base, KW)
    kwargs = dict(KW)
    if change == "misaligned":
        args = _args(x[1:], y)
    elif change == "dtype":
        args = _args(x.double(), y.double())
    else:
        change = dict(change)
        kwargs.update(change.pop("_kw", {}))
        fields = dict(stride_x=1, stride_y=16, n=64, scale=0.5, unit=1, flag=True)
        fields.update(change)
        args = _args(x, y, **fields)
    plain, first, again = _both(fast, args, kwargs)
    _same(plain, first)
    _same(plain, again)
    # and the first signature still gets its own kernel
    plain0, fast0, _ = _both(fast, base, KW)
    _same(plain0, fast0)


def test_grid_callable_and_grid_reading_a_positional_argument(fast):
    x, y = torch.randn(256), torch.empty(256)
    by_meta = lambda meta: (triton.cdiv(64, meta["BLOCK"]),)  # noqa: E731
    plain, first, again = _both(fast, _args(x, y), KW, by_meta)
    _same(plain, again)
    assert again[1] == (2, 1, 1)
    by_arg = lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)  # noqa: E731
    plain, first, again = _both(fast, _args(x, y, n=96), KW, by_arg)
    _same(plain, again)
    assert again[1] == (3, 1, 1)


def test_falls_back_to_triton(fast, kernel, monkeypatch):
    """Unkeyable arguments, pre-run hooks and the switch take Triton's path."""
    calls = call_spy(monkeypatch, fast, "jit_run")
    x, y = torch.randn(256), torch.empty(256)

    class Int(int):
        pass

    for args in [_args(x, y, n=Int(64))] * 2:  # an int subclass: not keyed, always Triton's path
        calls.clear()
        fast.launch(args, KW, (4,))
        assert calls == [1]
    fast.launch(_args(x, y), KW, (4,))  # records
    calls.clear()
    fast.launch(_args(x, y), KW, (4,))
    assert calls == [], "a recorded signature must not go through Triton's path"
    monkeypatch.setattr(fastlaunch, "ENABLED", False)
    fast.launch(_args(x, y), KW, (4,))
    assert calls == [1]
    monkeypatch.setattr(fastlaunch, "ENABLED", True)
    monkeypatch.setattr(kernel, "pre_run_hooks", [lambda *a, **k: None])
    fast.launch(_args(x, y), KW, (4,))
    assert calls == [1, 1]


def test_compile_only_compiles_without_launching(fast, kernel):
    x, y = torch.randn(256), torch.empty(256)
    args = _args(x, y, n=80, stride_y=32)
    n = len(LAUNCHES)
    with fastlaunch.compile_only(torch.device("cuda", 0)):
        compiled = kernel[(4,)](*args, **KW)
    assert len(LAUNCHES) == n, "nothing may run while compiling only"
    assert compiled is not None and hasattr(compiled, "asm")
    plain = _launch_via(lambda a, k, g: fast.jit_run(*a, grid=g, warmup=False, **k), args, KW, (4,))
    assert plain[2][0] is x


def test_warmup_passes_through(fast, kernel):
    x, y = torch.randn(256), torch.empty(256)
    n = len(LAUNCHES)
    kernel.warmup(*_args(x, y), grid=(4,), **KW)
    assert len(LAUNCHES) == n


@pytest.mark.skipif(not fastlaunch.INTERPRET, reason="needs the interpreter session (CPU tests)")
def test_install_is_a_no_op_where_unsupported():
    interpreted = triton.jit(_copy_rows)  # interpreted in this session
    assert fastlaunch.install(interpreted) is interpreted
    assert fastlaunch.fast_run(interpreted) is None


# ---------------------------------------------------------------------------
# Backward prefetch (flashattn_triton/_prefetch.py)
# ---------------------------------------------------------------------------

def _cached(kernel):
    return set(kernel.device_caches[0][0]) if 0 in kernel.device_caches else set()


def test_prefetch_compiles_in_the_background_and_launches_nothing(fast, kernel):
    from flashattn_triton import _prefetch
    x, y = torch.randn(256), torch.empty(256)
    args = _args(x, y)
    kw1, kw2 = dict(KW, BLOCK=16, HAS_SCALE=False), dict(KW, BLOCK=128, HAS_SCALE=False)  # new to this module
    before, n_launches = _cached(kernel), len(LAUNCHES)

    def bwd_impl(*a):  # stands for ops._attention_bwd_impl
        kernel[(4,)](*a, **kw1)
        kernel[(4,)](*a, **kw2)  # a second kernel, compiled concurrently

    from triton.runtime.driver import driver
    launchers = []

    class CountingLauncher(FakeLauncher):
        def __init__(self, src, metadata):
            launchers.append(src)
            super().__init__(src, metadata)

    driver.active.launcher_cls = CountingLauncher
    done = threading.Event()
    _prefetch._pending.append(done)
    _prefetch._run(bwd_impl, torch.device("cpu"), args, done)
    assert done.is_set() and not _prefetch.pending()
    assert len(LAUNCHES) == n_launches, "a prefetch must not run anything"
    built = _cached(kernel) - before
    assert len(built) == 2
    assert len(launchers) == 2, "the prefetch builds each kernel's host launcher"
    fast.launch(args, kw1, (4,))
    fast.launch(args, kw2, (4,))
    assert len(LAUNCHES) == n_launches + 2
    assert _cached(kernel) - before == built, "the launches must find the prefetched kernels"


def test_prefetch_failures_are_swallowed(fast, kernel):
    from flashattn_triton import _prefetch

    def broken(*a):
        raise RuntimeError("boom")

    for impl in (broken, lambda *a: kernel[(4,)](*a, **dict(KW, BLOCK=3))):  # BLOCK=3: arange fails to build
        done = threading.Event()
        _prefetch._pending.append(done)
        _prefetch._run(impl, torch.device("cpu"), _args(torch.randn(256), torch.empty(256)), done)
        assert done.is_set() and not _prefetch.pending()
    _prefetch.wait_pending()  # nothing pending: returns at once


def test_prefetch_once_per_signature_and_switch(monkeypatch):
    from flashattn_triton import _prefetch
    monkeypatch.setattr(fastlaunch, "SUPPORTED", True)
    monkeypatch.setattr(_prefetch, "_on_gpu", lambda t: True)
    monkeypatch.setattr(_prefetch, "_seen", set())
    runs = []
    q = torch.randn(1, 16, 2, 32)
    options = (None, None, 0, 0, 0.2, -1, 0, True, 0.0, None, None, None, 0.0, None, False)  # ops._OPTION_NAMES

    def impl(*args):
        runs.append(args)

    _prefetch.maybe_prefetch(impl, q, q, q, options, False)
    _prefetch.wait_pending()
    _prefetch.maybe_prefetch(impl, q, q, q, options, False)
    _prefetch.wait_pending()
    assert len(runs) == 1
    dout, qm, km, vm, out, lse, dlse = runs[0][:7]
    assert qm.device.type == "meta" and qm.shape == q.shape and qm.stride() == q.stride()
    assert out.shape == q.shape and lse.shape == (1, 2, 16) and dlse.shape == lse.shape
    # deterministic=True may pick other backward kernels (never the Hopper backward): its own prefetch
    deterministic = options[:-1] + (True,)
    _prefetch.maybe_prefetch(impl, q, q, q, deterministic, False)
    _prefetch.wait_pending()
    assert len(runs) == 2 and runs[1][7:-1] == deterministic
    q2 = torch.randn(1, 16, 2, 64)  # another head dim: another signature
    monkeypatch.setenv(_prefetch.ENV_PREFETCH, "0")
    _prefetch.maybe_prefetch(impl, q2, q2, q2, options, False)
    _prefetch.wait_pending()
    assert len(runs) == 2, "FLASHATTN_TRITON_PREFETCH_BWD=0 turns it off"


def _fresh_python(code: str) -> str:
    """Run code in a fresh interpreter (nothing imported yet); its stripped stdout."""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout.strip()


def test_exit_waits_for_a_running_prefetch():
    """A process that exits while a backward prefetch runs waits for it
    (_prefetch._wait_at_exit): ended inside Triton's compiler, the daemon
    thread would abort the process (exit status 134, seen on an H100).  Here
    the prefetch's compile is a one-second sleep: without the wait the thread
    is dropped at exit and its line never printed."""
    code = (
        "import time, torch\n"
        "from flashattn_triton import _prefetch\n"
        "from flashattn_triton.kernels import fastlaunch\n"
        "fastlaunch.SUPPORTED = True\n"
        "_prefetch._on_gpu = lambda t: True\n"
        "q = torch.randn(1, 16, 2, 32)\n"
        "options = (None, None, 0, 0, 0.2, -1, 0, True, 0.0, None, None, None, 0.0, None, False)\n"
        "def impl(*args):\n"
        "    time.sleep(1.0)\n"
        "    print('prefetch finished', flush=True)\n"
        "_prefetch.maybe_prefetch(impl, q, q, q, options, False)\n"
        "assert _prefetch.pending()\n"
        "print('exiting', flush=True)\n"
    )
    out = _fresh_python(code)
    assert out.splitlines() == ["exiting", "prefetch finished"], out


def test_prefetch_stand_ins_import_nothing_heavy():
    """The stand-ins are made on the first call: they must not pull in sympy
    (torch.empty_like on a meta tensor runs torch._refs, whose first use
    imports the symbolic-shapes machinery: seconds on a first call)."""
    code = (
        "import sys, torch\n"
        "from flashattn_triton import _prefetch\n"
        "q = torch.randn(1, 16, 2, 32)\n"
        "options = (None, None, 0, 0, 0.2, -1, 0, True, 0.0, None, None, None, 0.0, None, False)\n"
        "before = set(sys.modules)\n"
        "args = _prefetch._stand_ins(q, q, q, options, False)\n"
        "assert all(a.device.type == 'meta' for a in args[:7])\n"
        "new = sorted(m for m in set(sys.modules) - before if m.split('.')[0] == 'sympy' or 'symbolic' in m)\n"
        "print(new[:5])\n")
    out = _fresh_python(code)
    assert out == "[]", f"the stand-ins imported {out}"


def test_prefetch_option_positions():
    from flashattn_triton import _prefetch, ops
    assert ops._OPTION_NAMES[_prefetch._SOFTCAP] == "softcap"
    assert ops._OPTION_NAMES[_prefetch._DETERMINISTIC] == "deterministic"


# ---------------------------------------------------------------------------
# Recording and replaying launches (the op layer's forward plans)
# ---------------------------------------------------------------------------

def _same_launch(a, b):
    """As _same, but a pointer may be passed as a tensor or as its address."""
    assert a[0] is b[0] and a[1] == b[1] and len(a[2]) == len(b[2])
    for x, y in zip(a[2], b[2]):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            px = x.data_ptr() if isinstance(x, torch.Tensor) else x
            py = y.data_ptr() if isinstance(y, torch.Tensor) else y
            assert px == py, (x, y)
        else:
            assert x == y and type(x) is type(y), (x, y)


@pytest.fixture(params=["generic", "direct"])
def mode(request, monkeypatch):
    """Replays through the compiled kernel's launcher, or (Triton 3.6) its C entry point."""
    if request.param == "direct":
        if fastlaunch._make_tensordesc_arg is None or not triton.__version__.startswith("3.6"):
            pytest.skip("direct launches: Triton 3.6 only")
        monkeypatch.setattr(fastlaunch, "DIRECT", True)
    else:
        monkeypatch.setattr(fastlaunch, "DIRECT", False)
    return request.param


def _record(fast, args, kwargs=KW, grid=(4,)):
    with fastlaunch.recording() as rec:
        fast.launch(args, kwargs, grid)
    return rec


def test_replay_launches_what_triton_launches(fast, mode):
    x, y = torch.randn(256), torch.empty(256)
    rec = _record(fast, _args(x, y))
    rep = rec.replay((x, y))
    assert rep is not None
    assert (rep.steps[0].direct is not None) == (mode == "direct")
    for x2, y2 in ((x, y), (torch.randn(256), torch.empty(256))):  # the same tensors, then others
        plain = _launch_via(lambda a, k, g: fast.jit_run(*a, grid=g, warmup=False, **k), _args(x2, y2), KW, (4,))
        n = len(LAUNCHES)
        assert rep((x2, y2))
        assert len(LAUNCHES) == n + 1
        _same_launch(plain, LAUNCHES[-1])


def test_replay_declines(fast, kernel, monkeypatch, mode):
    """A replay launches nothing (and says so) whenever the recorded
    specialization or launch might not hold."""
    from triton import knobs
    x, y = torch.randn(256), torch.empty(256)
    rep = _record(fast, _args(x, y)).replay((x, y))
    n = len(LAUNCHES)
    assert not rep((x[1:], y)), "another 16-byte alignment"
    monkeypatch.setattr(fastlaunch, "ENABLED", False)
    assert not rep((x, y))
    monkeypatch.setattr(fastlaunch, "ENABLED", True)
    with fastlaunch.compile_only(torch.device("cuda", 0)):
        assert not rep((x, y))
    hook = lambda *a: None  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert not rep((x, y)), "a launch hook must see the launch metadata"
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    monkeypatch.setattr(knobs.runtime, "debug", not knobs.runtime.debug)
    assert not rep((x, y))
    monkeypatch.undo()
    monkeypatch.setattr(fastlaunch, "ENABLED", True)
    monkeypatch.setattr(kernel, "run", fast, raising=False)
    monkeypatch.setattr(kernel, "pre_run_hooks", [lambda *a, **k: None])
    assert not rep((x, y))
    assert len(LAUNCHES) == n


def test_recordings_that_cannot_replay(fast, kernel):
    x, y = torch.randn(256), torch.empty(256)
    args = _args(x, y)
    fast.launch(args, KW, (4,))
    with fastlaunch.recording() as rec:  # a PyTorch operation a replay would skip
        y.zero_()
        fast.launch(args, KW, (4,))
    assert rec.replay((x, y)) is None
    with fastlaunch.recording() as rec:  # a launch that does not go through the fast path
        fast.launch(args, KW, (4,))
        fast.jit_run(*args, grid=(4,), warmup=False, **KW)
    assert rec.replay((x, y)) is None
    with fastlaunch.recording() as rec:  # views are fine
        fast.launch(_args(x.view(16, 16).view(-1), y), KW, (4,))
    assert rec.replay((x, y)) is not None
    rec = _record(fast, args)
    assert rec.replay((x, x)) is None, "two roles at one address: ambiguous"
    assert rec.replay((x,)) is None, "a tensor argument that is no role"
    with fastlaunch.recording() as rec:
        fastlaunch.not_replayable()
        fast.launch(args, KW, (4,))
    assert rec.replay((x, y)) is None
    with fastlaunch.recording() as rec:
        pass
    assert rec.replay((x, y)) is None, "nothing launched: nothing to replay"


def test_recording_watch_imports_nothing_heavy():
    """The dispatch mode that watches a recording must not pull in
    torch._dynamo (torch wraps a mode's __torch_dispatch__ in a dynamo
    disable whose first call imports it: seconds on a first call)."""
    code = (
        "import sys, torch\n"
        "from flashattn_triton.kernels import fastlaunch\n"
        "if getattr(fastlaunch, '_OpWatch', None) is None:\n"
        "    print('no dispatch mode'); sys.exit()\n"
        "rec = fastlaunch.Recording()\n"
        "with fastlaunch._OpWatch(rec):\n"
        "    torch.ones(3).view(-1)\n"
        "assert rec.broken\n"
        "print(sorted(m for m in ('torch._dynamo', 'sympy') if m in sys.modules))\n")
    out = _fresh_python(code)
    assert out in ("[]", "no dispatch mode"), f"the recording's watch imported {out}"


def test_replay_makes_fresh_zeroed_scratch(fast, mode):
    """A buffer from zeroed_scratch() inside a recording (the Hopper forward's
    tile counter) keeps the recording replayable; each replay passes a new
    zero-filled buffer where the recorded launch had its own."""
    x, y = torch.randn(256), torch.empty(256)
    with fastlaunch.recording() as rec:
        counter = fastlaunch.zeroed_scratch(1, torch.int32, x.device)
        fast.launch(_args(x, counter), KW, (4,))
    assert rec.scratch == [counter] and not rec.broken
    rep = rec.replay((x, y))
    assert rep is not None and rep.scratch == ((1, torch.int32),)
    seen = []
    for _ in range(2):
        n = len(LAUNCHES)
        assert rep((x, y))
        assert len(LAUNCHES) == n + 1
        arg = LAUNCHES[-1][2][1]
        if isinstance(arg, torch.Tensor):
            assert arg.dtype == torch.int32 and arg.shape == (1,) and int(arg) == 0
            ptr = arg.data_ptr()
        else:  # the direct path passes addresses
            ptr = arg
        assert ptr not in (x.data_ptr(), y.data_ptr(), counter.data_ptr())
        seen.append(ptr)
    with fastlaunch.recording() as rec:  # without zeroed_scratch, the same allocation breaks the recording
        fast.launch(_args(x, torch.zeros(1, dtype=torch.int32)), KW, (4,))
    assert rec.broken and rec.replay((x, y)) is None


def test_direct_launch_expands_descriptors_like_triton(monkeypatch):
    """Triton 3.6: the direct path's expansion of tensor descriptors (cached
    per slot and address) is what Triton's wrapper passes to the C launcher,
    for the same and for moved tensors."""
    if fastlaunch._make_tensordesc_arg is None or not triton.__version__.startswith("3.6"):
        pytest.skip("direct launches: Triton 3.6 only")
    from triton.backends.nvidia.driver import wrap_handle_tensordesc
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    monkeypatch.setattr(fastlaunch, "DIRECT", True)
    calls = []

    class Entry:  # stands for the C function
        def __call__(self, *args):
            calls.append(args)

    class Launcher:  # what CudaLauncher holds, with a recording C entry point
        global_scratch_size = profile_scratch_size = 0
        launch_cooperative_grid = launch_pdl = False

        def __init__(self):
            signature = {"a_desc": "tensordesc<fp16[64, 64]>", "n": "i32", "b_desc": "tensordesc<fp16[64, 64]>"}
            meta = dict(swizzle=3, elem_size=2, elem_type=6, block_size=[64, 64], fp4_padded=False)
            self.launch = wrap_handle_tensordesc(Entry(), signature, [meta, dict(meta)])

    class Compiled:
        run = Launcher()
        function, packed_metadata = 7, ("meta",)

    layout = gl.NVMMASharedLayout.get_default_for([64, 64], gl.float16)
    with fake_cuda():
        direct = fastlaunch._Direct(Compiled())
        assert direct.desc_pos == (0, 2)
        for a, b in [(torch.randn(128, 64).half(), torch.randn(64, 64).half())] * 2 + [
                (torch.randn(128, 64).half(), torch.randn(64, 64).half())]:
            descs = [TensorDescriptor(t, list(t.shape), list(t.stride()), [64, 64], layout) for t in (a, b)]
            params = (descs[0], 5, descs[1])
            Compiled.run.launch(1, 1, 1, 0, 7, False, False, None, None, ("meta",), None, None, None, *params)
            direct.launch((1, 1, 1), 0, Compiled, direct.expand(params))
            assert calls[-1] == calls[-2]
            assert calls[-1][13][1][0] == a.data_ptr() and calls[-1][19][1][0] == b.data_ptr()  # fake encodings


def test_triton_key_warmup(monkeypatch):
    """At import, with a GPU visible and outside the interpreter, a background
    thread computes Triton's compiler cache key (triton_key, cached per
    process) so that the first call does not hash Triton's compiler itself;
    off under the interpreter, without a GPU, and with FLASHATTN_TRITON_WARM_KEY=0."""
    from triton.runtime.cache import triton_key

    from flashattn_triton import _prefetch
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not _prefetch.start_key_warmup()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(_prefetch.torch.cuda, "is_available", lambda: False)
    assert not _prefetch.start_key_warmup()
    monkeypatch.setattr(_prefetch.torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv(_prefetch.ENV_WARM_KEY, "0")
    assert not _prefetch.start_key_warmup()
    monkeypatch.delenv(_prefetch.ENV_WARM_KEY)
    triton_key.cache_clear()
    assert _prefetch.start_key_warmup()
    for t in threading.enumerate():
        if t.name == "flashattn-triton-key":
            t.join(timeout=60)
    assert triton_key.cache_info().currsize == 1, "the thread did not compute Triton's key"


@pytest.mark.parametrize("shape", [5, (2, 3)], ids=["int", "tuple"])
def test_poisoned_empty_takes_the_shapes_replays_pass(shape, monkeypatch):
    """Under POISON (the tests), fastlaunch.empty fills floating-point buffers
    with NaN and leaves integer ones as torch.empty does; a recorded scratch
    buffer's replay passes its size as an int (session 53's first GPU run:
    torch.full rejected it, and every replayed call with such a buffer failed)."""
    monkeypatch.setattr(fastlaunch, "POISON", True)
    want = (shape,) if isinstance(shape, int) else shape
    x = fastlaunch.empty(shape, torch.float32, torch.device("cpu"))
    assert x.shape == want and torch.isnan(x).all(), (x.shape, x)
    n = fastlaunch.empty(shape, torch.int32, torch.device("cpu"))
    assert n.shape == want and n.dtype == torch.int32
