"""Packed batches (flash_attn_varlen_func) on the Hopper tier: the forward
(kernels/hopper/fwd.py IS_VARLEN, _dispatch.use_hopper_varlen_forward) and
the backward (kernels/hopper/bwd.py IS_VARLEN, FLASHATTN_TRITON_HOPPER_VARLEN_BWD,
_dispatch.use_hopper_varlen_backward).

The GPU tests set FLASHATTN_TRITON_HOPPER_VARLEN=1 (the default), check that the
Hopper forward took the call, and compare the output, the LSE and the
gradients (the forward tests: the portable backward from the Hopper
forward's O and LSE; the backward tests: the Hopper one) with per-sequence
float64 references.  The sequences are chosen to break what a
packed tile can get wrong: lengths around the 128-row and 128-key tiles, a
sequence of one token, an empty one, n_k != n_q per sequence (rows that see
no key under the bottom-right diagonal give O = 0 and LSE = -inf), and the
rows of the next sequence right after each one (a block reads them and must
neither use nor overwrite them).
"""

import pytest
import torch

from flashattn_triton import _dispatch, api, flash_attn_varlen_func
from flashattn_triton.kernels import hopper
from flashattn_triton.testing import rand, random_cu_seqlens, varlen_attention_ref
from _utils import check_nan_isolation, check_varlen, hopper_gpu_reason, hopper_module

needs_hopper = pytest.mark.skipif(bool(hopper_gpu_reason()), reason=hopper_gpu_reason() or "-")


# --------------------------------------------------------------------------- everywhere

def test_switch_is_on_by_default_and_read_per_call(monkeypatch):
    """Unset, the packed path takes the Hopper forward where it runs
    (HOPPER_VARLEN_DEFAULT "1" since session 55); the variable is read at
    each call; on the CPU never taken."""
    monkeypatch.delenv(_dispatch.ENV_HOPPER_VARLEN, raising=False)
    assert _dispatch.HOPPER_VARLEN_DEFAULT == "1"
    assert _dispatch._switch(_dispatch.ENV_HOPPER_VARLEN, _dispatch.HOPPER_VARLEN_DEFAULT)
    monkeypatch.setenv(_dispatch.ENV_HOPPER_VARLEN, "0")
    assert not _dispatch._switch(_dispatch.ENV_HOPPER_VARLEN, _dispatch.HOPPER_VARLEN_DEFAULT)
    monkeypatch.delenv(_dispatch.ENV_HOPPER_VARLEN)
    q = torch.zeros(4, 2, 64)
    assert not _dispatch.use_hopper_varlen_forward(q, q, (-1, 0))


def test_rule_declines_chunks_and_right_windows(monkeypatch):
    """Chunked calls and windows with a right bound other than 0 / -1 are
    never tried (the Hopper forward has neither), whatever the switch."""
    monkeypatch.setenv(_dispatch.ENV_HOPPER_VARLEN, "1")
    monkeypatch.setattr(_dispatch, "_hopper_tier", lambda device: True)
    q = torch.zeros(4, 2, 64)
    assert _dispatch.use_hopper_varlen_forward(q, q, (-1, 0))
    assert _dispatch.use_hopper_varlen_forward(q, q, (32, -1))
    assert not _dispatch.use_hopper_varlen_forward(q, q, (-1, 0), attention_chunk=64)
    assert not _dispatch.use_hopper_varlen_forward(q, q, (8, 8))
    monkeypatch.setenv(_dispatch.ENV_HOPPER_VARLEN, "0")
    assert not _dispatch.use_hopper_varlen_forward(q, q, (-1, 0))


