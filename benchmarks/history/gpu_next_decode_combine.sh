#!/usr/bin/env bash
# Batch-1 decoding with the split partials merged by a second kernel instead of the last split
# (FLASHATTN_TRITON_DECODE_COMBINE=separate), on one H200, about 2 minutes; exploratory, no rule.
# Why: session 34 call 1 (decode_kernels.py) timed SDPA cuDNN at B = 1 2k as a 5.7 us main kernel and
# a 2.1 us reduction, ours as one 10.5 us kernel whose last split merges after the others' atomics;
# in CUDA graphs ours reads 0.89-0.90x cuDNN at 2k and 0.94-0.95x at 4k. With `pdl` (a default) a
# separate combine kernel's launch may overlap the decode kernel's tail.
#   bench_decode.py, B = 1, N 1k-16k, contiguous, --combine fused,separate, cuDNN beside, two
#   processes (the combine order reversed in the second): $R/c1, $R/c2; then decode_kernels.py.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
i=0
for c in "fused,separate" "separate,fused"; do
  i=$((i + 1))
  timeout -k 5 ${T_C:-90} python3 benchmarks/bench_decode.py --batches 1 --seqlens 1024,2048,4096,8192,16384 \
    --layouts contiguous --peers sdpa_cudnn --combine "$c" --copy-gb 1 --max-seconds 80 --out "$R/c$i" \
    > "$R/c$i.log" 2>&1
  echo "rc=$?" >> "$R/c$i.log"; el "c$i"
  sed -n '/short:begin/,/short:end/p' "$R/c$i/bench_decode.md" 2>/dev/null | sed -n 4,12p
done
FLASHATTN_TRITON_DECODE_COMBINE=separate timeout -k 5 ${T_K:-60} python3 benchmarks/decode_kernels.py \
  --shapes 1:2048,1:4096,1:8192 --splits 8 --out "$R/kernels_separate.json" > "$R/kernels_separate.log" 2>&1
echo "rc=$?" >> "$R/kernels_separate.log"; el kernels; grep "ours" "$R/kernels_separate.log" | head -20
tar -C "$OUT" -czf "$OUT/results.tgz" r
