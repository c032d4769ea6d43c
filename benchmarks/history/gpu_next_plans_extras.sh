#!/usr/bin/env bash
# Session 29's call plans for calls with sinks, ALiBi slopes or dropout (ops.FwdPlan.extras;
# CPU- and fake-driver-tested only) on the H200, then what they change, and the window row
# with its new default (HOPPER_BWD_WINDOW_MIN_LEFT = 1023, session 29 call 4):
#   1. tests (T_TESTS 200 s): tests/test_plans.py with its gpu-marked test (the plans replay
#      both ways at d = 128: the sinks fold, the Hopper dropout backward; planned = full
#      path), the sinks / dropout / alibi tests of test_variants.py and test_hopper_dropout.py,
#      and the window tests of test_hopper_bwd.py;
#   2. benchmarks/bench_sinks_bwd.py (T_SINKS 150 s): the sinks row's backward now planned
#      (session 29 call 1: host 0.8-1.1 ms per backward unplanned, 0.5 ms planned);
#   3. benchmarks/gpu_next_variants.sh's table (T_BENCH 170 s): every variant row next to
#      its peer in one run (the window row on the Hopper backward; sinks, dropout, ALiBi
#      planned).
# One H200, about 6-8 minutes. A record: the variant table's rows go to the README's
# paragraph and docs/variants.md; a failed test is a bug to fix before anything else.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests_plans ${T_TESTS:-200} -n 8 tests/test_plans.py \
  "tests/test_variants.py" "tests/test_hopper_dropout.py" "tests/test_hopper_bwd.py" \
  -k "test_plans or sink or dropout or alibi or window"
timeout -k 5 ${T_SINKS:-150} python3 benchmarks/bench_sinks_bwd.py --out "$R/sinks" > "$R/bench_sinks_bwd.log" 2>&1
echo "rc=$?" >> "$R/bench_sinks_bwd.log"; el bench_sinks_bwd
grep -E "^[a-z].*bwd|rc=" "$R/bench_sinks_bwd.log" | cut -c1-220
OUT="$R/variants" bash benchmarks/gpu_next_variants.sh 2>&1 | tail -20
tar -C "$OUT" -czf "$OUT/results.tgz" r
