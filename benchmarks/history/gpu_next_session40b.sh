#!/usr/bin/env bash
# Session 40, call 3 (one H200, about 7 minutes): with TMA_DKV_DEFAULT[192] = (True, True)
# (adopted from call 1, gpu_next_tma_dkv192.sh):
#   1. the variant table (gpu_next_variants.sh: its d = 192 / dv = 128 row now takes the TMA stores);
#   2. test_hopper_bwd.py -k "192" at the new default (reference cases, group split, steps);
#   3. the realistic-size gpu-marked tests (gpu_tests.sh PART=b2's step, -n 2, T3 s).
# Results: $OUT/verdict.txt (the table's), $OUT/tests192.log, $OUT/tests_gpu.log, $OUT/results.tgz.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_session40b.sh
D="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
bash "$D/../gpu_next_variants.sh"
(
  source "$D/../gpu_lib.sh"
  gpu_tests tests192 ${T_TESTS:-150} -n 8 -k "192" tests/test_hopper_bwd.py
  cp "$R/tests192.log" "$OUT/tests192.log" 2>/dev/null
)
cd "$D/../.." && PYTHONPATH="$PWD" FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T3:-240} python3 -m pytest -q -rf --tb=short -n 2 -m gpu -k "not cuda_graph" tests/ \
  > "$OUT/tests_gpu.log" 2>&1; echo "rc=$?" >> "$OUT/tests_gpu.log"; tail -3 "$OUT/tests_gpu.log"
tar -czf "$OUT/results.tgz" -C "$OUT" r 2>/dev/null && rm -rf "$OUT/r"
