#!/usr/bin/env bash
# RAN in session 68 as call 2 (H100, tree 99361ce): results/h100/session68/call2/, the table in results/h100/decode/; 269 passed.
# Session 68, after "solopages" joined the defaults (gpu_next_session68.sh's rule met on an H100).
# One GPU, about 4 minutes. OUT=$OUT bash benchmarks/gpu_next_session68b.sh; commit $R/decode/ as
# results/<gpu>/decode/ with the environment (on an H200 it replaces session 33's).
# 1. tests/test_kvcache.py + tests/test_kvcache_chunk.py on the GPU at the new defaults (test_gpu_solo_mid_batch
#    now covers "solopages" on 256- and 1024-token pages): $R/kvcache.log.
# 2. bench_decode.py's issue 11 table at the new defaults (the paged256 column at batch 8 is re-planned): $R/decode/.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
decode_tests_and_table
tar -C "$OUT" -czf "$OUT/results.tgz" r
