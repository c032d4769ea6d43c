#!/usr/bin/env bash
# Session 37, an optional fourth call (one H200, about 4 minutes): gpu_ncu_source.sh (warp-state samples
# per SASS instruction) on the rows the backward profile did not cover: the forward rows still below
# cuDNN (bf16 d = 64 causal 2k, 0.85x in session 28's sweep; d = 128 full 2k) with cuDNN's kernel, and
# the backward at d = 128 N = 512 (the portable kernels, 0.92x FlexAttention) with Flex's, unless
# 37a moved that cell to the Hopper tier. A record for the next change (docs/performance.md).
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session37d.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
ROWS="fwd:64:2048:causal fwd:128:2048:full" KERNELS="regex:_attn_fwd|fprop" \
  TAIL=80 run_each ncu_fwd:gpu_ncu_source
ROWS="bwd:128:512:full" PROVIDERS=ours,flex KERNELS="regex:_bwd_dkdv|_bwd_dq|_attn_bwd_hopper|triton_tem|flex" \
  TAIL=80 run_each ncu_short:gpu_ncu_source
