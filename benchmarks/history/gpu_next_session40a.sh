#!/usr/bin/env bash
# The next session's first call (one H200, about 7-8 minutes, cold caches):
#   1. The dropout GPU tests at session 39's defaults (DROPOUT_RNG_CONFIGS: d = 64 the late bits
#      at 232 consumer registers, = 3; d = 128 = 2), which ran on the GPU only as overrides or
#      through the probe's check: test_hopper_bwd.py -k dropout, test_hopper_dropout.py,
#      test_variants.py -k dropout (NaN-poisoned outputs against float64 with the replayed mask).
#   2. gpu_next_tma_dkv192.sh: TMA_DKV on the d = 192 / dv = 128 backward, its tests and rule.
# Results: $OUT/tests.log, $OUT/failed.txt, $OUT/verdict_tma192.txt, $OUT/results.tgz.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session40a.sh
D="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
(
  source "$D/../gpu_lib.sh"
  gpu_tests tests ${T_TESTS:-300} -n 12 -vv -k "dropout" \
    tests/test_hopper_bwd.py tests/test_hopper_dropout.py tests/test_variants.py
  grep -E "^(FAILED|ERROR) |\] (FAILED|ERROR) " "$R/tests.log" | sort -u | head -30 > "$OUT/failed.txt"
  cp "$R/tests.log" "$OUT/tests.log"
)
mkdir -p "$OUT/tma192"
OUT="$OUT/tma192" bash "$D/gpu_next_tma_dkv192.sh"
cp "$OUT/tma192/verdict.txt" "$OUT/verdict_tma192.txt" 2>/dev/null
tar -czf "$OUT/results.tgz" -C "$OUT" r tma192 && rm -rf "$OUT/r" "$OUT/tma192"
