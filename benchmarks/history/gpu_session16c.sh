#!/usr/bin/env bash
# Session 16, fourth H200 call (about 6 minutes): what calls 2-3 adopted, re-tested on
# the GPU, and the decode combination with PDL kept to small launches.
#   1. the Hopper mask forward now on by default (HOPPER_MASK_DEFAULT = "1"):
#      test_hopper_mask.py, and the mask tests of the API files (they now take it);
#   2. the window backward's size rule (HOPPER_BWD_WINDOW_MIN_LEFT = 2047):
#      test_hopper_bwd.py -k window;
#   3. gpu_next_decode.sh with VARIANTS default, reserve, deep+fill+reserve,
#      deep+fill+pdl+reserve (pdl now only at the split rule's small batch); the same
#      rule as in its header.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests_mask 150 -n 8 tests/test_hopper_mask.py tests/test_variants.py tests/test_nn.py \
  tests/test_integrations.py -k "mask"
gpu_tests tests_window 120 -n 8 tests/test_hopper_bwd.py -k "window"
tar -C "$OUT" -czf "$OUT/tests.tgz" r
VARIANTS="default,reserve,deep+fill+reserve,deep+fill+pdl+reserve" T_SWEEP=1 \
  TAIL=30 run_each decode:gpu_next_decode
