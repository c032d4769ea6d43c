#!/usr/bin/env bash
# The 128-row step of the d = 192 / dv = 128 Hopper backward (Q_HALVES, kernels/hopper/bwd.py
# _attn_bwd_step_qk1_halves; built and compiled in session 34, never run), on one H200, about 4
# minutes. Why: session 34's counters put the d = 192 gap (0.69-0.74x cuDNN causal) in the wgmmas:
# 2.1x cuDNN's instruction count, 32 of 44 per consumer at N = 32 from shared memory; Q_HALVES gives
# each consumer its own 64 query rows over all 64 keys (S, dP at N = 64), dV / dK by columns over both
# halves, dQ of its rows from dS in registers: 56 wgmmas per 64 queries instead of 88 (compile facts,
# Triton 3.6: 222,720 B of shared memory; 96-116 B spilled with one P^T / dS^T buffer and two
# staging buffers, 32 B with two and one).
#   1. GPU tests: tests/test_hopper_bwd.py -k "split_qk" (the Q_HALVES variants among them: both
#      candidates, the group split, persistent; causal both alignments and not, against float64).
#   2. hopper_bwd_probe.py, two repeats (probe_reps), the 5 rows of gpu_next_dq_stage.sh; variants
#      default, QH1 = Q_HALVES=1+BLOCK_M=128+NUM_STAGES=1+DS_BUFS=1+DQ_CHUNK=64+DQ_STAGE_BUFS=2,
#      QH2 = Q_HALVES=1+BLOCK_M=128+NUM_STAGES=1+DS_BUFS=2+DQ_CHUNK=64+DQ_STAGE_BUFS=1; cuDNN beside.
# Rule, fixed before the run (rules.reps_rule_verdict): a candidate passes with every test of step 1
# passing, all 5 rows in both repeats, every check "ok", no row below 0.99 and a geometric mean
# >= 1.03; the passing one with the highest mean replaces CONFIGS[192]'s tile entries. Otherwise
# nothing changes.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_q_halves.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-240} tests/test_hopper_bwd.py -k "split_qk" -n 4
QH1="Q_HALVES=1+BLOCK_M=128+NUM_STAGES=1+DS_BUFS=1+DQ_CHUNK=64+DQ_STAGE_BUFS=2"
QH2="Q_HALVES=1+BLOCK_M=128+NUM_STAGES=1+DS_BUFS=2+DQ_CHUNK=64+DQ_STAGE_BUFS=1"
ROWS="8,16,16,2048,192,1;4,16,16,4096,192,1;2,16,16,8192,192,1;2,16,4,4096,192,1;4,16,16,4096,192,0"
probe_reps ${T_PROBE:-150} --head-dims none --gqa "$ROWS" --variants "default,$QH1,$QH2" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" "$QH1" "$QH2" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import reps_rule_verdict
reps_rule_verdict(sys.argv[1], {c: f"CONFIGS[192] takes {c}" for c in sys.argv[2:]}, 5, 0.99, 1.03, "tests.log")
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
