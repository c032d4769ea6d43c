#!/usr/bin/env bash
# The d = 192 / dv = 128 backward's 128-row step with its P^T / dS^T 'free' arrival moved after the
# first dQ piece's reduce-add (Q_HALVES=2; CONFIGS[192] has Q_HALVES=1 since session 35), on one H200,
# about 3 minutes. Why: the arrival's place changes ptxas' register allocation of the step: spill 96-116 B
# with 17-21 local accesses in the GEMM loops (default) -> 36-40 B with 0-1 (Q_HALVES=2), for one more
# bar.sync per tile (12-13 against 11-12); Triton 3.6, compile_check --sass. Session 35's profile has
# the main kernel stalled on long-scoreboard events 33 % of the time (spill reloads among them).
#   1. GPU tests: tests/test_hopper_bwd.py -k "split_qk_variants and halves and Q_HALVES" (Q_HALVES=2,
#      with the group split and persistent, causal both alignments and not, against float64).
#   2. hopper_bwd_probe.py, two repeats, the 5 rows of gpu_next_q_halves.sh; variants default,
#      Q_HALVES=2; cuDNN beside.
# Rule, fixed before the run (rules.reps_rule_verdict): Q_HALVES=2 passes with every test of step 1
# passing, all 5 rows in both repeats, every check "ok", no row below 0.99 and a geometric mean
# >= 1.02: then CONFIGS[192] takes Q_HALVES=2. Otherwise nothing changes.
#
#     OUT=/tmp/out bash benchmarks/gpu_next_q_halves_late.sh
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
gpu_tests tests ${T_TESTS:-120} tests/test_hopper_bwd.py -k "split_qk_variants and halves and Q_HALVES" -n 4
ROWS="8,16,16,2048,192,1;4,16,16,4096,192,1;2,16,16,8192,192,1;2,16,4,4096,192,1;4,16,16,4096,192,0"
probe_reps ${T_PROBE:-100} --head-dims none --gqa "$ROWS" --variants "default,Q_HALVES=2" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import reps_rule_verdict
reps_rule_verdict(sys.argv[1], {"Q_HALVES=2": "CONFIGS[192] takes Q_HALVES=2"}, 5, 0.99, 1.02, "tests.log")
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
