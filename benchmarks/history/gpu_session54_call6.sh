# Session 54 call 6 (H100, the last 270 s of device time): chunks as sequences (b79300b) on the GPU:
# the chunked and window rows first, then the chunk tests.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
mkdir -p "$R/chunk"
timeout -k 5 100 python3 benchmarks/bench_variants.py --only "chunked,window" --rep 30 --out "$R/chunk" > "$R/chunk.log" 2>&1
echo "rc=$?" >> "$R/chunk.log"; el chunk; sed -n '/^| variant/,/^$/p' "$R/chunk/bench_variants.md" 2>/dev/null | cut -c1-160
gpu_tests chunk_tests 120 -n 8 tests/test_chunk.py
tar -C "$OUT" -czf "$OUT/results.tgz" r
