#!/usr/bin/env bash
# Session 36, call 3 (one H200, about 6-8 minutes): the GPU tests of the heads-first plans with
# d = 64's unsplit causal GQA table (HEADS_FIRST_GQA_UNSPLIT_MIN_N = {64: 2048}, adopted from
# call 2: test_gqa_unsplit_heads_first_default and every -k heads_first test), then
# gpu_ncu_source.sh (warp-state samples per SASS instruction on the d = 128 causal / full 2k
# and d = 192 backward rows).
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session36c.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-150} tests/test_hopper_bwd.py -k "heads_first" -n 4
cp "$R/tests.log" "$OUT/tests.log"
run_each ncu_source:gpu_ncu_source
cp /tmp/ncu_source/reps.tgz "$OUT/ncu_source_reps.tgz" 2>/dev/null
