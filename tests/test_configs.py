"""Every candidate launch config (and so every entry the tuned table may
hold) computes the same function.

Launch configs are GPU settings (under the interpreter every kernel runs its
small interpreter config), so these tests run only with
FLASHATTN_TRITON_TEST_DEVICE=cuda.
"""

import pytest
import torch

from flashattn_triton.kernels.launch import CANDIDATES, load_table, table_lookup
from flashattn_triton.testing import make_qkv
from test_attention import check_against_reference


def _all_launch_configs():
    for name, entries in CANDIDATES.items():
        for bm, bn, w, s in entries:
            cfg = f"BLOCK_M={bm},BLOCK_N={bn},num_warps={w},num_stages={s}"
            yield pytest.param(name, cfg, id=f"{name}-{cfg}")


@pytest.mark.parametrize("kernel,cfg", list(_all_launch_configs()))
def test_every_candidate_config(device, monkeypatch, kernel, cfg):
    if device.type != "cuda":
        pytest.skip("launch configs apply to compiled kernels only")
    monkeypatch.setenv("FLASHATTN_TRITON_CONFIG_" + kernel, cfg)
    q, k, v = make_qkv(2, 300, 517, 4, 2, 64, torch.bfloat16, device, requires_grad=False)
    check_against_reference(q, k, v, causal=True)


def test_table_entries_are_candidates():
    """The committed table only names configs the kernels are tested with (a
    one-launch entry: a pair of the parts' candidate tiles, as tune.py pairs them)."""
    from flashattn_triton.kernels.bwd import _launch_one
    table = load_table("sm90")
    assert table, "flashattn_triton/kernels/configs/sm90.json is missing or empty"
    for key, entry in table.items():
        kernel = key.split("|")[0]
        if kernel == _launch_one.name:
            bm1, bn1, bm2, bn2, w, s = entry
            for part, tiles in zip(_launch_one.parts, ((bm1, bn1, w), (bm2, bn2, w))):
                assert tiles in [(bm, bn, ww) for bm, bn, ww, _ in part.candidates], f"{key}: {entry}"
            assert s in _launch_one.STAGES, f"{key}: {entry}"
            continue
        assert tuple(entry) in [tuple(c) for c in CANDIDATES[kernel]], f"{key}: {entry} not a candidate"


def test_table_loader_checks_entry_lengths(monkeypatch, tmp_path):
    """Four fields per entry, six for the one-launch backward (BWD_ONE); any
    other entry is a ValueError naming its key and the file."""
    import json
    from flashattn_triton.kernels import launch
    good = {"BWD_DKDV|bfloat16|d64|full|n1024": [64, 64, 4, 3],
            "BWD_ONE|bfloat16|d64|full|n1024": [64, 64, 64, 64, 4, 3]}
    bad = {"BWD_DKDV|bfloat16|d64|full|n2048": [64, 64, 64, 64, 4, 3],
           "BWD_ONE|bfloat16|d64|full|n2048": [64, 64, 4, 3],
           "FWD|bfloat16|d64|full|n2048": [128, 64, 4, "3"],
           "BWD_DQ|bfloat16|d64|full|n2048": [128, 64, 4, -1]}
    for i, extra in enumerate([{}, *({k: v} for k, v in bad.items())]):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "sm90.json").write_text(json.dumps({"configs": {**good, **extra}}))
        monkeypatch.setenv(launch.ENV_TABLE_DIR, str(tmp_path / str(i)))
        if not extra:
            assert launch.load_table("sm90") == {k: tuple(v) for k, v in good.items()}
            continue
        key = next(iter(extra))
        with pytest.raises(ValueError, match=f"{i}/sm90.json: entry '{key.replace('|', '[|]')}'"):
            launch.load_table("sm90")
    monkeypatch.delenv(launch.ENV_TABLE_DIR)
    assert launch.load_table("sm90") is launch._read_table(launch.TABLE_DIR / "sm90.json")


