#!/usr/bin/env bash
# RAN in session 67 as call 1 (H100, tree 57fd327): results/h100/session67/call1/; 262 passed; solo stays.
# Queued by session 66 (one GPU, about 5 minutes; meant for an H200, where issue 11's table lives;
# on an H100 it retakes session 66's call 14). OUT=$OUT bash benchmarks/history/gpu_next_session67.sh;
# commit $R/decode/ as results/<gpu>/decode/ with the environment (the H200's replaces session 33's).
# 1. tests/test_kvcache.py + tests/test_kvcache_chunk.py on the GPU at the defaults: $R/kvcache.log.
# 2. bench_decode.py's issue 11 table at session 66's defaults (variant "solo" at batch 5-16 on
#    contiguous caches; the spot checks after every timing): $R/decode/.
# 3. "solo" on this GPU: batch 5, 8, 12, 16, contiguous, 1k-32k, the defaults without it against
#    the defaults, two repeats, the order reversed in the second. It was adopted on an H100
#    (session 66: 1.003-1.12x, geomean 1.055). Rule, fixed before the run: if any re-planned row
#    reads < 0.97x in both repeats, or the geomean is < 1.00, "solo" leaves DEFAULT_VARIANTS.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
decode_tests_and_table
BASE=deep+fill+pdl+reserve+spread+longpages
order_reps solo 120 "$BASE" default --batches 5,8,12,16 --layouts contiguous --peers sdpa_cudnn \
  --seqlens 1024,2048,4096,8192,16384,32768 --copy-gb 0.25
python3 - "$R" "$BASE" <<'PY' | tee "$R/solo_verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
import rules
r, base = sys.argv[1:]
out, met = rules.decode_replan_reps(r, "solo", "default", base, row_min=0.97, geo_min=1.00)
print(out)
print("verdict:", "solo stays" if met else "solo leaves DEFAULT_VARIANTS")
PY
# 4. The paged columns' order effect with the checks after every timing: batch 8 and 16, 4k-16k,
#    16- and 256-token pages, where "solo" does not act, so both variants time the same plan; the
#    order reversed in the second repeat. Session 66 saw up to 15 % between the two (calls 12-13).
order_reps order 90 "$BASE" default --batches 8,16 --layouts paged16,paged256 --peers "" \
  --seqlens 4096,8192,16384 --copy-gb 0.25
python3 - "$R" "$BASE" <<'PY' | tee "$R/order.txt"
import json, sys
r, base_name = sys.argv[1:]
for rep in (1, 2):
    try:
        rows = json.load(open(f"{r}/order_rep{rep}/bench_decode.json"))["rows"]
    except OSError as e:
        print("missing", e); continue
    g = {(x.get("variant"), x["layout"], x["batch"], x["seqlen"]): x["gbps"] for x in rows if "gbps" in x}
    ratios = [g[("default",) + k[1:]] / v for k, v in g.items() if k[0] == base_name and ("default",) + k[1:] in g]
    print(f"rep{rep}: same plan, default / base {min(ratios):.3f}-{max(ratios):.3f} over {len(ratios)} rows")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
