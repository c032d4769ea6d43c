#!/usr/bin/env bash
# Session 59: call plans for packed batches (flash_attn_varlen_func, and the packed chunk form
# through it), one call of about 450 s:
#  * test_plans.py on the GPU (test_varlen_plans_replay_on_the_gpu: the Hopper packed forward
#    and backward replayed with each call's own cu_seqlens, d = 64 / 128, one offsets tensor
#    and two), then the packed tests (test_varlen, test_chunk, test_integrations) with the plans;
#  * bench_overhead.py's host table (plans on and off; the varlen and attention_chunk rows are
#    new) and history/host_profile_packed.py (session 58 / 59's probe: host us per call of the
#    varlen and chunked calls, to set against results/h100/session58-59).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests plans 150 -n 4 tests/test_plans.py
gpu_tests packed 260 -n 8 tests/test_varlen.py tests/test_chunk.py tests/test_integrations.py
timeout -k 5 150 python3 benchmarks/bench_overhead.py --skip-first-call --out "$R/overhead" > "$R/overhead.log" 2>&1
echo "rc=$?" >> "$R/overhead.log"; el overhead
grep -e ' us$' -e '^rc' "$R/overhead.log"
timeout -k 5 150 python3 benchmarks/history/host_profile_packed.py > "$R/host_profile.log" 2>&1
echo "rc=$?" >> "$R/host_profile.log"; el host_profile
grep -e ' host ' -e '^prefetch' -e '^exiting' -e '^rc' -e terminate -e FATAL "$R/host_profile.log"
tar -C "$OUT" -czf "$OUT/results.tgz" r
