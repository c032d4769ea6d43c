"""The portable backward (kernels/bwd.py: the dK/dV and dQ kernels, in two
launches or one, no atomics) against the float64 reference's gradients
within the usual tolerance, on shapes that stress tile edges: ragged
lengths, GQA / MQA, odd head dims, windows, packed batches and the score
variants."""

import pytest
import torch

from flashattn_triton import flash_attn_func
from flashattn_triton.testing import alibi_slopes, make_qkv, rand
from _utils import ON_GPU, cpu_covering
from test_attention import check_against_reference
from test_varlen import _check_varlen


@pytest.mark.parametrize("n_q,n_k,h_q,h_kv,d,causal,dtype", [
    (67, 67, *((4, 4) if ON_GPU else (2, 2)), 64, True, torch.bfloat16),  # ragged, MHA (CPU: 2 heads)
    # Nq < Nk (bottom-right), GQA, odd d; Nk past a 128-key tile on the GPU, past
    # the 64-row blocks (GQA partial sums) and ragged in the CPU's 16-key tiles
    (45, 131 if ON_GPU else 83, 6, 2, 40, True, torch.float16),
    (130, 33, 4, 1, 72, True, torch.float32),     # Nq > Nk: rows that see no key, MQA
    (96, 80, 2, 2, 128, False, torch.bfloat16),   # not causal
])
def test_backward_matches_reference(device, n_q, n_k, h_q, h_kv, d, causal, dtype):
    q, k, v = make_qkv(2, n_q, n_k, h_q, h_kv, d, dtype, device, requires_grad=False)
    check_against_reference(q, k, v, causal)


# Query lengths that are multiples of 128 (kernels/bwd.py WHOLE_Q_TILES, EVEN_M:
# the dK/dV kernel's masked loops then skip their row checks): causal both alignments
# (Nq > Nk: rows that see no key), a left window, not causal with ragged keys.
# Nq < Nk: 256 x 300 on the GPU (two query tiles of 128); on the CPU 128 queries
# are already four of the interpreter's 32-row tiles, and 203 keys stay ragged
# (not a multiple of 16, 32, 64 or 128) and more than Nq.  Two batch entries
# on the GPU, one on the CPU (the row checks are per sequence; the backward's
# batch offsets: test_backward_matches_reference, test_one_launch_backward),
# and MHA with 2 heads instead of 4.
@pytest.mark.parametrize("n_q,n_k,h_q,h_kv,d,causal,dtype,window", [
    (128, 128, *((4, 4) if ON_GPU else (2, 2)), 64, True, torch.bfloat16, (-1, -1)),
    (128, 77, 4, 2, 64, True, torch.float16, (-1, -1)),
    (256 if ON_GPU else 128, 300 if ON_GPU else 203, 2, 1, 40, True, torch.float32, (-1, -1)),
    (128, 96, 2, 2, 96, False, torch.bfloat16, (-1, -1)),
    (128, 150, 2, 1, 64, True, torch.float16, (40, 0)),
])
def test_backward_whole_query_tiles(device, monkeypatch, n_q, n_k, h_q, h_kv, d, causal, dtype, window):
    from flashattn_triton.kernels import bwd
    from _utils import call_spy
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_BWD", "0")  # the portable kernels are the subject
    monkeypatch.setattr(bwd, "WHOLE_Q_TILES", True)
    seen = [call_spy(monkeypatch, bwd, name, lambda *a, **m: m["EVEN_M"])
            for name in ("_launch_dkdv", "_launch_one")]
    q, k, v = make_qkv(2 if ON_GPU else 1, n_q, n_k, h_q, h_kv, d, dtype, device, requires_grad=False)
    check_against_reference(q, k, v, causal, window_size=window)
    assert [m for spy in seen for m in spy] and all(m for spy in seen for m in spy), seen


@pytest.mark.parametrize("window", [(16, 0), (20, 7)])
def test_backward_window(device, window):
    q, k, v = make_qkv(1, 77, 90, 4, 2, 64, torch.float16, device, requires_grad=False)
    check_against_reference(q, k, v, causal=window[1] == 0, window_size=window)


