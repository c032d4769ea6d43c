#!/usr/bin/env bash
# Session 33's first call (one H200, about 4-9 minutes):
# 1. gpu_next_decode_spread.sh: the deciding run of decoding variant "spread" under the rule in
#    its header (identical-plan rows as noise gauges, rules.decode_spread_verdict gauges=True);
#    its results in $OUT/spread.tgz, its verdict in $OUT/spread_verdict.txt.
# 2. gpu_next_decode_longpages.sh: the deciding run of decoding variant "longpages" (batch 1,
#    caches from 64k keys in 16-token pages; rule in its header): $OUT/longpages.tgz,
#    $OUT/longpages_verdict.txt.
# 3. If either is adopted: bench_decode.py, the issue 11 table (B = 1, 8, 64; 1k-128k;
#    contiguous and 16 / 256-token pages; SDPA flash and cuDNN, Flex at 8k / 64k) with
#    FLASHATTN_TRITON_DECODE_VARIANT=default plus the adopted ones, i.e. the plans of the new
#    DEFAULT_VARIANTS, for results/h200/decode/ once the default moves ($OUT/decode.tgz).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
run_each spread:gpu_next_decode_spread longpages:gpu_next_decode_longpages
V=default
grep -q "spread: adopt" "$OUT/spread_verdict.txt" 2>/dev/null && V="$V,spread"
grep -q "longpages: adopt" "$OUT/longpages_verdict.txt" 2>/dev/null && V="$V,longpages"
if [ "$V" != default ]; then
  # (As run in session 33 call 1 this timed the old defaults: bench_decode.py set the variable from
  # its --variants, default "default"; it now refuses an outside value. Kept as it ran.)
  FLASHATTN_TRITON_DECODE_VARIANT=$V timeout -k 5 ${T_TABLE:-330} python3 benchmarks/bench_decode.py \
    --max-seconds 300 --out "$R/decode" > "$R/decode.log" 2>&1
  echo "rc=$? variants=$V" >> "$R/decode.log"; el decode; tail -40 "$R/decode/bench_decode.md" 2>/dev/null | head -40
  tar -C "$R" -czf "$OUT/decode.tgz" decode decode.log env.txt
fi
