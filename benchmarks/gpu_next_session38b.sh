#!/usr/bin/env bash
# The next session's second call (one H200, about 8 minutes), issue 10's dropout row (0.89x SDPA in
# session 37's table: dropout adds 0.32 ms to our backward, 0.17 ms to SDPA's, at B 2, N 4k,
# Hq 16 / Hkv 4, d 128, causal):
#   1. gpu_next_dropout_early.sh: the draws before each step's products (DROPOUT_SHARED_CALLS = 2,
#      an override; fewer spills in the d = 128 GEMM loops), GPU tests and the deciding timing,
#      rule in its header;
#   2. gpu_ncu_source.sh on the dropout row and its plain twin (ours and SDPA's backward kernels):
#      which lines hold the extra samples. A record for docs/performance.md; no rule.
# Results $OUT/dropout_early.tgz (+ _verdict.txt), $OUT/ncu_dropout.tgz.
#
#     OUT=/tmp/out bash benchmarks/gpu_next_session38b.sh
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
TAIL=40 run_each dropout_early:gpu_next_dropout_early
ROWS="bwd:dropout:4096:causal bwd:plain:4096:causal" TAIL=60 run_each ncu_dropout:gpu_ncu_source
