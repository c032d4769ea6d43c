#!/usr/bin/env bash
# Queued by session 60 (no device time left after its two calls). One call of about 330 s, on an
# H200 if one comes: `bash benchmarks/gpu_next_session61.sh`.
#  * history/host_profile_decode.py: session 60's decode call plans, eager host time per call with
#    them and without (ops.PLANS_ENABLED = False) in one process, and whether a replay was recorded
#    (CPU emulation: 58-63 -> 30 us per call, 80 -> 34-37 us with an appended token).
#  * test_kvcache.py + test_kvcache_chunk.py (-n 4: test_gpu_large_batch OOMs beside 8 workers):
#    test_gpu_decode_plans_match_unplanned (new: planned == unplanned bit for bit on the GPU, two
#    streams, contiguous and paged, 1 / auto / 7 splits) and test_gpu_cuda_graph (its warm-up
#    calls now record a plan that the capture replays).
#  * test_plans.py and test_fastlaunch.py (the recording change: fastlaunch.note; the combine
#    kernel now takes the launch fast path at import, not at the first attention call).
#  * bench_overhead.py --skip-first-call (the decode row planned).
# Commit under results/<gpu>/session61/ with the environment, then move this script to history
# (fix its `source` to ../gpu_lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
timeout -k 5 60 python3 benchmarks/history/host_profile_decode.py > "$R/host_profile_decode.log" 2>&1
echo "rc=$?" >> "$R/host_profile_decode.log"; el host_profile_decode
grep -e ' host ' -e 'replay' -e '^rc' "$R/host_profile_decode.log"
gpu_tests kvcache 170 -n 4 tests/test_kvcache.py tests/test_kvcache_chunk.py
gpu_tests plans 150 -n 4 tests/test_plans.py tests/test_fastlaunch.py
timeout -k 5 120 python3 benchmarks/bench_overhead.py --skip-first-call --out "$R/overhead" > "$R/overhead.log" 2>&1
echo "rc=$?" >> "$R/overhead.log"; el overhead
grep -e 'kvcache' -e 'torch SDPA' -e '^rc' "$R/overhead.log"
tar -C "$OUT" -czf "$OUT/results.tgz" r
