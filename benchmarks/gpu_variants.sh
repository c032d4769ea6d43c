#!/usr/bin/env bash
# One device call: the variant benchmark (rows stream to bench_variants.log),
# the realistic-size variant tests, and the first-call / host-overhead bench.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
timeout -k 5 ${T1:-300} python3 benchmarks/bench_variants.py --out "$OUT" > "$OUT/bench_variants.log" 2>&1
echo "bench_variants rc=$?" >> "$OUT/bench_variants.log"
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T2:-120} python3 -m pytest -q -p no:cacheprovider -rfE -v --tb=short \
  -n 2 -m gpu -k "not cuda_graph" tests/test_variants.py > "$OUT/gpu_variant_tests.log" 2>&1
timeout -k 5 ${T3:-70} python3 benchmarks/bench_overhead.py --out "$OUT" > "$OUT/bench_overhead.log" 2>&1
tail -5 "$OUT"/*.log
