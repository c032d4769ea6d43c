#!/usr/bin/env bash
# The next session's first call (one H200, about 7 minutes): the GPU tests of the Hopper files
# (PART=a1: graph capture, then test_hopper.py, test_hopper_bwd.py, test_hopper_dropout.py) with
# time to finish, to name the three failures session 38's run of them showed (call 6, cut by its
# limit at 60 %; gpu_tests.sh now prints a line per test). Issue 8 closes once they are named and
# fixed or shown unrelated. Results $OUT/tests.log, $OUT/tests_main_a1.log, $OUT/failed.txt.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session39a.sh
set -u
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
PART=a1 T1=${T1:-45} T2=${T2:-450} bash "$(dirname "${BASH_SOURCE[0]}")/../gpu_tests.sh" > /dev/null 2>&1
grep -E "^\[gw[0-9]+\] \[ *[0-9]+%\] (FAILED|ERROR)|^(FAILED|ERROR) " "$OUT/tests_main_a1.log" | sort -u | tee "$OUT/failed.txt"
tail -15 "$OUT/tests.log"
