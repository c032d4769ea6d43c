#!/usr/bin/env bash
# Second call of session 11 (about 8.5 minutes), on the new defaults (dynamic
# forward scheduler at d=64 causal and d=128 not causal):
#   1. first_call_imports.py with and without the backward prefetch: which
#      modules a first call imports and from where;
#   2. tests/test_hopper_bwd.py, then the forced-hopper GPU suite (test_hopper,
#      test_attention, test_backward);
#   3. the forced-portable GPU suite (test_attention, test_backward,
#      test_variants).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
for p in 1 0; do
  timeout -k 3 ${T_IMP:-45} python3 benchmarks/first_call_imports.py --prefetch $p > "$R/imports_prefetch$p.log" 2>&1
  echo "rc=$?" >> "$R/imports_prefetch$p.log"
done
el imports; grep -E "^=====|^first|^---|rc=" "$R"/imports_prefetch*.log | cut -c1-200
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_BWD:-70} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 4 tests/test_hopper_bwd.py > "$R/tests_bwd.log" 2>&1
echo "rc=$?" >> "$R/tests_bwd.log"; el tests_bwd; tail -3 "$R/tests_bwd.log" | cut -c1-300
FLASHATTN_TRITON_BACKEND=hopper FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_HOP:-190} python3 -m pytest -q \
  -p no:cacheprovider -rfE --tb=short -n 6 tests/test_hopper.py tests/test_attention.py tests/test_backward.py \
  > "$R/tests_hopper.log" 2>&1
echo "rc=$?" >> "$R/tests_hopper.log"; el tests_hopper; grep -E "^(FAILED|ERROR)" "$R/tests_hopper.log" | cut -c1-250 | head; tail -2 "$R/tests_hopper.log" | cut -c1-300
FLASHATTN_TRITON_BACKEND=portable FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_POR:-170} python3 -m pytest -q \
  -p no:cacheprovider -rfE --tb=short -n 6 tests/test_attention.py tests/test_backward.py tests/test_variants.py \
  > "$R/tests_portable.log" 2>&1
echo "rc=$?" >> "$R/tests_portable.log"; el tests_portable; grep -E "^(FAILED|ERROR)" "$R/tests_portable.log" | cut -c1-250 | head; tail -2 "$R/tests_portable.log" | cut -c1-300
tar -C "$OUT" -czf "$OUT/results.tgz" r
