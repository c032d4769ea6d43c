#!/usr/bin/env bash
# Final device call of a session: every GPU test, then the short benchmarks.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
FINAL="${OUT:-/tmp/out}"; OUT=/tmp/res; rm -rf "$OUT"; mkdir -p "$OUT/att" "$OUT/e2e" "$FINAL"
[ -d .hopper_cache ] && export TRITON_CACHE_DIR="$PWD/.hopper_cache"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/tests.log"
T="tests/test_attention.py tests/test_varlen.py tests/test_ops.py tests/test_validation.py tests/test_configs.py tests/test_hopper.py tests/test_integrations.py tests/test_nn.py"
[ -f tests/test_variants.py ] && T="$T tests/test_variants.py"
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T1:-180} python3 -m pytest -q -p no:cacheprovider -n 8 -m "not gpu" $T 2>&1 | tail -25 >> "$OUT/tests.log"
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T2:-100} python3 -m pytest -q -p no:cacheprovider -n 2 -m gpu $T tests/test_gpu.py 2>&1 | tail -15 >> "$OUT/tests.log"
tail -12 "$OUT/tests.log"
timeout -k 5 ${T3:-70} python3 benchmarks/bench_overhead.py --out "$OUT" 2>&1 | tail -14
timeout -k 5 ${T4:-45} python3 benchmarks/bench_attention.py --quick --out "$OUT/att" --no-plot --no-progress 2>&1 | tail -9
timeout -k 5 ${T5:-50} python3 benchmarks/bench_varlen.py --out "$OUT" --batches 1 2>&1 | tail -8
timeout -k 5 ${T6:-130} python3 benchmarks/bench_e2e.py --quick --max-seconds 100 --out "$OUT/e2e" 2>&1 | tail -12
tar czf "$FINAL/results.tgz" -C "$OUT" . && cp "$OUT/tests.log" "$FINAL/" && ls -R "$OUT" | head -30
