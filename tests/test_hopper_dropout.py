"""Dropout in the Hopper (Gluon, sm_90) tier: kernels/hopper/dropout.py and
the HAS_DROPOUT paths of kernels/hopper/fwd.py and bwd.py.

On CPU: the Philox helper and the tile assembly that the Gluon kernels call
(plain ``triton.jit`` functions, compiled in Gluon mode there) run in
Triton's interpreter against ``tl.randint4x`` and reference.dropout_keep,
the rule of kernels/score.py, bit for bit; the dispatch (the opt-in
FLASHATTN_TRITON_HOPPER_DROPOUT decides the tier, forward and backward);
with Triton 3.6, the dropout plans compile through the real JIT path on a
fake driver.  On an H200 (FLASHATTN_TRITON_TEST_DEVICE=cuda): the keep mask
the Hopper forward applied equals the portable kernels' (read back through
the output with V = identity), forward and gradients against float64 with
the same mask, and the mixed tiers.
"""

import os

import pytest
import torch
import triton
import triton.language as tl

from flashattn_triton import reference
from flashattn_triton.kernels import hopper
from flashattn_triton.testing import assert_close

from _utils import fake_launch, forward_tier_calls, hopper_gpu_reason, hopper_module

hd = hopper_module("dropout", module_level=True)

needs_hopper = pytest.mark.skipif(bool(hopper_gpu_reason()), reason=hopper_gpu_reason() or "-")
OPT_IN = "FLASHATTN_TRITON_HOPPER_DROPOUT"


# --------------------------------------------------------------------------- everywhere (interpreter)

@triton.jit
def _philox_kernel(SEED, OFFS, OUT, N: tl.constexpr, ROUNDS: tl.constexpr):
    i = tl.arange(0, N)
    offs = tl.load(OFFS + i)
    seed = tl.load(SEED)
    a0, a1, a2, a3 = hd.randint4x(seed, offs)
    b0, b1, b2, b3 = tl.randint4x(seed, offs, ROUNDS)
    tl.store(OUT + i, a0.to(tl.int64))
    tl.store(OUT + N + i, a1.to(tl.int64))
    tl.store(OUT + 2 * N + i, a2.to(tl.int64))
    tl.store(OUT + 3 * N + i, a3.to(tl.int64))
    tl.store(OUT + 4 * N + i, b0.to(tl.int64))
    tl.store(OUT + 5 * N + i, b1.to(tl.int64))
    tl.store(OUT + 6 * N + i, b2.to(tl.int64))
    tl.store(OUT + 7 * N + i, b3.to(tl.int64))


@pytest.mark.parametrize("seed", [0, 1, 123456789, 2 ** 32 + 7, 2 ** 62 + 2 ** 40 + 5])
def test_philox_helper_matches_randint4x(seed, device):
    """hd.philox4x32 (with hd.philox_keys and hd.philox_counter_words, the
    operations the Gluon kernels compile) gives tl.randint4x's four words,
    and reference.philox_randint4x's, for int64 counters below and above
    2^32 and seeds with a high word; with the rounds every dropout draw
    uses (reference.DROPOUT_ROUNDS: 10, or FLASHATTN_TRITON_DROPOUT_ROUNDS,
    which test_dropout_rounds_switch sets)."""
    n = 64
    offs = torch.cat([torch.arange(32, dtype=torch.int64) * 1_000_003,
                      (torch.arange(32, dtype=torch.int64) << 33) + 2 ** 32 - 16 + torch.arange(32)]).to(device)
    seed_t = torch.tensor([seed], dtype=torch.int64, device=device)
    out = torch.zeros(8 * n, dtype=torch.int64, device=device)
    _philox_kernel[(1,)](seed_t, offs, out, N=n, ROUNDS=reference.DROPOUT_ROUNDS)
    ours, triton_words = out.view(8, n)[:4], out.view(8, n)[4:]
    assert torch.equal(ours, triton_words)
    ref = torch.stack(reference.philox_randint4x(seed_t, offs, reference.DROPOUT_ROUNDS))
    assert torch.equal(ours, ref)