def test_backward_varlen(device):
    _check_varlen([0, 1, 37, 70], [5, 1, 37, 90], 4, 2, 64, True, torch.bfloat16, device)


def test_default_backward_is_bitwise_reproducible(device, monkeypatch):
    """The default (separate) backward has no atomics: two runs give the same bits
    (on the GPU the programs' order varies from run to run; on CPU it cannot)."""
    # the interpreter is slow (and runs the programs in order); the claim is for GPUs
    n, b, h = (1000, 2, 8) if device.type == "cuda" else (40, 1, 4)
    q, k, v = make_qkv(b, n, n, h, 2, 64, torch.bfloat16, device, requires_grad=False)
    do = rand(q.shape, torch.bfloat16, device)
    runs = []
    for _ in range(2):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out = flash_attn_func(*leaves, causal=True, deterministic=True)
        runs.append(torch.autograd.grad(out, leaves, do))
    for name, a, b in zip(("dq", "dk", "dv"), *runs):
        assert torch.equal(a, b), f"{name}: two runs differ at {(a != b).sum().item()} elements"


# Q, K, dQ, dK in two column chunks (kernels/bwd.py SPLIT_QK, kernels/fwd.py
# split_qk): d=96 -> 64 + 32, d=160 -> 128 + 64 (32 padded), d=192 -> 128 + 64,
# d=40 -> 32 + 16 (8 padded).  GQA groups of 2 write float32 partials per chunk.
SPLIT_QK_SHAPES = [
    (96, 96, 4, 2, False, torch.bfloat16, {}),
    (160, 160, 3, 1, True, torch.float16, {}),
    (192, 128, 4, 2, True, torch.bfloat16, {}),
    (192, 128, 2, 2, False, torch.float16, {"softcap": 5.0}),
    (96, 96, 4, 1, True, torch.float32, {"window_size": (20, 0)}),
    (40, 40, 4, 2, True, torch.float16, {}),
]
_DT = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
# Each shape with the split on and off on the GPU; on the CPU the two
# bfloat16 shapes (the only ones) once each, with the split on for d = 96 and
# off for d = 192 / dv = 128 (both met the other way by another shape): every
# other shape still meets both, so does every value of every dimension
# (_utils.cpu_covering checks the pairs).
SPLIT_QK_CASES = cpu_covering(
    [pytest.param(split, *shape, id=f"d{shape[0]}-dv{shape[1]}-h{shape[2]}/{shape[3]}-"
                  f"{'causal' if shape[4] else 'full'}-{_DT[shape[5]]}-"
                  f"{'softcap' if 'softcap' in shape[6] else 'window' if shape[6] else 'plain'}-"
                  f"{'split' if split else 'nosplit'}")
     for shape in SPLIT_QK_SHAPES for split in (True, False)],
    lambda split, d, d_v, h_q, h_kv, causal, dtype, kw: dtype != torch.bfloat16 or split == (d == 96),
    dims={"split": lambda *v: v[0], "d": lambda *v: v[1:3], "heads": lambda *v: v[3:5], "causal": lambda *v: v[5],
          "dtype": lambda *v: v[6], "kw": lambda *v: sorted(v[7])})


