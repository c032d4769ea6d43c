#!/usr/bin/env bash
# Validation call for the changes session 11 could not run on a GPU (about
# 9 minutes on one H200). Run first in the next session:
#   1. first_call_imports.py (prefetch off): expect no "_disable_dynamo
#      wrapper called: ..._OpWatch" line and far fewer modules imported by
#      the first forward than session 11's 819;
#   2. bench_overhead.py: first call (cold / warm) and host time per call;
#      expect "ours flash_attn_func" near the session-9 28 us (session 11
#      call 4: 108 us, the dynamic scheduler's counter breaking the plans);
#   3. the backward at short lengths with the dispatch rule, bf16 and fp16,
#      N 512 / 1024 / 2048 (incl. the bf16 d=256 causal N=1024 row that
#      measured 115 vs 214 TFLOP/s), ours vs FA2, cuDNN, deterministic;
#   4. the GPU suites: test_hopper_bwd.py (whole), the plan / fast-launch /
#      KV-cache GPU tests, and the forced-portable varlen and backward tests
#      (the portable kernels' new shift_mul argument);
#   5. decoding with and without attention sinks (bench_decode.py --sinks).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
timeout -k 3 ${T_IMP:-40} python3 benchmarks/first_call_imports.py --prefetch 0 > "$R/imports.log" 2>&1
echo "rc=$?" >> "$R/imports.log"; el imports; grep -E "^=====|^first|^_disable|rc=" "$R/imports.log" | cut -c1-250
timeout -k 5 ${T_OVH:-160} python3 benchmarks/bench_overhead.py --out "$R/overhead" > "$R/overhead.log" 2>&1
echo "rc=$?" >> "$R/overhead.log"; el overhead; cut -c1-200 "$R/overhead/bench_overhead.md" 2>/dev/null | tail -30
timeout -k 5 ${T_SHORT:-110} python3 benchmarks/bench_attention.py --modes bwd --dtype bf16,fp16 --head-dims 64,128,256 \
  --seqlens 512,1024,2048 --no-gqa --peers sdpa_flash,sdpa_cudnn,flashattn_triton_det --max-seconds 100 \
  --no-progress --no-plot --out "$R/short" > "$R/short.log" 2>&1
echo "rc=$?" >> "$R/short.log"; el short
sed -n '/short:begin/,/short:end/p' "$R/short/bench_attention.md" | cut -c1-200 | tail -16
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_BWD:-90} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 6 tests/test_hopper_bwd.py > "$R/tests_bwd.log" 2>&1
echo "rc=$?" >> "$R/tests_bwd.log"; el tests_bwd; tail -2 "$R/tests_bwd.log" | cut -c1-300
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_MISC:-50} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 6 tests/test_plans.py tests/test_fastlaunch.py tests/test_kvcache.py > "$R/tests_misc.log" 2>&1
echo "rc=$?" >> "$R/tests_misc.log"; el tests_misc; tail -2 "$R/tests_misc.log" | cut -c1-300
# The portable kernels gained a runtime argument (shift_mul, packed batches) after the last GPU run.
FLASHATTN_TRITON_BACKEND=portable FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_POR:-70} python3 -m pytest -q \
  -p no:cacheprovider -rfE --tb=short -n 6 tests/test_varlen.py tests/test_backward.py > "$R/tests_portable.log" 2>&1
echo "rc=$?" >> "$R/tests_portable.log"; el tests_portable; tail -2 "$R/tests_portable.log" | cut -c1-300
# Decoding with gpt-oss attention sinks (the decode kernel's HAS_SINKS switch) next to plain decoding.
timeout -k 5 ${T_DEC:-40} python3 benchmarks/bench_decode.py --quick --batches 1,8 --sinks \
  --layouts contiguous,paged16 --peers sdpa_cudnn --max-seconds 30 --out "$R/decode" > "$R/decode.log" 2>&1
echo "rc=$?" >> "$R/decode.log"; el decode; sed -n '/short:begin/,/short:end/p' "$R/decode/bench_decode.md" | head -12
tar -C "$OUT" -czf "$OUT/results.tgz" r
