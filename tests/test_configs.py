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
    """The committed table only names configs the kernels are tested with."""
    table = load_table("sm90")
    assert table, "flashattn_triton/kernels/configs/sm90.json is missing or empty"
    for key, entry in table.items():
        kernel = key.split("|")[0]
        assert tuple(entry) in [tuple(c) for c in CANDIDATES[kernel]], f"{key}: {entry} not a candidate"


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
