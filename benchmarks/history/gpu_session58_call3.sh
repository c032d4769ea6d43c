#!/usr/bin/env bash
# Session 58 call 3, after the queue (history/gpu_next_session57.sh): the chunked row with a
# shorter last chunk (N 5000 = 4 x 1024 + 904, the packed form) and whole chunks (N 5120)
# against FlexAttention's block mask, now with session 57's offsets cache; two repeats.
# (Run inline as one command line in the session; this is that line as a script.)
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
for s in 0 1; do
  timeout -k 5 120 python3 benchmarks/bench_variants.py --only chunked --shapes "2,5000,16,4,128,1;2,5120,16,4,128,1" \
    --out "$R/chunked$s" > "$R/chunked$s.log" 2>&1
  echo "rc=$?" >> "$R/chunked$s.log"; el chunked$s
  grep '^| chunked' "$R/chunked$s/bench_variants.md"
done
tar -C "$OUT" -czf "$OUT/results.tgz" r
