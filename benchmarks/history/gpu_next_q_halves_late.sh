#!/usr/bin/env bash
# Three forms of the d = 192 / dv = 128 backward's 128-row step's P^T / dS^T exchange (CONFIGS[192] has
# Q_HALVES=1 since session 35), on one H200, about 6-7 minutes. Session 35's profile has the main
# kernel stalled on long-scoreboard events 33 % and on barriers 31 % of the time.
#   Q_HALVES=2: the 'free' arrival after the first dQ piece's reduce-add; ptxas then spills 36-40 B
#     with 0-1 local accesses in the GEMM loops instead of 96-116 B with 17-21, for one more bar.sync
#     per tile (12-13 against 11-12; Triton 3.6, compile_check --sass).
#   Q_HALVES=3: the exchange through hardware barriers (a bar.sync on the other warpgroup's 'free'
#     barrier, one bar.sync of both after the writes): per tile two mbarrier arrivals and two polled
#     waits fewer (1 / 2 against 3 / 4), the same 11 bar.syncs, spill about as the default.
#   Q_HALVES=4: 3 with its 'free' bar.arrive where 2 puts its arrival: spill 36-40 B (0-1 local
#     accesses in the loops) and 1 / 2 arrivals / polled waits per tile.
#   1. GPU tests: tests/test_hopper_bwd.py -k "split_qk" (the default on every reference case and
#      each variant, Q_HALVES=2 / 3 / 4 with the group split and persistent among them, causal both
#      alignments and not, against float64; the default's build at this commit has the instruction
#      count, registers and spill of the one session 35's GPU tests ran, in another order).
#   2. hopper_bwd_probe.py, two repeats, the 5 rows of gpu_next_q_halves.sh; variants default,
#      Q_HALVES=2, Q_HALVES=3, Q_HALVES=4; cuDNN beside.
# Rule, fixed before the run (rules.reps_rule_verdict): a candidate passes with every test of step 1
# passing, all 5 rows in both repeats, every check "ok", no row below 0.99 and a geometric mean
# >= 1.02; the passing one with the highest mean goes into CONFIGS[192] (Q_HALVES=2, 3 or 4). Otherwise
# nothing changes.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_q_halves_late.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-300} tests/test_hopper_bwd.py -k "split_qk" -n 4
ROWS="8,16,16,2048,192,1;4,16,16,4096,192,1;2,16,16,8192,192,1;2,16,4,4096,192,1;4,16,16,4096,192,0"
probe_reps ${T_PROBE:-120} --head-dims none --gqa "$ROWS" --variants "default,Q_HALVES=2,Q_HALVES=3,Q_HALVES=4" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import reps_rule_verdict
reps_rule_verdict(sys.argv[1], {c: f"CONFIGS[192] takes {c}" for c in ("Q_HALVES=2", "Q_HALVES=3", "Q_HALVES=4")}, 5, 0.99, 1.02,
                  "tests.log")
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
