#!/usr/bin/env bash
# Slices-first grid order (SLICES_FIRST, kernels/hopper/bwd.py; an override) for causal GQA backward
# calls whose group is split across programs, on one H200, about 3 minutes. Why: heads-first order
# (the S slices of a key block together, and every head's first key block early) gained 1.05-1.08x on
# d = 128 causal GQA rows from 4k keys and is the default there since session 34, but lost at 2k
# (0.97x) and at d = 192 2k / 8k; slices first keeps the S programs of a key block together (they
# read the same K / V) and also a slice's key blocks together (they read the same Q / dO), in the
# default order's place.
#   1. GPU tests: tests/test_hopper_bwd.py -k "group_split_variants or heads_first".
#   2. hopper_bwd_probe.py, two repeats (probe_reps), causal GQA rows (B, Hq, Hkv, N, d):
#      d = 128 (4,16,4,2048), (8,16,4,2048), (8,32,8,2048), (2,16,4,4096), (1,16,4,8192), (2,32,8,4096);
#      d = 192 (4,16,4,2048), (2,16,4,4096); d = 64 (4,32,8,2048), (2,32,8,4096); variants default (heads
#      first from 4k at d = 128), SLICES_FIRST=1, HEADS_FIRST=0 (the order of before), cuDNN beside.
# Rule, fixed before the run: over the d = 128 rows with rule S > 1 (at least 4), best of two repeats,
# SLICES_FIRST=1 / default >= 0.99 on every row, geometric mean >= 1.03, every check "ok", every test
# of step 1 passed: d = 128 causal calls with S > 1 take SLICES_FIRST (instead of heads first from 4k).
# Otherwise nothing changes. The d = 64 / 192 rows are reported only.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_slices_first.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-150} tests/test_hopper_bwd.py -k "group_split_variants or heads_first" -n 4
ROWS="4,16,4,2048,128,1;8,16,4,2048,128,1;8,32,8,2048,128,1;2,16,4,4096,128,1;1,16,4,8192,128,1"
ROWS="$ROWS;2,32,8,4096,128,1;4,16,4,2048,192,1;2,16,4,4096,192,1;4,32,8,2048,64,1;2,32,8,4096,64,1"
probe_reps ${T_PROBE:-180} --head-dims none --gqa "$ROWS" --variants "default,SLICES_FIRST=1,HEADS_FIRST=0" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import json_rows, reps_rule_verdict, best_of_reps_rule
d128 = lambda row: row["d"] == 128 and (row.get("rule_split") or 1) > 1  # noqa: E731
n = len([r for r in json_rows(f"{sys.argv[1]}/rep1/hopper_bwd_probe.json") if d128(r)])
print(f"{n} d = 128 rows with S > 1")
reps_rule_verdict(sys.argv[1], {"SLICES_FIRST=1": "d = 128 causal calls with S > 1 take SLICES_FIRST"},
                  max(n, 4), 0.99, 1.03, "tests.log", select=d128)
print("-- every row (reported)")
reps = [json_rows(f"{sys.argv[1]}/rep{i}/hopper_bwd_probe.json") for i in (1, 2)]
best_of_reps_rule(reps, {"SLICES_FIRST=1": "SLICES_FIRST=1", "HEADS_FIRST=0": "HEADS_FIRST=0"}, len(reps[0]), 0, 0)
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
