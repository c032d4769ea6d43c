#!/usr/bin/env bash
# Session 59 call 5: the eager decode path without the custom op (_kvcache.DIRECT) on the GPU:
# test_kvcache.py (its GPU cases, CUDA graphs and inductor among them, and the new eager/op
# equality test) and bench_overhead.py's host table (the decode row with DIRECT on / off), about 250 s.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests kvcache 200 -n 8 tests/test_kvcache.py
timeout -k 5 120 python3 benchmarks/bench_overhead.py --skip-first-call --out "$R/overhead" > "$R/overhead.log" 2>&1
echo "rc=$?" >> "$R/overhead.log"; el overhead
grep -e ' us$' -e '^rc' "$R/overhead.log"
tar -C "$OUT" -czf "$OUT/results.tgz" r
