#!/usr/bin/env bash
# Heads-first grid order on the d = 192 / dv = 128 backward's 128-row step (the default since session
# 35) for split causal GQA calls, and (reported only) on unsplit causal GQA calls at d = 64, on one
# H200, about 4-5 minutes. Why: on the 64-row step heads first read 1.09-1.11x on d = 192 GQA rows at
# 4k (session 34), slices first 1.10x (session 35 call 1); an unsplit d = 64 GQA row (S = 1) read
# 1.089x heads first (session 35 call 2).
#   1. GPU tests: tests/test_hopper_bwd.py -k "split_qk_variants and HEADS_FIRST" (the 128-row step
#      heads first against float64).
#   2. hopper_bwd_probe.py, two repeats (probe_reps), causal GQA rows (B, Hq, Hkv, N, d):
#      d = 192: (2,16,4,4096), (1,16,4,8192), (2,32,8,4096), (2,16,2,4096), (1,32,8,8192), (4,16,4,2048);
#      d = 64: (4,32,8,4096), (8,32,8,2048), (2,32,8,8192); variants default, HEADS_FIRST=1.
# Rule, fixed before the run: over the d = 192 rows with rule S > 1 and N >= 4096 (at least 3), best
# of two repeats, HEADS_FIRST=1 / default >= 0.99 on every row, geometric mean >= 1.03, every check
# "ok", and every test of step 1 passed: HEADS_FIRST_GQA_SPLIT_MIN_N[192] = 4096. Otherwise nothing
# changes. The d = 64 rows and the 2k row are reported only.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session35d.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-70} tests/test_hopper_bwd.py -k "split_qk_variants and HEADS_FIRST" -n 4
ROWS="2,16,4,4096,192,1;1,16,4,8192,192,1;2,32,8,4096,192,1;2,16,2,4096,192,1;1,32,8,8192,192,1"
ROWS="$ROWS;4,16,4,2048,192,1;4,32,8,4096,64,1;8,32,8,2048,64,1;2,32,8,8192,64,1"
probe_reps ${T_PROBE:-100} --head-dims none --gqa "$ROWS" --variants "default,HEADS_FIRST=1" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import best_of_reps_rule, json_rows
tests_ok = open(f"{sys.argv[1]}/tests.log").read().rstrip().endswith("rc=0")
print("tests:", "passed" if tests_ok else "FAILED")
cand = {"HEADS_FIRST=1": "HEADS_FIRST=1"}
reps = [json_rows(f"{sys.argv[1]}/rep{i}/hopper_bwd_probe.json") for i in (1, 2)]
ruled = lambda r: r["d"] == 192 and (r.get("rule_split") or 1) > 1 and r["n"] >= 4096  # noqa: E731
sel = [[r for r in rep if ruled(r)] for rep in reps]
n = len(sel[0])
print(f"== d=192: {n} rows with S > 1 and N >= 4096")
best, _ = best_of_reps_rule(sel, cand, n, 0.99, 1.03) if n else (None, {})
print("RULE d=192: " + ("HEADS_FIRST_GQA_SPLIT_MIN_N[192] = 4096" if best and n >= 3 and tests_ok
                        else "nothing changes"))
rest = [[r for r in rep if not ruled(r)] for rep in reps]
if rest[0]:
    print("-- the other rows (reported)")
    best_of_reps_rule(rest, cand, len(rest[0]), 0.0, 0.0)
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
