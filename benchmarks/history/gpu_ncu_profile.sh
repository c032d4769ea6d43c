#!/usr/bin/env bash
# Session 12's Nsight Compute rows (its call 2: backward d = 128 N = 2k full and causal,
# forward d = 64 and d = 128 N = 2k causal; bf16), now as a case of gpu_ncu_short_rows.sh:
# ours and cuDNN on every row, every kernel of one call each (session 12 took one launch
# of our main kernel, and cuDNN's kernels on two rows only). About 3 minutes; the rule
# and the results are gpu_ncu_short_rows.sh's, over these four rows.
ROWS="bwd:128:2048:full bwd:128:2048:causal fwd:64:2048:causal fwd:128:2048:causal" EXTRA_ROWS="" \
  exec bash "$(dirname "${BASH_SOURCE[0]}")/../gpu_ncu_short_rows.sh"
