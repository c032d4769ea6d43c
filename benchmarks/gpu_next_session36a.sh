#!/usr/bin/env bash
# The next session's first call (one H200, about 8 minutes), two runs prepared in session 35, each
# under the rule in its own header:
# 1. gpu_next_q_halves_late.sh: two forms of the d = 192 step's P^T / dS^T exchange (Q_HALVES=2 / 3;
#    $OUT/q_halves_late.tgz, $OUT/q_halves_late_verdict.txt);
# 2. gpu_next_gqa_unsplit_heads_first.sh: heads-first order for unsplit causal GQA backward calls at
#    d = 64 / 128 ($OUT/unsplit_hf.tgz, $OUT/unsplit_hf_verdict.txt).
#
#     OUT=/tmp/out bash benchmarks/gpu_next_session36a.sh
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
run_each q_halves_late:gpu_next_q_halves_late unsplit_hf:gpu_next_gqa_unsplit_heads_first