@pytest.mark.parametrize("value,match", [
    ("BLOCK_M=-16,BLOCK_N=16", r"BLOCK_M must be a power of two, got -16"),
    ("BLOCK_M=0,BLOCK_N=16", r"BLOCK_M must be a power of two, got 0"),
    ("BLOCK_M=48,BLOCK_N=16", r"BLOCK_M must be a power of two, got 48"),
    ("BLOCK_M=64,BLOCK_N=16,num_stages=0", r"num_stages must be a positive integer, got 0"),
    ("garbage", r"'garbage' is not KEY=INTEGER"),
    ("BLOCK_M=64,BLOCK_N=16,", r"'' is not KEY=INTEGER"),
    ("BLOCK_M=abc,BLOCK_N=16", r"'BLOCK_M=abc' is not KEY=INTEGER"),
    ("BLOCK_M=64,BLOCK_N=16,num_warp=8", r"unknown fields \['num_warp'\]"),
    ("BLOCK_M=64", r"must set BLOCK_M and BLOCK_N"),
])
def test_forced_config_is_checked(monkeypatch, value, match):
    """FLASHATTN_TRITON_CONFIG_<KERNEL>: anything but KEY=positive integer
    pairs of the kernel's fields (tiles and warps powers of two) is a
    ValueError naming the variable (a negative tile computed NaN, a typo'd
    field was dropped)."""
    from flashattn_triton.kernels import launch
    monkeypatch.setenv("FLASHATTN_TRITON_CONFIG_FWD", value)
    with pytest.raises(ValueError, match="FLASHATTN_TRITON_CONFIG_FWD=.*" + match):
        launch.config_from_env("FWD")
    monkeypatch.setenv("FLASHATTN_TRITON_CONFIG_FWD", "BLOCK_M=64, BLOCK_N=32 ,num_warps=8")
    cfg = launch.config_from_env("FWD")
    assert cfg.kwargs == {"BLOCK_M": 64, "BLOCK_N": 32} and cfg.num_warps == 8 and cfg.num_stages == 2


def test_malformed_tables_name_the_file(monkeypatch, tmp_path):
    """A table that is not {"configs": {...}} JSON, or a table folder that is
    not a folder, is a ValueError naming it (were KeyError, AttributeError,
    a JSON error without the path, or a silent fallback)."""
    from flashattn_triton.kernels import launch
    for i, (text, match) in enumerate([("", r"cannot be read as JSON"), ("[1, 2]", r"got list"),
                                       ('{"config": {}}', r"got dict with keys \['config'\]"),
                                       (b"\xff\xfe", r"cannot be read as JSON")]):
        folder = tmp_path / str(i)
        folder.mkdir()
        table = folder / "sm90.json"
        table.write_bytes(text) if isinstance(text, bytes) else table.write_text(text)
        monkeypatch.setenv(launch.ENV_TABLE_DIR, str(folder))
        with pytest.raises(ValueError, match=f"config table {table}: .*{match}"):
            launch.load_table("sm90")
    monkeypatch.setenv(launch.ENV_TABLE_DIR, str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=r"FLASHATTN_TRITON_TABLE_DIR=.*missing' is not a directory"):
        launch.load_table("sm90")


def test_one_launch_tuning_candidates():
    """PairLauncher.pair_candidates: a dK/dV candidate's tiles and a dQ
    candidate's of the same num_warps, at 2 or 3 stages, both parts fitting
    the model; the config the library derives from the parts' preferred
    configs is among them at d = 64 and 128."""
    from flashattn_triton.kernels.bwd import _launch_dkdv, _launch_dq, _launch_one
    from flashattn_triton.kernels.launch import RESIDENT, fits, make_config
    for d in (64, 128):
        cands = _launch_one.pair_candidates(d, 2)
        assert cands and len(set(cands)) == len(cands)
        for bm1, bn1, bm2, bn2, w, s in cands:
            assert (bm1, bn1, w) in [(bm, bn, ww) for bm, bn, ww, _ in _launch_dkdv.candidates]
            assert (bm2, bn2, w) in [(bm, bn, ww) for bm, bn, ww, _ in _launch_dq.candidates]
            assert s in (2, 3) and min(bm1, bn1, bm2, bn2) >= 32
            assert fits((bm1, bn1, w, s), RESIDENT["BWD_DKDV"], d, 2) and fits((bm2, bn2, w, s), RESIDENT["BWD_DQ"], d, 2)
        derived = _launch_one.combine(*(make_config(p.default_entry(d, 2)) for p in _launch_one.parts), d, 2)
        assert derived in cands, derived