def test_rule_keeps_short_batches_at_d64_portable(monkeypatch):
    """d = 64 with every sequence at most HOPPER_VARLEN_SHORT[64] long keeps
    the portable forward (measured faster there), unless a left window or
    the forced Hopper tier; longer batches and other head dims take it."""
    monkeypatch.setenv(_dispatch.ENV_HOPPER_VARLEN, "1")
    monkeypatch.setattr(_dispatch, "_hopper_tier", lambda device: True)
    q64, q128 = torch.zeros(4, 2, 64), torch.zeros(4, 2, 128)
    short = _dispatch.HOPPER_VARLEN_SHORT[64]
    assert not _dispatch.use_hopper_varlen_forward(q64, q64, (-1, 0), max_seqlen=short)
    assert not _dispatch.use_hopper_varlen_forward(q64, q64, (-1, -1), max_seqlen=100)
    assert _dispatch.use_hopper_varlen_forward(q64, q64, (-1, 0), max_seqlen=short + 1)
    assert _dispatch.use_hopper_varlen_forward(q64, q64, (32, 0), max_seqlen=100)
    assert _dispatch.use_hopper_varlen_forward(q128, q128, (-1, 0), max_seqlen=100)
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper")
    assert _dispatch.use_hopper_varlen_forward(q64, q64, (-1, 0), max_seqlen=100)


# --------------------------------------------------------------------------- GPU

def _spy_on(monkeypatch, name: str, env: str) -> list:
    """Switch a packed Hopper path on (env = "1") and record the results of
    the calls of hopper.<name> (True: it took the call)."""
    monkeypatch.setenv(env, "1")
    taken: list = []
    real = getattr(hopper, name)

    def spy(*args, **kwargs):
        taken.append(real(*args, **kwargs))
        return taken[-1]

    monkeypatch.setattr(hopper, name, spy)
    return taken


def _spy(monkeypatch) -> list:
    """The packed Hopper forward on, at every length (no HOPPER_VARLEN_SHORT
    rule) with the portable backward; the results of its calls."""
    monkeypatch.setattr(_dispatch, "HOPPER_VARLEN_SHORT", {})
    monkeypatch.setenv(_dispatch.ENV_HOPPER_VARLEN_BWD, "0")
    return _spy_on(monkeypatch, "hopper_forward_varlen", _dispatch.ENV_HOPPER_VARLEN)


def _check(lens_q, lens_k, h_q, h_kv, d, causal, dtype, window=(-1, -1), d_v=None, grads=True):
    check_varlen(lens_q, lens_k, h_q, h_kv, d, causal, dtype, torch.device("cuda"), window, d_v, grads)


