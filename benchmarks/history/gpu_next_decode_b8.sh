#!/usr/bin/env bash
# Exploratory split / pipeline sweep at batch 8 and 16 (one H200, about 5 minutes; no rule).
# Why: at B = 8 (64 programs, 4 splits: 256 programs, 1.94 per SM) ours reads 0.99x SDPA cuDNN
# from 2k to 32k (session 33 call 2) and 84 % of the copy ceiling at 8k. choose_num_splits counts
# two resident programs per SM, but at d = 128 three fit (70 KiB each): 6 splits make 384
# programs, 2.9 per SM, half as many bytes in flight again; 4 stages keep two tiles in flight
# per program (96 KiB + 6 KiB: two per SM).
# bench_decode.py with splits 0 (auto), 5, 6, 8 and configs num_stages=3 (the default) / 4,
# contiguous and 16-token pages, SDPA cuDNN beside, in two processes (splits in reverse order in
# the second): $R/b8_1, $R/b8_2; batch 1 at 2k / 4k with 0, 8, 10, 12 splits: $R/b1; then
# decode_kernels.py (the kernels of one call and their time, ours against SDPA's): $R/kernels.log.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
i=0
for s in "0,5,6,8" "8,6,5,0"; do
  i=$((i + 1))
  timeout -k 5 ${T_B8:-150} python3 benchmarks/bench_decode.py --batches 8,16 --seqlens 2048,4096,8192,16384,32768 \
    --layouts contiguous,paged16 --peers sdpa_cudnn --splits "$s" --configs "num_stages=3;num_stages=4" \
    --copy-gb 1 --max-seconds 120 --out "$R/b8_$i" > "$R/b8_$i.log" 2>&1
  echo "rc=$?" >> "$R/b8_$i.log"; el "b8_$i"
done
timeout -k 5 ${T_B1:-60} python3 benchmarks/bench_decode.py --batches 1 --seqlens 2048,4096 --layouts contiguous \
  --peers sdpa_cudnn --splits 0,8,10,12 --copy-gb 1 --max-seconds 50 --out "$R/b1" > "$R/b1.log" 2>&1
echo "rc=$?" >> "$R/b1.log"; el b1
timeout -k 5 ${T_K:-60} python3 benchmarks/decode_kernels.py --shapes 1:2048,1:4096,1:8192,8:8192 --splits 8 \
  --out "$R/kernels.json" > "$R/kernels.log" 2>&1
echo "rc=$?" >> "$R/kernels.log"; el kernels; cat "$R/kernels.log" | cut -c1-160 | head -90
tail -3 "$R"/b8_1.log "$R"/b8_2.log "$R"/b1.log
tar -C "$OUT" -czf "$OUT/results.tgz" r