def test_tune_one_launch_cpu_smoke(monkeypatch, tmp_path, capsys):
    """benchmarks/tune.py --kernels BWD_ONE on the CPU (interpreter, host
    times, one tiny shape): the timed calls launch the one-launch kernel with
    each candidate, and --merge adds a six-field entry to the table."""
    import importlib
    import json
    import sys
    from pathlib import Path
    from flashattn_triton.kernels import bwd, launch
    from _utils import call_spy
    if not launch.INTERPRET:
        pytest.skip("a CPU run: needs Triton's interpreter")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    tune = importlib.import_module("tune")
    monkeypatch.setattr(tune, "DEV", "cpu")
    monkeypatch.setattr(tune, "TOKENS", 24)  # B = 1, N = 24
    monkeypatch.setattr(tune, "HEADS", 80)  # H = 2 at d = 40
    monkeypatch.setattr(bwd, "ONE_LAUNCH", bwd.ONE_LAUNCH)  # (tune.py sets it per kernel)
    monkeypatch.delenv("FLASHATTN_TRITON_CONFIG_BWD_ONE", raising=False)
    # 2 dK/dV tiles x 1 dQ tile at 4 warps x 2 stage counts; the 16-wide tile and the 8-warp dQ tile pair with none
    monkeypatch.setattr(bwd._launch_dkdv, "candidates", [(32, 32, 4, 2), (64, 32, 4, 3), (16, 32, 4, 2)])
    monkeypatch.setattr(bwd._launch_dq, "candidates", [(32, 32, 4, 2), (32, 64, 8, 2)])
    two = [call_spy(monkeypatch, bwd, name) for name in ("_launch_dkdv", "_launch_dq")]
    chosen = []
    real = bwd._launch_one.config

    def spy(*args):
        cfg = real(*args)
        chosen.append((*(cfg.kwargs[f] for f in launch.PAIR_FIELDS[:4]), cfg.num_warps, cfg.num_stages))
        return cfg

    monkeypatch.setattr(bwd._launch_one, "config", spy)
    out = tmp_path / "sm90.json"
    out.write_text(json.dumps({"env": {}, "configs": {"FWD|bfloat16|d64|full|n1024": [128, 64, 4, 3]}}))
    monkeypatch.setattr(sys, "argv", ["tune.py", "--kernels", "BWD_ONE", "--head-dims", "40", "--seqlens", "24",
                                      "--causal", "causal", "--jobs", "0", "--out", str(out), "--merge"])
    tune.main()
    cands = [(32, 32, 32, 32, 4, 2), (64, 32, 32, 32, 4, 2), (32, 32, 32, 32, 4, 3), (64, 32, 32, 32, 4, 3)]
    assert set(chosen) == set(cands) and len(chosen) == 2 * len(cands)  # compiled once, timed once
    assert not two[0] and not two[1]
    assert "BWD_ONE d=40: 4 candidates per key" in capsys.readouterr().out
    table = launch._read_table(out)
    assert set(table) == {"FWD|bfloat16|d64|full|n1024", "BWD_ONE|bfloat16|d64|causal|n32"}
    assert table["BWD_ONE|bfloat16|d64|causal|n32"] in cands


def test_table_lookup_falls_back_across_dtype_and_bucket():
    entry = table_lookup("FWD", "sm90", torch.float16, 128, True, 2048)
    assert entry is not None and tuple(entry) in [tuple(c) for c in CANDIDATES["FWD"]]
    assert table_lookup("FWD", "sm75", torch.float16, 128, True, 2048) is None


