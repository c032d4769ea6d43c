#!/usr/bin/env bash
# Heads-first grid order for causal GQA backward calls whose group is NOT split (S = 1), at d = 64 and
# d = 128 (HEADS_FIRST_GQA_UNSPLIT_MIN_N, empty until this run), on one H200, about 4-5 minutes.
# Why: session 35 call 6 read 1.090 / 1.054 / 1.087x heads first on three unsplit d = 64 rows
# (B, Hq 32, Hkv 8 at 4k / 2k / 8k), reported only; d = 128 unsplit rows were never timed heads first.
#   1. GPU tests: tests/test_hopper_bwd.py -k "heads_first" (HEADS_FIRST on every causal / GQA case
#      against float64, the plans).
#   2. hopper_bwd_probe.py, two repeats (probe_reps), causal GQA rows (B, Hq, Hkv, N) at d = 64 and
#      128: (4,32,8,4096), (8,32,8,2048), (2,32,8,8192), (8,32,8,4096), (4,32,8,8192), (16,16,4,2048),
#      (16,32,8,1024); and d = 64 MHA rows (4,32,32,4096), (8,16,16,2048) (reported); variants
#      default, HEADS_FIRST=1.
# Rule, fixed before the run, per d in (64, 128): over its GQA rows with rule S = 1 and N >= 2048 (at
# least 4), best of two repeats, HEADS_FIRST=1 / default >= 0.99 on every row, geometric mean >= 1.03,
# every check "ok", every test of step 1 passed: HEADS_FIRST_GQA_UNSPLIT_MIN_N[d] = 2048. Failing
# that, the same over its rows with N >= 4096 (at least 3): HEADS_FIRST_GQA_UNSPLIT_MIN_N[d] = 4096.
# Otherwise nothing changes. The 1k rows and MHA rows are reported only.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_gqa_unsplit_heads_first.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-150} tests/test_hopper_bwd.py -k "heads_first" -n 4
ROWS=""
for d in 64 128; do
  for r in 4,32,8,4096 8,32,8,2048 2,32,8,8192 8,32,8,4096 4,32,8,8192 16,16,4,2048 16,32,8,1024; do
    ROWS="$ROWS;$r,$d,1"
  done
done
ROWS="${ROWS#;};4,32,32,4096,64,1;8,16,16,2048,64,1"
probe_reps ${T_PROBE:-150} --head-dims none --gqa "$ROWS" --variants "default,HEADS_FIRST=1" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import best_of_reps_rule, json_rows, min_n_verdict, tests_passed
tests_ok = tests_passed(f"{sys.argv[1]}/tests.log")
print("tests:", "passed" if tests_ok else "FAILED")
reps = [json_rows(f"{sys.argv[1]}/rep{i}/hopper_bwd_probe.json") for i in (1, 2)]
unsplit_gqa = lambda r: r["hq"] != r["hkv"] and (r.get("rule_split") or 1) == 1  # noqa: E731
for d in (64, 128):
    print(f"== d={d}: unsplit causal GQA rows")
    min_n = min_n_verdict(reps, "HEADS_FIRST=1", lambda r, d=d: r["d"] == d and unsplit_gqa(r), tests_ok=tests_ok)
    print(f"RULE d={d}: " + (f"HEADS_FIRST_GQA_UNSPLIT_MIN_N[{d}] = {min_n}" if min_n else "nothing changes"))
rest = [[r for r in rep if not (unsplit_gqa(r) and r["n"] >= 2048)] for rep in reps]
if rest[0]:
    print("-- the other rows (reported)")
    best_of_reps_rule(rest, {"HEADS_FIRST=1": "HEADS_FIRST=1"}, len(rest[0]), 0.0, 0.0)
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
