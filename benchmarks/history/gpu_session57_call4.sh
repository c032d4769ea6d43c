#!/usr/bin/env bash
# Session 57 call 4 (call 3 never started: no machine; about 300 s of device time left): the
# packed chunk form's GPU tests (the CUDA-graph case with the offsets cache among them), then
# the host / device probe of its chunked row (history/chunked_host_probe.py).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests chunk 100 -n 4 tests/test_chunk.py -k gpu
timeout -k 5 100 python3 benchmarks/history/chunked_host_probe.py > "$R/chunked_probe.log" 2>&1
echo "rc=$?" >> "$R/chunked_probe.log"; el chunked_probe; grep -e '^N ' -e '^rc' "$R/chunked_probe.log"
tar -C "$OUT" -czf "$OUT/results.tgz" r
