#!/usr/bin/env bash
# dK / dV by TMA stores at d = 256 (TMA_DKV on the SPLIT_D step: both consumers' 64 x 128 tiles in the
# one ring slot; an override since session 36), on one H200, about 3 minutes. Why: the d = 256 build
# writes dK / dV as 256 16-bit stores per thread in 128 branch regions (compile_check --sass
# store_report), as d = 64 / 128 did before TMA_DKV gained them 1.02-1.15x; d = 256 programs hold 64
# keys, so each spreads that epilogue over half the work of a d = 128 one.
#   1. GPU tests: tests/test_hopper_bwd.py -k "tma_dkv and 256" (every reference case, a GQA group
#      split of three, dropout).
#   2. hopper_bwd_probe.py, two repeats, d = 256 rows at B*N = 16k, H = 8 (B, N): (8, 2k), (4, 4k),
#      (2, 8k), causal and not; a causal GQA row (2, 8, 2, 4096); variants default, TMA_DKV=1.
# Rule, fixed before the run, per causal flag over its 3 MHA rows: every test of step 1 passed, every
# check "ok", each row's best-of-two ratio >= 0.99, geometric mean >= 1.02: TMA_DKV_DEFAULT[256][causal]
# = True. Otherwise nothing changes. The GQA row is reported.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_tma_dkv256.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-150} tests/test_hopper_bwd.py -k "tma_dkv and 256" -n 4
ROWS="8,8,8,2048,256,1;4,8,8,4096,256,1;2,8,8,8192,256,1;8,8,8,2048,256,0;4,8,8,4096,256,0;2,8,8,8192,256,0"
ROWS="$ROWS;2,8,2,4096,256,1"
probe_reps ${T_PROBE:-120} --head-dims none --gqa "$ROWS" --variants "default,TMA_DKV=1" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import reps_rule_verdict
for causal in (1, 0):
    print(f"== d=256 causal={causal}")
    reps_rule_verdict(sys.argv[1], {"TMA_DKV=1": f"TMA_DKV_DEFAULT[256][{causal}] = True"}, 3, 0.99, 1.02,
                      "tests.log", select=lambda r, c=causal: bool(r["causal"]) == bool(c) and r["hq"] == r["hkv"])
print("== the GQA row (reported)")
reps_rule_verdict(sys.argv[1], {"TMA_DKV=1": "(reported)"}, 1, 0.0, 0.0, None, select=lambda r: r["hq"] != r["hkv"])
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
