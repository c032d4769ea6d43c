"""The Hopper (Gluon, sm_90) backward: flashattn_triton/kernels/hopper/bwd.py.

Almost everything here launches the kernel, so it needs
FLASHATTN_TRITON_TEST_DEVICE=cuda on an sm_90 GPU with a Triton whose Gluon
API the tier supports (else skipped); on CPU the declining path, the
CONFIGS_UNVERIFIED opt-in and (Triton 3.6) a compile and launch of the d=256
path on a fake driver run.  Gradients are compared with float64 autograd
through the reference, with a tolerance of 3x the error of the same
reference in the input dtype (flashattn_triton.testing).  Head dims of
CONFIGS_UNVERIFIED (configs not yet run on a GPU; none now) are requested with
UNVERIFIED=True / FLASHATTN_TRITON_HOPPER_BWD_UNVERIFIED=1.  d = 256 tests carry
"d256" or "split" in their ids (``-k "d256 or split"``).  Sliding windows:
``-k window``.  d = 192 with dv = 128 (split Q K^T, CONFIGS_UNVERIFIED when
written, CONFIGS since session 15): ``-k 192``.
"""

import math
import os
import random

import pytest
import torch

from flashattn_triton.kernels import hopper
from flashattn_triton.reference import attention_ref
from flashattn_triton.testing import assert_close, max_abs_err, tolerance

from _utils import fake_launch, hopper_gpu_reason, hopper_module, window_shifts

needs_hopper = pytest.mark.skipif(bool(hopper_gpu_reason()), reason=hopper_gpu_reason() or "-")


def test_declines_cpu_tensors_and_writes_nothing():
    q = torch.randn(1, 2, 16, 64, dtype=torch.bfloat16)
    lse = torch.zeros(1, 2, 16)
    grads = [torch.zeros_like(q) for _ in range(3)]
    assert hopper.hopper_attention_backward(q, q, q, q, lse, lse, *grads, 0.125, None) is False
    assert not any(g.any() for g in grads)


def _bwd_module():
    try:
        from flashattn_triton.kernels.hopper import bwd as hbwd
    except Exception as exc:  # noqa: BLE001 - a Triton whose Gluon API moved
        pytest.skip(f"kernels/hopper/bwd.py does not import here: {exc}")
    return hbwd


def _fake_lines(script, timeout=900):
    """The lines a fake-driver script prints (fake_launch: Triton 3.6
    without a GPU); skips where the Hopper tier is unavailable."""
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    return fake_launch(script, timeout=timeout).strip().split("\n")


def test_unverified_configs_are_opt_in(monkeypatch):
    """Head dims of CONFIGS_UNVERIFIED are taken only on request, and every
    entry of both tables fits the shared-memory model."""
    hbwd = _bwd_module()
    monkeypatch.delenv(hbwd.UNVERIFIED_ENV, raising=False)
    assert hbwd.configs() is hbwd.CONFIGS
    extra = set(hbwd.CONFIGS_UNVERIFIED) - set(hbwd.CONFIGS)
    assert set(hbwd.configs(True)) == set(hbwd.CONFIGS) | extra
    monkeypatch.setenv(hbwd.UNVERIFIED_ENV, "1")
    assert set(hbwd.configs()) == set(hbwd.CONFIGS) | extra
    for d in hbwd.configs(True):
        for causal in (False, True):
            meta = hbwd.kernel_meta(d, causal, unverified=True)
            d_v = hbwd.HEAD_DIM_V.get(d, d)
            assert hbwd.smem_bytes(d, head_dim_v=d_v, **meta) <= hbwd.SMEM_LIMIT, (d, meta)
            if meta["SPLIT_D"]:
                cols = d_v // meta["NUM_CONSUMERS"]
                assert meta["DQ_CHUNK"] <= cols and cols % meta["DQ_CHUNK"] == 0, meta


def test_dispatch_keeps_short_sequences_on_the_portable_backward(monkeypatch):
    """Auto tier: the Hopper backward only at lengths where the H200 measured
    it faster (_dispatch.hopper_backward_pays); FLASHATTN_TRITON_BACKEND=hopper
    takes it at every length; never when deterministic or windowed."""
    from flashattn_triton import _dispatch
    monkeypatch.setattr(_dispatch, "_hopper_tier", lambda device: True)
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_BWD", raising=False)
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_WINDOW", raising=False)
    dev, full, causal = torch.device("cuda", 0), (-1, -1), (-1, 0)
    want = {  # (N, d, causal): Hopper backward?
        (512, 64, False): True, (512, 128, False): True, (512, 256, False): True, (256, 64, False): True,
        (512, 64, True): False, (512, 128, True): True, (512, 256, True): True, (512, 192, True): False,
        (1024, 64, True): True, (1024, 128, True): True, (1024, 256, True): True,
        (1024, 64, False): True, (1024, 128, False): True,
        (2048, 64, True): True, (2048, 128, True): True, (16384, 256, False): True, (100, 256, False): True,
    }
    for backend, forced in (("auto", False), ("hopper", True)):
        monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", backend)
        for (n, d, c), expected in want.items():
            got = _dispatch.use_hopper_backward(dev, causal if c else full, False, n, d)
            assert got == (expected or forced), (backend, n, d, c, got)
        assert not _dispatch.use_hopper_backward(dev, full, True, 8192, 128), "deterministic"
        assert not _dispatch.use_hopper_backward(dev, (128, 0), False, 8192, 128), "sliding window"


@pytest.mark.parametrize("window", [(100, 0), (100, -1), (0, 0), (-1, 0), (-1, -1), (100, 5), (-1, 7)], ids=str)
def test_dispatch_takes_windows_only_when_opted_in(monkeypatch, window):
    """_dispatch.use_hopper_backward: a left window bound (window_size (left
    >= 0, -1 or 0)) takes the Hopper backward only with
    FLASHATTN_TRITON_HOPPER_WINDOW=1 (the forward's switch), since its window
    path is slower than the portable one at small windows (whatever the
    forward's default: the forward's opt-in going does not take the backward
    with it); a right
    bound beyond causal never; the deterministic and short-sequence rules
    hold for windows too."""
    from flashattn_triton import _dispatch
    monkeypatch.setattr(_dispatch, "_hopper_tier", lambda device: True)
    monkeypatch.setattr(_dispatch, "HOPPER_BWD_WINDOW_MIN_LEFT", None)  # no size rule (its own test)
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_BWD", raising=False)
    monkeypatch.delenv("FLASHATTN_TRITON_BACKEND", raising=False)
    dev = torch.device("cuda", 0)
    left, right = window
    for opt_in in (None, "0", "1"):
        if opt_in is None:
            monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_WINDOW", raising=False)
        else:
            monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_WINDOW", opt_in)
        takes = right in (-1, 0) and (left < 0 or opt_in == "1")
        assert _dispatch.use_hopper_backward(dev, window, False, 8192, 128) == takes, (window, opt_in)
        assert _dispatch.hopper_backward_window(window) == takes
        assert not _dispatch.use_hopper_backward(dev, window, True, 8192, 128), "deterministic"
        if right == 0:  # causal N = 512 at d = 64: the portable backward, window or not
            assert not _dispatch.use_hopper_backward(dev, window, False, 512, 64)
    # The forward taking windows by default (its opt-in gone) leaves the backward's.
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_WINDOW", raising=False)
    monkeypatch.setattr(_dispatch, "hopper_forward_window", lambda window: window[1] in (-1, 0))
    assert _dispatch.use_hopper_backward(dev, window, False, 8192, 128) == (right in (-1, 0) and left < 0)
    monkeypatch.setattr(_dispatch, "HOPPER_BWD_WINDOW_DEFAULT", "1")  # the backward's own opt-in gone
    assert _dispatch.use_hopper_backward(dev, window, False, 8192, 128) == (right in (-1, 0))


@pytest.mark.parametrize("min_left", [None, 0, 511, 1023, 2047])
def test_dispatch_window_size_rule(monkeypatch, min_left):
    """_dispatch.HOPPER_BWD_WINDOW_MIN_LEFT (the size rule): with
    FLASHATTN_TRITON_HOPPER_WINDOW unset, a left bound of at least that many
    keys takes the Hopper backward (no mask or causal; None: never); "1" and
    "0" still force it on and off at every size; a right bound beyond causal
    never; the deterministic and short-sequence rules still apply; the
    forward's window switch does not move with it."""
    from flashattn_triton import _dispatch
    monkeypatch.setattr(_dispatch, "_hopper_tier", lambda device: True)
    monkeypatch.setattr(_dispatch, "HOPPER_BWD_WINDOW_MIN_LEFT", min_left)
    monkeypatch.setattr(_dispatch, "HOPPER_BWD_WINDOW_DEFAULT", "0")
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_BWD", raising=False)
    monkeypatch.delenv("FLASHATTN_TRITON_BACKEND", raising=False)
    dev = torch.device("cuda", 0)
    lefts = (0, 1, 128, 510, 511, 512, 1022, 1023, 1024, 2046, 2047, 4096, 1 << 20)
    for opt_in in (None, "0", "1"):
        if opt_in is None:
            monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_WINDOW", raising=False)
        else:
            monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_WINDOW", opt_in)
        for left in lefts:
            for right in (0, -1, 3):
                window = (left, right)
                by_size = min_left is not None and left >= min_left
                takes = right in (-1, 0) and (opt_in == "1" or (opt_in is None and by_size))
                assert _dispatch.hopper_backward_window(window) == takes, (opt_in, window, min_left)
                assert _dispatch.use_hopper_backward(dev, window, False, 8192, 128) == takes, (opt_in, window)
                assert not _dispatch.use_hopper_backward(dev, window, True, 8192, 128), "deterministic"
                if right == 0:  # causal N = 512 at d = 64: the portable backward, window or not
                    assert not _dispatch.use_hopper_backward(dev, window, False, 512, 64)
                source = _dispatch.backward_window_source(window)
                assert source == (None if not takes else "env" if opt_in == "1" else "rule"), (opt_in, window)
                # the forward: its own default ("1"), whatever the rule
                assert _dispatch.hopper_forward_window(window) == (right in (-1, 0) and opt_in != "0")
        # no left bound: taken whatever the switch and the rule say
        assert _dispatch.backward_window_source((-1, 0)) == "no window"
        assert _dispatch.use_hopper_backward(dev, (-1, 0), False, 8192, 128)
    # The backward's own default "1" (with the variable unset) takes every size.
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_WINDOW", raising=False)
    monkeypatch.setattr(_dispatch, "HOPPER_BWD_WINDOW_DEFAULT", "1")
    assert _dispatch.hopper_backward_window((0, 0)) and _dispatch.hopper_backward_window((100, -1))
    assert _dispatch.backward_window_source((5, 0)) == ("rule" if min_left is not None and min_left <= 5
                                                        else "default")