@triton.jit
def _tile_keep_kernel(SEED, OUT, rng_base, row0, col0, rng_cols, thresh,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KEYS_FIRST: tl.constexpr,
                      BITS: tl.constexpr):
    k0, k1 = hd.philox_keys(tl.load(SEED))
    if KEYS_FIRST:
        if BITS:  # the shared calls' form (tile_keep_keys_first_shared without its layouts)
            w0, w1, w2, w3 = hd.tile_words_keys_first(
                k0, k1, rng_base, row0, col0, rng_cols, tl.arange(0, BLOCK_N // 16), tl.arange(0, 4),
                tl.arange(0, BLOCK_M // 16), tl.arange(0, 8))
            bits = hd.call_keep_bits(w0, w1, w2, w3, thresh.to(tl.uint32) << 16)
            if BITS == 2:  # the flags left in their bits (the RNG warps' test, DROPOUT_RNG_WARPS = 4)
                keep = hd.kept_keys_first_from_bits(bits, tl.arange(0, 2), BLOCK_N, BLOCK_M) != 0
            else:
                keep = hd.keep_keys_first_from_bits(bits, tl.arange(0, 2), BLOCK_N, BLOCK_M) == 1
        else:
            halves = hd.tile_halves_keys_first_from(
                k0, k1, rng_base, row0, col0, rng_cols, tl.arange(0, BLOCK_N // 16), tl.arange(0, 4),
                tl.arange(0, BLOCK_M // 16), tl.arange(0, 8), tl.arange(0, 2), BLOCK_N, BLOCK_M)
            keep = halves >= (thresh.to(tl.uint32) << 16)
        idx = tl.arange(0, BLOCK_N)[:, None] * BLOCK_M + tl.arange(0, BLOCK_M)[None, :]
    else:
        w0, w1, w2, w3 = hd.tile_words_rows_first(k0, k1, rng_base, row0, col0, rng_cols, tl.arange(0, BLOCK_M // 16),
                                                  tl.arange(0, 8), tl.arange(0, BLOCK_N // 16), tl.arange(0, 4))
        keep = hd.halves_rows_first(w0, w1, w2, w3, BLOCK_M, BLOCK_N) >= (thresh.to(tl.uint32) << 16)
        idx = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(OUT + idx, keep.to(tl.int8))


@pytest.mark.parametrize("keys_first,bits", [(False, 0), (True, 0), (True, 1), (True, 2)],
                         ids=["rows-first", "keys-first", "keys-first-bits", "keys-first-bits-in-place"])
@pytest.mark.parametrize("tile", [(64, 128), (64, 64), (64, 32)], ids=lambda t: f"{t[0]}x{t[1]}")
def test_tile_keep_matches_the_rule(keys_first, bits, tile, device):
    """The tile assembly the Gluon kernels call (hd.tile_words_rows_first /
    hd.halves_rows_first: forward and SPLIT_D backward; hd.
    tile_halves_keys_first_from: the backward's keys x queries tiles; hd.
    call_keep_bits / keep_keys_first_from_bits: those tiles with shared
    calls; kept_keys_first_from_bits: the flags tested in their bits), with
    plain aranges for its layouts, draws reference.dropout_keep's mask (the
    portable kernels' rule) for a tile of a (batch entry, head) that is not
    the first, with a philox_offset, at p = 0.3 and a threshold near 2^16."""
    bm, bn = tile  # rows x keys (stored transposed when keys first)
    batch, heads, n_q, n_k, offset = 2, 3, 300, 1000, 12345
    b, h, row0, col0 = 1, 2, 208, 480
    seed = torch.tensor([2 ** 40 + 99], dtype=torch.int64, device=device)
    for p in (0.3, 0.999):
        thresh = reference.dropout_threshold(p)
        rng_base = offset + (b * heads + h) * n_q * n_k
        shape = (bn, bm) if keys_first else (bm, bn)
        out = torch.zeros(shape, dtype=torch.int8, device=device)
        _tile_keep_kernel[(1,)](seed, out, rng_base, row0, col0, n_k, thresh,
                                BLOCK_M=bm, BLOCK_N=bn, KEYS_FIRST=keys_first, BITS=bits)
        want = reference.dropout_keep(seed, p, batch, heads, range(row0, row0 + bm), col0, col0 + bn, n_q, n_k,
                                      offset=offset)[b, h]
        got = out.bool().t() if keys_first else out.bool()
        assert torch.equal(got, want), (p, (got != want).sum().item())


def _dropout_call(monkeypatch, opt_in, window=(-1, 0), softcap=0.0, n_q=300, n_k=500):
    """_fwd_into of a dense dropout call with both tiers stubbed: which one
    ran, as ("portable", p) or ("hopper", the positional arguments after
    the scale...), and the call's seed."""
    seed = torch.tensor([5], dtype=torch.int64)
    calls = forward_tier_calls(monkeypatch, OPT_IN, opt_in, portable=lambda mods: mods.dropout_p, window=window,
                               softcap=softcap, dropout_p=0.25, seed=seed, philox_offset=77, n_q=n_q, n_k=n_k)
    return [("hopper",) + c[1] if c[0] == "hopper" else c for c in calls], seed


@pytest.mark.parametrize("default", ["0", "1"])
@pytest.mark.parametrize("window", [(-1, 0), (-1, -1), (100, 0)], ids=["causal", "full", "window"])
def test_dispatch_takes_dropout_only_when_opted_in(monkeypatch, window, default):
    """The forward: dropout alone, with no mask or a causal one, takes the
    Hopper tier with FLASHATTN_TRITON_HOPPER_DROPOUT=1 (or, unset, when
    _dispatch.HOPPER_DROPOUT_DEFAULT is "1"; "0" forces the portable
    kernels), which gets (seed, p, philox_offset) after the window
    argument; with a window (even with FLASHATTN_TRITON_HOPPER_WINDOW=1) or
    another variant the portable kernels run.  (The rule by query length,
    HOPPER_DROPOUT_FWD_MIN_N, is off here: test_forward_rule_by_length.)"""
    from flashattn_triton import _dispatch
    monkeypatch.setattr(_dispatch, "HOPPER_DROPOUT_DEFAULT", default)
    monkeypatch.setattr(_dispatch, "HOPPER_DROPOUT_FWD_MIN_N", None)
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_WINDOW", "1")
    for opt_in in (None, "0", "1"):
        calls, seed = _dropout_call(monkeypatch, opt_in, window)
        if (opt_in or default) == "1" and window[0] < 0:
            assert len(calls) == 1 and calls[0][0] == "hopper", calls
            shift, win, dropout = calls[0][1:]
            assert shift == (200 if window[1] == 0 else None) and win is None
            assert dropout[0] is seed and dropout[1:] == (0.25, 77), dropout
        else:
            assert calls == [("portable", 0.25)], (opt_in, calls)
    calls, _ = _dropout_call(monkeypatch, "1", window, softcap=30.0)
    assert calls == [("portable", 0.25)], "dropout with another variant stays portable"


@pytest.mark.parametrize("bwd_default", ["0", "1"])
@pytest.mark.parametrize("default", ["0", "1"])
def test_dispatch_rule(monkeypatch, default, bwd_default):
    """hopper_takes_variants: FLASHATTN_TRITON_HOPPER_DROPOUT "1" / "0"
    force dropout alone onto / off the Hopper forward and backward; unset,
    the module's HOPPER_DROPOUT_DEFAULT decides for the forward and
    HOPPER_DROPOUT_BWD_DEFAULT for the backward; other variants, windows and
    right bounds never."""
    from flashattn_triton import _dispatch
    monkeypatch.setattr(_dispatch, "HOPPER_DROPOUT_DEFAULT", default)
    monkeypatch.setattr(_dispatch, "HOPPER_DROPOUT_BWD_DEFAULT", bwd_default)
    env = os.environ.pop(OPT_IN, None)
    try:
        assert _dispatch.hopper_takes_variants(0.0, None, None, None, 0.1, (-1, 0)) == (default == "1"), "unset"
        assert (_dispatch.hopper_takes_variants(0.0, None, None, None, 0.1, (-1, 0), backward=True)
                == (bwd_default == "1")), "unset, backward"
        assert not _dispatch.hopper_takes_variants(0.0, None, None, None, 0.1, (10, 0), backward=True), "window"
        assert not _dispatch.hopper_takes_variants(0.0, None, None, None, 0.1, (10, 0)), "window (unset)"
        assert not _dispatch.hopper_takes_variants(1.0, None, None, None, 0.1, (-1, 0)), "softcap (unset)"
        os.environ[OPT_IN] = "0"
        assert not _dispatch.hopper_takes_variants(0.0, None, None, None, 0.1, (-1, 0)), "forced off"
        assert not _dispatch.hopper_takes_variants(0.0, None, None, None, 0.1, (-1, 0), backward=True), "forced off"
        assert not _dispatch.hopper_takes_variants(0.0, None, None, None, 0.1, (-1, -1)), "forced off"
        os.environ[OPT_IN] = "1"
        assert _dispatch.hopper_takes_variants(0.0, None, None, None, 0.1, (-1, 0))
        assert _dispatch.hopper_takes_variants(0.0, None, None, None, 0.1, (-1, 0), backward=True)
        assert _dispatch.hopper_takes_variants(0.0, None, None, None, 0.1, (-1, -1))
        assert not _dispatch.hopper_takes_variants(0.0, None, None, None, 0.0, (-1, 0)), "no dropout: not asked"
        assert not _dispatch.hopper_takes_variants(0.0, None, None, None, 0.1, (10, 0)), "window"
        assert not _dispatch.hopper_takes_variants(0.0, None, None, None, 0.1, (-1, 5)), "right bound"
        assert not _dispatch.hopper_takes_variants(1.0, None, None, None, 0.1, (-1, 0)), "softcap"
        one = torch.ones(2)
        assert not _dispatch.hopper_takes_variants(0.0, one, None, None, 0.1, (-1, 0)), "ALiBi"
        assert not _dispatch.hopper_takes_variants(0.0, None, one, None, 0.1, (-1, 0)), "sinks"
        assert not _dispatch.hopper_takes_variants(0.0, None, None, one, 0.1, (-1, 0)), "mask"
    finally:
        os.environ.pop(OPT_IN, None)
        if env is not None:
            os.environ[OPT_IN] = env


def test_forward_rule_by_length(monkeypatch):
    """HOPPER_DROPOUT_FWD_MIN_N ({(head dim, causal): least N_Q}): with the
    variable unset the Hopper forward takes dropout from that query length,
    per head dim and causal flag (no entry: HOPPER_DROPOUT_DEFAULT; GQA
    calls: a (head dim, causal, "gqa") entry first); the
    variable overrides it both ways, the backward ignores it, and no length
    (n_q None) never turns it on."""
    from flashattn_triton import _dispatch
    monkeypatch.setattr(_dispatch, "HOPPER_DROPOUT_DEFAULT", "0")
    monkeypatch.setattr(_dispatch, "HOPPER_DROPOUT_BWD_DEFAULT", "0")
    monkeypatch.setattr(_dispatch, "HOPPER_DROPOUT_FWD_MIN_N", {(128, True): 4096, (128, False): 0, (64, False): 0})
    monkeypatch.delenv(OPT_IN, raising=False)

    def takes(window, n_q, d=128, **kw):
        return _dispatch.hopper_takes_variants(0.0, None, None, None, 0.1, window, n_q=n_q, head_dim=d, **kw)
    assert not takes((-1, 0), 2048) and takes((-1, 0), 4096) and takes((-1, 0), 9000), "causal from 4096"
    assert takes((-1, -1), 1) and takes((-1, -1), 2048, d=64), "not causal: from 0"
    assert not takes((-1, 0), 8192, d=64) and not takes((-1, -1), 8192, d=256), "no entry: the default"
    assert not takes((-1, 0), None) and not takes((-1, 0), 8192, backward=True), "no length; the backward"
    assert not takes((10, 0), 8192), "a window bound: never"
    assert not _dispatch.hopper_takes_variants(1.0, None, None, None, 0.1, (-1, 0), n_q=8192, head_dim=128)
    # a GQA entry serves GQA calls (None: no length); without one they take the (d, causal) entry
    assert takes((-1, 0), 4096, gqa=True) and not takes((-1, 0), 2048, gqa=True), "no GQA key: (d, causal)"
    monkeypatch.setitem(_dispatch.HOPPER_DROPOUT_FWD_MIN_N, (128, True, "gqa"), None)
    assert not takes((-1, 0), 8192, gqa=True) and takes((-1, 0), 8192), "GQA key None: never by length"
    monkeypatch.setitem(_dispatch.HOPPER_DROPOUT_FWD_MIN_N, (128, True, "gqa"), 3072)
    assert takes((-1, 0), 3072, gqa=True) and not takes((-1, 0), 2048, gqa=True), "GQA from 3072"
    assert not takes((-1, 0), 3072) and takes((-1, 0), 4096), "MHA still from 4096"
    assert takes((-1, -1), 1, gqa=True), "not causal: the (d, False) entry"
    monkeypatch.setenv(OPT_IN, "0")
    assert not takes((-1, 0), 8192), "forced off"
    assert not takes((-1, 0), 8192, gqa=True), "forced off"
    monkeypatch.setenv(OPT_IN, "1")
    assert takes((-1, 0), 16, d=64), "forced on"


def test_forward_rule_reads_the_gqa_key(monkeypatch):
    """ops._fwd_into tells the length rule whether the call is GQA: with only
    a (64, True, "gqa") entry, a causal GQA dropout call takes the Hopper
    forward and the same call with as many KV heads as query heads does not."""
    from flashattn_triton import _dispatch
    monkeypatch.setattr(_dispatch, "HOPPER_DROPOUT_DEFAULT", "0")
    monkeypatch.setattr(_dispatch, "HOPPER_DROPOUT_FWD_MIN_N", {(64, True, "gqa"): 256})
    seed = torch.tensor([5], dtype=torch.int64)
    for h_kv, tier in ((1, "hopper"), (2, "portable")):
        calls = forward_tier_calls(monkeypatch, OPT_IN, None, portable=lambda mods: mods.dropout_p,
                                   window=(-1, 0), dropout_p=0.25, seed=seed, h_kv=h_kv)
        assert [c[0] for c in calls] == [tier], (h_kv, calls)


@pytest.mark.parametrize("default", ["0", "1"])
def test_info_names_the_dropout_switch(capsys, monkeypatch, default):
    """`flashattn-triton info --variant dropout --arch sm90`: with the switch
    off (unset and the default "0", or "0") the forward line names
    FLASHATTN_TRITON_HOPPER_DROPOUT; with it on, the Hopper forward with its
    dropout build where the tier is available here (Triton 3.6), else the
    unavailability; the Hopper backward with its dropout build whenever the
    backward's switch is on (unset: HOPPER_DROPOUT_BWD_DEFAULT "1"), also
    after the portable forward; dropout with another variant stays portable
    either way.  (The length rule, HOPPER_DROPOUT_FWD_MIN_N, is off here:
    test_forward_rule_by_length.)"""
    from flashattn_triton import _dispatch, cli
    monkeypatch.setattr(_dispatch, "HOPPER_DROPOUT_DEFAULT", default)
    monkeypatch.setattr(_dispatch, "HOPPER_DROPOUT_FWD_MIN_N", None)
    monkeypatch.setattr(_dispatch, "HOPPER_DROPOUT_BWD_DEFAULT", "1")
    monkeypatch.delenv("FLASHATTN_TRITON_BACKEND", raising=False)
    argv = ["info", "--shape", "2,4096,16,128", "--kv-heads", "4", "--causal", "--variant", "dropout",
            "--arch", "sm90"]
    for opt_in in (None, "0", "1"):
        if opt_in is None:
            monkeypatch.delenv(OPT_IN, raising=False)
        else:
            monkeypatch.setenv(OPT_IN, opt_in)
        assert cli.main(argv) == 0
        out = capsys.readouterr().out
        bwd_line = "backward: Hopper tier, Gluon kernel" in out and "; dropout (HAS_DROPOUT)" in out
        if (opt_in or default) != "1":
            assert "Hopper tier not used: dropout: the portable forward (FLASHATTN_TRITON_HOPPER_DROPOUT=1" in out, out
            assert bwd_line == (opt_in != "0" and hopper.AVAILABLE), out
        elif hopper.AVAILABLE:
            assert "forward : Hopper tier" in out and "dropout (HAS_DROPOUT)" in out, out
            assert "backward: Hopper tier, Gluon kernel" in out and "; dropout (HAS_DROPOUT)" in out, out
        else:
            assert "Hopper tier not used: not available here" in out, out
        assert cli.main(argv + ["--variant", "softcap"]) == 0
        assert "variants run on the portable forward" in capsys.readouterr().out


@pytest.mark.parametrize("default", ["0", "1"])
@pytest.mark.parametrize("causal", [False, True])
def test_backward_dispatch_takes_dropout_only_when_opted_in(monkeypatch, causal, default, device):
    """The backward: attention_backward is asked to try the Hopper kernel
    (hopper=True) for a dropout call with FLASHATTN_TRITON_HOPPER_DROPOUT=1,
    or unset when HOPPER_DROPOUT_BWD_DEFAULT is "1" (whatever the forward's
    HOPPER_DROPOUT_DEFAULT), and kernels/bwd.py hands it (seed, p,
    philox_offset); "0" or a softcap with dropout never.  Learnable sinks
    with the dropout change nothing (the kernels read them only through
    the LSE)."""
    from flashattn_triton import _dispatch, ops
    from flashattn_triton.kernels import bwd as kbwd
    monkeypatch.setattr(_dispatch, "_hopper_tier", lambda device: True)
    monkeypatch.setattr(_dispatch, "HOPPER_DROPOUT_BWD_DEFAULT", default)
    monkeypatch.setattr(_dispatch, "HOPPER_DROPOUT_DEFAULT", "0")
    monkeypatch.setattr(ops, "use_triton", lambda t: True)
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper")  # every length
    monkeypatch.delenv("FLASHATTN_TRITON_HOPPER_BWD", raising=False)
    if ops._kernels.forward is None:
        ops._kernels.load()
    seen = []
    monkeypatch.setattr(ops._kernels, "backward", lambda *a, **kw: seen.append(kw["hopper"]) or kw["delta"])
    q = torch.randn(1, 64, 2, 64, dtype=torch.bfloat16, device=device)
    k = torch.randn(1, 64, 2, 64, dtype=torch.bfloat16, device=device)
    o, lse = torch.randn_like(q), torch.zeros(1, 2, 64, device=device)
    seed = torch.tensor([5], dtype=torch.int64, device=device)
    for opt_in, softcap, want in ((None, 0.0, default == "1"), ("0", 0.0, False), ("1", 0.0, True),
                                  ("1", 5.0, False), (None, 5.0, False)):
        if opt_in is None:
            monkeypatch.delenv(OPT_IN, raising=False)
        else:
            monkeypatch.setenv(OPT_IN, opt_in)
        for sinks in (None, torch.randn(2, device=device)):
            seen.clear()
            ops._attention_bwd_impl(o, q, k, k, o, lse, None, None, None, 64, 64, 0.125, -1, 0 if causal else -1,
                                    True, softcap, None, sinks, None, 0.25, seed)
            assert seen == [want], (opt_in, softcap, sinks is not None, seen)
    # kernels/bwd.py: what the Hopper backward receives for dropout alone
    got = []
    monkeypatch.setattr(hopper, "hopper_attention_backward",
                        lambda *a, **kw: got.append(kw.get("dropout")) or True)
    from flashattn_triton.kernels.score import KernelMods
    mods = KernelMods(dropout_p=0.25, seed=seed, philox_offset=9)
    qh, kh = q.transpose(1, 2), k.transpose(1, 2)
    dq, dk, dv = (torch.empty_like(t) for t in (qh, kh, kh))
    kbwd.attention_backward(qh, qh, kh, kh, qh, lse, dq, dk, dv, 0.125, 0, (None, 0 if causal else None),
                            mods=mods, hopper=True)
    assert len(got) == 1 and got[0][0] is seed and got[0][1:] == (0.25, 9), got
    assert kbwd._dropout_only(mods) and not kbwd._dropout_only(KernelMods(softcap=2.0, dropout_p=0.25, seed=seed))


_FAKE_LAUNCH_DROPOUT = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from fake_cuda import fake_cuda, LAUNCHES
from flashattn_triton.kernels.hopper import fwd as hf, bwd as hb
hf.unsupported_reason = lambda *a: ""   # CPU tensors stand for CUDA ones
hb.unsupported_reason = lambda *a: ""
hb.HOPPER_BWD_GROUP_SPLIT_DEFAULT = {False: False, True: False}  # S = 1 (the split: test_group_split_launch_on_a_fake_driver)
hf.sm_count = lambda device: 132
seed = torch.tensor([7], dtype=torch.int64)
fnames, bnames = hf._attn_fwd_hopper.arg_names, hb._attn_bwd_hopper.arg_names
for d in (64, 128, 256):
    q = torch.randn(2, 4, 1000, d).to(torch.bfloat16)
    k = torch.randn(2, 2, 1200, d).to(torch.bfloat16)
    o, lse = torch.empty_like(q), torch.empty(2, 4, 1000)
    with fake_cuda():
        ok = hf.hopper_attention_forward(q, k, k, o, lse, 0.125, 200, dropout=(seed, 0.1, 5))
    assert ok, hf._BROKEN
    launch = LAUNCHES[-1]
    c = launch[0].src.constants
    print("fwd", d, c.get((fnames.index("HAS_DROPOUT"),)), c.get((fnames.index("NUM_CONSUMERS"),)))
    grads = [torch.zeros_like(t) for t in (q, k, k)]
    with fake_cuda():
        ok = hb.hopper_attention_backward(q, q, k, k, lse, lse, *grads, 0.125, 200, dropout=(seed, 0.1, 5))
    assert ok, hb._BROKEN
    c = LAUNCHES[-1][0].src.constants
    print("bwd", d, c.get((bnames.index("HAS_DROPOUT"),)), c.get((bnames.index("SPLIT_D"),)),
          c.get((bnames.index("DROPOUT_SHARED_CALLS"),)), LAUNCHES[-1][1])
"""


def test_dropout_launch_on_a_fake_driver():
    """Triton 3.6 without a GPU: the dropout plans (HAS_DROPOUT) of the
    forward and backward compile for sm_90 at d = 64, 128 and 256 through the
    real JIT path, with DROPOUT_CONFIGS (forward: two consumers at d = 64;
    backward: the keys x queries path with shared Philox calls, 128-key
    blocks, at d = 64 / 128, SPLIT_D with 64-key blocks at d = 256)."""
    if not hopper.AVAILABLE:
        pytest.skip(f"Hopper tier unavailable: {hopper.REASON}")
    lines = fake_launch(_FAKE_LAUNCH_DROPOUT, timeout=1500).strip().split("\n")
    assert lines == ["fwd 64 True 2", "bwd 64 True False True (10, 4, 1)",
                     "fwd 128 True 2", "bwd 128 True False True (10, 4, 1)",
                     "fwd 256 True 2", "bwd 256 True True False (19, 4, 1)"], lines


# --------------------------------------------------------------------------- GPU

def _flash(b, n, h, d, dtype, pad=0):
    """(B, N, H, d) tensors (flash layout); with pad, the rows past N of the
    storage hold NaN (a read past N would show)."""
    t = torch.full((b, n + pad, h, d), float("nan"), device="cuda", dtype=dtype)
    t[:, :n] = torch.randn(b, n, h, d, device="cuda", dtype=torch.float32).to(dtype)
    return t[:, :n]


def _hopper_forward_spy(monkeypatch):
    """Count the Hopper forward's dropout launches that ran (True) or declined.
    Call plans off: a replayed plan launches without calling the spied function."""
    from flashattn_triton import ops
    if ops._kernels.forward is None:
        ops._kernels.load()
    monkeypatch.setattr(ops, "PLANS_ENABLED", False)
    real = ops._kernels.hopper_forward
    calls = []

    def spy(*a):
        took = real(*a)
        if len(a) > 8:
            calls.append(took)
        return took
    monkeypatch.setattr(ops._kernels, "hopper_forward", spy)
    return calls


def _forward_declines() -> str:
    """Why the Hopper forward declined so far in this process: the reasons
    cached per signature and the build errors (for assertion messages)."""
    from flashattn_triton.kernels.hopper import fwd as hfwd
    reasons = sorted({p for p in hfwd._PLANS.values() if isinstance(p, str)})
    return f"forward decline reasons {reasons}, build errors {list(hfwd._BROKEN.values())}"


def _hopper_backward_spy(monkeypatch):
    """Count the Hopper backward's dropout launches that ran (True) or declined
    (call plans off, as for the forward's spy)."""
    from flashattn_triton import ops
    from flashattn_triton.kernels.hopper import bwd as hbwd
    monkeypatch.setattr(ops, "PLANS_ENABLED", False)
    real = hbwd.hopper_attention_backward
    calls = []

    def spy(*a, **kw):
        took = real(*a, **kw)
        if kw.get("dropout") is not None:
            calls.append(took)
        return took
    monkeypatch.setattr(hbwd, "hopper_attention_backward", spy)
    monkeypatch.setattr(hopper, "hopper_attention_backward", spy)
    return calls


DROPOUT_CASES = [
    # b, hq, hkv, nq, nk, causal, pad
    (2, 4, 4, 1000, 1000, False, 0),       # ragged N, batch > 1
    (2, 4, 4, 1000, 1000, True, 0),
    (2, 8, 2, 333, 1201, True, 40),        # GQA, Nq < Nk, NaN past N
    (1, 4, 1, 700, 130, True, 0),          # MQA, Nq > Nk: rows that see no key
    (2, 6, 3, 515, 515, False, 40),
    (1, 2, 2, 77, 1000, False, 0),
]


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128, 256], ids=lambda d: f"d{d}")
@pytest.mark.parametrize("case", DROPOUT_CASES, ids=lambda c: "-".join(map(str, c)))
def test_dropout_matches_reference(monkeypatch, dtype, d, case):
    """flash_attn_func with dropout_p = 0.17 on the Hopper tier (opt-in),
    forward and backward: out, LSE and dq, dk, dv against float64 autograd
    through the reference with the keep mask of testing.dropout_mask (the
    portable kernels' rule, reference.dropout_keep), NaN-poisoned storage
    past N, GQA / MQA, Nq != Nk."""
    from flashattn_triton import flash_attn_func
    from flashattn_triton.reference import flash_attention_ref
    from flashattn_triton.testing import dropout_mask
    b, hq, hkv, nq, nk, causal, pad = case
    monkeypatch.setenv(OPT_IN, "1")
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper")  # the backward at every length
    monkeypatch.setenv("FLASHATTN_TRITON_PREFETCH_BWD", "0")
    fwd_calls, bwd_calls = _hopper_forward_spy(monkeypatch), _hopper_backward_spy(monkeypatch)
    p, torch_seed = 0.17, 1234 + d
    q, do = _flash(b, nq, hq, d, dtype, pad), _flash(b, nq, hq, d, dtype, pad)
    k, v = _flash(b, nk, hkv, d, dtype, pad), _flash(b, nk, hkv, d, dtype, pad)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]  # the views: NaN past N in their storage
    torch.manual_seed(torch_seed)
    out, lse = flash_attn_func(*leaves, dropout_p=p, causal=causal, return_lse=True)
    grads = torch.autograd.grad(out, leaves, do)
    assert fwd_calls == [True] and bwd_calls == [True], (fwd_calls, bwd_calls, _forward_declines())
    mask = dropout_mask(torch_seed, p, b, hq, nq, nk, "cuda")
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o_ref, lse_ref = flash_attention_ref(*ref_leaves, causal, dropout_mask=mask, dropout_p=p)
    ref = torch.autograd.grad(o_ref, ref_leaves, do.double())
    low_leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    o_low, _ = flash_attention_ref(*low_leaves, causal, dropout_mask=mask, dropout_p=p, dtype=dtype)
    low = torch.autograd.grad(o_low, low_leaves, do)
    assert_close("out", out, o_ref, baseline=o_low)
    finite = torch.isfinite(lse_ref)
    assert torch.equal(torch.isfinite(lse), finite)
    assert (lse[finite] - lse_ref[finite]).abs().max().item() <= 1e-3 * max(1.0, lse_ref[finite].abs().max().item())
    for name, g, r, lo in zip(("dq", "dk", "dv"), grads, ref, low):
        assert torch.isfinite(g).all(), name
        assert_close(name, g, r, baseline=lo, factor=3.0, dtype=dtype)


@needs_hopper
@pytest.mark.parametrize("d", [64, 128, 256], ids=lambda d: f"d{d}")
@pytest.mark.parametrize("causal", [False, True])
def test_dropout_keep_mask_is_the_portable_one(monkeypatch, d, causal):
    """The keep mask the Hopper forward applied, read back through its
    output, is testing.dropout_mask's (the portable kernels' rule) bit for
    bit, as is the portable forward's: with q = k = 0 every visible key of
    row i has P = 1 / n_i, and V = one-hot columns for keys [s, s + d) gives
    O[i, c] = r Z[i, s + c] / n_i, so Z = round(O n_i / r).  Two batch
    entries, GQA, Nq > Nk (rows with no key when causal), ragged lengths."""
    from flashattn_triton import flash_attn_func
    from flashattn_triton.testing import dropout_mask
    monkeypatch.setenv(OPT_IN, "1")
    fwd_calls = _hopper_forward_spy(monkeypatch)
    b, hq, hkv, nq, nk, p = 2, 4, 2, 200, 160, 0.3
    q = torch.zeros(b, nq, hq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.zeros(b, nk, hkv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.zeros(b, nk, hkv, d, device="cuda", dtype=torch.bfloat16)
    mask = dropout_mask(99, p, b, hq, nq, nk, "cuda")
    r = reference.dropout_scale(p)
    rows = torch.arange(nq, device="cuda")
    if causal:  # bottom-right: row i sees keys j <= i + nk - nq
        count = (rows + nk - nq + 1).clamp(min=0, max=nk)
    else:
        count = torch.full((nq,), nk, device="cuda")
    for start in range(0, nk, d):
        idx = torch.arange(start, min(start + d, nk), device="cuda")
        v.zero_()
        v[:, idx, :, idx - start] = 1.0
        visible = idx[None, :] <= rows[:, None] + (nk - nq) if causal else torch.ones(
            nq, len(idx), dtype=torch.bool, device="cuda")
        want = (mask[..., idx] & visible).float()
        for backend in ("hopper", "portable"):
            monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", backend)
            fwd_calls.clear()
            torch.manual_seed(99)
            out = flash_attn_func(q, k, v, dropout_p=p, causal=causal).float()
            assert fwd_calls == ([True] if backend == "hopper" else []), (backend, fwd_calls, _forward_declines())
            got = out[..., :len(idx)].permute(0, 2, 1, 3) * count[:, None].float() / r
            assert torch.equal(got.round(), want), (backend, start, (got.round() != want).sum().item())
            assert (got - want).abs().max().item() < 0.05, backend


@needs_hopper
@pytest.mark.parametrize("shared", [False, True], ids=["own-calls", "shared-calls"])
@pytest.mark.parametrize("d", [64, 128], ids=lambda d: f"d{d}")
def test_keys_first_backward_path(monkeypatch, d, shared):
    """The backward's keys x queries path with dropout (SPLIT_D=False forces
    it; DROPOUT_CONFIGS takes it at d = 64 / 128 with shared calls): the mask of
    tile_halves_keys_first, each lane pair making its calls twice or, with
    DROPOUT_SHARED_CALLS, once and handing over packed keep flags; gradients
    against float64 with the same mask."""
    from flashattn_triton.reference import flash_attention_ref
    from flashattn_triton.kernels.hopper import bwd as hbwd
    from flashattn_triton.kernels.hopper import fwd as hfwd
    b, hq, hkv, nq, nk, p = 2, 4, 2, 333, 777, 0.2
    dtype = torch.bfloat16
    q, do = _flash(b, nq, hq, d, dtype), _flash(b, nq, hq, d, dtype)
    k, v = _flash(b, nk, hkv, d, dtype), _flash(b, nk, hkv, d, dtype)
    seed = torch.tensor([4242], dtype=torch.int64, device="cuda")
    mask = reference.dropout_keep_mask(seed, p, b, hq, nq, nk)
    qh, kh, vh, doh = (t.transpose(1, 2) for t in (q, k, v, do))
    o = torch.empty_like(qh)
    lse = torch.empty(b, hq, nq, device="cuda")
    assert hfwd.hopper_attention_forward(qh, kh, vh, o, lse, d ** -0.5, nk - nq, dropout=(seed, p, 0))
    delta = (o.float() * doh.float()).sum(-1).contiguous()
    dq, dk, dv = (torch.full_like(t, float("nan")) for t in (qh, kh, vh))
    assert hbwd.hopper_attention_backward(doh, qh, kh, vh, lse, delta, dq, dk, dv, d ** -0.5, nk - nq,
                                          dropout=(seed, p, 0), SPLIT_D=False, BLOCK_N=128, DQ_CHUNK=0,
                                          NUM_STAGES=2, BLOCK_M=64, DROPOUT_SHARED_CALLS=shared)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o_ref, _ = flash_attention_ref(*leaves, True, dropout_mask=mask, dropout_p=p)
    ref = torch.autograd.grad(o_ref, leaves, do.double())
    low_leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    o_low, _ = flash_attention_ref(*low_leaves, True, dropout_mask=mask, dropout_p=p, dtype=dtype)
    low = torch.autograd.grad(o_low, low_leaves, do)
    assert_close("out", o.transpose(1, 2), o_ref, baseline=o_low)
    for name, g, r, lo in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, low):
        assert_close(name, g.transpose(1, 2), r, baseline=lo, factor=3.0, dtype=dtype)


@needs_hopper
@pytest.mark.parametrize("fwd_tier,bwd_opt_in", [("hopper", "0"), ("portable", "1")],
                         ids=["hopper-fwd-portable-bwd", "portable-fwd-hopper-bwd"])
def test_mixed_tiers_agree(monkeypatch, fwd_tier, bwd_opt_in):
    """A forward on one tier and the backward on the other give the same
    gradients as both on one tier (the same keep mask): the Hopper forward
    with the portable backward (FLASHATTN_TRITON_HOPPER_BWD=0), and the
    portable forward (FLASHATTN_TRITON_BACKEND=portable for it) with the
    Hopper backward."""
    from flashattn_triton import flash_attn_func
    from flashattn_triton.reference import flash_attention_ref
    from flashattn_triton.testing import dropout_mask
    b, hq, hkv, nq, nk, d, p = 2, 8, 2, 1000, 1000, 128, 0.1
    dtype = torch.bfloat16
    q, do = _flash(b, nq, hq, d, dtype), _flash(b, nq, hq, d, dtype)
    k, v = _flash(b, nk, hkv, d, dtype), _flash(b, nk, hkv, d, dtype)
    monkeypatch.setenv(OPT_IN, "1")
    monkeypatch.setenv("FLASHATTN_TRITON_PREFETCH_BWD", "0")
    fwd_calls, bwd_calls = _hopper_forward_spy(monkeypatch), _hopper_backward_spy(monkeypatch)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper" if fwd_tier == "hopper" else "portable")
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_BWD", bwd_opt_in)
    torch.manual_seed(7)
    out = flash_attn_func(*leaves, dropout_p=p, causal=True)
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper")
    grads = torch.autograd.grad(out, leaves, do)
    assert fwd_calls == ([True] if fwd_tier == "hopper" else []), fwd_calls
    assert bwd_calls == ([True] if bwd_opt_in == "1" else []), bwd_calls
    mask = dropout_mask(7, p, b, hq, nq, nk, "cuda")
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o_ref, _ = flash_attention_ref(*ref_leaves, True, dropout_mask=mask, dropout_p=p)
    ref = torch.autograd.grad(o_ref, ref_leaves, do.double())
    low_leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    o_low, _ = flash_attention_ref(*low_leaves, True, dropout_mask=mask, dropout_p=p, dtype=dtype)
    low = torch.autograd.grad(o_low, low_leaves, do)
    assert_close("out", out, o_ref, baseline=o_low)
    for name, g, r, lo in zip(("dq", "dk", "dv"), grads, ref, low):
        assert_close(name, g, r, baseline=lo, factor=3.0, dtype=dtype)


@needs_hopper
@pytest.mark.parametrize("d", [64, 128], ids=lambda d: f"d{d}")
@pytest.mark.parametrize("causal", [False, True])
def test_dropout_with_sinks_takes_the_hopper_backward(monkeypatch, d, causal):
    """Learnable sinks with dropout: the forward runs on the portable tier
    (it takes sinks there), the backward on the Hopper one (sinks reach it
    only through the LSE; dsinks is computed after it), and out, dq, dk, dv
    and dsinks match float64 autograd through the reference with the same
    keep mask; GQA, Nq != Nk, NaN past N in the inputs' storage."""
    from flashattn_triton import flash_attn_func
    from flashattn_triton.reference import flash_attention_ref
    from flashattn_triton.testing import dropout_mask
    b, hq, hkv, nq, nk, p, pad = 2, 8, 2, 333, 1201, 0.17, 40
    dtype = torch.bfloat16
    monkeypatch.setenv(OPT_IN, "1")
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "hopper")  # the backward at every length
    monkeypatch.setenv("FLASHATTN_TRITON_PREFETCH_BWD", "0")
    bwd_calls = _hopper_backward_spy(monkeypatch)
    q, do = _flash(b, nq, hq, d, dtype, pad), _flash(b, nq, hq, d, dtype, pad)
    k, v = _flash(b, nk, hkv, d, dtype, pad), _flash(b, nk, hkv, d, dtype, pad)
    sinks = torch.randn(hq, device="cuda") * 2.0
    leaves = [t.detach().requires_grad_() for t in (q, k, v, sinks)]
    torch.manual_seed(99)
    out = flash_attn_func(*leaves[:3], dropout_p=p, causal=causal, sinks=leaves[3])
    grads = torch.autograd.grad(out, leaves, do)
    assert bwd_calls == [True], bwd_calls
    mask = dropout_mask(99, p, b, hq, nq, nk, "cuda")
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v, sinks)]
    o_ref, _ = flash_attention_ref(*ref_leaves[:3], causal, sinks=ref_leaves[3], dropout_mask=mask, dropout_p=p)
    ref = torch.autograd.grad(o_ref, ref_leaves, do.double())
    low_leaves = [t.detach().requires_grad_() for t in (q, k, v)] + [sinks.detach().requires_grad_()]
    o_low, _ = flash_attention_ref(*low_leaves[:3], causal, sinks=low_leaves[3], dropout_mask=mask, dropout_p=p,
                                   dtype=dtype)
    low = torch.autograd.grad(o_low, low_leaves, do)
    assert_close("out", out, o_ref, baseline=o_low)
    for name, g, r, lo in zip(("dq", "dk", "dv", "dsinks"), grads, ref, low):
        assert torch.isfinite(g).all(), name
        assert_close(name, g, r, baseline=lo, factor=3.0, dtype=dtype)
