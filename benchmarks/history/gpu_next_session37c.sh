#!/usr/bin/env bash
# The next session's third call (one H200, about 8 minutes), after 37a / 37b's adoptions:
#   1. GPU tests: tests/test_hopper_bwd.py -k "test_variants or named_bar_variants or group_split or
#      tma_dkv or split_qk or heads_first" (the override combinations with the TMA_DKV defaults, session 36 call 9 ran
#      about 90 % of them before its time limit, 303 passed, none failed; the d = 256 TMA_DKV tests; the
#      d = 192 default, last GPU-tested in session 36 call 1, before the kernel took its TMA_DKV
#      parameters, and whose SASS hash is two-valued (compile_check.sass_hash));
#   2. the variant table (bench_variants.py --skip-sweep; its plain causal GQA row takes TMA_DKV since
#      session 36: kernel-only 1.116x on that shape in call 6);
#   3. compute-sanitizer memcheck of the d = 64 / 128 dense cases on the Hopper tier (memcheck_cases.py:
#      the TMA stores of dK / dV, ragged N, GQA, packed q).
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session37c.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-300} tests/test_hopper_bwd.py \
  -k "test_variants or named_bar_variants or group_split or tma_dkv or split_qk or heads_first" -n 4
mkdir -p "$R/bench"
timeout -k 5 ${T_BENCH:-170} python3 benchmarks/bench_variants.py --skip-sweep --rep ${REP:-30} --out "$R/bench" \
  > "$R/bench_variants.log" 2>&1
echo "rc=$?" >> "$R/bench_variants.log"; el bench_variants
sed -n '/^| variant/,/^$/p' "$R/bench/bench_variants.md" 2>/dev/null | head -16
timeout -k 5 ${T_MEMCHECK:-150} compute-sanitizer --tool memcheck --error-exitcode 3 \
  python3 benchmarks/memcheck_cases.py --tier hopper --only "d64,d128 causal gqa,d128 full" \
  > "$R/memcheck_hopper_d64_d128.log" 2>&1
echo "rc=$?" >> "$R/memcheck_hopper_d64_d128.log"; el memcheck
grep -E "ERROR SUMMARY|all ok|off or raised|^rc=" "$R/memcheck_hopper_d64_d128.log" | tail -5
tar czf "$OUT/results.tgz" -C "$OUT" r
