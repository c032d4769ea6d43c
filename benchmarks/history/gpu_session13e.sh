#!/usr/bin/env bash
# Session 13 call 5 (about 5 minutes on one H200):
#   1. tests/test_hopper_dropout.py with the opt-in, after the test-side fix of
#      its 13 interpreter-only tests (call 4: CPU tensors on the GPU machine);
#   2. test_hopper.py + test_hopper_bwd.py whole, at the merged kernels
#      (split Q K^T + window + dropout in one forward);
#   3. the API's windowed Hopper backward: host profile (cProfile, 20 calls)
#      next to the kernel lists (call 4: 607 us of kernels per call, but the
#      call takes about 1.2 ms).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
FLASHATTN_TRITON_TEST_DEVICE=cuda FLASHATTN_TRITON_HOPPER_DROPOUT=1 timeout -k 5 ${T_DROP:-90} python3 -m pytest -q \
  -p no:cacheprovider -rfE --tb=short -n 8 tests/test_hopper_dropout.py > "$R/tests_dropout.log" 2>&1
echo "rc=$?" >> "$R/tests_dropout.log"; el tests_dropout; tail -3 "$R/tests_dropout.log" | cut -c1-300
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_HOP:-200} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 8 tests/test_hopper.py tests/test_hopper_bwd.py > "$R/tests_hopper.log" 2>&1
echo "rc=$?" >> "$R/tests_hopper.log"; el tests_hopper; tail -4 "$R/tests_hopper.log" | cut -c1-300
timeout -k 5 ${T_PROF:-60} python3 benchmarks/hopper_bwd_probe.py --rows window --head-dims 128 --seqlens 2048 \
  --windows 256 --profile --rep 20 --out "$R/profile" > "$R/profile.log" 2>&1
echo "rc=$?" >> "$R/profile.log"; el profile; grep -A40 "HOSTPROFILE" "$R/profile.log" | cut -c1-160 | head -90
tar -C "$OUT" -czf "$OUT/results.tgz" r
