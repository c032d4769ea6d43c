#!/usr/bin/env bash
# Session 57 call 2: after call 1 (the packed tests, 2 failed: the peak-memory bound at n^2/8
# against 59 MiB measured, and chunks as packed sequences under torch 2.11's inductor), the two
# fixes on the GPU: test_chunk.py and test_integrations.py's GPU cases, the packed Hopper tests,
# then the chunked row with a shorter last chunk (bench_variants takes chunk = min(1024, N / 4):
# N 5000 = 4 x 1024 + 904, the packed form) next to whole chunks (N 5120), against FlexAttention.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
[ -f repro_old.py ] && timeout -k 5 120 python3 repro_old.py 2>&1 | tail -6
gpu_tests fixed 200 -n 8 tests/test_chunk.py tests/test_integrations.py -k gpu
gpu_tests hvarlen 250 -n 8 tests/test_hopper_varlen.py
timeout -k 5 150 python3 benchmarks/bench_variants.py --only chunked --shapes "2,5000,16,4,128,1;2,5120,16,4,128,1" \
  --out "$R/chunked" > "$R/chunked.log" 2>&1
echo "rc=$?" >> "$R/chunked.log"; el chunked
grep '^| chunked' "$R/chunked/bench_variants.md" | head -2
tar -C "$OUT" -czf "$OUT/results.tgz" r
