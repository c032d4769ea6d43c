#!/usr/bin/env bash
# Decoding at large batch: variant "spread" (kernels/decode.py spread_splits, the third form:
# only launches choose_num_splits leaves unsplit although the batch alone makes 1-3 waves of 3
# resident programs per SM with a last wave at most half full, and only when 5 waves of >= 8
# key tiles per split fit; among the rows below B = 56 at 4k (5 splits) and B = 64 at 4k / 16k
# (4 splits) change, every other row keeps its plan).
# History (results/h200/session32/README.md): call 2's sweep, B = 64 (512 programs, unsplit)
# 3830 / 3861 GB/s at 8k / 32k, 4 splits 4296 / 4512; calls 3-5 timed three forms; the changed
# B = 64 rows gained 1.08-1.17x from 4k in all six processes, B = 56 4k 1.124x in both of call 5.
# Call 5 missed its rule only on two rows whose plans were identical (the same launch both
# ways: B = 48 / 56 at 1k, 0.969 / 0.961 in one process), a floor that measured noise.
# 1. GPU tests: test_kvcache.py -k "spread or large_batch or plan_variants" ($R/tests.log).
# 2. Timing: bench_decode.py, B = 48, 56, 64, 72, 96, 128 at N = 1k, 4k, 16k, contiguous, Hq 32 /
#    Hkv 8, d 128, bf16, 30 replays a point, variants default and spread in two processes with
#    the order reversed (SDPA cuDNN beside them in the first).
# Rule for session 33, fixed at the end of session 32 after call 5 (rules.py
# decode_spread_verdict with gauges=True): "spread" joins DEFAULT_VARIANTS if the tests pass,
# every spot check ran and, in both processes, every row whose two plans differ (split count
# or launch config, from the JSON) reads >= 1.03x the default, while every row with the same
# plan both ways (a gauge of the noise) lies within 0.94-1.06x (else no decision).
# Then B = 64 on 16-token pages (exploratory). One H200, about 2 minutes.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-150} -n 4 tests/test_kvcache.py -k "spread or large_batch or plan_variants"
for i in 1 2; do
  vs="default,spread"; peers="sdpa_cudnn"; [ $i = 2 ] && vs="spread,default" && peers=""
  timeout -k 5 ${T_BENCH:-110} python3 benchmarks/bench_decode.py --batches 48,56,64,72,96,128 \
    --seqlens 1024,4096,16384 --layouts contiguous --peers "$peers" --variants "$vs" \
    --copy-gb 1 --reps 30 --max-seconds ${STOP:-95} --out "$R/rep$i" > "$R/rep$i.log" 2>&1
  echo "rc=$?" >> "$R/rep$i.log"; el "rep$i"
done
# Paged caches (exploratory, not in the rule): B = 64 on 16-token pages, both variants.
timeout -k 5 ${T_PAGED:-60} python3 benchmarks/bench_decode.py --batches 64 --seqlens 4096,16384 \
  --layouts paged16 --peers "" --variants default,spread --copy-gb 1 --max-seconds 45 --out "$R/paged" \
  > "$R/paged.log" 2>&1
echo "rc=$?" >> "$R/paged.log"; el paged; grep -E "B= *64" "$R/paged.log" | head -8
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import json, sys
sys.path.insert(0, "benchmarks")
from rules import decode_spread_verdict
reps = [json.load(open(f"{sys.argv[1]}/rep{i}/bench_decode.json")) for i in (1, 2)]
print(decode_spread_verdict(reps, gauges=True))
PY
grep -E "passed|failed|rc=" "$R/tests.log" | tail -2
tar -C "$OUT" -czf "$OUT/results.tgz" r
