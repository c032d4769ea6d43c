#!/usr/bin/env bash
# compute-sanitizer memcheck over benchmarks/memcheck_cases.py (issue 7 deliverable 4: "clean on
# ragged shapes"; last run on the Hopper kernels in session 10, before the persistent / dynamic
# schedulers, head sections, EARLY_Q, ROW_BOUND, the split Q K^T backward and the dropout paths).
# One H200, a few minutes per tier (cold compiles dominate: TIERS=hopper in one call and
# TIERS="portable auto" in another if one call would run too long): for each tier (hopper forced, portable forced, auto: the library's
# choice) the cases run once plainly (kernels compiled into the cache, results against float64) and
# once under `compute-sanitizer --tool memcheck`; logs in $R/TIER.log and
# $R/memcheck_TIER.log, each ending with its exit status; the sanitizer's summary lines printed.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
for tier in ${TIERS:-hopper portable auto}; do
  timeout -k 5 ${T_PLAIN:-150} python3 benchmarks/memcheck_cases.py --tier $tier > "$R/$tier.log" 2>&1
  echo "rc=$?" >> "$R/$tier.log"; el "$tier plain"; tail -2 "$R/$tier.log"
  timeout -k 5 ${T_MEMCHECK:-200} compute-sanitizer --tool memcheck --error-exitcode 3 \
    python3 benchmarks/memcheck_cases.py --tier $tier > "$R/memcheck_$tier.log" 2>&1
  echo "rc=$?" >> "$R/memcheck_$tier.log"; el "$tier memcheck"
  grep -E "ERROR SUMMARY|LEAK SUMMARY|all ok|off or raised|^rc=" "$R/memcheck_$tier.log" | tail -5
done
tar -C "$OUT" -czf "$OUT/results.tgz" r
