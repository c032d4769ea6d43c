#!/usr/bin/env bash
# Session 14 call 3 (under 10 minutes on one H200), after the suite's two calls
# at 96babd2 (gpu_tests.sh PART=a / PART=b):
#   1. tests/test_attention.py on the GPU, auto and forced-Hopper tiers, after
#      the test-side fix of test_split_qk_forward (the portable kernel's split:
#      d = 192 / dv = 128 takes the Hopper forward on an H200 since session 13);
#   2. the timing halves (SKIP_TESTS=1: their tests passed in PART=a) of
#      gpu_next_gqa_split.sh (GROUP_SPLIT, rule in its header),
#      gpu_next_bwd_host.sh (the backward's launch plans) and
#      gpu_next_window_bwd.sh (the windowed Hopper backward's opt-in rule,
#      now with the launch plans), each under $OUT/<name>/.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
export FLASHATTN_TRITON_TEST_DEVICE=cuda
timeout -k 5 ${T_ATT:-150} python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -n 12 \
  tests/test_attention.py > "$R/tests_attention.log" 2>&1
echo "rc=$?" >> "$R/tests_attention.log"; el tests_attention; tail -3 "$R/tests_attention.log" | cut -c1-300
FLASHATTN_TRITON_BACKEND=hopper timeout -k 5 ${T_ATTH:-60} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 12 tests/test_attention.py > "$R/tests_attention_hopper.log" 2>&1
echo "rc=$?" >> "$R/tests_attention_hopper.log"; el tests_attention_hopper; tail -3 "$R/tests_attention_hopper.log" | cut -c1-300
unset FLASHATTN_TRITON_TEST_DEVICE
for s in gqa_split:gpu_next_gqa_split bwd_host:gpu_next_bwd_host window_bwd:gpu_next_window_bwd; do
  echo "== ${s#*:}"
  SKIP_TESTS=1 OUT="$R/${s%%:*}" bash "benchmarks/${s#*:}.sh" 2>&1 | tail -${TAIL:-24}
  el "${s#*:}"
done
rm -f "$R"/*/results.tgz
