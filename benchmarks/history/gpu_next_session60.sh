#!/usr/bin/env bash
# Queued by session 59 (its GPU calls all ran on an H100). Two calls of under 600 s, on an H200
# if one comes (the tables there were last taken in session 43):
#  1. `bash benchmarks/gpu_next_session60.sh`: the eager decode host profile
#     (history/host_profile_decode.py: session 59's decode host changes, the direct call of the
#     op's implementation, the fast launch, the kept plans, timed together for the first time;
#     calls 6-7 read 175-215 us per call before the last two), test_plans.py (the packed call
#     plans' GPU test), test_hopper_varlen.py, test_fastlaunch.py, test_kvcache.py and
#     test_kvcache_chunk.py, then the variant and decode tables, about 480 s.
#  2. `PART=2 bash benchmarks/gpu_next_session60.sh`: the packed tests (test_varlen,
#     test_varlen_paged, test_integrations, test_chunk), bench_varlen at d = 128 and 64, and
#     bench_overhead.py's host table (the packed rows planned since session 59), about 450 s.
# Commit under results/h200/session60/ (or h100/session60/) with the environment.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
if [ "${PART:-1}" = 2 ]; then
  gpu_tests packed 260 -n 8 tests/test_varlen.py tests/test_varlen_paged.py tests/test_integrations.py \
    tests/test_chunk.py
  varlen_tables 128 64
  timeout -k 5 120 python3 benchmarks/bench_overhead.py --skip-first-call --out "$R/overhead" > "$R/overhead.log" 2>&1
  echo "rc=$?" >> "$R/overhead.log"; el overhead
  grep -e ' us$' -e '^rc' "$R/overhead.log"
else
  timeout -k 5 60 python3 benchmarks/history/host_profile_decode.py > "$R/host_profile_decode.log" 2>&1
  echo "rc=$?" >> "$R/host_profile_decode.log"; el host_profile_decode
  grep -e ' host ' -e '^rc' "$R/host_profile_decode.log"
  gpu_tests plans 150 -n 4 tests/test_plans.py
  gpu_tests hvarlen 120 -n 8 tests/test_hopper_varlen.py tests/test_fastlaunch.py
  gpu_tests kvcache 150 -n 4 tests/test_kvcache.py tests/test_kvcache_chunk.py
  variant_decode_tables
fi
tar -C "$OUT" -czf "$OUT/results.tgz" r
