#!/usr/bin/env bash
# Queued by session 56 (sessions 55-56 ran on H100s only; every H200 start was refused or not given).
# On the H200 (prefer it), two calls of under 600 s:
#  1. `bash benchmarks/gpu_next_session56.sh` (this script): history/gpu_session56_call5.sh, which on an
#     H200 runs test_hopper_varlen.py, bench_varlen at d = 128 and d = 64 (the packed Hopper forward and
#     backward, on by default since sessions 55 / 56), and the H200 tables still owed (bench_variants,
#     bench_decode; the H100 ones are in results/h100/session55/), about 480 s.
#  2. `PART=2 bash benchmarks/gpu_next_session56.sh`: the packed tests (test_varlen, test_varlen_paged,
#     test_integrations: its GPU peak-memory test of the unbuilt packed-documents mask has not passed on a
#     GPU yet, session 56 call 9 ran the tree before the fix; test_chunk: chunks as sequences with a
#     shorter last chunk, the packed form, never on a GPU), then that form's timing, about 350 s.
# Commit everything under results/h200/session57/ with the environment.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
if [ "${PART:-1}" = 2 ]; then
  gpu_tests packed 300 -n 8 tests/test_varlen.py tests/test_varlen_paged.py tests/test_integrations.py \
    tests/test_chunk.py
  # chunks as sequences with each row's last chunk shorter (session 56, the packed form; N 4000 = 3 x 1024
  # + 928) next to whole chunks (N 4096), against FlexAttention's block mask
  timeout -k 5 150 python3 benchmarks/bench_variants.py --only chunked --shapes "2,4000,16,4,128,1;2,4096,16,4,128,1" \
    --out "$R/chunked" > "$R/chunked.log" 2>&1
  echo "rc=$?" >> "$R/chunked.log"; el chunked
  tar -C "$OUT" -czf "$OUT/results.tgz" r
else
  TAIL=60 run_each call5:gpu_session56_call5
fi
