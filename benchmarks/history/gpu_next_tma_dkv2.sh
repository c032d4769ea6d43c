#!/usr/bin/env bash
# TMA_DKV for causal d = 128 calls up to a key length (TMA_DKV_CAUSAL_MAX_N[128], empty until this
# run), on one H200, about 3-4 minutes. Why: session 36 call 4 (gpu_next_tma_dkv.sh) read TMA_DKV /
# gl.store 1.147 / 1.049 / 0.984x on the causal d = 128 MHA rows at 2k / 4k / 8k (the class's rule not
# met for its 8k row), and 1.069x on a causal GQA row at 4k (S = 4).
#   1. GPU tests: tests/test_hopper_bwd.py -k "tma_dkv" (the TMA_DKV build on every reference case and
#      its variants; the plan test).
#   2. hopper_bwd_probe.py, two repeats, causal d = 128 rows (B, Hq, Hkv, N): (8,16,16,2048),
#      (4,16,16,4096), (2,16,4,4096), (16,16,4,2048), (3,16,16,6144), (2,16,16,8192), (1,16,16,16384);
#      variants default, TMA_DKV=1; cuDNN beside.
# Rule, fixed before the run: tiers 4096 then 2048 (the longest first); a tier passes when over its rows
# with N <= tier (all four rows with N <= 4096 for 4096, the two at 2048 for 2048) every check is "ok",
# every test of step 1 passed, each row's best-of-two ratio >= 0.99 and their geometric mean >= 1.02:
# TMA_DKV_CAUSAL_MAX_N[128] = that tier. The 6k / 8k / 16k rows are reported (a longer tier needs a
# rule of its own). Otherwise nothing changes.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_tma_dkv2.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-150} tests/test_hopper_bwd.py -k "tma_dkv" -n 4
ROWS="8,16,16,2048,128,1;4,16,16,4096,128,1;2,16,4,4096,128,1;16,16,4,2048,128,1;3,16,16,6144,128,1"
ROWS="$ROWS;2,16,16,8192,128,1;1,16,16,16384,128,1"
probe_reps ${T_PROBE:-150} --head-dims none --gqa "$ROWS" --variants "default,TMA_DKV=1" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import best_of_reps_rule, probe_run
tests_ok, reps = probe_run(sys.argv[1])
chosen = None
for tier, want in ((4096, 4), (2048, 2)):
    print(f"== rows with N <= {tier} (want {want})")
    sel = [[r for r in rep if r["n"] <= tier] for rep in reps]
    best, _ = best_of_reps_rule(sel, {"TMA_DKV=1": "TMA_DKV=1"}, want, 0.99, 1.02)
    if best and tests_ok:
        chosen = tier
        break
print("RULE: " + (f"TMA_DKV_CAUSAL_MAX_N[128] = {chosen}" if chosen else "nothing changes"))
print("== the longer rows (reported)")
best_of_reps_rule([[r for r in rep if r["n"] > 4096] for rep in reps], {"TMA_DKV=1": "TMA_DKV=1"}, 3, 0.0, 0.0)
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
