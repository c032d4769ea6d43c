#!/usr/bin/env bash
# Session 12, call 2 (about 8 minutes on one Firecracker H200):
#   1. Nsight Compute profiles (gpu_ncu_profile.sh's four cases of ours,
#      plus cuDNN on the backward d=128 causal and forward d=64 causal rows);
#   2. the forced-portable varlen and backward GPU tests (the portable
#      kernels' shift_mul argument), which ran out of time in call 1.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
FLASHATTN_TRITON_BACKEND=portable FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_POR:-200} python3 -m pytest -q \
  -p no:cacheprovider -rfE --tb=short -n 8 tests/test_varlen.py tests/test_backward.py > "$R/tests_portable.log" 2>&1
echo "rc=$?" >> "$R/tests_portable.log"; el tests_portable; tail -3 "$R/tests_portable.log" | cut -c1-300
T_CASE=${T_CASE:-60} bash benchmarks/history/gpu_ncu_profile.sh
