#!/usr/bin/env bash
# Next session's first call (one H200, under 10 minutes): the side-by-side sweep at the
# current main, for issues 7 and 8's done-when and the README table (last full sweep:
# session 11 call 3, before the backward's launch plans, the causal GQA split and the
# d = 192 backward).
#   1. bench_attention.py --full: bf16 and fp16, d 64/128/256, N 512..16k, causal and
#      not, GQA 32/8, forward and backward; ours, SDPA flash (FA2), SDPA cuDNN, ours
#      deterministic, FlexAttention (its default subset), one run;
#   2. FlexAttention at every row it lacks there (d 64 and 256, bf16 and fp16, N 2k /
#      8k) next to ours, in the time left.
# Results: $OUT/results.tgz (r/bench, r/flex and their logs), the short tables printed.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
timeout -k 5 ${T_BENCH:-400} python3 benchmarks/bench_attention.py --full --modes fwd,bwd --dtype bf16,fp16 \
  --peers sdpa_flash,sdpa_cudnn,flex,flashattn_triton_det --max-seconds ${B_BENCH:-380} \
  --no-progress --out "$R/bench" > "$R/bench.log" 2>&1
echo "rc=$?" >> "$R/bench.log"; el bench
sed -n '/short:begin/,/short:end/p' "$R/bench/bench_attention.md" | cut -c1-200 | head -70
L=$(( ${BUDGET:-570} - ($(date +%s) - t0) ))
if [ "$L" -gt 60 ]; then
  timeout -k 5 $L python3 benchmarks/bench_attention.py --modes fwd,bwd --dtype bf16,fp16 --head-dims 64,256 \
    --seqlens 2048,8192 --no-gqa --providers flashattn_triton,flex --flex-all --max-seconds $(( L - 15 )) \
    --no-progress --no-plot --out "$R/flex" > "$R/flex.log" 2>&1
  echo "rc=$?" >> "$R/flex.log"; el flex
  sed -n '/short:begin/,/short:end/p' "$R/flex/bench_attention.md" | cut -c1-200 | tail -10
fi
tar -C "$OUT" -czf "$OUT/results.tgz" r
