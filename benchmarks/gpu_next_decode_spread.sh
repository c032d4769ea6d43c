#!/usr/bin/env bash
# Decoding at large batch (session 32): variant "spread" (kernels/decode.py spread_splits:
# once the batch alone gives two programs per SM, split anyway into >= 5 waves of 3 resident
# programs per SM, >= 8 key tiles a split).  Session 32 call 2's sweep: B = 64 (512 programs,
# unsplit) read 3830 / 3861 GB/s at 8k / 32k, with 4 splits 4296 / 4512.
# 1. GPU tests: test_kvcache.py -k "spread or large_batch or plan_variants" ($R/tests.log).
# 2. Timing: bench_decode.py, B = 16, 48, 64, 128 at N = 1k, 4k, 16k, contiguous, Hq 32 / Hkv 8,
#    d 128, bf16, variants default and spread in two processes with the order reversed (SDPA
#    cuDNN beside them in the first).
# Rule, fixed before the run (benchmarks/rules.py decode_spread_verdict): "spread" joins
# DEFAULT_VARIANTS if the tests pass and, in both processes, its GB/s over the default's on
# the same row is >= 1.03 on every row with B >= 64 and N >= 4k and >= 0.98 on every other
# row (B = 16 is a guard: the variant leaves its plan alone), with every spot check run.
# Then B = 64 on 16-token pages (exploratory). One H200, about 5 minutes.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
gpu_tests tests ${T_TESTS:-150} -n 4 tests/test_kvcache.py -k "spread or large_batch or plan_variants"
for i in 1 2; do
  vs="default,spread"; peers="sdpa_cudnn"; [ $i = 2 ] && vs="spread,default" && peers=""
  timeout -k 5 ${T_BENCH:-110} python3 benchmarks/bench_decode.py --batches 16,48,64,128 \
    --seqlens 1024,4096,16384 --layouts contiguous --peers "$peers" --variants "$vs" \
    --copy-gb 1 --max-seconds ${STOP:-95} --out "$R/rep$i" > "$R/rep$i.log" 2>&1
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
print(decode_spread_verdict(reps))
PY
grep -E "passed|failed|rc=" "$R/tests.log" | tail -2
tar -C "$OUT" -czf "$OUT/results.tgz" r