def test_variant_tag_picks_the_most_demanding_variant():
    from flashattn_triton.kernels.launch import variant_tag
    from flashattn_triton.kernels.score import NO_MODS, KernelMods
    assert variant_tag(NO_MODS, None) == ""
    assert variant_tag(NO_MODS, 128) == "window"
    assert variant_tag(KernelMods(softcap=30.0), 128) == "softcap"
    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    assert variant_tag(KernelMods(softcap=30.0, bias=mask, dropout_p=0.1), None) == "mask"
    assert variant_tag(KernelMods(dropout_p=0.1, alibi=torch.ones(1, 2)), None) == "dropout"


def test_variant_lookup_prefers_its_own_entries(monkeypatch):
    """A variant with tuned entries gets them; one without falls back to the plain key."""
    from flashattn_triton.kernels import launch
    table = {launch.table_key("FWD", torch.bfloat16, 128, True, 4096): (128, 64, 8, 3),
             launch.table_key("FWD", torch.bfloat16, 128, True, 4096, "mask"): (128, 32, 8, 2)}
    monkeypatch.setattr(launch, "load_table", lambda arch: table)
    assert launch.table_lookup("FWD", "sm90", torch.bfloat16, 128, True, 4096, "mask") == (128, 32, 8, 2)
    assert launch.table_lookup("FWD", "sm90", torch.float16, 128, True, 8192, "mask") == (128, 32, 8, 2)
    assert launch.table_lookup("FWD", "sm90", torch.bfloat16, 128, True, 4096, "softcap") == (128, 64, 8, 3)
    assert launch.table_lookup("FWD", "sm90", torch.bfloat16, 128, True, 4096) == (128, 64, 8, 3)


# ---------------------------------------------------------------------------
# Head dims that pad differently (MLA: d = 192 -> 256, dv = 128)
# ---------------------------------------------------------------------------

def test_table_key_names_a_value_head_dim_of_its_own():
    from flashattn_triton.kernels import launch
    assert launch.table_key("FWD", torch.bfloat16, 256, True, 4096) == "FWD|bfloat16|d256|causal|n4096"
    assert launch.table_key("FWD", torch.bfloat16, 256, True, 4096, "", 256) == "FWD|bfloat16|d256|causal|n4096"
    assert (launch.table_key("BWD_DQ", torch.float16, 256, False, 1024, "softcap", 128)
            == "BWD_DQ|float16|d256v128|full+softcap|n1024")


def test_split_head_dim_lookup_falls_back_to_the_wider_key(monkeypatch):
    """d256v128 entries serve MLA calls; without them the d256 entries do,
    and equal head dims never read the d256v128 entries."""
    from flashattn_triton.kernels import launch
    key = launch.table_key
    table = {key("FWD", torch.bfloat16, 256, True, 4096): (64, 32, 4, 2),
             key("FWD", torch.bfloat16, 256, True, 4096, "softcap"): (32, 32, 4, 2),
             key("FWD", torch.bfloat16, 256, True, 4096, "", 128): (128, 64, 8, 3)}
    monkeypatch.setattr(launch, "load_table", lambda arch: table)
    look = launch.table_lookup
    assert look("FWD", "sm90", torch.bfloat16, 256, True, 4096, "", 128) == (128, 64, 8, 3)
    assert look("FWD", "sm90", torch.float16, 256, True, 16384, "", 128) == (128, 64, 8, 3)
    # a variant without entries: the plain entry of the same head dims first
    assert look("FWD", "sm90", torch.bfloat16, 256, True, 4096, "softcap", 128) == (128, 64, 8, 3)
    assert look("FWD", "sm90", torch.bfloat16, 256, True, 4096) == (64, 32, 4, 2)
    assert look("FWD", "sm90", torch.bfloat16, 256, True, 4096, "", 256) == (64, 32, 4, 2)
    assert look("FWD", "sm90", torch.bfloat16, 256, True, 4096, "softcap") == (32, 32, 4, 2)
    # other split head dims (and the non-causal keys) fall back to the d256 entries
    assert look("FWD", "sm90", torch.bfloat16, 256, True, 4096, "", 64) == (64, 32, 4, 2)
    assert look("FWD", "sm90", torch.bfloat16, 128, True, 4096, "", 256) == (64, 32, 4, 2)
    assert look("FWD", "sm90", torch.bfloat16, 256, False, 4096, "", 128) is None


