#!/usr/bin/env bash
# Queued by session 68 (one GPU, about 7 minutes; meant for an H200, where issue 11's table and
# issue 10's variant table last ran in sessions 33 and 43; on an H100 it retakes session 68's call 2).
# OUT=$OUT bash benchmarks/gpu_next_session69.sh; commit $R/decode/ as results/<gpu>/decode/ with the
# environment (the H200's replaces session 33's) and $OUT/variants/ as results/<gpu>/session69/variants/.
# 1. tests/test_kvcache.py + tests/test_kvcache_chunk.py on the GPU at session 68's defaults: $R/kvcache.log.
# 2. bench_decode.py's issue 11 table at those defaults: $R/decode/.
# 3. The variant table (gpu_next_variants.sh: issue 10's rows, each next to its peer), no decision:
#    $OUT/variants/r/.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
decode_tests_and_table
OUT="$OUT/variants" bash benchmarks/gpu_next_variants.sh 2>&1 | tail -16
tar -C "$OUT" -czf "$OUT/results.tgz" r variants