@pytest.mark.parametrize("split,d,d_v,h_q,h_kv,causal,dtype,kw", SPLIT_QK_CASES)
def test_split_qk_backward(device, monkeypatch, split, d, d_v, h_q, h_kv, causal, dtype, kw):
    """dq, dk, dv (and the forward) with the split on and off against float64
    (odd lengths, GQA / MQA).  q, k, v are
    views of NaN-padded rows: a padded column read unmasked shows.  Two batch
    entries on the GPU, one on the CPU (the column chunks share each row's
    base pointer; the split backward with batches: test_one_launch_backward's
    d = 96 and test_backward_matches_reference's d = 72, both split by default)."""
    from flashattn_triton import ops
    from flashattn_triton.kernels import bwd, fwd
    from flashattn_triton.reference import flash_attention_ref as flash_ref
    from _utils import assert_close, call_spy
    monkeypatch.setattr(fwd, "SPLIT_QK", split)
    monkeypatch.setattr(bwd, "SPLIT_QK", split)
    monkeypatch.setattr(bwd, "SPLIT_QK_MIN_PAD", 0)  # d=40, 96 too (off there by default)
    monkeypatch.setattr(ops, "PLANS_ENABLED", False)  # a plan would replay the other split's launch
    monkeypatch.setattr(bwd, "ONE_LAUNCH", False)  # the two launches are the subject
    launched = []
    for name in ("_launch_dkdv", "_launch_dq"):
        launched += [call_spy(monkeypatch, bwd, name, lambda *a, name=name, **m: (name, m["SPLIT_QK"]))]
    b = 2 if ON_GPU else 1
    q, k, v = make_qkv(b, 37, 83, h_q, h_kv, d, dtype, device, requires_grad=False, d_v=d_v)
    q, k, v = (torch.cat([t, torch.full_like(t[..., :64], float("nan"))], -1)[..., :t.shape[-1]]
               for t in (q, k, v))
    do = rand(q.shape[:-1] + (d_v,), dtype, device)
    dlse = rand((b, h_q, 37), torch.float32, device)

    def grads(fn, inputs):
        out, lse = fn(*inputs)
        loss = (out.float() * do.float()).sum() + (torch.where(torch.isinf(lse), 0.0, lse).float() * dlse).sum()
        return torch.autograd.grad(loss, inputs)

    views = [t.requires_grad_(True) for t in (q, k, v)]
    got = grads(lambda *a: flash_attn_func(*a, causal=causal, return_lse=True, **kw), views)
    ref = grads(lambda *a: flash_ref(*a, causal, **kw), [t.detach().double().requires_grad_(True) for t in (q, k, v)])
    base = grads(lambda *a: flash_ref(*a, causal, dtype=dtype, **kw),
                 [t.detach().clone().requires_grad_(True) for t in (q, k, v)])
    for name, g, r, b in zip(("dq", "dk", "dv"), got, ref, base):
        assert_close(name, g, r, b, 3.0, dtype)
    seen = [x for spy in launched for x in spy]
    assert {n for n, _ in seen} == {"_launch_dkdv", "_launch_dq"}, seen
    assert {s for _, s in seen} == {split}, seen


@pytest.mark.parametrize("d", [64, 96, 112, 160, 256])
def test_split_qk_backward_choice(device, monkeypatch, d):
    """By default the backward splits where fwd.split_qk allows and the padded
    width is at least bwd.SPLIT_QK_MIN_PAD (96 -> 64 + 32 of 128, 160 -> 128 + 64
    of 256; not 64, 112, 256), whatever fwd.SPLIT_QK says."""
    from flashattn_triton import ops
    from flashattn_triton.kernels import bwd, fwd
    from flashattn_triton.kernels.launch import head_dim_pad
    from _utils import call_spy
    monkeypatch.setattr(fwd, "SPLIT_QK", False)
    monkeypatch.setattr(ops, "PLANS_ENABLED", False)
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_BWD", "0")  # the portable kernels are the subject
    monkeypatch.setattr(bwd, "ONE_LAUNCH", False)  # (their two launches)
    launched = [call_spy(monkeypatch, bwd, name, lambda *a, **m: m["SPLIT_QK"])
                for name in ("_launch_dkdv", "_launch_dq")]
    q, k, v = make_qkv(1, 5, 7, 2, 1, d, torch.float16, device)
    flash_attn_func(q, k, v, causal=True).sum().backward()
    # On the GPU the backward prefetch (compile only) also goes through the launches.
    assert launched[0] and launched[1] and set(launched[0]) == set(launched[1]) == {d in (96, 160)}
    assert bwd.SPLIT_QK and bwd.SPLIT_QK_MIN_PAD == 128
    assert fwd.split_qk(d, head_dim_pad(d)) == (d in (96, 160))
    for width in range(1, 513):
        pad = head_dim_pad(width)
        assert bwd.use_split_qk(width, pad) == (fwd.split_qk(width, pad) and pad >= 128), width


