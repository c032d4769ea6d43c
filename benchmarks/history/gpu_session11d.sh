#!/usr/bin/env bash
# Fourth call of session 11 (under 8 minutes):
#   1. first_call_imports.py without the prefetch (what imports torch._dynamo);
#   2. the backward at short lengths with the new dispatch rule
#      (_dispatch.hopper_backward_pays): ours vs FA2, cuDNN and ours
#      deterministic, bf16/fp16, d 64/128/256, N 512/1024/2048;
#   3. bench_overhead.py: first call (fresh process, cold / warm Triton cache)
#      and host time per call, ours next to SDPA;
#   4. if time is left, FlexAttention at d = 64 and 256 (bf16, N 2k/8k).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
left() { echo $(( ${END:-470} - ($(date +%s) - t0) )); }
timeout -k 3 ${T_IMP:-40} python3 benchmarks/first_call_imports.py --prefetch 0 > "$R/imports.log" 2>&1
echo "rc=$?" >> "$R/imports.log"; el imports; grep -E "^=====|^first|^_disable|rc=" "$R/imports.log" | cut -c1-250
timeout -k 5 ${T_SHORT:-75} python3 benchmarks/bench_attention.py --modes bwd --dtype bf16,fp16 --head-dims 64,128,256 \
  --seqlens 512,1024,2048 --no-gqa --peers sdpa_flash,sdpa_cudnn,flashattn_triton_det --max-seconds 65 \
  --no-progress --no-plot --out "$R/short" > "$R/short.log" 2>&1
echo "rc=$?" >> "$R/short.log"; el short
sed -n '/short:begin/,/short:end/p' "$R/short/bench_attention.md" | cut -c1-200 | tail -12
timeout -k 5 ${T_OVH:-230} python3 benchmarks/bench_overhead.py --out "$R/overhead" > "$R/overhead.log" 2>&1
echo "rc=$?" >> "$R/overhead.log"; el overhead; cut -c1-200 "$R/overhead/bench_overhead.md" 2>/dev/null | tail -32
L=$(left)
if [ "$L" -gt 60 ]; then
  timeout -k 5 $L python3 benchmarks/bench_attention.py --modes fwd,bwd --dtype bf16 --head-dims 64,256 \
    --seqlens 2048,8192 --no-gqa --providers flashattn_triton,flex --flex-all --max-seconds $(( L - 15 )) \
    --no-progress --no-plot --out "$R/flex" > "$R/flex.log" 2>&1
  echo "rc=$?" >> "$R/flex.log"; el flex
  sed -n '/short:begin/,/short:end/p' "$R/flex/bench_attention.md" | cut -c1-200 | tail -8
fi
tar -C "$OUT" -czf "$OUT/results.tgz" r
