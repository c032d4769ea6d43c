#!/usr/bin/env bash
# Queued by session 58 (its GPU calls all ran on an H100; its last starts failed). Two calls of
# under 600 s; on an H200 if one comes:
#  1. `bash benchmarks/history/gpu_next_session58.sh`: history/host_profile_packed.py in its second form
#     (must end with rc=0: the exit waits for the backward prefetch still compiling; session 58's
#     first form aborted with status 134 before _prefetch._wait_at_exit; then clean host profiles
#     of the packed calls, and a call with gradients timed during and after its prefetch), the
#     prefetch and launch tests on the GPU (test_fastlaunch.py), test_hopper_varlen.py, then the
#     variant table and the decode table, about 450 s.
#  2. `PART=2 bash benchmarks/history/gpu_next_session58.sh`: the packed tests (test_varlen,
#     test_varlen_paged, test_integrations, test_chunk) and bench_varlen at d = 128 and 64, about
#     450 s (as session 58's call 2; on an H200 these are the tables still owed there).
# Commit under results/h200/session59/ (or h100/session59/) with the environment.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
if [ "${PART:-1}" = 2 ]; then
  gpu_tests packed 280 -n 8 tests/test_varlen.py tests/test_varlen_paged.py tests/test_integrations.py \
    tests/test_chunk.py
  varlen_tables 128 64
else
  timeout -k 5 200 python3 benchmarks/history/host_profile_packed.py > "$R/host_profile.log" 2>&1
  echo "rc=$?" >> "$R/host_profile.log"; el host_profile
  grep -e ' host ' -e '^prefetch' -e '^exiting' -e '^rc' -e terminate -e FATAL "$R/host_profile.log"
  gpu_tests fastlaunch 100 -n 4 tests/test_fastlaunch.py
  gpu_tests hvarlen 120 -n 8 tests/test_hopper_varlen.py
  variant_decode_tables
fi
tar -C "$OUT" -czf "$OUT/results.tgz" r