# The separate form's dK/dV and dQ programs in one launch (kernels/bwd.py
# ONE_LAUNCH, _bwd_dkdv_dq): ragged lengths that are no multiple of the tiles,
# MHA / GQA (float32 partials of the group slices) / MQA, d 64 and odd d
# (40: 8 padded columns; 96: Q K^T in two column chunks).  (29 x 51
# on the GPU; on the CPU 29 x 35, three of the interpreter's 16-key tiles, the
# last ragged.)
@pytest.mark.parametrize("n_q,n_k,h_q,h_kv,d,causal,dtype", [
    (37, 45, 2, 2, 64, True, torch.bfloat16),
    (45, 29, 4, 2, 40, False, torch.float16),
    (29, 51 if ON_GPU else 35, 6, 2, 96, True, torch.float32),
    (33, 19, 2, 1, 64, False, torch.bfloat16),
])
def test_one_launch_backward(device, monkeypatch, n_q, n_k, h_q, h_kv, d, causal, dtype):
    """dq, dk, dv of the one-launch form against float64 on NaN-padded views,
    one launch instead of two, and (interpreter: the same bodies and tiles)
    the two-launch form's bits."""
    got, ours = _check_one_launch(device, monkeypatch, n_q, n_k, h_q, h_kv, d, causal, dtype)
    two, names = ours({causal: False, not causal: True})  # (per causal flag)
    assert names == {"_launch_dkdv", "_launch_dq"}, names
    if device.type == "cpu":
        for name, a, b in zip(("dq", "dk", "dv"), got, two):
            assert torch.equal(a, b), f"{name}: one launch and two differ at {(a != b).sum().item()} elements"


def _check_one_launch(device, monkeypatch, n_q, n_k, h_q, h_kv, d, causal, dtype):
    """The one-launch form's (dq, dk, dv) on NaN-padded views, checked against
    float64 and to be one launch; and ours(switch): the gradients with
    bwd.ONE_LAUNCH = switch and the launchers that ran."""
    from flashattn_triton import ops
    from flashattn_triton.kernels import bwd
    from flashattn_triton.reference import flash_attention_ref as flash_ref
    from _utils import assert_close, call_spy
    monkeypatch.setattr(ops, "PLANS_ENABLED", False)
    monkeypatch.setenv("FLASHATTN_TRITON_HOPPER_BWD", "0")  # the portable kernels are the subject
    launched = {name: call_spy(monkeypatch, bwd, name) for name in ("_launch_one", "_launch_dkdv", "_launch_dq")}
    q, k, v = make_qkv(2, n_q, n_k, h_q, h_kv, d, dtype, device, requires_grad=False)
    q, k, v = (torch.cat([t, torch.full_like(t[..., :64], float("nan"))], -1)[..., :d] for t in (q, k, v))
    do = rand(q.shape, dtype, device)

    def grads(fn, inputs):
        return torch.autograd.grad(fn(*inputs).float().mul(do.float()).sum(), inputs)

    def ours(one):
        monkeypatch.setattr(bwd, "ONE_LAUNCH", one)
        for seen in launched.values():
            seen.clear()
        got = grads(lambda *a: flash_attn_func(*a, causal=causal), [t.clone().requires_grad_(True) for t in (q, k, v)])
        return got, {name for name, seen in launched.items() if seen}

    got, names = ours(True)
    assert names == {"_launch_one"}, names
    ref = grads(lambda *a: flash_ref(*a, causal)[0], [t.detach().double().requires_grad_(True) for t in (q, k, v)])
    base = grads(lambda *a: flash_ref(*a, causal, dtype=dtype)[0],
                 [t.detach().clone().requires_grad_(True) for t in (q, k, v)])
    for name, g, r, b in zip(("dq", "dk", "dv"), got, ref, base):
        assert_close(name, g, r, b, 3.0, dtype)
    return got, ours


