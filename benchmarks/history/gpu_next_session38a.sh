#!/usr/bin/env bash
# The next session's first call (one H200, about 7 minutes): what issue 8's "done when" still needs
# after session 37's sweeps (every bf16 / fp16 backward row >= FA2 and Flex, >= 0.93x cuDNN at
# d = 64 / 128 from 2k, in session37/call4-5):
#   1. the fp16 sweep again with its causal GQA 32/8 rows, which bench_attention.py's --full sweep
#      now has in every dtype (before session 37 only in bf16, so no fp16 GQA row was ever timed):
#      gpu_next_flex_all.sh with DTYPE=fp16;
#   2. what deterministic=True costs today: gpu_next_det_cost.sh.
# Results $OUT/flex_all_fp16.tgz, $OUT/det_cost.tgz.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session38a.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
DTYPE=fp16 TAIL=45 run_each flex_all_fp16:gpu_next_flex_all det_cost:gpu_next_det_cost