def test_info_says_which_backward_a_window_takes(capsys, monkeypatch):
    """`flashattn_triton info` with a sliding window where the Hopper forward
    takes it (stood in): the backward line names the opt-in when it is off,
    and says the Hopper backward (its window an opt-in) when on."""
    hopper_module("bwd")  # (info imports it)
    from flashattn_triton import _dispatch, cli
    monkeypatch.setattr(cli, "hopper_plan", lambda *a, **kw: (True, "stub"))
    monkeypatch.setattr(_dispatch, "HOPPER_BWD_WINDOW_MIN_LEFT", None)
    monkeypatch.setattr(_dispatch, "HOPPER_BWD_WINDOW_DEFAULT", "0")
    monkeypatch.delenv("FLASHATTN_TRITON_BACKEND", raising=False)
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_WINDOW", raising=False)
    argv = ["info", "--shape", "1,4096,8,128", "--window", "1024,0", "--arch", "sm90"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "backward: Hopper tier not used: window_size (1024, 0)" in out and "HOPPER_WINDOW=1" in out, out
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_WINDOW", "1")
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "backward: Hopper tier, Gluon kernel" in out and "with its left window bound (opt-in)" in out, out
    # The size rule (variable unset): 1024 >= 1023 takes it, 512 does not and says why.
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_WINDOW", raising=False)
    monkeypatch.setattr(_dispatch, "HOPPER_BWD_WINDOW_MIN_LEFT", 1023)
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "backward: Hopper tier, Gluon kernel" in out and "(left >= 1023: " in out, out
    assert cli.main(["info", "--shape", "1,4096,8,128", "--window", "512,0", "--arch", "sm90"]) == 0
    out = capsys.readouterr().out
    assert "backward: Hopper tier not used: window_size (512, 0): left bound 512 < 1023" in out, out
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_WINDOW", "0")  # forces it off at any size
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "FLASHATTN_TRITON_HOPPER_WINDOW=0 keeps sliding windows portable" in out, out


def test_window_reaches_the_hopper_backward(monkeypatch, device):
    """flash_attn_func with window_size=(left, 0 or -1) on the (forced)
    Hopper tier: without FLASHATTN_TRITON_HOPPER_WINDOW=1 the backward never
    asks the Hopper kernel; with it, kernels/bwd.py passes the causal shift
    and the window as (left, diagonal), bottom-right (Nk - Nq) and with
    Nq > Nk.  (CPU: the stand-in declines, so the portable backward runs and
    the gradients are checked against the reference.)"""
    from flashattn_triton import _dispatch, flash_attn_func
    from flashattn_triton.kernels import hopper as hopper_pkg
    from flashattn_triton.reference import flash_attention_ref
    monkeypatch.setattr(_dispatch, "_hopper_tier", lambda device: True)
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper")  # every length
    monkeypatch.setenv("FLASHATTN_TRITON_PREFETCH_BWD", "0")
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_BWD", raising=False)
    calls = []

    def spy(do, q, k, v, lse, delta, dq, dk, dv, sm_scale, causal_shift, window=None, **kw):
        calls.append((causal_shift, window))
        return False  # decline: the portable kernels run
    from flashattn_triton import ops
    # Loaded before the patches: load() binds kernels.hopper's functions, and
    # binding the stand-in would outlive this test in the worker (the Hopper
    # forward declining every later call: session 15's GPU runs).
    if ops._kernels.forward is None:
        ops._kernels.load()
    monkeypatch.setattr(hopper_pkg, "hopper_attention_backward", spy)
    monkeypatch.setattr(hopper_pkg, "hopper_attention_forward", lambda *a, **kw: False)
    monkeypatch.setattr(hopper_pkg, "hopper_forward_flash", lambda *a, **kw: False)
    monkeypatch.setattr(ops._kernels, "hopper_forward", lambda *a, **kw: False, raising=False)
    torch.manual_seed(0)
    for nq, nk, causal, left in ((40, 70, True, 9), (70, 40, True, 0), (40, 70, False, 20)):
        window = (left, 0 if causal else -1)
        q = torch.randn(1, nq, 4, 16, device=device, requires_grad=True)
        k = torch.randn(1, nk, 2, 16, device=device, requires_grad=True)
        v = torch.randn(1, nk, 2, 16, device=device, requires_grad=True)
        for opt_in in ("0", "1") if nq == 40 and causal else ("1",):
            monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_WINDOW", opt_in)
            calls.clear()
            out = flash_attn_func(q, k, v, causal=causal, window_size=window)
            grads = torch.autograd.grad(out.square().sum(), (q, k, v))
            if opt_in == "1":
                assert calls == [(nk - nq if causal else None, (left, nk - nq))], calls
            else:
                assert calls == [], calls
        leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
        o_ref = flash_attention_ref(*leaves, causal, window_size=window)[0]
        ref = torch.autograd.grad(o_ref.square().sum(), leaves)
        for g, r in zip(grads, ref):
            assert torch.allclose(g.double(), r, atol=1e-4, rtol=1e-4)


def test_emulated_window_schedule():
    """tests/hopper_bwd_model.py (reduced sweep): the window path (HAS_WINDOW)
    in float64 equals dense gradients: a key block's query tiles end at
    _query_end's m_hi, each consumer masks its window edge [m_wide, m_hi)
    next to the diagonal's tiles, and its two passes over one masked and one
    unmasked loop take the tiles in the producer's order; windows of 0 to
    past N, causal both alignments and a left bound only, Nq != Nk both
    ways, GQA, both query-tile heights and SPLIT_D.  Keys no row sees get
    dK = dV = 0 exactly (rows that see no key dQ = 0), and the range is
    tight: every visited query tile holds a visible pair of its key block,
    and every tile that holds one is visited."""
    import hopper_bwd_model as hbm
    cases = hbm.window_cases(full=False)
    stats = {}
    for case in cases:
        err = hbm.check_window(case, stats=stats)
        assert err <= 1e-9, (case, err)
    assert len(cases) >= 100
    assert stats["visited"] == stats["useful"] == stats["needed"], stats


@pytest.mark.parametrize("broken", ["hi_first_key", "hi_off_by_one", "wide_last_key", "no_window_mask",
                                    "pass_order"])
def test_emulated_window_broken_forms_are_caught(broken):
    """The window check rejects each wrong form on some case of the reduced
    sweep: the query range from the block's first key, or one row short; the
    unmasked range of a consumer from its last key; no window compare in the
    masked step; the window edge's masked tiles taken before the whole ones
    (out of the producer's order)."""
    import hopper_bwd_model as hbm
    assert broken in hbm.WINDOW_BROKEN
    assert any(not hbm.check_window(case, broken) <= 1e-9 for case in hbm.window_cases(full=False)), broken


def test_protocol_with_no_query_tile():
    """A key block that no row sees (a window) runs no query tile: the CTA's
    protocol still completes (K / V loaded and waited for, dK = dV stored),
    in each path and ring depth."""
    import hopper_bwd_model as hbm
    for seed in range(4):
        for ns in (1, 2, 3):
            for split, ds_bufs, chunks in ((False, 2, 1), (True, 1, 2), (True, 2, 1)):
                hbm.simulate(0, ns, split, ds_bufs, chunks, seed)


def test_emulated_schedule():
    """tests/hopper_bwd_model.py (reduced sweep): the kernel's tiling and
    masking (per-consumer masked / unmasked query tiles, TMA zero fill, rows
    past N_Q, SPLIT_D's score keys and dK / dV / dQ columns and dQ chunks,
    and the keys-as-M path) in float64 NumPy equal dense gradients."""
    import hopper_bwd_model as hbm
    cases = hbm.backward_cases(full=False)
    for case in cases:
        err = hbm.check_backward(*case)
        assert err <= 1e-9, (case, err)
    assert len(cases) >= 100


def test_protocol_simulation():
    """tests/hopper_bwd_model.py (reduced sweep): one CTA's mbarrier protocol,
    keys-as-M and SPLIT_D (one or two P^T / dS^T buffers, 1-4 dQ chunks),
    1-3 ring stages, random scheduling of agents and asynchronous engines:
    no deadlock, no wrong phase, no buffer hazard, every dQ chunk reduced once."""
    import hopper_bwd_model as hbm
    cases = hbm.protocol_cases(full=False)
    for case in cases:
        hbm.simulate(*case)
    assert len(cases) >= 100


def test_persistent_protocol_simulation():
    """tests/hopper_bwd_model.py: the persistent loop's protocol (several work
    tiles per program, some with no query tile; ring, dS and K / V phases
    continuing across tiles; the next tile's first query tiles loaded before
    its K / V) passes, and each deliberately broken form is caught: K / V
    loaded without waiting for kv_empty, kv_empty arrived before the last
    dQ product has read K, kv_ready waited with a fixed parity, the ring
    counter restarted per tile."""
    import hopper_bwd_model as hbm
    cases = hbm.persistent_protocol_cases(full=False)
    for *case, work in cases:
        hbm.simulate(*case, work=work)
    assert len(cases) >= 50
    for broken in hbm.BROKEN:
        for split, ds_bufs, chunks in ((False, 2, 1), (True, 1, 2), (True, 2, 1)):
            assert hbm.broken_caught(broken, split, ds_bufs, chunks, seeds=30) > 0, (broken, split, ds_bufs)


def test_named_bar_protocol_simulation():
    """NAMED_BAR (tests/hopper_bwd_model.py): the keys-as-M path with the dS^T
    exchange through one barrier of both consumers, completed every tile,
    and the two dS^T buffers (1), and with dQ handed to the producer through
    named barriers, the producer retiring each step and so learning that
    its Q / dO slot is free (2): no deadlock or buffer hazard on the 2-D grid
    and (1) the persistent loop, 1-3 ring stages, random scheduling.  Caught:
    one dS^T buffer with 1 (a consumer writes dS^T while the other's dQ
    product reads it), and with 2 a dq_full arrival before the tile's
    products are done or dQ staged without the dq_empty sync."""
    import hopper_bwd_model as hbm
    cases = [c for c in hbm.protocol_cases(full=False) if not c[2]]
    for case in cases:
        for level in (1, 2):
            hbm.simulate(*case, named_bar=level)
    work_cases = [c for c in hbm.persistent_protocol_cases(full=False) if not c[2]]
    for *case, work in work_cases:
        hbm.simulate(*case, work=work, named_bar=1)
    assert len(cases) >= 15 and len(work_cases) >= 10
    for broken in hbm.NAMED_BAR_BROKEN:
        assert hbm.broken_caught(broken, False, seeds=30, named_bar=1) > 0, broken
    for broken in hbm.NAMED_BAR2_BROKEN:
        assert hbm.broken_caught(broken, False, seeds=80, named_bar=2) > 0, broken


def test_dq_pieces_protocol_simulation():
    """NAMED_BAR = 2 on the 128-row split Q K^T step (tests/hopper_bwd_model.py):
    each consumer's dQ pieces handed to the producer through a dQ-full and a
    dQ-empty barrier per staging slot (one or two slots, three or six pieces
    per step, the late 'free' arrival, OWN_FIRST), the producer retiring
    step it - 1's pieces after loading step it: no deadlock, no slot written
    while a reduce-add reads it, every piece added once.  Caught: a piece
    staged without the empty sync, the empty arrival before the reads."""
    import hopper_bwd_model as hbm
    cases = hbm.pieces_protocol_cases(full=False)
    for case in cases:
        hbm.simulate_pieces(case)
    assert len(cases) >= 12
    for broken in hbm.PIECES_BROKEN:
        assert hbm.pieces_broken_caught(broken, seeds=40) > 0, broken


def test_named_bar_default_by_shape():
    """NAMED_BAR: the override, else HOPPER_BWD_NAMED_BAR_DEFAULT when set (the
    environment variable), else NAMED_BAR_BY_SHAPE (causal d = 128: 2,
    others 0; 0 with a window or dropout); 0 on the SPLIT_D paths
    (d = 256, 192) but for an override 2 on d = 192's 128-row step (its dQ
    pieces through the producer) when not persistent, at most 1 with
    PERSISTENT; other values are refused."""
    hbwd = _bwd_module()
    env = os.environ.get(hbwd.NAMED_BAR_ENV, "").strip()
    assert hbwd.HOPPER_BWD_NAMED_BAR_DEFAULT == (int(env) if env in ("0", "1", "2") else None)
    saved = hbwd.HOPPER_BWD_NAMED_BAR_DEFAULT
    try:
        hbwd.HOPPER_BWD_NAMED_BAR_DEFAULT = None
        for d, causal, want in [(64, False, 0), (64, True, 0), (128, False, 0), (128, True, 2),
                                (256, True, 0), (192, True, 0)]:
            if d in hbwd.configs(unverified=True):
                got = hbwd.kernel_meta(d, causal, unverified=True)["NAMED_BAR"]
                assert got == want, f"d={d} causal={causal}: NAMED_BAR {got}, expected {want}"
            assert hbwd.kernel_meta(128, True, windowed=True)["NAMED_BAR"] == 0
        for level in (0, 1, 2):
            hbwd.HOPPER_BWD_NAMED_BAR_DEFAULT = level
            assert hbwd.kernel_meta(64, True)["NAMED_BAR"] == level
            assert hbwd.kernel_meta(128, False, windowed=True)["NAMED_BAR"] == level
    finally:
        hbwd.HOPPER_BWD_NAMED_BAR_DEFAULT = saved
    for d in hbwd.CONFIGS:
        for causal in (False, True):
            split = hbwd.kernel_meta(d, causal)["SPLIT_D"]
            # the 128-row split Q K^T step (d = 192) takes an override 2: its dQ pieces through the producer
            halves = bool(hbwd.kernel_meta(d, causal)["Q_HALVES"])
            for level in (0, 1, 2, False, True):
                want = (2 if halves and level == 2 else 0) if split else level
                assert hbwd.kernel_meta(d, causal, dict(NAMED_BAR=level))["NAMED_BAR"] == want, (d, causal, level)
                assert hbwd.kernel_meta(d, causal, dict(NAMED_BAR=level, PERSISTENT=True))["NAMED_BAR"] == \
                    (0 if split else min(level, 1))
            dropout_meta = hbwd.kernel_meta(d, causal, dropout=True)  # (d = 192's dropout is declined by the plan)
            assert hbwd.kernel_meta(d, causal, dict(NAMED_BAR=2), dropout=True)["NAMED_BAR"] == \
                (0 if dropout_meta["SPLIT_D"] and not dropout_meta["Q_HALVES"] else 2)
    with pytest.raises(ValueError, match="NAMED_BAR"):
        hbwd.kernel_meta(128, False, dict(NAMED_BAR=3))


def test_no_licm_default_env_and_override():
    """NO_LICM (the query-tile loops without loop-invariant code motion): always
    in the meta-parameters; the override, else HOPPER_BWD_NO_LICM_DEFAULT (the
    environment variable, read at import), else NO_LICM_DIMS by head dim; on
    every variant of the call (window, dropout, persistent)."""
    hbwd = _bwd_module()
    env = os.environ.get(hbwd.NO_LICM_ENV, "").strip()
    assert hbwd.HOPPER_BWD_NO_LICM_DEFAULT == ({"0": False, "1": True}[env] if env else None)
    saved = hbwd.HOPPER_BWD_NO_LICM_DEFAULT, hbwd.NO_LICM_DIMS
    try:
        for default, dims in [(None, frozenset()), (None, frozenset({128})), (True, frozenset()),
                              (False, frozenset({64, 128, 192, 256}))]:
            hbwd.HOPPER_BWD_NO_LICM_DEFAULT, hbwd.NO_LICM_DIMS = default, dims
            for d in hbwd.CONFIGS:
                want = d in dims if default is None else default
                for kw in (dict(), dict(windowed=True), dict(dropout=True)):
                    for causal in (False, True):
                        got = hbwd.kernel_meta(d, causal, **kw)["NO_LICM"]
                        assert got is want, f"d={d} causal={causal} {kw} env {default} dims {set(dims)}: {got}"
                        for on in (False, True):
                            over = hbwd.kernel_meta(d, causal, dict(NO_LICM=on, PERSISTENT=True), **kw)
                            assert over["NO_LICM"] is on, (d, causal, kw, on)
    finally:
        hbwd.HOPPER_BWD_NO_LICM_DEFAULT, hbwd.NO_LICM_DIMS = saved


def test_persistent_is_off_by_default():
    hbwd = _bwd_module()
    for d in hbwd.CONFIGS:
        for causal in (False, True):
            assert hbwd.kernel_meta(d, causal)["PERSISTENT"] is False
            meta = hbwd.kernel_meta(d, causal, dict(PERSISTENT=True))
            assert hbwd.smem_bytes(d, head_dim_v=hbwd.HEAD_DIM_V.get(d, d), **meta) <= hbwd.SMEM_LIMIT, (d, meta)


_FAKE_LAUNCH = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda, LAUNCHES
from flashattn_triton.kernels.hopper import bwd as hb
real_reason = hb.unsupported_reason
hb.unsupported_reason = lambda *a: ""   # CPU tensors stand for CUDA ones
hb.HOPPER_BWD_GROUP_SPLIT_DEFAULT = {False: False, True: False}  # S = 1 (the split: test_group_split_launch_on_a_fake_driver)
q = torch.randn(2, 4, 333, 256).to(torch.bfloat16)
k = torch.randn(2, 2, 1121, 256).to(torch.bfloat16)
lse, delta = torch.zeros(2, 4, 333), torch.zeros(2, 4, 333)
grads = [torch.zeros_like(t) for t in (q, k, k)]
names = hb._attn_bwd_hopper.arg_names
for causal in (False, True):
    with fake_cuda():
        ok = hb.hopper_attention_backward(q, q, k, k, lse, delta, *grads, 0.0625, 788 if causal else None,
                                          UNVERIFIED=True)
    assert ok, hb._BROKEN
    consts = LAUNCHES[-1][0].src.constants
    print(LAUNCHES[-1][1], consts.get((names.index("SPLIT_D"),)), consts.get((names.index("BLOCK_N"),)))
"""


def test_split_d_launch_on_a_fake_driver():
    """Triton 3.6 without a GPU: the d = 256 backward (SPLIT_D, opt-in)
    compiles for sm_90 through the launcher's real JIT path
    (tests/fake_cuda.py) and launches (key blocks of 64, B * Hkv) programs."""
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    stdout = fake_launch(_FAKE_LAUNCH, timeout=600)
    # 1121 keys / 64 = 18 key blocks, 2 batches * 2 KV heads.
    assert stdout.split("\n")[:2] == ["(18, 4, 1) True 64"] * 2, stdout


_FAKE_PERSISTENT = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda, LAUNCHES
from flashattn_triton.kernels.hopper import bwd as hb
hb.unsupported_reason = lambda *a: ""   # CPU tensors stand for CUDA ones
hb.HOPPER_BWD_GROUP_SPLIT_DEFAULT = {False: False, True: False}  # S = 1 (the split: test_group_split_launch_on_a_fake_driver)
names = hb._attn_bwd_hopper.arg_names
for d in (64, 128, 256):
    q = torch.randn(2, 4, 333, d).to(torch.bfloat16)
    k = torch.randn(2, 2, 1121, d).to(torch.bfloat16)
    lse, delta = torch.zeros(2, 4, 333), torch.zeros(2, 4, 333)
    grads = [torch.zeros_like(t) for t in (q, k, k)]
    for causal, n_sms in ((False, 7), (True, 1000)):
        with fake_cuda():
            ok = hb.hopper_attention_backward(q, q, k, k, lse, delta, *grads, 0.0625, 788 if causal else None,
                                              PERSISTENT=True, NUM_SMS=n_sms)
        assert ok, hb._BROKEN
        launch = LAUNCHES[-1]
        consts = launch[0].src.constants
        print(d, causal, launch[1], consts.get((names.index("PERSISTENT"),)))
"""


def test_persistent_launch_on_a_fake_driver():
    """Triton 3.6 without a GPU: the persistent backward (PERSISTENT=True) at
    d = 64, 128 and 256 (SPLIT_D) compiles for sm_90 through the launcher's
    JIT path and launches min(NUM_SMS, key blocks * B * Hkv) programs on a
    1-D grid."""
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    stdout = fake_launch(_FAKE_PERSISTENT, timeout=900)
    # 1121 keys: 9 blocks of 128 (d = 64, 128) or 18 of 64 (d = 256); 4 (batch, KV head) pairs.
    want = []
    for d, n_kb in ((64, 9), (128, 9), (256, 18)):
        want += [f"{d} False (7, 1, 1) True", f"{d} True ({n_kb * 4}, 1, 1) True"]
    assert stdout.split("\n")[:6] == want, stdout


# The fake-driver scripts' common start, and one backward call of a case
# (d, causal, window, overrides) inside their loops, leaving launcher, grid,
# args and consts of its launch.
_FAKE_BWD_HEAD = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda, LAUNCHES
from flashattn_triton.kernels.hopper import bwd as hb
hb.unsupported_reason = lambda *a: ""   # CPU tensors stand for CUDA ones
hb.HOPPER_BWD_GROUP_SPLIT_DEFAULT = {False: False, True: False}  # S = 1 (the split: test_group_split_launch_on_a_fake_driver)
names = hb._attn_bwd_hopper.arg_names
"""
_FAKE_BWD_CALL = r"""
    q = torch.randn(2, 4, 333, d).to(torch.bfloat16)
    k = torch.randn(2, 2, 1121, d).to(torch.bfloat16)
    lse, delta = torch.zeros(2, 4, 333), torch.zeros(2, 4, 333)
    grads = [torch.zeros_like(t) for t in (q, k, k)]
    with fake_cuda():
        ok = hb.hopper_attention_backward(q, q, k, k, lse, delta, *grads, 0.0625, 788 if causal else None, window,
                                          **overrides)
    assert ok, hb._BROKEN
    launcher, grid, args = LAUNCHES[-1]
    consts = launcher.src.constants
"""

_FAKE_WINDOW = _FAKE_BWD_HEAD + r"""
for d, causal, window, overrides in [(64, True, (100, 788), {}), (128, False, (10 ** 9, 788), {}),
                                     (256, True, (0, 5000), {"PERSISTENT": True, "NUM_SMS": 5}),
                                     (128, True, None, {})]:""" + _FAKE_BWD_CALL + r"""
    # one launch argument per parameter after the descriptors (each expanded
    # into several): count back from the end
    window_lo = args[len(args) - (len(names) - names.index("window_lo"))]
    print(d, grid, consts.get((names.index("HAS_WINDOW"),)), window_lo)
"""


def test_window_launch_on_a_fake_driver():
    """Triton 3.6 without a GPU: windowed backward plans (HAS_WINDOW) compile
    for sm_90 through the launcher's real JIT path, on the grid and the
    persistent schedule and the SPLIT_D path (d = 256); the kernel gets
    window_lo = shift - left clamped to [-Nq, Nk]; a call without a window
    keeps HAS_WINDOW off."""
    lines = _fake_lines(_FAKE_WINDOW)
    # 1121 keys: 9 blocks of 128 (d = 64, 128) or 18 of 64 (d = 256); 4 (batch, KV head) pairs.
    assert lines == ["64 (9, 4, 1) True 688",
                     "128 (9, 4, 1) True -333",    # left past every key: clamped to -Nq
                     "256 (5, 1, 1) True 1121",    # a bound past the last key: clamped to Nk
                     "128 (9, 4, 1) False 0"], lines


_FAKE_NAMED_BAR = _FAKE_BWD_HEAD + r"""
# (d, causal, window, overrides, module default): the override, the module
# switch through the cached plans, a window and the persistent grid, d = 256
# (SPLIT_D: no named-barrier form), and the default
for d, causal, window, overrides, default in [(64, True, None, {"NAMED_BAR": 1}, 0),
                                              (128, False, None, {}, 1),
                                              (128, True, (100, 788), {"NAMED_BAR": 1, "PERSISTENT": True,
                                                                       "NUM_SMS": 5}, 0),
                                              (64, False, None, {"NAMED_BAR": 2}, 0),
                                              (128, True, (100, 788), {}, 2),
                                              (128, True, None, {"NAMED_BAR": 2, "PERSISTENT": True,
                                                                 "NUM_SMS": 5}, 0),
                                              (256, True, None, {"NAMED_BAR": 2}, 0),
                                              (128, False, None, {}, None),
                                              (128, True, None, {}, None)]:
    hb.HOPPER_BWD_NAMED_BAR_DEFAULT = default
    hb._PLANS.clear()""" + _FAKE_BWD_CALL + r"""
    print(d, grid, consts.get((names.index("NAMED_BAR"),)), consts.get((names.index("HAS_WINDOW"),)))
"""


def test_named_bar_launch_on_a_fake_driver():
    """Triton 3.6 without a GPU: NAMED_BAR builds (the override, or the
    module switch through the cached plans) compile for sm_90 through the
    launcher's JIT path at d = 64 and 128, levels 1 and 2, on the grid and
    with a window; the persistent schedule takes 1 (also when 2 is asked);
    d = 256 (SPLIT_D) keeps 0, and the table default (NAMED_BAR_BY_SHAPE)
    gives 0 at d = 128 non-causal and 2 at d = 128 causal."""
    lines = _fake_lines(_FAKE_NAMED_BAR)
    assert lines == ["64 (9, 4, 1) 1 False",
                     "128 (9, 4, 1) 1 False",
                     "128 (5, 1, 1) 1 True",
                     "64 (9, 4, 1) 2 False",
                     "128 (9, 4, 1) 2 True",
                     "128 (5, 1, 1) 1 False",
                     "256 (18, 4, 1) 0 False",
                     "128 (9, 4, 1) 0 False",
                     "128 (9, 4, 1) 2 False"], lines


_FAKE_REPEAT = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda, LAUNCHES
from flashattn_triton.kernels import fastlaunch
from flashattn_triton.kernels.hopper import bwd as hb
checks, metas, jit = [], [], []
hb.unsupported_reason = lambda *a: checks.append(1) or ""   # CPU tensors stand for CUDA ones
hb.HOPPER_BWD_GROUP_SPLIT_DEFAULT = {False: False, True: False}  # S = 1 (the split: test_group_split_launch_on_a_fake_driver)
real_meta = hb.kernel_meta
hb.kernel_meta = lambda *a, **kw: metas.append(1) or real_meta(*a, **kw)
run = fastlaunch.fast_run(hb._attn_bwd_hopper)
real_jit = run.jit_run
run.jit_run = lambda *a, **kw: jit.append(1) or real_jit(*a, **kw)
k = torch.randn(2, 2, 1121, 128).to(torch.bfloat16)
lse, delta = torch.zeros(2, 4, 333), torch.zeros(2, 4, 333)
seen = []
with fake_cuda():
    for i in range(4):
        q = torch.randn(2, 4, 333, 128).to(torch.bfloat16)  # new addresses every call
        grads = [torch.zeros_like(t) for t in (q, k, k)]
        assert hb.hopper_attention_backward(q, q, k, k, lse, delta, *grads, 0.0625, 788, (100, 788)), \
            hb._BROKEN
        launcher, grid, args = LAUNCHES[-1]
        seen.append((id(launcher), grid, q.data_ptr() in args[0][1]))
print(len(checks), len(metas), len(jit), run.n_entries, len(hb._PLANS))
print(len({s[:2] for s in seen}), all(s[2] for s in seen))
"""


def test_repeated_backward_reuses_its_plan_on_a_fake_driver():
    """Triton 3.6 without a GPU: repeated Hopper backward calls of one
    signature (other tensors each call) check the case,
    choose the meta-parameters and take Triton's launch path once; later
    calls launch the same compiled kernel on the same grid through the
    launch fast path, with descriptors of the new tensors' addresses."""
    import triton
    if hopper.TRITON_RELEASE not in hopper.TESTED_TRITON:
        # (the tier forced on with FLASHATTN_TRITON_HOPPER_ANY_TRITON: the script reads the
        # descriptors as Triton 3.6's launcher expands them; on 3.9 the fake launcher records
        # them unexpanded)
        pytest.skip(f"Triton {triton.__version__}: the recorded descriptors are read as Triton "
                    f"{', '.join(hopper.TESTED_TRITON)}'s launcher passes them")
    lines = _fake_lines(_FAKE_REPEAT)
    assert lines == ["1 1 1 1 1", "1 True"], lines


_FAKE_DQ_CONVERT = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda, LAUNCHES
from flashattn_triton import ops
from flashattn_triton.kernels import bwd as portable, fastlaunch
from flashattn_triton.kernels.hopper import bwd as hb
hb.unsupported_reason = lambda *a: ""   # CPU tensors stand for CUDA ones
hb.HOPPER_BWD_GROUP_SPLIT_DEFAULT = {False: False, True: False}  # S = 1
ops._install_direct_launches()
real = portable._dq_convert_launches
portable._dq_convert_launches = lambda dq: dq.device.type == "cpu" or real(dq)
run = fastlaunch.fast_run(portable._bwd_dq_convert)
jit = []
real_jit = run.jit_run
run.jit_run = lambda *a, **kw: jit.append(1) or real_jit(*a, **kw)
for d, causal in ((64, False), (128, True)):
    q = torch.randn(2, 333, 4, d).to(torch.bfloat16).transpose(1, 2)  # flash_attn_func's layout
    k = torch.randn(2, 2, 1121, d).to(torch.bfloat16)
    lse, delta = torch.zeros(2, 4, 333), torch.zeros(2, 4, 333)
    for on in (False, True, True):
        portable.DQ_CONVERT_KERNEL = on
        grads = [torch.zeros_like(t) for t in (q, k, k)]
        n = len(LAUNCHES)
        with fake_cuda():
            assert hb.hopper_attention_backward(q, q, k, k, lse, delta, *grads, 0.0625, 788 if causal else None), \
                hb._BROKEN
        print(d, on, " ".join(f"{launch[0].src.fn.__name__}{launch[1]}" for launch in list(LAUNCHES)[n:]))
print(len(jit), run.n_entries)
# the buffer in dq's layout for causal calls only (by_causal): one flat pass there
hb.DQ_ACC_LIKE_DQ = {False: False, True: True}
hb._PLANS.clear()  # (a plan holds its buffer layout)
for d, causal in ((64, False), (128, True)):
    q = torch.randn(2, 333, 4, d).to(torch.bfloat16).transpose(1, 2)
    k = torch.randn(2, 2, 1121, d).to(torch.bfloat16)
    grads = [torch.zeros_like(t) for t in (q, k, k)]
    n = len(LAUNCHES)
    with fake_cuda():
        assert hb.hopper_attention_backward(q, q, k, k, lse, delta, *grads, 0.0625, 788 if causal else None)
    print(d, "like-dq", " ".join(f"{launch[0].src.fn.__name__}{launch[1]}" for launch in list(LAUNCHES)[n:]))
hb.DQ_ACC_LIKE_DQ = False
hb._PLANS.clear()
meta = [t.to("meta") for t in (q, k, lse)]
grads = [torch.empty_like(t) for t in (meta[0], meta[1], meta[1])]
compiled = []
with fake_cuda(), fastlaunch.compile_only(torch.device("cuda", 0), compiled):
    assert hb.hopper_attention_backward(meta[0], meta[0], meta[1], meta[1], meta[2], meta[2], *grads, 0.0625, 788)
print(" ".join(sorted(c.name for c in compiled)))
"""


def test_dq_convert_launch_on_a_fake_driver():
    """Triton 3.6 without a GPU: with kernels/bwd.py's DQ_CONVERT_KERNEL on,
    the Hopper backward converts its float32 dQ buffer with _bwd_dq_convert
    (compiled for sm_90; (cdiv(333, 64), B * H) programs over the flash
    layout's rows), through the launch fast path once the signature has been
    launched (one JIT-path launch per head dim); off, it launches only the
    backward.  With DQ_ACC_LIKE_DQ on for causal calls, the causal call's
    buffer has dq's layout and _bwd_dq_convert_flat converts it
    (cdiv(B * N * H * d, 4096) programs), the other call as before.  In
    compile-only mode (the prefetch) both kernels compile."""
    lines = _fake_lines(_FAKE_DQ_CONVERT)
    assert lines == ["64 False _attn_bwd_hopper(9, 4, 1)",
                     "64 True _attn_bwd_hopper(9, 4, 1) _bwd_dq_convert(6, 8, 1)",
                     "64 True _attn_bwd_hopper(9, 4, 1) _bwd_dq_convert(6, 8, 1)",
                     "128 False _attn_bwd_hopper(9, 4, 1)",
                     "128 True _attn_bwd_hopper(9, 4, 1) _bwd_dq_convert(6, 8, 1)",
                     "128 True _attn_bwd_hopper(9, 4, 1) _bwd_dq_convert(6, 8, 1)",
                     "2 2",
                     "64 like-dq _attn_bwd_hopper(9, 4, 1) _bwd_dq_convert(6, 8, 1)",
                     "128 like-dq _attn_bwd_hopper(9, 4, 1) _bwd_dq_convert_flat(84, 1, 1)",
                     "_attn_bwd_hopper _bwd_dq_convert"], lines


def _padded(b, h, n, d, dtype, pad, fill=float("nan")):
    """(B, H, N, d) view of (B, H, N + pad, d) storage whose rows past N hold fill."""
    t = torch.full((b, h, n + pad, d), fill, device="cuda", dtype=dtype)
    t[:, :, :n] = torch.randn(b, h, n, d, device="cuda").to(dtype)
    return t[:, :, :n]


def _flash_view(b, h, n, d, dtype):
    """(B, H, N, d) view of (B, N, H, d) storage, as flash_attn_func passes it."""
    return torch.randn(b, n, h, d, device="cuda").to(dtype).transpose(1, 2)


def _reference_grads(q, k, v, do, scale, shift, dtype=None):
    """(dq, dk, dv) by autograd through attention_ref in float64 (dtype None) or in dtype."""
    leaves = [t.detach().to(dtype or torch.float64).requires_grad_() for t in (q, k, v)]
    o, _ = attention_ref(*leaves, scale, shift)
    o.backward(do.to(o.dtype))
    return [t.grad for t in leaves]


def _variant_ids(kind):
    """pytest ids of (head dim, overrides) parameters: "<kind>-d<d>", then K=V pairs."""
    return lambda v: f"{kind}-d{v}" if isinstance(v, int) else ",".join(f"{k}={x}" for k, x in v.items())


def _spy_hopper_backward(monkeypatch):
    """Record what each hopper_attention_backward call returned (True: the
    Hopper backward ran), at both names the library calls it by."""
    from flashattn_triton.kernels.hopper import bwd as hbwd
    calls = []
    real = hbwd.hopper_attention_backward

    def spy(*a, **kw):
        calls.append(real(*a, **kw))
        return calls[-1]
    monkeypatch.setattr(hbwd, "hopper_attention_backward", spy)
    monkeypatch.setattr(hopper, "hopper_attention_backward", spy)
    return calls


@needs_hopper
@pytest.mark.parametrize("deterministic", [False, True])
def test_raw_backward_deterministic_flag(monkeypatch, deterministic):
    """ops.flash_bwd (the raw backward the ring runs per block) follows
    deterministic: False takes the Hopper backward (dQ by atomics), True the
    portable kernels, bit-identical on a repeat; both match float64."""
    from flashattn_triton import ops
    calls = _spy_hopper_backward(monkeypatch)
    torch.manual_seed(0)
    q, do = (torch.randn(2, 1024, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(2, 1024, 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out, lse = ops.flash_fwd(q, k, v, 128 ** -0.5, True)
    grads = ops.flash_bwd(do, q, k, v, out, lse, 128 ** -0.5, True, deterministic=deterministic)
    assert calls == ([] if deterministic else [True]), calls
    if deterministic:
        again = ops.flash_bwd(do, q, k, v, out, lse, 128 ** -0.5, True, deterministic=True)
        assert all(torch.equal(a, b) for a, b in zip(grads, again))
    from flashattn_triton.reference import flash_attention_ref
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = torch.autograd.grad(flash_attention_ref(*ref_in, True)[0], ref_in, do.double())
    low_in = [t.detach().requires_grad_() for t in (q, k, v)]
    low = torch.autograd.grad(flash_attention_ref(*low_in, True, dtype=torch.bfloat16)[0], low_in, do)
    for name, g, r, lo in zip(("dq", "dk", "dv"), grads, ref, low):
        assert_close(name, g, r, baseline=lo, factor=3.0, dtype=torch.bfloat16)


def _run(q, k, v, do, scale, shift, **overrides):
    """Forward (Hopper tier) for lse2 and O, delta in torch, then the Hopper
    backward (head dims of CONFIGS_UNVERIFIED included)."""
    b, hq, nq, d = q.shape
    o = torch.empty_like(q) if v.shape[-1] == d else torch.empty_like(do)  # (dv columns: split Q K^T)
    lse = torch.full((b, hq, nq), float("nan"), device="cuda")
    assert hopper.hopper_attention_forward(q, k, v, o, lse, scale, shift)
    delta = (do.float() * o.float()).sum(-1)
    dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
    took = hopper.hopper_attention_backward(do, q, k, v, lse, delta, dq, dk, dv, scale, shift, UNVERIFIED=True,
                                            **overrides)
    assert took, f"declined {overrides} (build errors: {hopper.bwd._BROKEN})"
    return dq, dk, dv


def _check(q, k, v, do, scale, shift, **overrides):
    got = _run(q, k, v, do, scale, shift, **overrides)
    ref = _reference_grads(q, k, v, do, scale, shift)
    low = _reference_grads(q, k, v, do, scale, shift, dtype=q.dtype)
    for name, g, r, lo in zip(("dq", "dk", "dv"), got, ref, low):
        assert_close(name, g, r, baseline=lo, factor=3.0, dtype=q.dtype)


CASES = [
    # b, hq, hkv, nq, nk, causal ("br" bottom-right, "tl" top-left), layout
    (2, 4, 4, 1000, 1000, None, "flash"),      # ragged N, batch > 1
    (2, 4, 4, 1000, 1000, "br", "flash"),
    (2, 8, 2, 333, 1201, "br", "flash"),       # GQA, Nq < Nk
    (2, 8, 2, 333, 1201, "tl", "padded"),      # NaN past N in every input
    (1, 4, 1, 700, 130, "br", "flash"),        # MQA, Nq > Nk: 570 rows see no key
    (3, 2, 2, 1, 517, "br", "flash"),          # a single query row
    (2, 6, 3, 515, 515, None, "padded"),
    (2, 4, 4, 128, 256, "br", "flash"),        # whole tiles
    (1, 2, 2, 77, 1000, None, "flash"),        # keys past the last 64-key half
]


HEAD_DIMS = [64, 128, 256]


def _d_id(d):
    return f"d{d}"


@needs_hopper
@pytest.mark.parametrize("named_bar", [0, 1, 2], ids=["mbar", "named_bar1", "named_bar2"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", HEAD_DIMS, ids=_d_id)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_matches_reference(dtype, d, case, named_bar):
    """The default build, and NAMED_BAR 1 (the dS^T exchange through the
    consumers' hardware barrier) and 2 (also dQ through the producer warp);
    d = 64 / 128: SPLIT_D has no such form."""
    if named_bar and hopper.bwd.kernel_meta(d, case[5] is not None, unverified=True)["SPLIT_D"]:
        pytest.skip("SPLIT_D: no named-barrier form")
    b, hq, hkv, nq, nk, causal, layout = case
    q, k, v, do = _inputs(b, hq, hkv, nq, nk, d, dtype, layout)
    shift = None if causal is None else (nk - nq if causal == "br" else 0)
    _check(q, k, v, do, d ** -0.5, shift, **(dict(NAMED_BAR=named_bar) if named_bar else {}))


TMA_DKV_VARIANTS = [
    # d, causal, overrides beside TMA_DKV, window left (None: none), dropout
    (128, "br", dict(GROUP_SPLIT=3), None, False),  # 16-bit partials of three slices
    (128, "tl", dict(NAMED_BAR=2), None, False),
    (128, None, dict(HEADS_FIRST=True, NAMED_BAR=0), None, False),
    (64, "br", {}, 200, False),
    (128, "tl", {}, 100, False),
    (128, "br", {}, None, True),
    (64, None, {}, None, True),
    (256, "br", dict(GROUP_SPLIT=3), None, False),  # SPLIT_D: both consumers' tiles in the one ring slot
    (256, None, {}, None, True),
]


@needs_hopper
@pytest.mark.parametrize("d", [64, 128, 256, 192], ids=_d_id)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_tma_dkv_matches_reference(d, case):
    """TMA_DKV: dK / dV staged in the (Q, dO) ring and written by TMA stores
    (rows past N_K dropped by the descriptor's bounds), every reference
    case against float64 on NaN-poisoned outputs; d = 192 with dv = 128
    (split Q K^T: dK's second chunk through a third descriptor)."""
    b, hq, hkv, nq, nk, causal, layout = case
    q, k, v, do = (_inputs_192(b, hq, hkv, nq, nk, torch.bfloat16, layout) if d == 192
                   else _inputs(b, hq, hkv, nq, nk, d, torch.bfloat16, layout))
    shift = None if causal is None else (nk - nq if causal == "br" else 0)
    _check(q, k, v, do, d ** -0.5, shift, TMA_DKV=True)


@needs_hopper
@pytest.mark.parametrize("d,causal,variant,left,dropped", TMA_DKV_VARIANTS,
                         ids=lambda x: "-".join(f"{k}={v}" for k, v in x.items()) if isinstance(x, dict) else str(x))
def test_tma_dkv_variants(d, causal, variant, left, dropped):
    """TMA_DKV with a GQA group split (16-bit partials), NAMED_BAR 0 / 2,
    heads first, sliding windows (key blocks with no query tile store zeros)
    and dropout (the gradients of the gl.store build, same Philox mask, up
    to summation order); the plan took it (plan.kwargs)."""
    from flashattn_triton.kernels.hopper import bwd as hbwd
    q, do = (_flash_view(2, 6, 333, d, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(2, 2, 1121, d, torch.bfloat16) for _ in range(2))
    shift = None if causal is None else (1121 - 333 if causal == "br" else 0)
    over = dict(variant, TMA_DKV=True)
    lse = torch.empty((2, 6, 333), device="cuda")
    plan = hbwd._make_plan(do, q, k, v, lse, lse, q, k, v, d ** -0.5, causal is not None, left is not None,
                           dropped, True, dict(over))
    assert not isinstance(plan, str) and plan.kwargs["TMA_DKV"], plan
    if dropped:
        _dropout_grads_agree(q, k, v, do, shift, (over, dict(variant, TMA_DKV=False)), 99, 3, unverified=True)
    elif left is None:
        _check(q, k, v, do, d ** -0.5, shift, **over)
    else:
        _window_check(q, k, v, do, d ** -0.5, shift, (left, shift), **over)


NAMED_BAR_VARIANTS = [
    # d, causal, overrides (with the NAMED_BAR level), window left (None: none)
    (64, "br", dict(NAMED_BAR=1, PERSISTENT=True, NUM_SMS=7), None),
    (128, None, dict(NAMED_BAR=1, PERSISTENT=True, NUM_SMS=7, HEADS_FIRST=True), None),
    (128, "br", dict(NAMED_BAR=1, GROUP_SPLIT=3), None),  # (the group of 3 in three slices)
    (128, "tl", dict(NAMED_BAR=1, NUM_STAGES=3), None),  # (3 stages do not fit shared memory at d = 64)
    (64, "br", dict(NAMED_BAR=1), 200),
    (128, "tl", dict(NAMED_BAR=1, PERSISTENT=True, NUM_SMS=5), 100),
    (128, "br", dict(NAMED_BAR=2, GROUP_SPLIT=3), None),
    (128, "tl", dict(NAMED_BAR=2, NUM_STAGES=3), None),
    (128, None, dict(NAMED_BAR=2, HEADS_FIRST=True), None),
    (64, "br", dict(NAMED_BAR=2), 200),
    (128, "tl", dict(NAMED_BAR=2), 100),
]


@needs_hopper
@pytest.mark.parametrize("d,causal,variant,left", NAMED_BAR_VARIANTS,
                         ids=lambda x: "-".join(f"{k}={v}" for k, v in x.items()) if isinstance(x, dict) else str(x))
def test_named_bar_variants(d, causal, variant, left):
    """NAMED_BAR 1 and 2 with the persistent loop (1 only: several work tiles
    per program, the barrier completing once per query tile across them), a
    GQA group split, a 3-stage ring, heads-first order and sliding windows
    (key blocks with no query tile: no dQ hand-off at all): ragged N, GQA,
    Nq < Nk, against float64 autograd on NaN-poisoned outputs."""
    q, do = (_flash_view(2, 6, 333, d, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(2, 2, 1121, d, torch.bfloat16) for _ in range(2))
    shift = None if causal is None else (1121 - 333 if causal == "br" else 0)
    if left is None:
        _check(q, k, v, do, d ** -0.5, shift, **variant)
    else:
        _window_check(q, k, v, do, d ** -0.5, shift, (left, shift), **variant)


@needs_hopper
@pytest.mark.parametrize("variant", [dict(HEADS_FIRST=True), dict(HEADS_FIRST=False), dict(NUM_STAGES=3),
                                     dict(BLOCK_M=64), dict(BLOCK_M=128)],
                         ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()))
@pytest.mark.parametrize("d", HEAD_DIMS, ids=_d_id)
@pytest.mark.parametrize("causal", [None, "br"])
def test_variants(variant, d, causal):
    """Every CONFIGS / SCHEDULE switch computes the same gradients (those
    whose shared memory does not fit at this d are skipped)."""
    from flashattn_triton.kernels.hopper import bwd as hbwd
    if hbwd.smem_bytes(d, **hbwd.kernel_meta(d, causal is not None, variant, unverified=True)) > hbwd.SMEM_LIMIT:
        pytest.skip("does not fit in shared memory")
    q, do = (_flash_view(2, 8, 777, d, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(2, 2, 1500, d, torch.bfloat16) for _ in range(2))
    _check(q, k, v, do, 0.09, None if causal is None else 1500 - 777, **variant)


SPLIT_VARIANTS = [
    # d, overrides: the SPLIT_D path's buffer / staging choices at d = 256,
    # and the same path at d = 128 and 64 (a second check of its indexing)
    (256, dict(NUM_STAGES=1, DS_BUFS=2, DQ_CHUNK=128)),
    (256, dict(NUM_STAGES=1, DS_BUFS=1, DQ_CHUNK=64)),
    (256, dict(NUM_STAGES=2, DS_BUFS=1, DQ_CHUNK=32, HEADS_FIRST=True)),
    (128, dict(SPLIT_D=True, BLOCK_N=64, DS_BUFS=2, DQ_CHUNK=64)),
    (128, dict(SPLIT_D=True, BLOCK_N=128, DS_BUFS=2, DQ_CHUNK=64)),
    (128, dict(SPLIT_D=True, BLOCK_N=64, DS_BUFS=1, DQ_CHUNK=32)),
    (64, dict(SPLIT_D=True, BLOCK_N=64, BLOCK_M=64, DS_BUFS=2, DQ_CHUNK=32)),
]


@needs_hopper
@pytest.mark.parametrize("d,variant", SPLIT_VARIANTS,
                         ids=_variant_ids("split"))
@pytest.mark.parametrize("causal", [None, "br", "tl"])
def test_split_d_variants(d, variant, causal):
    """The SPLIT_D path (head dim split between the consumers, P^T and dS^T
    through shared memory) with each buffer / staging choice, and at the
    smaller head dims: ragged N (the last key block partly, and one
    warpgroup's keys wholly, past N_K), GQA, Nq < Nk."""
    q, do = (_flash_view(2, 6, 333, d, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(2, 2, 1121, d, torch.bfloat16) for _ in range(2))
    shift = None if causal is None else (1121 - 333 if causal == "br" else 0)
    _check(q, k, v, do, d ** -0.5, shift, **variant)


def test_gqa_split_heads_first_plan(monkeypatch):
    """HEADS_FIRST_GQA_SPLIT_MIN_N: a causal d = 64 / 128 call whose GQA
    group is split (S > 1) with N_K >= 4096 runs heads first (grid (B * Hkv
    * S, key blocks)); dropout by its own table
    (HEADS_FIRST_GQA_SPLIT_MIN_N_DROPOUT, 4096 at d = 64 / 128 too);
    shorter keys, non-causal calls (no split), windows, the persistent grid,
    MHA (S = 1), head dims outside the tables and an explicit HEADS_FIRST
    override keep their order.  Unsplit GQA groups (S = 1) by a table of
    their own (HEADS_FIRST_GQA_UNSPLIT_MIN_N: d = 64 from 2048 keys; not
    with dropout)."""
    hbwd = _bwd_module()
    monkeypatch.setattr(hbwd, "sm_count", lambda device: 132)
    monkeypatch.setattr(hbwd, "unsupported_reason", lambda *a: "")  # CPU tensors stand for CUDA ones

    def plan(n_k, causal=True, h_kv=4, windowed=False, dropped=False, over=None, d=128, b=2):
        q = torch.empty(b, 16, 1024, d, dtype=torch.bfloat16)
        k = torch.empty(b, h_kv, n_k, d, dtype=torch.bfloat16)
        lse = torch.empty(b, 16, 1024)
        p = hbwd._make_plan(q, q, k, k, lse, lse, q, k, k, 0.1, causal, windowed, dropped, False, over or {})
        assert not isinstance(p, str), p
        return p
    for dropped in (False, True):
        assert plan(4096, d=64, dropped=dropped).kwargs["HEADS_FIRST"], dropped
        assert not plan(4000, d=64, dropped=dropped).kwargs["HEADS_FIRST"], dropped
        assert not plan(8192, d=256, dropped=dropped).kwargs["HEADS_FIRST"], dropped
    # unsplit groups (S = 1, enough programs without a split): their own table, d = 64
    # from 2048 keys
    for n_k in (2048, 8192):
        p = plan(n_k, h_kv=8, d=64, b=8)
        assert p.split == 1 and p.kwargs["HEADS_FIRST"] and p.grid == (8 * 8, n_k // 128), (n_k, p.split, p.grid)
    p = plan(2000, h_kv=8, d=64, b=8)
    assert p.split == 1 and not p.kwargs["HEADS_FIRST"], (p.split, p.kwargs["HEADS_FIRST"])
    assert plan(8192, h_kv=8).split == 1 and not plan(8192, h_kv=8).kwargs["HEADS_FIRST"]  # d = 128: not in it
    monkeypatch.setattr(hbwd, "HEADS_FIRST_GQA_UNSPLIT_MIN_N", {64: 8192})
    assert not plan(4096, h_kv=8, d=64, b=8).kwargs["HEADS_FIRST"]
    p = plan(8192, h_kv=8, d=64)
    assert p.split == 1 and p.kwargs["HEADS_FIRST"] and p.grid == (2 * 8, 64), (p.split, p.grid)
    assert not plan(8192, h_kv=16, d=64).kwargs["HEADS_FIRST"]   # MHA: not a GQA group
    assert not plan(8192, h_kv=8, d=64, causal=False).kwargs["HEADS_FIRST"]
    assert not plan(8192, h_kv=8, d=64, over=dict(PERSISTENT=True, NUM_SMS=7)).kwargs["HEADS_FIRST"]
    monkeypatch.setattr(hbwd, "HEADS_FIRST_GQA_SPLIT_MIN_N_DROPOUT", {})
    assert not plan(8192, h_kv=8, d=64, dropped=True).kwargs["HEADS_FIRST"]  # no unsplit dropout table
    monkeypatch.setattr(hbwd, "HEADS_FIRST_GQA_SPLIT_MIN_N_DROPOUT", {64: 4096, 128: 4096})
    monkeypatch.setattr(hbwd, "HEADS_FIRST_GQA_UNSPLIT_MIN_N", {64: 16384})
    assert not plan(8192, h_kv=8, d=64).kwargs["HEADS_FIRST"]   # shorter than the table's length
    monkeypatch.setattr(hbwd, "HEADS_FIRST_GQA_UNSPLIT_MIN_N", {})
    p = plan(4096)
    assert p.split > 1 and p.kwargs["HEADS_FIRST"] and p.grid == (2 * 4 * p.split, 32), (p.split, p.grid)
    assert plan(4157).kwargs["HEADS_FIRST"]
    assert not plan(4000).kwargs["HEADS_FIRST"]
    assert not plan(8192, causal=False).kwargs["HEADS_FIRST"]
    assert not plan(8192, h_kv=16).kwargs["HEADS_FIRST"]          # MHA: no split
    assert not plan(8192, windowed=True).kwargs["HEADS_FIRST"]
    assert plan(8192, dropped=True).kwargs["HEADS_FIRST"]   # its own table (4096 at d = 128)
    monkeypatch.setattr(hbwd, "HEADS_FIRST_GQA_SPLIT_MIN_N_DROPOUT", {128: 8192})
    assert plan(8192, dropped=True).kwargs["HEADS_FIRST"] and not plan(4096, dropped=True).kwargs["HEADS_FIRST"]
    assert not plan(8192, over=dict(PERSISTENT=True, NUM_SMS=7)).kwargs["HEADS_FIRST"]
    assert not plan(8192, over=dict(HEADS_FIRST=False)).kwargs["HEADS_FIRST"]
    assert not plan(8192, over=dict(GROUP_SPLIT=1)).kwargs["HEADS_FIRST"]
    # SLICES_FIRST (an override): grid (key blocks * S, B * Hkv), never with heads first
    p = plan(8192, over=dict(SLICES_FIRST=True))
    assert not p.kwargs["HEADS_FIRST"] and p.grid == (64 * p.split, 2 * 4), (p.split, p.grid)
    for over in (dict(SLICES_FIRST=True, GROUP_SPLIT=1), dict(SLICES_FIRST=True, HEADS_FIRST=True),
                 dict(SLICES_FIRST=True, PERSISTENT=True, NUM_SMS=7)):
        q = torch.empty(2, 16, 1024, 128, dtype=torch.bfloat16)
        k = torch.empty(2, 4, 8192, 128, dtype=torch.bfloat16)
        lse = torch.empty(2, 16, 1024)
        got = hbwd._make_plan(q, q, k, k, lse, lse, q, k, k, 0.1, True, False, False, False, over)
        assert isinstance(got, str) and "SLICES_FIRST" in got, (over, got)


def test_slices_first_table(monkeypatch):
    """SLICES_FIRST_GQA_SPLIT_DIMS (empty by default): a listed head dim's
    causal calls whose GQA group the planner splits run slices first (grid
    (key blocks * S, B * Hkv)); not unsplit, not non-causal, not with a
    schedule override, not persistent; a heads-first table wins."""
    hbwd = _bwd_module()
    monkeypatch.setattr(hbwd, "sm_count", lambda device: 132)
    monkeypatch.setattr(hbwd, "unsupported_reason", lambda *a: "")

    def plan(b, hq, hkv, n, causal=True, **over):
        q, k = (torch.empty(b, h, n, 192, dtype=torch.bfloat16) for h in (hq, hkv))
        v, do = torch.empty(b, hkv, n, 128, dtype=torch.bfloat16), torch.empty(b, hq, n, 128, dtype=torch.bfloat16)
        lse = torch.empty(b, hq, n)
        return hbwd._make_plan(do, q, k, v, lse, lse, q, k, v, 0.1, causal, False, False, False, over)
    row = (2, 16, 4, 4096)   # the variant table's d = 192 row: its group split in two
    assert plan(*row).split == 2 and not plan(*row).kwargs["SLICES_FIRST"]
    monkeypatch.setattr(hbwd, "SLICES_FIRST_GQA_SPLIT_DIMS", frozenset({192}))
    p = plan(*row)
    assert p.kwargs["SLICES_FIRST"] and not p.kwargs["HEADS_FIRST"] and p.grid == (64 * 2, 2 * 4), p.grid
    assert not plan(2, 16, 4, 4096, causal=False).kwargs["SLICES_FIRST"]
    assert not plan(2, 16, 4, 8192).kwargs["SLICES_FIRST"]            # not split there (split 1)
    assert not plan(*row, HEADS_FIRST=True).kwargs["SLICES_FIRST"]
    assert not plan(*row, SLICES_FIRST=False).kwargs["SLICES_FIRST"]
    assert not plan(*row, PERSISTENT=True, NUM_SMS=7).kwargs["SLICES_FIRST"]
    monkeypatch.setattr(hbwd, "HEADS_FIRST_GQA_SPLIT_MIN_N", {192: 4096})
    assert plan(*row).kwargs["HEADS_FIRST"] and not plan(*row).kwargs["SLICES_FIRST"]


def test_tma_dkv_plan(monkeypatch):
    """TMA_DKV (TMA_DKV_DEFAULT per head dim and causal flag, or an
    override): taken at d = 64 / 128 / 256 with TMA-compatible 16-bit dK /
    dV or 16-bit group partials, with the descriptors' blocks (a consumer's
    keys x d, or at d = 256 every key x d / 2 columns), and for the split
    Q K^T (d = 192 / dv = 128: dK's chunks and dV, every key x 64, 64 and
    32 columns); turned off for the persistent grid, a
    one-slot ring (keys-as-M step), float32 partials and dK / dV off
    16-byte alignment."""
    hbwd = _bwd_module()
    monkeypatch.setattr(hbwd, "sm_count", lambda device: 132)
    monkeypatch.setattr(hbwd, "unsupported_reason", lambda *a: "")  # CPU tensors stand for CUDA ones

    def plan(d=128, h_kv=4, over=None, dk=None):
        q = torch.empty(2, 16, 1024, d, dtype=torch.bfloat16)
        k = torch.empty(2, h_kv, 1024, d, dtype=torch.bfloat16)
        lse = torch.empty(2, 16, 1024)
        p = hbwd._make_plan(q, q, k, k, lse, lse, q, k if dk is None else dk, k, 0.1, True, False, False, False,
                            {} if over == {} else dict(dict(TMA_DKV=True), **(over or {})))  # {}: no override
        assert not isinstance(p, str), p
        return p
    for d in (64, 128):
        p = plan(d, h_kv=16)
        assert p.split == 1 and p.kwargs["TMA_DKV"], d
        assert p.dkv_blocks == ([1, 1, 64, d], [1, 1, 64, d]) and p.dkv_dims[0][1] == list(torch.empty(
            2, 16, 1024, d).stride()), (p.dkv_blocks, p.dkv_dims)
    p = plan(128, h_kv=4, over=dict(GROUP_SPLIT=2))
    assert p.split == 2 and p.kwargs["TMA_DKV"] == hbwd.partials_16bit(2)
    assert p.dkv_dims[0][0] == [2, 8, 1024, 128], p.dkv_dims
    p = plan(256)                                                 # SPLIT_D: every key x d / 2 columns
    assert p.kwargs["TMA_DKV"] and p.dkv_blocks == ([1, 1, 64, 128], [1, 1, 64, 128]), p.dkv_blocks
    assert not plan(over=dict(PERSISTENT=True, NUM_SMS=7)).kwargs["TMA_DKV"]
    assert not plan(over=dict(NUM_STAGES=1)).kwargs["TMA_DKV"]
    odd = torch.empty(2 * 4 * 1024 * 128 + 1, dtype=torch.bfloat16)[1:].view(2, 4, 1024, 128)
    assert not plan(h_kv=4, dk=odd, over=dict(GROUP_SPLIT=1)).kwargs["TMA_DKV"]   # 2-byte offset
    assert not plan(over=dict(TMA_DKV=False)).kwargs["TMA_DKV"]
    # the split Q K^T (d = 192 / dv = 128): dK's first chunk, dV, dK's second chunk; by default
    q, k = torch.empty(2, 16, 1024, 192, dtype=torch.bfloat16), torch.empty(2, 4, 1024, 192, dtype=torch.bfloat16)
    v, do = torch.empty(2, 4, 1024, 128, dtype=torch.bfloat16), torch.empty(2, 16, 1024, 128, dtype=torch.bfloat16)
    lse = torch.empty(2, 16, 1024)
    for over, taken in ((dict(TMA_DKV=True, GROUP_SPLIT=1), True), (dict(GROUP_SPLIT=1), True),
                        (dict(TMA_DKV=False, GROUP_SPLIT=1), False),
                        (dict(TMA_DKV=True, PERSISTENT=True, NUM_SMS=7), False)):
        p = hbwd._make_plan(do, q, k, v, lse, lse, q, k, v, 0.1, True, False, False, False, over)
        assert not isinstance(p, str) and p.kwargs["TMA_DKV"] == taken, (over, p)
        if taken:
            assert p.dkv_blocks == ([1, 1, 64, 64], [1, 1, 64, 64], [1, 1, 64, 32]), p.dkv_blocks
            assert p.dkv_dims[2] == p.dkv_dims[0] and p.dkv_dims[1][0] == [2, 4, 1024, 128], p.dkv_dims
    # the defaults: d = 64 / 256 / 192 both ways, d = 128 not causal (causal by length, below);
    # with dropout d = 64 / 128 both ways; with a window causal only
    assert [hbwd.kernel_meta(d, c)["TMA_DKV"] for d in (64, 128, 256, 192) for c in (False, True)] == [
        True, True, True, False, True, True, True, True]
    assert [hbwd.kernel_meta(d, c, dropout=True)["TMA_DKV"] for d in (64, 128, 192) for c in (False, True)] == [
        True, True, True, True, False, False]
    assert [hbwd.kernel_meta(d, c, windowed=True)["TMA_DKV"] for d in (64, 128, 256) for c in (False, True)] == [
        False, True, False, True, False, False]
    monkeypatch.setattr(hbwd, "TMA_DKV_DROPOUT", {128: (False, True)})
    monkeypatch.setattr(hbwd, "TMA_DKV_WINDOW", {64: (True, True)})
    assert hbwd.kernel_meta(128, True, dropout=True)["TMA_DKV"]
    assert hbwd.kernel_meta(128, True, windowed=True, dropout=True)["TMA_DKV"]   # dropout's table
    assert not hbwd.kernel_meta(128, False, dropout=True)["TMA_DKV"]
    assert not hbwd.kernel_meta(128, True, windowed=True)["TMA_DKV"]
    assert hbwd.kernel_meta(64, True, windowed=True)["TMA_DKV"] and not hbwd.kernel_meta(64, True, dropout=True)[
        "TMA_DKV"]
    monkeypatch.setattr(hbwd, "TMA_DKV_DROPOUT", {})
    monkeypatch.setattr(hbwd, "TMA_DKV_WINDOW", {})
    assert hbwd.kernel_meta(64, True, dict(TMA_DKV=True), dropout=True)["TMA_DKV"]
    # causal calls up to TMA_DKV_CAUSAL_MAX_N[d] keys
    assert plan(128, h_kv=16, over={}).kwargs["TMA_DKV"]     # 1024 keys: within {128: 4096}
    monkeypatch.setattr(hbwd, "TMA_DKV_CAUSAL_MAX_N", {})
    assert not plan(128, h_kv=16, over={}).kwargs["TMA_DKV"]
    monkeypatch.setattr(hbwd, "TMA_DKV_CAUSAL_MAX_N", {128: 1024})
    assert plan(128, h_kv=16, over={}).kwargs["TMA_DKV"]
    assert not plan(128, h_kv=16, over=dict(TMA_DKV=False)).kwargs["TMA_DKV"]
    monkeypatch.setattr(hbwd, "TMA_DKV_CAUSAL_MAX_N", {128: 1000})
    assert not plan(128, h_kv=16, over={}).kwargs["TMA_DKV"]


@needs_hopper
@pytest.mark.parametrize("d", [64, 128], ids=_d_id)
@pytest.mark.parametrize("n", [4096, 4157])
def test_gqa_split_heads_first_default(n, d):
    """The default plan of a causal GQA call at d = 64 / 128 from 4096 keys
    (the group split, heads first) against float64, whole and ragged tiles."""
    q, do = (_flash_view(1, 8, n, d, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(1, 2, n, d, torch.bfloat16) for _ in range(2))
    _check(q, k, v, do, d ** -0.5, 0)


@needs_hopper
def test_gqa_unsplit_heads_first_default():
    """The default plan of a causal d = 64 GQA call with enough programs to
    keep its group whole (S = 1) from 2048 keys runs heads first
    (HEADS_FIRST_GQA_UNSPLIT_MIN_N), against float64, ragged tiles."""
    from flashattn_triton.kernels.hopper import bwd as hbwd
    b, hq, hkv, n, d = 8, 8, 4, 2101, 64
    q, do = (_flash_view(b, hq, n, d, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(b, hkv, n, d, torch.bfloat16) for _ in range(2))
    lse = torch.empty((b, hq, n), device="cuda")
    plan = hbwd._make_plan(do, q, k, v, lse, lse, q, k, v, d ** -0.5, True, False, False, False, {})
    assert not isinstance(plan, str) and plan.split == 1 and plan.kwargs["HEADS_FIRST"], plan
    _check(q, k, v, do, d ** -0.5, 0)


@needs_hopper
@pytest.mark.parametrize("d", [64, 128], ids=_d_id)
def test_gqa_split_heads_first_dropout_default(d):
    """With dropout, the default plan of a causal GQA call from 4096 keys
    runs heads first (HEADS_FIRST_GQA_SPLIT_MIN_N_DROPOUT) and gives the
    gradients of the same split in the other order (the same Philox keep
    mask: the counters follow the query head and position, not the
    program), up to float32 summation order; no NaN left in the
    NaN-poisoned outputs."""
    torch.manual_seed(0)
    b, hq, hkv, n = 1, 8, 2, 4157
    q, do = (_flash_view(b, hq, n, d, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(b, hkv, n, d, torch.bfloat16) for _ in range(2))

    def check(plan, over):
        assert not isinstance(plan, str) and plan.split > 1 and plan.kwargs["HEADS_FIRST"] == (not over), plan
    _dropout_grads_agree(q, k, v, do, 0, ({}, dict(HEADS_FIRST=False)), 1234, 7, plan_check=check)


def _dropout_grads_agree(q, k, v, do, shift, overs, seed, offset, plan_check=None, unverified=False):
    """The Hopper backward with dropout (p = 0.2, one seed and counter offset:
    the same Philox keep mask) under each override set of overs, into
    NaN-poisoned gradients after the Hopper forward: none left NaN, and
    every set's gradients equal the first's up to float32 summation order
    (max |diff| / max |ref| <= 2e-2).  plan_check(plan, over), if given,
    sees each set's launch plan."""
    from flashattn_triton.kernels.hopper import bwd as hbwd
    scale = q.shape[-1] ** -0.5
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device="cuda")
    assert hopper.hopper_attention_forward(q, k, v, o, lse, scale, shift)
    delta = (do.float() * o.float()).sum(-1).contiguous()
    seed_t = torch.tensor([seed], device="cuda", dtype=torch.int64)
    grads_of = []
    for over in overs:
        grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
        if plan_check is not None:
            plan_check(hbwd._make_plan(do, q, k, v, lse, delta, *grads, scale, shift is not None, False, True,
                                       unverified, dict(over)), over)
        assert hopper.hopper_attention_backward(do, q, k, v, lse, delta, *grads, scale, shift,
                                                dropout=(seed_t, 0.2, offset), UNVERIFIED=unverified,
                                                **over), hbwd._BROKEN
        grads_of.append(grads)
    for grads in grads_of[1:]:
        for name, g, r in zip(("dq", "dk", "dv"), grads_of[0], grads):
            assert not g.isnan().any() and not r.isnan().any(), name
            err = ((g.float() - r.float()).abs().max() / r.float().abs().max()).item()
            assert err <= 2e-2, (name, err)


def test_dropout_rng_warps_plan(monkeypatch):
    """DROPOUT_RNG_WARPS (4: each call's eight keep bits, tested in place
    after the dP^T wait, dV's keep scale once per block): as an override
    taken for dropout calls on the keys-as-M step (d = 64 / 128, BLOCK_M
    64), its shared memory counted; other values (1 - 3, removed) declined;
    declined (a reason, no launch) without dropout, with a window, on
    SPLIT_D (d = 256), on the persistent grid and with NAMED_BAR = 2 (no
    qdo_empty arrivals, which free the flags' slots).  By default
    (DROPOUT_RNG_CONFIGS, session 43) = 4 for dropout at d = 64 (consumers at
    232 registers, RNG_REGS 24) and at 128 (240); not where a build cannot take it (a window, the
    persistent grid, NAMED_BAR = 2: those builds draw as before rather than
    declining), not without dropout, not at d = 256, and an override of it
    or of CONSUMER_REGS stands."""
    hbwd = _bwd_module()
    monkeypatch.setattr(hbwd, "sm_count", lambda device: 132)
    monkeypatch.setattr(hbwd, "unsupported_reason", lambda *a: "")  # CPU tensors stand for CUDA ones

    def plan(d=128, dropped=True, windowed=False, rng=4, **over):
        q = torch.empty(2, 6, 1024, d, dtype=torch.bfloat16)
        k = torch.empty(2, 2, 1024, d, dtype=torch.bfloat16)
        lse = torch.empty(2, 6, 1024)
        return hbwd._make_plan(q, q, k, k, lse, lse, q, k, k, 0.1, True, windowed, dropped, False,
                               dict(over, **({} if rng is None else dict(DROPOUT_RNG_WARPS=rng))))
    for d in (64, 128):
        for rng, slot_bytes in ((4, 128 * 64 // 8 * 4),):  # 4 bytes per call of 8
            p = plan(d, rng=rng)
            assert not isinstance(p, str) and p.kwargs["DROPOUT_RNG_WARPS"] == rng, (d, p)
            meta = hbwd.kernel_meta(d, True, dict(DROPOUT_RNG_WARPS=rng), dropout=True)
            base = hbwd.kernel_meta(d, True, dict(DROPOUT_RNG_WARPS=0), dropout=True)
            assert (meta["BLOCK_N"], meta["BLOCK_M"]) == (128, 64), meta
            assert hbwd.smem_bytes(d, **meta) - hbwd.smem_bytes(d, **base) == meta["NUM_STAGES"] * (slot_bytes + 8)
    for reason in (plan(dropped=False), plan(windowed=True), plan(256), plan(PERSISTENT=True, NUM_SMS=7),
                   plan(NAMED_BAR=2), plan(rng=5), plan(rng=1), plan(rng=2), plan(rng=3)):
        assert isinstance(reason, str) and "DROPOUT_RNG_WARPS" in reason, reason
    # RNG_REGS (the RNG warps' registers, by default what the consumers leave): a multiple of 8
    # from 24 that fits beside the consumers, with the RNG warps only
    p = plan(rng=4, CONSUMER_REGS=232, RNG_REGS=24)
    assert not isinstance(p, str) and p.kwargs["RNG_REGS"] == 24, p
    for over in (dict(rng=4, CONSUMER_REGS=232, RNG_REGS=48), dict(rng=4, RNG_REGS=28), dict(rng=4, RNG_REGS=16),
                 dict(rng=0, RNG_REGS=24), dict(rng=None, dropped=False, RNG_REGS=24),
                 dict(rng=4, RNG_NUM_WARPS=2, RNG_REGS=96)):
        reason = plan(**over)
        assert isinstance(reason, str) and "RNG_REGS" in reason, (over, reason)
    # RNG_NUM_WARPS = 2 (two RNG warps: with RNG_REGS 24 the CTA's 12 warps leave both consumers
    # 240)
    p = plan(rng=4, RNG_NUM_WARPS=2, RNG_REGS=24)
    assert not isinstance(p, str) and (p.kwargs["RNG_NUM_WARPS"], p.kwargs["RNG_REGS"]) == (2, 24), p
    assert plan(rng=4).kwargs["RNG_NUM_WARPS"] == 4
    for over in (dict(rng=0, RNG_NUM_WARPS=2), dict(rng=4, RNG_NUM_WARPS=1),
                 dict(rng=4, RNG_NUM_WARPS=8), dict(rng=None, dropped=False, RNG_NUM_WARPS=2)):
        reason = plan(**over)
        assert isinstance(reason, str) and "RNG_NUM_WARPS" in reason, (over, reason)
    # the default: DROPOUT_RNG_CONFIGS where the build can take it
    for d, rng, regs, rng_regs in ((64, 4, 232, 24), (128, 4, 240, 0)):
        for causal in (False, True):
            meta = hbwd.kernel_meta(d, causal, dropout=True)
            assert (meta["DROPOUT_RNG_WARPS"], meta["CONSUMER_REGS"]) == (rng, regs), (d, causal, meta)
            assert meta.get("RNG_REGS", 0) == rng_regs, (d, causal, meta)
            p = plan(d, **{"rng": 4})
            assert not isinstance(p, str) and p.kwargs["CONSUMER_REGS"] == 240, p  # (an override: 240 stands)
        for over, windowed in ((dict(DROPOUT_RNG_WARPS=0), False), ({}, True), (dict(PERSISTENT=True), False),
                               (dict(NAMED_BAR=2), False)):
            meta = hbwd.kernel_meta(d, True, over, windowed=windowed, dropout=True)
            assert not meta["DROPOUT_RNG_WARPS"] and meta["CONSUMER_REGS"] == 240, (d, over, windowed, meta)
        p = plan(d, windowed=True, rng=None)
        assert not isinstance(p, str) and not p.kwargs["DROPOUT_RNG_WARPS"], p  # window + dropout: still built
        assert hbwd.kernel_meta(d, True, dict(CONSUMER_REGS=224), dropout=True)["CONSUMER_REGS"] == 224
        assert not hbwd.kernel_meta(d, True)["DROPOUT_RNG_WARPS"]  # no dropout
    assert not hbwd.kernel_meta(256, True, dropout=True)["DROPOUT_RNG_WARPS"]


@needs_hopper
@pytest.mark.parametrize("d", [64, 128], ids=_d_id)
@pytest.mark.parametrize("causal", [None, "br"])
@pytest.mark.parametrize("split", [1, 3])
@pytest.mark.parametrize("rng", [dict(DROPOUT_RNG_WARPS=4),
                                 dict(DROPOUT_RNG_WARPS=4, CONSUMER_REGS=232, RNG_REGS=24),
                                 dict(DROPOUT_RNG_WARPS=4, CONSUMER_REGS=232, RNG_REGS=24, NAMED_BAR=1),
                                 dict(DROPOUT_RNG_WARPS=4, RNG_NUM_WARPS=2, RNG_REGS=24),
                                 dict(DROPOUT_RNG_WARPS=4, RNG_NUM_WARPS=2, RNG_REGS=24, OWN_FIRST=True),
                                 dict(DROPOUT_RNG_WARPS=4, OWN_FIRST=True)],
                         ids=["bits_in_place", "bits_in_place_232",
                              "bits_in_place_232_nb1", "bits_in_place_rng2",
                              "bits_in_place_rng2_own_first", "bits_in_place_own_first"])
def test_dropout_rng_warps(d, causal, split, rng):
    """DROPOUT_RNG_WARPS = 4 (the default at d = 64 / 128): four RNG warps
    draw each step's keep bits into shared memory, each call's eight bits,
    and the consumers test each bit in place after the dP^T wait (dV scaled
    once per block); also at 232 consumer registers with RNG_REGS = 24, and
    with NAMED_BAR = 1; with two RNG warps, RNG_NUM_WARPS = 2, two calls per
    thread; with OWN_FIRST, the dQ product over this
    warpgroup's keys before the dS^T exchange wait) and the consumers read
    them: the same Philox mask as the consumers' own draws
    (DROPOUT_RNG_WARPS = 0), so that build's gradients up to summation
    order (GQA group of 3, whole or split across 3 programs, ragged
    lengths, flash-layout views); the plan took it."""
    q, do = (_flash_view(2, 6, 333, d, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(2, 2, 1121, d, torch.bfloat16) for _ in range(2))
    shift = None if causal is None else 1121 - 333

    def took(plan, over):
        assert not isinstance(plan, str), plan
        assert all(plan.kwargs[key] == x for key, x in over.items() if key != "GROUP_SPLIT"), (plan.kwargs, over)
        assert plan.split == split, plan.split
    overs = (dict(GROUP_SPLIT=split, DROPOUT_RNG_WARPS=0), dict(rng, GROUP_SPLIT=split))
    _dropout_grads_agree(q, k, v, do, shift, overs, 11, 5, plan_check=took)


def _cpu_planner(hbwd, monkeypatch):
    """plan(d, causal=True, dv=None, dropped=False, **overrides): _make_plan
    of a GQA call (B 2, Hq 6 / Hkv 2, N 1000) on CPU tensors standing for
    CUDA ones (132 SMs), its _Plan or the reason it declines."""
    monkeypatch.setattr(hbwd, "sm_count", lambda device: 132)
    monkeypatch.setattr(hbwd, "unsupported_reason", lambda *a: "")

    def plan(d, causal=True, dv=None, dropped=False, **over):
        q, k = torch.empty(2, 6, 1000, d, dtype=torch.bfloat16), torch.empty(2, 2, 1000, d, dtype=torch.bfloat16)
        v = torch.empty(2, 2, 1000, dv or d, dtype=torch.bfloat16)
        do = torch.empty(2, 6, 1000, dv or d, dtype=torch.bfloat16)
        lse = torch.empty(2, 6, 1000)
        return hbwd._make_plan(do, q, k, v, lse, lse, q, k, v, 0.1, causal, False, dropped, False, over)
    return plan


def test_dq_pieces_plan(monkeypatch):
    """NAMED_BAR = 2 at d = 192 / dv = 128 (an override; the 128-row step's
    dQ pieces through the producer) plans with one or two staging slots and
    the group split; PERSISTENT leaves it at 0 (no form there); three slots
    would need barrier 8, taken by the TMA_DKV epilogue: declined, naming
    the value; d = 256 (SPLIT_D, not the 128-row step) stays at 0."""
    hbwd = _bwd_module()
    plan = _cpu_planner(hbwd, monkeypatch)
    for over in (dict(NAMED_BAR=2), dict(NAMED_BAR=2, DQ_STAGE_BUFS=1), dict(NAMED_BAR=2, GROUP_SPLIT=3)):
        p = plan(192, True, 128, **over)
        assert not isinstance(p, str) and p.kwargs["NAMED_BAR"] == 2, (over, p)
    assert plan(192, True, 128, NAMED_BAR=2, PERSISTENT=True).kwargs["NAMED_BAR"] == 0
    assert plan(192, False, 128).kwargs["NAMED_BAR"] == 0
    reason = plan(192, True, 128, NAMED_BAR=2, DQ_STAGE_BUFS=3)
    assert isinstance(reason, str) and "DQ_STAGE_BUFS 1 or 2, not 3" in reason, reason
    assert plan(256, True, NAMED_BAR=2).kwargs["NAMED_BAR"] == 0


def test_own_first_keys_as_m_protocol_simulation():
    """OWN_FIRST on the keys-as-M path (dQ's product over this consumer's
    keys issued after its ds_ready arrival, the other's after the wait): no
    hazard or deadlock on the 2-D grid and persistent cases; issuing both
    before the wait is caught."""
    import hopper_bwd_model as hbm
    for n_tiles, ns, split, ds_bufs, chunks, seed in hbm.protocol_cases(full=False):
        if not split:
            hbm.simulate(n_tiles, ns, split, ds_bufs, chunks, seed, own_first=True)
    for n_tiles, ns, split, ds_bufs, chunks, seed, work in hbm.persistent_protocol_cases(full=False):
        if not split:
            hbm.simulate(n_tiles, ns, split, ds_bufs, chunks, seed, work=work, own_first=True)
    for broken in hbm.OWN_FIRST_BROKEN:
        caught = 0
        for seed in range(60):
            try:
                hbm.simulate(random.Random(seed).randint(2, 6), 2, False, 2, 1, seed, own_first=True, broken=broken)
            except hbm.ProtocolError:
                caught += 1
        assert caught > 0, broken


def test_own_first_plan(monkeypatch):
    """OWN_FIRST (an override) plans with two consumers on the 128-row
    split Q K^T step (Q_HALVES 1 or 2) and on the keys-as-M step with the
    ds_ready exchange (NAMED_BAR 0; with dropout too); it is declined with
    a reason on the hardware-barrier exchanges (NAMED_BAR 1 / 2: the d = 128
    causal default), on SPLIT_D (d = 256) and on the 64-row split Q K^T
    step; off by default; from a table it is dropped where it cannot be
    built rather than declining the call."""
    hbwd = _bwd_module()
    plan = _cpu_planner(hbwd, monkeypatch)
    for args, over in (((192, True, 128), {}), ((192, False, 128), dict(Q_HALVES=2)), ((128, False), {}),
                       ((64, True), dict(NAMED_BAR=0)), ((128, True), dict(NAMED_BAR=0)),
                       ((128, True, None, True), {})):
        p = plan(*args, **dict(over, OWN_FIRST=True))
        assert not isinstance(p, str) and p.kwargs["OWN_FIRST"], (args, over, p)
        assert not plan(*args, **over).kwargs["OWN_FIRST"]  # off by default
    for args, over in (((128, True), {}), ((128, True), dict(NAMED_BAR=1)),
                       ((256, True), {}), ((192, True, 128), ROWS64_192)):
        reason = plan(*args, **dict(over, OWN_FIRST=True))
        assert isinstance(reason, str) and "OWN_FIRST" in reason, (args, over, reason)
    # from a table (here the dropout RNG table) it stands where the build can take it, and is
    # dropped, not declined, where the exchange is not through ds_ready (NAMED_BAR = 1)
    monkeypatch.setitem(hbwd.DROPOUT_RNG_CONFIGS, 128, dict(DROPOUT_RNG_WARPS=4, OWN_FIRST=True))
    assert plan(128, True, None, True).kwargs["OWN_FIRST"]
    p = plan(128, True, None, True, NAMED_BAR=1)
    assert not isinstance(p, str) and not p.kwargs["OWN_FIRST"] and p.kwargs["DROPOUT_RNG_WARPS"] == 4, p


STAGE_BUFS_VARIANTS = [
    # overrides: two dQ staging buffers per consumer on the keys-as-M path
    # (the consumers issue the reduce-adds: NAMED_BAR 0 or 1), persistent too
    dict(DQ_STAGE_BUFS=2, NAMED_BAR=0),
    dict(DQ_STAGE_BUFS=2, NAMED_BAR=1),
    dict(DQ_STAGE_BUFS=2, NAMED_BAR=1, PERSISTENT=True, NUM_SMS=7),
]


OWN_FIRST_VARIANTS = [
    # overrides: dQ as two products over the key halves, this warpgroup's
    # before the dS^T exchange wait (keys-as-M, the ds_ready exchange)
    dict(OWN_FIRST=True, NAMED_BAR=0),
    dict(OWN_FIRST=True, NAMED_BAR=0, PERSISTENT=True, NUM_SMS=7),
    dict(OWN_FIRST=True, NAMED_BAR=0, GROUP_SPLIT=3),
]


@needs_hopper
@pytest.mark.parametrize("variant", STAGE_BUFS_VARIANTS + OWN_FIRST_VARIANTS,
                         ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()))
@pytest.mark.parametrize("d", [64, 128], ids=_d_id)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_keys_as_m_variants(variant, d, case):
    """Overrides of the keys-as-M path (d = 64 / 128) on the reference
    cases against float64: DQ_STAGE_BUFS = 2 (step it stages dQ in its
    consumer's buffer it % 2 and waits only for the reduce of the step
    before last); OWN_FIRST (dQ = dS K as two products over the key halves,
    this warpgroup's issued before the wait for the other's dS^T)."""
    b, hq, hkv, nq, nk, causal, layout = case
    q, k, v, do = _inputs(b, hq, hkv, nq, nk, d, torch.bfloat16, layout)
    shift = None if causal is None else (nk - nq if causal == "br" else 0)
    _check(q, k, v, do, d ** -0.5, shift, **variant)


PERSISTENT_VARIANTS = [
    dict(PERSISTENT=True),                                   # one program per SM
    dict(PERSISTENT=True, NUM_SMS=7, HEADS_FIRST=True),      # several work tiles per program
]


@needs_hopper
@pytest.mark.parametrize("variant", PERSISTENT_VARIANTS, ids=lambda v: "-".join(f"{k}={x}" for k, x in v.items()))
@pytest.mark.parametrize("d", HEAD_DIMS, ids=_d_id)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_persistent_matches_reference(variant, d, case):
    """The persistent form (kernel switch PERSISTENT, off by default) on the
    reference cases: the default path at d = 64 / 128, SPLIT_D at 256."""
    b, hq, hkv, nq, nk, causal, layout = case
    if layout == "padded":
        q, do = _padded(b, hq, nq, d, torch.bfloat16, 40), _padded(b, hq, nq, d, torch.bfloat16, 40)
        k, v = _padded(b, hkv, nk, d, torch.bfloat16, 40), _padded(b, hkv, nk, d, torch.bfloat16, 40)
    else:
        q, do = _flash_view(b, hq, nq, d, torch.bfloat16), _flash_view(b, hq, nq, d, torch.bfloat16)
        k, v = _flash_view(b, hkv, nk, d, torch.bfloat16), _flash_view(b, hkv, nk, d, torch.bfloat16)
    shift = None if causal is None else (nk - nq if causal == "br" else 0)
    _check(q, k, v, do, d ** -0.5, shift, **variant)


@needs_hopper
@pytest.mark.parametrize("variant", [dict(NUM_STAGES=3), dict(SPLIT_D=True, BLOCK_N=64, DS_BUFS=1, DQ_CHUNK=32)],
                         ids=lambda v: "-".join(f"{k}={x}" for k, x in v.items()))
@pytest.mark.parametrize("causal", [None, "br", "tl"])
def test_persistent_variants(variant, causal):
    """Persistent with a 3-stage ring and the SPLIT_D path at d = 128 (one
    P^T / dS^T buffer: its 'free' barrier's phase also continues across
    work tiles), 5 programs."""
    q, do = (_flash_view(2, 6, 333, 128, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(2, 2, 1121, 128, torch.bfloat16) for _ in range(2))
    shift = None if causal is None else (1121 - 333 if causal == "br" else 0)
    _check(q, k, v, do, 128 ** -0.5, shift, PERSISTENT=True, NUM_SMS=5, **variant)


@needs_hopper
@pytest.mark.parametrize("d", [128, 256], ids=_d_id)
@pytest.mark.parametrize("causal", [False, True])
def test_long_sequence(causal, d):
    q, do = (_flash_view(2, 16, 2048, d, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(2, 4, 2048, d, torch.bfloat16) for _ in range(2))
    _check(q, k, v, do, d ** -0.5, 0 if causal else None)


@needs_hopper
@pytest.mark.parametrize("d", [128, 256], ids=_d_id)
@pytest.mark.parametrize("causal", [False, True])
def test_api_uses_it_and_deterministic_does_not(monkeypatch, causal, d):
    """flash_attn_func's backward takes the Hopper kernel by default on sm_90
    (the forced tier here; head dims of CONFIGS_UNVERIFIED through the
    environment switch), matches float64, and deterministic=True takes the
    portable kernels and is bit-identical run to run."""
    from flashattn_triton import flash_attn_func
    from flashattn_triton.kernels.hopper import bwd as hbwd
    from flashattn_triton.reference import flash_attention_ref
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper")
    monkeypatch.setenv(hbwd.UNVERIFIED_ENV, "1")
    monkeypatch.setenv("FLASHATTN_TRITON_PREFETCH_BWD", "0")  # count the real backwards only
    calls = _spy_hopper_backward(monkeypatch)
    q = torch.randn(2, 1000, 8, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, 1234, 2, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, 1234, 2, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    do = torch.randn(2, 1000, 8, d, device="cuda", dtype=torch.bfloat16)

    def grads(deterministic):
        out = flash_attn_func(q, k, v, causal=causal, deterministic=deterministic)
        return torch.autograd.grad(out, (q, k, v), do)

    got = grads(False)
    assert calls == [True], calls
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o_ref = flash_attention_ref(*leaves, causal)[0]
    ref = torch.autograd.grad(o_ref, leaves, do.double())
    low_leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    o_low = flash_attention_ref(*low_leaves, causal, dtype=torch.bfloat16)[0]
    low = torch.autograd.grad(o_low, low_leaves, do)
    for name, g, r, lo in zip(("dq", "dk", "dv"), got, ref, low):
        assert_close(name, g, r, baseline=lo, factor=3.0, dtype=torch.bfloat16)
    calls.clear()
    first, second = grads(True), grads(True)
    assert calls == [], "deterministic=True must not take the Hopper backward (atomic dQ adds)"
    for name, a, b in zip(("dq", "dk", "dv"), first, second):
        assert torch.equal(a, b), f"{name}: deterministic backward differs run to run"
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_BWD", "0")
    grads(False)
    assert calls == [], "FLASHATTN_TRITON_HOPPER_BWD=0 must keep the portable backward"
    assert os.environ["FLASHATTN_TRITON_HOPPER_BWD"] == "0"


@needs_hopper
def test_declines_what_it_cannot_run(monkeypatch):
    from flashattn_triton.kernels.hopper import bwd as hbwd
    monkeypatch.delenv(hbwd.UNVERIFIED_ENV, raising=False)
    dev = "cuda"

    def run(q, k=None, scale=0.125, **kw):
        k = q if k is None else k
        lse = torch.zeros(q.shape[:3], device=dev)
        grads = [torch.zeros_like(t) for t in (q, k, k)]
        took = hopper.hopper_attention_backward(q, q, k, k, lse, lse, *grads, scale, None)
        return took or any(bool(g.any()) for g in grads)

    assert not run(torch.randn(1, 2, 64, 96, device=dev, dtype=torch.bfloat16)), "d = 96 has no config"
    for d in sorted(set(hbwd.CONFIGS_UNVERIFIED) - set(hbwd.CONFIGS)):
        assert not run(torch.randn(1, 2, 64, d, device=dev, dtype=torch.bfloat16)), f"d = {d} is opt-in"
    assert not run(torch.randn(1, 2, 64, 64, device=dev)), "float32"
    assert not run(torch.randn(1, 2, 64, 64, device=dev, dtype=torch.bfloat16), scale=-0.1), "negative scale"
    base = torch.randn(2 * 4 * 64 * 64 + 1, device=dev, dtype=torch.bfloat16)
    assert not run(base[1:].view(2, 4, 64, 64)), "a base not 16-byte aligned"


@needs_hopper
def test_prefetch_compiles_it(monkeypatch):
    """The backward prefetch (_prefetch.py) takes the Hopper backward on its
    meta tensors in compile-only mode, so the first backward finds the kernel
    built; then the real backward runs it."""
    from flashattn_triton import _prefetch, flash_attn_func
    from flashattn_triton.kernels import fastlaunch
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper")
    monkeypatch.setenv("FLASHATTN_TRITON_PREFETCH_BWD", "1")
    calls = []
    real = hopper.hopper_attention_backward

    def spy(*a, **kw):
        took = real(*a, **kw)
        calls.append((fastlaunch.compile_only_device() is not None, took))
        return took
    monkeypatch.setattr(hopper, "hopper_attention_backward", spy)
    q = torch.randn(1, 333, 4, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    k = torch.randn(1, 517, 2, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    v = torch.randn(1, 517, 2, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    out = flash_attn_func(q, k, v, causal=True)
    _prefetch.wait_pending()
    assert (True, True) in calls, f"the prefetch did not take the Hopper backward: {calls}"
    calls.clear()
    out.sum().backward()
    assert calls == [(False, True)], calls


# --------------------------------------------------------------------------- sliding windows (GPU)

WINDOW_CASES = [
    # b, hq, hkv, nq, nk, causal ("br", "tl", None: a left bound only), left, layout
    (2, 4, 4, 1000, 1000, "br", 0, "flash"),      # each row sees its diagonal key only
    (2, 4, 4, 1000, 1000, "br", 37, "flash"),     # narrower than a query tile
    (2, 4, 4, 1000, 1000, "br", 129, "flash"),    # the row that sees a block's last key starts a query tile
    (2, 4, 4, 1000, 1000, "br", 300, "flash"),
    (2, 8, 2, 333, 1201, "br", 200, "flash"),     # GQA, Nq < Nk: keys before 668 seen by no row
    (2, 8, 2, 333, 1201, "tl", 100, "padded"),    # top-left, NaN past N: keys past 432 seen by no row
    (1, 4, 1, 700, 130, "br", 50, "flash"),       # MQA, Nq > Nk: 570 rows see no key
    (2, 4, 4, 1000, 1000, "br", 5000, "flash"),   # wider than N: plain causal
    (3, 2, 2, 1, 517, "br", 100, "flash"),        # a single query row: 4 of 5 key blocks seen by nothing
    (2, 4, 2, 300, 900, None, 250, "padded"),     # a left bound only: keys from i + 600 - 250 on, NaN past N
    (2, 4, 4, 1000, 1000, None, 0, "flash"),      # not causal, left 0: keys j >= i
    (1, 4, 1, 130, 700, None, 1000, "flash"),     # not causal, wider than N: every key
]


def _window_ref(q, k, v, do, scale, shift, window, dtype=None):
    """(dq, dk, dv) by autograd through attention_ref with the band (left, -1)
    around window[1], in float64 (dtype None) or in dtype."""
    leaves = [t.detach().to(dtype or torch.float64).requires_grad_() for t in (q, k, v)]
    o, _ = attention_ref(*leaves, scale, shift, window=(window[0], -1), shift=window[1])
    o.backward(do.to(o.dtype))
    return [t.grad for t in leaves]


def _window_outputs(q, k, v, pad):
    """dq, dk, dv: NaN in every row the kernel must write (a row it skips shows
    as NaN), and, with pad > 0, views whose pad rows past N hold 7.0 (a write
    past N would change them)."""
    outs = []
    for t in (q, k, v):
        b, h, n, d = t.shape
        full = torch.full((b, h, n + pad, d), 7.0, device="cuda", dtype=t.dtype)
        full[:, :, :n] = float("nan")
        outs.append(full[:, :, :n])
    return outs


def _window_run(q, k, v, do, scale, shift, window, pad=0, **overrides):
    """The Hopper backward with a window, on lse2 and O of the float64
    reference (the forward's values; the Hopper forward's own window path is
    tested in test_hopper.py), delta = rowsum(dO * O)."""
    qd, kd, vd = (t.double() for t in (q, k, v))
    o, lse = attention_ref(qd, kd, vd, scale, shift, window=(window[0], -1), shift=window[1])
    o = o.to(q.dtype)
    lse2 = (lse / math.log(2)).float().contiguous()
    delta = (do.float() * o.float()).sum(-1).contiguous()
    dq, dk, dv = _window_outputs(q, k, v, pad)
    took = hopper.hopper_attention_backward(do, q, k, v, lse2, delta, dq, dk, dv, scale, shift, window,
                                            UNVERIFIED=True, **overrides)
    assert took, f"declined {overrides} (build errors: {hopper.bwd._BROKEN})"
    return dq, dk, dv


def _window_check(q, k, v, do, scale, shift, window, pad=0, **overrides):
    got = _window_run(q, k, v, do, scale, shift, window, pad, **overrides)
    ref = _window_ref(q, k, v, do, scale, shift, window)
    low = _window_ref(q, k, v, do, scale, shift, window, dtype=q.dtype)
    # With one visible key per row (window 0, causal) the softmax is exactly 1
    # and dQ, dK are 0 in exact arithmetic (and in the low-precision
    # reference), while the kernel's dP - delta is a difference of two float32
    # dot products of length dv: judge them at the inputs' scale as well.
    dp = (do.float().abs().amax() * v.float().abs().amax()).item() * v.shape[-1] * torch.finfo(torch.float32).eps
    floors = (dp * scale * k.float().abs().amax().item(), dp * scale * q.float().abs().amax().item(), 0.0)
    for name, g, r, lo, floor in zip(("dq", "dk", "dv"), got, ref, low, floors):
        atol = max(tolerance(max_abs_err(lo, r), r, q.dtype, 3.0), 3.0 * floor)
        assert_close(name, g, r, atol=atol)
    # Keys that no row sees: dK = dV = 0 exactly; rows that see no key: dQ = 0.
    nq, nk = q.shape[2], k.shape[2]
    i = torch.arange(nq, device="cuda")[:, None]
    j = torch.arange(nk, device="cuda")[None, :]
    vis = j >= i + window[1] - window[0]
    if shift is not None:
        vis &= j <= i + shift
    dq, dk, dv = got
    unseen_keys, keyless_rows = ~vis.any(0), ~vis.any(1)
    assert (dk[:, :, unseen_keys] == 0).all() and (dv[:, :, unseen_keys] == 0).all(), "dK / dV of unseen keys"
    assert (dq[:, :, keyless_rows] == 0).all(), "dQ of rows that see no key"
    if pad:
        for name, t in zip(("dq", "dk", "dv"), got):
            b, h, n, d = t.shape
            tail = t.as_strided((b, h, pad, d), t.stride(), t.storage_offset() + n * t.stride(2))
            assert (tail == 7.0).all(), f"the kernel wrote {name} rows past N"
    return got


def _inputs(b, hq, hkv, nq, nk, d, dtype, layout):
    """q, k, v, dO of a case: NaN rows past N ("padded") or flash_attn_func's layout (_flash_view)."""
    if layout == "padded":
        q, do = _padded(b, hq, nq, d, dtype, 40), _padded(b, hq, nq, d, dtype, 40)
        k, v = _padded(b, hkv, nk, d, dtype, 40), _padded(b, hkv, nk, d, dtype, 40)
    else:
        q, do = _flash_view(b, hq, nq, d, dtype), _flash_view(b, hq, nq, d, dtype)
        k, v = _flash_view(b, hkv, nk, d, dtype), _flash_view(b, hkv, nk, d, dtype)
    return q, k, v, do


@needs_hopper
@pytest.mark.parametrize("d", HEAD_DIMS, ids=_d_id)
@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[3]], ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("like_dq", [False, True], ids=["bhnd-buffer", "like-dq-buffer"])
def test_dq_convert_kernel_gives_torchs_bits(monkeypatch, d, case, like_dq):
    """kernels/bwd.py's DQ_CONVERT_KERNEL on: dq is, bit for bit, torch's
    copy of the same float32 buffer (captured; its sums vary run to run) and
    came from _bwd_dq_convert (or, with DQ_ACC_LIKE_DQ and dq's dense flash
    layout, _bwd_dq_convert_flat); dk and dv are the switch-off run's bits."""
    from flashattn_triton.kernels import bwd as portable, fastlaunch
    from test_dq_convert import count_launches
    hbwd = _bwd_module()
    monkeypatch.setattr(hbwd, "DQ_ACC_LIKE_DQ", like_dq)
    hbwd._PLANS.clear()
    kernel = count_launches(monkeypatch)
    buffers = []
    real = fastlaunch.zeroed_scratch
    monkeypatch.setattr(fastlaunch, "zeroed_scratch", lambda *a: buffers.append(real(*a)) or buffers[-1])
    b, hq, hkv, nq, nk, causal, layout = case
    q, k, v, do = _inputs(b, hq, hkv, nq, nk, d, torch.bfloat16, layout)
    shift = None if causal is None else (nk - nq if causal == "br" else 0)
    got = {}
    for on in (False, True):
        monkeypatch.setattr(portable, "DQ_CONVERT_KERNEL", on)
        got[on] = _run(q, k, v, do, d ** -0.5, shift)
        assert len(kernel.grids) == on, kernel.grids
    hbwd._PLANS.clear()
    strides = hbwd.dq_acc_strides(q) if like_dq else torch.empty(q.shape, device="meta").stride()
    if like_dq and layout != "padded":
        assert kernel.flat, "dq and the buffer share a dense layout: the flat pass"
    want = torch.full_like(q, float("nan")).copy_(buffers[-1].as_strided(q.shape, strides))
    bits = lambda t: t.view(torch.int16)  # noqa: E731
    assert torch.equal(bits(got[True][0]), bits(want))
    for name, on, off in zip(("dk", "dv"), got[True][1:], got[False][1:]):
        assert torch.equal(bits(on), bits(off)), name


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", HEAD_DIMS, ids=_d_id)
@pytest.mark.parametrize("case", WINDOW_CASES, ids=lambda c: "window-" + "-".join(map(str, c)))
def test_window_matches_reference(dtype, d, case):
    """Sliding windows (HAS_WINDOW; not yet run on a GPU when written): dq,
    dk, dv against float64 autograd with the band built by attention_ref, on
    NaN-poisoned outputs (padded layout: with sentinels past N); keys that
    no row sees get dK = dV = 0, rows that see no key dQ = 0."""
    b, hq, hkv, nq, nk, causal, left, layout = case
    q, k, v, do = _inputs(b, hq, hkv, nq, nk, d, dtype, layout)
    shift, window = window_shifts(case)
    _window_check(q, k, v, do, d ** -0.5, shift, window, pad=40 if layout == "padded" else 0)


WINDOW_VARIANTS = [
    (64, dict(BLOCK_M=64)),
    (128, dict(NUM_STAGES=3)),
    (128, dict(SPLIT_D=True, BLOCK_N=64, DS_BUFS=1, DQ_CHUNK=32)),   # SPLIT_D's masks at d = 128
    (64, dict(PERSISTENT=True, NUM_SMS=5)),                          # several work tiles per program
    (128, dict(PERSISTENT=True, NUM_SMS=7, HEADS_FIRST=True)),
    (256, dict(PERSISTENT=True, NUM_SMS=5)),
]


@needs_hopper
@pytest.mark.parametrize("d,variant", WINDOW_VARIANTS,
                         ids=_variant_ids("window"))
@pytest.mark.parametrize("causal", [None, "br", "tl"])
def test_window_variants(d, variant, causal):
    """Every schedule / buffer switch with a window (GQA, Nq < Nk, 300 keys
    wide; persistent: query-tile counts that differ from work tile to work
    tile, some 0, with ring and barrier phases carried over)."""
    from flashattn_triton.kernels.hopper import bwd as hbwd
    meta = hbwd.kernel_meta(d, causal is not None, variant, unverified=True, windowed=True)
    if hbwd.smem_bytes(d, **meta) > hbwd.SMEM_LIMIT:
        pytest.skip("does not fit in shared memory")
    q, do = (_flash_view(2, 6, 777, d, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(2, 2, 1500, d, torch.bfloat16) for _ in range(2))
    wshift = 0 if causal == "tl" else 1500 - 777
    _window_check(q, k, v, do, 0.09, None if causal is None else wshift, (300, wshift), **variant)


@needs_hopper
@pytest.mark.parametrize("d", [64, 128], ids=_d_id)
def test_window_long_sequence(d):
    """N = 4k, causal, with the windows of Gemma 3 (1024) and gpt-oss (128)
    and one key short of N; a call without a window in between keeps its
    own build."""
    q, do = (_flash_view(1, 4, 4096, d, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(1, 1, 4096, d, torch.bfloat16) for _ in range(2))
    for left in (1024, 128, None, 4095):
        if left is None:
            _check(q, k, v, do, d ** -0.5, 0)
        else:
            _window_check(q, k, v, do, d ** -0.5, 0, (left, 0))


@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_window_api_opt_in(monkeypatch, causal):
    """flash_attn_func with window_size=(left, 0 or -1), auto tier, N past
    the short-sequence rule: the portable backward without
    FLASHATTN_TRITON_HOPPER_WINDOW=1, the Hopper backward with it (window
    (left, Nk - Nq)), gradients against float64 either way."""
    from flashattn_triton import flash_attn_func
    from flashattn_triton.kernels.hopper import bwd as hbwd
    from flashattn_triton.reference import flash_attention_ref
    monkeypatch.delenv("FLASHATTN_TRITON_BACKEND", raising=False)
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_BWD", raising=False)
    monkeypatch.setenv("FLASHATTN_TRITON_PREFETCH_BWD", "0")  # count the real backwards only
    calls = []
    real = hbwd.hopper_attention_backward

    def spy(*a, **kw):
        took = real(*a, **kw)
        calls.append((a[10], a[11] if len(a) > 11 else kw.get("window"), took))
        return took
    monkeypatch.setattr(hbwd, "hopper_attention_backward", spy)
    monkeypatch.setattr(hopper, "hopper_attention_backward", spy)
    q = torch.randn(2, 1500, 8, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, 1700, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, 1700, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    do = torch.randn(2, 1500, 8, 128, device="cuda", dtype=torch.bfloat16)
    window = (256, 0 if causal else -1)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = torch.autograd.grad(flash_attention_ref(*leaves, causal, window_size=window)[0], leaves, do.double())
    low_leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    low = torch.autograd.grad(flash_attention_ref(*low_leaves, causal, window_size=window, dtype=torch.bfloat16)[0],
                              low_leaves, do)
    for opt_in in ("0", "1"):
        monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_WINDOW", opt_in)
        calls.clear()
        out = flash_attn_func(q, k, v, causal=causal, window_size=window)
        got = torch.autograd.grad(out, (q, k, v), do)
        if opt_in == "1":
            assert calls == [(200 if causal else None, (256, 200), True)], calls
        else:
            assert calls == [], "a window took the Hopper backward without the opt-in"
        for name, g, r, lo in zip(("dq", "dk", "dv"), got, ref, low):
            assert_close(f"{name} (opt-in {opt_in})", g, r, baseline=lo, factor=3.0, dtype=torch.bfloat16)


# ---------------------------------------------------------------------------
# GROUP_SPLIT: a GQA group's query heads over several programs (float32
# partial dK / dV per slice, summed per group; not yet run on a GPU when
# written): ``-k group_split``
# ---------------------------------------------------------------------------

def test_emulated_group_split_schedule():
    """tests/hopper_bwd_model.py (reduced sweep): with GROUP_SPLIT = S the
    programs of a group's S slices (K / V of head h // S, query heads [h * G
    / S, + G / S)) write float32 partials, each row once, and their sum per
    group equals the dense float64 dK / dV (dQ too): groups of 4 and 8, MQA,
    every S dividing the group, ragged lengths, causal or not, both
    query-tile heights and SPLIT_D."""
    import hopper_bwd_model as hbm
    cases = hbm.split_cases(full=False)
    for case in cases:
        err = hbm.check_split(case)
        assert err <= 1e-9, (case, err)
    assert len(cases) >= 40


@pytest.mark.parametrize("broken", ["split_kv_head", "split_head_base", "split_missing_head", "split_sum_layout"])
def test_emulated_group_split_broken_forms_are_caught(broken):
    """The split check rejects each wrong form on some case of the reduced
    sweep: K / V of the wrong KV head (slice h % H_KV), every slice from the
    group's first query head, a slice missing a query head, the partials
    summed in the wrong layout."""
    import hopper_bwd_model as hbm
    assert broken in hbm.SPLIT_BROKEN
    assert any(not hbm.check_split(case, broken) <= 1e-9 for case in hbm.split_cases(full=False)), broken


def test_group_split_rule_and_default(monkeypatch):
    """group_split: the smallest divisor of the group that gives `waves`
    programs per SM (4 by default, with or without dropout), the whole
    group when none does, 1 for MHA or when the partials do not fit; split_divisor: an explicit S as the largest divisor of the
    group not above it; the rule by default for causal calls, S = 1 for
    the others (no override)."""
    hbwd = _bwd_module()
    assert hbwd.HOPPER_BWD_GROUP_SPLIT_DEFAULT == {False: False, True: True}
    assert (hbwd.GROUP_SPLIT_WAVES, hbwd.GROUP_SPLIT_WAVES_DROPOUT) == (4, 4)
    mb = 1 << 20
    # B=2, N=4096, Hkv=4, d=128: 32 key blocks x 8 = 256 programs < 4 x 132: S = 4
    assert hbwd.group_split(4, 256, 132, mb) == 4
    monkeypatch.setattr(hbwd, "GROUP_SPLIT_WAVES", 2)
    # B=2, N=4096, Hkv=4, d=128: 32 key blocks x 8 = 256 programs < 264: S = 2
    assert hbwd.group_split(4, 256, 132, mb) == 2
    assert hbwd.group_split(4, 264, 132, mb) == 1
    assert hbwd.group_split(8, 100, 132, mb) == 4   # 400 >= 264
    assert hbwd.group_split(8, 16, 132, mb) == 8    # none reaches 264: the whole group
    assert hbwd.group_split(6, 50, 132, mb) == 6
    assert hbwd.group_split(1, 8, 132, mb) == 1
    assert hbwd.group_split(8, 16, 132, 1 << 29) == 2  # 4 slices of 512 MB do not fit 1 GB
    assert hbwd.group_split(8, 16, 132, 1 << 31) == 1
    assert [hbwd.split_divisor(s, 6) for s in (1, 2, 4, 5, 6, 12)] == [1, 2, 3, 3, 6, 6]
    assert hbwd.split_divisor(4, 1) == 1


def test_group_split_waves_for_dropout(monkeypatch):
    """A call with dropout takes GROUP_SPLIT_WAVES_DROPOUT programs per SM in
    the rule, the others GROUP_SPLIT_WAVES; an explicit S ignores both."""
    hbwd = _bwd_module()
    mb = 1 << 20
    monkeypatch.setattr(hbwd, "GROUP_SPLIT_WAVES", 2)
    monkeypatch.setattr(hbwd, "GROUP_SPLIT_WAVES_DROPOUT", 4)
    # B=2, N=4096, Hkv=4, 128-key blocks: 256 programs; 2 waves: S = 2, 4 waves (528): S = 4
    assert hbwd.resolve_group_split(0, True, 4, 256, mb, lambda: 132) == 2
    assert hbwd.resolve_group_split(0, True, 4, 256, mb, lambda: 132, dropout=True) == 4
    assert hbwd.resolve_group_split(None, True, 4, 256, mb, lambda: 132, dropout=True) == 4
    assert hbwd.resolve_group_split(2, True, 4, 256, mb, lambda: 132, dropout=True) == 2
    assert hbwd.group_split(4, 256, 132, mb, waves=1) == 1


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("default", [False, True])
def test_resolve_group_split(monkeypatch, causal, default):
    """A call's S from its override and the per-causal default: MHA is 1 for
    every request (session 14's GPU run: the rule's path raised on causal
    MHA once the default took it), the rule asks for the SM count only when
    it runs, an explicit S is split_divisor's."""
    hbwd = _bwd_module()
    monkeypatch.setitem(hbwd.HOPPER_BWD_GROUP_SPLIT_DEFAULT, causal, default)
    asked = []

    def sms():
        asked.append(1)
        return 132
    mb = 1 << 20
    for request in (None, 0, 1, 2, 4):
        assert hbwd.resolve_group_split(request, causal, 1, 36, mb, sms) == 1, request
    assert not asked
    assert hbwd.resolve_group_split(None, causal, 4, 36, mb, sms) == (4 if default else 1)
    assert len(asked) == int(default)
    assert hbwd.resolve_group_split(0, causal, 4, 36, mb, sms) == 4    # 36 x 4 < 528: the whole group
    assert hbwd.resolve_group_split(0, causal, 4, 256, mb, sms) == 4  # 256 x 2 < 4 x 132
    assert hbwd.resolve_group_split(3, causal, 4, 36, mb, sms) == 2
    assert hbwd.resolve_group_split(1, causal, 8, 36, mb, sms) == 1


_FAKE_GROUP_SPLIT = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda, LAUNCHES
from flashattn_triton.kernels.hopper import bwd as hb
hb.unsupported_reason = lambda *a: ""   # CPU tensors stand for CUDA ones
names = hb._attn_bwd_hopper.arg_names
for d, overrides, shift in [(128, {"GROUP_SPLIT": 2}, 788), (128, {"GROUP_SPLIT": 4}, 788),
                            (256, {"GROUP_SPLIT": 4}, 788),
                            (64, {"GROUP_SPLIT": 2, "PERSISTENT": True, "NUM_SMS": 5}, 788),
                            (128, {"GROUP_SPLIT": 0}, 788), (128, {}, 788), (128, {}, None),
                            (128, {"GROUP_SPLIT": 0, "MHA": True}, 788),
                            (128, {"GROUP_SPLIT": 4, "SLICES_FIRST": True}, 788)]:
    mha = overrides.pop("MHA", False)
    q = torch.randn(2, 2 if mha else 8, 333, d).to(torch.bfloat16)
    k = torch.randn(2, 2, 1121, d).to(torch.bfloat16)
    lse, delta = torch.zeros(2, q.shape[1], 333), torch.zeros(2, q.shape[1], 333)
    grads = [torch.zeros_like(t) for t in (q, k, k)]
    n = len(LAUNCHES)
    with fake_cuda():
        ok = hb.hopper_attention_backward(q, q, k, k, lse, delta, *grads, 0.0625, shift, **overrides)
    assert ok, hb._BROKEN
    main = [l for l in list(LAUNCHES)[n:] if "N_BH" in getattr(l[0].src.fn, "arg_names", ())][-1]
    launcher, grid, args = main
    consts = launcher.src.constants
    tail = args[len(args) - (len(names) - names.index("H_KV")):]
    # H_KV, N_Q, N_K, GROUP
    print(d, grid, consts.get((names.index("GROUP_SPLIT"),)), tail[0], tail[3], len(LAUNCHES) - n)
"""


def test_group_split_launch_on_a_fake_driver():
    """Triton 3.6 without a GPU: GROUP_SPLIT = 2 / 4 compiles for sm_90
    through the launcher's JIT path (d = 64, 128, 256; the persistent form
    too) and launches S times the programs along (batch, KV head), as
    H_KV * S "KV heads" of G / S query heads, then the two group sums;
    GROUP_SPLIT=0 takes group_split's S (36 programs for 132 SMs: the whole
    group of 4); no override takes the rule when causal (the default,
    HOPPER_BWD_GROUP_SPLIT_DEFAULT) and keeps S = 1 (one launch) when not;
    causal MHA with GROUP_SPLIT=0 runs unsplit; SLICES_FIRST launches
    (key blocks * S, batch * KV heads)."""
    lines = _fake_lines(_FAKE_GROUP_SPLIT)
    # 1121 keys: 9 blocks of 128 (d = 64, 128) or 18 of 64 (d = 256); 2 batches x 2 KV heads, groups of 4.
    assert lines == ["128 (9, 8, 1) 2 4 2 3",
                     "128 (9, 16, 1) 4 8 1 3",
                     "256 (18, 16, 1) 4 8 1 3",
                     "64 (5, 1, 1) 2 4 2 3",
                     "128 (9, 16, 1) 4 8 1 3",
                     "128 (9, 16, 1) 4 8 1 3",
                     "128 (9, 4, 1) 1 2 4 1",
                     "128 (9, 4, 1) 1 2 1 1",
                     "128 (36, 4, 1) 4 8 1 3"], lines


GROUP_SPLIT_CASES = [
    # b, hq, hkv, nq, nk, causal ("br" bottom-right, "tl" top-left), layout
    (2, 8, 2, 1000, 1000, None, "flash"),      # groups of 4, ragged N
    (2, 8, 2, 333, 1201, "br", "flash"),       # Nq < Nk
    (1, 16, 2, 515, 515, "br", "padded"),      # groups of 8, NaN past N in every input
    (2, 8, 1, 700, 130, "br", "flash"),        # MQA, Nq > Nk: 570 rows see no key
    (1, 4, 1, 777, 777, "tl", "padded"),       # MQA, 4 heads
    (2, 6, 3, 1, 517, "br", "flash"),          # groups of 2 (S = 4 runs as 2), a single query row
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_group_sum_of_partials(device, dtype):
    """kernels/bwd.py _sum_group_partials (the group sum after a split
    backward): out[b, h] is the float32 sum over its S consecutive partial
    heads, cast once, into a strided output; 16-bit partials (the Hopper
    backward's GROUP_PARTIALS_16BIT) are added in float32 as well (a 16-bit
    running sum would differ)."""
    from flashattn_triton.kernels.bwd import _sum_group_partials
    b, h_kv, split, n, d = 2, 3, 4, 77, 40
    part = (torch.randn(b, h_kv * split, n, d, device=device) * 64).to(dtype)
    # a float32 output shows the float32 sum itself (the interpreter casts to
    # bfloat16 by truncation, the GPU to nearest: a cast compares by ulp)
    out = torch.full((b, n, h_kv, d), float("nan"), dtype=torch.float32, device=device).transpose(1, 2)
    _sum_group_partials(out, part, h_kv, split)
    slices = part.float().view(b, h_kv, split, n, d)
    want = slices[:, :, 0]
    for s in range(1, split):  # in slice order, as the kernel adds
        want = want + slices[:, :, s]
    assert torch.equal(out, want), (max_abs_err(out, want), (out != want).sum().item())
    out16 = torch.full_like(out, float("nan")).to(torch.bfloat16)
    _sum_group_partials(out16, part, h_kv, split)
    ulp = 2.0 ** (torch.frexp(want)[1] - 8).double()
    assert ((out16.double() - want.double()).abs() <= ulp).all(), max_abs_err(out16, want)


def test_partials_16bit_setting(monkeypatch):
    """GROUP_PARTIALS_16BIT: False never, True every split, an int S0 the
    splits of S0 slices or more; an unsplit launch (S = 1) never has partials."""
    hbwd = _bwd_module()
    for setting, want in [(False, [False] * 4), (True, [False, True, True, True]),
                          (8, [False, False, False, True]), (4, [False, False, True, True])]:
        monkeypatch.setattr(hbwd, "GROUP_PARTIALS_16BIT", setting)
        assert [hbwd.partials_16bit(s) for s in (1, 2, 4, 8)] == want, setting


@needs_hopper
@pytest.mark.parametrize("partials16", [False, True, 4], ids=["f32-partials", "16bit-partials", "16bit-from-S4"])
@pytest.mark.parametrize("split", [2, 4])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", HEAD_DIMS, ids=_d_id)
@pytest.mark.parametrize("case", GROUP_SPLIT_CASES, ids=lambda c: "group_split-" + "-".join(map(str, c)))
def test_group_split_matches_reference(monkeypatch, split, dtype, d, case, partials16):
    """GROUP_SPLIT = 2 / 4 (module doc of kernels/hopper/bwd.py): dq, dk, dv
    against float64 autograd on NaN-poisoned outputs (_run), and the group
    sums ran with the expected slice count, over float32 partials or, with
    GROUP_PARTIALS_16BIT, partials in the inputs' dtype (with 4: from S = 4 on)."""
    from flashattn_triton.kernels import bwd as portable
    monkeypatch.setattr(hopper.bwd, "GROUP_PARTIALS_16BIT", partials16)
    b, hq, hkv, nq, nk, causal, layout = case
    sums = []
    real = portable._sum_group_partials

    def spy(out, part, h_kv, n_split):
        sums.append((part.shape[1], h_kv, n_split, part.dtype))
        return real(out, part, h_kv, n_split)
    monkeypatch.setattr(portable, "_sum_group_partials", spy)
    q, k, v, do = _inputs(b, hq, hkv, nq, nk, d, dtype, layout)
    shift = None if causal is None else (nk - nq if causal == "br" else 0)
    _check(q, k, v, do, d ** -0.5, shift, GROUP_SPLIT=split)
    s = hopper.bwd.split_divisor(split, hq // hkv)
    want16 = partials16 is True or (partials16 == 4 and s >= 4)
    assert sums == [(hkv * s, hkv, s, dtype if want16 else torch.float32)] * 2, sums


@needs_hopper
@pytest.mark.parametrize("variant", [dict(PERSISTENT=True, NUM_SMS=5), dict(PERSISTENT=True, NUM_SMS=7, HEADS_FIRST=True),
                                     dict(GROUP_SPLIT=0), dict(NUM_STAGES=3), dict(SLICES_FIRST=True),
                                     dict(SLICES_FIRST=True, GROUP_SPLIT=2)],
                         ids=lambda v: "group_split-" + ",".join(f"{k}={x}" for k, x in v.items()))
@pytest.mark.parametrize("d", HEAD_DIMS, ids=_d_id)
@pytest.mark.parametrize("causal", [None, "br"])
def test_group_split_variants(variant, d, causal):
    """GROUP_SPLIT with the persistent form (several work tiles per program,
    slices of one group in different programs), the rule (GROUP_SPLIT=0),
    a deeper ring and the slices-first grid order (SLICES_FIRST)."""
    from flashattn_triton.kernels.hopper import bwd as hbwd
    over = dict(dict(GROUP_SPLIT=4), **variant)
    if hbwd.smem_bytes(d, **hbwd.kernel_meta(d, causal is not None, over, unverified=True)) > hbwd.SMEM_LIMIT:
        pytest.skip("does not fit in shared memory")
    q, do = (_flash_view(2, 8, 777, d, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(2, 2, 1500, d, torch.bfloat16) for _ in range(2))
    _check(q, k, v, do, 0.09, None if causal is None else 1500 - 777, **over)


@needs_hopper
@pytest.mark.parametrize("d", [64, 128], ids=_d_id)
@pytest.mark.parametrize("causal", [False, True])
def test_group_split_window_and_dropout_agree(d, causal):
    """A window and dropout (the same Philox keep mask: the counters follow
    the true query head) with GROUP_SPLIT = 4 give the gradients of the
    unsplit kernel up to float32 summation order."""
    torch.manual_seed(0)
    b, hq, hkv, nq, nk = 2, 8, 2, 600, 900
    q, do = (_flash_view(b, hq, nq, d, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(b, hkv, nk, d, torch.bfloat16) for _ in range(2))
    shift = nk - nq if causal else None
    o = torch.empty_like(q)
    lse = torch.empty((b, hq, nq), device="cuda")
    assert hopper.hopper_attention_forward(q, k, v, o, lse, d ** -0.5, shift)
    delta = (do.float() * o.float()).sum(-1).contiguous()
    seed = torch.tensor([1234], device="cuda", dtype=torch.int64)
    for kw in (dict(window=(200, nk - nq)), dict(dropout=(seed, 0.2, 7))):
        outs = []
        for over in (dict(GROUP_SPLIT=1), dict(GROUP_SPLIT=4)):
            grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
            took = hopper.hopper_attention_backward(do, q, k, v, lse, delta, *grads, d ** -0.5, shift,
                                                    UNVERIFIED=True, **kw, **over)
            assert took, (kw, over, hopper.bwd._BROKEN)
            outs.append(grads)
        for name, g, r in zip(("dq", "dk", "dv"), *outs):
            assert not g.isnan().any(), name
            err = ((g.float() - r.float()).abs().max() / r.float().abs().max()).item()
            assert err <= 2e-2, (kw.keys(), name, err)


@needs_hopper
@pytest.mark.parametrize("call_plans", [False, True], ids=["kernel_plan", "call_plan"])
@pytest.mark.parametrize("n_k", [128, 1234])
def test_repeated_backward_matches_the_first(monkeypatch, n_k, call_plans):
    """A repeated flash_attn_func backward gives the first call's gradients:
    bit for bit with one key block (each dQ element gets one add, no
    ordering left to the atomics), else dK and dV bit for bit and dQ within
    the float32 add order's rounding.  Without the call plans (ops.BwdPlan)
    every backward goes through the Hopper backward's per-signature plan
    (descriptors of new tensors); with them, the first backward runs it and
    records, the later ones replay that recording (the causal dQ conversion
    is a Triton kernel since session 27, so the recording is clean)."""
    from flashattn_triton import flash_attn_func, ops
    from flashattn_triton.kernels.hopper import bwd as hbwd
    monkeypatch.setattr(ops, "PLANS_ENABLED", call_plans)
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper")  # every length
    monkeypatch.setenv("FLASHATTN_TRITON_PREFETCH_BWD", "0")
    calls = _spy_hopper_backward(monkeypatch)
    hbwd._PLANS.clear()
    gen = torch.Generator(device="cuda").manual_seed(0)
    base = [torch.randn(2, n, h, 128, device="cuda", generator=gen).to(torch.bfloat16)
            for n, h in ((300, 4), (n_k, 2), (n_k, 2), (300, 4))]

    def grads():
        q, k, v = (t.clone().requires_grad_() for t in base[:3])  # new tensors (addresses) each call
        out = flash_attn_func(q, k, v, causal=True)
        return torch.autograd.grad(out, (q, k, v), base[3].clone())

    first = grads()
    assert len(hbwd._PLANS) == 1
    for _ in range(3):
        again = grads()
        for name, a, b in zip(("dq", "dk", "dv"), first, again):
            if name == "dq" and n_k > 128:
                torch.testing.assert_close(b.float(), a.float(), rtol=2 ** -7, atol=1e-3)
            else:
                assert torch.equal(a, b), f"{name}: a repeated backward differs from the first"
    assert calls == ([True] if call_plans else [True] * 4), calls
    assert len(hbwd._PLANS) == 1, "a repeated call must reuse its signature's plan"


# --------------------------------------------------------------------------- split Q K^T (d = 192, dv = 128)

def test_emulated_split_qk_schedule():
    """The split Q K^T (tests/hopper_bwd_model.py, d = 24 = 16 + 8 and
    d_v = 16 standing for 192 = 128 + 64 and 128): S as two column-chunk
    products, each consumer's columns of dV, of dK's two chunks and of dQ's
    pieces, causal or not, GQA, ragged lengths, GROUP_SPLIT and persistent,
    in float64 against the dense reference."""
    import hopper_bwd_model as hbm
    for case in hbm.qk1_cases(full=False):
        err = hbm.check_qk1(case)
        assert err <= 1e-9, (case, err)


@pytest.mark.parametrize("broken", ["qk1_no_second", "qk1_dk1_offset", "qk1_dq_source", "qk1_dv_cols"])
def test_emulated_split_qk_broken_forms_are_caught(broken):
    """Wrong forms of the split Q K^T (the second chunk left out of S, dK's
    second chunk written without its base column, dQ's second-chunk pieces
    read from K's first chunk, dV at the second chunk's column stride) fail
    the check."""
    import hopper_bwd_model as hbm
    assert broken in hbm.QK1_BROKEN
    assert any(not hbm.check_qk1(case, broken) <= 1e-9 for case in hbm.qk1_cases(full=False)), broken


def test_split_qk_config_fits():
    """d = 192 (dv = 128) is in CONFIGS (GPU-validated in session 15; it
    was in CONFIGS_UNVERIFIED until then), on the SPLIT_D path with the
    128-row Q_HALVES step since session 35 (its dQ pieces 64 columns, a
    whole second chunk), within the shared memory the launcher allows; the
    64-row step of before (ROWS64_192: its pieces dividing both chunks'
    per-consumer columns) fits too; the model counts V and dO at 128
    columns and is the formula of before at d = dv."""
    hbwd = _bwd_module()
    assert 192 in hbwd.CONFIGS and 192 not in hbwd.CONFIGS_UNVERIFIED
    assert hbwd.HEAD_DIM_V[192] == 128 and 192 in hbwd.DROPOUT_DECLINE and 192 in hbwd.WINDOW_DECLINE
    for causal in (False, True):
        default = hbwd.kernel_meta(192, causal)
        assert default["Q_HALVES"] and default["BLOCK_M"] == 128 and default["DQ_CHUNK"] == 64, default
        for m in (default, dict(default, **ROWS64_192)):
            assert m["SPLIT_D"] and m["BLOCK_N"] == 64, m
            if not m["Q_HALVES"]:
                vc, k1c = 128 // m["NUM_CONSUMERS"], 64 // m["NUM_CONSUMERS"]
                assert vc % m["DQ_CHUNK"] == 0 and k1c % m["DQ_CHUNK"] == 0, m
            assert hbwd.smem_bytes(192, head_dim_v=128, **m) <= hbwd.SMEM_LIMIT
            # K 24 KB + V 16 KB, (Q, dO) BLOCK_M x 320 per stage, P^T / dS^T 64 x BLOCK_M each per
            # buffer, dQ staging per consumer and buffer: its rows (Q_HALVES: half the tile) x DQ_CHUNK
            bm = m["BLOCK_M"]
            dq_rows = bm // 2 if m["Q_HALVES"] else bm
            assert hbwd.smem_bytes(192, head_dim_v=128, **m) == (
                2 * (64 * 320 + m["NUM_STAGES"] * bm * 320 + 2 * m["DS_BUFS"] * 64 * bm)
                + 4 * dq_rows * 2 * m["DQ_CHUNK"] * m["DQ_STAGE_BUFS"]
                + 8 * m["NUM_STAGES"] * bm + 8 * (1 + 3 * m["NUM_STAGES"] + 2))
    for d in (64, 128, 256):
        meta = hbwd.kernel_meta(d, False)
        assert hbwd.smem_bytes(d, head_dim_v=d, **meta) == hbwd.smem_bytes(d, **meta)


def test_split_qk_plan_declines_window_and_dropout(monkeypatch):
    """_make_plan at d = 192 / dv = 128 (CPU tensors standing for CUDA ones):
    a window or dropout is declined, the default table takes the head
    dims (V of another width is declined), and the plan holds dv-wide
    blocks for Q, K, V, dO, the second chunks' 64-wide Q and K blocks,
    HEAD_DIM_V = 128, and GROUP_SPLIT partials of each tensor's width."""
    hbwd = _bwd_module()
    monkeypatch.setattr(hbwd, "sm_count", lambda device: 132)
    q = torch.randn(2, 8, 300, 192).to(torch.bfloat16)
    k = torch.randn(2, 2, 500, 192).to(torch.bfloat16)
    v = torch.randn(2, 2, 500, 128).to(torch.bfloat16)
    do = torch.randn(2, 8, 300, 128).to(torch.bfloat16)
    lse = torch.zeros(2, 8, 300)
    grads = [torch.empty_like(t) for t in (q, k, v)]
    args = (do, q, k, v, lse, lse, *grads, 0.07)
    # (unsupported_reason on CPU tensors: "not a CUDA tensor"; the rest of its checks)
    monkeypatch.setattr(hbwd.fastlaunch, "compile_only_device", lambda: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    meta_args = tuple(t.to("meta") for t in args[:-1]) + (0.07,)
    assert hbwd.unsupported_reason(*meta_args) == ""
    wrong_v = torch.randn(2, 2, 500, 64).to(torch.bfloat16).to("meta")
    reason = hbwd.unsupported_reason(*meta_args[:3], wrong_v, *meta_args[4:])
    assert "head dims" in reason and "192/128" in reason, reason
    monkeypatch.setattr(hbwd, "unsupported_reason", lambda *a: "")
    plan_of = lambda windowed, dropped, over=None: hbwd._make_plan(*args, False, windowed, dropped, True,  # noqa: E731
                                                                  over or {})
    assert plan_of(True, False) == hbwd.WINDOW_DECLINE[192]
    assert "dropout" in plan_of(False, True)
    plan = plan_of(False, False)
    assert plan.qk1 and plan.kwargs["HEAD_DIM_V"] == 128 and plan.kwargs["HEAD_DIM"] == 192
    assert [b[-1] for b in plan.blocks] == [128, 128, 128, 128, 64, 64, 64], plan.blocks
    assert [b[-2] for b in plan.blocks[5:]] == [128, 64]  # Q's second chunk BLOCK_M rows, K's BLOCK_N
    assert plan.acc_shape == (2, 8, 300, 192)
    split = plan_of(False, False, dict(GROUP_SPLIT=2))
    assert split.split == 2 and split.out_shape == ((2, 4, 500, 192), (2, 4, 500, 128)), split.out_shape
    assert split.tail[4:10] == (4 * 500 * 192, 500 * 192, 192, 4 * 500 * 128, 500 * 128, 128), split.tail
    for d in (64, 128, 256):  # d = dv: no second chunk
        qd = torch.randn(1, 2, 100, d).to(torch.bfloat16)
        p = hbwd._make_plan(qd, qd, qd, qd, lse[:1, :2, :100], lse[:1, :2, :100], qd, qd, qd, 0.1, False, False,
                            False, False, {})
        assert not p.qk1 and p.kwargs["HEAD_DIM_V"] == d and len(p.blocks) == 5, d


_FAKE_LAUNCH_192 = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda, LAUNCHES
from flashattn_triton.kernels.hopper import bwd as hb
from flashattn_triton.kernels import bwd as portable
hb.unsupported_reason = lambda *a: ""   # CPU tensors stand for CUDA ones
hb.HOPPER_BWD_GROUP_SPLIT_DEFAULT = {False: False, True: False}  # S = 1 unless overridden (GROUP_SPLIT=2 below)
portable._sum_group_partials = lambda out, part, h_kv, n_split: print("sum", tuple(part.shape), n_split)
names = hb._attn_bwd_hopper.arg_names
q = torch.randn(2, 4, 333, 192).to(torch.bfloat16)
k = torch.randn(2, 2, 1121, 192).to(torch.bfloat16)
v = torch.randn(2, 2, 1121, 128).to(torch.bfloat16)
do = torch.randn(2, 4, 333, 128).to(torch.bfloat16)
lse, delta = torch.zeros(2, 4, 333), torch.zeros(2, 4, 333)
grads = [torch.zeros_like(t) for t in (q, k, v)]
QH = dict(Q_HALVES=True, BLOCK_M=128, NUM_STAGES=1, DS_BUFS=1, DQ_CHUNK=64, DQ_STAGE_BUFS=2)
for causal, over in ((False, {}), (True, {}), (True, dict(PERSISTENT=True, NUM_SMS=7)), (False, dict(GROUP_SPLIT=2)),
                     (True, dict(Q_HALVES=False, BLOCK_M=64, NUM_STAGES=2, DS_BUFS=2, DQ_CHUNK=32,
                                 DQ_STAGE_BUFS=2)), (True, QH),
                     (True, dict(QH, TMA_DKV=True)), (False, dict(TMA_DKV=True, GROUP_SPLIT=2))):
    with fake_cuda():
        ok = hb.hopper_attention_backward(do, q, k, v, lse, delta, *grads, 0.07, 788 if causal else None,
                                          **over)
    assert ok, hb._BROKEN
    launch = LAUNCHES[-1]
    consts = launch[0].src.constants
    print(causal, launch[1], consts.get((names.index("HEAD_DIM_V"),)), consts.get((names.index("SPLIT_D"),)),
          consts.get((names.index("q1_desc"),), "param"))
    if over.get("Q_HALVES") and not over.get("TMA_DKV"):
        plan = hb._make_plan(do, q, k, v, lse, delta, *grads, 0.07, causal, False, False, False, dict(over))
        print("dq block", list(plan.blocks[4]))
    if over.get("TMA_DKV"):
        plan = hb._make_plan(do, q, k, v, lse, delta, *grads, 0.07, causal, False, False, False, dict(over))
        print("tma", plan.kwargs["TMA_DKV"], [b[3] for b in plan.dkv_blocks],
              consts.get((names.index("dk1_desc"),), "param"))
print(192 in hb.CONFIGS)  # the default table (GPU-validated)
"""


def test_split_qk_launch_on_a_fake_driver():
    """Triton 3.6 without a GPU: the d = 192 / dv = 128 backward
    compiles for sm_90 through the launcher's real JIT path
    (tests/fake_cuda.py) and launches (key blocks of 64, B * Hkv) programs
    with HEAD_DIM_V = 128 and the second chunks' descriptors as parameters;
    the persistent form; GROUP_SPLIT = 2 with dK / dV partials of 192 and
    128 columns; the 64-row step of before with two dQ staging buffers
    (DQ_STAGE_BUFS = 2); the 128-row Q_HALVES step, the default (its dQ
    descriptor in 64 x 64 blocks); TMA_DKV (dK / dV by TMA stores: dK's
    two chunks and dV through three descriptors of 64, 64 and 32 columns,
    also with 16-bit group partials); d = 192 in the default table."""
    lines = _fake_lines(_FAKE_LAUNCH_192)
    # 1121 keys / 64 = 18 key blocks, 2 batches * 2 KV heads (x 2 slices with GROUP_SPLIT = 2)
    assert lines == ["False (18, 4, 1) 128 True param",
                     "True (18, 4, 1) 128 True param",
                     "True (7, 1, 1) 128 True param",
                     "sum (2, 4, 1121, 192) 2",
                     "sum (2, 4, 1121, 128) 2",
                     "False (18, 8, 1) 128 True param",
                     "True (18, 4, 1) 128 True param",
                     "True (18, 4, 1) 128 True param",
                     "dq block [1, 1, 64, 64]",
                     "True (18, 4, 1) 128 True param",
                     "tma True [64, 64, 32] param",
                     "sum (2, 4, 1121, 192) 2",
                     "sum (2, 4, 1121, 128) 2",
                     "False (18, 8, 1) 128 True param",
                     "tma True [64, 64, 32] param",
                     "True"], lines


# The 64-row split Q K^T step (_attn_bwd_step_qk1), CONFIGS[192] before
# session 35 (then the 128-row Q_HALVES step): an override from the default.
ROWS64_192 = dict(Q_HALVES=False, BLOCK_M=64, NUM_STAGES=2, DS_BUFS=2, DQ_CHUNK=32, DQ_STAGE_BUFS=3)


def _inputs_192(b, hq, hkv, nq, nk, dtype, layout):
    """q, k (192 columns), v, dO (128) of a case, as _inputs."""
    if layout == "padded":
        q, do = _padded(b, hq, nq, 192, dtype, 40), _padded(b, hq, nq, 128, dtype, 40)
        k, v = _padded(b, hkv, nk, 192, dtype, 40), _padded(b, hkv, nk, 128, dtype, 40)
    else:
        q, do = _flash_view(b, hq, nq, 192, dtype), _flash_view(b, hq, nq, 128, dtype)
        k, v = _flash_view(b, hkv, nk, 192, dtype), _flash_view(b, hkv, nk, 128, dtype)
    return q, k, v, do


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "d192-dv128-" + "-".join(map(str, c)))
def test_split_qk_matches_reference(dtype, case):
    """d = 192 with dv = 128 (split Q K^T): dq (192 columns), dk (192) and dv (128) against float64
    autograd on NaN-poisoned outputs, causal bottom-right / top-left and
    not, GQA and MQA, ragged N, NaN past N in the padded layout."""
    b, hq, hkv, nq, nk, causal, layout = case
    q, k, v, do = _inputs_192(b, hq, hkv, nq, nk, dtype, layout)
    shift = None if causal is None else (nk - nq if causal == "br" else 0)
    _check(q, k, v, do, 192 ** -0.5, shift)


@needs_hopper
@pytest.mark.parametrize("d", [64, 128, 256, 192], ids=_d_id)
def test_causal_row_bound(d):
    """ROW_BOUND (bwd.ROW_BOUND_DIMS; a probe override until adopted): the
    masked steps' one compare per score against each key's first row give
    the gradients of the two compares, on every causal CASES entry (both
    alignments, GQA / MQA, rows that see no key, a single row, whole tiles,
    NaN past N), on the keys-as-M path (d = 64 / 128, with the d = 128
    named-barrier default), SPLIT_D (d = 256, and at d = 128 as an
    override) and split Q K^T (d = 192 / dv = 128), and with the group split
    and the persistent loop; against float64 autograd."""
    for b, hq, hkv, nq, nk, causal, layout in CASES:
        if causal is None:
            continue
        q, k, v, do = (_inputs_192(b, hq, hkv, nq, nk, torch.bfloat16, layout) if d == 192
                       else _inputs(b, hq, hkv, nq, nk, d, torch.bfloat16, layout))
        shift = nk - nq if causal == "br" else 0
        _check(q, k, v, do, d ** -0.5, shift, ROW_BOUND=True)
    q, do = (_flash_view(2, 6, 333, d, torch.bfloat16) for _ in range(2))
    k, v = (_flash_view(2, 2, 1121, d, torch.bfloat16) for _ in range(2))
    if d == 192:
        q, k, v, do = _inputs_192(2, 6, 2, 333, 1121, torch.bfloat16, "flash")
    for extra in (dict(GROUP_SPLIT=3), dict(PERSISTENT=True, NUM_SMS=7)) + (
            (dict(SPLIT_D=True, BLOCK_N=64, DS_BUFS=2, DQ_CHUNK=64),) if d == 128 else ()):
        _check(q, k, v, do, d ** -0.5, 1121 - 333, ROW_BOUND=True, **extra)


# The 64-row step's variants (over ROWS64_192) and the 128-row default's.
_ROWS64_VARIANTS = [{}, dict(PERSISTENT=True, NUM_SMS=7), dict(NUM_STAGES=3, DQ_STAGE_BUFS=1),
                    dict(NUM_STAGES=3, DQ_STAGE_BUFS=2), dict(NUM_STAGES=3, DS_BUFS=1, DQ_STAGE_BUFS=1),
                    dict(DS_BUFS=1), dict(HEADS_FIRST=True), dict(GROUP_SPLIT=2),
                    dict(GROUP_SPLIT=4, PERSISTENT=True, NUM_SMS=5), dict(DQ_STAGE_BUFS=1), dict(DQ_STAGE_BUFS=2),
                    dict(DQ_STAGE_BUFS=2, PERSISTENT=True, NUM_SMS=7), dict(DQ_STAGE_BUFS=2, GROUP_SPLIT=2, DS_BUFS=1),
                    dict(TMA_DKV=True)]
_HALVES_VARIANTS = [dict(DS_BUFS=2, DQ_STAGE_BUFS=1), dict(DQ_STAGE_BUFS=1), dict(GROUP_SPLIT=2),
                    # dK / dV by TMA stores (three descriptors; 16-bit group partials)
                    dict(TMA_DKV=True), dict(TMA_DKV=True, GROUP_SPLIT=2),
                    dict(GROUP_SPLIT=4, PERSISTENT=True, NUM_SMS=5), dict(PERSISTENT=True, NUM_SMS=7),
                    dict(HEADS_FIRST=True), dict(SLICES_FIRST=True, GROUP_SPLIT=2),
                    # 32-column dQ pieces (six per tile and consumer, two of them K1's)
                    dict(DQ_CHUNK=32, DS_BUFS=2), dict(DQ_CHUNK=32, DQ_STAGE_BUFS=4),
                    dict(DQ_CHUNK=32, DS_BUFS=2, GROUP_SPLIT=2), dict(DQ_CHUNK=32, DS_BUFS=2, PERSISTENT=True, NUM_SMS=7),
                    # the P^T / dS^T 'free' arrival after the first dQ piece's reduce-add
                    dict(Q_HALVES=2), dict(Q_HALVES=2, GROUP_SPLIT=2), dict(Q_HALVES=2, PERSISTENT=True, NUM_SMS=7),
                    # this half's column products before the exchange wait
                    dict(OWN_FIRST=True), dict(OWN_FIRST=True, GROUP_SPLIT=2),
                    dict(OWN_FIRST=True, PERSISTENT=True, NUM_SMS=7), dict(OWN_FIRST=True, DS_BUFS=2, DQ_STAGE_BUFS=1),
                    dict(Q_HALVES=2, OWN_FIRST=True), dict(Q_HALVES=2, OWN_FIRST=True, PERSISTENT=True, NUM_SMS=7),
                    # dQ pieces through the producer warp (named barriers per consumer and slot)
                    dict(NAMED_BAR=2), dict(NAMED_BAR=2, GROUP_SPLIT=2), dict(NAMED_BAR=2, TMA_DKV=False),
                    dict(NAMED_BAR=2, DQ_STAGE_BUFS=1), dict(NAMED_BAR=2, Q_HALVES=2),
                    dict(NAMED_BAR=2, OWN_FIRST=True), dict(NAMED_BAR=2, DQ_CHUNK=32, DS_BUFS=2),
                    dict(NAMED_BAR=2, HEADS_FIRST=True)]
_SPLIT_QK_VARIANTS = ([pytest.param(dict(ROWS64_192, **v), id="rows64-" + (",".join(f"{k}={x}" for k, x in v.items())
                                                                          or "default")) for v in _ROWS64_VARIANTS]
                      + [pytest.param(v, id="halves-" + ",".join(f"{k}={x}" for k, x in v.items()))
                         for v in _HALVES_VARIANTS])


@needs_hopper
@pytest.mark.parametrize("variant", _SPLIT_QK_VARIANTS)
@pytest.mark.parametrize("causal", [None, "br", "tl"])
def test_split_qk_variants(variant, causal):
    """The d = 192 / dv = 128 build's variants.  The 128-row Q_HALVES
    default (each consumer's 64 query rows over all keys) with two P^T /
    dS^T buffers and one staging buffer, one staging buffer, the group
    split (partials of 192 and 128 columns), the dQ pieces through the
    producer warp (NAMED_BAR = 2, with those forms), dK / dV by TMA stores
    (TMA_DKV, also with the group split), persistent, heads-first,
    slices-first, 32-column dQ pieces (with two P^T / dS^T buffers, or four
    staging buffers), the late 'free' arrival (Q_HALVES = 2), this half's
    column products before the exchange wait
    (OWN_FIRST, also with the late arrival).  The 64-row step of before (ROWS64_192) with its own
    variants: persistent, a deeper ring (three stages fit with one or two
    dQ staging buffers, or with one P^T / dS^T buffer), one P^T / dS^T
    buffer, heads-first, the group split, and one or two dQ staging
    buffers per consumer instead of three (with 2 the pieces' buffers
    alternate across tiles)."""
    q, do = _flash_view(2, 8, 777, 192, torch.bfloat16), _flash_view(2, 8, 777, 128, torch.bfloat16)
    k, v = _flash_view(2, 2, 1500, 192, torch.bfloat16), _flash_view(2, 2, 1500, 128, torch.bfloat16)
    shift = None if causal is None else (1500 - 777 if causal == "br" else 0)
    _check(q, k, v, do, 0.09, shift, **variant)


@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_split_qk_api(monkeypatch, causal):
    """flash_attn_func's backward at d = 192 / dv = 128 takes the Hopper
    backward by default (its config GPU-validated) and matches the portable
    backward's gradients; FLASHATTN_TRITON_HOPPER_SPLIT_QK=0 keeps it
    portable."""
    from flashattn_triton import flash_attn_func
    from flashattn_triton.kernels.hopper import bwd as hbwd
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper")
    monkeypatch.setenv("FLASHATTN_TRITON_PREFETCH_BWD", "0")
    calls = _spy_hopper_backward(monkeypatch)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 1000, 8, 192, device="cuda", generator=gen).to(torch.bfloat16)
    k = torch.randn(2, 1000, 2, 192, device="cuda", generator=gen).to(torch.bfloat16)
    v = torch.randn(2, 1000, 2, 128, device="cuda", generator=gen).to(torch.bfloat16)
    g = torch.randn(2, 1000, 8, 128, device="cuda", generator=gen).to(torch.bfloat16)

    def grads():
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        return torch.autograd.grad(flash_attn_func(*leaves, causal=causal), leaves, g)

    monkeypatch.delenv(hbwd.UNVERIFIED_ENV, raising=False)
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_SPLIT_QK", raising=False)
    got = grads()
    assert calls == [True], calls
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_SPLIT_QK", "0")
    calls.clear()
    portable = grads()
    assert calls == [], calls
    for name, a, b in zip(("dq", "dk", "dv"), got, portable):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2, msg=name)


@pytest.mark.parametrize("split_qk", [None, "0", "1"])
def test_split_qk_dispatch(monkeypatch, split_qk):
    """_dispatch.use_hopper_backward: d != dv (192 / 128) is tried unless
    FLASHATTN_TRITON_HOPPER_SPLIT_QK=0; d = dv is not affected by the
    switch."""
    from flashattn_triton import _dispatch
    monkeypatch.setattr(_dispatch, "_hopper_tier", lambda device: True)
    monkeypatch.delenv(_dispatch.ENV_HOPPER_BWD, raising=False)
    if split_qk is None:
        monkeypatch.delenv(_dispatch.ENV_HOPPER_SPLIT_QK, raising=False)
    else:
        monkeypatch.setenv(_dispatch.ENV_HOPPER_SPLIT_QK, split_qk)
    dev = torch.device("cuda", 0)
    assert _dispatch.use_hopper_backward(dev, (-1, 0), False, 4096, 192, 128) == (split_qk != "0")
    assert _dispatch.use_hopper_backward(dev, (-1, 0), False, 4096, 128, 128)
    assert _dispatch.use_hopper_backward(dev, (-1, 0), False, 4096, 128)


@pytest.mark.parametrize("opt_in", [False, True])
def test_split_qk_info(capsys, monkeypatch, opt_in):
    """flashattn-triton info --arch sm90 at d = 192 / dv = 128 names the
    Hopper backward (its config verified; the unverified switch changes
    nothing), with the split Q K^T."""
    from flashattn_triton import cli
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    hbwd = _bwd_module()
    if opt_in:
        monkeypatch.setenv(hbwd.UNVERIFIED_ENV, "1")
    else:
        monkeypatch.delenv(hbwd.UNVERIFIED_ENV, raising=False)
    assert cli.main(["info", "--shape", "2,4096,16,192", "--head-dim-v", "128", "--causal", "--arch", "sm90"]) == 0
    out = capsys.readouterr().out
    assert "backward: Hopper tier, Gluon kernel" in out and "split in 128 + 64" in out, out
    assert "not GPU-validated" not in out, out


def test_split_qk_protocol_simulation():
    """The mbarrier protocol of the split Q K^T (Q and K as two TMA copies
    on one barrier each, S and dK as two wgmma groups, dQ pieces from K then
    K1), 2-D grid and persistent: no hazard or deadlock; expecting one
    copy's bytes, or issuing dK's second chunk after the first dQ piece (so
    the Q / dO slot is released under it), is caught."""
    import hopper_bwd_model as hbm
    for *case, work in hbm.qk1_protocol_cases(full=False):
        hbm.simulate(*case, work=work, qk1=True)
    for broken in hbm.QK1_PROTOCOL_BROKEN:
        assert hbm.qk1_broken_caught(broken, seeds=20) > 0, broken


@pytest.mark.parametrize("broken", ["qh_own_half", "qh_dq_rows"])
def test_emulated_q_halves_broken_forms_are_caught(broken):
    """Q_HALVES (128-row tiles, each consumer's half of the rows over every
    key; tests/hopper_bwd_model.py): a consumer's dV / dK from its own half
    only, or its dQ added into the other half's rows, fails the float64
    check (test_emulated_split_qk_schedule runs the correct form)."""
    import hopper_bwd_model as hbm
    cases = [c for c in hbm.qk1_cases(full=False) if c[6].get("Q_HALVES")]
    assert cases and broken in hbm.Q_HALVES_BROKEN
    assert any(not hbm.check_qk1(case, broken) <= 1e-9 for case in cases), broken


def test_q_halves_protocol_simulation():
    """Q_HALVES's protocol (dQ from dS in registers, so with one P^T / dS^T
    buffer its 'free' arrival follows the column products) with one and two
    staging buffers, and with 32-column pieces (six, the last two from K1)
    and two or four staging buffers, and with the 'free' arrival after the
    first dQ piece's reduce-add (Q_HALVES = 2), and this half's column
    products issued before the exchange wait (OWN_FIRST, also with the late
    arrival): no hazard or deadlock; arriving before the column products
    are done, or issuing the other half's products before the exchange
    wait, is caught."""
    import hopper_bwd_model as hbm
    for stage_bufs in (1, 2):
        for *case, work in hbm.qk1_protocol_cases(full=False):
            hbm.simulate(*case, work=work, qk1=True, stage_bufs=stage_bufs, q_halves=True)
    for stage_bufs in (2, 4):
        for n_tiles, ns, split, ds_bufs, _, seed, work in hbm.qk1_protocol_cases(full=False):
            hbm.simulate(n_tiles, ns, split, ds_bufs, 6, seed, work=work, qk1=True, stage_bufs=stage_bufs,
                         q_halves=True, k1_pieces=2)
    # Q_HALVES = 2: the 'free' arrival after the first dQ piece's reduce-add
    for stage_bufs in (1, 2):
        for n_tiles, ns, split, _, chunks, seed, work in hbm.qk1_protocol_cases(full=False):
            hbm.simulate(n_tiles, ns, split, 1, chunks, seed, work=work, qk1=True, stage_bufs=stage_bufs,
                         q_halves=True, late_free=True)
    # OWN_FIRST: this half's column products before the exchange wait (Q_HALVES 1 / 2)
    for late in (False, True):
        for ds_bufs, stage_bufs in ((1, 2), (2, 1)):
            for n_tiles, ns, split, _, chunks, seed, work in hbm.qk1_protocol_cases(full=False):
                hbm.simulate(n_tiles, ns, split, ds_bufs, chunks, seed, work=work, qk1=True, stage_bufs=stage_bufs,
                             q_halves=True, late_free=late, own_first=True)
    for broken in hbm.OWN_FIRST_BROKEN:
        assert hbm.qk1_broken_caught(broken, seeds=80, stage_bufs=2, q_halves=True, own_first=True) > 0, broken
    for broken in hbm.Q_HALVES_PROTOCOL_BROKEN:
        assert hbm.qk1_broken_caught(broken, seeds=80, stage_bufs=2, q_halves=True) > 0, broken
        assert hbm.qk1_broken_caught(broken, seeds=80, stage_bufs=4, q_halves=True, dq_chunks=6, k1_pieces=2) > 0
    for broken in hbm.STAGE_BUFS_BROKEN:
        assert hbm.qk1_broken_caught(broken, seeds=80, stage_bufs=4, q_halves=True, dq_chunks=6, k1_pieces=2) > 0


def test_q_halves_plan(monkeypatch):
    """Q_HALVES: d = 192 / dv = 128 with 128-row tiles and 64-column dQ
    pieces plans a dQ descriptor of 64 x 64 blocks within the shared-memory
    limit (the model counts 64-row staging buffers); 32-column pieces with
    two P^T / dS^T buffers and two staging buffers, or one and four, fit the
    same 222,256 B; other head dims, other tiles or piece widths are
    declined with a reason."""
    hbwd = _bwd_module()
    monkeypatch.setattr(hbwd, "sm_count", lambda device: 132)
    monkeypatch.setattr(hbwd, "unsupported_reason", lambda *a: "")
    qh = dict(Q_HALVES=True, BLOCK_M=128, NUM_STAGES=1, DS_BUFS=1, DQ_CHUNK=64, DQ_STAGE_BUFS=2)
    q, k = torch.empty(1, 2, 300, 192, dtype=torch.bfloat16), torch.empty(1, 2, 500, 192, dtype=torch.bfloat16)
    v, do = torch.empty(1, 2, 500, 128, dtype=torch.bfloat16), torch.empty(1, 2, 300, 128, dtype=torch.bfloat16)
    lse = torch.empty(1, 2, 300)
    plan = hbwd._make_plan(do, q, k, v, lse, lse, q, k, v, 0.1, True, False, False, False, dict(qh))
    assert not isinstance(plan, str) and list(plan.blocks[4]) == [1, 1, 64, 64], plan
    meta = dict(hbwd.kernel_meta(192, True), **qh)
    assert hbwd.smem_bytes(192, head_dim_v=128, **meta) == 222256 <= hbwd.SMEM_LIMIT  # (222,720 compiled)
    for narrow in (dict(qh, DQ_CHUNK=32, DS_BUFS=2), dict(qh, DQ_CHUNK=32, DQ_STAGE_BUFS=4)):
        plan = hbwd._make_plan(do, q, k, v, lse, lse, q, k, v, 0.1, True, False, False, False, narrow)
        assert not isinstance(plan, str) and list(plan.blocks[4]) == [1, 1, 64, 32], plan
        assert hbwd.smem_bytes(192, head_dim_v=128, **dict(meta, **narrow)) == 222256
    for level in (2,):
        plan = hbwd._make_plan(do, q, k, v, lse, lse, q, k, v, 0.1, True, False, False, False, dict(qh, Q_HALVES=level))
        assert not isinstance(plan, str) and plan.kwargs["Q_HALVES"] == level, plan
    for bad in (dict(qh, BLOCK_M=64), dict(qh, DQ_CHUNK=16), dict(qh, DQ_CHUNK=128), dict(qh, Q_HALVES=3),
                dict(qh, Q_HALVES=4)):  # (3 / 4, the exchange through hardware barriers: removed)
        got = hbwd._make_plan(do, q, k, v, lse, lse, q, k, v, 0.1, True, False, False, False, bad)
        assert isinstance(got, str) and "Q_HALVES" in got, (bad, got)
    q128 = torch.empty(1, 2, 300, 128, dtype=torch.bfloat16)
    got = hbwd._make_plan(q128, q128, q128, q128, lse, lse, q128, q128, q128, 0.1, True, False, False, False,
                          dict(qh))
    assert isinstance(got, str) and "Q_HALVES" in got, got


def test_split_qk_stage_buffers_protocol_simulation():
    """DQ_STAGE_BUFS = 2 / 3 (the dQ pieces of the split Q K^T staged in a
    consumer's buffers in turn, each after tma.store_wait(B - 1)): no hazard
    or deadlock on the split Q K^T protocol cases, where the simulation's
    reduce-adds finish in any order; waiting for one store fewer (the
    buffer's previous reduce may still read it) is caught."""
    import hopper_bwd_model as hbm
    for stage_bufs in (2, 3):
        for *case, work in hbm.qk1_protocol_cases(full=False):
            hbm.simulate(*case, work=work, qk1=True, stage_bufs=stage_bufs)
        for broken in hbm.STAGE_BUFS_BROKEN:
            assert hbm.qk1_broken_caught(broken, seeds=80, stage_bufs=stage_bufs) > 0, (broken, stage_bufs)


def test_stage_buffers_plan_and_smem(monkeypatch):
    """DQ_STAGE_BUFS: 2 at d = 192 (the Q_HALVES default of session 35; 3,
    one buffer per dQ piece, on the 64-row step of session 34), 1 at the
    other head dims; the shared-memory model counts each extra staging
    buffer (2 consumers x 64 rows x 32 float32 columns on the 64-row step,
    x 64 columns on the 128-row one); d = 192 takes any count that fits;
    at d = dv only the keys-as-M step with the
    consumers' reduce-adds has the form, other builds asking for it are
    declined with a reason."""
    hbwd = _bwd_module()
    for d in (64, 128, 256, 192):
        for causal in (False, True):
            assert hbwd.kernel_meta(d, causal)["DQ_STAGE_BUFS"] == (2 if d == 192 else 1), d
    for base, cols, fits in ((ROWS64_192, 32, (2, 3)), ({}, 64, (2,))):
        meta = dict(dict(hbwd.kernel_meta(192, True), **base), DQ_STAGE_BUFS=1)
        one = hbwd.smem_bytes(192, head_dim_v=128, **meta)
        for bufs in (2, 3):
            got = hbwd.smem_bytes(192, head_dim_v=128, **dict(meta, DQ_STAGE_BUFS=bufs))
            assert got == one + (bufs - 1) * 2 * 64 * cols * 4, (base, bufs)
            assert (got <= hbwd.SMEM_LIMIT) == (bufs in fits), (base, bufs, got)
    monkeypatch.setattr(hbwd, "sm_count", lambda device: 132)
    monkeypatch.setattr(hbwd, "unsupported_reason", lambda *a: "")  # CPU tensors stand for CUDA ones
    lse = torch.zeros(1, 2, 100)
    qd = torch.randn(1, 2, 100, 128).to(torch.bfloat16)
    # d = dv: the keys-as-M path takes it with NAMED_BAR 0 / 1 (the consumers'
    # reduce-adds), not with NAMED_BAR 2 (the producer's) nor on SPLIT_D (d = 256)
    for causal, over, takes in ((False, {}, True), (True, dict(NAMED_BAR=1), True), (True, {}, False),
                                (False, dict(NAMED_BAR=2), False), (False, dict(SPLIT_D=True, BLOCK_N=64), False)):
        got = hbwd._make_plan(qd, qd, qd, qd, lse, lse, qd, qd, qd, 0.1, causal, False, False, False,
                              dict(over, DQ_STAGE_BUFS=2))
        if takes:
            assert not isinstance(got, str) and got.kwargs["DQ_STAGE_BUFS"] == 2, (causal, over, got)
        else:
            assert isinstance(got, str) and "DQ_STAGE_BUFS" in got, (causal, over, got)
    q256 = torch.randn(1, 2, 100, 256).to(torch.bfloat16)
    got = hbwd._make_plan(q256, q256, q256, q256, lse, lse, q256, q256, q256, 0.1, False, False, False, False,
                          dict(DQ_STAGE_BUFS=2))
    assert isinstance(got, str) and "DQ_STAGE_BUFS" in got, got
    q, k = torch.randn(1, 2, 100, 192).to(torch.bfloat16), torch.randn(1, 2, 100, 192).to(torch.bfloat16)
    v, do = torch.randn(1, 2, 100, 128).to(torch.bfloat16), torch.randn(1, 2, 100, 128).to(torch.bfloat16)
    plan = hbwd._make_plan(do, q, k, v, lse, lse, q, k, v, 0.1, True, False, False, False,
                           dict(ROWS64_192, DQ_STAGE_BUFS=3))
    assert not isinstance(plan, str) and plan.kwargs["DQ_STAGE_BUFS"] == 3, plan
    got = hbwd._make_plan(do, q, k, v, lse, lse, q, k, v, 0.1, True, False, False, False, dict(DQ_STAGE_BUFS=3))
    assert got == "shared memory", got  # three 64-column buffers beside the 128-row tiles


@pytest.mark.parametrize("layout", ["flash", "bhnd", "padded", "bnhd_expanded"])
def test_dq_acc_strides_follow_dq(layout):
    """The float32 dQ buffer (dq_acc_strides) is dense, (B, H, N, d) indexed,
    in dq's memory order: for the flash layout (dq a (B, H, N, d) view of
    (B, N, H, d) memory) the buffer's strides equal dq's, so the final copy
    is dense; it holds every element once at any layout."""
    hbwd = _bwd_module()
    b, n, h, d = 2, 37, 3, 64
    if layout == "flash":
        dq = torch.empty(b, n, h, d).transpose(1, 2)
    elif layout == "bhnd":
        dq = torch.empty(b, h, n, d)
    elif layout == "padded":  # rows of a wider buffer: not dense, the buffer is
        dq = torch.empty(b, n, h, d + 64)[..., :d].transpose(1, 2)
    else:  # one batch: B's stride ties nothing
        dq = torch.empty(1, n, h, d).transpose(1, 2)
    strides = hbwd.dq_acc_strides(dq)
    acc = torch.arange(dq.numel(), dtype=torch.float32).as_strided(dq.shape, strides)
    assert sorted(acc.flatten().tolist()) == list(range(dq.numel()))  # dense, each element once
    assert strides[3] == 1
    order = sorted(range(3), key=lambda i: -dq.stride(i))
    assert sorted(range(3), key=lambda i: -strides[i]) == order
    if layout in ("flash", "bhnd", "bnhd_expanded"):
        assert tuple(strides) == dq.stride()


_FAKE_SWEEP = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda
from flashattn_triton.kernels.hopper import bwd as hb
hb.unsupported_reason = lambda *a: ""   # CPU tensors stand for CUDA ones
for d, dv, causal, over, dropped in json.loads(sys.argv[2] if len(sys.argv) > 2 else CASES):
    b16 = torch.bfloat16
    q, k = torch.randn(2, 6, 333, d).to(b16), torch.randn(2, 2, 1121, d).to(b16)
    v, do = torch.randn(2, 2, 1121, dv).to(b16), torch.randn(2, 6, 333, dv).to(b16)
    lse, delta = torch.zeros(2, 6, 333), torch.zeros(2, 6, 333)
    grads = [torch.zeros_like(t) for t in (q, k, v)]
    shift = 788 if causal else None
    drop = (torch.tensor([7], dtype=torch.int64), 0.1, 0) if dropped else None
    with fake_cuda():
        plan = hb._make_plan(do, q, k, v, lse, delta, *grads, d ** -0.5, causal, False, bool(dropped), False,
                             dict(over))
        ok = isinstance(plan, str) or hb.hopper_attention_backward(do, q, k, v, lse, delta, *grads, d ** -0.5,
                                                                   shift, dropout=drop, **over)
    print(d, causal, json.dumps(over), dropped,
          f"declined: {plan}" if isinstance(plan, str) else "ok" if ok else "BUILD FAILED", flush=True)
"""


def _sweep_cases():
    """(d, dv, causal, overrides, dropout) of every override build the GPU
    tests of this file run (their variant lists), one causal flag each."""
    cases = [(d, d, causal, v, False) for d, v in SPLIT_VARIANTS for causal in (False, True)]
    cases += [(d, d, c is not None, dict(v, TMA_DKV=True), dr) for d, c, v, left, dr in TMA_DKV_VARIANTS
              if left is None]
    cases += [(d, d, True, v, False) for v in STAGE_BUFS_VARIANTS for d in (64, 128)]
    cases += [(d, d, True, dict(DROPOUT_RNG_WARPS=4, GROUP_SPLIT=3), True) for d in (64, 128)]
    cases += [(d, d, True, dict(DROPOUT_RNG_WARPS=4, CONSUMER_REGS=232, RNG_REGS=24, GROUP_SPLIT=3, **nb), True)
              for d in (64, 128) for nb in ({}, dict(NAMED_BAR=1))]
    cases += [(d, d, True, dict(DROPOUT_RNG_WARPS=4, RNG_NUM_WARPS=2, RNG_REGS=24, GROUP_SPLIT=3), True)
              for d in (64, 128)]
    cases += [(d, d, True, dict(DROPOUT_RNG_WARPS=4, GROUP_SPLIT=3, OWN_FIRST=True, **r2), True)
              for d in (64, 128) for r2 in ({}, dict(RNG_NUM_WARPS=2, RNG_REGS=24))]
    cases += [(d, d, c, v, False) for v in OWN_FIRST_VARIANTS for d in (64, 128)
              for c in (False, True)]
    cases += [(192, 128, True, p.values[0], False) for p in _SPLIT_QK_VARIANTS]
    return [(d, dv, c, {k: x for k, x in v.items()}, dr) for d, dv, c, v, dr in cases]


@pytest.mark.skipif(os.environ.get("FLASHATTN_TRITON_COMPILE_SWEEP") != "1",
                    reason="opt-in (FLASHATTN_TRITON_COMPILE_SWEEP=1): minutes of sm_90 compiles")
def test_override_builds_compile():
    """Every override build this file's GPU tests run compiles for sm_90
    without a GPU (Triton 3.6, fake driver) or is declined by the plan with a
    reason: a build error (session 38's three unnamed failures were one, a
    32-column tile staged with a 128-byte swizzle) shows here before a
    device call does.  Opt-in: FLASHATTN_TRITON_COMPILE_SWEEP=1."""
    import json
    cases = _sweep_cases()
    lines = _fake_lines(_FAKE_SWEEP.replace("CASES", repr(json.dumps(cases))), timeout=3600)
    assert len(lines) == len(cases), lines
    failed = [ln for ln in lines if "BUILD FAILED" in ln]
    assert not failed, failed