@pytest.fixture
def fresh_choices():
    """Launch-config choices are cached per key for the process: a test that
    points the launchers at a table of its own starts and ends without them."""
    from flashattn_triton.kernels.launch import Launcher, PairLauncher
    for cached in (Launcher.choose, PairLauncher.table_entry):
        cached.cache_clear()
    yield
    for cached in (Launcher.choose, PairLauncher.table_entry):
        cached.cache_clear()


def _write_table(path, entries: dict) -> None:
    import json
    path.mkdir(parents=True, exist_ok=True)
    (path / "sm90.json").write_text(json.dumps({"configs": entries}))


# The one launch's own table entries (launch.PairLauncher; benchmarks/tune.py
# --kernels BWD_ONE): [BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2, num_warps, num_stages].
def test_one_launch_table_entry(monkeypatch, tmp_path, fresh_choices):
    """A BWD_ONE entry of the table (FLASHATTN_TRITON_TABLE_DIR) wins over the
    config derived from the parts' entries; FLASHATTN_TRITON_CONFIG_BWD_ONE
    overrides its fields, and a part forced by its own variable brings back
    the derived config; a malformed entry raises naming its key."""
    from flashattn_triton.kernels import bwd, launch
    from flashattn_triton.kernels.launch import ENV_CONFIG_PREFIX, ENV_TABLE_DIR, table_key
    monkeypatch.setattr(launch, "INTERPRET", False)  # (the table is read for compiled kernels only)
    monkeypatch.setattr(launch, "_arch", lambda index: "sm90")
    for name in ("AUTOTUNE", "CONFIG_BWD_ONE", "CONFIG_BWD_DKDV", "CONFIG_BWD_DQ"):
        monkeypatch.delenv("FLASHATTN_TRITON_" + name, raising=False)
    bf16, gpu = torch.bfloat16, torch.device("cuda", 0)
    entries = {table_key("BWD_ONE", bf16, 128, True, 1024): [32, 64, 64, 32, 4, 2]}
    for causal in (False, True):
        entries[table_key("BWD_DKDV", bf16, 128, causal, 1024)] = [32, 64, 4, 2]
        entries[table_key("BWD_DQ", bf16, 128, causal, 1024)] = [128, 64, 8, 3]
    _write_table(tmp_path / "good", entries)
    monkeypatch.setenv(ENV_TABLE_DIR, str(tmp_path / "good"))

    def config(causal):
        cfg = bwd._launch_one.config(gpu, bf16, 128, causal, 1024, "", 128)
        return (*(cfg.kwargs[f] for f in launch.PAIR_FIELDS[:4]), cfg.num_warps, cfg.num_stages)

    assert config(True) == (32, 64, 64, 32, 4, 2)  # the entry
    assert config(False) == (32, 64, 128, 64, 8, 2)  # no entry: derived (tiles of each, 8 warps, 2 stages)
    monkeypatch.setenv(ENV_CONFIG_PREFIX + "BWD_ONE", "num_warps=8,BLOCK_N2=64")
    assert config(True) == (32, 64, 64, 64, 8, 2)
    monkeypatch.delenv(ENV_CONFIG_PREFIX + "BWD_ONE")
    monkeypatch.setenv(ENV_CONFIG_PREFIX + "BWD_DKDV", "BLOCK_M=64,BLOCK_N=64,num_warps=4,num_stages=3")
    assert config(True) == (64, 64, 128, 64, 8, 3)
    monkeypatch.delenv(ENV_CONFIG_PREFIX + "BWD_DKDV")
    # an entry that does not fit the model (dK/dV 64 x 128 at 4 warps: 256 accumulator registers)
    _write_table(tmp_path / "unfit", {**entries, table_key("BWD_ONE", bf16, 128, True, 1024): [64, 128, 64, 32, 4, 2]})
    monkeypatch.setenv(ENV_TABLE_DIR, str(tmp_path / "unfit"))
    bwd._launch_one.table_entry.cache_clear()
    assert config(True) == (32, 64, 128, 64, 8, 2)
    for kernel, bad in (("BWD_ONE", [32, 64, 4, 2]), ("BWD_ONE", [32, 64, 64, 32, 4, 0]),
                        ("BWD_DKDV", [32, 64, 64, 32, 4, 2])):
        key = table_key(kernel, bf16, 128, True, 2048)
        _write_table(tmp_path / f"bad{len(bad)}{bad[-1]}{kernel}", {**entries, key: bad})
        monkeypatch.setenv(ENV_TABLE_DIR, str(tmp_path / f"bad{len(bad)}{bad[-1]}{kernel}"))
        bwd._launch_one.table_entry.cache_clear()
        launch.Launcher.choose.cache_clear()
        with pytest.raises(ValueError, match=f"sm90.json: entry '{key.replace('|', '[|]')}'"):
            bwd._launch_one.config(gpu, bf16, 128, True, 1024, "", 128)


