#!/usr/bin/env bash
# The d = 192 / dv = 128 backward's 128-row step (CONFIGS[192], Q_HALVES=1) with each consumer's
# column products over its own half of the rows issued before the P^T / dS^T exchange wait
# (OWN_FIRST=1, an override; also with the late 'free' arrival of Q_HALVES=2), on one H200, about
# 4-5 minutes.
# Why: the row reads 0.86x SDPA (session 40 call 3); session 36's warp-state samples put 2.9 % of
# the main kernel's samples on that wait (bwd.py `mbarrier.wait(ds_ready...)`, long scoreboard),
# and the consumer's three own-half wgmmas (dV, dK, dK1 over 64 rows) can run under it: a consumer
# arrives on ds_ready after a bar.sync of its warpgroup, so its own half is visible to its wgmmas.
# Session 36's forms of the exchange itself (hardware barriers, the late arrival: Q_HALVES = 2-4)
# read 0.984-1.004 geomean; this one changes what runs during the wait, not the wait.
# Compile facts (compile_check --hopper-bwd --d 192:128 --sass --hopper-variants
# default,OWN_FIRST=1,Q_HALVES=2+OWN_FIRST=1, Triton 3.6): default full / causal 4080 / 4304
# instructions, spill 80 / 104 B, gemm loops 725:0 615:0 720:8 632:2 (full); OWN_FIRST 4096 / 4312-4320,
# 76 / 100 B, 733:0 615:0 726:6 632:2; with Q_HALVES=2 4072 / 4280, 36 / 40 B, 734:0 616:0 714:0
# 631:0. SASS order of an OWN_FIRST step: STSM (P^T / dS^T), fence, bar.sync, ds_ready arrive, bar.sync, three HGMMA
# (own half), the ds_ready poll, three HGMMA (other half), the first dQ piece.
#   1. GPU tests: tests/test_hopper_bwd.py -k "split_qk_variants and OWN_FIRST or own_first_keys_as_m"
#      (float64 reference, NaN-poisoned outputs; group split, persistent, two P^T / dS^T buffers; and
#      the same switch on the keys-as-M step of d = 64 / 128, dQ's product over this consumer's keys
#      before the dS^T exchange wait, which the dropout candidates of gpu_next_dropout_inplace.sh use).
#   2. hopper_bwd_probe.py, two repeats, the 5 rows of gpu_next_q_halves.sh; variants default,
#      OWN_FIRST=1, Q_HALVES=2+OWN_FIRST=1; cuDNN beside.
# Rule, fixed before the run (rules.reps_rule_verdict): a candidate passes with every test of step 1
# passing, all 5 rows in both repeats, every check "ok", no row below 0.99 and a geometric mean
# >= 1.02; the passing one with the highest mean goes into CONFIGS[192] (OWN_FIRST=True, with
# Q_HALVES=2 for the second).
# Otherwise nothing changes.
#
#     OUT=/tmp/out bash benchmarks/gpu_next_own_first.sh
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
gpu_tests tests ${T_TESTS:-200} tests/test_hopper_bwd.py -k "split_qk_variants and OWN_FIRST or own_first_keys_as_m" -n 4
ROWS="8,16,16,2048,192,1;4,16,16,4096,192,1;2,16,16,8192,192,1;2,16,4,4096,192,1;4,16,16,4096,192,0"
probe_reps ${T_PROBE:-100} --head-dims none --gqa "$ROWS" --variants "default,OWN_FIRST=1,Q_HALVES=2+OWN_FIRST=1" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import reps_rule_verdict
reps_rule_verdict(sys.argv[1], {c: f"CONFIGS[192] takes {c}" for c in ("OWN_FIRST=1", "Q_HALVES=2+OWN_FIRST=1")},
                  5, 0.99, 1.02,
                  "tests.log")
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
