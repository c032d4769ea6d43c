#!/usr/bin/env bash
# Session 33's second call (one H200, about 5 minutes), after "spread" and "longpages" joined
# the decoding defaults (call 1: both adopted under their rules):
# 1. every test of tests/test_kvcache.py on the GPU (gpu and bigmem ones included), the new
#    default plans among them: $R/kvcache.log;
# 2. bench_decode.py's issue 11 table with the new defaults (B = 1, 8, 64; 1k-128k; contiguous,
#    16- and 256-token pages; SDPA flash and cuDNN, Flex at 8k / 64k; copy ceiling in the same
#    run), for results/h200/decode/: $R/decode/.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests kvcache ${T_KV:-240} -n 4 tests/test_kvcache.py
timeout -k 5 ${T_TABLE:-330} python3 benchmarks/bench_decode.py --max-seconds 300 --out "$R/decode" \
  > "$R/decode.log" 2>&1
echo "rc=$?" >> "$R/decode.log"; el decode
sed -n '/short:begin/,/short:end/p' "$R/decode/bench_decode.md" | cut -c1-400
tar -C "$OUT" -czf "$OUT/results.tgz" r
