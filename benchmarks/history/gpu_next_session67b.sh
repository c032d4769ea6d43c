#!/usr/bin/env bash
# RAN in session 67 as call 2 (H100, tree 6ddd21d): results/h100/session67/call2/; rule met, longtiles joined the defaults.
# Session 67: candidate decode variant "longtiles" (128-key tiles over 3 stages at the small
# batch from 32k keys, contiguous caches; kernels/decode.py). One GPU, about 4 minutes.
# OUT=$OUT bash benchmarks/history/gpu_next_session67b.sh
# 1. Its GPU tests (test_gpu_longtiles: batch 1 and 4 at 32k against float64) and the plan test:
#    $R/tests.log.
# 2. Batch 1, 2 and 4, contiguous, 16k-128k, the defaults against default+longtiles, two
#    repeats with the order reversed in the second; cuDNN beside them for context. 16k rows
#    keep their plan: gauges of the timing noise.
#    Rule, fixed before the run (rules.decode_replan): every re-planned row >= 0.99 in
#    some repeat, the geomean of the re-planned rows >= 1.01, the spot checks passed, and the
#    tests passed. Met: "longtiles" joins DEFAULT_VARIANTS.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-150} tests/test_kvcache.py -k "longtiles or plan_variants"
order_reps longtiles ${T_REP:-150} default default+longtiles --batches 1,2,4 --layouts contiguous \
  --peers sdpa_cudnn --seqlens 16384,32768,65536,131072 --copy-gb 0.25
python3 - "$R" <<'PY' | tee "$R/verdict.txt" "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
import rules
r = sys.argv[1]
reps = rules.load_reps([f"{r}/longtiles_rep{i}/bench_decode.json" for i in (1, 2)], key=None)
out, met = rules.decode_replan(reps, "default+longtiles", "default", row_min=0.99, geo_min=1.01)
print(out)
for i, p in enumerate(reps, 1):
    rows = {(x.get("variant"), x["provider"], x["batch"], x["seqlen"]): x["gbps"] for x in p["rows"] if "gbps" in x}
    for (v, prov, b, n), g in sorted(rows.items(), key=str):
        if prov != "flashattn_triton":
            ours = rows.get(("default+longtiles", "flashattn_triton", b, n))
            print(f"repeat {i} B={b} N={n}: {prov} {g:.0f} GB/s, longtiles {ours or 0:.0f} ({(ours or 0) / g:.3f}x)")
tests_ok = rules.tests_passed(f"{r}/tests.log")
met = met and tests_ok
print("tests passed" if tests_ok else "tests FAILED or cut")
print("verdict:", "longtiles joins DEFAULT_VARIANTS" if met else "longtiles stays a candidate")
PY
# 3. Exploration, no decision: batch 1 from 32k, tiles around "longtiles" (more / fewer warps,
#    256-key tiles), two repeats: $R/tiles_rep1, $R/tiles_rep2.
for rep in 1 2; do
  timeout -k 5 ${T_TILES:-90} python3 benchmarks/bench_decode.py --batches 1 --layouts contiguous --peers "" \
    --seqlens 32768,65536,131072 --copy-gb 0.25 --variants default+longtiles --configs \
    ";num_warps=8;num_warps=2;BLOCK_N=256,num_stages=2;BLOCK_N=128,num_stages=3,num_warps=2" \
    --out "$R/tiles_rep$rep" > "$R/tiles_rep$rep.log" 2>&1
  echo "rc=$?" >> "$R/tiles_rep$rep.log"; el "tiles_rep$rep"
done
python3 - "$R" <<'PY' | tee "$R/tiles.txt"
import json, sys
for rep in (1, 2):
    try:
        rows = json.load(open(f"{sys.argv[1]}/tiles_rep{rep}/bench_decode.json"))["rows"]
    except (OSError, ValueError) as e:
        print("missing", e); continue
    base = {x["seqlen"]: x["gbps"] for x in rows if "gbps" in x and not x.get("config")}
    for x in rows:
        if "gbps" in x and x.get("config"):
            print(f"rep{rep} N={x['seqlen']:6d} {x['config']:40s} {x['launch']} {x['gbps'] / base[x['seqlen']]:.3f}")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r
