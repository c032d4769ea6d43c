#!/usr/bin/env bash
# Two or three dQ staging buffers per consumer in the d = 192 / dv = 128 Hopper backward
# (kernels/hopper/bwd.py DQ_STAGE_BUFS, split Q K^T step), on one H200, about 4-5 minutes.
# Why: the variant table's d = 192 row reads 0.67x SDPA backward; session 29's profile of its
# main kernel (h200/session29/call3_ncu_variants/summary.md) has IPC 0.70 against cuDNN's 1.21
# with long-scoreboard stalls 41 % of the total; each consumer stages its three 32-column dQ
# pieces per tile in one buffer, waiting (tma.store_wait(0)) for the previous piece's reduce-add
# to have read it before writing the next, three times per tile. With B buffers used in turn
# the wait is for the reduce issued B pieces earlier (store_wait(B - 1)). Shared memory 173,568 ->
# 189,952 (B = 2) / 206,336 B (B = 3), no spill, loop +14 / +15 SASS instructions
# (compile_check --hopper-bwd --d 192:128 --sass --hopper-variants DQ_STAGE_BUFS=2,...).
#   1. GPU tests: tests/test_hopper_bwd.py -k "split_qk" (the reference cases at the default and
#      the variants, DQ_STAGE_BUFS = 2 / 3, with the persistent loop and the group split).
#   2. hopper_bwd_probe.py, two repeats in fresh processes (probe_reps), kernel-only backward
#      TFLOP/s with each variant's gradients checked against the default's: bf16, causal B*N = 16k
#      H = 16 at N 2k / 4k / 8k, the variant table's causal GQA row (B=2 Hq16 Hkv4 N=4k), and N = 4k
#      non-causal; variants default, DQ_STAGE_BUFS=2, DQ_STAGE_BUFS=3; cuDNN beside.
# Rule, fixed before the run (rules.best_of_reps_rule: per row a variant's faster repeat over
# default's faster repeat): a candidate passes with every test of step 1 passing, all 5 rows in
# both repeats, every check "ok", no row below 0.99 and a geometric mean >= 1.03; the passing one
# with the highest mean is adopted (CONFIGS[192]["DQ_STAGE_BUFS"] = B). Otherwise nothing changes.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_dq_stage.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-240} tests/test_hopper_bwd.py -k "split_qk" -n 4
ROWS="8,16,16,2048,192,1;4,16,16,4096,192,1;2,16,16,8192,192,1;2,16,4,4096,192,1;4,16,16,4096,192,0"
probe_reps ${T_PROBE:-150} --head-dims none --gqa "$ROWS" \
  --variants "default,DQ_STAGE_BUFS=2,DQ_STAGE_BUFS=3" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import reps_rule_verdict
reps_rule_verdict(sys.argv[1], {"DQ_STAGE_BUFS=2": 'CONFIGS[192]["DQ_STAGE_BUFS"] = 2',
                               "DQ_STAGE_BUFS=3": 'CONFIGS[192]["DQ_STAGE_BUFS"] = 3'}, 5, 0.99, 1.03, "tests.log")
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
