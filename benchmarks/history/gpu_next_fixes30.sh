#!/usr/bin/env bash
# Session 30 call 1 (gpu_next_plans_extras.sh) failed 6 GPU tests, fixed at 91b4063:
#   - test_tensor_option_plans_replay_on_the_gpu[sinks]: the forward of a call whose sinks
#     are folded in after the Hopper forward never recorded (the merge kernel of
#     ops._fold_sinks launched outside the launch fast path, so the recording saw a launch
#     it could not replay); kernels/combine.py's kernel now takes the fast path;
#   - test_dropout_keep_mask_is_the_portable_one (4) and test_dropout_rounds_switch (which
#     runs it in a child): dropout calls are planned since session 29 and a replay does not
#     call the spied Hopper forward; the spies turn plans off.
# This call runs those files again on the H200 (T_TESTS 300 s): test_plans.py (its gpu
# test), the whole of test_hopper_dropout.py, the sinks / dropout tests of test_variants.py
# and test_hopper.py.  A failed test is a bug to fix before anything else.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests_fixes ${T_TESTS:-300} -n 8 tests/test_plans.py tests/test_hopper_dropout.py \
  tests/test_variants.py tests/test_hopper.py -k "test_plans or test_hopper_dropout or sink or dropout"
tar -C "$OUT" -czf "$OUT/results.tgz" r
