#!/usr/bin/env bash
# Slices-first grid order (SLICES_FIRST, an override) on the d = 192 / dv = 128 backward's causal GQA
# rows whose group is split across programs (GROUP_SPLIT 2, as the planner chooses for them), against
# the default order, on one H200, about 4-5 minutes. Why: the variant table's d = 192 row (B 2, N 4k,
# Hq 16 / Hkv 4, causal; 0.87x SDPA in session 43) is such a row; slices-first read 1.03 / 1.10x on
# two rows of the old 64-row step (session 35, not ruled on) and was never timed on the 128-row
# step; heads-first read 0.98-1.00x there (session 35 call 6). With SLICES_FIRST the S programs of a
# KV head's key block (the same K and V) are adjacent in the grid, then that head's next key block.
#   1. GPU tests: tests/test_hopper_bwd.py -k "split_qk_variants and SLICES_FIRST".
#   2. hopper_bwd_probe.py, two repeats, five causal GQA rows with GROUP_SPLIT 2 by the planner:
#      (B, Hq, Hkv, N) (2,16,4,4096) (4,16,4,2048) (1,16,4,8192) (4,16,2,4096) (1,16,2,16384);
#      variants default, SLICES_FIRST=1; cuDNN beside.
# Rule, fixed before the run (rules.reps_rule_verdict): SLICES_FIRST passes with the tests passing,
# all 5 rows in both repeats, every check "ok", no row below 0.99 and a geometric mean >= 1.02; then
# d = 192's causal calls with a split group take it by default (SLICES_FIRST_GQA_SPLIT_DIMS in
# kernels/hopper/bwd.py takes 192). Otherwise nothing changes.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_d192_slices.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-150} tests/test_hopper_bwd.py -k "split_qk_variants and SLICES_FIRST" -n 4
ROWS="2,16,4,4096,192,1;4,16,4,2048,192,1;1,16,4,8192,192,1;4,16,2,4096,192,1;1,16,2,16384,192,1"
probe_reps ${T_PROBE:-110} --head-dims none --gqa "$ROWS" --variants "default,SLICES_FIRST=1" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
reps_verdict 5 0.99 1.02 "SLICES_FIRST=1=>SLICES_FIRST_GQA_SPLIT_DIMS takes 192"
tar czf "$OUT/results.tgz" -C "$OUT" r
