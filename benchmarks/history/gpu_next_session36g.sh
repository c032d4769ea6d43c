#!/usr/bin/env bash
# Session 36, call 7 (one H200, about 3 minutes): with TMA_DKV_CAUSAL_MAX_N = {128: 4096} (call 6), the
# causal d = 128 backward rows at N 2k / 4k of the side-by-side sweep (bf16, B*N = 16k, MHA and the
# GQA row at 4k; ours, SDPA flash, SDPA cuDNN, FlexAttention), and the default-plan tests.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session36g.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-80} tests/test_hopper_bwd.py -k "tma_dkv_plan or default" -n 4
timeout -k 5 ${T_BENCH:-150} python3 benchmarks/bench_attention.py --full --modes bwd --dtype bf16 --head-dims 128 \
  --causal yes --seqlens 2048,4096 --providers flashattn_triton,sdpa_flash,sdpa_cudnn,flex --flex-all \
  --max-seconds 130 --no-progress --no-plot --out "$R/bench" > "$R/bench.log" 2>&1
echo "rc=$?" >> "$R/bench.log"; el bench
sed -n '/short:begin/,/short:end/p' "$R/bench/bench_attention.md" | cut -c1-220 | head -30
tar -C "$OUT" -czf "$OUT/results.tgz" r
