#!/usr/bin/env bash
# Session 39's second check (one H200, about 7 minutes) after two kernel changes:
#  (a) the dropout backward's RNG warps the default at d = 64 / 128 (DROPOUT_RNG_CONFIGS, = 2, with
#      232 consumer registers at d = 64; session 39 call 2's rule met), and
#  (b) _store_tile_tma stages a tile in the swizzle of its own width (SPLIT_D's 32-column dK / dV at
#      d = 64 failed to build with buf's 128-byte swizzle: the three test_split_d_variants failures
#      of session 39 call 1).
#   1. GPU tests: test_hopper_bwd.py -k "dropout or split_d_variants", test_hopper_dropout.py and
#      the API's dropout tests (test_variants.py -k dropout): the new default's gradients and masks
#      (NaN-poisoned outputs, float64 references, the mask against its replay), the SPLIT_D builds.
#   2. The variant table (bench_variants.py, gpu_next_variants.sh's command): its dropout row at the
#      new default next to SDPA (issue 10's row: 0.89x in session 37 call 3).
# No rule: a record (tests pass or not; the table).
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session39b.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-240} -n 8 -k "dropout or split_d_variants" \
  tests/test_hopper_bwd.py tests/test_hopper_dropout.py tests/test_variants.py
grep -E "^(FAILED|ERROR) " "$R/tests.log" | sort -u | head -20 | tee "$OUT/failed.txt"
mkdir -p "$R/bench"
timeout -k 5 ${T_BENCH:-170} python3 benchmarks/bench_variants.py --skip-sweep --rep ${REP:-30} --out "$R/bench" \
  > "$R/bench_variants.log" 2>&1
echo "rc=$?" >> "$R/bench_variants.log"; el bench_variants
sed -n '/^| variant/,/^$/p' "$R/bench/bench_variants.md" 2>/dev/null | head -14
tar -czf "$OUT/results.tgz" -C "$OUT" r
