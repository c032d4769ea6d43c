#!/usr/bin/env bash
# The next session's first call (one H200, about 7-8 minutes), the two Hopper-backward runs that
# session 34 prepared but had no device time left for, each under the rule in its own header:
# 1. gpu_next_q_halves.sh: the d = 192 / dv = 128 128-row step (Q_HALVES), GPU tests then timing
#    ($OUT/q_halves.tgz, $OUT/q_halves_verdict.txt);
# 2. gpu_next_slices_first.sh: slices-first grid order for split causal GQA calls
#    ($OUT/slices_first.tgz, $OUT/slices_first_verdict.txt).
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session35a.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
run_each q_halves:gpu_next_q_halves slices_first:gpu_next_slices_first
