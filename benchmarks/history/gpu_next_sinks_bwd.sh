#!/usr/bin/env bash
# Why the sinks row's backward reads 1.430 ms against the plain row's 0.922 (session 28's variant
# table; session 23 call 8 had it at 0.986 ms): benchmarks/bench_sinks_bwd.py times the backward of
# the variant table's call (B = 2, N = 4k, Hq 16 / Hkv 4, d = 128, bf16, causal) plain, dropout, plain with
# the call plans off, with sinks (grad and no grad), with sinks and the fold off, with sinks and
# torch's dQ copy; each with its do_bench median, host time per backward and the CUDA kernels per
# backward. One H200, about 2-3 minutes. A record, no decision: what it shows names the fix (a host-
# bound path: its host time close to its backward time; a slower kernel: the kernel list).
# First the GPU tests of sinks (kernels/bwd.py sinks_grad, session 28: the sinks gradient in one
# kernel and one reduction, CPU-tested only): tests/test_variants.py, test_hopper.py,
# test_hopper_dropout.py -k sink (T_TESTS 150 s).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests_sinks ${T_TESTS:-150} -n 8 tests/test_variants.py tests/test_hopper.py tests/test_hopper_dropout.py -k sink
timeout -k 5 ${T_BENCH:-150} python3 benchmarks/bench_sinks_bwd.py --out "$R" > "$R/bench_sinks_bwd.log" 2>&1
echo "rc=$?" >> "$R/bench_sinks_bwd.log"; el bench_sinks_bwd
cut -c1-600 "$R/bench_sinks_bwd.log" | tail -12
tar -C "$OUT" -czf "$OUT/results.tgz" r
