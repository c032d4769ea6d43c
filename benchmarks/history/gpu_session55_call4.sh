#!/usr/bin/env bash
# Session 55 call 4: the Hopper forward's packed path (kernels/hopper/fwd.py IS_VARLEN,
# FLASHATTN_TRITON_HOPPER_VARLEN=1; never on a GPU before): its tests, the dense Hopper
# forward's tests (its kernel gained the packed arguments; the dense builds' SASS counts are
# unchanged in compile_check), and bench_varlen with the "ours varlen hopper" row.
# Rule: the tests pass; the switch's default turns "1" if the hopper row is faster than
# "ours varlen" (the portable forward) in both seeds.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
echo "call 4 of session 55: Hopper varlen forward"
gpu_tests hvarlen 200 -n 8 tests/test_hopper_varlen.py
timeout -k 5 90 python3 benchmarks/bench_varlen.py --batches 2 --out "$R/varlen" > "$R/bench_varlen.log" 2>&1
echo "rc=$?" >> "$R/bench_varlen.log"; el bench_varlen
sed -n '/^| seed/,/^$/p' "$R/varlen/bench_varlen.md" 2>/dev/null | cut -c1-160
gpu_tests hopper 200 -n 8 tests/test_hopper.py tests/test_varlen.py
grep -E "^(FAILED|ERROR)" "$R/hvarlen.log" | head -20 | cut -c1-300
tar -C "$OUT" -czf "$OUT/results.tgz" r