# Around the tiles (128-row blocks of two 64-row consumers, 128-key tiles at
# d = 128): one token, 127 / 128 / 129, a long one, an empty one between.
LENS = [1, 127, 128, 0, 129, 700, 64, 300]
# n_k != n_q per sequence: more keys (a cache before the queries), fewer
# keys (causal rows before the diagonal see none), and none at all.
LENS_Q = [5, 200, 130, 40, 64]
LENS_K = [90, 170, 300, 0, 257]


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("d,d_v", [(64, 64), (128, 128), (256, 256), (192, 128)], ids=["d64", "d128", "d256",
                                                                                     "d192-dv128"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_hopper_varlen_matches_reference(monkeypatch, d, d_v, causal, dtype):
    taken = _spy(monkeypatch)
    _check(LENS, LENS, 4, 2, d, causal, dtype, d_v=d_v, grads=dtype == torch.bfloat16)
    assert taken == [True]


@needs_hopper
@pytest.mark.gpu
def test_switch_change_reaches_a_planned_signature(monkeypatch):
    """A repeated signature (a call plan, replayed) follows a change of
    FLASHATTN_TRITON_HOPPER_VARLEN: with the switch at 0 the call gives the
    portable forward's result bit for bit, not a replay of the Hopper launches
    recorded before (session 63: the switch keys the plans)."""
    api.clear_plans()
    taken = _spy(monkeypatch)
    cu = random_cu_seqlens([100, 200], "cuda")
    q, k, v = (rand((300, 4, 128), torch.bfloat16, torch.device("cuda")) for _ in range(3))
    call = lambda: flash_attn_varlen_func(q, k, v, cu, cu, 200, 200, causal=True)  # noqa: E731
    with torch.no_grad():
        first, again = call(), call()  # the second one replayed
        monkeypatch.setenv(_dispatch.ENV_HOPPER_VARLEN, "0")
        off = call()
        api.clear_plans()
        portable = call()
    assert taken and taken[0] is True
    assert torch.equal(first, again)
    assert not torch.equal(first, portable), "the two tiers agree bit for bit: this case cannot tell them apart"
    assert torch.equal(off, portable), "the switch at 0 replayed the Hopper forward"


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("h_q,h_kv", [(8, 8), (8, 2), (6, 1)], ids=["mha", "gqa", "mqa"])
def test_hopper_varlen_nq_ne_nk(monkeypatch, causal, h_q, h_kv):
    """Bottom-right diagonals per sequence, rows without a key, a sequence
    without keys."""
    taken = _spy(monkeypatch)
    _check(LENS_Q, LENS_K, h_q, h_kv, 128, causal, torch.bfloat16)
    assert taken == [True]


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("window", [(64, 0), (200, -1), (0, 0), (5000, 0)], ids=["causal-64", "left-200",
                                                                                 "diagonal-only", "wider-than-all"])
@pytest.mark.parametrize("d", [64, 128])
def test_hopper_varlen_window(monkeypatch, window, d):
    """A left window around each sequence's own diagonal."""
    taken = _spy(monkeypatch)
    _check(LENS_Q, LENS_K, 4, 2, d, False, torch.bfloat16, window=window)
    _check(LENS, LENS, 4, 2, d, False, torch.bfloat16, window=window, grads=False)
    assert taken == [True, True]


@needs_hopper
@pytest.mark.gpu
def test_hopper_varlen_long_and_many(monkeypatch):
    """A training-like batch: 16k tokens in documents of 64..5000, causal
    GQA at d = 128, forward only (the reference's cost)."""
    taken = _spy(monkeypatch)
    gen = torch.Generator().manual_seed(3)
    lens, total = [], 0
    while total < 16384:
        n = int(torch.randint(64, 5000, (1,), generator=gen))
        n = min(n, 16384 - total)
        lens.append(n)
        total += n
    _check(lens, lens, 8, 2, 128, True, torch.bfloat16, grads=False)
    assert taken == [True]


@needs_hopper
@pytest.mark.gpu
def test_hopper_varlen_declines_variants(monkeypatch):
    """Softcap (a variant) keeps the portable forward: the Hopper packed path
    is not even tried."""
    taken = _spy(monkeypatch)
    device = torch.device("cuda")
    cu = random_cu_seqlens([100, 50], device)
    q = rand((150, 2, 64), torch.bfloat16, device)
    out = flash_attn_varlen_func(q, q, q, cu, cu, 100, 100, causal=True, softcap=5.0)
    ref = varlen_attention_ref(q.double(), q.double(), q.double(), cu, cu, True, softcap=5.0)[0]
    assert taken == []
    assert (out.double() - ref).abs().max() < 0.05


# --------------------------------------------------------------------------- the backward

def test_backward_switch_is_on_by_default(monkeypatch):
    """The packed Hopper backward is on by default (session 56): tried
    unless switched off, never for deterministic calls, chunks, d != dv or
    a right window."""
    monkeypatch.delenv(_dispatch.ENV_HOPPER_VARLEN_BWD, raising=False)
    monkeypatch.delenv("FLASHATTN_TRITON_BACKEND", raising=False)
    monkeypatch.setattr(_dispatch, "_hopper_tier", lambda device: True)
    q = torch.zeros(4, 2, 64)
    assert _dispatch.HOPPER_VARLEN_BWD_DEFAULT == "1"
    assert _dispatch.use_hopper_varlen_backward(q, q, (-1, 0), False)
    assert _dispatch.use_hopper_varlen_backward(q, q, (16, -1), False)
    assert not _dispatch.use_hopper_varlen_backward(q, q, (-1, 0), True)
    assert not _dispatch.use_hopper_varlen_backward(q, q, (-1, 0), False, attention_chunk=32)
    assert not _dispatch.use_hopper_varlen_backward(q, torch.zeros(4, 2, 32), (-1, 0), False)
    assert not _dispatch.use_hopper_varlen_backward(q, q, (4, 4), False)
    monkeypatch.setenv(_dispatch.ENV_HOPPER_VARLEN_BWD, "0")
    assert not _dispatch.use_hopper_varlen_backward(q, q, (-1, 0), False)


def _spy_bwd(monkeypatch) -> list:
    """The packed Hopper backward on; the results of its calls."""
    return _spy_on(monkeypatch, "hopper_backward_varlen", _dispatch.ENV_HOPPER_VARLEN_BWD)


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lens", ["tiles", "nq-ne-nk"])
@pytest.mark.parametrize("h_q,h_kv", [(4, 2), (6, 1)], ids=["gqa", "mqa"])
def test_hopper_varlen_backward_matches_reference(monkeypatch, d, causal, lens, h_q, h_kv):
    """dq, dk, dv from the Hopper backward's packed path within 3x PyTorch's
    error: sequences around the 128-key blocks, an empty one, n_k != n_q (a
    sequence without keys; causal rows that see no key)."""
    _spy(monkeypatch)
    taken = _spy_bwd(monkeypatch)
    lq, lk = (LENS, LENS) if lens == "tiles" else (LENS_Q, LENS_K)
    _check(lq, lk, h_q, h_kv, d, causal, torch.bfloat16)
    assert taken == [True]


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("window", [(64, 0), (200, -1)], ids=["causal-64", "left-200"])
def test_hopper_varlen_backward_window(monkeypatch, window):
    _spy(monkeypatch)
    taken = _spy_bwd(monkeypatch)
    _check(LENS_Q, LENS_K, 4, 2, 128, False, torch.float16, window=window)
    assert taken == [True]


@needs_hopper
@pytest.mark.gpu
def test_hopper_varlen_backward_long(monkeypatch):
    """A training-like batch: 8k tokens in documents of 64..3000, causal GQA
    at d = 128, gradients against the reference."""
    _spy(monkeypatch)
    taken = _spy_bwd(monkeypatch)
    gen = torch.Generator().manual_seed(5)
    lens, total = [], 0
    while total < 8192:
        n = min(int(torch.randint(64, 3000, (1,), generator=gen)), 8192 - total)
        lens.append(n)
        total += n
    _check(lens, lens, 8, 2, 128, True, torch.bfloat16)
    assert taken == [True]


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("window", [(-1, -1), (100, 0)], ids=["nowindow", "left-100"])
def test_hopper_varlen_nan_stays_in_its_sequence(monkeypatch, d, causal, window):
    """The packed Hopper kernels load whole 128-row tiles, so a sequence's
    last query tile and key block also hold the next sequence's first rows;
    with FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE=1 those are zeroed before any
    product reads them (IS_VARLEN 2: fwd.py, bwd.py _zero_rows_*,
    _zero_dq_tail).  NaN in every row of q, k, v and dout of sequences 1 and
    3 must leave out, LSE and the gradients of sequences 0 and 2, whose last
    tiles reach into them, equal to the float64 reference."""
    monkeypatch.setenv(hopper_module("fwd").ENV_VARLEN_ISOLATE, "1")
    taken_fwd = _spy(monkeypatch)
    taken = _spy_bwd(monkeypatch)
    check_nan_isolation([45, 300, 200, 129], [1, 3], 4, 2, d, torch.bfloat16, torch.device("cuda"), causal, window)
    assert taken_fwd == [True] and taken == [True], (taken_fwd, taken)


# --------------------------------------------------------------------------- host code on a fake driver

_FAKE_VARLEN = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda, LAUNCHES
from flashattn_triton.kernels.hopper import bwd as hb, fwd as hf
hf.unsupported_reason = hb.unsupported_reason = lambda *a: ""   # CPU tensors stand for CUDA ones
lens = [5, 300, 0, 129]
cu = torch.tensor([0, 5, 305, 305, 434], dtype=torch.int32)
total = sum(lens)
for d in (64, 128):
    for causal, left in ((True, -1), (False, 50)):
        q = torch.randn(total, 4, d).to(torch.bfloat16)
        k = torch.randn(total, 2, d).to(torch.bfloat16)
        o, lse = torch.empty_like(q), torch.empty(4, total)
        with fake_cuda():
            ok = hf.hopper_forward_varlen(q, k, k, o, lse, cu, cu, 300, 300, 0.125, causal, left)
        assert ok, hf._BROKEN
        launcher, grid, args = LAUNCHES[-1]
        names = hf._attn_fwd_hopper.arg_names
        consts = launcher.src.constants
        window_lo = args[len(args) - (len(names) - names.index("window_lo"))]
        print("fwd", d, causal, grid, consts.get((names.index("IS_VARLEN"),)),
              consts.get((names.index("PERSISTENT"),)), window_lo)
        with fake_cuda():  # a repeat call: the cached plan, the tensors themselves (no views)
            assert hf.hopper_forward_varlen(q, k, k, o, lse, cu, cu, 300, 300, 0.125, causal, left)
        assert LAUNCHES[-1][1] == grid and len(LAUNCHES[-1][2]) == len(args), (LAUNCHES[-1][1], grid)
        views = [t.unsqueeze(0).transpose(1, 2) for t in (q, k, k, q)]
        grads = [torch.zeros_like(t) for t in views[:3]]
        stats = [torch.zeros(1, 4, total), torch.zeros(1, 4, total)]
        with fake_cuda():
            ok = hb.hopper_backward_varlen(views[3], *views[:3], *stats, *grads, cu, cu, 300, 300, 0.125,
                                           causal, left)
        assert ok, hb._BROKEN
        launcher, grid, args = [x for x in LAUNCHES if "IS_VARLEN" in getattr(x[0].src.fn, "arg_names", ())][-1]
        names = hb._attn_bwd_hopper.arg_names
        consts = launcher.src.constants
        print("bwd", d, causal, grid, consts.get((names.index("IS_VARLEN"),)),
              consts.get((names.index("TMA_DKV"),)), consts.get((names.index("GROUP_SPLIT"),)))
# FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE=1: the same calls plan again (the switch keys the plans)
# and build IS_VARLEN = 2, the kernels that zero the rows past each sequence
import os
os.environ["FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE"] = "1"
with fake_cuda():
    assert hf.hopper_forward_varlen(q, k, k, o, lse, cu, cu, 300, 300, 0.125, causal, left), hf._BROKEN
    assert hb.hopper_backward_varlen(views[3], *views[:3], *stats, *grads, cu, cu, 300, 300, 0.125,
                                     causal, left), hb._BROKEN
fwd_launch = [x for x in LAUNCHES if x[0].src.fn is hf._attn_fwd_hopper][-1][0]
bwd_launch = [x for x in LAUNCHES if x[0].src.fn is hb._attn_bwd_hopper][-1][0]
print("isolate", fwd_launch.src.constants.get((hf._attn_fwd_hopper.arg_names.index("IS_VARLEN"),)),
      bwd_launch.src.constants.get((hb._attn_bwd_hopper.arg_names.index("IS_VARLEN"),)))
"""


def test_varlen_launches_on_a_fake_driver():
    """Triton 3.6 without a GPU: both packed Hopper paths compile for sm_90
    through the launchers' real JIT path and launch (tests/fake_cuda.py):
    the forward on the 2-D grid of (sequence, head) x 128-row blocks of the
    longest sequence (heads first when causal), IS_VARLEN 1, PERSISTENT
    off, window_lo = -left, and a repeat call through the cached plan the
    same; the backward on (key blocks of the longest
    sequence, sequences x KV heads) with IS_VARLEN 1, TMA_DKV off, whole
    groups; with FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE=1 both IS_VARLEN 2."""
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    from _utils import fake_launch
    lines = fake_launch(_FAKE_VARLEN, timeout=900).strip().split("\n")
    # 4 sequences x 4 heads = 16; 300 rows: 3 blocks of 128 (d = 64: 2 of 192 with three consumers,
    # 3 of 128 with a window: WINDOW_CONFIGS' two); backward: 3 key blocks of 128, 4 x 2 KV heads
    assert lines == [
        "fwd 64 True (16, 2, 1) 1 False 0", "bwd 64 True (3, 8, 1) 1 False 1",
        "fwd 64 False (3, 16, 1) 1 False -50", "bwd 64 False (3, 8, 1) 1 False 1",
        "fwd 128 True (16, 3, 1) 1 False 0", "bwd 128 True (3, 8, 1) 1 False 1",
        "fwd 128 False (3, 16, 1) 1 False -50", "bwd 128 False (3, 8, 1) 1 False 1",
        "isolate 2 2",
    ], lines
