#!/usr/bin/env bash
# After HEADS_FIRST_GQA_SPLIT_MIN_N = {128: 4096} (gpu_next_gqa_heads_first.sh, rule met): the GPU
# tests of the Hopper backward's GQA / group-split / heads-first paths, and the variant table (its
# plain causal row is a d = 128 causal GQA call at N = 4k with S = 4), on one H200, about 3 minutes.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_heads_first_check.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-150} tests/test_hopper_bwd.py -k "heads_first or group_split_variants or named_bar_variants" -n 4
mkdir -p "$R/bench"
timeout -k 5 ${T_BENCH:-170} python3 benchmarks/bench_variants.py --skip-sweep --rep ${REP:-30} --out "$R/bench" \
  > "$R/bench_variants.log" 2>&1
echo "rc=$?" >> "$R/bench_variants.log"; el bench_variants
sed -n '/^| variant/,/^$/p' "$R/bench/bench_variants.md" 2>/dev/null | head -16
tar czf "$OUT/results.tgz" -C "$OUT" r
