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
