#!/usr/bin/env bash
# Short last call of session 10 (about 3 minutes): the tests that failed in
# call 5 (test-side: a prefetch call counted, a portable-only test taking the
# Hopper backward, a d=64 grid expectation, a 3-stage d=64 config that does
# not fit and must now be declined), then the auto-tier GPU tests of the plans,
# fast launch, configs and CLI with the Hopper backward on by default.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/out}"; R="$OUT/r"; mkdir -p "$R"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
git log -1 --format=%H > "$R/env.txt" 2>/dev/null
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T1:-70} python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -n 6 \
  tests/test_hopper_bwd.py "tests/test_hopper.py::test_launch_plans_on_a_fake_driver" \
  "tests/test_backward.py::test_split_qk_backward_choice" > "$R/tests_fixed.log" 2>&1
echo "rc=$?" >> "$R/tests_fixed.log"; el fixed; tail -4 "$R/tests_fixed.log" | cut -c1-300
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T2:-100} python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -n 6 \
  tests/test_plans.py tests/test_fastlaunch.py tests/test_configs.py tests/test_cli.py > "$R/tests_auto.log" 2>&1
echo "rc=$?" >> "$R/tests_auto.log"; el auto; tail -6 "$R/tests_auto.log" | cut -c1-300
tar -C "$OUT" -czf "$OUT/results.tgz" r
