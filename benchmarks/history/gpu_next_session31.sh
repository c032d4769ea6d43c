#!/usr/bin/env bash
# Session 31's first call: what session 30 changed after its last GPU run, then the deciding
# timing of 16-bit GQA partials.  One H200, about 6 minutes.
#   1. GPU tests (T_TESTS 150 s): test_hopper_bwd.py -k "raw_backward_deterministic or
#      partials or group_sum or group_split_matches" (ops.flash_bwd's new deterministic flag, which the ring now
#      passes to every block: False takes the Hopper backward, True the portable kernels,
#      bit-identical on a repeat; GROUP_PARTIALS_16BIT's integer setting), and
#      test_plans.py (the plan worlds with the dispatch switches and tables);
#   2. benchmarks/history/gpu_next_partials16d.sh (its own rule, in its header).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests_s31 ${T_TESTS:-150} -n 8 tests/test_hopper_bwd.py tests/test_plans.py \
  -k "raw_backward_deterministic or partials or group_sum or group_split_matches or test_plans"
SKIP_TESTS=1 OUT="$R/p16d" bash benchmarks/history/gpu_next_partials16d.sh 2>&1 | tail -25
tar -C "$OUT" -czf "$OUT/results.tgz" r
