"""Every launch config the autotuner may pick computes the same function.

Launch configs are GPU settings (under the interpreter every kernel runs its
small interpreter config), so these tests run only with
FLASHATTN_TRITON_TEST_DEVICE=cuda.  They are small and not marked ``gpu``,
so they run in the parallel part of benchmarks/run_gpu.sh.
"""

import pytest
import torch

from flashattn_triton.kernels.bwd import _launch_dkdv, _launch_dq
from flashattn_triton.kernels.fwd import _launch_fwd
from _utils import make_qkv
from test_attention import check_against_reference


def _all_launch_configs():
    for launcher in (_launch_fwd, _launch_dkdv, _launch_dq):
        for c in launcher.configs:
            cfg = (f"BLOCK_M={c.kwargs['BLOCK_M']},BLOCK_N={c.kwargs['BLOCK_N']},"
                   f"num_warps={c.num_warps},num_stages={c.num_stages}")
            yield pytest.param(launcher.name, cfg, id=f"{launcher.name}-{cfg}")


@pytest.mark.parametrize("kernel,cfg", list(_all_launch_configs()))
def test_every_autotune_config(device, monkeypatch, kernel, cfg):
    if device.type != "cuda":
        pytest.skip("launch configs apply to compiled kernels only")
    monkeypatch.setenv("FLASHATTN_TRITON_CONFIG_" + kernel, cfg)
    q, k, v = make_qkv(2, 300, 517, 4, 2, 64, torch.bfloat16, device, requires_grad=False)
    check_against_reference(q, k, v, causal=True)
