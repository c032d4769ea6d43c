#!/usr/bin/env bash
# RAN in session 66 as call 7 (H100): results/h100/session66/call7/; 263 passed; the table (peer columns before the bench fix).
# Session 66, fifth call (one GPU, about 3 minutes): "solo" is a default variant since the fourth
# call (gpu_next_session66d.sh). At the new defaults:
# 1. tests/test_kvcache.py + tests/test_kvcache_chunk.py on the GPU: $R/kvcache.log;
# 2. bench_decode.py's issue 11 table (B = 1, 8, 64; 1k-128k; contiguous, 16- and 256-token pages;
#    SDPA flash and cuDNN, Flex at 8k / 64k; the copy ceiling in the same run): $R/decode/
#    (batch 8 is re-planned by "solo": 2 splits for 4).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
decode_tests_and_table
tar -C "$OUT" -czf "$OUT/results.tgz" r
