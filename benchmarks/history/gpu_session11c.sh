#!/usr/bin/env bash
# Third call of session 11 (about 7.5 minutes):
#   1. first_call_imports.py without the prefetch: which torch function,
#      wrapped by torch._compile._disable_dynamo, imports torch._dynamo
#      during our first forward;
#   2. the full sweep (bench_attention.py): bf16 and fp16, d 64/128/256,
#      N 512..16k, causal and not, GQA, forward and backward, ours + SDPA
#      flash (FA2) + cuDNN + ours deterministic + FlexAttention (its default
#      subset), one run.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
timeout -k 3 ${T_IMP:-40} python3 benchmarks/first_call_imports.py --prefetch 0 > "$R/imports.log" 2>&1
echo "rc=$?" >> "$R/imports.log"; el imports; grep -E "^=====|^first|^_disable|rc=" "$R/imports.log" | cut -c1-250
timeout -k 5 ${T_BENCH:-420} python3 benchmarks/bench_attention.py --full --modes fwd,bwd --dtype bf16,fp16 \
  --peers sdpa_flash,sdpa_cudnn,flex,flashattn_triton_det --max-seconds ${B_BENCH:-390} \
  --no-progress --out "$R/bench" > "$R/bench.log" 2>&1
echo "rc=$?" >> "$R/bench.log"; el bench
sed -n '/short:begin/,/short:end/p' "$R/bench/bench_attention.md" | cut -c1-200 | head -60
tar -C "$OUT" -czf "$OUT/results.tgz" r
