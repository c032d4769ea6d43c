#!/usr/bin/env bash
# Queued by session 54 (the queue of session 53 ran on an H100: results/h100/session54/; its
# H200 tables are still owed). On the H200 (split into calls of at most 600 s):
#  1. Chunks as sequences (f6f101c, b79300b; on an H100 in session 54 call 6: test_chunk.py 49 passed,
#     the chunked row 1.23x / 1.22x faster, 1.18x / 1.09x Flex; 310fd58 widened it to queries after a
#     cache of whole chunks, never on a GPU): flash_attn_func(attention_chunk=C) with
#     seqlen_q == seqlen_k a multiple of C (C >= 128, no dropout) now runs as the call without chunks
#     on batch * n / C sequences, on the Hopper kernels. Its tests (test_chunk.py: every GPU chunk test
#     with n a multiple of C >= 128 takes it), then the variant table's chunked row against Flex (on an
#     H100 the chunk mask read 0.95-0.98x / 0.88-0.91x Flex; the window (1024, 0) row 1.58-1.60x /
#     1.20-1.21x, on the Hopper tier).
#  2. Transformers packing by position_ids (0049393, 6f7c473: passed on an H100 in session 54 call 5).
#  3. The H200 tables of session 54's H100 records: bench_variants (fused float-bias / d = 512 peers),
#     bench_varlen (paged rows after the read-ahead), bench_decode.
# Rule: the tests pass (a failure is a bug to fix); the tables are records (commit them with the
# environment under results/h200/session55/).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
echo "call 3 of session 55: calls 1-2 again on an H200 (with the compile fix 2.11)"
gpu_tests chunk_seq 150 -n 8 tests/test_chunk.py
mkdir -p "$R/chunk"
timeout -k 5 90 python3 benchmarks/bench_variants.py --only "chunked,window,plain" --rep 30 --out "$R/chunk" \
  > "$R/chunk.log" 2>&1; echo "rc=$?" >> "$R/chunk.log"; el chunk
sed -n '/^| variant/,/^$/p' "$R/chunk/bench_variants.md" 2>/dev/null | cut -c1-160
mkdir -p "$R/bench"
timeout -k 5 200 python3 benchmarks/bench_variants.py --skip-sweep --rep 30 --out "$R/bench" > "$R/bench_variants.log" 2>&1
echo "rc=$?" >> "$R/bench_variants.log"; el bench_variants
sed -n '/^| variant/,/^$/p' "$R/bench/bench_variants.md" 2>/dev/null | head -24 | cut -c1-160
timeout -k 5 80 python3 benchmarks/bench_varlen.py --batches 2 --out "$R/varlen" > "$R/bench_varlen.log" 2>&1
echo "rc=$?" >> "$R/bench_varlen.log"; el bench_varlen
timeout -k 5 130 python3 benchmarks/bench_decode.py --out "$R/decode" --max-seconds 90 > "$R/bench_decode.log" 2>&1
echo "rc=$?" >> "$R/bench_decode.log"; el bench_decode
sed -n '/^| B |/,/^$/p' "$R/decode/bench_decode.md" 2>/dev/null | head -30 | cut -c1-200
tar -C "$OUT" -czf "$OUT/results.tgz" r
