#!/usr/bin/env bash
# Session 65, call 3 (one GPU, about 4 minutes): the gathered merge as the small-batch default
# (kernels/decode.py DEFAULT_COMBINE_SMALL = "gathered", adopted from call 1's rule:
# results/h100/session65/). 1. The decode GPU tests and the sink tests at the defaults (no
# FLASHATTN_TRITON_DECODE_COMBINE). 2. bench_decode.py at B = 1 and 8, contiguous and 16-token
# pages, N 1k-128k, ours at the default and with the fused merge, beside SDPA cuDNN and flash and
# the copy ceiling of the same run. OUT=$OUT bash benchmarks/history/gpu_next_session65.sh
# RAN in session 65 (H100, call 3): 256 + 24 tests passed; results/h100/session65/call3/.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests kvcache 200 -n 4 tests/test_kvcache.py tests/test_kvcache_chunk.py
gpu_tests sinks 100 -n 4 tests/test_variants.py -k sink
timeout -k 5 200 python3 benchmarks/bench_decode.py --batches 1,8 --layouts contiguous,paged16 \
  --peers sdpa_cudnn,sdpa_flash --combine default,fused --max-seconds 170 --out "$R/bench" > "$R/bench.log" 2>&1
echo "rc=$?" >> "$R/bench.log"; el bench; tail -3 "$R/bench.log"
tar -C "$OUT" -czf "$OUT/results.tgz" r
