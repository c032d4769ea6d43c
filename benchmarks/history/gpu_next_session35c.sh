#!/usr/bin/env bash
# After session 35's adoptions (CONFIGS[192] the 128-row Q_HALVES step; heads-first for split causal
# GQA calls at d = 64 from 4096 keys, and with dropout at d = 64 / 128), on one H200, about 8 minutes:
#   1. GPU tests of the paths they change: tests/test_hopper_bwd.py -k "split_qk or heads_first or
#      row_bound or group_split_variants" (the d = 192 default against float64 on every case, its
#      variants and the 64-row step of before as overrides; heads-first defaults at d = 64 / 128 with
#      and without dropout);
#   2. the variant table (bench_variants.py --skip-sweep: its d=192/dv=128, plain causal and dropout
#      rows beside their peers);
#   3. compute-sanitizer memcheck of the d = 192 case on the Hopper tier (memcheck_cases.py).
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session35c.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-230} tests/test_hopper_bwd.py \
  -k "split_qk or heads_first or row_bound or group_split_variants" -n 4
mkdir -p "$R/bench"
timeout -k 5 ${T_BENCH:-170} python3 benchmarks/bench_variants.py --skip-sweep --rep ${REP:-30} --out "$R/bench" \
  > "$R/bench_variants.log" 2>&1
echo "rc=$?" >> "$R/bench_variants.log"; el bench_variants
sed -n '/^| variant/,/^$/p' "$R/bench/bench_variants.md" 2>/dev/null | head -16
timeout -k 5 ${T_PLAIN:-60} python3 benchmarks/memcheck_cases.py --tier hopper --only d192 > "$R/hopper_d192.log" 2>&1
echo "rc=$?" >> "$R/hopper_d192.log"; el "d192 plain"; tail -2 "$R/hopper_d192.log"
timeout -k 5 ${T_MEMCHECK:-120} compute-sanitizer --tool memcheck --error-exitcode 3 \
  python3 benchmarks/memcheck_cases.py --tier hopper --only d192 > "$R/memcheck_hopper_d192.log" 2>&1
echo "rc=$?" >> "$R/memcheck_hopper_d192.log"; el "d192 memcheck"
grep -E "ERROR SUMMARY|LEAK SUMMARY|all ok|off or raised|^rc=" "$R/memcheck_hopper_d192.log" | tail -5
tar czf "$OUT/results.tgz" -C "$OUT" r
