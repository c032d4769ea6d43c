#!/usr/bin/env bash
# Queued by session 56 (sessions 55-56 ran on H100s only; every H200 start was refused or not given).
# On the H200 (prefer it; split into calls of at most 600 s):
#  1. The packed Hopper forward and backward (on by default since sessions 55 / 56) on an H200:
#     test_hopper_varlen.py, the packed tests, bench_varlen at d = 128 and d = 64.
#  2. The H200 tables still owed (the H100 ones are in results/h100/session55/): bench_variants,
#     bench_decode.
# Commit everything under results/h200/session57/ with the environment.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
gpu_tests hvarlen 200 -n 8 tests/test_hopper_varlen.py tests/test_varlen.py tests/test_varlen_paged.py
for d in 128 64; do
  timeout -k 5 100 python3 benchmarks/bench_varlen.py --batches 2 --head-dim $d --out "$R/varlen_d$d" \
    > "$R/varlen_d$d.log" 2>&1
  echo "rc=$?" >> "$R/varlen_d$d.log"; el "varlen d$d"
  sed -n '/^| seed/,/^$/p' "$R/varlen_d$d/bench_varlen.md" | grep -v -e '^|---' -e '^| seed' | cut -d'|' -f2-9
done
# (second call)
# timeout -k 5 200 python3 benchmarks/bench_variants.py --skip-sweep --rep 30 --out "$R/bench" > "$R/bench_variants.log" 2>&1
# timeout -k 5 130 python3 benchmarks/bench_decode.py --out "$R/decode" --max-seconds 90 > "$R/bench_decode.log" 2>&1
tar -C "$OUT" -czf "$OUT/results.tgz" r
