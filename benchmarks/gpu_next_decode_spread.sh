#!/usr/bin/env bash
# Decoding at large batch (session 32): variant "spread" (kernels/decode.py spread_splits).
# Session 32 call 2's sweep: B = 64 (512 programs, unsplit) read 3830 / 3861 GB/s at 8k / 32k,
# with 4 splits 4296 / 4512.  Calls 3 and 4 timed two earlier forms (call3_verdict.txt,
# call4_verdict.txt): B = 64 gained 1.08-1.17x from 4k both times; the batches that
# choose_num_splits already splits (48, 72, 112) or leaves at 2.6 waves (128) did not.
# The form timed here (call 5) acts only on launches choose_num_splits leaves unsplit while
# they make 1-3 waves of 3 resident programs per SM with a last wave at most half full, and
# only when 5 waves of >= 8 key tiles per split fit: among the rows below B = 56 at 4k
# (5 splits) and B = 64 at 4k / 16k (4 splits); every other row keeps its plan.
# 1. GPU tests: test_kvcache.py -k "spread or large_batch or plan_variants" ($R/tests.log).
# 2. Timing: bench_decode.py, B = 48, 56, 64, 72, 96, 128 at N = 1k, 4k, 16k, contiguous, Hq 32 /
#    Hkv 8, d 128, bf16, 30 replays a point, variants default and spread in two processes with
#    the order reversed (SDPA cuDNN beside them in the first).
# Rule, fixed before the run (benchmarks/rules.py decode_spread_verdict with gain_rows): "spread"
# joins DEFAULT_VARIANTS if the tests pass and, in both processes, its GB/s over the default's
# on the same row is >= 1.03 on the three changed rows and >= 0.98 on every other row, every
# spot check run.  Then B = 64 on 16-token pages (exploratory). One H200, about 2 minutes.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
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
print(decode_spread_verdict(reps, gain_rows={(56, 4096), (64, 4096), (64, 16384)}))
PY
grep -E "passed|failed|rc=" "$R/tests.log" | tail -2
tar -C "$OUT" -czf "$OUT/results.tgz" r
