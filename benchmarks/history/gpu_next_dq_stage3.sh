#!/usr/bin/env bash
# The d = 192 / dv = 128 Hopper backward after its three dQ staging buffers (session 34 call 2):
# a third ring stage where it now fits, and Nsight Compute on the variant table's d = 192 row, on
# one H200, about 6 minutes. Why: a third stage (215 KB with one staging buffer) read 0.99x in
# session 24, when every dQ piece waited on the one staging buffer; with those waits gone the ring
# may be what the consumers wait for. Three stages fit (231,472 B of 232,448) with two staging
# buffers, or with three and one P^T / dS^T buffer (32 B spilled, none in the GEMM loops).
#   1. GPU tests: tests/test_hopper_bwd.py -k "split_qk" (the candidates among the variants).
#   2. hopper_bwd_probe.py, two repeats (probe_reps), the 5 rows of gpu_next_dq_stage.sh; variants
#      default, NUM_STAGES=3+DQ_STAGE_BUFS=2, NUM_STAGES=3+DS_BUFS=1; cuDNN beside.
#   3. ncu_cases.py on bwd:d192:4096:causal (ours and SDPA's kernels of one backward), summary.md.
# Rule, fixed before the run (rules.best_of_reps_rule, as gpu_next_dq_stage.sh): a candidate passes
# with every test of step 1 passing, all 5 rows in both repeats, every check "ok", no row below 0.99
# and a geometric mean >= 1.03; the passing one with the highest mean replaces CONFIGS[192]'s
# NUM_STAGES / DQ_STAGE_BUFS / DS_BUFS. Otherwise nothing changes.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_dq_stage3.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-240} tests/test_hopper_bwd.py -k "split_qk" -n 4
ROWS="8,16,16,2048,192,1;4,16,16,4096,192,1;2,16,16,8192,192,1;2,16,4,4096,192,1;4,16,16,4096,192,0"
probe_reps ${T_PROBE:-150} --head-dims none --gqa "$ROWS" \
  --variants "default,NUM_STAGES=3+DQ_STAGE_BUFS=2,NUM_STAGES=3+DS_BUFS=1" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import reps_rule_verdict
reps_rule_verdict(sys.argv[1], {c: f"CONFIGS[192] takes {c}" for c in ("NUM_STAGES=3+DQ_STAGE_BUFS=2",
                                                                     "NUM_STAGES=3+DS_BUFS=1")},
                  5, 0.99, 1.03, "tests.log")
PY
mkdir -p "$OUT/ncu"
OUT="$OUT/ncu" ROWS="bwd:d192:4096:causal" T_ROW=${T_ROW:-120} BUDGET=${BUDGET:-180} \
  timeout -k 5 230 bash benchmarks/gpu_ncu_variants.sh > "$R/ncu.log" 2>&1
echo "rc=$?" >> "$R/ncu.log"; el ncu
cp "$OUT/ncu/summary.md" "$R/ncu_summary.md" 2>/dev/null
head -30 "$R/ncu_summary.md" 2>/dev/null | cut -c1-250
tar czf "$OUT/results.tgz" -C "$OUT" r
