#!/usr/bin/env bash
# dK / dV by TMA stores on the d = 192 / dv = 128 backward (TMA_DKV on the split Q K^T step, an
# override; the 128-row Q_HALVES default), on one H200, about 3 minutes. Why: issue 10's d = 192
# row reads 0.82x SDPA (session 39 call 3), and the same stores bought 1.02-1.17x kernel-only at
# d = 256 (session 37), whose 64-key blocks have as short a loop per store. Each consumer's dK
# (two chunks: 64 columns of the first, 32 of the second) and dV (64 columns) of all 64 keys are
# staged in the free Q / Q1 / dO rings and written by three descriptors (dk_desc, dk1_desc,
# dv_desc) instead of gl.store's element by element. Compile facts (compile_check --hopper-bwd
# --d 192:128 --sass, Triton 3.6): SASS full 4456 -> 4080, causal 4680 -> 4304; spills 96 -> 80 /
# 116 -> 104 B, local accesses in the GEMM loops 21 -> 10 / 17 -> 9; shared memory unchanged.
#   1. GPU tests: tests/test_hopper_bwd.py -k "tma_dkv_matches_reference and d192 or split_qk_variants
#      and TMA_DKV" (every reference case against float64 on NaN-poisoned outputs; the 128-row and
#      64-row steps, the group split's 16-bit partials).
#   2. hopper_bwd_probe.py, two repeats, the 5 rows of gpu_next_q_halves.sh; variants default,
#      TMA_DKV=1; cuDNN beside.
# Rule, fixed before the run (rules.reps_rule_verdict): every test of step 1 passes, all 5 rows in
# both repeats, every check "ok", no row below 0.99 and a geometric mean >= 1.03: then
# TMA_DKV_DEFAULT[192] = (True, True). Otherwise nothing changes.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_tma_dkv192.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-150} tests/test_hopper_bwd.py \
  -k "tma_dkv_matches_reference and d192 or split_qk_variants and TMA_DKV" -n 8
ROWS="8,16,16,2048,192,1;4,16,16,4096,192,1;2,16,16,8192,192,1;2,16,4,4096,192,1;4,16,16,4096,192,0"
probe_reps ${T_PROBE:-100} --head-dims none --gqa "$ROWS" --variants "default,TMA_DKV=1" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import reps_rule_verdict
reps_rule_verdict(sys.argv[1], {"TMA_DKV=1": "TMA_DKV_DEFAULT[192] = (True, True)"}, 5, 0.99, 1.03, "tests.log")
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
