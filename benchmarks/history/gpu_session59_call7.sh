#!/usr/bin/env bash
# Session 59 call 7: the decode kernels on the launch fast path (fastlaunch.install in
# kernels/decode.py): test_kvcache.py and test_kvcache_chunk.py on the GPU (-n 4: call 5's -n 8
# ran one large-batch case out of memory beside the others), then the decode host profile
# (history/host_profile_decode.py; call 6 read 174.7 us per read-only call, 232.5 with an append).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
timeout -k 5 60 python3 benchmarks/history/host_profile_decode.py > "$R/host_profile_decode.log" 2>&1
echo "rc=$?" >> "$R/host_profile_decode.log"; el host_profile_decode
grep -e ' host ' -e '^rc' "$R/host_profile_decode.log"
gpu_tests kvcache 150 -n 4 tests/test_kvcache.py tests/test_kvcache_chunk.py
tar -C "$OUT" -czf "$OUT/results.tgz" r
