"""The Hopper (Gluon, sm_90) forward tier: flashattn_triton/kernels/hopper/.

On CPU (CI) the import guard, the declining paths, the float64 emulation of
the schedule and an sm_90 build of the kernels on the installed Triton run
(with Triton 3.6, also the fake-driver launches); everything that launches
the kernel needs FLASHATTN_TRITON_TEST_DEVICE=cuda on an sm_90
GPU with a Triton whose Gluon API the tier supports (else it is skipped).
"""

import math
import os

import pytest
import torch

from flashattn_triton.kernels import hopper
from flashattn_triton.reference import attention_ref
from flashattn_triton.testing import assert_close, max_abs_err

from _utils import check_sink_only_rows, fake_launch, hopper_gpu_reason, hopper_module, window_shifts
from hopper_model import HEAD_BROKEN, SKIP_BROKEN

LN2 = math.log(2.0)


needs_hopper = pytest.mark.skipif(bool(hopper_gpu_reason()), reason=hopper_gpu_reason() or "-")


# --------------------------------------------------------------------------- everywhere

def test_import_guard_reports_a_reason():
    """The package imports with any Triton; an unavailable tier says why and declines."""
    assert isinstance(hopper.AVAILABLE, bool)
    if not hopper.AVAILABLE:
        assert hopper.REASON, "unavailable without a reason"
    import triton
    if not triton.__version__.startswith("3.6.") and os.environ.get("FLASHATTN_TRITON_HOPPER_ANY_TRITON") != "1":
        assert not hopper.AVAILABLE and "Triton" in hopper.REASON


def _gluon_compile_reason() -> str:
    """Why the Gluon kernels cannot be built here ('' when they can)."""
    import triton
    if hopper.TRITON_RELEASE not in hopper.COMPILE_CHECKED:
        return (f"Triton {triton.__version__}: the Gluon builds are checked on {hopper.COMPILE_CHECKED} "
                "(to add a release: run benchmarks/gluon_sweep.py with it, then list it there)")
    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    if not all(os.path.exists(os.path.join(bin_dir, t)) for t in ("ptxas", "cuobjdump")):
        return f"no ptxas / cuobjdump in {bin_dir}"
    return ""


@pytest.mark.skipif(bool(_gluon_compile_reason()), reason=_gluon_compile_reason() or "-")
@pytest.mark.parametrize("kernel", ["forward", "backward", "forward-packed-isolated"])
def test_gluon_kernels_compile_for_sm90_on_this_triton(kernel):
    """The Gluon forward and backward build for sm_90 without a GPU on the
    installed Triton (benchmarks/compile_check.py, d = 64 causal, the
    launcher's default config), so a Gluon API change of a new release shows
    in CI.  Triton 3.7-3.9 renamed builtins the kernels use; they come
    from kernels/hopper/_compat.py.  The SASS holds the warpgroup MMAs and the
    TMA loads (and the backward its TMA reduce-adds of dQ).  The packed
    forward with the isolation switch (IS_VARLEN = 2; three consumer
    warpgroups at d = 64) also holds the named barrier of the consumers
    that reach a sequence's last key tile, once per consumer.  On a Triton
    other than the GPU-tested one (TESTED_TRITON) the tier still stays off
    unless FLASHATTN_TRITON_HOPPER_ANY_TRITON=1."""
    build = "compile_hopper_bwd" if kernel == "backward" else "compile_hopper"
    overrides = {"IS_VARLEN": 2} if kernel == "forward-packed-isolated" else {}
    bar_id = hopper_module("fwd").VARLEN_TAIL_BAR_ID
    stdout = fake_launch(_COMPILE_SM90 % (build, overrides, bar_id), timeout=600)
    ops = stdout.split()
    wanted = ["HGMMA", "UTMALDG"] + (["UTMAREDG"] if kernel == "backward" else [])
    missing = [op for op in wanted if op not in ops]
    assert not missing, f"{kernel}: no {missing} among the SASS opcodes {sorted(set(ops))}"
    if overrides:
        tail_bars = int(ops[ops.index("TAIL_BARS") + 1])
        assert tail_bars == 3, f"{kernel}: {tail_bars} bar.sync {bar_id} in the PTX, expected 3"


# A compile_check build (without the interpreter, whose triton.jit functions do
# not compile): the SASS opcodes of the d = 64 causal build with the given
# overrides, one per line, then TAIL_BARS and the count of the syncs on the
# forward's named barrier (fwd.VARLEN_TAIL_BAR_ID) in its PTX.
_COMPILE_SM90 = r"""
import re, sys
sys.path.insert(0, "benchmarks")
import compile_check as cc
compiled, meta = cc.%s(64, True, %r)
print("\n".join(sorted({op.split(".")[0] for _, op, _ in cc.sass_ops(compiled)})))
print("TAIL_BARS", len(re.findall(r"bar\.sync\s+%d,", compiled.asm["ptx"])))
"""


@pytest.mark.skipif(bool(_gluon_compile_reason()), reason=_gluon_compile_reason() or "-")
def test_backward_no_licm_spills_less():
    """NO_LICM (hopper/bwd.py): the backward's query-tile loops built with
    loop-invariant code motion off keep the K / V tiles' wgmma descriptors
    inside the loop, and ptxas spills less than with them hoisted (d = 64
    causal, 89 -> 18 local loads / stores on Triton 3.6; every release of
    COMPILE_CHECKED builds it)."""
    stdout = fake_launch(_LOCAL_SM90, timeout=600)
    local = dict(line.split() for line in stdout.splitlines() if line.startswith(("False", "True")))
    assert int(local["True"]) < int(local["False"]), f"local loads / stores by NO_LICM: {local}"


# The local loads / stores (LDL / STL) of the d = 64 causal backward without and with NO_LICM.
_LOCAL_SM90 = r"""
import sys
sys.path.insert(0, "benchmarks")
import compile_check as cc
for on in (False, True):
    compiled, meta = cc.compile_hopper_bwd(64, True, {"NO_LICM": on})
    assert meta["NO_LICM"] is on, meta
    print(on, sum(1 for _, op, _ in cc.sass_ops(compiled) if op.startswith(("LDL", "STL"))))
"""


def test_declines_cpu_tensors_and_writes_nothing():
    q = torch.randn(1, 2, 16, 64, dtype=torch.bfloat16)
    o = torch.zeros_like(q)
    lse = torch.zeros(1, 2, 16)
    assert hopper.hopper_attention_forward(q, q, q, o, lse, 0.125, None) is False
    assert not o.any() and not lse.any()


def test_schedule_emulation_matches_reference():
    """The kernel's tile schedule (grid or persistent loop, masked / unmasked
    loops, PAIRED, sliding windows) emulated in float64
    (tests/hopper_model.py) writes every row once with the reference's O and
    LSE, and every consumer takes the producer's ring uses and the turns in
    order; a reduced sweep (the full one: python tests/hopper_model.py)."""
    import hopper_model
    failures = [(case, why) for case in hopper_model.forward_cases(full=False)
                for why in [hopper_model.check_forward(*case)] if why]
    assert not failures, failures[:3]


@pytest.mark.parametrize("d", [64, 128, 256])
def test_window_schedule_emulation(d):
    """Sliding windows on the launcher's own configs (tests/hopper_model.py's
    emulation; fwd.py CONFIGS, WINDOW_CONFIGS): key tiles before a work
    tile's window neither loaded nor visited, the edge tiles masked, with
    SKIP_TILES the tiles outside a warpgroup's band released; windows of 0,
    under a tile, over N; causal both alignments and not causal; Nq < Nk
    and Nq > Nk; GQA; grid, persistent and dynamic on a few programs."""
    import hopper_model as hm
    base = dict(BLOCK_M=64, BLOCK_N=64 if d == 256 else 128, NUM_CONSUMERS=2, PAIRED=False,
                SKIP_TILES=d == 64, M_BAND=0)
    failures = []
    for sched in ("grid", "persistent", "dynamic"):
        for n_q, n_k in ((300, 1000), (777, 300)):
            for causal, left in (("br", 0), ("br", 100), ("tl", 5000), (None, 37), (None, 300)):
                shift = n_k - n_q if causal == "br" else 0 if causal == "tl" else None
                cfg = dict(base, PERSISTENT=sched != "grid", DYNAMIC=sched == "dynamic", NUM_SMS=5, SEED=n_q + left,
                           HEADS_FIRST=causal is not None, WINDOW=(left, n_k - n_q if shift is None else shift))
                case = (2, 4, 2, n_q, n_k, shift, cfg)
                why = hm.check_forward(*case)
                if why:
                    failures.append((case, why))
    assert not failures, failures[:3]


def test_section_heads_match_the_model():
    """fwd.section_heads (the launcher's HEAD_SECTION for SECTION_MB) is the
    model's: query heads whose K and V fill the budget, a power of two."""
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    import hopper_model as hm
    from flashattn_triton.kernels.hopper import fwd as hf
    for mb, n_k, d, dv, elem, group in [(16, 2048, 128, 128, 2, 1), (16, 4096, 64, 64, 2, 4), (32, 1000, 192, 128, 2, 3),
                                        (1, 1 << 20, 256, 256, 2, 1), (24, 3000, 128, 128, 2, 8)]:
        got = hf.section_heads(mb, n_k, d, dv, elem, group)
        assert got == hm.section_heads(mb, n_k, d, dv, elem, group) and got & (got - 1) == 0, (mb, n_k, d, got)


