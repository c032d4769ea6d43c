#!/usr/bin/env bash
# The GPU test suite in one device call: the CUDA-graph test alone first (its
# failure would leave the CUDA generator in capture state for the rest of a
# worker), then every other test compiled on the GPU, then the realistic-size
# `gpu`-marked tests and the forced Hopper tier.  Logs go to $OUT/tests.log.
# Any -n is safe for GPU memory: the tests marked `bigmem` (dense float64
# references of many GiB) take turns on a file lock across the xdist workers
# (tests/conftest.py); -n spreads the others.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 FLASHATTN_TRITON_TEST_DEVICE=cuda
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"; LOG="$OUT/tests.log"
[ -d .hopper_cache ] && export TRITON_CACHE_DIR="$PWD/.hopper_cache"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$LOG"
git log -1 --format='commit %h %s' 2>/dev/null | tee -a "$LOG"
PY="python3 -m pytest -q -p no:cacheprovider -rfE"
GRAPH="tests/test_ops.py::test_cuda_graph_capture"
echo "== graph capture alone" | tee -a "$LOG"
timeout -k 5 ${T1:-120} $PY --tb=long $GRAPH tests/test_variants.py::test_gpu_dropout_cuda_graph_fresh_mask 2>&1 | tail -${GRAPH_TAIL:-60} >> "$LOG"
echo "== every test but the gpu-marked (-n ${N1:-8})" | tee -a "$LOG"
timeout -k 5 ${T2:-260} $PY --tb=short -v -n ${N1:-8} -m "not gpu" --deselect $GRAPH tests/ 2>&1 | grep -E "FAILED|ERROR|passed|failed|Timeout" | head -60 >> "$LOG"
echo "== gpu-marked (-n ${N2:-2})" | tee -a "$LOG"
timeout -k 5 ${T3:-150} $PY --tb=short -n ${N2:-2} -m gpu -k "not cuda_graph" tests/ 2>&1 | tail -${TAIL3:-50} >> "$LOG"
echo "== forced hopper tier: test_attention + test_hopper" | tee -a "$LOG"
FLASHATTN_TRITON_BACKEND=hopper timeout -k 5 ${T4:-60} $PY --tb=short -n 8 -m "not gpu" tests/test_attention.py tests/test_hopper.py 2>&1 | tail -20 >> "$LOG"
tail -40 "$LOG"