@pytest.mark.parametrize("n_q,n_k,h_q,h_kv,d,causal,dtype,entry", [
    (37, 45, 2, 2, 64, True, torch.bfloat16, (32, 64, 64, 32, 4, 2)),
    (45, 29, 4, 2, 40, False, torch.float16, (64, 32, 32, 64, 4, 3)),
])
def test_one_launch_table_config_backward(device, monkeypatch, tmp_path, fresh_choices,
                                          n_q, n_k, h_q, h_kv, d, causal, dtype, entry):
    """The one launch with a table entry's tiles gives the float64 reference's
    gradients (compiled: through FLASHATTN_TRITON_TABLE_DIR; the interpreter
    reads no table, so there the same six fields come from
    FLASHATTN_TRITON_CONFIG_BWD_ONE)."""
    from flashattn_triton.kernels import bwd, launch
    from flashattn_triton.kernels.launch import (ENV_CONFIG_PREFIX, ENV_TABLE_DIR, PAIR_FIELDS, head_dim_pad,
                                                 seq_bucket, table_key)
    d_pad = head_dim_pad(d)
    _write_table(tmp_path, {table_key("BWD_ONE", dtype, d_pad, causal, seq_bucket(max(n_q, n_k))): list(entry)})
    monkeypatch.setenv(ENV_TABLE_DIR, str(tmp_path))
    if device.type == "cpu":
        monkeypatch.setenv(ENV_CONFIG_PREFIX + "BWD_ONE", ",".join(f"{f}={x}" for f, x in zip(PAIR_FIELDS, entry)))
    if device.type == "cuda":
        monkeypatch.setattr(launch, "_arch", lambda index: "sm90")
    chosen = []
    real = bwd._launch_one.config

    def spy(*args):
        cfg = real(*args)
        chosen.append((*(cfg.kwargs[f] for f in PAIR_FIELDS[:4]), cfg.num_warps, cfg.num_stages))
        return cfg

    monkeypatch.setattr(bwd._launch_one, "config", spy)
    _check_one_launch(device, monkeypatch, n_q, n_k, h_q, h_kv, d, causal, dtype)
    assert chosen and set(chosen) == {entry}, chosen


def test_one_launch_with_variants(device, monkeypatch):
    """Dropout, softcap, ALiBi, sinks and a window come through the shared
    program bodies: under the interpreter the one-launch form gives the
    two-launch form's bits (on the GPU: within float32 rounding)."""
    from flashattn_triton import ops
    from flashattn_triton.kernels import bwd
    monkeypatch.setattr(ops, "PLANS_ENABLED", False)
    q, k, v = make_qkv(1, 41, 35, 4, 2, 64, torch.float32, device, requires_grad=False)
    sinks = rand((4,), torch.float32, device)
    do = rand(q.shape, torch.float32, device)
    grads = {}
    for one in (False, True):
        monkeypatch.setattr(bwd, "ONE_LAUNCH", one)
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v, sinks)]
        torch.manual_seed(7)  # the dropout seed is drawn from torch's generator
        out = flash_attn_func(*leaves[:3], dropout_p=0.2, causal=True, softcap=5.0, window_size=(20, 0),
                              alibi_slopes=alibi_slopes(4, device), sinks=leaves[3])
        grads[one] = torch.autograd.grad(out, leaves, do)
    for name, a, b in zip(("dq", "dk", "dv", "dsinks"), grads[False], grads[True]):
        if device.type == "cpu":
            assert torch.equal(a, b), f"{name}: one launch and two differ"
        else:
            err = (a - b).abs().max().item()
            assert err <= 1e-5 * max(1.0, a.abs().max().item()), f"{name}: one launch vs two differ by {err:.3g}"


