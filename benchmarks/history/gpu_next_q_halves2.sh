#!/usr/bin/env bash
# 32-column dQ pieces on the d = 192 / dv = 128 backward's 128-row step (Q_HALVES, CONFIGS[192] since
# session 35), on one H200, about 2-3 minutes. Why: the default stages three 64-column pieces per
# tile and consumer, spills 96-116 B (17-21 local accesses in its GEMM loops) and has one P^T / dS^T
# buffer; with 32-column pieces (six: 16 registers each, 8 KB staging buffers) the same 222,256 B
# of shared memory hold two P^T / dS^T buffers and two staging buffers (QA: spill 24-32 B, 0-1 in
# the loops) or one and four staging buffers (QB: 36-40 B, 0-1), at twice the reduce-adds.
#   1. GPU tests: tests/test_hopper_bwd.py -k "split_qk_variants and halves and DQ_CHUNK" (both, the group
#      split and persistent, against float64).
#   2. hopper_bwd_probe.py, two repeats, the 5 rows of gpu_next_q_halves.sh; variants default,
#      QA = DQ_CHUNK=32+DS_BUFS=2, QB = DQ_CHUNK=32+DQ_STAGE_BUFS=4; cuDNN beside.
# Rule, fixed before the run (rules.reps_rule_verdict): a candidate passes with every test of step 1
# passing, all 5 rows in both repeats, every check "ok", no row below 0.99 and a geometric mean
# >= 1.03; the passing one with the highest mean replaces CONFIGS[192]'s DQ_CHUNK / DS_BUFS /
# DQ_STAGE_BUFS. Otherwise nothing changes.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_q_halves2.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-120} tests/test_hopper_bwd.py -k "split_qk_variants and halves and DQ_CHUNK" -n 4
QA="DQ_CHUNK=32+DS_BUFS=2"
QB="DQ_CHUNK=32+DQ_STAGE_BUFS=4"
ROWS="8,16,16,2048,192,1;4,16,16,4096,192,1;2,16,16,8192,192,1;2,16,4,4096,192,1;4,16,16,4096,192,0"
probe_reps ${T_PROBE:-100} --head-dims none --gqa "$ROWS" --variants "default,$QA,$QB" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" "$QA" "$QB" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import reps_rule_verdict
reps_rule_verdict(sys.argv[1], {c: f"CONFIGS[192] takes {c}" for c in sys.argv[2:]}, 5, 0.99, 1.03, "tests.log")
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
