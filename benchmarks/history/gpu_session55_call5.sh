#!/usr/bin/env bash
# Session 55 call 5: with HOPPER_VARLEN_DEFAULT "1" (call 4's rule met), every packed test on the GPU,
# now through the Hopper forward where it takes the call: the rule is that they pass.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
echo "call 5 of session 55: packed tests with the Hopper packed forward on by default"
gpu_tests packed 300 -n 8 tests/test_varlen.py tests/test_varlen_paged.py tests/test_hopper_varlen.py \
  tests/test_integrations.py tests/test_ops.py
grep -E "^(FAILED|ERROR)" "$R/packed.log" | head -20 | cut -c1-300
tar -C "$OUT" -czf "$OUT/results.tgz" r
