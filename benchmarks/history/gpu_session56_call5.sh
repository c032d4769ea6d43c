#!/usr/bin/env bash
# Session 56 call 5: the packed table with the session's defaults (the Hopper forward and backward
# on packed batches, the d = 64 bounds), every provider, at d = 128 and d = 64; on an H200 also the
# packed Hopper tests and the H200 tables session 55 queued (bench_variants, bench_decode).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
h200=0; grep -q H200 "$R/env.txt" && h200=1
[ $h200 = 1 ] && gpu_tests hvarlen 200 -n 8 tests/test_hopper_varlen.py
for d in 128 64; do
  timeout -k 5 100 python3 benchmarks/bench_varlen.py --batches 2 --head-dim $d --out "$R/varlen_d$d" \
    > "$R/varlen_d$d.log" 2>&1
  echo "rc=$?" >> "$R/varlen_d$d.log"; el "varlen d$d"
  sed -n '/^| seed/,/^$/p' "$R/varlen_d$d/bench_varlen.md" | grep -v -e '^|---' -e '^| seed' | cut -d'|' -f2-9
done
if [ $h200 = 1 ]; then
  timeout -k 5 200 python3 benchmarks/bench_variants.py --skip-sweep --rep 30 --out "$R/bench" > "$R/bench_variants.log" 2>&1
  echo "rc=$?" >> "$R/bench_variants.log"; el bench_variants
  timeout -k 5 130 python3 benchmarks/bench_decode.py --out "$R/decode" --max-seconds 90 > "$R/bench_decode.log" 2>&1
  echo "rc=$?" >> "$R/bench_decode.log"; el bench_decode
fi
tar -C "$OUT" -czf "$OUT/results.tgz" r
