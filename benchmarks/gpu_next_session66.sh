#!/usr/bin/env bash
# Queued by session 65 (one GPU, about 5 minutes; meant for an H200, where issue 11's table lives):
# the decoding table at the defaults since session 65 (the gathered merge at small batch,
# kernels/decode.py DEFAULT_COMBINE_SMALL), which ran only on an H100 so far
# (results/h100/session65/). OUT=$OUT bash benchmarks/gpu_next_session66.sh; commit $R/decode/
# as results/<gpu>/decode/ (the H200's replaces session 33's) with the environment.
# 1. tests/test_kvcache.py + tests/test_kvcache_chunk.py on the GPU at the defaults: $R/kvcache.log.
# 2. bench_decode.py's issue 11 table (B = 1, 8, 64; 1k-128k; contiguous, 16- and 256-token pages;
#    SDPA flash and cuDNN, Flex at 8k / 64k; copy ceiling in the same run): $R/decode/.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
gpu_tests kvcache ${T_KV:-200} -n 4 tests/test_kvcache.py tests/test_kvcache_chunk.py
timeout -k 5 ${T_TABLE:-330} python3 benchmarks/bench_decode.py --max-seconds 300 --out "$R/decode" \
  > "$R/decode.log" 2>&1
echo "rc=$?" >> "$R/decode.log"; el decode
sed -n '/short:begin/,/short:end/p' "$R/decode/bench_decode.md" | cut -c1-400
tar -C "$OUT" -czf "$OUT/results.tgz" r
