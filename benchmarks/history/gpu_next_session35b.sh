#!/usr/bin/env bash
# The next session's second call (one H200, about 5-6 minutes), prepared in session 34:
# 1. gpu_next_gqa_heads_first2.sh: heads-first order for split causal GQA calls at d = 64 and with
#    dropout (rule in its header; $OUT/heads_first2.tgz, $OUT/heads_first2_verdict.txt);
# 2. gpu_next_decode_combine.sh: batch-1 decoding with a separate combine kernel (exploratory;
#    $OUT/combine.tgz).
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session35b.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
run_each heads_first2:gpu_next_gqa_heads_first2 combine:gpu_next_decode_combine
