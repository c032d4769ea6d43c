#!/usr/bin/env bash
# Session 32's second call (one H200, about 7 minutes), after PART=b of gpu_tests.sh:
# 1. the forced portable tier (FLASHATTN_TRITON_BACKEND=portable, test_attention.py +
#    test_backward.py; session 30 cut it at 65 passed after 90 s): $R/portable.log;
# 2. the decoding split sweeps (gpu_next_decode_paged.sh with SKIP_PAGED=1; exploratory, no
#    rule): B = 64 / 16 at 8k / 32k with 1-4 splits, B = 1 at 2k / 4k with 4-12, beside the
#    automatic count: $R/sweeps/;
# 3. bench_decode.py at B = 1 / 8, N = 8k / 64k with SDPA cuDNN and the copy ceiling at 0.25,
#    1 and 4 GB (a32bdb1: the fastest size sets it; 4 GB alone read 2.7 TB/s in every run so
#    far, against 4.2 TB/s for 1 GiB in ../shared/h200-peers): $R/copy/.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
FLASHATTN_TRITON_BACKEND=portable gpu_tests portable ${T_PORT:-240} -n 8 -m "not gpu" \
  tests/test_attention.py tests/test_backward.py
SKIP_PAGED=1 OUT="$R/sweeps" bash benchmarks/history/gpu_next_decode_paged.sh 2>&1 | tail -30
timeout -k 5 ${T_COPY:-80} python3 benchmarks/bench_decode.py --batches 1,8 --seqlens 8192,65536 \
  --layouts contiguous --peers sdpa_cudnn --max-seconds 60 --out "$R/copy" > "$R/copy.log" 2>&1
echo "rc=$?" >> "$R/copy.log"; el copy; grep -E "copy|rc=" "$R/copy.log" | head -8
tar -C "$OUT" -czf "$OUT/results.tgz" r
