#!/usr/bin/env bash
# dK / dV by TMA stores (TMA_DKV) in the keys-as-M Hopper backward (d = 64 / 128), on one H200,
# about 6-7 minutes. Why: session 36's warp-state sampling (gpu_ncu_source.sh, d = 128 N = 2k) put
# 9-12 % of the main kernel's samples on the two gl.store lines of dK / dV (89-91 % long-scoreboard
# waits); their build writes 16-bit elements one at a time, each behind a branch (256 STG.E.U16, 128
# BSSY / BRA pairs per thread). TMA_DKV stages them in the free (Q, dO) ring slots and writes them
# with TMA stores: 500-650 fewer SASS instructions per build (Triton 3.6, compile_check --sass).
#   1. GPU tests: tests/test_hopper_bwd.py -k "tma_dkv or matches_reference" (TMA_DKV on every
#      reference case and with the group split, NAMED_BAR 0 / 2, heads first, windows, dropout; the
#      default builds, whose instruction order moved with the source lines, on every case).
#   2. hopper_bwd_probe.py, two repeats, MHA rows at B*N = 16k, H = 2048 / d: d 64 and 128, N 2k / 4k
#      / 8k, causal and not; two causal GQA rows (reported); variants default, TMA_DKV=1; cuDNN beside.
# Rule, fixed before the run, per (d, causal) class (rules.reps_rule_verdict over its 3 rows): every
# test of step 1 passed, both repeats complete, every check "ok", TMA_DKV=1 / default >= 0.99 on each
# row (best of two repeats each), geometric mean >= 1.02: TMA_DKV_DEFAULT[d][causal] = True.
# Otherwise that class keeps gl.store.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_tma_dkv.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-300} tests/test_hopper_bwd.py -k "tma_dkv or matches_reference" -n 4
ROWS=""
for d in 64 128; do
  h=$((2048 / d))
  for c in 1 0; do
    for bn in 8,2048 4,4096 2,8192; do ROWS="$ROWS;${bn%,*},$h,$h,${bn#*,},$d,$c"; done
  done
done
ROWS="${ROWS#;};2,16,4,4096,128,1;4,32,8,4096,64,1"
probe_reps ${T_PROBE:-150} --head-dims none --gqa "$ROWS" --variants "default,TMA_DKV=1" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import reps_rule_verdict
for d in (64, 128):
    for causal in (1, 0):
        print(f"== d={d} causal={causal}")
        reps_rule_verdict(sys.argv[1], {"TMA_DKV=1": f"TMA_DKV_DEFAULT[{d}][{causal}] = True"}, 3, 0.99, 1.02,
                          "tests.log", select=lambda r, d=d, c=causal: (r["d"] == d and bool(r["causal"]) == bool(c)
                                                                       and r["hq"] == r["hkv"]))
print("== GQA rows (reported)")
reps_rule_verdict(sys.argv[1], {"TMA_DKV=1": "(reported)"}, 2, 0.0, 0.0, None, select=lambda r: r["hq"] != r["hkv"])
PY
tar czf "$OUT/results.tgz" -C "$OUT" r
