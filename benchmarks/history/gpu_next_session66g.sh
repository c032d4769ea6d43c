#!/usr/bin/env bash
# RAN in session 66 as call 14 (H100): results/h100/session66/call14/, the table in results/h100/decode/; 260 passed.
# Session 66, last call (one GPU, about 2.5 minutes): "solo" now re-plans contiguous caches only
# (calls 12-13: 256-token pages moved 0.88-1.31x with the timing order). At the final defaults:
# the decode GPU tests and the issue 11 table (bench_decode.py with the spot-check settle).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests kvcache ${T_KV:-200} -n 4 tests/test_kvcache.py tests/test_kvcache_chunk.py
timeout -k 5 ${T_TABLE:-330} python3 benchmarks/bench_decode.py --max-seconds 300 --out "$R/decode" \
  > "$R/decode.log" 2>&1
echo "rc=$?" >> "$R/decode.log"; el decode
sed -n '/short:begin/,/short:end/p' "$R/decode/bench_decode.md" | cut -c1-600
tar -C "$OUT" -czf "$OUT/results.tgz" r
