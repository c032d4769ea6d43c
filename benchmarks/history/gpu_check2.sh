#!/usr/bin/env bash
# Device call: backward profile, variant benchmark, GPU tests of what the
# grouped-query dK/dV change touches.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
timeout -k 5 100 python3 benchmarks/profile_bwd.py --out "$OUT" --sweep "64,128,8,3;32,128,8,2;64,64,4,3" > "$OUT/profile_bwd.log" 2>&1
timeout -k 5 150 python3 benchmarks/bench_variants.py --out "$OUT" > "$OUT/bench_variants.log" 2>&1
export FLASHATTN_TRITON_TEST_DEVICE=cuda
timeout -k 5 150 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -n 12 -m "not gpu" \
  tests/test_attention.py tests/test_varlen.py tests/test_variants.py tests/test_ops.py tests/test_integrations.py > "$OUT/tests.log" 2>&1
timeout -k 5 110 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -n 3 -m gpu -k "not cuda_graph" \
  tests/test_gpu.py tests/test_variants.py > "$OUT/tests_gpu.log" 2>&1
tail -3 "$OUT/tests.log" "$OUT/tests_gpu.log"; grep -v Warn "$OUT/profile_bwd.log" | cut -c1-300
