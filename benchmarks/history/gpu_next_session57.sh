#!/usr/bin/env bash
# Ran in session 58 (both parts, on an H100; results/h100/session58/ call1_queue, call2_packed).
# Queued by session 57 (sessions 55-57 ran on H100s only; no H200 came, and session 57's last
# four starts failed, so its calls 3 and 4 never ran). On the H200 (prefer it), two calls of
# under 600 s:
#  1. `bash benchmarks/gpu_next_session57.sh`: history/gpu_session57_call4.sh (test_chunk.py's GPU
#     cases, the CUDA-graph case of the packed chunk form with session 57's offsets cache among
#     them, and history/chunked_host_probe.py: is the packed form's 0.264 ms forward at N 5000,
#     against 0.108 ms at N 5120 on the H100, host time? eager, host, CUDA graph, with the cache
#     and without), then test_hopper_varlen.py and the H200 tables session 56 queued
#     (bench_variants, bench_decode), about 520 s.
#  2. `PART=2 bash benchmarks/gpu_next_session57.sh`: the packed tests (test_varlen,
#     test_varlen_paged, test_integrations, test_chunk) and bench_varlen at d = 128 and 64 with the
#     defaults, about 450 s.
# Commit everything under results/h200/session58/ (or h100/session58/) with the environment.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
if [ "${PART:-1}" = 2 ]; then
  gpu_tests packed 280 -n 8 tests/test_varlen.py tests/test_varlen_paged.py tests/test_integrations.py \
    tests/test_chunk.py
  varlen_tables 128 64
  tar -C "$OUT" -czf "$OUT/results.tgz" r
else
  bash "$(dirname "${BASH_SOURCE[0]}")/gpu_session57_call4.sh"   # (shares $OUT/r; makes its own results.tgz first)
  gpu_tests hvarlen 150 -n 8 tests/test_hopper_varlen.py
  variant_decode_tables
  tar -C "$OUT" -czf "$OUT/results.tgz" r
fi
