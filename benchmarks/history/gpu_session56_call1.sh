#!/usr/bin/env bash
# Session 56 call 1: the first part of session 55's queue (history/gpu_next_session55.sh, since replaced by
# gpu_next_session56.sh): the packed Hopper tests (10 packed backward cases among them, never on a
# GPU before), then bench_varlen with the "ours varlen hopper bwd" row. Rule: the tests pass and that
# row's backward beats the "ours varlen hopper" row's (portable backward) in both seeds ->
# _dispatch.HOPPER_VARLEN_BWD_DEFAULT "1" (met: 56 passed, 1.31x / 1.35x).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests hvarlen 240 -n 8 tests/test_hopper_varlen.py
timeout -k 5 120 python3 benchmarks/bench_varlen.py --batches 2 --out "$R/varlen" > "$R/bench_varlen.log" 2>&1
echo "rc=$?" >> "$R/bench_varlen.log"; el bench_varlen
sed -n '/^| seed/,/^$/p' "$R/varlen/bench_varlen.md" 2>/dev/null | cut -c1-160
tar -C "$OUT" -czf "$OUT/results.tgz" r
