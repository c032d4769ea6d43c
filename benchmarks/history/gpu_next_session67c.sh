#!/usr/bin/env bash
# RAN in session 67 as call 3 (H100, tree 0a6e49d): results/h100/session67/call3/, the table in results/h100/decode/; 269 passed; solopages NOT met (64-token pages at B = 8 / 16 from 8k keys 0.980-0.990 in both repeats).
# Session 67, after "longtiles" joined the defaults (gpu_next_session67b.sh's rule met on an H100).
# One GPU, about 5 minutes. OUT=$OUT bash benchmarks/history/gpu_next_session67c.sh; commit $R/decode/ as
# results/<gpu>/decode/.
# 1. The decode GPU tests (test_gpu_solopages_mid_batch among them) and bench_decode.py's issue 11
#    table at the new defaults: $R/kvcache.log, $R/decode/.
# 2. Candidate "solopages" ("solo" on pages of 64+ tokens): batch 5, 8, 12, 16, 64- and 256-token
#    pages, 1k-32k, the defaults against default+solopages, two repeats, the order reversed in
#    the second. Rule, fixed before the run (rules.decode_replan): every re-planned row
#    >= 0.99 in some repeat, their geomean >= 1.02, spot checks and tests passed. Met:
#    "solopages" joins DEFAULT_VARIANTS.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
decode_tests_and_table
order_reps solopages ${T_REP:-120} default default+solopages --batches 5,8,12,16 --layouts paged64,paged256 \
  --peers "" --seqlens 1024,2048,4096,8192,16384,32768 --copy-gb 0.25
python3 - "$R" <<'PY' | tee "$R/verdict.txt" "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
import rules
r = sys.argv[1]
out, met = rules.decode_replan_reps(r, "solopages", "default+solopages", "default", row_min=0.99, geo_min=1.02,
                                   tests_log=f"{r}/kvcache.log")
print(out)
print("verdict:", "solopages joins DEFAULT_VARIANTS" if met else "solopages stays a candidate")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
