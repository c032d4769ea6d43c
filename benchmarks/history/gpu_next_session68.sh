#!/usr/bin/env bash
# RAN in session 68 as call 1 (H100, tree 6692bfe): results/h100/session68/call1/, the table in results/h100/decode/; 269 passed; longtiles stays (9 rows, geomean 1.019); solopages met (46 rows, geomean 1.041) and joined the defaults.
# Queued by session 67 (one GPU, about 5 minutes; meant for an H200, where issue 11's table lives;
# on an H100 it retakes session 67's call 3). OUT=$OUT bash benchmarks/gpu_next_session68.sh;
# commit $R/decode/ as results/<gpu>/decode/ with the environment (the H200's replaces session 33's).
# 1. tests/test_kvcache.py + tests/test_kvcache_chunk.py on the GPU at the defaults: $R/kvcache.log.
# 2. (run last) bench_decode.py's issue 11 table at session 67's defaults ("longtiles" at batch 1-4 from 32k
#    keys; the copy_same_bytes gauge beside the peers): $R/decode/.
# 3. "longtiles" on this GPU: batch 1, 2, 4, contiguous, 16k-128k, the defaults without it against
#    the defaults, two repeats in both orders. It was adopted on an H100 (session 67: 1.006-1.125x,
#    geomean 1.020). Rule, fixed before the run: if any re-planned row reads < 0.97x in both
#    repeats, or the geomean is < 1.00, "longtiles" leaves DEFAULT_VARIANTS.
# 4. Candidate "solopages" (solo on pages of 256+ tokens): batch 5, 8, 12, 16, 256- and
#    1024-token pages, 1k-32k, the defaults against default+solopages, two repeats in both
#    orders. Rule, fixed before the run: every re-planned row >= 0.99x in some repeat, their
#    geomean >= 1.02, spot checks and the decode tests passed. Met: it joins DEFAULT_VARIANTS.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
decode_tests
BASE=deep+fill+pdl+reserve+spread+longpages+solo
order_reps longtiles ${T_REP:-120} "$BASE" default --batches 1,2,4 --layouts contiguous --peers sdpa_cudnn \
  --seqlens 16384,32768,65536,131072 --copy-gb 0.25 --no-copy-gauge
order_reps solopages ${T_REP:-120} default default+solopages --batches 5,8,12,16 --layouts paged256,paged1024 \
  --peers "" --seqlens 1024,2048,4096,8192,16384,32768 --copy-gb 0.25 --no-copy-gauge
python3 - "$R" "$BASE" <<'PY' | tee "$R/verdict.txt" "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
import rules
r, base = sys.argv[1:]
text, met = rules.decode_replan_reps(r, "longtiles", "default", base, row_min=0.97, geo_min=1.00)
print(text, "\nverdict:", "longtiles stays" if met else "longtiles leaves DEFAULT_VARIANTS")
text, met = rules.decode_replan_reps(r, "solopages", "default+solopages", "default", row_min=0.99, geo_min=1.02,
                                     tests_log=f"{r}/kvcache.log")
print(text, "\nverdict:", "solopages joins DEFAULT_VARIANTS" if met else "solopages stays a candidate")
PY
decode_table  # last: steps 3-4 first, so that their verdicts come back if the call is cut
tar -C "$OUT" -czf "$OUT/results.tgz" r