def test_footprint_counts_each_head_dim():
    """Q/K tiles count at d, V/O tiles and accumulators at dv; equal head dims
    give the model as it was (one width for every tile)."""
    from flashattn_triton.kernels.launch import CANDIDATES, RESIDENT, footprint, fits
    # forward 128 x 64, 3 stages: Q 128 x 256, K 64 x 256 and V 64 x dv per stage; O 128 x dv
    assert footprint((128, 64, 8, 3), RESIDENT["FWD"], 256, 2, 128) == (
        2 * (128 * 256 + 3 * 64 * (256 + 128)), 128 * 128 // 256)
    assert footprint((128, 64, 8, 3), RESIDENT["FWD"], 128, 2) == (2 * 128 * (128 + 6 * 64), 64)
    assert not fits((128, 64, 8, 3), RESIDENT["FWD"], 256, 2)
    assert fits((128, 64, 8, 3), RESIDENT["FWD"], 256, 2, 128)
    # dK/dV: K, V resident, dK (d) + dV (dv) accumulators
    assert footprint((64, 64, 8, 2), RESIDENT["BWD_DKDV"], 256, 2, 128)[1] == 64 * 384 // 256
    # dQ: Q (d) and dO (dv) resident, one accumulator of width d
    assert footprint((128, 64, 8, 2), RESIDENT["BWD_DQ"], 256, 2, 128) == (
        2 * (128 * 384 + 2 * 64 * 384), 128 * 256 // 256)
    for name, entries in CANDIDATES.items():  # a narrower value head dim never fits fewer configs
        for d in (64, 128, 256, 512):
            wide = {e for e in entries if fits(e, RESIDENT[name], d, 2)}
            assert wide <= {e for e in entries if fits(e, RESIDENT[name], d, 2, d // 2)}


def test_launcher_keys_the_config_by_both_head_dims(monkeypatch):
    """Launcher.choose reads the d256v128 entry for d = 192, dv = 128, and
    info describes the same config."""
    from flashattn_triton import cli
    from flashattn_triton.kernels import launch
    from flashattn_triton.kernels.bwd import _launch_dkdv, _launch_dq
    from flashattn_triton.kernels.fwd import _launch_fwd
    key = launch.table_key
    mla = {"FWD": (128, 64, 8, 3), "BWD_DKDV": (64, 64, 8, 3), "BWD_DQ": (128, 64, 8, 2)}
    table = {key(name, torch.bfloat16, 256, True, 4096, "", 128): e for name, e in mla.items()}
    table.update({key(name, torch.bfloat16, 256, True, 4096): (32, 32, 4, 2) if name == "FWD" else (16, 16, 4, 2)
                  for name in mla})
    monkeypatch.setattr(launch, "load_table", lambda arch: table)
    monkeypatch.setattr(launch, "_arch", lambda index: "sm90")
    for launcher in (_launch_fwd, _launch_dkdv, _launch_dq):
        cfg = launcher.choose.__wrapped__(launcher, 0, torch.bfloat16, 256, True, 4096, "", 128)
        entry = (cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"], cfg.num_warps, cfg.num_stages)
        assert entry == mla[launcher.name]
        described, source = cli.portable_config(launcher, "sm90", torch.bfloat16, 256, True, 4096, "", 128)
        assert described == cli._fmt_entry(entry)
        assert source == f"tuned table sm90.json, key {launcher.name}|bfloat16|d256v128|causal|n4096"
        cfg = launcher.choose.__wrapped__(launcher, 0, torch.bfloat16, 256, True, 4096, "", 256)
        assert cfg.kwargs["BLOCK_M"] == (32 if launcher.name == "FWD" else 16)


def test_kernels_pass_both_padded_head_dims(device, monkeypatch):
    """The forward and backward launches key their configs by (d_pad, dv_pad)."""
    import flashattn_triton as fat
    from flashattn_triton.kernels import bwd, fwd
    seen = []
    for launcher in (fwd._launch_fwd, bwd._launch_dkdv, bwd._launch_dq):
        def spy(device_, dtype, d_pad, causal, bucket, tag="", dv_pad=None, _l=launcher,
                _config=type(launcher).config.__get__(launcher)):
            seen.append((_l.name, d_pad, dv_pad, causal, tag))
            return _config(device_, dtype, d_pad, causal, bucket, tag, dv_pad)
        monkeypatch.setattr(launcher, "config", spy)
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "portable")
    q, k, v = make_qkv(1, 37, 37, 2, 1, 48, torch.float16, device, d_v=16)
    fat.flash_attn_func(q, k, v, causal=True).sum().backward()
    assert {s[0] for s in seen} == {"FWD", "BWD_DKDV", "BWD_DQ"}
    assert all(s[1:] == (64, 16, True, "") for s in seen), seen


# ---------------------------------------------------------------------------
# GPUs with less shared memory than Hopper's 227 KiB
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm80", "sm89", "sm90"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_chosen_configs_fit_the_gpus_budget(arch, dtype):
    """On a GPU of each arch the launchers choose entries whose modelled
    shared memory fits that GPU's budget (99 KiB on sm_89, 163 KiB on sm_80):
    the H200's first choices (e.g. the dK/dV kernel's (64, 128, 8, 3) at d = 128,
    132 KiB compiled for sm_89) do not load there."""
    from flashattn_triton.kernels import launch
    from flashattn_triton.kernels.bwd import _launch_dkdv, _launch_dq, _launch_one
    from flashattn_triton.kernels.fwd import _launch_fwd
    budget = launch.arch_budget(arch)
    assert budget == launch.SMEM_LIMIT_BY_ARCH[arch] - launch.SMEM_SCRATCH
    for d_pad, dv_pad in [(32, 32), (64, 64), (128, 128), (256, 128), (256, 256), (512, 512)]:
        dv = None if dv_pad == d_pad else dv_pad
        for launcher in (_launch_fwd, _launch_dkdv, _launch_dq):
            entry = launcher.entry_for(arch, budget, dtype, d_pad, True, 4096, "", dv)
            smem, _ = launch.footprint(entry, launcher.resident, d_pad, dtype.itemsize, dv)
            assert smem <= budget or entry == launcher.candidates[-1], (arch, launcher.name, d_pad, entry, smem)
        parts = [launch.make_config(p.entry_for(arch, budget, dtype, d_pad, True, 4096, "", dv))
                 for p in _launch_one.parts]
        pair = _launch_one.combine(*parts, d_pad, dtype.itemsize, dv, budget)
        assert _launch_one.entry_fits(pair, d_pad, dtype.itemsize, dv, budget) or pair[-1] == 1, (arch, d_pad, pair)
    if arch == "sm89":  # the H200's choice is not taken where it does not fit
        assert _launch_dkdv.entry_for(arch, budget, torch.bfloat16, 128, True, 4096) != \
            _launch_dkdv.entry_for("sm90", launch.arch_budget("sm90"), torch.bfloat16, 128, True, 4096)


@pytest.mark.parametrize("arch", ["sm80", "sm89", "sm90"])
def test_decode_plans_fit_the_gpus_budget(monkeypatch, arch):
    """Decode plans on GPUs with less shared memory: the batch-1 variants
    measured on the H200 (5 pipeline stages: 137 KiB at d = 128; two programs
    per SM) are taken only where they fit, 64-row tiles at d = 256 get fewer
    rows per tile on 99 KiB GPUs, and every plan's modelled footprint fits.
    The H200's plans are unchanged (sm90)."""
    from flashattn_triton.kernels import decode, launch
    budget = launch.arch_budget(arch)
    monkeypatch.setattr(decode, "device_smem_budget", lambda device: budget)
    monkeypatch.setattr(decode, "sm_count", lambda device: 132)
    meta = torch.device("meta")
    for batch, rows, d, dtype, cap, page in [(1, 4, 128, torch.bfloat16, 8192, 0), (1, 4, 128, torch.bfloat16, 65536, 16),
                                             (1, 64, 256, torch.bfloat16, 4096, 0), (8, 4, 64, torch.float16, 4096, 0),
                                             (1, 32, 128, torch.float32, 4096, 0), (2, 16, 256, torch.float32, 4096, 0)]:
        plan = decode.decode_plan(batch, rows, 8, d, cap, dtype, meta, 0, page)
        elem = dtype.itemsize
        assert decode.decode_smem(plan.config, d, elem) <= budget, (arch, batch, rows, d, dtype, plan.config)
        if (batch, rows, d, dtype) == (1, 4, 128, torch.bfloat16) and page == 0:
            # 5 stages (deep) where its 137 KiB fit, else the plain 3 (71 KiB)
            assert plan.config.num_stages == (3 if arch == "sm89" else 5), (arch, plan.config)
        if (rows, d) == (64, 256):
            assert plan.config.BLOCK_M == {"sm90": 64, "sm80": 32, "sm89": 16}[arch], \
                (arch, plan.config)


def test_smaller_config_sequence_shrinks_to_the_smallest_tiles():
    """What a launch tries when the GPU refuses a config for shared memory:
    stages down to two, then the widest tile halved (each step smaller in the
    model), down to 16-wide tiles at one stage, then nothing."""
    import triton
    from flashattn_triton.kernels.launch import RESIDENT, footprint, smaller_config
    cfg = triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=4)
    seen = []
    while cfg is not None:
        seen.append((cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"], cfg.num_warps, cfg.num_stages))
        cfg = smaller_config(cfg)
    assert seen == [(128, 64, 8, 4), (128, 64, 8, 3), (128, 64, 8, 2), (64, 64, 8, 2), (32, 64, 8, 2),
                    (32, 32, 8, 2), (16, 32, 8, 2), (16, 16, 8, 2), (16, 16, 8, 1)]
    smem = [footprint(e, RESIDENT["FWD"], 128, 2)[0] for e in seen]
    assert all(a > b for a, b in zip(smem, smem[1:])), smem
    # the one-launch backward's four tiles and the other kernels' extra meta-parameters
    pair = triton.Config({"BLOCK_M1": 32, "BLOCK_N1": 128, "BLOCK_M2": 128, "BLOCK_N2": 32, "X": 3},
                         num_warps=4, num_stages=2)
    nxt = smaller_config(pair)
    assert nxt.kwargs == {"BLOCK_M1": 32, "BLOCK_N1": 64, "BLOCK_M2": 128, "BLOCK_N2": 32, "X": 3}
    assert (nxt.num_warps, nxt.num_stages) == (4, 2)


def test_launch_takes_a_smaller_config_when_the_gpu_refuses_one(monkeypatch):
    """A config the GPU will not load (OutOfResources at the first launch,
    before the kernel runs) is replaced by the first smaller one that loads,
    with one warning; later launches go straight to it.  Simulated: a launch
    "loads" only configs whose modelled footprint fits 99 KiB."""
    import triton
    from triton.runtime.errors import OutOfResources
    from flashattn_triton.kernels.fwd import _launch_fwd
    from flashattn_triton.kernels.launch import RESIDENT, footprint
    big = triton.Config({"BLOCK_M": 128, "BLOCK_N": 128}, num_warps=8, num_stages=4)
    launched = []

    def fake_launch(cfg, grid, args, kwargs):
        entry = (cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"], cfg.num_warps, cfg.num_stages)
        launched.append(entry)
        smem = footprint(entry, RESIDENT["FWD"], 128, 2)[0]
        if smem > 99 * 1024:
            raise OutOfResources(smem, 99 * 1024, "shared memory")
        return entry

    monkeypatch.setattr(_launch_fwd, "_launch", fake_launch)
    monkeypatch.setattr(_launch_fwd, "config", lambda device, *key: big)
    monkeypatch.setattr(_launch_fwd, "_smaller", {})
    x = torch.empty(1)
    with pytest.warns(RuntimeWarning, match=r"FWD config BLOCK_M=128,BLOCK_N=128,num_warps=8,num_stages=4 needs "
                                            r"more shared memory.*using BLOCK_M=64,BLOCK_N=64,"):
        assert _launch_fwd(None, (), x) == (64, 64, 8, 2)
    assert launched == [(128, 128, 8, 4), (128, 128, 8, 3), (128, 128, 8, 2), (64, 128, 8, 2), (64, 64, 8, 2)]
    launched.clear()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _launch_fwd(None, (), x) == (64, 64, 8, 2)
    assert launched == [(64, 64, 8, 2)]

    def refuse_all(cfg, grid, args, kwargs):
        raise OutOfResources(10**6, 1, "shared memory")
    monkeypatch.setattr(_launch_fwd, "_launch", refuse_all)
    monkeypatch.setattr(_launch_fwd, "_smaller", {})
    with pytest.raises(OutOfResources):
        _launch_fwd(None, (), x)


def test_a_config_too_large_for_the_gpu_falls_back_and_computes(device, monkeypatch):
    """On the GPU: a forced forward config far over the shared-memory limit
    (128 x 128 tiles, 4 stages at d = 256: ~450 KiB modelled) launches a
    smaller one with a warning, and the result is exact."""
    if device.type != "cuda":
        pytest.skip("shared-memory limits apply to compiled kernels only")
    monkeypatch.setenv("FLASHATTN_TRITON_BACKEND", "portable")
    monkeypatch.setenv("FLASHATTN_TRITON_CONFIG_FWD", "BLOCK_M=128,BLOCK_N=128,num_warps=8,num_stages=4")
    q, k, v = make_qkv(1, 300, 300, 2, 2, 256, torch.bfloat16, device, requires_grad=False)
    with pytest.warns(RuntimeWarning, match="needs more shared memory"):
        check_against_reference(q, k, v, causal=True)


def test_switches_accept_only_0_and_1(monkeypatch):
    """The on/off variables take 0 / 1 (spaces ignored) or nothing; any other
    value is a ValueError naming the variable (before, "true" / "on" turned
    some switches off and others on, and "false" left some on)."""
    from flashattn_triton import _dispatch, _prefetch
    from flashattn_triton.kernels import launch
    assert [launch.parse_switch("X", v) for v in (None, "", " ", "0", " 1 ")] == [None, None, None, False, True]
    for bad in ("true", "on", "2", "yes"):
        with pytest.raises(ValueError, match=f"X='{bad}': must be 0 \\(off\\) or 1 \\(on\\), or unset"):
            launch.parse_switch("X", bad)
    calls = [("FLASHATTN_TRITON_AUTOTUNE", launch.autotune_enabled),
             ("FLASHATTN_TRITON_HOPPER_MASK", lambda: _dispatch._switch("FLASHATTN_TRITON_HOPPER_MASK", "1")),
             ("FLASHATTN_TRITON_PREFETCH_BWD", _prefetch.enabled)]
    for name, call in calls:
        monkeypatch.setenv(name, "true")
        with pytest.raises(ValueError, match=f"{name}='true'"):
            call()
        monkeypatch.setenv(name, " 1")
        call()
        monkeypatch.delenv(name)
    assert launch.autotune_enabled() is False and _dispatch._switch("FLASHATTN_TRITON_HOPPER_MASK", "1")


@pytest.mark.parametrize("name,value,module", [
    ("FLASHATTN_TRITON_FAST_LAUNCH", "off", "flashattn_triton"),
    ("FLASHATTN_TRITON_BWD_ONE_LAUNCH", "true", "flashattn_triton.kernels.bwd"),
])
def test_switches_read_at_import(name, value, module):
    """Switches read when their module is imported say what is wrong there."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, **{name: value})
    run = subprocess.run([sys.executable, "-c", f"import {module}"], env=env, capture_output=True, text=True)
    assert run.returncode != 0 and f"ValueError: {name}='{value}'" in run.stderr, run.stderr[-500:]