def test_persistent_tiles_cover_the_grid_once():
    """schedule.snake_count / fwd._work_tile (as tests/hopper_model.py transcribes them):
    every work tile goes to exactly one program, and with HEADS_FIRST the
    tiles are dealt longest first."""
    import hopper_model as hm
    for n_work, n_programs in [(1, 1), (5, 3), (7, 7), (64, 132), (1000, 132), (263, 132), (264, 132), (265, 132)]:
        g = min(n_programs, n_work)
        # With one head, the m-block of a work tile is its number t.
        got = sorted(hm.work_tile(i, p, g, n_work, 1, False)[0]
                     for p in range(g) for i in range(hm.work_count(p, g, n_work)))
        assert got == list(range(n_work)), (n_work, n_programs)
    cfg = dict(BLOCK_M=64, BLOCK_N=128, NUM_CONSUMERS=2, HEADS_FIRST=True)
    order, _, _ = hm.tile_order(2, 4, 2, 1000, 1300, 300, cfg)
    lengths = [t[4] for t in order]
    assert lengths == sorted(lengths, reverse=True) and lengths[0] > lengths[-1]
    # M_BAND: bands of neighbouring m-blocks from the bottom up (the last one
    # partial), every head's band before the next band; every (m-block,
    # head) once, and a tile never more than a band shorter than a later one.
    for n_bh, n_m, band in [(8, 5, 3), (7, 4, 4), (16, 16, 2), (5, 9, 4), (3, 2, 8), (4, 6, 1)]:
        tiles = [hm.dynamic_tile(t, n_m, n_bh, True, band) for t in range(n_m * n_bh)]
        assert sorted(tiles) == sorted((m, bh) for m in range(n_m) for bh in range(n_bh))
        for t, (m, bh) in enumerate(tiles):
            assert all(m2 < m + max(band, 1) for m2, _ in tiles[t:]), (t, m, band)
            if band > 1 and t:
                same_band = (n_m - 1 - m) // band == (n_m - 1 - tiles[t - 1][0]) // band
                assert same_band or m < tiles[t - 1][0], "bands from the bottom up"
    # HEAD_SECTION: sections of (batch, head)s one after the other (the last
    # one partial), longest m-block first within each; every tile once.
    for n_bh, n_m, section in [(8, 5, 3), (7, 4, 4), (16, 16, 16), (5, 9, 2), (3, 2, 8), (4, 6, 1)]:
        tiles = [hm.dynamic_tile(t, n_m, n_bh, True, 0, section) for t in range(n_m * n_bh)]
        assert sorted(tiles) == sorted((m, bh) for m in range(n_m) for bh in range(n_bh))
        for t, (m, bh) in enumerate(tiles):
            later = tiles[t + 1:]
            assert all(b2 // section >= bh // section for _, b2 in later), "sections in order"
            assert all(m2 <= m for m2, b2 in later if b2 // section == bh // section), "longest first"
    assert [hm.section_heads(mb, n, 128) for mb, n in [(16, 2048), (16, 4096), (32, 8192), (1, 65536)]] == \
        [16, 8, 8, 1]


@pytest.mark.parametrize("persistent", [False, True])
def test_barrier_protocol_simulation(persistent):
    """The mbarrier protocol of one CTA (tests/hopper_model.py) under random
    schedules: no deadlock, every parity wait passes at the completion it
    means, no buffer read while loaded or loaded while read, every O stored."""
    import hopper_model as hm
    runs = 0
    for tiles, nc, ns, pingpong, pers, seed in hm.protocol_cases(full=False):
        if pers == persistent:
            hm.simulate_protocol(tiles, nc, ns, pingpong, pers, seed)
            runs += 1
    assert runs >= 10


def _protocol_catches(broken, persistent=None, **options):
    """simulate_protocol over the quick protocol cases (only those of one
    persistent flag when given) with ``options``: every run passes when
    broken is None.  Returns (runs, the runs that caught the broken form)."""
    import hopper_model as hm
    runs = caught = 0
    for tiles, nc, ns, pingpong, pers, seed in hm.protocol_cases(full=False):
        if persistent is not None and pers != persistent:
            continue
        runs += 1
        try:
            hm.simulate_protocol(tiles, nc, ns, pingpong, pers, seed, broken=broken, **options)
        except hm.ProtocolError:
            if broken is None:
                raise
            caught += 1
    return runs, caught


def _protocol_sweep(broken, **options):
    """_protocol_catches over every quick case: at least one run catches the
    broken form (when one is given)."""
    runs, caught = _protocol_catches(broken, **options)
    if broken is not None:
        assert caught > 0, f"{broken}: not caught in {runs} runs"


@pytest.mark.parametrize("broken", [None, *SKIP_BROKEN])
def test_barrier_protocol_causal_skip(broken):
    """Causal: each consumer warpgroup reads only the key tiles up to its own
    diagonal and releases the rest of the work tile's unread
    (_attn_fwd_skip: wait for each load, release it, pass the turn on).
    Under random schedules and random per-warpgroup shares the protocol
    holds; each deliberately broken form of the release is caught."""
    _protocol_sweep(broken, skip=True)


@pytest.mark.parametrize("broken", [None, *HEAD_BROKEN])
def test_barrier_protocol_window_head(broken):
    """Sliding window: each consumer warpgroup also releases the key tiles
    before its own first key unread (_attn_fwd_skip's HEAD form: pass the
    turn, wait for each load, release it) before its first S, and those
    past its diagonal after its last P V.  Under random schedules and
    random per-warpgroup shares of both the protocol holds; releasing
    before the load, taking no turn, and taking the turn after the loads
    (a deadlock with one stage) are each caught."""
    _protocol_sweep(broken, skip=True, head=True)


def test_dynamic_schedule_covers_every_tile_once():
    """DYNAMIC (tests/hopper_model.py's dynamic_assignment): whatever the
    completion times, program p starts with tile p and every tile goes to
    exactly one program; each program's tiles come in claim order."""
    import random
    import hopper_model as hm
    rng = random.Random(5)
    for n_work, g in [(1, 1), (5, 3), (7, 7), (64, 132), (1000, 132), (265, 132), (40, 5)]:
        costs = [rng.randint(1, 9) for _ in range(n_work)]
        for lead in (0, 3):
            progs, _ = hm.dynamic_assignment(costs, g, random.Random(rng.random()), lead)
            assert [p[0] for p in progs] == list(range(min(g, n_work)))
            assert sorted(t for p in progs for t in p) == list(range(n_work))
            assert all(p == sorted(p) for p in progs)


def test_dynamic_protocol_simulation():
    """The DYNAMIC protocol over several CTAs sharing one counter, random
    schedules and completion times: every tile processed once by every
    consumer, no deadlock, parity waits at the completions they mean, the
    next-tile slots read only once written and before overwritten; each
    deliberately broken variant is caught."""
    import hopper_model as hm
    cases = hm.dynamic_cases(full=False)
    for work, g, nc, ns, pingpong, seed in cases:
        hm.simulate_dynamic(work, g, nc, ns, pingpong, seed)
        hm.simulate_dynamic(work, g, nc, ns, pingpong, seed, skip=True)
        hm.simulate_dynamic(work, g, nc, ns, pingpong, seed, skip=True, head=True)
    for broken in hm.DYNAMIC_BROKEN:
        caught = 0
        for work, g, nc, ns, pingpong, seed in cases:
            try:
                hm.simulate_dynamic(work, max(g, 2), nc, ns, pingpong, seed, broken=broken)
            except hm.ProtocolError:
                caught += 1
        assert caught, broken


def test_dynamic_load_balance_model():
    """Load-balance model at 132 SMs, causal, B*N = 16k: the dynamic
    scheduler's busiest SM is within 0.5% of the hardware dispatch of the
    grid, and at 2k below the static snake's (3.1% above ideal)."""
    import hopper_model as hm
    for d, nc in ((64, 3), (128, 2), (256, 2)):
        cfg = dict(BLOCK_M=64, BLOCK_N=64 if d == 256 else 128, NUM_CONSUMERS=nc, HEADS_FIRST=True,
                   NUM_STAGES=2 if d == 256 else 3)
        for n in (2048, 8192):
            r = hm.makespans(16384 // n, 2048 // d, n, n, 0, cfg)
            assert r["dynamic"] <= r["hw_grid"] + 0.005, (d, n, r)
            if n == 2048:
                assert r["dynamic"] < r["snake"], (d, n, r)


def test_dispatch_keeps_short_sequences_on_the_portable_forward(monkeypatch):
    """_dispatch.HOPPER_FWD_SHORT {(head dim, causal): N}: a call without
    variants whose max(Nq, Nk) is at most N runs the portable forward;
    longer ones, other head dims, calls with variants (dropout, their own
    rules) or a left window bound, and FLASHATTN_TRITON_BACKEND=hopper take
    the Hopper forward."""
    from flashattn_triton import _dispatch, ops
    monkeypatch.setattr(_dispatch, "_hopper_tier", lambda device: True)
    monkeypatch.setattr(_dispatch, "HOPPER_FWD_SHORT", {(64, True): 1024, (64, False): 512})
    monkeypatch.setattr(_dispatch, "HOPPER_DROPOUT_FWD_MIN_N", {(d, c): 0 for d in (64, 128) for c in (True, False)})
    monkeypatch.setattr(ops, "use_triton", lambda t: True)
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_DROPOUT", raising=False)
    calls = []
    monkeypatch.setattr(ops._kernels, "forward", lambda *a, **kw: calls.append("portable"))
    monkeypatch.setattr(ops._kernels, "hopper_forward", lambda *a, **kw: calls.append("hopper") or True)
    want = {  # (Nq, Nk, d, causal): Hopper forward for a plain call?
        (300, 1024, 64, True): False, (1024, 1024, 64, True): False, (1000, 1025, 64, True): True,
        (2048, 2048, 64, True): True, (512, 512, 64, False): False, (512, 513, 64, False): True,
        (1024, 1024, 64, False): True, (512, 512, 128, True): True, (200, 4096, 64, True): True,
    }
    for backend in ("auto", "hopper"):
        monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", backend)
        for (n_q, n_k, d, causal), hopper in want.items():
            q = torch.empty(1, n_q, 2, d, dtype=torch.bfloat16)
            k = torch.empty(1, n_k, 2, d, dtype=torch.bfloat16)
            window = (-1, 0 if causal else -1)
            expect = hopper or backend == "hopper"
            assert _dispatch.use_hopper_forward(q, k, k, window, 0, plain=True) == expect, (backend, n_q, n_k, d)
            assert _dispatch.use_hopper_forward(q, k, k, window, 0), "with variants: not this rule"
            assert _dispatch.use_hopper_forward(q, k, k, (100, window[1]), 0, plain=True), "windows: not this rule"
            for p, tier in ((0.0, "hopper" if expect else "portable"), (0.1, "hopper")):
                calls.clear()
                out, lse = torch.empty_like(q), torch.empty(1, 2, n_q)
                ops._fwd_into(q, k, k, out, lse, None, None, n_q, n_k, 0.125, -1, 0 if causal else -1, True,
                              dropout_p=p, rng_seed=torch.tensor([1]))
                assert calls == [tier], (backend, n_q, n_k, d, causal, p, calls)


@pytest.mark.parametrize("window", [(100, 0), (100, -1), (0, 0), (-1, 0), (-1, -1), (100, 5)], ids=str)
def test_dispatch_takes_windows_unless_opted_out(monkeypatch, window):
    """_dispatch.use_hopper_forward: full and causal calls take the Hopper
    forward; a left window bound (window_size (left >= 0, -1 or 0)) too
    (by default, or with FLASHATTN_TRITON_HOPPER_WINDOW=1) unless that
    variable is "0"; a right bound beyond causal never.  The op layer
    passes the window as (left, diagonal) next to the causal shift, and the
    portable forward runs what the Hopper tier does not take."""
    from flashattn_triton import _dispatch, ops
    monkeypatch.setattr(_dispatch, "_hopper_tier", lambda device: True)
    monkeypatch.setattr(_dispatch, "HOPPER_FWD_SHORT", {})  # the length rule: the next test
    monkeypatch.setattr(ops, "use_triton", lambda t: True)
    calls = []
    monkeypatch.setattr(ops._kernels, "forward", lambda *a, **kw: calls.append(("portable", a[7])))
    monkeypatch.setattr(ops._kernels, "hopper_forward", lambda *a: calls.append(("hopper",) + a[6:]) or True)
    q = torch.randn(1, 300, 2, 64, dtype=torch.bfloat16)
    k = torch.randn(1, 500, 2, 64, dtype=torch.bfloat16)
    left, right = window
    plain = left < 0 and right in (-1, 0)
    for opt_in in (None, "0", "1"):
        if opt_in is None:
            monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_WINDOW", raising=False)
        else:
            monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_WINDOW", opt_in)
        takes = right in (-1, 0) and (left < 0 or opt_in != "0")
        assert _dispatch.use_hopper_forward(q, k, k, window, 0) == takes, (window, opt_in)
        if opt_in == "1" or plain:
            assert takes == (right in (-1, 0)), "the opt-in takes every left bound with right -1 or 0"
        calls.clear()
        out, lse = torch.empty_like(q), torch.empty(1, 2, 300)
        ops._fwd_into(q, k, k, out, lse, None, None, 300, 500, 0.125, left, right, True)
        if takes:  # bottom-right: the diagonal of row i is key i + 200
            assert calls == [("hopper", 200 if right == 0 else None, None if left < 0 else (left, 200))], calls
        else:
            assert calls == [("portable", (None if left < 0 else left, None if right < 0 else right))], calls


_FAKE_LAUNCH = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda, LAUNCHES
from flashattn_triton.kernels.hopper import fwd as hf
hf.unsupported_reason = lambda *a: ""   # CPU tensors stand for CUDA ones
hf.sm_count = lambda device: 132
q = torch.randn(2, 4, 1000, 128).to(torch.bfloat16)
k = torch.randn(2, 2, 1200, 128).to(torch.bfloat16)
o, lse = torch.empty_like(q), torch.empty(2, 4, 1000)
for overrides, causal in [({"PERSISTENT": False, "DYNAMIC": False}, True), ({"PERSISTENT": True}, True),
                          ({"PERSISTENT": True, "NUM_SMS": 7}, False)]:
    with fake_cuda():
        ok = hf.hopper_attention_forward(q, k, k, o, lse, 0.125, 200 if causal else None, **overrides)
    assert ok, hf._BROKEN
    print(LAUNCHES[-1][1], LAUNCHES[-1][0].src.constants.get((hf._attn_fwd_hopper.arg_names.index("PERSISTENT"),)))
with fake_cuda():  # a removed override is declined, naming it
    print(hf.hopper_attention_forward(q, k, k, o, lse, 0.125, 200, EARLY_Q=True))
"""


def test_launch_plans_on_a_fake_driver():
    """Triton 3.6 without a GPU: the launcher's plans compile for sm_90
    through the real JIT path (tests/fake_cuda.py) and launch a grid of
    (B * H, m-blocks) blocks, or min(SMs, work tiles) persistent programs."""
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    stdout = fake_launch(_FAKE_LAUNCH, timeout=600)
    # d = 128: 1000 rows / 128 per block (2 consumers) = 8 m-blocks, 2 * 4 heads: 64 work tiles.
    assert stdout.split("\n")[:4] == ["(8, 8, 1) False", "(64, 1, 1) True", "(7, 1, 1) True", "False"], stdout


# The start of the fake-driver scripts of the Hopper forward: CPU tensors
# stand for CUDA ones, 132 SMs, the kernel's argument names in `names`.
_FAKE_FWD_PRELUDE = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda, LAUNCHES
from flashattn_triton.kernels.hopper import fwd as hf
hf.unsupported_reason = lambda *a: ""   # CPU tensors stand for CUDA ones
hf.sm_count = lambda device: 132
names = hf._attn_fwd_hopper.arg_names
"""


_FAKE_LAUNCH_DYNAMIC = _FAKE_FWD_PRELUDE + r"""
for d in (64, 128, 256):
    q = torch.randn(2, 4, 1000, d).to(torch.bfloat16)
    k = torch.randn(2, 2, 1200, d).to(torch.bfloat16)
    o, lse = torch.empty_like(q), torch.empty(2, 4, 1000)
    for overrides, causal in [({"DYNAMIC": True}, True), ({"DYNAMIC": True, "NUM_SMS": 5}, False), ({}, True)]:
        with fake_cuda():
            ok = hf.hopper_attention_forward(q, k, k, o, lse, 0.125, 200 if causal else None, **overrides)
        assert ok, hf._BROKEN
        launcher, grid, args = LAUNCHES[-1]
        consts = launcher.src.constants
        dyn = consts.get((names.index("DYNAMIC"),))
        pers = consts.get((names.index("PERSISTENT"),))
        counter = [a for a in args if isinstance(a, torch.Tensor) and a.dtype == torch.int32]
        print(d, grid, dyn, pers, [c.tolist() for c in counter])
"""


_FAKE_LAUNCH_SHORT = _FAKE_FWD_PRELUDE + r"""
hf.SHORT_CONFIGS = {(64, False): (1024, {"NUM_CONSUMERS": 2, "CONSUMER_REGS": 240})}
for n in (1000, 1100):
    q = torch.randn(2, 4, n, 64).to(torch.bfloat16)
    o, lse = torch.empty_like(q), torch.empty(2, 4, n)
    with fake_cuda():
        ok = hf.hopper_attention_forward(q, q, q, o, lse, 0.125, None)
    assert ok, hf._BROKEN
    launcher, grid, args = LAUNCHES[-1]
    print(n, grid, launcher.src.constants.get((names.index("NUM_CONSUMERS"),)))
"""


def test_short_configs_launch_on_a_fake_driver():
    """Triton 3.6 without a GPU: with a SHORT_CONFIGS entry the plan of a
    plain d = 64 call of at most n_max rows builds and launches two
    consumers, 128-row programs (1000 rows: 8 m-blocks), and a longer call
    keeps CONFIGS' three (1100 rows / 192: 6 m-blocks)."""
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    stdout = fake_launch(_FAKE_LAUNCH_SHORT, timeout=900)
    assert stdout.strip().split("\n")[-2:] == ["1000 (8, 8, 1) 2", "1100 (6, 8, 1) 3"], stdout


def test_dynamic_launch_on_a_fake_driver():
    """Triton 3.6 without a GPU: DYNAMIC compiles for sm_90 at every head
    dim through the real JIT path, launches the persistent grid, and gets a
    zeroed int32 counter per call; the default causal plan follows
    DYNAMIC_DEFAULT / PERSISTENT_DEFAULT (counter only when dynamic)."""
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    from flashattn_triton.kernels.hopper import fwd as hf
    stdout = fake_launch(_FAKE_LAUNCH_DYNAMIC, timeout=900)
    lines = stdout.strip().split("\n")
    # Work tiles: 1000 rows / (64 * consumers) m-blocks x 8 heads; d = 64 has 3 consumers.
    tiles = {64: 6 * 8, 128: 8 * 8, 256: 8 * 8}
    # Causal (HEADS_FIRST) non-persistent grid: (heads, m-blocks).
    plain_grid = {64: "(8, 6, 1)", 128: "(8, 8, 1)", 256: "(8, 8, 1)"}
    want = []
    for d in (64, 128, 256):
        dyn = hf.DYNAMIC_DEFAULT[d][True]
        pers = dyn or hf.PERSISTENT_DEFAULT[d][True]
        grid = f"({tiles[d]}, 1, 1)" if pers else plain_grid[d]
        want += [f"{d} ({tiles[d]}, 1, 1) True True [[0]]", f"{d} (5, 1, 1) True True [[0]]",
                 f"{d} {grid} {dyn} {pers} {'[[0]]' if dyn else '[]'}"]
    assert lines == want, stdout


_FAKE_LAUNCH_SECTIONS = _FAKE_FWD_PRELUDE + r"""
q = torch.randn(2, 4, 1000, 128).to(torch.bfloat16)
k = torch.randn(2, 2, 1200, 128).to(torch.bfloat16)
o, lse = torch.empty_like(q), torch.empty(2, 4, 1000)
for overrides, causal in [({"DYNAMIC": True, "SECTION_MB": 1}, True), ({"DYNAMIC": True, "SECTION_MB": 1}, False),
                          ({"PERSISTENT": True, "DYNAMIC": False, "SECTION_MB": 1}, True),
                          ({"DYNAMIC": True, "SECTION_MB": 64}, True), ({}, True)]:
    with fake_cuda():
        assert hf.hopper_attention_forward(q, k, k, o, lse, 0.125, 200 if causal else None, **overrides), hf._BROKEN
    launcher, grid, args = LAUNCHES[-1]
    print(grid, launcher.src.constants.get((names.index("HEAD_SECTION"),)))
# the default at d = 128 causal (SECTION_MB_DEFAULT[128] = (0, 16)): 32k keys, 16 MiB per KV head
# with V, one KV head (2 query heads) per section
k = torch.empty(2, 2, 32768, 128, dtype=torch.bfloat16)
with fake_cuda():
    assert hf.hopper_attention_forward(q, k, k, o, lse, 0.125, 31768), hf._BROKEN
launcher, grid, args = LAUNCHES[-1]
print(grid, launcher.src.constants.get((names.index("HEAD_SECTION"),)))
"""


def test_sections_launch_on_a_fake_driver():
    """Triton 3.6 without a GPU: SECTION_MB turns into HEAD_SECTION only with
    DYNAMIC and causal (1 MiB holds one KV head's K and V of 1200 x 128, two
    query heads: sections of 2 of the 8 (batch, head)s); not causal, the
    static snake and a budget holding every head give 0, as does the
    default's 16 MiB at d = 128 causal (SECTION_MB_DEFAULT) at 1200 keys;
    at 32k keys the default makes sections of 2."""
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    lines = fake_launch(_FAKE_LAUNCH_SECTIONS, timeout=900).strip().split("\n")
    assert lines[:4] == ["(64, 1, 1) 2", "(64, 1, 1) 0", "(64, 1, 1) 0", "(64, 1, 1) 0"], lines
    assert lines[4].endswith(" 0"), lines
    assert lines[5].endswith(" 2"), lines


_FAKE_REPLAY_DYNAMIC = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda, LAUNCHES
from flashattn_triton.kernels import fastlaunch
from flashattn_triton.kernels.hopper import fwd as hf
hf.unsupported_reason = lambda *a: ""   # CPU tensors stand for CUDA ones
hf.sm_count = lambda device: 132
fastlaunch.ENABLED = True
q = torch.randn(2, 4, 1000, 64).to(torch.bfloat16)
k, v = (torch.randn(2, 2, 1200, 64).to(torch.bfloat16) for _ in range(2))
o, lse = torch.empty_like(q), torch.empty(2, 4, 1000)
with fake_cuda():
    assert hf.hopper_attention_forward(q, k, v, o, lse, 0.125, 200, DYNAMIC=True)  # compile, Triton's path
    with fastlaunch.recording() as rec:
        assert hf.hopper_attention_forward(q, k, v, o, lse, 0.125, 200, DYNAMIC=True)
    rep = rec.replay((q, k, v, o, lse))
    print("replayable", rep is not None, "scratch", len(rec.scratch))
    n = len(LAUNCHES)
    print("replayed", rep((q, k, v, o, lse)), len(LAUNCHES) - n)
"""


def test_dynamic_forward_replays_on_a_fake_driver():
    """Triton 3.6 without a GPU: a recorded dynamic-schedule forward (its tile
    counter from fastlaunch.zeroed_scratch) stays replayable, so the op
    layer's call plans keep the fast launch path for it."""
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    import triton
    if hopper.TRITON_RELEASE not in hopper.TESTED_TRITON:
        # (the tier forced on with FLASHATTN_TRITON_HOPPER_ANY_TRITON: on Triton 3.9 the
        # recording is not replayable, and the call keeps Triton's launch path)
        pytest.skip(f"Triton {triton.__version__}: the replay of a Gluon launch is checked on "
                    f"Triton {', '.join(hopper.TESTED_TRITON)} only")
    lines = fake_launch(_FAKE_REPLAY_DYNAMIC, timeout=900).strip().split("\n")
    assert lines[-2:] == ["replayable True scratch 1", "replayed True 1"], lines


_FAKE_LAUNCH_WINDOW = _FAKE_FWD_PRELUDE + r"""
for d, causal, window, overrides in [(64, True, (100, 200), {}), (128, True, (10 ** 9, 200), {}),
                                     (256, False, (0, 200), {}),
                                     (128, False, (7, 200), {"PERSISTENT": True, "NUM_SMS": 5}),
                                     (128, True, (5, 2000), {}), (128, True, None, {})]:
    q = torch.randn(2, 4, 1000, d).to(torch.bfloat16)
    k = torch.randn(2, 2, 1200, d).to(torch.bfloat16)
    o, lse = torch.empty_like(q), torch.empty(2, 4, 1000)
    with fake_cuda():
        ok = hf.hopper_attention_forward(q, k, k, o, lse, 0.125, 200 if causal else None, window, **overrides)
    assert ok, hf._BROKEN
    launcher, grid, args = LAUNCHES[-1]
    consts = launcher.src.constants
    # one launch argument per parameter after the descriptors (each expanded
    # into several): count back from the end
    window_lo = args[len(args) - (len(names) - names.index("window_lo"))]
    print(d, grid, consts.get((names.index("HAS_WINDOW"),)), consts.get((names.index("NUM_CONSUMERS"),)), window_lo)
"""


def test_window_launch_on_a_fake_driver():
    """Triton 3.6 without a GPU: windowed plans (HAS_WINDOW) compile for
    sm_90 at every head dim through the real JIT path, on the grid and the
    persistent schedules, with WINDOW_CONFIGS at d = 64 (two consumers:
    1000 rows / 128 = 8 m-blocks); the kernel gets window_lo = shift - left
    clamped to [-Nq, Nk]; a call without a window keeps its own plan."""
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    lines = fake_launch(_FAKE_LAUNCH_WINDOW, timeout=900).strip().split("\n")
    assert lines == ["64 (64, 1, 1) True 2 100",      # causal d = 64: dynamic persistent grid, 8 x 8 tiles
                     "128 (64, 1, 1) True 2 -1000",   # left past every key: clamped to -Nq
                     "256 (8, 8, 1) True 2 200",      # not causal d = 256: the (m-blocks, B * H) grid
                     "128 (5, 1, 1) True 2 193",
                     "128 (64, 1, 1) True 2 1200",    # a bound past the last key: clamped to Nk
                     "128 (64, 1, 1) False 2 0"], lines


# --------------------------------------------------------------------------- GPU

def _inputs(b, hq, hkv, nq, nk, d, dtype, layout, pad=0, dv=None):
    """(B, H, N, d)-indexed views in one of the layouts callers pass; with pad,
    the rows past N of each head hold NaN (inputs) / 7 (output); dv: the head
    dim of v and o (default d; "qkv" then takes v's first dv columns)."""
    dev = "cuda"
    if dv is not None and dv != d:
        q, k, _, _, lse = _inputs(b, hq, hkv, nq, nk, d, dtype, layout, pad)
        _, _, v, o, _ = _inputs(b, hq, hkv, nq, nk, dv, dtype, layout, pad)
        if layout == "qkv":  # v, o as strided slices of wider rows, as the packed layout gives them
            q, k, v2, o2, lse = _inputs(b, hq, hkv, nq, nk, d, dtype, layout, pad)
            v, o = v2[..., :dv], o2[..., :dv]
        return q, k, v, o, lse

    def rnd(*s):
        return torch.randn(*s, device=dev, dtype=torch.float32).to(dtype)

    if layout == "flash":  # (B, N, H, d) storage, as flash_attn_func passes it
        q, k, v = (rnd(b, n, h, d).transpose(1, 2) for n, h in ((nq, hq), (nk, hkv), (nk, hkv)))
        o = torch.full((b, nq, hq, d), float("nan"), device=dev, dtype=dtype).transpose(1, 2)
    elif layout == "qkv":  # slices of one packed (B, N, Hq + 2 Hkv, d) tensor
        assert nq == nk
        qkv = rnd(b, nq, hq + 2 * hkv, d).transpose(1, 2)
        q, k, v = qkv[:, :hq], qkv[:, hq:hq + hkv], qkv[:, hq + hkv:]
        o = torch.full((b, hq, nq, d), float("nan"), device=dev, dtype=dtype)
    else:  # "padded": (B, H, N + pad, d) storage
        pad = pad or 40

        def padded(h, n, fill):
            t = torch.full((b, h, n + pad, d), fill, device=dev, dtype=dtype)
            t[:, :, :n] = rnd(b, h, n, d)
            return t[:, :, :n]
        q, k, v = padded(hq, nq, float("nan")), padded(hkv, nk, float("nan")), padded(hkv, nk, float("nan"))
        o = torch.full((b, hq, nq + pad, d), 7.0, device=dev, dtype=dtype)[:, :, :nq]
    lse = torch.full((b, hq, nq), float("nan"), device=dev, dtype=torch.float32)
    return q, k, v, o, lse


def _check(q, k, v, o, lse, scale, shift, window=None):
    """O and LSE (base 2) against the float64 reference; window = (left,
    wshift): row i also sees only keys j >= i + wshift - left."""
    band = {} if window is None else dict(window=(window[0], -1), shift=window[1])
    o_ref, lse_ref = attention_ref(q.double(), k.double(), v.double(), scale, shift, **band)
    o_low, _ = attention_ref(q, k, v, scale, shift, **band)
    assert_close("O", o, o_ref, baseline=o_low)
    # LSE in base 2, like the portable kernel; -inf where a row sees no key.
    lse2_ref = lse_ref / LN2
    finite = torch.isfinite(lse2_ref)
    assert torch.equal(torch.isinf(lse), ~finite), "LSE -inf rows differ from the reference's"
    err = max_abs_err(lse[finite], lse2_ref[finite]) if finite.any() else 0.0
    bound = 1e-3 * max(1.0, lse2_ref[finite].abs().max().item()) if finite.any() else 0.0
    assert err <= bound, f"LSE (base 2) error {err:.3e} > {bound:.3e}"
    if (~finite).any():
        assert (o[~finite] == 0).all(), "a row with no visible key is not zero"


CASES = [
    # b, hq, hkv, nq, nk, causal ("br" bottom-right, "tl" top-left), layout
    (2, 4, 4, 1000, 1000, None, "flash"),      # ragged N, batch > 1
    (2, 4, 4, 1000, 1000, "br", "flash"),
    (2, 8, 2, 333, 1201, "br", "flash"),       # GQA, Nq < Nk
    (2, 8, 2, 333, 1201, "tl", "padded"),
    (1, 4, 1, 700, 130, "br", "flash"),        # Nq > Nk: 570 rows see no key
    (3, 2, 2, 1, 517, "br", "flash"),          # a single query row
    (2, 6, 3, 515, 515, None, "qkv"),          # strided slices of packed qkv
    (2, 4, 2, 300, 900, None, "padded"),       # NaN past N: a read past N would show
    (2, 4, 4, 128, 256, "br", "flash"),        # whole tiles
]


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_matches_reference(dtype, d, case):
    _forward_matches_reference(dtype, d, d, case)


def _forward_matches_reference(dtype, d, dv, case):
    """The Hopper forward of one CASES entry (head dims d, dv) against
    float64 (_check), and 7s kept in the output rows past N_Q of a padded
    layout."""
    b, hq, hkv, nq, nk, causal, layout = case
    q, k, v, o, lse = _inputs(b, hq, hkv, nq, nk, d, dtype, layout, dv=dv)
    shift = None if causal is None else (nk - nq if causal == "br" else 0)
    scale = d ** -0.5
    from flashattn_triton.kernels.hopper import fwd as hopper_fwd
    assert hopper.hopper_attention_forward(q, k, v, o, lse, scale, shift), \
        f"declined: {hopper.unsupported_reason(q, k, v, o, lse, scale)!r}, build errors {hopper_fwd._BROKEN}"
    _check(q, k, v, o, lse, scale, shift)
    if layout == "padded":
        tail = o.as_strided((b, hq, 40, dv), o.stride(), o.storage_offset() + nq * o.stride(2))
        assert (tail == 7.0).all(), "the kernel wrote rows past N_Q"


@needs_hopper
@pytest.mark.parametrize("variant", [dict(PAIRED=True), dict(PINGPONG=False), dict(NUM_CONSUMERS=1),
                                     dict(NUM_CONSUMERS=3, CONSUMER_REGS=160, NUM_STAGES=2), dict(HEADS_FIRST=True),
                                     dict(NUM_STAGES=2)],
                         ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()))
@pytest.mark.parametrize("causal", [None, "br"])
def test_schedule_variants(variant, causal):
    """Every schedule switch computes the same attention."""
    q, k, v, o, lse = _inputs(2, 8, 2, 777, 1500, 128, torch.bfloat16, "flash")
    shift = None if causal is None else 1500 - 777
    from flashattn_triton.kernels.hopper import fwd as hopper_fwd
    assert hopper.hopper_attention_forward(q, k, v, o, lse, 0.09, shift, **variant), \
        f"declined {variant}: {hopper.unsupported_reason(q, k, v, o, lse, 0.09)!r}, build errors {hopper_fwd._BROKEN}"
    _check(q, k, v, o, lse, 0.09, shift)


@needs_hopper
@pytest.mark.parametrize("skip", [False, True], ids=["all-tiles", "skip-tiles"])
@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent5"])
@pytest.mark.parametrize("causal", ["br", "tl"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_causal_skip_tiles(d, causal, persistent, skip):
    """SKIP_TILES (causal): a consumer warpgroup that releases the key tiles
    past its own diagonal unread, on or off at every head dim, computes the
    same attention; Nq < Nk and Nq > Nk put the diagonal anywhere in a tile."""
    from flashattn_triton.kernels.hopper import fwd as hopper_fwd
    for nq, nk in ((777, 1500), (1500, 700)):
        q, k, v, o, lse = _inputs(2, 8, 2, nq, nk, d, torch.bfloat16, "flash")
        shift = nk - nq if causal == "br" else 0
        overrides = dict(SKIP_TILES=skip, PERSISTENT=persistent)
        if persistent:
            overrides["NUM_SMS"] = 5
        assert hopper.hopper_attention_forward(q, k, v, o, lse, 0.09, shift, **overrides), \
            f"declined: {hopper.unsupported_reason(q, k, v, o, lse, 0.09)!r}, build errors {hopper_fwd._BROKEN}"
        _check(q, k, v, o, lse, 0.09, shift)


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d,dv", [(64, 64), (128, 128), (256, 256), (192, 128)], ids=lambda x: str(x))
def test_causal_row_bound(d, dv, dtype):
    """ROW_BOUND (fwd.ROW_BOUND_DIMS; a probe override until adopted): the
    masked causal step's one compare against each row's last visible key
    computes the same attention as the two compares: every causal CASES
    entry (both alignments, GQA, Nq > Nk with rows that see no key, a single
    row, whole tiles, NaN past N), and with a window (WINDOW_CASES' causal
    ones at d = 64 / 128), against float64."""
    from flashattn_triton.kernels.hopper import fwd as hopper_fwd
    for b, hq, hkv, nq, nk, causal, layout in CASES:
        if causal is None:
            continue
        q, k, v, o, lse = _inputs(b, hq, hkv, nq, nk, d, dtype, layout, dv=dv)
        shift, scale = (nk - nq if causal == "br" else 0), d ** -0.5
        assert hopper.hopper_attention_forward(q, k, v, o, lse, scale, shift, ROW_BOUND=True), \
            f"declined: {hopper.unsupported_reason(q, k, v, o, lse, scale)!r}, build errors {hopper_fwd._BROKEN}"
        _check(q, k, v, o, lse, scale, shift)
        if layout == "padded":
            tail = o.as_strided((b, hq, 40, dv), o.stride(), o.storage_offset() + nq * o.stride(2))
            assert (tail == 7.0).all(), "the kernel wrote rows past N_Q"
    if d not in (64, 128):
        return
    for case in WINDOW_CASES:
        if case[5] is None:
            continue
        b, hq, hkv, nq, nk, causal, left, layout = case
        q, k, v, o, lse = _inputs(b, hq, hkv, nq, nk, d, dtype, layout)
        shift, window = window_shifts(case)
        assert hopper.hopper_attention_forward(q, k, v, o, lse, 0.09, shift, window, ROW_BOUND=True), \
            f"declined: {hopper.unsupported_reason(q, k, v, o, lse, 0.09)!r}, build errors {hopper_fwd._BROKEN}"
        _check(q, k, v, o, lse, 0.09, shift, window)


def test_row_bound_meta(monkeypatch):
    """ROW_BOUND is always passed (a build leaving it to the kernel's default
    differs; compile_check passes it likewise): the forward's default_meta
    and the backward's kernel_meta turn it on for causal calls at the head
    dims of each module's ROW_BOUND_DIMS (the committed sets, then others),
    never for non-causal ones; the backward not with dropout unless
    overridden."""
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    from flashattn_triton.kernels.hopper import bwd as hb, fwd as hf
    for d in (64, 128, 256):
        for c in (False, True):
            assert hf.default_meta(d, c)["ROW_BOUND"] == (c and d in hf.ROW_BOUND_DIMS), f"forward d={d} causal={c}"
            assert hb.kernel_meta(d, c)["ROW_BOUND"] == (c and d in hb.ROW_BOUND_DIMS), f"backward d={d} causal={c}"
    monkeypatch.setattr(hf, "ROW_BOUND_DIMS", frozenset({64}))
    monkeypatch.setattr(hb, "ROW_BOUND_DIMS", frozenset({128}))
    assert [hf.default_meta(64, True)["ROW_BOUND"], hf.default_meta(64, False)["ROW_BOUND"],
            hf.default_meta(128, True)["ROW_BOUND"]] == [True, False, False]
    assert [hb.kernel_meta(128, True)["ROW_BOUND"], hb.kernel_meta(128, False)["ROW_BOUND"],
            hb.kernel_meta(64, True)["ROW_BOUND"], hb.kernel_meta(128, True, dropout=True)["ROW_BOUND"],
            hb.kernel_meta(128, True, {"ROW_BOUND": True}, dropout=True)["ROW_BOUND"],
            hb.kernel_meta(64, False, {"ROW_BOUND": True})["ROW_BOUND"]] == [True, False, False, False, True, False]


WINDOW_CASES = [
    # b, hq, hkv, nq, nk, causal ("br", "tl", None: a left bound only), left, layout
    (2, 4, 4, 1000, 1000, "br", 0, "flash"),      # each row sees its diagonal key only
    (2, 4, 4, 1000, 1000, "br", 37, "flash"),     # narrower than a warpgroup's rows and a key tile
    (2, 4, 4, 1000, 1000, "br", 300, "flash"),
    (2, 8, 2, 333, 1201, "br", 200, "flash"),     # GQA, Nq < Nk
    (2, 8, 2, 333, 1201, "tl", 100, "padded"),    # top-left, NaN past N
    (1, 4, 1, 700, 130, "br", 50, "flash"),       # Nq > Nk: 570 rows see no key
    (2, 4, 4, 1000, 1000, "br", 5000, "flash"),   # wider than N: plain causal
    (3, 2, 2, 1, 517, "br", 100, "flash"),        # a single query row
    (2, 6, 3, 515, 515, "br", 128, "qkv"),        # strided slices of packed qkv, a tile's width
    (2, 4, 2, 300, 900, None, 250, "padded"),     # not causal: keys from i + 600 - 250 on, NaN past N
    (2, 4, 4, 1000, 1000, None, 0, "flash"),      # not causal, left 0: keys j >= i
    (1, 4, 1, 130, 700, None, 1000, "flash"),     # not causal, wider than N: every key
]


def _window_case_id(case):
    return "-".join(map(str, case))


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("case", WINDOW_CASES, ids=_window_case_id)
def test_window_matches_reference(dtype, d, case):
    """Sliding windows (HAS_WINDOW; not yet run on a GPU when written): the
    default plans (WINDOW_CONFIGS at d = 64) against the float64 reference
    with the band built by attention_ref; rows whose window holds no key
    give O = 0 and LSE = -inf; nothing is written past N_Q."""
    b, hq, hkv, nq, nk, causal, left, layout = case
    q, k, v, o, lse = _inputs(b, hq, hkv, nq, nk, d, dtype, layout)
    shift, window = window_shifts(case)
    scale = d ** -0.5
    from flashattn_triton.kernels.hopper import fwd as hopper_fwd
    assert hopper.hopper_attention_forward(q, k, v, o, lse, scale, shift, window), \
        f"declined: {hopper.unsupported_reason(q, k, v, o, lse, scale)!r}, build errors {hopper_fwd._BROKEN}"
    _check(q, k, v, o, lse, scale, shift, window)
    if layout == "padded":
        tail = o.as_strided((b, hq, 40, d), o.stride(), o.storage_offset() + nq * o.stride(2))
        assert (tail == 7.0).all(), "the kernel wrote rows past N_Q"


@needs_hopper
@pytest.mark.parametrize("schedule", [dict(PERSISTENT=True, NUM_SMS=5), dict(DYNAMIC=True, NUM_SMS=7)],
                         ids=["persistent5", "dynamic7"])
@pytest.mark.parametrize("skip", [False, True], ids=["all-tiles", "skip-tiles"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_window_schedules(d, skip, schedule):
    """Sliding windows on the persistent schedules (a few programs, so each
    runs several work tiles: ring, turn and Q phases carried over tiles of
    different key ranges), static and dynamic, with SKIP_TILES on and off
    (on: each warpgroup releases the tiles before its own window and past
    its diagonal unread)."""
    from flashattn_triton.kernels.hopper import fwd as hopper_fwd
    for case in WINDOW_CASES:
        if case[-1] != "flash" or case[3] == 1:
            continue
        b, hq, hkv, nq, nk, causal, left, layout = case
        q, k, v, o, lse = _inputs(b, hq, hkv, nq, nk, d, torch.bfloat16, layout)
        shift, window = window_shifts(case)
        overrides = dict(schedule, SKIP_TILES=skip)
        assert hopper.hopper_attention_forward(q, k, v, o, lse, 0.09, shift, window, **overrides), \
            f"declined: {hopper.unsupported_reason(q, k, v, o, lse, 0.09)!r}, build errors {hopper_fwd._BROKEN}"
        _check(q, k, v, o, lse, 0.09, shift, window)


@needs_hopper
@pytest.mark.parametrize("variant", [dict(PAIRED=True), dict(PINGPONG=False), dict(NUM_CONSUMERS=1),
                                     dict(NUM_CONSUMERS=3, CONSUMER_REGS=160, NUM_STAGES=2),
                                     dict(NUM_STAGES=2), dict(HEADS_FIRST=False), dict(M_BAND=3),
                                     dict(PERSISTENT=True, NUM_SMS=5, NUM_STAGES=2, SKIP_TILES=True)],
                         ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()))
@pytest.mark.parametrize("causal", [None, "br"])
def test_window_schedule_variants(variant, causal):
    """Every schedule switch computes the same windowed attention (d = 128,
    GQA, Nq < Nk, a window of 300 keys)."""
    q, k, v, o, lse = _inputs(2, 8, 2, 777, 1500, 128, torch.bfloat16, "flash")
    shift = None if causal is None else 1500 - 777
    window = (300, 1500 - 777)
    from flashattn_triton.kernels.hopper import fwd as hopper_fwd
    assert hopper.hopper_attention_forward(q, k, v, o, lse, 0.09, shift, window, **variant), \
        f"declined {variant}: {hopper.unsupported_reason(q, k, v, o, lse, 0.09)!r}, build errors {hopper_fwd._BROKEN}"
    _check(q, k, v, o, lse, 0.09, shift, window)


@needs_hopper
@pytest.mark.parametrize("d", [64, 128])
def test_window_long_sequence(d):
    """The real persistent grid at N = 8k with the windows of Mistral /
    Gemma (4096, 1024) and gpt-oss (128), causal; a call without a window
    in between still runs its own plan."""
    q, k, v, o, lse = _inputs(1, 4, 1, 8192, 8192, d, torch.bfloat16, "flash")
    for left in (4096, 1024, 128, None):
        window = None if left is None else (left, 0)
        assert hopper.hopper_attention_forward(q, k, v, o, lse, d ** -0.5, 0, window)
        _check(q, k, v, o, lse, d ** -0.5, 0, window)


@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_window_api_default(monkeypatch, causal):
    """flash_attn_func with window_size=(left, -1 or 0): the Hopper forward
    by default, matching the reference (and its backward, the portable one
    by default, takes the Hopper forward's LSE); with
    FLASHATTN_TRITON_HOPPER_WINDOW=0 the portable forward."""
    from flashattn_triton import flash_attn_func, ops
    from flashattn_triton.reference import flash_attention_ref
    calls = []
    real = ops._kernels.hopper_forward
    if real is None:
        ops._kernels.load()
        real = ops._kernels.hopper_forward
    monkeypatch.setattr(ops._kernels, "hopper_forward",
                        lambda *a: calls.append(a[7]) or real(*a))
    q = torch.randn(2, 1000, 8, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, 1234, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, 1234, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    window = (256, 0 if causal else -1)
    o_ref, lse_ref = flash_attention_ref(q, k, v, causal, window_size=window)
    o_low, _ = flash_attention_ref(q, k, v, causal, window_size=window, dtype=torch.bfloat16)
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_WINDOW", "0")
    flash_attn_func(q, k, v, causal=causal, window_size=window)
    assert calls == [], "a window took the Hopper forward with FLASHATTN_TRITON_HOPPER_WINDOW=0"
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_WINDOW", raising=False)
    out, lse = flash_attn_func(q, k, v, causal=causal, window_size=window, return_lse=True)
    assert calls and calls[-1] == (256, 1234 - 1000), calls
    assert_close("out", out, o_ref, baseline=o_low)
    assert max_abs_err(lse, lse_ref) <= 1e-3 * lse_ref[torch.isfinite(lse_ref)].abs().max().item()
    out.float().square().sum().backward()  # the portable backward on the Hopper forward's LSE
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


@needs_hopper
@pytest.mark.parametrize("n_q,n_k", [(1000, 1234), (1234, 1000)], ids=["nq<nk", "nq>nk"])
@pytest.mark.parametrize("window", [(-1, 0), (-1, -1), (128, 0)], ids=["causal", "full", "window128"])
@pytest.mark.parametrize("d", [64, 128])
def test_sinks_folded_after_the_hopper_forward(monkeypatch, d, window, n_q, n_k):
    """FLASHATTN_TRITON_HOPPER_SINKS=1: flash_attn_func with learnable sinks
    runs the Hopper forward without them and folds them into O and the LSE
    (ops._fold_sinks); output, LSE and the gradients of q, k, v and the sinks
    (the backward reads the folded LSE) against float64, GQA; causal with
    Nq > Nk has rows that see only the sink (O = 0, LSE = the sink)."""
    from flashattn_triton import flash_attn_func, ops
    from flashattn_triton.reference import flash_attention_ref
    calls = []
    real = ops._kernels.hopper_forward
    if real is None:
        ops._kernels.load()
        real = ops._kernels.hopper_forward
    def spy(*a, **kw):
        took = real(*a, **kw)
        calls.append(took)
        return took
    monkeypatch.setattr(ops._kernels, "hopper_forward", spy)
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_SINKS", "1")
    torch.manual_seed(0)
    leaves = [torch.randn(2, n, h, d, device="cuda", dtype=torch.bfloat16).requires_grad_()
              for n, h in ((n_q, 8), (n_k, 2), (n_k, 2))]
    sinks = (torch.randn(8, device="cuda") * 2).requires_grad_()
    causal = window[1] == 0
    out, lse = flash_attn_func(*leaves, causal=causal, window_size=window, sinks=sinks, return_lse=True)
    assert calls == [True], f"the Hopper forward did not take the call: {calls}"
    do = torch.randn_like(out)
    grads = torch.autograd.grad((out * do).sum(), [*leaves, sinks])
    ref_in = [t.detach().double().requires_grad_() for t in (*leaves, sinks)]
    o_ref, lse_ref = flash_attention_ref(*ref_in[:3], causal, window_size=window, sinks=ref_in[3])
    ref_grads = torch.autograd.grad((o_ref * do.double()).sum(), ref_in)
    low_in = [t.detach().requires_grad_() for t in (*leaves, sinks)]
    o_low, _ = flash_attention_ref(*low_in[:3], causal, window_size=window, sinks=low_in[3], dtype=torch.bfloat16)
    low_grads = torch.autograd.grad((o_low * do).sum(), low_in)
    assert_close("out", out, o_ref, baseline=o_low)
    assert max_abs_err(lse, lse_ref) <= 1e-3 * lse_ref.abs().max().item()
    if causal:  # bottom-right: the first Nq - Nk rows see no key
        check_sink_only_rows(out, lse, sinks.detach(), n_q - n_k, atol=1e-5)
    for name, g, r, lo in zip(("dq", "dk", "dv", "dsinks"), grads, ref_grads, low_grads):
        assert_close(name, g, r, baseline=lo, factor=3.0, dtype=torch.bfloat16)


@needs_hopper
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("programs", [None, 7], ids=["sms", "7programs"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_persistent_matches_reference(programs, d, case, dynamic):
    """PERSISTENT: one program per SM (or 7, each then running several work
    tiles, with a partial last round) on every case of test_matches_reference;
    with the static snake order or the DYNAMIC scheduler (atomic counter)."""
    overrides = dict(PERSISTENT=True, DYNAMIC=dynamic)
    if programs is not None:
        overrides["NUM_SMS"] = programs
    _check_case(case, d, d, overrides)


def _check_case(case, d, dv, overrides):
    """One CASES entry through hopper_attention_forward with overrides,
    against float64; with the padded layout, the rows past N_Q untouched."""
    b, hq, hkv, nq, nk, causal, layout = case
    q, k, v, o, lse = _inputs(b, hq, hkv, nq, nk, d, torch.bfloat16, layout, dv=dv)
    shift = None if causal is None else (nk - nq if causal == "br" else 0)
    from flashattn_triton.kernels.hopper import fwd as hopper_fwd
    assert hopper.hopper_attention_forward(q, k, v, o, lse, d ** -0.5, shift, **overrides), \
        f"declined: {hopper.unsupported_reason(q, k, v, o, lse, d ** -0.5)!r}, build errors {hopper_fwd._BROKEN}"
    _check(q, k, v, o, lse, d ** -0.5, shift)
    if layout == "padded":
        tail = o.as_strided((b, hq, 40, dv), o.stride(), o.storage_offset() + nq * o.stride(2))
        assert (tail == 7.0).all(), "the kernel wrote rows past N_Q"


@needs_hopper
@pytest.mark.parametrize("variant", [dict(), dict(PAIRED=True), dict(PINGPONG=False), dict(NUM_CONSUMERS=1),
                                     dict(NUM_CONSUMERS=3, CONSUMER_REGS=160, NUM_STAGES=2),
                                     dict(HEADS_FIRST=True), dict(HEADS_FIRST=False), dict(NUM_STAGES=2),
                                     dict(HEADS_FIRST=True, M_BAND=3), dict(HEADS_FIRST=True, M_BAND=16),
                                     dict(HEADS_FIRST=True, HEAD_SECTION=3), dict(HEADS_FIRST=True, HEAD_SECTION=16),
                                     dict(HEADS_FIRST=True, SECTION_MB=1)],
                         ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) or "default")
@pytest.mark.parametrize("causal", [None, "br", "tl"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_persistent_schedule_variants(variant, causal, dynamic):
    """Every schedule switch with PERSISTENT on 5 programs (ring, turn and Q
    phases carried over 3-7 work tiles each) computes the same attention."""
    q, k, v, o, lse = _inputs(2, 8, 2, 777, 1500, 128, torch.bfloat16, "flash")
    shift = None if causal is None else (1500 - 777 if causal == "br" else 0)
    from flashattn_triton.kernels.hopper import fwd as hopper_fwd
    overrides = dict(variant, PERSISTENT=True, NUM_SMS=5, DYNAMIC=dynamic)
    assert hopper.hopper_attention_forward(q, k, v, o, lse, 0.09, shift, **overrides), \
        f"declined {variant}: {hopper.unsupported_reason(q, k, v, o, lse, 0.09)!r}, build errors {hopper_fwd._BROKEN}"
    _check(q, k, v, o, lse, 0.09, shift)


@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dynamic", [False, True, "sections"], ids=["static", "dynamic", "sections"])
def test_persistent_long_sequence(causal, dynamic):
    """The real grid (one program per SM) with several tiles per program
    (sections: the DYNAMIC order by head sections of 4 MiB, 8 of 32 heads)."""
    q, k, v, o, lse = _inputs(2, 16, 4, 4096, 4096, 128, torch.bfloat16, "flash")
    shift = 0 if causal else None
    extra = dict(SECTION_MB=4) if dynamic == "sections" else {}
    assert hopper.hopper_attention_forward(q, k, v, o, lse, 128 ** -0.5, shift, PERSISTENT=True,
                                           DYNAMIC=bool(dynamic), **extra)
    _check(q, k, v, o, lse, 128 ** -0.5, shift)


@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_dynamic_repeated_calls_and_graph(causal):
    """DYNAMIC's counter is reset for every call: repeated calls, calls on
    two streams at once and CUDA graph replays all give the same output."""
    q, k, v, o, lse = _inputs(2, 8, 2, 1500, 1500, 128, torch.bfloat16, "flash")
    shift = 0 if causal else None
    run = lambda o_, l_: hopper.hopper_attention_forward(q, k, v, o_, l_, 0.09, shift, DYNAMIC=True)  # noqa: E731
    assert run(o, lse)
    _check(q, k, v, o, lse, 0.09, shift)
    ref = o.clone()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    outs = [(torch.empty_like(o), torch.empty_like(lse)) for _ in range(4)]
    torch.cuda.synchronize()
    for i, (o_, l_) in enumerate(outs):
        with torch.cuda.stream(s1 if i % 2 else s2):
            assert run(o_, l_)
    torch.cuda.synchronize()
    for o_, _ in outs:
        assert torch.equal(o_, ref)
    from flashattn_triton.testing import capture_graph
    o_g, l_g = torch.empty_like(o), torch.empty_like(lse)
    graph, _ = capture_graph(lambda: (run(o_g, l_g), o_g))
    for _ in range(3):
        o_g.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(o_g, ref)


@needs_hopper
@pytest.mark.parametrize("d,dv", [(128, 128), (192, 128)], ids=["d128", "d192v128"])
@pytest.mark.parametrize("causal", [False, True])
def test_long_sequence(causal, d, dv):
    """The benchmark's shape: B = 2, N = 4096, Hq = 16 over Hkv = 4 (d = 192
    with dv = 128: the split Q K^T)."""
    q, k, v, o, lse = _inputs(2, 16, 4, 4096, 4096, d, torch.bfloat16, "flash", dv=dv)
    shift = 0 if causal else None
    assert hopper.hopper_attention_forward(q, k, v, o, lse, d ** -0.5, shift)
    _check(q, k, v, o, lse, d ** -0.5, shift)


@needs_hopper
def test_declines_what_it_cannot_run():
    """Each unsupported case returns False and leaves the outputs alone."""
    dev = "cuda"

    def run(q, k=None, v=None, scale=0.125, dtype_o=None):
        k = q if k is None else k
        v = k if v is None else v
        o = torch.zeros(q.shape[:3] + (v.shape[-1],), device=dev, dtype=dtype_o or q.dtype)
        lse = torch.zeros(q.shape[:3], device=dev)
        took = hopper.hopper_attention_forward(q, k, v, o, lse, scale, None)
        return took or bool(o.any()) or bool(lse.any())

    base = torch.randn(2 * 4 * 64 * 64 + 1, device=dev, dtype=torch.bfloat16)
    assert not run(base[1:].view(2, 4, 64, 64)), "a base not 16-byte aligned must be declined"
    assert not run(torch.randn(1, 2, 64, 96, device=dev, dtype=torch.bfloat16)), "d = 96 has no config"
    assert not run(torch.randn(1, 2, 64, 64, device=dev)), "float32"
    q = torch.randn(1, 2, 64, 64, device=dev, dtype=torch.bfloat16)
    assert not run(q, v=torch.randn(1, 2, 64, 128, device=dev, dtype=torch.bfloat16)), "dv != d"
    assert not run(q, scale=-0.1), "a negative scale"
    odd = torch.randn(1, 2, 64, 65, device=dev, dtype=torch.bfloat16)[..., :64]
    assert not run(odd), "a row stride that is not a multiple of 16 bytes"


@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_api_with_hopper_backend(monkeypatch, causal):
    """flash_attn_func routed to the Hopper tier (FLASHATTN_TRITON_BACKEND=hopper)."""
    from flashattn_triton import flash_attn_func
    from flashattn_triton.reference import flash_attention_ref
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper")
    q = torch.randn(2, 1000, 8, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 1234, 2, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(2, 1234, 2, 128, device="cuda", dtype=torch.bfloat16)
    out, lse = flash_attn_func(q, k, v, causal=causal, return_lse=True)
    o_ref, lse_ref = flash_attention_ref(q, k, v, causal)
    o_low, _ = flash_attention_ref(q, k, v, causal, dtype=torch.bfloat16)
    assert_close("out", out, o_ref, baseline=o_low)
    assert max_abs_err(lse, lse_ref) <= 1e-3 * lse_ref.abs().max().item()


# --------------------------------------------------------------------------- split Q K^T (d = 192, dv = 128)

def test_split_schedule_emulation():
    """Split Q K^T (tests/hopper_model.py, d = 12 = 8 + 4 and dv = 8 standing
    for 192 = 128 + 64 and 128): S as two column-chunk products summed, on
    every schedule, causal or not, windows, GQA, ragged lengths, in float64
    against the dense reference; the broken forms (second chunk dropped, not
    accumulated, loaded from the wrong column) are caught."""
    import hopper_model as hm
    fails, caught = hm.check_split(full=False)
    assert not fails, fails[:3]
    assert all(caught.values()), caught


@pytest.mark.parametrize("broken", [None, "tail_each_zeroes", "tail_no_barrier", "tail_count_all"])
def test_varlen_tail_zeroing_protocol(broken):
    """Packed sequences with FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE=1
    (IS_VARLEN = 2): the work tile's last consumer zeroes the V rows past the
    sequence in the last key tile's slot, and the consumers whose share ends
    at that tile meet at a named barrier before their P V (kernels/hopper/
    fwd.py).  Under random schedules and shares (growing with the
    consumer's rows, the kernel's _own_tiles) nothing reads the slot before
    it is zeroed, no thread writes it while a wgmma reads it, and nothing
    deadlocks; every consumer zeroing it itself (the form whose stores
    racecheck reported in session 72), no barrier, and a barrier counting
    every consumer are each caught."""
    runs = caught = 0
    # Packed batches run on the grid of one program per block: not persistent.
    for options in ({}, {"skip": True}, {"skip": True, "head": True}):
        r, c = _protocol_catches(broken, persistent=False, varlen=True, **options)
        runs, caught = runs + r, caught + c
    assert runs >= 20
    assert broken is None or caught, f"{broken}: not caught in {runs} runs"


@pytest.mark.parametrize("broken", [None, "split_expect_one", "split_wait_2"])
def test_split_protocol_simulation(broken):
    """The mbarrier protocol with Q and K loaded as two TMA copies on one
    barrier each and S as two wgmma groups: no hazard or deadlock; expecting
    one copy's bytes, or waiting for all but two groups, is caught."""
    import hopper_model as hm
    caught = 0
    for tiles, nc, ns, pingpong, persistent, seed in hm.protocol_cases(full=False):
        try:
            hm.simulate_protocol(tiles, nc, ns, pingpong, persistent, seed, skip=seed % 2 == 1,
                                 head=seed % 4 >= 2, split=True, broken=broken)
        except hm.ProtocolError:
            if broken is None:
                raise
            caught += 1
    assert broken is None or caught, broken


def test_default_meta_short_configs(monkeypatch):
    """fwd.SHORT_CONFIGS: its entries replace CONFIGS' for plain calls of at
    most n_max query rows of their (d, causal) only: not past n_max, not
    without n_q (info of a length-free call), not with a window, dropout or a
    mask, not for the other causal flag or head dim (the launcher's plan:
    test_short_configs_launch_on_a_fake_driver)."""
    hf = hopper_module("fwd")
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    # (NUM_STAGES marks the entry: the window, dropout and mask tables set two consumers as well)
    nc2 = dict(NUM_CONSUMERS=2, CONSUMER_REGS=240, NUM_STAGES=2)
    assert hf.CONFIGS[64]["NUM_STAGES"] != 2
    monkeypatch.setattr(hf, "SHORT_CONFIGS", {(64, False): (1024, nc2)})
    three = hf.CONFIGS[64]["NUM_CONSUMERS"]
    assert three == 3, "the test assumes d = 64's three consumers"

    def consumers(*args, **kw):
        return hf.default_meta(*args, **kw)["NUM_CONSUMERS"]
    assert consumers(64, False, n_q=1024) == 2 and consumers(64, False, n_q=1) == 2
    assert (hf.default_meta(64, False, n_q=1024)["CONSUMER_REGS"], hf.default_meta(64, False, n_q=1024)["NUM_STAGES"]) \
        == (240, 2)
    assert consumers(64, False, n_q=1025) == three, "past n_max"
    assert consumers(64, False) == three, "no n_q"
    assert consumers(64, True, n_q=512) == three, "the causal flag has no entry"
    for kind in ("windowed", "dropout", "masked"):
        assert hf.default_meta(64, False, n_q=512, **{kind: True})["NUM_STAGES"] == hf.CONFIGS[64]["NUM_STAGES"], kind
    assert hf.default_meta(128, False, n_q=512) == hf.default_meta(128, False)
    monkeypatch.setattr(hf, "SHORT_CONFIGS", {})
    assert hf.default_meta(64, False, n_q=512) == hf.default_meta(64, False)


def test_default_meta_layers_the_variant_tables(monkeypatch):
    """fwd.default_meta: CONFIGS and SCHEDULE, then the causal, window,
    dropout and mask tables in that order (later ones win), each only for its
    own kind of call; the launcher's plan and `info` read it."""
    hf = hopper_module("fwd")
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    monkeypatch.setattr(hf, "CAUSAL_CONFIGS", {64: dict(NUM_CONSUMERS=2, CONSUMER_REGS=240, NUM_STAGES=2)})
    monkeypatch.setattr(hf, "WINDOW_CONFIGS", {64: dict(NUM_STAGES=4)})
    full, causal = hf.default_meta(64, False), hf.default_meta(64, True)
    assert (full["NUM_CONSUMERS"], full["NUM_STAGES"]) == (hf.CONFIGS[64]["NUM_CONSUMERS"], hf.CONFIGS[64]["NUM_STAGES"])
    assert (causal["NUM_CONSUMERS"], causal["CONSUMER_REGS"], causal["NUM_STAGES"]) == (2, 240, 2)
    assert causal["DYNAMIC"] == hf.DYNAMIC_DEFAULT[64][True] and causal["HEADS_FIRST"] == hf.SCHEDULE[True]["HEADS_FIRST"]
    assert hf.default_meta(64, True, windowed=True)["NUM_STAGES"] == 4  # the window's entry after the causal one
    assert hf.default_meta(64, False, windowed=True)["NUM_CONSUMERS"] == hf.CONFIGS[64]["NUM_CONSUMERS"]
    assert hf.default_meta(128, True) == dict(hf.CONFIGS[128], **hf.SCHEDULE[True],
                                              PERSISTENT=hf.PERSISTENT_DEFAULT[128][True],
                                              DYNAMIC=hf.DYNAMIC_DEFAULT[128][True],
                                              ROW_BOUND=128 in hf.ROW_BOUND_DIMS)


def test_split_config_fits():
    """CONFIGS[192] (and the probe's bn64 variant) fit the shared memory the
    launcher allows, with V / O of HEAD_DIM_V[192] = 128 columns."""
    hf = hopper_module("fwd")
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    assert hf.value_head_dim(192) == 128 and hf.value_head_dim(128) == 128 and hf.value_head_dim(96) is None
    for over in ({}, dict(BLOCK_N=64, NUM_STAGES=3)):
        assert hf.smem_bytes(192, head_dim_v=128, **dict(hf.CONFIGS[192], **over)) <= hf.SMEM_LIMIT
    assert hf.smem_bytes(192, head_dim_v=128, **dict(hf.CONFIGS[192], NUM_STAGES=3)) > hf.SMEM_LIMIT
    for d in (64, 128, 256):  # dv = d: the formula of before
        c = hf.CONFIGS[d]
        rows, keys = c["NUM_CONSUMERS"] * c["BLOCK_M"], c["NUM_STAGES"] * c["BLOCK_N"]
        assert hf.smem_bytes(d, **c) == 2 * d * (rows + 2 * keys) + 64 * (c["NUM_CONSUMERS"] + c["NUM_STAGES"])


@pytest.mark.parametrize("opt_in", [None, "0", "1"])
def test_split_dispatch_opt_out(monkeypatch, opt_in):
    """_dispatch.use_hopper_forward: d != dv (d = 192, dv = 128) tries the
    Hopper forward (by default, or with FLASHATTN_TRITON_HOPPER_SPLIT_QK=1)
    unless that variable is "0"; the op layer passes out of dv columns;
    d = dv calls are not affected."""
    from flashattn_triton import _dispatch, ops
    monkeypatch.setattr(_dispatch, "_hopper_tier", lambda device: True)
    monkeypatch.setattr(ops, "use_triton", lambda t: True)
    calls = []
    monkeypatch.setattr(ops._kernels, "forward", lambda *a, **kw: calls.append(("portable", a[3].shape[-1])))
    monkeypatch.setattr(ops._kernels, "hopper_forward", lambda *a: calls.append(("hopper", a[3].shape[-1])) or True)
    if opt_in is None:
        monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_SPLIT_QK", raising=False)
    else:
        monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_SPLIT_QK", opt_in)
    q = torch.randn(1, 300, 4, 192, dtype=torch.bfloat16)
    k = torch.randn(1, 500, 2, 192, dtype=torch.bfloat16)
    v = torch.randn(1, 500, 2, 128, dtype=torch.bfloat16)
    takes = opt_in != "0"
    assert _dispatch.use_hopper_forward(q, k, v, (-1, 0), 0) == takes
    assert _dispatch.use_hopper_forward(q[..., :128], k[..., :128], v, (-1, 0), 0), "d = dv always"
    out, lse = torch.empty(1, 300, 4, 128, dtype=torch.bfloat16), torch.empty(1, 4, 300)
    ops._fwd_into(q, k, v, out, lse, None, None, 300, 500, 0.125, -1, 0, True)
    assert calls == [("hopper" if takes else "portable", 128)], calls


_FAKE_LAUNCH_SPLIT = _FAKE_FWD_PRELUDE + r"""
q = torch.randn(2, 4, 1000, 192).to(torch.bfloat16)
k = torch.randn(2, 2, 1200, 192).to(torch.bfloat16)
v = torch.randn(2, 2, 1200, 128).to(torch.bfloat16)
o, lse = torch.empty(2, 4, 1000, 128).to(torch.bfloat16), torch.empty(2, 4, 1000)
for causal, window, overrides in [(True, None, {}), (False, None, {"DYNAMIC": True, "NUM_SMS": 5}),
                                  (True, (100, 200), {"BLOCK_N": 64, "NUM_STAGES": 3})]:
    with fake_cuda():
        ok = hf.hopper_attention_forward(q, k, v, o, lse, 0.125, 200 if causal else None, window, **overrides)
    assert ok, hf._BROKEN
    launcher, grid, args = LAUNCHES[-1]
    consts, sig = launcher.src.constants, launcher.src.signature
    blocks = [sig[n][sig[n].index("["):sig[n].index("]") + 1] for n in ("q_desc", "k_desc", "v_desc", "o_desc",
                                                                      "q1_desc", "k1_desc")]
    print(grid, consts.get((names.index("HEAD_DIM"),)), consts.get((names.index("HEAD_DIM_V"),)), " ".join(blocks))
q2 = torch.randn(2, 4, 1000, 128).to(torch.bfloat16)
with fake_cuda():
    assert hf.hopper_attention_forward(q2, v, v, o, lse, 0.125, None)
launcher, grid, args = LAUNCHES[-1]
sig = launcher.src.signature
print(sig["q1_desc"], sig["k1_desc"], launcher.src.constants.get((names.index("HEAD_DIM_V"),)))
"""


def test_split_launch_on_a_fake_driver():
    """Triton 3.6 without a GPU: d = 192 / dv = 128 plans compile for sm_90
    through the real JIT path (grid, persistent / dynamic, a window, the
    bn64 tiles) with six descriptors: Q, K as 128-column blocks, V, O, and
    Q's and K's columns [128, 192) as 64-column blocks; d = dv plans pass
    None for the last two (constexprs: the kernel of before)."""
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    lines = fake_launch(_FAKE_LAUNCH_SPLIT, timeout=900).strip().split("\n")
    blocks = lambda bn: (f"[1, 1, 64, 128] [1, 1, {bn}, 128] [1, 1, {bn}, 128] [1, 1, 64, 128] "  # noqa: E731
                         f"[1, 1, 64, 64] [1, 1, {bn}, 64]")
    assert lines == [f"(8, 8, 1) 192 128 {blocks(128)}",     # causal: (B * H, m-blocks), heads first
                     f"(5, 1, 1) 192 128 {blocks(128)}",     # dynamic on 5 programs
                     f"(8, 8, 1) 192 128 {blocks(64)}",
                     "constexpr constexpr 128"], lines


SPLIT_DIMS = [(192, 128)]


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dims", SPLIT_DIMS, ids=lambda x: f"d{x[0]}v{x[1]}")
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_split_matches_reference(dtype, dims, case):
    """d = 192, dv = 128 (split Q K^T) on every case of test_matches_reference:
    ragged N with batch > 1, GQA, causal bottom-right and top-left, Nq > Nk
    (rows with no key), one query row, packed-qkv views, NaN past N in the
    inputs and 7s past N in the output, NaN-filled outputs."""
    d, dv = dims
    _forward_matches_reference(dtype, d, dv, case)


@needs_hopper
@pytest.mark.parametrize("variant", [dict(), dict(BLOCK_N=64, NUM_STAGES=3), dict(PERSISTENT=True, NUM_SMS=5),
                                     dict(DYNAMIC=True, NUM_SMS=7), dict(PINGPONG=False), dict(NUM_CONSUMERS=1),
                                     dict(HEADS_FIRST=True), dict(SKIP_TILES=True, PERSISTENT=True)],
                         ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) or "default")
@pytest.mark.parametrize("causal", [None, "br", "tl"])
def test_split_schedule_variants(variant, causal):
    """d = 192 / dv = 128 on every schedule switch (the candidate 64-key
    tiles, persistent and dynamic grids on a few programs, no ping-pong,
    one consumer, SKIP_TILES), Nq < Nk and Nq > Nk."""
    from flashattn_triton.kernels.hopper import fwd as hopper_fwd
    for nq, nk in ((777, 1500), (1500, 700)):
        q, k, v, o, lse = _inputs(2, 8, 2, nq, nk, 192, torch.bfloat16, "flash", dv=128)
        shift = None if causal is None else (nk - nq if causal == "br" else 0)
        assert hopper.hopper_attention_forward(q, k, v, o, lse, 0.07, shift, **variant), \
            f"declined {variant}: {hopper.unsupported_reason(q, k, v, o, lse, 0.07)!r}, builds {hopper_fwd._BROKEN}"
        _check(q, k, v, o, lse, 0.07, shift)


@needs_hopper
@pytest.mark.parametrize("case", [c for c in WINDOW_CASES if c[-1] != "qkv"], ids=_window_case_id)
def test_split_window(case):
    """d = 192 / dv = 128 with a left window bound (HAS_WINDOW)."""
    b, hq, hkv, nq, nk, causal, left, layout = case
    q, k, v, o, lse = _inputs(b, hq, hkv, nq, nk, 192, torch.bfloat16, layout, dv=128)
    shift, window = window_shifts(case)
    assert hopper.hopper_attention_forward(q, k, v, o, lse, 0.07, shift, window)
    _check(q, k, v, o, lse, 0.07, shift, window)


@needs_hopper
def test_split_declines_other_pairs():
    """Head dim pairs without a split config decline and write nothing."""
    dev = "cuda"
    for d, dv in ((192, 192), (192, 64), (96, 64), (128, 64)):
        q = torch.randn(1, 2, 64, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, 2, 64, dv, device=dev, dtype=torch.bfloat16)
        o = torch.zeros(1, 2, 64, dv, device=dev, dtype=torch.bfloat16)
        lse = torch.zeros(1, 2, 64, device=dev)
        assert not hopper.hopper_attention_forward(q, q, v, o, lse, 0.1, None), (d, dv)
        assert not o.any() and not lse.any()


@needs_hopper
@pytest.mark.parametrize("causal", [False, True])
def test_split_api_default(monkeypatch, causal):
    """flash_attn_func with d = 192, dv = 128: the Hopper forward by
    default, matching the reference; the backward (portable for these head
    dims) takes its LSE; with FLASHATTN_TRITON_HOPPER_SPLIT_QK=0 the
    portable forward."""
    from flashattn_triton import flash_attn_func, ops
    from flashattn_triton.reference import flash_attention_ref
    calls = []
    real = ops._kernels.hopper_forward
    if real is None:
        ops._kernels.load()
        real = ops._kernels.hopper_forward
    monkeypatch.setattr(ops._kernels, "hopper_forward", lambda *a: calls.append(a[0].shape) or real(*a))
    q = torch.randn(2, 1000, 8, 192, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(2, 1234, 2, 192, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, 1234, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    o_ref, lse_ref = flash_attention_ref(q, k, v, causal)
    o_low, _ = flash_attention_ref(q, k, v, causal, dtype=torch.bfloat16)
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_SPLIT_QK", "0")
    flash_attn_func(q, k, v, causal=causal)
    assert calls == [], "d != dv took the Hopper forward with FLASHATTN_TRITON_HOPPER_SPLIT_QK=0"
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_SPLIT_QK", raising=False)
    out, lse = flash_attn_func(q, k, v, causal=causal, return_lse=True)
    assert calls, "d = 192 / dv = 128 did not take the Hopper forward by default"
    assert out.shape == (2, 1000, 8, 128)
    assert_close("out", out, o_ref, baseline=o_low)
    assert max_abs_err(lse, lse_ref) <= 1e-3 * lse_ref.abs().max().item()
    out.float().square().sum().backward()  # the portable backward on the Hopper forward's LSE
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
