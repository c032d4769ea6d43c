#!/usr/bin/env bash
# Queued by session 55 (its device time went to the packed Hopper forward, on an H100 only).
# On the H200 (prefer it; split into calls of at most 600 s):
#  1. The Hopper backward's packed path (kernels/hopper/bwd.py IS_VARLEN, hopper_backward_varlen;
#     opt-in FLASHATTN_TRITON_HOPPER_VARLEN_BWD=1; compiled for sm_90 in compile_check, never run):
#     its tests (test_hopper_varlen.py: the backward tests switch it on), then bench_varlen's
#     "ours varlen hopper bwd" row. Rule: the tests pass and its backward is faster than the
#     "ours varlen hopper" row's (portable backward) in both seeds -> _dispatch.HOPPER_VARLEN_BWD_DEFAULT
#     "1", and the packed tests again with it on (test_varlen, test_varlen_paged, test_integrations).
#     A failure: fix it, or leave the switch off and say why.
#  2. The packed Hopper forward on an H200 (session 55: H100 only): the same tests and the table.
#  3. The H200 tables still owed (the H100 ones are in results/h100/session55/): bench_variants,
#     bench_decode.
# Commit everything under results/h200/session56/ with the environment.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests hvarlen 240 -n 8 tests/test_hopper_varlen.py
timeout -k 5 120 python3 benchmarks/bench_varlen.py --batches 2 --out "$R/varlen" > "$R/bench_varlen.log" 2>&1
echo "rc=$?" >> "$R/bench_varlen.log"; el bench_varlen
sed -n '/^| seed/,/^$/p' "$R/varlen/bench_varlen.md" 2>/dev/null | cut -c1-160
# (second call)
# gpu_tests packed 300 -n 8 tests/test_varlen.py tests/test_varlen_paged.py tests/test_integrations.py
# timeout -k 5 200 python3 benchmarks/bench_variants.py --skip-sweep --rep 30 --out "$R/bench" > "$R/bench_variants.log" 2>&1
# timeout -k 5 130 python3 benchmarks/bench_decode.py --out "$R/decode" --max-seconds 90 > "$R/bench_decode.log" 2>&1
tar -C "$OUT" -czf "$OUT/results.tgz" r
