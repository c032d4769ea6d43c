#!/usr/bin/env bash
# Session 13 call 2 (under 10 minutes on one H200):
#   1. benchmarks/history/gpu_next_window.sh: the Hopper forward's window path (GPU
#      tests, timing with the rule in its header) and the first call with and
#      without the import-time key warm-up;
#   2. test_variants.py + test_gpu.py with 8 workers and the big-memory lock,
#      with the time call 1's 130 s limit did not give it.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
OUT="$R/window" bash benchmarks/history/gpu_next_window.sh > "$R/window.log" 2>&1; el window; tail -40 "$R/window.log" | cut -c1-400
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_VAR:-200} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 8 tests/test_variants.py tests/test_gpu.py > "$R/tests_var.log" 2>&1
echo "rc=$?" >> "$R/tests_var.log"; el tests_var; tail -4 "$R/tests_var.log" | cut -c1-300
tar -C "$OUT" -czf "$OUT/results.tgz" r