def test_one_launch_scope(device, monkeypatch):
    """Packed batches, a bias gradient and autotuning keep the two launches;
    the switch reads per causal flag or per (padded head dim, flag); the launch config combines the parts'
    (tiles of each, the larger num_warps, the dK/dV stages) unless
    FLASHATTN_TRITON_CONFIG_BWD_ONE overrides it."""
    from flashattn_triton.kernels import bwd
    from flashattn_triton.kernels.launch import ENV_CONFIG_PREFIX
    monkeypatch.setattr(bwd, "ONE_LAUNCH", {True: True, False: False})
    assert bwd.use_one_launch(True, False, False, 64)
    assert not bwd.use_one_launch(False, False, False, 64)
    assert not bwd.use_one_launch(True, True, False, 64)  # packed
    assert not bwd.use_one_launch(True, False, True, 64)  # dbias
    # per (padded head dim, causal flag); absent keys are off
    monkeypatch.setattr(bwd, "ONE_LAUNCH", {(128, False): True})
    assert bwd.use_one_launch(False, False, False, 128)
    assert not bwd.use_one_launch(True, False, False, 128)
    assert not bwd.use_one_launch(False, False, False, 64)
    monkeypatch.setattr("flashattn_triton.kernels.bwd.autotune_enabled", lambda: True)
    assert not bwd.use_one_launch(False, False, False, 128)
    monkeypatch.setenv(ENV_CONFIG_PREFIX + "BWD_DKDV", "BLOCK_M=64,BLOCK_N=128,num_warps=4,num_stages=3")
    monkeypatch.setenv(ENV_CONFIG_PREFIX + "BWD_DQ", "BLOCK_M=128,BLOCK_N=64,num_warps=8,num_stages=2")
    key = (torch.bfloat16, 128, True, 1024, "", 128)
    cfg = bwd._launch_one.config(torch.device("cpu"), *key)
    assert cfg.kwargs == dict(BLOCK_M1=64, BLOCK_N1=128, BLOCK_M2=128, BLOCK_N2=64), cfg.kwargs
    assert (cfg.num_warps, cfg.num_stages) == (8, 3)
    # the dK/dV stages (4) lowered until the dQ tiles fit the shared-memory model
    monkeypatch.setenv(ENV_CONFIG_PREFIX + "BWD_DKDV", "BLOCK_M=64,BLOCK_N=128,num_warps=4,num_stages=4")
    monkeypatch.setenv(ENV_CONFIG_PREFIX + "BWD_DQ", "BLOCK_M=128,BLOCK_N=128,num_warps=8,num_stages=2")
    cfg = bwd._launch_one.config(torch.device("cpu"), *key)
    assert (cfg.num_warps, cfg.num_stages) == (8, 2)
    monkeypatch.setenv(ENV_CONFIG_PREFIX + "BWD_ONE", "num_warps=4,num_stages=2,BLOCK_N2=32")
    cfg = bwd._launch_one.config(torch.device("cpu"), *key)
    assert cfg.kwargs["BLOCK_N2"] == 32 and (cfg.num_warps, cfg.num_stages) == (4, 2)
    monkeypatch.setenv(ENV_CONFIG_PREFIX + "BWD_ONE", "BLOCK_M=64")
    with pytest.raises(ValueError, match="BWD_ONE"):
        bwd._launch_one.config(torch.device("cpu"), *key)
