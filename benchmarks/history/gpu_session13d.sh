#!/usr/bin/env bash
# Session 13 call 4 (under 10 minutes on one H200):
#   1. benchmarks/history/gpu_next_dropout.sh (if present): dropout in the Hopper
#      forward and backward (GPU tests, timing; rule in its header);
#   2. the window-backward GPU tests again after the test-side fixes of call 3
#      (window 0 judged at the inputs' scale, the dispatch test on the GPU),
#      and the forward's new dispatch defaults (window, d = 192 / dv = 128)
#      through flash_attn_func;
#   3. where the API's windowed Hopper backward loses its time against the
#      kernel alone (call 3: 70 vs 142 TFLOP/s at d = 128, N = 2k, window 256):
#      torch.profiler kernel lists of api:window, api:portable, hopper:kernel;
#   4. bench_variants.py, every row (the issue 10 table), with today's defaults.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
if [ -f benchmarks/history/gpu_next_dropout.sh ]; then
  OUT="$R/dropout" T_TESTS=${T_DROP_TESTS:-130} bash benchmarks/history/gpu_next_dropout.sh > "$R/dropout.log" 2>&1; el dropout
  tail -24 "$R/dropout.log" | cut -c1-300
fi
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_TESTS:-100} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 8 tests/test_hopper_bwd.py tests/test_hopper.py tests/test_cli.py \
  -k "window or split_api or split_dispatch or info" > "$R/tests_defaults.log" 2>&1
echo "rc=$?" >> "$R/tests_defaults.log"; el tests_defaults; tail -4 "$R/tests_defaults.log" | cut -c1-300
timeout -k 5 ${T_PROF:-60} python3 benchmarks/hopper_bwd_probe.py --rows window --head-dims 128 --seqlens 2048 \
  --windows 256 --profile --rep 20 --out "$R/profile" > "$R/profile.log" 2>&1
echo "rc=$?" >> "$R/profile.log"; el profile; cut -c1-200 "$R/profile.log" | tail -30
timeout -k 5 ${T_VAR:-170} python3 benchmarks/bench_variants.py --skip-sweep --out "$R/variants" > "$R/variants.log" 2>&1
echo "rc=$?" >> "$R/variants.log"; el variants
sed -n '/short:begin/,/short:end/p' "$R/variants/bench_variants.md" | cut -c1-200
tar -C "$OUT" -czf "$OUT/results.tgz" r
